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
from ._src import config_contexts as _config_contexts
from ._src.config import flags as _flags
from ._src.errors import ShapeError as _ShapeError, NonConcreteBooleanIndexError, ConcretizationError

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
from ml_dtypes import finfo, iinfo  # noqa: E402  (jnp.finfo / iinfo are ml_dtypes', which know bfloat16)
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
    """Weakly typed: a Python int / float (not bool, not a NumPy scalar such as
    np.float64, which JAX types strongly) or an array marked weak."""
    if isinstance(x, (_bi.bool, _np.generic)):
        return False
    return isinstance(x, (int, float)) or (_is_array(x) and x.weak_type)


def _category(x):
    d = _np.dtype(type(x)) if isinstance(x, (_bi.bool, int, float)) else _dt(x)
    return 0 if d == _np.bool_ else (2 if _dtypes.is_float(d) else 1)


def _result_weak(*args):
    """Whether JAX types the result of an operation on args weakly: its dtype's kind
    (bool < int < float) comes from weak operands only (int32 array + 1.5 is a weak
    float32, bf16 array + 1.5 a strong bf16, 2 + 3 a weak int32)."""
    weak = [_category(a) for a in args if _weak(a)]
    strong = [_category(a) for a in args if not _weak(a)]
    return _bi.bool(weak) and _bi.max(weak) > _bi.max(strong, default=-1)


# ---------------------------------------------------------------------------------
# creation
# ---------------------------------------------------------------------------------
def asarray(a, dtype=None, copy=None):
    if _is_array(a):
        return a if dtype is None else astype(a, dtype)
    if isinstance(a, (list, tuple)) and _bi.any(_is_array(x) for x in _tu.tree_leaves(a)):
        return _stack_nested(a, dtype)
    if dtype is None and isinstance(a, float):
        dtype = float32
    return to_array(a, dtype)


def _stack_nested(a, dtype):
    """A (nested) list / tuple holding arrays or tracers: one array of their promoted
    dtype (jnp.array((0, i, 0)) with a traced uint32 i is uint32, as in JAX)."""
    dt = dtype if dtype is not None else result_type(*_tu.tree_leaves(a))
    return stack([_stack_nested(x, dt) if isinstance(x, (list, tuple)) else asarray(x, dt) for x in a])


def array(a, dtype=None, copy=True, ndmin=0):
    if _is_array(a):
        out = a if dtype is None else astype(a, dtype)
    elif isinstance(a, (list, tuple)) and _bi.any(_is_array(x) for x in _tu.tree_leaves(a)):
        out = _stack_nested(a, dtype)
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
    weak = dtype is None and _weak(fill_value)  # jnp.full((2,), 1.5) is weakly typed
    if dtype is None:
        dtype = fill_value.dtype if _is_array(fill_value) else (_np.asarray(fill_value).dtype)
    d = _dtypes.canonicalize(dtype)
    shape = _shape(shape)
    if _is_array(fill_value):
        out = broadcast_to(astype(fill_value, d), shape)
    else:
        # A broadcast of a 0-d constant, as lax.full: under jit the graph holds one scalar
        # (read as a scalar by fused kernels), not an activation-sized constant.
        out = broadcast_to(to_array(_np.asarray(fill_value, dtype=d)), shape)
    return _weak_if(out, fill_value) if weak else out


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
    # ones_like(3.0) is weakly typed, as lax.full_like keeps the weak type of a
    weak = dtype is None and _weak(a) and not _is_array(fill_value)
    out = _full_like(a, fill_value, dtype, shape)
    return _weak_if(out, a) if weak else out


def _full_like(a, fill_value, dtype=None, shape=None):
    a = a if hasattr(a, "shape") and hasattr(a, "dtype") else asarray(a)
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


def _arg_dtype(a):
    """(canonical dtype, weak) of a result_type argument: a value or a dtype-like."""
    if isinstance(a, _bi.bool):
        return _np.dtype(bool_), False
    if isinstance(a, int) and not isinstance(a, _np.generic):
        return _np.dtype(int32), True
    if isinstance(a, float) and not isinstance(a, _np.generic):
        return _np.dtype(float32), True
    if isinstance(a, (type, str, _np.dtype)):
        return _dtypes.canonicalize(a), False
    return _dtypes.canonicalize(_dt(a)), _weak(a)


def result_type(*args):
    """JAX's promotion: strong dtypes join on the lattice (bf16 + f32 -> f32, u32 + i32
    -> i32); weak operands (Python scalars, weak arrays) only set the kind when it is
    higher than every strong operand's (int32 array + 1.5 -> float32, bool + 1 ->
    int32, bf16 + 1.5 -> bf16)."""
    if not args:
        raise ValueError("at least one array or dtype is required")
    d, weak_d = None, None
    for a in args:
        ad, aw = _arg_dtype(a)
        if aw:
            weak_d = ad if weak_d is None else _dtypes.promote(weak_d, ad)
        else:
            d = ad if d is None else _dtypes.promote(d, ad)
    if weak_d is None:
        return d
    if d is None:
        return weak_d
    kind = lambda t: 0 if t == bool_ else (2 if _dtypes.is_float(t) else 1)
    if kind(weak_d) > kind(d):
        return _np.dtype(float32) if kind(weak_d) == 2 else _np.dtype(int32)
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
def _binary(prim, bool_prim=None):
    def f(x1, x2):
        if _flags["numpy_rank_promotion"] != "allow" or _flags["numpy_dtype_promotion"] != "standard":
            _config_contexts.check_binary(prim, x1, x2)
        a, b = _promote(x1, x2)
        # jnp.add / multiply of bools are logical or / and (NumPy's rule), as in JAX
        out = bind(bool_prim if bool_prim and a.dtype == bool_ else prim, a, b)
        return _weak_if(out, x1, x2)
    f.__name__ = prim
    return f


def _weak_if(out, *args):
    """out, weakly typed when JAX types it so (_result_weak): Python scalars, weak
    arrays, and a weak operand of a higher kind than every strong one."""
    if _result_weak(*args) and isinstance(out, (Array, Tracer)):
        out.weak_type = True
    return out


add = _binary("add", "or")
subtract = _binary("sub")
multiply = _binary("mul", "and")
maximum = _binary("max")
minimum = _binary("min")
def fmod(x1, x2):
    """C's fmod: the sign of x1 (truncated division); an integer x2 of 0 gives 0, as in JAX."""
    a, b = _promote(x1, x2)
    if not _dtypes.is_float(a.dtype):
        b = bind("select", bind("eq", b, zeros_like(b)), ones_like(b), b)
    return _weak_if(bind("rem", a, b), x1, x2)


def remainder(x1, x2):
    """x1 - floor(x1 / x2) * x2: the sign of x2, as Python's % and jnp.remainder (JAX's
    algorithm: lax.rem, then x2 added where the signs differ; an integer x2 of 0 gives 0)."""
    a, b = _promote(x1, x2)
    if not _dtypes.is_float(a.dtype):
        b = bind("select", bind("eq", b, zeros_like(b)), ones_like(b), b)
    trunc = bind("rem", a, b)
    zero = zeros_like(trunc)
    do_plus = bind("and", bind("ne", bind("lt", trunc, zero), bind("lt", b, zeros_like(b))), bind("ne", trunc, zero))
    return _weak_if(bind("select", do_plus, bind("add", trunc, b), trunc), x1, x2)


mod = remainder
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
    """floor(x1 / x2), as Python's // and jnp.floor_divide (JAX's algorithm: integers
    correct the truncated quotient where the signs differ; floats go through divmod, so
    1.0 // 0.1 is 9.0 as in NumPy)."""
    a, b = _promote(x1, x2)
    if _dtypes.is_float(a.dtype):
        return _weak_if(_float_divmod(a, b)[0], x1, x2)
    q = bind("div", a, b)
    if a.dtype.kind == "u" or a.dtype == bool_:
        return _weak_if(q, x1, x2)
    sel = bind("and", bind("ne", bind("sign", a), bind("sign", b)), bind("ne", bind("rem", a, b), zeros_like(a)))
    return _weak_if(bind("select", sel, bind("sub", q, ones_like(q)), q), x1, x2)


def _float_divmod(a, b):
    # CPython's float_divmod, as JAX: x2 == 0 divides x1 itself (5.0 // -0.0 is -inf)
    m = bind("rem", a, b)
    d = bind("div", bind("select", bind("eq", b, zeros_like(b)), a, bind("sub", a, m)), b)
    ind = bind("and", bind("ne", m, zeros_like(m)), bind("ne", bind("sign", b), bind("sign", m)))
    m = bind("select", ind, bind("add", m, b), m)
    d = bind("select", ind, bind("sub", d, ones_like(d)), d)
    return lax.round(d), m


def left_shift(x1, x2):
    a, b = _promote(x1, x2)
    return _weak_if(bind("shift_left", a, b), x1, x2)


def right_shift(x1, x2):
    """Arithmetic for signed integers, logical for unsigned (NumPy's >>)."""
    a, b = _promote(x1, x2)
    prim = "shift_right_logical" if a.dtype.kind == "u" else "shift_right_arithmetic"
    return _weak_if(bind(prim, a, b), x1, x2)


bitwise_left_shift, bitwise_right_shift = left_shift, right_shift


def divmod(x1, x2):
    """(floor_divide(x1, x2), remainder(x1, x2))."""
    return floor_divide(x1, x2), remainder(x1, x2)


def power(x1, x2):
    if isinstance(x2, int) and not isinstance(x2, _bi.bool):
        x = asarray(x1) if not _is_array(x1) else x1
        return lax.integer_pow(x, x2)
    a, b = _promote(x1, x2)
    if not _dtypes.is_float(a.dtype) and a.dtype != bool_:
        return _weak_if(_pow_int_int(a, b), x1, x2)
    return bind("pow", a, b)


def _pow_int_int(x, e):
    """Integer ** integer array by binary exponentiation over the exponent's low 6 bits,
    JAX's algorithm (anything larger overflows for |x| > 1), so the same wrapped results."""
    zero, one = zeros_like(e), ones_like(e)
    acc = bind("select", bind("and", bind("eq", x, zeros_like(x)), bind("ne", e, zero)), zeros_like(x), ones_like(x))
    for _ in range(6):
        acc = bind("select", bind("ne", bind("and", e, one), zero), bind("mul", acc, x), acc)
        x = bind("mul", x, x)
        e = bind("shift_right_logical", e, one)
    return acc


def _unary_float(prim):
    def f(x):
        (a,) = _promote_float(x)
        return _weak_if(bind(prim, a), x)
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
    (a,) = _promote_float(x)
    return _weak_if(bind("rsqrt", a), x)


def negative(x):
    return _weak_if(bind("neg", asarray(x)), x)


def positive(x):
    return _weak_if(asarray(x), x)


def abs(x):
    a = asarray(x)
    if a.dtype == bool_ or a.dtype.kind == "u":
        return _weak_if(a, x)  # already non-negative (jnp.absolute returns them as they are)
    return _weak_if(bind("abs", a), x)


absolute = abs


def sign(x):
    return _weak_if(bind("sign", asarray(x)), x)


def square(x):
    a = asarray(x)
    if a.dtype == bool_:
        a = astype(a, int32)  # JAX promotes bool to int for numeric ops
    return _weak_if(lax.integer_pow(a, 2), x)


def reciprocal(x):
    (a,) = _promote_float(x)
    return _weak_if(bind("div", _const_like(a, 1), a), x)


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


def round(a, decimals=0, out=None):
    """Half to even, as NumPy; integers are returned as they are (decimals >= 0)."""
    if out is not None:
        raise NotImplementedError("The 'out' argument to jnp.round is not supported.")
    x = asarray(a)
    decimals = int(decimals)
    if not _dtypes.is_float(x.dtype):
        if decimals < 0:
            raise NotImplementedError(f"integer np.round not implemented for decimals < 0; got decimals={decimals}")
        return _weak_if(x, a)
    if decimals == 0:
        return _weak_if(bind("round", x, rounding_method=1), a)
    if decimals > _np.log10(float(finfo(x.dtype).max)):
        return x
    factor = _const_like(x, 10 ** decimals)
    return _weak_if(bind("div", bind("round", bind("mul", x, factor), rounding_method=1), factor), a)


around = round


def where(condition, x=None, y=None, *, size=None, fill_value=None):
    if x is None and y is None:
        return nonzero(condition, size=size, fill_value=fill_value)  # jnp.where(c): nonzero's contract
    if x is None or y is None:
        raise ValueError("Either both or neither of the x and y arguments should be provided to jax.numpy.where")
    c = asarray(condition)
    if c.dtype != _dtypes.bool_:
        c = bind("ne", c, to_array(_np.zeros((), c.dtype)))
    a, b = _promote(x, y)
    return _weak_if(bind("select", c, a, b), x, y)


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
    return _weak_if(bind("select", isnan(delta), a + b, amax + log1p(exp(neg_abs))), x1, x2)


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


def _seq(arrays):
    """The list of arrays a sequence or an array's leading axis holds."""
    if _is_array(arrays) or isinstance(arrays, _np.ndarray):
        return [arrays[i] for i in range(arrays.shape[0])]
    return list(arrays)


def concatenate(arrays, axis=0, dtype=None):
    raw = _seq(arrays)
    if not raw:
        raise ValueError("Need at least one array to concatenate.")
    arrays = _promote(*raw)
    if dtype is not None:
        arrays = [astype(a, dtype) for a in arrays]
    if axis is None:
        arrays = [ravel(a) for a in arrays]
        axis = 0
    out = arrays[0] if len(arrays) == 1 else lax.concatenate(arrays, _norm_axis(axis, arrays[0].ndim))
    return _weak_if(out, *raw) if dtype is None else out


def stack(arrays, axis=0, out=None, dtype=None):
    if out is not None:
        raise NotImplementedError("The 'out' argument to jnp.stack is not supported.")
    raw = _seq(arrays)
    if not raw:
        raise ValueError("Need at least one array to stack.")
    arrays = [asarray(a) for a in raw]
    nd = arrays[0].ndim + 1
    ax = _norm_axis(axis, nd)
    out = concatenate([expand_dims(a, ax) for a in arrays], axis=ax, dtype=dtype)
    return _weak_if(out, *raw) if dtype is None else out


def hstack(tup, dtype=None):
    raw = _seq(tup)
    arrays = [atleast_1d(a) for a in raw]
    out = concatenate(arrays, axis=0 if arrays[0].ndim == 1 else 1, dtype=dtype)
    return _weak_if(out, *raw) if dtype is None else out


def vstack(tup, dtype=None):
    raw = _seq(tup)
    out = concatenate([atleast_2d(a) for a in raw], axis=0, dtype=dtype)
    return _weak_if(out, *raw) if dtype is None else out


def atleast_1d(*arys):
    if len(arys) != 1:
        return [atleast_1d(a) for a in arys]
    a = asarray(arys[0])
    return _weak_if(reshape(a, (1,)), arys[0]) if a.ndim == 0 else a


def atleast_2d(*arys):
    if len(arys) != 1:
        return [atleast_2d(a) for a in arys]
    a = asarray(arys[0])
    return _weak_if(reshape(a, (1,) * (2 - a.ndim) + tuple(a.shape)), arys[0]) if a.ndim < 2 else a


def flip(m, axis=None):
    m = asarray(m)
    axes = list(range(m.ndim)) if axis is None else [_norm_axis(a, m.ndim) for a in ([axis] if isinstance(axis, int) else axis)]
    return lax.rev(m, axes)


def _pad_pairs(nvals, nd, name):
    """JAX's _broadcast_to_pairs: ((before, after),) * nd from the shapes NumPy accepts."""
    if _is_array(nvals) and isinstance(nvals, Tracer):
        raise ConcretizationError(f"{name} argument of jnp.pad must be static; got {nvals!r}")
    try:
        v = _np.asarray(nvals)
    except ValueError as e:
        raise TypeError(f"`{name}` entries must be the same shape: {nvals}") from e
    if v.dtype == object:
        raise TypeError(f"`{name}` entries must be the same shape: {nvals}")
    if v.shape == (nd, 2):
        return tuple((r[0], r[1]) for r in v)
    if v.shape == (1, 2):
        return ((v[0, 0], v[0, 1]),) * nd
    if v.shape == (2,):
        return ((v[0], v[1]),) * nd
    if v.shape == (1,):
        return ((v[0], v[0]),) * nd
    if v.shape == ():
        return ((v[()], v[()]),) * nd
    raise ValueError(f"jnp.pad: {name} with nd={nd} has unsupported shape {v.shape}. "
                     f"Valid shapes are ({nd}, 2), (1, 2), (2,), (1,), or ().")


_PAD_KWARGS = {"empty": [], "edge": [], "wrap": [], "constant": ["constant_values"], "linear_ramp": ["end_values"],
               "maximum": ["stat_length"], "mean": ["stat_length"], "median": ["stat_length"],
               "minimum": ["stat_length"], "reflect": ["reflect_type"], "symmetric": ["reflect_type"]}


def pad(array, pad_width, mode="constant", **kwargs):
    """jnp.pad, every NumPy mode but a callable: constant (per-axis values), edge,
    wrap, reflect / symmetric (even or odd), linear_ramp, maximum / minimum / mean /
    median (stat_length), empty (zeros). JAX's algorithms, so gradients agree."""
    array = asarray(array)
    nd = array.ndim
    if callable(mode):
        raise NotImplementedError("jnp.pad with a callable mode is not supported by podlet")
    if mode not in _PAD_KWARGS:
        raise NotImplementedError(f"Unimplemented padding mode '{mode}' for np.pad.")
    extra = set(kwargs) - set(_PAD_KWARGS[mode])
    if extra:
        raise ValueError(f"unsupported keyword arguments for mode '{mode}': {extra}")
    if nd == 0:
        return array
    pw = _pad_pairs(pad_width, nd, "pad_width")
    if _bi.any(not isinstance(x, (int, _np.integer)) for p in pw for x in p):
        raise TypeError(f"`pad_width` must be of integral type; got {pad_width}")
    pw = tuple((int(lo), int(hi)) for lo, hi in pw)
    if _bi.any(x < 0 for p in pw for x in p):
        raise ValueError(f"index can't contain negative values; got pad_width={pad_width}")
    if mode == "constant":
        return _pad_constant(array, pw, kwargs.get("constant_values", 0))
    if mode in ("wrap", "edge"):
        for ax, (lo, hi) in enumerate(pw):
            if lo == 0 and hi == 0:
                continue
            if array.shape[ax] == 0:
                raise ValueError(f"Cannot apply '{mode}' padding to empty axis")
            idx = _np.pad(_np.arange(array.shape[ax], dtype=_np.int32), (lo, hi), mode=mode)
            array = take(array, to_array(idx.astype(_np.int32)), axis=ax)
        return array
    if mode in ("symmetric", "reflect"):
        rt = kwargs.get("reflect_type", "even")
        if rt not in ("even", "odd"):
            raise ValueError(f"reflect_type must be 'even' or 'odd'; got {rt!r}")
        return _pad_reflect(array, pw, mode, rt)
    if mode == "linear_ramp":
        ends = _pad_pairs(kwargs.get("end_values", 0), nd, "end_values")
        for ax in range(nd):
            lo_edge = squeeze(lax.slice_in_dim(array, 0, 1, 1, ax), ax)
            hi_edge = squeeze(lax.slice_in_dim(array, array.shape[ax] - 1, array.shape[ax], 1, ax), ax)
            before = linspace(ends[ax][0], lo_edge, pw[ax][0], endpoint=False, dtype=array.dtype, axis=ax)
            after = flip(linspace(ends[ax][1], hi_edge, pw[ax][1], endpoint=False, dtype=array.dtype, axis=ax), ax)
            array = lax.concatenate([before, array, after], ax)
        return array
    if mode == "empty":
        for ax, (lo, hi) in enumerate(pw):
            shp = list(array.shape)
            parts = []
            for n in (lo, None, hi):
                if n is None:
                    parts.append(array)
                else:
                    shp[ax] = n
                    parts.append(zeros_like(array, shape=tuple(shp)))
            array = lax.concatenate(parts, ax)
        return array
    stat = {"maximum": max, "minimum": min, "mean": mean, "median": median}[mode]
    sl = kwargs.get("stat_length")
    sl = None if sl is None else _pad_pairs(sl, nd, "stat_length")
    for ax in range(nd):
        n = array.shape[ax]
        if sl is None:
            sb = sa = stat(array, axis=ax, keepdims=True)
        else:
            lb, la = int(sl[ax][0]), int(sl[ax][1])
            if lb == 0 or la == 0:
                raise ValueError("stat_length of 0 yields no value for padding")
            lb, la = _bi.min(lb, n), _bi.min(la, n)
            sb = stat(lax.slice_in_dim(array, 0, lb, 1, ax), axis=ax, keepdims=True)
            sa = stat(lax.slice_in_dim(array, n - la, n, 1, ax), axis=ax, keepdims=True)
        if array.dtype.kind in "iu":
            sb, sa = round(sb), round(sa)
        sb, sa = astype(sb, array.dtype), astype(sa, array.dtype)
        array = lax.concatenate([repeat(sb, pw[ax][0], axis=ax), array, repeat(sa, pw[ax][1], axis=ax)], ax)
    return array


def _pad_constant(array, pw, constant_values):
    nd = array.ndim
    cv = astype(constant_values, array.dtype) if _is_array(constant_values) else \
        to_array(_np.asarray(constant_values, dtype=array.dtype))
    if cv.ndim == 0:
        return lax.pad(array, cv, [(lo, hi, 0) for lo, hi in pw])
    if cv.ndim == 1:
        if cv.shape[-1] == 1:
            return lax.pad(array, reshape(cv, ()), [(lo, hi, 0) for lo, hi in pw])
        if cv.shape[-1] != 2:
            raise ValueError(f"jnp.pad: constant_values has unsupported shape {tuple(cv.shape)}. If the shape is 1D "
                             "or 2D, the last dimension must be of size 1 or 2.")
    cv = broadcast_to(cv, (nd, 2))
    for i in range(nd):
        for side, n in enumerate(pw[i]):
            if n:
                widths = [(0, 0, 0)] * nd
                widths[i] = (n, 0, 0) if side == 0 else (0, n, 0)
                array = lax.pad(array, cv[i, side], widths)
    return array


def _pad_reflect(array, pw, mode, reflect_type):
    """JAX's _pad_symmetric_or_reflect: repeated reflections of slices (odd: 2 * edge - x)."""
    for i in range(array.ndim):
        n = array.shape[i]
        if n == 0:
            if pw[i][0] or pw[i][1]:
                raise ValueError(f"Cannot apply '{mode}' padding to empty axis")
            continue
        for before in (True, False):
            padding = pw[i][0] if before else pw[i][1]
            size = array.shape[i]
            edge = lax.slice_in_dim(array, 0, 1, 1, i) if before else lax.slice_in_dim(array, size - 1, size, 1, i)
            offset = 1 if (mode == "reflect" and n > 1) else 0
            while padding > 0:
                cur = _bi.min(padding, n - offset)
                padding -= cur
                size = array.shape[i]
                if before:
                    start, stop = offset, offset + cur
                else:
                    start = size - (cur + offset)
                    stop = size if (mode == "symmetric" or n == 1) else size - 1
                x = flip(lax.slice_in_dim(array, start, stop, 1, i), i)
                if reflect_type == "odd":
                    x = subtract(multiply(_const_like(edge, 2), edge), x)
                    if n > 1:
                        edge = lax.slice_in_dim(x, 0, 1, 1, i) if before else \
                            lax.slice_in_dim(x, x.shape[i] - 1, x.shape[i], 1, i)
                array = lax.concatenate([x, array] if before else [array, x], i)
    return array


def tile(A, reps):
    A0, A = A, asarray(A)
    reps = (reps,) if isinstance(reps, int) else tuple(reps)
    nd = _bi.max(A.ndim, len(reps))
    A = reshape(A, (1,) * (nd - A.ndim) + tuple(A.shape))
    reps = (1,) * (nd - len(reps)) + reps
    # broadcast to (r0, s0, r1, s1, ...) then merge.
    shape = [v for r, s in zip(reps, A.shape) for v in (r, s)]
    b = lax.broadcast_in_dim(A, shape, list(range(1, 2 * nd, 2)))
    return _weak_if(reshape(b, [r * s for r, s in zip(reps, A.shape)]), A0)


def repeat(a, repeats, axis=None, *, total_repeat_length=None):
    """Each element repeated `repeats` times (an int, or one count per element along
    axis: static, or traced with a static total_repeat_length), as jnp.repeat."""
    a0, a = a, asarray(a)
    if axis is None:
        a, axis = ravel(a), 0
    axis = _norm_axis(axis, a.ndim) if a.ndim else 0
    if total_repeat_length is None:
        if isinstance(repeats, Tracer):
            raise ConcretizationError(
                "jnp.repeat under jit needs static repeats or a static total_repeat_length; got traced "
                f"repeats {repeats!r}")
        reps = _np.asarray(repeats)
        if reps.ndim == 0 and a.ndim != 0:
            shape = list(a.shape)
            b = expand_dims(a, axis + 1)
            b = broadcast_to(b, shape[:axis + 1] + [int(reps)] + shape[axis + 1:])
            shape[axis] *= int(reps)
            return _weak_if(reshape(b, shape), a0)
        reps = _np.ravel(reps)
        if a.ndim != 0:
            reps = _np.broadcast_to(reps, [a.shape[axis]])
        total_repeat_length = int(_np.sum(reps))
        repeats = to_array(reps.astype(_np.int32))
    else:
        repeats = ravel(asarray(repeats))
        if a.ndim != 0:
            repeats = broadcast_to(repeats, [a.shape[axis]])
    if a.ndim == 0:
        if tuple(repeats.shape) == (1,):
            return _weak_if(full([total_repeat_length], a), a0)
        raise ValueError("`repeat` with a scalar parameter `a` is only implemented for scalar values of the "
                         "parameter `repeats`.")
    if total_repeat_length == 0:
        shape = list(a.shape)
        shape[axis] = 0
        return zeros_like(a, shape=shape)
    if a.shape[axis] == 0:
        return a
    # JAX's algorithm: mark where each element's block starts, cumsum into gather indices
    repeats = astype(repeats, int32)
    starts = cumsum(concatenate([zeros((1,), int32), repeats[:-1]]))
    marks = zeros([total_repeat_length], int32)
    if isinstance(repeats, Tracer):
        marks = _zeros_like_trace(repeats, (total_repeat_length,), int32)
    marks = marks.at[starts].add(1)
    return _weak_if(take(a, subtract(cumsum(marks), 1), axis=axis), a0)


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


def argsort(a, axis=-1, kind=None, order=None, stable=True, descending=False):
    a = asarray(a)
    return bind("argsort", a, axis=_norm_axis(axis, a.ndim), descending=int(_bi.bool(descending)))


def sort(a, axis=-1, kind=None, order=None, stable=True, descending=False):
    a = asarray(a)
    idx = argsort(a, axis, descending=descending)
    return bind("take_along_axis", a, idx, axis=_norm_axis(axis, a.ndim))  # in range: no fill needed


# ---------------------------------------------------------------------------------
# indexing
#
# x[key], x.at[key].get/set/add/... and take share one front end, _IndexPlan: it
# expands the Ellipsis, turns None and boolean scalars into unit dimensions of the
# operand and concrete boolean masks into integer arrays (np.nonzero), and classifies
# every dimension of that expanded operand as a static slice, a static int or an
# integer-array index (NumPy's basic and advanced indexing). Then:
#   gather  (_gather): static slices and ints are lax.rev / lax.slice / reshape; all the
#           integer arrays together are ONE `take` over their dimensions flattened into
#           one (its VJP is scatter_add, so gradients flow like jax's gather).
#   scatter (_scatter): the flat positions of the indexed elements are the same gather
#           applied to an iota; .add is one scatter_add, the other updates sort the
#           positions and reduce repeated ones (last wins for .set, as jax on CPU).
# Out-of-range indices clamp on gathers and are dropped on scatters (jax's defaults);
# negative indices wrap first. Shapes follow NumPy: advanced indices separated by a
# slice, None or Ellipsis put their broadcast shape first, adjacent ones keep its place.
# ---------------------------------------------------------------------------------
def _static_int(v):
    return isinstance(v, (int, _np.integer)) and not isinstance(v, (_bi.bool, _np.bool_))


def _slice_bound(v, k, pos):
    if v is None or _static_int(v):
        return v if v is None else int(v)
    if isinstance(v, (Array, _np.ndarray)) and v.ndim == 0 and _np.dtype(v.dtype).kind in "iu":
        return int(v)
    raise IndexError(f"Slice entries must be static integers. Got {k!r} at position {pos}")


def _classify(k, pos):
    """One entry of an index tuple as (kind, value, pos)."""
    if k is None:
        return "new", None, pos
    if k is Ellipsis:
        return "ellipsis", None, pos
    if isinstance(k, slice):
        return "slice", slice(*(_slice_bound(v, k, pos) for v in (k.start, k.stop, k.step))), pos
    if isinstance(k, (_bi.bool, _np.bool_)):
        return "bool", _bi.bool(k), pos
    if _static_int(k):
        return "int", int(k), pos
    if isinstance(k, str):
        raise TypeError(f"podlet does not support string indexing; got idx={k!r}")
    if isinstance(k, (list, tuple)):
        k = asarray(k) if _bi.any(_is_array(v) for v in _tu.tree_leaves(k)) else _np.asarray(k)
        if k.size == 0 and not _is_array(k):
            k = k.astype(_np.int32)
    if isinstance(k, Tracer):
        if k.dtype == _dtypes.bool_:
            raise NonConcreteBooleanIndexError(
                f"Array boolean indices must be concrete; got bool{list(k.shape)} (a boolean mask "
                "gives a shape that depends on its values, which cannot be traced; use "
                "podlet.numpy.where(mask, x, 0) or a static mask)")
        if k.dtype.kind not in "iu":
            raise TypeError(f"Indexer must have integer or boolean type, got indexer with type {k.dtype}")
        return "array", k, pos
    if isinstance(k, (Array, _np.ndarray, _np.generic, float, complex)):
        k = _np.asarray(k)
        if k.dtype == _np.bool_:
            return ("bool", _bi.bool(k), pos) if k.ndim == 0 else ("mask", k, pos)
        if k.dtype.kind not in "iu":
            raise TypeError(f"Indexer must have integer or boolean type, got indexer with type {k.dtype}")
        return "array", k, pos
    raise TypeError(f"unsupported index {k!r} at position {pos}: podlet indexes with ints, slices, None, "
                    "Ellipsis, booleans and integer or boolean arrays")


class _IndexPlan:
    """An index normalised against an operand shape.

    expanded: the operand's shape with a unit dim for each None / boolean scalar;
    entries:  one per expanded dim: ("slice", slice) | ("int", i) with 0 <= i < n |
              ("array", integer np.ndarray or Tracer). An int out of range is clamped
              (clamp_ints: x[i], where jax slices statically) or becomes an array, to be
              filled or dropped like every other index (.get(mode='fill'), scatters);
    adjacent: whether the ints and arrays sit next to each other (their broadcast shape
              then replaces them in place; otherwise it goes first).
    """

    def __init__(self, shape, key, wrap=True, clamp_ints=False):
        self.wrap, self.clamp_ints = wrap, clamp_ints
        if not isinstance(key, tuple):
            key = (key,)
        items = [_classify(k, i) for i, k in enumerate(key)]
        if [kind for kind, _, _ in items].count("ellipsis") > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        used = _bi.sum(v.ndim if kind == "mask" else 1 for kind, v, _ in items if kind in ("slice", "int", "array", "mask"))
        if used > len(shape):
            raise IndexError(f"Too many indices: array is {len(shape)}-dimensional, but {used} were indexed")
        rest = [("slice", slice(None), None)] * (len(shape) - used)
        kinds = [kind for kind, _, _ in items]
        if "ellipsis" in kinds:
            i = kinds.index("ellipsis")
            items = items[:i] + rest + items[i + 1:]
        else:
            items = items + rest
        self.shape = tuple(shape)
        self.expanded, self.entries = [], []
        d = 0
        for kind, v, pos in items:
            if kind in ("new", "bool"):
                self.expanded.append(1)
                self.entries.append(("slice", slice(None)) if kind == "new" else ("array", _np.zeros(int(v), _np.int32)))
                continue
            if kind == "mask":
                dims = tuple(shape[d:d + v.ndim])
                if v.shape != dims:
                    raise IndexError(f"boolean index did not match shape of indexed array in index {pos}: "
                                     f"got {v.shape}, expected {list(dims)}")
                for nz in _np.nonzero(v):
                    self._add(shape[d], "array", nz, d)
                    d += 1
                continue
            self._add(shape[d], kind, v, d)
            d += 1
        adv = [d for d, (kind, _) in enumerate(self.entries) if kind != "slice"]
        self.has_arrays = builtins_any(kind == "array" for kind, _ in self.entries)
        self.adjacent = not adv or adv == list(range(adv[0], adv[0] + len(adv)))
        self.traced = builtins_any(isinstance(v, Tracer) for _, v in self.entries)

    def _add(self, n, kind, v, d):
        if kind == "int":
            i = v + n if v < 0 and self.wrap else v
            if n == 0:
                raise IndexError(f"index {v} is out of bounds for axis {d} with size 0")
            if self.clamp_ints:
                i = _bi.min(_bi.max(i, 0), n - 1)
            kind, v = ("int", i) if 0 <= i < n else ("array", _np.asarray(v))
        elif kind == "array" and n == 0 and (isinstance(v, Tracer) or v.size):
            raise IndexError(f"index is out of bounds for axis {d} with size 0")
        self.expanded.append(n)
        self.entries.append((kind, v))


def _gather_mode(mode):
    """'promise' (jax's default for x[idx], PROMISE_IN_BOUNDS): out-of-range indices
    clamp, and their gradient is dropped (XLA's scatter-add drops them); 'clip': clamp
    both ways; 'fill': out-of-range reads give fill_value."""
    m = str(getattr(mode, "name", mode)).lower()
    if mode is None or m == "promise_in_bounds" or m == "promise":
        return "promise"
    if m == "clip":
        return "clip"
    if m in ("fill", "drop", "fill_or_drop"):
        return "fill"
    raise ValueError(f"unknown indexing mode {mode!r}: expected 'clip', 'fill', 'drop' or 'promise_in_bounds'")


def _default_fill(dtype):
    d = _np.dtype(dtype)
    if _dtypes.is_float(d):
        return _np.nan
    if d == _np.bool_:
        return True
    return _np.iinfo(d).min if d.kind == "i" else _np.iinfo(d).max


def _index_arrays(idx, ns, wrap, want_valid):
    """Wraps negative entries (wrap), records which are in range, clamps into [0, n)."""
    out, valid = [], None
    for i, n in zip(idx, ns):
        if isinstance(i, Tracer):
            i = i if i.dtype == _dtypes.int32 else astype(i, int32)
            if wrap and i.dtype.kind == "i":
                i = where(i < 0, i + n, i)
            ok = logical_and(i >= 0, i < n) if want_valid else None
            i = clip(i, 0, n - 1)
        else:
            i = _np.asarray(i, _np.int64)
            if wrap:
                i = _np.where(i < 0, i + n, i)
            ok = ((i >= 0) & (i < n)) if want_valid else None
            i = _np.clip(i, 0, n - 1).astype(_np.int32)
        out.append(i)
        if ok is not None:
            valid = ok if valid is None else logical_and(valid, ok) if _is_array(valid) or _is_array(ok) \
                else valid & ok
    return out, valid


def _gather(a, plan, mode=None, fill_value=None, wrap=True):
    """a[key] for a normalised key (see _IndexPlan)."""
    mode = _gather_mode(mode)
    a = reshape(a, plan.expanded)
    starts, limits, strides, rev = [], [], [], []
    for d, (kind, v) in enumerate(plan.entries):
        n = plan.expanded[d]
        if kind == "slice":
            s, e, st = v.indices(n)
            cnt = len(range(s, e, st))
            if st < 0:
                rev.append(d)
                s, st = n - 1 - s, -st
            starts.append(s if cnt else 0)
            limits.append(s + (cnt - 1) * st + 1 if cnt else 0)
            strides.append(st)
        elif kind == "int":
            starts.append(v), limits.append(v + 1), strides.append(1)
        else:
            starts.append(0), limits.append(n), strides.append(1)
    if rev:
        a = lax.rev(a, rev)
    if (starts, limits) != ([0] * a.ndim, list(a.shape)) or builtins_any(s != 1 for s in strides):
        a = lax.slice(a, starts, limits, strides)
    keep = [d for d, (kind, _) in enumerate(plan.entries) if kind != "int"]
    a = reshape(a, [a.shape[d] for d in keep])
    adv = [i for i, d in enumerate(keep) if plan.entries[d][0] == "array"]
    if not adv:
        return a
    ns = [a.shape[i] for i in adv]
    try:
        bshape = tuple(_np.broadcast_shapes(*[tuple(plan.entries[keep[i]][1].shape) for i in adv]))
    except ValueError:
        shapes = [tuple(plan.entries[keep[i]][1].shape) for i in adv]
        raise ValueError(f"Incompatible shapes for broadcasting: shapes={shapes}") from None
    idx, valid = _index_arrays([plan.entries[keep[i]][1] for i in adv], ns, wrap, mode != "clip")
    if bshape == () and mode != "fill":
        # Scalar indices only: a slice of size 1 at the (clamped) indices, dynamic when one
        # is traced -- jax's dynamic_slice, whose gradient lands on the clamped position.
        starts, sizes = [0] * a.ndim, list(a.shape)
        for i, d in zip(idx, adv):
            starts[d], sizes[d] = i, 1
        if builtins_any(_is_array(s) for s in starts):
            out = lax.dynamic_slice(a, starts, sizes)
        else:
            out = lax.slice(a, [int(s) for s in starts], [int(s) + z for s, z in zip(starts, sizes)])
        return reshape(out, [n for d, n in enumerate(a.shape) if d not in adv])
    if builtins_any(isinstance(i, Tracer) for i in idx):
        idx = [i if _is_array(i) else to_array(i) for i in idx]
    # One flat index over the advanced dims (row-major), computed in NumPy when it can be.
    lin = idx[0]
    for i, n in zip(idx[1:], ns[1:]):
        lin = lin * n + i
    lin = broadcast_to(lin, bshape) if _is_array(lin) else to_array(_np.broadcast_to(lin, bshape).astype(_np.int32))
    others = [i for i in range(a.ndim) if i not in adv]
    if plan.adjacent:  # the advanced dims are contiguous: merge them in place
        q = adv[0]
        merged = a.shape[:q] + (int(_np.prod(ns, dtype=_np.int64)),) + a.shape[q + len(adv):]
    else:              # NumPy puts the broadcast shape first
        q = 0
        a = transpose(a, adv + others)
        merged = (int(_np.prod(ns, dtype=_np.int64)),) + tuple(a.shape[len(adv):])
    out_shape = merged[:q] + bshape + merged[q + 1:]
    if _bi.min(out_shape, default=1) == 0:
        return _zeros_like_trace(a, out_shape)
    out = bind("take", reshape(a, merged), lin, axis=q)
    if valid is not None and not (not _is_array(valid) and valid.all()) and (mode == "fill" or _is_traced(out)):
        vshape = (1,) * q + bshape + (1,) * (out.ndim - q - len(bshape))
        valid = reshape(broadcast_to(asarray(valid), bshape), vshape)
        if mode == "fill":
            fill = _default_fill(out.dtype) if fill_value is None else fill_value
            out = bind("select", valid, out, to_array(_np.asarray(fill, dtype=out.dtype)))
        else:  # the clamped value, without a gradient
            out = bind("select", valid, out, bind("stop_gradient", out))
    return out


def _is_traced(x):
    return isinstance(x, Tracer)


def _zeros_like_trace(ref, shape, dtype=None):
    return full_like(ref, 0, dtype or ref.dtype, shape)


def _getitem(a, key):
    return _gather(a, _IndexPlan(a.shape, key, clamp_ints=True))


def _wrap_mode_index(indices, n):
    """mode='wrap': indices taken modulo n (Python's sign convention)."""
    if isinstance(indices, Tracer):
        return remainder(indices, n)
    return _np.mod(_np.asarray(indices, _np.int64), n)


def take(a, indices, axis=None, mode=None, unique_indices=False, indices_are_sorted=False, fill_value=None):
    """jnp.take: default mode 'fill' (out-of-range reads give NaN / the dtype's fill, as
    jax); negative indices wrap; mode='clip' clamps, mode='wrap' takes them modulo n."""
    a = asarray(a)
    if axis is None:
        a, axis = ravel(a), 0
    axis = _norm_axis(axis, a.ndim)
    if not _is_array(indices):
        indices = _np.asarray(indices)
    if _np.dtype(indices.dtype).kind not in "iu":
        raise TypeError(f"take: indices must be integers, got {indices.dtype}")
    wrap = True
    if mode == "wrap":
        indices, mode = _wrap_mode_index(indices, a.shape[axis]), "clip"
    elif mode is None:
        mode = "fill"
    elif _gather_mode(mode) == "clip":
        wrap = False  # jnp.take(mode='clip') clamps -1 to 0
    plan = _IndexPlan(a.shape, (slice(None),) * axis + (indices,), wrap, _gather_mode(mode) != "fill")
    return _gather(a, plan, mode, fill_value, wrap)


def take_along_axis(arr, indices, axis=-1, mode=None, fill_value=None):
    """jnp.take_along_axis: negative indices wrap; out-of-range ones give the fill value
    (mode='fill', jax's default) or clamp (mode='clip')."""
    arr = asarray(arr)
    if axis is None:
        arr, axis = ravel(arr), 0
    axis = _norm_axis(axis, arr.ndim)
    n = arr.shape[axis]
    mode = "fill" if mode is None else _gather_mode(mode)
    idx, valid = _index_arrays([indices if _is_array(indices) else _np.asarray(indices)], [n], True, mode == "fill")
    idx = idx[0] if _is_array(idx[0]) else to_array(idx[0])
    out = bind("take_along_axis", arr, idx, axis=axis)
    if valid is not None and not (not _is_array(valid) and valid.all()):
        fill = _default_fill(out.dtype) if fill_value is None else fill_value
        out = bind("select", broadcast_to(asarray(valid), out.shape), out, to_array(_np.asarray(fill, dtype=out.dtype)))
    return out


def _scatter_mode(mode):
    m = str(getattr(mode, "name", mode)).lower()
    if mode is None or m in ("fill", "drop", "fill_or_drop"):
        return "fill"
    if m in ("clip", "promise_in_bounds"):
        return "clip"
    raise ValueError(f"unknown indexing mode {mode!r}: expected 'drop', 'clip' or 'promise_in_bounds'")


def _positions(x, key, mode, wrap):
    """The flat positions in x.ravel() of the elements of x[key]; x.size marks the
    out-of-range ones (dropped). Concrete (NumPy-computed) unless an index is traced."""
    plan = _IndexPlan(x.shape, key, wrap)
    if plan.traced:
        iota = bind_like(x, "iota", dtype="int32", shape=[x.size], dimension=0) if isinstance(x, Tracer) \
            else lax.iota(int32, x.size)
    else:
        iota = to_array(_np.arange(x.size, dtype=_np.int32))
    return _gather(reshape(iota, x.shape), plan, _scatter_mode(mode), fill_value=x.size, wrap=wrap)


def _updates(values, dtype, shape):
    v = astype(values, dtype) if _is_array(values) else to_array(_np.asarray(values, dtype=dtype))
    return broadcast_to(v, shape)


def _segment_reduce(pos, vals, n, reducer):
    """Groups the updates by target position. Returns (src, touched, vals): vals[src[p]]
    is the reduction (reducer; None keeps the last) of the updates aimed at position p,
    where touched[p]. pos holds flat positions in [0, n]; n is the drop slot."""
    m = pos.shape[0]
    if isinstance(pos, Tracer):
        perm = argsort(pos)  # stable: repeated positions keep their order
        keys = bind("take", pos, perm, axis=0)
    else:
        p = _np.asarray(pos)
        perm = _np.argsort(p, kind="stable").astype(_np.int32)
        keys = p[perm]
    if reducer is not None:
        vals = bind("take", vals, perm if _is_array(perm) else to_array(perm), axis=0)
        s = 1
        while s < m:  # Hillis-Steele inclusive scan within runs of equal keys
            same = equal(keys[s:], keys[:-s]) if _is_array(keys) else keys[s:] == keys[:-s]
            if not _is_array(same) and not same.any():
                break
            cur = vals[s:]
            vals = concatenate([vals[:s], where(same, reducer(cur, vals[:-s]), cur)])
            s *= 2
    if _is_array(keys):
        last = concatenate([not_equal(keys[1:], keys[:-1]), full((1,), True, bool)])
        slot = where(last, lax.iota(int32, m) + 1, 0)
        src = bind("scatter_add", zeros((n + 1,), int32), keys, slot, axis=0)[:n]
        touched = src > 0
        src = maximum(src - 1, 0)
        if reducer is None:
            src = bind("take", perm, src, axis=0)
    else:
        last = _np.append(keys[1:] != keys[:-1], True)
        src = _np.zeros(n + 1, _np.int64)
        src[keys[last]] = _np.nonzero(last)[0] + 1
        src = src[:n]
        touched = to_array(src > 0)
        src = _np.maximum(src - 1, 0)
        src = to_array((perm[src] if reducer is None else src).astype(_np.int32))
    return src, touched, vals


def _scatter(x, key, values, op, mode=None, wrap=True, func=None):
    """x.at[key].<op>(values); op in set, add, mul, min, max, apply."""
    x = asarray(x)
    pos = _positions(x, key, mode, wrap)
    n, m = x.size, pos.size
    if m == 0:
        return x
    posf = ravel(pos)
    if op == "apply":
        if isinstance(posf, Tracer):
            if m > 64:
                raise NotImplementedError(
                    f"x.at[idx].apply with {m} traced indices: repeated indices apply func once per "
                    "repetition, which podlet unrolls only up to 64 traced indices; use "
                    "x.at[idx].set(func(x[idx])) when the indices are unique")
            count, rounds = bind("scatter_add", zeros((n + 1,), int32), posf, ones((m,), int32), axis=0)[:n], m
        else:
            c = _np.bincount(_np.asarray(posf), minlength=n + 1)[:n]
            count, rounds = to_array(c.astype(_np.int32)), int(c.max())
        count = reshape(count, x.shape)
        for r in range(rounds):
            x = where(count > r, func(x), x)
        return x
    if x.dtype == _dtypes.bool_ and op not in ("set",):
        raise TypeError(f"x.at[idx].{op} does not accept dtype bool")
    u = ravel(_updates(values, x.dtype, pos.shape))
    if op == "add":
        ext = concatenate([ravel(x), zeros((1,), x.dtype)])
        return reshape(bind("scatter_add", ext, posf, u, axis=0)[:n], x.shape)
    reducer = {"set": None, "mul": multiply, "min": minimum, "max": maximum}[op]
    src, touched, vals = _segment_reduce(posf, u, n, reducer)
    picked = reshape(bind("take", vals, src, axis=0), x.shape)
    new = picked if reducer is None else reducer(x, picked)
    return where(reshape(touched, x.shape), new, x)


builtins_any = _bi.any
builtins_sum = _bi.sum


# ---------------------------------------------------------------------------------
# linear algebra
# ---------------------------------------------------------------------------------
def matmul(a, b, *, precision=None, preferred_element_type=None):
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
    out = lax.dot_general(a, b, (([nb + 1], [nb]), (list(range(nb)), list(range(nb)))), precision=precision,
                          preferred_element_type=preferred_element_type)
    if va:
        out = squeeze(out, -2)
    if vb:
        out = squeeze(out, -1)
    return out


def dot(a, b, *, precision=None, preferred_element_type=None):
    a, b = asarray(a), asarray(b)
    if a.ndim == 0 or b.ndim == 0:
        return multiply(a, b)
    if b.ndim <= 2:
        return matmul(a, b, precision=precision, preferred_element_type=preferred_element_type)
    return tensordot(a, b, ([a.ndim - 1], [b.ndim - 2]), precision=precision,
                     preferred_element_type=preferred_element_type)


def vdot(a, b, *, precision=None, preferred_element_type=None):
    from ._src.precision import algorithm
    if precision is None and preferred_element_type is None and not algorithm(None):  # (a bf16 default: a dot)
        return sum(ravel(a) * ravel(b))
    return dot(ravel(a), ravel(b), precision=precision, preferred_element_type=preferred_element_type)


def inner(a, b, *, precision=None, preferred_element_type=None):
    x, y = _promote(a, b)
    if x.ndim == 0 or y.ndim == 0:
        return _weak_if(multiply(x, y), a, b)
    return lax.dot_general(x, y, (([x.ndim - 1], [y.ndim - 1]), ([], [])), precision=precision,
                           preferred_element_type=preferred_element_type)


def outer(a, b):
    return multiply(reshape(a, (-1, 1)), reshape(b, (1, -1)))


def tensordot(a, b, axes=2, *, precision=None, preferred_element_type=None):
    a, b = _promote(a, b)
    if isinstance(axes, int):
        la, lb = list(range(a.ndim - axes, a.ndim)), list(range(axes))
    else:
        la, lb = axes
        la = [la] if isinstance(la, int) else list(la)
        lb = [lb] if isinstance(lb, int) else list(lb)
    return lax.dot_general(a, b, (([x % a.ndim for x in la], [x % b.ndim for x in lb]), ([], [])),
                           precision=precision, preferred_element_type=preferred_element_type)


def einsum(subscripts, *operands, optimize=None, precision=None, preferred_element_type=None):
    """einsum: contractions, batch dims, transposes, sums. Three or more operands are
    contracted pairwise in the order of einsum_path(..., optimize) (opt_einsum's, as jax;
    optimize=None is 'auto'), each pair as a two-operand einsum."""
    ops = _promote(*operands)
    subscripts = subscripts.replace(" ", "")
    if len(ops) > 2:
        _, info = einsum_path(subscripts, *ops, optimize="auto" if optimize is None else optimize)
        ops = list(ops)
        for contract_inds, _, step, _, _ in info.contraction_list:
            pair = [ops.pop(i) for i in contract_inds]
            ops.append(einsum(step, *pair, precision=precision, preferred_element_type=preferred_element_type))
        return ops[0]
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
    # the other operands' specs by position: 'i,i->' has two equal (interned) spec strings
    ops = [_einsum_reduce_single(s, o, out, ins[:k] + ins[k + 1:]) for k, (s, o) in enumerate(zip(ins, ops))]
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
    res = lax.dot_general(a, b, dn, precision=precision, preferred_element_type=preferred_element_type)
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
    __slots__ = ("arr",)

    def __init__(self, arr):
        self.arr = arr

    def __getitem__(self, idx):
        return _AtRef(self.arr, idx)


class _AtRef:
    """x.at[idx]: jax.numpy's functional indexed updates, for every index x[idx] accepts.

    Out-of-range indices are dropped (mode='drop', jax's default; mode='clip' clamps);
    repeated indices accumulate for add / multiply / min / max, and the last update
    wins for set (what jax does on CPU). divide and power are x / (1.at[idx].multiply(v))
    and x ** (...) as in jax; apply(func) applies an elementwise func once per
    occurrence of an index."""

    __slots__ = ("arr", "idx")

    def __init__(self, arr, idx):
        self.arr, self.idx = arr, idx

    def get(self, *, indices_are_sorted=False, unique_indices=False, mode=None, fill_value=None,
            wrap_negative_indices=True):
        plan = _IndexPlan(self.arr.shape, self.idx, wrap_negative_indices, _gather_mode(mode) != "fill")
        return _gather(self.arr, plan, mode, fill_value, wrap_negative_indices)

    def _update(self, op, values, mode, wrap, func=None):
        return _scatter(self.arr, self.idx, values, op, mode, wrap, func)

    def set(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None, wrap_negative_indices=True):
        return self._update("set", values, mode, wrap_negative_indices)

    def add(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None, wrap_negative_indices=True):
        return self._update("add", values, mode, wrap_negative_indices)

    def subtract(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None,
                 wrap_negative_indices=True):
        return self._update("add", negative(asarray(values)), mode, wrap_negative_indices)

    def multiply(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None,
                 wrap_negative_indices=True):
        return self._update("mul", values, mode, wrap_negative_indices)

    mul = multiply

    def divide(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None,
               wrap_negative_indices=True):
        d = _scatter(ones_like(self.arr), self.idx, values, "mul", mode, wrap_negative_indices)
        return true_divide(self.arr, d)

    def power(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None,
              wrap_negative_indices=True):
        e = _scatter(ones_like(self.arr), self.idx, values, "mul", mode, wrap_negative_indices)
        return power(self.arr, e)

    def min(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None, wrap_negative_indices=True):
        return self._update("min", values, mode, wrap_negative_indices)

    def max(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None, wrap_negative_indices=True):
        return self._update("max", values, mode, wrap_negative_indices)

    def apply(self, func, *, indices_are_sorted=False, unique_indices=False, mode=None, wrap_negative_indices=True):
        return self._update("apply", None, mode, wrap_negative_indices, func)


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
    cls.__rfloordiv__ = lambda s, o: floor_divide(o, s)
    cls.__mod__ = lambda s, o: remainder(s, o)
    cls.__rmod__ = lambda s, o: remainder(o, s)
    cls.__divmod__ = lambda s, o: divmod(s, o)
    cls.__rdivmod__ = lambda s, o: divmod(o, s)
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
    cls.__rand__ = lambda s, o: bitwise_and(o, s)
    cls.__ror__ = lambda s, o: bitwise_or(o, s)
    cls.__rxor__ = lambda s, o: bitwise_xor(o, s)
    cls.__lshift__ = lambda s, o: left_shift(s, o)
    cls.__rlshift__ = lambda s, o: left_shift(o, s)
    cls.__rshift__ = lambda s, o: right_shift(s, o)
    cls.__rrshift__ = lambda s, o: right_shift(o, s)
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
Array.__bool__ = lambda s: _bi.bool(_np.asarray(s))
Array.__index__ = lambda s: int(_np.asarray(s)) if s.dtype.kind in "iu" else _raise_index(s)
Array.item = lambda s: _np.asarray(s).item()
Array.tolist = lambda s: _np.asarray(s).tolist()
Array.block_until_ready = lambda s: s
Array.copy = lambda s: array(s)
Array.__format__ = lambda s, spec: format(_np.asarray(s).item(), spec) if s.ndim == 0 else str(s)


def _raise_index(s):
    raise TypeError(f"only integer arrays can be used as an index, got {s.dtype}")


# ---------------------------------------------------------------------------------
# jax.numpy API additions: triangles, roll, meshgrid, diagonals, kron, closeness,
# differences, and a few elementwise helpers. All compositions of the primitives
# above (select / slice / concatenate / gather / reduce_sum / mul ...), so they
# trace under jit and differentiate through the primitives' rules.
# ---------------------------------------------------------------------------------
def _tri_mask(N, M, k):
    return to_array(_np.tri(int(N), int(M), int(k), dtype=_np.bool_))


def tri(N, M=None, k=0, dtype=None):
    """jnp.tri: ones at and below the k-th diagonal; float32 by default, as JAX."""
    M = N if M is None else M
    return astype(_tri_mask(N, M, k), _default_float(dtype))


def _tri_select(m, k, name, upper):
    m = asarray(m)
    if m.ndim < 2:
        raise ValueError(f"Argument to jax.numpy.{name} must be at least 2D")
    N, M = m.shape[-2:]
    mask = _tri_mask(N, M, k - 1 if upper else k)  # select broadcasts it over the batch dims
    z = _const_like(m, 0)
    return bind("select", mask, z, m) if upper else bind("select", mask, m, z)


def tril(m, k=0):
    return _tri_select(m, int(k), "tril", False)


def triu(m, k=0):
    return _tri_select(m, int(k), "triu", True)


def roll(a, shift, axis=None):
    """jnp.roll: static shifts slice and concatenate (JAX's _roll_static); a traced
    shift concatenates a with itself and takes a dynamic slice (JAX's _roll_dynamic)."""
    a = asarray(a)
    if axis is None:
        return reshape(roll(ravel(a), shift, 0), a.shape)
    axes = (axis,) if isinstance(axis, (int, _np.integer)) else tuple(axis)
    axes = tuple(_norm_axis(int(ax), a.ndim) for ax in axes)
    if isinstance(shift, Tracer):
        shift = astype(shift, int32)
        if shift.ndim > 1 or (shift.ndim == 1 and len(axes) > 1 and shift.shape[0] not in (1, len(axes))):
            raise ValueError("'shift' and 'axis' arguments to roll must be scalars or 1D arrays")
        m = _bi.max(len(axes), shift.shape[0] if shift.ndim else 1)
        for p in range(m):
            s = shift if shift.ndim == 0 else shift[p if shift.shape[0] > 1 else 0]
            ax = axes[p if len(axes) > 1 else 0]
            n = a.shape[ax]
            x = remainder(s, _np.int32(_bi.max(n, 1)))
            a = lax.dynamic_slice_in_dim(lax.concatenate([a, a], ax), subtract(_np.int32(n), x), n, ax)
        return a
    shifts = _np.asarray(shift)
    if shifts.dtype.kind not in "iu":
        raise TypeError(f"roll: shift must be integers, got {shifts.dtype}")
    if shifts.ndim > 1 or len(axes) > 1 and shifts.ndim == 1 and shifts.size not in (1, len(axes)):
        raise ValueError("'shift' and 'axis' arguments to roll must be scalars or 1D arrays of equal length")
    ax_arr = _np.asarray(axes) if len(axes) != 1 else _np.asarray(axes[0])
    for ax, s in zip(*(_np.atleast_1d(x) for x in _np.broadcast_arrays(ax_arr, shifts))):
        ax, n = int(ax), a.shape[int(ax)]
        if n == 0:
            continue
        i = int(-s) % n
        if i == 0:
            continue
        a = lax.concatenate([lax.slice_in_dim(a, i, n, 1, ax), lax.slice_in_dim(a, 0, i, 1, ax)], ax)
    return a


def meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    """jnp.meshgrid: 1-D inputs only, each keeps its own dtype; 'xy' swaps the first two."""
    args = [asarray(x) for x in xi]
    if not copy:
        raise ValueError("jax.numpy.meshgrid only supports copy=True")
    if indexing not in ("xy", "ij"):
        raise ValueError(f"Valid values for indexing are 'xy' and 'ij', got {indexing}")
    if _bi.any(x.ndim != 1 for x in args):
        raise ValueError(f"Arguments to jax.numpy.meshgrid must be 1D, got shapes {[x.shape for x in args]}")
    if indexing == "xy" and len(args) >= 2:
        args[0], args[1] = args[1], args[0]
    shape = [1 if sparse else x.shape[0] for x in args]
    out = []
    for i, x in enumerate(args):
        s = shape[:i] + [x.shape[0]] + shape[i + 1:] if sparse else shape
        out.append(lax.broadcast_in_dim(x, s, [i]))
    if indexing == "xy" and len(args) >= 2:
        out[0], out[1] = out[1], out[0]
    return out


def _ml_finfo(d):
    import ml_dtypes
    return ml_dtypes.finfo(d)


def _isposinf(x):
    return bind("eq", x, to_array(_np.asarray(_np.inf, x.dtype)))


def _isneginf(x):
    return bind("eq", x, to_array(_np.asarray(-_np.inf, x.dtype)))


def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    """NaN -> nan, +inf -> posinf (default finfo.max), -inf -> neginf (default finfo.min);
    non-float inputs are returned unchanged, as JAX."""
    x = asarray(x)
    if not _dtypes.is_float(x.dtype):
        return x
    info = _ml_finfo(x.dtype)  # ml_dtypes' finfo also knows bfloat16
    posinf = info.max if posinf is None else posinf
    neginf = info.min if neginf is None else neginf
    c = lambda v: astype(v, x.dtype) if _is_array(v) else _const_like(x, v)  # select broadcasts
    out = bind("select", isnan(x), c(nan), x)
    out = bind("select", _isposinf(out), c(posinf), out)
    return bind("select", _isneginf(out), c(neginf), out)


def diagonal(a, offset=0, axis1=0, axis2=1):
    """jnp.diagonal: a[..., i, j] over the two axes moved last (a gather, as JAX)."""
    a = asarray(a)
    if a.ndim < 2:
        raise ValueError("diagonal requires an array of at least two dimensions.")
    offset = int(offset)
    n1, n2 = a.shape[_norm_axis(axis1, a.ndim)], a.shape[_norm_axis(axis2, a.ndim)]
    a = moveaxis(a, (axis1, axis2), (-2, -1))
    d = _bi.max(0, _bi.min(n1 + _bi.min(offset, 0), n2 - _bi.max(offset, 0)))
    i = _np.arange(d, dtype=_np.int32)
    j = _np.arange(_bi.abs(offset), _bi.abs(offset) + d, dtype=_np.int32)
    return a[..., i, j] if offset >= 0 else a[..., j, i]


def diag(v, k=0):
    """jnp.diag: a 1-D v gives the 2-D array with v on the k-th diagonal; a 2-D v gives
    its k-th diagonal."""
    v = asarray(v)
    k = int(k)
    if v.ndim == 1:
        n = v.shape[0] + _bi.abs(k)
        v = lax.pad(v, _np.zeros((), v.dtype), [(_bi.max(0, -k), _bi.max(0, k), 0)])
        mask = to_array(_np.eye(n, k=k, dtype=_np.bool_))
        return bind("select", mask, reshape(v, (n, 1)), _const_like(v, 0))
    if v.ndim == 2:
        return diagonal(v, offset=k)
    raise ValueError("diag input must be 1d or 2d")


def _sum_default_dtype(d):
    """The dtype jnp.sum gives by default: small ints widen to (u)int32, bool to int32."""
    d = _np.dtype(d)
    if d == _np.bool_:
        return _np.dtype(int32)
    if d.kind in "iu" and d.itemsize < 4:
        return _np.dtype(uint32 if d.kind == "u" else int32)
    return d


def trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    """jnp.trace: the k-th diagonal masked with eye and summed over both axes (JAX's way)."""
    if out is not None:
        raise NotImplementedError("The 'out' argument to jnp.trace is not supported.")
    a = asarray(a)
    ax1, ax2 = _norm_axis(axis1, a.ndim), _norm_axis(axis2, a.ndim)
    if ax1 == ax2:
        raise ValueError(f"axis1 and axis2 can not be same. axis1={axis1} and axis2={axis2}")
    n1, n2 = a.shape[ax1], a.shape[ax2]
    a = moveaxis(a, (ax1, ax2), (-2, -1))
    mask = to_array(_np.eye(n1, n2, k=int(offset), dtype=_np.bool_))  # select broadcasts it
    a = bind("select", mask, a, _const_like(a, 0))
    return sum(a, axis=(-2, -1), dtype=_sum_default_dtype(a.dtype) if dtype is None else dtype)


def kron(a, b):
    """Kronecker product: a and b interleaved by unit axes, multiplied, merged (as JAX)."""
    a, b = _promote(a, b)
    if a.ndim < b.ndim:
        a = reshape(a, (1,) * (b.ndim - a.ndim) + tuple(a.shape))
    elif b.ndim < a.ndim:
        b = reshape(b, (1,) * (a.ndim - b.ndim) + tuple(b.shape))
    nd = a.ndim
    a2 = expand_dims(a, tuple(range(1, 2 * nd, 2))) if nd else a
    b2 = expand_dims(b, tuple(range(0, 2 * nd, 2))) if nd else b
    return reshape(multiply(a2, b2), tuple(int(x) * int(y) for x, y in zip(a.shape, b.shape)))


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """|a - b| <= atol + rtol * |b| with b finite, or a == b (equal infinities);
    NaNs are close only with equal_nan. Integers compare as float32, as JAX."""
    a, b = _promote_float(a, b)
    d = a.dtype
    rtol = astype(rtol, d) if _is_array(rtol) else to_array(_np.asarray(rtol, d))
    atol = astype(atol, d) if _is_array(atol) else to_array(_np.asarray(atol, d))
    in_range = bind("le", bind("abs", bind("sub", a, b)), bind("add", atol, bind("mul", rtol, bind("abs", b))))
    out = logical_or(bind("eq", a, b), logical_and(isfinite(b), in_range))
    return logical_or(out, logical_and(isnan(a), isnan(b))) if equal_nan else out


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    return all(isclose(a, b, rtol, atol, equal_nan))


def diff(a, n=1, axis=-1, prepend=None, append=None):
    """n-th discrete difference along axis (not_equal for bool), after concatenating
    prepend / append (scalars broadcast to one slice, weakly typed like JAX)."""
    arr = asarray(a)
    n = int(n)
    if n == 0:
        return arr
    if n < 0:
        raise ValueError(f"order must be non-negative but got {n}")
    if arr.ndim == 0:
        raise ValueError(f"diff requires input that is at least one dimensional; got {a}")
    axis = _norm_axis(int(axis), arr.ndim)
    one = list(arr.shape)
    one[axis] = 1

    def edge(v):
        if _is_array(v) or _np.ndim(v):
            return asarray(v) if _is_array(v) else array(v)
        return v  # a Python / NumPy scalar: kept for weak-type promotion below

    parts = [edge(p) for p in (prepend,) if p is not None] + [arr] + [edge(p) for p in (append,) if p is not None]
    weak = _result_weak(*parts)  # int32 array with prepend=0.5: a weak float32, as JAX
    if len(parts) > 1:
        d = result_type(*parts)
        parts = [astype(p, d) if _is_array(p) else full(one, p, d) for p in parts]
        arr = concatenate(parts, axis)
    for _ in range(n):
        m = arr.shape[axis]
        hi = lax.slice_in_dim(arr, _bi.min(1, m), m, 1, axis)
        lo = lax.slice_in_dim(arr, 0, _bi.max(m - 1, 0), 1, axis)
        arr = bind("ne", hi, lo) if arr.dtype == bool_ else bind("sub", hi, lo)
    if weak:
        arr.weak_type = True
    return arr


def _const_like(x, v):
    return to_array(_np.asarray(v, x.dtype))


def log2(x):
    (x,) = _promote_float(x)
    return bind("div", bind("log", x), bind("log", _const_like(x, 2)))


def log10(x):
    (x,) = _promote_float(x)
    return bind("mul", bind("log", x), _const_like(x, 0.4342944819032518))  # 1 / log(10)


def hypot(x1, x2):
    """sqrt(x1**2 + x2**2) without overflow: max * sqrt(1 + (min / max)**2), inf if
    either is inf (JAX's algorithm)."""
    a, b = _promote_float(x1, x2)
    a, b = bind("abs", a), bind("abs", b)
    a, b = broadcast_arrays(a, b)
    idx_inf = bind("or", _isposinf(a), _isposinf(b))
    hi, lo = bind("max", a, b), bind("min", a, b)
    zero = bind("eq", hi, zeros_like(hi))
    q = bind("div", lo, bind("select", zero, ones_like(hi), hi))
    x = bind("select", zero, hi, bind("mul", hi, bind("sqrt", bind("add", ones_like(q), lax.integer_pow(q, 2)))))
    return bind("select", idx_inf, _const_like(x, _np.inf), x)


def deg2rad(x):
    (x,) = _promote_float(x)
    return bind("mul", x, _const_like(x, _np.pi / 180))


def rad2deg(x):
    (x,) = _promote_float(x)
    return bind("mul", x, _const_like(x, 180 / _np.pi))


radians = deg2rad
degrees = rad2deg


def fliplr(m):
    m = asarray(m)
    if m.ndim < 2:
        raise ValueError(f"fliplr requires an array with at least 2 dimensions, got {m.ndim}")
    return flip(m, 1)


def flipud(m):
    m = asarray(m)
    if m.ndim < 1:
        raise ValueError(f"flipud requires an array with at least 1 dimension, got {m.ndim}")
    return flip(m, 0)


def count_nonzero(a, axis=None, keepdims=False):
    a = asarray(a)
    return sum(bind("ne", a, to_array(_np.zeros((), a.dtype))), axis=axis, dtype=int32, keepdims=keepdims)


# ---------------------------------------------------------------------------------
# The rest of jax.numpy's API, by family, in podlet/_src/numpy_*.py: compositions of
# the primitives above, imported last because they use this module's helpers.
# ---------------------------------------------------------------------------------
from ._src.numpy_ufuncs import *  # noqa: E402,F401,F403
from ._src.numpy_creation import *  # noqa: E402,F401,F403
from ._src.numpy_setops import *  # noqa: E402,F401,F403
from ._src.numpy_reductions import *  # noqa: E402,F401,F403
from ._src.numpy_manip import *  # noqa: E402,F401,F403
from ._src.numpy_einsum import einsum_path  # noqa: E402
from ._src.numpy_misc import *  # noqa: E402,F401,F403  (jnp.bool: this module says _bi.bool for the builtin)
from ._src.numpy_ufunc import *  # noqa: E402,F401,F403
from ._src import linalg  # noqa: E402  (podlet.numpy.linalg; also registers podlet.lax.linalg)

# complex numbers (pairs of real arrays, _src/complex.py): dtype names, sort_complex, and
# the dispatch of every public function above on complex arguments (the functions with a
# complex implementation use it, the others raise a TypeError naming themselves)
from ._src import complex as _complex  # noqa: E402
_complex.install(globals())
_complex.guard(vars(linalg), "podlet.numpy.linalg")
from ._src import fft  # noqa: E402  (podlet.numpy.fft)
