"""Adaptive scalings from running moments of the gradients, the building blocks of
adagrad, rmsprop, amsgrad, adamax, adabelief, yogi, radam, adadelta, adan, lion,
novograd, sm3 and adafactor (``optax/_src/transform.py``, ``factorized.py``), each
written as optax 0.2.8 writes it so states and numbers agree:

    scale_by_rss           g / sqrt(sum of g^2)                       ScaleByRssState(sum_of_squares)
    scale_by_rms           g / sqrt(EMA g^2)                          ScaleByRmsState(nu) | ...WithCountState
    scale_by_stddev        g / sqrt(EMA g^2 - (EMA g)^2)              ScaleByRStdDevState(mu, nu) | ...
    scale_by_amsgrad       Adam with the running max of v             ScaleByAmsgradState(count, mu, nu, nu_max)
    scale_by_adamax        m / max(|g|, b2 u)                         ScaleByAdamState(count, mu, nu)
    scale_by_belief        Adam on (g - m)^2                          ScaleByBeliefState(count, mu, nu)
    scale_by_yogi          additive second-moment update              ScaleByAdamState(count, mu, nu)
    scale_by_radam         rectified Adam                             ScaleByAdamState(count, mu, nu)
    scale_by_adadelta      sqrt(E dx^2 / E g^2) g                     ScaleByAdaDeltaState(e_g, e_x)
    scale_by_adan          Nesterov-style gradient differences        ScaleByAdanState(m, v, n, g, t)
    scale_by_lion          sign of interpolated momentum              ScaleByLionState(count, mu)
    scale_by_novograd      layer-wise second moments                  ScaleByNovogradState(count, mu, nu)
    scale_by_sm3           memory-efficient per-axis accumulators     ScaleBySM3State(mu, nu)
    scale_by_factored_rms  Adafactor's factored second moments        FactoredState(count, v_row, v_col, v)
"""
import functools
from typing import Any, Callable, NamedTuple

import numpy as _np

from .. import lax
from .. import numpy as jnp
from .. import tree_util as _tu
from ._base import NO_PARAMS_MSG, GradientTransformation, canonicalize_dtype, safe_increment, tree_cast, tree_zeros_like
from . import tree as _tree
from .transform import ScaleByAdamState, bias_correction, update_moment, update_moment_per_elem_norm

_bc = bias_correction  # scale_by_rms / scale_by_stddev have an argument of that name


def _is_none(x):
    return x is None


def _nesterov_mu_hat(mu, updates, b1, count_inc):
    return _tu.tree_map(lambda m, g: b1 * m + (1 - b1) * g,
                        bias_correction(mu, b1, safe_increment(count_inc)),
                        bias_correction(updates, b1, count_inc))


def _adam_ratio(mu_hat, nu_hat, eps, eps_root):
    return _tu.tree_map(lambda m, v: None if m is None else m / (jnp.sqrt(v + eps_root) + eps),
                        mu_hat, nu_hat, is_leaf=_is_none)


# ---------------------------------------------------------------------------------
# sums and EMAs of squares
# ---------------------------------------------------------------------------------
class ScaleByRssState(NamedTuple):
    """The sum of squared gradients (Adagrad)."""
    sum_of_squares: Any


def scale_by_rss(initial_accumulator_value=0.1, eps=1e-7) -> GradientTransformation:
    """Adagrad's scaling ``g / sqrt(sum_t g_t^2 + eps)`` (0 where the sum is 0).

    Returns:
      A :class:`GradientTransformation` with state ``ScaleByRssState(sum_of_squares)``.
    """

    def init_fn(params):
        return ScaleByRssState(sum_of_squares=_tree.full_like(params, initial_accumulator_value))

    def update_fn(updates, state, params=None):
        del params
        sum_of_squares = _tu.tree_map(lambda g, t: jnp.square(g) + t, updates, state.sum_of_squares)
        inv_sqrt = _tu.tree_map(lambda t: jnp.where(t > 0, lax.rsqrt(t + eps), 0.0), sum_of_squares)
        return _tree.mul(inv_sqrt, updates), ScaleByRssState(sum_of_squares=sum_of_squares)

    return GradientTransformation(init_fn, update_fn)


class ScaleByRmsState(NamedTuple):
    """The EMA of squared gradients."""
    nu: Any


class ScaleByRmsWithCountState(NamedTuple):
    """The EMA of squared gradients and the step count (for bias correction)."""
    count: Any
    nu: Any


def scale_by_rms(decay=0.9, eps=1e-8, initial_scale=0.0, eps_in_sqrt: bool = True,
                 bias_correction: bool = False) -> GradientTransformation:
    """RMSProp's scaling ``g / sqrt(nu + eps)`` (or ``g / (sqrt(nu) + eps)``).

    Args:
      decay: EMA decay of the squared gradients.
      eps: the stabiliser.
      initial_scale: initial value of ``nu``.
      eps_in_sqrt: ``eps`` inside the square root (True) or outside.
      bias_correction: divide ``nu`` by ``1 - decay**t`` (then the state counts).

    Returns:
      A :class:`GradientTransformation` with state ``ScaleByRmsState(nu)`` or
      ``ScaleByRmsWithCountState(count, nu)``.
    """
    debias = bias_correction

    def init_fn(params):
        nu = _tree.full_like(params, initial_scale)
        if debias:
            return ScaleByRmsWithCountState(count=jnp.zeros([], jnp.int32), nu=nu)
        return ScaleByRmsState(nu=nu)

    def update_fn(updates, state, params=None):
        del params
        nu = update_moment_per_elem_norm(updates, state.nu, decay, 2)
        if debias:
            count_inc = safe_increment(state.count)
            nu_hat = _bc(nu, decay, count_inc)
        else:
            nu_hat = nu
        if eps_in_sqrt:
            scaling = _tu.tree_map(lambda n: lax.rsqrt(n + eps), nu_hat)
        else:
            scaling = _tu.tree_map(lambda n: 1 / (jnp.sqrt(n) + eps), nu_hat)
        updates = _tu.tree_map(lambda s, g: s * g, scaling, updates)
        if debias:
            return updates, ScaleByRmsWithCountState(count=count_inc, nu=nu)
        return updates, ScaleByRmsState(nu=nu)

    return GradientTransformation(init_fn, update_fn)


class ScaleByRStdDevState(NamedTuple):
    """EMAs of the gradients and their squares (centred RMSProp)."""
    mu: Any
    nu: Any


class ScaleByRStdDevWithCountState(NamedTuple):
    """EMAs of the gradients and their squares, and the step count."""
    count: Any
    mu: Any
    nu: Any


def scale_by_stddev(decay=0.9, eps=1e-8, initial_scale=0.0, eps_in_sqrt: bool = True,
                    bias_correction: bool = False) -> GradientTransformation:
    """Centred RMSProp's scaling ``g / sqrt(nu - mu^2 + eps)``.

    Args:
      decay: EMA decay of both moments.
      eps: the stabiliser.
      initial_scale: initial value of ``nu``.
      eps_in_sqrt: ``eps`` inside the square root (True) or outside.
      bias_correction: bias-correct both moments.

    Returns:
      A :class:`GradientTransformation` with state ``ScaleByRStdDevState(mu, nu)`` or
      ``ScaleByRStdDevWithCountState(count, mu, nu)``.
    """
    debias = bias_correction

    def init_fn(params):
        mu = tree_zeros_like(params)
        nu = _tree.full_like(params, initial_scale)
        if debias:
            return ScaleByRStdDevWithCountState(count=jnp.zeros([], jnp.int32), mu=mu, nu=nu)
        return ScaleByRStdDevState(mu=mu, nu=nu)

    def update_fn(updates, state, params=None):
        del params
        mu = update_moment(updates, state.mu, decay, 1)
        nu = update_moment_per_elem_norm(updates, state.nu, decay, 2)
        if debias:
            count_inc = safe_increment(state.count)
            mu_hat, nu_hat = _bc(mu, decay, count_inc), _bc(nu, decay, count_inc)
        else:
            mu_hat, nu_hat = mu, nu
        if eps_in_sqrt:
            scaling = _tu.tree_map(lambda m, n: lax.rsqrt(n - jnp.square(m) + eps), mu_hat, nu_hat)
        else:
            scaling = _tu.tree_map(lambda m, n: 1 / (jnp.sqrt(n - jnp.square(m)) + eps), mu_hat, nu_hat)
        updates = _tu.tree_map(lambda s, g: s * g, scaling, updates)
        if debias:
            return updates, ScaleByRStdDevWithCountState(count=count_inc, mu=mu, nu=nu)
        return updates, ScaleByRStdDevState(mu=mu, nu=nu)

    return GradientTransformation(init_fn, update_fn)


# ---------------------------------------------------------------------------------
# Adam relatives
# ---------------------------------------------------------------------------------
class ScaleByAmsgradState(NamedTuple):
    """State of AMSGrad: Adam's moments and the running max of ``nu``."""
    count: Any
    mu: Any
    nu: Any
    nu_max: Any


def scale_by_amsgrad(b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0, mu_dtype=None, bias_correction_mu: bool = True,
                     bias_correction_nu: bool = True) -> GradientTransformation:
    """AMSGrad (Reddi et al. 2018): Adam with ``max(nu_max, nu_hat)`` in the
    denominator.

    Returns:
      A :class:`GradientTransformation` with state
      ``ScaleByAmsgradState(count, mu, nu, nu_max)``.
    """
    mu_dtype = canonicalize_dtype(mu_dtype)

    def init_fn(params):
        return ScaleByAmsgradState(count=jnp.zeros([], jnp.int32), mu=tree_zeros_like(params, dtype=mu_dtype),
                                   nu=tree_zeros_like(params), nu_max=tree_zeros_like(params))

    def update_fn(updates, state, params=None):
        del params
        mu = update_moment(updates, state.mu, b1, 1)
        nu = update_moment_per_elem_norm(updates, state.nu, b2, 2)
        count_inc = safe_increment(state.count)
        mu_hat = bias_correction(mu, b1, count_inc) if bias_correction_mu else mu
        nu_eff = bias_correction(nu, b2, count_inc) if bias_correction_nu else nu
        nu_max = _tu.tree_map(jnp.maximum, state.nu_max, nu_eff)
        updates = _adam_ratio(mu_hat, nu_max, eps, eps_root)
        return updates, ScaleByAmsgradState(count=count_inc, mu=tree_cast(mu, mu_dtype), nu=nu, nu_max=nu_max)

    return GradientTransformation(init_fn, update_fn)


def scale_by_adamax(b1=0.9, b2=0.999, eps=1e-8) -> GradientTransformation:
    """Adamax (Kingma & Ba 2014, sec. 7): ``m_hat / u`` with the infinity norm
    ``u = max(|g| + eps, b2 u)``.

    Returns:
      A :class:`GradientTransformation` with state ``ScaleByAdamState(count, mu, nu)``.
    """

    def init_fn(params):
        return ScaleByAdamState(count=jnp.zeros([], jnp.int32), mu=tree_zeros_like(params),
                                nu=tree_zeros_like(params))

    def update_fn(updates, state, params=None):
        del params
        count_inc = safe_increment(state.count)
        mu = update_moment(updates, state.mu, b1, 1)
        nu = _tree.update_infinity_moment(updates, state.nu, b2, eps)
        mu_hat = bias_correction(mu, b1, count_inc)
        return _tu.tree_map(lambda m, v: m / v, mu_hat, nu), ScaleByAdamState(count=count_inc, mu=mu, nu=nu)

    return GradientTransformation(init_fn, update_fn)


class ScaleByBeliefState(NamedTuple):
    """AdaBelief's moments: the EMA of g and of (g - m)^2."""
    count: Any
    mu: Any
    nu: Any


def scale_by_belief(b1=0.9, b2=0.999, eps=1e-16, eps_root=1e-16, *, nesterov: bool = False) -> GradientTransformation:
    """AdaBelief (Zhuang et al. 2020): Adam whose second moment tracks the squared
    prediction error ``(g - m)^2`` (+ ``eps_root``).

    Returns:
      A :class:`GradientTransformation` with state ``ScaleByBeliefState(count, mu, nu)``.
    """

    def init_fn(params):
        return ScaleByBeliefState(count=jnp.zeros([], jnp.int32), mu=tree_zeros_like(params),
                                  nu=tree_zeros_like(params))

    def update_fn(updates, state, params=None):
        del params
        mu = update_moment(updates, state.mu, b1, 1)
        prediction_error = _tree.sub(updates, mu)
        nu = update_moment_per_elem_norm(prediction_error, state.nu, b2, 2)
        nu = _tu.tree_map(lambda v: v + eps_root, nu)
        count_inc = safe_increment(state.count)
        mu_hat = _nesterov_mu_hat(mu, updates, b1, count_inc) if nesterov else bias_correction(mu, b1, count_inc)
        nu_hat = bias_correction(nu, b2, count_inc)
        updates = _tu.tree_map(lambda m, v: None if m is None else m / (jnp.sqrt(v) + eps), mu_hat, nu_hat,
                               is_leaf=_is_none)
        return updates, ScaleByBeliefState(count=count_inc, mu=mu, nu=nu)

    return GradientTransformation(init_fn, update_fn)


def scale_by_yogi(b1=0.9, b2=0.999, eps=1e-3, eps_root=0.0, initial_accumulator_value=1e-6) -> GradientTransformation:
    """Yogi (Zaheer et al. 2018): ``v <- v - (1 - b2) sign(v - g^2) g^2``, then Adam's
    bias-corrected ratio.

    Returns:
      A :class:`GradientTransformation` with state ``ScaleByAdamState(count, mu, nu)``.
    """

    def init_fn(params):
        return ScaleByAdamState(count=jnp.zeros([], jnp.int32),
                                mu=_tree.full_like(params, initial_accumulator_value),
                                nu=_tree.full_like(params, initial_accumulator_value))

    def update_fn(updates, state, params=None):
        del params
        mu = update_moment(updates, state.mu, b1, 1)
        nu = _tu.tree_map(lambda g, v: v - (1 - b2) * jnp.sign(v - jnp.square(g)) * jnp.square(g),
                          updates, state.nu)
        count_inc = safe_increment(state.count)
        updates = _adam_ratio(bias_correction(mu, b1, count_inc), bias_correction(nu, b2, count_inc), eps, eps_root)
        return updates, ScaleByAdamState(count=count_inc, mu=mu, nu=nu)

    return GradientTransformation(init_fn, update_fn)


def scale_by_radam(b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0, threshold=5.0, *,
                   nesterov: bool = False) -> GradientTransformation:
    """Rectified Adam (Liu et al. 2020): Adam scaled by the variance rectification
    ``r_t`` once the SMA length ``rho_t`` reaches ``threshold``, plain momentum
    before.

    Returns:
      A :class:`GradientTransformation` with state ``ScaleByAdamState(count, mu, nu)``.
    """
    ro_inf = 2.0 / (1.0 - b2) - 1.0

    def _radam_update(ro, mu_hat, nu_hat):
        r = jnp.sqrt((ro - 4.0) * (ro - 2.0) * ro_inf / ((ro_inf - 4.0) * (ro_inf - 2.0) * ro))
        return _tu.tree_map(lambda m, v: r.astype(m.dtype) * m / (jnp.sqrt(v + eps_root) + eps), mu_hat, nu_hat)

    def init_fn(params):
        return ScaleByAdamState(count=jnp.zeros([], jnp.int32), mu=tree_zeros_like(params),
                                nu=tree_zeros_like(params))

    def update_fn(updates, state, params=None):
        del params
        mu = update_moment(updates, state.mu, b1, 1)
        nu = update_moment_per_elem_norm(updates, state.nu, b2, 2)
        count_inc = safe_increment(state.count)
        b2t = b2 ** count_inc
        ro = ro_inf - 2 * count_inc * b2t / (1 - b2t)
        mu_hat = _nesterov_mu_hat(mu, updates, b1, count_inc) if nesterov else bias_correction(mu, b1, count_inc)
        nu_hat = bias_correction(nu, b2, count_inc)
        updates = _tu.tree_map(lambda t, f: jnp.where(ro >= threshold, t, f), _radam_update(ro, mu_hat, nu_hat),
                               mu_hat)
        return updates, ScaleByAdamState(count=count_inc, mu=mu, nu=nu)

    return GradientTransformation(init_fn, update_fn)


class ScaleByAdaDeltaState(NamedTuple):
    """AdaDelta's EMAs of squared gradients and squared updates."""
    e_g: Any
    e_x: Any


def scale_by_adadelta(rho=0.9, eps=1e-6) -> GradientTransformation:
    """AdaDelta (Zeiler 2012): ``sqrt(E[dx^2] + eps) / sqrt(E[g^2] + eps) * g``.

    Returns:
      A :class:`GradientTransformation` with state ``ScaleByAdaDeltaState(e_g, e_x)``.
    """

    def init_fn(params):
        return ScaleByAdaDeltaState(e_g=tree_zeros_like(params), e_x=tree_zeros_like(params))

    def update_fn(updates, state, params=None):
        del params
        e_g = update_moment(updates, state.e_g, rho, 2)
        updates = _tu.tree_map(lambda g, cur_e_g, prev_e_x: (jnp.sqrt(prev_e_x + eps) / jnp.sqrt(cur_e_g + eps)) * g,
                               updates, e_g, state.e_x)
        e_x = update_moment(updates, state.e_x, rho, 2)
        return updates, ScaleByAdaDeltaState(e_g=e_g, e_x=e_x)

    return GradientTransformation(init_fn, update_fn)


class ScaleByAdanState(NamedTuple):
    """Adan's moments of g, of the gradient difference and of the squared
    Nesterov gradient, the last gradient and the step count."""
    m: Any
    v: Any
    n: Any
    g: Any
    t: Any


def scale_by_adan(b1=0.98, b2=0.92, b3=0.99, eps=1e-8, eps_root=0.0) -> GradientTransformation:
    """Adan (Xie et al. 2022): moments of ``g``, of ``g_t - g_{t-1}`` and of
    ``(g + (1 - b2) diff)^2``; the update is ``(m_hat + (1 - b2) v_hat) /
    (sqrt(n_hat + eps_root) + eps)``.

    Returns:
      A :class:`GradientTransformation` with state ``ScaleByAdanState(m, v, n, g, t)``.
    """

    def init_fn(params):
        z = lambda: tree_zeros_like(params)  # noqa: E731
        return ScaleByAdanState(m=z(), v=z(), n=z(), g=z(), t=jnp.zeros([], jnp.int32))

    def update_fn(updates, state, params=None):
        del params
        g = updates
        diff = _tree.where(state.t == 0, tree_zeros_like(g), _tree.sub(g, state.g))
        m = update_moment(g, state.m, b1, 1)
        v = update_moment(diff, state.v, b2, 1)
        sq = _tree.add_scale(g, 1 - b2, diff)
        n = update_moment_per_elem_norm(sq, state.n, b3, 2)
        t = safe_increment(state.t)
        m_hat, v_hat, n_hat = bias_correction(m, b1, t), bias_correction(v, b2, t), bias_correction(n, b3, t)
        u = _tree.add_scale(m_hat, 1 - b2, v_hat)
        denom = _tu.tree_map(lambda nh: jnp.sqrt(nh + eps_root) + eps, n_hat)
        return _tree.div(u, denom), ScaleByAdanState(m=m, v=v, n=n, g=g, t=t)

    return GradientTransformation(init_fn, update_fn)


class ScaleByLionState(NamedTuple):
    """Lion's momentum and step count."""
    count: Any
    mu: Any


def scale_by_lion(b1=0.9, b2=0.99, mu_dtype=None, *, mode: str = "hard",
                  smooth_beta: float = 1.0) -> GradientTransformation:
    """Lion (Chen et al. 2023): ``sign((1 - b1) g + b1 m)``, then ``m <- EMA_b2(g)``.

    Args:
      b1: interpolation for the update direction.
      b2: EMA decay of the momentum.
      mu_dtype: dtype of the momentum.
      mode: ``'hard'`` (sign), ``'smooth'`` (``tanh(smooth_beta x)``) or ``'refined'``
        (linear below 1 in magnitude, sign above).
      smooth_beta: the slope of ``'smooth'``.

    Returns:
      A :class:`GradientTransformation` with state ``ScaleByLionState(count, mu)``.
    """
    mu_dtype = canonicalize_dtype(mu_dtype)
    if mode not in ("hard", "smooth", "refined"):
        raise ValueError(f'Unknown lion mode: {mode}. It needs to be one of ["hard", "smooth", "refined"].')

    def init_fn(params):
        return ScaleByLionState(count=jnp.zeros([], jnp.int32), mu=tree_zeros_like(params, dtype=mu_dtype))

    def _comb(g, m):
        x = (1.0 - b1) * g + b1 * m
        if mode == "hard":
            return jnp.sign(x)
        if mode == "smooth":
            return jnp.tanh(smooth_beta * x)
        return jnp.where(jnp.abs(x) < 1.0, x, jnp.sign(x))

    def update_fn(updates, state, params=None):
        del params
        updates_new = _tu.tree_map(_comb, updates, state.mu)
        mu = tree_cast(update_moment(updates, state.mu, b2, 1), mu_dtype)
        return updates_new, ScaleByLionState(count=safe_increment(state.count), mu=mu)

    return GradientTransformation(init_fn, update_fn)


class ScaleByNovogradState(NamedTuple):
    """NovoGrad's momentum (per element), second moments (one scalar per leaf) and
    step count."""
    count: Any
    mu: Any
    nu: Any


def scale_by_novograd(b1=0.9, b2=0.25, eps=1e-8, eps_root=0.0, weight_decay=0.0,
                      mu_dtype=None) -> GradientTransformation:
    """NovoGrad (Ginsburg et al. 2019): per-leaf second moments of ``||g||^2``, the
    normalised gradient plus weight decay accumulated with momentum ``b1``.

    Returns:
      A :class:`GradientTransformation` with state ``ScaleByNovogradState(count, mu,
      nu)``; ``update`` needs ``params``.
    """
    mu_dtype = canonicalize_dtype(mu_dtype)

    def init_fn(params):
        return ScaleByNovogradState(count=jnp.zeros([], jnp.int32), mu=tree_zeros_like(params, dtype=mu_dtype),
                                    nu=_tu.tree_map(lambda p: jnp.asarray(0.0, dtype=p.dtype), params))

    def nu_addition(grads):
        # jnp.linalg.norm(g) ** 2: the square of the Frobenius norm.
        return jnp.sqrt(jnp.sum(jnp.square(grads))) ** 2

    def mu_addition(grads, params, nu):
        return grads / (jnp.sqrt(nu + eps_root) + eps) + weight_decay * params

    def init_nu(grads, nu):
        return _tu.tree_map(lambda g, n: nu_addition(g).astype(n.dtype), grads, nu)

    def update_nu(grads, nu):
        return update_moment(_tu.tree_map(nu_addition, grads), nu, b2, 1)

    def init_mu(grads, params, mu, nu):
        del mu
        return _tu.tree_map(mu_addition, grads, params, nu)

    def update_mu(grads, params, mu, nu):
        updates = _tu.tree_map(mu_addition, grads, params, nu)
        return _tu.tree_map(lambda m, u: None if m is None else b1 * m + u, mu, updates, is_leaf=_is_none)

    def update_fn(updates, state, params):
        if params is None:
            raise ValueError(NO_PARAMS_MSG)
        count_inc = safe_increment(state.count)
        nu = lax.cond(count_inc == 1, init_nu, update_nu, updates, state.nu)
        mu = lax.cond(count_inc == 1, init_mu, update_mu, updates, params, state.mu, nu)
        mu = tree_cast(mu, mu_dtype)
        return mu, ScaleByNovogradState(count=count_inc, mu=mu, nu=nu)

    return GradientTransformation(init_fn, update_fn)


class ScaleBySM3State(NamedTuple):
    """SM3's per-axis accumulators (a list of vectors per leaf) and momentum."""
    mu: Any
    nu: Any


def scale_by_sm3(b1=0.9, b2=1.0, eps=1e-8) -> GradientTransformation:
    """SM3 (Anil et al. 2019): one accumulator vector per axis of each leaf; an
    element's second moment is the min over its axes' accumulators.

    Returns:
      A :class:`GradientTransformation` with state ``ScaleBySM3State(mu, nu)``
      (``mu`` holds, per leaf, a list of ``ndim`` vectors).
    """

    def zeros_for_dim(p):
        return [jnp.zeros((p.shape[i],), p.dtype) for i in range(p.ndim)]

    def init_fn(params):
        return ScaleBySM3State(_tu.tree_map(zeros_for_dim, params), tree_zeros_like(params))

    def _expanded_shape(shape, axis):
        return [1] * axis + [shape[axis]] + [1] * (len(shape) - axis - 1)

    def _new_accum(g, v):
        coeffs = ((1.0 - b2) if b2 != 1.0 else 1.0, b2)
        if g.ndim < 2:
            return coeffs[0] * g ** 2 + coeffs[1] * v[0]
        return coeffs[0] * g ** 2 + coeffs[1] * functools.reduce(jnp.minimum, v)

    def _new_mu(g, i):
        if g.ndim < 2:
            return g
        return jnp.max(g, axis=tuple(a for a in range(g.ndim) if a != i))

    def update_fn(updates, state, params=None):
        del params
        # mu holds a list per leaf: map over the updates' leaves with the lists whole.
        u_leaves, treedef = _tu.tree_flatten(updates)
        mu_lists = treedef.flatten_up_to(state.mu)
        mu = [[jnp.reshape(v[i], _expanded_shape(g.shape, i)) for i in range(g.ndim)]
              for g, v in zip(u_leaves, mu_lists)]
        accum = [_new_accum(g, m) for g, m in zip(u_leaves, mu)]
        accum_inv_sqrt = [jnp.where(t > 0, lax.rsqrt(t + eps), 0.0) for t in accum]
        up = _tu.tree_unflatten(treedef, [g * a for g, a in zip(u_leaves, accum_inv_sqrt)])
        nu = update_moment(up, state.nu, b1, 1)
        new_mu = _tu.tree_unflatten(treedef, [[_new_mu(a, i) for i in range(a.ndim)] for a in accum])
        return nu, ScaleBySM3State(mu=new_mu, nu=nu)

    return GradientTransformation(init_fn, update_fn)


# ---------------------------------------------------------------------------------
# Adafactor's factored second moments
# ---------------------------------------------------------------------------------
def _decay_rate_pow(i, exponent=0.8):
    """Adafactor's second-moment decay ``1 - (i + 1)**-exponent``."""
    t = jnp.asarray(i + 1).astype(jnp.float32)
    return 1.0 - t ** (-exponent)


def _factored_dims(shape, factored, min_dim_size_to_factor):
    """The two largest axes (second largest, largest) if both are big enough."""
    if not factored or len(shape) < 2:
        return None
    sorted_dims = _np.argsort(shape)
    if shape[sorted_dims[-2]] < min_dim_size_to_factor:
        return None
    return int(sorted_dims[-2]), int(sorted_dims[-1])


class FactoredState(NamedTuple):
    """Adafactor's state: the step count, row and column second moments of factored
    leaves, full second moments of the others (``(1,)`` placeholders elsewhere)."""
    count: Any
    v_row: Any
    v_col: Any
    v: Any


def scale_by_factored_rms(factored: bool = True, decay_rate=0.8, step_offset=0, min_dim_size_to_factor: int = 128,
                          epsilon=1e-30, decay_rate_fn: Callable = _decay_rate_pow) -> GradientTransformation:
    """Adafactor's scaling (Shazeer & Stern 2018): leaves whose two largest axes are
    at least ``min_dim_size_to_factor`` keep row and column means of ``g^2`` instead
    of the full second moment.

    Args:
      factored: factor the second moments where possible.
      decay_rate: exponent of the decay schedule ``decay_rate_fn(step, decay_rate)``.
      step_offset: subtracted from the step count for the schedule.
      min_dim_size_to_factor: size both factored axes must reach.
      epsilon: added to ``g^2``.
      decay_rate_fn: ``(step, decay_rate) -> decay``.

    Returns:
      A :class:`GradientTransformation` with state ``FactoredState(count, v_row,
      v_col, v)``; ``update`` needs ``params``.
    """

    def _init(param):
        shape, dtype = param.shape, param.dtype
        fd = _factored_dims(shape, factored, min_dim_size_to_factor)
        one = jnp.zeros((1,), dtype)
        if fd is not None:
            d1, d0 = fd
            row_shape = tuple(s for i, s in enumerate(shape) if i != d0)
            col_shape = tuple(s for i, s in enumerate(shape) if i != d1)
            return jnp.zeros(row_shape, dtype), jnp.zeros(col_shape, dtype), one
        return one, one, jnp.zeros_like(param)

    def init_fn(params):
        leaves, treedef = _tu.tree_flatten(params)
        parts = [_init(p) for p in leaves]
        un = lambda i: _tu.tree_unflatten(treedef, [p[i] for p in parts])  # noqa: E731
        return FactoredState(count=jnp.zeros([], jnp.int32), v_row=un(0), v_col=un(1), v=un(2))

    def _update(grad, v_row, v_col, v, param, step):
        shape, dtype = param.shape, param.dtype
        decay_rate_t = decay_rate_fn(step - step_offset, decay_rate)
        new_v_row = jnp.zeros((1,), dtype)
        new_v_col = jnp.zeros((1,), dtype)
        new_v = jnp.zeros((1,), dtype)
        fd = _factored_dims(shape, factored, min_dim_size_to_factor)
        if fd is not None:
            d1, d0 = fd
            grad_sqr = jnp.square(grad) + epsilon
            new_v_row = (decay_rate_t * v_row + (1.0 - decay_rate_t) * jnp.mean(grad_sqr, axis=d0)).astype(dtype)
            new_v_col = (decay_rate_t * v_col + (1.0 - decay_rate_t) * jnp.mean(grad_sqr, axis=d1)).astype(dtype)
            reduced_d1 = d1 - 1 if d1 > d0 else d1
            row_col_mean = jnp.mean(new_v_row, axis=reduced_d1, keepdims=True)
            row_factor = (new_v_row / row_col_mean) ** -0.5
            col_factor = new_v_col ** -0.5
            update = grad * jnp.expand_dims(row_factor, axis=d0) * jnp.expand_dims(col_factor, axis=d1)
        else:
            grad_sqr = jnp.square(grad) + epsilon
            new_v = (decay_rate_t * v + (1.0 - decay_rate_t) * grad_sqr).astype(dtype)
            update = grad * new_v ** -0.5
        return update, new_v_row, new_v_col, new_v

    def update_fn(grads, state, params):
        if params is None:
            raise ValueError(NO_PARAMS_MSG)
        g_leaves, treedef = _tu.tree_flatten(grads)
        rest = [treedef.flatten_up_to(t) for t in (state.v_row, state.v_col, state.v, params)]
        outs = [_update(g, r, c, v, p, state.count) for g, r, c, v, p in zip(g_leaves, *rest)]
        un = lambda i: _tu.tree_unflatten(treedef, [o[i] for o in outs])  # noqa: E731
        return un(0), FactoredState(count=safe_increment(state.count), v_row=un(1), v_col=un(2), v=un(3))

    return GradientTransformation(init_fn, update_fn)

