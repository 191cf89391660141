"""Optimizers as chains of transformations (optax's ``alias.py``): adam, adamw, sgd,
and the rest of optax 0.2.8's (adabelief ... yogi) at the end of the file.

Each alias returns exactly the chain optax builds, so the optimizer state has the
same pytree structure (``adamw(lr).init(p)`` is
``(ScaleByAdamState(count, mu, nu), EmptyState(), EmptyState())`` for a float lr and
``(..., ScaleByScheduleState(count))`` for a schedule).
"""
import functools
import warnings
from typing import Any, Callable, Optional, Union

from .. import numpy as jnp
from ._base import GradientTransformationExtraArgs, _chain, chain, identity
from . import _clipping, _constrain, _fused, _linesearch, _scaling, transform
from . import _moments as _m


def adam(learning_rate, b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0, mu_dtype=None, *,
         nesterov: bool = False) -> GradientTransformationExtraArgs:
    r"""The Adam optimizer (Kingma & Ba 2014): ``scale_by_adam`` then
    ``scale_by_learning_rate``.

    .. math:: u_t = -\alpha_t \hat m_t / (\sqrt{\hat v_t + \bar\epsilon} + \epsilon)

    Args:
      learning_rate: a float or a schedule ``count -> lr``.
      b1: decay of the first-moment EMA.
      b2: decay of the second-moment EMA.
      eps: added to the denominator outside the square root.
      eps_root: added inside the square root.
      mu_dtype: dtype of the first moment; None infers it from the params.
      nesterov: use Nesterov momentum (NAdam).

    Returns:
      A :class:`GradientTransformationExtraArgs`.
    """
    return chain(
        transform.scale_by_adam(b1=b1, b2=b2, eps=eps, eps_root=eps_root, mu_dtype=mu_dtype,
                                nesterov=nesterov),
        transform.scale_by_learning_rate(learning_rate),
    )


nadam = functools.partial(adam, nesterov=True)
nadam.__doc__ = "NAdam: :func:`adam` with ``nesterov=True`` (Dozat 2016)."


def adamw(learning_rate, b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0, mu_dtype=None,
          weight_decay=1e-4, mask=None, *, nesterov: bool = False) -> GradientTransformationExtraArgs:
    r"""Adam with decoupled weight decay (Loshchilov & Hutter 2019): ``scale_by_adam``,
    ``add_decayed_weights``, ``scale_by_learning_rate``.

    .. math:: u_t = -\alpha_t \left(\hat m_t / (\sqrt{\hat v_t + \bar\epsilon} + \epsilon)
              + \lambda \theta_t\right)

    The decay is multiplied by the learning rate (as in PyTorch and optax).

    Args:
      learning_rate: a float or a schedule ``count -> lr``.
      b1: decay of the first-moment EMA.
      b2: decay of the second-moment EMA.
      eps: added to the denominator outside the square root.
      eps_root: added inside the square root.
      mu_dtype: dtype of the first moment; None infers it from the params.
      weight_decay: the decay rate (a float or a schedule).
      mask: pytree of bools (or a callable returning one) selecting the params to
        decay; the Adam scaling applies to all params.
      nesterov: use Nesterov momentum (NAdamW).

    Returns:
      A :class:`GradientTransformationExtraArgs`: the fused one-pass transform
      (:func:`fused_adamw`, same state and numbers) when the arguments allow it (Python
      numbers, mu_dtype None, no Nesterov, a constant weight decay), the chain otherwise.
    """
    if _fused.can_fuse(learning_rate, b1, b2, eps, eps_root, mu_dtype, weight_decay, mask, nesterov):
        return _fused.fused_adamw(learning_rate, b1=b1, b2=b2, eps=eps, eps_root=eps_root,
                                  weight_decay=weight_decay, mask=mask)
    return _adamw_unfused(learning_rate, b1, b2, eps, eps_root, mu_dtype, weight_decay, mask, nesterov=nesterov)


def _adamw_unfused(learning_rate, b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0, mu_dtype=None,
                   weight_decay=1e-4, mask=None, *, nesterov: bool = False) -> GradientTransformationExtraArgs:
    """:func:`adamw` as optax's chain of three transformations (no fusion)."""
    return _chain(
        transform.scale_by_adam(b1=b1, b2=b2, eps=eps, eps_root=eps_root, mu_dtype=mu_dtype,
                                nesterov=nesterov),
        transform.add_decayed_weights(weight_decay, mask),
        transform.scale_by_learning_rate(learning_rate),
    )


nadamw = functools.partial(adamw, nesterov=True)
nadamw.__doc__ = "NAdamW: :func:`adamw` with ``nesterov=True``."


def sgd(learning_rate, momentum=None, nesterov: bool = False,
        accumulator_dtype=None) -> GradientTransformationExtraArgs:
    r"""Stochastic gradient descent, optionally with (Nesterov) momentum
    (Sutskever et al. 2013): ``trace`` (or ``identity``) then ``scale_by_learning_rate``.

    .. math:: m_t = g_t + \mu m_{t-1},\quad u_t = -\alpha_t m_t
              \;(\text{Nesterov: } -\alpha_t (g_t + \mu m_t))

    Args:
      learning_rate: a float or a schedule ``count -> lr``.
      momentum: the momentum coefficient; None for plain SGD.
      nesterov: use Nesterov momentum.
      accumulator_dtype: dtype of the momentum accumulator.

    Returns:
      A :class:`GradientTransformationExtraArgs`; the state is
      ``(TraceState(trace) or EmptyState(), <learning-rate state>)``. With momentum, the
      fused one-pass transform (:func:`fused_sgd`, same state and numbers) when the
      arguments allow it (Python numbers, accumulator_dtype None), the chain otherwise.
    """
    if momentum is not None and _fused.can_fuse_sgd(learning_rate, momentum, accumulator_dtype):
        return _fused.fused_sgd(learning_rate, momentum=momentum, nesterov=nesterov)
    return _sgd_unfused(learning_rate, momentum, nesterov, accumulator_dtype)


def _sgd_unfused(learning_rate, momentum=None, nesterov: bool = False,
                 accumulator_dtype=None) -> GradientTransformationExtraArgs:
    """:func:`sgd` as optax's chain (no fusion)."""
    if momentum is not None:
        opt = transform.trace(decay=momentum, nesterov=nesterov, accumulator_dtype=accumulator_dtype)
    else:
        opt = identity()
    return _chain(opt, transform.scale_by_learning_rate(learning_rate))


# ---------------------------------------------------------------------------------
# the rest of optax's optimizers, each optax's chain
# ---------------------------------------------------------------------------------
MaskOrFn = Optional[Union[Any, Callable[[Any], Any]]]


def adabelief(learning_rate, b1=0.9, b2=0.999, eps=1e-16, eps_root=1e-16, *,
              nesterov: bool = False) -> GradientTransformationExtraArgs:
    """AdaBelief (Zhuang et al. 2020): ``scale_by_belief`` then the learning rate."""
    return chain(_m.scale_by_belief(b1=b1, b2=b2, eps=eps, eps_root=eps_root, nesterov=nesterov),
                 transform.scale_by_learning_rate(learning_rate))


def adadelta(learning_rate=None, rho=0.9, eps=1e-6, weight_decay=0.0,
             weight_decay_mask: MaskOrFn = None) -> GradientTransformationExtraArgs:
    """AdaDelta (Zeiler 2012): weight decay, ``scale_by_adadelta``, the learning rate
    (None: no scaling)."""
    return chain(transform.add_decayed_weights(weight_decay, mask=weight_decay_mask),
                 _m.scale_by_adadelta(rho=rho, eps=eps), transform.scale_by_learning_rate(learning_rate))


def adafactor(learning_rate=None, min_dim_size_to_factor: int = 128, decay_rate=0.8, decay_offset=0,
              multiply_by_parameter_scale: bool = True, clipping_threshold=1.0, momentum=None,
              dtype_momentum=jnp.float32, weight_decay_rate=None, eps=1e-30, factored: bool = True,
              weight_decay_mask: MaskOrFn = None) -> GradientTransformationExtraArgs:
    """Adafactor (Shazeer & Stern 2018): factored second moments, block-RMS clipping,
    the learning rate, optional scaling by the params' RMS, momentum and weight decay,
    then ``scale(-1)`` (the chain optax builds, skipping the parts switched off)."""
    tx = [_m.scale_by_factored_rms(factored, decay_rate, decay_offset, min_dim_size_to_factor, eps)]
    if clipping_threshold is not None:
        tx.append(_clipping.clip_by_block_rms(clipping_threshold))
    if learning_rate is not None:
        tx.append(transform.scale_by_learning_rate(learning_rate, flip_sign=False))
    if multiply_by_parameter_scale:
        tx.append(_scaling.scale_by_param_block_rms())
    if momentum is not None:
        tx.append(transform.ema(momentum, debias=False, accumulator_dtype=dtype_momentum))
    if weight_decay_rate is not None:
        tx.append(transform.add_decayed_weights(weight_decay_rate, mask=weight_decay_mask))
    tx.append(transform.scale(-1))
    return chain(*tx)


def adagrad(learning_rate, initial_accumulator_value=0.1, eps=1e-7) -> GradientTransformationExtraArgs:
    """Adagrad (Duchi et al. 2011): ``scale_by_rss`` then the learning rate."""
    return chain(_m.scale_by_rss(initial_accumulator_value=initial_accumulator_value, eps=eps),
                 transform.scale_by_learning_rate(learning_rate))


def adan(learning_rate, b1=0.98, b2=0.92, b3=0.99, eps=1e-8, eps_root=1e-8, weight_decay=0.0,
         mask: MaskOrFn = None) -> GradientTransformationExtraArgs:
    """Adan (Xie et al. 2022): ``scale_by_adan``, decoupled weight decay, the learning rate."""
    return chain(_m.scale_by_adan(b1=b1, b2=b2, b3=b3, eps=eps, eps_root=eps_root),
                 transform.add_decayed_weights(weight_decay, mask), transform.scale_by_learning_rate(learning_rate))


def lion(learning_rate, b1=0.9, b2=0.99, mu_dtype=None, weight_decay=1e-3,
         mask: MaskOrFn = None) -> GradientTransformationExtraArgs:
    """Lion (Chen et al. 2023): ``scale_by_lion``, decoupled weight decay, the learning rate;
    the fused one-pass transform (:func:`fused_lion`, same state and numbers) when the
    arguments allow it (Python numbers, mu_dtype None, a constant weight decay)."""
    if _fused.can_fuse_lion(learning_rate, b1, b2, mu_dtype, weight_decay, mask):
        return _fused.fused_lion(learning_rate, b1=b1, b2=b2, weight_decay=weight_decay, mask=mask)
    return _lion_unfused(learning_rate, b1, b2, mu_dtype, weight_decay, mask)


def _lion_unfused(learning_rate, b1=0.9, b2=0.99, mu_dtype=None, weight_decay=1e-3,
                  mask: MaskOrFn = None) -> GradientTransformationExtraArgs:
    """:func:`lion` as optax's chain of three transformations (no fusion)."""
    return _chain(_m.scale_by_lion(b1=b1, b2=b2, mu_dtype=mu_dtype),
                  transform.add_decayed_weights(weight_decay, mask), transform.scale_by_learning_rate(learning_rate))


def amsgrad(learning_rate, b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0, mu_dtype=None, bias_correction_mu: bool = True,
            bias_correction_nu: bool = True) -> GradientTransformationExtraArgs:
    """AMSGrad (Reddi et al. 2018): ``scale_by_amsgrad`` then the learning rate."""
    return chain(_m.scale_by_amsgrad(b1=b1, b2=b2, eps=eps, eps_root=eps_root, mu_dtype=mu_dtype,
                                     bias_correction_mu=bias_correction_mu, bias_correction_nu=bias_correction_nu),
                 transform.scale_by_learning_rate(learning_rate))


def fromage(learning_rate, min_norm=1e-6) -> GradientTransformationExtraArgs:
    """Fromage (Bernstein et al. 2020): trust-ratio scaling, the learning rate divided
    by ``sqrt(1 + lr^2)``, and a shrink of the params by the same factor."""
    if not callable(learning_rate):
        mult = 1 / (1 + learning_rate ** 2) ** 0.5
        return chain(_scaling.scale_by_trust_ratio(min_norm), transform.scale_by_learning_rate(learning_rate * mult),
                     transform.add_decayed_weights(mult - 1))
    mult_lr = lambda count: 1 / (1 + learning_rate(count) ** 2) ** 0.5  # noqa: E731
    return chain(_scaling.scale_by_trust_ratio(min_norm),
                 transform.scale_by_learning_rate(lambda c: mult_lr(c) * learning_rate(c)),
                 transform.add_decayed_weights(lambda c: mult_lr(c) - 1))


def lars(learning_rate, weight_decay=0.0, weight_decay_mask: MaskOrFn = True, trust_coefficient=0.001, eps=0.0,
         trust_ratio_mask: MaskOrFn = True, momentum=0.9, nesterov: bool = False) -> GradientTransformationExtraArgs:
    """LARS (You et al. 2017): weight decay, masked trust-ratio scaling, the learning
    rate, then (Nesterov) momentum."""
    return chain(transform.add_decayed_weights(weight_decay, mask=weight_decay_mask),
                 transform.masked(inner=_scaling.scale_by_trust_ratio(trust_coefficient=trust_coefficient, eps=eps),
                                  mask=trust_ratio_mask),
                 transform.scale_by_learning_rate(learning_rate), transform.trace(decay=momentum, nesterov=nesterov))


def lamb(learning_rate, b1=0.9, b2=0.999, eps=1e-6, eps_root=0.0, weight_decay=0.0,
         mask: MaskOrFn = None) -> GradientTransformationExtraArgs:
    """LAMB (You et al. 2019): Adam, weight decay, trust-ratio scaling, the learning rate."""
    return chain(transform.scale_by_adam(b1=b1, b2=b2, eps=eps, eps_root=eps_root),
                 transform.add_decayed_weights(weight_decay=weight_decay, mask=mask),
                 _scaling.scale_by_trust_ratio(), transform.scale_by_learning_rate(learning_rate))


def noisy_sgd(learning_rate, eta=0.01, gamma=0.55, key=None, *, seed=None) -> GradientTransformationExtraArgs:
    """SGD with annealed gradient noise (Neelakantan et al. 2015): ``add_noise`` then
    the learning rate."""
    return chain(_constrain.add_noise(eta, gamma, key, seed=seed), transform.scale_by_learning_rate(learning_rate))


def sign_sgd(learning_rate) -> GradientTransformationExtraArgs:
    """signSGD (Bernstein et al. 2018): ``scale_by_sign`` then the learning rate."""
    return chain(_scaling.scale_by_sign(), transform.scale_by_learning_rate(learning_rate))


def signum(learning_rate, beta=0.9, accumulator_dtype=None) -> GradientTransformationExtraArgs:
    """Signum (Bernstein et al. 2018): the sign of an (undebiased) EMA of the gradients."""
    return chain(transform.ema(beta, debias=False, accumulator_dtype=accumulator_dtype), _scaling.scale_by_sign(),
                 transform.scale_by_learning_rate(learning_rate))


def novograd(learning_rate, b1=0.9, b2=0.25, eps=1e-6, eps_root=0.0,
             weight_decay=0.0) -> GradientTransformationExtraArgs:
    """NovoGrad (Ginsburg et al. 2019): ``scale_by_novograd`` then the learning rate."""
    return chain(_m.scale_by_novograd(b1=b1, b2=b2, eps=eps, eps_root=eps_root, weight_decay=weight_decay),
                 transform.scale_by_learning_rate(learning_rate))


def optimistic_gradient_descent(learning_rate, alpha=1.0, beta=1.0) -> GradientTransformationExtraArgs:
    """Optimistic GD (Mokhtari et al. 2019): ``scale_by_optimistic_gradient`` then the
    learning rate."""
    return chain(_scaling.scale_by_optimistic_gradient(alpha=alpha, beta=beta),
                 transform.scale_by_learning_rate(learning_rate))


def optimistic_adam(learning_rate, optimism=None, b1=0.9, b2=0.999, eps=1e-08, eps_root=0.0, mu_dtype=None, *,
                    nesterov: bool = True) -> GradientTransformationExtraArgs:
    """Deprecated optimistic Adam (a constant learning rate, folded into the
    optimistic step); use :func:`optimistic_adam_v2`."""
    warnings.warn("`optimistic_adam` is deprecated, please use `optimistic_adam_v2` instead.",
                  category=DeprecationWarning)
    if callable(learning_rate):
        raise ValueError("This version of `optimistic_adam` does not support learning rate schedules but "
                         "`optimistic_adam_v2` does.")
    if optimism is None:
        optimism = learning_rate
    return chain(transform.scale_by_adam(b1=b1, b2=b2, eps=eps, eps_root=eps_root, mu_dtype=mu_dtype,
                                         nesterov=nesterov),
                 _scaling.scale_by_optimistic_gradient(alpha=learning_rate, beta=optimism),
                 transform.scale_by_learning_rate(1.0))


def optimistic_adam_v2(learning_rate, *, alpha=1.0, beta=1.0, b1=0.9, b2=0.999, eps=1e-08, eps_root=0.0,
                       mu_dtype=None, nesterov: bool = True) -> GradientTransformationExtraArgs:
    """Optimistic Adam (Daskalakis et al. 2017): Adam, the optimistic step, the
    learning rate."""
    return chain(transform.scale_by_adam(b1=b1, b2=b2, eps=eps, eps_root=eps_root, mu_dtype=mu_dtype,
                                         nesterov=nesterov),
                 _scaling.scale_by_optimistic_gradient(alpha=alpha, beta=beta),
                 transform.scale_by_learning_rate(learning_rate))


def radam(learning_rate, b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0, threshold=5.0, *,
          nesterov: bool = False) -> GradientTransformationExtraArgs:
    """Rectified Adam (Liu et al. 2020): ``scale_by_radam`` then the learning rate."""
    return chain(_m.scale_by_radam(b1=b1, b2=b2, eps=eps, eps_root=eps_root, threshold=threshold, nesterov=nesterov),
                 transform.scale_by_learning_rate(learning_rate))


def rmsprop(learning_rate, decay=0.9, eps=1e-8, initial_scale=0.0, eps_in_sqrt: bool = True, centered: bool = False,
            momentum=None, nesterov: bool = False, bias_correction: bool = False) -> GradientTransformationExtraArgs:
    """RMSProp (Hinton 2012; centred: Graves 2013): ``scale_by_rms`` (or
    ``scale_by_stddev``), the learning rate, then momentum (``trace``) or
    ``identity``."""
    scaler = _m.scale_by_stddev if centered else _m.scale_by_rms
    return chain(scaler(decay=decay, eps=eps, initial_scale=initial_scale, eps_in_sqrt=eps_in_sqrt,
                        bias_correction=bias_correction),
                 transform.scale_by_learning_rate(learning_rate),
                 transform.trace(decay=momentum, nesterov=nesterov) if momentum is not None else identity())


def sm3(learning_rate, momentum=0.9) -> GradientTransformationExtraArgs:
    """SM3 (Anil et al. 2019): ``scale_by_sm3`` then ``scale(-learning_rate)`` (a
    constant learning rate)."""
    return chain(_m.scale_by_sm3(momentum), transform.scale(-learning_rate))


def yogi(learning_rate, b1=0.9, b2=0.999, eps=1e-3) -> GradientTransformationExtraArgs:
    """Yogi (Zaheer et al. 2018): ``scale_by_yogi`` then the learning rate."""
    return chain(_m.scale_by_yogi(b1=b1, b2=b2, eps=eps), transform.scale_by_learning_rate(learning_rate))


def adamax(learning_rate, b1=0.9, b2=0.999, eps=1e-8) -> GradientTransformationExtraArgs:
    """Adamax (Kingma & Ba 2014): ``scale_by_adamax`` then the learning rate."""
    return chain(_m.scale_by_adamax(b1=b1, b2=b2, eps=eps), transform.scale_by_learning_rate(learning_rate))


def adamaxw(learning_rate, b1=0.9, b2=0.999, eps=1e-8, weight_decay=1e-4,
            mask: MaskOrFn = None) -> GradientTransformationExtraArgs:
    """Adamax with decoupled weight decay."""
    return chain(_m.scale_by_adamax(b1=b1, b2=b2, eps=eps), transform.add_decayed_weights(weight_decay, mask),
                 transform.scale_by_learning_rate(learning_rate))


def rprop(learning_rate, eta_minus=0.5, eta_plus=1.2, min_step_size=1e-6,
          max_step_size=50.0) -> GradientTransformationExtraArgs:
    """Rprop (Riedmiller & Braun 1993): ``scale_by_rprop`` then ``scale(-1)``."""
    return chain(_scaling.scale_by_rprop(learning_rate=learning_rate, eta_minus=eta_minus, eta_plus=eta_plus,
                                         min_step_size=min_step_size, max_step_size=max_step_size),
                 transform.scale(-1.0))


def polyak_sgd(max_learning_rate=1.0, scaling=1.0, f_min=0.0, eps=0.0,
               variant: str = "sps") -> GradientTransformationExtraArgs:
    """SGD with Polyak step sizes (Loizou et al. 2021); ``update`` needs the extra
    argument ``value`` (the loss)."""
    return chain(sgd(learning_rate=scaling),
                 _scaling.scale_by_polyak(max_learning_rate=max_learning_rate, f_min=f_min, eps=eps, variant=variant))


def lbfgs(learning_rate=None, memory_size: int = 10, scale_init_precond: bool = True,
          linesearch=_linesearch.scale_by_zoom_linesearch(max_linesearch_steps=20, initial_guess_strategy="one")
          ) -> GradientTransformationExtraArgs:
    """L-BFGS (Liu & Nocedal 1989): ``scale_by_lbfgs``, then ``-learning_rate`` (or -1)
    and a line search (a zoom search for the strong Wolfe conditions by default; None
    for none). ``update`` takes ``value``, ``grad`` and ``value_fn`` for the search;
    :func:`value_and_grad_from_state` reuses the value and gradient it stored."""
    base_scaling = transform.scale(-1.0) if learning_rate is None else transform.scale_by_learning_rate(learning_rate)
    if linesearch is None:
        linesearch = identity()
    return chain(_linesearch.scale_by_lbfgs(memory_size=memory_size, scale_init_precond=scale_init_precond),
                 base_scaling, linesearch)
