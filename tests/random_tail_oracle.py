"""The draws tests/test_random_tail.py compares podlet.random's long tail with, written
once for both libraries (``r`` is ``jax.random`` or ``podlet.random``).

XLA compiles each gamma-, poisson- and binomial-based sampler for seconds (about 60 s
in all on a loaded 2-core machine), so their jax.random draws are stored in ``data/random_tail_jax.npz`` together
with the jax version that made them; the test recomputes them live (slowly) when the
installed jax is another version. Regenerate with

    .venv/bin/python tests/random_tail_oracle.py
"""
import os

import ml_dtypes
import numpy as np

SEED = 7
N = 1000
A = np.linspace(0.05, 8.0, N).astype(np.float32)              # gamma shapes, boosted (< 1) and not
LAM = np.concatenate([np.linspace(0.0, 9.9, N // 2), np.linspace(10.0, 400.0, N // 2)]).astype(np.float32)
BN = np.concatenate([np.full(N // 2, 12.0), np.full(N // 2, 300.0)]).astype(np.float32)
BP = np.linspace(0.01, 0.99, N).astype(np.float32)            # inversion and BTRS, p < 1/2 and p > 1/2
ALPHA = np.array([0.3, 1.0, 4.0], np.float32)
MP = np.array([0.2, 0.3, 0.5], np.float32)
GRAD_A = A[::10]

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "random_tail_jax.npz")


def stored_draws(r, k):
    """The expensive samplers (rejection loops), keyed by name."""
    ks = r.split(k, 14)  # (bfloat16 reuses keys: another dtype gives other draws)
    return {
        "gamma": r.gamma(ks[0], A),
        "loggamma": r.loggamma(ks[1], A),
        "beta": r.beta(ks[2], 0.7, A),
        "dirichlet": r.dirichlet(ks[3], ALPHA, (300,)),
        "chisquare": r.chisquare(ks[4], 2 * A),
        "f": r.f(ks[5], 3.0, 5.0, (N,)),
        "t": r.t(ks[6], 4.0, (N,)),
        "generalized_normal": r.generalized_normal(ks[7], 1.5, (N,)),
        "ball": r.ball(ks[8], 3, 2, (300,)),
        "poisson": r.poisson(ks[9], LAM),
        "binomial": r.binomial(ks[10], BN, BP),
        "multinomial": r.multinomial(ks[11], 100.0, MP, shape=(300, 3)),
        "poisson_scalar_lam": r.poisson(ks[12], 3.5, (N,)),
        "binomial_nan": r.binomial(ks[13], np.array([np.nan, -1.0, 5.0, np.inf, 7.0], np.float32),
                                   np.array([0.5, 0.5, np.nan, 0.7, -0.1], np.float32)),
        "gamma_bf16": r.gamma(ks[0], A[:200], dtype=ml_dtypes.bfloat16),
        "t_bf16": r.t(ks[6], 4.0, (200,), dtype=ml_dtypes.bfloat16),
    }


# the closed forms' parameters, passed to jax.jit as arguments as an eager jax.random
# call does (literals would be constant-folded by XLA's compile-time evaluator)
LIVE_PARAMS = {n: np.float32(v) for n, v in dict(
    sigma=0.5, b=3.0, loc=1.0, scale=2.0, conc=1.5, mean=1.5, left=-1.0, mode=0.5, right=2.0, p=0.3).items()}


def live_draws(r, k, q=LIVE_PARAMS):
    """The closed-form samplers (cheap to compile), compared live."""
    ks = r.split(k, 10)
    return {
        "cauchy": r.cauchy(ks[0], (N,)),
        "lognormal": r.lognormal(ks[1], q["sigma"], (N,)),
        "pareto": r.pareto(ks[2], q["b"], (N,)),
        "maxwell": r.maxwell(ks[3], (N,)),
        "double_sided_maxwell": r.double_sided_maxwell(ks[4], q["loc"], q["scale"], (N,)),
        "weibull_min": r.weibull_min(ks[5], q["scale"], q["conc"], (N,)),
        "rayleigh": r.rayleigh(ks[6], q["scale"], (N,)),
        "wald": r.wald(ks[7], q["mean"], (N,)),
        "triangular": r.triangular(ks[8], q["left"], q["mode"], q["right"], (N,)),
        "geometric": r.geometric(ks[9], q["p"], (N,)),
    }


def jax_live_draws():
    import jax
    out = jax.jit(lambda k, q: live_draws(jax.random, k, q))(jax.random.PRNGKey(SEED), LIVE_PARAMS)
    return {n: np.asarray(v) for n, v in out.items()}


def jax_stored_draws():
    """Computes what PATH stores, with the installed jax."""
    import jax
    k = jax.random.PRNGKey(SEED)
    # eagerly, as a user calls them: each sampler is its own jit with the parameters as
    # arguments (inside one jit, XLA would constant-fold what depends on them only)
    out = {n: np.asarray(v) for n, v in stored_draws(jax.random, k).items()}
    out["gamma_grad"] = np.asarray(jax.grad(lambda a: jax.random.gamma(k, a).sum())(GRAD_A))
    out["loggamma_grad"] = np.asarray(jax.grad(lambda a: jax.random.loggamma(k, a).sum())(GRAD_A))
    return out


def _to_npz(draws):
    return {n: v.view(np.uint16) if v.dtype == ml_dtypes.bfloat16 else v for n, v in draws.items()}


def _from_npz(z):
    return {n: z[n].view(ml_dtypes.bfloat16) if n.endswith("_bf16") else z[n]
            for n in z.files if n != "jax_version"}


def load_or_compute():
    import jax
    if os.path.exists(PATH):
        with np.load(PATH) as z:
            if str(z["jax_version"]) == jax.__version__:
                return _from_npz(z)
    return jax_stored_draws()


if __name__ == "__main__":
    import jax
    draws = jax_stored_draws()
    os.makedirs(os.path.dirname(PATH), exist_ok=True)
    np.savez_compressed(PATH, jax_version=np.array(jax.__version__), **_to_npz(draws))
    print(f"wrote {PATH} (jax {jax.__version__}, {len(draws)} arrays)")
