"""Hyperparameters in the optimizer state: ``inject_hyperparams``
(``optax/schedules/_inject.py``).

    opt = optax.inject_hyperparams(optax.adamw)(learning_rate=optax.linear_schedule(0.0, 1e-3, 100),
                                                weight_decay=1e-4)
    state = opt.init(params)
    state.hyperparams["weight_decay"] = 0.0        # takes effect at the next update
    updates, state = opt.update(grads, state, params)
    state.hyperparams["learning_rate"]              # the value this step used

The numeric hyperparameters live in ``state.hyperparams`` as arrays, so a step traced
by ``podlet.jit`` reads them as inputs (overwriting one does not retrace); schedules
(callables of the step count, or stateful schedules) are re-evaluated every update and
their value written back to ``hyperparams``. The inner transformation is rebuilt from
``inner_factory`` at every ``update`` with the current values, as optax does.
"""
import functools
import inspect
import warnings
from typing import Any, Callable, Iterable, NamedTuple, Union

import numpy as _np

from .. import numpy as jnp
from .._src import dtypes as _dtypes
from .._src.core import Array as _Array, Tracer as _Tracer
from ._base import GradientTransformationExtraArgs, safe_increment, with_extra_args_support
from . import tree as _tree


def _convert_floats(x, dtype):
    """Float-like values to ``dtype``; strongly typed arrays and the rest unchanged."""
    if isinstance(x, (_Array, _Tracer)) and not getattr(x, "weak_type", False):
        return x
    if isinstance(x, float) or (hasattr(x, "dtype") and _dtypes.is_float(x.dtype)):
        return jnp.asarray(x, dtype=dtype)
    return x


class InjectHyperparamsState(NamedTuple):
    """optax's former state of :func:`inject_hyperparams` (kept for compatibility;
    the wrapper returns :class:`InjectStatefulHyperparamsState`)."""
    count: Any  # shape=(), dtype=int32
    hyperparams: dict
    inner_state: Any


class InjectStatefulHyperparamsState(NamedTuple):
    """State of :func:`inject_hyperparams`: the step count, the current
    hyperparameter values (readable and writable), the schedules' states and the
    inner transformation's state."""
    count: Any  # shape=(), dtype=int32
    hyperparams: dict
    hyperparams_states: dict
    inner_state: Any


class WrappedScheduleState(NamedTuple):
    """State of a :class:`WrappedSchedule`: its step count."""
    count: Any


class WrappedSchedule:
    """A stateful schedule around a plain schedule ``count -> value``."""

    def __init__(self, schedule_fn: Callable):
        self.schedule_fn = schedule_fn

    def init(self) -> WrappedScheduleState:
        return WrappedScheduleState(count=jnp.zeros([], jnp.int32))

    def update(self, state: WrappedScheduleState, **extra_args) -> WrappedScheduleState:
        del extra_args
        return WrappedScheduleState(count=safe_increment(state.count))

    def __call__(self, state: WrappedScheduleState, **extra_args):
        return self.schedule_fn(state.count)


def _is_stateful_schedule(v) -> bool:
    return callable(v) and callable(getattr(v, "init", None)) and callable(getattr(v, "update", None))


def inject_hyperparams(inner_factory: Callable[..., Any], static_args: Union[str, Iterable[str]] = (),
                       hyperparam_dtype=None) -> Callable[..., GradientTransformationExtraArgs]:
    """Wraps an optimizer factory so its numeric hyperparameters live in the state.

    Args:
      inner_factory: a function returning a transformation, e.g. ``optax.adam``.
      static_args: names of arguments that are callables but not schedules (all
        other callables are treated as schedules of the step count).
      hyperparam_dtype: dtype of float hyperparameters (default: the params' highest
        float dtype).

    Returns:
      A function taking ``inner_factory``'s arguments (numbers, schedules or stateful
      schedules) and returning a :class:`GradientTransformationExtraArgs` with state
      ``InjectStatefulHyperparamsState(count, hyperparams, hyperparams_states,
      inner_state)``. Booleans and ``static_args`` stay fixed; schedule values
      overwrite ``hyperparams`` each step, so only unscheduled numbers can be changed
      by hand.

    Raises:
      ValueError: when ``static_args`` names an argument ``inner_factory`` lacks.
    """
    static_args = {static_args} if isinstance(static_args, str) else set(static_args)
    inner_signature = inspect.signature(inner_factory)
    if not static_args.issubset(inner_signature.parameters):
        raise ValueError("`static_args` must specify a subset of `inner_factory`'s parameters. "
                         f"Given `static_args`: {static_args}. `inner_factory` parameters: "
                         f"{set(inner_signature.parameters.keys())}")

    @functools.wraps(inner_factory)
    def wrapped_transform(*args, **kwargs) -> GradientTransformationExtraArgs:
        bound = inner_signature.bind(*args, **kwargs)
        bound.apply_defaults()
        sched_hps, numeric_hps, other_hps = {}, {}, {}
        for name, value in bound.arguments.items():
            if name in static_args or isinstance(value, bool):
                other_hps[name] = value
            elif _is_stateful_schedule(value):
                sched_hps[name] = value
            elif callable(value):
                sched_hps[name] = WrappedSchedule(value)
            elif isinstance(value, (int, float, _np.ndarray, _np.generic, _Array, _Tracer)):
                numeric_hps[name] = value
            else:
                other_hps[name] = value

        def _dtype(params):
            return hyperparam_dtype if hyperparam_dtype is not None else _tree.dtype(params, "highest")

        def init_fn(params):
            dtype = _dtype(params)
            hparams = {k: jnp.asarray(_convert_floats(v, dtype)) for k, v in numeric_hps.items()}
            hparams_states = {k: f.init() for k, f in sched_hps.items()}
            hparams.update({k: _convert_floats(f(hparams_states[k]), dtype) for k, f in sched_hps.items()})
            return InjectStatefulHyperparamsState(count=jnp.zeros([], jnp.int32), hyperparams=hparams,
                                                  hyperparams_states=hparams_states,
                                                  inner_state=inner_factory(**other_hps, **hparams).init(params))

        def update_fn(updates, state, params=None, **extra_args):
            dtype = _dtype(params)
            missing = set(numeric_hps) - set(state.hyperparams)
            if missing:
                raise KeyError(f"inject_hyperparams: state.hyperparams lacks {sorted(missing)}; overwrite values "
                               "in place (state.hyperparams[name] = value) rather than removing them")
            hparams = {k: _convert_floats(v, dtype) for k, v in state.hyperparams.items()}
            hparams.update({k: _convert_floats(f(state.hyperparams_states[k], **extra_args), dtype)
                            for k, f in sched_hps.items()})
            hyperparams_states = {k: f.update(state.hyperparams_states[k], **extra_args)
                                  for k, f in sched_hps.items()}
            updates, inner_state = with_extra_args_support(inner_factory(**other_hps, **hparams)).update(
                updates, state.inner_state, params, **extra_args)
            return updates, InjectStatefulHyperparamsState(count=safe_increment(state.count), hyperparams=hparams,
                                                           hyperparams_states=hyperparams_states,
                                                           inner_state=inner_state)

        return GradientTransformationExtraArgs(init_fn, update_fn)

    return wrapped_transform


def inject_stateful_hyperparams(inner_factory: Callable[..., Any], static_args: Union[str, Iterable[str]] = (),
                                hyperparam_dtype=None) -> Callable[..., GradientTransformationExtraArgs]:
    """Deprecated alias of :func:`inject_hyperparams` (which takes stateful schedules
    too), warning as optax 0.2.8 does."""
    warnings.warn("inject_stateful_hyperparams is deprecated, use inject_hyperparams instead", DeprecationWarning)
    return inject_hyperparams(inner_factory, static_args, hyperparam_dtype)

