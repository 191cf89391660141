"""ADOPT (Taniguchi et al. 2024, "ADOPT: Modified Adam Can Converge with Any beta_2"),
``optax/contrib/_adopt.py``: the second moment of the *previous* step normalises the
gradient before the momentum, so the update does not depend on the current gradient's
own magnitude; the normalised gradient is clipped at ``clip_value_fn(t) = t**0.25``."""
from typing import Any, Callable, Optional

from ... import numpy as jnp
from ... import tree_util as _tu
from .. import _base, transform


def scale_by_adopt(b1=0.9, b2=0.9999, eps=1e-6, mu_dtype=None, *, nesterov: bool = False, use_clipping: bool = True,
                   clip_value_fn: Callable = lambda x: x ** 0.25) -> _base.GradientTransformation:
    """ADOPT's scaling; state ``ScaleByAdamState(count, mu, nu)`` (the first step only
    initialises ``nu``: its update is 0)."""
    mu_dtype = _base.canonicalize_dtype(mu_dtype)

    def init_fn(params):
        return transform.ScaleByAdamState(count=jnp.zeros([], jnp.int32), mu=_base.tree_zeros_like(params, mu_dtype),
                                          nu=_base.tree_zeros_like(params))

    def update_fn(updates, state, params=None):
        del params
        b2_ = jnp.where(state.count > 0, b2, 0)
        b1_ = jnp.where(state.count > 0, b1, 1)
        nu = transform.update_moment_per_elem_norm(updates, state.nu, b2_, 2)
        if use_clipping:
            clip_value = clip_value_fn(state.count)
            mu_updates = _tu.tree_map(lambda ud, n: jnp.clip(ud / jnp.maximum(jnp.sqrt(n), eps), -clip_value,
                                                             clip_value), updates, state.nu)
        else:
            mu_updates = _tu.tree_map(lambda ud, n: ud / jnp.maximum(jnp.sqrt(n), eps), updates, state.nu)
        mu = transform.update_moment(mu_updates, state.mu, b1_, 1)
        mu_ = transform.update_moment(mu_updates, mu, b1_, 1) if nesterov else mu
        return mu_, transform.ScaleByAdamState(count=_base.safe_increment(state.count),
                                               mu=_base.tree_cast(mu, mu_dtype), nu=nu)

    return _base.GradientTransformation(init_fn, update_fn)


def adopt(learning_rate, b1=0.9, b2=0.9999, eps=1e-6, mu_dtype: Optional[Any] = None, *, nesterov: bool = False,
          use_clipping: bool = True,
          clip_value_fn: Callable = lambda x: x ** 0.25) -> _base.GradientTransformationExtraArgs:
    """ADOPT: :func:`scale_by_adopt` then the learning rate."""
    return _base.chain(scale_by_adopt(b1=b1, b2=b2, eps=eps, mu_dtype=mu_dtype, nesterov=nesterov,
                                      use_clipping=use_clipping, clip_value_fn=clip_value_fn),
                       transform.scale_by_learning_rate(learning_rate))
