"""Schedule-free optimizers (Defazio et al. 2024, "The Road Less Scheduled";
``optax/contrib/_schedule_free.py``).

The base optimizer steps a sequence ``z``; the params handed back are the
interpolation ``y = b1 x + (1 - b1) z`` of ``z`` and its weighted running average ``x``
(weights ``max_lr**weight_lr_power``), the point where gradients are taken. Evaluate
at ``x``: :func:`schedule_free_eval_params`.
"""
from typing import Any, NamedTuple, Optional

from ... import numpy as jnp
from ... import tree_util as _tu
from .. import _base, _moments, alias, schedules, transform
from .. import tree as _tree


class ScheduleFreeState(NamedTuple):
    """State of :func:`schedule_free`."""
    b1: Any
    weight_sum: Any
    step_count: Any
    max_lr: Any
    base_optimizer_state: Any
    z: Any


def schedule_free_eval_params(state, params):
    """The averaged params ``x = (y - (1 - b1) z) / b1`` to evaluate the model at.

    Args:
      state: a :class:`ScheduleFreeState` (or a state holding ``b1`` and ``z``).
      params: the current (interpolated) params ``y``.
    """
    b1 = getattr(state, "b1", None)
    z = getattr(state, "z", None)
    if b1 is None or z is None:
        raise ValueError("schedule_free_eval_params requires a ScheduleFreeState as input.")
    return _tu.tree_map(lambda yi, zi: (yi - (1.0 - b1) * zi) / b1, params, z)


def schedule_free(base_optimizer, learning_rate, b1=0.9, weight_lr_power=2.0,
                  state_dtype=None) -> _base.GradientTransformationExtraArgs:
    """Turns ``base_optimizer`` into its schedule-free version.

    Args:
      base_optimizer: the optimizer stepping ``z`` (with ``learning_rate`` inside it).
      learning_rate: the same learning rate (a float or a schedule), for the weights.
      b1: the interpolation between ``x`` and ``z``.
      weight_lr_power: the averaging weight is ``max_lr ** weight_lr_power``.
      state_dtype: dtype of ``z`` (default: the params').

    Returns:
      A :class:`GradientTransformationExtraArgs` with state
      ``ScheduleFreeState(b1, weight_sum, step_count, max_lr, base_optimizer_state, z)``;
      ``update`` needs ``params``.
    """
    base_optimizer = _base.with_extra_args_support(base_optimizer)

    def init_fn(params):
        params_dtype = _tree.dtype(params, "lowest")
        z = _base.tree_cast(params, state_dtype) if state_dtype is not None else params
        z = _tu.tree_map(lambda t: jnp.array(t, copy=True), z)
        return ScheduleFreeState(b1=jnp.asarray(b1, dtype=params_dtype), weight_sum=jnp.zeros([], params_dtype),
                                 step_count=jnp.ones([], jnp.int32), max_lr=jnp.zeros([], params_dtype),
                                 base_optimizer_state=base_optimizer.init(params), z=z)

    def update_fn(grads, state, params=None, **extra_args):
        if params is None:
            raise ValueError(_base.NO_PARAMS_MSG)
        lr = learning_rate
        if callable(learning_rate):
            lr = jnp.asarray(learning_rate(state.step_count), dtype=state.max_lr.dtype)
        max_lr = jnp.maximum(state.max_lr, lr)
        next_step_count = _base.safe_increment(state.step_count)
        weight = max_lr ** weight_lr_power
        next_total_weight = state.weight_sum + weight
        ck = jnp.where(jnp.logical_or(jnp.isnan(weight), jnp.isnan(next_total_weight)),
                       jnp.full(weight.shape, jnp.nan),
                       jnp.nan_to_num(weight / next_total_weight, nan=0.0, posinf=jnp.inf))
        base_updates, next_base_state = base_optimizer.update(grads, state.base_optimizer_state, params,
                                                              **extra_args)
        z = _tu.tree_map(lambda pi, ui: jnp.asarray(pi + ui).astype(jnp.asarray(pi).dtype), state.z, base_updates)
        prev_x = _tu.tree_map(lambda yi, zi: (yi - (1.0 - b1) * zi) / b1, params, state.z)
        x = _tu.tree_map(lambda xi, zi: (1.0 - ck) * xi + ck * zi, prev_x, z)
        new_params = _tu.tree_map(lambda xi, zi: b1 * xi + (1.0 - b1) * zi, x, z)
        updates = _tu.tree_map(lambda npi, pi: npi - pi, new_params, params)
        return updates, ScheduleFreeState(b1=state.b1, weight_sum=next_total_weight, step_count=next_step_count,
                                          max_lr=max_lr, base_optimizer_state=next_base_state, z=z)

    return _base.GradientTransformationExtraArgs(init_fn, update_fn)


def _warmup(learning_rate, warmup_steps):
    if warmup_steps is None:
        return learning_rate
    return schedules.warmup_constant_schedule(init_value=0, peak_value=learning_rate, warmup_steps=warmup_steps)


def schedule_free_sgd(learning_rate=1.0, warmup_steps: Optional[int] = None, b1=0.9, weight_decay=None,
                      weight_lr_power=2.0, state_dtype=None) -> _base.GradientTransformationExtraArgs:
    """Schedule-free SGD: :func:`schedule_free` around ``sgd`` (after optional weight
    decay), with an optional linear warmup of the learning rate."""
    learning_rate = _warmup(learning_rate, warmup_steps)
    optimizer = alias.sgd(learning_rate)
    if weight_decay is not None:
        optimizer = _base.chain(transform.add_decayed_weights(weight_decay), optimizer)
    return schedule_free(optimizer, learning_rate=learning_rate, b1=b1, weight_lr_power=weight_lr_power,
                         state_dtype=state_dtype)


def schedule_free_adamw(learning_rate=0.0025, warmup_steps: Optional[int] = None, b1=0.9, b2=0.999, eps=1e-8,
                        weight_decay=0.0, weight_lr_power=2.0, state_dtype=None) -> _base.GradientTransformationExtraArgs:
    """Schedule-free AdamW: :func:`schedule_free` around bias-corrected RMS scaling
    (``scale_by_rms(b2, eps_in_sqrt=False, bias_correction=True)``, Adam without its
    first moment, which the averaging replaces), weight decay and the learning rate."""
    learning_rate = _warmup(learning_rate, warmup_steps)
    optimizer = _base.chain(_moments.scale_by_rms(decay=b2, eps=eps, eps_in_sqrt=False, bias_correction=True),
                            transform.add_decayed_weights(weight_decay),
                            transform.scale_by_learning_rate(learning_rate))
    return schedule_free(optimizer, learning_rate=learning_rate, b1=b1, weight_lr_power=weight_lr_power,
                         state_dtype=state_dtype)
