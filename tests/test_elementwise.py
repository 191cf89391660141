"""Elementwise primitives (cpp/podlet/prims/elementwise.cc).

Every primitive goes through prim_check.check_prim: forward against a NumPy float64
reference at float32, bfloat16 and float64, jit == eager bitwise, and the VJP against
float64 central finite differences. On top of that: broadcasting (including the merged
loop nests and the scalar / row fast paths), special values (inf, NaN, -0.0, denormals),
the f32 approximations' accuracy in ulps over wide sweeps, erf_inv in the far tails,
XLA integer semantics (wrap-around, division by zero, out-of-range shifts), conversions
bit-exact against ml_dtypes and jax, jax's derivative conventions at ties and kinks, thread-count
determinism, FLOP counts and the error messages.
"""
import ml_dtypes
import mpmath
import numpy as np
import pytest
import scipy.special

import podlet
import prim_check
from prim_check import check_prim
from podlet._core import Array, Graph
from podlet._src.core import bind
from podlet import _core

# np.ascontiguousarray turns 0-d arrays into shape (1,), and prim_check.bits cannot view a
# 0-d array as bytes; scalar-broadcast cases need both. (Same patch as test_structural;
# both switch themselves off once prim_check handles 0-d values.)
if prim_check.as_podlet(np.float32(0)).shape != ():
    prim_check.as_podlet = lambda x: Array.from_numpy(np.array(x, order="C"), copy=True)
try:
    prim_check.bits(np.float64(0))
except ValueError:
    prim_check.bits = lambda x: np.asarray(x).reshape(-1).view(np.uint8)

BF16 = ml_dtypes.bfloat16
FLOATS = [np.float32, BF16, np.float64]
INTS = [np.int32, np.uint32, np.uint8]


def is_float(dtype):
    return any(dtype is f for f in FLOATS)


def rand(shape, dtype, lo=-2.0, hi=2.0, seed=0):
    return np.random.default_rng(seed).uniform(lo, hi, size=shape).astype(dtype)


def ap(prim, *args, **attrs):
    """Eager application on exact podlet copies of NumPy arrays (no dtype canonicalisation)."""
    return np.asarray(bind(prim, *[prim_check.as_podlet(np.asarray(a)) for a in args], **attrs))


def vjp(prim, args, ct, **attrs):
    """(output, cotangents of all args) through podlet.vjp."""
    out, f = podlet.vjp(lambda *xs: bind(prim, *xs, **attrs), *[prim_check.as_podlet(a) for a in args])
    return np.asarray(out), [np.asarray(g) for g in f(prim_check.as_podlet(np.asarray(ct)))]


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(prim_check.bits(a), prim_check.bits(b))


# =====================================================================================
# unary float primitives
# =====================================================================================
def _round_afz(x):
    return np.copysign(np.floor(np.abs(x) + 0.5), x)


UNARY = {  # name: (float64 reference, input range, differentiable)
    "exp": (np.exp, (-5, 5), True),
    "log": (np.log, (0.1, 10), True),
    "log1p": (np.log1p, (-0.5, 5), True),
    "expm1": (np.expm1, (-3, 3), True),
    "tanh": (np.tanh, (-4, 4), True),
    "logistic": (scipy.special.expit, (-8, 8), True),
    "sqrt": (np.sqrt, (0.1, 10), True),
    "rsqrt": (lambda x: 1 / np.sqrt(x), (0.1, 10), True),
    "erf": (scipy.special.erf, (-3, 3), True),
    "erf_inv": (lambda x: np.copysign(scipy.special.erfinv(x), x), (-0.95, 0.95), True),  # keeps -0.0
    "sin": (np.sin, (-5, 5), True),
    "cos": (np.cos, (-5, 5), True),
    "floor": (np.floor, (-5, 5), False),
    "ceil": (np.ceil, (-5, 5), False),
}


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", list(UNARY))
def test_unary_float(name, dtype):
    ref, (lo, hi), diff = UNARY[name]
    for i, shape in enumerate([(), (7,), (3, 4, 5)]):
        x = rand(shape, dtype, lo, hi, seed=i)
        grad = (0,) if diff and dtype == np.float64 and shape else ()
        check_prim(name, [x], ref=ref, grad_argnums=grad)


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("method", [0, 1])
def test_round(method, dtype):
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, -0.49999997, 0.3, -0.3, 3.7, -3.7,
                  8388607.5, -8388607.5, 8388608.0, 16777215.0, 1e10, -1e10, 0.0, -0.0], np.float64).astype(dtype)
    ref = _round_afz if method == 0 else np.round
    out = check_prim("round", [x], {"rounding_method": method}, ref=ref)
    np.testing.assert_array_equal(np.signbit(out.astype(np.float64)), np.signbit(ref(x.astype(np.float64))))
    x = rand((4, 5), dtype, -10, 10)
    check_prim("round", [x], {"rounding_method": method}, ref=ref)


def test_round_default_is_away_from_zero_and_rejects_other_methods():
    x = np.array([0.5, 2.5, -2.5], np.float32)
    np.testing.assert_array_equal(ap("round", x), [1.0, 3.0, -3.0])
    with pytest.raises(podlet.PodletError, match="rounding_method"):
        ap("round", x, rounding_method=2)


SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-39, 1.0, -1.0, 0.5, -0.5, 2.5,
                    -2.5, 1e-8, -1e-8, 30.0, -30.0, 100.0, -100.0, 1e30, -1e30, 3e38, -3e38])
SPECIAL_REFS = dict(UNARY, round0=(_round_afz, None, False), round1=(np.round, None, False))


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", list(SPECIAL_REFS))
def test_unary_float_special_values(name, dtype):
    """inf, NaN, signed zeros, denormals, huge values: same as NumPy float64 (NaN where
    NumPy gives NaN, the sign of zero results included)."""
    x = SPECIAL.astype(dtype)
    prim, attrs = (("round", {"rounding_method": int(name[-1])}) if name.startswith("round") else (name, {}))
    got = ap(prim, x, **attrs).astype(np.float64)
    with np.errstate(all="ignore"):
        want = SPECIAL_REFS[name][0](x.astype(np.float64))
    want = want.astype(dtype).astype(np.float64)  # the reference rounded to the output dtype
    r, a = prim_check.TOL[np.dtype(dtype).name]
    np.testing.assert_allclose(got, want, rtol=r, atol=0, equal_nan=True, err_msg=name)
    zero = want == 0
    np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(want[zero]), err_msg=f"{name}: sign of zero")


# The f32 kernels use their own approximations (vectorisable, libm-independent): max error
# in ulps of float32 over dense sweeps, against float64. tanh and erf are jax's (XLA:CPU's)
# formulas, with jax's error (test_tanh_and_erf_have_jaxs_bits_on_every_isa).
ULP_SWEEPS = [
    ("exp", np.exp, [(-103.9, -87.0), (-87.0, 88.72), (-1, 1)], 1.0),
    ("log", np.log, [(1e-45, 1e-37), (0.5, 2), (1e-30, 3e38)], 1.0),
    ("tanh", np.tanh, [(-10, 10), (-0.7, 0.7)], 4.7),
    ("logistic", scipy.special.expit, [(-100, 30), (-5, 5)], 2.5),
    ("erf", scipy.special.erf, [(-4.5, 4.5), (-0.1, 0.1)], 5.5),
    # Giles' approximation itself is good to ~2.6 ulp (XLA uses the same one, in f32 arithmetic)
    ("erf_inv", scipy.special.erfinv, [(-0.99999994, 0.99999994), (-0.01, 0.01), (0.999, 0.99999994)], 3.0),
]


@pytest.mark.parametrize("name,ref,ranges,max_ulp", ULP_SWEEPS, ids=[s[0] for s in ULP_SWEEPS])
def test_float32_accuracy_in_ulps(name, ref, ranges, max_ulp):
    for k, (lo, hi) in enumerate(ranges):
        log_spaced = lo > 0 and hi / lo > 1e3
        x = (np.geomspace(lo, hi, 100001) if log_spaced else np.linspace(lo, hi, 100001)).astype(np.float32)
        x = np.concatenate([x, np.random.default_rng(k).uniform(lo, hi, 50000).astype(np.float32)])
        got = ap(name, x).astype(np.float64)
        want = ref(x.astype(np.float64))
        ulp = np.spacing(np.abs(want.astype(np.float32))).astype(np.float64)
        err = np.abs(got - want) / ulp
        i = int(np.argmax(err))
        assert err[i] <= max_ulp, f"{name}: {err[i]:.2f} ulp at x={x[i]!r} (got {got[i]!r}, want {want[i]!r})"


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16], ids=["f32", "bf16"])
def test_tanh_and_erf_have_jaxs_bits_on_every_isa(dtype):
    # Both are XLA:CPU's f32 formulas with FMAs in its order: jax.numpy.tanh's and
    # jax.lax.erf's bits on CPU, eager (the ISA copies of kernels/unary_math.h) and jitted
    # (the fused JIT, or the fused interpreter's ISA builds), on every ISA the host runs.
    # One exception: XLA:CPU flushes erf's subnormal inputs to zero, podlet returns
    # 2/sqrt(pi) x as for any small x.
    import jax
    from podlet import _core
    rng = np.random.default_rng(5)
    x = np.concatenate([np.linspace(-10, 10, 400001), rng.standard_normal(200000) * 3, np.geomspace(1e-37, 1e-2, 20000),
                        [np.inf, 0.0, 3.832506, 3.8325071, 7.998811, 7.9988122, 0.0004, 0.00039999]])
    x = np.concatenate([x, -x, [np.nan]]).astype(np.float32)
    sub = np.geomspace(1e-45, 1e-38, 2000).astype(np.float32)
    x, sub = x.astype(dtype), np.concatenate([sub, -sub]).astype(dtype)
    with jax.default_device(jax.devices("cpu")[0]):
        want = {"tanh": np.asarray(jax.numpy.tanh(x)), "erf": np.asarray(jax.lax.erf(x))}
    isa = _core.active_isa()
    try:
        for i in _core.cpu_info()["available_isas"]:
            _core.set_isa(i)
            for name, fn in (("tanh", podlet.numpy.tanh), ("erf", podlet.lax.erf)):
                for how, f in (("eager", fn), ("jit", podlet.jit(lambda t: fn(t) * 1))):
                    got = np.asarray(f(x))
                    both_nan = np.isnan(got.astype(np.float32)) & np.isnan(want[name].astype(np.float32))
                    bad = (got.view(np.uint16 if dtype != np.float32 else np.uint32)
                           != want[name].view(np.uint16 if dtype != np.float32 else np.uint32)) & ~both_nan
                    assert not bad.any(), f"{i} {how} {name}: {bad.sum()} differ, first at x={x[bad][0]!r}"
                    assert np.isnan(got[-1]), f"{i} {how} {name}(nan)"
                s = np.asarray(fn(sub)).astype(np.float64)
                want_s = np.tanh(sub.astype(np.float64)) if name == "tanh" else 2 / np.sqrt(np.pi) * sub.astype(np.float64)
                np.testing.assert_allclose(s, want_s.astype(dtype).astype(np.float64), rtol=0, atol=1.5e-45)
    finally:
        _core.set_isa(isa)


def test_erf_inv_float64_accuracy():
    # a sweep against scipy, plus the far tails against mpmath at 40 digits
    x = np.concatenate([np.linspace(-0.9999, 0.9999, 20001), -np.logspace(-300, -1, 300), np.logspace(-300, -1, 300)])
    np.testing.assert_allclose(ap("erf_inv", x), scipy.special.erfinv(x), rtol=2e-15, atol=0)
    tails = [0.5, 0.75, 0.7500000001, 0.9, 0.99, 1 - 1e-5, 1 - 1e-8, 1 - 1e-10, 1 - 1e-12, 1 - 1e-14,
             1 - 1e-15, 1 - 2.2e-16, np.nextafter(1.0, 0.0), 1e-20, 1e-300]
    tails = np.array(tails + [-t for t in tails])
    got = ap("erf_inv", tails)
    with mpmath.workdps(40):
        want = np.array([float(mpmath.erfinv(mpmath.mpf(float(t)))) for t in tails])
    np.testing.assert_allclose(got, want, rtol=4e-16, atol=0)
    out = ap("erf_inv", np.array([1.0, -1.0, 1.5, -1.0000001, np.nan, 0.0, -0.0]))
    assert out[0] == np.inf and out[1] == -np.inf and np.isnan(out[2:5]).all()
    assert out[5] == 0 and not np.signbit(out[5]) and np.signbit(out[6])


def test_erf_inv_float32_edges():
    x = np.array([1.0, -1.0, 1.0000001, np.nan, 0.0, -0.0, np.nextafter(np.float32(1), np.float32(0))], np.float32)
    out = ap("erf_inv", x)
    assert out[0] == np.inf and out[1] == -np.inf and np.isnan(out[2]) and np.isnan(out[3])
    assert out[4] == 0 and np.signbit(out[5])
    np.testing.assert_allclose(out[6], scipy.special.erfinv(np.float64(x[6])), rtol=3e-7)


# =====================================================================================
# unary primitives on any dtype
# =====================================================================================
def _int_values(dtype):
    info = np.iinfo(dtype)
    vals = [0, 1, 2, 7, 100, info.max, info.max - 1] + ([info.min, info.min + 1, -1, -7] if info.min < 0 else [])
    return np.array(vals, dtype=dtype)


@pytest.mark.parametrize("dtype", INTS, ids=lambda d: np.dtype(d).name)
def test_neg_abs_sign_not_on_integers(dtype):
    x = _int_values(dtype)
    with np.errstate(over="ignore"):
        check_prim("neg", [x], ref=np.negative)   # wraps: -INT_MIN == INT_MIN, -1u == max
        check_prim("sign", [x], ref=np.sign)
        check_prim("not", [x], ref=np.invert)
        if dtype == np.int32:
            check_prim("abs", [x], ref=np.abs)    # abs(INT_MIN) == INT_MIN, as in XLA and NumPy
        else:
            check_prim("abs", [x], ref=lambda v: v)


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_neg_abs_sign_on_floats(dtype):
    x = rand((3, 5), dtype, -3, 3)
    check_prim("neg", [x], ref=np.negative, grad_argnums=(0,) if dtype == np.float64 else ())
    check_prim("abs", [x], ref=np.abs, grad_argnums=(0,) if dtype == np.float64 else ())
    check_prim("sign", [x], ref=np.sign)
    s = SPECIAL.astype(dtype)
    sign = lambda v: np.where(v == 0, v, np.sign(v))  # jax keeps the sign of zero: sign(-0.0) == -0.0
    for prim, ref in [("neg", np.negative), ("abs", np.abs), ("sign", sign)]:
        got, want = ap(prim, s).astype(np.float64), ref(s.astype(np.float64))
        np.testing.assert_array_equal(got, want.astype(dtype).astype(np.float64), err_msg=prim)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=prim)  # -0.0, NaN signs too


def test_not_bool_and_is_finite():
    check_prim("not", [np.array([True, False, True])], ref=np.logical_not)
    for dtype in FLOATS:
        x = SPECIAL.astype(dtype)
        out = check_prim("is_finite", [x], ref=np.isfinite)
        assert out.dtype == np.bool_


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_integer_pow_float(dtype):
    for y in [-3, -2, -1, 0, 1, 2, 3, 5, 8, 13]:
        x = rand((2, 5), dtype, 0.5, 1.6, seed=y + 10) * np.where(np.arange(10).reshape(2, 5) % 2, 1, -1).astype(dtype)
        check_prim("integer_pow", [x], {"y": y}, ref=lambda v: v ** float(y),
                   grad_argnums=(0,) if dtype == np.float64 else ())


@pytest.mark.parametrize("dtype", INTS, ids=lambda d: np.dtype(d).name)
def test_integer_pow_int_wraps(dtype):
    x = _int_values(dtype)
    for y in [0, 1, 2, 3, 7]:
        with np.errstate(over="ignore"):
            check_prim("integer_pow", [x], {"y": y}, ref=lambda v: np.power(v, dtype(y)).astype(dtype))
    with pytest.raises(podlet.DTypeError, match="negative power"):
        ap("integer_pow", x, y=-1)


# =====================================================================================
# binary arithmetic
# =====================================================================================
BROADCASTS = [((2, 3), (2, 3)), ((3, 1), (1, 4)), ((), (2, 3)), ((2, 3), ()), ((4,), (2, 3, 4)),
              ((2, 1, 4), (3, 1)), ((2, 3, 4, 5), (1, 3, 1, 5)), ((5, 1, 1), (1, 4, 3))]

BINARY = {  # name: (float64 reference, x range, y range)
    "add": (np.add, (-2, 2), (-2, 2)),
    "sub": (np.subtract, (-2, 2), (-2, 2)),
    "mul": (np.multiply, (-2, 2), (-2, 2)),
    "div": (np.divide, (-2, 2), (0.5, 2)),
    "pow": (np.power, (0.5, 2), (-2, 2)),
    "max": (np.maximum, (-2, 2), (-2, 2)),
    "min": (np.minimum, (-2, 2), (-2, 2)),
    "rem": (np.fmod, (-5, 5), (0.7, 2)),
    "atan2": (np.arctan2, (-2, 2), (-2, 2)),
}


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", list(BINARY))
def test_binary_float(name, dtype):
    ref, xr, yr = BINARY[name]
    for i, (sx, sy) in enumerate(BROADCASTS):
        x, y = rand(sx, dtype, *xr, seed=2 * i), rand(sy, dtype, *yr, seed=2 * i + 1)
        if name == "div":
            y = y * np.where(rand(sy, np.float64, seed=9) > 0, 1, -1).astype(dtype)
        grad = (0, 1) if dtype == np.float64 else ()
        check_prim(name, [x, y], ref=ref, grad_argnums=grad)


def test_binary_fast_paths_on_large_arrays():
    """Same shape, scalar operand, row and column broadcasts, merged dims; several chunks."""
    x = rand((300, 257), np.float32, seed=1)
    for y in [rand((300, 257), np.float32, seed=2), np.float32(1.5), rand((257,), np.float32, seed=3),
              rand((300, 1), np.float32, seed=4), rand((1, 1), np.float32, seed=5)]:
        for name in ["add", "mul", "max", "div"]:
            want = BINARY[name][0](x.astype(np.float64), np.asarray(y, np.float64))
            np.testing.assert_allclose(ap(name, x, y), want, rtol=2e-7)
            np.testing.assert_allclose(ap(name, y, x), BINARY[name][0](np.asarray(y, np.float64), x.astype(np.float64)), rtol=2e-7)


def test_broadcast_loop_nests_exact_on_ints():
    cases = [((2, 3, 4, 5), (1, 3, 1, 5)), ((5, 1, 3), (1, 4, 1)), ((1, 6, 1, 2), (3, 1, 4, 1)),
             ((7, 1), (7, 9)), ((3, 4, 1, 1, 5), (4, 6, 1, 5)), ((0, 3), (1, 3)), ((2, 0), (2, 1)), ((), ())]
    for sx, sy in cases:
        x = np.arange(int(np.prod(sx)), dtype=np.int32).reshape(sx) * 7 - 50
        y = np.arange(int(np.prod(sy)), dtype=np.int32).reshape(sy) * 3 + 1
        out = ap("add", x, y)
        assert out.shape == np.broadcast_shapes(sx, sy)
        np.testing.assert_array_equal(out, x + y)
        np.testing.assert_array_equal(ap("mul", x, y), x * y)
        np.testing.assert_array_equal(ap("lt", x, y), x < y)


@pytest.mark.parametrize("dtype", INTS, ids=lambda d: np.dtype(d).name)
def test_integer_add_sub_mul_wrap(dtype):
    x = _int_values(dtype)
    y = np.roll(x, 3)
    with np.errstate(over="ignore"):
        for name, ref in [("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("max", np.maximum),
                          ("min", np.minimum)]:
            check_prim(name, [x, y], ref=ref)
            check_prim(name, [x[:, None], y[None, :]], ref=ref)


def _xla_div_rem(x, y, dtype):
    """XLA integer semantics: truncating division, x / 0 = -1 (all ones), x % 0 = x,
    INT_MIN / -1 = INT_MIN, INT_MIN % -1 = 0."""
    info = np.iinfo(dtype)
    q, r = [], []
    for a, b in zip(x.tolist(), y.tolist()):
        if b == 0:
            q.append(-1 if info.min < 0 else info.max); r.append(a)
        elif a == info.min and b == -1 and info.min < 0:
            q.append(info.min); r.append(0)
        else:
            t = abs(a) // abs(b) * (1 if (a >= 0) == (b > 0) else -1)
            q.append(t); r.append(a - t * b)
    return np.array(q).astype(dtype), np.array(r).astype(dtype)


@pytest.mark.parametrize("dtype", INTS, ids=lambda d: np.dtype(d).name)
def test_integer_div_rem_xla_semantics(dtype):
    v = _int_values(dtype)
    x, y = np.repeat(v, len(v)), np.tile(v, len(v))
    q, r = _xla_div_rem(x, y, dtype)
    check_prim("div", [x, y], ref=lambda a, b: q)
    check_prim("rem", [x, y], ref=lambda a, b: r)
    # the values jax.lax gives on CPU
    if dtype == np.int32:
        np.testing.assert_array_equal(ap("div", np.int32([-7, 7, -2**31]), np.int32([2, 0, -1])), [-3, -1, -2**31])
        np.testing.assert_array_equal(ap("rem", np.int32([-7, 7, -2**31]), np.int32([2, 0, -1])), [-1, 7, 0])
    if dtype == np.uint32:
        np.testing.assert_array_equal(ap("div", np.uint32([7]), np.uint32([0])), [4294967295])


def test_float_rem_has_the_sign_of_the_dividend():
    x = np.array([5.5, -5.5, 5.5, -5.5, 0.0, -0.0, 1.0, np.inf], np.float32)
    y = np.array([2.0, 2.0, -2.0, -2.0, 3.0, 3.0, 0.0, 1.0], np.float32)
    with np.errstate(invalid="ignore"):
        want = np.fmod(x, y)
    got = ap("rem", x, y)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_max_min_propagate_nan():
    x = np.array([np.nan, 1.0, 2.0, np.nan, -0.0], np.float32)
    y = np.array([0.0, np.nan, 1.0, np.nan, 3.0], np.float32)
    for dtype in FLOATS:
        np.testing.assert_array_equal(ap("max", x.astype(dtype), y.astype(dtype)).astype(np.float32), np.maximum(x, y))
        np.testing.assert_array_equal(ap("min", x.astype(dtype), y.astype(dtype)).astype(np.float32), np.minimum(x, y))


def test_bool_max_min():
    a, b = np.array([True, True, False, False]), np.array([True, False, True, False])
    check_prim("max", [a, b], ref=np.maximum)
    check_prim("min", [a, b], ref=np.minimum)


# =====================================================================================
# bitwise, logical, shifts
# =====================================================================================
@pytest.mark.parametrize("dtype", INTS + [np.bool_], ids=lambda d: np.dtype(d).name)
def test_and_or_xor(dtype):
    if dtype == np.bool_:
        x = np.array([True, True, False, False])
        y = np.array([True, False, True, False])
    else:
        x = _int_values(dtype)
        y = np.roll(x, 2)
    for name, ref in [("and", np.bitwise_and), ("or", np.bitwise_or), ("xor", np.bitwise_xor)]:
        check_prim(name, [x, y], ref=ref)
        check_prim(name, [x[:, None], y[None, :]], ref=ref)


def _xla_shift(kind, x, s, dtype):
    bits = np.dtype(dtype).itemsize * 8
    mask = (1 << bits) - 1
    signed = np.iinfo(dtype).min < 0
    out = []
    for a, b in zip(x.tolist(), s.tolist()):
        au, su = a & mask, b & mask                    # the shift amount is read as unsigned
        if kind == "shift_left":
            r = 0 if su >= bits else (au << su) & mask
        elif kind == "shift_right_logical":
            r = 0 if su >= bits else au >> su
        else:                                          # arithmetic: the bits read as signed
            av = au - (1 << bits) if au >> (bits - 1) else au
            r = (av >> min(su, bits - 1)) & mask
        if signed and r >> (bits - 1):
            r -= 1 << bits
        out.append(r)
    return np.array(out).astype(dtype)


@pytest.mark.parametrize("dtype", INTS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("kind", ["shift_left", "shift_right_logical", "shift_right_arithmetic"])
def test_shifts_xla_semantics(kind, dtype):
    vals = _int_values(dtype).tolist() + ([0x80000000, 0xdeadbeef] if dtype == np.uint32 else []) + \
        ([200, 0x81] if dtype == np.uint8 else [])
    amounts = [0, 1, 3, 7, 8, 9, 31, 32, 33, 255] + ([-1, -32] if dtype == np.int32 else [])
    x = np.array(vals).astype(dtype)
    s = np.array([a & np.iinfo(dtype).max if np.iinfo(dtype).min == 0 else a for a in amounts]).astype(dtype)
    xx, ss = np.repeat(x, len(s)), np.tile(s, len(x))
    want = _xla_shift(kind, xx, ss, dtype)
    check_prim(kind, [xx, ss], ref=lambda a, b: want)
    check_prim(kind, [x[:, None], s[None, :]], ref=lambda a, b: want.reshape(len(x), len(s)))


def test_shift_values_from_jax():
    np.testing.assert_array_equal(ap("shift_right_arithmetic", np.uint8([200]), np.uint8([3])), [249])
    np.testing.assert_array_equal(ap("shift_right_arithmetic", np.uint32([2**31 + 8]), np.uint32([3])), [4026531841])
    np.testing.assert_array_equal(ap("shift_left", np.int32([1]), np.int32([33])), [0])
    np.testing.assert_array_equal(ap("shift_right_logical", np.int32([-8]), np.int32([40])), [0])
    np.testing.assert_array_equal(ap("shift_right_arithmetic", np.int32([-8, 8]), np.int32([40, -1])), [-1, 0])


# =====================================================================================
# comparisons
# =====================================================================================
COMPARES = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
            "ge": np.greater_equal}


@pytest.mark.parametrize("dtype", FLOATS + INTS + [np.bool_], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", list(COMPARES))
def test_compare(name, dtype):
    if dtype == np.bool_:
        x, y = np.array([True, True, False, False]), np.array([True, False, True, False])
    elif is_float(dtype):
        x = np.array([0.0, -0.0, 1.0, np.nan, np.inf, -np.inf, 2.5, -1.0]).astype(dtype)
        y = np.array([-0.0, 0.0, np.nan, np.nan, np.inf, 1.0, 2.5, -2.0]).astype(dtype)
    else:
        x = _int_values(dtype)
        y = np.roll(x, 1)
    out = check_prim(name, [x, y], ref=COMPARES[name])
    assert out.dtype == np.bool_
    check_prim(name, [x[:, None], y[None, :]], ref=COMPARES[name])
    check_prim(name, [x, x[2]], ref=COMPARES[name])


# =====================================================================================
# select, clamp
# =====================================================================================
@pytest.mark.parametrize("dtype", FLOATS + INTS + [np.bool_], ids=lambda d: np.dtype(d).name)
def test_select(dtype):
    cases = [((3, 4), (3, 4), (3, 4)), ((3, 1), (1, 4), ()), ((), (2, 3), (2, 3)), ((4,), (3, 4), (3, 1)),
             ((2, 1, 5), (1, 3, 1), (5,))]
    for i, (sp, st, sf) in enumerate(cases):
        p = rand(sp, np.float64, seed=i) > 0
        if dtype == np.bool_:
            a, b = rand(st, np.float64, seed=i + 1) > 0, rand(sf, np.float64, seed=i + 2) > 0
        else:
            a, b = rand(st, np.float64, 0, 50, seed=i + 1).astype(dtype), rand(sf, np.float64, 0, 50, seed=i + 2).astype(dtype)
        grad = (1, 2) if dtype == np.float64 else ()
        check_prim("select", [p, a, b], ref=np.where, grad_argnums=grad)
    big = rand((100001,), np.float64, seed=3) > 0
    x = rand((100001,), np.float32, seed=4)
    np.testing.assert_array_equal(ap("select", big, x, -x), np.where(big, x, -x))


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=lambda d: np.dtype(d).name)
def test_clamp(dtype):
    ref = lambda lo, x, hi: np.minimum(np.maximum(x, lo), hi)
    if is_float(dtype):
        x = rand((4, 5), dtype, -3, 3)
        lo, hi = np.array(-1.0, dtype), np.array(1.5, dtype)
        los, his = rand((4, 5), dtype, -2, 0, seed=1), rand((5,), dtype, 0.2, 2, seed=2)
    else:
        x = (np.arange(20).reshape(4, 5) * 13 % 200).astype(dtype)
        lo, hi = np.array(30, dtype), np.array(150, dtype)
        los, his = (np.arange(20).reshape(4, 5) * 3).astype(dtype), (np.arange(5) * 20 + 100).astype(dtype)
    grad = (0, 1, 2) if dtype == np.float64 else ()
    check_prim("clamp", [lo, x, hi], ref=ref, grad_argnums=grad)
    check_prim("clamp", [los, x, his], ref=ref, grad_argnums=grad)
    check_prim("clamp", [hi, x, lo], ref=ref)  # lo > hi: hi everywhere, like XLA


def test_clamp_nan_and_jax_gradient_rule():
    out = ap("clamp", np.float32(0), np.array([np.nan, -1, 0.5, 2], np.float32), np.float32(1))
    np.testing.assert_array_equal(out, [np.nan, 0, 0.5, 1])
    # jax: lo gets g where lo > x (and lo < hi); x where lo < x < hi; hi where hi < x;
    # nobody at x == lo or x == hi.
    x = np.array([-2.0, 0.0, 0.5, 1.0, 3.0])
    _, (glo, gx, ghi) = vjp("clamp", [np.float64(0), x, np.float64(1)], np.ones(5))
    assert glo == 1.0 and ghi == 1.0
    np.testing.assert_array_equal(gx, [0, 0, 1, 0, 0])


# =====================================================================================
# conversions
# =====================================================================================
def _bits_f32(*u):
    return np.array(u, np.uint32).view(np.float32)


TRICKY_F32 = np.concatenate([
    _bits_f32(0x3f808000, 0x3f818000, 0x3f808001, 0x3f80ffff, 0x3f817fff, 0xbf808000, 0xbf818000,  # ties / near ties
              0x7f7fffff, 0xff7fffff, 0x7f7f8000, 0x7f7f7fff,                                   # near overflow
              0x00000001, 0x00008000, 0x00018000, 0x00010000, 0x007fffff, 0x80008000, 0x80018001,  # denormals
              0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000, 0x7f800001, 0x7fa00000, 0xffa00000,  # inf, NaNs
              0x7fbfffff, 0xff812345, 0x7fffffff, 0x00000000, 0x80000000),
    np.random.default_rng(0).standard_normal(1000).astype(np.float32),
    np.random.default_rng(1).integers(0, 2**32, 1000, dtype=np.uint64).astype(np.uint32).view(np.float32),
])


def test_convert_f32_to_bf16_bits_match_ml_dtypes():
    """Round to nearest even; NaN -> canonical quiet NaN with its sign (as ml_dtypes and XLA)."""
    got = ap("convert_element_type", TRICKY_F32, new_dtype="bfloat16")
    with np.errstate(invalid="ignore"):
        want = TRICKY_F32.astype(BF16)
    bad = np.nonzero(got.view(np.uint16) != want.view(np.uint16))[0]
    assert bad.size == 0, [(hex(TRICKY_F32[i:i + 1].view(np.uint32)[0]), hex(got.view(np.uint16)[i]),
                            hex(want.view(np.uint16)[i])) for i in bad[:5]]


@pytest.mark.parametrize("n", [1, 15, 16, 33, 70_001, 300_017])
def test_convert_f32_bf16_avx512_loops_match_the_scalar_loop(n):
    """The AVX-512 float32 <-> bfloat16 loops (kernels/convert.h) against the baseline
    loop (PODLET_ISA=ref) and ml_dtypes: tricky words at every lane and chunk edge, tails
    of every length, and the fast loops must have run."""
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n).astype(np.float32)
    x[rng.integers(0, n, min(n, 64))] = rng.choice(TRICKY_F32[:30], min(n, 64))
    x[-min(n, 30):] = TRICKY_F32[:min(n, 30)]  # the tail's lanes too
    with np.errstate(invalid="ignore"):
        want = x.astype(BF16)
    isa = _core.cpu_info()["active_isa"]
    try:
        before = _core.convert_fast_calls()
        down = ap("convert_element_type", x, new_dtype="bfloat16")
        up = ap("convert_element_type", want, new_dtype="float32")
        fast = _core.convert_fast_calls() - before
        _core.set_isa("ref")
        down_ref = ap("convert_element_type", x, new_dtype="bfloat16")
        up_ref = ap("convert_element_type", want, new_dtype="float32")
    finally:
        _core.set_isa(isa)
    np.testing.assert_array_equal(down.view(np.uint16), want.view(np.uint16))
    np.testing.assert_array_equal(down_ref.view(np.uint16), want.view(np.uint16))
    np.testing.assert_array_equal(up.view(np.uint32), want.astype(np.float32).view(np.uint32))
    np.testing.assert_array_equal(up_ref.view(np.uint32), up.view(np.uint32))
    assert fast >= (2 if isa in ("avx512", "avx512bf16", "amx") else 0)


@pytest.mark.parametrize("src", [np.float64, np.int32, np.uint32, np.uint8, np.bool_], ids=lambda d: np.dtype(d).name)
def test_convert_to_bf16_has_jaxs_bits(src):
    # XLA:CPU converts float64 and 32-bit integers to bf16 through float32 (two roundings:
    # 1 + 2**-8 + 2**-30 -> 1.0, 2**24 + 2**16 + 1 -> 2**24), and so does podlet. Host-side
    # ml_dtypes did the same up to 0.5; 0.7 rounds once (-> 1 + 2**-7), as numpy arrays
    # converted before they reach jax or podlet (asarray(x, dtype=bfloat16)) do in both.
    import jax
    if src == np.float64:
        x = np.concatenate([TRICKY_F32.astype(np.float64), [1.0 + 2**-8 + 2**-30, -(1.0 + 2**-8 + 2**-30), 1e300, -1e-300]])
    elif src == np.bool_:
        x = np.array([True, False])
    else:
        info = np.iinfo(src)
        x = np.array([0, 1, info.max, info.max - 1, 2**24 + 2**16 + 1 if info.max > 2**25 else 3,
                      255, 129] + ([info.min, -(2**24 + 2**16 + 1)] if info.min < 0 else [])).astype(src)
    got = ap("convert_element_type", x, new_dtype="bfloat16")
    with np.errstate(invalid="ignore", over="ignore"):
        x32 = x.astype(np.float32)
    want = x32.astype(BF16)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    with jax.enable_x64(True), jax.default_device(jax.devices("cpu")[0]):
        oracle = np.asarray(jax.jit(lambda v: v.astype(jax.numpy.bfloat16))(x))
    # XLA:CPU flushes subnormals to zero (its f32 intermediate and its result); podlet
    # keeps them (DESIGN, Precision).
    normal = ~(((want.view(np.uint16) & 0x7F80) == 0) | ((x32 != 0) & (np.abs(x32) < 2.0**-126)))
    np.testing.assert_array_equal(got.view(np.uint16)[normal], oracle.view(np.uint16)[normal])
    if src == np.float64:  # the ties made by the first rounding went to even
        assert list(got.view(np.uint16)[-4:-2]) == [0x3F80, 0xBF80]
    elif src == np.int32:
        assert list(got.view(np.uint16)[-2:]) == [0xCF00, 0xCB80]


def test_convert_float_to_int_saturates_nan_to_zero():
    x = np.array([np.nan, 1e10, -1e10, -1.0, 300.0, 2.9, -2.9, np.inf, -np.inf, 2147483520.0, -0.5, 255.5], np.float32)
    want = {"int32": [0, 2**31 - 1, -2**31, -1, 300, 2, -2, 2**31 - 1, -2**31, 2147483520, 0, 255],
            "uint32": [0, 2**32 - 1, 0, 0, 300, 2, 0, 2**32 - 1, 0, 2147483520, 0, 255],
            "uint8": [0, 255, 0, 0, 255, 2, 0, 255, 0, 255, 0, 255]}
    for src in FLOATS:
        xs = x.astype(src)
        for d, w in want.items():
            if src == BF16 and d != "uint8":
                w = [int(v) if np.isfinite(v) else None for v in xs.astype(np.float64)]
                w = [0 if v is None and np.isnan(f) else v for v, f in zip(w, xs.astype(np.float64))]
                info = np.iinfo(d)
                w = [info.max if f >= info.max else (info.min if f <= info.min else v)
                     for v, f in zip(w, xs.astype(np.float64))]
            got = ap("convert_element_type", xs, new_dtype=d)
            assert got.dtype == np.dtype(d)
            np.testing.assert_array_equal(got, np.array(w, dtype=np.int64).astype(d), err_msg=f"{np.dtype(src).name}->{d}")
    # float64 bounds are exact
    x = np.array([2147483647.9, 2147483648.0, -2147483648.9, 4294967295.5, 4294967296.0])
    np.testing.assert_array_equal(ap("convert_element_type", x, new_dtype="int32"), [2**31 - 1, 2**31 - 1, -2**31, 2**31 - 1, 2**31 - 1])
    np.testing.assert_array_equal(ap("convert_element_type", x, new_dtype="uint32"), [2147483647, 2147483648, 0, 2**32 - 1, 2**32 - 1])


def test_convert_between_other_dtypes():
    i = np.array([-1, 300, 2**31 - 1, -2**31, 0], np.int32)
    np.testing.assert_array_equal(ap("convert_element_type", i, new_dtype="uint8"), [255, 44, 255, 0, 0])  # wraps
    np.testing.assert_array_equal(ap("convert_element_type", i, new_dtype="uint32"), i.view(np.uint32))
    np.testing.assert_array_equal(ap("convert_element_type", i, new_dtype="bool"), i != 0)
    np.testing.assert_array_equal(ap("convert_element_type", i, new_dtype="float64"), i.astype(np.float64))
    np.testing.assert_array_equal(ap("convert_element_type", i, new_dtype="float32"), i.astype(np.float32))
    f = np.array([0.0, -0.0, np.nan, 0.5, -3.0], np.float32)
    np.testing.assert_array_equal(ap("convert_element_type", f, new_dtype="bool"), [False, False, True, True, True])
    b = np.array([True, False])
    for d in ["float32", "bfloat16", "float64", "int32", "uint32", "uint8", "bool"]:
        np.testing.assert_array_equal(ap("convert_element_type", b, new_dtype=d).astype(np.float64), [1.0, 0.0])
    # bf16 -> f32 -> bf16 is exact, NaN included; f32 -> f64 -> f32 too
    bf = TRICKY_F32.astype(BF16)
    back = ap("convert_element_type", ap("convert_element_type", bf, new_dtype="float32"), new_dtype="bfloat16")
    assert same_bits(back, bf)
    assert same_bits(ap("convert_element_type", bf, new_dtype="float32"), bf.astype(np.float32))
    x64 = ap("convert_element_type", TRICKY_F32, new_dtype="float64")
    assert same_bits(x64, TRICKY_F32.astype(np.float64))
    assert same_bits(ap("convert_element_type", x64, new_dtype="float32"), x64.astype(np.float32))  # sNaNs get quieted
    x = rand((3, 4), np.float64)
    for d in FLOATS:
        check_prim("convert_element_type", [x], {"new_dtype": np.dtype(d).name}, ref=lambda v: v.astype(d),
                   grad_argnums=(0,) if d == np.float64 else ())
        # the VJP converts the cotangent back to the input dtype (prim_check's VJP check
        # feeds float64 cotangents, so narrowing conversions are checked here)
        ct = rand((3, 4), d, seed=5)
        out, (g,) = vjp("convert_element_type", [x], ct, new_dtype=np.dtype(d).name)
        assert out.dtype == np.dtype(d) and g.dtype == np.float64
        np.testing.assert_array_equal(g, ct.astype(np.float64))


def test_bitcast_convert_type():
    x = TRICKY_F32
    for d in ["int32", "uint32"]:
        out = check_prim("bitcast_convert_type", [x], {"new_dtype": d}, ref=lambda v: x.view(d))
        assert same_bits(out, x.view(d))
        assert same_bits(ap("bitcast_convert_type", out, new_dtype="float32"), x)  # NaN payloads kept
    u = np.array([1, 2**31], np.uint32)
    np.testing.assert_array_equal(ap("bitcast_convert_type", u, new_dtype="int32"), u.view(np.int32))
    assert same_bits(ap("bitcast_convert_type", TRICKY_F32.astype(BF16), new_dtype="bfloat16"), TRICKY_F32.astype(BF16))
    for src, d in [(np.float32, "uint8"), (BF16, "float32"), (np.float64, "int32"), (np.uint8, "bool")]:
        with pytest.raises(podlet.DTypeError, match="same size"):
            ap("bitcast_convert_type", np.zeros(3, src), new_dtype=d)


# =====================================================================================
# derivative conventions (jax/_src/lax/lax.py)
# =====================================================================================
def test_max_min_split_the_gradient_on_ties():
    x = np.array([1.0, 2.0, 3.0, 0.0])
    y = np.array([1.0, 1.0, 5.0, 0.0])
    ct = np.array([1.0, 2.0, 4.0, 8.0])
    _, (gx, gy) = vjp("max", [x, y], ct)
    np.testing.assert_array_equal(gx, [0.5, 2.0, 0.0, 4.0])
    np.testing.assert_array_equal(gy, [0.5, 0.0, 4.0, 4.0])
    _, (gx, gy) = vjp("min", [x, y], ct)
    np.testing.assert_array_equal(gx, [0.5, 0.0, 4.0, 4.0])
    np.testing.assert_array_equal(gy, [0.5, 2.0, 0.0, 4.0])
    # relu written as max(x, 0): jax gives 0.5 at 0; the broadcast 0 collects the rest
    _, (gx, g0) = vjp("max", [np.array([-1.0, 0.0, 2.0]), np.float64(0)], np.ones(3))
    np.testing.assert_array_equal(gx, [0.0, 0.5, 1.0])
    assert g0.shape == () and g0 == 1.5


def test_abs_sign_floor_round_gradients():
    _, (g,) = vjp("abs", [np.array([-2.0, 0.0, -0.0, 3.0])], np.ones(4))
    np.testing.assert_array_equal(g, [-1.0, 1.0, 1.0, 1.0])  # jax: select(x >= 0, g, -g), so abs'(0) = 1
    for prim, attrs in [("sign", {}), ("floor", {}), ("ceil", {}), ("round", {"rounding_method": 0})]:
        g = podlet.grad(lambda x: bind("reduce_sum", bind(prim, x, **attrs) * x, axes=[0]))(
            prim_check.as_podlet(np.array([0.3, -1.7, 2.5])))
        np.testing.assert_allclose(np.asarray(g), ap(prim, np.array([0.3, -1.7, 2.5]), **attrs), err_msg=prim)


def test_pow_gradients_at_zero():
    # d/dy uses log(x) with x == 0 replaced by 1: finite, and 0 here since 0**y == 0
    _, (gx, gy) = vjp("pow", [np.array([0.0, 2.0]), np.array([2.0, 3.0])], np.ones(2))
    np.testing.assert_allclose(gx, [0.0, 12.0])
    np.testing.assert_allclose(gy, [0.0, 8.0 * np.log(2.0)])
    _, (g,) = vjp("integer_pow", [np.array([0.0, 3.0])], np.ones(2), y=0)
    np.testing.assert_array_equal(g, [0.0, 0.0])
    _, (g,) = vjp("integer_pow", [np.array([0.0, 3.0])], np.array([2.0, 5.0]), y=1)
    np.testing.assert_array_equal(g, [2.0, 5.0])


def test_gradients_of_bfloat16_and_float32_inputs_keep_their_dtype():
    for d in [np.float32, BF16]:
        x = rand((5,), d, 0.5, 2)
        for prim in ["exp", "log", "tanh", "sqrt", "erf", "logistic"]:
            _, (g,) = vjp(prim, [x], np.ones(5, d))
            assert g.dtype == np.dtype(d)
        _, (gx, gy) = vjp("max", [x, x[:1]], np.ones(5, d))
        assert gx.dtype == np.dtype(d) and gy.shape == (1,)


def test_nondifferentiable_ops_give_zero_gradient():
    x = prim_check.as_podlet(np.array([0.5, -1.5]))
    zero = prim_check.as_podlet(np.float64(0))
    for f in [lambda v: bind("convert_element_type", bind("gt", v, zero), new_dtype="float64"),
              lambda v: bind("convert_element_type", bind("is_finite", v), new_dtype="float64")]:
        g = podlet.grad(lambda v: bind("reduce_sum", f(v) * v, axes=[0]))(x)
        np.testing.assert_array_equal(np.asarray(g), np.asarray(f(x)))


# =====================================================================================
# engine-level properties
# =====================================================================================
def test_results_do_not_depend_on_thread_count():
    x = rand((300, 257), np.float32, seed=7)
    y = rand((257,), np.float32, seed=8)
    xb = x.astype(BF16)
    runs = []
    before = _core.num_threads()
    try:
        for n in [1, 2]:
            _core.set_num_threads(n)
            runs.append([ap("add", x, y), ap("tanh", x), ap("exp", xb), ap("erf_inv", x / 2.5),
                         ap("select", x > 0, x, y), ap("clamp", np.float32(-1), x, y)])
    finally:
        _core.set_num_threads(before)
    for a, b in zip(*runs):
        assert same_bits(a, b)


def test_nan_plus_nan_keeps_its_sign_whatever_the_thread_count():
    """Which NaN a NaN + NaN returns depends on how the compiled loop orders the operands;
    it must be the same loop for any thread count (several parallel chunks here)."""
    a = np.full(120_000, np.nan, np.float32)
    runs = []
    before = _core.num_threads()
    try:
        for n in [1, 2]:
            _core.set_num_threads(n)
            runs.append([ap("add", a, -a), ap("mul", -a, a), ap("max", a, -a)])
    finally:
        _core.set_num_threads(before)
    for x, y in zip(*runs):
        assert same_bits(x, y)


def test_flop_count_is_one_per_output_element():
    g = Graph()
    a = g.add_input("float32", [3, 1])
    b = g.add_input("float32", [1, 4])
    (c, _, _), = g.add("add", [a, b])
    (d, _, _), = g.add("exp", [c])
    (e, _, _), = g.add("lt", [d, b])
    g.outputs = [e]
    assert g.flops() == 36


def test_bool_arithmetic_is_rejected():
    t = np.array([True, False])
    for prim in ["add", "sub", "mul", "div"]:
        with pytest.raises(podlet.DTypeError, match="got bool"):
            ap(prim, t, t)
    with pytest.raises(podlet.DTypeError, match="got bool"):
        ap("neg", t)


# =====================================================================================
# errors
# =====================================================================================
def test_broadcast_shape_error_names_both_shapes():
    x, y = np.zeros((3, 2), np.float32), np.zeros((4,), np.float32)
    for prim in ["add", "max", "lt", "atan2"]:
        with pytest.raises(podlet.ShapeError) as e:
            ap(prim, x, y)
        msg = str(e.value)
        assert "(3, 2)" in msg and "(4,)" in msg and "broadcast" in msg and prim in msg
    with pytest.raises(podlet.ShapeError) as e:  # at trace time too
        podlet.jit(lambda a, b: bind("mul", a, b))(prim_check.as_podlet(x), prim_check.as_podlet(y))
    assert "(3, 2)" in str(e.value) and "(4,)" in str(e.value)
    with pytest.raises(podlet.ShapeError, match=r"\(2, 5\).*\(3, 1\)|\(3, 1\).*\(2, 5\)"):
        ap("select", np.zeros((2, 5), bool), np.zeros((3, 1), np.float32), np.float32(0))


def test_dtype_errors_name_the_dtype():
    f32, i32 = np.zeros(3, np.float32), np.zeros(3, np.int32)
    with pytest.raises(podlet.DTypeError, match="float32 and int32"):
        ap("add", f32, i32)
    with pytest.raises(podlet.DTypeError, match="floating-point.*int32"):
        ap("log", i32)
    with pytest.raises(podlet.DTypeError, match="integer.*float32"):
        ap("shift_left", f32, f32)
    with pytest.raises(podlet.DTypeError, match="integer or bool.*float32"):
        ap("and", f32, f32)
    with pytest.raises(podlet.DTypeError, match="floating-point.*int32"):
        ap("pow", i32, i32)
    with pytest.raises(podlet.DTypeError, match="predicate must be bool"):
        ap("select", f32, f32, f32)
    with pytest.raises(podlet.DTypeError, match="is_finite.*floating-point"):
        ap("is_finite", i32)
