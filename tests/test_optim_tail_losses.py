"""The rest of optax.losses (issue 26) against optax 0.2.8 on identical inputs: values
eagerly and under podlet.jit, gradients against jax.grad where the loss is smooth
where it is evaluated, and the input checks. A table drives the comparison and must
name every loss of optax.losses that tests/test_optim_losses.py does not cover, so a
new name without a case fails.
"""
import types
import warnings

import numpy as np
import pytest

import podlet
import podlet.numpy as pnp
import podlet.optim as poptax

import jax
import jax.numpy as jnp
import optax

RTOL, ATOL = 2e-6, 1e-6

rng = np.random.default_rng(0)
LOGITS = (rng.normal(size=(8, 5)) * 2).astype(np.float32)
INT_LABELS = rng.integers(0, 5, size=(8,)).astype(np.int32)
PROBS = rng.dirichlet(np.ones(5), size=8).astype(np.float32)
PROBS_ZERO = PROBS.copy()
PROBS_ZERO[:, 0] = 0.0  # 0 log 0 = 0 in the KL divergences
PROBS_ZERO /= PROBS_ZERO.sum(-1, keepdims=True)
LOG_PRED = np.log(rng.dirichlet(np.ones(5), size=8)).astype(np.float32)
PM1 = np.where(rng.random(size=(8, 5)) > 0.5, 1.0, -1.0).astype(np.float32)
BIN = (rng.random(size=(8, 5)) > 0.5)
PRED = rng.normal(size=(8, 5)).astype(np.float32)
TARG = rng.normal(size=(8, 5)).astype(np.float32)
MASK = rng.random(size=(8, 5)) > 0.2
EMB = rng.normal(size=(8, 4)).astype(np.float32)
EMB_LABELS = np.array([0, 0, 1, 1, 2, 2, 3, 0], np.int32)
SEG = rng.normal(size=(2, 4, 4, 3)).astype(np.float32)
SEG_T = np.eye(3, dtype=np.float32)[rng.integers(0, 3, size=(2, 4, 4))]
SEG_BIN = rng.normal(size=(2, 4, 4)).astype(np.float32)
SEG_BIN_T = (rng.random(size=(2, 4, 4)) > 0.5).astype(np.float32)
RANK_LABELS = rng.integers(0, 3, size=(8, 5)).astype(np.float32)
WEIGHTS = rng.random(size=(8, 5)).astype(np.float32)
# CTC: batch 2, 6 frames, 4 classes (0 = blank), labels of length <= 3
CTC_LOGITS = rng.normal(size=(2, 6, 4)).astype(np.float32)
CTC_LOGIT_PAD = np.array([[0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 1, 1]], np.float32)
CTC_LABELS = np.array([[1, 2, 2], [3, 1, 0]], np.int32)
CTC_LABEL_PAD = np.array([[0, 0, 0], [0, 0, 1]], np.float32)


def P(x):
    return pnp.asarray(np.asarray(x))


def J(x):
    return jnp.asarray(np.asarray(x))


def close(got, want, rtol=RTOL, atol=ATOL, what=""):
    g, w = jax.tree.leaves(jax.tree.map(np.asarray, got)), jax.tree.leaves(jax.tree.map(np.asarray, want))
    if not isinstance(got, (tuple, list)):
        g, w = [np.asarray(got)], [np.asarray(want)]
    assert len(g) == len(w), what
    for a, b in zip(g, w):
        assert a.shape == b.shape, (what, a.shape, b.shape)
        np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=rtol, atol=atol, err_msg=what)


def _logsumexp_p(s):
    return pnp.log(pnp.sum(pnp.exp(s - pnp.max(s)))) + pnp.max(s)


def _logsumexp_j(s):
    return jax.nn.logsumexp(s)


CTC = (CTC_LOGITS, CTC_LOGIT_PAD, CTC_LABELS, CTC_LABEL_PAD)
NEG_INF_LOGITS = np.where(PROBS_ZERO == 0, -np.inf, LOGITS).astype(np.float32)


def _fy(L):
    lse = _logsumexp_p if L is poptax.losses else _logsumexp_j
    return L.make_fenchel_young_loss(lse)


# name -> (fn(losses module, *arrays), arrays, differentiable in arrays[0] there)
CASES = {
    "hinge_loss": (lambda L, x, y: L.hinge_loss(x, y), (PRED, PM1), True),
    "perceptron_loss": (lambda L, x, y: L.perceptron_loss(x, y), (PRED, PM1), True),
    "sparsemax_loss": (lambda L, x, y: L.sparsemax_loss(x, y), (PRED, BIN), True),
    "multiclass_hinge_loss": (lambda L, x, y: L.multiclass_hinge_loss(x, y), (LOGITS, INT_LABELS), True),
    "multiclass_perceptron_loss": (lambda L, x, y: L.multiclass_perceptron_loss(x, y), (LOGITS, INT_LABELS), True),
    "multiclass_sparsemax_loss": (lambda L, x, y: L.multiclass_sparsemax_loss(x, y), (LOGITS, INT_LABELS), False),
    "safe_softmax_cross_entropy": (lambda L, x, y: L.safe_softmax_cross_entropy(x, y), (LOGITS, PROBS), True),
    "safe_softmax_cross_entropy_neg_inf": (lambda L, x, y: L.safe_softmax_cross_entropy(x, y),
                                           (NEG_INF_LOGITS, PROBS_ZERO), True),
    "poly_loss_cross_entropy": (lambda L, x, y: L.poly_loss_cross_entropy(x, y, epsilon=1.5), (LOGITS, PROBS), True),
    "poly_loss_cross_entropy_where": (lambda L, x, y, m: L.poly_loss_cross_entropy(x, y, where=m),
                                      (LOGITS, PROBS, MASK), True),
    "kl_divergence": (lambda L, x, y: L.kl_divergence(x, y), (LOG_PRED, PROBS_ZERO), True),
    "kl_divergence_where": (lambda L, x, y, m: L.kl_divergence(x, y, axis=0, where=m), (LOG_PRED, PROBS, MASK), True),
    "kl_divergence_with_log_targets": (lambda L, x, y: L.kl_divergence_with_log_targets(x, y),
                                       (LOG_PRED, np.log(PROBS)), True),
    "generalized_kl_divergence": (lambda L, x, y: L.generalized_kl_divergence(x, y), (LOG_PRED, PROBS_ZERO * 2), True),
    "convex_kl_divergence": (lambda L, x, y: L.convex_kl_divergence(x, y), (LOG_PRED, PROBS), True),
    "ctc_loss": (lambda L, *a: L.ctc_loss(*a), CTC, False),  # value only: jax.grad of the scan compiles for ~3 s
    "ctc_loss_with_forward_probs": (lambda L, *a: L.ctc_loss_with_forward_probs(*a, blank_id=3), CTC, False),
    "make_fenchel_young_loss": (lambda L, x, y: _fy(L)(x, y), (LOGITS, PROBS), True),
    "log_cosh": (lambda L, x, y: L.log_cosh(x, y), (PRED * 30, TARG), True),
    "cosine_similarity": (lambda L, x, y: L.cosine_similarity(x, y, epsilon=1e-3), (PRED, TARG), True),
    "cosine_similarity_where": (lambda L, x, y, m: L.cosine_similarity(x, y, axis=0, where=m), (PRED, TARG, MASK),
                                True),
    "cosine_distance": (lambda L, x, y: L.cosine_distance(x, y), (PRED, TARG), True),
    "ntxent": (lambda L, x, y: L.ntxent(x, y, temperature=0.2), (EMB, EMB_LABELS), True),
    "triplet_margin_loss": (lambda L, a, p, n: L.triplet_margin_loss(a, p, n, margin=3.0),
                            (PRED, TARG, TARG[::-1].copy()), True),
    "triplet_margin_loss_l3": (lambda L, a, p, n: L.triplet_margin_loss(a, p, n, norm_degree=3, margin=0.5),
                               # anchors above both, so the odd powers stay positive (as the loss assumes)
                               (1 + np.abs(PRED), 1 + np.abs(PRED) - 0.3 * np.abs(TARG), 0.5 + np.abs(PRED)), True),
    "ranking_softmax_loss": (lambda L, x, y: L.ranking_softmax_loss(x, y), (LOGITS, RANK_LABELS), True),
    "ranking_softmax_loss_masked": (lambda L, x, y, m, w: L.ranking_softmax_loss(x, y, where=m, weights=w,
                                                                                 reduce_fn=None),
                                    (LOGITS, RANK_LABELS, MASK, WEIGHTS), True),
    "dice_loss": (lambda L, x, y: L.dice_loss(x, y), (SEG, SEG_T), True),
    "dice_loss_tversky": (lambda L, x, y, w: L.dice_loss(x, y, alpha=0.7, beta=0.3, reduction="none",
                                                         ignore_background=True, class_weights=w),
                          (SEG, SEG_T, np.array([1.0, 2.0, 0.5], np.float32)), True),
    "multiclass_generalized_dice_loss": (lambda L, x, y: L.multiclass_generalized_dice_loss(x, y), (SEG, SEG_T),
                                         True),
    "binary_dice_loss": (lambda L, x, y: L.binary_dice_loss(x, y), (SEG_BIN, SEG_BIN_T), True),
}

# names covered by tests/test_optim_losses.py
OLD = {"huber_loss", "l2_loss", "sigmoid_binary_cross_entropy", "sigmoid_focal_loss", "smooth_labels",
       "softmax_cross_entropy", "softmax_cross_entropy_with_integer_labels", "squared_error"}


def _call(lib, name, *arrays):
    fn, default, _ = CASES[name]
    arrays = arrays or tuple((P if lib == "podlet" else J)(a) for a in default)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return fn(poptax.losses if lib == "podlet" else optax.losses, *arrays)


def test_every_optax_loss_has_a_case():
    names = {n for n in dir(optax.losses) if not n.startswith("_")
             and not isinstance(getattr(optax.losses, n), types.ModuleType)}
    covered = OLD | set(CASES)
    assert names - covered == set(), f"losses without a case: {sorted(names - covered)}"
    for n in names:
        assert hasattr(poptax.losses, n), n


_ORACLE = {}


def oracle(kind):
    """optax's values (kind 'value') or gradients ('grad') of every case, from ONE
    jax.jit compilation each: eager jax compiles every op for its shapes, and one
    compilation per case was still most of this file's time."""
    if kind not in _ORACLE:
        names = sorted(CASES) if kind == "value" else sorted(n for n, c in CASES.items() if c[2])
        args = {n: tuple(J(a) for a in CASES[n][1]) for n in names}
        if kind == "value":
            fn = lambda args: {n: _call("jax", n, *a) for n, a in args.items()}  # noqa: E731
        else:
            fn = lambda args: {n: jax.grad(lambda x, *r, n=n: jnp.sum(_call("jax", n, x, *r)))(*a)  # noqa: E731
                               for n, a in args.items()}
        _ORACLE[kind] = jax.jit(fn)(args)
    return _ORACLE[kind]


@pytest.mark.parametrize("name", sorted(CASES))
def test_loss_matches_optax_eager_and_jit(name):
    want = oracle("value")[name]
    assert all(np.all(np.isfinite(np.asarray(w))) for w in jax.tree.leaves(want)), f"{name}: degenerate case"
    close(_call("podlet", name), want, what=name)
    jitted = podlet.jit(lambda *xs: _call("podlet", name, *xs))
    close(jitted(*[P(a) for a in CASES[name][1]]), want, what=f"{name} under jit")


@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if c[2]))
def test_loss_gradient_matches_jax(name):
    """d(sum of the loss) / d(first array), against jitted jax.grad (XLA's fusion moves
    its gradients by a few ulps, inside the 1e-5)."""
    first, *rest = CASES[name][1]
    gp = podlet.grad(lambda x: pnp.sum(_call("podlet", name, x, *[P(r) for r in rest])))(P(first))
    gj = oracle("grad")[name]
    assert np.all(np.isfinite(np.asarray(gj))), f"{name}: degenerate case"
    close(gp, gj, rtol=1e-5, atol=1e-6, what=name)


# ---------------------------------------------------------------------------------
# input checks and documented behaviour
# ---------------------------------------------------------------------------------
def test_input_checks():
    L = poptax.losses
    with pytest.raises(TypeError, match="floating"):
        L.kl_divergence(P(np.zeros((2, 3), np.int32)), P(PROBS[:2]))
    with pytest.raises(ValueError, match="Shape mismatch"):
        L.perceptron_loss(P(PRED), P(PM1[:, :3]))
    with pytest.raises(ValueError, match="batch size"):
        L.ctc_loss(P(CTC_LOGITS), P(CTC_LOGIT_PAD), P(np.zeros((3, 3), np.int32)), P(np.zeros((3, 3), np.float32)))
    with pytest.raises(ValueError, match="rank 3"):
        L.ctc_loss(P(CTC_LOGITS[0]), P(CTC_LOGIT_PAD[0]), P(CTC_LABELS), P(CTC_LABEL_PAD))
    with pytest.raises(ValueError, match="same leading dimension"):
        L.ntxent(P(EMB), P(EMB_LABELS[:5]))
    with pytest.raises(ValueError, match="sum to 1"):
        L.dice_loss(P(SEG), P(SEG_T), apply_softmax=False)
    with pytest.raises(ValueError, match="Unsupported reduction"):
        L.dice_loss(P(SEG), P(SEG_T), reduction="max")
    with pytest.warns(DeprecationWarning):
        L.convex_kl_divergence(P(LOG_PRED), P(PROBS))


def test_safe_softmax_cross_entropy_stays_finite_where_plain_one_does_not():
    logits = np.where(PROBS_ZERO == 0, -np.inf, LOGITS).astype(np.float32)
    safe = np.asarray(poptax.losses.safe_softmax_cross_entropy(P(logits), P(PROBS_ZERO)))
    plain = np.asarray(poptax.losses.softmax_cross_entropy(P(logits), P(PROBS_ZERO)))
    assert np.all(np.isfinite(safe)) and not np.all(np.isfinite(plain))
    g = podlet.grad(lambda x: pnp.sum(poptax.losses.safe_softmax_cross_entropy(x, P(PROBS_ZERO))))(P(logits))
    assert np.all(np.isfinite(np.asarray(g)))


def test_ctc_of_a_certain_alignment_is_zero():
    # logits that put all mass on the path "1 _ 2": the loss of label [1, 2] is ~0
    logits = np.full((1, 3, 3), -30.0, np.float32)
    logits[0, 0, 1] = logits[0, 1, 0] = logits[0, 2, 2] = 30.0
    loss = poptax.losses.ctc_loss(P(logits), P(np.zeros((1, 3), np.float32)), P(np.array([[1, 2]], np.int32)),
                                  P(np.zeros((1, 2), np.float32)))
    assert abs(float(loss[0])) < 1e-4
