"""jax.numpy's NaN-aware reductions, cumulative reductions, order statistics (median,
quantile, percentile and their nan* forms), average, ptp, cov and corrcoef: JAX's
algorithms over podlet's reduce_* / cumsum / cumprod / argsort / take primitives."""
import numpy as _np

from .. import lax
from .. import numpy as jnp
from . import dtypes as _dtypes
from .core import Array, Tracer, bind

__all__ = [
    "nanmin", "nanmax", "nansum", "nanprod", "nanmean", "nanvar", "nanstd", "nanargmax", "nanargmin",
    "cumsum", "cumprod", "nancumsum", "nancumprod", "cumulative_sum", "cumulative_prod", "ptp", "average",
    "quantile", "percentile", "median", "nanquantile", "nanpercentile", "nanmedian", "cov", "corrcoef",
]

_i32 = _np.int32


def _arr(x):
    return x if isinstance(x, (Array, Tracer)) else jnp.asarray(x)


def _isnan(a):
    return bind("ne", a, a)


def _upcast_f16(d):
    return _np.dtype(_np.float32) if _np.dtype(d) == _dtypes.bfloat16 else _np.dtype(d)


# ---------------------------------------------------------------------------------
# NaN-ignoring reductions
# ---------------------------------------------------------------------------------
def _nan_reduction(a, reduction, init, nan_if_all_nan, axis, keepdims, where, **kw):
    a = _arr(a)
    if not _dtypes.is_float(a.dtype):
        return reduction(a, axis=axis, keepdims=keepdims, where=where, **kw)
    out = reduction(bind("select", _isnan(a), jnp._const_like(a, init), a), axis=axis, keepdims=keepdims,
                    where=where, **kw)
    if nan_if_all_nan:
        return jnp.where(jnp.all(_isnan(a), axis=axis, keepdims=keepdims), jnp._const_like(out, _np.nan), out)
    return out


def _max(a, axis=None, keepdims=False, where=None, initial=None):
    return jnp.max(a, axis=axis, keepdims=keepdims, initial=initial, where=where)


def _min(a, axis=None, keepdims=False, where=None, initial=None):
    return jnp.min(a, axis=axis, keepdims=keepdims, initial=initial, where=where)


def _sum(a, axis=None, keepdims=False, where=None, dtype=None, initial=None):
    out = jnp.sum(a, axis=axis, dtype=dtype, keepdims=keepdims, where=where)
    return out if initial is None else jnp.add(out, jnp.astype(initial, out.dtype))


def _prod(a, axis=None, keepdims=False, where=None, dtype=None, initial=None):
    if where is not None:
        a = jnp.where(where, a, jnp._const_like(_arr(a), 1))
    out = jnp.prod(a, axis=axis, dtype=dtype, keepdims=keepdims)
    if dtype is None and out.dtype in (_dtypes.bool_, _dtypes.uint8):
        out = jnp.astype(out, _np.uint32 if out.dtype == _dtypes.uint8 else _i32)
    return out if initial is None else jnp.multiply(out, jnp.astype(initial, out.dtype))


def nanmin(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    """min ignoring NaN (NaN where every entry is NaN, unless initial is given)."""
    return _nan_reduction(a, _min, _np.inf, initial is None, axis, keepdims, where, initial=initial)


def nanmax(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    return _nan_reduction(a, _max, -_np.inf, initial is None, axis, keepdims, where, initial=initial)


def nansum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    return _nan_reduction(a, _sum, 0, False, axis, keepdims, where, dtype=dtype, initial=initial)


def nanprod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    return _nan_reduction(a, _prod, 1, False, axis, keepdims, where, dtype=dtype, initial=initial)


def nanmean(a, axis=None, dtype=None, out=None, keepdims=False, where=None):
    if out is not None:
        raise NotImplementedError("The 'out' argument to jnp.nanmean is not supported.")
    a = _arr(a)
    if not _dtypes.is_float(a.dtype):
        return jnp.mean(a, axis, dtype, keepdims, where=where)
    dtype = a.dtype if dtype is None else _dtypes.canonicalize(dtype)
    normalizer = jnp.sum(bind("not", _isnan(a)), axis=axis, dtype=dtype, keepdims=keepdims, where=where)
    return jnp.true_divide(nansum(a, axis, dtype=dtype, keepdims=keepdims, where=where), normalizer)


def nanvar(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, where=None, mean=None):
    """Variance ignoring NaN, in float32 for bfloat16 (JAX's _nanvar); NaN where fewer
    than ddof + 1 values remain."""
    if out is not None:
        raise NotImplementedError("The 'out' argument to jnp.nanvar is not supported.")
    a = _arr(a)
    if dtype is not None:
        cdt = dtype = _dtypes.canonicalize(dtype)
    elif not _dtypes.is_float(a.dtype):
        cdt = dtype = _np.dtype(_np.float32)
    else:
        dtype, cdt = a.dtype, a.dtype
    cdt = _upcast_f16(cdt)
    a = jnp.astype(a, cdt)
    a_mean = nanmean(a, axis, dtype=cdt, keepdims=True, where=where) if mean is None else jnp.astype(mean, cdt)
    centered = jnp.where(_isnan(a), 0, jnp.subtract(a, a_mean))
    centered = lax.integer_pow(centered, 2)
    normalizer = jnp.subtract(jnp.sum(bind("not", _isnan(a)), axis=axis, keepdims=keepdims, where=where), ddof)
    bad = jnp.less_equal(normalizer, 0)
    result = jnp.sum(centered, axis, keepdims=keepdims, where=where)
    result = jnp.where(bad, jnp._const_like(result, _np.nan), result)
    divisor = jnp.astype(jnp.where(bad, 1, normalizer), result.dtype)
    return jnp.astype(jnp.true_divide(result, divisor), dtype)


def nanstd(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, where=None, mean=None):
    return jnp.sqrt(nanvar(a, axis, dtype, out, ddof, keepdims, where, mean))


def _nanarg(a, axis, keepdims, fill, fn):
    a = _arr(a)
    if axis is not None:
        axis = int(axis)
    keepdims = bool(keepdims)
    if not _dtypes.is_float(a.dtype):
        return fn(a, axis=axis, keepdims=keepdims)
    nan = _isnan(a)
    res = fn(bind("select", nan, jnp._const_like(a, fill), a), axis=axis, keepdims=keepdims)
    return jnp.where(jnp.all(nan, axis=axis, keepdims=keepdims), _i32(-1), res)


def nanargmax(a, axis=None, out=None, keepdims=None):
    """argmax ignoring NaN; -1 where every entry is NaN (JAX's convention)."""
    if out is not None:
        raise NotImplementedError("The 'out' argument to jnp.nanargmax is not supported.")
    return _nanarg(a, axis, keepdims, -_np.inf, jnp.argmax)


def nanargmin(a, axis=None, out=None, keepdims=None):
    if out is not None:
        raise NotImplementedError("The 'out' argument to jnp.nanargmin is not supported.")
    return _nanarg(a, axis, keepdims, _np.inf, jnp.argmin)


# ---------------------------------------------------------------------------------
# cumulative reductions
# ---------------------------------------------------------------------------------
def _promote_integer(d):
    """JAX's _promote_integer_dtype: bool and small ints accumulate as (u)int32."""
    d = _np.dtype(d)
    if d == _np.bool_ or (d.kind == "i" and d.itemsize < 4):
        return _np.dtype(_i32)
    if d.kind == "u" and d.itemsize < 4:
        return _np.dtype(_np.uint32)
    return d


def _cumulative(name, prim, a, axis, dtype, out=None, fill_nan=False, fill_value=0, promote_integers=False):
    if out is not None:
        raise NotImplementedError(f"The 'out' argument to jnp.{name} is not supported")
    a = _arr(a)
    if axis is None or a.ndim == 0:
        a = jnp.ravel(a)
    axis = jnp._norm_axis(0 if axis is None else int(axis), a.ndim)
    if fill_nan and _dtypes.is_float(a.dtype):
        a = bind("select", _isnan(a), jnp._const_like(a, fill_value), a)
    if dtype is None:
        result = _promote_integer(a.dtype) if (promote_integers or a.dtype == _dtypes.bool_) else a.dtype
        comp = result
    elif _np.dtype(dtype) == _np.bool_:
        result = _np.dtype(_np.bool_)
        if a.dtype != result:
            a = bind("ne", a, jnp._const_like(a, 0))
        comp = _promote_integer(result)
    else:
        result = comp = _dtypes.canonicalize(dtype)
    a = jnp.astype(a, comp)
    return jnp.astype(bind(prim, a, axis=axis, reverse=0), result)


def cumsum(a, axis=None, dtype=None, out=None):
    """Cumulative sum (bool accumulates as int32; other dtypes keep theirs, as JAX)."""
    return _cumulative("cumsum", "cumsum", a, axis, dtype, out)


def cumprod(a, axis=None, dtype=None, out=None):
    return _cumulative("cumprod", "cumprod", a, axis, dtype, out)


def nancumsum(a, axis=None, dtype=None, out=None):
    return _cumulative("nancumsum", "cumsum", a, axis, dtype, out, fill_nan=True, fill_value=0)


def nancumprod(a, axis=None, dtype=None, out=None):
    return _cumulative("nancumprod", "cumprod", a, axis, dtype, out, fill_nan=True, fill_value=1)


def _cumulative_api(name, prim, x, axis, dtype, include_initial, initial, promote):
    x = _arr(x)
    if x.ndim == 0:
        raise ValueError(f"The input must be non-scalar to take a {name}, however a scalar value or scalar "
                         "array was given.")
    if axis is None:
        if x.ndim > 1:
            raise ValueError(f"The input array has rank {x.ndim}, however axis was not set to an explicit value. "
                             "The axis argument is only optional for one-dimensional arrays.")
        axis = 0
    axis = jnp._norm_axis(axis, x.ndim)
    out = _cumulative(name, prim, x, axis, dtype, promote_integers=promote)
    if include_initial:
        shape = list(x.shape)
        shape[axis] = 1
        out = lax.concatenate([jnp.full(shape, initial, out.dtype), out], axis)
    return out


def cumulative_sum(x, /, *, axis=None, dtype=None, include_initial=False):
    return _cumulative_api("cumulative sum", "cumsum", x, axis, dtype, include_initial, 0, True)


def cumulative_prod(x, /, *, axis=None, dtype=None, include_initial=False):
    return _cumulative_api("cumulative product", "cumprod", x, axis, dtype, include_initial, 1, False)


# ---------------------------------------------------------------------------------
# ptp, average
# ---------------------------------------------------------------------------------
def ptp(a, axis=None, out=None, keepdims=False):
    if out is not None:
        raise NotImplementedError("The 'out' argument to jnp.ptp is not supported.")
    a = _arr(a)
    return bind("sub", jnp.max(a, axis=axis, keepdims=keepdims), jnp.min(a, axis=axis, keepdims=keepdims))


def _axis_tuple(axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    return tuple(jnp._norm_axis(int(x), ndim) for x in ((axis,) if isinstance(axis, (int, _np.integer)) else axis))


def average(a, axis=None, weights=None, returned=False, keepdims=False):
    """Weighted mean along axis; with returned=True also the sum of the weights."""
    a = _arr(a)
    axes = _axis_tuple(axis, a.ndim)
    if weights is None:
        (a,) = jnp._promote_float(a)
        avg = jnp.mean(a, axis=axis, keepdims=keepdims)
        wsum = jnp.full((), int(_np.prod([a.shape[d] for d in axes], dtype=_np.int64)), avg.dtype)
    else:
        a, w = jnp._promote_float(a, weights)
        if tuple(a.shape) != tuple(w.shape):
            if axis is None:
                raise ValueError(f"Axis must be specified when shapes of a {tuple(a.shape)} and weights "
                                 f"{tuple(w.shape)} differ.")
            if tuple(w.shape) != tuple(a.shape[ax] for ax in axes):
                raise ValueError(f"Shape of weights {tuple(w.shape)} must be consistent with shape of a "
                                 f"{tuple(a.shape)} along specified axis {axis}.")
            order = _np.argsort(axes)
            w = jnp.transpose(w, tuple(int(i) for i in order)) if len(axes) > 1 else w
            w = jnp.reshape(w, tuple(d if i in axes else 1 for i, d in enumerate(a.shape)))
        wsum = jnp.sum(w, axis=axis, keepdims=keepdims)
        avg = jnp.true_divide(jnp.sum(jnp.multiply(a, w), axis=axis, keepdims=keepdims), wsum)
    if returned:
        if tuple(avg.shape) != tuple(wsum.shape):
            wsum = jnp.broadcast_to(wsum, avg.shape)
        return avg, wsum
    return avg


# ---------------------------------------------------------------------------------
# order statistics
# ---------------------------------------------------------------------------------
_QMETHODS = ("linear", "lower", "higher", "midpoint", "nearest", "inverted_cdf")


def _quantile(a, q, axis, method, keepdims, squash_nans, weights=None):
    """JAX's _quantile: sort along axis, gather the floor / ceil ranks of q * (n - 1),
    combine them per method; with squash_nans the NaNs sort last and n counts the rest."""
    if method not in _QMETHODS:
        raise ValueError(f"method can only be 'linear', 'lower', 'higher', 'midpoint', 'nearest' or 'inverted_cdf'; "
                         f"got {method!r}")
    if weights is not None:
        if method != "inverted_cdf":
            raise NotImplementedError(f"{method} doesn't support weights. Only method 'inverted_cdf' supports weights.")
        raise NotImplementedError("podlet's quantile does not support weights yet")
    (a,) = jnp._promote_float(a)
    q = _arr(q)
    keepdim = []
    if axis is None:
        if keepdims:
            keepdim = [1] * a.ndim
        a, axis = jnp.ravel(a), 0
    elif isinstance(axis, tuple):
        keepdim = list(a.shape)
        nd = a.ndim
        axis = tuple(jnp._norm_axis(ax, nd) for ax in axis)
        if len(set(axis)) != len(axis):
            raise ValueError(f"repeated axis in {axis}")
        for ax in axis:
            keepdim[ax] = 1
        keep = [d for d in range(nd) if d not in axis]
        a = jnp.moveaxis(a, axis, tuple(range(nd - len(axis), nd)))
        a = jnp.reshape(a, tuple(a.shape[:len(keep)]) + (-1,))
        axis = a.ndim - 1
    else:
        axis = jnp._norm_axis(int(axis), a.ndim)
    if q.ndim > 1:
        raise ValueError(f"q must be have rank <= 1, got shape {tuple(q.shape)}")
    qnd = q.ndim
    qd = q.dtype
    a_sorted = jnp.sort(jnp.where(_isnan(a), jnp._const_like(a, _np.nan), a) if squash_nans else a, axis=axis)
    if squash_nans:
        counts = jnp.sum(bind("not", _isnan(a_sorted)), axis=axis, dtype=qd, keepdims=keepdims)
        red_shape = tuple(counts.shape)
        qq = jnp.reshape(q, tuple(q.shape) + (1,) * len(red_shape))
        cnt = jnp.reshape(counts, (1,) * qnd + red_shape)
        qq = jnp.multiply(qq, jnp.subtract(cnt, jnp._const_like(qq, 1)))
        low, high = jnp.floor(qq), jnp.ceil(qq)
        hw = jnp.subtract(qq, low)
        lw = jnp.subtract(jnp._const_like(hw, 1), hw)
        low = jnp.maximum(jnp._const_like(low, 0), jnp.minimum(low, jnp.subtract(cnt, 1)))
        high = jnp.maximum(jnp._const_like(high, 0), jnp.minimum(high, jnp.subtract(cnt, 1)))
        low, high = jnp.astype(low, _i32), jnp.astype(high, _i32)
        # a_sorted[..., idx, ...] along axis, one index per output position q.shape + R
        A = jnp.moveaxis(a_sorted, axis, -1)
        n = A.shape[-1]

        def gather(idx):
            ii = jnp.squeeze(idx, qnd + axis) if keepdims else idx
            Ab = jnp.broadcast_to(A, tuple(ii.shape) + (n,))
            got = jnp.squeeze(bind("take_along_axis", Ab, jnp.expand_dims(ii, -1), axis=Ab.ndim - 1), -1)
            return jnp.expand_dims(got, qnd + axis) if keepdims else got

        lo_v, hi_v = gather(low), gather(high)
    else:
        anynan = jnp.any(_isnan(a), axis=axis, keepdims=True)
        a_sorted = jnp.sort(jnp.where(anynan, jnp._const_like(a, _np.nan), a), axis=axis)
        n = jnp.asarray(a.shape[axis], qd)
        qq = jnp.multiply(q, jnp.subtract(n, jnp._const_like(n, 1)))
        low, high = jnp.floor(qq), jnp.ceil(qq)
        hw = jnp.subtract(qq, low)
        lw = jnp.subtract(jnp._const_like(hw, 1), hw)
        nm1 = jnp.subtract(n, jnp._const_like(n, 1))
        low = jnp.clip(low, jnp._const_like(low, 0), nm1)
        high = jnp.clip(high, jnp._const_like(high, 0), nm1)
        low, high = jnp.astype(low, _i32), jnp.astype(high, _i32)

        def gather(idx):
            # take along axis with the q indices -> q.shape at axis; then q dims first
            got = bind("take", a_sorted, jnp.ravel(idx) if qnd else jnp.reshape(idx, (1,)), axis=axis)
            if qnd == 0:
                got = got if keepdims else jnp.squeeze(got, axis)
                return got
            got = jnp.moveaxis(got, axis, 0)
            return got if not keepdims else jnp.expand_dims(got, axis + 1)

        lo_v, hi_v = gather(low), gather(high)
        if qnd == 1:
            lw = jnp.reshape(lw, (-1,) + (1,) * (lo_v.ndim - 1))
            hw = jnp.reshape(hw, (-1,) + (1,) * (hi_v.ndim - 1))
    if method == "linear":
        result = jnp.add(jnp.multiply(jnp.astype(lo_v, qd), lw), jnp.multiply(jnp.astype(hi_v, qd), hw))
    elif method == "lower":
        result = lo_v
    elif method == "higher":
        result = hi_v
    elif method == "nearest":
        result = jnp.where(jnp.less_equal(hw, jnp._const_like(hw, 0.5)), lo_v, hi_v)
    elif method == "midpoint":
        result = jnp.multiply(jnp.add(lo_v, hi_v), jnp._const_like(lo_v, 0.5))
    else:
        raise NotImplementedError("podlet's quantile does not implement method='inverted_cdf' yet")
    if keepdims and keepdim:
        if qnd > 0:
            keepdim = [q.shape[0], *keepdim]
        result = jnp.reshape(result, tuple(keepdim))
    return jnp.astype(result, a.dtype)


def _check_q_args(name, overwrite_input, out):
    if overwrite_input or out is not None:
        raise ValueError(f"jax.numpy.{name} does not support overwrite_input=True or out != None")


def quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *, weights=None):
    """The q-th quantiles of a along axis (int or tuple), methods linear / lower /
    higher / nearest / midpoint; NaN where a row holds a NaN (nanquantile skips them)."""
    _check_q_args("quantile", overwrite_input, out)
    return _quantile(a, q, axis, method, keepdims, False, weights)


def nanquantile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *, weights=None):
    _check_q_args("nanquantile", overwrite_input, out)
    return _quantile(a, q, axis, method, keepdims, True, weights)


def _q100(q):
    # q * 0.01: XLA's simplifier turns JAX's q / 100 into this product
    (q,) = jnp._promote_float(q)
    return jnp.multiply(q, jnp.asarray((_np.float32(1) / _np.float32(100)).astype(q.dtype)))


def percentile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *, weights=None):
    return quantile(a, _q100(q), axis=axis, out=out, overwrite_input=overwrite_input, method=method,
                    keepdims=keepdims, weights=weights)


def nanpercentile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *,
                  weights=None):
    return nanquantile(a, _q100(q), axis=axis, out=out, overwrite_input=overwrite_input, method=method,
                       keepdims=keepdims, weights=weights)


def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    return quantile(a, 0.5, axis=axis, out=out, overwrite_input=overwrite_input, keepdims=keepdims, method="midpoint")


def nanmedian(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    return nanquantile(a, 0.5, axis=axis, out=out, overwrite_input=overwrite_input, keepdims=keepdims,
                       method="midpoint")


# ---------------------------------------------------------------------------------
# covariance
# ---------------------------------------------------------------------------------
def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, dtype=None):
    """Covariance of the rows (rowvar) or columns of m (and y), with frequency and
    analytic weights, as jnp.cov."""
    if y is not None:
        m, y = jnp._promote_float(m, y)
        if y.ndim > 2:
            raise ValueError(f"y has more than 2 dimensions; got shape {tuple(y.shape)}")
    else:
        (m,) = jnp._promote_float(m)
    if m.ndim > 2:
        raise ValueError(f"m has more than 2 dimensions; got shape {tuple(m.shape)}")
    if dtype is not None and not _dtypes.is_float(dtype):
        raise ValueError(f"cov: dtype must be a subclass of float or complex; got dtype={dtype}")
    X = jnp.atleast_2d(m)
    if not rowvar and m.ndim != 1:
        X = jnp.transpose(X)
    if X.shape[0] == 0:
        return jnp.zeros((0, 0), X.dtype)
    if y is not None:
        Y = jnp.atleast_2d(y)
        if not rowvar and Y.shape[0] != 1:
            Y = jnp.transpose(Y)
        X = jnp.concatenate([X, Y], axis=0)
    if X.shape[1] == 0:
        return jnp.full(() if X.shape[0] == 1 else (X.shape[0], X.shape[0]), _np.nan, X.dtype)
    if ddof is None:
        ddof = 1 if not bias else 0
    w = None
    if fweights is not None:
        fweights = _arr(fweights)
        if fweights.ndim > 1:
            raise RuntimeError("cannot handle multidimensional fweights")
        if fweights.shape[0] != X.shape[1]:
            raise RuntimeError(f"incompatible numbers of samples ({X.shape[1]}) and fweights ({fweights.shape[0]})")
        if fweights.dtype.kind not in "iu":
            raise TypeError(f"fweights must be integer; got {fweights.dtype}")
        w = jnp.abs(fweights)
    if aweights is not None:
        aweights = _arr(aweights)
        if aweights.ndim > 1:
            raise RuntimeError("cannot handle multidimensional aweights")
        if aweights.shape[0] != X.shape[1]:
            raise RuntimeError(f"incompatible numbers of samples ({X.shape[1]}) and aweights ({aweights.shape[0]})")
        aweights = jnp.abs(aweights)
        w = aweights if w is None else jnp.multiply(w, aweights)
    if dtype is not None:
        X = jnp.astype(X, dtype)
        w = jnp.astype(w, dtype) if w is not None else w
    avg, w_sum = average(X, axis=1, weights=w, returned=True)
    w_sum = w_sum[0]
    if w is None:
        f = X.shape[1] - ddof
    elif ddof == 0:
        f = w_sum
    elif aweights is None:
        f = jnp.subtract(w_sum, ddof)
    else:
        f = jnp.subtract(w_sum, jnp.true_divide(jnp.multiply(ddof, jnp.sum(jnp.multiply(w, aweights))), w_sum))
    X = jnp.subtract(X, avg[:, None])
    X_T = jnp.transpose(X) if w is None else jnp.transpose(jnp.multiply(X, jnp.astype(w, X.dtype)))
    return jnp.squeeze(jnp.true_divide(jnp.dot(X, X_T), f))


def corrcoef(x, y=None, rowvar=True, dtype=None):
    if dtype is not None and not _dtypes.is_float(dtype):
        raise ValueError(f"corrcoef: dtype must be a subclass of float or complex; got dtype={dtype}")
    c = cov(x, y, rowvar, dtype=dtype)
    if c.ndim == 0:
        return jnp.true_divide(c, c)
    d = jnp.diagonal(c)
    sd = jnp.astype(jnp.sqrt(d), c.dtype)
    c = jnp.true_divide(jnp.true_divide(c, sd[:, None]), sd[None, :])
    return jnp.clip(c, -1, 1)
