"""The rest of optax 0.2.8's classification losses (``optax/losses/_classification.py``,
``_fenchel_young.py``): margin losses (hinge, perceptron, sparsemax and their
multiclass forms), ``safe_softmax_cross_entropy``, the poly-1 loss, KL divergences,
CTC and ``make_fenchel_young_loss``. Formula for formula optax's; per-example values.
"""
import functools
from typing import Any, Callable

import numpy as _np

from .. import lax
from .. import nn as _nn
from .. import numpy as jnp
from .._src.custom_derivatives import custom_jvp
from .losses import _check_float, _check_shapes_equal, _log_softmax, softmax_cross_entropy


def _softmax(x, axis=-1, where=None):
    return jnp.exp(_log_softmax(x, axis, where))


def _one_hot(labels, n, dtype=jnp.float32):
    return (jnp.asarray(labels)[..., None] == jnp.arange(n)).astype(dtype)


def _dot_last(a, b):
    return jnp.sum(a * b, axis=-1)


def _sparse_plus(x):
    """jax.nn.sparse_plus: 0 below -1, x above 1, (x + 1)^2 / 4 between."""
    return jnp.where(x <= -1.0, 0.0, jnp.where(x >= 1.0, x, (x + 1.0) ** 2 / 4))


# ---------------------------------------------------------------------------------
# margin losses
# ---------------------------------------------------------------------------------
def hinge_loss(predictor_outputs, targets):
    """Binary hinge loss ``max(0, 1 - y * f)`` with targets in {-1, 1}."""
    return jnp.maximum(0, 1 - predictor_outputs * targets)


def perceptron_loss(predictor_outputs, targets):
    """Binary perceptron loss ``max(0, -y * f)`` with targets in {-1, 1}."""
    _check_shapes_equal(predictor_outputs, targets)
    return jnp.maximum(0, -predictor_outputs * targets)


def sparsemax_loss(logits, labels):
    """Binary sparsemax loss (Martins & Astudillo 2016): ``sparse_plus`` of the logit
    with its sign flipped for positive labels."""
    return _sparse_plus(jnp.where(labels, -logits, logits))


def multiclass_hinge_loss(scores, labels):
    """Multiclass hinge loss ``max_k(s_k + 1 - [k = y]) - s_y`` (integer labels)."""
    one_hot_labels = _one_hot(labels, scores.shape[-1], scores.dtype)
    return jnp.max(scores + 1.0 - one_hot_labels, axis=-1) - _dot_last(scores, one_hot_labels)


def multiclass_perceptron_loss(scores, labels):
    """Multiclass perceptron loss ``max_k s_k - s_y`` (integer labels)."""
    one_hot_labels = _one_hot(labels, scores.shape[-1], scores.dtype)
    return jnp.max(scores, axis=-1) - _dot_last(scores, one_hot_labels)


def _projection_simplex_last(x):
    """Euclidean projection of each row (last axis) onto the probability simplex
    (the sort-based algorithm of optax.projections.projection_simplex)."""
    n = x.shape[-1]
    u = jnp.flip(jnp.sort(x, axis=-1), axis=-1)
    cumsum_u = jnp.cumsum(u, axis=-1)
    ind = jnp.arange(n) + 1
    cond = 1 / ind + (u - cumsum_u / ind) > 0
    idx = jnp.sum(cond.astype(jnp.int32), axis=-1, keepdims=True)
    tau_sum = jnp.take_along_axis(cumsum_u, idx - 1, axis=-1)
    return jnp.maximum(1 / idx + (x - tau_sum / idx), 0)


def multiclass_sparsemax_loss(scores, labels):
    """Multiclass sparsemax loss (Martins & Astudillo 2016) for integer labels."""
    scores = jnp.asarray(scores)
    proba = _projection_simplex_last(scores)
    label_scores = jnp.take_along_axis(scores, jnp.asarray(labels)[..., None], axis=-1)
    one_hot = _one_hot(labels, scores.shape[-1], jnp.bool_)
    s = jnp.where(one_hot, 0.0, scores - label_scores)
    return _dot_last(proba, jnp.where(proba != 0, s, 0.0)) + 0.5 * (1.0 - _dot_last(proba, proba))


# ---------------------------------------------------------------------------------
# softmax family
# ---------------------------------------------------------------------------------
@custom_jvp
def _weighted_logsoftmax(x, weights):
    logsoftmax_x = _nn.log_softmax(x, axis=-1)
    return jnp.where(weights != 0.0, weights * logsoftmax_x, jnp.zeros_like(logsoftmax_x))


@_weighted_logsoftmax.defjvp
def _weighted_logsoftmax_jvp(primals, tangents):
    x, weights = primals
    x_dot, weights_dot = tangents
    logsoftmax_x = _nn.log_softmax(x, axis=-1)
    result = jnp.where(weights != 0.0, weights * logsoftmax_x, jnp.zeros_like(logsoftmax_x))
    out_tangents = (weights * x_dot - weights * jnp.sum(x_dot * _nn.softmax(x, axis=-1), axis=-1, keepdims=True)
                    + weights_dot * logsoftmax_x)
    return result, out_tangents


def safe_softmax_cross_entropy(logits, labels):
    """Softmax cross-entropy that stays finite (value and gradient) when a logit is
    ``-inf`` where its label weight is 0."""
    _check_float(logits, "logits")
    return -jnp.sum(_weighted_logsoftmax(logits, labels), axis=-1)


def poly_loss_cross_entropy(logits, labels, *, epsilon=2.0, axis=-1, where=None):
    """Poly-1 loss (Leng et al. 2022): cross-entropy plus ``epsilon * (1 - p_t)``."""
    _check_float(logits, "logits")
    _check_float(labels, "labels")
    p = _softmax(logits, axis=axis, where=where)
    one_minus_pt = jnp.sum(labels * (1 - p), axis=axis, where=where)
    cross_entropy = softmax_cross_entropy(logits=logits, labels=labels, axis=axis, where=where)
    return cross_entropy + epsilon * one_minus_pt


# ---------------------------------------------------------------------------------
# divergences
# ---------------------------------------------------------------------------------
def kl_divergence(log_predictions, targets, axis=-1, where=None):
    """KL(targets || predictions) with predictions as log-probabilities (0 log 0 = 0)."""
    _check_float(log_predictions, "log_predictions")
    _check_float(targets, "targets")
    loss = targets * (jnp.where(targets == 0, 0, jnp.log(targets)) - log_predictions)
    return jnp.sum(loss, axis=axis, where=where)


def kl_divergence_with_log_targets(log_predictions, log_targets, axis=-1, where=None):
    """KL divergence with both arguments as log-probabilities."""
    _check_float(log_predictions, "log_predictions")
    _check_float(log_targets, "log_targets")
    loss = jnp.exp(log_targets) * (log_targets - log_predictions)
    return jnp.sum(loss, axis=axis, where=where)


def generalized_kl_divergence(log_predictions, targets, axis=-1, where=None):
    """KL divergence for unnormalised measures: ``KL + sum(exp(log_p) - targets)``."""
    x = kl_divergence(log_predictions, targets, axis=axis, where=where)
    y = jnp.sum(jnp.exp(log_predictions) - targets, axis=axis, where=where)
    return x + y


def convex_kl_divergence(log_predictions, targets, axis=-1, where=None):
    """Deprecated name of :func:`generalized_kl_divergence` (as in optax)."""
    import warnings
    warnings.warn("optax.losses.convex_kl_divergence is deprecated, use generalized_kl_divergence instead.",
                  DeprecationWarning)
    return generalized_kl_divergence(log_predictions, targets, axis=axis, where=where)


# ---------------------------------------------------------------------------------
# CTC
# ---------------------------------------------------------------------------------
def _check_rank(x, rank, what):
    if jnp.ndim(x) != rank:
        raise ValueError(f"Expected the input to have rank {rank}, got {jnp.ndim(x)} instead ({what})")


def ctc_loss_with_forward_probs(logits, logit_paddings, labels, label_paddings, *, blank_id: int = 0,
                                log_epsilon=-1e5):
    """Connectionist temporal classification (Graves et al. 2006) by the forward
    algorithm, with its forward log-probabilities.

    Args:
      logits: ``[B, T, K]`` per-frame class scores.
      logit_paddings: ``[B, T]``, 1.0 on padded frames.
      labels: ``[B, N]`` integer label sequences.
      label_paddings: ``[B, N]``, 1.0 on padded labels.
      blank_id: the blank class.
      log_epsilon: the log of "impossible".

    Returns:
      ``(per_seq_loss [B], logalpha_phi [T, B, N+1], logalpha_emit [T, B, N])``.
    """
    _check_rank(logits, 3, "logits")
    _check_rank(labels, 2, "labels")
    _check_shapes_equal(labels, label_paddings)
    _check_shapes_equal(logits[..., 0], logit_paddings)
    batchsize, _, num_classes = logits.shape
    batchsize_of_labels, maxlabellen = labels.shape
    if batchsize_of_labels != batchsize:
        raise ValueError(f"Expected `labels` to have batch size {batchsize}, got {batchsize_of_labels}.")
    logprobs = _nn.log_softmax(logits)
    labellens = maxlabellen - jnp.sum(label_paddings, axis=1).astype(jnp.int32)
    repeat = (labels[:, :-1] == labels[:, 1:]).astype(jnp.float32)
    repeat = jnp.pad(repeat, ((0, 0), (0, 1)))
    logprobs_phi = jnp.transpose(logprobs[:, :, blank_id:blank_id + 1], (1, 0, 2))  # [T, B, 1]
    one_hot = _one_hot(labels, num_classes)  # [B, N, K]
    logprobs_emit = jnp.transpose(jnp.einsum("btk,bnk->btn", logprobs, one_hot), (1, 0, 2))  # [T, B, N]
    logalpha_phi_init = (jnp.ones((batchsize, maxlabellen + 1)) * log_epsilon).at[:, 0].set(0.0)
    logalpha_emit_init = jnp.ones((batchsize, maxlabellen)) * log_epsilon

    def update_phi_score(phi, added_score):
        return jnp.concatenate([phi[:, :1], jnp.logaddexp(phi[:, 1:], added_score)], axis=-1)

    def loop_body(prev, x):
        prev_phi, prev_emit = prev
        prev_phi_orig = prev_phi
        prev_phi = update_phi_score(prev_phi, prev_emit + log_epsilon * repeat)
        logprob_emit, logprob_phi, pad = x
        next_emit = jnp.logaddexp(prev_phi[:, :-1] + logprob_emit, prev_emit + logprob_emit)
        next_phi = prev_phi + logprob_phi
        next_phi = update_phi_score(next_phi, prev_emit + logprob_phi + log_epsilon * (1.0 - repeat))
        pad = pad.reshape((batchsize, 1))
        next_emit = pad * prev_emit + (1.0 - pad) * next_emit
        next_phi = pad * prev_phi_orig + (1.0 - pad) * next_phi
        return (next_phi, next_emit), (next_phi, next_emit)

    xs = (logprobs_emit, logprobs_phi, jnp.transpose(logit_paddings, (1, 0)))
    _, (logalpha_phi, logalpha_emit) = lax.scan(loop_body, (logalpha_phi_init, logalpha_emit_init), xs)
    logalpha_phi_last = update_phi_score(logalpha_phi[-1], logalpha_emit[-1])
    logalpha_phi = logalpha_phi.at[-1].set(logalpha_phi_last)
    one_hot = _one_hot(labellens, maxlabellen + 1)  # [B, N+1]
    per_seq_loss = -jnp.einsum("bn,bn->b", logalpha_phi_last, one_hot)
    return per_seq_loss, logalpha_phi, logalpha_emit


def ctc_loss(logits, logit_paddings, labels, label_paddings, *, blank_id: int = 0, log_epsilon=-1e5):
    """Per-sequence CTC loss (see :func:`ctc_loss_with_forward_probs`)."""
    per_seq_loss, _, _ = ctc_loss_with_forward_probs(logits, logit_paddings, labels, label_paddings,
                                                     blank_id=blank_id, log_epsilon=log_epsilon)
    return per_seq_loss


# ---------------------------------------------------------------------------------
# Fenchel-Young
# ---------------------------------------------------------------------------------
def make_fenchel_young_loss(max_fun: Callable[..., Any]):
    """The Fenchel-Young loss ``max_fun(scores) - <targets, scores>`` of a convex
    regulariser's conjugate ``max_fun`` (Blondel et al. 2020), over the last axis.

    Args:
      max_fun: ``scores [n] -> scalar`` (e.g. ``logsumexp``); batch axes are mapped
        with ``podlet.vmap``.

    Returns:
      ``loss(scores, targets, *args, **kwargs)``.
    """
    from .._src.batching import vmap

    def fenchel_young_loss(scores, targets, *args, **kwargs):
        scores, targets = jnp.asarray(scores), jnp.asarray(targets)
        batch = scores.shape[:-1]
        n = scores.shape[-1]
        f = functools.partial(max_fun, **kwargs)
        s2 = scores.reshape((int(_np.prod(batch, dtype=_np.int64)), n)) if batch else scores[None]
        max_value = vmap(lambda s: f(s, *args))(s2).reshape(batch)
        return max_value - _dot_last(targets, scores)

    return fenchel_young_loss

