"""custom_vjp and custom_jvp: graph nodes carrying the user's traced rules.

Called on concrete values (no transformation in sight) a custom function is just the
function, as in JAX. Called on tracers (under grad / jit / vmap / pmap / jvp), it
traces the function and the user's rules into sub-graphs and appends one node
(cpp/podlet/prims/custom.cc):

* ``custom_vjp_call`` holds ``f``, ``fwd`` (outputs + residuals) and ``bwd``
  (residuals + output cotangents -> one cotangent per input leaf). Its VJP inlines fwd
  then bwd, so grad-of-grad differentiates through them, as in JAX. Forward mode
  refuses it with JAX's TypeError.
* ``custom_jvp_call`` holds ``f`` and ``jvp`` (primals + tangents -> outputs +
  output tangents, linear in the tangents). Its VJP is the transpose of the user's jvp
  w.r.t. the tangents; forward mode (the transpose of the VJP) gives the rule back.

Both have batching rules (the sub-graphs are batched with every value mapped), so vmap
and pmap of custom functions and of their gradients work. Values the user's functions
close over become extra node inputs that carry no gradient. ``nondiff_argnums`` are
passed to the rules as in JAX (bwd(*nondiff, res, g); jvp(*nondiff, primals,
tangents)); they may be arbitrary Python objects.
"""
import functools
import inspect

import numpy as np

from .. import tree_util
from . import dtypes
from .core import (Array, Tracer, _Traced, _abstractify_all, _top_trace, bind, bind_like, _reraise_with_location)
from .errors import PodletError

float0 = np.dtype([("float0", np.void, 0)])


class _Tracing:
    """Marks a custom function whose rules are being traced: a rule calling the function
    itself (``ans = f(x)`` inside f's jvp, JAX's documented idiom) gets a new node whose
    rule is traced one level deeper, down to the function's ``_rule_depth`` (1 by
    default: the plain function at once, since each level traces the rule again); past
    it, the plain function (its primitives, with whatever derivatives they have).

    A rule's graph holds the function's own node at the next level, so differentiating
    the rule's transpose again (grad of grad, jacfwd of jacrev) goes through that node's
    rule instead of the raw primitives: ``_rule_depth`` levels give derivatives of that
    order through functions whose primitives have none (the linear-algebra
    factorisations of lax_linalg.py set it to 3)."""

    def __init__(self, obj):
        self.obj = obj

    def __enter__(self):
        self.obj._busy += 1

    def __exit__(self, *exc):
        self.obj._busy -= 1


def _resolve_args(fun, args, kwargs):
    if not kwargs:
        return tuple(args)
    try:
        sig = inspect.signature(fun)
    except (TypeError, ValueError):
        raise TypeError("custom_vjp/custom_jvp: keyword arguments need a function with an inspectable signature")
    ba = sig.bind(*args, **kwargs)
    ba.apply_defaults()
    return tuple(ba.args) + tuple(ba.kwargs.values())


def _has_tracer(x):
    return any(isinstance(l, Tracer) for l in tree_util.tree_leaves(x))


def _split(args, nondiff_argnums):
    nd = set(i % len(args) for i in nondiff_argnums) if args else set()
    diff_idx = [i for i in range(len(args)) if i not in nd]
    return sorted(nd), diff_idx


def _rebuild(args, diff_idx, diff_vals):
    a = list(args)
    for i, v in zip(diff_idx, diff_vals):
        a[i] = v
    return a


def _trace(fun, sig, tree):
    """Traces fun(*args) with args unflattened from `tree` (a tuple of arguments)."""
    full = tree_util.tree_structure((tree_util.tree_unflatten(tree, [0] * tree.num_leaves), {}))
    entry = _Traced(lambda a, k: fun(*a), sig, full)
    entry.graph.dce()
    return entry


def _sig_of(graph, vids, weak=None):
    out = []
    for i, v in enumerate(vids):
        d, s = graph.aval(v)
        out.append((d, tuple(s), bool(weak[i]) if weak else False))
    return out


def _zeros(ref, dtype_name, shape):
    z = Array.from_numpy(np.zeros((), dtypes.SUPPORTED[dtype_name]), copy=True)
    if ref is None:
        return Array.from_numpy(np.zeros(tuple(shape), dtypes.SUPPORTED[dtype_name]), copy=True)
    return bind_like(ref, "broadcast_in_dim", z, shape=list(shape), broadcast_dimensions=[])


def _cast(x, dtype_name):
    if x._dtype_name == dtype_name:
        return x
    return bind("convert_element_type", x, new_dtype=dtype_name)


def _aval_str(d, s):
    return f"{d}[{','.join(str(x) for x in s)}]"


def _check_rule_primals(entry, n_out, out_avals, rule):
    """The primal outputs a traced rule (custom_vjp's fwd, custom_jvp's jvp) produces must
    have the function's types: JAX's TypeError otherwise."""
    for k, v in enumerate(entry.out_vids[:n_out]):
        a, b = entry.graph.aval(v), out_avals[k]
        if tuple(a[1]) != tuple(b[1]) or a[0] != b[0]:
            raise TypeError(f"{rule} produced a primal output of type {_aval_str(*a)} at output[{k}], while the "
                            f"function produces {_aval_str(*b)}")


def _leaf_as_value(x):
    if isinstance(x, (Tracer, Array)):
        return x
    if isinstance(x, (np.ndarray, np.generic, int, float, bool)):
        return x
    raise TypeError(f"custom rule returned a leaf of type {type(x).__name__}; expected arrays")


# ---------------------------------------------------------------------------------
# custom_vjp
# ---------------------------------------------------------------------------------
class _CustomRule:
    """What custom_vjp and custom_jvp share: the wrapped function, nondiff_argnums, method
    binding, and a call that runs `fun` plainly outside tracing (or inside the rule's own
    trace) and otherwise traces the rule into one node (`_call_traced`)."""
    _kind = ""

    def __init__(self, fun, nondiff_argnums=()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self._busy = 0
        self._rule_depth = 1         # levels of rule tracing (see _Tracing)
        self._defer_rule_errors = False  # see custom_jvp._call_traced

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return functools.partial(self, obj)

    def _check_args(self, args):
        pass

    def __call__(self, *args, **kwargs):
        name = getattr(self.fun, "__name__", self._kind)
        if not self._defined():
            raise AttributeError(self._undefined_message(name))
        args = _resolve_args(self.fun, args, kwargs)
        self._check_args(args)
        if self._busy >= self._rule_depth or not _has_tracer(args):
            return self.fun(*args)
        nd_idx, diff_idx = _split(args, self.nondiff_argnums)
        nondiff = [args[i] for i in nd_idx]
        diff_args = tuple(args[i] for i in diff_idx)
        leaves, dtree = tree_util.tree_flatten(diff_args)
        conv, sig = _abstractify_all(leaves)
        with _Tracing(self):
            return self._call_traced(name, args, conv, sig, dtree, diff_idx, diff_args, nondiff)


class custom_vjp(_CustomRule):
    """jax.custom_vjp: a function with a user-defined reverse-mode rule.

        @custom_vjp
        def f(x, y): ...
        def f_fwd(x, y): return f(x, y), residuals
        def f_bwd(res, g): return (ct_x, ct_y)     # None for a zero cotangent
        f.defvjp(f_fwd, f_bwd)
    """

    _kind = "custom_vjp"

    def __init__(self, fun, nondiff_argnums=()):
        super().__init__(fun, nondiff_argnums)
        self.fwd = None
        self.bwd = None

    def _defined(self):
        return self.fwd is not None

    def _undefined_message(self, name):
        return f"No VJP defined for custom_vjp function {name} using defvjp."

    def _check_args(self, args):
        for i in self.nondiff_argnums:
            if not -len(args) <= i < len(args):
                raise ValueError(f"custom_vjp: nondiff_argnums {self.nondiff_argnums} out of range for "
                                 f"{len(args)} arguments")

    def defvjp(self, fwd, bwd, symbolic_zeros=False):
        self.fwd = fwd
        self.bwd = bwd
        return None

    def _call_traced(self, name, args, conv, sig, dtree, diff_idx, diff_args, nondiff):
        fun, fwd, bwd = self.fun, self.fwd, self.bwd
        f_e = _trace(lambda *d: fun(*_rebuild(args, diff_idx, d)), sig, dtree)
        n_out = len(f_e.out_vids)
        out_avals = [f_e.graph.aval(v) for v in f_e.out_vids]

        fwd_info = {}

        def fwd_flat(*d):
            r = fwd(*_rebuild(args, diff_idx, d))
            if not (isinstance(r, (tuple, list)) and len(r) == 2):
                raise TypeError("Custom VJP fwd rule must produce a pair (list or tuple of length two) where the "
                                "first element represents the primal output (equal to the output of the "
                                f"custom_vjp-decorated function {name}) and the second element represents "
                                f"residuals (i.e. values stored from the forward pass for use on the backward "
                                f"pass), but instead the fwd rule output's type was {type(r).__name__}.")
            out, res = r
            o_tree = tree_util.tree_structure(out)
            if o_tree != f_e.out_tree:
                raise TypeError(f"Custom VJP fwd rule {getattr(fwd, '__name__', 'fwd')} for function {name} must "
                                "produce a pair (list or tuple of length two) where the first element represents "
                                "the primal output (equal to the output of the custom_vjp-decorated function "
                                f"{name}) and the second element represents residuals, but the primal output "
                                f"structure {o_tree} differs from the function's {f_e.out_tree}.")
            r_leaves, r_tree = tree_util.tree_flatten(res)
            fwd_info["res_tree"] = r_tree
            fwd_info["n_res"] = len(r_leaves)
            return tuple(tree_util.tree_leaves(out)) + tuple(_leaf_as_value(x) for x in r_leaves)

        fwd_e = _trace(fwd_flat, sig, dtree)
        _check_rule_primals(fwd_e, n_out, out_avals, f"Custom VJP fwd rule for {name}")
        n_res, res_tree = fwd_info["n_res"], fwd_info["res_tree"]
        res_sig = _sig_of(fwd_e.graph, fwd_e.out_vids[n_out:])
        ct_sig = _sig_of(f_e.graph, f_e.out_vids)
        arg_trees = [tree_util.tree_structure(a) for a in diff_args]
        arg_avals = [(s[0], tuple(s[1])) for s in sig]

        def bwd_flat(*flat):
            res = tree_util.tree_unflatten(res_tree, list(flat[:n_res]))
            cts = tree_util.tree_unflatten(f_e.out_tree, list(flat[n_res:n_res + n_out]))
            ref = flat[0] if flat else None
            r = bwd(*nondiff, res, cts)
            if not isinstance(r, (tuple, list)) or len(r) != len(diff_args):
                rs = tree_util.tree_structure(r) if not isinstance(r, (tuple, list)) else \
                    tree_util.tree_structure(tuple(r))
                raise TypeError("Custom VJP bwd rule must produce an output with the same container (pytree) "
                                "structure as the args tuple of the primal function, and in particular must "
                                "produce a tuple of length equal to the number of arguments to the primal "
                                f"function, but got bwd output structure {rs} for primal input structure "
                                f"{tree_util.tree_structure(tuple(diff_args))}.")
            out, k = [], 0
            for i, (ct, at) in enumerate(zip(r, arg_trees)):
                n = at.num_leaves
                if ct is None:
                    subs = [None] * n
                else:
                    try:
                        subs = at.flatten_up_to(ct)
                    except (ValueError, TypeError):
                        raise TypeError("Custom VJP bwd rule must produce an output with the same container "
                                        "(pytree) structure as the args tuple of the primal function, but at "
                                        f"output[{i}] the bwd rule produced structure "
                                        f"{tree_util.tree_structure(ct)} for an argument of structure {at}.") \
                            from None
                for sub in subs:
                    d, s = arg_avals[k]
                    if sub is None or (not isinstance(sub, (Tracer, Array, np.ndarray, np.generic, int, float))):
                        if sub is not None and tree_util.tree_leaves(sub):
                            raise TypeError(f"Custom VJP bwd rule produced a non-array {type(sub).__name__} at "
                                            f"output[{i}]")
                        out.append(_zeros(ref, d, s))
                    else:
                        if not dtypes.is_float(d):
                            out.append(_zeros(ref, d, s))
                        else:
                            cs = tuple(np.shape(sub)) if not isinstance(sub, (Tracer, Array)) else tuple(sub.shape)
                            if cs != s:
                                raise ValueError("Custom VJP bwd rule must produce an output with the same type as "
                                                 "the args tuple of the primal function, but at "
                                                 f"output[{i}] the bwd rule produced an output of type "
                                                 f"{_aval_str(d, cs)} corresponding to an input of type "
                                                 f"{_aval_str(d, s)}, so the shapes do not match")
                            if not isinstance(sub, (Tracer, Array)):
                                sub = Array.from_numpy(np.asarray(sub, dtypes.SUPPORTED[d]), copy=True)
                            out.append(_cast(sub, d))
                    k += 1
            return tuple(out)

        bwd_sig = res_sig + ct_sig
        bwd_tree = tree_util.tree_structure(tuple([0] * len(bwd_sig)))
        bwd_e = _trace(bwd_flat, bwd_sig, bwd_tree)
        operands = conv + list(f_e.captures) + list(fwd_e.captures) + list(bwd_e.captures)
        try:
            outs = _bind_custom("custom_vjp_call", operands, f=f_e.graph, fwd=fwd_e.graph, bwd=bwd_e.graph,
                                n_args=len(conv), n_fcap=len(f_e.captures), n_fwdcap=len(fwd_e.captures),
                                n_bwdcap=len(bwd_e.captures), n_res=n_res, name=name)
        except PodletError as e:
            _reraise_with_location(e)
        for o, w in zip(outs, f_e.out_weak):
            if w:
                o.weak_type = True
        return tree_util.tree_unflatten(f_e.out_tree, outs)


def _bind_custom(prim, operands, **attrs):
    if _top_trace(operands) is None:  # every operand concrete: cannot happen via __call__, kept for safety
        from .core import _core
        res = _core.apply(prim, list(operands), attrs)
        return list(res)
    r = bind(prim, *operands, **attrs)
    return list(r) if isinstance(r, tuple) else [r]


# ---------------------------------------------------------------------------------
# custom_jvp
# ---------------------------------------------------------------------------------
class custom_jvp(_CustomRule):
    """jax.custom_jvp: a function with a user-defined forward-mode rule.

        @custom_jvp
        def f(x): ...
        @f.defjvp
        def f_jvp(primals, tangents):
            (x,), (t,) = primals, tangents
            return f(x), tangent_out     # tangent_out linear in the tangents
    """

    _kind = "custom_jvp"

    def __init__(self, fun, nondiff_argnums=()):
        super().__init__(fun, nondiff_argnums)
        self.jvp = None

    def _defined(self):
        return self.jvp is not None

    def _undefined_message(self, name):
        return f"No JVP defined for custom_jvp function {name} using defjvp."

    def defjvp(self, jvp, symbolic_zeros=False):
        self.jvp = jvp
        return jvp

    def defjvps(self, *jvps):
        """One rule per argument: ``jvps[i](t_i, primal_out, *primals)`` is argument i's
        contribution to the output tangent (None: the output does not depend on it)."""
        if self.nondiff_argnums:
            raise TypeError("Can't use ``defjvps`` with ``nondiff_argnums``.")
        fun = self.fun

        def jvp(primals, tangents):
            primal_out = fun(*primals)
            total = None
            for rule, t in zip(jvps, tangents):
                if rule is None:
                    continue
                c = rule(t, primal_out, *primals)
                total = c if total is None else tree_util.tree_map(lambda a, b: a + b, total, c)
            if total is None:
                total = tree_util.tree_map(lambda o: o * 0, primal_out)
            return primal_out, total

        self.defjvp(jvp)

    def _call_traced(self, name, args, conv, sig, dtree, diff_idx, diff_args, nondiff):
        fun, rule = self.fun, self.jvp
        f_e = _trace(lambda *d: fun(*_rebuild(args, diff_idx, d)), sig, dtree)
        n_out = len(f_e.out_vids)
        out_avals = [f_e.graph.aval(v) for v in f_e.out_vids]
        float_in = [i for i, s in enumerate(sig) if dtypes.is_float(s[0])]
        float_out = [k for k, a in enumerate(out_avals) if dtypes.is_float(a[0])]
        n_args = len(conv)

        def jvp_flat(*flat):
            p_leaves = list(flat[:n_args])
            t_iter = iter(flat[n_args:])
            t_leaves = [next(t_iter) if i in float_in else np.zeros(tuple(sig[i][1]), float0) for i in range(n_args)]
            primals = tree_util.tree_unflatten(dtree, p_leaves)
            tangents = tree_util.tree_unflatten(dtree, t_leaves)
            r = rule(*nondiff, tuple(primals), tuple(tangents))
            if not (isinstance(r, (tuple, list)) and len(r) == 2):
                raise TypeError("Custom JVP rule must produce a pair (list or tuple of length two) representing "
                                f"primal and tangent outputs, but got {r!r}.")
            po, to = r
            po_leaves, po_tree = tree_util.tree_flatten(po)
            to_leaves, to_tree = tree_util.tree_flatten(to)
            if po_tree != to_tree:
                raise TypeError("Custom JVP rule must produce primal and tangent outputs with equal container "
                                f"(pytree) structures, but got {po_tree} and {to_tree} respectively.")
            if po_tree != f_e.out_tree:
                raise TypeError(f"Custom JVP rule for {name} must produce primal outputs with the same container "
                                f"(pytree) structure as the function, got {po_tree} and {f_e.out_tree}.")
            ref = flat[n_args] if len(flat) > n_args else flat[0]
            t_out = []
            for k in float_out:
                t = to_leaves[k]
                d, s = out_avals[k]
                if isinstance(t, (int, float)) and not isinstance(t, bool):
                    t = bind_like(ref, "broadcast_in_dim", Array.from_numpy(np.asarray(t, dtypes.SUPPORTED[d]),
                                                                           copy=True),
                                  shape=list(s), broadcast_dimensions=[])
                ts = tuple(np.shape(t)) if not isinstance(t, (Tracer, Array)) else tuple(t.shape)
                if ts != tuple(s):
                    raise TypeError("Custom JVP rule must produce primal and tangent outputs with corresponding "
                                    f"shapes and dtypes, but got {_aval_str(d, s)} and {_aval_str(d, ts)} "
                                    f"respectively (output {k}).")
                if not isinstance(t, (Tracer, Array)):
                    t = Array.from_numpy(np.asarray(t, dtypes.SUPPORTED[d]), copy=True)
                if t._dtype_name != d:
                    if not getattr(t, "weak_type", False) and dtypes.is_float(t._dtype_name):
                        raise TypeError("Custom JVP rule must produce primal and tangent outputs with "
                                        f"corresponding shapes and dtypes, but got {_aval_str(d, s)} and "
                                        f"{_aval_str(t._dtype_name, ts)} respectively (output {k}).")
                    t = _cast(t, d)
                t_out.append(t)
            return tuple(_leaf_as_value(x) for x in po_leaves) + tuple(t_out)

        j_sig = list(sig) + [sig[i] for i in float_in]
        j_tree = tree_util.tree_structure(tuple([0] * len(j_sig)))
        try:
            j_e = _trace(jvp_flat, j_sig, j_tree)
        except NotImplementedError:
            # A rule that refuses to differentiate (svd of full matrices, eig's vectors)
            # must not stop a trace that never differentiates (jit, vmap): a function that
            # asks for it gets its plain primitives, which have no derivative, so the error
            # comes if and when a derivative is taken, naming the primitive.
            if not self._defer_rule_errors:
                raise
            return self.fun(*args)
        _check_rule_primals(j_e, n_out, out_avals, f"Custom JVP rule for {name}")
        operands = conv + list(f_e.captures) + list(j_e.captures)
        try:
            outs = _bind_custom("custom_jvp_call", operands, f=f_e.graph, jvp=j_e.graph, n_args=n_args,
                                n_fcap=len(f_e.captures), n_jcap=len(j_e.captures), float_in=float_in,
                                float_out=float_out, name=name)
        except PodletError as e:
            _reraise_with_location(e)
        for o, w in zip(outs, f_e.out_weak):
            if w:
                o.weak_type = True
        return tree_util.tree_unflatten(f_e.out_tree, outs)
