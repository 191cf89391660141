"""jax.numpy's sorting, searching, counting and set functions as compositions of podlet
primitives (argsort, take, take_along_axis, scatter_add, cumsum, top_k ...).

Functions whose output shape depends on the data (unique, nonzero, compress, the set
functions, bincount without length) follow JAX's contract: with ``size=`` (and
``fill_value=``) they trace under jit and pad exactly as JAX pads; without it they need
concrete inputs and raise ConcretizationError on a tracer, naming the ``size`` argument.
"""
import math as _math
from typing import NamedTuple

import numpy as _np

from .. import lax
from .. import numpy as jnp
from . import dtypes as _dtypes
from .core import Array, Tracer, bind
from .errors import ConcretizationError

__all__ = [
    "searchsorted", "digitize", "bincount", "histogram", "histogram_bin_edges", "histogram2d", "histogramdd",
    "lexsort", "partition", "argpartition", "nonzero", "argwhere", "flatnonzero", "extract", "compress",
    "unique", "unique_all", "unique_counts", "unique_inverse", "unique_values", "isin", "intersect1d",
    "union1d", "setdiff1d", "setxor1d",
]

_i32 = _np.int32


def _arr(x):
    return x if isinstance(x, (Array, Tracer)) else jnp.asarray(x)


def _concrete(x, what, hint):
    """x as a NumPy array, or ConcretizationError naming `what` when x is traced."""
    if isinstance(x, Tracer):
        raise ConcretizationError(
            f"{what}: the output shape depends on the values of a traced array {x!r}; {hint}")
    return _np.asarray(x)


def _operator_index(v):
    import operator
    return operator.index(v) if not isinstance(v, Array) else operator.index(int(v))


def _take(a, idx, axis=0):
    """a[idx] along axis with idx clamped into range (jax's gather default)."""
    n = a.shape[axis]
    idx = jnp.clip(_arr(idx), 0, _bi_max(n - 1, 0))
    return bind("take", a, lax.convert_element_type(idx, _i32), axis=axis)


def _bi_max(a, b):
    return a if a > b else b


# ---------------------------------------------------------------------------------
# total order of the sort comparators: NaN is above everything and equal to itself,
# -0.0 == 0.0 (lax.sort's order, which searchsorted and unique use)
# ---------------------------------------------------------------------------------
def _lt_total(x, y):
    if not _dtypes.is_float(x.dtype):
        if x.dtype == _dtypes.bool_:
            x, y = lax.convert_element_type(x, _i32), lax.convert_element_type(y, _i32)
        return bind("lt", x, y)
    return bind("or", bind("lt", x, y), bind("and", bind("ne", y, y), bind("eq", x, x)))


def _le_total(x, y):
    return bind("not", _lt_total(y, x))


# ---------------------------------------------------------------------------------
# searching
# ---------------------------------------------------------------------------------
_METHODS = ("scan", "scan_unrolled", "compare_all", "sort")


def searchsorted(a, v, side="left", sorter=None, *, method="scan"):
    """Indices where v would be inserted into the sorted 1-D a (int32). Every method
    gives the same indices; 'scan' / 'scan_unrolled' / 'sort' run a binary search of
    ceil(log2(n + 1)) gathers, 'compare_all' compares each v with all of a."""
    if side not in ("left", "right"):
        raise ValueError(f"side must be 'left' or 'right', got {side!r}")
    if method not in _METHODS:
        raise ValueError(f"Unsupported method: {method!r}; expected one of {', '.join(_METHODS)}")
    a, v = jnp._promote(a, v)
    if a.ndim != 1:
        raise ValueError(f"a should be 1-dimensional; got shape {tuple(a.shape)}")
    if sorter is not None:
        a = _take(a, sorter)
    n = a.shape[0]
    if n == 0:
        return jnp.zeros_like(v, dtype=_i32)
    if method == "compare_all":
        op = _lt_total if side == "left" else _le_total
        cmp = op(jnp.reshape(a, (n,) + (1,) * v.ndim), jnp.expand_dims(v, 0))
        return jnp.sum(cmp, axis=0, dtype=_i32)
    op = _le_total if side == "left" else _lt_total
    low = jnp.zeros_like(v, dtype=_i32)
    high = jnp.full_like(v, n, dtype=_i32)
    for _ in range(int(_np.ceil(_np.log2(n + 1)))):
        mid = bind("add", low, bind("div", bind("sub", high, low), jnp.asarray(_i32(2))))
        go_left = op(v, _take(a, mid))
        low, high = bind("select", go_left, low, mid), bind("select", go_left, mid, high)
    return high


def digitize(x, bins, right=False, *, method=None):
    """The bin of each x in monotonic bins (increasing or decreasing), as jnp.digitize."""
    x, bins = _arr(x), _arr(bins)
    if bins.ndim != 1:
        raise ValueError(f"digitize: bins must be a 1-dimensional array; got bins of shape {tuple(bins.shape)}")
    if isinstance(right, Tracer):
        raise ConcretizationError("digitize: right must be a static bool")
    if bins.shape[0] == 0:
        return jnp.zeros_like(x, dtype=_i32)
    side = "left" if right else "right"
    kw = {} if method is None else {"method": method}
    n = bins.shape[0]
    up = searchsorted(bins, x, side=side, **kw)
    down = bind("sub", jnp.asarray(_i32(n)), searchsorted(jnp.flip(bins), x, side=side, **kw))
    return jnp.where(bins[-1] >= bins[0], up, down)


# ---------------------------------------------------------------------------------
# counting
# ---------------------------------------------------------------------------------
def bincount(x, weights=None, minlength=0, *, length=None):
    """Counts (or summed weights) of each non-negative integer in the 1-D x. Negative
    values count as 0 and values >= length are dropped, as JAX; length=None needs a
    concrete x (length = max(minlength, x.max() + 1))."""
    x = _arr(x)
    if x.dtype == _dtypes.bool_:
        x = lax.convert_element_type(x, _i32)
    if x.dtype.kind not in "iu":
        raise TypeError(f"x argument to bincount must have an integer type; got {x.dtype}")
    if x.ndim != 1:
        raise ValueError(f"only 1-dimensional input supported; got x of shape {tuple(x.shape)}")
    minlength = _operator_index(minlength)
    if length is None:
        xv = _concrete(x, "bincount", "pass a static length= argument")
        length = _bi_max(minlength, int(_bi_max(0, xv.max())) + 1 if xv.size else 0)
    else:
        length = _operator_index(length)
    if weights is None:
        w = jnp.asarray(_i32(1))
        d = _np.dtype(_i32)
    else:
        w = _arr(weights)
        if tuple(w.shape) != tuple(x.shape):
            raise ValueError(f"bincount: weights of shape {tuple(w.shape)} must match x of shape {tuple(x.shape)}")
        d = w.dtype
    out = jnp.zeros(length, d)
    if isinstance(x, Tracer) and not isinstance(out, Tracer):
        out = jnp._zeros_like_trace(x, (length,), d)
    return out.at[jnp.clip(x, 0)].add(w, mode="drop")


def _linspace_traced(lo, hi, num, dtype):
    from .numpy_creation import linspace
    return linspace(lo, hi, num, dtype=dtype)


def histogram_bin_edges(a, bins=10, range=None, weights=None):
    if isinstance(bins, str):
        raise NotImplementedError("string values for `bins` not implemented.")
    arr = _arr(a)
    dtype = arr.dtype if _dtypes.is_float(arr.dtype) else _np.dtype(_np.float32)
    if _np.ndim(bins) == 1:
        return jnp.asarray(bins, dtype=dtype) if not isinstance(bins, (Array, Tracer)) else jnp.astype(bins, dtype)
    nbins = _operator_index(bins) if not isinstance(bins, Tracer) else _concrete(bins, "histogram_bin_edges", "")
    if range is None:
        lo, hi = jnp.min(arr), jnp.max(arr)
    else:
        if _np.shape(range) != (2,):
            raise ValueError(f"`range` must be either None or a sequence of scalars, got {range}")
        lo, hi = range[0], range[1]
    lo, hi = jnp.astype(lo, dtype), jnp.astype(hi, dtype)
    same = jnp.equal(hi, lo)
    lo = jnp.where(same, jnp.subtract(lo, jnp.asarray(0.5, dtype)), lo)
    hi = jnp.where(same, jnp.add(hi, jnp.asarray(0.5, dtype)), hi)
    return _linspace_traced(lo, hi, nbins + 1, dtype)


def histogram(a, bins=10, range=None, weights=None, density=None):
    """(counts, bin_edges) as jnp.histogram: the last bin is closed, values outside the
    range are dropped, weights sum per bin (their gradient is a gather)."""
    if weights is None:
        (a,) = jnp._promote_float(a)
        weights = jnp.ones_like(a)
    else:
        if _np.shape(a) != _np.shape(weights):
            raise ValueError(f"weights should have the same shape as a; got {_np.shape(weights)} and {_np.shape(a)}")
        a, weights = jnp._promote_float(a, weights)
    edges = histogram_bin_edges(a, bins, range, weights)
    n = edges.shape[0]
    idx = searchsorted(edges, a, side="right")
    idx = jnp.where(jnp.equal(a, edges[-1]), _i32(n - 1), idx)
    counts = jnp.zeros(n, weights.dtype)
    if isinstance(weights, Tracer):
        counts = jnp._zeros_like_trace(weights, (n,))
    counts = counts.at[idx].add(weights)[1:]
    if density:
        widths = jnp.diff(edges)
        counts = jnp.true_divide(jnp.true_divide(counts, widths), jnp.sum(counts))
    return counts, edges


def histogram2d(x, y, bins=10, range=None, weights=None, density=None):
    """(counts, x_edges, y_edges): histogramdd of the (x, y) pairs."""
    x, y = jnp._promote(x, y)
    try:
        n = len(bins)
    except TypeError:
        n = 1
    if n != 1 and n != 2:
        bins = [_arr(bins), _arr(bins)]
    sample = jnp.transpose(jnp.stack([x, y]))
    h, edges = histogramdd(sample, bins, range, weights, density)
    return h, edges[0], edges[1]


def histogramdd(sample, bins=10, range=None, weights=None, density=None):
    """jnp.histogramdd: per dimension, searchsorted into its edges; then one bincount of
    the raveled bin coordinates (JAX's algorithm)."""
    if weights is None:
        (sample,) = jnp._promote_float(sample)
    else:
        if _np.shape(weights) != _np.shape(sample)[:1]:
            raise ValueError(f"should have one weight for each sample; got weights of shape {_np.shape(weights)} "
                             f"for {_np.shape(sample)[0]} samples")
        sample, weights = jnp._promote_float(sample, weights)
    N, D = sample.shape
    if range is not None and (len(range) != D or any(r is not None and _np.shape(r)[0] != 2 for r in range)):
        raise ValueError(f"For sample.shape={(N, D)}, range must be a sequence of {D} pairs or Nones; got {range=}")
    try:
        per_dim = list(bins)
    except TypeError:
        per_dim = D * [bins]
    else:
        if len(per_dim) != D:
            raise ValueError(f"should be a bin for each dimension; got {len(per_dim)} for {D} dimensions")
    idx_by_dim, edges_by_dim = [], []
    for i in builtins_range(D):
        edges = histogram_bin_edges(sample[:, i], per_dim[i], None if range is None else range[i], weights)
        idx = searchsorted(edges, sample[:, i], side="right")
        idx = jnp.where(jnp.equal(sample[:, i], edges[-1]), jnp.subtract(idx, _i32(1)), idx)
        idx_by_dim.append(idx)
        edges_by_dim.append(edges)
    nbins = tuple(e.shape[0] + 1 for e in edges_by_dim)
    xy = jnp.ravel_multi_index(tuple(idx_by_dim), nbins, mode="clip")
    hist = jnp.reshape(bincount(xy, weights, length=_math.prod(nbins)), nbins)[D * (slice(1, -1),)]
    if density:
        hist = jnp.astype(hist, sample.dtype)
        hist = jnp.true_divide(hist, jnp.sum(hist))
        for norm in jnp.ix_(*[jnp.diff(e) for e in edges_by_dim]):
            hist = jnp.true_divide(hist, norm)
    return hist, edges_by_dim


builtins_range = range


# ---------------------------------------------------------------------------------
# sorting
# ---------------------------------------------------------------------------------
def lexsort(keys, axis=-1):
    """Indices that sort by the last key, then the one before ...: one stable argsort
    per key, least significant first (an LSD radix sort over the keys)."""
    keys = [_arr(k) for k in (list(keys) if not isinstance(keys, (Array, Tracer, _np.ndarray)) else
                              [keys[i] for i in builtins_range(keys.shape[0])])]
    if len(keys) == 0:
        raise TypeError("need sequence of keys with len > 0 in lexsort")
    if len({tuple(k.shape) for k in keys}) > 1:
        raise ValueError(f"all keys need to be the same shape; got {[tuple(k.shape) for k in keys]}")
    if keys[0].ndim == 0:
        return jnp.zeros((), _i32)
    axis = jnp._norm_axis(axis, keys[0].ndim)
    shape = tuple(keys[0].shape)
    perm = lax.broadcasted_iota(_i32, shape, axis)
    if isinstance(keys[0], Tracer) or any(isinstance(k, Tracer) for k in keys):
        perm = bind("add", jnp._zeros_like_trace(next(k for k in keys if isinstance(k, Tracer)), shape, _i32), perm)
    for k in keys:
        kk = bind("take_along_axis", k, perm, axis=axis)
        order = bind("argsort", kk, axis=axis, descending=0)
        perm = bind("take_along_axis", perm, order, axis=axis)
    return perm


def partition(a, kth, axis=-1):
    """The kth smallest value at position kth, smaller ones before (in ascending order),
    the rest after (in descending order): two top_k calls, as jnp.partition."""
    arr = _arr(a)
    axis = jnp._norm_axis(axis, arr.ndim)
    n = arr.shape[axis]
    kth = jnp._norm_axis(_operator_index(kth), n)
    arr = jnp.swapaxes(arr, axis, -1)
    if arr.dtype.kind == "u":
        bottom = jnp.subtract(jnp.negative(lax.top_k(jnp.negative(jnp.add(arr, 1)), kth + 1)[0]), 1)
    else:
        bottom = jnp.negative(lax.top_k(jnp.negative(arr), kth + 1)[0])
    top = lax.top_k(arr, n - kth - 1)[0]
    return jnp.swapaxes(lax.concatenate([bottom, top], arr.ndim - 1), -1, axis)


def argpartition(a, kth, axis=-1):
    """Indices that partition a (jnp.argpartition): the kth + 1 smallest by top_k of -a,
    the others by top_k of a proxy that is 0 at those positions (so ties are taken
    once), as JAX."""
    arr = _arr(a)
    axis = jnp._norm_axis(axis, arr.ndim)
    n = arr.shape[axis]
    kth = jnp._norm_axis(_operator_index(kth), n)
    arr = jnp.swapaxes(arr, axis, -1)
    if arr.dtype.kind == "u":
        bottom_ind = lax.top_k(jnp.negative(jnp.add(arr, 1)), kth + 1)[1]
    else:
        bottom_ind = lax.top_k(jnp.negative(arr), kth + 1)[1]
    rows = int(_np.prod(arr.shape[:-1], dtype=_np.int64))
    flat = jnp.add(jnp.reshape(bottom_ind, (rows, kth + 1)), jnp.reshape(jnp.arange(rows, dtype=_i32) * n, (rows, 1)))
    proxy = jnp.ones((rows * n,), _np.float32)
    if isinstance(arr, Tracer):
        proxy = jnp.full_like(jnp.reshape(arr, (-1,)), 1.0, dtype=_np.float32)
    proxy = jnp.reshape(proxy.at[jnp.ravel(flat)].set(0.0), tuple(arr.shape))
    top_ind = lax.top_k(proxy, n - kth - 1)[1]
    return jnp.swapaxes(lax.concatenate([bottom_ind, top_ind], arr.ndim - 1), -1, axis)


# ---------------------------------------------------------------------------------
# indices of nonzero elements
# ---------------------------------------------------------------------------------
def _flat_nonzero_indices(mask, size):
    """The flat positions of the first `size` True entries of the 1-D bool mask, padded
    with mask.size (JAX's algorithm: cumsum of a bincount of cumsum(mask))."""
    cs = jnp.cumsum(mask, dtype=_i32)
    pos = jnp.minimum(cs, _i32(size))  # size is the drop slot
    counts = jnp._zeros_like_trace(mask, (size + 1,), _i32) if isinstance(mask, Tracer) else jnp.zeros(size + 1, _i32)
    counts = bind("scatter_add", counts, pos, jnp.ones_like(pos), axis=0)
    return jnp.cumsum(counts[:size])


def nonzero(a, *, size=None, fill_value=None):
    """Indices of the nonzero entries, one int32 array per dimension. size= pads (with
    fill_value, default 0) or truncates so it traces under jit."""
    arr = _arr(a)
    if arr.ndim == 0:
        raise ValueError("Calling nonzero on 0d arrays is not allowed. Use jnp.atleast_1d(scalar).nonzero() instead.")
    mask = arr if arr.dtype == _dtypes.bool_ else bind("ne", arr, jnp._const_like(arr, 0))
    if size is None:
        m = _concrete(mask, "nonzero", "pass a static size= (and fill_value=) to use it under jit")
        return tuple(jnp.asarray(i.astype(_i32)) for i in _np.nonzero(m))
    size = _operator_index(size)
    if arr.size == 0 or size == 0:
        return tuple(jnp.zeros(size, _i32) for _ in arr.shape)
    flat = _flat_nonzero_indices(jnp.ravel(mask), size)
    strides = _np.cumprod(arr.shape[::-1])[::-1] // arr.shape
    out = tuple(jnp.remainder(jnp.floor_divide(flat, _i32(st)), _i32(sz)) for st, sz in zip(strides, arr.shape))
    if fill_value is not None:
        fills = fill_value if isinstance(fill_value, tuple) else arr.ndim * (fill_value,)
        if len(fills) != arr.ndim or any(_np.shape(v) != () for v in fills):
            raise ValueError(f"fill_value must be a scalar or a tuple of length {arr.ndim}; got {fill_value}")
        pad = jnp.greater_equal(jnp.arange(size, dtype=_i32), jnp.sum(mask, dtype=_i32))
        out = tuple(jnp.where(pad, jnp.astype(f, _i32) if isinstance(f, (Array, Tracer)) else _i32(f), o)
                    for f, o in zip(fills, out))
    return out


def flatnonzero(a, *, size=None, fill_value=None):
    return nonzero(jnp.ravel(_arr(a)), size=size, fill_value=fill_value)[0]


def argwhere(a, *, size=None, fill_value=None):
    a = _arr(a)
    result = jnp.transpose(jnp.vstack(nonzero(jnp.atleast_1d(a), size=size, fill_value=fill_value)))
    if a.ndim == 0:
        return jnp.reshape(result[:0], (result.shape[0], 0))
    return jnp.reshape(result, (result.shape[0], a.ndim))


def compress(condition, a, axis=None, *, size=None, fill_value=0, out=None):
    if out is not None:
        raise NotImplementedError("The 'out' argument to jnp.compress is not supported.")
    cond = jnp.astype(_arr(condition), bool)
    arr = _arr(a)
    if cond.ndim != 1:
        raise ValueError(f"condition must be a 1D array; got shape {tuple(cond.shape)}")
    if axis is None:
        axis, arr = 0, jnp.ravel(arr)
    else:
        arr = jnp.moveaxis(arr, axis, 0)
    n = arr.shape[0]
    cond, extra = cond[:n], cond[n:]
    arr = arr[:cond.shape[0]]
    if size is None:
        if extra.shape[0] and _concrete(extra, "compress", "pass size=").any():
            raise ValueError("condition contains entries that are out of bounds")
        result = arr[_concrete(cond, "compress", "pass a static size= (and fill_value=) to use it under jit")]
    else:
        size = _operator_index(size)
        if not 0 <= size <= arr.shape[0]:
            raise ValueError("size must be positive and not greater than the size of the array axis;"
                             f" got size={size} for a.shape[axis]={arr.shape[0]}")
        mask = jnp.reshape(cond, (cond.shape[0],) + (1,) * (arr.ndim - 1))
        fill = jnp.astype(fill_value, arr.dtype) if isinstance(fill_value, (Array, Tracer)) \
            else jnp._const_like(arr, fill_value)
        arr = jnp.where(mask, arr, fill)
        result = _take(arr, jnp.argsort(cond, stable=True, descending=True)[:size])
    return jnp.moveaxis(result, 0, axis)


def extract(condition, arr, *, size=None, fill_value=0):
    return compress(jnp.ravel(_arr(condition)), jnp.ravel(_arr(arr)), size=size, fill_value=fill_value)


# ---------------------------------------------------------------------------------
# unique and the set functions
# ---------------------------------------------------------------------------------
class _UniqueAllResult(NamedTuple):
    values: object
    indices: object
    inverse_indices: object
    counts: object


class _UniqueCountsResult(NamedTuple):
    values: object
    counts: object


class _UniqueInverseResult(NamedTuple):
    values: object
    inverse_indices: object


def _nonzero_1d(mask, size):
    """nonzero(mask, size=size)[0] for a 1-D bool mask (size None: concrete)."""
    return nonzero(mask, size=size)[0]


def _unique_sorted_mask(ar, axis, equal_nan):
    aux = jnp.moveaxis(ar, axis, 0)
    size, *rest = aux.shape
    if _math.prod(rest) == 0:
        size = 1
        perm = jnp.zeros(1, _i32)
    else:
        flat = jnp.reshape(aux, (size, _math.prod(rest)))
        perm = lexsort([flat[:, j] for j in builtins_range(flat.shape[1] - 1, -1, -1)])
    aux = _take(aux, perm) if aux.size else aux
    if aux.size:
        hi, lo = aux[1:], aux[:-1]
        neq = bind("ne", hi, lo)
        if _dtypes.is_float(aux.dtype) and equal_nan:
            neq = bind("and", neq, bind("not", bind("and", bind("ne", hi, hi), bind("ne", lo, lo))))
        diff = jnp.any(neq, axis=tuple(builtins_range(1, aux.ndim))) if aux.ndim > 1 else neq
        mask = jnp.concatenate([jnp.ones((1,), bool), diff])
    else:
        mask = jnp.zeros(size, bool)
    return aux, mask, perm


def _unique(ar, axis, return_index=False, return_inverse=False, return_counts=False, equal_nan=True,
            size=None, fill_value=None, return_true_size=False):
    axis = jnp._norm_axis(axis, ar.ndim)
    if ar.shape[axis] == 0 and size and fill_value is None:
        raise ValueError("jnp.unique: for zero-sized input with nonzero size argument, fill_value must be specified")
    aux, mask, perm = _unique_sorted_mask(ar, axis, equal_nan)
    if size is None:
        ind = jnp.asarray(_np.nonzero(_concrete(mask, "unique", _UNIQUE_HINT))[0].astype(_i32))
    else:
        ind = _nonzero_1d(mask, size)
    result = _take(aux, ind) if aux.size else aux
    if size is not None and fill_value is not None:
        fill = jnp.astype(fill_value, result.dtype) if isinstance(fill_value, (Array, Tracer)) \
            else jnp._const_like(result, fill_value)
        if result.shape[0]:
            valid = jnp.less(jnp.arange(size, dtype=_i32), jnp.sum(mask, dtype=_i32))
            valid = jnp.reshape(valid, (size,) + (1,) * (result.ndim - 1))
            result = jnp.where(valid, result, fill)
        else:
            result = jnp.broadcast_to(fill, (size,) + tuple(result.shape[1:]))
    result = jnp.moveaxis(result, 0, axis)
    ret = (result,)
    if return_index:
        ret += (_take(perm, ind) if aux.size else perm,)
    if return_inverse:
        if aux.size:
            imask = jnp.subtract(jnp.cumsum(mask, dtype=_i32), _i32(1))
            inv = jnp.zeros(mask.shape, _i32)
            if isinstance(imask, Tracer):
                inv = jnp._zeros_like_trace(imask, mask.shape, _i32)
            inv = inv.at[perm].set(imask)
        else:
            inv = jnp.zeros(ar.shape[axis], _i32)
        ret += (inv,)
    if return_counts:
        if aux.size:
            if size is None:
                idx = jnp.concatenate([_nonzero_1d(mask, None), jnp.asarray(_np.array([mask.shape[0]], _i32))])
            else:
                idx = _nonzero_1d(mask, size + 1)
                idx = jnp.concatenate([idx[:1], jnp.where(idx[1:] != 0, idx[1:], _i32(mask.shape[0]))])
            ret += (jnp.diff(idx),)
        elif ar.shape[axis]:
            ret += (jnp.full((1,), ar.shape[axis], _i32),)
        else:
            ret += (jnp.zeros(0, _i32),)
    if return_true_size:
        ret += (jnp.sum(mask, dtype=_i32),)
    return ret[0] if len(ret) == 1 else ret


_UNIQUE_HINT = ("pass a static size= (and fill_value=) to use it under jit: the first size unique values are "
                "returned, padded with fill_value (default: the smallest value)")


def unique(ar, return_index=False, return_inverse=False, return_counts=False, axis=None, *, equal_nan=True,
           size=None, fill_value=None, sorted=True):
    """Sorted unique values (of rows along axis), with first indices, inverse indices
    and counts on request. NaNs are one value unless equal_nan=False. size= makes the
    result shape static: the first size values, padded with fill_value (default the
    smallest value), as jnp.unique."""
    arr = _arr(ar)
    if size is None:
        _concrete(arr, "unique", _UNIQUE_HINT)
    else:
        size = _operator_index(size)
    shape = tuple(arr.shape)
    if axis is None:
        axis_int, arr = 0, jnp.ravel(arr)
    else:
        axis_int = jnp._norm_axis(_operator_index(axis), arr.ndim)
    result = _unique(arr, axis_int, return_index, return_inverse, return_counts, equal_nan=equal_nan,
                     size=size, fill_value=fill_value)
    if return_inverse and axis is None:
        i = 2 if return_index else 1
        result = (*result[:i], jnp.reshape(result[i], shape), *result[i + 1:])
    return result


def unique_all(x, /, *, size=None, fill_value=None):
    v, i, inv, c = unique(x, return_index=True, return_inverse=True, return_counts=True, equal_nan=False,
                          size=size, fill_value=fill_value)
    return _UniqueAllResult(values=v, indices=i, inverse_indices=inv, counts=c)


def unique_counts(x, /, *, size=None, fill_value=None):
    v, c = unique(x, return_counts=True, equal_nan=False, size=size, fill_value=fill_value)
    return _UniqueCountsResult(values=v, counts=c)


def unique_inverse(x, /, *, size=None, fill_value=None):
    v, inv = unique(x, return_inverse=True, equal_nan=False, size=size, fill_value=fill_value)
    return _UniqueInverseResult(values=v, inverse_indices=inv)


def unique_values(x, /, *, size=None, fill_value=None):
    return unique(x, equal_nan=False, size=size, fill_value=fill_value)


def _in1d(ar1, ar2, invert, method="auto", assume_unique=False):
    a, b = jnp._promote(ar1, ar2)
    a, b = jnp.ravel(a), jnp.ravel(b)
    if method not in ("auto", "compare_all", "binary_search", "sort"):
        raise ValueError(f"method={method!r} is not implemented; options are 'compare_all', 'binary_search', "
                         "'sort', and 'auto'")
    if a.shape[0] == 0 or b.shape[0] == 0:
        return (jnp.ones if invert else jnp.zeros)(a.shape, bool)
    if method in ("auto", "compare_all"):
        eq = bind("eq", jnp.reshape(a, (-1, 1)), jnp.reshape(b, (1, -1)))
        return jnp.all(bind("not", eq), axis=-1) if invert else jnp.any(eq, axis=-1)
    # binary search in the sorted b ('sort' gives the same booleans)
    bs = jnp.sort(b)
    hit = bind("eq", a, _take(bs, searchsorted(bs, a)))
    return bind("not", hit) if invert else hit


def isin(element, test_elements, assume_unique=False, invert=False, *, method="auto"):
    element = _arr(element)
    out = _in1d(element, _arr(test_elements), invert=invert, method=method, assume_unique=assume_unique)
    return jnp.reshape(out, element.shape)


def _fill_like(arr, v):
    return jnp.astype(v, arr.dtype) if isinstance(v, (Array, Tracer)) else jnp._const_like(arr, v)


def _concat_unique(arr1, arr2):
    arr1, n1 = _unique(arr1, 0, size=arr1.shape[0], return_true_size=True)
    arr2, n2 = _unique(arr2, 0, size=arr2.shape[0], return_true_size=True)
    arr = jnp.zeros(arr1.shape[0] + arr2.shape[0], jnp.result_type(arr1, arr2))
    arr = lax.dynamic_update_slice(arr, arr1, (0,))
    arr = lax.dynamic_update_slice(arr, arr2, (n1,))
    return arr, jnp.add(n1, n2)


def setdiff1d(ar1, ar2, assume_unique=False, *, size=None, fill_value=None):
    """Sorted unique values of ar1 not in ar2; size= pads with fill_value (default 0)."""
    arr1, arr2 = jnp.ravel(_arr(ar1)), jnp.ravel(_arr(ar2))
    if size is None:
        _concrete(arr1, "setdiff1d", "pass a static size= (and fill_value=) to use it under jit")
    else:
        size = _operator_index(size)
    fill = _fill_like(arr1, 0 if fill_value is None else fill_value)
    if arr1.shape[0] == 0:
        return jnp.broadcast_to(fill, (size or 0,))
    if not assume_unique:
        arr1 = unique(arr1, size=size and arr1.shape[0])
    mask = _in1d(arr1, arr2, invert=True, assume_unique=assume_unique)
    if size is None:
        return arr1[_concrete(mask, "setdiff1d", "")]
    if not assume_unique:
        n_unique = jnp.subtract(arr1.shape[0] + 1, jnp.sum(jnp.equal(arr1, arr1[0]), dtype=_i32))
        mask = jnp.where(jnp.less(jnp.arange(arr1.shape[0], dtype=_i32), n_unique), mask, False)
    picked = _take(arr1, _nonzero_1d(mask, size))
    return jnp.where(jnp.less(jnp.arange(size, dtype=_i32), jnp.sum(mask, dtype=_i32)), picked, fill)


def union1d(ar1, ar2, *, size=None, fill_value=None):
    ar1, ar2 = _arr(ar1), _arr(ar2)
    if size is None:
        _concrete(ar1, "union1d", "pass a static size= (and fill_value=) to use it under jit")
        _concrete(ar2, "union1d", "pass a static size= (and fill_value=) to use it under jit")
    return unique(jnp.concatenate([ar1, ar2], axis=None), size=size, fill_value=fill_value)


def setxor1d(ar1, ar2, assume_unique=False, *, size=None, fill_value=None):
    """Sorted values in exactly one of ar1 and ar2; size= pads with fill_value (default:
    the largest value... then the smallest, as JAX's double where)."""
    arr1, arr2 = jnp._promote(jnp.ravel(_arr(ar1)), jnp.ravel(_arr(ar2)))
    if size is not None:
        return _setxor1d_size(arr1, arr2, fill_value, assume_unique, _operator_index(size))
    if not assume_unique:
        arr1, arr2 = unique(arr1), unique(arr2)
    aux = jnp.concatenate([arr1, arr2])
    if aux.shape[0] == 0:
        return aux
    aux = jnp.sort(aux)
    flag = _np.concatenate([[True], _np.asarray(aux[1:] != aux[:-1]), [True]])
    return aux[flag[1:] & flag[:-1]]


def _setxor1d_size(arr1, arr2, fill_value, assume_unique, size):
    if assume_unique:
        aux = jnp.sort(jnp.concatenate([arr1, arr2]))
        flag = jnp.concatenate([jnp.full((1,), aux.shape[0] > 0, bool), aux[1:] != aux[:-1], jnp.ones((1,), bool)])
    else:
        arr, num_unique = _concat_unique(arr1, arr2)
        mask = jnp.less(jnp.arange(arr.shape[0] + 1, dtype=_i32), jnp.add(num_unique, 1))
        # sort by (~mask[1:], arr): the unique values first, in order
        perm = lexsort([arr, bind("not", mask[1:])])
        aux = _take(arr, perm)
        neq = jnp.concatenate([jnp.full((1,), aux.shape[0] > 0, bool), aux[1:] != aux[:-1], jnp.zeros((1,), bool)])
        flag = jnp.logical_and(mask, neq.at[num_unique].set(True))
    aux_mask = jnp.logical_and(flag[1:], flag[:-1])
    num = jnp.sum(aux_mask, dtype=_i32)
    keep = jnp.less(jnp.arange(size, dtype=_i32), num)
    if aux.shape[0]:
        ind = nonzero(aux_mask, size=size, fill_value=aux.shape[0])[0]
        vals = aux.at[ind].get(mode="fill", fill_value=0)
    else:
        vals = jnp.zeros(size, aux.dtype)
    if fill_value is None:
        vals = jnp.where(keep, vals, jnp.max(vals))
        return jnp.where(keep, vals, jnp.min(vals))
    return jnp.where(keep, vals, _fill_like(vals, fill_value))


def intersect1d(ar1, ar2, assume_unique=False, return_indices=False, *, size=None, fill_value=None):
    """Sorted values in both ar1 and ar2 (and their first indices in each); size= pads
    with fill_value (default: the largest, then smallest value, as JAX)."""
    arr1, arr2 = jnp._promote(jnp.ravel(_arr(ar1)), jnp.ravel(_arr(ar2)))
    if size is not None:
        return _intersect1d_size(arr1, arr2, fill_value, assume_unique, _operator_index(size), return_indices)
    _concrete(arr1, "intersect1d", "pass a static size= (and fill_value=) to use it under jit")
    _concrete(arr2, "intersect1d", "pass a static size= (and fill_value=) to use it under jit")
    ind1 = ind2 = None
    if not assume_unique:
        if return_indices:
            arr1, ind1 = unique(arr1, return_index=True)
            arr2, ind2 = unique(arr2, return_index=True)
        else:
            arr1, arr2 = unique(arr1), unique(arr2)
    arr = jnp.concatenate([arr1, arr2])
    order = jnp.argsort(arr)
    aux = _take(arr, order) if arr.shape[0] else arr
    mask = _np.asarray(aux[1:] == aux[:-1])
    int1d = aux[:-1][mask]
    if not return_indices:
        return int1d
    o = _np.asarray(order)
    i1 = o[:-1][mask]
    i2 = o[1:][mask] - arr1.shape[0]
    if not assume_unique:
        i1, i2 = _np.asarray(ind1)[i1], _np.asarray(ind2)[i2]
    return int1d, jnp.asarray(i1.astype(_i32)), jnp.asarray(i2.astype(_i32))


def _intersect1d_size(arr1, arr2, fill_value, assume_unique, size, return_indices):
    if assume_unique:
        ind1, n1 = jnp.arange(arr1.shape[0], dtype=_i32), jnp.asarray(_i32(arr1.shape[0]))
        ind2 = jnp.arange(arr2.shape[0], dtype=_i32)
        arr = jnp.concatenate([arr1, arr2])
        srt = jnp.argsort(arr)
        aux, aux_idx = _take(arr, srt), srt
        mask = jnp.ones(arr.shape[0], bool)
    else:
        arr1, ind1, n1 = _unique(arr1, 0, size=arr1.shape[0], return_index=True, return_true_size=True, fill_value=0)
        arr2, ind2, n2 = _unique(arr2, 0, size=arr2.shape[0], return_index=True, return_true_size=True, fill_value=0)
        arr = jnp.zeros(arr1.shape[0] + arr2.shape[0], jnp.result_type(arr1, arr2))
        arr = lax.dynamic_update_slice(arr, arr1, (0,))
        arr = lax.dynamic_update_slice(arr, arr2, (n1,))
        mask = jnp.less(jnp.arange(arr.shape[0], dtype=_i32), jnp.add(n1, n2))
        aux_idx = lexsort([arr, bind("not", mask)])
        aux = _take(arr, aux_idx)
    aux_mask = jnp.logical_and(jnp.equal(aux[1:], aux[:-1]), mask[1:])
    num = jnp.sum(aux_mask, dtype=_i32)
    keep = jnp.less(jnp.arange(size, dtype=_i32), num)
    if aux.shape[0]:
        val_ind = nonzero(aux_mask, size=size, fill_value=aux.shape[0])[0]
        vals = aux.at[val_ind].get(mode="fill", fill_value=0)
    else:
        val_ind = jnp.arange(0, dtype=_i32)
        vals = jnp.zeros(size, aux.dtype)
    if fill_value is None:
        vals = jnp.where(keep, vals, jnp.max(vals))
        vals = jnp.where(keep, vals, jnp.min(vals))
    else:
        vals = jnp.where(keep, vals, _fill_like(vals, fill_value))
    if not return_indices:
        return vals
    s1, s2 = arr1.shape[0], arr2.shape[0]
    i1 = aux_idx.at[val_ind].get(mode="fill", fill_value=s1)
    i1 = jnp.where(keep, i1, _i32(s1))
    i2 = jnp.subtract(aux_idx.at[jnp.add(val_ind, _i32(1))].get(mode="fill", fill_value=s2), n1)
    i2 = jnp.where(keep, i2, _i32(s2))
    if not assume_unique:
        i1 = ind1.at[i1].get(mode="fill", fill_value=ind1.shape[0])
        i2 = ind2.at[i2].get(mode="fill", fill_value=ind2.shape[0])
    return vals, i1, i2
