"""podlet.random's long tail (python/podlet/_src/random_dists.py) against jax.random with
the same keys, and the special functions behind it (python/podlet/_src/special.py)
against scipy.special.

How close the draws are, and why:
* poisson, binomial, multinomial, geometric and triangular equal jax's bit for bit
  (integer-valued results, or IEEE + - * / sqrt on the same uniforms).
* the others agree to a few ulp (rtol 2e-5 in float32): they go through log, exp,
  log1p or tan, whose podlet kernels differ from XLA:CPU's in the last bit for a few
  percent of inputs (tan is sin / cos in podlet), or sum squares where XLA contracts
  to FMAs (maxwell, ball); gamma replays XLA's FMA in v = 1 + x c and its rsqrt
  rewrite of 1/3 / sqrt(d), but XLA:CPU's rsqrt is the hardware estimate plus a
  Newton step (not correctly rounded, CPU-dependent), which podlet cannot reproduce:
  about 95% of float32 gamma draws are jax's bits, the rest within 5 ulp. The
  rejection decisions agree: every element is within tolerance, none is a different
  draw.
XLA takes about a minute to compile jax's rejection samplers here, so their draws (and
jax.grad of gamma / loggamma) come from tests/data/random_tail_jax.npz, written by
tests/random_tail_oracle.py with jax.random itself (recomputed live if the installed jax
is not the version that wrote it); the closed-form samplers are compared live.
"""
import ml_dtypes
import numpy as np
import pytest
import scipy.special as sc

import jax

import podlet
import podlet.random as pr
from podlet._src import special

import random_tail_oracle as orc
from random_tail_oracle import SEED, A, GRAD_A

# bit for bit: integer-valued results, or only IEEE + - * / sqrt on the same uniforms
EXACT = {"geometric", "triangular", "poisson", "poisson_scalar_lam", "binomial", "binomial_nan", "multinomial"}


@pytest.fixture(scope="module")
def jax_draws():
    out = orc.load_or_compute()
    out.update(orc.jax_live_draws())
    return out


@pytest.fixture(scope="module")
def podlet_draws():
    k = pr.PRNGKey(SEED)
    out = dict(orc.stored_draws(pr, k))
    out.update(orc.live_draws(pr, k))
    return {n: np.asarray(v) for n, v in out.items()}


def _compare(name, got, want):
    assert got.dtype == want.dtype, (name, got.dtype, want.dtype)
    assert got.shape == want.shape, (name, got.shape, want.shape)
    if got.dtype == ml_dtypes.bfloat16:
        got, want = got.view(np.uint16), want.view(np.uint16)
    if name in EXACT:
        np.testing.assert_array_equal(got, want, err_msg=name)
    elif name.endswith("_bf16"):
        np.testing.assert_allclose(got.view(ml_dtypes.bfloat16).astype(np.float32),
                                   want.view(ml_dtypes.bfloat16).astype(np.float32), rtol=1e-2, err_msg=name)
    else:
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6, err_msg=name)


def test_draws_match_jax(jax_draws, podlet_draws):
    assert set(podlet_draws) <= set(jax_draws)
    for name in podlet_draws:
        _compare(name, podlet_draws[name], jax_draws[name])
    # the rejection samplers produce what they should, not merely the same thing
    assert abs(podlet_draws["gamma"].mean() - A.mean()) < 0.15
    np.testing.assert_allclose(podlet_draws["dirichlet"].sum(-1), 1, rtol=1e-5)
    np.testing.assert_array_equal(podlet_draws["multinomial"].sum(-1), 100)
    assert np.all(np.linalg.norm(podlet_draws["ball"], axis=-1) <= 1)
    bn = podlet_draws["binomial_nan"]   # nan n, negative n, nan p -> nan; inf n -> inf; p < 0 -> nan
    assert np.isnan(bn[[0, 1, 2, 4]]).all() and bn[3] == np.inf


def test_jit_gives_the_eager_draws(podlet_draws):
    out = podlet.jit(lambda k: orc.stored_draws(pr, k))(pr.PRNGKey(SEED))
    for name in ("gamma", "loggamma", "beta", "t", "poisson", "binomial", "multinomial"):
        np.testing.assert_array_equal(np.asarray(out[name]), podlet_draws[name], err_msg=name)
    out = podlet.jit(lambda k: orc.live_draws(pr, k))(pr.PRNGKey(SEED))
    for name in ("geometric", "cauchy", "wald"):
        np.testing.assert_allclose(np.asarray(out[name]), podlet_draws[name], rtol=1e-6, err_msg=name)


def test_traced_parameters_and_shapes():
    k = pr.PRNGKey(1)
    a = podlet.numpy.asarray(A[:10])
    g1 = pr.gamma(k, a, (4, 10))
    g2 = podlet.jit(lambda k, a: pr.gamma(k, a, (4, 10)))(k, a)
    assert g1.shape == (4, 10) and g1.dtype == np.float32
    np.testing.assert_allclose(np.asarray(g2), np.asarray(g1), rtol=1e-6)
    assert pr.poisson(k, 2.0, (3, 2)).dtype == np.int32
    assert pr.gamma(k, 1.0, (0,)).shape == (0,)
    np.testing.assert_array_equal(np.asarray(pr.random_gamma_p.bind(k, a)), np.asarray(pr.gamma(k, a)))
    # vmap over keys is a loop of eager calls (the rejection loops batch)
    ks = pr.split(k, 3)
    for fn in (lambda k: pr.gamma(k, a[:5]), lambda k: pr.poisson(k, 20.0, (5,)),
               lambda k: pr.binomial(k, 30.0, 0.4, (5,))):
        want = np.stack([np.asarray(fn(kk)) for kk in ks])
        np.testing.assert_array_equal(np.asarray(podlet.vmap(fn)(ks)), want)


def test_gamma_gradient_matches_jax(jax_draws):
    """jax.grad of jax.random.gamma / loggamma w.r.t. a (implicit reparameterisation)."""
    k = pr.PRNGKey(SEED)
    for name, fn in (("gamma", pr.gamma), ("loggamma", pr.loggamma)):
        got = podlet.grad(lambda a: fn(k, a).sum())(podlet.numpy.asarray(GRAD_A))
        np.testing.assert_allclose(np.asarray(got), jax_draws[name + "_grad"], rtol=2e-5, atol=1e-30,
                                   err_msg=name)


# ---- special functions against scipy ----------------------------------------------
_rng = np.random.default_rng(0)
XS = np.concatenate([_rng.uniform(-9.9, 30, 600), _rng.uniform(0.01, 3, 300), [0.5, 1, 2, 3, 10, 1e-3]])
XS = XS[np.abs(XS - np.round(XS)) > 1e-3]                      # away from the poles
IA = _rng.uniform(0.05, 20, 800)
IX = np.concatenate([_rng.uniform(0, 3, 400), _rng.uniform(0, 40, 400)])


@pytest.mark.parametrize("dt,rtol", [(np.float32, 2e-5), (np.float64, 1e-11)])
def test_special_functions_match_scipy(dt, rtol):
    def x64(fn):
        if dt != np.float64:
            return fn()
        podlet.config.update("enable_x64", True)
        try:
            return fn()
        finally:
            podlet.config.update("enable_x64", False)

    x = XS.astype(dt)
    a, ix = IA.astype(dt), IX.astype(dt)
    lg, dg, ig, igc = x64(lambda: [np.asarray(v) for v in (
        special.lgamma(x), special.digamma(x), special.igamma(a, ix), special.igammac(a, ix))])
    assert lg.dtype == dt and ig.dtype == dt
    x, a, ix = x.astype(np.float64), a.astype(np.float64), ix.astype(np.float64)
    # absolute error relative to the terms lgamma sums (its value crosses 0 at 1 and 2)
    np.testing.assert_allclose(lg, sc.gammaln(x), rtol=rtol, atol=rtol * 10)
    np.testing.assert_allclose(dg, sc.digamma(x), rtol=rtol * 10, atol=rtol * 10)
    np.testing.assert_allclose(ig, sc.gammainc(a, ix), rtol=rtol * 10, atol=rtol)
    np.testing.assert_allclose(igc, sc.gammaincc(a, ix), rtol=rtol * 10, atol=rtol)


def test_random_gamma_grad_and_igamma_grad_a():
    podlet.config.update("enable_x64", True)
    try:
        a, x = IA, IX + 0.05
        rgg = np.asarray(special.random_gamma_grad(a, x))
        ga = np.asarray(special.igamma_grad_a(a, x))
    finally:
        podlet.config.update("enable_x64", False)
    h = 1e-6 * a
    dp_da = (sc.gammainc(a + h, x) - sc.gammainc(a - h, x)) / (2 * h)
    dp_dx = np.exp((a - 1) * np.log(x) - x - sc.gammaln(a))
    ok = (np.abs(dp_da) > 1e-5) & (dp_dx > 1e-5)      # where the finite difference means something
    assert ok.sum() > 400
    np.testing.assert_allclose(ga[ok], dp_da[ok], rtol=1e-5)
    np.testing.assert_allclose(rgg[ok], -dp_da[ok] / dp_dx[ok], rtol=1e-5)
    # float32 against the float64 values just checked (jax.lax.random_gamma_grad's float32
    # values are checked through jax.grad of gamma above)
    a32, x32 = a.astype(np.float32), x.astype(np.float32)
    got = np.asarray(special.random_gamma_grad(a32, x32)).astype(np.float64)
    np.testing.assert_allclose(got[ok], rgg[ok], rtol=1e-4)


def test_special_edge_values():
    lg = np.asarray(special.lgamma(np.array([np.inf, -np.inf, 0.0, -2.0, 1.0, 2.0], np.float32)))
    assert np.all(np.isinf(lg[:4])) and np.all(lg[:4] > 0)
    np.testing.assert_allclose(lg[4:], 0, atol=1e-6)   # jax.lax.lgamma(1.) is 4.8e-7 too
    dg = np.asarray(special.digamma(np.array([0.0, -3.0, 1.0], np.float32)))
    assert np.isnan(dg[0]) and np.isnan(dg[1]) and abs(dg[2] + 0.5772157) < 1e-6
    ig = np.asarray(special.igamma(np.array([1.0, 1.0, -1.0, 0.0, 2.0], np.float32),
                                   np.array([0.0, np.inf, 1.0, 0.0, np.nan], np.float32)))
    np.testing.assert_array_equal(ig[:2], [0.0, 1.0])
    assert np.all(np.isnan(ig[2:]))
    g = podlet.grad(lambda x: special.lgamma(x))(3.5)
    np.testing.assert_allclose(float(g), sc.digamma(3.5), rtol=1e-6)
    gx = podlet.grad(lambda x: special.igamma(2.0, x))(1.5)
    np.testing.assert_allclose(float(gx), np.exp(np.log(1.5) - 1.5 - sc.gammaln(2.0)), rtol=1e-6)
    bf = special.lgamma(podlet.numpy.asarray(np.array([3.0], np.float32)).astype("bfloat16"))
    assert bf.dtype == podlet.numpy.bfloat16
    with pytest.raises(TypeError, match="floating"):
        special.lgamma(np.array([1, 2], np.int32))


# ---- errors --------------------------------------------------------------------------
def test_errors_like_jax():
    k, kj = pr.PRNGKey(0), jax.random.PRNGKey(0)
    cases = [
        (lambda r, k: r.gamma(k, 1.0, dtype=np.int32), ValueError, "must be a float dtype"),
        (lambda r, k: r.gamma(k, np.ones(3, np.float32), (2,)), ValueError, "broadcast-compatible"),
        (lambda r, k: r.beta(k, np.ones(3, np.float32), 1.0, (4,)), ValueError, "broadcast-compatible"),
        (lambda r, k: r.dirichlet(k, 1.0), ValueError, "alpha.ndim >= 1"),
        (lambda r, k: r.geometric(k, 0.5, (3,), dtype=np.float32), ValueError, "must be an int dtype"),
        (lambda r, k: r.binomial(k, 5.0, 0.5, dtype=np.int32), ValueError, "must be a float dtype"),
        (lambda r, k: r.t(k, np.ones(3, np.float32), (2, 2)), ValueError, "broadcast-compatible"),
        (lambda r, k: r.key_dtype("rbgx"), ValueError, "unrecognized PRNG implementation"),
    ]
    for fn, exc, msg in cases:
        with pytest.raises(exc):
            fn(jax.random, kj)
        with pytest.raises(exc, match=msg):
            fn(pr, k)
    with pytest.raises(TypeError, match="uint32"):
        pr.gamma(np.zeros(2, np.int32), 1.0)
    with pytest.raises(ValueError, match="single key"):
        pr.poisson(pr.split(k, 3), 1.0)
    with pytest.raises(TypeError):
        pr.key_dtype(3)
    assert pr.key_dtype() == np.uint32 == pr.key_dtype("threefry2x32") == pr.PRNGKey(0).dtype
    assert repr(pr.random_gamma_p) == "random_gamma" == jax.random.random_gamma_p.name


# ---- samplers built on linear algebra (python/podlet/_src/random_matrices.py) --------
def _spd(n, seed):
    a = np.random.default_rng(seed).normal(size=(n, n)).astype(np.float32)
    return a @ a.T + np.eye(n, dtype=np.float32)


def test_multivariate_normal_cholesky_matches_jax():
    cov = np.stack([_spd(4, 1), _spd(4, 2)])                          # batched cov, broadcast mean
    mean = np.random.default_rng(3).normal(size=(4,)).astype(np.float32)
    got = np.asarray(pr.multivariate_normal(pr.PRNGKey(SEED), mean, cov, (50, 2)))
    want = np.asarray(jax.random.multivariate_normal(jax.random.PRNGKey(SEED), mean, cov, (50, 2)))
    assert got.shape == want.shape == (50, 2, 4) and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    # shape None: the broadcast of the batch shapes
    assert pr.multivariate_normal(pr.PRNGKey(0), mean, cov).shape == (2, 4)


@pytest.mark.parametrize("method", ["eigh", "svd"])
def test_multivariate_normal_eigh_svd_use_jaxs_normals(method):
    """An eigenvector's sign is the factorisation's choice (Eigen's and LAPACK's differ), so
    the draws are checked as jax computes them: mean + factor @ z with jax's z for the
    same key, and factor factor^T = cov."""
    cov, mean = _spd(5, 4), np.arange(5, dtype=np.float32)
    got = np.asarray(pr.multivariate_normal(pr.PRNGKey(SEED), mean, cov, (64,), method=method))
    if method == "eigh":
        w, v = np.linalg.eigh(np.asarray(cov, np.float64))
        factor = v * np.sqrt(w)
    else:
        u, s, _ = np.linalg.svd(np.asarray(cov, np.float64))
        factor = u * np.sqrt(s)
    z = np.asarray(jax.random.normal(jax.random.PRNGKey(SEED), (64, 5)), np.float64)
    dev = got.astype(np.float64) - mean
    # each podlet column differs from NumPy's factor at most by a sign: compare the
    # recovered z up to per-column signs
    zp = np.linalg.solve(factor, dev.T).T
    signs = np.sign(np.sum(zp * z, axis=0))
    np.testing.assert_allclose(zp * signs, z, rtol=1e-3, atol=1e-3)


def test_orthogonal_matches_jax():
    for n, m, shape in ((5, None, ()), (3, 6, (2,)), (6, 3, ())):
        got = np.asarray(pr.orthogonal(pr.PRNGKey(SEED), n, shape, m=m))
        want = np.asarray(jax.random.orthogonal(jax.random.PRNGKey(SEED), n, shape, m=m))
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, atol=2e-5)
    q = np.asarray(podlet.jit(lambda k: pr.orthogonal(k, 4, (3,)))(pr.PRNGKey(1)), np.float64)
    np.testing.assert_allclose(q @ np.swapaxes(q, -1, -2), np.broadcast_to(np.eye(4), (3, 4, 4)), atol=1e-5)


def test_linear_algebra_sampler_errors_like_jax():
    cov, mean = _spd(3, 5), np.zeros(3, np.float32)
    for bad in (dict(method="lu"), dict(cov=np.ones((3, 2), np.float32)), dict(mean=np.float32(0)),
                dict(cov=np.stack([cov] * 3), shape=(4, 2))):
        args = {"mean": mean, "cov": cov, **bad}
        method = args.pop("method", "cholesky")
        with pytest.raises(ValueError):
            jax.random.multivariate_normal(jax.random.PRNGKey(0), method=method, **args)
        with pytest.raises(ValueError):
            pr.multivariate_normal(pr.PRNGKey(0), method=method, **args)
    with pytest.raises(ValueError):
        pr.multivariate_normal(pr.PRNGKey(0), mean, cov, dtype=np.int32)
