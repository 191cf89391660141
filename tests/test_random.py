"""podlet.random against jax.random (jax 0.10.2, default threefry2x32 PRNG with
jax_threefry_partitionable=True) as the oracle: keys, bits and samples must be
bit-for-bit equal (raw uint32 / float bit patterns), eagerly and under jit, for float32
and bfloat16; float64 (x64) uniform/bernoulli bitwise, normal/truncated_normal within
1e-12 (podlet's float64 erf_inv is not XLA's). Also: the raw threefry2x32 primitive
against the Random123 known-answer vectors, the legacy non-partitionable scheme, and
identical results for 1, 2 and 3 threads.
"""
import contextlib

import ml_dtypes
import numpy as np
import pytest

import jax
import jax.numpy as jnp

import podlet
from podlet import random as pr
from podlet._src.core import bind
from podlet._src.errors import DTypeError, ShapeError

BF16 = ml_dtypes.bfloat16


def np_of(x):
    return np.asarray(x)


def assert_same_bits(got, want, what=""):
    """Equal dtype, shape and bit patterns (NaN-safe, -0 != +0)."""
    got, want = np_of(got), np_of(want)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    if got.dtype.kind in "fV" or got.dtype == BF16:
        view = {2: np.uint16, 4: np.uint32, 8: np.uint64}[got.dtype.itemsize]
        got, want = got.view(view), want.view(view)
    bad = np.flatnonzero(got.reshape(-1) != want.reshape(-1))
    assert bad.size == 0, f"{what}: {bad.size}/{got.size} elements differ, first at {bad[:5]}: " \
                          f"{got.reshape(-1)[bad[:5]]} vs {want.reshape(-1)[bad[:5]]}"


@contextlib.contextmanager
def threads(n):
    old = podlet.config.num_threads
    podlet.config.update("num_threads", n)
    try:
        yield
    finally:
        podlet.config.update("num_threads", old)


@contextlib.contextmanager
def non_partitionable():
    jax.config.update("jax_threefry_partitionable", False)
    pr.threefry_partitionable = False
    try:
        yield
    finally:
        jax.config.update("jax_threefry_partitionable", True)
        pr.threefry_partitionable = None


@contextlib.contextmanager
def x64():
    podlet.config.update("enable_x64", True)
    try:
        with jax.enable_x64(True):
            yield
    finally:
        podlet.config.update("enable_x64", False)


def test_jax_default_is_partitionable():
    # The oracle's configuration this file assumes (jax 0.10.2's defaults).
    assert jax.__version__ == "0.10.2"
    assert jax.config.jax_threefry_partitionable is True
    assert jax.config.jax_default_prng_impl == "threefry2x32"


# ---------------------------------------------------------------------------------
# the threefry2x32 primitive
# ---------------------------------------------------------------------------------
def test_threefry2x32_known_answers():
    # Random123's known-answer vectors for Threefry-2x32 with 20 rounds.
    kat = [((0x00000000, 0x00000000), (0x00000000, 0x00000000), (0x6B200159, 0x99BA4EFE)),
           ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
           ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0))]
    for (k1, k2), (x1, x2), (y1, y2) in kat:
        u = lambda v: np.array([v], np.uint32)  # noqa: E731
        r1, r2 = bind("threefry2x32", u(k1), u(k2), u(x1), u(x2))
        assert (int(np_of(r1)[0]), int(np_of(r2)[0])) == (y1, y2)


def threefry2x32_numpy(k1, k2, x1, x2):
    """Reference Threefry-2x32/20 in NumPy (uint32 arithmetic wraps)."""
    k1, k2, x1, x2 = np.broadcast_arrays(*[np.asarray(v, np.uint32) for v in (k1, k2, x1, x2)])
    ks = [k1, k2, k1 ^ k2 ^ np.uint32(0x1BD11BDA)]
    rot = [[13, 15, 26, 6], [17, 29, 16, 24]]
    x = [x1 + ks[0], x2 + ks[1]]
    for i in range(5):
        for r in rot[i % 2]:
            x[0] = x[0] + x[1]
            x[1] = (x[1] << np.uint32(r)) | (x[1] >> np.uint32(32 - r))
            x[1] = x[0] ^ x[1]
        x[0] = x[0] + ks[(i + 1) % 3]
        x[1] = x[1] + ks[(i + 2) % 3] + np.uint32(i + 1)
    return x


def test_threefry2x32_broadcasts_like_jax():
    from jax._src.random.threefry2x32 import threefry2x32_p
    rng = np.random.default_rng(0)
    k1 = np.uint32(0x12345678)
    k2 = rng.integers(0, 2**32, (3, 1), dtype=np.uint32)
    x1 = rng.integers(0, 2**32, (4,), dtype=np.uint32)
    x2 = rng.integers(0, 2**32, (3, 4), dtype=np.uint32)
    got = bind("threefry2x32", np.array(k1), k2, x1, x2)
    want = threefry2x32_numpy(k1, k2, x1, x2)
    for g, w in zip(got, want):
        assert_same_bits(g, w, "threefry2x32 vs NumPy")
    for g, w in zip(got, threefry2x32_p.bind(*np.broadcast_arrays(k1, k2, x1, x2))):
        assert_same_bits(g, w, "threefry2x32 vs jax")
    jitted = podlet.jit(lambda *a: bind("threefry2x32", *a))(np.array(k1), k2, x1, x2)
    for g, w in zip(jitted, want):
        assert_same_bits(g, w, "threefry2x32 under jit")
    with pytest.raises(DTypeError, match="uint32"):
        bind("threefry2x32", np.int32(1), k2, x1, x2)
    with pytest.raises(ShapeError):
        bind("threefry2x32", np.array(k1), k2, np.zeros(5, np.uint32), x2)


# ---------------------------------------------------------------------------------
# keys
# ---------------------------------------------------------------------------------
SEEDS = [0, 1, 42, 2**31 - 1, 2**31, 2**32 - 1, 2**32 + 7, 2**40 + 5, -1, -5, -2**31, 2**63 - 1, -2**63,
         True, np.int32(-1), np.uint32(2**32 - 1), np.int64(2**40 + 5), np.uint8(7), np.int32(12345)]


@pytest.mark.parametrize("seed", SEEDS, ids=repr)
def test_prngkey(seed):
    assert_same_bits(pr.PRNGKey(seed), jax.random.PRNGKey(seed), f"PRNGKey({seed!r})")


def test_prngkey_traced_and_errors():
    f = podlet.jit(pr.PRNGKey)
    jf = jax.jit(jax.random.PRNGKey)
    for s in [0, 7, -3, 2**31 - 1]:
        assert_same_bits(f(np.int32(s)), jf(np.int32(s)), f"jit PRNGKey({s})")
    assert_same_bits(pr.PRNGKey(podlet.numpy.asarray(np.int32(-9))), jax.random.PRNGKey(np.int32(-9)))
    with pytest.raises(OverflowError):
        pr.PRNGKey(2**64)
    with pytest.raises(TypeError, match="scalar"):
        pr.PRNGKey(np.arange(3))
    with pytest.raises(TypeError, match="integer"):
        pr.PRNGKey(1.5)


def test_prngkey_x64_seeds():
    with x64():
        for s in [2**40 + 5, -1, 2**63 - 1, -2**63, 7]:
            assert_same_bits(pr.PRNGKey(s), jax.random.PRNGKey(s), f"x64 PRNGKey({s})")


def test_key_aliases():
    k = pr.PRNGKey(3)
    assert_same_bits(pr.key(3), k)
    assert pr.key_data(k) is k and pr.wrap_key_data(k) is k and pr.clone(k) is k
    assert pr.key_impl(k) == "threefry2x32"
    batch = pr.split(k, 4)
    assert pr.key_data(batch).shape == (4, 2)


@pytest.mark.parametrize("num", [2, 3, 5, 1, (2, 3)], ids=repr)
def test_split(num):
    for seed in [0, 42]:
        assert_same_bits(pr.split(pr.PRNGKey(seed), num), jax.random.split(jax.random.PRNGKey(seed), num),
                         f"split(PRNGKey({seed}), {num})")


def test_split_default_and_chained():
    k, jk = pr.PRNGKey(7), jax.random.PRNGKey(7)
    for _ in range(3):
        k, sub = pr.split(k)
        jk, jsub = jax.random.split(jk)
        assert_same_bits(k, jk)
        assert_same_bits(sub, jsub)


@pytest.mark.parametrize("data", [0, 1, 7, 2**31 - 1, 2**32 - 1, np.int32(-3), np.uint32(123), np.int32(2**31 - 1)],
                         ids=repr)
def test_fold_in(data):
    k = pr.PRNGKey(11)
    assert_same_bits(pr.fold_in(k, data), jax.random.fold_in(jax.random.PRNGKey(11), data), f"fold_in({data!r})")


def test_fold_in_traced_int32_like_the_training_step():
    # dropout_rng, next_rng = split(state.rng); dropout_rng = fold_in(dropout_rng, axis_index)
    def step(rng, i):
        dropout_rng, next_rng = pr.split(rng)
        dropout_rng = pr.fold_in(dropout_rng, i)
        return dropout_rng, next_rng

    def jstep(rng, i):
        dropout_rng, next_rng = jax.random.split(rng)
        return jax.random.fold_in(dropout_rng, i), next_rng

    f, jf = podlet.jit(step), jax.jit(jstep)
    for i in [0, 1, 5, -2]:
        for g, w in zip(f(pr.PRNGKey(0), np.int32(i)), jf(jax.random.PRNGKey(0), np.int32(i))):
            assert_same_bits(g, w, f"train-step keys for axis index {i}")


def test_fold_in_errors():
    k = pr.PRNGKey(0)
    with pytest.raises(OverflowError):
        pr.fold_in(k, -1)  # jax: jnp.asarray(-1, dtype='uint32') overflows too
    with pytest.raises(TypeError, match="scalar"):
        pr.fold_in(k, np.arange(2))


# ---------------------------------------------------------------------------------
# bits and uniform
# ---------------------------------------------------------------------------------
SHAPES = [(), (1,), (7,), (8,), (3, 5), (2, 3, 4), (10001,)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_bits(shape):
    k, jk = pr.PRNGKey(5), jax.random.PRNGKey(5)
    assert_same_bits(pr.bits(k, shape), jax.random.bits(jk, shape), "uint32 bits")
    assert_same_bits(pr.bits(k, shape, np.uint8), jax.random.bits(jk, shape, jnp.uint8), "uint8 bits")


def test_bits_dtype_errors():
    with pytest.raises(ValueError, match="unsigned"):
        pr.bits(pr.PRNGKey(0), (2,), np.int32)
    with pytest.raises(DTypeError):
        pr.bits(pr.PRNGKey(0), (2,), np.uint16)


@pytest.mark.parametrize("shape", [(), (7,), (2, 3, 4), (10001,)], ids=str)
def test_uniform_float32_and_bfloat16(shape):
    k, jk = pr.PRNGKey(1), jax.random.PRNGKey(1)
    assert_same_bits(pr.uniform(k, shape), jax.random.uniform(jk, shape), "uniform f32")
    assert_same_bits(pr.uniform(k, shape, minval=-3.7, maxval=2.2),
                     jax.random.uniform(jk, shape, minval=-3.7, maxval=2.2), "uniform f32 [-3.7, 2.2)")
    assert_same_bits(pr.uniform(k, shape, jnp.bfloat16), jax.random.uniform(jk, shape, jnp.bfloat16), "uniform bf16")
    assert_same_bits(pr.uniform(k, shape, jnp.bfloat16, -3.7, 2.2),
                     jax.random.uniform(jk, shape, jnp.bfloat16, -3.7, 2.2), "uniform bf16 [-3.7, 2.2)")


def test_uniform_broadcast_bounds():
    k, jk = pr.PRNGKey(2), jax.random.PRNGKey(2)
    lo = np.linspace(-3, 0, 5, dtype=np.float32)[:, None]
    hi = np.linspace(0.5, 4, 4, dtype=np.float32)
    assert_same_bits(pr.uniform(k, (5, 4), minval=lo, maxval=hi),
                     jax.random.uniform(jk, (5, 4), minval=lo, maxval=hi), "uniform broadcast bounds")
    with pytest.raises(ShapeError, match="broadcast"):
        pr.uniform(k, (4,), minval=np.zeros(5, np.float32))


def test_uniform_float64_with_x64():
    with x64():
        k, jk = pr.PRNGKey(3), jax.random.PRNGKey(3)
        for lo, hi in [(0., 1.), (-1.5, 2.5)]:
            got = pr.uniform(k, (5000,), minval=lo, maxval=hi)
            assert_same_bits(got, jax.random.uniform(jk, (5000,), minval=lo, maxval=hi), f"uniform f64 [{lo}, {hi})")
            assert np_of(got).dtype == np.float64


def test_float64_request_without_x64_gives_float32_like_jax():
    k = pr.PRNGKey(0)
    with pytest.warns(UserWarning):
        want = jax.random.uniform(jax.random.PRNGKey(0), (4,), jnp.float64)
    assert_same_bits(pr.uniform(k, (4,), np.float64), want)


# ---------------------------------------------------------------------------------
# normal, truncated_normal
# ---------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(), (7,), (3, 5), (20000,)], ids=str)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["float32", "bfloat16"])
def test_normal(shape, dtype):
    for seed in [0, 9]:
        assert_same_bits(pr.normal(pr.PRNGKey(seed), shape, dtype), jax.random.normal(jax.random.PRNGKey(seed), shape, dtype),
                         f"normal {np.dtype(dtype)} seed {seed}")


@pytest.mark.parametrize("bounds", [(-2., 2.), (-1.5, 0.7), (-3.3, 1.1), (0.3, 4.), (-10., 10.), (1., 1.5)], ids=str)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["float32", "bfloat16"])
def test_truncated_normal(bounds, dtype):
    lo, hi = bounds
    k, jk = pr.PRNGKey(4), jax.random.PRNGKey(4)
    # Bounds as arrays: jax.jit with literal bounds lets XLA constant-fold erf(bound)
    # with its compile-time evaluator, which is not always the runtime erf; eager jax,
    # and jit with array bounds, run the runtime erf that podlet reproduces.
    lo_a, hi_a = jnp.asarray(lo, dtype), jnp.asarray(hi, dtype)
    got = pr.truncated_normal(k, np_of(lo_a), np_of(hi_a), (3000,), dtype)
    assert_same_bits(got, jax.random.truncated_normal(jk, lo_a, hi_a, (3000,), dtype), f"truncated_normal {bounds}")
    g = np_of(got).astype(np.float64)
    assert (g > np.float64(np_of(lo_a))).all() and (g < np.float64(np_of(hi_a))).all()


def test_truncated_normal_broadcast_and_default_shape():
    k, jk = pr.PRNGKey(6), jax.random.PRNGKey(6)
    lo = np.linspace(-3, 0, 6, dtype=np.float32)[:, None]
    hi = np.linspace(0.1, 2, 5, dtype=np.float32)
    assert_same_bits(pr.truncated_normal(k, lo, hi), jax.random.truncated_normal(jk, lo, hi), "shape=None")
    assert_same_bits(pr.truncated_normal(k, lo, hi, (2, 6, 5)), jax.random.truncated_normal(jk, lo, hi, (2, 6, 5)))
    # flax's default initialisers: truncated_normal(key, -2, 2, shape) (eager == jit in jax here)
    assert_same_bits(pr.truncated_normal(k, -2, 2, (64, 3)), jax.random.truncated_normal(jk, -2, 2, (64, 3)))
    assert_same_bits(podlet.jit(lambda k: pr.truncated_normal(k, -2, 2, (64, 3)))(k),
                     jax.jit(lambda k: jax.random.truncated_normal(k, -2, 2, (64, 3)))(jk))


def test_normal_float64_with_x64():
    with x64():
        k, jk = pr.PRNGKey(3), jax.random.PRNGKey(3)
        got, want = np_of(pr.normal(k, (4000,))), np_of(jax.random.normal(jk, (4000,)))
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)
        got = np_of(pr.truncated_normal(k, -1.0, 2.5, (4000,)))
        want = np_of(jax.random.truncated_normal(jk, -1.0, 2.5, (4000,)))
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)
        assert (got > -1).all() and (got < 2.5).all()


# ---------------------------------------------------------------------------------
# bernoulli, randint
# ---------------------------------------------------------------------------------
@pytest.mark.parametrize("p", [0.0, 0.1, 0.7, 1.0])
def test_bernoulli(p):
    k, jk = pr.PRNGKey(8), jax.random.PRNGKey(8)
    assert_same_bits(pr.bernoulli(k, p, (5000,)), jax.random.bernoulli(jk, p, (5000,)), "low")
    assert_same_bits(pr.bernoulli(k, p, (300,), mode="high"), jax.random.bernoulli(jk, p, (300,), mode="high"), "high")
    pb = jnp.asarray(p, jnp.bfloat16)
    assert_same_bits(pr.bernoulli(k, np_of(pb), (700,)), jax.random.bernoulli(jk, pb, (700,)), "bf16 p")


def test_bernoulli_array_p_and_errors():
    k, jk = pr.PRNGKey(8), jax.random.PRNGKey(8)
    p = np.linspace(0, 1, 30, dtype=np.float32)
    assert_same_bits(pr.bernoulli(k, p), jax.random.bernoulli(jk, p), "p.shape")
    assert_same_bits(pr.bernoulli(k, p, (4, 30)), jax.random.bernoulli(jk, p, (4, 30)), "broadcast p")
    assert_same_bits(pr.bernoulli(k), jax.random.bernoulli(jk), "default p")
    with pytest.raises(TypeError, match="floating"):
        pr.bernoulli(k, np.int32(1))
    with pytest.raises(ValueError, match="mode"):
        pr.bernoulli(k, 0.5, mode="mid")


@pytest.mark.parametrize("bounds", [(0, 10), (-5, 5), (0, 2**31 - 1), (-2**31, 2**31 - 1), (3, 3), (7, 2), (0, 1),
                                    (-100, 1000)], ids=str)
def test_randint(bounds):
    lo, hi = bounds
    k, jk = pr.PRNGKey(10), jax.random.PRNGKey(10)
    assert_same_bits(pr.randint(k, (3000,), lo, hi), jax.random.randint(jk, (3000,), lo, hi), f"randint{bounds}")


def test_randint_dtypes_and_array_bounds():
    k, jk = pr.PRNGKey(12), jax.random.PRNGKey(12)
    for dt, (lo, hi) in [(jnp.uint32, (0, 1000)), (jnp.uint32, (5, 2**31 - 1)), (jnp.uint8, (0, 256)),
                         (jnp.uint8, (-5, 300)), (jnp.uint8, (10, 20))]:
        assert_same_bits(pr.randint(k, (500,), lo, hi, dt), jax.random.randint(jk, (500,), lo, hi, dt), f"{dt} {lo} {hi}")
    lo = np.arange(5, dtype=np.int32)
    assert_same_bits(pr.randint(k, (3, 5), lo, 9), jax.random.randint(jk, (3, 5), lo, 9), "array minval")
    hi = np.array([1, 10, 100, 1000], np.uint32)
    assert_same_bits(pr.randint(k, (4,), 0, hi, jnp.uint32), jax.random.randint(jk, (4,), 0, hi, jnp.uint32))
    assert_same_bits(pr.randint(k, (6,), 1.7, 9.2), jax.random.randint(jk, (6,), 1.7, 9.2), "float bounds truncate")
    with pytest.raises(TypeError, match="integer"):
        pr.randint(k, (2,), 0, 3, jnp.float32)


# ---------------------------------------------------------------------------------
# permutation, shuffle, choice
# ---------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [0, 1, 2, 10, 1000, 2000])  # 2000 > 1625: two sort rounds
def test_permutation_of_int(n):
    k, jk = pr.PRNGKey(13), jax.random.PRNGKey(13)
    assert_same_bits(pr.permutation(k, n), jax.random.permutation(jk, n), f"permutation({n})")


def test_permutation_of_arrays():
    k, jk = pr.PRNGKey(14), jax.random.PRNGKey(14)
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    for axis in [0, 1, -1]:
        for indep in [False, True]:
            assert_same_bits(pr.permutation(k, x, axis, indep), jax.random.permutation(jk, x, axis, indep),
                             f"axis={axis} independent={indep}")
    v = np.arange(50, dtype=np.int32) * 3
    assert_same_bits(pr.permutation(k, v), jax.random.permutation(jk, v), "1-D")
    assert_same_bits(pr.shuffle(k, x, 1), jax.random.permutation(jk, x, 1, independent=True), "shuffle")
    xb = x.astype(BF16)
    assert_same_bits(pr.permutation(k, xb), jax.random.permutation(jk, jnp.asarray(xb)), "bf16 rows")
    with pytest.raises(TypeError):
        pr.permutation(k, 2.5)


def test_permutation_gradient_flows_through_the_gather():
    k = pr.PRNGKey(15)
    x = np.arange(6, dtype=np.float32)
    w = np.linspace(1, 2, 6, dtype=np.float32)
    g = podlet.grad(lambda x: (pr.permutation(k, x) * w).sum())(x)
    perm = np_of(pr.permutation(k, 6))
    want = np.zeros(6, np.float32)
    want[perm] = w
    np.testing.assert_array_equal(np_of(g), want)


def test_choice():
    k, jk = pr.PRNGKey(16), jax.random.PRNGKey(16)
    a = np.arange(10, dtype=np.float32) * 2
    assert_same_bits(pr.choice(k, 10, (4,)), jax.random.choice(jk, 10, (4,)), "int, replace")
    assert_same_bits(pr.choice(k, a, (2, 3)), jax.random.choice(jk, a, (2, 3)), "array, replace")
    assert_same_bits(pr.choice(k, 10, (4,), replace=False), jax.random.choice(jk, 10, (4,), replace=False))
    a2 = a.reshape(2, 5)
    assert_same_bits(pr.choice(k, a2, (3,), replace=False, axis=1),
                     jax.random.choice(jk, a2, (3,), replace=False, axis=1), "axis=1 no replace")
    p = np.array([0.1, 0.0, 0.3, 0.6, 0.0, 0, 0, 0, 0, 0], np.float32)
    got = pr.choice(k, a, (500,), p=p)
    assert_same_bits(got, jax.random.choice(jk, a, (500,), p=p), "with p")
    assert set(np_of(got).tolist()) <= {0.0, 4.0, 6.0}
    with pytest.raises(ValueError, match="larger sample"):
        pr.choice(k, 3, (4,), replace=False)
    with pytest.raises(NotImplementedError):
        pr.choice(k, 10, (2,), replace=False, p=np.full(10, 0.1, np.float32))


# ---------------------------------------------------------------------------------
# jit, legacy scheme, threads, errors
# ---------------------------------------------------------------------------------
def _sampler_zoo(R, key):
    k1, k2, k3, k4, k5, k6 = R.split(key, 6)
    return (R.normal(k1, (5, 3)), R.uniform(k2, (7,), minval=-1., maxval=3.), R.bernoulli(k3, 0.3, (9,)),
            R.randint(k4, (6,), -4, 40), R.permutation(k5, 12), R.truncated_normal(k6, -2., 2., (4, 4)),
            R.normal(R.fold_in(k1, 3), (2,), jnp.bfloat16), R.bits(k2, (3,)))


def test_jit_matches_eager_and_jax():
    k, jk = pr.PRNGKey(21), jax.random.PRNGKey(21)
    eager = _sampler_zoo(pr, k)
    jitted = podlet.jit(lambda k: _sampler_zoo(pr, k))(k)
    want = jax.jit(lambda k: _sampler_zoo(jax.random, k))(jk)
    for e, j, w in zip(eager, jitted, want):
        assert_same_bits(e, w, "eager vs jax")
        assert_same_bits(j, w, "jit vs jax")


def test_non_partitionable_scheme():
    with non_partitionable():
        k, jk = pr.PRNGKey(22), jax.random.PRNGKey(22)
        for shape in [(5,), (2, 3)]:
            assert_same_bits(pr.bits(k, shape), jax.random.bits(jk, shape), f"bits {shape}")
            assert_same_bits(pr.bits(k, shape, jnp.uint8), jax.random.bits(jk, shape, jnp.uint8), f"bits8 {shape}")
            assert_same_bits(pr.split(k, shape), jax.random.split(jk, shape), f"split {shape}")
            assert_same_bits(pr.uniform(k, shape), jax.random.uniform(jk, shape), f"uniform {shape}")
        assert_same_bits(pr.uniform(k, (9,), jnp.bfloat16), jax.random.uniform(jk, (9,), jnp.bfloat16))
        assert_same_bits(pr.randint(k, (11,), 0, 7), jax.random.randint(jk, (11,), 0, 7))
        assert_same_bits(pr.permutation(k, 17), jax.random.permutation(jk, 17))
        assert_same_bits(pr.fold_in(k, 9), jax.random.fold_in(jk, 9))
    # and back to the default scheme
    assert_same_bits(pr.bits(pr.PRNGKey(22), (5,)), jax.random.bits(jax.random.PRNGKey(22), (5,)))


def test_deterministic_across_thread_counts():
    k = pr.PRNGKey(23)
    x = np.arange(30000, dtype=np.float32).reshape(100, 300)

    def draw():
        return [np_of(v) for v in (pr.normal(k, (50000,)), pr.uniform(k, (40000,), jnp.bfloat16),
                                   pr.bernoulli(k, 0.7, (30000,)), pr.randint(k, (30000,), 0, 97),
                                   pr.permutation(k, x, 1, independent=True), pr.permutation(k, 20000),
                                   pr.truncated_normal(k, -1., 1., (30000,)), pr.split(k, 20000))]

    with threads(1):
        ref = draw()
    for n in (2, 3):
        with threads(n):
            for a, b in zip(draw(), ref):
                assert_same_bits(a, b, f"{n} threads vs 1")


def test_random_in_a_differentiated_function():
    k = pr.PRNGKey(24)
    x = np.ones(3, np.float32)
    g = podlet.grad(lambda x: (x * pr.normal(k, (3,))).sum())(x)
    assert_same_bits(g, jax.random.normal(jax.random.PRNGKey(24), (3,)))


def test_key_errors():
    with pytest.raises(ValueError, match="single key"):
        pr.normal(np.zeros((3, 2), np.uint32), (2,))
    with pytest.raises(ValueError, match="single key"):
        pr.split(pr.split(pr.PRNGKey(0), 3))
    with pytest.raises(TypeError, match="uint32"):
        pr.uniform(np.zeros(2, np.int32))
    with pytest.raises(TypeError, match="shape"):
        pr.uniform(np.zeros(3, np.uint32))
    with pytest.raises(ValueError, match="float"):
        pr.normal(pr.PRNGKey(0), (2,), jnp.int32)
    with pytest.raises(DTypeError, match="key"):
        bind("random_normal", np.zeros(3, np.uint32), shape=[2])
