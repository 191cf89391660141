"""podlet.numpy.linalg (jax.numpy.linalg): compositions of the primitives of podlet.lax.linalg
(python/podlet/_src/lax_linalg.py, which documents dtypes, NaN behaviour and derivatives)
and of podlet.numpy, written like jax/_src/numpy/linalg.py. eig / eigvals take real input
and return complex results as ComplexArray (python/podlet/_src/complex.py).
"""
import functools
import math
import operator
from typing import NamedTuple

import numpy as _np

from .. import numpy as jnp
from .custom_derivatives import custom_jvp
from . import lax_linalg as _ll
from .lax_linalg import (_T, _bcast_batch, _eye_like, _inexact, _linalg_rule, _lu_raw, _solve, _solve_lu, _square,
                         _svd_thin)

__all__ = ["cholesky", "cond", "cross", "det", "diagonal", "eig", "eigh", "eigvals", "eigvalsh", "inv", "lstsq", "matmul",
           "matrix_norm", "matrix_power", "matrix_rank", "matrix_transpose", "multi_dot", "norm", "outer", "pinv",
           "qr", "slogdet", "solve", "svd", "svdvals", "tensordot", "tensorinv", "tensorsolve", "trace", "vecdot",
           "vector_norm", "EigResult", "EighResult", "QRResult", "SlogdetResult", "SVDResult"]


class EigResult(NamedTuple):
    eigenvalues: object
    eigenvectors: object


class EighResult(NamedTuple):
    eigenvalues: object
    eigenvectors: object


class QRResult(NamedTuple):
    Q: object
    R: object


class SlogdetResult(NamedTuple):
    sign: object
    logabsdet: object


class SVDResult(NamedTuple):
    U: object
    S: object
    Vh: object


# ---------------------------------------------------------------------------------
# podlet.numpy.linalg
# ---------------------------------------------------------------------------------
def cholesky(a, *, upper=False, symmetrize_input=True):
    a = _inexact(a)
    _square(a, "cholesky")
    L = _ll.cholesky(a, symmetrize_input=symmetrize_input)
    return _T(L) if upper else L


def svd(a, full_matrices=True, compute_uv=True, hermitian=False, subset_by_index=None):
    """jnp.linalg.svd (hermitian=True takes the general path: the same values)."""
    a = _inexact(a)
    if compute_uv:
        u, s, vh = _ll.svd(a, full_matrices=full_matrices, compute_uv=True, subset_by_index=subset_by_index)
        return SVDResult(u, s, vh)
    return _ll.svd(a, full_matrices=full_matrices, compute_uv=False, subset_by_index=subset_by_index)


def solve(a, b):
    a, b = _inexact(a, b)
    if a.ndim < 2:
        raise ValueError(f"left hand array must be at least two dimensional; got a.shape={tuple(a.shape)!r}")
    _square(a, "solve")
    if b.ndim > 1 and a.ndim == b.ndim + 1 and a.shape[-1] == b.shape[-1] and a.shape[-1] != b.shape[-2]:
        raise ValueError(f"Invalid shapes for solve: {tuple(a.shape)}, {tuple(b.shape)}. Prior to JAX v0.5.0, this "
                         "would have been treated as a batched 1-dimensional solve. To recover this behavior, use "
                         "solve(a, b[..., None]).squeeze(-1).")
    if b.ndim == 1:
        if b.shape[0] != a.shape[-1]:
            raise ValueError(f"solve: b has {b.shape[0]} rows, a is {tuple(a.shape)}")
        a2, b2 = _bcast_batch(a, jnp.reshape(b, (b.shape[0], 1)))
        return _solve(a2, b2)[..., 0]
    if b.shape[-2] != a.shape[-1]:
        raise ValueError(f"solve: b of shape {tuple(b.shape)} must have {a.shape[-1]} rows to match a {tuple(a.shape)}")
    a2, b2 = _bcast_batch(a, b)
    return _solve(a2, b2)


def inv(a):
    a = _inexact(a)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"Argument to inv must have shape [..., n, n], got {tuple(a.shape)}.")
    return solve(a, jnp.broadcast_to(_eye_like(a), tuple(a.shape)))


def _slogdet_raw(a):
    lu_, piv, _ = _lu_raw(a)
    diag = jnp.diagonal(lu_, axis1=-2, axis2=-1)
    is_zero = jnp.any(diag == 0, axis=-1)
    iota = jnp.arange(a.shape[-1], dtype=piv.dtype)
    parity = jnp.count_nonzero(piv != iota, axis=-1) + jnp.count_nonzero(diag < 0, axis=-1)
    sign = jnp.astype(-2 * (parity % 2) + 1, a.dtype)
    sign = jnp.where(is_zero, jnp.zeros((), a.dtype), sign)
    logdet = jnp.where(is_zero, jnp.full((), -_np.inf, a.dtype), jnp.sum(jnp.log(jnp.abs(diag)), axis=-1))
    return sign, logdet


@_linalg_rule
@custom_jvp
def _slogdet_lu(a):
    return _slogdet_raw(a)


@_slogdet_lu.defjvp
def _slogdet_jvp(primals, tangents):
    (a,), (da,) = primals, tangents
    sign, ans = _slogdet_lu(a)
    ans_dot = jnp.trace(_solve_lu(a, da), axis1=-1, axis2=-2)
    return (sign, ans), (jnp.zeros_like(sign), ans_dot)


def _slogdet_small(a):
    # n = 1, 2: closed forms, differentiated as compositions (JAX's _slogdet_small rule
    # gives the same derivative: d log|det| = tr(a^-1 da)).
    if a.shape[-1] == 1:
        d = a[..., 0, 0]
    else:
        d = a[..., 0, 0] * a[..., 1, 1] - a[..., 0, 1] * a[..., 1, 0]
    return jnp.sign(d), jnp.log(jnp.abs(d))


def slogdet(a, *, method=None):
    a = _inexact(a)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"Argument to slogdet() must have shape [..., n, n], got {tuple(a.shape)}")
    if method not in (None, "lu"):
        raise ValueError(f"Unknown slogdet method '{method}'. Supported methods are 'lu' (`None`)"
                         + (" (podlet has no 'qr')." if method == "qr" else ", and 'qr'."))
    if a.shape[-1] in (1, 2):
        return SlogdetResult(*_slogdet_small(a))
    return SlogdetResult(*_slogdet_lu(a))


@_linalg_rule
@custom_jvp
def _det(a):
    sign, logdet = _slogdet_raw(a)
    return sign * jnp.exp(logdet)


@_det.defjvp
def _det_jvp(primals, tangents):
    # d det = det tr(a^-1 da) (JAX uses a cofactor solve that also covers singular a).
    (a,), (da,) = primals, tangents
    y = _det(a)
    return y, y * jnp.trace(_solve_lu(a, da), axis1=-1, axis2=-2)


def det(a):
    a = _inexact(a)
    s = tuple(a.shape)
    if len(s) >= 2 and s[-1] == 2 and s[-2] == 2:
        return a[..., 0, 0] * a[..., 1, 1] - a[..., 0, 1] * a[..., 1, 0]
    if len(s) >= 2 and s[-1] == 3 and s[-2] == 3:
        return (a[..., 0, 0] * a[..., 1, 1] * a[..., 2, 2] + a[..., 0, 1] * a[..., 1, 2] * a[..., 2, 0]
                + a[..., 0, 2] * a[..., 1, 0] * a[..., 2, 1] - a[..., 0, 2] * a[..., 1, 1] * a[..., 2, 0]
                - a[..., 0, 0] * a[..., 1, 2] * a[..., 2, 1] - a[..., 0, 1] * a[..., 1, 0] * a[..., 2, 2])
    if len(s) >= 2 and s[-1] == s[-2]:
        return _det(a)
    raise ValueError(f"Argument to _det() must have shape [..., n, n], got {s}")


def eig(a):
    """jnp.linalg.eig of a real square matrix (or batch): EigResult(eigenvalues, eigenvectors),
    complex64 for float32 input (complex128 for float64). As JAX, differentiable in the
    eigenvalues only."""
    w, v = _ll.eig(a, compute_left_eigenvectors=False)
    return EigResult(w, v)


def eigvals(a):
    """jnp.linalg.eigvals of a real square matrix (or batch), complex64 for float32 input."""
    return _ll.eig(a, compute_left_eigenvectors=False, compute_right_eigenvectors=False)[0]


def eigh(a, UPLO=None, symmetrize_input=True):
    if UPLO is None or UPLO == "L":
        lower = True
    elif UPLO == "U":
        lower = False
    else:
        raise ValueError(f"UPLO must be one of None, 'L', or 'U', got {UPLO}")
    v, w = _ll.eigh(a, lower=lower, symmetrize_input=symmetrize_input)
    return EighResult(w, v)


def eigvalsh(a, UPLO="L", *, symmetrize_input=True):
    w, _ = eigh(a, UPLO, symmetrize_input=symmetrize_input)
    return w


def qr(a, mode="reduced"):
    a = _inexact(a)
    if mode == "raw":
        raise NotImplementedError("qr: mode='raw' (Householder reflectors) is not supported by podlet")
    if mode in ("reduced", "r", "full"):
        full_matrices = False
    elif mode == "complete":
        full_matrices = True
    else:
        raise ValueError(f"Unsupported QR decomposition mode '{mode}'")
    q, r = _ll.qr(a, full_matrices=full_matrices)
    return r if mode == "r" else QRResult(q, r)


@_linalg_rule
@functools.partial(custom_jvp, nondiff_argnums=(1, 2))
def _pinv(a, rtol, hermitian):
    m, n = a.shape[-2:]
    if m == 0 or n == 0:
        return jnp.zeros(tuple(a.shape[:-2]) + (n, m), a.dtype)
    if rtol is None:
        rtol = 10.0 * max(m, n) * float(jnp.finfo(a.dtype).eps)
    rtol = jnp.asarray(rtol, dtype=a.dtype)
    s, u, vt = _svd_thin(a)
    rtol = jnp.reshape(rtol, tuple(rtol.shape) + (1,) * (s.ndim - rtol.ndim))
    cutoff = rtol * s[..., 0:1]
    s = jnp.where(s > cutoff, s, jnp.full((), _np.inf, a.dtype))
    return jnp.matmul(_T(vt), _T(u) / jnp.expand_dims(s, -1))


@_pinv.defjvp
def _pinv_jvp(rtol, hermitian, primals, tangents):
    # Golub and Pereyra (1973), as jax _pinv_jvp.
    (a,), (a_dot,) = primals, tangents
    p = _pinv(a, rtol, hermitian)
    mm = jnp.matmul
    m, n = a.shape[-2:]
    if m >= n:
        s = mm(mm(p, _T(p)), _T(a_dot))
        t = mm(mm(_T(a_dot), _T(p)), p)
        p_dot = -mm(mm(p, a_dot), p) + s - mm(mm(s, a), p) + t - mm(mm(p, a), t)
    else:
        s = mm(p, mm(_T(p), _T(a_dot)))
        t = mm(_T(a_dot), mm(_T(p), p))
        p_dot = -mm(p, mm(a_dot, p)) + s - mm(s, mm(a, p)) + t - mm(p, mm(a, t))
    return p, p_dot


def pinv(a, rtol=None, hermitian=False, *, rcond=None):
    if rcond is not None:
        if rtol is not None:
            raise ValueError("pinv: only one of rtol and rcond may be specified.")
        rtol = rcond
    a = _inexact(a)
    if a.ndim < 2:
        raise ValueError(f"pinv: argument must have shape [..., m, n], got {tuple(a.shape)}")
    if rtol is not None and not isinstance(rtol, (int, float)):
        raise NotImplementedError("pinv: podlet takes a Python float rtol")
    return _pinv(a, None if rtol is None else float(rtol), bool(hermitian))


def matrix_power(a, n):
    a = jnp.asarray(a)
    if a.ndim < 2:
        raise TypeError(f"{a.ndim}-dimensional array given. Array must be at least two-dimensional")
    if a.shape[-2] != a.shape[-1]:
        raise TypeError("Last 2 dimensions of the array must be square")
    try:
        n = operator.index(n)
    except TypeError as err:
        raise TypeError(f"exponent must be an integer, got {n}") from err
    if n == 0:
        return jnp.broadcast_to(jnp.eye(a.shape[-2], dtype=a.dtype), tuple(a.shape))
    if n < 0:
        a = inv(a)
        n = -n
    if n == 1:
        return a
    if n == 2:
        return jnp.matmul(a, a)
    if n == 3:
        return jnp.matmul(jnp.matmul(a, a), a)
    z = result = None
    while n > 0:
        z = a if z is None else jnp.matmul(z, z)
        n, bit = divmod(n, 2)
        if bit:
            result = z if result is None else jnp.matmul(result, z)
    return result


def matrix_rank(M, rtol=None, *, hermitian=False, tol=None):
    if tol is not None:
        if rtol is not None:
            raise ValueError("matrix_rank: only one of tol or rtol may be specified.")
        rtol = tol
    M = _inexact(M)
    if M.ndim < 2:
        return jnp.astype(jnp.any(M != 0), jnp.int32)
    S = svd(M, full_matrices=False, compute_uv=False)
    if rtol is None:
        rtol = jnp.max(S, axis=-1) * (max(M.shape[-2:]) * float(jnp.finfo(S.dtype).eps))
    rtol = jnp.asarray(rtol, dtype=S.dtype)
    rtol = jnp.expand_dims(rtol, rtol.ndim)
    return jnp.sum(S > rtol, axis=-1)


def norm(x, ord=None, axis=None, keepdims=False):
    x = _inexact(x)
    ndim = x.ndim
    if axis is None:
        if ord is None:
            return jnp.sqrt(jnp.sum(x * x, keepdims=keepdims))
        axis = tuple(range(ndim))
    elif isinstance(axis, tuple):
        axis = tuple(_canon(a, ndim) for a in axis)
    else:
        axis = (_canon(axis, ndim),)
    if len(axis) == 1:
        return vector_norm(x, ord=2 if ord is None else ord, axis=axis, keepdims=keepdims)
    if len(axis) != 2:
        raise ValueError(f"Improper number of axes for norm: axis={axis!r}. Pass one axis to compute a vector-norm, "
                         "or two axes to compute a matrix-norm.")
    row_axis, col_axis = axis
    if ord is None or ord in ("f", "fro"):
        return jnp.sqrt(jnp.sum(x * x, axis=axis, keepdims=keepdims))
    if ord == 1 or ord == -1:
        if not keepdims and col_axis > row_axis:
            col_axis -= 1
        s = jnp.sum(jnp.abs(x), axis=row_axis, keepdims=keepdims)
        return jnp.max(s, axis=col_axis, keepdims=keepdims, initial=0) if ord == 1 else \
            jnp.min(s, axis=col_axis, keepdims=keepdims)
    if ord == _np.inf or ord == -_np.inf:
        if not keepdims and row_axis > col_axis:
            row_axis -= 1
        s = jnp.sum(jnp.abs(x), axis=col_axis, keepdims=keepdims)
        return jnp.max(s, axis=row_axis, keepdims=keepdims, initial=0) if ord == _np.inf else \
            jnp.min(s, axis=row_axis, keepdims=keepdims)
    if ord in ("nuc", 2, -2):
        x = jnp.moveaxis(x, axis, (-2, -1))
        s = svd(x, compute_uv=False)
        if ord == 2:
            y = jnp.max(s, axis=-1, initial=0)
        elif ord == -2:
            y = jnp.min(s, axis=-1)
        else:
            y = jnp.sum(s, axis=-1)
        if keepdims:
            y = jnp.expand_dims(y, axis)
        return y
    raise ValueError(f"Invalid order '{ord}' for matrix norm.")


def _canon(a, ndim):
    a = operator.index(a)
    if not -ndim <= a < ndim:
        raise ValueError(f"axis {a} is out of bounds for array of dimension {ndim}")
    return a % ndim


def vector_norm(x, /, *, axis=None, keepdims=False, ord=2):
    x = _inexact(x)
    if ord is None or (not isinstance(ord, str) and ord == 2):
        return jnp.sqrt(jnp.sum(x * x, axis=axis, keepdims=keepdims))
    if isinstance(ord, str):
        msg = f"Invalid order '{ord}' for vector norm."
        if ord == "inf":
            msg += "Use 'jax.numpy.inf' instead."
        if ord == "-inf":
            msg += "Use '-jax.numpy.inf' instead."
        raise ValueError(msg)
    if ord == _np.inf:
        return jnp.max(jnp.abs(x), axis=axis, keepdims=keepdims, initial=0)
    if ord == -_np.inf:
        return jnp.min(jnp.abs(x), axis=axis, keepdims=keepdims)
    if ord == 0:
        return jnp.sum(jnp.astype(x != 0, x.dtype), axis=axis, keepdims=keepdims)
    if ord == 1:
        return jnp.sum(jnp.abs(x), axis=axis, keepdims=keepdims)
    out = jnp.sum(jnp.abs(x) ** float(ord), axis=axis, keepdims=keepdims)
    return jnp.power(out, jnp.asarray(1.0 / float(ord), dtype=x.dtype))


def matrix_norm(x, /, *, keepdims=False, ord="fro"):
    return norm(x, ord=ord, keepdims=keepdims, axis=(-2, -1))


def lstsq(a, b, rcond=None, *, numpy_resid=False):
    a, b = _inexact(a, b)
    if a.shape[0] != b.shape[0]:
        raise ValueError("Leading dimensions of input arrays must match")
    b_orig_ndim = b.ndim
    if b_orig_ndim == 1:
        b = b[:, None]
    if a.ndim != 2:
        raise TypeError(f"{a.ndim}-dimensional array given. Array must be two-dimensional")
    if b.ndim != 2:
        raise TypeError(f"{b.ndim}-dimensional array given. Array must be one or two-dimensional")
    m, n = a.shape
    dtype = a.dtype
    if a.size == 0:
        s = jnp.zeros((0,), dtype)
        rank = jnp.asarray(0, dtype=jnp.int32)
        x = jnp.zeros((n,) + tuple(b.shape[1:]), dtype)
    else:
        eps = float(jnp.finfo(dtype).eps)
        if rcond is None:
            rcond = eps * max(n, m)
        else:
            rcond = eps if rcond < 0 else float(rcond)
        s, u, vt = _svd_thin(a)
        mask = (s > 0) & (s >= rcond * s[0])
        rank = jnp.sum(mask)
        safe_s = jnp.where(mask, s, jnp.ones((), dtype))
        s_inv = jnp.where(mask, 1 / safe_s, jnp.zeros((), dtype))[:, None]
        uTb = jnp.matmul(_T(u), b)
        x = jnp.matmul(_T(vt), s_inv * uTb)
    if numpy_resid and (int(rank) < n or m <= n):
        resid = jnp.zeros((0,), dtype)
    else:
        resid = norm(b - jnp.matmul(a, x), axis=0) ** 2
    if b_orig_ndim == 1:
        x = jnp.ravel(x)
    return x, resid, rank, s


def cross(x1, x2, /, *, axis=-1):
    x1, x2 = jnp.asarray(x1), jnp.asarray(x2)
    if x1.shape[axis] != 3 or x2.shape[axis] != 3:
        raise ValueError("Both input arrays must be (arrays of) 3-dimensional vectors, but they have "
                         f"x1.shape[axis]={x1.shape[axis]!r} and x2.shape[axis]={x2.shape[axis]!r}")
    return jnp.cross(x1, x2, axis=axis)


def outer(x1, x2, /):
    x1, x2 = jnp.asarray(x1), jnp.asarray(x2)
    if x1.ndim != 1 or x2.ndim != 1:
        raise ValueError(f"Input arrays must be one-dimensional, but they are x1.ndim={x1.ndim!r} x2.ndim={x2.ndim!r}")
    return x1[:, None] * x2[None, :]


def matrix_transpose(x, /):
    x = jnp.asarray(x)
    if x.ndim < 2:
        raise ValueError(f"matrix_transpose requires at least 2 dimensions; got ndim={x.ndim!r}")
    return _T(x)


def vecdot(x1, x2, /, *, axis=-1, precision=None, preferred_element_type=None):
    return jnp.vecdot(x1, x2, axis=axis, precision=precision, preferred_element_type=preferred_element_type)


def matmul(x1, x2, /, *, precision=None, preferred_element_type=None):
    return jnp.matmul(x1, x2, precision=precision, preferred_element_type=preferred_element_type)


def tensordot(x1, x2, /, *, axes=2, precision=None, preferred_element_type=None):
    return jnp.tensordot(x1, x2, axes=axes, precision=precision, preferred_element_type=preferred_element_type)


def svdvals(x, /):
    return svd(x, compute_uv=False)


def diagonal(x, /, *, offset=0):
    return jnp.diagonal(x, offset=offset, axis1=-2, axis2=-1)


def trace(x, /, *, offset=0, dtype=None):
    return jnp.trace(x, offset=offset, axis1=-2, axis2=-1, dtype=dtype)


def tensorinv(a, ind=2):
    a = jnp.asarray(a)
    ind = operator.index(ind)
    if ind <= 0:
        raise ValueError(f"ind must be a positive integer; got ind={ind!r}")
    contracting, batch = tuple(a.shape[:ind]), tuple(a.shape[ind:])
    flat = (math.prod(contracting), math.prod(batch))
    if flat[0] != flat[1]:
        raise ValueError("tensorinv is only possible when the product of the first `ind` dimensions equals that of "
                         f"the remaining dimensions. got arr.shape={tuple(a.shape)!r} with ind={ind!r}.")
    return jnp.reshape(inv(jnp.reshape(a, flat)), batch + contracting)


def tensorsolve(a, b, axes=None):
    a, b = jnp.asarray(a), jnp.asarray(b)
    if axes is not None:
        a = jnp.moveaxis(a, axes, len(axes) * (a.ndim - 1,))
    out_shape = tuple(a.shape[b.ndim:])
    if tuple(a.shape[:b.ndim]) != tuple(b.shape):
        raise ValueError("After moving axes to end, leading shape of a must match shape of b. "
                         f"got a.shape={tuple(a.shape)}, b.shape={tuple(b.shape)}")
    if b.size != math.prod(out_shape):
        raise ValueError("Input arrays must have prod(a.shape[:b.ndim]) == prod(a.shape[b.ndim:]); "
                         f"got a.shape={tuple(a.shape)}, b.ndim={b.ndim}.")
    a = jnp.reshape(a, (b.size, math.prod(out_shape)))
    return jnp.reshape(solve(a, jnp.ravel(b)), out_shape)


def multi_dot(arrays, *, precision=None):
    arrs = [jnp.asarray(a) for a in arrays]
    if len(arrs) < 2:
        raise ValueError(f"multi_dot requires at least two arrays; got len(arrays)={len(arrs)}")
    if not (arrs[0].ndim in (1, 2) and arrs[-1].ndim in (1, 2) and all(a.ndim == 2 for a in arrs[1:-1])):
        raise ValueError("multi_dot: input arrays must all be two-dimensional, except for the first and last array "
                         f"which may be 1 or 2 dimensional. Got array shapes {[tuple(a.shape) for a in arrs]}")
    if any(a.shape[-1] != b.shape[0] for a, b in zip(arrs[:-1], arrs[1:])):
        raise ValueError("multi_dot: last dimension of each array must match first dimension of following array. "
                         f"Got array shapes {[tuple(a.shape) for a in arrs]}")
    out = arrs[0]
    for b in arrs[1:]:
        out = jnp.matmul(out, b)
    return out


def cond(x, p=None):
    x = _inexact(x)
    if x.ndim < 2:
        raise ValueError(f"jnp.linalg.cond: input array must be at least 2D; got arr.shape={tuple(x.shape)!r}")
    if x.shape[-1] == 0 or x.shape[-2] == 0:
        raise ValueError(f"jnp.linalg.cond: input array must not be empty; got arr.shape={tuple(x.shape)!r}")
    if p is None or p == 2:
        s = svdvals(x)
        return s[..., 0] / s[..., -1]
    if p == -2:
        s = svdvals(x)
        r = s[..., -1] / s[..., 0]
    else:
        if x.shape[-2] != x.shape[-1]:
            raise ValueError(f"jnp.linalg.cond: for p={p!r}, array must be square; got arr.shape={tuple(x.shape)!r}")
        r = norm(x, ord=p, axis=(-2, -1)) * norm(inv(x), ord=p, axis=(-2, -1))
    return jnp.where(jnp.isnan(r) & ~jnp.any(jnp.isnan(x), axis=(-2, -1)), jnp.full((), _np.inf, r.dtype), r)


def _register_submodules():
    """podlet.numpy and podlet.lax are modules, not packages: make `import
    podlet.numpy.linalg` and `import podlet.lax.linalg` work by registering these two
    modules under those names (podlet.numpy imports this one last)."""
    import sys
    from .. import lax
    sys.modules["podlet.numpy.linalg"] = sys.modules[__name__]
    sys.modules["podlet.lax.linalg"] = _ll
    lax.linalg = _ll


_register_submodules()
