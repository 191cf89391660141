"""podlet.lax.linalg (jax.lax.linalg): the linear-algebra primitives and their derivative rules.

Six primitives do the factorisations (cpp/podlet/prims/linalg.cc, Eigen, one matrix at
a time over any leading batch dims): cholesky, triangular_solve, lu, eigh, qr, svd.
triangular_solve has a VJP rule in C++. The factorisations are differentiated by the
custom_jvp rules here, the formulas of jax/_src/lax/linalg.py (cholesky_jvp_rule,
eigh_jvp_rule, qr_jvp_rule, _svd_jvp_rule) and of jax.numpy.linalg (solve, slogdet,
det, pinv in python/podlet/_src/linalg.py); reverse mode transposes them. Their
tangents go through matmuls and triangular solves only, so first derivatives work
under grad, jvp, jit and vmap. Second derivatives through a factorisation are not
available (the factorisation primitives have no VJP of their own: an error naming
the primitive, never a silent zero).

Real dtypes only (float32, float64); integer inputs promote to float32 as in JAX;
bfloat16 is refused with a DTypeError naming it (JAX's LAPACK kernels have no
bfloat16 either). As in JAX, bad input gives NaN, not an exception: the Cholesky
factor of a matrix that is not positive definite, the factors of non-finite input.
"""
import functools

import numpy as _np

from .. import numpy as jnp
from .core import bind
from .custom_derivatives import custom_jvp
from . import dtypes as _dtypes

__all__ = ["cholesky", "eigh", "lu", "qr", "svd", "triangular_solve"]


# ---------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------
def _inexact(*args):
    """JAX's promote_dtypes_inexact: arrays of one floating dtype (ints -> float32)."""
    arrs = [jnp.asarray(a) for a in args]
    d = jnp.result_type(*arrs) if len(arrs) > 1 else arrs[0].dtype
    if not _dtypes.is_float(_np.dtype(d).name if not isinstance(d, str) else d):
        d = jnp.float32
    out = [a if a.dtype == d else jnp.astype(a, d) for a in arrs]
    return out[0] if len(out) == 1 else out


def _T(x):
    return jnp.swapaxes(x, -1, -2)


def _sym(x):
    return (x + _T(x)) / 2


def _eye_like(x, n=None):
    n = x.shape[-1] if n is None else n
    return jnp.eye(n, dtype=x.dtype)


def _square(a, name):
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"Argument to {name} must have shape [..., n, n], got {tuple(a.shape)}")


def _bcast_batch(a, b):
    batch = jnp.broadcast_shapes(tuple(a.shape[:-2]), tuple(b.shape[:-2]))
    return (jnp.broadcast_to(a, batch + tuple(a.shape[-2:])), jnp.broadcast_to(b, batch + tuple(b.shape[-2:])))


def _i(flag):
    return 1 if flag else 0


# ---------------------------------------------------------------------------------
# the primitives
# ---------------------------------------------------------------------------------
def _ts(a, b, lower, transpose_a=False, unit_diagonal=False):
    """op(a) x = b for x (left side), batch dims broadcast."""
    a, b = _bcast_batch(a, b)
    return bind("triangular_solve", a, b, lower=_i(lower), transpose_a=_i(transpose_a),
                unit_diagonal=_i(unit_diagonal))


def triangular_solve(a, b, left_side=False, lower=False, transpose_a=False, conjugate_a=False,
                     unit_diagonal=False):
    """jax.lax.linalg.triangular_solve: op(a) x = b (left_side) or x op(a) = b."""
    a, b = _inexact(a, b)
    if left_side:
        return _ts(a, b, lower, transpose_a, unit_diagonal)
    # x op(a) = b  <=>  op(a)^T x^T = b^T
    return _T(_ts(a, _T(b), lower, not transpose_a, unit_diagonal))


@custom_jvp
def _cholesky(a):
    # tril: a matrix that is not positive definite gives NaN below the diagonal and 0
    # above, as JAX's jnp.tril(cholesky_p.bind(x)).
    return jnp.tril(bind("cholesky", a))


@_cholesky.defjvp
def _cholesky_jvp(primals, tangents):
    # jax cholesky_jvp_rule: L_dot = L phi(L^-1 sym(a_dot) L^-T), phi = tril with the diagonal halved.
    (a,), (da,) = primals, tangents
    L = _cholesky(a)
    sigma = _sym(da)
    m = _ts(L, _T(_ts(L, sigma, lower=True)), lower=True)  # L^-1 sigma L^-T
    phi = jnp.tril(m) / (1 + _eye_like(m))
    return L, jnp.matmul(L, phi)


def cholesky(x, *, symmetrize_input=True):
    """jax.lax.linalg.cholesky: the lower factor (NaN where x is not positive definite)."""
    x = _inexact(x)
    return _cholesky(_sym(x) if symmetrize_input else x)


def _lu_raw(a):
    lu_, piv, perm = bind("lu", a)
    return lu_, piv, perm


def lu(x):
    """jax.lax.linalg.lu: (lu, pivots, permutation) with partial pivoting (not differentiable)."""
    return _lu_raw(_inexact(x))


def _permute_rows(b, perm):
    idx = jnp.broadcast_to(jnp.expand_dims(perm, -1), tuple(b.shape))
    return jnp.take_along_axis(b, idx, axis=-2)


def _lu_solve(lu_, perm, b):
    lu_, b = _bcast_batch(lu_, b)
    perm = jnp.broadcast_to(perm, tuple(b.shape[:-1]))
    y = _ts(lu_, _permute_rows(b, perm), lower=True, unit_diagonal=True)
    return _ts(lu_, y, lower=False)


def _solve_raw(a, b):
    """a^-1 b through lu and two triangular solves: linear in b, differentiable in b only
    (the custom_jvp rules below use it for tangents)."""
    lu_, _, perm = _lu_raw(a)
    return _lu_solve(lu_, perm, b)


@custom_jvp
def _solve(a, b):
    return _solve_raw(a, b)


@_solve.defjvp
def _solve_jvp(primals, tangents):
    # x = a^-1 b: x_dot = a^-1 (b_dot - a_dot x)
    (a, b), (da, db) = primals, tangents
    lu_, _, perm = _lu_raw(a)
    x = _lu_solve(lu_, perm, b)
    return x, _lu_solve(lu_, perm, db - jnp.matmul(da, x))


@functools.partial(custom_jvp, nondiff_argnums=(1,))
def _eigh(a, lower):
    v, w = bind("eigh", a, lower=_i(lower))
    return v, w


@_eigh.defjvp
def _eigh_jvp(lower, primals, tangents):
    # jax eigh_jvp_rule: F = 1/(w_j - w_i) off the diagonal, dv = v (F * v^T a_dot v), dw = diag(v^T a_dot v).
    (a,), (da,) = primals, tangents
    v, w = _eigh(a, lower)
    eye = _eye_like(a)
    F = 1 / (eye + jnp.expand_dims(w, -2) - jnp.expand_dims(w, -1)) - eye
    vt_da_v = jnp.matmul(jnp.matmul(_T(v), da), v)
    dv = jnp.matmul(v, F * vt_da_v)
    dw = jnp.diagonal(vt_da_v, axis1=-2, axis2=-1)
    return (v, w), (dv, dw)


def eigh(x, *, lower=True, symmetrize_input=True, sort_eigenvalues=True, subset_by_index=None):
    """jax.lax.linalg.eigh: (v, w), eigenvalues ascending."""
    if subset_by_index is not None:
        raise NotImplementedError("eigh: subset_by_index is not supported by podlet")
    x = _inexact(x)
    _square(x, "eigh")
    return _eigh(_sym(x) if symmetrize_input else x, bool(lower))


@functools.partial(custom_jvp, nondiff_argnums=(1,))
def _qr(a, full_matrices):
    q, r = bind("qr", a, full_matrices=_i(full_matrices))
    return q, r


@_qr.defjvp
def _qr_jvp(full_matrices, primals, tangents):
    # jax qr_jvp_rule (j-towns.github.io/papers/qr-derivative.pdf).
    (a,), (da,) = primals, tangents
    q, r = _qr(a, full_matrices)
    m, n = a.shape[-2:]
    if m < n or (full_matrices and m != n):
        raise NotImplementedError("Unimplemented case of QR decomposition derivative")
    dx_rinv = _T(_ts(r, _T(da), lower=False, transpose_a=True))  # da r^-1
    qt_dx_rinv = jnp.matmul(_T(q), dx_rinv)
    low = jnp.tril(qt_dx_rinv, -1)
    do = low - _T(low)
    dq = jnp.matmul(q, do - qt_dx_rinv) + dx_rinv
    dr = jnp.matmul(qt_dx_rinv - do, r)
    return (q, r), (dq, dr)


def qr(x, *, pivoting=False, full_matrices=True):
    """jax.lax.linalg.qr: (q, r)."""
    if pivoting:
        raise NotImplementedError("qr: pivoting is not supported by podlet")
    x = _inexact(x)
    if x.ndim < 2:
        raise ValueError(f"qr: argument must have shape [..., m, n], got {tuple(x.shape)}")
    return _qr(x, bool(full_matrices))


@custom_jvp
def _svd_thin(a):
    s, u, vt = bind("svd", a, full_matrices=0, compute_uv=1)
    return s, u, vt


def _svd_tangents(a, da, s, u, vt, compute_uv):
    # jax _svd_jvp_rule.
    ut, v = _T(u), _T(vt)
    s_dim = jnp.expand_dims(s, -2)
    dS = jnp.matmul(jnp.matmul(ut, da), v)
    ds = jnp.diagonal(dS, axis1=-2, axis2=-1)
    if not compute_uv:
        return ds
    s_diffs = (s_dim + _T(s_dim)) * (s_dim - _T(s_dim))
    eye = _eye_like(s, s.shape[-1])
    F = 1 / (s_diffs + eye) - eye
    dSS = s_dim * dS
    SdS = _T(s_dim) * dS
    s_zeros = jnp.astype(s == 0, s.dtype)
    s_inv = 1 / (s + s_zeros) - s_zeros
    s_inv_mat = jnp.expand_dims(s_inv, -1) * eye
    dUdV_diag = 0.5 * (dS - _T(dS)) * s_inv_mat
    dU = jnp.matmul(u, F * (dSS + _T(dSS)) + dUdV_diag)
    dV = jnp.matmul(v, F * (SdS + _T(SdS)))
    m, n = a.shape[-2:]
    if m > n:
        dAV = jnp.matmul(da, v)
        dU = dU + (dAV - jnp.matmul(u, jnp.matmul(ut, dAV))) / s_dim
    if n > m:
        dAHU = jnp.matmul(_T(da), u)
        dV = dV + (dAHU - jnp.matmul(v, jnp.matmul(vt, dAHU))) / s_dim
    return ds, dU, _T(dV)


@_svd_thin.defjvp
def _svd_thin_jvp(primals, tangents):
    (a,), (da,) = primals, tangents
    s, u, vt = _svd_thin(a)
    return (s, u, vt), _svd_tangents(a, da, s, u, vt, True)


@custom_jvp
def _svd_values(a):
    return bind("svd", a, full_matrices=0, compute_uv=0)


@_svd_values.defjvp
def _svd_values_jvp(primals, tangents):
    (a,), (da,) = primals, tangents
    s, u, vt = _svd_thin(a)
    return s, _svd_tangents(a, da, s, u, vt, False)


@custom_jvp
def _svd_full(a):
    s, u, vt = bind("svd", a, full_matrices=1, compute_uv=1)
    return s, u, vt


@_svd_full.defjvp
def _svd_full_jvp(primals, tangents):
    raise NotImplementedError("Singular value decomposition JVP not implemented for full matrices")


def svd(x, *, full_matrices=True, compute_uv=True, subset_by_index=None, algorithm=None):
    """jax.lax.linalg.svd: s, or (u, s, vt)."""
    if subset_by_index is not None:
        raise NotImplementedError("svd: subset_by_index is not supported by podlet")
    x = _inexact(x)
    if x.ndim < 2:
        raise ValueError(f"svd: argument must have shape [..., m, n], got {tuple(x.shape)}")
    if not compute_uv:
        return _svd_values(x)
    s, u, vt = _svd_full(x) if full_matrices else _svd_thin(x)
    return u, s, vt
