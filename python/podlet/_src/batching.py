"""jax.vmap: trace the per-element function once, batch its Graph in C++.

The function is traced on per-element shapes (the mapped axis removed); the C++
transformation (cpp/podlet/batching.cc) walks the graph and lets each primitive's
batching rule, registered beside its kernel and VJP, add the mapped axis in front. The
batched graph then runs (eagerly, fused) or is inlined into the enclosing trace, so
``jit(vmap(f))``, ``grad(vmap(f))``, ``vmap(grad(f))``, nesting and ``pmap(vmap(f))``
compose like any other traced code. ``axis_name`` binds the mapped axis for
collectives (``lax.psum(x, 'batch')`` sums over the batch) exactly as pmap binds its
device axis.
"""
import functools
import numpy as np

from .. import tree_util
from . import fusion
from . import pmap as _pmap
from .core import (Array, Tracer, _Traced, _abstractify_all, _top_trace, _trace_stack, bind, call_graph,
                   _reraise_with_location, replay_effects, HostCallbackError)
from .errors import PodletError


def _moveaxis(x, src, dst):
    nd = len(x.shape)
    if src == dst:
        return x
    perm = [d for d in range(nd) if d != src]
    perm.insert(dst, src)
    return bind("transpose", x, permutation=perm)


def _broadcast_front(x, size):
    shape = (size,) + tuple(x.shape)
    return bind("broadcast_in_dim", x, shape=list(shape), broadcast_dimensions=list(range(1, len(shape))))


def _sequential(fun, moved, bdims, in_tree, size, out_axes):
    """vmap of a function that calls Python on its values (pure_callback): the function
    runs op by op once per element and the results are stacked along out_axes."""
    from .. import numpy as pnp
    outs = []
    for i in range(size):
        leaves = [x if b < 0 else x[i] for x, b in zip(moved, bdims)]
        a, k = tree_util.tree_unflatten(in_tree, leaves)
        outs.append(fun(*a, **k))
    flat = [tree_util.tree_leaves(o) for o in outs]
    out_tree = tree_util.tree_structure(outs[0])
    oaxes = _pmap._axes_per_leaf(out_axes, outs[0], "vmap out_axes", "outputs")
    res = []
    for j, oa in enumerate(oaxes):
        col = [f[j] for f in flat]
        res.append(col[0] if oa is None else pnp.stack(col, axis=oa))
    return tree_util.tree_unflatten(out_tree, res)


def _replay_per_element(effects, values, bds, size):
    """podlet.debug callbacks under vmap: each one over the batch elements in turn, as
    jax's batching rule of debug_callback does."""
    from .. import numpy as pnp
    k = 0
    for cb, vals in effects:
        vs, bs = values[k:k + len(vals)], bds[k:k + len(vals)]
        k += len(vals)
        for i in range(size):
            replay_effects([(cb, vals)], [v if b < 0 else pnp.take(v, i, axis=b) for v, b in zip(vs, bs)])


class _GraphEntry:
    def __init__(self, graph):
        self.graph = graph


def _is_value(x):
    """Whether a leaf is an array vmap traces; unmapped Python values (ints, a config's
    dtype, strings) reach fun unchanged, as in JAX."""
    return isinstance(x, (Array, Tracer, np.ndarray)) or (hasattr(x, "__array__") and not isinstance(x, type)
                                                          and not isinstance(x, np.generic))


def vmap(fun, in_axes=0, out_axes=0, axis_name=None, axis_size=None, spmd_axis_name=None):
    """jax.vmap: maps `fun` over an axis of its arguments.

    in_axes / out_axes: an int, None (not mapped / broadcast), or a pytree prefix of the
    positional arguments / outputs. Keyword arguments are mapped over axis 0.
    axis_size: the mapped size when no argument is mapped. axis_name: binds the axis for
    collectives (psum, pmean, pmax, pmin, all_gather, ppermute, axis_index) inside fun.
    """
    if not callable(fun):
        raise TypeError(f"vmap: fun must be callable, got {fun!r}")
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)

    @functools.wraps(fun)
    def vmapped(*args, **kwargs):
        if isinstance(in_axes, tuple) and len(in_axes) != len(args):
            raise ValueError(f"vmap in_axes must be an int, None, or a tuple of entries corresponding to the "
                             f"positional arguments passed to the function, but got len(in_axes)={len(in_axes)}, "
                             f"len(args)={len(args)}")
        axes = _pmap._axes_per_leaf(in_axes, args, "vmap in_axes")
        kw_leaves = tree_util.tree_leaves(kwargs)
        axes = axes + [0] * len(kw_leaves)
        leaves, in_tree = tree_util.tree_flatten((args, kwargs))
        static = [i for i, (x, ax) in enumerate(zip(leaves, axes)) if ax is None and not _is_value(x)]
        if static:  # unmapped non-array leaves (an int, a config's dtype) pass through, as in JAX
            dyn = [i for i in range(len(leaves)) if i not in set(static)]

            def with_statics(*dyn_leaves):
                full = list(leaves)
                for i, v in zip(dyn, dyn_leaves):
                    full[i] = v
                a, k = tree_util.tree_unflatten(in_tree, full)
                return fun(*a, **k)
            return vmap(with_statics, tuple(axes[i] for i in dyn), out_axes, axis_name, axis_size,
                        spmd_axis_name)(*[leaves[i] for i in dyn])
        conv, sig = _abstractify_all(leaves)
        size = None
        sizes = []
        for x, ax in zip(conv, axes):
            if ax is None:
                continue
            nd = len(x.shape)
            if not -nd <= ax < nd:
                raise ValueError(f"vmap was requested to map its argument along axis {ax}, which implies that "
                                 f"its rank should be at least {max(ax + 1, -ax)}, but is only {nd} "
                                 f"(its shape is {tuple(x.shape)})")
            sizes.append(x.shape[ax % nd])
        if sizes:
            if any(s != sizes[0] for s in sizes):
                raise ValueError(f"vmap got inconsistent sizes for the array axes to be mapped: {sorted(set(sizes))} "
                                 f"(in_axes={in_axes!r})")
            size = sizes[0]
            if axis_size is not None and axis_size != size:
                raise ValueError(f"vmap got axis_size={axis_size} but the mapped arguments have size {size}")
        elif axis_size is not None:
            size = int(axis_size)
        else:
            raise ValueError("vmap must have at least one non-None value in in_axes (or pass axis_size)")
        moved, elem_sig, bdims = [], [], []
        for x, s, ax in zip(conv, sig, axes):
            if ax is None:
                moved.append(x)
                elem_sig.append(s)
                bdims.append(-1)
            else:
                ax = ax % len(x.shape)
                moved.append(_moveaxis(x, ax, 0))
                elem_sig.append((s[0], tuple(s[1][:ax]) + tuple(s[1][ax + 1:]), s[2]))
                bdims.append(0)
        name = axis_name if axis_name is not None else object()  # an unnamed axis no collective can name
        _pmap._axis_env.append((name, size, len(_trace_stack)))
        try:
            entry = _Traced(lambda a, k: fun(*a, **k), elem_sig, in_tree, effects=True)
        except HostCallbackError as e:
            if _trace_stack:  # inside another transformation: it decides
                raise
            if e.vmap_method is None:
                raise NotImplementedError(
                    "vmap is only supported for the pure_callback primitive when vmap_method is one of "
                    "'sequential', 'sequential_unrolled', 'expand_dims', 'broadcast_all', or "
                    "'legacy_vectorized'. Got vmap_method=None.") from None
            return _sequential(fun, moved, bdims, in_tree, size, out_axes)
        finally:
            _pmap._axis_env.pop()
        entry.graph.outputs = entry.out_vids + entry.effect_vids  # podlet.debug callbacks' values
        bdims = bdims + [-1] * len(entry.captures)
        try:
            batched, out_bd = entry.graph.batch(bdims, size, str(axis_name) if axis_name is not None else "")
        except PodletError as e:
            _reraise_with_location(e)
        batched.dce()
        args_all = moved + list(entry.captures)
        graph = batched if _top_trace(args_all) else fusion.executable_graph(_GraphEntry(batched))
        outs = call_graph(graph, args_all)
        if entry.effects:
            n = len(entry.out_vids)
            _replay_per_element(entry.effects, outs[n:], out_bd[n:], size)
            outs, out_bd = outs[:n], out_bd[:n]
        for o, w in zip(outs, entry.out_weak):
            if w:
                o.weak_type = True
        out_struct = tree_util.tree_unflatten(entry.out_tree, list(range(len(outs))))
        oaxes = _pmap._axes_per_leaf(out_axes, out_struct, "vmap out_axes", "outputs")
        res = []
        for o, b, oa in zip(outs, out_bd, oaxes):
            if oa is None:
                if b >= 0:
                    raise ValueError("vmap has mapped output but out_axes is None")
                res.append(o)
                continue
            if b < 0:
                o = _broadcast_front(o, size)
            nd = len(o.shape)
            if not -nd <= oa < nd:
                raise ValueError(f"vmap out_axes {oa} is out of range for an output of rank {nd - 1}")
            res.append(_moveaxis(o, 0, oa % nd))
        return tree_util.tree_unflatten(entry.out_tree, res)

    return vmapped
