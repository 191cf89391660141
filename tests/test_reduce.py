"""Reductions: reduce_sum / max / min / prod, argmax / argmin, argsort, cumsum (and the
cumprod / cummax / cummin helpers).

Forward against NumPy float64 for every memory layout the kernel distinguishes (row,
column, middle-axis and interleaved reductions), VJP against finite differences,
jit == eager, the jax conventions (max ties share the cotangent, NaN wins argmax, stable
argsort), float32 / bfloat16 accuracy over 1e6 elements, and bit-identical results for
1 and 2 threads.
"""
import ml_dtypes
import numpy as np
import pytest

import podlet
import prim_check
from prim_check import check_prim
from podlet import _core
from podlet._core import Array
from podlet._src.core import bind

# prim_check.as_podlet turns 0-d arrays into shape (1,) and prim_check.bits cannot view
# a 0-d array as bytes; reductions to scalars need both. Each patch switches itself off
# once prim_check handles 0-d values.
if prim_check.as_podlet(np.float32(0)).shape != ():
    prim_check.as_podlet = lambda x: Array.from_numpy(np.array(x, order="C"), copy=True)
try:
    prim_check.bits(np.float64(0))
except ValueError:
    prim_check.bits = lambda x: np.asarray(x).reshape(-1).view(np.uint8)

BF16 = ml_dtypes.bfloat16
rng = np.random.default_rng(1)


def rand(shape, dtype=np.float64, lo=-2.0, hi=2.0):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(0 if dtype.kind == "u" else -20, 20, shape).astype(dtype)
    return rng.uniform(lo, hi, shape).astype(dtype)


def pa(x):
    return prim_check.as_podlet(np.asarray(x))


def run(prim, x, **attrs):
    return np.asarray(bind(prim, pa(x), **attrs))


@pytest.fixture
def restore_threads():
    n = _core.num_threads()
    yield
    _core.set_num_threads(n)


# (shape, axes) pairs covering each kernel path: rows [K,R], columns [R,K], middle
# [K,R,K], interleaved (transposed first), all, none, size-1 dims, empty dims.
LAYOUTS = [
    ((5, 7), [1]), ((5, 7), [0]), ((3, 4, 5), [1]), ((3, 4, 5), [0, 2]), ((2, 3, 4, 5), [1, 3]),
    ((3, 4, 5), [0, 1, 2]), ((3, 4, 5), []), ((3, 1, 5), [0]), ((1, 6, 1), [1]), ((4, 300), [0]),
    ((2, 0, 3), [1]), ((2, 0, 3), [0]), ((200,), [-1]), ((3, 4, 5), [-1, -3]),
]
NP = {"reduce_sum": np.sum, "reduce_max": np.max, "reduce_min": np.min, "reduce_prod": np.prod}


def np_reduce(prim, a, axes, dtype):
    axes = tuple(axes)
    if 0 in [a.shape[i] for i in axes] and prim in ("reduce_max", "reduce_min"):
        shape = [s for i, s in enumerate(a.shape) if i not in {x % a.ndim for x in axes}]
        big = np.inf if np.dtype(dtype).kind == "f" or dtype == BF16 else np.iinfo(dtype).max
        return np.full(shape, -big if prim == "reduce_max" else big)
    return NP[prim](a, axis=axes)


@pytest.mark.parametrize("prim", list(NP))
@pytest.mark.parametrize("shape,axes", LAYOUTS)
def test_reduce_layouts_float64_with_vjp(prim, shape, axes):
    x = rand(shape, lo=0.5, hi=1.5) if prim == "reduce_prod" else rand(shape)
    # Finite differences of an empty max (-inf) are NaN: no gradient check there.
    empty_max = prim in ("reduce_max", "reduce_min") and 0 in [shape[i] for i in axes]
    check_prim(prim, [x], dict(axes=axes), lambda a: np_reduce(prim, a, axes, np.float64),
               grad_argnums=() if empty_max else (0,))


@pytest.mark.parametrize("prim", list(NP))
@pytest.mark.parametrize("dtype", [np.float32, BF16, np.int32, np.uint32, np.uint8])
def test_reduce_dtypes(prim, dtype):
    for shape, axes in [((6, 9), [1]), ((6, 9), [0]), ((2, 3, 4), [0, 2]), ((3, 4, 5), [1])]:
        if prim == "reduce_prod":
            x = rand(shape, dtype, lo=0.8, hi=1.2) if np.dtype(dtype).kind == "f" or dtype == BF16 else \
                rng.integers(1, 3, shape).astype(dtype)
        else:
            x = rand(shape, dtype)
        want = np_reduce(prim, x.astype(np.float64) if dtype == BF16 else x, axes, dtype)
        if np.dtype(dtype).kind in "iu":
            want = want.astype(dtype)  # integer sums / products wrap in the operand dtype
        check_prim(prim, [x], dict(axes=axes), lambda a: want)


def test_integer_sums_wrap_around():
    x = np.array([2**31 - 1, 1, 5], np.int32)
    np.testing.assert_array_equal(run("reduce_sum", x, axes=[0]), np.int32(-2**31 + 5))
    u = np.full(300, 255, np.uint8)
    np.testing.assert_array_equal(run("reduce_sum", u, axes=[0]), np.uint8((300 * 255) % 256))
    np.testing.assert_array_equal(run("reduce_prod", np.array([2**16, 2**16 + 1], np.uint32), axes=[0]),
                                  np.uint32((2**16 * (2**16 + 1)) % 2**32))


def test_bool_max_min_are_any_all():
    x = np.array([[True, False, False], [False, False, False]])
    np.testing.assert_array_equal(run("reduce_max", x, axes=[1]), [True, False])
    np.testing.assert_array_equal(run("reduce_min", x, axes=[0]), [False, False, False])
    with pytest.raises(podlet.DTypeError, match="reduce_sum of bool is not supported: cast to int32"):
        bind("reduce_sum", pa(x), axes=[0])


def test_max_min_propagate_nan_and_empty_identities():
    x = np.array([[1.0, np.nan, 3.0], [1.0, 2.0, -np.inf]], np.float32)
    np.testing.assert_array_equal(run("reduce_max", x, axes=[1]), [np.nan, 2.0])
    np.testing.assert_array_equal(run("reduce_min", x, axes=[0]), [1.0, np.nan, -np.inf])
    e = np.zeros((0, 3), np.float32)
    np.testing.assert_array_equal(run("reduce_max", e, axes=[0]), [-np.inf] * 3)
    np.testing.assert_array_equal(run("reduce_sum", e, axes=[0]), [0.0] * 3)
    np.testing.assert_array_equal(run("reduce_prod", e, axes=[0]), [1.0] * 3)
    np.testing.assert_array_equal(run("reduce_min", np.zeros((0,), np.int32), axes=[0]), np.iinfo(np.int32).max)


def test_reduce_errors():
    x = pa(np.zeros((2, 3), np.float32))
    with pytest.raises(podlet.ShapeError, match="axis 2 is out of range for an array of rank 2"):
        bind("reduce_sum", x, axes=[2])
    with pytest.raises(podlet.ShapeError, match="axis 1 repeated"):
        bind("reduce_max", x, axes=[1, -1])


# ---- VJP conventions -------------------------------------------------------------------

def test_reduce_max_ties_share_cotangent_like_jax():
    x = pa(np.array([[1.0, 3.0, 3.0, 2.0], [5.0, 5.0, 5.0, 0.0]], np.float32))
    g = podlet.grad(lambda a: bind("reduce_sum", bind("reduce_max", a, axes=[1]), axes=[0]))(x)
    np.testing.assert_allclose(np.asarray(g), [[0, 0.5, 0.5, 0], [1 / 3, 1 / 3, 1 / 3, 0]], rtol=1e-6)
    y = pa(np.array([[1.0, 2.0, 4.0], [1.0, 3.0, 4.0]], np.float32))
    g = podlet.grad(lambda a: bind("reduce_sum", bind("reduce_min", a, axes=[0]), axes=[0]))(y)
    np.testing.assert_allclose(np.asarray(g), [[0.5, 1, 0.5], [0.5, 0, 0.5]], rtol=1e-6)


def test_reduce_prod_vjp_with_zeros():
    for x in [np.array([[2.0, 0.0, 3.0], [0.0, 0.0, 4.0]]), np.array([[1.5, -2.0, 0.0], [1.0, 2.0, 3.0]])]:
        check_prim("reduce_prod", [x], dict(axes=[1]), lambda a: a.prod(1), grad_argnums=(0,))
        check_prim("reduce_prod", [x], dict(axes=[0, 1]), lambda a: a.prod(), grad_argnums=(0,))
    g = podlet.grad(lambda a: bind("reduce_prod", a, axes=[0]))(pa(np.array([2.0, 0.0, 3.0], np.float32)))
    np.testing.assert_array_equal(np.asarray(g), [0.0, 6.0, 0.0])


# ---- accuracy and determinism ----------------------------------------------------------

def test_float32_sum_of_a_million_is_accurate():
    x = rng.uniform(0.0, 1.0, 1_000_000).astype(np.float32)
    exact = x.astype(np.float64).sum()
    got = float(run("reduce_sum", x, axes=[0]))
    naive = float(np.cumsum(x, dtype=np.float32)[-1])  # left-to-right float32 sum, for scale
    assert abs(got - exact) <= 4e-7 * exact, (got, exact)
    assert abs(got - exact) * 20 < abs(naive - exact)
    # Columns of a tall matrix go through the column path.
    m = rng.uniform(0.0, 1.0, (250_000, 4)).astype(np.float32)
    err = np.abs(run("reduce_sum", m, axes=[0]) - m.astype(np.float64).sum(0)) / m.astype(np.float64).sum(0)
    assert err.max() <= 4e-7, err


def test_bfloat16_sum_accumulates_in_float32():
    x = np.ones(1_000_000, BF16)
    assert float(run("reduce_sum", x, axes=[0]).astype(np.float64)) == float(np.float64(1e6).astype(BF16))
    y = rng.uniform(0.0, 1.0, 300_000).astype(BF16)
    exact = y.astype(np.float64).sum()
    got = float(run("reduce_sum", y, axes=[0]).astype(np.float64))
    assert abs(got - exact) <= 2**-8 * exact


REDUCE_CASES = [((1_000_003,), [0]), ((40_000, 7), [0]), ((7, 40_001), [1]), ((64, 300, 5), [1]),
                ((30, 20, 40), [0, 2]), ((257, 1000), [0])]


@pytest.mark.parametrize("shape,axes", REDUCE_CASES)
def test_reductions_bit_identical_across_thread_counts(shape, axes, restore_threads):
    x = rng.standard_normal(shape).astype(np.float32)
    xb = x.astype(BF16)
    for prim in ["reduce_sum", "reduce_max", "reduce_min", "reduce_prod"]:
        for arr in (x, xb):
            outs = []
            for t in (1, 2):
                _core.set_num_threads(t)
                outs.append(run(prim, arr, axes=axes))
            assert outs[0].tobytes() == outs[1].tobytes(), (prim, shape, axes, arr.dtype)


def test_cumsum_argsort_argmax_bit_identical_across_thread_counts(restore_threads):
    x = rng.standard_normal((300, 500)).astype(np.float32)
    for prim, attrs in [("cumsum", dict(axis=0)), ("cumsum", dict(axis=1, reverse=1)),
                        ("argmax", dict(axis=0)), ("argsort", dict(axis=0))]:
        outs = []
        for t in (1, 2):
            _core.set_num_threads(t)
            outs.append(run(prim, x, **attrs))
        assert outs[0].tobytes() == outs[1].tobytes(), prim


# ---- argmax / argmin -------------------------------------------------------------------

@pytest.mark.parametrize("prim,npf", [("argmax", np.argmax), ("argmin", np.argmin)])
@pytest.mark.parametrize("dtype", [np.float32, BF16, np.float64, np.int32, np.uint8, np.bool_])
def test_argmax_argmin(prim, npf, dtype):
    for shape, axis in [((7,), 0), ((4, 6), 1), ((4, 6), 0), ((3, 5, 300), 1), ((2, 3, 4), -1)]:
        x = rand(shape, dtype)
        if np.dtype(dtype).kind in "iuf" or dtype == BF16:
            x = np.round(x.astype(np.float64)).astype(dtype)  # plenty of ties
        got = check_prim(prim, [x], dict(axis=axis, index_dtype="int32"), lambda a: npf(a, axis=axis))
        assert got.dtype == np.int32


def test_argmax_nan_wins_and_first_tie():
    x = np.array([[1.0, np.nan, 3.0, np.nan], [2.0, 7.0, 7.0, 1.0]], np.float32)
    np.testing.assert_array_equal(run("argmax", x, axis=1, index_dtype="int32"), [1, 1])
    np.testing.assert_array_equal(run("argmin", x, axis=1, index_dtype="int32"), [1, 3])
    np.testing.assert_array_equal(run("argmax", x, axis=0, index_dtype="uint32"), np.argmax(x, 0))
    assert run("argmax", x, axis=0, index_dtype="uint32").dtype == np.uint32


def test_argmax_errors_and_no_gradient():
    with pytest.raises(podlet.ShapeError, match="along axis 0 of size 0"):
        bind("argmax", pa(np.zeros((0, 2), np.float32)), axis=0, index_dtype="int32")
    with pytest.raises(podlet.DTypeError, match="index_dtype must be int32 or uint32, got float32"):
        bind("argmax", pa(np.zeros(2, np.float32)), axis=0, index_dtype="float32")

    # argmax output is an integer constant for autodiff: the gradient flows only through x.
    def f(a):
        i = bind("argmax", a, axis=0, index_dtype="int32")
        return bind("reduce_sum", bind("mul", a, bind("convert_element_type", i, new_dtype="float32")), axes=[0])
    g = podlet.grad(f)(pa(np.array([1.0, 4.0, 2.0], np.float32)))
    np.testing.assert_array_equal(np.asarray(g), [1.0, 1.0, 1.0])


# ---- argsort ---------------------------------------------------------------------------

def np_argsort(a, axis, descending):
    if not descending:
        return np.argsort(a, axis=axis, kind="stable")
    # jnp.argsort(descending=True): reverse, stable ascending sort, reverse back.
    r = np.flip(a, axis)
    idx = np.argsort(r, axis=axis, kind="stable")
    return np.flip(a.shape[axis] - 1 - idx, axis)


@pytest.mark.parametrize("descending", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, BF16, np.float64, np.int32, np.uint8, np.bool_])
def test_argsort(dtype, descending):
    for shape, axis in [((9,), 0), ((5, 8), 1), ((6, 4, 3), 0), ((3, 4, 5), -2)]:
        x = rand(shape, dtype)
        if np.dtype(dtype).kind == "f" or dtype == BF16:
            x = np.round(x.astype(np.float64) * 2).astype(dtype)  # ties test stability
        check_prim("argsort", [x], dict(axis=axis, descending=descending),
                   lambda a: np_argsort(a, axis, descending))


def test_argsort_nan_and_signed_zero_like_jax():
    x = np.array([0.0, -0.0, np.nan, -np.nan, 1.0, -np.inf], np.float32)
    np.testing.assert_array_equal(run("argsort", x, axis=0), [5, 0, 1, 4, 2, 3])
    np.testing.assert_array_equal(run("argsort", x[[0, 1, 2, 4, 5]], axis=0, descending=1), [2, 3, 0, 1, 4])
    assert run("argsort", np.zeros((3, 0)), axis=1).shape == (3, 0)


# ---- cumulative ops --------------------------------------------------------------------

def np_cum(f, a, axis, reverse):
    if reverse:
        return np.flip(f(np.flip(a, axis), axis=axis), axis)
    return f(a, axis=axis)


@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("shape,axis", [((7,), 0), ((4, 5), 0), ((4, 5), 1), ((3, 4, 300), 1), ((2, 0, 3), 1)])
def test_cumsum_forward_and_vjp(shape, axis, reverse):
    x = rand(shape)
    check_prim("cumsum", [x], dict(axis=axis, reverse=reverse), lambda a: np_cum(np.cumsum, a, axis, reverse),
               grad_argnums=(0,))


@pytest.mark.parametrize("dtype", [np.float32, BF16, np.int32, np.uint8])
def test_cumsum_dtypes(dtype):
    x = rand((5, 40), dtype, lo=0, hi=1)
    want = np_cum(np.cumsum, x.astype(np.float64) if dtype == BF16 else x, 1, 1)
    if np.dtype(dtype).kind in "iu":
        want = want.astype(dtype)
    check_prim("cumsum", [x], dict(axis=-1, reverse=1), lambda a: want, atol=5e-2)


@pytest.mark.parametrize("prim,f", [("cumprod", np.cumprod), ("cummax", np.maximum.accumulate),
                                    ("cummin", np.minimum.accumulate)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_cumprod_cummax_cummin(prim, f, dtype):
    x = rand((4, 6), dtype, lo=0.5, hi=1.5) if prim == "cumprod" and dtype != np.int32 else rand((4, 6), dtype)
    if prim == "cumprod" and dtype == np.int32:
        x = rng.integers(-2, 3, (4, 6)).astype(np.int32)
    for axis, rev in [(0, 0), (1, 1)]:
        check_prim(prim, [x], dict(axis=axis, reverse=rev), lambda a: np_cum(f, a, axis, rev))


def test_cumulative_errors():
    with pytest.raises(podlet.ShapeError, match="rank >= 1"):
        bind("cumsum", pa(np.float32(1)), axis=0)
    with pytest.raises(podlet.DTypeError, match="cast to int32"):
        bind("cumsum", pa(np.array([True])), axis=0)
    with pytest.raises(podlet.ShapeError, match="axis -3 is out of range"):
        bind("cumsum", pa(np.zeros((2, 2))), axis=-3)


def test_flops():
    g = _core.Graph()
    x = g.add_input("float32", [10, 3])
    for prim, attrs in [("reduce_sum", dict(axes=[0])), ("reduce_max", dict(axes=[0, 1])),
                        ("cumsum", dict(axis=1)), ("argmax", dict(axis=0, index_dtype="int32"))]:
        g.add(prim, [x], attrs)
    assert g.flops() == 4 * 30


# ---- the row sum's tree, bit for bit -------------------------------------------------
def _sum_comb(a, b):
    """SumOp::comb on f32 bits: the first NaN operand wins (quieted), else the f32 sum."""
    for v in (a, b):
        if (v & 0x7FFFFFFF) > 0x7F800000:
            return v | 0x00400000
    return int(np.array([a, b], np.uint32).view(np.float32).sum(dtype=np.float32).view(np.uint32))


def _max_min_comb(is_max):
    """MaxOp / MinOp::comb on f32 bits: a if NaN, else b if NaN (both as they are), else b
    where strictly larger (smaller), a on ties (-0 / +0 keep the first)."""
    def comb(a, b):
        for v in (a, b):
            if (v & 0x7FFFFFFF) > 0x7F800000:
                return v
        fa, fb = np.array([a, b], np.uint32).view(np.float32)
        return b if (fb > fa if is_max else fb < fa) else a
    return comb


def _tree_bits(x, comb=_sum_comb, init=0):
    """A float32 row reduced as reduce_ops.h defines it, in Python: chunks of 2^14
    elements, each by NumPy's pairwise tree (8 interleaved accumulators over blocks of
    <= 128, halves at multiples of 8 above), then the chunk results by the same tree."""
    u = np.asarray(x, np.float32).view(np.uint32)

    def pairwise(p):
        n = len(p)
        if n < 8:
            a = init
            for v in p:
                a = comb(a, int(v))
            return a
        if n <= 128:
            r = [int(v) for v in p[:8]]
            i = 8
            while i + 8 <= n:
                r = [comb(r[k], int(p[i + k])) for k in range(8)]
                i += 8
            a = comb(comb(comb(r[0], r[1]), comb(r[2], r[3])), comb(comb(r[4], r[5]), comb(r[6], r[7])))
            for v in p[i:]:
                a = comb(a, int(v))
            return a
        h = n // 2
        h -= h % 8
        return comb(pairwise(p[:h]), pairwise(p[h:]))

    parts = np.array([pairwise(u[s:s + (1 << 14)]) for s in range(0, len(u), 1 << 14)], np.uint32)
    return pairwise(parts) if len(parts) > 1 else int(parts[0])


def _tree_sum_bits(x):
    return _tree_bits(x)


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_row_sum_is_numpys_tree_bit_for_bit(dtype):
    """A contiguous row sums as NumPy's pairwise tree (the 8 accumulators run as two
    4-lane vectors for f32 / bf16 rows): the same bits as np.sum up to one 2^14 chunk and
    as the Python model of the chunked tree beyond, NaN payloads included (the first NaN
    operand of each addition wins, as in elementwise add)."""
    r = np.random.default_rng(17)
    for n in [1, 7, 8, 9, 15, 16, 17, 127, 128, 129, 136, 255, 256, 1000, 16384, 16391, 40000]:
        x = (r.standard_normal(n) * 1e3).astype(dtype)
        got = np.asarray(bind("reduce_sum", prim_check.as_podlet(x), axes=[0]))
        want = np.uint32(_tree_sum_bits(x.astype(np.float32))).view(np.float32)
        if n <= 1 << 14:
            assert want.tobytes() == np.sum(x.astype(np.float32)).tobytes(), n
        assert got.tobytes() == want.astype(dtype).tobytes(), n
    # NaNs with distinct payloads in different lanes and blocks.
    for n, pos in [(64, (3, 12)), (200, (150, 9)), (300, (17, 18)), (20000, (19000, 5))]:
        x = r.standard_normal(n).astype(np.float32)
        u = x.view(np.uint32)
        u[pos[0]], u[pos[1]] = 0x7FC00123, 0xFFC00456
        got = np.asarray(bind("reduce_sum", prim_check.as_podlet(x), axes=[0]))
        assert got.view(np.uint32) == _tree_sum_bits(x), (n, pos)


@pytest.mark.parametrize("prim", ["reduce_max", "reduce_min"])
@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_row_max_min_follow_the_tree_bit_for_bit(prim, dtype):
    """Row maxima / minima run the 8 accumulators as two 4-lane vectors and combine them
    without branches: the bits of the scalar rule in the tree's order, where order shows:
    -0 / +0 ties keep the first, and the first NaN of the tree wins with its payload
    (signalling NaNs not quieted). Rows of every length class, many rows (a last axis of
    49, as Swin's), and the same rows reduced down their columns."""
    is_max = prim == "reduce_max"
    comb = _max_min_comb(is_max)
    init = int(np.array([-np.inf if is_max else np.inf], np.float32).view(np.uint32)[0])
    r = np.random.default_rng(23)
    for n in [1, 7, 8, 9, 15, 16, 17, 49, 127, 128, 129, 136, 1000, 16391, 40000]:
        x = r.standard_normal(n).astype(np.float32)
        x[r.random(n) < 0.3] = 0.0
        x = np.where(r.random(n) < 0.5, x, -x).astype(np.float32)  # -0 and +0 mixed
        if n > 20:
            u = x.view(np.uint32)
            u[n // 3], u[n // 2] = 0x7FA00123, 0xFFC00456  # a signalling and a quiet NaN
        with np.errstate(invalid="ignore"):  # bf16: the cast quiets the signalling NaN
            x = x.astype(dtype)
        got = np.asarray(bind(prim, prim_check.as_podlet(x), axes=[0]))
        want = np.uint32(_tree_bits(x.astype(np.float32), comb, init)).view(np.float32).astype(dtype)
        assert got.tobytes() == want.tobytes(), (n, got, want)
    # many rows of 49 with zeros of both signs as the extreme: each row's own tree
    x = np.where(r.random((300, 49)) < 0.5, 0.0, -0.0).astype(np.float32)
    x[::7] = r.standard_normal((43, 49)).astype(np.float32)
    x = x.astype(dtype)
    got = np.asarray(bind(prim, prim_check.as_podlet(x), axes=[1]))
    want = np.array([_tree_bits(row.astype(np.float32), comb, init) for row in x], np.uint32).view(np.float32)
    assert got.tobytes() == want.astype(dtype).tobytes()

    # and down columns (4 at a time): pairwise_rows' tree over the 300 rows (one chunk)
    def rows_tree(c):
        if len(c) <= 16:
            a = int(c[0])
            for v in c[1:]:
                a = comb(a, int(v))
            return a
        h = len(c) // 2
        return comb(rows_tree(c[:h]), rows_tree(c[h:]))
    xf = x.astype(np.float32)
    u = xf.view(np.uint32)
    u[5, 3], u[200, 3], u[17, 10] = 0x7FC00123, 0xFFC00456, 0xFFC00789
    x = xf.astype(dtype)
    got = np.asarray(bind(prim, prim_check.as_podlet(x), axes=[0]))
    want = np.array([rows_tree(x[:, j].astype(np.float32).view(np.uint32)) for j in range(49)], np.uint32)
    assert got.tobytes() == want.view(np.float32).astype(dtype).tobytes()


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_column_sums_same_bits_on_every_isa(dtype):
    """Column reductions ([outer, n, inner] summed over n: bias gradients) run 16 columns a
    vector on AVX-512 hosts (kernels/reduce_avx512.cc) with the baseline's tree: the same
    bits as the ref ISA, NaN payloads, infinities and signed zeros included, for row
    counts at and around the 16-row leaves and the row chunks, and widths with tails."""
    r = np.random.default_rng(23)
    isas = [i for i in _core.cpu_info()["available_isas"] if i in ("ref", "avx2", "avx512")]
    old = _core.active_isa()
    try:
        for shape, axes in [((5, 37), [0]), ((16, 64), [0]), ((17, 300), [0]), ((300, 3, 70), [0, 1]),
                            ((3, 1000, 70), [1]), ((2, 33, 257), [1]), ((6272, 48), [0]), ((40, 49, 1152), [0, 1]),
                            ((300, 768), [0]), ((2, 70, 2100), [1])]:
            x = (r.standard_normal(shape) * 100).astype(np.float32)
            u = x.reshape(-1).view(np.uint32)
            for k, bits in enumerate([0x7FC00123, 0xFFC00456, 0x7F800000, 0xFF800000, 0x80000000]):
                u[r.integers(0, u.size, 3)] = bits
            x = x.astype(dtype)
            outs = {}
            for isa in isas:
                _core.set_isa(isa)
                outs[isa] = np.asarray(bind("reduce_sum", prim_check.as_podlet(x), axes=axes))
            for isa in isas:
                assert outs[isa].tobytes() == outs["ref"].tobytes(), (shape, axes, isa)
            want = np.sum(x.astype(np.float64), axis=tuple(axes))
            fin = np.isfinite(want)
            np.testing.assert_allclose(outs["ref"].astype(np.float64)[fin], want[fin], rtol=2e-2,
                                       atol=2e-2 * np.abs(want[fin]).max())
    finally:
        _core.set_isa(old)
