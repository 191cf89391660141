"""Optimizers as chains of transformations (optax's ``alias.py``): adam, adamw, sgd.

Each alias returns exactly the chain optax builds, so the optimizer state has the
same pytree structure (``adamw(lr).init(p)`` is
``(ScaleByAdamState(count, mu, nu), EmptyState(), EmptyState())`` for a float lr and
``(..., ScaleByScheduleState(count))`` for a schedule).
"""
import functools

from ._base import GradientTransformationExtraArgs, _chain, chain, identity
from . import _fused, transform


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
      ``(TraceState(trace) or EmptyState(), <learning-rate state>)``.
    """
    if momentum is not None:
        opt = transform.trace(decay=momentum, nesterov=nesterov, accumulator_dtype=accumulator_dtype)
    else:
        opt = identity()
    return chain(opt, transform.scale_by_learning_rate(learning_rate))
