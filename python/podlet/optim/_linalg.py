"""Linear algebra for optimizers (``optax/_src/linear_algebra.py``, ``utils.py``):
``power_iteration``, ``matrix_inverse_pth_root`` (Shampoo's coupled Newton iteration),
``nnls`` (accelerated projected gradient) and the diagonal Gaussian ``multi_normal``.
Loops are ``lax.while_loop`` / ``lax.scan``, so they run under ``podlet.jit``.
"""
import math
from typing import Callable, Union

from .. import lax
from .. import numpy as jnp
from .. import random as _random
from . import tree as _tree


def _normalize_tree(x):
    return _tree.scale(1.0 / _tree.norm(x), x)


def power_iteration(matrix: Union[object, Callable], *, v0=None, num_iters=100, error_tolerance=1e-6,
                    precision=lax.Precision.HIGHEST, key=None):
    """The dominant eigenvalue and eigenvector of a matrix (or of a linear map given
    as a function of a pytree) by power iteration.

    Args:
      matrix: a square array, or ``v -> M v`` on pytrees (then ``v0`` is required).
      v0: the starting vector (default: uniform in [-1, 1] from ``key``).
      num_iters: the most iterations.
      error_tolerance: stop when ``||M v - lambda v|| / |lambda|`` is below it.
      precision: accepted for optax's signature (podlet's float32 products are full
        precision).
      key: PRNG key for ``v0`` (default ``PRNGKey(0)``, as optax).

    Returns:
      ``(eigenvalue, unit eigenvector)``.
    """
    del precision
    if callable(matrix):
        mvp = matrix
        if v0 is None:
            raise ValueError("v0 must be provided when `matrix` is a callable.")
    else:
        matrix = jnp.asarray(matrix)
        mvp = lambda v: jnp.matmul(matrix, v)  # noqa: E731
        if v0 is None:
            key = _random.PRNGKey(0) if key is None else key
            v0 = _random.uniform(key, shape=matrix.shape[-1:], dtype=matrix.dtype, minval=-1.0, maxval=1.0)
    v0 = _normalize_tree(v0)

    def cond_fun(loop_vars):
        normalized_eigvec, unnormalized_eigvec, eig, iter_num = loop_vars
        residual = _tree.sub(unnormalized_eigvec, _tree.scale(eig, normalized_eigvec))
        converged = jnp.abs(_tree.norm(residual) / eig) < error_tolerance
        return jnp.logical_and(jnp.logical_not(converged), iter_num < num_iters)

    def body_fun(loop_vars):
        _, z, _, iter_num = loop_vars
        eigvec = _normalize_tree(z)
        z = mvp(eigvec)
        return eigvec, z, _tree.vdot(eigvec, z), iter_num + 1

    init_vars = (v0, mvp(v0), jnp.asarray(0.0), jnp.asarray(0))
    _, unnormalized, eigenvalue, _ = lax.while_loop(cond_fun, body_fun, init_vars)
    return eigenvalue, _normalize_tree(unnormalized)


def matrix_inverse_pth_root(matrix, p, num_iters=100, ridge_epsilon=1e-6, error_tolerance=1e-6,
                            precision=lax.Precision.HIGHEST):
    """``(matrix + ridge)^(-1/p)`` for a symmetric positive semi-definite matrix by the
    coupled Newton iteration of Shampoo (Anil et al. 2020); ``p`` in {1, 2, 4, 8}.

    Args:
      matrix: ``[n, n]``.
      p: the root.
      num_iters: the most Newton iterations.
      ridge_epsilon: ridge, relative to the largest eigenvalue.
      error_tolerance: stop when ``max |M - I|`` is below it.
      precision: accepted for optax's signature.

    Returns:
      ``(the inverse p-th root, the final error)``.
    """
    del precision
    matrix = jnp.asarray(matrix)
    matrix_size = matrix.shape[0]
    alpha = jnp.asarray(-1.0 / p, jnp.float32)
    identity = jnp.eye(matrix_size, dtype=jnp.float32)
    max_ev, _ = power_iteration(matrix=matrix, num_iters=100, error_tolerance=1e-6)
    ridge_epsilon = ridge_epsilon * jnp.maximum(max_ev, 1e-16)

    def mat_pow_1(m):
        return m

    def mat_pow_2(m):
        return jnp.matmul(m, m)

    def mat_pow_4(m):
        m2 = mat_pow_2(m)
        return jnp.matmul(m2, m2)

    def mat_pow_8(m):
        m4 = mat_pow_4(m)
        return jnp.matmul(m4, m4)

    def mat_power(m, p):
        exponent = jnp.round(jnp.log2(p))
        return lax.switch(jnp.asarray(exponent, jnp.int32), [mat_pow_1, mat_pow_2, mat_pow_4, mat_pow_8], m)

    def iter_condition(state):
        i, _, _, _, error, run_step = state
        return jnp.logical_and(i < num_iters, jnp.logical_and(error > error_tolerance, run_step))

    def iter_body(state):
        i, mat_m, mat_h, _, error, _ = state
        mat_m_i = (1 - alpha) * identity + alpha * mat_m
        new_mat_m = jnp.matmul(mat_power(mat_m_i, p), mat_m)
        new_mat_h = jnp.matmul(mat_h, mat_m_i)
        new_error = jnp.max(jnp.abs(new_mat_m - identity))
        return i + 1, new_mat_m, new_mat_h, mat_h, new_error, new_error < error * 1.2

    if matrix_size == 1:
        return (matrix + ridge_epsilon) ** alpha, 0
    damped_matrix = matrix + ridge_epsilon * identity
    z = (1 + p) / (2 * jnp.sqrt(jnp.sum(jnp.square(damped_matrix))))
    new_mat_m_0 = damped_matrix * z
    new_error = jnp.max(jnp.abs(new_mat_m_0 - identity))
    new_mat_h_0 = identity * jnp.power(z, 1.0 / p)
    init_state = (jnp.asarray(0), new_mat_m_0, new_mat_h_0, new_mat_h_0, new_error, jnp.asarray(True))
    _, mat_m, mat_h, old_mat_h, _, convergence = lax.while_loop(iter_condition, iter_body, init_state)
    error = jnp.max(jnp.abs(mat_m - identity))
    is_converged = jnp.asarray(convergence).astype(old_mat_h.dtype)
    resultant_mat_h = is_converged * mat_h + (1 - is_converged) * old_mat_h
    return jnp.asarray(resultant_mat_h, matrix.dtype), error


def _spectral_radius_upper_bound(matrix):
    fro = jnp.sqrt(jnp.sum(jnp.square(matrix)))
    if matrix.size == 0:
        return jnp.minimum(fro, 0)
    one = jnp.max(jnp.sum(jnp.abs(matrix), axis=0))
    return jnp.minimum(fro, one)


def nnls(A, b, iters: int, unroll: Union[int, bool] = 1, L=None):
    """Non-negative least squares ``argmin_{x >= 0} ||A x - b||^2`` by accelerated
    projected gradient (FISTA), ``iters`` iterations.

    Args:
      A: ``[m, n]``.
      b: ``[m]`` or ``[m, k]``.
      iters: the number of iterations.
      unroll: accepted for optax's signature (the scan body is one compiled graph).
      L: a Lipschitz bound of the gradient (default: min of the Frobenius and 1-norms
        of ``A^T A``).

    Returns:
      ``x`` of shape ``[n]`` or ``[n, k]``.
    """
    del unroll
    A, b = jnp.asarray(A), jnp.asarray(b)
    if A.ndim != 2 or b.ndim not in (1, 2) or b.shape[0] != A.shape[0]:
        raise ValueError(f"nnls: A must be [m, n] and b [m] or [m, k] with the same m, got {A.shape} and {b.shape}")
    At = jnp.swapaxes(A, -1, -2)
    Q = At @ A
    q = At @ b
    if L is None:
        L = _spectral_radius_upper_bound(Q)
    L = jnp.where(L == 0, 1, L)

    def f(x_p_c, _):
        x, p, c = x_p_c
        cn = (1 + jnp.sqrt(1 + 4 * c ** 2)) / 2
        s = (c - 1) / cn
        xn = jnp.clip(p - (Q @ p - q) / L, 0)
        pn = xn + s * (xn - x)
        return (xn, pn, cn), None

    x = jnp.zeros(A.shape[-1:] + b.shape[1:], b.dtype)
    (x, _, _), _ = lax.scan(f, (x, x, jnp.asarray(0.0)), length=iters)
    return x


class MultiNormalDiagFromLogScale:
    """A diagonal Gaussian parameterised by its mean and log standard deviation."""

    def __init__(self, loc, log_scale):
        self._log_scale = jnp.asarray(log_scale)
        self._scale = jnp.exp(log_scale)
        self._mean = jnp.asarray(loc)
        self._param_shape = tuple(jnp.broadcast_shapes(self._mean.shape, self._scale.shape))

    def sample(self, shape, key):
        """``shape + param_shape`` samples from ``key``."""
        sample_shape = tuple(shape) + self._param_shape
        return _random.normal(key, shape=sample_shape) * self._scale + self._mean

    def log_prob(self, x):
        """Log density, summed over the parameter axes."""
        # jax.scipy.stats.norm.logpdf's formula: (log(2 pi s^2) + (x - m)^2 / s^2) / -2
        scale_sqrd = jnp.square(self._scale)
        log_normalizer = jnp.log(2 * math.pi * scale_sqrd)
        quadratic = jnp.square(x - self._mean) / scale_sqrd
        log_prob = (log_normalizer + quadratic) / -2
        return jnp.sum(log_prob, axis=tuple(-(i + 1) for i in range(len(self._param_shape))))

    @property
    def log_scale(self):
        return self._log_scale

    @property
    def params(self):
        return [self._mean, self._log_scale]


def multi_normal(loc, log_scale) -> MultiNormalDiagFromLogScale:
    """A diagonal Gaussian with mean ``loc`` and standard deviation ``exp(log_scale)``."""
    return MultiNormalDiagFromLogScale(loc=loc, log_scale=log_scale)

