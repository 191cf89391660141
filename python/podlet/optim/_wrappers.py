"""Wrappers around a transformation: gradient accumulation (``MultiSteps``,
``apply_every``), conditional application (``apply_if_finite``,
``conditionally_transform``, ``conditionally_mask``), ``flatten``, ``lookahead`` and
monitoring (``snapshot``, ``monitor``, ``measure_with_ema``), as optax 0.2.8 writes
them (``optax/transforms/_accumulation.py``, ``_conditionality.py``, ``_layouts.py``,
``_monitoring.py``, ``optax/_src/lookahead.py``).

Decisions that depend on values (skip this step? emit the accumulated gradient?) are
``lax.cond`` / ``jnp.where`` on arrays, never Python ``if``, so every wrapper runs the
same eagerly and under ``podlet.jit`` with a state of fixed shapes and dtypes.
"""
import functools
import logging
from typing import Any, Callable, NamedTuple, Optional, Protocol, Union

import numpy as _np

from .. import lax
from .. import numpy as jnp
from .. import tree_util as _tu
from .._src.core import Array as _Array, Tracer as _Tracer, eval_shape as _eval_shape
from ._base import (GradientTransformation, GradientTransformationExtraArgs, canonicalize_dtype, safe_increment,
                    stateless, tree_cast_like, tree_zeros_like, with_extra_args_support)
from . import transform as _transform

log = logging.getLogger("podlet.optim")


def _is_array(x):
    return isinstance(x, (_Array, _Tracer))


def _all_finite(tree):
    """A bool scalar: every element of every leaf is finite."""
    flags = [jnp.all(jnp.isfinite(p)) for p in _tu.tree_leaves(tree)]
    return functools.reduce(jnp.logical_and, flags, jnp.asarray(True))


# ---------------------------------------------------------------------------------
# MultiSteps: gradient accumulation
# ---------------------------------------------------------------------------------
class ShouldSkipUpdateFunction(Protocol):
    """``f(updates, gradient_step, params) -> (should_skip bool scalar, skip_state)``."""

    def __call__(self, updates, gradient_step, params):
        ...


def skip_not_finite(updates, gradient_step, params):
    """Skips a mini-step whose updates hold an inf or a NaN (a
    :class:`ShouldSkipUpdateFunction`).

    Returns:
      ``(should_skip, {'should_skip': ..., 'num_not_finite': int32 count})``.
    """
    del gradient_step, params
    counts = [jnp.sum(jnp.logical_not(jnp.isfinite(p))) for p in _tu.tree_leaves(updates)]
    num_not_finite = jnp.sum(jnp.stack(counts)) if counts else jnp.zeros([], jnp.int32)
    should_skip = num_not_finite > 0
    return should_skip, {"should_skip": should_skip, "num_not_finite": num_not_finite}


def skip_large_updates(updates, gradient_step, params, max_squared_norm):
    """Skips a mini-step whose squared global norm is not below ``max_squared_norm``
    (NaN norms are skipped too). Bind ``max_squared_norm`` with ``functools.partial``.

    Returns:
      ``(should_skip, {'should_skip': ..., 'norm_squared': ...})``.
    """
    del gradient_step, params
    norm_sq = jnp.sum(jnp.stack([jnp.sum(p ** 2) for p in _tu.tree_leaves(updates)]))
    should_skip = jnp.logical_not(norm_sq < max_squared_norm)
    return should_skip, {"should_skip": should_skip, "norm_squared": norm_sq}


class MultiStepsState(NamedTuple):
    """State of :class:`MultiSteps`.

    Attributes:
      mini_step: mini-steps accumulated since the last emitted update (int32).
      gradient_step: updates emitted so far (int32).
      inner_opt_state: the wrapped optimizer's state.
      acc_grads: the running mean (or sum) of the mini-steps' gradients.
      skip_state: what ``should_skip_update_fn`` returned last (``()`` without one).
    """
    mini_step: Any
    gradient_step: Any
    inner_opt_state: Any
    acc_grads: Any
    skip_state: Any = ()


class MultiSteps:
    """Accumulates gradients over ``every_k_schedule`` mini-steps, then runs the
    wrapped optimizer once on their mean (or sum); in between, updates are zeros.

        opt = optax.MultiSteps(optax.adam(1e-3), every_k_schedule=4)
        state = opt.init(params)
        updates, state = opt.update(grads, state, params)   # zeros 3 times in 4
        opt.has_updated(state)                              # True after the 4th

    Args:
      opt: the wrapped optimizer.
      every_k_schedule: an int, or a function of the gradient step returning how many
        mini-steps make the next update (a varying effective batch size).
      use_grad_mean: average the mini-steps' gradients (Welford's running mean);
        False sums them.
      should_skip_update_fn: a :class:`ShouldSkipUpdateFunction`; a skipped mini-step
        leaves the state as it was (only ``skip_state`` records it), e.g.
        :func:`skip_not_finite`.
      accumulator_dtype: dtype of the accumulated gradients (float32).
    """

    def __init__(self, opt: GradientTransformation, every_k_schedule: Union[int, Callable],
                 use_grad_mean: bool = True, should_skip_update_fn: Optional[ShouldSkipUpdateFunction] = None,
                 accumulator_dtype=jnp.float32):
        self._opt = with_extra_args_support(opt)
        if isinstance(every_k_schedule, int):
            if every_k_schedule < 1:
                raise ValueError(f"MultiSteps: every_k_schedule must be >= 1, got {every_k_schedule}")
            self._every_k_schedule = lambda step: every_k_schedule
        else:
            self._every_k_schedule = every_k_schedule
        self._use_grad_mean = use_grad_mean
        self._accumulator_dtype = canonicalize_dtype(accumulator_dtype)
        if use_grad_mean:
            # Welford: a numerically stable running mean.
            self._acc_update = lambda grad, acc, *, n_acc: acc + (grad - acc) / (n_acc + 1)
        else:
            self._acc_update = lambda grad, acc, *, n_acc: grad + acc
        if should_skip_update_fn is None:
            def should_skip_update_fn(*unused_args, **unused_kwargs):
                return jnp.asarray(False), ()
        self._should_skip_update_fn = should_skip_update_fn

    @property
    def inner_opt(self):
        return self._opt

    def init(self, params) -> MultiStepsState:
        """The initial :class:`MultiStepsState`."""
        updates = tree_zeros_like(params)
        acc_grads = tree_zeros_like(params, dtype=self._accumulator_dtype)
        gradient_step = jnp.zeros([], jnp.int32)
        _, skip_state = self._should_skip_update_fn(updates, gradient_step, params)
        return MultiStepsState(mini_step=jnp.zeros([], jnp.int32), gradient_step=gradient_step,
                               inner_opt_state=self._opt.init(params), acc_grads=acc_grads,
                               skip_state=skip_state)

    def update(self, updates, state: MultiStepsState, params=None, **extra_args):
        """Accumulates ``updates``; every k-th mini-step returns the inner optimizer's
        update of the accumulated gradients, otherwise zeros."""
        k_steps = self._every_k_schedule(state.gradient_step)
        should_skip, skip_state = self._should_skip_update_fn(updates, state.gradient_step, params)
        should_skip = jnp.asarray(should_skip)
        if (should_skip.dtype, tuple(should_skip.shape)) != (jnp.bool_, ()):
            raise ValueError("The `should_skip_update_fn` function should return a boolean scalar array, but it "
                             f"returned an array of dtype {should_skip.dtype} and shape {tuple(should_skip.shape)}")
        acc_dtype = self._accumulator_dtype

        def _do_update(updates, state, params):
            acc_grads = _tu.tree_map(lambda upd, acc: self._acc_update(upd, acc, n_acc=state.mini_step),
                                     updates, state.acc_grads)
            final_updates, new_inner_state = self._opt.update(tree_cast_like(acc_grads, updates),
                                                              state.inner_opt_state, params=params, **extra_args)
            emit = state.mini_step == (k_steps - 1)
            keep = 1 - emit.astype(jnp.int32)  # optax's (1 - emit): 0 or 1, int32
            new_state = MultiStepsState(
                mini_step=safe_increment(state.mini_step) % k_steps,
                gradient_step=jnp.where(emit, safe_increment(state.gradient_step), state.gradient_step),
                inner_opt_state=_tu.tree_map(lambda st, nst: jnp.where(emit, nst, st).astype(st.dtype),
                                             state.inner_opt_state, new_inner_state),
                acc_grads=_tu.tree_map(lambda ga: (keep * ga).astype(acc_dtype), acc_grads),
                skip_state=skip_state)
            final_updates = _tu.tree_map(lambda u: emit.astype(u.dtype) * u, final_updates)
            return final_updates, new_state

        def _skip_update(updates, state, params):
            static_args = {k: v for k, v in extra_args.items() if not _is_array(v)}
            dyn_args = {k: v for k, v in extra_args.items() if _is_array(v)}
            eval_fn = functools.partial(self._opt.update, **static_args)
            acc_grads = tree_cast_like(state.acc_grads, updates)
            shapes, _ = _eval_shape(lambda g, s, p, d: eval_fn(g, s, params=p, **d),
                                    acc_grads, state.inner_opt_state, params, dyn_args)
            zero_updates = _tu.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
            return zero_updates, MultiStepsState(mini_step=state.mini_step, gradient_step=state.gradient_step,
                                                 inner_opt_state=state.inner_opt_state,
                                                 acc_grads=state.acc_grads, skip_state=skip_state)

        return lax.cond(should_skip, _skip_update, _do_update, updates, state, params)

    def has_updated(self, state) -> Any:
        """True when the last :meth:`update` emitted a (non-zero) update."""
        return jnp.logical_and(getattr(state, "mini_step") == 0, getattr(state, "gradient_step") > 0)

    def gradient_transformation(self) -> GradientTransformation:
        """This wrapper as a :class:`GradientTransformation` (e.g. for ``chain``)."""
        return GradientTransformation(init=self.init, update=self.update)


class ApplyEvery(NamedTuple):
    """State of :func:`apply_every`: a counter and a gradient accumulator."""
    count: Any
    grad_acc: Any


def apply_every(k=1) -> GradientTransformation:
    """Sums the updates and emits the sum every ``k`` steps (zeros in between).

    Unlike :class:`MultiSteps`, transformations chained around it still update their
    state every step.

    Args:
      k: emit every k steps.

    Returns:
      A :class:`GradientTransformation` with state ``ApplyEvery(count, grad_acc)``.
    """

    def init_fn(params):
        return ApplyEvery(count=jnp.zeros([], jnp.int32), grad_acc=tree_zeros_like(params))

    def update_fn(updates, state, params=None):
        del params
        c = state.count % k
        acc = (c != 0).astype(jnp.int32)
        grad_acc = _tu.tree_map(lambda g, ga: acc * ga + g, updates, state.grad_acc)
        emit = (c == (k - 1)).astype(jnp.int32)
        updates = _tu.tree_map(lambda ga: emit * ga, grad_acc)
        return updates, ApplyEvery(count=safe_increment(state.count) % k, grad_acc=grad_acc)

    return GradientTransformation(init_fn, update_fn)


# ---------------------------------------------------------------------------------
# conditional application
# ---------------------------------------------------------------------------------
class ConditionFn(Protocol):
    """``should_transform_fn(step, **extra_args) -> bool scalar``."""

    def __call__(self, step, **extra_args):
        ...


def _update_when(inner, should_transform_fn, forward_extra_args, updates, state, params, extra_args, skipped):
    """``inner``'s update where ``should_transform_fn(state.step)`` holds, else ``(skipped,
    state.inner_state)``: the shared step of conditionally_transform and conditionally_mask."""
    condition_kwargs = extra_args if forward_extra_args else {}
    return lax.cond(should_transform_fn(state.step, **condition_kwargs),
                    lambda _: inner.update(updates, state.inner_state, params, **extra_args),
                    lambda _: (skipped, state.inner_state), None)


class ConditionallyTransformState(NamedTuple):
    """Inner state and a step counter."""
    inner_state: Any
    step: Any


def conditionally_transform(inner: GradientTransformation, should_transform_fn: ConditionFn,
                            forward_extra_args: bool = False) -> GradientTransformationExtraArgs:
    """Runs ``inner`` only at the steps where ``should_transform_fn(step)`` is True;
    at the others the updates and the inner state pass through unchanged.

    Args:
      inner: the inner transformation.
      should_transform_fn: ``step (int32 scalar) -> bool scalar``.
      forward_extra_args: also pass the extra args to ``should_transform_fn``.

    Returns:
      A :class:`GradientTransformationExtraArgs` with state
      ``ConditionallyTransformState(inner_state, step)``.
    """
    inner = with_extra_args_support(inner)

    def init_fn(params):
        return ConditionallyTransformState(inner_state=inner.init(params), step=jnp.zeros([], jnp.int32))

    def update_fn(updates, state, params=None, **extra_args):
        updates, new_inner_state = _update_when(inner, should_transform_fn, forward_extra_args, updates, state,
                                                params, extra_args, skipped=updates)
        return updates, ConditionallyTransformState(new_inner_state, safe_increment(state.step))

    return GradientTransformationExtraArgs(init_fn, update_fn)


class ConditionallyMaskState(NamedTuple):
    """A step counter and the inner state."""
    step: Any
    inner_state: Any


def conditionally_mask(inner: GradientTransformation, should_transform_fn: ConditionFn,
                       forward_extra_args: bool = False) -> GradientTransformationExtraArgs:
    """Runs ``inner`` only at the steps where ``should_transform_fn(step)`` is True;
    at the others the updates are zeros and the inner state is kept.

    Args:
      inner: the inner transformation.
      should_transform_fn: ``step (int32 scalar) -> bool scalar``.
      forward_extra_args: also pass the extra args to ``should_transform_fn``.

    Returns:
      A :class:`GradientTransformationExtraArgs` with state
      ``ConditionallyMaskState(step, inner_state)``.
    """
    inner = with_extra_args_support(inner)

    def init_fn(params):
        return ConditionallyMaskState(step=jnp.zeros([], jnp.int32), inner_state=inner.init(params))

    def update_fn(updates, state, params=None, **extra_args):
        updates, new_inner_state = _update_when(inner, should_transform_fn, forward_extra_args, updates, state,
                                                params, extra_args, skipped=tree_zeros_like(updates))
        return updates, ConditionallyMaskState(step=safe_increment(state.step), inner_state=new_inner_state)

    return GradientTransformationExtraArgs(init_fn, update_fn)


class ApplyIfFiniteState(NamedTuple):
    """State of :func:`apply_if_finite`.

    Attributes:
      notfinite_count: consecutive steps with an inf or NaN in the updates (reset to
        0 by a finite step).
      last_finite: whether the last step's updates were all finite.
      total_notfinite: steps with an inf or NaN since init (never reset).
      inner_state: the inner transformation's state.
    """
    notfinite_count: Any
    last_finite: Any
    total_notfinite: Any
    inner_state: Any


def apply_if_finite(inner: GradientTransformation, max_consecutive_errors: int) -> GradientTransformationExtraArgs:
    """Skips steps whose updates hold an inf or a NaN (zero updates, inner state
    kept), unless more than ``max_consecutive_errors`` such steps came in a row.

    Args:
      inner: the transformation to protect.
      max_consecutive_errors: how many consecutive non-finite steps are ignored.

    Returns:
      A :class:`GradientTransformationExtraArgs` with state
      ``ApplyIfFiniteState(notfinite_count, last_finite, total_notfinite, inner_state)``.
    """
    inner = with_extra_args_support(inner)

    def init(params):
        return ApplyIfFiniteState(notfinite_count=jnp.zeros([], jnp.int32), last_finite=jnp.asarray(True),
                                  total_notfinite=jnp.zeros([], jnp.int32), inner_state=inner.init(params))

    def update(updates, state, params=None, **extra_args):
        inner_state = state.inner_state
        isfinite = _all_finite(updates)
        notfinite_count = jnp.where(isfinite, jnp.zeros([], jnp.int32), safe_increment(state.notfinite_count))
        updates, new_inner_state = lax.cond(
            jnp.logical_or(isfinite, notfinite_count > max_consecutive_errors),
            lambda _: inner.update(updates, inner_state, params, **extra_args),
            lambda _: (tree_zeros_like(updates), inner_state), None)
        return updates, ApplyIfFiniteState(
            notfinite_count=notfinite_count, last_finite=isfinite,
            total_notfinite=jnp.where(isfinite, state.total_notfinite, safe_increment(state.total_notfinite)),
            inner_state=new_inner_state)

    return GradientTransformationExtraArgs(init=init, update=update)


# ---------------------------------------------------------------------------------
# layout
# ---------------------------------------------------------------------------------
def flatten(inner: GradientTransformation) -> GradientTransformationExtraArgs:
    """Runs ``inner`` on one vector: all leaves raveled and concatenated (fewer, larger
    ops for many small parameters).

    Args:
      inner: the transformation to run on the flat vector.

    Returns:
      A :class:`GradientTransformationExtraArgs`; its state is ``inner``'s state for
      a 1-d parameter vector.
    """
    inner = with_extra_args_support(inner)

    def _flatten(params):
        leaves = _tu.tree_leaves(params)
        return jnp.concatenate([jnp.reshape(p, [-1]) for p in leaves])

    def _unflatten(updates, flat):
        leaves, treedef = _tu.tree_flatten(updates)
        out, offset = [], 0
        for u in leaves:
            size = int(_np.size(u)) if not hasattr(u, "size") else int(u.size)
            out.append(jnp.reshape(flat[offset:offset + size], tuple(jnp.shape(u))))
            offset += size
        return _tu.tree_unflatten(treedef, out)

    def init_fn(params):
        return inner.init(_flatten(params))

    def update_fn(updates, state, params=None, **extra_args):
        if params is not None:
            params = _flatten(params)
        updates_flat, state = inner.update(_flatten(updates), state, params, **extra_args)
        return _unflatten(updates, updates_flat), state

    return GradientTransformationExtraArgs(init_fn, update_fn)


# ---------------------------------------------------------------------------------
# lookahead
# ---------------------------------------------------------------------------------
class LookaheadState(NamedTuple):
    """State of :func:`lookahead`: the fast optimizer's state and the fast steps
    taken since the last synchronisation."""
    fast_state: Any
    steps_since_sync: Any


class LookaheadParams(NamedTuple):
    """Slow and fast parameters of :func:`lookahead`: compute gradients at ``fast``,
    evaluate with ``slow``."""
    fast: Any
    slow: Any

    @classmethod
    def init_synced(cls, params) -> "LookaheadParams":
        """A synchronised pair (``fast`` and ``slow`` both ``params``)."""
        return cls(slow=params, fast=params)


def lookahead(fast_optimizer: GradientTransformation, sync_period, slow_step_size,
              reset_state: bool = False) -> GradientTransformation:
    """Lookahead (Zhang et al. 2019, "k steps forward, 1 step back"): ``sync_period``
    fast steps, then the slow params move ``slow_step_size`` of the way to the fast
    ones and the fast params restart from there.

    Args:
      fast_optimizer: the inner optimizer.
      sync_period: fast steps between synchronisations (>= 1).
      slow_step_size: the slow params' interpolation step.
      reset_state: re-initialise the fast optimizer's state at each synchronisation.

    Returns:
      A :class:`GradientTransformation` whose ``update(grads, state, params)`` takes
      :class:`LookaheadParams` and returns :class:`LookaheadParams` updates (apply
      them unchanged with ``apply_updates``); state
      ``LookaheadState(fast_state, steps_since_sync)``.
    """
    if sync_period < 1:
        raise ValueError("Synchronization period must be >= 1.")

    def init_fn(params):
        fast_params = getattr(params, "fast", None)
        if fast_params is None:
            log.warning("`params` has no attribute `fast`. Continuing by assuming that only fast parameters "
                        "were passed to lookahead init.")
            fast_params = params
        return LookaheadState(fast_state=fast_optimizer.init(fast_params),
                              steps_since_sync=jnp.zeros([], jnp.int32))

    def update_fn(updates, state, params):
        if not (hasattr(params, "fast") and hasattr(params, "slow")):
            raise ValueError("lookahead: `params` must be a LookaheadParams(fast, slow) "
                             f"(LookaheadParams.init_synced(params)), got {type(params).__name__}")
        updates, fast_state = fast_optimizer.update(updates, state.fast_state, params.fast)
        sync_next = state.steps_since_sync == (sync_period - 1)
        updates = _lookahead_update(updates, sync_next, params, slow_step_size)
        if reset_state:
            initial_state = fast_optimizer.init(params.fast)
            s = sync_next.astype(jnp.int32)
            fast_state = _tu.tree_map(lambda cur, init: (1 - s) * cur + s * init, fast_state, initial_state)
        steps_since_sync = (state.steps_since_sync + 1) % sync_period
        return updates, LookaheadState(fast_state, steps_since_sync)

    return GradientTransformation(init_fn, update_fn)


def _lookahead_update(updates, sync_next, params, slow_step_size):
    """One lookahead step as updates for (fast, slow).

    With ``d = fast + u - slow`` (the distance after the last fast step), a
    synchronising step is ``slow += a * d`` and ``fast += u - (1 - a) * d`` (so both
    land on the new slow params); other steps are ``fast += u``, ``slow += 0``.
    """
    s = sync_next.astype(jnp.int32)  # optax multiplies by the bool: 0 or 1
    last_difference = _tu.tree_map(lambda f, u, sl: f + u - sl, params.fast, updates, params.slow)
    slow_updates = _tu.tree_map(lambda diff: slow_step_size * s * diff, last_difference)
    fast_updates = _tu.tree_map(lambda up, diff: up - s * (1 - slow_step_size) * diff, updates, last_difference)
    return LookaheadParams(fast=fast_updates, slow=slow_updates)


# ---------------------------------------------------------------------------------
# monitoring
# ---------------------------------------------------------------------------------
class SnapshotState(NamedTuple):
    """``{measure_name: measurement}`` of the last updates."""
    measurement: dict


def snapshot(measure_name: str, measure: Callable) -> GradientTransformation:
    """Stores ``measure(updates)`` in the state under ``measure_name`` (updates pass
    through), e.g. the norm before a clip in a chain.

    Args:
      measure_name: the key of the measurement.
      measure: ``updates -> pytree``.

    Returns:
      A :class:`GradientTransformation` with state ``SnapshotState({name: value})``.
    """

    def init(params):
        return SnapshotState({measure_name: measure(params)})

    def update(updates, state, params=None):
        del params, state
        return updates, SnapshotState({measure_name: measure(updates)})

    return GradientTransformation(init, update)


class MonitorState(NamedTuple):
    """The last measurements and the measures' own states."""
    measurements: dict
    measure_states: tuple


def monitor(measures: dict) -> GradientTransformationExtraArgs:
    """Records several (possibly stateful) measurements of the updates.

    Args:
      measures: ``{name: callable or transformation}``; a callable ``updates ->
        value`` is stateless, a transformation (e.g. :func:`measure_with_ema`)
        returns its measurement as its "updates".

    Returns:
      A :class:`GradientTransformationExtraArgs` with state
      ``MonitorState(measurements, measure_states)``; updates pass through.
    """
    measures_ = {}
    for name, measure in measures.items():
        if callable(measure):
            measures_[name] = with_extra_args_support(stateless(lambda u, _, m=measure: m(u)))
        else:
            measures_[name] = with_extra_args_support(measure)
    names = tuple(measures_)

    def init(params):
        return MonitorState({}, tuple(measures_[n].init(params) for n in names))

    def update(updates, state, params=None, **extra_args):
        measurements, new_states = {}, []
        for i, n in enumerate(names):
            m, s = measures_[n].update(updates, state.measure_states[i], params, **extra_args)
            measurements[n] = m
            new_states.append(s)
        return updates, MonitorState(measurements, tuple(new_states))

    return GradientTransformationExtraArgs(init, update)


def measure_with_ema(measure: Callable, decay, debias: bool = True,
                     accumulator_dtype=None) -> GradientTransformationExtraArgs:
    """An exponential moving average of ``measure(updates)`` (for :func:`monitor`).

    Args:
      measure: ``updates -> pytree``.
      decay: the EMA decay.
      debias: Adam-style bias correction.
      accumulator_dtype: dtype of the average.

    Returns:
      ``chain(stateless(measure), ema(...))`` whose EMA is initialised with the shape
      of ``measure(params)``.
    """
    from ._base import _chain
    base_ema = _transform.ema(decay, debias, accumulator_dtype)
    measurement_ema = base_ema._replace(init=lambda params: base_ema.init(measure(params)))
    return _chain(stateless(lambda updates, _: measure(updates)), measurement_ema)
