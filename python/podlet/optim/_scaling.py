"""Scalings by norms, signs and step-size rules (``optax/_src/transform.py``,
``numerics.py``):

    scale_by_sign                     u <- sign(u)
    scale_by_trust_ratio              u <- u * c ||p|| / ||u||   (LARS / LAMB)
    scale_by_param_block_norm / _rms  u <- u * max(||p||, m)     (per leaf)
    centralize                        u <- u - mean over all but the leading axis
    normalize_by_update_norm          u <- s * u / (||u|| + eps)
    scale_by_polyak                   Polyak step (f - f*) / ||g||^2   (extra arg `value`)
    scale_by_rprop                    Rprop: per-element step sizes from sign changes
    scale_by_optimistic_gradient      (a + b) g_t - b g_{t-1}
    scale_by_distance_over_gradients  DoG step sizes per leaf
"""
import math
from typing import Any, NamedTuple

from .. import numpy as jnp
from .. import tree_util as _tu
from ._base import (NO_PARAMS_MSG, EmptyState, GradientTransformation, GradientTransformationExtraArgs,
                    init_empty_state, tree_cast, tree_norm, tree_zeros_like)
from . import tree as _tree

ScaleByTrustRatioState = EmptyState

# ---------------------------------------------------------------------------------
# numerics
# ---------------------------------------------------------------------------------
def _norm(x, ord=None, axis=None, keepdims=False):
    """jnp.linalg.norm for vector norms and the matrix norms that need no SVD."""
    x = jnp.asarray(x)
    if axis is None:
        if ord is None:
            return jnp.sqrt(jnp.sum(jnp.square(x).reshape(-1))).reshape((1,) * x.ndim if keepdims else ())
        axis = tuple(range(x.ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(a % x.ndim for a in axes) if x.ndim else axes
    if len(axes) == 1:
        a = jnp.abs(x)
        if ord is None or ord == 2:
            return jnp.sqrt(jnp.sum(jnp.square(x), axis=axes, keepdims=keepdims))
        if ord == math.inf:
            return jnp.max(a, axis=axes, keepdims=keepdims)
        if ord == -math.inf:
            return jnp.min(a, axis=axes, keepdims=keepdims)
        if ord == 0:
            return jnp.sum((x != 0).astype(x.dtype), axis=axes, keepdims=keepdims)
        if ord == 1:
            return jnp.sum(a, axis=axes, keepdims=keepdims)
        return jnp.sum(a ** ord, axis=axes, keepdims=keepdims) ** (1.0 / ord)
    if len(axes) == 2:
        r, c = axes
        if ord is None or ord == "fro":
            return jnp.sqrt(jnp.sum(jnp.square(x), axis=axes, keepdims=keepdims))
        a = jnp.abs(x)
        if ord in (1, -1):
            s = jnp.sum(a, axis=r, keepdims=True)
            out = (jnp.max if ord == 1 else jnp.min)(s, axis=c, keepdims=True)
        elif ord in (math.inf, -math.inf):
            s = jnp.sum(a, axis=c, keepdims=True)
            out = (jnp.max if ord == math.inf else jnp.min)(s, axis=r, keepdims=True)
        else:
            raise NotImplementedError(f"safe_norm: matrix norm ord={ord!r} needs an SVD, which podlet lacks; "
                                      "use ord None/'fro', 1, -1, inf or -inf")
        return out if keepdims else jnp.squeeze(out, axis=axes)
    if ord is None:
        return jnp.sqrt(jnp.sum(jnp.square(x), axis=axes, keepdims=keepdims))
    raise ValueError("Improper number of axes for norm")

def safe_norm(x, min_norm, ord=None, axis=None, keepdims=False):
    """``max(norm(x), min_norm)`` whose gradient at ``norm(x) <= min_norm`` is 0
    (not NaN): the masked input keeps the second norm away from 0.

    Args:
      x: an array.
      min_norm: the lower bound.
      ord: the norm's order (as ``jnp.linalg.norm``; matrix 2 / 'nuc' unsupported).
      axis: reduction axes (None: all).
      keepdims: keep the reduced axes.
    """
    norm = _norm(x, ord=ord, axis=axis, keepdims=True)
    x = jnp.where(norm <= min_norm, jnp.ones_like(x), x)
    norm = jnp.squeeze(norm, axis=axis) if not keepdims else norm
    masked_norm = _norm(x, ord=ord, axis=axis, keepdims=keepdims)
    return jnp.where(norm <= min_norm, min_norm, masked_norm)

def safe_root_mean_squares(x, min_rms):
    """``max(sqrt(mean(x**2)), min_rms)`` with a zero gradient below ``min_rms``."""
    rms = jnp.sqrt(jnp.mean(jnp.square(x)))
    x = jnp.where(rms <= min_rms, jnp.ones_like(x), x)
    return jnp.where(rms <= min_rms, min_rms, jnp.sqrt(jnp.mean(jnp.square(x))))

# ---------------------------------------------------------------------------------
# stateless scalings
# ---------------------------------------------------------------------------------
def scale_by_sign() -> GradientTransformation:
    """``u <- sign(u)`` (signSGD)."""

    def update_fn(updates, state, params=None):
        del params
        return _tu.tree_map(jnp.sign, updates), state

    return GradientTransformation(init_empty_state, update_fn)

def scale_by_trust_ratio(min_norm=0.0, trust_coefficient=1.0, eps=0.0) -> GradientTransformation:
    """Scales each leaf by its trust ratio ``c * ||p|| / (||u|| + eps)`` (1 where
    either norm is 0), as in LARS, LAMB and Fromage.

    Args:
      min_norm: floor of both norms.
      trust_coefficient: ``c``.
      eps: added to the update norm.

    Returns:
      A :class:`GradientTransformation` with state ``EmptyState()``; ``update`` needs
      ``params``.
    """

    def update_fn(updates, state, params):
        if params is None:
            raise ValueError(NO_PARAMS_MSG)

        def _scale_update(update, param):
            param_norm = safe_norm(param, min_norm)
            update_norm = safe_norm(update, min_norm)
            trust_ratio = trust_coefficient * param_norm / (update_norm + eps)
            zero_norm = jnp.logical_or(param_norm == 0.0, update_norm == 0.0)
            safe_trust_ratio = jnp.where(zero_norm, jnp.asarray(1.0, dtype=param.dtype), trust_ratio)
            return update * safe_trust_ratio

        return _tu.tree_map(_scale_update, updates, params), state

    return GradientTransformation(init_empty_state, update_fn)

def scale_by_param_block_norm(min_scale=1e-3) -> GradientTransformation:
    """Scales each leaf's update by ``max(||p||, min_scale)`` of its param."""

    def update_fn(updates, state, params):
        if params is None:
            raise ValueError(NO_PARAMS_MSG)
        return _tu.tree_map(lambda u, p: u * safe_norm(p, min_scale), updates, params), state

    return GradientTransformation(init_empty_state, update_fn)

def scale_by_param_block_rms(min_scale=1e-3) -> GradientTransformation:
    """Scales each leaf's update by ``max(rms(p), min_scale)`` of its param."""

    def update_fn(updates, state, params):
        if params is None:
            raise ValueError(NO_PARAMS_MSG)
        return _tu.tree_map(lambda u, p: u * safe_root_mean_squares(p, min_scale), updates, params), state

    return GradientTransformation(init_empty_state, update_fn)

def _subtract_mean(g):
    if len(g.shape) > 1:
        return g - g.mean(tuple(range(1, len(g.shape))), keepdims=True)
    return g

def centralize() -> GradientTransformation:
    """Gradient centralisation (Yong et al. 2020): subtracts from every leaf of rank
    >= 2 its mean over all axes but the first."""

    def update_fn(updates, state, params=None):
        del params
        return _tu.tree_map(_subtract_mean, updates), state

    return GradientTransformation(init_empty_state, update_fn)

def normalize_by_update_norm(scale_factor=1.0, eps=1e-6) -> GradientTransformation:
    """``u <- scale_factor * u / (||u|| + eps)`` with the global norm of the updates."""

    def update_fn(updates, state, params=None):
        del params
        g_norm = (tree_norm(updates) + eps) / scale_factor
        return _tu.tree_map(lambda g: g / g_norm, updates), state

    return GradientTransformation(init_empty_state, update_fn)

def scale_by_polyak(f_min=0.0, max_learning_rate=1.0, eps=0.0, variant: str = "sps") -> GradientTransformationExtraArgs:
    """Polyak's step size ``min((f(x) - f*) / (||g||^2 + eps), max_lr)`` (Loizou et
    al. 2021); ``'sps+'`` clips the gap at 0. The loss value comes as the extra
    argument ``value``: ``update(grads, state, params, value=loss)``.

    Returns:
      A :class:`GradientTransformationExtraArgs` with state ``EmptyState()``.
    """

    def update_fn(updates, state, params=None, *, value, **extra_args):
        del params, extra_args
        grad_sq_norm = tree_norm(updates, squared=True)
        gap = jnp.asarray(value - f_min).astype(grad_sq_norm.dtype)
        if variant == "sps":
            pass
        elif variant == "sps+":
            gap = jnp.maximum(gap, 0)
        else:
            raise ValueError(f"Invalid argument value for Polyak SGD: variant={variant!r}")
        # optax's threshold is jnp.finfo(float).eps, i.e. float64's 2.2e-16.
        step = jnp.where(grad_sq_norm + eps <= float(jnp.finfo(float).eps), jnp.asarray(0.0),
                         jnp.minimum(gap / (grad_sq_norm + eps), max_learning_rate))
        return _tree.scale(step, updates), state

    return GradientTransformationExtraArgs(init_empty_state, update_fn)

# ---------------------------------------------------------------------------------
# stateful rules
# ---------------------------------------------------------------------------------
class ScaleByRpropState(NamedTuple):
    """Per-element step sizes and the previous updates."""
    step_sizes: Any
    prev_updates: Any

def scale_by_rprop(learning_rate, eta_minus=0.5, eta_plus=1.2, min_step_size=1e-6,
                   max_step_size=50.0) -> GradientTransformation:
    """Rprop (Riedmiller & Braun 1993): each element's step grows by ``eta_plus``
    while its gradient keeps its sign and shrinks by ``eta_minus`` when it flips
    (that step is then skipped); the update is ``step * sign(g)``.

    Args:
      learning_rate: the initial step size.
      eta_minus: shrink factor on a sign change.
      eta_plus: growth factor on an unchanged sign.
      min_step_size: lower bound of the steps.
      max_step_size: upper bound of the steps.

    Returns:
      A :class:`GradientTransformation` with state ``ScaleByRpropState(step_sizes,
      prev_updates)``.
    """

    def init_fn(params):
        return ScaleByRpropState(_tree.full_like(params, learning_rate), tree_zeros_like(params))

    def update_fn(updates, state, params=None):
        del params
        sign = _tu.tree_map(lambda g, prev_g: g * prev_g, updates, state.prev_updates)
        step_sizes = _tu.tree_map(
            lambda s, step_size: jnp.where(
                s == 0, step_size,
                jnp.clip(step_size * jnp.where(s > 0, eta_plus, eta_minus), min_step_size, max_step_size)),
            sign, state.step_sizes)
        prev_updates = _tu.tree_map(lambda s, g, step_size: jnp.where(s < 0, jnp.zeros_like(g),
                                                                      step_size * jnp.sign(g)),
                                    sign, updates, step_sizes)
        updates = _tu.tree_map(lambda s, g, prev_g: jnp.where(s < 0, jnp.zeros_like(prev_g), prev_g),
                               sign, prev_updates, state.prev_updates)
        return updates, ScaleByRpropState(step_sizes, prev_updates)

    return GradientTransformation(init_fn, update_fn)

class ScaleByOptimisticGradientState(NamedTuple):
    """Whether the next step is the first, and the previous gradient."""
    is_initial_step: Any
    previous_gradient: Any

def scale_by_optimistic_gradient(alpha=1.0, beta=1.0) -> GradientTransformation:
    """Optimistic gradient (Daskalakis et al. 2017): ``(alpha + beta) g_t - beta
    g_{t-1}`` (``g_{t-1} = g_t`` at the first step).

    Returns:
      A :class:`GradientTransformation` with state
      ``ScaleByOptimisticGradientState(is_initial_step, previous_gradient)``.
    """

    def init_fn(params):
        return ScaleByOptimisticGradientState(is_initial_step=jnp.asarray(True),
                                              previous_gradient=tree_zeros_like(params))

    def update_fn(updates, state, params=None):
        del params

        def f(grad, prev_grad):
            prev_grad = jnp.where(state.is_initial_step, grad, prev_grad)
            return (alpha + beta) * grad - beta * prev_grad

        new_updates = _tu.tree_map(f, updates, state.previous_gradient)
        return new_updates, ScaleByOptimisticGradientState(is_initial_step=jnp.asarray(False),
                                                           previous_gradient=updates)

    return GradientTransformation(init_fn, update_fn)

class ScaleByDistanceOverGradientsState(NamedTuple):
    """DoG's running max distance from the initial params, gradient sum of squares
    and initial params, per leaf."""
    max_dist: Any
    grad_sum_of_squares: Any
    init_params: Any

def scale_by_distance_over_gradients(reps_rel=1e-6, eps=1e-8, param_dtype=jnp.float32,
                                     global_scale=1.0) -> GradientTransformation:
    """Distance over Gradients (Ivgi et al. 2023), layer-wise: each leaf's step is
    ``global_scale * max_dist / sqrt(sum of ||g||^2 + eps)``.

    Args:
      reps_rel: initial distance, relative to ``1 + ||p0||``.
      eps: added to the gradient sum of squares.
      param_dtype: dtype of the stored initial params.
      global_scale: a multiplier of every step.

    Returns:
      A :class:`GradientTransformation` with state
      ``ScaleByDistanceOverGradientsState(max_dist, grad_sum_of_squares, init_params)``.
    """

    def _l2(x, y=0.0):
        return jnp.sqrt(jnp.square(x - y).sum())

    def init_fn(params):
        return ScaleByDistanceOverGradientsState(
            _tu.tree_map(lambda x: reps_rel * (1 + _l2(x)), params),
            _tu.tree_map(lambda x: jnp.zeros(1), params),
            tree_cast(params, param_dtype))

    def update_fn(updates, state, params):
        max_dist = _tu.tree_map(lambda d, x, y: jnp.maximum(d, _l2(x, y)), state.max_dist, params,
                                state.init_params)
        g_sos = _tu.tree_map(lambda x, y: x + jnp.square(y).sum(), state.grad_sum_of_squares, updates)
        updates = _tu.tree_map(lambda g, d, s: global_scale * (d / jnp.sqrt(s + eps)) * g, updates, max_dist, g_sos)
        return updates, ScaleByDistanceOverGradientsState(max_dist, g_sos, state.init_params)

    return GradientTransformation(init_fn, update_fn)
