"""podlet.optim losses against optax 0.2.8 (and the seed's JAX focal loss) on
identical inputs: values, gradients, podlet.jit, focal(gamma=0) == cross-entropy, label
smoothing and class weights as the seed applies them."""
import numpy as np
import pytest

import podlet
import podlet.numpy as pnp
import podlet.optim as poptax

import jax
import jax.numpy as jnp
import optax

RTOL, ATOL = 2e-6, 1e-6
CLASS_WEIGHTS = [0.5, 1.0, 1.0, 1.3, 1.3]  # the seed's final_best recipe


def P(x):
    return pnp.asarray(np.asarray(x))


def J(x):
    return jnp.asarray(np.asarray(x))


def close(got, want, rtol=RTOL, atol=ATOL):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    logits = (rng.normal(size=(32, 5)) * 3).astype(np.float32)
    labels = rng.integers(0, 5, size=(32,)).astype(np.int32)
    one_hot = np.eye(5, dtype=np.float32)[labels]
    probs = rng.dirichlet(np.ones(5), size=32).astype(np.float32)
    return logits, labels, one_hot, probs


# ---------------------------------------------------------------------------------
# the seed's loss, verbatim in JAX (the oracle for classification_loss)
# ---------------------------------------------------------------------------------
def seed_softmax_focal_loss(logits, one_hot, gamma=2.0):
    log_probs = jax.nn.log_softmax(logits)
    probs = jnp.exp(log_probs)
    pt = jnp.sum(probs * one_hot, axis=-1)
    ce = -jnp.sum(log_probs * one_hot, axis=-1)
    return ((1.0 - pt) ** gamma) * ce


def seed_classification_loss(logits, labels, num_classes, loss_name, label_smoothing, class_weights, gamma=2.0):
    one_hot = jax.nn.one_hot(labels, num_classes)
    if label_smoothing:
        one_hot = optax.smooth_labels(one_hot, label_smoothing)
    if loss_name == "focal":
        losses = seed_softmax_focal_loss(logits, one_hot, gamma)
    else:
        losses = optax.softmax_cross_entropy(logits, one_hot)
    if class_weights is not None:
        losses = losses * jnp.asarray(class_weights)[labels]
    return losses.mean()


# ---------------------------------------------------------------------------------
# optax losses
# ---------------------------------------------------------------------------------
def test_softmax_cross_entropy(data):
    logits, labels, one_hot, probs = data
    for y in (one_hot, probs):
        close(poptax.softmax_cross_entropy(P(logits), P(y)), optax.softmax_cross_entropy(J(logits), J(y)))


def test_softmax_cross_entropy_axis_and_where(data):
    logits, _, _, probs = data
    lt = np.ascontiguousarray(logits.T)
    close(poptax.softmax_cross_entropy(P(lt), P(probs.T), axis=0),
          optax.softmax_cross_entropy(J(lt), J(probs.T), axis=0))
    where = np.random.default_rng(1).random(logits.shape) < 0.7
    where[:, 0] = True
    close(poptax.softmax_cross_entropy(P(logits), P(probs), where=P(where)),
          optax.softmax_cross_entropy(J(logits), J(probs), where=J(where)))


def test_softmax_cross_entropy_with_integer_labels(data):
    logits, labels, one_hot, _ = data
    got = poptax.softmax_cross_entropy_with_integer_labels(P(logits), P(labels))
    close(got, optax.softmax_cross_entropy_with_integer_labels(J(logits), J(labels)))
    close(got, optax.softmax_cross_entropy(J(logits), J(one_hot)), rtol=1e-5)


def test_integer_labels_tuple_axis_and_where():
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(2, 3, 4)).astype(np.float32)
    labels = rng.integers(0, 12, size=(2,)).astype(np.int32)
    close(poptax.softmax_cross_entropy_with_integer_labels(P(logits), P(labels), axis=(1, 2)),
          optax.softmax_cross_entropy_with_integer_labels(J(logits), J(labels), axis=(1, 2)))
    logits2 = rng.normal(size=(6, 4)).astype(np.float32) * 4
    labels2 = rng.integers(0, 4, size=(6,)).astype(np.int32)
    where = rng.random((6, 4)) < 0.6
    where[np.arange(6), labels2] = True
    where[5] = False  # a fully masked row gives 0
    close(poptax.softmax_cross_entropy_with_integer_labels(P(logits2), P(labels2), where=P(where)),
          optax.softmax_cross_entropy_with_integer_labels(J(logits2), J(labels2), where=J(where)))


def test_smooth_labels(data):
    _, _, one_hot, _ = data
    for alpha in (0.0, 0.03, 0.1, 0.5):
        close(poptax.smooth_labels(P(one_hot), alpha), optax.smooth_labels(J(one_hot), alpha), atol=0)


def test_sigmoid_binary_cross_entropy_moderate_logits():
    rng = np.random.default_rng(3)
    logits = rng.uniform(-8, 8, size=(40, 3)).astype(np.float32)
    for labels in ((rng.random((40, 3)) < 0.5).astype(np.float32), rng.random((40, 3)).astype(np.float32)):
        close(poptax.sigmoid_binary_cross_entropy(P(logits), P(labels)),
              optax.sigmoid_binary_cross_entropy(J(logits), J(labels)), rtol=1e-5)


@pytest.mark.parametrize("alpha", [None, 0.25])
@pytest.mark.parametrize("gamma", [0.0, 1.0, 2.0, 0.5])
def test_sigmoid_focal_loss(alpha, gamma):
    rng = np.random.default_rng(4)
    logits = rng.uniform(-8, 8, size=(40, 3)).astype(np.float32)
    labels = (rng.random((40, 3)) < 0.3).astype(np.float32)
    close(poptax.sigmoid_focal_loss(P(logits), P(labels), alpha=alpha, gamma=gamma),
          optax.sigmoid_focal_loss(J(logits), J(labels), alpha=alpha, gamma=gamma), rtol=1e-5)


def test_regression_losses():
    rng = np.random.default_rng(5)
    a, b = rng.normal(size=(7, 3)).astype(np.float32), rng.normal(size=(7, 3)).astype(np.float32)
    close(poptax.squared_error(P(a), P(b)), optax.squared_error(J(a), J(b)), atol=0)
    close(poptax.squared_error(P(a)), optax.squared_error(J(a)), atol=0)
    close(poptax.l2_loss(P(a), P(b)), optax.l2_loss(J(a), J(b)), atol=0)
    close(poptax.huber_loss(P(a), P(b), delta=0.5), optax.huber_loss(J(a), J(b), delta=0.5))
    with pytest.raises(ValueError, match="Shape mismatch"):
        poptax.squared_error(P(a), P(b[:3]))


def test_dtype_checks(data):
    logits, labels, one_hot, _ = data
    with pytest.raises(TypeError):
        poptax.softmax_cross_entropy(P(labels), P(one_hot))
    with pytest.raises(TypeError):
        poptax.softmax_cross_entropy_with_integer_labels(P(logits), P(one_hot))


# ---------------------------------------------------------------------------------
# podlet's focal loss and the seed's classification loss
# ---------------------------------------------------------------------------------
def test_focal_gamma0_equals_cross_entropy(data):
    logits, labels, one_hot, _ = data
    ce = poptax.softmax_cross_entropy_with_integer_labels(P(logits), P(labels))
    close(poptax.softmax_focal_loss(P(logits), P(labels), gamma=0.0), ce, rtol=1e-5)
    for ls in (0.0, 0.03):
        close(poptax.classification_loss(P(logits), P(labels), 5, "focal", ls, CLASS_WEIGHTS, gamma=0.0),
              poptax.classification_loss(P(logits), P(labels), 5, "ce", ls, CLASS_WEIGHTS), rtol=1e-5)


@pytest.mark.parametrize("gamma", [0.0, 1.0, 2.0, 2.5])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.03])
@pytest.mark.parametrize("weights", [None, CLASS_WEIGHTS])
def test_softmax_focal_loss_matches_seed(data, gamma, label_smoothing, weights):
    logits, labels, _, _ = data
    got = poptax.softmax_focal_loss(P(logits), P(labels), gamma=gamma, label_smoothing=label_smoothing,
                                    class_weights=weights)
    one_hot = jax.nn.one_hot(J(labels), 5)
    if label_smoothing:
        one_hot = optax.smooth_labels(one_hot, label_smoothing)
    want = seed_softmax_focal_loss(J(logits), one_hot, gamma)
    if weights is not None:
        want = want * jnp.asarray(weights)[J(labels)]
    close(got, want)


def test_softmax_focal_loss_soft_targets(data):
    logits, labels, _, probs = data
    close(poptax.softmax_focal_loss(P(logits), P(probs), gamma=2.0),
          seed_softmax_focal_loss(J(logits), J(probs), 2.0))
    with pytest.raises(ValueError, match="integer labels"):
        poptax.softmax_focal_loss(P(logits), P(probs), class_weights=CLASS_WEIGHTS)


def test_focal_downweights_easy_examples():
    logits = np.array([[8.0, 0.0, 0.0], [0.5, 0.0, 0.0]], np.float32)
    labels = np.array([0, 0], np.int32)
    focal = np.asarray(poptax.softmax_focal_loss(P(logits), P(labels), gamma=2.0))
    ce = np.asarray(poptax.softmax_cross_entropy_with_integer_labels(P(logits), P(labels)))
    assert focal[0] / ce[0] < 1e-5 and focal[1] / ce[1] > 0.2


@pytest.mark.parametrize("loss_name", ["ce", "focal"])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.03])
@pytest.mark.parametrize("weights", [None, CLASS_WEIGHTS])
def test_classification_loss_matches_seed(data, loss_name, label_smoothing, weights):
    logits, labels, _, _ = data
    got = poptax.classification_loss(P(logits), P(labels), 5, loss_name, label_smoothing, weights)
    assert got.shape == ()
    want = seed_classification_loss(J(logits), J(labels), 5, loss_name, label_smoothing, weights)
    close(got, want)


def test_classification_loss_weighted_mean_divides_by_batch(data):
    logits, labels, _, _ = data
    per_ex = np.asarray(poptax.softmax_focal_loss(P(logits), P(labels), 2.0, 0.03))
    w = np.asarray(CLASS_WEIGHTS, np.float32)[labels]
    got = float(poptax.classification_loss(P(logits), P(labels), 5, "focal", 0.03, CLASS_WEIGHTS))
    np.testing.assert_allclose(got, (per_ex * w).sum() / len(labels), rtol=1e-5)
    assert abs(got - (per_ex * w).sum() / w.sum()) > 1e-4  # not the normalised weighted mean


@pytest.mark.parametrize("loss_name", ["ce", "focal"])
def test_classification_loss_grad_and_jit_match_seed(data, loss_name):
    logits, labels, _, _ = data

    def pf(lg, lb):
        return poptax.classification_loss(lg, lb, 5, loss_name, 0.03, CLASS_WEIGHTS)

    def jf(lg, lb):
        return seed_classification_loss(lg, lb, 5, loss_name, 0.03, CLASS_WEIGHTS)

    pv, pg = podlet.jit(podlet.value_and_grad(pf))(P(logits), P(labels))
    jv, jg = jax.value_and_grad(jf)(J(logits), J(labels))
    close(pv, jv)
    close(pg, jg, rtol=1e-5, atol=1e-7)
    # eager podlet == jitted podlet
    close(podlet.value_and_grad(pf)(P(logits), P(labels))[1], pg, rtol=1e-6, atol=1e-8)


def test_classification_loss_bf16_logits(data):
    """bf16 logits as a bf16 model head would give: the f32 one-hot promotes the
    products to f32, exactly as in the seed's code."""
    logits, labels, _, _ = data
    lb = logits.astype(jnp.bfloat16)
    got = poptax.classification_loss(pnp.asarray(lb), P(labels), 5, "focal", 0.03, CLASS_WEIGHTS)
    want = seed_classification_loss(jnp.asarray(lb), J(labels), 5, "focal", 0.03, CLASS_WEIGHTS)
    assert np.asarray(got).dtype == np.asarray(want).dtype
    close(got, want, rtol=2e-2, atol=1e-3)


def test_classification_loss_validates(data):
    logits, labels, _, _ = data
    with pytest.raises(ValueError, match="loss_name"):
        poptax.classification_loss(P(logits), P(labels), 5, "hinge")
    with pytest.raises(ValueError, match="num_classes"):
        poptax.classification_loss(P(logits), P(labels), 4)
    with pytest.raises(ValueError, match="class_weights"):
        poptax.classification_loss(P(logits), P(labels), 5, "ce", 0.0, [1.0, 2.0])


# ---------------------------------------------------------------------------------
# regressions for engine bugs met while building the losses
# ---------------------------------------------------------------------------------
def test_engine_sigmoid_bce_large_logits():
    logits = np.array([-30.0, -20.0, 20.0, 30.0], np.float32)
    labels = np.array([0.0, 0.0, 1.0, 1.0], np.float32)
    close(poptax.sigmoid_binary_cross_entropy(P(logits), P(labels)),
          optax.sigmoid_binary_cross_entropy(J(logits), J(labels)), rtol=1e-5, atol=0)


def test_engine_nn_logsumexp_b_zero():
    from podlet import nn
    assert float(nn.logsumexp(P(np.array([1000.0, 0.0], np.float32)), b=P(np.array([0.0, 1.0], np.float32)))) == 0.0


def test_engine_max_where():
    v = P(np.array([1.0, 50.0, 2.0], np.float32))
    m = P(np.array([True, False, True]))
    assert float(pnp.max(v, where=m, initial=-np.inf)) == 2.0
