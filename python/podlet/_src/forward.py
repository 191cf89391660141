"""Forward mode: jvp, linearize, jacfwd, jacrev, hessian, linear_transpose.

Design: the JVP is derived by transposing the VJP, which is exact because the VJP graph
is linear in its cotangent. For a function traced into a graph ``g`` (inputs x, outputs
y):

* ``V = g.vjp(float inputs, float outputs)`` has inputs ``[x..., ct_y...]`` and outputs
  ``[y..., ct_x...]``; ``ct_x = J(x)^T ct_y`` is linear in ``ct_y``.
* ``W = V.vjp(wrt = the ct_y inputs, ct_outputs = the ct_x outputs)`` takes one more
  input per ``ct_x`` output (the tangent ``t_x``) and outputs ``[y..., ct_x...,
  t_y...]`` with ``t_y = (J^T)^T t_x = J t_x``.
* Evaluated with ``ct_y = 0`` (the result does not depend on it, ``V`` being linear in
  it), W gives ``y`` and ``t_y``; the graph's DCE removes whatever they do not need (the
  cotangent computation itself).

So forward mode needs no per-primitive JVP rules, only that every primitive appearing
in a VJP graph has a VJP rule itself (the same condition as grad-of-grad). The JVP
graph is an ordinary graph: it runs eagerly, is inlined into jit / vmap / pmap traces,
and can be differentiated again (grad of jvp, jvp of grad, hessian = jacfwd(jacrev)).

Integer inputs and outputs follow JAX: an integer primal takes a float0 tangent (a
NumPy array of dtype ``float0``; any other tangent dtype is a TypeError) and an integer
output gets a float0 zero tangent. ``custom_vjp`` functions refuse forward mode with
JAX's TypeError; ``custom_jvp`` functions use the user's rule (their VJP is its
transpose, and transposing that again gives the rule back).

``jacfwd`` is vmap of the JVP over the standard basis of the inputs, ``jacrev`` vmap of
the VJP over the standard basis of the outputs; both return JAX's structure (the output
tree with, at each leaf, the tree of the differentiated arguments) and shapes
(``out.shape + in.shape``).
"""
import functools

import numpy as np

from .. import _core
from .. import tree_util
from . import dtypes
from .core import (Array, Tracer, _Traced, _abstractify, _abstractify_all, _check_argnums, _reraise_with_location,
                   call_graph, to_array, vjp)
from .errors import PodletError

# JAX's float0: the dtype of tangents of integer and boolean values (no data).
float0 = np.dtype([("float0", np.void, 0)])


def _is_float(dtype_name):
    return dtypes.is_float(dtype_name)


def _float0_zeros(shape):
    return np.zeros(tuple(shape), dtype=float0)


def _zeros_node(graph, dtype_name, shape):
    z = Array.from_numpy(np.zeros((), dtypes.SUPPORTED[dtype_name]), copy=True)
    c = graph.add_const(z)
    if tuple(shape) == ():
        return c
    return graph.add("broadcast_in_dim", [c], {"shape": list(shape), "broadcast_dimensions": []})[0][0]


def _has_custom_vjp(graph):
    return graph.prim_counts().get("custom_vjp_call", 0) > 0


def jvp_graph(g, float_in, float_out):
    """The forward-mode graph of `g`: inputs ``g.inputs + one tangent per float_in``
    (indices into g.inputs), outputs ``g.outputs + one tangent per float_out`` (indices
    into g.outputs). Built by transposing g's VJP (see the module docstring)."""
    n_in, n_out = len(g.inputs), len(g.outputs)
    V = g.vjp(list(float_in), list(float_out))
    ct_y_inputs = list(range(n_in, n_in + len(float_out)))
    ct_x_outputs = list(range(n_out, n_out + len(float_in)))
    W = V.vjp(ct_y_inputs, ct_x_outputs)
    J = _core.Graph()
    xs = [J.add_input(*g.aval(v)) for v in g.inputs]
    ts = [J.add_input(*g.aval(g.inputs[j])) for j in float_in]
    zs = [_zeros_node(J, *g.aval(g.outputs[k])) for k in float_out]
    outs = [o[0] for o in J.inline(W, xs + zs + ts)]
    base = n_out + len(float_in)
    J.outputs = outs[:n_out] + outs[base:base + len(float_out)]
    J.dce()
    return J


def _check_tangent(p, t, i):
    """The tangent leaf as an array-like of the primal's dtype; float0 (None) for
    integer primals."""
    pd, ps = p._dtype_name, tuple(p.shape)
    tshape = tuple(np.shape(t)) if not isinstance(t, (Array, Tracer)) else tuple(t.shape)
    if isinstance(t, (int, float, bool)):
        td = "bool" if isinstance(t, bool) else ("int32" if isinstance(t, int) else (pd if _is_float(pd) else "float32"))
    elif isinstance(t, (Array, Tracer)):
        td = t._dtype_name
    else:
        nd = np.dtype(getattr(t, "dtype", np.asarray(t).dtype))
        td = "float0" if nd == float0 else dtypes.canonicalize(nd).name
    if not _is_float(pd):
        if td != "float0":
            raise TypeError("primal and tangent arguments to jax.jvp do not match; dtypes must be equal, or in case "
                            "of int/bool primal dtype the tangent dtype must be float0."
                            f"Got primal dtype {pd} and so expected tangent dtype [('float0', 'V')], but got "
                            f"tangent dtype {td} instead.")
        if tshape != ps:
            raise ValueError(f"jvp called with different primal and tangent shapes;Got primal shape {ps} and "
                             f"tangent shape as {tshape}")
        return None
    if td != pd:
        raise TypeError("primal and tangent arguments to jax.jvp do not match; dtypes must be equal, or in case of "
                        "int/bool primal dtype the tangent dtype must be float0."
                        f"Got primal dtype {pd} and so expected tangent dtype {pd}, but got tangent dtype {td} "
                        "instead.")
    if tshape != ps:
        raise ValueError(f"jvp called with different primal and tangent shapes;Got primal shape {ps} and "
                         f"tangent shape as {tshape}")
    if isinstance(t, Tracer):
        return t
    if isinstance(t, Array) and t._dtype_name == pd:
        return t
    return to_array(np.asarray(t), dtypes.SUPPORTED[pd])


class _Linearized:
    """fun traced at the primals and its JVP graph."""

    def __init__(self, fun, primals, has_aux, what="jvp"):
        leaves, in_tree = tree_util.tree_flatten(tuple(primals))
        conv, sig = _abstractify_all(leaves)
        self.in_tree = in_tree
        self.conv = conv
        entry = _Traced(lambda a, k: fun(*a), sig, tree_util.tree_flatten(((tuple(primals)), {}))[1])
        self.entry = entry
        n_out_all = len(entry.out_vids)
        if has_aux:
            out = tree_util.tree_unflatten(entry.out_tree, list(range(n_out_all)))
            if not (isinstance(out, (tuple, list)) and len(out) == 2):
                raise TypeError(f"{what}(has_aux=True): the function must return a pair (output, aux)")
            self.main_tree = tree_util.tree_structure(out[0])
            self.aux_tree = tree_util.tree_structure(out[1])
            self.n_main = self.main_tree.num_leaves
        else:
            self.main_tree = entry.out_tree
            self.n_main = n_out_all
        g = entry.graph
        g.dce()
        if _has_custom_vjp(g):
            raise TypeError("can't apply forward-mode autodiff (jvp) to a custom_vjp function.")
        self.float_in = [j for j in range(len(conv)) if _is_float(g.aval(g.inputs[j])[0])]
        self.float_out = [k for k in range(self.n_main) if _is_float(g.aval(g.outputs[k])[0])]
        try:
            self.J = jvp_graph(g, self.float_in, self.float_out)
        except PodletError as e:
            _reraise_with_location(e)
        self.captures = list(entry.captures)
        self.has_aux = has_aux

    def tangent_leaves(self, tangents, primals):
        t_leaves, t_tree = tree_util.tree_flatten(tuple(tangents))
        if t_tree != self.in_tree:
            p_tree = self.in_tree
            raise TypeError("primal and tangent arguments to jax.jvp must have the same tree structure; primals have "
                            f"tree structure {p_tree} whereas tangents have tree structure {t_tree}.")
        ts = []
        for i, (p, t) in enumerate(zip(self.conv, t_leaves)):
            c = _check_tangent(p, t, i)
            if c is not None:
                ts.append(c)
        return ts

    def outputs(self, outs):
        """(primal outputs, tangent outputs[, aux]) from the JVP graph's results."""
        n_all = len(self.entry.out_vids)
        ys, tys = outs[:n_all], outs[n_all:]
        for o, w in zip(ys, self.entry.out_weak):
            if w:
                o.weak_type = True
        return ys, self.tangents_of(tys)

    def tangents_of(self, tys):
        g = self.entry.graph
        t_out, k = [], 0
        for j in range(self.n_main):
            if j in self.float_out:
                t_out.append(tys[k])
                k += 1
            else:
                t_out.append(_float0_zeros(g.aval(g.outputs[j])[1]))
        return tree_util.tree_unflatten(self.main_tree, t_out)

    def split(self, ys):
        if self.has_aux:
            return (tree_util.tree_unflatten(self.main_tree, ys[:self.n_main]),
                    tree_util.tree_unflatten(self.aux_tree, ys[self.n_main:]))
        return tree_util.tree_unflatten(self.main_tree, ys), None


def _check_pair(primals, tangents):
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise TypeError("primal and tangent arguments to jax.jvp must be tuples or lists; found "
                        f"{type(primals).__name__} and {type(tangents).__name__}.")
    if len(primals) != len(tangents):
        raise TypeError("primal and tangent arguments to jax.jvp must have the same tree structure; primals have "
                        f"tree structure {tree_util.tree_structure(tuple(primals))} whereas tangents have tree "
                        f"structure {tree_util.tree_structure(tuple(tangents))}.")


def jvp(fun, primals, tangents, has_aux=False):
    """jax.jvp: ``(primals_out, tangents_out)`` (``+ (aux,)`` with has_aux), the
    tangents being ``J(primals) @ tangents``."""
    if not callable(fun):
        raise TypeError(f"jvp: fun must be callable, got {fun!r}")
    _check_pair(primals, tangents)
    lin = _Linearized(fun, primals, has_aux)
    ts = lin.tangent_leaves(tangents, primals)
    outs = call_graph(lin.J, lin.conv + lin.captures + ts)
    ys, t_out = lin.outputs(outs)
    y, aux = lin.split(ys)
    if has_aux:
        return y, t_out, aux
    return y, t_out


def linearize(fun, *primals, has_aux=False):
    """jax.linearize: ``(primals_out, f_jvp)`` (``+ (aux,)``) where ``f_jvp(*tangents)``
    is the JVP at `primals`. The primal outputs are computed once, here."""
    lin = _Linearized(fun, primals, has_aux, what="linearize")
    outs = call_graph(lin.entry.graph, lin.conv + lin.captures)
    ys = list(outs)
    for o, w in zip(ys, lin.entry.out_weak):
        if w:
            o.weak_type = True
    y, aux = lin.split(ys)
    # The tangent part of J alone: inputs [x..., t...], outputs the tangents.
    J = lin.J.copy()
    n_all = len(lin.entry.out_vids)
    J.outputs = list(J.outputs[n_all:])
    J.dce()
    conv, captures = lin.conv, lin.captures

    def f_jvp(*tangents):
        if len(tangents) != len(primals):
            raise TypeError(f"linearized function called with {len(tangents)} tangent arguments, expected "
                            f"{len(primals)}")
        ts = lin.tangent_leaves(tangents, primals)
        return lin.tangents_of(call_graph(J, conv + captures + ts))

    if has_aux:
        return y, f_jvp, aux
    return y, f_jvp


# ---------------------------------------------------------------------------------
# Jacobians
# ---------------------------------------------------------------------------------
def _jnp():
    from .. import numpy as jnp
    return jnp


def _leaf_aval(x):
    v, (d, s, _) = _abstractify(x)
    return v, d, tuple(s)


def _partial_args(fun, args, nums, kwargs):
    def f_partial(*dyn):
        a = list(args)
        for i, x in zip(nums, dyn):
            a[i] = x
        return fun(*a, **kwargs)
    return f_partial


def _basis(avals, total):
    """One (total, *shape) standard-basis array per leaf (ones where the row's index
    falls in that leaf)."""
    out, off = [], 0
    for d, s in avals:
        n = int(np.prod(s, dtype=np.int64))
        b = np.zeros((total, n), dtype=dtypes.SUPPORTED[d])
        b[np.arange(off, off + n), np.arange(n)] = 1
        out.append(to_array(b.reshape((total,) + tuple(s)), dtypes.SUPPORTED[d]))
        off += n
    return out


def _block(rows, off, n, out_shape, in_shape, rows_first_is_in):
    """The Jacobian block of one (output leaf, input leaf) pair, shaped out + in.

    rows: a (total, *shape) array from the vmapped pushforward / pullback.
    rows_first_is_in: the basis ran over inputs (jacfwd: rows = (n_in, *out_shape)),
    else over outputs (jacrev: rows = (n_out, *in_shape))."""
    jnp = _jnp()
    r = rows[off:off + n] if (off != 0 or n != rows.shape[0]) else rows
    if rows_first_is_in:
        r = jnp.reshape(r, (n, int(np.prod(out_shape, dtype=np.int64))))
        r = jnp.transpose(r)
        return jnp.reshape(r, tuple(out_shape) + tuple(in_shape))
    return jnp.reshape(r, tuple(out_shape) + tuple(in_shape))


def jacfwd(fun, argnums=0, has_aux=False, holomorphic=False):
    """jax.jacfwd: the Jacobian by forward mode (vmap of jvp over the input basis)."""
    from .batching import vmap

    @functools.wraps(fun)
    def jacfun(*args, **kwargs):
        single, nums = _check_argnums(argnums, len(args), "jacfwd")
        dyn = tuple(args[i] for i in nums)
        leaves, dyn_tree = tree_util.tree_flatten(dyn)
        avals = []
        conv = []
        for x in leaves:
            v, d, s = _leaf_aval(x)
            if not _is_float(d):
                raise TypeError(f"jacfwd requires real-valued inputs (input dtype that is a sub-dtype of np.floating), "
                                f"but got {d}. For holomorphic differentiation, pass holomorphic=True. For "
                                "differentiation of non-holomorphic functions involving complex inputs or integer "
                                "inputs, use jax.jvp directly.")
            avals.append((d, s))
            conv.append(v)
        dyn_conv = tree_util.tree_unflatten(dyn_tree, conv)
        sizes = [int(np.prod(s, dtype=np.int64)) for _, s in avals]
        total = sum(sizes)
        basis = _basis(avals, total)
        f_partial = _partial_args(fun, args, nums, kwargs)

        def push(*b):
            tangents = tree_util.tree_unflatten(dyn_tree, list(b))
            if has_aux:
                y, t, aux = jvp(f_partial, dyn_conv, tangents, has_aux=True)
                return y, t, aux
            y, t = jvp(f_partial, dyn_conv, tangents)
            return y, t

        out_axes = (None, 0, None) if has_aux else (None, 0)
        res = vmap(push, in_axes=0, out_axes=out_axes)(*basis)
        y, t = res[0], res[1]
        example = dyn_conv if not single else dyn_conv[0]
        ex_tree = tree_util.tree_structure(example)
        y_leaves, y_tree = tree_util.tree_flatten(y)
        t_leaves = tree_util.tree_leaves(t)
        jac = []
        for yo, to in zip(y_leaves, t_leaves):
            blocks, off = [], 0
            for (d, s), n in zip(avals, sizes):
                blocks.append(_block(to, off, n, tuple(yo.shape), s, True))
                off += n
            jac.append(tree_util.tree_unflatten(ex_tree, blocks))
        jac = tree_util.tree_unflatten(y_tree, jac)
        if has_aux:
            return jac, res[2]
        return jac

    return jacfun


def jacrev(fun, argnums=0, has_aux=False, holomorphic=False, allow_int=False):
    """jax.jacrev: the Jacobian by reverse mode (vmap of the VJP over the output basis)."""
    from .batching import vmap

    @functools.wraps(fun)
    def jacfun(*args, **kwargs):
        single, nums = _check_argnums(argnums, len(args), "jacrev")
        dyn = tuple(args[i] for i in nums)
        leaves, dyn_tree = tree_util.tree_flatten(dyn)
        in_avals = []
        for x in leaves:
            _, d, s = _leaf_aval(x)
            if not _is_float(d):
                raise TypeError(f"jacrev requires real- or complex-valued inputs (input dtype that is a sub-dtype of "
                                f"np.inexact), but got {d}. If you want to use Boolean- or integer-valued inputs, use "
                                "vjp or set allow_int to True.")
            in_avals.append((d, s))
        f_partial = _partial_args(fun, args, nums, kwargs)
        if has_aux:
            y, pullback, aux = vjp(f_partial, *dyn, has_aux=True)
        else:
            y, pullback = vjp(f_partial, *dyn)
        y_leaves, y_tree = tree_util.tree_flatten(y)
        out_avals = []
        for o in y_leaves:
            d = o._dtype_name
            if not _is_float(d):
                raise TypeError(f"jacrev requires real-valued outputs (output dtype that is a sub-dtype of "
                                f"np.floating), but got {d}. For differentiation of functions with integer outputs, "
                                "use jax.vjp directly.")
            out_avals.append((d, tuple(o.shape)))
        out_sizes = [int(np.prod(s, dtype=np.int64)) for _, s in out_avals]
        total = sum(out_sizes)
        basis = _basis(out_avals, total)

        def pull(*b):
            return pullback(tree_util.tree_unflatten(y_tree, list(b)))

        g = vmap(pull)(*basis)
        g_leaves = tree_util.tree_leaves(g)
        example = dyn if not single else dyn[0]
        ex_tree = tree_util.tree_structure(example)
        jac, off = [], 0
        for (d, s), n in zip(out_avals, out_sizes):
            blocks = [_block(gl, off, n, s, ia[1], False) for gl, ia in zip(g_leaves, in_avals)]
            jac.append(tree_util.tree_unflatten(ex_tree, blocks))
            off += n
        jac = tree_util.tree_unflatten(y_tree, jac)
        if has_aux:
            return jac, aux
        return jac

    return jacfun


jacobian = jacrev


def hessian(fun, argnums=0, has_aux=False, holomorphic=False):
    """jax.hessian: jacfwd(jacrev(fun))."""
    return jacfwd(jacrev(fun, argnums, has_aux=has_aux), argnums, has_aux=has_aux)


# ---------------------------------------------------------------------------------
# linear_transpose
# ---------------------------------------------------------------------------------
def _spec(x):
    if hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, (Array, Tracer, np.ndarray)):
        return (dtypes.canonicalize(x.dtype).name, tuple(x.shape), False)
    return _abstractify(x)[1]


def linear_transpose(fun, *primals, reduce_axes=()):
    """jax.linear_transpose: the transpose of the linear function `fun` (primals give
    only shapes and dtypes; ShapeDtypeStruct is accepted). Returns ``transposed(ct)``
    giving a tuple with one cotangent per primal."""
    leaves, in_tree = tree_util.tree_flatten(tuple(primals))
    sig = [_spec(x) for x in leaves]
    for d, _, _ in sig:
        if not _is_float(d):
            raise TypeError("linear_transpose only supports [float or complex] -> [float or complex], and integer -> "
                            f"integer functions, but got a {d} input")
    full_tree = tree_util.tree_flatten((tuple(primals), {}))[1]
    entry = _Traced(lambda a, k: fun(*a), sig, full_tree)
    g = entry.graph
    n_in, n_out = len(leaves), len(entry.out_vids)
    out_avals = [g.aval(v) for v in g.outputs]
    for d, _ in out_avals:
        if not _is_float(d):
            raise TypeError("linear_transpose only supports [float or complex] -> [float or complex], and integer -> "
                            f"integer functions, but got a {d} output")
    try:
        V = g.vjp(list(range(n_in)), list(range(n_out)))
    except PodletError as e:
        _reraise_with_location(e)
    T = _core.Graph()
    n_cap = len(entry.captures)
    caps = [T.add_input(*g.aval(g.inputs[n_in + k])) for k in range(n_cap)]
    cts = [T.add_input(d, list(s)) for d, s in out_avals]
    xs = [_zeros_node(T, *g.aval(g.inputs[j])) for j in range(n_in)]
    outs = [o[0] for o in T.inline(V, xs + caps + cts)]
    T.outputs = outs[n_out:]
    T.dce()
    captures = list(entry.captures)
    out_tree = entry.out_tree
    expected = tuple(f"ShapedArray({d}{list(s)})".replace(" ", "") for d, s in out_avals)

    def transposed(out_cotangent):
        ct_leaves, ct_tree = tree_util.tree_flatten(out_cotangent)
        if ct_tree != out_tree:
            raise TypeError(f"cotangent tree does not match function output, expected {out_tree} but got {ct_tree}")
        conv = []
        for c, (d, s) in zip(ct_leaves, out_avals):
            if isinstance(c, (int, float)) and not isinstance(c, bool):
                c = to_array(c, dtypes.SUPPORTED[d])
            v, (cd, cs, _) = _abstractify(c)
            if cd != d or tuple(cs) != tuple(s):
                raise TypeError(f"cotangent type does not match function output, expected ({', '.join(expected)},) "
                                f"but got {cd}{list(cs)}")
            conv.append(v)
        res = call_graph(T, captures + conv)
        args, _ = tree_util.tree_unflatten(full_tree, list(res))
        return tuple(args)

    return transposed
