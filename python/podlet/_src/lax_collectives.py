"""jax.lax collectives podlet builds from its pmap primitives (issue 26): axis_size,
pshuffle (a ppermute by source index) and pbroadcast (every replica gets one
replica's value: a psum of that replica's value and zeros elsewhere, exact)."""
from .. import lax
from .. import numpy as jnp
from .. import tree_util
from . import pmap as _pmap

__all__ = ["axis_size", "pshuffle", "pbroadcast"]


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
