"""Gradient transformations: the building blocks optimizers are chained from.

Each is a :class:`GradientTransformation` with a matching state NamedTuple, written
as optax 0.2.8 writes it (``optax/_src/transform.py``, ``optax/transforms/``) so the
states have the same pytree structure and the updates the same numbers:

    scale                   u <- s * u                               EmptyState
    scale_by_adam           Adam moments + bias correction           ScaleByAdamState(count, mu, nu)
    scale_by_learning_rate  u <- -lr * u (lr a float or a schedule)  EmptyState | ScaleByScheduleState
    scale_by_schedule       u <- f(count) * u                        ScaleByScheduleState(count)
    add_decayed_weights     u <- u + wd * p  (optionally masked)     EmptyState | WeightDecaySchedule
    clip_by_global_norm     u <- u * min(1, max_norm / ||u||)        EmptyState (optax 0.2.8)
    clip                    u <- clip(u, -d, d)                      EmptyState
    trace                   momentum (heavy ball / Nesterov)         TraceState(trace)
    ema                     exponential moving average of updates    EmaState(count, ema)
    masked                  apply an inner transform to a subtree    MaskedState(inner_state)
"""
from typing import Any, Callable, NamedTuple, Union

from .. import lax
from .. import numpy as jnp
from .. import tree_util as _tu
from ._base import (EmptyState, GradientTransformation, GradientTransformationExtraArgs,
                    NO_PARAMS_MSG, canonicalize_dtype, identity, init_empty_state, safe_increment,
                    tree_cast, tree_cast_like, tree_norm, tree_zeros_like, with_extra_args_support)

# optax exports these names as aliases of EmptyState.
ScaleState = EmptyState
AddDecayedWeightsState = EmptyState
ClipState = EmptyState
ClipByGlobalNormState = EmptyState


# ---------------------------------------------------------------------------------
# moments (optax.tree.update_moment & co.)
# ---------------------------------------------------------------------------------
def _is_none(x):
    return x is None


def update_moment(updates, moments, decay, order):
    """EMA of the ``order``-th moment: ``(1 - decay) * g**order + decay * m`` leafwise.

    Args:
      updates: pytree of gradients.
      moments: pytree of current moments.
      decay: the EMA decay.
      order: 1 for the mean, 2 for the (uncentred) variance.

    Returns:
      The new moments.
    """
    # g ** 1 is g; skipping the power also takes bool measurements (measure_with_ema).
    return _tu.tree_map(lambda g, t: (1 - decay) * (g if order == 1 else g ** order) + decay * t
                        if g is not None else None, updates, moments, is_leaf=_is_none)


update_moment_per_elem_norm = update_moment  # identical for real arrays (podlet has no complex)


def bias_correction(moment, decay, count):
    """Adam bias correction ``m / (1 - decay**count)``, computed in f32 and divided in
    the moment's dtype (so bf16 moments stay bf16).

    Args:
      moment: pytree of moments.
      decay: the EMA decay.
      count: the step count (int32 scalar, already incremented).

    Returns:
      The bias-corrected moments.
    """
    bc = 1 - decay ** count
    return _tu.tree_map(lambda t: t / bc.astype(t.dtype), moment)


# ---------------------------------------------------------------------------------
# scaling
# ---------------------------------------------------------------------------------
def scale(step_size) -> GradientTransformation:
    """Scales updates by a fixed scalar.

    Args:
      step_size: the scaling factor.

    Returns:
      A :class:`GradientTransformation` with state ``EmptyState()``.
    """

    def update_fn(updates, state, params=None):
        del params
        return _tu.tree_map(lambda g: step_size * g, updates), state

    return GradientTransformation(init_empty_state, update_fn)


class ScaleByAdamState(NamedTuple):
    """State for the Adam algorithm."""
    count: Any  # shape=(), dtype=int32
    mu: Any
    nu: Any


def scale_by_adam(b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0, mu_dtype=None, *,
                  nesterov: bool = False) -> GradientTransformation:
    r"""Rescales updates by the Adam rule (Kingma & Ba 2014, Algorithm 1).

    .. math::
        m_t = b_1 m_{t-1} + (1-b_1) g_t,\quad v_t = b_2 v_{t-1} + (1-b_2) g_t^2,\\
        \hat m_t = m_t / (1-b_1^t),\quad \hat v_t = v_t / (1-b_2^t),\quad
        u_t = \hat m_t / (\sqrt{\hat v_t + \bar\epsilon} + \epsilon).

    Args:
      b1: decay of the first-moment EMA.
      b2: decay of the second-moment EMA.
      eps: added to the denominator outside the square root.
      eps_root: added inside the square root (for differentiating through Adam).
      mu_dtype: dtype of the first moment (e.g. bf16 to save memory); None infers it
        from the params.
      nesterov: use Nesterov momentum (NAdam, Dozat 2016).

    Returns:
      A :class:`GradientTransformation` with state ``ScaleByAdamState(count, mu, nu)``.
    """
    mu_dtype = canonicalize_dtype(mu_dtype)

    def init_fn(params):
        mu = tree_zeros_like(params, dtype=mu_dtype)
        nu = tree_zeros_like(params)
        return ScaleByAdamState(count=jnp.zeros([], jnp.int32), mu=mu, nu=nu)

    def update_fn(updates, state, params=None):
        del params
        mu = update_moment(updates, state.mu, b1, 1)
        nu = update_moment_per_elem_norm(updates, state.nu, b2, 2)
        count_inc = safe_increment(state.count)
        if nesterov:
            mu_hat = _tu.tree_map(lambda m, g: b1 * m + (1 - b1) * g,
                                  bias_correction(mu, b1, safe_increment(count_inc)),
                                  bias_correction(updates, b1, count_inc))
        else:
            mu_hat = bias_correction(mu, b1, count_inc)
        nu_hat = bias_correction(nu, b2, count_inc)
        updates = _tu.tree_map(lambda m, v: None if m is None else m / (jnp.sqrt(v + eps_root) + eps),
                               mu_hat, nu_hat, is_leaf=_is_none)
        mu = tree_cast(mu, mu_dtype)
        nu = tree_cast_like(nu, state.nu)
        return updates, ScaleByAdamState(count=count_inc, mu=mu, nu=nu)

    return GradientTransformation(init_fn, update_fn)


class ScaleByScheduleState(NamedTuple):
    """Maintains the step count for schedules."""
    count: Any  # shape=(), dtype=int32


def scale_by_schedule(step_size_fn: Callable) -> GradientTransformation:
    """Scales updates by ``step_size_fn(count)``, counting the steps in the state.

    Args:
      step_size_fn: a schedule ``count -> step size`` (count is an int32 scalar array).

    Returns:
      A :class:`GradientTransformation` with state ``ScaleByScheduleState(count)``.
    """

    def init_fn(params):
        del params
        return ScaleByScheduleState(count=jnp.zeros([], jnp.int32))

    def update_fn(updates, state, params=None):
        del params
        step_size = step_size_fn(state.count)
        # jnp.asarray where optax has jnp.array: podlet.numpy.array(<scalar>) is 1-d.
        updates = _tu.tree_map(lambda g: jnp.asarray(step_size, dtype=g.dtype) * g, updates)
        return updates, ScaleByScheduleState(count=safe_increment(state.count))

    return GradientTransformation(init_fn, update_fn)


def scale_by_learning_rate(learning_rate=None, *, flip_sign: bool = True) -> GradientTransformation:
    """Scales updates by the (negative) learning rate, a float or a schedule.

    Args:
      learning_rate: a scalar or a schedule ``count -> lr``; None means no scaling.
      flip_sign: multiply by ``-learning_rate`` (the default, for gradient descent).

    Returns:
      :func:`scale` for a scalar (state ``EmptyState()``), :func:`scale_by_schedule`
      for a schedule (state ``ScaleByScheduleState(count)``).
    """
    if learning_rate is None:
        return identity()
    m = -1 if flip_sign else 1
    if callable(learning_rate):
        return scale_by_schedule(lambda count: m * learning_rate(count))
    return scale(m * learning_rate)


# ---------------------------------------------------------------------------------
# weight decay
# ---------------------------------------------------------------------------------
class WeightDecaySchedule(NamedTuple):
    """Maintains the step count for a scheduled weight decay."""
    count: Any  # shape=(), dtype=int32


def add_decayed_weights(weight_decay=0.0, mask=None) -> GradientTransformation:
    """Adds ``weight_decay * params`` to the updates (decoupled weight decay when
    placed after the Adam scaling, as in :func:`adamw`).

    Args:
      weight_decay: a scalar rate or a schedule ``count -> rate``.
      mask: a pytree of bools with the params' structure (or a prefix of it), or a
        callable returning one from the params; True marks the leaves to decay.

    Returns:
      A :class:`GradientTransformation`; state ``EmptyState()`` (or
      ``WeightDecaySchedule(count)`` for a schedule), wrapped in ``MaskedState`` when
      a mask is given.
    """

    def init_fn(params):
        del params
        if callable(weight_decay):
            return WeightDecaySchedule(count=jnp.zeros([], jnp.int32))
        return EmptyState()

    def update_fn(updates, state, params):
        if params is None:
            raise ValueError(NO_PARAMS_MSG)
        if callable(weight_decay):
            new_state = WeightDecaySchedule(safe_increment(state.count))
        else:
            new_state = state
        if isinstance(weight_decay, (int, float)) and weight_decay == 0.0:
            return updates, new_state
        s = weight_decay(state.count) if callable(weight_decay) else weight_decay
        updates = _tu.tree_map(lambda g, p: None if g is None else g + s * p,
                               updates, params, is_leaf=_is_none)
        return updates, new_state

    if mask is not None:
        return masked(GradientTransformation(init_fn, update_fn), mask)
    return GradientTransformation(init_fn, update_fn)


# ---------------------------------------------------------------------------------
# clipping
# ---------------------------------------------------------------------------------
def clip(max_delta) -> GradientTransformation:
    """Clips every update element to ``[-max_delta, max_delta]``.

    Args:
      max_delta: the largest absolute value kept.

    Returns:
      A :class:`GradientTransformation` with state ``EmptyState()``.
    """

    def update_fn(updates, state, params=None):
        del params
        return _tu.tree_map(lambda u: jnp.clip(u, -max_delta, max_delta), updates), state

    return GradientTransformation(init_empty_state, update_fn)


def clip_by_global_norm(max_norm) -> GradientTransformation:
    """Rescales the updates so that their global L2 norm is at most ``max_norm``
    (Pascanu et al. 2012): ``u <- u / ||u|| * max_norm`` when ``||u|| >= max_norm``.

    Args:
      max_norm: the largest global norm let through unchanged.

    Returns:
      A :class:`GradientTransformation` with state ``EmptyState()`` (optax 0.2.8 keeps
      no state here; ``ClipByGlobalNormState`` is an alias of ``EmptyState``).
    """

    def update_fn(updates, state, params=None):
        del params
        g_norm = tree_norm(updates)
        trigger = jnp.squeeze(g_norm < max_norm)
        if trigger.shape != ():
            raise ValueError(f"clip_by_global_norm: the norm must be a scalar, got shape {trigger.shape}")

        def clip_fn(t):
            return lax.select(trigger, t, (t / g_norm.astype(t.dtype)) * max_norm)

        return _tu.tree_map(clip_fn, updates), state

    update_fn._podlet_clip_max_norm = max_norm  # lets chain() fuse it into a following adamw
    return GradientTransformation(init_empty_state, update_fn)


# ---------------------------------------------------------------------------------
# accumulation
# ---------------------------------------------------------------------------------
class TraceState(NamedTuple):
    """Holds an aggregation of past updates."""
    trace: Any


def trace(decay, nesterov: bool = False, accumulator_dtype=None) -> GradientTransformation:
    """Momentum: ``m <- g + decay * m``; the update is ``m`` (or ``g + decay * m`` with
    Nesterov).

    Args:
      decay: the momentum coefficient.
      nesterov: use Nesterov momentum.
      accumulator_dtype: dtype of the accumulator; None infers it from the params.

    Returns:
      A :class:`GradientTransformation` with state ``TraceState(trace)``.
    """
    accumulator_dtype = canonicalize_dtype(accumulator_dtype)

    def init_fn(params):
        return TraceState(trace=tree_zeros_like(params, dtype=accumulator_dtype))

    def update_fn(updates, state, params=None):
        del params
        f = lambda g, t: g + decay * t  # noqa: E731
        new_trace = _tu.tree_map(lambda g, t: None if g is None else f(g, t),
                                 updates, state.trace, is_leaf=_is_none)
        updates = _tu.tree_map(f, updates, new_trace) if nesterov else new_trace
        new_trace = tree_cast(new_trace, accumulator_dtype)
        return updates, TraceState(trace=new_trace)

    return GradientTransformation(init_fn, update_fn)


class EmaState(NamedTuple):
    """Holds an exponential moving average of past updates."""
    count: Any  # shape=(), dtype=int32
    ema: Any


def ema(decay, debias: bool = True, accumulator_dtype=None) -> GradientTransformation:
    """Exponential moving average of the updates: ``e <- decay * e + (1 - decay) * u``.

    Args:
      decay: the EMA decay.
      debias: divide by ``1 - decay**count`` (Adam-style bias correction).
      accumulator_dtype: dtype of the accumulator; None infers it from the params.

    Returns:
      A :class:`GradientTransformation` with state ``EmaState(count, ema)``.
    """
    accumulator_dtype = canonicalize_dtype(accumulator_dtype)

    def init_fn(params):
        return EmaState(count=jnp.zeros([], jnp.int32), ema=tree_zeros_like(params, dtype=accumulator_dtype))

    def update_fn(updates, state, params=None):
        del params
        updates = new_ema = update_moment(updates, state.ema, decay, order=1)
        count_inc = safe_increment(state.count)
        if debias:
            updates = bias_correction(new_ema, decay, count_inc)
        return updates, EmaState(count=count_inc, ema=tree_cast(new_ema, accumulator_dtype))

    return GradientTransformation(init_fn, update_fn)


# ---------------------------------------------------------------------------------
# masking
# ---------------------------------------------------------------------------------
class MaskedState(NamedTuple):
    """Maintains the inner transformation's state for masked transformations."""
    inner_state: Any


class MaskedNode(NamedTuple):
    """Stands in for a masked-out subtree: a pytree node with no leaves, so tree maps
    skip it."""


def _mask_callable(mask):
    callable_leaves = _tu.tree_leaves(_tu.tree_map(callable, mask))
    return len(callable_leaves) > 0 and all(callable_leaves)


def masked(inner: GradientTransformation, mask: Union[Any, Callable[[Any], Any]], *,
           mask_compatible_extra_args: bool = False) -> GradientTransformationExtraArgs:
    """Applies ``inner`` only to the leaves selected by ``mask``; the others pass
    through unchanged (e.g. no weight decay on biases and BatchNorm scales).

    Args:
      inner: the transformation to mask.
      mask: a pytree of bools with the params' structure (or a prefix of it), or a
        callable returning one from the params/updates. It must be static (Python
        bools) for the step to be jit-compatible.
      mask_compatible_extra_args: also mask extra args that have the updates' structure.

    Returns:
      A :class:`GradientTransformationExtraArgs` with state ``MaskedState(inner_state)``;
      the inner state holds ``MaskedNode()`` where the mask is False.
    """
    inner = with_extra_args_support(inner)

    def mask_pytree(pytree, mask_tree):
        return _tu.tree_map(lambda m, p: p if m else MaskedNode(), mask_tree, pytree)

    def maybe_mask_values(pytree_dict, base_pytree, mask_tree):
        base_structure = _tu.tree_structure(base_pytree)

        def _maybe_mask(pytree):
            if mask_compatible_extra_args and _tu.tree_structure(pytree) == base_structure:
                return mask_pytree(pytree, mask_tree)
            return pytree

        return {k: _maybe_mask(v) for k, v in pytree_dict.items()}

    def init_fn(params):
        mask_tree = mask(params) if _mask_callable(mask) else mask
        return MaskedState(inner_state=inner.init(mask_pytree(params, mask_tree)))

    def update_fn(updates, state, params=None, **extra_args):
        mask_tree = mask(updates) if _mask_callable(mask) else mask
        masked_extra_args = maybe_mask_values(extra_args, updates, mask_tree)
        masked_updates = mask_pytree(updates, mask_tree)
        masked_params = None if params is None else mask_pytree(params, mask_tree)
        new_masked_updates, new_inner_state = inner.update(masked_updates, state.inner_state,
                                                           masked_params, **masked_extra_args)
        new_updates = _tu.tree_map(lambda m, new_u, old_u: new_u if m else old_u,
                                   mask_tree, new_masked_updates, updates)
        return new_updates, MaskedState(inner_state=new_inner_state)

    return GradientTransformationExtraArgs(init_fn, update_fn)
