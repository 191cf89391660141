"""podlet.metrics against scikit-learn (the oracle; podlet never imports it)."""
import numpy as np
import pytest
import sklearn.metrics as skm

from podlet import metrics


def _case(seed, n=400, k=5, missing_pred=None, skew=None):
    rng = np.random.default_rng(seed)
    p = skew if skew is not None else np.full(k, 1.0 / k)
    y = rng.choice(k, size=n, p=p)
    logits = rng.normal(size=(n, k)) + 1.5 * np.eye(k)[y] * rng.uniform(0, 1, size=(n, 1))
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    if missing_pred is not None:  # a class never predicted: its precision is 0/0
        probs[:, missing_pred] = 0.0
        probs /= probs.sum(1, keepdims=True)
    return y, probs


@pytest.mark.parametrize("seed,missing", [(0, None), (1, 3), (2, None)])
def test_matches_sklearn(seed, missing):
    skew = np.array([0.466, 0.15, 0.16, 0.1, 0.124]) if seed == 2 else None
    y, probs = _case(seed, missing_pred=missing, skew=skew)
    pred = probs.argmax(1)
    labels = list(range(5))
    m = metrics.classification_metrics(y, probs, class_names=list("abcde"), loss=0.5)
    assert m["accuracy"] == pytest.approx(skm.accuracy_score(y, pred), abs=1e-12)
    assert m["balanced_accuracy"] == pytest.approx(skm.balanced_accuracy_score(y, pred), abs=1e-12)
    assert m["macro_f1"] == pytest.approx(
        skm.f1_score(y, pred, average="macro", labels=labels, zero_division=0), abs=1e-12)
    assert m["roc_auc"] == pytest.approx(
        skm.roc_auc_score(y, probs, multi_class="ovr", average="macro", labels=labels), abs=1e-12)
    np.testing.assert_array_equal(np.array(m["confusion_matrix"]), skm.confusion_matrix(y, pred, labels=labels))
    p, r, f, s = skm.precision_recall_fscore_support(y, pred, labels=labels, zero_division=0)
    for i, name in enumerate("abcde"):
        pc = m["per_class"][name]
        assert (pc["precision"], pc["recall"], pc["f1"], pc["support"]) == pytest.approx((p[i], r[i], f[i], s[i]),
                                                                                          abs=1e-12)
        assert pc["roc_auc"] == pytest.approx(skm.roc_auc_score(y == i, probs[:, i]), abs=1e-12)
    assert m["loss"] == 0.5 and m["num_examples"] == len(y)


def test_ties_in_scores_match_sklearn():
    rng = np.random.default_rng(5)
    y = rng.integers(0, 2, 300)
    score = np.round(rng.uniform(size=300) + 0.3 * y, 1)  # few distinct values: many ties
    assert metrics.binary_roc_auc(y == 1, score) == pytest.approx(skm.roc_auc_score(y, score), abs=1e-12)


def test_class_absent_from_y_true():
    # Class 4 never occurs: balanced accuracy averages over present classes (sklearn), F1 of
    # class 4 is 0, and its AUC is NaN (sklearn raises), excluded from the macro AUC.
    y, probs = _case(3, k=5)
    keep = y != 4
    y, probs = y[keep], probs[keep]
    pred = probs.argmax(1)
    m = metrics.classification_metrics(y, probs)
    assert m["balanced_accuracy"] == pytest.approx(skm.balanced_accuracy_score(y, pred), abs=1e-12)
    assert m["macro_f1"] == pytest.approx(skm.f1_score(y, pred, average="macro", labels=range(5),
                                                       zero_division=0), abs=1e-12)
    assert np.isnan(m["per_class"]["class_4"]["roc_auc"])
    expected = np.mean([skm.roc_auc_score(y == c, probs[:, c]) for c in range(4)])
    assert m["roc_auc"] == pytest.approx(expected, abs=1e-12)


def test_functions_agree_with_sklearn():
    y, probs = _case(7)
    pred = probs.argmax(1)
    assert metrics.accuracy(y, pred) == pytest.approx(skm.accuracy_score(y, pred))
    assert metrics.macro_f1(y, pred, 5) == pytest.approx(skm.f1_score(y, pred, average="macro"))
    assert metrics.balanced_accuracy(y, pred) == pytest.approx(skm.balanced_accuracy_score(y, pred))


def test_bad_input_names_the_problem():
    with pytest.raises(ValueError, match="class index 7 out of range for num_classes=5"):
        metrics.confusion_matrix([0, 7], [0, 1], 5)
    with pytest.raises(ValueError, match="y_true has 2 examples but y_pred has 3"):
        metrics.confusion_matrix([0, 1], [0, 1, 2])
    with pytest.raises(ValueError, match=r"probs: expected shape \[2, num_classes\]"):
        metrics.classification_metrics([0, 1], np.zeros((3, 2)))
    with pytest.raises(ValueError, match="3 class_names for 2 classes"):
        metrics.classification_metrics([0, 1], np.eye(2), class_names="abc")
