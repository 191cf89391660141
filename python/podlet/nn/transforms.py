"""flax.linen's lifted transforms: vmap, scan, remat/checkpoint, jit, cond, switch,
while_loop, map_variables, vjp, jvp, grad, value_and_grad, custom_vjp, fold_rngs
(flax/linen/transforms.py over flax/core/lift.py).

A lifted transform turns a Module (or a function taking a Module first) into a pure
function of its variables and rng keys, applies the podlet transform to that function
(``podlet.vmap``, ``podlet.lax.scan``, ``podlet.checkpoint``, ``podlet.lax.cond`` ...)
and writes the mutable collections it returns back into the module's scope:

- ``pack`` splits the variables of the module's scope(s) into groups by collection
  filters (e.g. for ``scan``: broadcast, carry, then one group per ``variable_axes``
  entry) and the rng streams into groups by ``split_rngs``; ``scope_fn`` rebinds those
  groups into a fresh root :class:`Scope` (same path, flags and rng counters as the
  outer scope), ``repack`` collects the mutable collections of the inner scope.
- The module is cloned onto the inner scope and the original method runs there, so
  parameter paths, names and rng derivation are Flax's: ``nn.scan(Block,
  variable_axes={'params': 0}, split_rngs={'params': True}, length=L)`` stores every
  parameter of ``Block`` under the scanned module's name with a leading axis of size L,
  and initialises it with the same keys as Flax (the root key is split, then the path
  and call counter are folded in; the body is traced twice, as Flax's constancy check
  does, so the rng counters advance as in Flax).

Rng streams cross the transform boundary as raw ``uint32[2]`` keys (what Flax's
``tree_map_rngs`` maps over for raw keys); the static path suffix of each stream stays
outside and is re-attached inside.
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import inspect
import threading
from collections.abc import Iterable, Mapping
from typing import Any, Callable

import numpy as np

from .. import tree_util
from .module import (DenyList, LazyRng, Module, Scope, Variable, FlaxError, _SetupState, _ModuleInternalState,
                     _get_unbound_fn, _wrap_method_once, in_filter, intersect_filters, is_filter_empty,
                     subtract_filters, union_filters)

__all__ = ["vmap", "scan", "remat", "checkpoint", "jit", "cond", "switch", "while_loop", "map_variables",
           "broadcast", "remat_scan", "vjp", "jvp", "grad", "value_and_grad", "custom_vjp", "fold_rngs"]


class _Broadcast:
    """``nn.broadcast``: an ``in_axes`` / ``out_axes`` entry of :func:`scan` for a value
    that is the same at every iteration (fed whole / not stacked)."""

    def __repr__(self):
        return "broadcast"

    def __reduce__(self):
        return "broadcast"


broadcast = _Broadcast()


class TransformTargetError(FlaxError):
    def __init__(self, target):
        super().__init__("Linen transformations must be applied to Modules classes or functions taking a Module "
                         f"instance as the first argument. The provided target is not a Module class or "
                         f"callable: {target}")


class TransformedMethodReturnValueError(FlaxError):
    def __init__(self, name):
        super().__init__(f'Transformed module method {name} cannot return Modules or Variables.')


# =====================================================================================
# small helpers
# =====================================================================================
def _copy_dicts(x):
    if isinstance(x, Mapping):
        return {k: _copy_dicts(v) for k, v in x.items()}
    return x


def group_collections(xs, col_filters):
    """Splits the collections of ``xs`` by filters; each collection goes to the first
    filter that matches it (flax.core.scope.group_collections)."""
    cols = list(xs.keys())
    groups = []
    for col_filter in col_filters:
        remaining, group = [], {}
        for col in cols:
            if in_filter(col_filter, col):
                group[col] = _copy_dicts(xs[col])
            else:
                remaining.append(col)
        cols = remaining
        groups.append(group)
    return tuple(groups)


def _transpose(xs):
    return tuple(zip(*xs))


def _unzip2(xs):
    xs = tuple(xs)
    return tuple(x for x, _ in xs), tuple(y for _, y in xs)


def _is_axis_leaf(x):
    return x is None or x is broadcast


def _prefix_subtrees(prefix, tree):
    """[(axis, subtree)] for every leaf of the axes prefix tree ``prefix`` (ints, None,
    broadcast) and the subtree of ``tree`` it covers."""
    if isinstance(prefix, list):
        prefix = tuple(prefix)
    pdef = tree_util.tree_structure(prefix, is_leaf=_is_axis_leaf)
    axes = tree_util.tree_leaves(prefix, is_leaf=_is_axis_leaf)
    try:
        subs = pdef.flatten_up_to(tree)
    except ValueError as e:
        raise ValueError(f"axes specification {prefix!r} is not a tree prefix of the arguments: {e}") from None
    return pdef, list(zip(axes, subs))


def _map_prefix(fn, prefix, tree):
    pdef, pairs = _prefix_subtrees(prefix, tree)
    return tree_util.tree_unflatten(pdef, [fn(ax, sub) for ax, sub in pairs])


def _leaf_axes(prefix, tree):
    """The axis of every leaf of ``tree`` under the axes prefix ``prefix``."""
    out = []
    for ax, sub in _prefix_subtrees(prefix, tree)[1]:
        out.extend([ax] * len(tree_util.tree_leaves(sub)))
    return out


def _moveaxis(x, src, dst):
    from .. import numpy as jnp
    return jnp.moveaxis(x, src, dst)


def _rng_unzip(rng_groups):
    """(raw keys tree, rebuild): LazyRng leaves -> their raw keys; rebuild(keys) puts the
    static suffixes back."""
    leaves, treedef = tree_util.tree_flatten(rng_groups, is_leaf=lambda x: isinstance(x, LazyRng))
    suffixes = [l.suffix for l in leaves]
    keys = tree_util.tree_unflatten(treedef, [l.rng for l in leaves])

    def rebuild(new_keys):
        ks = treedef.flatten_up_to(new_keys)
        return tree_util.tree_unflatten(treedef, [LazyRng(k, s) for k, s in zip(ks, suffixes)])

    return keys, rebuild


def _map_rng_keys(fn, group):
    return tree_util.tree_map(fn, group)


# =====================================================================================
# pack (flax.core.lift.pack)
# =====================================================================================
def _scope_key(s):
    return (id(s.root._variables), s.path, id(s.rng_counters))


def _dedup_scopes(scopes):
    paths = []
    minimal = collections.OrderedDict((_scope_key(s), s) for s in scopes)
    for leaf in scopes:
        scope = leaf.parent
        max_parent, max_parent_path = leaf, ()
        path = [leaf.name]
        while scope is not None:
            if _scope_key(scope) in minimal:
                max_parent = scope
                max_parent_path = tuple(reversed(path))
            path.append(scope.name)
            scope = scope.parent
        if max_parent is not leaf and _scope_key(leaf) in minimal:
            del minimal[_scope_key(leaf)]
        paths.append((_scope_key(max_parent), max_parent_path))
    return tuple(minimal.values()), tuple(paths)


def _flatten_scopes(scope_tree):
    if isinstance(scope_tree, Scope):
        return [scope_tree], lambda xs: xs[0]
    if isinstance(scope_tree, (list, tuple)):
        kind = type(scope_tree)
        return list(scope_tree), lambda xs: kind(xs)
    raise TypeError(f"expected a Scope or a list of Scopes, got {scope_tree!r}")


def pack(fn, in_variable_filters, out_variable_filters, rng_filters, name=None, enable_kwargs=False):
    """flax.core.lift.pack: ``fn(scope_fn, repack_fn, variable_groups, rng_groups, *args)``
    as a function of ``(scope_tree, *args)``; the mutable variables it returns are
    written back into the scopes."""

    @functools.wraps(fn)
    def wrapper(scope_tree, *args, **kwargs):
        orig, unflatten_scopes = _flatten_scopes(scope_tree)
        scopes, paths = _dedup_scopes(orig)
        variable_groups_xs = []
        for scope in scopes:
            scope._check_valid()
            scope._populate_collections()
            variable_groups_xs.append(group_collections(scope._variables, in_variable_filters))
        variable_groups_xs_t = _transpose(variable_groups_xs)
        rng_groups_xs, inner_rng_counters = [], []
        for scope in scopes:
            rng_groups_xs.append(group_collections(scope.rngs, rng_filters))
            inner_rng_counters.append(scope.rng_counters)
        rng_groups_xs_t = _transpose(rng_groups_xs)
        inner_scopes = []

        def scope_fn(variable_groups_xs_t, rng_groups_xs_t, mutable_filter=True):
            nonlocal inner_scopes
            for s in inner_scopes:
                s.invalidate()
            inner_scopes = []
            mutable = False
            for out_filter in out_variable_filters:
                mutable = union_filters(mutable, out_filter)
            variable_groups_xs = _transpose(variable_groups_xs_t) or ((),) * len(scopes)
            rng_groups_xs = _transpose(rng_groups_xs_t) or ((),) * len(scopes)
            made = []
            for variable_groups, rng_groups, scope, rng_counters in zip(
                    variable_groups_xs, rng_groups_xs, scopes, inner_rng_counters):
                variables, rngs = {}, {}
                for g in variable_groups:
                    variables.update(g)
                for g in rng_groups:
                    rngs.update(g)
                variables = _copy_dicts(variables)
                scope_mutable = intersect_filters(intersect_filters(scope.mutable, mutable), mutable_filter)
                inner = Scope(variables, rngs=rngs, name=scope.name, mutable=scope_mutable, parent=None,
                              path=scope.path, flags=scope.flags)
                inner.rng_counters = rng_counters
                made.append(inner)
            inner_scopes = list(made)
            mapping = {_scope_key(s): m for s, m in zip(scopes, made)}
            out = []
            for root_key, path in paths:
                s = mapping[root_key]
                for n in path:
                    s = s.push(n, reuse=True)
                out.append(s)
            return unflatten_scopes(out)

        def repack_fn(inner_scope_tree):
            inner, _ = _flatten_scopes(inner_scope_tree)
            inner, _ = _dedup_scopes(inner)
            out_xs = []
            for s in inner:
                s.invalidate()
                mutable_variables = {k: v for k, v in s._variables.items() if in_filter(s.mutable, k)}
                groups = group_collections(mutable_variables, tuple(out_variable_filters) + (True,))
                remainder = tuple(groups[-1].keys())
                if remainder:
                    raise ValueError(f"unmapped output variables: {remainder}")
                out_xs.append(groups[:-1])
            return _transpose(out_xs)

        try:
            if enable_kwargs:
                y, out_groups_xs_t = fn(scope_fn, repack_fn, variable_groups_xs_t, rng_groups_xs_t, *args, **kwargs)
            else:
                if kwargs:
                    import warnings
                    warnings.warn(f"kwargs are not supported in {name}, so \"{', '.join(kwargs)}\" is(are) ignored",
                                  RuntimeWarning)
                y, out_groups_xs_t = fn(scope_fn, repack_fn, variable_groups_xs_t, rng_groups_xs_t, *args)
        finally:
            for s in inner_scopes:
                s.invalidate()
        out_groups_xs = _transpose(out_groups_xs_t)
        for scope, out_groups in zip(scopes, out_groups_xs):
            for group in out_groups:
                for col_name, coll in group.items():
                    if not scope.is_mutable_collection(col_name):
                        continue  # e.g. scan returns redundant broadcast variables
                    for var_name, value in coll.items():
                        scope.put_variable(col_name, var_name, value)
        return y

    return wrapper


def _split_in_out_axes(xs):
    unpack = lambda v: v.axis if isinstance(v, (In, Out)) else v  # noqa: E731
    in_axes = {k: unpack(v) for k, v in xs.items() if not isinstance(v, Out)}
    out_axes = {k: unpack(v) for k, v in xs.items() if not isinstance(v, In)}
    return in_axes, out_axes


@dataclasses.dataclass(frozen=True)
class In:
    """An axis that only applies to the input variables (flax.core.lift.In)."""
    axis: Any


@dataclasses.dataclass(frozen=True)
class Out:
    """An axis that only applies to the output variables (flax.core.lift.Out)."""
    axis: Any


# =====================================================================================
# core lifts (flax.core.lift.*), on scope functions
# =====================================================================================
def _random():
    from .. import random
    return random


def lift_vmap(fn, variable_axes, split_rngs, in_axes=0, out_axes=0, axis_size=None, axis_name=None,
              spmd_axis_name=None, metadata_params={}):
    from .._src.batching import vmap as _vmap
    variable_in_axes, variable_out_axes = _split_in_out_axes(variable_axes)
    variable_in_groups, variable_in_axes = _unzip2(variable_in_axes.items())
    variable_out_groups, variable_out_axes = _unzip2(variable_out_axes.items())
    rng_groups_f, rng_splits = _unzip2(split_rngs.items())
    rng_axes = tuple(0 if s else None for s in rng_splits)
    in_axes_ = tuple(in_axes) if isinstance(in_axes, list) else in_axes

    def inner(scope_fn, repack_fn, variable_groups, rng_groups, *args):
        from . import meta  # boxed variables (nn.Partitioned) lose the mapped axis's name inside
        variable_groups = tuple(grp if ax is None else meta.remove_axis(grp, ax, metadata_params)
                                for grp, ax in zip(variable_groups, variable_in_axes))
        sizes = set()
        for grp, ax in zip(variable_groups, variable_in_axes):
            if ax is not None:
                leaves = tree_util.tree_leaves(grp)
                if leaves:
                    sizes.add(leaves[0].shape[ax])
        for ax, sub in _prefix_subtrees(in_axes_, args)[1]:
            if ax is not None:
                leaves = tree_util.tree_leaves(sub)
                if leaves:
                    sizes.add(leaves[0].shape[ax])
        if axis_size is None and len(sizes) == 1:
            (d_axis_size,) = sizes
        elif len(sizes) > 1:
            raise ValueError(f"Inconsistent batch axis sizes: {sizes}")
        elif axis_size is None:
            raise ValueError("axis_size should be specified manually.")
        else:
            d_axis_size = axis_size
        keys, rebuild = _rng_unzip(rng_groups)
        keys = tuple(_map_rng_keys(lambda k: _random().split(k, d_axis_size), g) if split else g
                     for g, split in zip(keys, rng_splits))

        def mapped(variable_groups, keys, args):
            scope = scope_fn(variable_groups, rebuild(keys))
            y = fn(scope, *args)
            return y, repack_fn(scope)

        y, vars_out = _vmap(mapped, in_axes=(variable_in_axes, rng_axes, in_axes_),
                            out_axes=(out_axes, variable_out_axes), axis_name=axis_name,
                            axis_size=d_axis_size)(variable_groups, keys, args)
        vars_out = tuple(grp if ax is None else meta.add_axis(grp, ax, metadata_params)
                         for grp, ax in zip(vars_out, variable_out_axes))
        return y, vars_out

    return pack(inner, variable_in_groups, variable_out_groups, rng_groups_f, name="vmap")


def lift_scan(fn, variable_axes={}, variable_broadcast=False, variable_carry=False, split_rngs={}, in_axes=0,
              out_axes=0, length=None, reverse=False, unroll=1, _split_transpose=False, data_transform=None,
              metadata_params={}, check_constancy_invariants=True):
    from .. import lax
    from .._src import core as _core
    variable_in_axes, variable_out_axes = _split_in_out_axes(variable_axes)
    variable_in_groups, variable_in_axes = _unzip2(variable_in_axes.items())
    variable_out_groups, variable_out_axes = _unzip2(variable_out_axes.items())
    for ax in variable_in_axes + variable_out_axes:
        if not isinstance(ax, int):
            raise TypeError(f"scan variable_axes must be ints, got {ax!r}")
    rng_groups_f, rng_splits = _unzip2(split_rngs.items())
    in_axes_ = tuple(in_axes) if isinstance(in_axes, list) else in_axes
    out_axes_ = tuple(out_axes) if isinstance(out_axes, list) else out_axes

    def inner(scope_fn, repack_fn, variable_groups, rng_groups, init, *args):
        lengths = set()
        for ax, sub in _prefix_subtrees(in_axes_, args)[1]:
            if ax is not broadcast:
                leaves = tree_util.tree_leaves(sub)
                if leaves:
                    lengths.add(leaves[0].shape[ax])
        if length is None and len(lengths) == 1:
            (d_length,) = lengths
        elif len(lengths) > 1:
            raise ValueError(f"Inconsistent scan lengths: {lengths}")
        elif length is None:
            raise ValueError("length should be specified manually.")
        else:
            d_length = length
        keys, rebuild = _rng_unzip(rng_groups)
        keys = tuple(_map_rng_keys(lambda k: _random().split(k, d_length), g) if split else g
                     for g, split in zip(keys, rng_splits))
        bcast_keys = tuple(None if split else g for g, split in zip(keys, rng_splits))
        scan_keys = tuple(g if split else None for g, split in zip(keys, rng_splits))

        broadcast_vars = variable_groups[0]
        carry_vars = variable_groups[1]
        from . import meta  # boxed variables (nn.Partitioned) lose the scanned axis's name inside
        scan_vars = tuple(tree_util.tree_map(lambda x, a=ax: _moveaxis(x, a, 0),
                                             meta.remove_axis(g, ax, metadata_params))
                          for g, ax in zip(variable_groups[2:], variable_in_axes))
        # scanned args with the scan axis in front; broadcast args closed over
        args_pdef, args_pairs = _prefix_subtrees(in_axes_, args)
        scanned_args = [None if ax is broadcast else tree_util.tree_map(lambda x, a=ax: _moveaxis(x, a, 0), sub)
                        for ax, sub in args_pairs]

        def full_args(scanned):
            subs = [sub if ax is broadcast else s for (ax, sub), s in zip(args_pairs, scanned)]
            return tree_util.tree_unflatten(args_pdef, subs)

        def body(broadcast_in, c, xs):
            carry_vars_in, c0 = c
            scan_groups, skeys, sargs = xs
            all_keys = tuple(sk if b is None else b for b, sk in zip(bcast_keys, skeys))
            groups = (broadcast_in, carry_vars_in) + tuple(scan_groups)
            rngs = rebuild(all_keys)
            if data_transform is not None:
                groups, rngs = data_transform(groups, rngs)
            scope = scope_fn(groups, rngs)
            c1, y = fn(scope, c0, *full_args(sargs))
            out_vars = repack_fn(scope)
            broadcast_out = out_vars[0]
            for in_group, out_group in zip(broadcast_in, broadcast_out):
                for col in in_group:
                    if col not in out_group:
                        out_group[col] = in_group[col]
            return broadcast_out, (out_vars[1], c1), (y, tuple(out_vars[2:]))

        xs = (scan_vars, scan_keys, scanned_args)
        has_bcast_out = broadcast in tree_util.tree_leaves(out_axes_, is_leaf=_is_axis_leaf)
        constants_out = None
        # The extra trace only matters when something can differ from a plain scan: rng
        # streams (Flax's two traces advance the rng counters twice), broadcast
        # collections (created inside the loop at init), or broadcast ys.
        need_pre = (has_bcast_out or bool(tree_util.tree_leaves(keys))
                    or not is_filter_empty(variable_broadcast))
        if check_constancy_invariants and need_pre:
            # Flax traces the body once more to compute the broadcast outputs (variables
            # initialised inside the loop and broadcast ys) outside of the loop.
            broadcast_vars, constants_out = _broadcast_pass(body, broadcast_vars, (carry_vars, init), xs,
                                                            out_axes_, has_bcast_out)
        elif has_bcast_out:
            raise ValueError("nn.scan run with check_constancy_invariants=False does not support broadcast "
                             f"non-carry function outputs.  out_axes was given as {out_axes}")

        def step(c, x):
            _, c, (y, svars) = body(broadcast_vars, c, x)
            y = _map_prefix(lambda ax, sub: None if ax is broadcast else sub, out_axes_, y)
            return c, (y, svars)

        (carry_vars_out, c), (ys, scan_vars_out) = lax.scan(step, (carry_vars, init), xs, length=d_length,
                                                             reverse=reverse, unroll=unroll)
        ys = _map_prefix(lambda ax, sub: (None if ax is broadcast
                                          else tree_util.tree_map(lambda y, a=ax: _moveaxis(y, 0, a), sub)),
                         out_axes_, ys)
        if has_bcast_out:
            cpdef, cpairs = _prefix_subtrees(out_axes_, constants_out)
            _, ypairs = _prefix_subtrees(out_axes_, ys)
            ys = tree_util.tree_unflatten(cpdef, [cs if ax is broadcast else ysub
                                                  for (ax, cs), (_, ysub) in zip(cpairs, ypairs)])
        scan_vars_out = tuple(meta.add_axis(tree_util.tree_map(lambda x, a=ax: _moveaxis(x, 0, a), g), ax,
                                            metadata_params)
                              for g, ax in zip(scan_vars_out, variable_out_axes))
        return (c, ys), (broadcast_vars, carry_vars_out) + scan_vars_out

    return pack(inner, (variable_broadcast, variable_carry) + variable_in_groups,
                (variable_broadcast, variable_carry) + variable_out_groups, rng_groups_f, name="scan")


def _broadcast_pass(body, broadcast_vars, init, xs, out_axes, has_bcast_out):
    """The broadcast outputs of one abstract trace of the scan body (loop-invariant
    variables created inside it, broadcast ys), computed outside of the loop."""
    from .._src import core as _core
    from .._src import fusion
    from .._src.batching import _GraphEntry
    c_leaves, c_tree = tree_util.tree_flatten(init)
    x_leaves, x_tree = tree_util.tree_flatten(xs)
    c_conv, c_sig = _core._abstractify_all(c_leaves)
    x_conv, x_sig = _core._abstractify_all(x_leaves)
    slice_sig = [(d, tuple(s[1:]), w) for d, s, w in x_sig]
    n_c = len(c_leaves)

    def f(a, k):
        leaves = list(a)
        c = tree_util.tree_unflatten(c_tree, leaves[:n_c])
        x = tree_util.tree_unflatten(x_tree, leaves[n_c:])
        bout, _, (y, _) = body(broadcast_vars, c, x)
        if has_bcast_out:
            y = _map_prefix(lambda ax, sub: sub if ax is broadcast else None, out_axes, y)
        else:
            y = None
        return bout, y

    in_tree = tree_util.tree_structure((tuple([0] * (n_c + len(x_leaves))), {}))
    entry = _core._Traced(f, c_sig + slice_sig, in_tree)
    n_out = len(entry.out_vids)
    if n_out == 0:
        return tree_util.tree_unflatten(entry.out_tree, [])
    # A broadcast output must not depend on the carry or the scanned values: batch the
    # graph over those inputs and check that no output became batched.
    try:
        _, out_bd = entry.graph.batch([0] * (n_c + len(x_leaves)) + [-1] * len(entry.captures), 1, "")
    except Exception:  # a primitive without a batching rule: skip the check
        out_bd = ()
    if any(b >= 0 for b in out_bd):
        raise ValueError("broadcasted variable has a data dependency on the scan body.")
    g = entry.graph
    g.dce()
    # Inputs the broadcast outputs don't read: any value of the right shape will do.
    from .. import lax
    x_first = [lax.index_in_dim(x, 0, axis=0, keepdims=False) if hasattr(lax, "index_in_dim") else x[0]
               for x in x_conv]
    args_all = list(c_conv) + x_first + list(entry.captures)
    graph = g if _core._top_trace(args_all) else fusion.executable_graph(_GraphEntry(g))
    outs = _core.call_graph(graph, args_all)
    return tree_util.tree_unflatten(entry.out_tree, list(outs))


def lift_checkpoint(fn, variables=True, rngs=True, concrete=False, prevent_cse=True, static_argnums=(),
                    policy=None):
    from .._src.remat import checkpoint as _checkpoint
    if isinstance(static_argnums, int):
        static_argnums = (static_argnums,)

    def inner(scope_fn, repack_fn, variable_groups, rng_groups, *args, **kwargs):
        static_argnums_ = tuple(i + 2 for i in static_argnums)
        if concrete:
            raise NotImplementedError("The concrete argument is deprecated. Use static_argnums instead.")
        keys, rebuild = _rng_unzip(rng_groups)

        def rematted(variable_groups, keys, *args, **kwargs):
            scope = scope_fn(variable_groups, rebuild(keys))
            y = fn(scope, *args, **kwargs)
            return y, repack_fn(scope)

        return _checkpoint(rematted, static_argnums=static_argnums_, prevent_cse=prevent_cse,
                           policy=policy)(variable_groups, keys, *args, **kwargs)

    return pack(inner, (variables,), (variables,), (rngs,), name="remat", enable_kwargs=True)


def lift_vjp(fn, scope, *primals, has_aux=False, reduce_axes=(), vjp_variables="params", variables=True,
             rngs=True):
    """flax.core.lift.vjp: ``(y, bwd)`` (and ``aux``) of ``fn(scope, *primals)``; ``bwd(ct)``
    gives ``(gradients of the vjp_variables, *gradients of the primals)``."""
    if reduce_axes:
        raise NotImplementedError("reduce_axes argument to vjp is deprecated")

    def inner(scope_fn, repack_fn, variable_groups, rng_groups, *args):
        vjp_vars, other_vars = variable_groups

        def wrapper(vjp_vars, *args):
            inner_scope = scope_fn((vjp_vars, other_vars), rng_groups)
            if has_aux:
                y, aux = fn(inner_scope, *args)
            else:
                y, aux = fn(inner_scope, *args), ()
            return y, (aux, repack_fn(inner_scope))

        y, bwd, (aux, out_vars) = _podlet().vjp(wrapper, vjp_vars, *args, has_aux=True)
        # a pytree (podlet's vjp_fn is one), as flax's: it can be a custom_vjp residual
        bwd_wrapper = tree_util.Partial(functools.partial(_bwd_wrapper, isinstance(scope, Scope)), bwd)
        return ((y, bwd_wrapper, aux) if has_aux else (y, bwd_wrapper)), out_vars

    return pack(inner, (vjp_variables, variables), (variables,), (rngs,), name="vjp")(scope, *primals)


def _bwd_wrapper(single_scope, bwd, tangent):
    vars_grad, *inputs_grad = bwd(tangent)
    return (vars_grad[0] if single_scope else type(vars_grad)(vars_grad), *inputs_grad)


def lift_custom_vjp(fn, forward_fn, backward_fn, grad_vars="params", nondiff_argnums=()):
    """flax.core.lift.custom_vjp: ``fn(scope, *args)`` under ``podlet.custom_vjp``, its
    differentiated inputs being the ``grad_vars`` variables and the arguments.
    ``forward_fn(scope, *args)`` returns ``(y, residuals)``; ``backward_fn(*nondiff_args,
    residuals, y_cotangent)`` returns ``(variable cotangents in the shape of the scope
    tree, *argument cotangents)``. The scope is not available in the backward pass."""

    def inner(scope_fn, repack_fn, variable_groups, rng_groups, *args):
        grad_variables, other_variables = variable_groups
        scope_tree = []

        def f(grad_variables, *args):
            scope = scope_fn((grad_variables, other_variables), rng_groups)
            y = fn(scope, *args)
            return y, repack_fn(scope)

        def f_fwd(grad_variables, *args):
            scopes = scope_fn((grad_variables, other_variables), rng_groups)
            scope_tree[:] = [scopes]
            y, res = forward_fn(scopes, *args)
            return (y, repack_fn(scopes)), res

        def f_bwd(*args):
            nondiff_args, (res, (g_y, _)) = args[:-2], args[-2:]
            var_t, *inputs_t = backward_fn(*nondiff_args, res, g_y)
            if not scope_tree:
                raise RuntimeError("custom_vjp: backward called before forward")
            var_t = (var_t,) if isinstance(scope_tree[0], Scope) else tuple(var_t)
            return (var_t, *inputs_t)

        custom = _podlet().custom_vjp(f, nondiff_argnums=nondiff_argnums)
        custom.defvjp(f_fwd, f_bwd)
        return custom(grad_variables, *args)

    return pack(inner, (grad_vars, True), (grad_vars, True), (True,), name="custom_vjp")


def lift_value_and_grad(fn, scope, *primals, has_aux=False, reduce_axes=(), variables=True, rngs=True):
    """flax.core.lift.value_and_grad: ``(y, grads of the primals)`` (``(y, aux, grads)``
    with ``has_aux``); the variables are not differentiated."""
    if reduce_axes:
        raise NotImplementedError("reduce_axes argument to value_and_grad is deprecated")

    def inner(scope_fn, repack_fn, variable_groups, rng_groups, *args):
        def wrapper(*args):
            inner_scope = scope_fn(variable_groups, rng_groups)
            if has_aux:
                y, aux = fn(inner_scope, *args)
            else:
                y, aux = fn(inner_scope, *args), ()
            return y, (aux, repack_fn(inner_scope))

        from .. import numpy as jnp
        y, bwd, (aux, out_vars) = _podlet().vjp(wrapper, *args, has_aux=True)
        inputs_grad = bwd(jnp.ones_like(y))
        return ((y, aux, inputs_grad) if has_aux else (y, inputs_grad)), out_vars

    return pack(inner, (variables,), (variables,), (rngs,), name="value_and_grad")(scope, *primals)


def lift_jvp(fn, scope, primals, tangents, variable_tangents, variables=True, rngs=True):
    """flax.core.lift.jvp: ``(y, tangent of y)`` of ``fn(scope, *primals)`` along
    `tangents` (the primals') and `variable_tangents` (a variables dict, e.g.
    ``{'params': ...}``; its collections are the ones differentiated)."""
    if isinstance(scope, Scope):
        variable_tangents = ({k: v for k, v in variable_tangents.items() if v},)
    else:
        variable_tangents = tuple({k: v for k, v in vt.items() if v} for vt in variable_tangents)
    target = tuple(variable_tangents[0].keys())

    def inner(scope_fn, repack_fn, variable_groups, rng_groups, *args):
        jvp_vars, other_vars = variable_groups

        def wrapper(vars_primals, args):
            inner_scope = scope_fn((vars_primals, other_vars), rng_groups)
            y = fn(inner_scope, *args)
            return y, repack_fn(inner_scope)

        (y, out_vars), out_tangents = _podlet().jvp(wrapper, (jvp_vars, args), (variable_tangents, tangents))
        return (y, out_tangents[0]), out_vars

    return pack(inner, (target, variables), (variables,), (rngs,), name="jvp")(scope, *primals)


def _podlet():
    import podlet
    return podlet


def lift_cond(pred, true_fun, false_fun, scope, *operands, variables=True, rngs=True):
    from .. import lax
    branches = [true_fun, false_fun]

    def inner(scope_fn, repack_fn, variable_groups, rng_groups):
        def branch_wrapper(branch_fn, *ops):
            s = scope_fn(variable_groups, rng_groups)
            y = branch_fn(s, *ops)
            return y, repack_fn(s)

        pure = [functools.partial(branch_wrapper, b) for b in branches]
        return lax.cond(pred, pure[0], pure[1], *operands)

    return pack(inner, (variables,), (variables,), (rngs,), name="cond")(scope)


def lift_switch(index, branches, scope, *operands, variables=True, rngs=True):
    from .. import lax

    def inner(scope_fn, repack_fn, variable_groups, rng_groups):
        def branch_wrapper(branch_fn, *ops):
            s = scope_fn(variable_groups, rng_groups)
            y = branch_fn(s, *ops)
            return y, repack_fn(s)

        return lax.switch(index, [functools.partial(branch_wrapper, b) for b in branches], *operands)

    return pack(inner, (variables,), (variables,), (rngs,), name="switch")(scope)


def lift_while_loop(cond_fn, body_fn, scope, init, carry_variables=False, broadcast_variables=True, split_rngs={}):
    from .. import lax
    from .. import numpy as jnp
    rng_groups_f, rng_splits = _unzip2(split_rngs.items())

    def inner(scope_fn, repack_fn, variable_groups, rng_groups):
        carry_vars, broadcast_vars = variable_groups
        keys, rebuild = _rng_unzip(rng_groups)

        def make_loop_rngs(i):
            out = []
            for g, split in zip(keys, rng_splits):
                if split:
                    g = _map_rng_keys(lambda k: _random().fold_in(k, i), g)
                out.append(g)
            return rebuild(tuple(out))

        def cond_wrapper(c):
            i, cv, carry = c
            s = scope_fn((cv, broadcast_vars), make_loop_rngs(-i), mutable_filter=False)
            return cond_fn(s, carry)

        def body_wrapper(c):
            i, cv, carry = c
            s = scope_fn((cv, broadcast_vars), make_loop_rngs(i))
            carry = body_fn(s, carry)
            (cv,) = repack_fn(s)
            return (i + 1, cv, carry)

        c = (jnp.asarray(0, jnp.int32), carry_vars, init)
        _, carry_vars, carry = lax.while_loop(cond_wrapper, body_wrapper, c)
        return carry, (carry_vars,)

    return pack(inner, (carry_variables, broadcast_variables), (carry_variables,), rng_groups_f,
                name="while_loop")(scope)


def lift_map_variables(fn, mapped_collections, map_in_fn=lambda x: x, map_out_fn=lambda x: x, init=False,
                       mutable=False, rngs=True, variables=True):
    is_target_out = mutable or init

    def wrapper(scope_fn, repack, variable_groups, rng_groups, *args, **kwargs):
        target, variables_ = variable_groups
        if init:
            scopes = scope_fn((target, variables_), rng_groups)
            flat, _ = _flatten_scopes(scopes)
            if any(not is_filter_empty(s.mutable) for s in flat):
                fn(scopes, *args, **kwargs)
                target, _ = repack(scopes)
                target = tuple(map_out_fn(x) for x in target)
        target = tuple(map_in_fn(_copy_dicts(x)) for x in target)
        mfilter = True
        if not is_target_out:
            mfilter = subtract_filters(mfilter, mapped_collections)
        scopes = scope_fn((target, variables_), rng_groups, mutable_filter=mfilter)
        y = fn(scopes, *args, **kwargs)
        out_target, out_vars = repack(scopes)
        if is_target_out:
            out_target = tuple(map_out_fn(x) for x in out_target)
        return y, (out_target, out_vars)

    in_vars = (mapped_collections, variables)
    out_vars = in_vars if is_target_out else (False, subtract_filters(variables, mapped_collections))
    return pack(wrapper, in_vars, out_vars, (rngs,), enable_kwargs=True, name="map_variables")


# ---- jit: a jitted pure function, cached per module fingerprint --------------------
class _JitContext(threading.local):
    def __init__(self):
        self.stack = []


def _hashable_filter(x):
    if isinstance(x, str):
        return (x,)
    if isinstance(x, Iterable) and not isinstance(x, DenyList):
        return tuple(x)
    return x


def _flat_counts(d, prefix=()):
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat_counts(v, prefix + (k,)))
        else:
            out[prefix + (k,)] = v
    return out


def _set_counts(d, flat):
    for path, v in flat.items():
        t = d
        for k in path[:-1]:
            t = t.setdefault(k, {})
        t[path[-1]] = v


def lift_jit(fn, variables=True, rngs=True, static_argnums=(), static_argnames=(), donate_argnums=(),
             device=None, backend=None, _compile=True):
    """flax.core.lift.jit; with ``_compile=False`` flax.core.lift.fold_rngs (the same rng
    and counter handling, the function run as it is)."""
    from .._src.core import jit as _jit
    if not isinstance(static_argnums, Iterable):
        static_argnums = (static_argnums,)
    if isinstance(static_argnames, str):
        static_argnames = (static_argnames,)
    static_argnums = (0,) + tuple(i + 2 for i in static_argnums if i > 0)
    ctx = _JitContext()
    side_effects = {}

    def jitted(fingerprint, variable_groups, keys, *args, **kwargs):
        scope_fn, repack_fn, rebuild = ctx.stack[-1]
        scope = scope_fn(variable_groups, rebuild(keys))
        y = fn(scope, fingerprint[1], *args, **kwargs)
        return y, repack_fn(scope)

    if _compile:
        jitted = _jit(jitted, static_argnums=static_argnums, static_argnames=tuple(static_argnames))

    def inner(scope_fn, repack_fn, variable_groups, rng_groups, module_hash_key, *args, **kwargs):
        keys, rebuild = _rng_unzip(rng_groups)
        flat, _ = _flatten_scopes(scope_fn(variable_groups, rebuild(keys)))
        mutable = tuple(_hashable_filter(s.mutable) for s in flat)
        flags = tuple(tuple(sorted(s.flags.items())) for s in flat)
        suffixes = tuple(l.suffix for l in tree_util.tree_leaves(rng_groups, is_leaf=lambda x: isinstance(x, LazyRng)))
        fingerprint = ((mutable, flags, suffixes), module_hash_key)
        old = [dict(_flat_counts(s.rng_counters)) for s in flat]
        ctx.stack.append((scope_fn, repack_fn, rebuild))
        try:
            res = jitted(fingerprint, variable_groups, keys, *args, **kwargs)
        finally:
            ctx.stack.pop()
        # A cache hit doesn't retrace, so replay the rng counter advance of the first trace.
        if fingerprint not in side_effects:
            side_effects[fingerprint] = [{k: v - o.get(k, 0) for k, v in _flat_counts(s.rng_counters).items()}
                                         for s, o in zip(flat, old)]
        else:
            for s, o, delta in zip(flat, old, side_effects[fingerprint]):
                _set_counts(s.rng_counters, {k: o.get(k, 0) + d for k, d in delta.items()})
        return res

    return pack(inner, (variables,), (variables,), (rngs,), name="jit" if _compile else "fold_rngs",
                enable_kwargs=True)


def lift_fold_rngs(fn, variables=True, rngs=True):
    return lift_jit(fn, variables=variables, rngs=rngs, _compile=False)


# =====================================================================================
# Module-level lifting (flax.linen.transforms)
# =====================================================================================
def _export_state(state):
    setup = _SetupState.TRANSFORMED if state.setup_called else _SetupState.NEW
    return _ModuleInternalState(in_compact_method=state.in_compact_method, in_setup=state.in_setup,
                                setup_called=setup, is_initialized=state.is_initialized,
                                autoname_cursor=dict(state.autoname_cursor))


def _reimport_state(state, other):
    state.in_compact_method = other.in_compact_method
    state.in_setup = other.in_setup
    state.is_initialized = other.is_initialized
    state.autoname_cursor = dict(other.autoname_cursor)


@dataclasses.dataclass(frozen=True)
class _VariablePlaceholder:
    collection: str
    name: str
    unbox: bool
    id: int


@dataclasses.dataclass(frozen=True)
class _InstancePlaceholder:
    cls: type
    attrs: dict
    id: int


def _is_placeholder(x):
    return isinstance(x, (_VariablePlaceholder, _InstancePlaceholder))


def _module_fields(m):
    return {f.name: getattr(m, f.name) for f in dataclasses.fields(m) if f.name != "parent" and f.init}


def _tree_map_modules(fn, tree):
    """Maps fn over the leaves of a pytree, treating Modules/Variables/placeholders as leaves."""
    return tree_util.tree_map(fn, tree, is_leaf=lambda x: isinstance(x, (Module, Variable)) or _is_placeholder(x))


def _memo_by_identity():
    """A decorator memoising fn per Module / Variable / placeholder identity (one cache per
    call of get_module_scopes / set_module_scopes), so a module reachable twice maps to
    one scope or placeholder; other values pass straight to fn."""
    refs = {}

    def memo(fn):
        def wrapped(x):
            if isinstance(x, (Variable, Module)):
                key = x._id
            elif _is_placeholder(x):
                key = x.id
            else:
                return fn(x)
            if key not in refs:
                refs[key] = fn(x)
            return refs[key]
        return wrapped
    return memo


def get_module_scopes(module, args=None, kwargs=None):
    """The scopes of a bound module, of the bound modules / Variables in its dataclass
    fields, and of Modules / Variables passed as arguments (replaced by placeholders)."""
    scopes = []
    memo = _memo_by_identity()

    @memo
    def get_arg_scope(x):
        if isinstance(x, Variable) and isinstance(x.scope, Scope):
            scopes.append(x.scope)
            return _VariablePlaceholder(x.collection, x.name, x.unbox, x._id)
        if isinstance(x, Module) and isinstance(x.scope, Scope):
            x._try_setup(shallow=True)
            scopes.append(x.scope)
            attrs = _tree_map_modules(get_arg_scope, _module_fields(x))
            return _InstancePlaceholder(type(x), attrs, x._id)
        return x

    new_args, new_kwargs = _tree_map_modules(get_arg_scope, (tuple(args or ()), dict(kwargs or {})))

    @memo
    def get_scopes(m):
        m._try_setup(shallow=True)
        for leaf in tree_util.tree_leaves(_module_fields(m), is_leaf=lambda x: isinstance(x, (Module, Variable))):
            if isinstance(leaf, Module) and isinstance(leaf.scope, Scope):
                get_scopes(leaf)
            elif isinstance(leaf, Variable) and isinstance(leaf.scope, Scope):
                scopes.append(leaf.scope)
        scopes.append(m.scope)
        return m

    get_scopes(module)
    return scopes, new_args, new_kwargs


def set_module_scopes(module, args, kwargs, scopes):
    idx = 0
    memo = _memo_by_identity()

    @memo
    def set_arg_scope(x):
        nonlocal idx
        if isinstance(x, _VariablePlaceholder):
            v = Variable(scopes[idx], x.collection, x.name, unbox=x.unbox)
            idx += 1
            return v
        if isinstance(x, _InstancePlaceholder):
            s = scopes[idx]
            idx += 1
            attrs = _tree_map_modules(set_arg_scope, x.attrs)
            return x.cls(parent=s, **attrs)
        return x

    new_args, new_kwargs = _tree_map_modules(set_arg_scope, (args, kwargs))

    @memo
    def set_scopes(m):
        nonlocal idx

        def inner(x):
            nonlocal idx
            if isinstance(x, Module) and isinstance(x.scope, Scope):
                return set_scopes(x)
            if isinstance(x, Variable) and isinstance(x.scope, Scope):
                v = Variable(scopes[idx], x.collection, x.name, unbox=x.unbox)
                idx += 1
                return v
            return x

        new_attrs = _tree_map_modules(inner, _module_fields(m))
        new_m = m.clone(parent=scopes[idx], **new_attrs)
        idx += 1
        return new_m

    new_module = set_scopes(module)
    assert len(scopes) == idx, f"scope list mismatch {len(scopes)} != {idx}"
    return new_module, new_args, new_kwargs


def _test_transformed_return_values(tree, method_name):
    leaves = tree_util.tree_leaves(tree, is_leaf=lambda x: isinstance(x, (Module, Variable)))
    if any(isinstance(x, (Module, Variable)) for x in leaves):
        raise TransformedMethodReturnValueError(method_name)


def _module_hash_key(module):
    """A hashable fingerprint of a module's class and attributes (nn.jit's cache key)."""
    def fp(v):
        if isinstance(v, Module):
            return (type(v), tuple((k, fp(x)) for k, x in _module_fields(v).items()))
        try:
            hash(v)
            return v
        except TypeError:
            if isinstance(v, (list, tuple)):
                return tuple(fp(x) for x in v)
            if isinstance(v, dict):
                return tuple(sorted((k, fp(x)) for k, x in v.items()))
            return ("id", id(v))
    return (type(module), tuple((k, fp(v)) for k, v in _module_fields(module).items()))


def module_class_lift_transform(transform, module_class, *trafo_args, methods=None, **trafo_kwargs):
    if methods is None:
        class_trafo_args = {"__call__": (trafo_args, trafo_kwargs)}
    elif isinstance(methods, (list, tuple)):
        class_trafo_args = {m: (trafo_args, trafo_kwargs) for m in methods}
    elif isinstance(methods, dict):
        class_trafo_args = {k: ((), v) for k, v in methods.items()}
    else:
        raise ValueError("transform methods argument must be None, tuple, list, or dict.")
    if isinstance(module_class, functools.partial) and issubclass(module_class.func, Module):
        partial_object, module_class = module_class, module_class.func
    else:
        partial_object = None

    def create_trans_fn(fn_name, fn_trafo_args):
        fn = getattr(module_class, fn_name)
        t_args, t_kwargs = fn_trafo_args

        @functools.wraps(fn)
        def wrapped_fn(self, *args, **kwargs):
            state = _export_state(self._state)

            def core_fn(scopes, *args, **kwargs):
                cloned = module_class(parent=None, **_module_fields(self))
                cloned, args, kwargs = set_module_scopes(cloned, args, kwargs, scopes)
                object.__setattr__(cloned, "_state", _export_state(state))
                res = fn(cloned, *args, **kwargs)
                _reimport_state(self._state, cloned._state)
                _test_transformed_return_values(res, fn_name)
                return res

            trafo_fn = transform(core_fn, *t_args, **t_kwargs)
            module_scopes, args, kwargs = get_module_scopes(self, args, kwargs)
            return trafo_fn(module_scopes, *args, **kwargs)

        return wrapped_fn

    transformed_fns = {n: create_trans_fn(n, a) for n, a in class_trafo_args.items()}
    cls = type(transform.__name__.capitalize() + module_class.__name__, (module_class,), transformed_fns)
    if partial_object is not None:
        cls = functools.partial(cls, *partial_object.args, **partial_object.keywords)
    return cls


def decorator_lift_transform(transform, class_fn, *trafo_args, multi_scope=True, **trafo_kwargs):
    class_fns = class_fn if isinstance(class_fn, tuple) else (class_fn,)
    prewrapped_fns = [_wrap_method_once(f) for f in class_fns]

    @functools.wraps(prewrapped_fns[0])
    def wrapped_fn(self, *args, **kwargs):
        state = _export_state(self._state)

        def core_fn(prewrapped_fn, class_fn, scopes, *args, **kwargs):
            if not multi_scope:
                scopes = [scopes]
            cloned, args, kwargs = set_module_scopes(self, args, kwargs, scopes)
            object.__setattr__(cloned, "_state", _export_state(state))
            res = prewrapped_fn(cloned, *args, **kwargs)
            _reimport_state(self._state, cloned._state)
            _test_transformed_return_values(res, getattr(class_fn, "__name__", None))
            return res

        core_fns = [functools.partial(core_fn, p, c) for p, c in zip(prewrapped_fns, class_fns)]
        trafo_fn = transform(*core_fns, *trafo_args, **trafo_kwargs)
        module_scopes, args, kwargs = get_module_scopes(self, args, kwargs)
        if not multi_scope:
            if len(module_scopes) != 1:
                raise NotImplementedError("This transform does not yet support Modules that include other "
                                          "Modules passed as arguments.")
            module_scopes = module_scopes[0]
        return trafo_fn(module_scopes, *args, **kwargs)

    return wrapped_fn


def _is_module_class(target):
    return ((inspect.isclass(target) and issubclass(target, Module))
            or (isinstance(target, functools.partial) and _is_module_class(target.func)))


def lift_transform(transform, target, *trafo_args, methods=None, **trafo_kwargs):
    if _is_module_class(target):
        return module_class_lift_transform(transform, target, *trafo_args, methods=methods, **trafo_kwargs)
    if callable(target) and not isinstance(target, Module):
        return decorator_lift_transform(transform, target, *trafo_args, **trafo_kwargs)
    raise TransformTargetError(target)


def lift_direct_transform(transform, targets, mdl, *args, multi_scope=True, **kwargs):
    for target in targets:
        if _is_module_class(target):
            raise ValueError(f"The {transform.__name__} transform can only be applied on a Module method. That is "
                             "function that takes a Module instance as its first arg.")
        if not callable(target):
            raise ValueError("transform target must be callable")
    targets = tuple(_get_unbound_fn(t) for t in targets)
    aug_transform = lambda *fns: functools.partial(transform, *fns)  # noqa: E731
    return decorator_lift_transform(aug_transform, targets, multi_scope=multi_scope)(mdl, *args, **kwargs)


# =====================================================================================
# Public API (flax.linen names and signatures)
# =====================================================================================
def vmap(target, variable_axes={}, split_rngs={}, in_axes=0, out_axes=0, axis_size=None, axis_name=None,
         spmd_axis_name=None, metadata_params={}, methods=None):
    """Lifted ``podlet.vmap`` (flax.linen.vmap): ``variable_axes={'params': 0}`` maps over
    stacked parameters (an ensemble; split the 'params' rng so they differ),
    ``{'params': None}`` shares them across the mapped axis."""
    def vmap_(fn, *a, **k):
        return lift_vmap(fn, *a, **k)
    vmap_.__name__ = "vmap"
    return lift_transform(vmap_, target, variable_axes, split_rngs, methods=methods, in_axes=in_axes,
                          out_axes=out_axes, axis_size=axis_size, axis_name=axis_name,
                          metadata_params=metadata_params, spmd_axis_name=spmd_axis_name)


def scan(target, variable_axes={}, variable_broadcast=False, variable_carry=False, split_rngs={}, in_axes=0,
         out_axes=0, length=None, reverse=False, unroll=1, data_transform=None, metadata_params={},
         methods=None, _split_transpose=False, check_constancy_invariants=True):
    """Lifted ``podlet.lax.scan`` (flax.linen.scan). The target's ``__call__(carry, *xs)``
    returns ``(carry, ys)``; ``variable_axes`` collections are stacked along the given
    axis (one slice per iteration), ``variable_broadcast`` collections are shared by all
    iterations, ``variable_carry`` collections are carried from one iteration to the
    next; ``split_rngs`` streams get a different key per iteration."""
    def scan_(fn, **k):
        return lift_scan(fn, **k)
    scan_.__name__ = "scan"
    return lift_transform(scan_, target, variable_axes=variable_axes, variable_broadcast=variable_broadcast,
                          variable_carry=variable_carry, split_rngs=split_rngs, in_axes=in_axes,
                          out_axes=out_axes, length=length, reverse=reverse, unroll=unroll,
                          _split_transpose=_split_transpose, data_transform=data_transform,
                          metadata_params=metadata_params, methods=methods,
                          check_constancy_invariants=check_constancy_invariants)


def checkpoint(target, variables=True, rngs=True, concrete=False, prevent_cse=True, static_argnums=(),
               policy=None, methods=None):
    """Lifted ``podlet.checkpoint`` (flax.linen.checkpoint / remat): the target's
    intermediates are recomputed in the backward pass. ``static_argnums`` counts
    ``self`` as argument 0, as in Flax."""
    if isinstance(static_argnums, int):
        static_argnums = (static_argnums,)
    static_argnums = tuple(i - 1 for i in static_argnums)

    def checkpoint_(fn, **k):
        return lift_checkpoint(fn, **k)
    checkpoint_.__name__ = "checkpoint"
    return lift_transform(checkpoint_, target, variables=variables, rngs=rngs, concrete=concrete,
                          static_argnums=static_argnums, prevent_cse=prevent_cse, policy=policy,
                          methods=methods)


remat = checkpoint


def jit(target, variables=True, rngs=True, static_argnums=(), static_argnames=(), donate_argnums=(),
        device=None, backend=None, methods=None):
    """Lifted ``podlet.jit`` (flax.linen.jit): the method is traced once per module
    configuration, mutability and argument shapes, and reruns the cached plan."""
    if _is_module_class(target):
        return _jit_class(target, methods, variables=variables, rngs=rngs, static_argnums=static_argnums,
                          static_argnames=static_argnames, donate_argnums=donate_argnums)
    if callable(target) and not isinstance(target, Module):
        return _jit_fn(target, variables=variables, rngs=rngs, static_argnums=static_argnums,
                       static_argnames=static_argnames, donate_argnums=donate_argnums)
    raise TransformTargetError(target)


def _fork_rngs(module):
    """Replaces each rng stream of the module's scope by a fresh key drawn from it for the
    duration of the call (flax.linen.transforms.fork_rngs)."""
    class _Ctx:
        def __enter__(self):
            self.saved = None
            if module.scope is None:
                return
            self.saved = dict(module.scope.rngs)
            module.scope.rngs = {name: LazyRng.create(module.make_rng(name)) for name in self.saved}

        def __exit__(self, *exc):
            if self.saved is not None:
                module.scope.rngs = self.saved
    return _Ctx()


def _jit_fn(class_fn, _lift=lift_jit, **trafo_kwargs):
    prewrapped = _wrap_method_once(class_fn)
    trafo_fn = None

    @functools.wraps(prewrapped)
    def wrapped_fn(self, *args, **kwargs):
        nonlocal trafo_fn
        state = _export_state(self._state)
        with _fork_rngs(self):
            def core_fn(scopes, module_hash, *args, **kwargs):
                this = module_hash[1]
                cloned, args, kwargs = set_module_scopes(this, args, kwargs, scopes)
                object.__setattr__(cloned, "_state", _export_state(state))
                res = prewrapped(cloned, *args, **kwargs)
                _reimport_state(this._state, cloned._state)
                _test_transformed_return_values(res, getattr(class_fn, "__name__", None))
                return res

            if trafo_fn is None:
                trafo_fn = _lift(core_fn, **trafo_kwargs)
            module_scopes, args, kwargs = get_module_scopes(self, args, kwargs)
            return trafo_fn(module_scopes, _ModuleHash(self), *args, **kwargs)

    return wrapped_fn


class _ModuleHash(tuple):
    """(fingerprint, module): hashes and compares by the fingerprint only, so a jitted
    method is reused by every module with the same class and attributes."""

    def __new__(cls, module):
        return super().__new__(cls, (_module_hash_key(module), module))

    def __hash__(self):
        return hash(self[0])

    def __eq__(self, other):
        return isinstance(other, _ModuleHash) and self[0] == other[0]


def _jit_class(module_class, methods, _lift=lift_jit, _prefix="Jit", **trafo_kwargs):
    names = ["__call__"] if methods is None else list(methods)
    if isinstance(module_class, functools.partial):
        partial_object, module_class = module_class, module_class.func
    else:
        partial_object = None

    def create(fn_name):
        fn = getattr(module_class, fn_name)
        trafo_fn = None

        @functools.wraps(fn)
        def wrapped_fn(self, *args, **kwargs):
            nonlocal trafo_fn
            state = _export_state(self._state)
            with _fork_rngs(self):
                def core_fn(scopes, module_hash, *args, **kwargs):
                    this = module_hash[1]
                    cloned = module_class(parent=None, **_module_fields(this))
                    cloned, args, kwargs = set_module_scopes(cloned, args, kwargs, scopes)
                    object.__setattr__(cloned, "_state", _export_state(state))
                    res = fn(cloned, *args, **kwargs)
                    _reimport_state(this._state, cloned._state)
                    _test_transformed_return_values(res, fn_name)
                    return res

                if trafo_fn is None:
                    trafo_fn = _lift(core_fn, **trafo_kwargs)
                module_scopes, args, kwargs = get_module_scopes(self, args, kwargs)
                return trafo_fn(module_scopes, _ModuleHash(self), *args, **kwargs)

        return wrapped_fn

    cls = type(_prefix + module_class.__name__, (module_class,), {n: create(n) for n in names})
    if partial_object is not None:
        cls = functools.partial(cls, *partial_object.args, **partial_object.keywords)
    return cls


def map_variables(target, mapped_collections=True, trans_in_fn=lambda x: x, trans_out_fn=lambda x: x,
                  init=False, mutable=False, rngs=True, variables=True, methods=None):
    """flax.linen.map_variables: the target sees ``trans_in_fn(variables)`` of the mapped
    collections; with ``mutable=True`` or ``init=True`` updates go back through
    ``trans_out_fn``."""
    def map_variables_(fn, *a, **k):
        return lift_map_variables(fn, *a, **k)
    map_variables_.__name__ = "map_variables"
    return lift_transform(map_variables_, target, mapped_collections, trans_in_fn, trans_out_fn, init, mutable,
                          rngs, variables, methods=methods)


def while_loop(cond_fn, body_fn, mdl, init, carry_variables=False, broadcast_variables=True, split_rngs={}):
    """Lifted ``lax.while_loop``: ``cond_fn(mdl, c)`` / ``body_fn(mdl, c)``; carried
    collections are mutable in the body, broadcast ones read-only. Variables can't be
    created inside the loop (call the body once first during init, as in Flax)."""
    return lift_direct_transform(lift_while_loop, (cond_fn, body_fn), mdl, init, carry_variables,
                                 broadcast_variables, split_rngs)


def _cond_wrapper(t_fn, f_fn, scope, pred, *ops, variables, rngs):
    return lift_cond(pred, t_fn, f_fn, scope, *ops, variables=variables, rngs=rngs)


def cond(pred, true_fun, false_fun, mdl, *operands, variables=True, rngs=True):
    """Lifted ``lax.cond``: ``true_fun(mdl, *operands)`` if pred else ``false_fun(...)``;
    both branches must create the same variables."""
    return lift_direct_transform(_cond_wrapper, (true_fun, false_fun), mdl, pred, *operands, variables=variables,
                                 rngs=rngs)


def _switch_wrapper(*args, variables, rngs, n_branches):
    branches = args[:n_branches]
    scope, index, *operands = args[n_branches:]
    return lift_switch(index, branches, scope, *operands, variables=variables, rngs=rngs)


def switch(index, branches, mdl, *operands, variables=True, rngs=True):
    """Lifted ``lax.switch``: ``branches[index](mdl, *operands)``."""
    return lift_direct_transform(_switch_wrapper, tuple(branches), mdl, index, *operands, variables=variables,
                                 rngs=rngs, n_branches=len(branches))


def vjp(fn, mdl, *primals, has_aux=False, reduce_axes=(), vjp_variables="params", variables=True, rngs=True,
        multi_scope=False):
    """Lifted ``podlet.vjp`` (flax.linen.vjp) of ``fn(mdl, *primals)``: returns ``(y,
    vjp_fn)`` (``(y, vjp_fn, aux)`` with ``has_aux``); ``vjp_fn(ct)`` gives ``(gradients
    of mdl's vjp_variables collections, *gradients of the primals)``."""
    if reduce_axes:
        raise NotImplementedError("reduce_axes argument to vjp is deprecated")
    return lift_direct_transform(lift_vjp, (fn,), mdl, *primals, multi_scope=multi_scope, has_aux=has_aux,
                                 vjp_variables=vjp_variables, variables=variables, rngs=rngs)


def value_and_grad(fn, mdl, *primals, has_aux=False, reduce_axes=(), variables=True, rngs=True):
    """Lifted ``podlet.value_and_grad`` (flax.linen.value_and_grad) of the scalar
    ``fn(mdl, *primals)`` with respect to the primals: ``(y, grads)`` (``((y, aux),
    grads)`` with ``has_aux``)."""
    if reduce_axes:
        raise NotImplementedError("reduce_axes argument to value_and_grad is deprecated")
    out = lift_direct_transform(lift_value_and_grad, (fn,), mdl, *primals, has_aux=has_aux, variables=variables,
                                rngs=rngs)
    y = out[0]
    if tuple(y.shape) != ():
        raise ValueError(f"grad can only work on functions with scalar-valued outputs. out shape={y.shape}")
    return ((y, out[1]), out[2]) if has_aux else (y, out[1])


def grad(fn, mdl, *primals, has_aux=False, reduce_axes=(), variables=True, rngs=True):
    """Lifted ``podlet.grad`` (flax.linen.grad): the gradients of the scalar ``fn(mdl,
    *primals)`` with respect to the primals (``(grads, aux)`` with ``has_aux``)."""
    if reduce_axes:
        raise NotImplementedError("reduce_axes argument to grad is deprecated")
    if has_aux:
        (_, aux), argument_grads = value_and_grad(fn, mdl, *primals, has_aux=True, variables=variables, rngs=rngs)
        return argument_grads, aux
    _, argument_grads = value_and_grad(fn, mdl, *primals, variables=variables, rngs=rngs)
    return argument_grads


def jvp(fn, mdl, primals, tangents, variable_tangents, variables=True, rngs=True):
    """Lifted ``podlet.jvp`` (flax.linen.jvp) of ``fn(mdl, *primals)``: ``(y, tangent of
    y)`` along `tangents` and `variable_tangents` (e.g. ``{'params': ...}`` for mdl's
    parameters)."""
    return lift_direct_transform(lift_jvp, (fn,), mdl, primals, tangents, variable_tangents, multi_scope=False,
                                 variables=variables, rngs=rngs)


def _custom_vjp_single_scope_fn(fn, backward_fn, grad_vars="params", nondiff_argnums=()):
    nodiff_fn = functools.partial(fn, needs_residual=False)
    forward_fn = functools.partial(fn, needs_residual=True)
    return lift_custom_vjp(nodiff_fn, forward_fn, backward_fn, grad_vars, nondiff_argnums)


def custom_vjp(fn, forward_fn, backward_fn, grad_vars="params", nondiff_argnums=()):
    """Lifted ``podlet.custom_vjp`` (flax.linen.custom_vjp): ``fn(mdl, *args)`` with the
    reverse-mode rule of ``forward_fn(mdl, *args) -> (y, residuals)`` and
    ``backward_fn(*nondiff_args, residuals, y_cotangent) -> (cotangents of mdl's
    grad_vars collections, *cotangents of args)``. ``fn`` runs when no gradient is
    taken. The vjp_fn of ``nn.vjp`` may be the residual (it is a pytree); the module is
    not available in backward_fn."""
    def shared_forward_fn(*args, needs_residual, **kwargs):
        if needs_residual:
            return forward_fn(*args, **kwargs)
        return fn(*args, **kwargs)

    return decorator_lift_transform(_custom_vjp_single_scope_fn, shared_forward_fn, backward_fn=backward_fn,
                                    grad_vars=grad_vars, nondiff_argnums=nondiff_argnums, multi_scope=False)


def fold_rngs(target, variables=True, rngs=True):
    """flax.linen.fold_rngs: the target's rng streams are forked at each call (each
    stream replaced by a fresh key drawn from it, as ``nn.jit`` does) and its rng
    counters advance as on the first call; a module class or a method."""
    if _is_module_class(target):
        return _jit_class(target, None, _lift=lift_fold_rngs, _prefix="Fold_rngs", variables=variables,
                          rngs=rngs)
    if callable(target) and not isinstance(target, Module):
        return _jit_fn(target, _lift=lift_fold_rngs, variables=variables, rngs=rngs)
    raise TransformTargetError(target)


def remat_scan(target, lengths=(), policy=None, variable_broadcast=False, variable_carry=False,
               variable_axes={True: 0}, split_rngs={True: True}):
    """flax.linen.remat_scan: nested scans of checkpointed bodies, one per entry of
    ``lengths`` (parameters stacked with one leading axis per level)."""
    def remat_scan_(fn, **k):
        return _lift_remat_scan(fn, **k)
    remat_scan_.__name__ = "remat_scan"
    return lift_transform(remat_scan_, target, lengths=lengths, variable_broadcast=variable_broadcast,
                          variable_carry=variable_carry, variable_axes=variable_axes, split_rngs=split_rngs,
                          policy=policy)


def _lift_remat_scan(body_fn, lengths, policy=None, variable_broadcast=False, variable_carry=False,
                     variable_axes={True: 0}, split_rngs={True: True}):
    scan_fn = functools.partial(lift_scan, variable_broadcast=variable_broadcast, variable_carry=variable_carry,
                                variable_axes=variable_axes, split_rngs=split_rngs)
    if len(lengths) == 1:
        def wrapper(scope, carry):
            return body_fn(scope, carry), ()
        fn = lambda scope, c: scan_fn(wrapper, length=lengths[0])(scope, c)[0]  # noqa: E731
    else:
        @functools.partial(lift_checkpoint, policy=policy, prevent_cse=False)
        def inner_loop(scope, carry):
            carry = _lift_remat_scan(body_fn, lengths[1:], policy, variable_broadcast, variable_carry,
                                     variable_axes, split_rngs)(scope, carry)
            return carry, ()
        fn = lambda scope, c: scan_fn(inner_loop, length=lengths[0])(scope, c)[0]  # noqa: E731
    return fn
