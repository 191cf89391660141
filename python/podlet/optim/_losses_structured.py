"""optax 0.2.8's losses beyond classification (``optax/losses/_regression.py``,
``_self_supervised.py``, ``_ranking.py``, ``_segmentation.py``): ``log_cosh``,
cosine similarity and distance, the NT-Xent and triplet-margin contrastive losses,
the listwise ranking softmax loss and the Dice losses. Formula for formula optax's.
"""
from typing import Callable, Optional

from .. import lax
from .. import nn as _nn
from .. import numpy as jnp
from .losses import _check_float, _check_shapes_equal, _log_softmax


# ---------------------------------------------------------------------------------
# regression
# ---------------------------------------------------------------------------------
def log_cosh(predictions, targets=None):
    """``log(cosh(error))``, computed as ``logaddexp(e, -e) - log 2`` (no overflow)."""
    _check_float(predictions, "predictions")
    errors = (predictions - targets) if targets is not None else predictions
    return jnp.logaddexp(errors, -errors) - jnp.log(2.0).astype(errors.dtype)


def cosine_similarity(predictions, targets, *, epsilon=0.0, axis=-1, where=None):
    """Cosine similarity along ``axis``; norms are floored at ``sqrt(epsilon)``."""
    _check_float(predictions, "predictions")
    _check_float(targets, "targets")
    a, b = predictions, targets
    a_norm2 = jnp.sum(jnp.square(a), axis=axis, where=where, keepdims=True)
    b_norm2 = jnp.sum(jnp.square(b), axis=axis, where=where, keepdims=True)
    a_norm = jnp.sqrt(jnp.clip(a_norm2, epsilon))
    b_norm = jnp.sqrt(jnp.clip(b_norm2, epsilon))
    return jnp.sum((a / a_norm) * (b / b_norm), axis=axis, where=where)


def cosine_distance(predictions, targets, *, epsilon=0.0, axis=-1, where=None):
    """``1 - cosine_similarity``."""
    _check_float(predictions, "predictions")
    _check_float(targets, "targets")
    return 1.0 - cosine_similarity(predictions, targets, epsilon=epsilon, axis=axis, where=where)


# ---------------------------------------------------------------------------------
# self-supervised
# ---------------------------------------------------------------------------------
def ntxent(embeddings, labels, temperature=0.07):
    """Normalized temperature-scaled cross-entropy (SimCLR, Chen et al. 2020) over
    the pairs of embeddings sharing a label; returns the mean over positive pairs."""
    _check_float(embeddings, "embeddings")
    if labels.shape[0] != embeddings.shape[0]:
        raise ValueError("Labels and embeddings must have the same leading dimension, found "
                         f"{labels.shape[0]} for labels and {embeddings.shape[0]} for embeddings.")
    xcs = cosine_similarity(embeddings[None, :, :], embeddings[:, None, :],
                            epsilon=float(jnp.finfo(embeddings.dtype).eps)) / temperature
    matches = jnp.expand_dims(labels, axis=1) == jnp.expand_dims(labels, axis=0)
    diffs = jnp.logical_not(matches)
    matches = jnp.logical_and(matches, jnp.logical_not(jnp.eye(matches.shape[0], dtype=jnp.bool_)))  # no self
    xcs_diffs = jnp.where(diffs, xcs, -jnp.inf)
    xcs_matches = jnp.where(matches, xcs, -jnp.inf)
    comb = jnp.concatenate((xcs_diffs, xcs_matches), axis=-1)
    xcs_max = jnp.max(comb, axis=1, keepdims=True)
    xcs_shift_diffs = xcs_diffs - lax.stop_gradient(xcs_max)
    xcs_shift_matches = xcs_matches - lax.stop_gradient(xcs_max)
    numer = xcs_shift_matches
    numer_exp = jnp.exp(xcs_shift_matches)
    denom = jnp.sum(jnp.exp(xcs_shift_diffs), axis=1, keepdims=True)
    denom = denom + numer_exp
    log_softm = numer - jnp.log(denom)
    return -jnp.where(matches, log_softm, 0.0).sum() / matches.sum()


def triplet_margin_loss(anchors, positives, negatives, axis: int = -1, norm_degree=2, margin=1.0, eps=1e-6):
    """Triplet margin loss (Schroff et al. 2015): ``max(d(a, p) - d(a, n) + margin,
    0)`` with ``d`` the ``norm_degree`` distance (``+ eps`` inside the root)."""
    for x, what in ((anchors, "anchors"), (positives, "positives"), (negatives, "negatives")):
        _check_float(x, what)
    positive_distance = jnp.power(jnp.power(anchors - positives, norm_degree).sum(axis) + eps, 1 / norm_degree)
    negative_distance = jnp.power(jnp.power(anchors - negatives, norm_degree).sum(axis) + eps, 1 / norm_degree)
    return jnp.maximum(positive_distance - negative_distance + margin, 0)


# ---------------------------------------------------------------------------------
# ranking
# ---------------------------------------------------------------------------------
def _safe_reduce(a, where=None, reduce_fn=None):
    output = reduce_fn(a, where=where) if reduce_fn is not None else a
    if reduce_fn is jnp.mean:
        is_input_valid = jnp.logical_not(jnp.any(jnp.isnan(a)))
        output = jnp.where(jnp.isnan(output) & is_input_valid, 0.0, output)
    if reduce_fn is None and where is not None:
        output = jnp.where(where, output, 0.0)
    return output


def ranking_softmax_loss(logits, labels, *, where=None, weights=None,
                         reduce_fn: Optional[Callable] = jnp.mean):
    """Listwise softmax ranking loss (Cao et al. 2007): cross-entropy of the softmax
    of the scores against the (weighted) relevance labels, per list.

    Args:
      logits: ``[..., list_size]`` scores.
      labels: ``[..., list_size]`` relevance labels.
      where: mask of valid items.
      weights: per-item weights of the labels.
      reduce_fn: reduction over lists (``jnp.mean``: lists without a valid item
        count 0 instead of NaN); None keeps one loss per list.
    """
    _check_float(logits, "logits")
    labels = labels.astype(logits.dtype)
    if where is not None:
        labels = jnp.where(where, labels, jnp.zeros_like(labels))
        logits = jnp.where(where, logits, -jnp.ones_like(logits) * jnp.inf)
    if weights is not None:
        labels = labels * weights
    loss = -jnp.sum(labels * _nn.log_softmax(logits, axis=-1), axis=-1, where=where)
    if where is not None:
        where = jnp.any(where, axis=-1)
    return _safe_reduce(loss, where=where, reduce_fn=reduce_fn)


# ---------------------------------------------------------------------------------
# segmentation
# ---------------------------------------------------------------------------------
def _reduce_loss(loss, reduction: str, axis=None):
    if reduction == "mean":
        return jnp.mean(loss, axis=axis)
    if reduction == "sum":
        return jnp.sum(loss, axis=axis)
    if reduction == "none":
        return loss
    raise ValueError(f"Unsupported reduction: {reduction}")


def dice_loss(predictions, targets, *, class_weights=None, smooth=1.0, alpha=0.5, beta=0.5,
              apply_softmax: bool = True, reduction: str = "mean", ignore_background: bool = False, axis=None):
    """Dice / Tversky loss (Milletari et al. 2016; Salehi et al. 2017) per class.

    Args:
      predictions: ``[batch, ..., classes]`` logits (or probabilities with
        ``apply_softmax=False``; a single class uses a sigmoid).
      targets: one-hot (or soft) targets of the same shape.
      class_weights: ``[classes]`` weights.
      smooth: added to numerator and denominator.
      alpha: weight of false positives (0.5 with ``beta`` 0.5: Dice).
      beta: weight of false negatives.
      apply_softmax: turn logits into probabilities first.
      reduction: ``'mean'``, ``'sum'`` or ``'none'`` over classes.
      ignore_background: drop class 0.
      axis: the spatial axes summed over (default: all but the first and last).
    """
    if predictions.ndim == targets.ndim - 1:
        predictions = predictions[..., None]
    if targets.ndim == predictions.ndim - 1:
        targets = targets[..., None]
    _check_shapes_equal(predictions, targets)
    if not apply_softmax:
        pred_sums = jnp.sum(predictions, axis=-1)
        if not bool(jnp.allclose(pred_sums, 1.0, rtol=1e-5)):
            raise ValueError("When apply_softmax=False, predictions must be valid probability distributions that "
                             "sum to 1 along the class axis. Found sum range: "
                             f"[{float(jnp.min(pred_sums)):.6f}, {float(jnp.max(pred_sums)):.6f}]")
    probs = predictions
    if apply_softmax:
        probs = _nn.sigmoid(predictions) if predictions.shape[-1] == 1 else jnp.exp(_log_softmax(predictions, -1))
    axis = tuple(range(1, probs.ndim - 1)) if axis is None else axis
    intersection = jnp.sum(probs * targets, axis=axis)
    pred_sum = jnp.sum(probs, axis=axis)
    target_sum = jnp.sum(targets, axis=axis)
    numerator = intersection + smooth
    denominator = intersection + alpha * (pred_sum - intersection) + beta * (target_sum - intersection) + smooth
    dice_l = 1.0 - numerator / denominator
    if class_weights is not None:
        if jnp.ndim(class_weights) != 1:
            raise ValueError(f"Expected the input to have rank 1, got {jnp.ndim(class_weights)} instead")
        dice_l = dice_l * class_weights
    if ignore_background and probs.shape[-1] > 1:
        dice_l = dice_l[..., 1:]
    return _reduce_loss(dice_l, reduction, axis=-1)


def multiclass_generalized_dice_loss(predictions, targets, *, smooth=1.0, apply_softmax: bool = True,
                                     ignore_background: bool = False):
    """Generalised Dice loss (Sudre et al. 2017): classes weighted by their inverse
    squared frequency in ``targets``."""
    _check_shapes_equal(predictions, targets)
    class_frequencies = jnp.sum(targets, axis=tuple(range(targets.ndim - 1)))
    class_weights = 1.0 / (class_frequencies ** 2 + 1e-7)
    class_weights = class_weights / jnp.sum(class_weights) * class_weights.shape[0]
    return jnp.mean(dice_loss(predictions, targets, class_weights=class_weights, smooth=smooth,
                              apply_softmax=apply_softmax, reduction="none", ignore_background=ignore_background))


def binary_dice_loss(predictions, targets, *, smooth=1.0, apply_sigmoid: bool = True):
    """Dice loss of a binary segmentation (a sigmoid on the logits)."""
    if predictions.ndim == targets.ndim and predictions.shape[-1] != 1:
        predictions = predictions[..., None]
        targets = targets[..., None]
    return dice_loss(predictions, targets, smooth=smooth, apply_softmax=apply_sigmoid, reduction="mean")
