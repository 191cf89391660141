"""gumbel, categorical, exponential, laplace, logistic and rademacher against jax.random
with the same keys: the draws come from the same uniform bits through jax's formulas, so
they agree to the last bit of log / log1p (a few ulps), and categorical's indices and
rademacher's signs agree exactly; eagerly and under jit."""
import numpy as np
import pytest

import jax

import podlet

KEYS = [0, 3, 12345]
rng = np.random.default_rng(0)
LOGITS = rng.standard_normal((4, 7)).astype(np.float32)


def _keys(seed):
    return podlet.random.PRNGKey(seed), jax.random.PRNGKey(seed)


@pytest.mark.parametrize("name,kw", [("gumbel", {}), ("gumbel", {"mode": "high"}), ("exponential", {}),
                                     ("laplace", {}), ("logistic", {}), ("gumbel", {"dtype": "bfloat16"}),
                                     ("exponential", {"dtype": "bfloat16"})])
@pytest.mark.parametrize("seed", KEYS)
def test_continuous_draws_match_jax(name, kw, seed):
    k, kj = _keys(seed)
    got = getattr(podlet.random, name)(k, (500,), **kw)
    want = getattr(jax.random, name)(kj, (500,), **kw)
    assert np.asarray(got).dtype == np.asarray(want).dtype
    g, w = np.asarray(got, np.float64), np.asarray(want, np.float64)
    tol = 1e-6 if np.asarray(got).dtype == np.float32 else 1e-2
    np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
    jitted = podlet.jit(lambda k: getattr(podlet.random, name)(k, (500,), **kw))(k)
    np.testing.assert_array_equal(np.asarray(jitted), np.asarray(got))


@pytest.mark.parametrize("kw", [{}, {"axis": 0}, {"shape": (3, 4)}, {"shape": (6, 4), "axis": -1},
                                {"shape": (3, 4), "replace": False}, {"shape": (2, 7), "axis": 0, "replace": False},
                                {"mode": "high"}])
@pytest.mark.parametrize("seed", KEYS)
def test_categorical_indices_match_jax(kw, seed):
    k, kj = _keys(seed)
    got = np.asarray(podlet.random.categorical(k, LOGITS, **kw))
    want = np.asarray(jax.random.categorical(kj, LOGITS, **kw))
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.asarray(podlet.jit(lambda k, l: podlet.random.categorical(k, l, **kw))(k, LOGITS)),
                                  want)


def test_categorical_frequencies_follow_softmax():
    k = podlet.random.PRNGKey(1)
    logits = np.log(np.array([0.1, 0.2, 0.7], np.float32))
    draws = np.asarray(podlet.random.categorical(k, logits, shape=(20000,)))
    freq = np.bincount(draws, minlength=3) / draws.size
    np.testing.assert_allclose(freq, [0.1, 0.2, 0.7], atol=0.015)


def test_rademacher_and_errors():
    for seed in KEYS:
        k, kj = _keys(seed)
        got, want = podlet.random.rademacher(k, (300,)), jax.random.rademacher(kj, (300,))
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        assert np.asarray(got).dtype == np.asarray(want).dtype
    k = podlet.random.PRNGKey(0)
    with pytest.raises(ValueError, match="cannot exceed"):
        podlet.random.categorical(k, LOGITS, shape=(9, 4), replace=False)
    with pytest.raises(ValueError, match="batch shape"):
        podlet.random.categorical(k, LOGITS, shape=(3, 5))
    with pytest.raises(ValueError, match="mode"):
        podlet.random.gumbel(k, (3,), mode="fast")
