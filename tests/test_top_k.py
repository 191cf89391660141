"""podlet.lax.top_k / approx_max_k / approx_min_k against jax.lax.top_k (the oracle).

top_k is exact with jax's tie order (among equal values the lower index first) and
jax's total order for floats (NaN above +inf, -NaN below -inf, -0.0 below 0.0).
approx_max_k / approx_min_k return the EXACT top / bottom k (podlet's documented
choice: recall 1.0 satisfies every recall_target).
"""
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import podlet
import podlet.numpy as pnp
from podlet import lax

jax.config.update("jax_platforms", "cpu")
rng = np.random.default_rng(1)
BF16 = ml_dtypes.bfloat16


def check(got, want, exact=True):
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, (g.shape, w.shape)
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        if exact:
            if g.dtype == BF16:  # NumPy's NaN-aware comparison needs a native float type
                g, w = g.astype(np.float32), w.astype(np.float32)
            np.testing.assert_array_equal(g, w)
            if g.dtype.kind == "f":  # the same zeros' and NaNs' signs
                np.testing.assert_array_equal(np.signbit(g), np.signbit(w))
        else:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=1e-6)


def with_ties(shape, dtype):
    """Small integers: many ties."""
    return rng.integers(-3, 4, shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, BF16, np.int32, np.uint32])
@pytest.mark.parametrize("shape,k", [((7,), 1), ((7,), 3), ((7,), 7), ((2, 9), 4), ((3, 2, 6), 6), ((2, 3, 5), 0)])
def test_top_k_matches_jax(dtype, shape, k):
    x = with_ties(shape, np.float64).astype(dtype) if dtype != np.uint32 else rng.integers(0, 4, shape).astype(dtype)
    want = jax.lax.top_k(jnp.asarray(x), k)
    check(lax.top_k(pnp.asarray(x), k), want)
    check(podlet.jit(lambda a: lax.top_k(a, k))(pnp.asarray(x)), want)


def test_top_k_ties_keep_lower_index_first():
    x = np.array([2, 5, 5, 1, 5, 2], np.float32)
    vals, idx = lax.top_k(pnp.asarray(x), 5)
    np.testing.assert_array_equal(np.asarray(idx), [1, 2, 4, 0, 5])
    check((vals, idx), jax.lax.top_k(jnp.asarray(x), 5))


def test_top_k_nan_inf_and_signed_zero_like_jax():
    x = np.array([1.0, np.nan, 3.0, -np.nan, np.inf, 3.0, -np.inf, 0.0, -0.0, 0.0], np.float32)
    for k in (1, 4, 10):
        check(lax.top_k(pnp.asarray(x), k), jax.lax.top_k(jnp.asarray(x), k))
    xb = x.astype(BF16)
    check(lax.top_k(pnp.asarray(xb), 10), jax.lax.top_k(jnp.asarray(xb), 10))


def test_top_k_bool_and_axis():
    xb = np.array([[True, False, True], [False, False, True]])
    check(lax.top_k(pnp.asarray(xb), 2), jax.lax.top_k(jnp.asarray(xb), 2))
    x = with_ties((4, 5, 3), np.float32)
    for axis in (0, 1, -2):
        check(lax.top_k(pnp.asarray(x), 3, axis=axis), jax.lax.top_k(jnp.asarray(x), 3, axis=axis))


def test_top_k_errors():
    with pytest.raises(ValueError, match="k argument to top_k must be no larger than size along axis; got k=3"):
        lax.top_k(pnp.ones((2,)), 3)
    with pytest.raises(ValueError, match="axis -1 is out of bounds for array of dimension 0"):
        lax.top_k(pnp.asarray(np.float32(1)), 1)
    with pytest.raises(ValueError, match="non-negative"):
        lax.top_k(pnp.ones((2,)), -1)


@pytest.mark.parametrize("shape,k", [((6,), 1), ((6,), 6), ((3, 8), 3), ((2, 2, 5), 2)])
def test_top_k_gradient(shape, k):
    x = rng.standard_normal(shape).astype(np.float32)
    x.reshape(-1)[:2] = 0.5  # a tie

    def f(lib, top_k):
        return lambda a: lib.sum(top_k(a, k)[0] ** 2 * lib.arange(k, dtype=lib.float32))
    want = jax.grad(f(jnp, jax.lax.top_k))(jnp.asarray(x))
    check([podlet.grad(f(pnp, lax.top_k))(pnp.asarray(x))], [want], exact=False)
    check([podlet.jit(podlet.grad(f(pnp, lax.top_k)))(pnp.asarray(x))], [want], exact=False)
    want = jax.grad(f(jnp, jax.lax.approx_max_k))(jnp.asarray(x))
    check([podlet.grad(f(pnp, lax.approx_max_k))(pnp.asarray(x))], [want], exact=False)


@pytest.mark.parametrize("dtype", [np.float32, BF16, np.int32])
def test_approx_max_k_is_exact(dtype):
    x = rng.permutation(64 * 3).reshape(3, 64).astype(dtype)  # distinct values (jax's approx has no tie order)
    for k in (1, 5, 64):
        want = jax.lax.top_k(jnp.asarray(x), k)
        check(lax.approx_max_k(pnp.asarray(x), k), want)
        check(lax.approx_max_k(pnp.asarray(x), k, recall_target=0.5, aggregate_to_topk=True), want)
        if dtype != np.int32:  # jax's approx_max_k takes floats only; podlet's also integers
            check(jax.lax.approx_max_k(jnp.asarray(x), k, recall_target=1.0), want)  # the oracle agrees at recall 1
    xt = np.ascontiguousarray(x.T)
    want = [np.asarray(v).T for v in jax.lax.top_k(jnp.asarray(x), 5)]
    check(lax.approx_max_k(pnp.asarray(xt), 5, reduction_dimension=0), want)
    check(podlet.jit(lambda a: lax.approx_max_k(a, 5, reduction_dimension=0))(pnp.asarray(xt)), want)


@pytest.mark.parametrize("dtype", [np.float32, BF16, np.int32])
def test_approx_min_k_is_exact(dtype):
    x = rng.permutation(50 * 2).reshape(2, 50).astype(dtype)
    for k in (1, 7, 50):
        v, i = jax.lax.top_k(-jnp.asarray(x), k)
        check(lax.approx_min_k(pnp.asarray(x), k), (-v, i))
        if dtype != np.int32:
            check(jax.lax.approx_min_k(jnp.asarray(x), k, recall_target=1.0), (-v, i))
    # ties: lower index first; NaN comes last in the smallest-k order
    y = np.array([3.0, np.nan, 1.0, 1.0, -2.0], np.float32)
    vals, idx = lax.approx_min_k(pnp.asarray(y), 5)
    np.testing.assert_array_equal(np.asarray(idx), [4, 2, 3, 0, 1])
    g = podlet.grad(lambda a: pnp.sum(lax.approx_min_k(a, 2)[0] * pnp.asarray(np.float32([1, 10]))))(pnp.asarray(y))
    np.testing.assert_array_equal(np.asarray(g), [0, 0, 10, 0, 1])
