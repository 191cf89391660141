"""Classification metrics in NumPy, equal to scikit-learn's (which podlet does not import).

    m = podlet.metrics.classification_metrics(labels, probs, class_names=[...])
    m["macro_f1"], m["balanced_accuracy"], m["roc_auc"], m["confusion_matrix"], m["per_class"]

On an imbalanced set (CBIS-DDSM: BACKGROUND is 46.6% of train) accuracy can be bought by
predicting the majority class; balanced accuracy and macro-F1 are the numbers to select
on. Conventions follow scikit-learn with ``labels=range(num_classes)``:

- precision/recall/F1 of a class with no predicted (resp. true) examples is 0
  (scikit-learn's ``zero_division`` default, without the warning);
- balanced accuracy is the mean recall over the classes present in ``y_true``;
- ROC-AUC is one-vs-rest, macro-averaged over the classes present in ``y_true`` (a class
  with no positives has no ROC curve: its entry in ``per_class_roc_auc`` is NaN, where
  scikit-learn raises).
"""
from __future__ import annotations

import numpy as np

from ._src import tensorboard  # flax.metrics.tensorboard: `from podlet.metrics import tensorboard`

__all__ = ["confusion_matrix", "accuracy", "balanced_accuracy", "precision_recall_f1", "macro_f1",
           "roc_auc_ovr", "binary_roc_auc", "classification_metrics"]


def _labels(y, name):
    y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array of class indices, got shape {y.shape}")
    if y.size and not np.issubdtype(y.dtype, np.integer):
        if not np.all(np.equal(np.mod(y, 1), 0)):
            raise ValueError(f"{name}: expected integer class indices, got dtype {y.dtype}")
        y = y.astype(np.int64)
    return y.astype(np.int64, copy=False)


def _num_classes(num_classes, *ys):
    if num_classes is None:
        num_classes = max((int(y.max()) + 1 for y in ys if y.size), default=0)
    for y in ys:
        if y.size and (y.min() < 0 or y.max() >= num_classes):
            bad = y[(y < 0) | (y >= num_classes)][0]
            raise ValueError(f"class index {bad} out of range for num_classes={num_classes}")
    return num_classes


def confusion_matrix(y_true, y_pred, num_classes: int | None = None) -> np.ndarray:
    """``C[i, j]`` = number of examples of true class ``i`` predicted as ``j`` (int64)."""
    y_true, y_pred = _labels(y_true, "y_true"), _labels(y_pred, "y_pred")
    if y_true.shape != y_pred.shape:
        raise ValueError(f"y_true has {y_true.shape[0]} examples but y_pred has {y_pred.shape[0]}")
    k = _num_classes(num_classes, y_true, y_pred)
    return np.bincount(y_true * k + y_pred, minlength=k * k).reshape(k, k).astype(np.int64)


def accuracy(y_true, y_pred) -> float:
    cm = confusion_matrix(y_true, y_pred)
    return float(np.trace(cm) / max(cm.sum(), 1))


def _safe_div(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return np.divide(a, b, out=np.zeros_like(a), where=b != 0)


def _balanced_accuracy(cm):
    support = cm.sum(axis=1)
    present = support > 0
    return float(np.mean(np.diag(cm)[present] / support[present])) if present.any() else 0.0


def balanced_accuracy(y_true, y_pred, num_classes: int | None = None) -> float:
    """Mean recall over the classes present in ``y_true``."""
    return _balanced_accuracy(confusion_matrix(y_true, y_pred, num_classes))


def _prf(cm):
    tp = np.diag(cm).astype(np.float64)
    precision = _safe_div(tp, cm.sum(axis=0))
    recall = _safe_div(tp, cm.sum(axis=1))
    f1 = _safe_div(2 * tp, cm.sum(axis=0) + cm.sum(axis=1))
    return precision, recall, f1, cm.sum(axis=1)


def precision_recall_f1(y_true, y_pred, num_classes: int | None = None):
    """Per-class ``(precision, recall, f1, support)`` arrays of length ``num_classes``."""
    return _prf(confusion_matrix(y_true, y_pred, num_classes))


def macro_f1(y_true, y_pred, num_classes: int | None = None) -> float:
    """Unweighted mean of the per-class F1 over all ``num_classes`` classes."""
    return float(np.mean(precision_recall_f1(y_true, y_pred, num_classes)[2]))


def _average_ranks(x):
    """1-based ranks of ``x``, ties sharing their mean rank (scipy's rankdata 'average')."""
    order = np.argsort(x, kind="mergesort")
    xs = x[order]
    first = np.concatenate([[True], xs[1:] != xs[:-1]])
    group = np.cumsum(first) - 1
    starts = np.flatnonzero(first)
    ends = np.append(starts[1:], len(x))
    mean_rank = (starts + ends + 1) / 2.0  # mean of the 1-based positions start+1..end
    ranks = np.empty(len(x), np.float64)
    ranks[order] = mean_rank[group]
    return ranks


def binary_roc_auc(is_positive, score) -> float:
    """Area under the ROC curve (ties counted half: the Mann-Whitney U statistic, which
    equals the trapezoidal area scikit-learn computes); NaN when one class is absent."""
    is_positive = np.asarray(is_positive, bool)
    score = np.asarray(score, np.float64)
    n_pos = int(is_positive.sum())
    n_neg = is_positive.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = _average_ranks(score)
    u = ranks[is_positive].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))


def roc_auc_ovr(y_true, scores):
    """One-vs-rest ROC-AUC: ``(macro, per_class)``, ``scores`` of shape [N, num_classes]
    (probabilities or logits: only their order within a column matters)."""
    y_true = _labels(y_true, "y_true")
    scores = np.asarray(scores)
    if scores.ndim != 2 or scores.shape[0] != y_true.shape[0]:
        raise ValueError(f"scores: expected shape [{y_true.shape[0]}, num_classes], got {scores.shape}")
    _num_classes(scores.shape[1], y_true)
    per_class = np.array([binary_roc_auc(y_true == c, scores[:, c]) for c in range(scores.shape[1])])
    present = ~np.isnan(per_class)
    macro = float(per_class[present].mean()) if present.any() else float("nan")
    return macro, per_class


def classification_metrics(y_true, probs, class_names=None, loss: float | None = None) -> dict:
    """Every metric of a classifier's outputs, as JSON-ready Python values.

    Args:
      y_true: [N] integer labels.
      probs: [N, num_classes] class probabilities (or logits); predictions are the argmax.
      class_names: names for ``per_class`` (default ``class_0`` ...).
      loss: optional mean loss, passed through as ``loss``.

    Returns:
      ``{"num_examples", "accuracy", "balanced_accuracy", "macro_f1", "roc_auc",
      "confusion_matrix" (list of lists), "per_class": {name: {precision, recall, f1,
      support, roc_auc}}}`` (and ``loss`` when given).
    """
    probs = np.asarray(probs)
    y_true = _labels(y_true, "y_true")
    if probs.ndim != 2 or probs.shape[0] != y_true.shape[0]:
        raise ValueError(f"probs: expected shape [{y_true.shape[0]}, num_classes], got {probs.shape}")
    k = probs.shape[1]
    names = list(class_names) if class_names is not None else [f"class_{i}" for i in range(k)]
    if len(names) != k:
        raise ValueError(f"{len(names)} class_names for {k} classes")
    cm = confusion_matrix(y_true, np.argmax(probs, axis=1), k)
    precision, recall, f1, support = _prf(cm)
    auc, auc_per_class = roc_auc_ovr(y_true, probs)
    out = {
        "num_examples": int(y_true.size),
        "accuracy": float(np.trace(cm) / max(cm.sum(), 1)),
        "balanced_accuracy": _balanced_accuracy(cm),
        "macro_f1": float(np.mean(f1)),
        "roc_auc": auc,
        "confusion_matrix": cm.tolist(),
        "per_class": {n: {"precision": float(precision[i]), "recall": float(recall[i]), "f1": float(f1[i]),
                          "support": int(support[i]), "roc_auc": float(auc_per_class[i])}
                      for i, n in enumerate(names)},
    }
    if loss is not None:
        out["loss"] = float(loss)
    return out
