"""jax.lax.sort (several operands, num_keys) and sort_key_val, over the stable argsort
and take_along_axis primitives (issue 26)."""
import numpy as _np

from .. import lax
from .. import numpy as jnp
from .core import bind

__all__ = ["sort", "sort_key_val"]


def _sort_perm(keys, axis):
    """The permutation sorting `keys` lexicographically (first key most significant)
    along axis in XLA's order (-inf < ... < -0.0 == 0.0 < ... < inf < NaN, whatever the NaN's sign): one
    stable argsort per key, least significant first."""
    perm = None
    for k in reversed(keys):
        k = lax.stop_gradient(k)
        if k.dtype.kind == "f" or k.dtype == jnp.bfloat16:
            k = bind("add", k, jnp.zeros((), k.dtype))  # -0.0 + 0.0 = 0.0: XLA's sort ties them
            k = bind("select", bind("ne", k, k), jnp.full(k.shape, _np.nan, k.dtype), k)  # every NaN last
        kk = lax._sort_key(k)
        if perm is not None:
            kk = bind("take_along_axis", kk, perm, axis=axis)
        order = bind("argsort", kk, axis=axis, descending=0)
        perm = order if perm is None else bind("take_along_axis", perm, order, axis=axis)
    return perm


def sort(operand, dimension=-1, is_stable=True, num_keys=1):
    """jax.lax.sort: sorts one array, or a sequence of arrays of one shape by their first
    `num_keys` (lexicographically) along `dimension`, carrying the others along. Always
    stable (is_stable=False allows any order of ties; this one is as good as any).
    Gradients flow to every operand through the permutation."""
    single = not isinstance(operand, (tuple, list))
    ops = [jnp.asarray(operand)] if single else [jnp.asarray(o) for o in operand]
    if not ops:
        raise ValueError("lax.sort: at least one operand is required")
    shape = ops[0].shape
    for o in ops:
        if o.shape != shape:
            raise TypeError(f"Arguments to sort must have equal shapes, got: "
                            f"{' '.join(str(tuple(x.shape)) for x in ops)}")
    nd = len(shape)
    if nd == 0:
        raise ValueError("lax.sort: operands must have rank >= 1")
    if not -nd <= dimension < nd:
        raise ValueError(f"lax.sort: dimension {dimension} is out of bounds for operands of rank {nd}")
    axis = dimension % nd
    num_keys = int(num_keys)
    if not 1 <= num_keys <= len(ops):
        raise ValueError(f"lax.sort: num_keys={num_keys} must be >= 1 and <= the number of operands {len(ops)}")
    perm = _sort_perm(ops[:num_keys], axis)
    out = [bind("take_along_axis", o, perm, axis=axis) for o in ops]
    return out[0] if single else tuple(out)


def sort_key_val(keys, values, dimension=-1, is_stable=True):
    """jax.lax.sort_key_val: (keys sorted along `dimension`, values in the same order)."""
    k, v = sort((keys, values), dimension=dimension, is_stable=is_stable, num_keys=1)
    return k, v

