"""podlet.optim.perturbations: optax.perturbations (0.2.8), differentiable Monte-Carlo
smoothing of a function by random perturbations of its input (Berthet et al. 2020):

    smooth = optax.perturbations.make_perturbed_fun(argmax_one_hot, num_samples=100, sigma=0.5)
    y = smooth(key, x)               # E[f(x + sigma Z)], Z ~ Gumbel
    g = podlet.grad(lambda x: loss(smooth(key, x)))(x)

The samples come from podlet.random with optax's key splitting, so the estimate equals
optax's from the same key.
"""
from typing import Callable

from .. import lax
from .. import numpy as jnp
from .. import random as _random
from .. import tree_util as _tu
from .._src.batching import vmap
from . import tree as _tree

__all__ = ["Gumbel", "Normal", "make_perturbed_fun"]


class Normal:
    """Standard normal noise."""

    def sample(self, key, sample_shape=(), dtype=float):
        return _random.normal(key, sample_shape, dtype)

    def log_prob(self, inputs):
        return -0.5 * inputs ** 2


class Gumbel:
    """Standard Gumbel noise."""

    def sample(self, key, sample_shape=(), dtype=float):
        return _random.gumbel(key, sample_shape, dtype)

    def log_prob(self, inputs):
        return -inputs - jnp.exp(-inputs)


def _magicbox(x):
    return jnp.exp(x - lax.stop_gradient(x))


def make_perturbed_fun(fun: Callable, num_samples: int = 1000, sigma=0.1, noise=Gumbel(), use_baseline=True):
    """``(key, x) -> mean over num_samples of fun(x + sigma * Z)``, whose gradient is the
    score-function estimator (a "magic box" on the noise's log-probability), with
    ``fun(x)`` as a control variate when ``use_baseline``."""

    def mc_estimator(key, x):
        def stoch_estimator(key, x, baseline):
            sample = _tree.random_like(key, x, sampler=noise.sample)
            shifted = _tu.tree_map(lambda x, z: lax.stop_gradient(x + sigma * z), x, sample)
            sample = _tu.tree_map(lambda x, y: (y - x) / sigma, x, shifted)
            box = _magicbox(_tree.sum(_tu.tree_map(noise.log_prob, sample)))
            out = _tree.scale(box, fun(shifted))
            if use_baseline:
                out = _tree.add_scale(out, 1 - box, baseline)
            return out

        baseline = fun(_tu.tree_map(lax.stop_gradient, x)) if use_baseline else None
        out = vmap(stoch_estimator, in_axes=(0, None, None), out_axes=0)(_random.split(key, num_samples), x, baseline)
        return _tu.tree_map(lambda v: jnp.mean(v, axis=0), out)

    return mc_estimator
