"""jax.lax control flow: cond, switch, select_n, scan, fori_loop, while_loop, map,
associative_scan.

Each body is traced once into a Graph and becomes an attribute of one node (the C++
primitives in cpp/podlet/prims/control.cc), so bodies never retrace per iteration,
are fused and memory-planned like any graph, and autodiff, vmap, jit and pmap see one
node: scan saves per-iteration residuals for reverse mode; fori_loop with a static trip
count is a scan (so it has a reverse mode, as in JAX), otherwise a while_loop (which,
as in JAX, has none). Values a body closes over become extra operands of the node.
"""
import numpy as np

from .. import _core
from .. import tree_util
from . import dtypes
from .core import Array, Tracer, _Traced, _abstractify_all, bind, to_array
from .errors import ConcretizationError


# ---------------------------------------------------------------------------------
# tracing bodies
# ---------------------------------------------------------------------------------
def _trace(fun, args_tree_sig, in_tree):
    """(entry) for fun traced on abstract leaves; fun receives the unflattened args."""
    return _Traced(lambda a, k: fun(*a), args_tree_sig, in_tree)


def _aval_of(graph, vid):
    d, s = graph.aval(vid)
    return d, tuple(s)


def _wrap(entry, n_args, all_caps):
    """entry.graph with inputs [args..., all_caps...] (entry's own captures found among
    all_caps by identity), so that every branch/body of one node takes the same inputs."""
    g = _core.Graph()
    src = entry.graph
    ins = []
    for vid in src.inputs[:n_args]:
        d, s = _aval_of(src, vid)
        ins.append(g.add_input(d, list(s)))
    cap_ids = []
    for c in all_caps:
        cap_ids.append(g.add_input(c._dtype_name, list(c.shape)))
    pos = {id(c): i for i, c in enumerate(all_caps)}
    args = ins + [cap_ids[pos[id(c)]] for c in entry.captures]
    outs = g.inline(src, args)
    g.outputs = [v for v, _, _ in outs]
    return g


def _union_captures(entries):
    seen, caps = set(), []
    for e in entries:
        for c in e.captures:
            if id(c) not in seen:
                seen.add(id(c))
                caps.append(c)
    return caps


def _flatten_values(tree, what):
    leaves, treedef = tree_util.tree_flatten(tree)
    try:
        conv, sig = _abstractify_all(leaves)
    except TypeError as e:
        raise TypeError(f"{what}: {e}") from None
    return conv, sig, treedef


def _out_structs(entry):
    return tree_util.tree_unflatten(entry.out_tree, list(range(len(entry.out_vids))))


def _avals_str(graph, vids):
    return "[" + ", ".join(f"{d}{list(s)}" for d, s in (_aval_of(graph, v) for v in vids)) + "]"


def _index_scalar(x, what):
    if isinstance(x, (bool, np.bool_)):
        x = int(x)
    if isinstance(x, (int, np.integer)):
        return to_array(np.asarray(x, np.int32))
    shape = tuple(getattr(x, "shape", ()))
    if shape != ():
        raise TypeError(f"{what} must be a scalar, got an array of shape {shape}")
    d = x.dtype
    if d == np.bool_:
        return bind("convert_element_type", x, new_dtype="int32")
    if not np.issubdtype(d, np.integer):
        raise TypeError(f"{what} must be a boolean or integer scalar, got dtype {np.dtype(d).name}")
    return x if np.dtype(d) == np.int32 else bind("convert_element_type", x, new_dtype="int32")


# ---------------------------------------------------------------------------------
# cond / switch / select_n
# ---------------------------------------------------------------------------------
def switch(index, branches, *operands, operand=None, _trace_order=None):
    """lax.switch: branches[clamp(index, 0, len(branches) - 1)](*operands)."""
    branches = list(branches)
    if not branches:
        raise ValueError("switch: empty branches sequence")
    for b in branches:
        if not callable(b):
            raise TypeError(f"switch: branches must be callable, got {b!r}")
    if operand is not None:
        operands = operands + (operand,)
    idx = _index_scalar(index, "switch index")
    conv, sig, treedef = _flatten_values(tuple(operands), "switch operands")
    in_tree = tree_util.tree_structure((tuple(operands), {}))
    # Branches are traced in JAX's order (cond: true_fun first), which matters to
    # branches with Python side effects, e.g. Flax's rng counters in nn.cond.
    order = list(range(len(branches))) if _trace_order is None else list(_trace_order)
    traced = {i: _trace(branches[i], sig, in_tree) for i in order}
    entries = [traced[i] for i in range(len(branches))]
    t0 = entries[0].out_tree
    for i, e in enumerate(entries[1:], 1):
        if e.out_tree != t0:
            raise TypeError(f"branch 0 and {i} outputs must have same type structure, got {t0} and {e.out_tree}")
        a0 = [_aval_of(entries[0].graph, v) for v in entries[0].out_vids]
        ai = [_aval_of(e.graph, v) for v in e.out_vids]
        if a0 != ai:
            raise TypeError(f"branches 0 and {i} of cond must return identical types: "
                            f"{_avals_str(entries[0].graph, entries[0].out_vids)} and {_avals_str(e.graph, e.out_vids)}")
    caps = _union_captures(entries)
    graphs = [_wrap(e, len(conv), caps) for e in entries]
    outs = bind("cond", idx, *conv, *caps, branches=graphs)
    outs = list(outs) if isinstance(outs, tuple) else [outs]
    weak = [all(e.out_weak[k] for e in entries) for k in range(len(outs))]
    for o, w in zip(outs, weak):
        if w:
            o.weak_type = True
    return tree_util.tree_unflatten(t0, outs)


def cond(pred, true_fun, false_fun=None, *operands, operand=None):
    """lax.cond: true_fun(*operands) if pred else false_fun(*operands), as one node."""
    if false_fun is None:
        raise TypeError("cond: missing false_fun")
    if not callable(true_fun) or not callable(false_fun):
        raise TypeError("cond: true_fun and false_fun arguments should be callable.")
    if isinstance(pred, (Array, Tracer)) or hasattr(pred, "dtype"):
        shape = tuple(getattr(pred, "shape", ()))
        if shape != ():
            raise TypeError(f"Pred must be a scalar, got {pred!r} of shape {shape}.")
        if not isinstance(pred, (Array, Tracer)):
            pred = to_array(np.asarray(pred))
        if pred.dtype != np.bool_:
            pred = bind("ne", pred, bind("convert_element_type", to_array(np.zeros((), np.int32)),
                                         new_dtype=np.dtype(pred.dtype).name))
    return switch(pred, [false_fun, true_fun], *operands, operand=operand, _trace_order=(1, 0))


def select_n(which, *cases):
    """lax.select_n: cases[which] elementwise (which bool for two cases, else int32)."""
    if not cases:
        raise ValueError("select_n called with no cases")
    if len(cases) == 1:
        return cases[0]
    which_dt = np.dtype(which.dtype) if hasattr(which, "dtype") else np.dtype(type(which))
    if which_dt == np.bool_:
        if len(cases) != 2:
            raise TypeError(f"select_n with a boolean predicate needs exactly 2 cases, got {len(cases)}")
        return bind("select", which, cases[1], cases[0])
    out = cases[0]
    for k in range(1, len(cases)):
        kk = to_array(np.asarray(k, which_dt))
        out = bind("select", bind("eq", which, kk), cases[k], out)
    return out


# ---------------------------------------------------------------------------------
# scan / map / fori_loop / while_loop
# ---------------------------------------------------------------------------------
def _check_carry(what, init_tree, init_sig, entry, n_carry, carry_struct_tree):
    if carry_struct_tree != init_tree:
        raise TypeError(f"{what} function carry input and carry output must have the same pytree structure, "
                        f"but they differ: input {init_tree}, output {carry_struct_tree}")
    outs = [_aval_of(entry.graph, v) for v in entry.out_vids[:n_carry]]
    for k, ((d, s, w), (od, os_)) in enumerate(zip(init_sig, outs)):
        if d != od or tuple(s) != tuple(os_):
            raise TypeError(f"{what} function carry input and carry output must have equal types, but carry leaf {k} "
                            f"enters as {d}{list(s)} and leaves as {od}{list(os_)}")


def scan(f, init, xs=None, length=None, reverse=False, unroll=1, _split_transpose=False):
    """lax.scan: (carry, ys) of a loop carry, y = f(carry, x) over the leading axis of xs.

    unroll is accepted for compatibility; the body always runs as one compiled graph per
    iteration."""
    if not callable(f):
        raise TypeError(f"scan: f must be callable, got {f!r}")
    x_conv, x_sig, x_tree = _flatten_values(xs, "scan xs")
    lengths = set()
    for x, (d, s, w) in zip(x_conv, x_sig):
        if len(s) == 0:
            raise ValueError("scan got value with no leading axis to scan over: xs leaves must have a leading axis")
        lengths.add(s[0])
    if length is not None:
        length = int(length)
        if lengths and lengths != {length}:
            raise ValueError(f"scan got `length` argument of {length} which disagrees with leading axis sizes "
                             f"{sorted(lengths)}.")
    else:
        if not lengths:
            raise ValueError("scan got no values to scan over and `length` not provided.")
        if len(lengths) > 1:
            raise ValueError(f"scan got values with different leading axis sizes: {sorted(lengths)}.")
        length = lengths.pop()
    c_conv, c_sig, c_tree = _flatten_values(init, "scan init")
    slice_sig = [(d, tuple(s[1:]), w) for d, s, w in x_sig]
    in_tree = tree_util.tree_structure(((tree_util.tree_unflatten(c_tree, [0] * len(c_conv)),
                                         tree_util.tree_unflatten(x_tree, [0] * len(x_conv))), {}))
    entry = _trace(f, c_sig + slice_sig, in_tree)
    out = _out_structs(entry)
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        raise TypeError("scan body output must be a pair (carry, y)")
    carry_tree = tree_util.tree_structure(out[0])
    n_carry = carry_tree.num_leaves
    _check_carry("scan body", c_tree, c_sig, entry, n_carry, carry_tree)
    y_tree = tree_util.tree_structure(out[1])
    caps = list(entry.captures)
    # node order: consts (captures), carries, xs
    n_in = len(c_conv) + len(x_conv)
    body = _reorder(entry, n_in, caps)
    outs = bind("scan", *caps, *c_conv, *x_conv, body=body, num_consts=len(caps), num_carry=n_carry,
                length=int(length), reverse=bool(reverse))
    outs = list(outs) if isinstance(outs, tuple) else [outs]
    for o, w in zip(outs, entry.out_weak):
        if w:
            o.weak_type = True
    return tree_util.tree_unflatten(carry_tree, outs[:n_carry]), tree_util.tree_unflatten(y_tree, outs[n_carry:])


def _reorder(entry, n_in, caps):
    """entry.graph with its captures moved in front of its inputs."""
    g = _core.Graph()
    src = entry.graph
    cap_ids = [g.add_input(c._dtype_name, list(c.shape)) for c in caps]
    ins = []
    for vid in src.inputs[:n_in]:
        d, s = _aval_of(src, vid)
        ins.append(g.add_input(d, list(s)))
    outs = g.inline(src, ins + cap_ids)
    g.outputs = [v for v, _, _ in outs]
    return g


def map(f, xs, *, batch_size=None):
    """lax.map: f over the leading axis of xs, as a scan (batch_size: vmap'd chunks)."""
    if batch_size is not None:
        from .batching import vmap
        leaves = tree_util.tree_leaves(xs)
        n = leaves[0].shape[0]
        bs = int(batch_size)
        nb, rem = divmod(n, bs)
        from .. import lax as _lax
        main = tree_util.tree_map(lambda x: _lax.reshape(_lax.slice_in_dim(x, 0, nb * bs, axis=0),
                                                         (nb, bs) + tuple(x.shape[1:])), xs)
        ys = scan(lambda c, x: (c, vmap(f)(x)), (), main)[1]
        ys = tree_util.tree_map(lambda y: _lax.reshape(y, (nb * bs,) + tuple(y.shape[2:])), ys)
        if rem:
            tail = tree_util.tree_map(lambda x: _lax.slice_in_dim(x, nb * bs, n, axis=0), xs)
            yt = vmap(f)(tail)
            ys = tree_util.tree_map(lambda a, b: _lax.concatenate([a, b], 0), ys, yt)
        return ys
    return scan(lambda c, x: (c, f(x)), (), xs)[1]


def while_loop(cond_fun, body_fun, init_val):
    """lax.while_loop: while cond_fun(val): val = body_fun(val), as one node (no reverse mode)."""
    c_conv, c_sig, c_tree = _flatten_values(init_val, "while_loop init_val")
    in_tree = tree_util.tree_structure(((tree_util.tree_unflatten(c_tree, [0] * len(c_conv)),), {}))
    ce = _trace(cond_fun, c_sig, in_tree)
    if len(ce.out_vids) != 1:
        raise TypeError(f"cond_fun must return a boolean scalar, but got output type(s) "
                        f"{_avals_str(ce.graph, ce.out_vids)}.")
    d, s = _aval_of(ce.graph, ce.out_vids[0])
    if d != "bool" or s != ():
        raise TypeError(f"cond_fun must return a boolean scalar, but got output type(s) [{d}{list(s)}].")
    be = _trace(body_fun, c_sig, in_tree)
    bt = be.out_tree
    _check_carry("body_fun output and input", c_tree, c_sig, be, len(c_conv), bt)
    cg = _reorder(ce, len(c_conv), list(ce.captures))
    bg = _reorder(be, len(c_conv), list(be.captures))
    outs = bind("while_loop", *ce.captures, *be.captures, *c_conv, cond=cg, body=bg,
                num_cond_consts=len(ce.captures), num_body_consts=len(be.captures))
    outs = list(outs) if isinstance(outs, tuple) else [outs]
    for o, (_, _, w) in zip(outs, c_sig):
        if w:
            o.weak_type = True
    return tree_util.tree_unflatten(c_tree, outs)


def _static_int(v):
    if isinstance(v, Tracer):
        return None
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return int(v)
    if isinstance(v, (Array, np.ndarray)) and np.asarray(v).shape == () and np.asarray(v).dtype.kind in "iu":
        return int(np.asarray(v))
    return None


def fori_loop(lower, upper, body_fun, init_val, *, unroll=None):
    """lax.fori_loop: val = body_fun(i, val) for i in [lower, upper). A scan when both
    bounds are static (reverse-differentiable, as in JAX), else a while_loop."""
    lo, hi = _static_int(lower), _static_int(upper)
    idt = np.int32
    for v in (lower, upper):
        if hasattr(v, "dtype") and np.dtype(v.dtype).kind in "iu":
            idt = np.dtype(v.dtype)
            break
    if lo is not None and hi is not None:
        n = max(hi - lo, 0)

        def step(carry, _):
            i, val = carry
            return (bind("add", i, to_array(np.asarray(1, idt))), body_fun(i, val)), None

        (_, val), _ = scan(step, (to_array(np.asarray(lo, idt)), init_val), None, length=n)
        return val

    def c(carry):
        i, u, _ = carry
        return bind("lt", i, u)

    def b(carry):
        i, u, val = carry
        return bind("add", i, to_array(np.asarray(1, idt))), u, body_fun(i, val)

    lo_v = lower if isinstance(lower, Tracer) else to_array(np.asarray(lower, idt))
    hi_v = upper if isinstance(upper, Tracer) else to_array(np.asarray(upper, idt))
    if lo_v.dtype != hi_v.dtype:
        hi_v = bind("convert_element_type", hi_v, new_dtype=np.dtype(lo_v.dtype).name)
    return while_loop(c, b, (lo_v, hi_v, init_val))[2]


# ---------------------------------------------------------------------------------
# associative_scan (Blelloch's parallel prefix, as jax.lax.associative_scan)
# ---------------------------------------------------------------------------------
def associative_scan(fn, elems, reverse=False, axis=0):
    """lax.associative_scan: inclusive prefix of an associative fn over `axis`."""
    from .. import lax as _lax
    elems_flat, tree = tree_util.tree_flatten(elems)
    if not elems_flat:
        raise ValueError("associative_scan: elems is empty")
    elems_flat = [e if isinstance(e, (Array, Tracer)) else to_array(e) for e in elems_flat]
    nd = len(elems_flat[0].shape)
    axis = axis % nd
    if reverse:
        elems_flat = [_lax.rev(e, [axis]) for e in elems_flat]
    n = elems_flat[0].shape[axis]
    if any(e.shape[axis] != n for e in elems_flat):
        raise ValueError(f"Array inputs to associative_scan must have the same first dimension. "
                         f"(saw: {[e.shape for e in elems_flat]})")

    def combine(a, b):
        c = fn(tree_util.tree_unflatten(tree, a), tree_util.tree_unflatten(tree, b))
        return tree_util.tree_leaves(c)

    def sl(e, start, stop, stride=1):
        m = e.shape[axis]
        stop = m if stop is None else (stop + m if stop < 0 else stop)
        return _lax.slice_in_dim(e, start, max(start, stop), stride, axis)

    def interleave(a, b):
        same = a.shape[axis] == b.shape[axis]
        a_cfg = [(0, 0, 0)] * len(a.shape)
        b_cfg = [(0, 0, 0)] * len(b.shape)
        a_cfg[axis] = (0, 1 if same else 0, 1)
        b_cfg[axis] = (1, 0 if same else 1, 1)
        pa = _lax.pad(a, np.zeros((), a.dtype), a_cfg)
        pb = _lax.pad(b, np.zeros((), b.dtype), b_cfg)
        return bind("or", pa, pb) if a.dtype == np.bool_ else bind("add", pa, pb)

    def _scan(es):
        m = es[0].shape[axis]
        if m < 2:
            return es
        reduced = combine([sl(e, 0, -1, 2) for e in es], [sl(e, 1, None, 2) for e in es])
        odd = _scan(reduced)
        if m % 2 == 0:
            even = combine([sl(e, 0, -1) for e in odd], [sl(e, 2, None, 2) for e in es])
        else:
            even = combine(odd, [sl(e, 2, None, 2) for e in es])
        even = [_lax.concatenate([sl(e, 0, 1), r], axis) for e, r in zip(es, even)]
        return [interleave(a, b) for a, b in zip(even, odd)]

    out = _scan(elems_flat)
    if reverse:
        out = [_lax.rev(e, [axis]) for e in out]
    return tree_util.tree_unflatten(tree, out)
