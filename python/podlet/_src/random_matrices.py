"""jax.random's samplers built on linear algebra: ``multivariate_normal`` (a factor of the
covariance times standard normals) and ``orthogonal`` (Mezzadri's QR of a Gaussian matrix
with R's diagonal signs folded into Q). Same key use and formulas as jax.random, so the
draws equal JAX's up to the factorisations' last bits (Eigen here, LAPACK there)."""
import numpy as np

from . import dtypes
from .random_dists import _check_shape, _fdtype, _is_array, _key, _rnd, _shape_of


def _inexact(x):
    """mean / cov as a floating podlet array (integers become float32, as jax's
    promote_dtypes_inexact does)."""
    from .. import numpy as jnp
    x = x if _is_array(x) else jnp.asarray(x)
    return x if dtypes.is_float(x.dtype) else x.astype(jnp.float32)


def multivariate_normal(key, mean, cov, shape=None, dtype=None, method="cholesky"):
    """Samples of N(mean, cov): ``mean + factor @ z`` with ``factor`` the Cholesky factor of
    ``cov`` (``method='cholesky'``), or ``u * sqrt(s)`` of its SVD / ``v * sqrt(w)`` of its
    eigendecomposition (``'svd'`` / ``'eigh'``, for singular covariances).

    Shape ``shape + mean.shape[-1:]``; ``shape`` defaults to the broadcast of
    ``mean.shape[:-1]`` and ``cov.shape[:-2]``."""
    from .. import numpy as jnp
    key = _key(key, "multivariate_normal")
    mean, cov = _inexact(mean), _inexact(cov)
    if mean.dtype != cov.dtype:
        common = jnp.result_type(mean.dtype, cov.dtype)
        mean, cov = mean.astype(common), cov.astype(common)
    if method not in {"svd", "eigh", "cholesky"}:
        raise ValueError("method must be one of {'svd', 'eigh', 'cholesky'}")
    d = mean.dtype if dtype is None else _fdtype(dtype, "multivariate_normal")
    if mean.ndim < 1:
        raise ValueError(f"multivariate_normal requires mean.ndim >= 1, got mean.ndim == {mean.ndim}")
    if cov.ndim < 2:
        raise ValueError(f"multivariate_normal requires cov.ndim >= 2, got cov.ndim == {cov.ndim}")
    n = mean.shape[-1]
    if tuple(cov.shape[-2:]) != (n, n):
        raise ValueError(f"multivariate_normal requires cov.shape == (..., n, n) for n={n}, but got cov.shape == "
                         f"{tuple(cov.shape)}.")
    if shape is None:
        shape = tuple(np.broadcast_shapes(tuple(mean.shape[:-1]), tuple(cov.shape[:-2])))
    else:
        shape = _rnd()._shape(shape)
        _check_shape("normal", shape, tuple(mean.shape[:-1]), tuple(cov.shape[:-2]))
    if method == "svd":
        u, s, _ = jnp.linalg.svd(cov)
        factor = u * jnp.sqrt(s[..., None, :])
    elif method == "eigh":
        w, v = jnp.linalg.eigh(cov)
        factor = v * jnp.sqrt(w[..., None, :])
    else:
        factor = jnp.linalg.cholesky(cov)
    z = _rnd().normal(key, shape + (n,), d)
    return mean + jnp.einsum("...ij,...j->...i", factor, z)


def orthogonal(key, n, shape=(), dtype=None, m=None):
    """A matrix of shape ``(*shape, n, m)`` (``m`` defaults to ``n``) drawn uniformly from
    O(n) (semi-orthogonal when n != m: orthonormal rows if n < m, columns if m < n)."""
    from .. import numpy as jnp
    key = _key(key, "orthogonal")
    m = n if m is None else m
    for name, v in (("n", n), ("m", m)):
        if _is_array(v) and not isinstance(v, np.ndarray):
            v = np.asarray(v)  # a concrete podlet array; a tracer raises here, as jax's concrete_or_error
        if np.ndim(v) != 0 or not np.issubdtype(np.asarray(v).dtype, np.integer):
            raise TypeError(f"orthogonal: {name} must be a concrete integer, got {v!r}")
    n, m = int(n), int(m)
    shape = _rnd()._shape(shape)
    d = _fdtype(dtype, "orthogonal")
    z = _rnd().normal(key, (*shape, max(n, m), min(n, m)), d)
    q, r = jnp.linalg.qr(z)
    x = q * jnp.expand_dims(jnp.sign(jnp.linalg.diagonal(r)), -2)
    return jnp.matrix_transpose(x) if n < m else x


__all__ = ["multivariate_normal", "orthogonal"]
