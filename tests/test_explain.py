"""Explainability: Grad-CAM and saliency against JAX/Flax and closed forms, the method
interceptors / perturb they stand on against flax 0.12.8, PNG overlays, the pointing game."""
import os

import numpy as np
import pytest

import jax
import jax.numpy as jjnp
import flax.linen as fnn

import podlet
import podlet.numpy as jnp
from podlet import explain, models, nn
from podlet.nn.module import intercept_methods

from test_models import ResNet as FlaxResNet, ResNetBlock as FlaxResNetBlock, VisionTransformer as FlaxViT


def to_jax(tree):
    return podlet.tree_util.tree_map(lambda a: jjnp.asarray(np.asarray(a)), tree)


# ------------------------------------------------------------ interceptors and perturb
def _pair(nn_, jnp_):
    class Inner(nn_.Module):
        @nn_.compact
        def __call__(self, x):
            h = nn_.Dense(3, name="d")(x)
            h = self.perturb("h", h)
            return jnp_.tanh(h)

    class Outer(nn_.Module):
        @nn_.compact
        def __call__(self, x):
            return nn_.Dense(2)(Inner()(x) * 2.0)
    return Outer()


def test_intercept_methods_order_and_results_match_flax():
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    pv = _pair(nn, jnp).init(podlet.random.PRNGKey(0), jnp.asarray(x))
    fv = _pair(fnn, jjnp).init(jax.random.PRNGKey(0), jjnp.asarray(x))
    # same variable structure (perturbations are created by init, as in flax)
    assert podlet.tree_util.tree_map(np.shape, pv) == jax.tree_util.tree_map(np.shape, fv)
    results = {}
    for side, nn_, jnp_, im, v in (("podlet", nn, jnp, intercept_methods, pv),
                                   ("flax", fnn, jjnp, fnn.intercept_methods, to_jax(pv))):
        log = []

        def first(next_fun, args, kwargs, context, log=log):
            log.append(("first", context.module.path, context.method_name))
            out = next_fun(*args, **kwargs)
            return out * 3.0 if context.module.path == ("Inner_0",) else out

        def second(next_fun, args, kwargs, context, log=log):
            log.append(("second", context.module.path))
            if context.module.path == ("Inner_0", "d"):     # skips the rest of the chain
                return context.orig_method(*args, **kwargs) + 1.0
            return next_fun(*args, **kwargs)

        with im(first), im(second):
            y = _pair(nn_, jnp_).apply(v, jnp_.asarray(x))
        plain = _pair(nn_, jnp_).apply(v, jnp_.asarray(x))
        results[side] = (log, np.asarray(y), np.asarray(plain))
    assert results["podlet"][0] == results["flax"][0]
    assert len(results["podlet"][0]) == 8
    np.testing.assert_allclose(results["podlet"][1], results["flax"][1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(results["podlet"][2], results["flax"][2], rtol=1e-5, atol=1e-6)
    assert not np.allclose(results["podlet"][1], results["podlet"][2])


def test_perturb_gradients_match_flax():
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    pm, fm = _pair(nn, jnp), _pair(fnn, jjnp)
    pv = pm.init(podlet.random.PRNGKey(1), jnp.asarray(x))
    assert set(pv) == {"params", "perturbations"}
    assert pv["perturbations"]["Inner_0"]["h"].shape == (3, 3)
    fv = to_jax(pv)

    def p_loss(params, perturbations):
        return jnp.sum(pm.apply({"params": params, "perturbations": perturbations}, jnp.asarray(x)) ** 2)

    def f_loss(params, perturbations):
        return jjnp.sum(fm.apply({"params": params, "perturbations": perturbations}, jjnp.asarray(x)) ** 2)
    gp = podlet.grad(p_loss, argnums=1)(pv["params"], pv["perturbations"])
    gf = jax.grad(f_loss, argnums=1)(fv["params"], fv["perturbations"])
    np.testing.assert_allclose(np.asarray(gp["Inner_0"]["h"]), np.asarray(gf["Inner_0"]["h"]), rtol=1e-5, atol=1e-6)
    # without the collection, perturb is the identity
    out = pm.apply({"params": pv["params"]}, jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(out), np.asarray(fm.apply({"params": fv["params"]}, jjnp.asarray(x))),
                               rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------ Grad-CAM vs JAX/Flax
def _small_resnet_pair():
    kw = dict(stage_sizes=[1, 1], num_filters=4, num_classes=3)
    return models.ResNet(block_cls=models.ResNetBlock, **kw), FlaxResNet(block_cls=FlaxResNetBlock, **kw)


def _noisy(variables, seed=0):
    rs = np.random.RandomState(seed)
    out = podlet.tree_util.tree_map(lambda a: jnp.asarray(np.asarray(a) + 0.3 * rs.randn(*a.shape).astype(np.float32)),
                                    variables)
    out["batch_stats"] = podlet.tree_util.tree_map(lambda a: jnp.abs(a) + 0.5, out["batch_stats"])
    return out


def jax_grad_cam(fmodel, fvars, images, layer, target=None):
    """Grad-CAM written directly in JAX/Flax: perturb the layer's output through
    flax's interceptor, jax.grad, jax.image.resize."""
    images = jjnp.asarray(images)
    acts_shape = {}

    def capture(next_fun, args, kwargs, context):
        out = next_fun(*args, **kwargs)
        if context.module.path == layer and context.method_name == "__call__":
            acts_shape["s"] = out.shape
        return out
    with fnn.intercept_methods(capture):
        logits = jax.jit(lambda v, x: fmodel.apply(v, x, train=False))(fvars, images)
    tgt = jjnp.argmax(logits, -1) if target is None else jjnp.broadcast_to(jjnp.asarray(target), (images.shape[0],))

    def score(delta):
        store = {}

        def add(next_fun, args, kwargs, context):
            out = next_fun(*args, **kwargs)
            if context.module.path == layer and context.method_name == "__call__":
                store["a"] = out
                out = out + delta
            return out
        with fnn.intercept_methods(add):
            lg = fmodel.apply(fvars, images, train=False)
        return jjnp.sum(jjnp.take_along_axis(lg, tgt[:, None], axis=1)), store["a"]
    g, a = jax.jit(jax.grad(score, has_aux=True))(jjnp.zeros(acts_shape["s"]))
    if a.ndim == 3:  # ViT tokens: drop the class token, patches back on their grid
        side = int(np.sqrt(a.shape[1] - 1))
        g, a = (t[:, 1:].reshape(t.shape[0], side, side, t.shape[2]) for t in (g, a))
    w = g.mean(axis=(1, 2))
    cam = jax.nn.relu(jjnp.einsum("nhwc,nc->nhw", a, w))
    cam = jax.image.resize(cam, (cam.shape[0],) + images.shape[1:3], "bilinear")
    cam = cam - cam.min(axis=(1, 2), keepdims=True)
    return np.asarray(cam / (cam.max(axis=(1, 2), keepdims=True) + 1e-7)), np.asarray(tgt)


def test_grad_cam_matches_flax_twin():
    pm, fm = _small_resnet_pair()
    x = np.random.default_rng(0).standard_normal((3, 32, 32, 1)).astype(np.float32)
    pv = _noisy(pm.init(podlet.random.PRNGKey(0), jnp.asarray(x), train=False))
    layer = explain.default_layer(pm, pv, jnp.asarray(x))
    assert layer == ("ResNetBlock_1",)                      # the last conv stage
    want, tgt = jax_grad_cam(fm, to_jax(pv), x, layer)
    got = np.asarray(explain.grad_cam(pm, pv, x))
    assert got.shape == (3, 32, 32) and got.dtype == np.float32
    assert got.min() >= 0 and got.max() <= 1 and np.all(got.max(axis=(1, 2)) > 0.99)
    np.testing.assert_allclose(got, want, atol=2e-4)
    # an explicit class per image and an inner layer, given as a string
    want2, _ = jax_grad_cam(fm, to_jax(pv), x, ("ResNetBlock_0",), target=np.array([2, 0, 1]))
    got2 = np.asarray(explain.grad_cam(pm, pv, x, target_class=[2, 0, 1], layer="ResNetBlock_0"))
    np.testing.assert_allclose(got2, want2, atol=2e-4)


def test_grad_cam_vit_matches_flax_twin():
    kw = dict(patch_size=4, hidden_size=8, num_layers=2, num_heads=2, mlp_dim=16, num_classes=3)
    pm, fm = models.VisionTransformer(**kw), FlaxViT(**kw)
    x = np.random.default_rng(4).standard_normal((2, 16, 16, 1)).astype(np.float32)
    pv = pm.init(podlet.random.PRNGKey(0), jnp.asarray(x), train=False)
    rs = np.random.RandomState(1)  # the head and class token start at zero
    pv = podlet.tree_util.tree_map(lambda a: jnp.asarray(np.asarray(a) + 0.3 * rs.randn(*a.shape).astype(np.float32)), pv)
    layer = explain.default_layer(pm, pv, jnp.asarray(x))
    assert layer == ("Transformer", "encoderblock_1", "LayerNorm_0")
    want, _ = jax_grad_cam(fm, to_jax(pv), x, layer)
    got = np.asarray(explain.grad_cam(pm, pv, x))
    assert got.shape == (2, 16, 16) and np.all(got.max(axis=(1, 2)) > 0.99)
    np.testing.assert_allclose(got, want, atol=2e-4)
    wide = jnp.asarray(x[:, :, :12])                      # a 4 x 3 patch grid: no square
    with pytest.raises(podlet.PodletError, match="13 tokens"):
        explain.grad_cam(pm, pm.init(podlet.random.PRNGKey(0), wide, train=False), wide)


def test_saliency_matches_jax():
    pm, fm = _small_resnet_pair()
    x = np.random.default_rng(1).standard_normal((2, 16, 16, 1)).astype(np.float32)
    pv = _noisy(pm.init(podlet.random.PRNGKey(2), jnp.asarray(x), train=False), seed=1)
    fv = to_jax(pv)

    def score(img):
        return fm.apply(fv, img, train=False)[:, 1].sum()
    want = np.abs(np.asarray(jax.jit(jax.grad(score))(jjnp.asarray(x)))).max(axis=-1)
    got = np.asarray(explain.saliency(pm, pv, x, target_class=1))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6 * want.max())


class TinyCNN(nn.Module):
    """A user's model: a conv feature extractor, global average pooling, a linear head."""
    @nn.compact
    def __call__(self, x, *, train: bool = False):
        x = nn.relu(nn.Conv(6, (3, 3), name="features")(x))
        return nn.Dense(4, name="head")(jnp.mean(x, axis=(1, 2)))


def test_grad_cam_closed_form_for_gap_linear_head():
    """With a GAP + Dense head, Grad-CAM is CAM: relu(A @ W[:, c]) / (h w)."""
    m = TinyCNN()
    x = np.random.default_rng(3).standard_normal((2, 8, 8, 2)).astype(np.float32)
    v = m.init(podlet.random.PRNGKey(4), jnp.asarray(x))
    _, state = m.apply(v, jnp.asarray(x), capture_intermediates=True, mutable=["intermediates"])
    # the layer is the conv, before the relu that follows it outside the module
    a = np.asarray(state["intermediates"]["features"]["__call__"][0])
    W = np.asarray(v["params"]["head"]["kernel"])
    grads_w = np.where(a > 0, 1.0, 0.0)  # d relu
    for c in range(4):
        got = np.asarray(explain.grad_cam(m, v, x, target_class=c, layer="features", normalize=False))
        w = (grads_w * W[:, c] / 64.0).mean(axis=(1, 2))       # spatial mean of dy/dA
        cam = np.maximum(np.einsum("nhwc,nc->nhw", a, w), 0)
        np.testing.assert_allclose(got, cam, rtol=1e-4, atol=1e-7)
    assert explain.default_layer(m, v, jnp.asarray(x)) == ("features",)


def test_bad_inputs_are_named():
    m = TinyCNN()
    x = jnp.zeros((1, 8, 8, 1))
    v = m.init(podlet.random.PRNGKey(0), x)
    with pytest.raises(podlet.PodletError, match="'nope'.*features"):
        explain.grad_cam(m, v, x, layer="nope")
    with pytest.raises(podlet.PodletError, match="target_class 9"):
        explain.grad_cam(m, v, x, target_class=9)
    with pytest.raises(podlet.PodletError, match=r"\(N, H, W, C\)"):
        explain.grad_cam(m, v, jnp.zeros((8, 8, 1)))
    with pytest.raises(podlet.PodletError, match="4-D"):
        explain.default_layer(DenseOnly(), DenseOnly().init(podlet.random.PRNGKey(0), x), x)


class DenseOnly(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(2)(jnp.reshape(x, (x.shape[0], -1)))


# ------------------------------------------------------------ overlays, pointing game
def test_save_overlays(tmp_path):
    import matplotlib.image as mpimg
    rng = np.random.default_rng(0)
    images = rng.uniform(size=(3, 20, 24, 1)).astype(np.float32)
    cams = rng.uniform(size=(3, 20, 24)).astype(np.float32)
    paths = explain.save_overlays(images, cams, str(tmp_path / "out"), labels=[0, 2, 0], preds=[1, 2, 0],
                                  class_names=["BACKGROUND", "BENIGN_MASS", "MALIGNANT MASS"])
    assert [os.path.relpath(p, tmp_path) for p in paths] == [
        "out/BACKGROUND/0000_pred-BENIGN_MASS.png", "out/MALIGNANT_MASS/0001_pred-MALIGNANT_MASS.png",
        "out/BACKGROUND/0002_pred-BACKGROUND.png"]
    for p in paths:
        img = mpimg.imread(p)
        assert img.ndim == 3 and img.shape[0] > 100
    leftovers = [f for _, _, fs in os.walk(tmp_path) for f in fs if f.startswith(".tmp")]
    assert leftovers == []
    # the blend itself
    ov = explain.overlay(images[0], np.zeros((20, 24)), alpha=0.5, cmap="gray")
    g = (images[0, ..., 0] - images[0].min()) / (images[0].max() - images[0].min())
    np.testing.assert_allclose(ov[..., 0], np.round(255 * 0.5 * g), atol=1)
    with pytest.raises(podlet.PodletError, match="labels has 2 entries for 3 images"):
        explain.save_overlays(images, cams, str(tmp_path / "x"), labels=[0, 1])


def test_pointing_game_counts():
    cams = np.zeros((4, 10, 10), np.float32)
    cams[0, 2, 3] = 1     # inside box 0
    cams[1, 9, 9] = 1     # outside box 1
    cams[2, 5, 5] = 1     # inside mask 2
    cams[3, 0, 0] = 1     # one pixel from box 3
    boxes = np.array([[1, 1, 4, 5], [0, 0, 3, 3], [4, 4, 7, 7], [1, 1, 3, 3]])
    assert explain.pointing_game(cams, boxes=boxes) == 0.5
    assert explain.pointing_game(cams, boxes=boxes, tolerance=1) == 0.75
    masks = np.zeros((4, 10, 10), bool)
    masks[:, :5, :5] = True
    assert explain.pointing_game(cams, masks=masks) == 0.5       # (2, 3) and (0, 0) inside
    assert explain.random_baseline(masks) == 0.25
    assert explain.random_baseline(boxes=boxes, shape=(10, 10)) == pytest.approx((12 + 9 + 9 + 4) / 400)
    with pytest.raises(podlet.PodletError, match="exactly one"):
        explain.pointing_game(cams)


def test_explain_to_dir(tmp_path):
    m = TinyCNN()
    x = np.random.default_rng(5).standard_normal((3, 8, 8, 1)).astype(np.float32)
    v = m.init(podlet.random.PRNGKey(6), jnp.asarray(x))
    out = explain.explain_to_dir(m, v, x, str(tmp_path / "gc"), labels=[1, 0, 1], class_names=list("abcd"),
                                 batch_size=2)
    preds = np.argmax(np.asarray(m.apply(v, jnp.asarray(x))), axis=-1)
    np.testing.assert_array_equal(out["preds"], preds)
    np.testing.assert_allclose(out["maps"], np.asarray(explain.grad_cam(m, v, x)), atol=1e-6)
    assert out["layer"] == ("features",)
    assert sorted(os.listdir(tmp_path / "gc")) == ["a", "b"]
    assert all(os.path.basename(p).startswith("grad_cam_") and os.path.exists(p) for p in out["paths"])
    sal = explain.explain_to_dir(m, v, x, str(tmp_path / "sal"), method="saliency", target_class=2)
    np.testing.assert_allclose(sal["maps"], np.asarray(explain.saliency(m, v, x, target_class=2)), rtol=1e-6)
    with pytest.raises(podlet.PodletError, match="'lime'"):
        explain.explain_to_dir(m, v, x, str(tmp_path / "l"), method="lime")


def test_grad_cam_bf16_model_close_to_f32():
    kw = dict(stage_sizes=[1, 1], num_filters=4, num_classes=3)
    m32 = models.ResNet(block_cls=models.ResNetBlock, **kw)
    m16 = models.ResNet(block_cls=models.ResNetBlock, dtype=jnp.bfloat16, **kw)
    x = np.random.default_rng(7).standard_normal((2, 32, 32, 1)).astype(np.float32)
    v = _noisy(m32.init(podlet.random.PRNGKey(0), jnp.asarray(x), train=False), seed=3)
    c32 = np.asarray(explain.grad_cam(m32, v, x, target_class=1))
    c16 = np.asarray(explain.grad_cam(m16, v, x, target_class=1))
    assert c16.dtype == np.float32
    assert np.max(np.abs(c16 - c32)) < 0.1
