"""jax.lax collectives podlet builds from its pmap primitives (issue 26): axis_size,
pshuffle (a ppermute by source index), pbroadcast (every replica gets one replica's
value: a psum of that replica's value and zeros elsewhere, exact), all_to_all and
pswapaxes (an all_gather, then each replica keeps its chunk of every source: n times
the memory of a real all-to-all, the same values)."""
from .. import lax
from .. import numpy as jnp
from .. import tree_util
from . import pmap as _pmap

__all__ = ["axis_size", "pshuffle", "pbroadcast", "all_to_all", "pswapaxes"]


def axis_size(axis_name):
    """jax.lax.axis_size: the number of replicas along a pmap axis (a Python int)."""
    return _pmap.axis_size(axis_name)


def pshuffle(x, axis_name, perm):
    """jax.lax.pshuffle: replica i receives the x of replica perm[i] (perm a permutation
    of range(axis_size))."""
    n = _pmap.axis_size(axis_name)
    perm = [int(p) for p in perm]
    if sorted(perm) != list(range(n)):
        raise ValueError(f"`perm` does not represent a permutation: {perm}")
    return lax.ppermute(x, axis_name, [(src, dst) for dst, src in enumerate(perm)])


def pbroadcast(x, axis_name, source):
    """jax.lax.pbroadcast: every replica gets the x of replica `source`."""
    n = _pmap.axis_size(axis_name)
    if not 0 <= int(source) < n:
        raise ValueError(f"pbroadcast: source {source} is out of range for an axis of size {n}")
    me = lax.axis_index(axis_name)

    def one(v):
        keep = lax.eq(me, jnp.asarray(jnp.int32(int(source))))
        masked = jnp.where(keep, v, jnp.zeros_like(v))
        if v.dtype == jnp.bool_:
            return lax.pmax(lax.convert_element_type(masked, jnp.int32), axis_name) > 0
        return lax.psum(masked, axis_name)
    return tree_util.tree_map(one, x)


def all_to_all(x, axis_name, split_axis, concat_axis, *, axis_index_groups=None, tiled=False):
    """jax.lax.all_to_all: x is cut into axis_size chunks along split_axis, chunk j goes
    to replica j, which stacks what it receives (by source) along concat_axis: a new
    axis replacing split_axis, or, when tiled, concatenated into concat_axis."""
    if axis_index_groups is not None:
        raise ValueError("all_to_all: podlet does not support axis_index_groups")
    n = _pmap.axis_size(axis_name)
    me = lax.axis_index(axis_name)

    def one(v):
        nd = v.ndim
        sa, ca = split_axis % nd, concat_axis % (nd if tiled else nd)
        g = lax.all_gather(v, axis_name)  # (n_source, *v.shape)
        if not tiled:
            if v.shape[sa] != n:
                raise ValueError(f"all_to_all: split_axis {split_axis} has size {v.shape[sa]}, expected the axis "
                                 f"size {n} (or pass tiled=True)")
            mine = lax.dynamic_index_in_dim(g, me, sa + 1, keepdims=False)  # (n_source, *shape without sa)
            return jnp.moveaxis(mine, 0, ca)
        if v.shape[sa] % n:
            raise ValueError(f"all_to_all: split_axis {split_axis} of size {v.shape[sa]} is not divisible by the "
                             f"axis size {n}")
        c = v.shape[sa] // n
        mine = lax.dynamic_slice_in_dim(g, me * c, c, sa + 1)  # (n_source, ..., c at sa, ...)
        mine = jnp.moveaxis(mine, 0, ca)  # source axis just before the concat axis
        shape = list(mine.shape)
        merged = shape[:ca] + [shape[ca] * shape[ca + 1]] + shape[ca + 2:]
        return lax.reshape(mine, merged)
    return tree_util.tree_map(one, x)


def pswapaxes(x, axis_name, axis, *, axis_index_groups=None):
    """jax.lax.pswapaxes: swaps the mapped axis with x's `axis` (of the axis size):
    all_to_all(x, axis_name, axis, axis)."""
    return all_to_all(x, axis_name, axis, axis, axis_index_groups=axis_index_groups)
