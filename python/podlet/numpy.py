"""podlet.numpy: the jax.numpy subset that training code uses.

Binary ops promote dtypes like JAX (Python scalars are weak: bf16 * 2.0 stays bf16)
and broadcast like NumPy; everything lowers to primitives through podlet.lax.
"""
import builtins as _bi
import string as _string

import numpy as _np

from . import lax
from . import tree_util as _tu
from ._src import dtypes as _dtypes
from ._src.core import Array, Tracer, bind, bind_like, to_array
from ._src.errors import ShapeError as _ShapeError

ndarray = Array
float32 = _np.float32
float64 = _np.float64
bfloat16 = _dtypes.bfloat16.type
int32 = _np.int32
uint32 = _np.uint32
uint8 = _np.uint8
bool_ = _np.bool_
int8 = _np.int8
float16 = _np.float16
pi = _np.pi
e = _np.e
inf = _np.inf
nan = _np.nan
newaxis = None

dtype = _np.dtype
finfo = _np.finfo
iinfo = _np.iinfo
number = _np.number
inexact = _np.inexact
floating = _np.floating
integer = _np.integer
signedinteger = _np.signedinteger
unsignedinteger = _np.unsignedinteger


def shape(a):
    return tuple(a.shape) if hasattr(a, "shape") else _np.shape(a)


def ndim(a):
    return len(shape(a))


def size(a, axis=None):
    s = shape(a)
    return int(_np.prod(s, dtype=_np.int64)) if axis is None else s[axis]


def promote_types(a, b):
    """jnp.promote_types: the dtype both promote to (JAX's lattice, bf16 + f32 -> f32)."""
    return _dtypes.promote(_dtypes.dtype(a), _dtypes.dtype(b))


def can_cast(from_, to, casting="safe"):
    return _np.can_cast(from_, to, casting)


def issubdtype(a, b):
    if _np.dtype(a) == _dtypes.bfloat16 and b in (_np.floating, _np.inexact, _np.number):
        return True
    return _np.issubdtype(a, b)


def _is_array(x):
    return isinstance(x, (Array, Tracer))


def _weak(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) or (_is_array(x) and x.weak_type)


# ---------------------------------------------------------------------------------
# creation
# ---------------------------------------------------------------------------------
def asarray(a, dtype=None, copy=None):
    if _is_array(a):
        return a if dtype is None else astype(a, dtype)
    if isinstance(a, (list, tuple)) and _bi.any(_is_array(x) for x in _tu.tree_leaves(a)):
        return stack([asarray(x, dtype) for x in a])
    if dtype is None and isinstance(a, float):
        dtype = float32
    return to_array(a, dtype)


def array(a, dtype=None, copy=True, ndmin=0):
    if _is_array(a):
        out = a if dtype is None else astype(a, dtype)
    else:
        npa = _np.array(a)
        d = _dtypes.canonicalize(dtype if dtype is not None else npa.dtype)
        out = Array.from_numpy(_np.array(npa, dtype=d, order="C"), copy=True)  # 0-d stays 0-d
    while out.ndim < ndmin:
        out = expand_dims(out, 0)
    return out


def _default_float(dtype):
    return _dtypes.canonicalize(dtype if dtype is not None else float32)


def _shape(shape):
    if isinstance(shape, (int, _np.integer)):
        return (int(shape),)
    return tuple(int(s) for s in shape)


def full(shape, fill_value, dtype=None):
    if dtype is None:
        dtype = fill_value.dtype if _is_array(fill_value) else (_np.asarray(fill_value).dtype)
    d = _dtypes.canonicalize(dtype)
    shape = _shape(shape)
    if _is_array(fill_value):
        return broadcast_to(astype(fill_value, d), shape)
    # A broadcast of a 0-d constant, as lax.full: under jit the graph holds one scalar
    # (read as a scalar by fused kernels), not an activation-sized constant.
    return broadcast_to(to_array(_np.asarray(fill_value, dtype=d)), shape)


def zeros(shape, dtype=None):
    return full(shape, 0, _default_float(dtype))


def ones(shape, dtype=None):
    return full(shape, 1, _default_float(dtype))


def empty(shape, dtype=None):
    return zeros(shape, dtype)


def zeros_like(a, dtype=None, shape=None):
    return full_like(a, 0, dtype, shape)


def ones_like(a, dtype=None, shape=None):
    return full_like(a, 1, dtype, shape)


def full_like(a, fill_value, dtype=None, shape=None):
    shape = _shape(a.shape if shape is None else shape)
    d = _dtypes.canonicalize(dtype or _dt(a))
    if isinstance(a, Tracer) and not _is_array(fill_value):
        # Staged into a's trace: a broadcast of a scalar constant (what fused kernels read
        # as a scalar), never an array materialised while tracing.
        c = to_array(_np.asarray(fill_value, dtype=d))
        return bind_like(a, "broadcast_in_dim", c, shape=list(shape), broadcast_dimensions=[])
    return full(shape, fill_value, d)


def _dt(a):
    return a.dtype if hasattr(a, "dtype") else _np.asarray(a).dtype


def arange(start, stop=None, step=None, dtype=None):
    if stop is None:
        start, stop = 0, start
    step = 1 if step is None else step
    if dtype is None:
        dtype = float32 if _bi.any(isinstance(v, float) for v in (start, stop, step)) else int32
    return to_array(_np.arange(start, stop, step, dtype=_dtypes.canonicalize(dtype)))


def linspace(start, stop, num=50, endpoint=True, dtype=None):
    return to_array(_np.linspace(start, stop, num, endpoint=endpoint, dtype=_default_float(dtype)))


def eye(N, M=None, k=0, dtype=None):
    return to_array(_np.eye(N, M, k, dtype=_default_float(dtype)))


def identity(n, dtype=None):
    return eye(n, dtype=dtype)


# ---------------------------------------------------------------------------------
# dtype handling
# ---------------------------------------------------------------------------------
def astype(x, dtype):
    x = asarray(x) if not _is_array(x) else x
    return lax.convert_element_type(x, dtype)


def result_type(*args):
    d, w = None, True
    for a in args:
        ad = _np.dtype(type(a)) if isinstance(a, (int, float, bool)) else _dt(a)
        ad = float32 if isinstance(a, float) else (int32 if isinstance(a, int) and not isinstance(a, bool) else ad)
        aw = _weak(a)
        if d is None:
            d, w = _dtypes.canonicalize(ad), aw
        else:
            d = _dtypes.promote(d, _dtypes.canonicalize(ad), w, aw)
            w = w and aw
    return d


def _promote(*args):
    """Converts operands to arrays of one dtype (JAX promotion, weak scalars)."""
    d = result_type(*args)
    out = []
    for a in args:
        if _is_array(a):
            out.append(a if a.dtype == d else lax.convert_element_type(a, d))
        else:
            out.append(to_array(_np.asarray(a, dtype=d)))
    return out


def _promote_float(*args):
    d = result_type(*args)
    if not _dtypes.is_float(d):
        d = float32
    return [a if (_is_array(a) and a.dtype == d) else (astype(a, d) if _is_array(a) else to_array(_np.asarray(a, d)))
            for a in args]


# ---------------------------------------------------------------------------------
# elementwise
# ---------------------------------------------------------------------------------
def _binary(prim):
    def f(x1, x2):
        a, b = _promote(x1, x2)
        out = bind(prim, a, b)
        if _weak(x1) and _weak(x2) and isinstance(out, Tracer):
            out.weak_type = True
        return out
    f.__name__ = prim
    return f


add = _binary("add")
subtract = _binary("sub")
multiply = _binary("mul")
maximum = _binary("max")
minimum = _binary("min")
remainder = mod = _binary("rem")
equal = _binary("eq")
not_equal = _binary("ne")
less = _binary("lt")
less_equal = _binary("le")
greater = _binary("gt")
greater_equal = _binary("ge")
bitwise_and = _binary("and")
bitwise_or = _binary("or")
bitwise_xor = _binary("xor")


def _logical(prim):
    """jnp.logical_*: operands are truth values (x != 0), the result is bool."""
    def f(x1, x2):
        return bind(prim, _bool(asarray(x1)), _bool(asarray(x2)))
    f.__name__ = f"logical_{prim}"
    return f


logical_and = _logical("and")
logical_or = _logical("or")
logical_xor = _logical("xor")


def true_divide(x1, x2):
    a, b = _promote_float(x1, x2)
    return bind("div", a, b)


divide = true_divide


def floor_divide(x1, x2):
    a, b = _promote(x1, x2)
    if _dtypes.is_float(a.dtype):
        return floor(bind("div", a, b))
    return bind("div", a, b)


def power(x1, x2):
    if isinstance(x2, int) and not isinstance(x2, bool):
        x = asarray(x1) if not _is_array(x1) else x1
        return lax.integer_pow(x, x2)
    a, b = _promote(x1, x2)
    return bind("pow", a, b)


def _unary_float(prim):
    def f(x):
        (x,) = _promote_float(x)
        return bind(prim, x)
    f.__name__ = prim
    return f


exp = _unary_float("exp")
log = _unary_float("log")
log1p = _unary_float("log1p")
expm1 = _unary_float("expm1")
tanh = _unary_float("tanh")
sqrt = _unary_float("sqrt")
sin = _unary_float("sin")
cos = _unary_float("cos")
floor = _unary_float("floor")
ceil = _unary_float("ceil")


def rsqrt(x):
    (x,) = _promote_float(x)
    return bind("rsqrt", x)


def negative(x):
    return bind("neg", asarray(x))


def positive(x):
    return asarray(x)


def abs(x):
    return bind("abs", asarray(x))


absolute = abs


def sign(x):
    return bind("sign", asarray(x))


def square(x):
    return lax.integer_pow(asarray(x), 2)


def reciprocal(x):
    return true_divide(1.0, x)


def logical_not(x):
    return bind("not", _bool(asarray(x)))


def invert(x):
    return bind("not", asarray(x))


bitwise_not = invert


def isfinite(x):
    x = asarray(x)
    if not _dtypes.is_float(x.dtype):
        return full(x.shape, True, bool)
    return bind("is_finite", x)


def isnan(x):
    x = asarray(x)
    return bind("ne", x, x)


def isinf(x):
    x = asarray(x)
    return logical_and(logical_not(isfinite(x)), logical_not(isnan(x)))


def round(a, decimals=0):
    a = asarray(a)
    if decimals:
        s = 10.0 ** decimals
        return bind("round", a * s, rounding_method=1) / s
    return bind("round", a, rounding_method=1)  # numpy rounds half to even


around = round


def where(condition, x=None, y=None):
    if x is None or y is None:
        raise ValueError("podlet.numpy.where needs x and y (the one-argument form has a data-dependent shape)")
    c = asarray(condition)
    if c.dtype != _dtypes.bool_:
        c = bind("ne", c, to_array(_np.zeros((), c.dtype)))
    a, b = _promote(x, y)
    return bind("select", c, a, b)


def clip(a, a_min=None, a_max=None, *, min=None, max=None):
    a_min = min if a_min is None else a_min
    a_max = max if a_max is None else a_max
    out = asarray(a)
    if a_min is not None:
        out = maximum(out, a_min)
    if a_max is not None:
        out = minimum(out, a_max)
    return out


def logaddexp(x1, x2):
    """log(exp(a) + exp(b)) = max(a, b) + log1p(exp(-|a - b|)), accurate for tiny terms."""
    a, b = _promote_float(x1, x2)
    amax = maximum(a, b)
    delta = a - b
    # -|delta| with derivative 0 at delta == 0, so a tie splits the gradient 0.5/0.5
    # through maximum alone (jax.numpy.logaddexp's derivative).
    zero = zeros_like(delta)
    neg_abs = where(delta > 0, -delta, where(delta < 0, delta, zero * delta))
    return where(isnan(delta), a + b, amax + log1p(exp(neg_abs)))


# ---------------------------------------------------------------------------------
# shapes
# ---------------------------------------------------------------------------------
def _norm_axis(axis, ndim):
    if not -ndim <= axis < _bi.max(ndim, 1):
        raise _ShapeError(f"axis {axis} is out of bounds for an array of rank {ndim}")
    return axis % ndim if ndim else 0


def reshape(a, newshape=None, order="C", *, shape=None):
    a = asarray(a)
    newshape = shape if newshape is None else newshape
    newshape = _shape(newshape)
    if -1 in newshape:
        known = int(_np.prod([s for s in newshape if s != -1], dtype=_np.int64))
        if newshape.count(-1) > 1 or known == 0 or a.size % known:
            raise _ShapeError(f"cannot reshape array of shape {a.shape} (size {a.size}) into shape {newshape}")
        newshape = tuple(a.size // known if s == -1 else s for s in newshape)
    if tuple(newshape) == tuple(a.shape):
        return a
    return lax.reshape(a, newshape)


def ravel(a):
    return reshape(a, (-1,))


def transpose(a, axes=None):
    a = asarray(a)
    if axes is None:
        axes = tuple(range(a.ndim))[::-1]
    axes = [_norm_axis(x, a.ndim) for x in axes]
    if axes == list(range(a.ndim)):
        return a
    return lax.transpose(a, axes)


def swapaxes(a, axis1, axis2):
    p = list(range(a.ndim))
    i, j = _norm_axis(axis1, a.ndim), _norm_axis(axis2, a.ndim)
    p[i], p[j] = p[j], p[i]
    return transpose(a, p)


def moveaxis(a, source, destination):
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    src = [_norm_axis(s, a.ndim) for s in src]
    dst = [_norm_axis(d, a.ndim) for d in dst]
    order = [i for i in range(a.ndim) if i not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return transpose(a, order)


def expand_dims(a, axis):
    a = asarray(a)
    axes = [axis] if isinstance(axis, int) else list(axis)
    nd = a.ndim + len(axes)
    shape = list(a.shape)
    for ax in sorted(x % nd for x in axes):
        shape.insert(ax, 1)
    return reshape(a, shape)


def squeeze(a, axis=None):
    a = asarray(a)
    if axis is None:
        axes = [i for i, s in enumerate(a.shape) if s == 1]
    else:
        axes = [_norm_axis(x, a.ndim) for x in ([axis] if isinstance(axis, int) else axis)]
        for x in axes:
            if a.shape[x] != 1:
                raise _ShapeError(f"cannot squeeze axis {x} of shape {a.shape}: its size is not 1")
    return reshape(a, [s for i, s in enumerate(a.shape) if i not in axes])


def broadcast_shapes(*shapes):
    return tuple(_np.broadcast_shapes(*[tuple(s) for s in shapes]))


def broadcast_to(a, shape):
    a = asarray(a)
    shape = _shape(shape)
    if tuple(a.shape) == shape:
        return a
    nd = len(shape)
    if a.ndim > nd:
        raise _ShapeError(f"cannot broadcast shape {a.shape} to {shape}")
    return lax.broadcast_in_dim(a, shape, list(range(nd - a.ndim, nd)))


def broadcast_arrays(*args):
    shape = broadcast_shapes(*[asarray(a).shape for a in args])
    return [broadcast_to(a, shape) for a in args]


def concatenate(arrays, axis=0):
    arrays = _promote(*arrays)
    if axis is None:
        arrays = [ravel(a) for a in arrays]
        axis = 0
    if len(arrays) == 1:
        return arrays[0]
    return lax.concatenate(arrays, _norm_axis(axis, arrays[0].ndim))


def stack(arrays, axis=0):
    arrays = [asarray(a) for a in arrays]
    nd = arrays[0].ndim + 1
    ax = axis % nd
    return concatenate([expand_dims(a, ax) for a in arrays], axis=ax)


def hstack(arrays):
    arrays = [atleast_1d(a) for a in arrays]
    return concatenate(arrays, axis=0 if arrays[0].ndim == 1 else 1)


def vstack(arrays):
    return concatenate([atleast_2d(a) for a in arrays], axis=0)


def atleast_1d(a):
    a = asarray(a)
    return reshape(a, (1,)) if a.ndim == 0 else a


def atleast_2d(a):
    a = asarray(a)
    return reshape(a, (1,) * (2 - a.ndim) + tuple(a.shape)) if a.ndim < 2 else a


def split(ary, indices_or_sections, axis=0):
    ary = asarray(ary)
    axis = _norm_axis(axis, ary.ndim)
    n = ary.shape[axis]
    if isinstance(indices_or_sections, int):
        if n % indices_or_sections:
            raise ValueError(f"array split does not result in an equal division: {n} into {indices_or_sections}")
        step = n // indices_or_sections
        bounds = list(range(0, n + 1, step))
    else:
        bounds = [0] + [int(i) for i in indices_or_sections] + [n]
    return [lax.slice_in_dim(ary, s, e, 1, axis) for s, e in zip(bounds[:-1], bounds[1:])]


def flip(m, axis=None):
    m = asarray(m)
    axes = list(range(m.ndim)) if axis is None else [_norm_axis(a, m.ndim) for a in ([axis] if isinstance(axis, int) else axis)]
    return lax.rev(m, axes)


def pad(array, pad_width, mode="constant", constant_values=0):
    """jnp.pad with modes 'constant', 'wrap', 'reflect', 'symmetric' and 'edge'.

    The index-based modes gather along each padded axis with indices NumPy computes
    (``np.pad(arange(n), (lo, hi), mode)``), so they trace and differentiate like `take`.
    """
    array = asarray(array)
    pw = _np.broadcast_to(_np.asarray(pad_width, dtype=_np.int64), (array.ndim, 2))
    if mode == "constant":
        return lax.pad(array, _np.asarray(constant_values, array.dtype), [(int(lo), int(hi), 0) for lo, hi in pw])
    if mode not in ("wrap", "reflect", "symmetric", "edge"):
        raise NotImplementedError(f"pad mode {mode!r}; supported: 'constant', 'wrap', 'reflect', 'symmetric', 'edge'")
    for ax, (lo, hi) in enumerate(pw):
        if lo == 0 and hi == 0:
            continue
        idx = _np.pad(_np.arange(array.shape[ax], dtype=_np.int32), (int(lo), int(hi)), mode=mode)
        array = take(array, to_array(idx.astype(_np.int32)), axis=ax)
    return array


def tile(A, reps):
    A = asarray(A)
    reps = (reps,) if isinstance(reps, int) else tuple(reps)
    nd = _bi.max(A.ndim, len(reps))
    A = reshape(A, (1,) * (nd - A.ndim) + tuple(A.shape))
    reps = (1,) * (nd - len(reps)) + reps
    # broadcast to (r0, s0, r1, s1, ...) then merge.
    shape = [v for r, s in zip(reps, A.shape) for v in (r, s)]
    b = lax.broadcast_in_dim(A, shape, list(range(1, 2 * nd, 2)))
    return reshape(b, [r * s for r, s in zip(reps, A.shape)])


def repeat(a, repeats, axis=None):
    a = asarray(a)
    if axis is None:
        a, axis = ravel(a), 0
    axis = _norm_axis(axis, a.ndim)
    shape = list(a.shape)
    b = expand_dims(a, axis + 1)
    bshape = shape[:axis + 1] + [int(repeats)] + shape[axis + 1:]
    b = broadcast_to(b, bshape)
    shape[axis] *= int(repeats)
    return reshape(b, shape)


# ---------------------------------------------------------------------------------
# reductions
# ---------------------------------------------------------------------------------
def _axes(axis, ndim):
    if axis is None:
        return list(range(ndim))
    if isinstance(axis, (int, _np.integer)):
        return [_norm_axis(int(axis), ndim)]
    return sorted(_norm_axis(int(x), ndim) for x in axis)


def _keep(out, axes, shape, keepdims):
    if not keepdims:
        return out
    return reshape(out, [1 if i in axes else s for i, s in enumerate(shape)])


def sum(a, axis=None, dtype=None, keepdims=False, where=None):
    a = asarray(a)
    if dtype is not None:
        a = astype(a, dtype)
    elif a.dtype in (_dtypes.bool_, _dtypes.uint8):
        a = astype(a, int32)
    if where is not None:
        a = _where_zero(where, a)
    ax = _axes(axis, a.ndim)
    return _keep(lax.reduce_sum(a, ax), ax, a.shape, keepdims)


def _where_zero(where, a):
    return bind("select", _bool(where), a, to_array(_np.zeros((), a.dtype)))


def prod(a, axis=None, dtype=None, keepdims=False):
    a = asarray(a) if dtype is None else astype(a, dtype)
    ax = _axes(axis, a.ndim)
    return _keep(lax.reduce_prod(a, ax), ax, a.shape, keepdims)


def _masked_for_extremum(a, where, initial, name):
    if where is None:
        return a
    if initial is None:
        raise ValueError(f"reduction operation {name} with where= requires an initial value (as in jax.numpy)")
    return bind("select", _bool(where), a, to_array(_np.asarray(initial, a.dtype)))


def _bool(x):
    x = asarray(x)
    return x if x.dtype == _dtypes.bool_ else bind("ne", x, to_array(_np.zeros((), x.dtype)))


def max(a, axis=None, keepdims=False, initial=None, where=None):
    a = _masked_for_extremum(asarray(a), where, initial, "max")
    ax = _axes(axis, a.ndim)
    out = _keep(lax.reduce_max(a, ax), ax, a.shape, keepdims)
    return out if initial is None else maximum(out, initial)


def min(a, axis=None, keepdims=False, initial=None, where=None):
    a = _masked_for_extremum(asarray(a), where, initial, "min")
    ax = _axes(axis, a.ndim)
    out = _keep(lax.reduce_min(a, ax), ax, a.shape, keepdims)
    return out if initial is None else minimum(out, initial)


amax, amin = max, min


def all(a, axis=None, keepdims=False):
    a = asarray(a)
    return equal(min(astype(astype(a, bool_), int32), axis, keepdims, initial=1), 1)


def any(a, axis=None, keepdims=False):
    a = asarray(a)
    return greater(max(astype(astype(a, bool_), int32), axis, keepdims, initial=0), 0)


def mean(a, axis=None, dtype=None, keepdims=False, where=None):
    a = asarray(a)
    if not _dtypes.is_float(a.dtype):
        a = astype(a, float32)
    if dtype is not None:
        a = astype(a, dtype)
    ax = _axes(axis, a.ndim)
    n = int(_np.prod([a.shape[i] for i in ax], dtype=_np.int64))
    if where is not None:
        w = astype(asarray(where), a.dtype)
        return sum(a * w, axis, keepdims=keepdims) / sum(broadcast_to(w, a.shape), axis, keepdims=keepdims)
    # Sum in f32 for bf16 (as XLA does), then scale.
    acc = astype(a, float32) if a.dtype == _dtypes.bfloat16 else a
    out = sum(acc, ax, keepdims=keepdims) / _np.asarray(n, acc.dtype).item()
    return astype(out, a.dtype)


def var(a, axis=None, dtype=None, ddof=0, keepdims=False, where=None):
    a = asarray(a)
    if not _dtypes.is_float(a.dtype):
        a = astype(a, float32)
    ax = _axes(axis, a.ndim)
    n = int(_np.prod([a.shape[i] for i in ax], dtype=_np.int64))
    acc = astype(a, float32) if a.dtype == _dtypes.bfloat16 else a
    m = mean(acc, ax, keepdims=True)
    d = acc - m
    out = sum(d * d, ax, keepdims=keepdims) / float(_bi.max(n - ddof, 0))
    return astype(out, a.dtype)


def std(a, axis=None, dtype=None, ddof=0, keepdims=False, where=None):
    return sqrt(var(a, axis, dtype, ddof, keepdims))


def argmax(a, axis=None, keepdims=False):
    a = asarray(a)
    if axis is None:
        a, axis = ravel(a), 0
    axis = _norm_axis(axis, a.ndim)
    out = lax.argmax(a, axis, int32)
    return _keep(out, [axis], a.shape, keepdims)


def argmin(a, axis=None, keepdims=False):
    a = asarray(a)
    if axis is None:
        a, axis = ravel(a), 0
    axis = _norm_axis(axis, a.ndim)
    out = lax.argmin(a, axis, int32)
    return _keep(out, [axis], a.shape, keepdims)


def cumsum(a, axis=None, dtype=None):
    a = asarray(a) if dtype is None else astype(a, dtype)
    if axis is None:
        a, axis = ravel(a), 0
    return lax.cumsum(a, _norm_axis(axis, a.ndim))


def argsort(a, axis=-1, kind=None, order=None, stable=True, descending=False):
    a = asarray(a)
    return bind("argsort", a, axis=_norm_axis(axis, a.ndim), descending=int(bool(descending)))


def sort(a, axis=-1, kind=None, order=None, stable=True, descending=False):
    a = asarray(a)
    idx = argsort(a, axis, descending=descending)
    return take_along_axis(a, idx, axis)


# ---------------------------------------------------------------------------------
# indexing
# ---------------------------------------------------------------------------------
def take(a, indices, axis=None, mode=None, fill_value=None):
    a = asarray(a)
    if axis is None:
        a, axis = ravel(a), 0
    idx = asarray(indices)
    if idx.dtype != _dtypes.int32:
        idx = astype(idx, int32)
    return bind("take", a, idx, axis=_norm_axis(axis, a.ndim))


def take_along_axis(arr, indices, axis, mode=None, fill_value=None):
    arr = asarray(arr)
    idx = asarray(indices)
    if idx.dtype != _dtypes.int32:
        idx = astype(idx, int32)
    if axis is None:
        arr, axis = ravel(arr), 0
    return bind("take_along_axis", arr, idx, axis=_norm_axis(axis, arr.ndim))


def _getitem(a, key):
    if not isinstance(key, tuple):
        key = (key,)
    # Integer/bool array indices: one advanced index on one axis (the common cases).
    if builtins_any(_is_array(k) or isinstance(k, (_np.ndarray, list)) for k in key):
        if len(key) == 1:
            k = key[0]
            k = asarray(k) if not _is_array(k) else k
            if k.dtype == _dtypes.bool_:
                raise IndexError("boolean mask indexing has a data-dependent shape; use podlet.numpy.where")
            return take(a, k, axis=0)
        raise IndexError("podlet supports one integer-array index (x[idx]); use take / take_along_axis")
    # Expand Ellipsis.
    n_real = builtins_sum(1 for k in key if k is not None and k is not Ellipsis)
    if builtins_sum(1 for k in key if k is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis")
    if Ellipsis in key:
        i = key.index(Ellipsis)
        key = key[:i] + (slice(None),) * (a.ndim - n_real) + key[i + 1:]
    if n_real > a.ndim:
        raise IndexError(f"too many indices for array of rank {a.ndim}")
    key = key + (slice(None),) * (a.ndim - n_real)
    starts, limits, strides, out_shape, squeeze_dims, rev_dims = [], [], [], [], [], []
    dyn = []
    dim = 0
    new_axes = []
    for k in key:
        if k is None:
            new_axes.append(len(out_shape))
            out_shape.append(1)
            continue
        n = a.shape[dim]
        if isinstance(k, slice):
            s, e, st = k.indices(n)
            if st < 0:
                # reverse then slice forward
                rev_dims.append(dim)
                s, e = n - 1 - s, n - 1 - e
                st = -st
            cnt = _bi.max(0, (e - s + st - 1) // st)
            starts.append(s)
            limits.append(s + (cnt - 1) * st + 1 if cnt else s)
            strides.append(st)
            out_shape.append(cnt)
        elif isinstance(k, (Tracer,)) or (isinstance(k, Array)):
            dyn.append((dim, k))
            starts.append(0)
            limits.append(n)
            strides.append(1)
            squeeze_dims.append(dim)
        else:
            i = int(k)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for axis {dim} with size {n}")
            i %= n
            starts.append(i)
            limits.append(i + 1)
            strides.append(1)
            squeeze_dims.append(dim)
        dim += 1
    out = a
    if rev_dims:
        out = lax.rev(out, rev_dims)
    if dyn:
        st = [asarray(0)] * a.ndim
        sizes = [l - s for s, l in zip(starts, limits)]
        for d, k in dyn:
            st[d] = k
            sizes[d] = 1
        for d in range(a.ndim):
            if not builtins_any(d == dd for dd, _ in dyn):
                st[d] = starts[d]
        out = lax.dynamic_slice(out, [s if _is_array(s) else int(s) for s in st], sizes)
        if builtins_any(s != 1 for s in strides):
            out = lax.slice(out, [0] * a.ndim, sizes, strides)
    elif (starts, limits) != ([0] * a.ndim, list(a.shape)) or builtins_any(s != 1 for s in strides):
        out = lax.slice(out, starts, limits, strides)
    return reshape(out, out_shape)


builtins_any = _bi.any
builtins_sum = _bi.sum


# ---------------------------------------------------------------------------------
# linear algebra
# ---------------------------------------------------------------------------------
def matmul(a, b, preferred_element_type=None):
    a, b = _promote(a, b)
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("matmul: operands must have at least one dimension (use multiply for scalars)")
    va, vb = a.ndim == 1, b.ndim == 1
    if va:
        a = reshape(a, (1, a.shape[0]))
    if vb:
        b = reshape(b, (b.shape[0], 1))
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    if a.shape[-1] != b.shape[-2]:
        raise _ShapeError(f"matmul: contracting dimensions differ: {a.shape} @ {b.shape}")
    nb = len(batch)
    if nb:
        a = broadcast_to(a, batch + tuple(a.shape[-2:]))
        b = broadcast_to(b, batch + tuple(b.shape[-2:]))
    out = lax.dot_general(a, b, (([nb + 1], [nb]), (list(range(nb)), list(range(nb)))),
                          preferred_element_type=preferred_element_type)
    if va:
        out = squeeze(out, -2)
    if vb:
        out = squeeze(out, -1)
    return out


def dot(a, b, preferred_element_type=None):
    a, b = asarray(a), asarray(b)
    if a.ndim == 0 or b.ndim == 0:
        return multiply(a, b)
    if b.ndim <= 2:
        return matmul(a, b, preferred_element_type)
    return tensordot(a, b, ([a.ndim - 1], [b.ndim - 2]))


def vdot(a, b):
    return sum(ravel(a) * ravel(b))


def inner(a, b):
    a, b = _promote(a, b)
    return lax.dot_general(a, b, (([a.ndim - 1], [b.ndim - 1]), ([], [])))


def outer(a, b):
    return multiply(reshape(a, (-1, 1)), reshape(b, (1, -1)))


def tensordot(a, b, axes=2):
    a, b = _promote(a, b)
    if isinstance(axes, int):
        la, lb = list(range(a.ndim - axes, a.ndim)), list(range(axes))
    else:
        la, lb = axes
        la = [la] if isinstance(la, int) else list(la)
        lb = [lb] if isinstance(lb, int) else list(lb)
    return lax.dot_general(a, b, (([x % a.ndim for x in la], [x % b.ndim for x in lb]), ([], [])))


def einsum(subscripts, *operands, optimize=None, precision=None, preferred_element_type=None):
    """einsum for one or two operands: contractions, batch dims, transposes, sums."""
    ops = _promote(*operands)
    subscripts = subscripts.replace(" ", "")
    if "->" in subscripts:
        ins, out = subscripts.split("->")
    else:
        ins = subscripts
        letters = "".join(ins.split(","))
        out = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    ins = ins.split(",")
    if len(ins) != len(ops):
        raise ValueError(f"einsum: {len(ins)} operand specs for {len(ops)} operands")
    if "..." in subscripts:
        ins, out = _expand_ellipsis(ins, out, ops)
    for spec, op in zip(ins, ops):
        if len(spec) != op.ndim:
            raise _ShapeError(f"einsum: spec '{spec}' has {len(spec)} indices for an operand of shape {op.shape}")
    ops = [_einsum_reduce_single(s, o, out, [x for x in ins if x is not s]) for s, o in zip(ins, ops)]
    ins = [s for s, _ in ops]
    ops = [o for _, o in ops]
    if len(ops) == 1:
        spec, x = ins[0], ops[0]
        return transpose(x, [spec.index(c) for c in out])
    if len(ops) != 2:
        # left-to-right pairwise
        raise NotImplementedError("einsum with more than two operands")
    (sa, sb), (a, b) = ins, ops
    batch = [c for c in sa if c in sb and c in out]
    contract = [c for c in sa if c in sb and c not in out]
    dn = (([sa.index(c) for c in contract], [sb.index(c) for c in contract]),
          ([sa.index(c) for c in batch], [sb.index(c) for c in batch]))
    res = lax.dot_general(a, b, dn, preferred_element_type=preferred_element_type)
    res_spec = batch + [c for c in sa if c not in batch and c not in contract] + \
        [c for c in sb if c not in batch and c not in contract]
    return transpose(res, [res_spec.index(c) for c in out])


def _einsum_reduce_single(spec, x, out, others):
    """Sums out indices that appear only in this operand and not in the output."""
    drop = [i for i, c in enumerate(spec) if c not in out and not builtins_any(c in o for o in others)]
    if len(set(spec)) != len(spec):
        raise NotImplementedError("einsum: repeated index within one operand (traces/diagonals)")
    if drop:
        x = lax.reduce_sum(x, drop)
        spec = "".join(c for i, c in enumerate(spec) if i not in drop)
    return spec, x


def _expand_ellipsis(ins, out, ops):
    free = [c for c in _string.ascii_letters if c not in "".join(ins) + out]
    nd = _bi.max(op.ndim - (len(s) - 3) for s, op in zip(ins, ops) if "..." in s)
    ell = "".join(free[:nd])
    new_ins = []
    for s, op in zip(ins, ops):
        if "..." in s:
            k = op.ndim - (len(s) - 3)
            s = s.replace("...", ell[nd - k:])
        new_ins.append(s)
    return new_ins, out.replace("...", ell)


# ---------------------------------------------------------------------------------
# Array / Tracer methods
# ---------------------------------------------------------------------------------
def _rev(f):
    return lambda self, other: f(other, self)


class _AtIndexer:
    def __init__(self, arr):
        self.arr = arr

    def __getitem__(self, idx):
        return _AtRef(self.arr, idx)


class _AtRef:
    """x.at[idx].set(v) / .add(v) / .get() for static basic indices."""

    def __init__(self, arr, idx):
        self.arr, self.idx = arr, idx

    def get(self):
        return _getitem(self.arr, self.idx)

    def _mask_and_values(self, v):
        a = self.arr
        pos = _np.zeros(a.shape, dtype=bool)
        pos[self.idx] = True
        n = int(pos.sum())
        flat = _np.flatnonzero(pos.ravel())
        return pos, flat, n

    def set(self, values):
        a = self.arr
        pos, flat, n = self._mask_and_values(values)
        v = broadcast_to(astype(asarray(values), a.dtype), _np.empty(a.shape)[self.idx].shape)
        src = _np.zeros(a.size, dtype=_np.int32)
        src[flat] = _np.arange(n, dtype=_np.int32)
        scattered = reshape(take(ravel(v), to_array(src), axis=0), a.shape)
        return where(to_array(pos), scattered, a)

    def add(self, values):
        return self.set(self.get() + values)

    def multiply(self, values):
        return self.set(self.get() * values)


def _install_methods(cls):
    cls.__add__ = lambda s, o: add(s, o)
    cls.__radd__ = lambda s, o: add(o, s)
    cls.__sub__ = lambda s, o: subtract(s, o)
    cls.__rsub__ = lambda s, o: subtract(o, s)
    cls.__mul__ = lambda s, o: multiply(s, o)
    cls.__rmul__ = lambda s, o: multiply(o, s)
    cls.__truediv__ = lambda s, o: true_divide(s, o)
    cls.__rtruediv__ = lambda s, o: true_divide(o, s)
    cls.__floordiv__ = lambda s, o: floor_divide(s, o)
    cls.__mod__ = lambda s, o: remainder(s, o)
    cls.__pow__ = lambda s, o: power(s, o)
    cls.__rpow__ = lambda s, o: power(o, s)
    cls.__matmul__ = lambda s, o: matmul(s, o)
    cls.__rmatmul__ = lambda s, o: matmul(o, s)
    cls.__neg__ = lambda s: negative(s)
    cls.__pos__ = lambda s: s
    cls.__abs__ = lambda s: abs(s)
    cls.__invert__ = lambda s: invert(s)
    cls.__and__ = lambda s, o: bitwise_and(s, o)
    cls.__or__ = lambda s, o: bitwise_or(s, o)
    cls.__xor__ = lambda s, o: bitwise_xor(s, o)
    cls.__lt__ = lambda s, o: less(s, o)
    cls.__le__ = lambda s, o: less_equal(s, o)
    cls.__gt__ = lambda s, o: greater(s, o)
    cls.__ge__ = lambda s, o: greater_equal(s, o)
    cls.__eq__ = lambda s, o: equal(s, o)
    cls.__ne__ = lambda s, o: not_equal(s, o)
    cls.__hash__ = None
    cls.__getitem__ = _getitem
    cls.astype = astype
    cls.reshape = lambda s, *shape, **kw: reshape(s, shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape, **kw)
    cls.transpose = lambda s, *axes: transpose(s, axes[0] if len(axes) == 1 and not isinstance(axes[0], int) else (axes or None))
    cls.T = property(lambda s: transpose(s))
    cls.sum = sum
    cls.mean = mean
    cls.var = var
    cls.std = std
    cls.max = max
    cls.min = min
    cls.prod = prod
    cls.argmax = argmax
    cls.argmin = argmin
    cls.all = all
    cls.any = any
    cls.squeeze = squeeze
    cls.ravel = ravel
    cls.flatten = ravel
    cls.clip = clip
    cls.dot = dot
    cls.at = property(lambda s: _AtIndexer(s))
    cls.__len__ = lambda s: s.shape[0] if s.shape else _raise_len()
    cls.__iter__ = lambda s: (s[i] for i in range(len(s)))


def _raise_len():
    raise TypeError("len() of unsized object")


_install_methods(Array)
_install_methods(Tracer)


def _array_repr(self):
    return f"Array({_np.array2string(_np.asarray(self), separator=', ')}, dtype={self._dtype_name})"


Array.__repr__ = _array_repr
Array.__str__ = lambda s: str(_np.asarray(s))
Array.__float__ = lambda s: float(_np.asarray(s))
Array.__int__ = lambda s: int(_np.asarray(s))
Array.__bool__ = lambda s: bool(_np.asarray(s))
Array.__index__ = lambda s: int(_np.asarray(s)) if s.dtype.kind in "iu" else _raise_index(s)
Array.item = lambda s: _np.asarray(s).item()
Array.tolist = lambda s: _np.asarray(s).tolist()
Array.block_until_ready = lambda s: s
Array.copy = lambda s: array(s)
Array.__format__ = lambda s, spec: format(_np.asarray(s).item(), spec) if s.ndim == 0 else str(s)


def _raise_index(s):
    raise TypeError(f"only integer arrays can be used as an index, got {s.dtype}")
