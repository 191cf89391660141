"""jax.lax's array-construction and shape helpers (issue 26): full, full_like, empty,
broadcast_to_rank / _shapes / _like, tile, stack, unstack, split, collapse, the
index_in_dim family, index_take, batch_matmul, dtype, RoundingMethod and
optimization_barrier, over podlet.lax's primitives."""
import builtins as _bi
import enum
import operator

import numpy as _np

from .. import lax
from .. import numpy as jnp
from . import dtypes as _dtypes
from .core import Array, Tracer

__all__ = ["full", "full_like", "empty", "broadcast_to_rank", "broadcast_shapes", "broadcast_like", "tile",
           "stack", "unstack", "split", "collapse", "index_in_dim", "dynamic_index_in_dim",
           "dynamic_update_index_in_dim", "dynamic_update_slice_in_dim", "index_take", "batch_matmul",
           "DotDimensionNumbers", "dtype", "RoundingMethod", "optimization_barrier", "shape_as_value", "composite",
           "with_sharding_constraint"]

DotDimensionNumbers = tuple  # ((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch)), as jax's alias


class RoundingMethod(enum.IntEnum):
    """lax.round's tie rule: AWAY_FROM_ZERO (0, the default) or TO_NEAREST_EVEN (1)."""
    AWAY_FROM_ZERO = 0
    TO_NEAREST_EVEN = 1


def _shape(shape, what):
    try:
        return tuple(operator.index(d) for d in (shape if _np.iterable(shape) else (shape,)))
    except TypeError:
        raise TypeError(f"lax.{what}: shape must be a sequence of integers, got {shape!r}") from None


def full(shape, fill_value, dtype=None, *, sharding=None):
    """jax.lax.full: an array of `shape` filled with the scalar `fill_value` (weakly typed
    when dtype is None and fill_value is a Python scalar)."""
    shape = _shape(shape, "full")
    if _np.ndim(fill_value) != 0:
        raise TypeError(f"full must be called with scalar fill_value, got fill_value.shape {_np.shape(fill_value)}.")
    return jnp.full(shape, fill_value, dtype)


def full_like(x, fill_value, dtype=None, shape=None, sharding=None):
    """jax.lax.full_like: full(shape or x.shape, fill_value, dtype or x.dtype); keeps x's
    weak type when dtype is None."""
    if _np.ndim(fill_value) != 0:
        raise TypeError(f"full must be called with scalar fill_value, got fill_value.shape {_np.shape(fill_value)}.")
    a = x if isinstance(x, (Array, Tracer)) else jnp.asarray(x)
    shp = tuple(a.shape) if shape is None else _shape(shape, "full_like")
    out = jnp.full(shp, fill_value, a.dtype if dtype is None else dtype)
    if dtype is None and jnp._weak(x):
        out = jnp._weak_if(out, x)
    return out


def empty(shape, dtype, *, out_sharding=None):
    """jax.lax.empty: an array of `shape` and `dtype` whose values are unspecified (zeros here)."""
    return jnp.zeros(_shape(shape, "empty"), dtype)


def broadcast_to_rank(x, rank):
    """jax.lax.broadcast_to_rank: x with leading unit dimensions up to `rank`."""
    a = jnp.asarray(x)
    nd = a.ndim
    if nd >= rank:
        return a
    return lax.broadcast(a, (1,) * (rank - nd))


def broadcast_shapes(*shapes):
    """jax.lax.broadcast_shapes: the NumPy broadcast of shapes (a tuple)."""
    if len(shapes) == 1:
        return tuple(shapes[0])
    shapes = [tuple(int(d) for d in s) for s in shapes]
    nd = _bi.max(len(s) for s in shapes)
    padded = [(1,) * (nd - len(s)) + s for s in shapes]
    out = []
    for i in range(nd):
        sizes = {s[i] for s in padded} - {1}
        if len(sizes) > 1:
            raise ValueError(f"Incompatible shapes for broadcasting: shapes={[tuple(s) for s in shapes]}")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def broadcast_like(arr, like_arr):
    """jax.lax.broadcast_like: arr broadcast (leading dimensions) to like_arr's shape."""
    a = jnp.asarray(arr)
    shape = tuple(jnp.shape(like_arr))
    return lax.broadcast(a, shape[:len(shape) - a.ndim]) if a.ndim < len(shape) else a


def tile(operand, reps):
    """jax.lax.tile: operand repeated reps[i] times along dimension i (len(reps) == ndim)."""
    a = jnp.asarray(operand)
    reps = tuple(int(r) for r in reps)
    if len(reps) != a.ndim:
        raise TypeError(f"reps length must be equal to the ndim of x, got len(reps)={len(reps)} and "
                        f"x.ndim={a.ndim}.")
    if any(r < 0 for r in reps):
        raise ValueError(f"lax.tile: reps must be non-negative, got {reps}")
    return jnp.tile(a, reps)


def stack(operands, axis=0):
    """jax.lax.stack: operands of one shape and dtype along a new `axis`."""
    ops = [jnp.asarray(o) for o in operands]
    if not ops:
        raise ValueError("lax.stack: need at least one operand")
    for o in ops:
        if o.shape != ops[0].shape or o.dtype != ops[0].dtype:
            raise TypeError(f"lax.stack requires operands of one shape and dtype, got "
                            f"{[f'{x.dtype}{tuple(x.shape)}' for x in ops]}")
    nd = ops[0].ndim + 1
    if not -nd <= axis < nd:
        raise ValueError(f"lax.stack: axis {axis} is out of bounds for the result of rank {nd}")
    ax = axis % nd
    return lax.concatenate([lax.expand_dims(o, (ax,)) for o in ops], ax)


def unstack(x, axis=0):
    """jax.lax.unstack: the slices of x along `axis`, as a tuple."""
    a = jnp.asarray(x)
    if not -a.ndim <= axis < a.ndim or a.ndim == 0:
        raise ValueError(f"lax.unstack: axis {axis} is out of bounds for an array of rank {a.ndim}")
    ax = axis % a.ndim
    return tuple(index_in_dim(a, i, ax, keepdims=False) for i in range(a.shape[ax]))


def split(operand, sizes, axis=0):
    """jax.lax.split: consecutive pieces of `sizes` along `axis` (they must sum to its size)."""
    a = jnp.asarray(operand)
    if not -a.ndim <= axis < a.ndim or a.ndim == 0:
        raise ValueError(f"lax.split: axis {axis} is out of bounds for an array of rank {a.ndim}")
    ax = axis % a.ndim
    sizes = [int(s) for s in sizes]
    if any(s < 0 for s in sizes) or _bi.sum(sizes) != a.shape[ax]:
        raise ValueError(f"Sum of sizes {_bi.sum(sizes)} must be equal to dimension {ax} of the operand shape "
                         f"{tuple(a.shape)}; sizes must be non-negative, got {tuple(sizes)}")
    out, start = [], 0
    for s in sizes:
        out.append(lax.slice_in_dim(a, start, start + s, axis=ax))
        start += s
    return out


def collapse(operand, start_dimension, stop_dimension=None):
    """jax.lax.collapse: dimensions [start_dimension, stop_dimension) merged into one."""
    a = jnp.asarray(operand)
    nd = a.ndim
    lo = start_dimension % nd if nd else 0
    hi = nd if stop_dimension is None else (stop_dimension if stop_dimension >= 0 else stop_dimension + nd)
    if not 0 <= lo <= hi <= nd:
        raise ValueError(f"lax.collapse: invalid dimensions [{start_dimension}, {stop_dimension}) for an array "
                         f"of rank {nd}")
    size = int(_np.prod(a.shape[lo:hi], dtype=_np.int64))
    return lax.reshape(a, tuple(a.shape[:lo]) + (size,) + tuple(a.shape[hi:]))


def index_in_dim(operand, index, axis=0, keepdims=True):
    """jax.lax.index_in_dim: the static `index` along `axis` (negative counts from the end)."""
    a = jnp.asarray(operand)
    axis = axis % a.ndim
    n = a.shape[axis]
    i = operator.index(index)
    if not -n <= i < n:
        raise IndexError(f"index {i} is out of bounds for axis {axis} with size {n}")
    i %= n
    out = lax.slice_in_dim(a, i, i + 1, axis=axis)
    return out if keepdims else lax.squeeze(out, (axis,))


def _dyn_index(index, n, allow_negative_indices):
    if not isinstance(index, (Array, Tracer)):
        i = int(index)
        return i + n if (allow_negative_indices and i < 0) else i
    i = lax.convert_element_type(index, _np.int32) if index.dtype != _dtypes.int32 else index
    if allow_negative_indices:
        i = lax.select(lax.lt(i, jnp.asarray(_np.int32(0))), lax.add(i, jnp.asarray(_np.int32(n))), i)
    return i


def dynamic_index_in_dim(operand, index, axis=0, keepdims=True, *, allow_negative_indices=True):
    """jax.lax.dynamic_index_in_dim: a (traceable) index along `axis`, clamped like dynamic_slice."""
    a = jnp.asarray(operand)
    axis = axis % a.ndim
    out = lax.dynamic_slice_in_dim(a, _dyn_index(index, a.shape[axis], allow_negative_indices), 1, axis)
    return out if keepdims else lax.squeeze(out, (axis,))


def dynamic_update_slice_in_dim(operand, update, start_index, axis, *, allow_negative_indices=True):
    """jax.lax.dynamic_update_slice_in_dim: update written at start_index along `axis`."""
    a = jnp.asarray(operand)
    u = jnp.asarray(update, dtype=a.dtype) if not hasattr(update, "dtype") else update
    axis = axis % a.ndim
    starts = [0] * a.ndim
    starts[axis] = _dyn_index(start_index, a.shape[axis], allow_negative_indices)
    return lax.dynamic_update_slice(a, u, starts)


def dynamic_update_index_in_dim(operand, update, index, axis, *, allow_negative_indices=True):
    """jax.lax.dynamic_update_index_in_dim: one index along `axis` replaced by update
    (with or without the unit dimension)."""
    a = jnp.asarray(operand)
    u = jnp.asarray(update, dtype=a.dtype) if not hasattr(update, "dtype") else update
    axis = axis % a.ndim
    if u.ndim == a.ndim - 1:
        u = lax.expand_dims(u, (axis,))
    return dynamic_update_slice_in_dim(a, u, index, axis, allow_negative_indices=allow_negative_indices)


def index_take(src, idxs, axes):
    """jax.lax.index_take: src[idxs[0], idxs[1], ...] along `axes` (a gather; indices
    clamped as XLA does)."""
    from .lax_gather import GatherDimensionNumbers, gather
    a = jnp.asarray(src)
    axes = tuple(int(x) for x in axes)
    idxs = [jnp.asarray(i) for i in idxs]
    indices = lax.concatenate([lax.expand_dims(lax.convert_element_type(i, _np.int32), (1,)) for i in idxs], 1)
    slice_sizes = list(a.shape)
    for ax in axes:
        slice_sizes[ax] = 1
    offset_dims = tuple(range(1, a.ndim - len(axes) + 1))
    dnums = GatherDimensionNumbers(offset_dims=offset_dims, collapsed_slice_dims=tuple(sorted(axes)),
                                   start_index_map=axes)
    return gather(a, indices, dnums, slice_sizes)


def batch_matmul(lhs, rhs, precision=None):
    """jax.lax.batch_matmul: matmul over the last two dimensions, the leading ones batched
    (equal ranks >= 2)."""
    if lhs.ndim < 2 or rhs.ndim < 2:
        raise ValueError(f"Arguments to batch_matmul must be at least 2D, got {lhs.ndim}, {rhs.ndim}")
    if lhs.ndim != rhs.ndim:
        raise ValueError(f"Arguments to batch_matmul must have same ndim, got {lhs.ndim}, {rhs.ndim}")
    lc, rc = (lhs.ndim - 1,), (rhs.ndim - 2,)
    batch = tuple(range(lhs.ndim - 2))
    return lax.dot_general(lhs, rhs, ((lc, rc), (batch, batch)), precision=precision)


def dtype(x):
    """jax.lax.dtype: the canonical dtype of an array, scalar or dtype-like (a Python
    float is float32, an int int32, as with x64 off)."""
    if isinstance(x, (Array, Tracer)):
        return _np.dtype(x.dtype)
    if isinstance(x, type) and x in (_bi.bool, int, float, complex):
        d = {_bi.bool: _np.bool_, int: _np.int64, float: _np.float64, complex: _np.complex128}[x]
    elif isinstance(x, (_bi.bool, int, float, complex)):
        d = {_bi.bool: _np.bool_, int: _np.int64, float: _np.float64, complex: _np.complex128}[type(x)]
    elif isinstance(x, type) or isinstance(x, (str, _np.dtype)):
        d = x
    elif hasattr(x, "dtype"):
        d = x.dtype
    else:
        d = x
    return _np.dtype(_dtypes.canonicalize(d))


def optimization_barrier(operand, /):
    """jax.lax.optimization_barrier: the identity (podlet's graph passes do not move
    computations across it anyway: nothing to prevent)."""
    return operand


def shape_as_value(shape):
    """jax.lax.shape_as_value: a shape as an int32 array."""
    return jnp.asarray(_np.array([int(d) for d in shape], dtype=_np.int32))


def composite(decomposition, name, version=0):
    """jax.lax.composite: `decomposition` under a name (XLA keeps such a call as one
    op for backends that know it); podlet has no such backends, so the returned
    function evaluates the decomposition. Unlike JAX, it differentiates through it."""
    import functools

    @functools.wraps(decomposition)
    def call(*args, **kwargs):
        return decomposition(*args, **kwargs)
    call.composite_name, call.composite_version = str(name), int(version)
    return call


def with_sharding_constraint(x, shardings):
    """jax.lax.with_sharding_constraint: each leaf checked against its sharding as JAX
    does (rank, mesh axes, even division; a model-parallel layout raises
    NotImplementedError), x returned unchanged (podlet computes the global array; see
    podlet/_src/sharding.py)."""
    from .sharding import with_sharding_constraint as check
    return check(x, shardings)
