"""jax.numpy.einsum_path (issue 26): the contraction order of an einsum and its printed
report, without running it.

jax returns ``opt_einsum.contract_path(subscripts, *operands, optimize=...)``; podlet
does not depend on opt_einsum, so this module reproduces the parts jax reaches, from
opt_einsum 3.4 (MIT licence; paths.py, contract.py, parser.py, blas.py): the subscript
parser (ellipses, implicit output, the interleaved ``(x, [0, 1], y, [1, 2])`` form), the
path strategies ``'optimal'``, ``'branch-all'`` / ``'branch-2'`` / ``'branch-1'``,
``'greedy'`` (also ``'eager'``, ``'opportunistic'``) and ``'auto'`` (optimal up to 4
operands, branch-all up to 6, branch-2 up to 8, branch-1 up to 14, then greedy), a
path given as a list, and ``PathInfo`` whose ``str`` is opt_einsum's report, character
for character. ``'auto-hq'`` is supported up to 5 operands (optimal); the dynamic
programming and random-greedy strategies are not ported (ValueError naming them).

podlet's own ``einsum`` contracts its operands pairwise in the order this path gives.
"""
import bisect
import functools
import heapq
import itertools
from collections import defaultdict
from decimal import Decimal

__all__ = ["einsum_path", "PathInfo", "contract_path", "parse_einsum_input"]

_SYMBOLS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_UNLIMITED_MEM = {-1, None, float("inf")}


# ---- parsing (opt_einsum.parser) ----
def _get_symbol(i):
    if i < 52:
        return _SYMBOLS[i]
    return chr(i + 2048) if i >= 55296 else chr(i + 140)


def _unused_symbols(used, n):
    i = cnt = 0
    while cnt < n:
        s = _get_symbol(i)
        i += 1
        if s in used:
            continue
        yield s
        cnt += 1


def _find_output_str(subscripts):
    tmp = subscripts.replace(",", "")
    return "".join(s for s in sorted(set(tmp)) if tmp.count(s) == 1)


def _find_output_shape(inputs, shapes, output):
    return tuple(max(shape[loc] for shape, loc in zip(shapes, [x.find(c) for x in inputs]) if loc >= 0)
                 for c in output)


def _get_shape(x):
    if hasattr(x, "shape"):
        return tuple(x.shape)
    if isinstance(x, (bool, int, float, complex, str, bytes)):
        return ()
    if isinstance(x, (list, tuple)):
        shape = []
        while isinstance(x, (list, tuple)):
            shape.append(len(x))
            x = x[0]
        return tuple(shape)
    raise ValueError(f"Cannot determine the shape of {x!r}, can only determine the shape of array-like objects.")


def _convert_interleaved(operands):
    tmp = list(operands)
    arrays, subs = [], []
    for _ in range(len(operands) // 2):
        arrays.append(tmp.pop(0))
        subs.append(tmp.pop(0))
    out = tmp[-1] if tmp else None
    try:
        symbols = set(itertools.chain.from_iterable(subs))
        symbols.discard(Ellipsis)
        symbol_map = {s: _get_symbol(i) for i, s in enumerate(sorted(symbols))}
    except TypeError:
        raise TypeError("For this input type lists must contain either Ellipsis or hashable and comparable object "
                        "(e.g. int, str).") from None

    def conv(sub):
        return "".join("..." if s is Ellipsis else symbol_map[s] for s in sub)
    subscripts = ",".join(conv(s) for s in subs)
    if out is not None:
        subscripts += "->" + conv(out)
    return subscripts, tuple(arrays)


def parse_einsum_input(operands):
    """(input subscripts, output subscript, operands) with ellipses expanded and the
    implicit output made explicit (opt_einsum.parser.parse_einsum_input)."""
    if len(operands) == 0:
        raise ValueError("No input operands")
    if isinstance(operands[0], str):
        subscripts, operands = operands[0].replace(" ", ""), operands[1:]
    else:
        subscripts, operands = _convert_interleaved(operands)
    shapes = [_get_shape(o) for o in operands]
    if "-" in subscripts or ">" in subscripts:
        if subscripts.count("-") > 1 or subscripts.count(">") > 1 or subscripts.count("->") != 1:
            raise ValueError("Subscripts can only contain one '->'.")
    if "." in subscripts:
        used = subscripts.replace(".", "").replace(",", "").replace("->", "")
        ellipse_inds = "".join(_unused_symbols(used, max([len(s) for s in shapes] or [0])))
        longest = 0
        if "->" in subscripts:
            input_tmp, output_sub = subscripts.split("->")
            split, out_sub = input_tmp.split(","), True
        else:
            split, out_sub = subscripts.split(","), False
        for num, sub in enumerate(split):
            if "." in sub:
                if sub.count(".") != 3 or sub.count("...") != 1:
                    raise ValueError("Invalid Ellipses.")
                count = 0 if shapes[num] == () else max(len(shapes[num]), 1) - (len(sub) - 3)
                longest = max(longest, count)
                if count < 0:
                    raise ValueError("Ellipses lengths do not match.")
                split[num] = sub.replace("...", "") if count == 0 else sub.replace("...", ellipse_inds[-count:])
        subscripts = ",".join(split)
        out_ellipse = "" if longest == 0 else ellipse_inds[-longest:]
        if out_sub:
            subscripts += "->" + output_sub.replace("...", out_ellipse)
        else:
            normal = "".join(sorted(set(_find_output_str(subscripts)) - set(out_ellipse)))
            subscripts += "->" + out_ellipse + normal
    if "->" in subscripts:
        input_subscripts, output_subscript = subscripts.split("->")
    else:
        input_subscripts, output_subscript = subscripts, _find_output_str(subscripts)
    for char in output_subscript:
        if output_subscript.count(char) != 1:
            raise ValueError(f"Output character '{char}' appeared more than once in the output.")
        if char not in input_subscripts:
            raise ValueError(f"Output character '{char}' did not appear in the input")
    if len(input_subscripts.split(",")) != len(operands):
        raise ValueError(f"Number of einsum subscripts, {len(input_subscripts.split(','))}, must be equal to the "
                         f"number of operands, {len(operands)}.")
    return input_subscripts, output_subscript, list(operands)


# ---- costs (opt_einsum.helpers, opt_einsum.blas) ----
def _size(indices, sizes):
    ret = 1
    for i in indices:
        ret *= sizes[i]
    return ret


def _flop_count(idx_contraction, inner, num_terms, sizes):
    factor = max(1, num_terms - 1) + (1 if inner else 0)
    return _size(idx_contraction, sizes) * factor


def _find_contraction(positions, input_sets, output_set):
    remaining = list(input_sets)
    inputs = (remaining.pop(i) for i in sorted(positions, reverse=True))
    idx_contract = frozenset.union(*inputs)
    idx_remain = output_set.union(*remaining)
    new_result = idx_remain & idx_contract
    remaining.append(new_result)
    return new_result, remaining, idx_contract - new_result, idx_contract


def _can_blas(inputs, result, idx_removed, shapes):
    if len(inputs) != 2:
        return False
    left, right = inputs
    for c in set(left + right):
        nl, nr = left.count(c), right.count(c)
        if nl > 1 or nr > 1 or nl + nr > 2:
            return False
        if nl + nr - 1 == int(c in result):
            return False
    for c in idx_removed:
        if shapes[0][left.find(c)] != shapes[1][right.find(c)]:
            return False
    if len(idx_removed) == 0:
        return "OUTER/EINSUM"
    sets = [set(x) for x in inputs]
    keep_left, keep_right = sets[0] - idx_removed, sets[1] - idx_removed
    rs = len(idx_removed)
    if inputs[0] == inputs[1]:
        return "DOT"
    if sets[0] == sets[1]:
        return "DOT/EINSUM"
    if left[-rs:] == right[:rs] or left[:rs] == right[-rs:] or left[-rs:] == right[-rs:] or left[:rs] == right[:rs]:
        return "GEMM"
    if len(keep_left) == 0 or len(keep_right) == 0:
        return "GEMV/EINSUM"
    return "TDOT"


# ---- path strategies (opt_einsum.paths) ----
def _ssa_to_linear(ssa_path):
    n = sum(map(len, ssa_path)) - len(ssa_path) + 1
    ids = list(range(n))
    path, ssa = [], n
    for scon in ssa_path:
        con = sorted([bisect.bisect_left(ids, s) for s in scon])
        for j in reversed(con):
            ids.pop(j)
        ids.append(ssa)
        path.append(con)
        ssa += 1
    return [tuple(x) for x in path]


def _calc_k12_flops(inputs, output, remaining, i, j, sizes):
    k1, k2 = inputs[i], inputs[j]
    either, shared = k1 | k2, k1 & k2
    keep = frozenset.union(output, *map(inputs.__getitem__, remaining - {i, j}))
    k12 = either & keep
    return k12, _flop_count(either, bool(shared - keep), 2, sizes)


def _oversize_flops(inputs, remaining, output, sizes):
    idx = frozenset.union(*map(inputs.__getitem__, remaining))
    return _flop_count(idx, bool(idx - output), len(remaining), sizes)


def _optimal(inputs, output, sizes, memory_limit=None):
    inputs_set, output_set = tuple(map(frozenset, inputs)), frozenset(output)
    best = {"flops": float("inf"), "ssa_path": (tuple(range(len(inputs))),)}
    size_cache, result_cache = {}, {}

    def iterate(path, remaining, inputs, flops):
        if len(remaining) == 1:
            best["flops"], best["ssa_path"] = flops, path
            return
        for i, j in itertools.combinations(remaining, 2):
            if i > j:
                i, j = j, i
            key = (inputs[i], inputs[j])
            try:
                k12, flops12 = result_cache[key]
            except KeyError:
                k12, flops12 = result_cache[key] = _calc_k12_flops(inputs, output_set, remaining, i, j, sizes)
            new_flops = flops + flops12
            if new_flops >= best["flops"]:
                continue
            if memory_limit not in _UNLIMITED_MEM:
                try:
                    size12 = size_cache[k12]
                except KeyError:
                    size12 = size_cache[k12] = _size(k12, sizes)
                if size12 > memory_limit:
                    new_flops = flops + _oversize_flops(inputs, remaining, output_set, sizes)
                    if new_flops < best["flops"]:
                        best["flops"], best["ssa_path"] = new_flops, path + (tuple(remaining),)
                    continue
            iterate(path + ((i, j),), remaining - {i, j} | {len(inputs)}, inputs + (k12,), new_flops)

    iterate((), set(range(len(inputs))), inputs_set, 0)
    return _ssa_to_linear(best["ssa_path"])


def _branch(inputs_, output_, sizes, memory_limit=None, nbranch=None, cutoff_flops_factor=4):
    """opt_einsum.paths.BranchBound (minimize='flops', cost 'memory-removed')."""
    best = {"flops": float("inf"), "size": float("inf")}
    best_progress = defaultdict(lambda: float("inf"))
    inputs, output = tuple(map(frozenset, inputs_)), frozenset(output_)
    size_cache = {k: _size(k, sizes) for k in inputs}
    result_cache = {}

    def iterate(path, inputs, remaining, flops, size):
        if len(remaining) == 1:
            best["size"], best["flops"], best["ssa_path"] = size, flops, path
            return

        def assess(k1, k2, i, j):
            try:
                k12, flops12 = result_cache[k1, k2]
            except KeyError:
                k12, flops12 = result_cache[k1, k2] = _calc_k12_flops(inputs, output, remaining, i, j, sizes)
            try:
                size12 = size_cache[k12]
            except KeyError:
                size12 = size_cache[k12] = _size(k12, sizes)
            new_flops, new_size = flops + flops12, max(size, size12)
            if not (new_flops, new_size) < (best["flops"], best["size"]):
                return None
            if new_flops < best_progress[len(inputs)]:
                best_progress[len(inputs)] = new_flops
            elif new_flops > cutoff_flops_factor * best_progress[len(inputs)]:
                return None
            if memory_limit not in _UNLIMITED_MEM and size12 > memory_limit:
                new_flops = flops + _oversize_flops(inputs, remaining, output_, sizes)
                if new_flops < best["flops"]:
                    best["flops"], best["ssa_path"] = new_flops, path + (tuple(remaining),)
                return None
            cost = size12 - size_cache[inputs[i]] - size_cache[inputs[j]]
            return cost, flops12, new_flops, new_size, (i, j), k12

        candidates = []
        for connected_only in (True, False):
            for i, j in itertools.combinations(remaining, 2):
                if i > j:
                    i, j = j, i
                k1, k2 = inputs[i], inputs[j]
                if connected_only and k1.isdisjoint(k2):
                    continue
                c = assess(k1, k2, i, j)
                if c:
                    heapq.heappush(candidates, c)
            if candidates:
                break
        bi = 0
        while (nbranch is None or bi < nbranch) and candidates:
            _, _, new_flops, new_size, (i, j), k12 = heapq.heappop(candidates)
            iterate(path + ((i, j),), inputs + (k12,), (remaining - {i, j}) | {len(inputs)}, new_flops, new_size)
            bi += 1

    iterate((), inputs, set(range(len(inputs))), 0, 0)
    return _ssa_to_linear(best["ssa_path"])


def _greedy_candidate(output, sizes, remaining, footprints, dim_ref_counts, k1, k2):
    either, two = k1 | k2, k1 & k2
    one = either - two
    k12 = (either & output) | (two & dim_ref_counts[3]) | (one & dim_ref_counts[2])
    cost = _size(k12, sizes) - footprints[k1] - footprints[k2]
    id1, id2 = remaining[k1], remaining[k2]
    if id1 > id2:
        k1, id1, k2, id2 = k2, id2, k1, id1
    return (cost, id2, id1), k1, k2, k12


def _update_ref_counts(dim_to_keys, dim_ref_counts, dims):
    for dim in dims:
        count = len(dim_to_keys[dim])
        if count <= 1:
            dim_ref_counts[2].discard(dim)
            dim_ref_counts[3].discard(dim)
        elif count == 2:
            dim_ref_counts[2].add(dim)
            dim_ref_counts[3].discard(dim)
        else:
            dim_ref_counts[2].add(dim)
            dim_ref_counts[3].add(dim)


def _ssa_greedy(inputs, output, sizes):
    if len(inputs) == 1:
        return [(0,)]
    fs_inputs = [frozenset(x) for x in inputs]
    output = frozenset(output) | frozenset.intersection(*fs_inputs)
    remaining, ssa_ids, ssa_path = {}, itertools.count(len(fs_inputs)), []
    for ssa_id, key in enumerate(fs_inputs):
        if key in remaining:
            ssa_path.append((remaining[key], ssa_id))
            remaining[key] = next(ssa_ids)
        else:
            remaining[key] = ssa_id
    dim_to_keys = defaultdict(set)
    for key in remaining:
        for dim in key - output:
            dim_to_keys[dim].add(key)
    dim_ref_counts = {c: {d for d, keys in dim_to_keys.items() if len(keys) >= c} - output for c in (2, 3)}
    footprints = {key: _size(key, sizes) for key in remaining}
    queue = []

    def push(k1, k2s):
        heapq.heappush(queue, min(_greedy_candidate(output, sizes, remaining, footprints, dim_ref_counts, k1, k2)
                                  for k2 in k2s))

    for dim, dim_keys in dim_to_keys.items():
        keys = sorted(dim_keys, key=remaining.__getitem__)
        for i, k1 in enumerate(keys[:-1]):
            push(k1, keys[1 + i:])
    while queue:
        _, k1, k2, k12 = heapq.heappop(queue)
        if k1 not in remaining or k2 not in remaining:
            continue  # obsolete candidate
        ssa_id1, ssa_id2 = remaining.pop(k1), remaining.pop(k2)
        for dim in k1 - output:
            dim_to_keys[dim].remove(k1)
        for dim in k2 - output:
            dim_to_keys[dim].remove(k2)
        ssa_path.append((ssa_id1, ssa_id2))
        if k12 in remaining:
            ssa_path.append((remaining[k12], next(ssa_ids)))
        else:
            for dim in k12 - output:
                dim_to_keys[dim].add(k12)
        remaining[k12] = next(ssa_ids)
        _update_ref_counts(dim_to_keys, dim_ref_counts, k1 | k2 - output)
        footprints[k12] = _size(k12, sizes)
        k2s = {k2 for dim in k12 for k2 in dim_to_keys[dim]}
        k2s.discard(k12)
        if k2s:
            push(k12, list(k2s))
    final = [(_size(key & output, sizes), ssa_id, key) for key, ssa_id in remaining.items()]
    heapq.heapify(final)
    _, ssa_id1, k1 = heapq.heappop(final)
    while final:
        _, ssa_id2, k2 = heapq.heappop(final)
        ssa_path.append((min(ssa_id1, ssa_id2), max(ssa_id1, ssa_id2)))
        k12 = (k1 | k2) & output
        _, ssa_id1, k1 = heapq.heappushpop(final, (_size(k12, sizes), next(ssa_ids), k12))
    return ssa_path


def _greedy(inputs, output, sizes, memory_limit=None):
    if memory_limit not in _UNLIMITED_MEM:
        return _branch(inputs, output, sizes, memory_limit, nbranch=1)
    return _ssa_to_linear(_ssa_greedy(inputs, output, sizes))


def _auto(inputs, output, sizes, memory_limit=None):
    n = len(inputs)
    fn = (_optimal if n <= 4 else functools.partial(_branch, nbranch=None) if n <= 6 else
          functools.partial(_branch, nbranch=2) if n <= 8 else functools.partial(_branch, nbranch=1) if n <= 14
          else _greedy)
    return fn(inputs, output, sizes, memory_limit)


def _auto_hq(inputs, output, sizes, memory_limit=None):
    if len(inputs) > 5:
        raise ValueError(f"optimize='auto-hq' with {len(inputs)} operands uses opt_einsum's dynamic programming or "
                         "random-greedy strategies, which podlet does not implement; use 'optimal', 'branch-all', "
                         "'greedy' or 'auto'")
    return _optimal(inputs, output, sizes, memory_limit)


_STRATEGIES = {"auto": _auto, "auto-hq": _auto_hq, "optimal": _optimal,
               "branch-all": functools.partial(_branch, nbranch=None), "branch-2": functools.partial(_branch, nbranch=2),
               "branch-1": functools.partial(_branch, nbranch=1), "greedy": _greedy, "eager": _greedy,
               "opportunistic": _greedy}


class _Unoptimized:
    """jax's optimize=False: contract the first two operands, again and again."""


# ---- the report (opt_einsum.contract.PathInfo) ----
class PathInfo:
    """A printable description of a contraction path (opt_einsum.contract.PathInfo):
    ``str(info)`` is opt_einsum's report; ``contraction_list``, ``path``, ``naive_cost``,
    ``opt_cost``, ``speedup``, ``size_list``, ``size_dict``, ``shapes``, ``eq`` and
    ``largest_intermediate`` as there."""

    def __init__(self, contraction_list, input_subscripts, output_subscript, indices, path, scale_list, naive_cost,
                 opt_cost, size_list, size_dict):
        self.contraction_list = contraction_list
        self.input_subscripts, self.output_subscript = input_subscripts, output_subscript
        self.path, self.indices, self.scale_list = path, indices, scale_list
        self.naive_cost, self.opt_cost = Decimal(naive_cost), Decimal(opt_cost)
        self.speedup = self.naive_cost / max(self.opt_cost, Decimal(1))
        self.size_list, self.size_dict = size_list, size_dict
        self.shapes = [tuple(size_dict[k] for k in ks) for ks in input_subscripts.split(",")]
        self.eq = f"{input_subscripts}->{output_subscript}"
        self.largest_intermediate = Decimal(max(size_list, default=1))

    def __repr__(self):
        header = ("scaling", "BLAS", "current", "remaining")
        out = [f"  Complete contraction:  {self.eq}\n",
               f"         Naive scaling:  {len(self.indices)}\n",
               f"     Optimized scaling:  {max(self.scale_list, default=0)}\n",
               f"      Naive FLOP count:  {self.naive_cost:.3e}\n",
               f"  Optimized FLOP count:  {self.opt_cost:.3e}\n",
               f"   Theoretical speedup:  {self.speedup:.3e}\n",
               f"  Largest intermediate:  {self.largest_intermediate:.3e} elements\n",
               "-" * 80 + "\n",
               "{:>6} {:>11} {:>22} {:>37}\n".format(*header),
               "-" * 80]
        for n, (_, _, einsum_str, remaining, do_blas) in enumerate(self.contraction_list):
            remaining_str = ",".join(remaining) + "->" + self.output_subscript if remaining is not None else "..."
            width = max(0, 56 - max(22, len(einsum_str)))
            out.append("\n{:>4} {:>14} {:>22}    {:>{}}".format(self.scale_list[n], do_blas, einsum_str,
                                                                 remaining_str, width))
        return "".join(out)

    __str__ = __repr__


def contract_path(subscripts, *operands, optimize=True, memory_limit=None):
    """opt_einsum.contract_path (use_blas=True): ``(path, PathInfo)``."""
    if optimize is True or optimize is None:
        optimize = "auto"
    input_subscripts, output_subscript, ops = parse_einsum_input([subscripts, *operands])
    input_list = input_subscripts.split(",")
    input_sets = [frozenset(x) for x in input_list]
    input_shapes = [_get_shape(x) for x in ops]
    output_set = frozenset(output_subscript)
    indices = frozenset(input_subscripts.replace(",", ""))
    size_dict = {}
    for tnum, term in enumerate(input_list):
        sh = input_shapes[tnum]
        if len(sh) != len(term):
            raise ValueError(f"Einstein sum subscript '{input_list[tnum]}' does not contain the correct number of "
                             f"indices for operand {tnum}.")
        for cnum, char in enumerate(term):
            dim = int(sh[cnum])
            if char in size_dict:
                if size_dict[char] == 1:
                    size_dict[char] = dim
                elif dim not in (1, size_dict[char]):
                    raise ValueError(f"Size of label '{char}' for operand {tnum} ({size_dict[char]}) does not match "
                                     f"previous terms ({dim}).")
            else:
                size_dict[char] = dim
    size_list = [_size(term, size_dict) for term in input_list + [output_subscript]]
    if memory_limit == "max_input":
        memory_arg = max(size_list)
    elif memory_limit is None or memory_limit == -1:
        memory_arg = None
    elif isinstance(memory_limit, str) or memory_limit < 1:
        raise ValueError(f"memory_limit must be None, -1, a positive int or 'max_input', got {memory_limit!r}")
    else:
        memory_arg = int(memory_limit)
    num_ops = len(input_list)
    inner_product = (sum(len(x) for x in input_sets) - len(indices)) > 0
    naive_cost = _flop_count(indices, inner_product, num_ops, size_dict)
    if optimize is False:
        path = [tuple(range(num_ops))]
    elif not isinstance(optimize, (str, _Unoptimized)):
        path = [tuple(int(i) for i in p) for p in optimize]  # a path given as a list
    elif num_ops <= 2:
        path = [tuple(range(num_ops))]
    elif isinstance(optimize, _Unoptimized):
        path = [(0, 1)] * (num_ops - 1)
    else:
        key = optimize.lower()
        if key not in _STRATEGIES:
            raise ValueError(f"einsum_path: optimize={optimize!r} is not a strategy podlet implements; expected one of "
                             f"{sorted(_STRATEGIES)}, True, False or a path (a list of tuples of operand positions)")
        path = _STRATEGIES[key](input_sets, output_set, size_dict, memory_arg)
    cost_list, scale_list, sizes_out, contraction_list = [], [], [], []
    for cnum, contract_inds in enumerate(path):
        contract_inds = tuple(sorted(contract_inds, reverse=True))
        if any(not 0 <= i < len(input_list) for i in contract_inds) or len(set(contract_inds)) != len(contract_inds):
            raise ValueError(f"einsum_path: contraction {cnum} of the path, {contract_inds}, does not name distinct "
                             f"operands among the {len(input_list)} remaining")
        out_inds, input_sets, idx_removed, idx_contract = _find_contraction(contract_inds, input_sets, output_set)
        cost_list.append(_flop_count(idx_contract, bool(idx_removed), len(contract_inds), size_dict))
        scale_list.append(len(idx_contract))
        sizes_out.append(_size(out_inds, size_dict))
        tmp_inputs = [input_list.pop(x) for x in contract_inds]
        tmp_shapes = [input_shapes.pop(x) for x in contract_inds]
        do_blas = _can_blas(tmp_inputs, "".join(out_inds), idx_removed, tmp_shapes)
        if cnum == len(path) - 1:
            idx_result = output_subscript
        else:
            all_input_inds = "".join(tmp_inputs)
            idx_result = "".join(sorted(out_inds, key=all_input_inds.find))
        input_list.append(idx_result)
        input_shapes.append(_find_output_shape(tmp_inputs, tmp_shapes, idx_result))
        einsum_str = ",".join(tmp_inputs) + "->" + idx_result
        remaining = tuple(input_list) if len(input_list) <= 20 else None
        contraction_list.append((contract_inds, idx_removed, einsum_str, remaining, do_blas))
    info = PathInfo(contraction_list, input_subscripts, output_subscript, indices, path, scale_list, naive_cost,
                    sum(cost_list), sizes_out, size_dict)
    return path, info


def einsum_path(subscripts, /, *operands, optimize="auto"):
    """jax.numpy.einsum_path: ``(path, path_info)`` -- the contraction order (a list of
    tuples of operand positions, to pass to ``einsum(..., optimize=path)``) and a
    PathInfo whose ``str`` is the report jax prints (opt_einsum's). ``optimize``: True
    ('optimal', as jax), False (unoptimized: always the first two operands), a strategy
    name or a path. Only the operands' shapes are read."""
    if isinstance(optimize, bool):
        optimize = "optimal" if optimize else _Unoptimized()
    return contract_path(subscripts, *operands, optimize=optimize)
