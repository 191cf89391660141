"""Schedules: pure functions ``step -> value`` for learning rates and other
hyper-parameters, with optax 0.2.8's formulas (``optax/schedules/_schedule.py``).

Every schedule accepts a Python int step (returning a podlet array or, for constant
pieces, the Python value) and a traced int32 step inside ``podlet.jit`` (which is how
:func:`scale_by_schedule` calls it, with the count from the optimizer state). There is
no Python control flow on the step: boundaries are ``jnp.where`` selections.
"""
import logging
from typing import Any, Callable, Dict, Iterable, Optional, Sequence

import numpy as _np

from .. import numpy as jnp
from .. import tree_util as _tu

log = logging.getLogger("podlet.optim")

Schedule = Callable[[Any], Any]


def constant_schedule(value) -> Schedule:
    """A schedule that always returns ``value``.

    Args:
      value: the constant.

    Returns:
      A function ``count -> value``.
    """
    return lambda count: value


def polynomial_schedule(init_value, end_value, power, transition_steps: int,
                        transition_begin: int = 0) -> Schedule:
    r"""Polynomial transition from ``init_value`` to ``end_value``:

    .. math:: v(t) = (I - E)\,(1 - \mathrm{clip}(t - B, 0, T)/T)^P + E

    Args:
      init_value: value before and at ``transition_begin``.
      end_value: value from ``transition_begin + transition_steps`` on.
      power: the polynomial power ``P``.
      transition_steps: ``T``; if <= 0 the schedule is constant at ``init_value``.
      transition_begin: ``B``, steps held at ``init_value`` first (negative means 0).

    Returns:
      A function ``count -> value``.
    """
    if transition_steps <= 0:
        log.info("A polynomial schedule was set with a non-positive `transition_steps` value; "
                 "this results in a constant schedule with value `init_value`.")
        return lambda count: init_value
    if transition_begin < 0:
        log.info("A polynomial schedule was set with a negative `transition_begin` value; "
                 "this will result in `transition_begin` falling back to `0`.")
        transition_begin = 0

    def schedule(count):
        count = jnp.clip(count - transition_begin, 0, transition_steps)
        frac = 1 - count / transition_steps
        return (init_value - end_value) * (frac ** power) + end_value

    return schedule


def linear_schedule(init_value, end_value, transition_steps: int, transition_begin: int = 0) -> Schedule:
    """Linear transition from ``init_value`` to ``end_value`` over ``transition_steps``
    steps starting at ``transition_begin`` (:func:`polynomial_schedule` with power 1).

    Args:
      init_value: initial value.
      end_value: final value.
      transition_steps: length of the transition; <= 0 gives a constant schedule.
      transition_begin: steps held at ``init_value`` first.

    Returns:
      A function ``count -> value``.
    """
    return polynomial_schedule(init_value=init_value, end_value=end_value, power=1,
                               transition_steps=transition_steps, transition_begin=transition_begin)


def piecewise_constant_schedule(init_value, boundaries_and_scales: Optional[Dict[int, float]] = None) -> Schedule:
    """``init_value`` times the product of every scale whose boundary the step has
    reached.

    Args:
      init_value: the starting value.
      boundaries_and_scales: ``{step: scale}``; scales must be non-negative.

    Returns:
      A function ``count -> value``.
    """
    if boundaries_and_scales is not None:
        if not all(scale >= 0.0 for scale in boundaries_and_scales.values()):
            raise ValueError("`piecewise_constant_schedule` expects non-negative scale factors")

    def schedule(count):
        v = init_value
        if boundaries_and_scales is not None:
            for threshold, scale in sorted(boundaries_and_scales.items()):
                indicator = jnp.maximum(0.0, jnp.sign(threshold - count))
                v = v * indicator + (1 - indicator) * scale * v
        return v

    return schedule


def exponential_decay(init_value, transition_steps: int, decay_rate: float, transition_begin: int = 0,
                      staircase: bool = False, end_value=None) -> Schedule:
    """``init_value * decay_rate ** ((count - transition_begin) / transition_steps)``
    (the exponent floored when ``staircase``), held at ``init_value`` before
    ``transition_begin`` and bounded by ``end_value``.

    Args:
      init_value: the initial value.
      transition_steps: steps per factor of ``decay_rate``; <= 0 gives a constant.
      decay_rate: the decay rate; 0 gives a constant schedule.
      transition_begin: steps held at ``init_value`` first.
      staircase: decay in discrete jumps.
      end_value: a lower bound when ``decay_rate < 1``, an upper bound otherwise.

    Returns:
      A function ``count -> value``.
    """
    if transition_steps <= 0:
        log.info("An exponential schedule was set with a non-positive `transition_steps` value; "
                 "this will result in a constant schedule with value `init_value`.")
        return lambda count: init_value
    if decay_rate == 0:
        log.info("An exponential schedule was set with a zero `decay_rate` value; "
                 "this will result in a constant schedule with value `init_value`.")
        return lambda count: init_value
    if transition_begin < 0:
        log.info("An exponential schedule was set with a negative `transition_begin` value; "
                 "this will result in `transition_begin` falling back to `0`.")
        transition_begin = 0
    clip_fn = None
    if end_value is not None:
        clip_fn = jnp.maximum if decay_rate < 1.0 else jnp.minimum

    def schedule(count):
        decreased_count = count - transition_begin
        p = decreased_count / transition_steps
        if staircase:
            p = jnp.floor(p)
        decayed_value = jnp.where(decreased_count <= 0, init_value, init_value * jnp.power(decay_rate, p))
        if clip_fn is not None:
            decayed_value = clip_fn(decayed_value, end_value)
        return decayed_value

    return schedule


def cosine_decay_schedule(init_value, decay_steps: int, alpha=0.0, exponent=1.0) -> Schedule:
    r"""Cosine decay (Loshchilov & Hutter 2017):

    .. math:: v(t) = I\left((1-\alpha)\left[\tfrac12\left(1 + \cos\frac{\pi\min(t, T)}{T}\right)\right]^p
              + \alpha\right)

    Args:
      init_value: the initial value ``I``.
      decay_steps: ``T`` > 0, the length of the decay.
      alpha: the final multiplier.
      exponent: ``p``.

    Returns:
      A function ``count -> value``.
    """
    if not decay_steps > 0:
        raise ValueError(f"The cosine_decay_schedule requires positive decay_steps, got decay_steps={decay_steps}.")

    def schedule(count):
        # Python ints become floats (as optax does, against int32 overflow under jit).
        steps, count = _tu.tree_map(lambda x: float(x) if isinstance(x, int) else x, (decay_steps, count))
        count = jnp.minimum(count, steps)
        cosine_decay = 0.5 * (1 + jnp.cos(jnp.pi * count / steps))
        decayed = (1 - alpha) * cosine_decay ** exponent + alpha
        return init_value * decayed

    return schedule


def _linear_interpolate(start, end, pct):
    return (end - start) * pct + start


def _cosine_interpolate(start, end, pct):
    return end + (start - end) / 2.0 * (jnp.cos(jnp.pi * pct) + 1)


def piecewise_interpolate_schedule(interpolate_type: str, init_value,
                                   boundaries_and_scales: Optional[Dict[int, float]] = None) -> Schedule:
    """Interpolates (linearly or by a half cosine) between the accumulated values
    ``init_value * prod(scales up to boundary)`` at the boundaries.

    Args:
      interpolate_type: ``'linear'`` or ``'cosine'``.
      init_value: the value at step 0.
      boundaries_and_scales: ``{step: scale}``, scales non-negative.

    Returns:
      A function ``count -> value``.
    """
    if interpolate_type == "linear":
        interpolate_fn = _linear_interpolate
    elif interpolate_type == "cosine":
        interpolate_fn = _cosine_interpolate
    else:
        raise ValueError("`interpolate_type` must be either 'cosine' or 'linear'")
    if boundaries_and_scales:
        boundaries, scales = zip(*sorted(boundaries_and_scales.items()))
        if not all(scale >= 0.0 for scale in scales):
            raise ValueError("`piecewise_interpolate_schedule` expects non-negative scale factors")
    else:
        boundaries, scales = (), ()
    # The accumulated values are constants: a float32 running product, as jnp.cumprod.
    values_np = _np.cumprod(_np.asarray((init_value,) + tuple(scales), _np.float32), dtype=_np.float32)

    def schedule(count):
        bounds = jnp.asarray(_np.asarray((0,) + tuple(boundaries), _np.int32))
        values = jnp.asarray(values_np)
        interval_sizes = jnp.maximum(bounds[1:] - bounds[:-1], 1)
        indicator = jnp.logical_and(bounds[:-1] <= count, count < bounds[1:])
        pct = (count - bounds[:-1]) / interval_sizes
        interp_vals = interpolate_fn(values[:-1], values[1:], pct)
        return jnp.dot(indicator.astype(interp_vals.dtype), interp_vals) + (bounds[-1] <= count) * values[-1]

    return schedule


def linear_onecycle_schedule(transition_steps: int, peak_value, pct_start: float = 0.3, pct_final: float = 0.85,
                             div_factor: float = 25.0, final_div_factor: float = 1e4) -> Schedule:
    """One-cycle schedule with three linear phases (Smith & Topin 2017).

    Args:
      transition_steps: total length.
      peak_value: the maximum, reached at ``pct_start * transition_steps``.
      pct_start: fraction spent increasing.
      pct_final: fraction after which the final decrease begins.
      div_factor: initial value is ``peak_value / div_factor``.
      final_div_factor: final value is ``initial / final_div_factor``.

    Returns:
      A function ``count -> value``.
    """
    if transition_steps <= 0:
        raise ValueError("A linear onecycle schedule was set with a non-positive `transition_steps`")
    return piecewise_interpolate_schedule(
        "linear", peak_value / div_factor,
        {int(pct_start * transition_steps): div_factor,
         int(pct_final * transition_steps): 1.0 / div_factor,
         transition_steps: 1.0 / final_div_factor})


def cosine_onecycle_schedule(transition_steps: int, peak_value, pct_start: float = 0.3, div_factor: float = 25.0,
                             final_div_factor: float = 1e4) -> Schedule:
    """One-cycle schedule with cosine transitions (Smith & Topin 2017).

    Args:
      transition_steps: total length.
      peak_value: the maximum, reached at ``pct_start * transition_steps``.
      pct_start: fraction spent increasing.
      div_factor: initial value is ``peak_value / div_factor``.
      final_div_factor: final value is ``initial / final_div_factor``.

    Returns:
      A function ``count -> value``.
    """
    if transition_steps <= 0:
        raise ValueError("A linear onecycle schedule was set with a non-positive `transition_steps`")
    return piecewise_interpolate_schedule(
        "cosine", peak_value / div_factor,
        {int(pct_start * transition_steps): div_factor,
         int(transition_steps): 1.0 / (div_factor * final_div_factor)})


def join_schedules(schedules: Sequence[Schedule], boundaries: Sequence[int]) -> Schedule:
    """Runs ``schedules`` one after another; schedule ``i+1`` starts at
    ``boundaries[i]`` and sees the step counted from that boundary.

    Args:
      schedules: the schedules.
      boundaries: ``len(schedules) - 1`` increasing step boundaries.

    Returns:
      A function ``count -> value``.
    """

    def schedule(step):
        output = schedules[0](step)
        for boundary, sched in zip(boundaries, schedules[1:]):
            output = jnp.where(step < boundary, output, sched(step - boundary))
        return output

    return schedule


def warmup_constant_schedule(init_value, peak_value, warmup_steps: int) -> Schedule:
    """Linear warmup from ``init_value`` to ``peak_value``, then constant.

    Args:
      init_value: value at step 0.
      peak_value: value from ``warmup_steps`` on.
      warmup_steps: length of the warmup.

    Returns:
      A function ``count -> value``.
    """
    return linear_schedule(init_value=init_value, end_value=peak_value, transition_steps=warmup_steps)


def warmup_cosine_decay_schedule(init_value, peak_value, warmup_steps: int, decay_steps: int,
                                 end_value=0.0, exponent=1.0) -> Schedule:
    """Linear warmup from ``init_value`` to ``peak_value`` over ``warmup_steps``, then
    cosine decay to ``end_value`` at ``decay_steps`` (which includes the warmup).

    Args:
      init_value: value at step 0.
      peak_value: value at the end of the warmup.
      warmup_steps: length of the warmup.
      decay_steps: total length of warmup + decay (must exceed ``warmup_steps``).
      end_value: the final value.
      exponent: exponent of the cosine factor.

    Returns:
      A function ``count -> value``.
    """
    alpha = 0.0 if peak_value == 0.0 else end_value / peak_value
    schedules = [
        linear_schedule(init_value=init_value, end_value=peak_value, transition_steps=warmup_steps),
        cosine_decay_schedule(init_value=peak_value, decay_steps=decay_steps - warmup_steps, alpha=alpha,
                              exponent=exponent),
    ]
    return join_schedules(schedules, [warmup_steps])


def warmup_exponential_decay_schedule(init_value, peak_value, warmup_steps: int, transition_steps: int,
                                      decay_rate, transition_begin: int = 0, staircase: bool = False,
                                      end_value=None) -> Schedule:
    """Linear warmup to ``peak_value`` then :func:`exponential_decay`.

    Args:
      init_value: value at step 0.
      peak_value: value at the end of the warmup.
      warmup_steps: length of the warmup.
      transition_steps: see :func:`exponential_decay`.
      decay_rate: see :func:`exponential_decay`.
      transition_begin: see :func:`exponential_decay` (counted after the warmup).
      staircase: see :func:`exponential_decay`.
      end_value: see :func:`exponential_decay`.

    Returns:
      A function ``count -> value``.
    """
    schedules = [
        linear_schedule(init_value=init_value, end_value=peak_value, transition_steps=warmup_steps),
        exponential_decay(init_value=peak_value, transition_steps=transition_steps, decay_rate=decay_rate,
                          transition_begin=transition_begin, staircase=staircase, end_value=end_value),
    ]
    return join_schedules(schedules, [warmup_steps])


def sgdr_schedule(cosine_kwargs: Iterable[Dict[str, Any]]) -> Schedule:
    """SGD with warm restarts: joined :func:`warmup_cosine_decay_schedule` cycles.

    Args:
      cosine_kwargs: one dict of ``warmup_cosine_decay_schedule`` arguments per cycle.

    Returns:
      A function ``count -> value``.
    """
    boundaries, schedules, step = [], [], 0
    for kwargs in cosine_kwargs:
        schedules += [warmup_cosine_decay_schedule(**kwargs)]
        boundaries += [step + kwargs["decay_steps"]]
        step += kwargs["decay_steps"]
    return join_schedules(schedules, boundaries[:-1])


# optax.schedules also holds the hyperparameter injection (see _inject.py).
from ._base import StatefulSchedule  # noqa: E402
from ._inject import (InjectHyperparamsState, InjectStatefulHyperparamsState, WrappedSchedule,  # noqa: E402
                      inject_hyperparams, inject_stateful_hyperparams)
