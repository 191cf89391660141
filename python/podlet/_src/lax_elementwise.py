"""jax.lax elementwise functions podlet has no primitive for (issue 26), composed from
the ones it has. Unlike their jax.numpy twins they do not promote: a float function
takes a floating operand (TypeError otherwise), a bit function an integer one, and
binary functions want operands of one dtype (Python scalars are weak and take the
other operand's dtype). Formulas are XLA's (chlo decompositions, Cephes coefficients),
so values agree with jax.lax to an ulp or a few."""
import numpy as _np

from .. import lax
from .. import numpy as jnp
from . import dtypes as _dtypes
from .core import bind


class _Ufuncs:
    """_src/numpy_ufuncs.py, imported on first use (podlet.numpy imports it at its end,
    after podlet.lax)."""

    def __getattr__(self, name):
        from . import numpy_ufuncs
        return getattr(numpy_ufuncs, name)


_uf = _Ufuncs()

__all__ = ["acos", "acosh", "asin", "asinh", "atan", "atanh", "cosh", "sinh", "tan", "cbrt", "exp2", "erfc",
           "reciprocal", "nextafter", "population_count", "clz", "mulhi", "bessel_i0e", "bessel_i1e"]

_FLOATS = ("float32", "float64", "bfloat16")
_INTS = ("int32", "uint32", "uint8")


def _operand(x, what, kinds, name):
    a = jnp.asarray(x)
    if a.dtype.name not in kinds:
        raise TypeError(f"lax.{name} does not accept dtype {a.dtype.name}; it takes {what} ({', '.join(kinds)})")
    return a


def _same(name, kinds, what, *xs):
    """Operands of one dtype: Python scalars take the dtype of the array operand."""
    ref = next((x for x in xs if hasattr(x, "dtype") and not jnp._weak(x)), None)
    if ref is None:
        ref = next((x for x in xs if hasattr(x, "dtype")), xs[0])
    d = jnp.asarray(ref).dtype
    out = []
    for x in xs:
        a = jnp.asarray(x, dtype=d) if jnp._weak(x) and not hasattr(x, "dtype") else jnp.asarray(x)
        if a.dtype != d:
            raise TypeError(f"lax.{name} requires arguments to have the same dtypes, got "
                            f"{', '.join(jnp.asarray(v).dtype.name for v in xs)}")
        out.append(a)
    _operand(out[0], what, kinds, name)
    return jnp.broadcast_arrays(*out) if any(o.shape != out[0].shape for o in out) else out


def _float_fn(name, jname):
    def f(x):
        _operand(x, "a floating-point operand", _FLOATS, name)
        return getattr(_uf, jname)(x)
    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"jax.lax.{name}: elementwise, floating operands only (jnp.{jname}'s formula)."
    return f


acos = _float_fn("acos", "arccos")
acosh = _float_fn("acosh", "arccosh")
asin = _float_fn("asin", "arcsin")
asinh = _float_fn("asinh", "arcsinh")
atan = _float_fn("atan", "arctan")
atanh = _float_fn("atanh", "arctanh")
cosh = _float_fn("cosh", "cosh")
sinh = _float_fn("sinh", "sinh")
tan = _float_fn("tan", "tan")
cbrt = _float_fn("cbrt", "cbrt")
exp2 = _float_fn("exp2", "exp2")


def reciprocal(x):
    """jax.lax.reciprocal: 1 / x (integer_pow(x, -1)); keeps x's dtype and weak type."""
    a = _operand(x, "a floating-point operand", _FLOATS, "reciprocal")
    return _uf.weak_result(bind("div", jnp._const_like(a, 1), a), x)


def _f32_path(body):
    """body on float32 (bf16 upcast, as XLA does for its transcendental functions)."""
    def f(a):
        if a.dtype == _dtypes.bfloat16:
            return lax.convert_element_type(body(lax.convert_element_type(a, _np.float32)), _dtypes.bfloat16)
        return body(a)
    return f


# erfc: XLA's ErfcImpl32 (Cephes erfcf) for |x| >= 1, 1 - erf(x) below.
_ERFC_P = [2.326819970068386e-2, -1.387039388740657e-1, 3.687424674597105e-1, -5.824733027278666e-1,
           6.210004621745983e-1, -4.944515323274145e-1, 3.404879937665872e-1, -2.741127028184656e-1,
           5.638259427386472e-1]
_ERFC_R = [-1.047766399936249e+1, 1.297719955372516e+1, -7.495518717768503e+0, 2.921019019210786e+0,
           -1.015265279202700e+0, 4.218463358204948e-1, -2.820767439740514e-1, 5.641895067754075e-1]


def _poly(y, coeffs):
    c = _uf._c
    acc = jnp.zeros_like(y) + c(y, coeffs[0])
    for k in coeffs[1:]:
        acc = bind("add", bind("mul", acc, y), c(y, k))
    return acc


def _erfc_body(x):
    c = _uf._c
    ax = bind("abs", x)
    z = bind("exp", bind("neg", bind("mul", x, x)))
    q = bind("div", c(x, 1), ax)
    y = bind("mul", q, q)
    p = _uf._sel(bind("lt", ax, c(x, 2.0)), _poly(y, _ERFC_P), _poly(y, _ERFC_R))
    y = bind("mul", bind("mul", z, q), p)
    y = _uf._sel(bind("lt", z, c(x, -88.72283905206835)), c(x, 0), y)
    big = _uf._sel(bind("lt", x, c(x, 0)), bind("sub", c(x, 2.0), y), y)
    small = bind("sub", c(x, 1), bind("erf", x))
    return _uf._sel(bind("lt", ax, c(x, 1)), small, big)


def erfc(x):
    """jax.lax.erfc: 1 - erf(x) accurately for large |x| (Cephes' erfcf rational fit)."""
    a = _operand(x, "a floating-point operand", _FLOATS, "erfc")
    return _uf.weak_result(_f32_path(_erfc_body)(a), x)


def nextafter(x1, x2):
    """jax.lax.nextafter: the next float after x1 towards x2 (float32 / bfloat16)."""
    a, b = _same("nextafter", ("float32", "bfloat16"), "floating-point operands", x1, x2)
    return _uf.nextafter(a, b)


def _u32(v):
    return jnp.asarray(_np.uint32(v))


def _popcount32(v):
    v = bind("sub", v, bind("and", bind("shift_right_logical", v, _u32(1)), _u32(0x55555555)))
    v = bind("add", bind("and", v, _u32(0x33333333)), bind("and", bind("shift_right_logical", v, _u32(2)), _u32(0x33333333)))
    v = bind("and", bind("add", v, bind("shift_right_logical", v, _u32(4))), _u32(0x0F0F0F0F))
    return bind("shift_right_logical", bind("mul", v, _u32(0x01010101)), _u32(24))


def _to_u32(a):
    return lax.bitcast_convert_type(a, _np.uint32) if a.dtype == _dtypes.int32 else lax.convert_element_type(a, _np.uint32)


def _from_u32(v, d):
    return lax.bitcast_convert_type(v, d) if d == _dtypes.int32 else lax.convert_element_type(v, d)


def population_count(x):
    """jax.lax.population_count: the number of 1 bits of each element (two's complement
    for signed), in x's dtype."""
    a = _operand(x, "an integer operand", _INTS, "population_count")
    return _uf.weak_result(_from_u32(_popcount32(_to_u32(a)), a.dtype), x)


def clz(x):
    """jax.lax.clz: the number of leading zero bits of each element, in x's dtype."""
    a = _operand(x, "an integer operand", _INTS, "clz")
    v = _to_u32(a)
    for s in (1, 2, 4, 8, 16):
        v = bind("or", v, bind("shift_right_logical", v, _u32(s)))
    n = bind("sub", _u32(32), _popcount32(v))
    if a.dtype == _dtypes.uint8:
        n = bind("sub", n, _u32(24))
    return _uf.weak_result(_from_u32(n, a.dtype), x)


def mulhi(x, y):
    """jax.lax.mulhi: the high half of the double-width product x * y (integers of one
    dtype), by 16-bit limbs on uint32 (podlet has no 64-bit integers)."""
    a, b = _same("mulhi", _INTS, "integer operands", x, y)
    d = a.dtype
    if d == _dtypes.uint8:
        p = bind("mul", lax.convert_element_type(a, _np.uint32), lax.convert_element_type(b, _np.uint32))
        return _uf.weak_result(lax.convert_element_type(bind("shift_right_logical", p, _u32(8)), d), x, y)
    ua, ub = _to_u32(a), _to_u32(b)
    m16, s16 = _u32(0xFFFF), _u32(16)
    a0, a1 = bind("and", ua, m16), bind("shift_right_logical", ua, s16)
    b0, b1 = bind("and", ub, m16), bind("shift_right_logical", ub, s16)
    lo = bind("mul", a0, b0)
    t = bind("add", bind("mul", a1, b0), bind("shift_right_logical", lo, s16))
    w1 = bind("add", bind("and", t, m16), bind("mul", a0, b1))
    hi = bind("add", bind("add", bind("mul", a1, b1), bind("shift_right_logical", t, s16)),
              bind("shift_right_logical", w1, s16))
    if d == _dtypes.int32:  # signed high half = unsigned one - (a < 0 ? b : 0) - (b < 0 ? a : 0)
        zero = _u32(0)
        hi = bind("sub", hi, _uf._sel(bind("lt", a, jnp.asarray(_np.int32(0))), ub, zero))
        hi = bind("sub", hi, _uf._sel(bind("lt", b, jnp.asarray(_np.int32(0))), ua, zero))
    return _uf.weak_result(_from_u32(hi, d), x, y)


def _i0e_body(x):
    c = _uf._c
    a = bind("abs", x)
    le8 = bind("le", a, c(x, 8.0))
    a_hi = _uf._sel(le8, c(x, 8.0), a)
    lo = _uf._chebyshev(bind("sub", bind("mul", c(x, 0.5), a), c(x, 2.0)), _uf._I0E_A)
    hi = bind("div", _uf._chebyshev(bind("sub", bind("div", c(x, 32.0), a_hi), c(x, 2.0)), _uf._I0E_B),
              bind("sqrt", a_hi))
    return _uf._sel(le8, lo, hi)


def bessel_i0e(x):
    """jax.lax.bessel_i0e: exp(-|x|) I0(x) (Cephes' Chebyshev fits, jax's float32 path)."""
    a = _operand(x, "a floating-point operand", _FLOATS, "bessel_i0e")
    return _uf.weak_result(_f32_path(_i0e_body)(a), x)


_I1E_A = [9.38153738649577178388E-9, -4.44505912879632808065E-8, 2.00329475355213526229E-7,
          -8.56872026469545474066E-7, 3.47025130813767847674E-6, -1.32731636560394358279E-5,
          4.78156510755005422638E-5, -1.61760815825896745588E-4, 5.12285956168575772895E-4,
          -1.51357245063125314899E-3, 4.15642294431288815669E-3, -1.05640848946261981558E-2,
          2.47264490306265168283E-2, -5.29459812080949914269E-2, 1.02643658689847095384E-1,
          -1.76416518357834055153E-1, 2.52587186443633654823E-1]
_I1E_B = [-3.83538038596423702205E-9, -2.63146884688951950684E-8, -2.51223623787020892529E-7,
          -3.88256480887769039346E-6, -1.10588938762623716291E-4, -9.76109749136146840777E-3,
          7.78576235018280120474E-1]


def _i1e_body(x):
    c = _uf._c
    a = bind("abs", x)
    le8 = bind("le", a, c(x, 8.0))
    a_hi = _uf._sel(le8, c(x, 8.0), a)
    lo = bind("mul", _uf._chebyshev(bind("sub", bind("mul", c(x, 0.5), a), c(x, 2.0)), _I1E_A), a)
    hi = bind("div", _uf._chebyshev(bind("sub", bind("div", c(x, 32.0), a_hi), c(x, 2.0)), _I1E_B),
              bind("sqrt", a_hi))
    r = _uf._sel(le8, lo, hi)
    return _uf._sel(bind("lt", x, c(x, 0)), bind("neg", r), r)


def bessel_i1e(x):
    """jax.lax.bessel_i1e: exp(-|x|) I1(x) (Cephes' i1e Chebyshev fits)."""
    a = _operand(x, "a floating-point operand", _FLOATS, "bessel_i1e")
    return _uf.weak_result(_f32_path(_i1e_body)(a), x)
