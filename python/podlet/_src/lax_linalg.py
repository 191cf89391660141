"""podlet.lax.linalg (jax.lax.linalg): the linear-algebra primitives and their derivative rules.

Seven primitives do the factorisations (cpp/podlet/prims/linalg.cc, Eigen, one matrix at
a time over any leading batch dims): cholesky, triangular_solve, lu, eigh, eig, qr, svd.
triangular_solve has a VJP rule in C++. The factorisations are differentiated by the
custom_jvp rules here, the formulas of jax/_src/lax/linalg.py (cholesky_jvp_rule,
_lu_jvp_rule, eigh_jvp_rule, eig_jvp_rule, qr_jvp_rule, _svd_jvp_rule) and of
jax.numpy.linalg (solve, slogdet, det, pinv in python/podlet/_src/linalg.py); reverse
mode transposes them. Their tangents go through matmuls, triangular solves and the
factorisation functions themselves, never through a bare factorisation primitive.

Higher derivatives: a rule's call to its own function (``L = _cholesky(a)`` in the
Cholesky rule, ``_lu(a)`` in solve's) is again a custom_jvp node, whose rule is traced
one level deeper, down to ``_RULE_DEPTH`` = 3 levels (custom_derivatives._Tracing):
hessians (jacfwd of jacrev), jacrev of jacrev and grad of grad work to third order,
under jit and vmap too, and agree with jax.hessian. One order more reaches the bare
primitive: an error naming it, never a silent zero.

eig takes a real matrix and returns ComplexArray results (complex64 for float32): the
eigenvalues are differentiable (first order, JAX's rule), the eigenvectors are not, as
in JAX without enable_eigvec_derivs; a rule that refuses (eig's vectors, svd's full
matrices, qr of a wide matrix) does not stop jit or vmap: the error comes only when a
derivative is taken, naming the primitive (JAX raises NotImplementedError there).

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

__all__ = ["cholesky", "eig", "eigh", "lu", "qr", "svd", "triangular_solve"]

# Levels of rule tracing for the factorisations' custom_jvp functions (custom_derivatives
# _Tracing): a rule's own call to its function is again a node, down to this depth, so
# derivatives up to this order go through the rules (each level traces the rule once more).
_RULE_DEPTH = 3


def _linalg_rule(f):
    """Marks a custom_jvp function of this module: rules traced to _RULE_DEPTH levels, and
    a rule that raises NotImplementedError (svd of full matrices, eig's vectors) does so
    only when a derivative is taken (then naming the primitive), not under jit or vmap."""
    f._rule_depth = _RULE_DEPTH
    f._defer_rule_errors = True
    return f


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


@_linalg_rule
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


@_linalg_rule
@custom_jvp
def _lu(a):
    return _lu_raw(a)


@_lu.defjvp
def _lu_jvp(primals, tangents):
    # jax _lu_jvp_rule: with P a = L U (L unit lower m x m, U upper n x n, padded with the
    # identity past k = min(m, n)), X = L^-1 P a_dot U^-1 and lu_dot = L tril(X, -1) + triu(X) U.
    (a,), (da,) = primals, tangents
    lu_, piv, perm = _lu(a)
    m, n = a.shape[-2:]
    k = min(m, n)
    x = _permute_rows(da, perm)
    l = jnp.tril(lu_[..., :, :k], -1)
    if m > k:
        l = jnp.concatenate([l, jnp.zeros(tuple(l.shape[:-1]) + (m - k,), a.dtype)], axis=-1)
    l = l + _eye_like(a, m)
    u = jnp.triu(lu_[..., :k, :])
    if n > k:
        u = jnp.concatenate([u, jnp.zeros(tuple(u.shape[:-2]) + (n - k, n), a.dtype)], axis=-2)
        u = u + jnp.pad(_eye_like(a, n - k), ((k, 0), (k, 0)))
    la_ = _ts(l, x, lower=True, unit_diagonal=True)
    lau = _T(_ts(u, _T(la_), lower=False, transpose_a=True))  # la_ U^-1
    lu_dot = jnp.matmul(l, jnp.tril(lau, -1)) + jnp.matmul(jnp.triu(lau), u)
    return (lu_, piv, perm), (lu_dot, jnp.zeros_like(piv), jnp.zeros_like(perm))


def lu(x):
    """jax.lax.linalg.lu: (lu, pivots, permutation) with partial pivoting; lu differentiable
    (JAX's rule), pivots and permutation integer."""
    return _lu(_inexact(x))


def _permute_rows(b, perm):
    idx = jnp.broadcast_to(jnp.expand_dims(perm, -1), tuple(b.shape))
    return jnp.take_along_axis(b, idx, axis=-2)


def _lu_solve(lu_, perm, b):
    lu_, b = _bcast_batch(lu_, b)
    perm = jnp.broadcast_to(perm, tuple(b.shape[:-1]))
    y = _ts(lu_, _permute_rows(b, perm), lower=True, unit_diagonal=True)
    return _ts(lu_, y, lower=False)


def _solve_raw(a, b):
    """a^-1 b through the lu primitive and two triangular solves (what _solve runs)."""
    lu_, _, perm = _lu_raw(a)
    return _lu_solve(lu_, perm, b)


@_linalg_rule
@custom_jvp
def _solve(a, b):
    return _solve_raw(a, b)


@_solve.defjvp
def _solve_jvp(primals, tangents):
    # x = a^-1 b: x_dot = a^-1 (b_dot - a_dot x), both solves with the factors of _lu (a
    # node with its own rule, so differentiable in a) and triangular solves (primitives
    # with VJPs): the rule can be differentiated in turn.
    (a, b), (da, db) = primals, tangents
    lu_, _, perm = _lu(a)
    x = _lu_solve(lu_, perm, b)
    return x, _lu_solve(lu_, perm, db - jnp.matmul(da, x))


def _solve_lu(a, b):
    """a^-1 b through _lu: differentiable in a and b (for tangents inside rules)."""
    lu_, _, perm = _lu(a)
    return _lu_solve(lu_, perm, b)


@_linalg_rule
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


@_linalg_rule
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


@_linalg_rule
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


@_linalg_rule
@custom_jvp
def _svd_values(a):
    return bind("svd", a, full_matrices=0, compute_uv=0)


@_svd_values.defjvp
def _svd_values_jvp(primals, tangents):
    (a,), (da,) = primals, tangents
    s, u, vt = _svd_thin(a)
    return s, _svd_tangents(a, da, s, u, vt, False)


@_linalg_rule
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


# ---------------------------------------------------------------------------------
# eig: nonsymmetric eigenproblem of a real matrix, complex results (ComplexArray)
# ---------------------------------------------------------------------------------
_EIGVEC_MSG = ("Derivatives of non-symmetric eigenvectors are only valid under assumptions on the input that JAX "
               "cannot check (see the enable_eigvec_derivs argument to jax.lax.linalg.eig). Pass "
               "enable_eigvec_derivs=True to jax.lax.linalg.eig to opt in. See "
               "https://github.com/jax-ml/jax/issues/2748 for discussion.")


def _complex_mod():
    from . import complex as _c
    return _c


@_linalg_rule
@custom_jvp
def _eig_vectors(a):
    wr, wi, vr, vi = bind("eig", a, compute_right_eigenvectors=1)
    return wr, wi, vr, vi


@_eig_vectors.defjvp
def _eig_vectors_jvp(primals, tangents):
    # JAX's eig_jvp_rule refuses eigenvector derivatives unless enable_eigvec_derivs (which
    # podlet does not have). Deferred (_linalg_rule): jit and vmap of eig work, a derivative
    # through the eigenvectors is an error naming the eig primitive.
    raise NotImplementedError(_EIGVEC_MSG)


def _csolve(vr, vi, br, bi):
    """(vr + i vi)^-1 (br + i bi) as the real system [[vr, -vi], [vi, vr]] [xr; xi] = [br; bi]."""
    n = vr.shape[-1]
    m = jnp.concatenate([jnp.concatenate([vr, -vi], axis=-1), jnp.concatenate([vi, vr], axis=-1)], axis=-2)
    x = _solve_lu(m, jnp.concatenate([br, bi], axis=-2))
    return x[..., :n, :], x[..., n:, :]


@_linalg_rule
@custom_jvp
def _eigvals(a):
    wr, wi = bind("eig", a, compute_right_eigenvectors=0)
    return wr, wi


@_eigvals.defjvp
def _eigvals_jvp(primals, tangents):
    # jax eig_jvp_rule: w_dot = diag(v^-1 a_dot v) = sum_j (v^-1 a_dot)_ij v_ji.
    (a,), (da,) = primals, tangents
    wr, wi, vr, vi = _eig_vectors(a)
    xr, xi = _csolve(vr, vi, da, jnp.zeros_like(da))
    dwr = jnp.sum(xr * _T(vr) - xi * _T(vi), axis=-1)
    dwi = jnp.sum(xr * _T(vi) + xi * _T(vr), axis=-1)
    return (wr, wi), (dwr, dwi)


def _unit_columns(re, im):
    """Columns scaled to unit 2-norm, then turned so their largest component is real and
    positive (LAPACK geev's normalisation of left eigenvectors)."""
    mag2 = re * re + im * im
    nrm = jnp.sqrt(jnp.sum(mag2, axis=-2, keepdims=True))
    k = jnp.expand_dims(jnp.argmax(mag2, axis=-2), -2)
    pr, pi = jnp.take_along_axis(re, k, axis=-2), jnp.take_along_axis(im, k, axis=-2)
    pa = jnp.sqrt(pr * pr + pi * pi)
    safe = jnp.where(pa > 0, pa, jnp.ones((), pa.dtype))
    cr, ci = jnp.where(pa > 0, pr / safe, jnp.ones((), pa.dtype)), jnp.where(pa > 0, -pi / safe, jnp.zeros((), pa.dtype))
    return (re * cr - im * ci) / nrm, (re * ci + im * cr) / nrm


def eig(x, *, compute_left_eigenvectors=True, compute_right_eigenvectors=True, enable_eigvec_derivs=False,
        use_magma=None, implementation=None):
    """jax.lax.linalg.eig of a real square matrix (or batch): [w] + [vl] + [vr], complex
    (ComplexArray: complex64 for float32 input, complex128 for float64). Eigenvalues in
    LAPACK's order (conjugate pairs adjacent, positive imaginary part first); eigenvectors
    as columns of unit 2-norm, a complex one with its largest component real.
    Differentiable in the eigenvalues only (JAX's rule); eigenvector derivatives raise."""
    if enable_eigvec_derivs:
        raise NotImplementedError("eig: enable_eigvec_derivs=True (eigenvector derivatives) is not supported by "
                                  "podlet")
    c = _complex_mod()
    if isinstance(x, c.ComplexArray) or c.is_complex_value(x):
        raise TypeError("eig: podlet takes real input only (its eigensolver is real); got a complex array")
    x = _inexact(x)
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ValueError(f"The input to eig must be a square matrix. Got shape {tuple(x.shape)}.")
    if str(x.dtype) not in ("float32", "float64"):
        raise NotImplementedError(f"eig: unsupported dtype {x.dtype} (float32 or float64 input, as JAX's LAPACK)")
    if not (compute_left_eigenvectors or compute_right_eigenvectors):
        return [c.make(*_eigvals(x))]
    wr, wi, vr, vi = _eig_vectors(x)
    out = [c.make(wr, wi)]
    if compute_left_eigenvectors:
        # left eigenvectors: a^H vl = conj(w) vl, i.e. vl^H = rows of v^-1, renormalised
        eye = jnp.broadcast_to(_eye_like(x), tuple(x.shape))
        ir, ii = _csolve(vr, vi, eye, jnp.zeros_like(eye))
        out.append(c.make(*_unit_columns(_T(ir), -_T(ii))))
    if compute_right_eigenvectors:
        out.append(c.make(vr, vi))
    return out
