"""jax.numpy's array creation and index helpers: linspace / logspace / geomspace (JAX's
formulas, traceable endpoints), indices, ix_, mgrid / ogrid / r_ / c_ / s_, the
triangle and diagonal index functions, window functions, ravel_multi_index /
unravel_index, and small utilities (array_equal, copy, fromfunction ...)."""
import math as _math
import operator as _operator

import numpy as _np

from .. import lax
from .. import numpy as jnp
from . import dtypes as _dtypes
from .core import Array, Tracer, bind
from .errors import ConcretizationError

__all__ = [
    "linspace", "logspace", "geomspace", "indices", "ix_", "mgrid", "ogrid", "r_", "c_", "s_", "index_exp",
    "empty_like", "fromfunction", "tril_indices", "triu_indices", "tril_indices_from", "triu_indices_from",
    "diag_indices", "diag_indices_from", "mask_indices", "diagflat", "vander", "fill_diagonal", "bartlett",
    "blackman", "hamming", "hanning", "kaiser", "ravel_multi_index", "unravel_index", "array_equal",
    "array_equiv", "copy", "isdtype", "euler_gamma",
]

_i32 = _np.int32
euler_gamma = _np.euler_gamma


def _static_int(v, what):
    if isinstance(v, Tracer):
        raise ConcretizationError(f"{what} must be a static integer; got the traced {v!r}")
    return _operator.index(v) if not isinstance(v, Array) else _operator.index(int(v))


def _inexact(d):
    d = _dtypes.canonicalize(d)
    return d if _dtypes.is_float(d) else _np.dtype(_np.float32)


# ---------------------------------------------------------------------------------
# ranges
# ---------------------------------------------------------------------------------
def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0):
    """num values from start to stop: start * (1 - t) + stop * t with t = i / div, so both
    endpoints are exact (JAX's formula); start and stop may be arrays or tracers."""
    num = _static_int(num, "'num' argument of jnp.linspace")
    if num < 0:
        raise ValueError(f"Number of samples, {num}, must be non-negative.")
    dtype = _inexact(jnp.result_type(start, stop)) if dtype is None else _dtypes.canonicalize(dtype)
    cdt = _inexact(dtype)
    start, stop = jnp.astype(start, cdt), jnp.astype(stop, cdt)
    bshape = list(jnp.broadcast_shapes(start.shape, stop.shape))
    start, stop = jnp.broadcast_to(start, bshape), jnp.broadcast_to(stop, bshape)
    axis = len(bshape) + axis + 1 if axis < 0 else axis
    bounds = bshape[:axis] + [1] + bshape[axis:]
    div = (num - 1) if endpoint else num
    if num > 1:
        delta = jnp.true_divide(jnp.subtract(stop, start), jnp.asarray(div, cdt))
        ishape = [1] * len(bounds)
        ishape[axis] = div
        # start * (1 - iota * r) + iota * (stop * r) with r = 1 / div: JAX's
        # start * (1 - t) + stop * t, t = iota / div, as XLA's simplifier rewrites it (the
        # division by a constant becomes a product, stop * t is reassociated), so the
        # values agree to the bit
        r = jnp.asarray((_np.asarray(1, _np.float32) / _np.asarray(div, _np.float32)).astype(cdt))
        iota = jnp.reshape(lax.iota(cdt, div), ishape)
        out = jnp.add(jnp.multiply(jnp.reshape(start, bounds), jnp.subtract(jnp.asarray(1, cdt), jnp.multiply(iota, r))),
                      jnp.multiply(iota, jnp.multiply(jnp.reshape(stop, bounds), r)))
        if endpoint:
            out = lax.concatenate([out, jnp.reshape(stop, bounds)], axis)
    elif num == 1:
        delta = jnp.asarray(_np.nan, cdt) if endpoint else jnp.subtract(stop, start)
        out = jnp.reshape(start, bounds)
    else:
        delta = jnp.asarray(_np.nan, cdt)
        out = jnp.zeros(bshape[:axis] + [0] + bshape[axis:], cdt)
    if _np.dtype(dtype).kind in "iu" and _dtypes.is_float(out.dtype):
        out = jnp.floor(out)
    out = jnp.astype(out, dtype)
    return (out, delta) if retstep else out


def logspace(start, stop, num=50, endpoint=True, base=10.0, dtype=None, axis=0):
    num = _static_int(num, "'num' argument of jnp.logspace")
    dtype = _inexact(jnp.result_type(start, stop)) if dtype is None else _dtypes.canonicalize(dtype)
    cdt = _inexact(dtype)
    lin = linspace(jnp.astype(start, cdt), jnp.astype(stop, cdt), num, endpoint=endpoint, axis=axis)
    return jnp.astype(jnp.power(base, lin) if not isinstance(base, int) else jnp.power(float(base), lin), dtype)


def geomspace(start, stop, num=50, endpoint=True, dtype=None, axis=0):
    num = _static_int(num, "'num' argument of jnp.geomspace")
    dtype = _inexact(jnp.result_type(start, stop)) if dtype is None else _dtypes.canonicalize(dtype)
    cdt = _inexact(dtype)
    start, stop = jnp.astype(start, cdt), jnp.astype(stop, cdt)
    sign = jnp.sign(start)
    res = jnp.multiply(sign, logspace(jnp.log10(jnp.true_divide(start, sign)), jnp.log10(jnp.true_divide(stop, sign)),
                                      num, endpoint=endpoint, base=10.0, dtype=cdt, axis=0))
    axis = jnp._norm_axis(axis, res.ndim)
    if axis != 0:
        res = jnp.transpose(res, (*range(1, axis + 1), 0, *range(axis + 1, res.ndim)))
    return jnp.astype(res, dtype)


# ---------------------------------------------------------------------------------
# index grids
# ---------------------------------------------------------------------------------
def indices(dimensions, dtype=None, sparse=False):
    dtype = _dtypes.canonicalize(int if dtype is None else dtype)
    dims = tuple(_static_int(d, "dimensions argument of jnp.indices") for d in dimensions)
    n = len(dims)
    out = []
    for i, dim in enumerate(dims):
        shape = (1,) * i + (dim,) + (1,) * (n - i - 1) if sparse else dims
        out.append(lax.broadcast_in_dim(lax.iota(dtype, dim), shape, (i,)))
    if sparse:
        return tuple(out)
    return jnp.stack(out, 0) if out else jnp.zeros((0,), dtype)


def ix_(*args):
    """Open-mesh index arrays: the i-th argument reshaped to length along axis i."""
    args = [jnp.asarray(a) if not isinstance(a, (Array, Tracer)) else a for a in args]
    n = len(args)
    out = []
    for i, a in enumerate(args):
        if a.ndim != 1:
            raise ValueError(f"Arguments to jax.numpy.ix_ must be 1-dimensional, got shape {tuple(a.shape)}")
        if a.dtype == _dtypes.bool_:
            raise NotImplementedError("Boolean arguments to jax.numpy.ix_ are not implemented")
        shape = [1] * n
        shape[i] = a.shape[0]
        if a.shape[0] == 0:
            out.append(jnp.zeros(shape, _i32))
        else:
            out.append(lax.broadcast_in_dim(a, shape, (i,)))
    return tuple(out)


def _grid_1d(s, name):
    for v in (s.start, s.stop, s.step):
        if isinstance(v, Tracer):
            raise ConcretizationError(f"slice entries of jnp.{name} must be static; got {v!r}")
    start = s.start or 0
    step = s.step or 1
    if _np.iscomplex(step):
        return linspace(start, s.stop, int(abs(step)))
    return jnp.arange(start, s.stop, step)


class _Mgrid:
    """jnp.mgrid[...]: dense coordinate grids of slices (a complex step is a count)."""

    def __getitem__(self, key):
        if isinstance(key, slice):
            return _grid_1d(key, "mgrid")
        out = jnp._promote(*[_grid_1d(k, "mgrid") for k in key])
        if not out:
            return jnp.arange(0)
        return jnp.stack(jnp.meshgrid(*out, indexing="ij", sparse=False), 0)


class _Ogrid:
    """jnp.ogrid[...]: open (sparse) coordinate grids of slices."""

    def __getitem__(self, key):
        if isinstance(key, slice):
            return _grid_1d(key, "ogrid")
        out = jnp._promote(*[_grid_1d(k, "ogrid") for k in key])
        return jnp.meshgrid(*out, indexing="ij", sparse=True)


class _AxisConcat:
    """Concatenates slices, scalars and arrays along an axis (np.r_ / np.c_ directives:
    'axis,ndmin,trans1d', 'r', 'c')."""
    axis, ndmin, trans1d, op_name = 0, 1, -1, "r_"

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        params = [self.axis, self.ndmin, self.trans1d, -1]
        directive = key[0]
        if isinstance(directive, str):
            key = key[1:]
            if directive == "r":
                params[-1] = 0
            elif directive == "c":
                params[-1] = 1
            else:
                vec = directive.split(",")
                vec = vec + params[len(vec):] if len(vec) < 4 else vec[:3] + [params[-1]]
                try:
                    params = [int(v) for v in vec]
                except ValueError as err:
                    raise ValueError(f"could not understand directive {directive!r}") from err
        axis, ndmin, trans1d, matrix = params
        out = []
        for item in key:
            if isinstance(item, slice):
                obj, item_ndim = _grid_1d(item, self.op_name), 0
            elif isinstance(item, str):
                raise ValueError("string directive must be placed at the beginning")
            else:
                obj = jnp.array(item)
                item_ndim = obj.ndim
            obj = jnp.array(obj, ndmin=ndmin)
            if trans1d != -1 and ndmin - item_ndim > 0:
                order = tuple(range(ndmin))
                k = ndmin - abs(ndmin + trans1d + 1) % ndmin
                obj = jnp.transpose(obj, order[k:] + order[:k])
            out.append(obj)
        res = jnp.concatenate(out, axis=axis)
        if matrix != -1 and res.ndim == 1:
            res = jnp.expand_dims(res, matrix)
        return res

    def __len__(self):
        return 0


class _RClass(_AxisConcat):
    axis, ndmin, trans1d, op_name = 0, 1, -1, "r_"


class _CClass(_AxisConcat):
    axis, ndmin, trans1d, op_name = -1, 2, 0, "c_"


mgrid = _Mgrid()
ogrid = _Ogrid()
r_ = _RClass()
c_ = _CClass()
s_ = _np.s_
index_exp = _np.index_exp


def empty_like(prototype, dtype=None, shape=None):
    """zeros_like: podlet has no uninitialised arrays (JAX's empty_like is zeros too)."""
    return jnp.zeros_like(prototype if hasattr(prototype, "shape") else jnp.asarray(prototype), dtype, shape)


def fromfunction(function, shape, *, dtype=float, **kwargs):
    """function applied to the index grids, by one podlet.vmap per axis (as JAX)."""
    from .batching import vmap
    shape = tuple(_static_int(s, "shape argument of jnp.fromfunction") for s in shape)
    for i in range(len(shape)):
        in_axes = [0 if i == j else None for j in range(len(shape))]
        function = vmap(function, in_axes=tuple(in_axes[::-1]))
    return function(*(jnp.arange(s, dtype=dtype) for s in shape), **kwargs)


# ---------------------------------------------------------------------------------
# triangles and diagonals
# ---------------------------------------------------------------------------------
def _tri_idx(mask):
    i, j = _np.nonzero(mask)
    return jnp.asarray(i.astype(_i32)), jnp.asarray(j.astype(_i32))


def triu_indices(n, k=0, m=None):
    n = _static_int(n, "n argument of jnp.triu_indices")
    k = _static_int(k, "k argument of jnp.triu_indices")
    m = n if m is None else _static_int(m, "m argument of jnp.triu_indices")
    return _tri_idx(~_np.tri(n, m, k - 1, dtype=bool))


def tril_indices(n, k=0, m=None):
    n = _static_int(n, "n argument of jnp.tril_indices")
    k = _static_int(k, "k argument of jnp.tril_indices")
    m = n if m is None else _static_int(m, "m argument of jnp.tril_indices")
    return _tri_idx(_np.tri(n, m, k, dtype=bool))


def _shape2(arr, what):
    shape = arr.shape if hasattr(arr, "shape") else _np.shape(arr)
    if len(shape) != 2:
        raise ValueError(f"Only 2-D inputs are accepted by jnp.{what}; got shape {tuple(shape)}")
    return shape


def triu_indices_from(arr, k=0):
    s = _shape2(arr, "triu_indices_from")
    return triu_indices(s[0], k=k, m=s[1])


def tril_indices_from(arr, k=0):
    s = _shape2(arr, "tril_indices_from")
    return tril_indices(s[0], k=k, m=s[1])


def diag_indices(n, ndim=2):
    n = _static_int(n, "'n' argument of jnp.diag_indices()")
    ndim = _static_int(ndim, "'ndim' argument of jnp.diag_indices()")
    if n < 0:
        raise ValueError(f"n argument to diag_indices must be nonnegative, got {n}")
    if ndim < 0:
        raise ValueError(f"ndim argument to diag_indices must be nonnegative, got {ndim}")
    return (lax.iota(_i32, n),) * ndim


def diag_indices_from(arr):
    s = arr.shape if hasattr(arr, "shape") else _np.shape(arr)
    if len(s) < 2:
        raise ValueError(f"input array must be at least 2-d; got shape {tuple(s)}")
    if len(set(s)) != 1:
        raise ValueError(f"All dimensions of input must be of equal length; got shape {tuple(s)}")
    return diag_indices(s[0], ndim=len(s))


def mask_indices(n, mask_func, k=0, *, size=None):
    return jnp.nonzero(mask_func(jnp.ones((n, n)), k), size=size)


def diagflat(v, k=0):
    v = jnp.ravel(jnp.asarray(v))
    k = _static_int(k, "k argument of jnp.diagflat")
    n = v.shape[0] + abs(k)
    i = _np.arange(v.shape[0])
    fi = i + k + i * n if k >= 0 else i + (i - k) * n
    res = jnp.zeros(n * n, v.dtype)
    if isinstance(v, Tracer):
        res = jnp._zeros_like_trace(v, (n * n,))
    return jnp.reshape(res.at[fi.astype(_i32)].set(v), (n, n))


def vander(x, N=None, increasing=False):
    x = jnp.asarray(x)
    if x.ndim != 1:
        raise ValueError(f"x must be a one-dimensional array; got shape {tuple(x.shape)}")
    N = x.shape[0] if N is None else _static_int(N, "'N' argument of jnp.vander()")
    if N < 0:
        raise ValueError(f"N must be nonnegative; got {N}")
    iota = lax.iota(x.dtype if x.dtype != _dtypes.bool_ else _i32, N)
    if not increasing:
        iota = jnp.subtract(jnp._const_like(iota, N - 1), iota)
    return jnp.power(jnp.expand_dims(x, -1), jnp.expand_dims(iota, 0))


def fill_diagonal(a, val, wrap=False, *, inplace=True):
    if inplace:
        raise NotImplementedError("JAX arrays are immutable, must use inplace=False")
    if wrap:
        raise NotImplementedError("wrap=True is not implemented, must use wrap=False")
    a, val = jnp.asarray(a), jnp.asarray(val)
    if a.ndim < 2:
        raise ValueError(f"array must be at least 2-d; got shape {tuple(a.shape)}")
    if a.ndim > 2 and not all(n == a.shape[0] for n in a.shape[1:]):
        raise ValueError(f"All dimensions of input must be of equal length; got shape {tuple(a.shape)}")
    n = min(a.shape)
    idx = diag_indices(n, a.ndim)
    if val.ndim:
        v = jnp.ravel(val)
        val = jnp.tile(v, -(-n // v.shape[0]))[:n] if v.shape[0] else v
    return a.at[idx].set(val)


# ---------------------------------------------------------------------------------
# window functions (float32)
# ---------------------------------------------------------------------------------
def _window(M, name):
    M = _static_int(M, f"M argument of jnp.{name}")
    return M, (jnp.ones((max(M, 0),), _np.float32) if M <= 1 else lax.iota(_np.float32, M))


def bartlett(M):
    M, n = _window(M, "bartlett")
    if M <= 1:
        return n
    return jnp.subtract(1, jnp.true_divide(jnp.abs(jnp.add(jnp.multiply(2, n), 1 - M)), M - 1))


def blackman(M):
    M, n = _window(M, "blackman")
    if M <= 1:
        return n
    return jnp.add(jnp.subtract(0.42, jnp.multiply(0.5, jnp.cos(jnp.true_divide(jnp.multiply(2 * _np.pi, n), M - 1)))),
                   jnp.multiply(0.08, jnp.cos(jnp.true_divide(jnp.multiply(4 * _np.pi, n), M - 1))))


def hamming(M):
    M, n = _window(M, "hamming")
    if M <= 1:
        return n
    return jnp.subtract(0.54, jnp.multiply(0.46, jnp.cos(jnp.true_divide(jnp.multiply(2 * _np.pi, n), M - 1))))


def hanning(M):
    M, n = _window(M, "hanning")
    if M <= 1:
        return n
    return jnp.multiply(0.5, jnp.subtract(1, jnp.cos(jnp.true_divide(jnp.multiply(2 * _np.pi, n), M - 1))))


def kaiser(M, beta):
    M, n = _window(M, "kaiser")
    if M <= 1:
        return n
    alpha = 0.5 * (M - 1)
    r = jnp.true_divide(jnp.subtract(n, alpha), alpha)
    return jnp.true_divide(jnp.i0(jnp.multiply(beta, jnp.sqrt(jnp.subtract(1, jnp.power(r, 2))))), jnp.i0(beta))


# ---------------------------------------------------------------------------------
# flat <-> multi indices
# ---------------------------------------------------------------------------------
def ravel_multi_index(multi_index, dims, mode="raise", order="C", *, dtype=None):
    if len(multi_index) != len(dims):
        raise ValueError(f"len(multi_index)={len(multi_index)} != len(dims)={len(dims)}")
    dims = tuple(_static_int(d, "dims argument of ravel_multi_index()") for d in dims)
    idx = [jnp.asarray(i) for i in multi_index]
    dtype = jnp.result_type(0, *idx) if dtype is None else _dtypes.canonicalize(dtype)
    if _np.dtype(dtype).kind not in "iu":
        raise ValueError(f"dtype={dtype} is not an integer type.")
    for i in idx:
        if i.dtype.kind not in "iu":
            raise TypeError(f"only int indices permitted; got {i.dtype}")
    if mode == "raise":
        for i, d in zip(idx, dims):
            if isinstance(i, Tracer):
                raise ConcretizationError("ravel_multi_index with mode='raise' needs concrete indices; "
                                          "use mode='wrap' or mode='clip' under jit")
            v = _np.asarray(i)
            if ((v < 0) | (v >= d)).any():
                raise ValueError(f"invalid entry in coordinates array: {v} for a dimension of size {d}")
    elif mode == "clip":
        idx = [jnp.clip(i, 0, d - 1) for i, d in zip(idx, dims)]
    elif mode == "wrap":
        idx = [jnp.remainder(i, d) for i, d in zip(idx, dims)]
    elif mode != "ignore":
        raise ValueError(f"invalid mode={mode!r}. Expected 'raise', 'wrap', 'clip', or 'ignore'.")
    if order == "F":
        strides = _np.cumprod((1,) + dims[:-1])
    elif order == "C":
        strides = _np.cumprod((1,) + dims[1:][::-1])[::-1]
    else:
        raise ValueError(f"invalid order={order!r}. Expected 'C' or 'F'")
    result = jnp.zeros((), dtype)
    for i, s in zip(idx, strides):
        result = jnp.add(result, jnp.multiply(jnp.astype(i, dtype), jnp.asarray(int(s), dtype)))
    return result


def unravel_index(indices, shape):
    """The multi-index of each flat index; out-of-range indices clip (as JAX)."""
    idx = jnp.asarray(indices)
    try:
        shape = list(shape)
    except TypeError:
        shape = [shape]
    if any(_np.ndim(s) != 0 for s in shape):
        raise ValueError("unravel_index: shape should be a scalar or 1D sequence.")
    out = [0] * len(shape)
    for i, s in reversed(list(enumerate(shape))):
        idx, out[i] = jnp.divmod(idx, s)
    oob_pos = jnp.greater(idx, 0)
    oob_neg = jnp.asarray(False) if idx.dtype.kind == "u" else jnp.less(idx, -1)
    return tuple(jnp._weak_if(jnp.where(oob_pos, jnp.subtract(s, 1) if not isinstance(s, int) else s - 1,
                                        jnp.where(oob_neg, 0, i)), indices) for s, i in zip(shape, out))


# ---------------------------------------------------------------------------------
# comparisons and small utilities
# ---------------------------------------------------------------------------------
def array_equal(a1, a2, equal_nan=False):
    a1, a2 = jnp.asarray(a1), jnp.asarray(a2)
    if tuple(a1.shape) != tuple(a2.shape):
        return jnp.asarray(False)
    eq = jnp.equal(a1, a2)
    if equal_nan:
        eq = jnp.logical_or(eq, jnp.logical_and(jnp.isnan(a1), jnp.isnan(a2)))
    return jnp.all(eq)


def array_equiv(a1, a2):
    a1, a2 = jnp.asarray(a1), jnp.asarray(a2)
    try:
        jnp.broadcast_shapes(a1.shape, a2.shape)
    except ValueError:
        return jnp.asarray(False)
    return jnp.all(jnp.equal(a1, a2))


def copy(a, order=None):
    return jnp._weak_if(jnp.array(a, copy=True), a)


_KINDS = {"bool": lambda d: d == _np.bool_, "signed integer": lambda d: d.kind == "i",
          "unsigned integer": lambda d: d.kind == "u", "integral": lambda d: d.kind in "iu",
          "real floating": lambda d: _dtypes.is_float(d), "complex floating": lambda d: d.kind == "c",
          "numeric": lambda d: d.kind in "iuc" or _dtypes.is_float(d)}


def isdtype(dtype, kind):
    """The array API's isdtype: dtype is kind (a dtype, a kind name, or a tuple of them)."""
    d = _np.dtype(dtype)
    kinds = kind if isinstance(kind, tuple) else (kind,)
    for k in kinds:
        if isinstance(k, str):
            if k not in _KINDS:
                raise ValueError(f"Unrecognized kind: {k!r}; expected a dtype or one of {', '.join(_KINDS)}")
            if _KINDS[k](d):
                return True
        elif _np.dtype(k) == d:
            return True
    return False
