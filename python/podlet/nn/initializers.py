"""Initializers (jax.nn.initializers / flax.linen.initializers).

An initializer is ``init(key, shape, dtype=...) -> Array``. Every one here performs
jax 0.10.2's operations in the same order and dtype on top of ``podlet.random`` (which
reproduces jax's threefry samplers bit for bit), so for the same key, shape and dtype
the result is bit-identical to ``jax.nn.initializers``':

    kernel = lecun_normal()(podlet.random.PRNGKey(0), (784, 128))

The one exception is ``orthogonal`` (and ``delta_orthogonal``, built on it): the normal
draw is jax's bit for bit, but jax then calls LAPACK's QR, whose blocked Householder
rounding podlet does not replay; podlet's Householder QR gives the same (unique,
sign-fixed) Q to float32 rounding, a few ulps apart.

``variance_scaling`` follows jax's fan conventions: ``in_axis=-2``, ``out_axis=-1``,
``batch_axis=()``, with the remaining axes forming the receptive field (so a conv
kernel HWIO has fan_in = H*W*I); ``truncated_normal`` is truncated to (-2, 2) and
rescaled by 0.87962566103423978 (the stddev of a standard normal truncated there).
"""
import math

import numpy as np

from .. import numpy as jnp
from .. import random
from .._src import dtypes as _dtypes

__all__ = ["zeros_init", "ones_init", "zeros", "ones", "constant", "uniform", "normal", "truncated_normal",
           "variance_scaling", "glorot_uniform", "glorot_normal", "xavier_uniform", "xavier_normal",
           "lecun_uniform", "lecun_normal", "he_uniform", "he_normal", "kaiming_uniform", "kaiming_normal",
           "orthogonal", "delta_orthogonal", "Initializer"]

Initializer = object  # typing alias, as flax.typing.Initializer


def _default_float_dtype():
    return _dtypes.float64 if _dtypes.x64_enabled() else _dtypes.float32


def _canonicalize_shape(shape):
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    try:
        return tuple(int(d) for d in shape)
    except TypeError:
        raise TypeError(f"Shapes must be 1D sequences of concrete values of integer type, got {shape!r}.") from None


def zeros(key, shape, dtype=None, out_sharding=None):
    """An array of zeros (the key is ignored)."""
    dtype = _default_float_dtype() if dtype is None else dtype
    return jnp.zeros(_canonicalize_shape(shape), dtype)


def ones(key, shape, dtype=None, out_sharding=None):
    """An array of ones (the key is ignored)."""
    dtype = _default_float_dtype() if dtype is None else dtype
    return jnp.ones(_canonicalize_shape(shape), dtype)


def zeros_init():
    """Builds an initializer that returns arrays of zeros (``flax.linen.initializers.zeros_init``)."""
    return zeros


def ones_init():
    """Builds an initializer that returns arrays of ones."""
    return ones


def constant(value, dtype=None):
    """Builds an initializer that returns arrays filled with ``value``."""
    def init(key, shape, dtype=dtype, out_sharding=None):
        dtype = _default_float_dtype() if dtype is None else dtype
        return jnp.full(_canonicalize_shape(shape), value, dtype=dtype)
    return init


def uniform(scale=1e-2, dtype=None):
    """Builds an initializer of uniform values in ``[0, scale)``."""
    def init(key, shape, dtype=dtype, out_sharding=None):
        dtype = _default_float_dtype() if dtype is None else dtype
        return random.uniform(key, _canonicalize_shape(shape), dtype) * jnp.array(scale, dtype)
    return init


def normal(stddev=1e-2, dtype=None):
    """Builds an initializer of normal values with standard deviation ``stddev``."""
    def init(key, shape, dtype=dtype, out_sharding=None):
        dtype = _default_float_dtype() if dtype is None else dtype
        return random.normal(key, _canonicalize_shape(shape), dtype) * jnp.array(stddev, dtype)
    return init


def truncated_normal(stddev=1e-2, dtype=None, lower=-2.0, upper=2.0):
    """Builds an initializer of ``stddev`` times a standard normal truncated to (lower, upper)."""
    def init(key, shape, dtype=dtype, out_sharding=None):
        dtype = _default_float_dtype() if dtype is None else dtype
        return random.truncated_normal(key, lower, upper, _canonicalize_shape(shape), dtype) * jnp.array(stddev, dtype)
    return init


def _compute_fans(shape, in_axis=-2, out_axis=-1, batch_axis=()):
    """(fan_in, fan_out) of a weight shape: in/out sizes times the receptive field size."""
    if isinstance(in_axis, int) and in_axis == -2 and len(shape) <= 1:
        raise ValueError(f"Can't compute input and output sizes of a {len(shape)}-dimensional weights tensor "
                         "with default in_axis. Must be at least 2D or specify in_axis explicitly.")
    in_size = shape[in_axis] if isinstance(in_axis, int) else math.prod([shape[i] for i in in_axis])
    out_size = shape[out_axis] if isinstance(out_axis, int) else math.prod([shape[i] for i in out_axis])
    batch_size = shape[batch_axis] if isinstance(batch_axis, int) else math.prod([shape[i] for i in batch_axis])
    receptive_field_size = math.prod(shape) / in_size / out_size / batch_size
    return in_size * receptive_field_size, out_size * receptive_field_size


def variance_scaling(scale, mode, distribution, in_axis=-2, out_axis=-1, batch_axis=(), dtype=None):
    """Builds an initializer with variance ``scale / n``.

    Args:
      scale: scaling factor (positive float).
      mode: ``"fan_in"``, ``"fan_out"``, ``"fan_avg"`` or ``"fan_geo_avg"``: which ``n``.
      distribution: ``"truncated_normal"``, ``"normal"`` or ``"uniform"``.
      in_axis, out_axis, batch_axis: axes (int or sequence) of the input and output
        dimensions and of batch dimensions excluded from the fans.
      dtype: default dtype of the weights.
    """
    def init(key, shape, dtype=dtype, out_sharding=None):
        shape = _canonicalize_shape(shape)
        dtype = _default_float_dtype() if dtype is None else dtype
        fan_in, fan_out = _compute_fans(shape, in_axis, out_axis, batch_axis)
        if mode == "fan_in":
            denominator = fan_in
        elif mode == "fan_out":
            denominator = fan_out
        elif mode == "fan_avg":
            denominator = (fan_in + fan_out) / 2
        elif mode == "fan_geo_avg":
            denominator = (fan_in * fan_out) ** 0.5
        else:
            raise ValueError(f"invalid mode for variance scaling initializer: {mode}")
        variance = jnp.array(scale / denominator, dtype=dtype)
        if not jnp.issubdtype(dtype, np.floating):
            raise NotImplementedError(f"variance_scaling: podlet has no complex dtypes (got {np.dtype(dtype)})")
        if distribution == "truncated_normal":
            # constant is the stddev of a standard normal truncated to (-2, 2)
            stddev = jnp.sqrt(variance) / jnp.array(.87962566103423978, dtype)
            return random.truncated_normal(key, -2, 2, shape, dtype) * stddev
        elif distribution == "normal":
            return random.normal(key, shape, dtype) * jnp.sqrt(variance)
        elif distribution == "uniform":
            return random.uniform(key, shape, dtype, -1) * jnp.sqrt(3 * variance)
        raise ValueError(f"invalid distribution for variance scaling initializer: {distribution}")

    return init


def glorot_uniform(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None):
    """Glorot (Xavier) uniform: ``variance_scaling(1.0, "fan_avg", "uniform")``."""
    return variance_scaling(1.0, "fan_avg", "uniform", in_axis=in_axis, out_axis=out_axis,
                            batch_axis=batch_axis, dtype=dtype)


def glorot_normal(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None):
    """Glorot (Xavier) normal: ``variance_scaling(1.0, "fan_avg", "truncated_normal")``."""
    return variance_scaling(1.0, "fan_avg", "truncated_normal", in_axis=in_axis, out_axis=out_axis,
                            batch_axis=batch_axis, dtype=dtype)


def lecun_uniform(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None):
    """LeCun uniform: ``variance_scaling(1.0, "fan_in", "uniform")``."""
    return variance_scaling(1.0, "fan_in", "uniform", in_axis=in_axis, out_axis=out_axis,
                            batch_axis=batch_axis, dtype=dtype)


def lecun_normal(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None):
    """LeCun normal: ``variance_scaling(1.0, "fan_in", "truncated_normal")`` (Dense/Conv default)."""
    return variance_scaling(1.0, "fan_in", "truncated_normal", in_axis=in_axis, out_axis=out_axis,
                            batch_axis=batch_axis, dtype=dtype)


def he_uniform(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None):
    """He (Kaiming) uniform: ``variance_scaling(2.0, "fan_in", "uniform")``."""
    return variance_scaling(2.0, "fan_in", "uniform", in_axis=in_axis, out_axis=out_axis,
                            batch_axis=batch_axis, dtype=dtype)


def he_normal(in_axis=-2, out_axis=-1, batch_axis=(), dtype=None):
    """He (Kaiming) normal: ``variance_scaling(2.0, "fan_in", "truncated_normal")``."""
    return variance_scaling(2.0, "fan_in", "truncated_normal", in_axis=in_axis, out_axis=out_axis,
                            batch_axis=batch_axis, dtype=dtype)


xavier_uniform = glorot_uniform
xavier_normal = glorot_normal
kaiming_uniform = he_uniform
kaiming_normal = he_normal


# =====================================================================================
# Orthogonal (jax.random.orthogonal / jax.nn.initializers.orthogonal)
# =====================================================================================
def _householder_q(a):
    """The Q of the reduced QR decomposition of ``a`` (m, n), m >= n, with its columns
    signed so that diag(R) >= 0 (the unique Q of a full-rank ``a``): n Householder
    reflections, each ``r -= 2 v (v^T r) / (v^T v)``, in two ``fori_loop`` s (the
    reflections, then their product applied to the first n columns of the identity)."""
    from .. import lax
    m, n = a.shape
    rows = jnp.arange(m)
    cols = jnp.arange(n)

    def column(mat, j):
        return jnp.sum(jnp.where(cols[None, :] == j, mat, jnp.zeros_like(mat)), axis=1)

    def reflect(mat, v):
        vtv = jnp.sum(v * v)
        scale = jnp.where(vtv > 0, 2.0 / jnp.where(vtv > 0, vtv, 1.0), 0.0).astype(mat.dtype)
        return mat - (scale * v)[:, None] * jnp.matmul(v, mat)[None, :]

    def step(j, carry):
        r, vs = carry
        x = jnp.where(rows >= j, column(r, j), jnp.zeros((m,), r.dtype))
        alpha = jnp.sum(jnp.where(rows == j, x, jnp.zeros_like(x)))
        norm = jnp.sqrt(jnp.sum(x * x))
        beta = jnp.where(alpha >= 0, -norm, norm)           # R[j, j]; v = x - beta e_j
        v = x - jnp.where(rows == j, beta, jnp.zeros_like(x))
        return reflect(r, v), jnp.where(cols[None, :] == j, v[:, None], vs)

    r, vs = lax.fori_loop(0, n, step, (a, jnp.zeros_like(a)))
    q0 = jnp.where(rows[:, None] == cols[None, :], jnp.ones_like(a), jnp.zeros_like(a))
    q = lax.fori_loop(0, n, lambda i, q: reflect(q, column(vs, n - 1 - i)), q0)
    d = jnp.sum(jnp.where(rows[:, None] == cols[None, :], r, jnp.zeros_like(r)), axis=0)
    return q * jnp.sign(d)[None, :]


def _orthogonal_matrix(key, n, m, dtype):
    """jax.random.orthogonal(key, n, (), dtype, m): an (n, m) matrix with orthonormal
    columns (n >= m) or rows (n < m), from the QR of a (max, min) standard normal draw."""
    z = random.normal(key, (max(n, m), min(n, m)), dtype)
    work = z if np.dtype(dtype) in (np.dtype(np.float32), np.dtype(np.float64)) else z.astype(jnp.float32)
    q = _householder_q(work).astype(dtype)
    return q.T if n < m else q


def orthogonal(scale=1.0, column_axis=-1, dtype=None):
    """Builds an initializer of (uniformly distributed) orthogonal matrices: the
    ``column_axis`` columns are orthonormal, or the rows when they are fewer."""
    def init(key, shape, dtype=dtype, out_sharding=None):
        shape = _canonicalize_shape(shape)
        dtype = _default_float_dtype() if dtype is None else dtype
        if len(shape) < 2:
            raise ValueError("orthogonal initializer requires at least a 2D shape")
        if any(d == 0 for d in shape):
            return jnp.zeros(shape, dtype)
        n_rows, n_cols = math.prod(shape) // shape[column_axis], shape[column_axis]
        q = _orthogonal_matrix(key, n_rows, n_cols, dtype)
        q = jnp.reshape(q, tuple(np.delete(shape, column_axis)) + (shape[column_axis],))
        q = jnp.moveaxis(q, -1, column_axis)
        return jnp.array(scale, dtype) * q
    return init


def delta_orthogonal(scale=1.0, column_axis=-1, dtype=None):
    """Builds an initializer of delta-orthogonal convolution kernels (3-D to 5-D): an
    orthogonal (in, out) matrix at the window's centre, zeros elsewhere
    (https://arxiv.org/abs/1806.05393)."""
    def init(key, shape, dtype=dtype, out_sharding=None):
        shape = _canonicalize_shape(shape)
        dtype = _default_float_dtype() if dtype is None else dtype
        if len(shape) not in (3, 4, 5):
            raise ValueError("Delta orthogonal initializer requires a 3D, 4D or 5D shape.")
        if shape[-1] < shape[-2]:
            raise ValueError("`fan_in` must be less or equal than `fan_out`. ")
        ortho = orthogonal(scale=scale, column_axis=column_axis, dtype=dtype)(key, shape[-2:])
        centre = tuple((k - 1) // 2 for k in shape[:-2])
        return jnp.zeros(shape, dtype).at[centre].set(ortho)
    return init
