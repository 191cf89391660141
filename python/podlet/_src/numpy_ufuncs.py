"""jax.numpy elementwise functions podlet has no primitive for, composed from the ones it
has (exp, log1p, expm1, sqrt, sin, cos, atan2, pow, select, bitcast ...).

Each follows jax.numpy's dtype rules: floating functions promote integers and bools to
float32 (bfloat16 stays bfloat16 and is computed in float32), results of weakly typed
operands (Python scalars) are weakly typed, and the formulas are XLA's (chlo
decompositions), so values agree to an ulp or two. Imported at the end of
podlet/numpy.py, whose helpers (_promote_float, _weak ...) it uses.
"""
import numpy as _np

from .. import lax
from .. import numpy as jnp
from . import dtypes as _dtypes
from .core import Array, Tracer, bind

__all__ = [
    "tan", "arcsin", "arccos", "arctan", "arctan2", "sinh", "cosh", "arcsinh", "arccosh", "arctanh",
    "asin", "acos", "atan", "atan2", "asinh", "acosh", "atanh", "sinc", "cbrt", "exp2", "logaddexp2",
    "copysign", "signbit", "nextafter", "spacing", "frexp", "ldexp", "heaviside", "fmax", "fmin",
    "float_power", "pow", "gcd", "lcm", "i0", "fabs", "trunc", "rint", "modf", "isposinf", "isneginf",
    "bitwise_count", "bitwise_invert", "angle", "real", "imag", "conj", "conjugate", "iscomplex",
    "isreal", "iscomplexobj", "isrealobj", "isscalar", "iterable", "unwrap",
]


# ---------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------
def weak_result(out, *args):
    """out, weakly typed when JAX types it so: jnp.sinh(2.0) and jnp.fmax(int32 array,
    1.5) are weak float32 (numpy._result_weak)."""
    return jnp._weak_if(out, *args)


def _c(x, v):
    """A scalar constant of x's dtype (select / arithmetic broadcast it)."""
    return jnp._const_like(x, v)


def _float_unary(name, body, upcast=True):
    """A jnp float function of one operand: promote to inexact, then the formula. A
    bfloat16 operand is computed in float32 when XLA does (its own transcendental ops,
    upcast=True) and step by step in bfloat16 when JAX composes the function in Python
    (sinc, exp2)."""
    def f(x, /):
        (a,) = jnp._promote_float(x)
        if upcast and a.dtype == _dtypes.bfloat16:
            out = lax.convert_element_type(body(lax.convert_element_type(a, _np.float32)), _dtypes.bfloat16)
        else:
            out = body(a)
        return weak_result(out, x)
    f.__name__ = name
    f.__qualname__ = name
    return f


def _sel(pred, a, b):
    return bind("select", pred, a, b)


def _abs_sel(x):
    """|x| as a select: its derivative is +1 at 0 (lax.abs's is 0 there), so odd
    functions written as sign * f(|x|) keep f'(0) as their slope at the origin."""
    return _sel(bind("lt", x, _c(x, 0)), bind("neg", x), x)


# ---------------------------------------------------------------------------------
# trigonometric and hyperbolic (XLA's real-valued decompositions)
# ---------------------------------------------------------------------------------
def _tan(x):
    return bind("div", bind("sin", x), bind("cos", x))


def _sqrt_1mx2(x):
    one = _c(x, 1)
    return bind("sqrt", bind("mul", bind("sub", one, x), bind("add", one, x)))  # (1 - x)(1 + x): exact near +-1


def _asin(x):
    # 2 * atan2(x, 1 + sqrt(1 - x^2))
    return bind("mul", _c(x, 2), bind("atan2", x, bind("add", _c(x, 1), _sqrt_1mx2(x))))


def _acos(x):
    # x != -1 ? 2 * atan2(sqrt(1 - x^2), 1 + x) : pi
    r = bind("mul", _c(x, 2), bind("atan2", _sqrt_1mx2(x), bind("add", _c(x, 1), x)))
    return _sel(bind("ne", x, _c(x, -1)), r, _c(x, _np.pi))


def _atan(x):
    return bind("atan2", x, _c(x, 1))


def _sinh(x):
    # |x| < 1: (expm1(x) + expm1(x) / (expm1(x) + 1)) / 2; else e^(x + log .5) - e^(-x + log .5)
    lh = _c(x, _np.log(0.5))
    large = bind("sub", bind("exp", bind("add", x, lh)), bind("exp", bind("add", bind("neg", x), lh)))
    small_x = bind("lt", bind("abs", x), _c(x, 1))
    xs = _sel(small_x, x, _c(x, 0))  # the unused branch never sees a large x (no inf * 0 in the VJP)
    e = bind("expm1", xs)
    small = bind("mul", _c(x, 0.5), bind("add", e, bind("div", e, bind("add", e, _c(x, 1)))))
    return _sel(small_x, small, large)


def _cosh(x):
    lh = _c(x, _np.log(0.5))
    return bind("add", bind("exp", bind("add", x, lh)), bind("exp", bind("add", bind("neg", x), lh)))


def _asinh(x):
    # sign(x) * (|x| >= sqrt(max) ? log(|x|) + log 2 : log1p(|x| + x^2 / (1 + sqrt(1 + x^2))))
    a = _abs_sel(x)
    big = bind("ge", a, _c(x, _np.sqrt(_np.finfo(_np.dtype(x.dtype)).max)))
    a_s = _sel(big, _c(x, 1), a)
    small = bind("log1p", bind("add", a_s, bind("div", bind("mul", a_s, a_s),
                                                 bind("add", _c(x, 1), bind("sqrt", bind("add", bind("mul", a_s, a_s), _c(x, 1)))))))
    a_b = _sel(big, a, _c(x, 1))
    large = bind("add", bind("log", a_b), _c(x, _np.log(2.0)))
    r = _sel(big, large, small)
    return _sel(bind("lt", x, _c(x, 0)), bind("neg", r), r)


def _acosh(x):
    # x < -1: nan; x >= sqrt(max): log(x) + log 2; else log1p((x - 1) + sqrt((x - 1) (x + 1)))
    one = _c(x, 1)
    big = bind("ge", x, _c(x, _np.sqrt(_np.finfo(_np.dtype(x.dtype)).max)))
    xs = _sel(big, _c(x, 2), x)
    xm1 = bind("sub", xs, one)
    mid = bind("log1p", bind("add", xm1, bind("sqrt", bind("mul", xm1, bind("add", xs, one)))))
    large = bind("add", bind("log", _sel(big, x, _c(x, 2))), _c(x, _np.log(2.0)))
    r = _sel(big, large, mid)
    return _sel(bind("lt", x, _c(x, -1)), _c(x, _np.nan), r)


def _atanh(x):
    # |x| > 1: nan; else (log1p(x) - log1p(-x)) / 2
    r = bind("mul", _c(x, 0.5), bind("sub", bind("log1p", x), bind("log1p", bind("neg", x))))
    return _sel(bind("gt", bind("abs", x), _c(x, 1)), _c(x, _np.nan), r)


tan = _float_unary("tan", _tan)
arcsin = _float_unary("arcsin", _asin)
arccos = _float_unary("arccos", _acos)
arctan = _float_unary("arctan", _atan)
sinh = _float_unary("sinh", _sinh)
cosh = _float_unary("cosh", _cosh)
arcsinh = _float_unary("arcsinh", _asinh)
arccosh = _float_unary("arccosh", _acosh)
arctanh = _float_unary("arctanh", _atanh)
asin, acos, atan, asinh, acosh, atanh = arcsin, arccos, arctan, arcsinh, arccosh, arctanh


def arctan2(x1, x2, /):
    a, b = jnp._promote_float(x1, x2)
    return weak_result(bind("atan2", a, b), x1, x2)


atan2 = arctan2


def _sinc(x):
    # jnp.sinc: sin(pi x) / (pi x), 1 at 0 (its derivative there is 0, as JAX's)
    zero = bind("eq", x, _c(x, 0))
    pi_x = bind("mul", _c(x, _np.pi), x)
    safe = _sel(zero, _c(x, 1), pi_x)
    at0 = bind("add", bind("mul", pi_x, _c(x, 0)), _c(x, 1))
    return _sel(zero, at0, bind("div", bind("sin", safe), safe))


sinc = _float_unary("sinc", _sinc, upcast=False)


# ---------------------------------------------------------------------------------
# exponents, logarithms, roots
# ---------------------------------------------------------------------------------
def _cbrt(x):
    # copysign(|x| ** (1/3), x), refined by one Newton step (XLA's cbrt is correctly
    # rounded; pow alone is off by an ulp or two). 0, inf and nan pass through.
    a = bind("abs", x)
    special = bind("or", bind("eq", a, _c(x, 0)), bind("not", bind("is_finite", a)))
    a_s = _sel(special, _c(x, 1), a)
    y = bind("pow", a_s, _c(x, 1.0 / 3.0))
    y2 = bind("mul", y, y)
    y = bind("sub", y, bind("div", bind("sub", bind("mul", y2, y), a_s), bind("mul", _c(x, 3), y2)))
    y = _sel(special, a, y)
    return _sel(bind("lt", x, _c(x, 0)), bind("neg", y), _sel(bind("eq", x, _c(x, 0)), x, y))


def _exp2(x):
    return bind("exp", bind("mul", _c(x, _np.log(2.0)), x))


cbrt = _float_unary("cbrt", _cbrt)
exp2 = _float_unary("exp2", _exp2, upcast=False)


def logaddexp2(x1, x2, /):
    """log2(2**x1 + 2**x2) = max + log1p(2**-|x1 - x2|) / log 2 (JAX's formula; a tie
    splits the gradient 0.5 / 0.5, as jax's custom JVP does)."""
    a, b = jnp._promote_float(x1, x2)
    amax = bind("max", a, b)
    delta = bind("sub", a, b)
    zero = jnp.zeros_like(delta)
    neg_abs = _sel(bind("gt", delta, zero), bind("neg", delta), _sel(bind("lt", delta, zero), delta, bind("mul", zero, delta)))
    r = bind("add", amax, bind("mul", _c(a, 1 / _np.log(2.0)), bind("log1p", _exp2(neg_abs))))
    out = _sel(bind("ne", delta, delta), bind("add", a, b), r)
    # weak only when both operands are (jax's custom_jvp drops the weak type of
    # jnp.logaddexp2(int32 array, 1.5))
    return weak_result(out, x1, x2) if jnp._weak(x1) and jnp._weak(x2) else out


def float_power(x, y, /):
    a, b = jnp._promote_float(x, y)
    return weak_result(bind("pow", a, b), x, y)


def pow(x1, x2, /):
    return jnp.power(x1, x2)


def fabs(x, /):
    (a,) = jnp._promote_float(x)
    return weak_result(bind("abs", a), x)


def i0(x):
    """Modified Bessel function of order 0: exp(|x|) * i0e(|x|), with Cephes' Chebyshev
    coefficients (jax's bessel_i0e for float32; bf16 computes in f32)."""
    (a,) = jnp._promote_float(x)
    return weak_result(_i0(a), x)


_I0E_A = [-1.30002500998624804212E-8, 6.04699502254191894932E-8, -2.67079385394061173391E-7,
          1.11738753912010371815E-6, -4.41673835845875056359E-6, 1.64484480707288970893E-5,
          -5.75419501008210370398E-5, 1.88502885095841655729E-4, -5.76375574538582365885E-4,
          1.63947561694133579842E-3, -4.32430999505057594430E-3, 1.05464603945949983183E-2,
          -2.37374148058994688156E-2, 4.93052842396707084878E-2, -9.49010970480476444210E-2,
          1.71620901522208775349E-1, -3.04682672343198398683E-1, 6.76795274409476084995E-1]
_I0E_B = [3.39623202570838634515E-9, 2.26666899049817806459E-8, 2.04891858946906374183E-7,
          2.89137052083475648297E-6, 6.88975834691682398426E-5, 3.36911647825569408990E-3,
          8.04490411014108831608E-1]


def _chebyshev(x, coefficients):
    b0 = b1 = b2 = jnp.zeros_like(x)
    for c in coefficients:
        b2, b1 = b1, b0
        b0 = bind("add", bind("sub", bind("mul", x, b1), b2), _c(x, c))
    return bind("mul", _c(x, 0.5), bind("sub", b0, b2))


def _i0(x0):
    a0 = bind("abs", x0)
    x = lax.convert_element_type(x0, _np.float32) if x0.dtype == _dtypes.bfloat16 else x0
    a = bind("abs", x)
    le8 = bind("le", a, _c(x, 8.0))
    a_hi = _sel(le8, _c(x, 8.0), a)
    lo = _chebyshev(bind("sub", bind("mul", _c(x, 0.5), a), _c(x, 2.0)), _I0E_A)
    hi = bind("div", _chebyshev(bind("sub", bind("div", _c(x, 32.0), a_hi), _c(x, 2.0)), _I0E_B), bind("sqrt", a_hi))
    i0e = lax.convert_element_type(_sel(le8, lo, hi), x0.dtype)  # jax upcasts only i0e
    return bind("mul", bind("exp", a0), i0e)


# ---------------------------------------------------------------------------------
# sign bits, neighbours, mantissa / exponent (bit manipulation on float32; bfloat16
# converts to float32 exactly and back)
# ---------------------------------------------------------------------------------
_NMANT = {"float32": 23, "bfloat16": 7}


def _bits(x):
    """x's bits as int32 of its float32 value (bf16 -> f32 is exact)."""
    return lax.bitcast_convert_type(lax.convert_element_type(x, _np.float32), _np.int32)


def _from_bits(b, dtype):
    return lax.convert_element_type(lax.bitcast_convert_type(b, _np.float32), dtype)


def _need_32(x, name):
    if x.dtype.name not in _NMANT:
        raise NotImplementedError(f"jnp.{name} on {x.dtype}: podlet implements it for float32 and bfloat16")


def signbit(x, /):
    x = jnp.asarray(x)
    if x.dtype == _dtypes.bool_:
        return jnp.full_like(x, False, dtype=bool)
    if x.dtype.kind in "iu":
        return bind("lt", x, _c(x, 0))
    if x.dtype.name in _NMANT:
        return bind("lt", _bits(x), jnp.asarray(_np.int32(0)))
    # float64 (x64): no 64-bit bitcast; -0.0 by its reciprocal, NaN's sign unseen
    z = bind("eq", x, _c(x, 0))
    return bind("or", bind("lt", x, _c(x, 0)), bind("and", z, bind("lt", bind("div", _c(x, 1), x), _c(x, 0))))


def copysign(x1, x2, /):
    a, b = jnp._promote_float(x1, x2)
    mag = bind("abs", a)
    return weak_result(_sel(signbit(b), bind("neg", mag), mag), x1, x2)


def nextafter(x1, x2, /):
    """The next representable value after x1 towards x2 (XLA's algorithm on the bits:
    nan if either is nan, x2 if equal, the smallest subnormal with x2's sign from 0)."""
    a, b = jnp._promote_float(x1, x2)
    _need_32(a, "nextafter")
    a, b = jnp.broadcast_arrays(a, b)
    step = _np.int32(1 << (23 - _NMANT[a.dtype.name]))
    bits = _bits(a)
    i32 = lambda v: jnp.asarray(_np.int32(v))
    abs_bits = bind("and", bits, i32(0x7FFFFFFF))
    sign_b = bind("and", _bits(b), i32(-0x80000000))
    from_zero = bind("or", sign_b, i32(step))
    a_neg = bind("lt", bits, i32(0))
    up = bind("eq", a_neg, bind("gt", a, b))  # away from zero: magnitude grows
    moved = _sel(up, bind("add", bits, i32(step)), bind("sub", bits, i32(step)))
    out = _sel(bind("eq", abs_bits, i32(0)), from_zero, moved)
    res = _from_bits(out, a.dtype)
    res = _sel(bind("eq", a, b), b, res)
    nan = bind("or", bind("ne", a, a), bind("ne", b, b))
    return weak_result(_sel(nan, _c(a, _np.nan), res), x1, x2)


def spacing(x, /):
    (a,) = jnp._promote_float(x)
    _need_32(a, "spacing")
    inf = jnp.full_like(a, _np.inf)
    r = bind("sub", nextafter(a, copysign(inf, a)), a)
    tiny = _np.float32(2.0 ** -149) if a.dtype == _np.float32 else float(_ml_finfo(a.dtype).smallest_subnormal)
    # JAX's smallest-subnormal constant is a NumPy scalar: the result is strongly typed
    return _sel(bind("eq", r, _c(a, 0)), copysign(jnp.full_like(a, tiny), a), r)


def _ml_finfo(d):
    import ml_dtypes
    return ml_dtypes.finfo(d)


def _two_pow(k):
    """2.0 ** k as float32 for integer k in [-126, 127], exactly (built from the bits)."""
    return lax.bitcast_convert_type(bind("shift_left", bind("add", k, jnp.asarray(_np.int32(127))),
                                         jnp.asarray(_np.int32(23))), _np.float32)


def frexp(x, /):
    """(mantissa, exponent) with x == mantissa * 2**exponent, |mantissa| in [0.5, 1)
    (0, inf and nan give themselves and exponent 0); exponent is int32. The exponent
    comes from the bits; the mantissa is x scaled by 2**-exponent, so its derivative is
    2**-exponent, as jax's custom JVP."""
    (a,) = jnp._promote_float(x)
    _need_32(a, "frexp")
    f = lax.convert_element_type(a, _np.float32)
    i32 = lambda v: jnp.asarray(_np.int32(v))
    tiny = bind("lt", bind("abs", f), _c(f, _np.finfo(_np.float32).tiny))
    f1 = lax.stop_gradient(_sel(tiny, bind("mul", f, _c(f, float(1 << 23))), f))
    e0 = _sel(tiny, i32(-23), i32(0))
    bits = lax.bitcast_convert_type(f1, _np.int32)
    e = bind("add", e0, bind("sub", bind("and", bind("shift_right_logical", bits, i32(23)), i32(0xFF)), i32(126)))
    special = bind("or", bind("not", bind("is_finite", f)), bind("eq", f, _c(f, 0)))
    e = _sel(special, i32(0), e)
    half = bind("shift_right_arithmetic", e, i32(1))
    m = bind("mul", bind("mul", f, _two_pow(bind("neg", half))), _two_pow(bind("sub", half, e)))
    return lax.convert_element_type(m, a.dtype), e


def ldexp(x1, x2, /):
    """x1 * 2**x2 through frexp, so small x1 and large x2 do not overflow early (JAX's
    algorithm); x2 must be an integer."""
    d2 = jnp._dt(x2)
    if _dtypes.is_float(d2):
        raise ValueError(f"ldexp not supported for input types {(jnp._dt(x1), d2)}: x2 must be an integer")
    (a,) = jnp._promote_float(x1)
    b = jnp.asarray(x2)
    m, e = frexp(a)
    e = lax.convert_element_type(bind("add", e, lax.convert_element_type(b, _np.int32)), a.dtype)
    pos = bind("gt", e, _c(e, 0))
    m = _sel(pos, bind("mul", m, _c(m, 2)), m)
    e = _sel(pos, bind("sub", e, _c(e, 1)), e)
    x = bind("mul", m, bind("pow", jnp.full_like(e, 2), e))
    keep = bind("or", bind("eq", bind("abs", a), _c(a, _np.inf)), bind("eq", a, _c(a, 0)))
    return _sel(keep, jnp.broadcast_to(a, x.shape), x)  # strongly typed, as jnp.ldexp


# ---------------------------------------------------------------------------------
# comparisons and misc
# ---------------------------------------------------------------------------------
def heaviside(x1, x2, /):
    a, b = jnp._promote_float(x1, x2)
    a, b = jnp.broadcast_arrays(a, b)
    zero, one = _c(a, 0), _c(a, 1)
    out = _sel(bind("lt", a, zero), jnp.zeros_like(a),
               _sel(bind("gt", a, zero), jnp.ones_like(a), _sel(bind("ne", a, a), a, b)))
    return weak_result(out, x1, x2) if jnp._weak(x1) else out  # JAX's constants come from x1


def fmax(x1, x2):
    """The larger of x1 and x2, ignoring a NaN unless both are (jnp.fmax)."""
    return _fminmax(x1, x2, "gt")


def fmin(x1, x2):
    return _fminmax(x1, x2, "lt")


def _fminmax(x1, x2, prim):
    a, b = jnp._promote(x1, x2)
    mask = bind("or", bind(prim, a, b), bind("ne", b, b))
    a, b = jnp.broadcast_arrays(a, b)
    return weak_result(_sel(mask, a, b), x1, x2)


def gcd(x1, x2):
    """Greatest common divisor of |x1| and |x2| by Euclid's algorithm in a while_loop
    (jnp.gcd's); integers only."""
    a, b = jnp._promote(x1, x2)
    if a.dtype.kind not in "iu":
        raise ValueError(f"Arguments to jax.numpy.gcd must be integers; got {a.dtype}")
    a, b = jnp.broadcast_arrays(bind("abs", a) if a.dtype.kind == "i" else a, bind("abs", b) if b.dtype.kind == "i" else b)
    def cond(c):
        return jnp.any(bind("ne", c[1], jnp.zeros_like(c[1])))

    def body(c):
        u, v = c
        nz = bind("ne", v, jnp.zeros_like(v))
        u, v = _sel(nz, v, u), _sel(nz, bind("rem", u, _sel(nz, v, jnp.ones_like(v))), jnp.zeros_like(v))
        lt = bind("lt", u, v)
        return _sel(lt, v, u), _sel(lt, u, v)

    out, _ = lax.while_loop(cond, body, (a, b))
    return weak_result(out, x1, x2)


def lcm(x1, x2):
    a, b = jnp._promote(x1, x2)
    if a.dtype.kind not in "iu":
        raise ValueError(f"Arguments to jax.numpy.lcm must be integers; got {a.dtype}")
    if a.dtype.kind == "i":
        a, b = bind("abs", a), bind("abs", b)
    d = gcd(a, b)
    zero = bind("eq", d, jnp.zeros_like(d))
    q = jnp.floor_divide(b, _sel(zero, jnp.ones_like(d), d))
    out = _sel(zero, jnp.zeros_like(d), jnp.multiply(a, q))
    return weak_result(out, x1, x2)


def trunc(x):
    xa = jnp.asarray(x)
    if not _dtypes.is_float(xa.dtype):
        return weak_result(xa, x)
    return weak_result(_sel(bind("lt", xa, _c(xa, 0)), bind("ceil", xa), bind("floor", xa)), x)


def rint(x, /):
    xa = jnp.asarray(x)
    if not _dtypes.is_float(xa.dtype):
        return lax.convert_element_type(xa, _np.float32)  # a conversion: strongly typed, as in JAX
    return weak_result(bind("round", xa, rounding_method=1), x)


def modf(x, /, out=None):
    if out is not None:
        raise NotImplementedError("The 'out' argument to jnp.modf is not supported.")
    (a,) = jnp._promote_float(x)
    whole = _sel(bind("ge", a, _c(a, 0)), bind("floor", a), bind("ceil", a))
    return weak_result(bind("sub", a, whole), x), weak_result(whole, x)


def _isposneginf(x, v):
    x = jnp.asarray(x)
    if not _dtypes.is_float(x.dtype):
        return jnp.full_like(x, False, dtype=bool)
    return bind("eq", x, _c(x, v))


def isposinf(x, /, out=None):
    return _isposneginf(x, _np.inf)


def isneginf(x, /, out=None):
    return _isposneginf(x, -_np.inf)


def bitwise_count(x, /):
    """The number of 1 bits in |x| (uint8), by the SWAR popcount on 32-bit words."""
    x = jnp.asarray(x)
    if x.dtype.kind not in "iub":
        raise TypeError(f"bitwise_count requires an integer or boolean input; got {x.dtype}")
    if x.dtype == _dtypes.bool_:
        return lax.convert_element_type(x, _np.uint8)
    v = lax.convert_element_type(bind("abs", x) if x.dtype.kind == "i" else x, _np.uint32)
    u = lambda c: jnp.asarray(_np.uint32(c))
    v = bind("sub", v, bind("and", bind("shift_right_logical", v, u(1)), u(0x55555555)))
    v = bind("add", bind("and", v, u(0x33333333)), bind("and", bind("shift_right_logical", v, u(2)), u(0x33333333)))
    v = bind("and", bind("add", v, bind("shift_right_logical", v, u(4))), u(0x0F0F0F0F))
    v = bind("shift_right_logical", bind("mul", v, u(0x01010101)), u(24))
    return lax.convert_element_type(v, _np.uint8)


def bitwise_invert(x, /):
    return jnp.invert(x)


# ---------------------------------------------------------------------------------
# the real-valued side of the complex API (podlet has no complex dtypes)
# ---------------------------------------------------------------------------------
def angle(z, deg=False):
    za = jnp.asarray(z)
    if not _dtypes.is_float(za.dtype) or za.ndim == 0:
        za = lax.convert_element_type(za, _np.float32)
    out = bind("atan2", jnp.zeros_like(za), za)
    return jnp.rad2deg(out) if deg else out


def real(val, /):
    return weak_result(jnp.asarray(val), val)


def imag(val, /):
    return weak_result(jnp.zeros_like(jnp.asarray(val)), val)


def conjugate(x, /):
    return weak_result(jnp.asarray(x), x)


conj = conjugate


def iscomplex(x):
    return weak_result(jnp.zeros_like(jnp.asarray(x), dtype=bool), x)  # weak like JAX's imag(x) != 0


def isreal(x):
    return weak_result(jnp.ones_like(jnp.asarray(x), dtype=bool), x)


def iscomplexobj(x):
    if x is None:
        return False
    try:
        return _np.dtype(jnp._dt(x)).kind == "c"
    except TypeError:
        return False


def isrealobj(x):
    return not iscomplexobj(x)


def isscalar(element):
    if _np.isscalar(element):
        return True
    if isinstance(element, (_np.ndarray, Array, Tracer)):
        return element.ndim == 0
    return False


def iterable(y):
    return _np.iterable(y)


def unwrap(p, discont=None, axis=-1, period=2 * _np.pi):
    """jnp.unwrap: adds multiples of period where consecutive values jump by more than
    discont (default period / 2)."""
    p, period = jnp._promote(p, period)
    if p.shape[axis] == 0:
        return p
    if discont is None:
        discont = jnp.true_divide(period, 2) if _dtypes.is_float(p.dtype) else jnp.floor_divide(period, 2)
    interval = jnp.floor_divide(period, 2) if not _dtypes.is_float(p.dtype) else jnp.true_divide(period, 2)
    dd = jnp.diff(p, axis=axis)
    ddmod = jnp.subtract(jnp.remainder(jnp.add(dd, interval), period), interval)
    ddmod = jnp.where(jnp.logical_and(jnp.equal(ddmod, jnp.negative(interval)), jnp.greater(dd, 0)), interval, ddmod)
    ph = jnp.where(jnp.less(jnp.abs(dd), discont), 0, jnp.subtract(ddmod, dd))
    ax = jnp._norm_axis(axis, p.ndim)
    n = p.shape[ax]
    head = lax.slice_in_dim(p, 0, 1, 1, ax)
    tail = jnp.add(lax.slice_in_dim(p, 1, n, 1, ax), jnp.cumsum(ph, axis=ax))
    return jnp.concatenate([head, tail.astype(p.dtype)], axis=ax)
