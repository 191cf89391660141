"""Constraints on the updates and gradient noise: ``keep_params_nonnegative``,
``zero_nans``, ``add_noise`` (``optax/transforms/_constraining.py``, ``_adding.py``).
"""
import warnings
from typing import Any, NamedTuple

from .. import numpy as jnp
from .. import random as _random
from .. import tree_util as _tu
from ._base import NO_PARAMS_MSG, EmptyState, GradientTransformation, safe_increment
from . import tree as _tree

NonNegativeParamsState = EmptyState


def keep_params_nonnegative() -> GradientTransformation:
    """Changes the updates so that ``params + updates >= 0``: where the step would go
    negative the update is ``-params`` (the param lands on 0). Put it last in a chain.

    Returns:
      A :class:`GradientTransformation` with state ``EmptyState()``; ``update`` needs
      ``params``.
    """

    def init_fn(params):
        del params
        return NonNegativeParamsState()

    def update_fn(updates, state, params):
        if params is None:
            raise ValueError(NO_PARAMS_MSG)
        updates = _tu.tree_map(lambda p, u: None if p is None else jnp.where((p + u) < 0.0, -p, u),
                               params, updates, is_leaf=lambda x: x is None)
        return updates, state

    return GradientTransformation(init_fn, update_fn)


class ZeroNansState(NamedTuple):
    """``found_nan``: one bool per leaf, True when that leaf's last updates held a NaN."""
    found_nan: Any


def zero_nans() -> GradientTransformation:
    """Replaces NaNs in the updates with 0 and records, per leaf, whether it did.

    Returns:
      A :class:`GradientTransformation` with state ``ZeroNansState(found_nan)``.
    """

    def init_fn(params):
        return ZeroNansState(found_nan=_tu.tree_map(lambda p: jnp.asarray(False), params))

    def update_fn(updates, opt_state, params=None):
        del params, opt_state
        found = _tu.tree_map(lambda u: jnp.any(jnp.isnan(u)), updates)
        updates = _tu.tree_map(lambda u: jnp.where(jnp.isnan(u), jnp.zeros_like(u), u), updates)
        return updates, ZeroNansState(found_nan=found)

    return GradientTransformation(init=init_fn, update=update_fn)


class AddNoiseState(NamedTuple):
    """State of :func:`add_noise`: the step count (for the annealing) and the key."""
    count: Any
    rng_key: Any


def _canonicalize_key(key_or_seed):
    if hasattr(key_or_seed, "shape") and tuple(key_or_seed.shape) == (2,):
        return key_or_seed
    return _random.PRNGKey(key_or_seed)


def add_noise(eta, gamma, key=None, *, seed=None) -> GradientTransformation:
    """Adds annealed Gaussian noise (Neelakantan et al. 2015): ``g + N(0, eta /
    (1 + t)**gamma)`` with ``t`` the step count.

    The noise is ``podlet.random.normal`` on keys split as optax splits them, so a
    run from the same key adds the same noise as optax (and jax.random).

    Args:
      eta: base variance of the noise.
      gamma: decay exponent of the variance.
      key: a PRNG key or an int seed.
      seed: deprecated spelling of an int ``key``.

    Returns:
      A :class:`GradientTransformation` with state ``AddNoiseState(count, rng_key)``
      (``rng_key`` a raw uint32[2] key; optax holds a typed key with the same bits).
    """
    if seed is not None:
        warnings.warn('"seed" is deprecated and will be removed in optax 0.2.7, use "key".', DeprecationWarning)
        if key is not None:
            raise ValueError("Only one of seed or key can be specified.")
        key = seed
    if key is None:
        warnings.warn("Specifying a key will be required in optax 0.2.7.")
        key = 0

    def init_fn(params):
        del params
        return AddNoiseState(count=jnp.zeros([], jnp.int32), rng_key=_canonicalize_key(key))

    def update_fn(updates, state, params=None):
        del params
        count_inc = safe_increment(state.count)
        standard_deviation = jnp.sqrt(eta / count_inc ** gamma)
        keys = _random.split(state.rng_key)
        rng_key, sample_key = keys[0], keys[1]
        noise = _tree.random_like(sample_key, target_tree=updates, sampler=_random.normal)
        updates = _tree.add_scale(updates, standard_deviation, noise)
        return updates, AddNoiseState(count=count_inc, rng_key=rng_key)

    return GradientTransformation(init_fn, update_fn)
