"""Reduce the learning rate on a plateau of the loss (``optax/contrib/_reduce_on_plateau.py``).

    tx = optax.chain(optax.adam(1e-3), optax.contrib.reduce_on_plateau(patience=5, accumulation_size=100))
    updates, state = tx.update(grads, state, params, value=loss)

The loss values given as ``value`` are averaged over ``accumulation_size`` calls; when
an average fails to improve on the best by ``rtol``/``atol`` for ``patience`` averages,
the updates' scale is multiplied by ``factor`` (then ``cooldown`` averages pass
without counting).
"""
from typing import Any, NamedTuple

from ... import lax
from ... import numpy as jnp
from ... import tree_util as _tu
from .. import _base
from .. import tree as _tree


class ReduceLROnPlateauState(NamedTuple):
    """State of :func:`reduce_on_plateau`."""
    scale: Any
    best_value: Any
    plateau_count: Any  # int32
    cooldown_count: Any  # int32
    count: Any  # int32
    avg_value: Any


def reduce_on_plateau(factor: float = 0.1, patience=10, rtol: float = 1e-4, atol: float = 0.0, cooldown=0,
                      accumulation_size=1, min_scale=0.0) -> _base.GradientTransformationExtraArgs:
    """Scales the updates by a factor that drops when the loss stops improving.

    Args:
      factor: the multiplier applied on a plateau, in (0, 1).
      patience: averages without improvement before a drop.
      rtol: relative improvement needed (``avg < (1 - rtol) * best - atol``).
      atol: absolute improvement needed.
      cooldown: averages ignored after a drop.
      accumulation_size: loss values averaged into one.
      min_scale: the lowest scale.

    Returns:
      A :class:`GradientTransformationExtraArgs` whose ``update`` takes the extra
      argument ``value``; state ``ReduceLROnPlateauState(scale, best_value,
      plateau_count, cooldown_count, count, avg_value)``.
    """
    if factor <= 0.0 or factor >= 1.0:
        raise ValueError(f"Factor must be in the range (0, 1), got factor = {factor}.")
    if rtol < 0.0 or atol < 0.0:
        raise ValueError(f"Both rtol and atol must be non-negative, got rtol = {rtol} and atol = {atol}.")
    if rtol == 0.0 and atol == 0.0:
        raise ValueError(f"At least one of rtol or atol must be positive, got rtol = {rtol} and atol = {atol}.")
    if rtol > 1.0:
        raise ValueError(f"rtol must be less than or equal to 1.0, got rtol = {rtol}.")

    def init_fn(params):
        lowest = _tree.dtype(params, "lowest")
        highest = _tree.dtype(params, "highest")
        return ReduceLROnPlateauState(best_value=jnp.asarray(float("inf"), dtype=highest),
                                      plateau_count=jnp.asarray(0, jnp.int32), scale=jnp.asarray(1.0, dtype=lowest),
                                      cooldown_count=jnp.asarray(0, jnp.int32), count=jnp.asarray(0, jnp.int32),
                                      avg_value=jnp.asarray(0.0, highest))

    def _update_scale(state):
        avg_value = state.avg_value
        has_improved = avg_value < (1 - rtol) * state.best_value - atol
        new_best_value = jnp.where(has_improved, avg_value.astype(state.best_value.dtype), state.best_value)
        curr_plateau_count = jnp.where(has_improved, 0, _base.safe_increment(state.plateau_count))

        def in_cooldown():
            return jnp.asarray(0, jnp.int32), state.scale, state.cooldown_count - 1

        def not_in_cooldown():
            hit = curr_plateau_count == patience
            new_plateau_count = jnp.where(hit, 0, curr_plateau_count)
            new_scale = jnp.maximum(jnp.where(hit, state.scale * factor, state.scale), min_scale)
            new_cooldown_count = jnp.where(hit, cooldown, 0).astype(jnp.int32)
            return new_plateau_count, new_scale, new_cooldown_count

        new_plateau_count, new_scale, new_cooldown_count = lax.cond(state.cooldown_count > 0, in_cooldown,
                                                                    not_in_cooldown)
        return ReduceLROnPlateauState(plateau_count=new_plateau_count,
                                      best_value=new_best_value.astype(state.best_value.dtype),
                                      scale=new_scale.astype(state.scale.dtype), cooldown_count=new_cooldown_count,
                                      count=jnp.asarray(0, jnp.int32), avg_value=jnp.asarray(0.0, avg_value.dtype))

    def update_fn(updates, state, params=None, *, value, **extra_args):
        del params, extra_args
        count = state.count
        new_count = _base.safe_increment(count)
        new_avg_value = (count * state.avg_value + jnp.asarray(value).astype(state.avg_value.dtype)) / new_count
        new_state = state._replace(avg_value=new_avg_value.astype(state.avg_value.dtype), count=new_count)
        new_state = lax.cond(new_count == accumulation_size, _update_scale, lambda x: x, new_state)
        updates = _tu.tree_map(lambda g: new_state.scale * g, updates)
        return updates, new_state

    return _base.GradientTransformationExtraArgs(init_fn, update_fn)
