"""Losses: optax's classification and regression losses, plus podlet's softmax focal
loss and the seed recipe's ``classification_loss``.

The optax-named losses follow optax 0.2.8 formula for formula
(``optax/losses/_classification.py``, ``_regression.py``, ``_smoothing.py``) and
return per-example values (reduce them yourself, e.g. ``.mean()``). They compute in
the dtype of ``logits``; for the f32-loss policy of DESIGN.md, cast bf16 logits with
``logits.astype(jnp.float32)`` first.
"""
import numpy as _np

from .. import lax
from .. import nn as _nn
from .. import numpy as jnp
from .._src import dtypes as _dtypes


# ---------------------------------------------------------------------------------
# checks and jax.nn helpers with `where`/`b` semantics
# ---------------------------------------------------------------------------------
def _check_float(x, what="input"):
    d = jnp.asarray(x).dtype
    if not _dtypes.is_float(d):
        raise TypeError(f"Expected the {what} to have a floating dtype, got {d} instead")


def _check_int(x, what="labels"):
    d = jnp.asarray(x).dtype
    if not _dtypes.is_int(d):
        raise TypeError(f"Expected the {what} to have an integer dtype, got {d} instead")


def _check_shapes_equal(a, b):
    a_shape = a.shape if hasattr(a, "shape") else _np.asarray(a).shape
    b_shape = b.shape if hasattr(b, "shape") else _np.asarray(b).shape
    if tuple(a_shape) != tuple(b_shape):
        raise ValueError(f"Shape mismatch: got {tuple(a_shape)} and {tuple(b_shape)}.")


def _log_softmax(x, axis=-1, where=None):
    """jax.nn.log_softmax, including its ``where`` (masked-out entries give -inf)."""
    if where is None:
        return _nn.log_softmax(x, axis)
    x = jnp.asarray(x)
    x_safe = jnp.where(where, x, -jnp.inf)
    x_max = jnp.max(x_safe, axis, keepdims=True)
    shifted = x_safe - lax.stop_gradient(x_max)
    shifted_logsumexp = jnp.log(jnp.sum(jnp.exp(shifted), axis, keepdims=True, where=where))
    return jnp.where(where, shifted - shifted_logsumexp, -jnp.inf)


def _logsumexp(a, axis=None, b=None, where=None):
    """jax.nn.logsumexp with ``b`` and ``where`` as jax computes them: entries with
    ``b == 0`` or ``where == False`` take no part in the max shift."""
    a = jnp.asarray(a)
    if where is not None:
        a = jnp.where(where, a, 0)
    if b is not None:
        b = jnp.asarray(b).astype(a.dtype)
        a = jnp.where(b != 0, a, -jnp.inf)
    a_for_max = a if where is None else jnp.where(where, a, -jnp.inf)
    amax = jnp.max(a_for_max, axis, keepdims=True)
    amax = lax.stop_gradient(jnp.where(jnp.isfinite(amax), amax, jnp.zeros_like(amax)))
    exp_a = jnp.exp(a - amax)
    if b is not None:
        exp_a = exp_a * b
    sumexp = jnp.sum(exp_a, axis, keepdims=True, where=where)
    sign = jnp.sign(sumexp)
    out = jnp.log(jnp.abs(sumexp)) + amax
    if b is not None:
        out = jnp.where(sign < 0, jnp.full_like(out, _np.nan), out)
    dims = jnp._axes(axis, a.ndim)
    return jnp.squeeze(out, dims) if dims else out


# ---------------------------------------------------------------------------------
# optax losses
# ---------------------------------------------------------------------------------
def smooth_labels(labels, alpha, *, axis=-1, where=None):
    """Label smoothing (Müller et al. 2019): ``(1 - alpha) * labels + alpha / K``.

    Args:
      labels: one-hot (float) labels.
      alpha: the smoothing factor.
      axis: the class axis (or axes).
      where: optional mask of the classes that count towards ``K``.

    Returns:
      The smoothed labels, same shape as ``labels``.
    """
    _check_float(labels, "labels")
    labels = jnp.asarray(labels)
    if where is None:
        if axis is None:
            num_categories = labels.size
        else:
            axes = [axis] if isinstance(axis, int) else list(axis)
            num_categories = int(_np.prod([labels.shape[a] for a in axes]))
    else:
        num_categories = jnp.sum(where, axis, keepdims=True)
    return (1.0 - alpha) * labels + alpha / num_categories


def softmax_cross_entropy(logits, labels, axis=-1, where=None):
    r"""Softmax cross-entropy against (soft or one-hot) target distributions:
    :math:`-\sum_j y_j \log \mathrm{softmax}(x)_j`.

    Args:
      logits: unnormalised log-probabilities, ``[..., num_classes]``.
      labels: target distributions with the same shape.
      axis: the class axis (or axes).
      where: optional mask of the classes to include.

    Returns:
      Per-example cross-entropy, shape ``logits.shape`` without ``axis``.
    """
    _check_float(logits, "logits")
    logits = jnp.asarray(logits)
    if where is not None:
        where = jnp.asarray(where)
        if where.ndim != logits.ndim:
            where = jnp.expand_dims(where, axis)
    log_probs = _log_softmax(logits, axis, where)
    return -jnp.sum(labels * log_probs, axis, where=where)


def softmax_cross_entropy_with_integer_labels(logits, labels, axis=-1, where=None):
    r"""Softmax cross-entropy with integer class labels:
    :math:`\log\sum_j e^{x_j} - x_{y}`.

    Args:
      logits: unnormalised log-probabilities, ``[..., num_classes]``.
      labels: integer labels in ``[0, num_classes)``, shape ``[...]``.
      axis: the class axis, or a tuple of axes (labels then index the flattened slice).
      where: optional mask of the classes to include.

    Returns:
      Per-example cross-entropy, shape ``labels.shape``.
    """
    _check_float(logits, "logits")
    _check_int(labels, "labels")
    logits, labels = jnp.asarray(logits), jnp.asarray(labels)
    if where is not None:
        where = jnp.asarray(where)
        if where.ndim != logits.ndim:
            where = jnp.expand_dims(where, axis)
    if isinstance(axis, int):
        if not -logits.ndim <= axis < logits.ndim:
            raise ValueError(f"axis {axis} is out of bounds for array of dimension {logits.ndim}")
        axis = axis % logits.ndim
    elif isinstance(axis, tuple):
        logit_axis = tuple(a % logits.ndim for a in axis)
        batch_axis = tuple(x for x in range(logits.ndim) if x not in logit_axis)
        axis = len(batch_axis)
        logits = logits.transpose(batch_axis + logit_axis)
        logits = logits.reshape(logits.shape[:len(batch_axis)] + (-1,))
        if where is not None:
            where = where.transpose(batch_axis + logit_axis)
            where = where.reshape(where.shape[:len(batch_axis)] + (-1,))
    else:
        raise ValueError("Keyword argument 'axis' must be of type 'int' or 'tuple[int, ...]' but actual "
                         f"type is {type(axis)}.")
    label_logits = jnp.squeeze(jnp.take_along_axis(logits, jnp.expand_dims(labels, axis), axis=axis), axis)
    log_normalizers = _logsumexp(logits, axis=axis, where=where)
    out = log_normalizers - label_logits
    if where is not None:
        out = jnp.where(jnp.any(where, axis), out, 0.0)
    return out


def sigmoid_binary_cross_entropy(logits, labels):
    """Elementwise sigmoid cross-entropy:
    ``-y log sigmoid(x) - (1 - y) log sigmoid(-x)``.

    Args:
      logits: logits of the positive class, any shape.
      labels: binary labels or target probabilities, broadcastable to ``logits``.

    Returns:
      The elementwise loss, shape of ``logits``.
    """
    _check_float(logits, "logits")
    logits = jnp.asarray(logits)
    labels = jnp.asarray(labels).astype(logits.dtype)
    log_p = _nn.log_sigmoid(logits)
    log_not_p = _nn.log_sigmoid(-logits)
    return -labels * log_p - (1.0 - labels) * log_not_p


def sigmoid_focal_loss(logits, labels, *, alpha=None, gamma=2.0):
    r"""Sigmoid focal loss (Lin et al. 2017): :math:`-\alpha_t (1 - p_t)^\gamma \log p_t`,
    with the focal weight computed in log space as optax does.

    Args:
      logits: logits, any shape.
      labels: labels in {0, 1} or ``[0, 1]``, broadcastable to ``logits``.
      alpha: optional weight of the positive class (``1 - alpha`` for negatives).
      gamma: focusing exponent.

    Returns:
      The elementwise loss, shape of ``logits``.
    """
    _check_float(logits, "logits")
    logits = jnp.asarray(logits)
    labels = jnp.asarray(labels).astype(logits.dtype)
    ce_loss = sigmoid_binary_cross_entropy(logits, labels)
    log_p = _nn.log_sigmoid(logits)
    log_q = _nn.log_sigmoid(-logits)
    labels_b = jnp.broadcast_to(labels, log_p.shape)
    log_one_minus_p_t = _logsumexp(jnp.stack([log_p, log_q], axis=-1), axis=-1,
                                   b=jnp.stack([1 - labels_b, labels_b], axis=-1))
    focal_weight = jnp.exp(gamma * log_one_minus_p_t)
    loss = ce_loss * focal_weight
    if alpha is None:
        return loss
    return (alpha * labels + (1.0 - alpha) * (1.0 - labels)) * loss


def squared_error(predictions, targets=None):
    """Elementwise ``(predictions - targets) ** 2`` (targets default to zeros).

    Args:
      predictions: any shape.
      targets: same shape as ``predictions``, or None.

    Returns:
      The elementwise squared error.
    """
    _check_float(predictions, "predictions")
    predictions = jnp.asarray(predictions)
    if targets is not None:
        _check_shapes_equal(predictions, targets)
    errors = predictions - targets if targets is not None else predictions
    return errors ** 2


def l2_loss(predictions, targets=None):
    """Elementwise ``0.5 * (predictions - targets) ** 2``.

    Args:
      predictions: any shape.
      targets: same shape as ``predictions``, or None.

    Returns:
      The elementwise loss.
    """
    predictions = jnp.asarray(predictions)
    return 0.5 * squared_error(predictions, targets)


def huber_loss(predictions, targets=None, delta: float = 1.0):
    """Huber loss: quadratic for ``|err| <= delta``, linear beyond.

    Args:
      predictions: any shape.
      targets: broadcastable to ``predictions``, or None.
      delta: the switch point.

    Returns:
      The elementwise loss.
    """
    _check_float(predictions, "predictions")
    predictions = jnp.asarray(predictions)
    errors = (predictions - targets) if targets is not None else predictions
    abs_errors = jnp.abs(errors)
    quadratic = jnp.minimum(abs_errors, delta)
    linear = abs_errors - quadratic
    return 0.5 * quadratic ** 2 + delta * linear


# ---------------------------------------------------------------------------------
# podlet: the seed's focal loss and classification loss
# ---------------------------------------------------------------------------------
def _softmax_focal_loss(logits, one_hot, gamma=2.0):
    """The seed's focal loss on (possibly smoothed) one-hot targets, line for line:
    ``(1 - p_t) ** gamma * CE`` with ``p_t = sum(softmax * y)``."""
    log_probs = _nn.log_softmax(logits)
    probs = jnp.exp(log_probs)
    pt = jnp.sum(probs * one_hot, axis=-1)
    ce = -jnp.sum(log_probs * one_hot, axis=-1)
    return ((1.0 - pt) ** gamma) * ce


def _class_weight_of(labels, class_weights, dtype):
    w = jnp.asarray(_np.asarray(class_weights, _np.float32)) if not hasattr(class_weights, "shape") \
        else jnp.asarray(class_weights)
    return w[jnp.asarray(labels)].astype(dtype)


def softmax_focal_loss(logits, labels, gamma: float = 2.0, label_smoothing: float = 0.0,
                       class_weights=None):
    r"""Softmax focal loss (Lin et al. 2017) for multi-class classification, per example:

    .. math:: \ell = w_{y}\,(1 - p_t)^\gamma \cdot \Big(-\sum_j \tilde y_j \log p_j\Big),
              \quad p_t = \sum_j \tilde y_j p_j

    where :math:`\tilde y` is the one-hot target smoothed by ``label_smoothing``
    (``smooth_labels``) and :math:`w_y` the weight of the true class. With
    ``gamma=0`` this is the (weighted, smoothed) softmax cross-entropy.

    Args:
      logits: ``[batch, num_classes]`` logits.
      labels: ``[batch]`` integer labels, or ``[batch, num_classes]`` float target
        distributions (then ``label_smoothing`` still applies and ``class_weights``
        must be None: a weight needs a class index).
      gamma: the focusing exponent.
      label_smoothing: the smoothing factor ``alpha`` of :func:`smooth_labels`.
      class_weights: optional ``[num_classes]`` per-class weights.

    Returns:
      ``[batch]`` per-example losses (reduce them yourself, e.g. ``.mean()``).
    """
    _check_float(logits, "logits")
    logits = jnp.asarray(logits)
    labels = jnp.asarray(labels)
    num_classes = logits.shape[-1]
    if _dtypes.is_int(labels.dtype):
        one_hot = _nn.one_hot(labels, num_classes)  # float32, as jax.nn.one_hot in the seed
    else:
        if class_weights is not None:
            raise ValueError("softmax_focal_loss: class_weights need integer labels, got float targets "
                             f"of shape {labels.shape}")
        _check_shapes_equal(logits, labels)
        one_hot = labels
    if label_smoothing:
        one_hot = smooth_labels(one_hot, label_smoothing)
    losses = _softmax_focal_loss(logits, one_hot, gamma)
    if class_weights is not None:
        losses = losses * _class_weight_of(labels, class_weights, losses.dtype)
    return losses


def classification_loss(logits, labels, num_classes: int, loss_name: str = "ce", label_smoothing: float = 0.0,
                        class_weights=None, gamma: float = 2.0):
    """The seed recipe's training loss, as one scalar.

    ``one_hot(labels)``, smoothed by ``label_smoothing`` (``smooth_labels``), then
    softmax cross-entropy (``loss_name='ce'``) or the softmax focal loss
    (``'focal'``, exponent ``gamma``), then each example multiplied by
    ``class_weights[label]``, then the **plain mean over the batch**: the weighted sum
    is divided by the batch size, not by the sum of the weights (that is what the
    seed's ``losses.mean()`` does; a weighted mean would undo the re-weighting's
    effect on the loss scale).

    Args:
      logits: ``[batch, num_classes]`` logits.
      labels: ``[batch]`` integer labels.
      num_classes: the number of classes (must equal ``logits.shape[-1]``).
      loss_name: ``'ce'`` or ``'focal'``.
      label_smoothing: smoothing factor; 0 disables it.
      class_weights: optional length-``num_classes`` per-class weights.
      gamma: focal exponent (ignored for ``'ce'``).

    Returns:
      The scalar mean loss.
    """
    _check_float(logits, "logits")
    _check_int(labels, "labels")
    logits, labels = jnp.asarray(logits), jnp.asarray(labels)
    if logits.shape[-1] != num_classes:
        raise ValueError(f"classification_loss: logits have {logits.shape[-1]} classes, num_classes={num_classes}")
    if class_weights is not None and len(class_weights) != num_classes:
        raise ValueError(f"classification_loss: {len(class_weights)} class_weights for {num_classes} classes")
    one_hot = _nn.one_hot(labels, num_classes)  # float32, as jax.nn.one_hot in the seed
    if label_smoothing:
        one_hot = smooth_labels(one_hot, label_smoothing)
    if loss_name == "focal":
        losses = _softmax_focal_loss(logits, one_hot, gamma)
    elif loss_name == "ce":
        losses = softmax_cross_entropy(logits, one_hot)
    else:
        raise ValueError(f"classification_loss: unknown loss_name {loss_name!r}; expected 'ce' or 'focal'")
    if class_weights is not None:
        losses = losses * _class_weight_of(labels, class_weights, losses.dtype)
    return losses.mean()


# The rest of optax.losses, one file per family (imported here so that
# podlet.optim.losses.<name> is optax.losses.<name>).
from ._losses_classification import (convex_kl_divergence, ctc_loss, ctc_loss_with_forward_probs,  # noqa: E402
                                     generalized_kl_divergence, hinge_loss, kl_divergence,
                                     kl_divergence_with_log_targets, make_fenchel_young_loss,
                                     multiclass_hinge_loss, multiclass_perceptron_loss, multiclass_sparsemax_loss,
                                     perceptron_loss, poly_loss_cross_entropy, safe_softmax_cross_entropy,
                                     sparsemax_loss)
from ._losses_structured import (binary_dice_loss, cosine_distance, cosine_similarity, dice_loss,  # noqa: E402
                                 log_cosh, multiclass_generalized_dice_loss, ntxent, ranking_softmax_loss,
                                 triplet_margin_loss)
