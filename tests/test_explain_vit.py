"""Explaining transformers: attention weights captured without changing the model's
outputs (against the Flax twin's sown weights), attention rollout against a NumPy loop
of Abnar & Zuidema's definition, Grad-CAM on a ViT's last block's patch tokens against
JAX, Grad-CAM on a Swin's last stage against the same definition written in NumPy, and
the method chosen by architecture."""
import numpy as np
import pytest

import jax
import jax.numpy as jjnp
import flax.linen as fnn

import podlet
import podlet.numpy as jnp
from podlet import explain, models

from test_explain import TinyCNN, jax_grad_cam, to_jax
from test_models import VisionTransformer as FlaxViT

KW = dict(patch_size=8, hidden_size=16, num_layers=2, num_heads=2, mlp_dim=32, num_classes=3)


@pytest.fixture(scope="module", autouse=True)
def _fast_xla():
    """The JAX references' XLA compiles are most of this file's time: compile them without
    XLA's optimisation passes (same semantics) and restore the setting afterwards."""
    before = jax.config.read("jax_disable_most_optimizations")
    jax.config.update("jax_disable_most_optimizations", True)
    yield
    jax.config.update("jax_disable_most_optimizations", before)


@pytest.fixture(scope="module")
def vit():
    """A tiny ViT (32x32 images, a 4x4 patch grid, 2 layers) with every param jittered:
    the class token and head start at zero and would hide a wrong mapping."""
    pm = models.VisionTransformer(**KW)
    x = np.random.default_rng(0).standard_normal((3, 32, 32, 1)).astype(np.float32)
    pv = pm.init(podlet.random.PRNGKey(0), jnp.asarray(x), train=False)
    rs = np.random.RandomState(2)
    pv = podlet.tree_util.tree_map(lambda a: jnp.asarray(np.asarray(a) + 0.5 * rs.randn(*a.shape).astype(np.float32)),
                                   pv)
    return pm, pv, x


@pytest.fixture(scope="module")
def flax_weights(vit):
    """The Flax twin's logits and attention weights, sown by flax's own
    MultiHeadDotProductAttention (``sow_weights=True``)."""
    _, pv, x = vit

    def sow(next_fun, args, kwargs, context):
        if isinstance(context.module, fnn.MultiHeadDotProductAttention) and context.method_name == "__call__":
            kwargs = dict(kwargs, sow_weights=True)
        return next_fun(*args, **kwargs)

    @jax.jit
    def run(v, images):
        with fnn.intercept_methods(sow):
            return FlaxViT(**KW).apply(v, images, train=False, mutable=["intermediates"])
    logits, state = run(to_jax(pv), jjnp.asarray(x))
    blocks = state["intermediates"]["Transformer"]
    return np.asarray(logits), [np.asarray(blocks[f"encoderblock_{i}"]["MultiHeadDotProductAttention_0"]
                                           ["attention_weights"][0]) for i in range(KW["num_layers"])]


def numpy_rollout(weights, image_size, fusion="mean"):
    """Abnar & Zuidema 2020, image by image: fuse the heads, add I, re-normalise the rows,
    multiply through the layers; the class token's row over the patches, resized with
    jax.image.resize and min-max normalised."""
    n, _, length, _ = weights[0].shape
    g = int(round(np.sqrt(length - 1)))
    maps = []
    for i in range(n):
        r = np.eye(length)
        for w in weights:
            a = {"mean": np.mean, "max": np.max}[fusion](np.asarray(w[i], np.float64), axis=0) + np.eye(length)
            a = a / a.sum(axis=1, keepdims=True)
            r = a @ r
        m = np.asarray(jax.image.resize(jjnp.asarray(r[0, 1:].reshape(g, g), jjnp.float32), image_size, "bilinear"))
        m = m - m.min()
        maps.append(m / (m.max() + 1e-7))
    return np.stack(maps)


def test_attention_weights_match_flax_and_leave_logits_unchanged(vit, flax_weights):
    pm, pv, x = vit
    logits, weights = explain.attention_weights(pm, pv, x)
    assert [p for p, _ in weights] == [("Transformer", f"encoderblock_{i}", "MultiHeadDotProductAttention_0")
                                       for i in range(2)]
    plain = np.asarray(pm.apply(pv, jnp.asarray(x), train=False))
    np.testing.assert_array_equal(np.asarray(logits), plain)      # capturing changes nothing
    f_logits, f_weights = flax_weights
    np.testing.assert_allclose(plain, f_logits, rtol=1e-4, atol=1e-5)
    for (_, w), fw in zip(weights, f_weights):
        assert w.shape == (3, 2, 17, 17)
        np.testing.assert_allclose(np.asarray(w).sum(-1), 1.0, atol=1e-5)
        np.testing.assert_allclose(np.asarray(w), fw, atol=2e-5)
    # explaining leaves the model's own outputs alone afterwards
    explain.attention_rollout(pm, pv, x)
    np.testing.assert_array_equal(np.asarray(pm.apply(pv, jnp.asarray(x), train=False)), plain)


@pytest.mark.parametrize("fusion", ["mean", "max"])
def test_rollout_matches_numpy_definition(vit, flax_weights, fusion):
    pm, pv, x = vit
    _, f_weights = flax_weights
    want = numpy_rollout(f_weights, (32, 32), fusion)
    got = np.asarray(explain.attention_rollout(pm, pv, x, head_fusion=fusion))
    assert got.shape == (3, 32, 32) and got.dtype == np.float32
    assert got.min() >= 0 and got.max() <= 1 and np.all(got.max(axis=(1, 2)) > 0.99)
    np.testing.assert_allclose(got, want, atol=1e-4)
    # the maps differ from image to image (the rollout depends on the input)
    assert np.abs(got[0] - got[1]).max() > 1e-2


def test_rollout_matrix_closed_forms():
    # one layer, one head, tokens swapping attention: (A + I) / 2 is all halves
    swap = np.array([[[[0.0, 1.0], [1.0, 0.0]]]])
    np.testing.assert_allclose(explain.rollout_matrix([swap]), np.full((1, 2, 2), 0.5))
    np.testing.assert_allclose(explain.rollout_matrix([swap, swap]), np.full((1, 2, 2), 0.5))
    # identity attention everywhere keeps every token on itself
    eye = np.eye(3)[None, None].repeat(2, axis=1)
    np.testing.assert_allclose(explain.rollout_matrix([eye, eye, eye]), np.eye(3)[None])
    # order: R = A2_hat @ A1_hat (the later layer on the left)
    rng = np.random.default_rng(0)
    a1, a2 = (rng.dirichlet(np.ones(4), size=(1, 2, 4)) for _ in range(2))
    hat = [(a.mean(1) + np.eye(4)) / (a.mean(1) + np.eye(4)).sum(-1, keepdims=True) for a in (a1, a2)]
    r = explain.rollout_matrix([a1, a2])
    np.testing.assert_allclose(r, hat[1] @ hat[0])
    np.testing.assert_allclose(r.sum(-1), 1.0)                     # rows stay distributions
    with pytest.raises(podlet.PodletError, match=r"\(N, heads, L, L\).*\(2, 3\)"):
        explain.rollout_matrix([np.ones((2, 3))])
    with pytest.raises(podlet.PodletError, match="'median'"):
        explain.rollout_matrix([swap], head_fusion="median")


def test_grad_cam_on_last_block_tokens_matches_jax(vit):
    pm, pv, x = vit
    layer = explain.default_layer(pm, pv, jnp.asarray(x))
    assert layer == ("Transformer", "encoderblock_1", "LayerNorm_0")
    # (the predicted class is covered by test_explain.py's ViT case)
    want, _ = jax_grad_cam(FlaxViT(**KW), to_jax(pv), x, layer, target=[2, 0, 1])
    got = np.asarray(explain.grad_cam(pm, pv, x, target_class=[2, 0, 1]))
    assert got.shape == (3, 32, 32) and np.all(got.max(axis=(1, 2)) > 0.99)
    np.testing.assert_allclose(got, want, atol=2e-4)
    logits, acts, grads, _ = explain.layer_activations_and_grads(pm, pv, x, target_class=1)
    assert acts.shape == grads.shape == (3, 17, 16)
    np.testing.assert_array_equal(np.asarray(logits), np.asarray(pm.apply(pv, jnp.asarray(x), train=False)))


def test_method_by_architecture_and_bad_inputs(vit, tmp_path):
    pm, pv, x = vit
    gap = models.VisionTransformer(**KW, classifier="gap")
    gv = gap.init(podlet.random.PRNGKey(1), jnp.asarray(x), train=False)
    assert explain.default_method(pm) == "rollout"
    assert explain.default_method(gap) == "grad_cam"
    assert explain.default_method(models.ResNet18()) == "grad_cam"
    out = explain.explain_to_dir(pm, pv, x, str(tmp_path / "r"), labels=[0, 1, 2], class_names=list("abc"),
                                 method=None, batch_size=2)
    assert out["method"] == "rollout" and out["layer"] is None
    np.testing.assert_allclose(out["maps"], np.asarray(explain.attention_rollout(pm, pv, x)), atol=1e-6)
    assert all("rollout_" in p for p in out["paths"])
    # a layer given as a path string asks for Grad-CAM on it
    gc = explain.explain_to_dir(pm, pv, x[:1], str(tmp_path / "g"), layer="Transformer/encoderblock_0/LayerNorm_0")
    assert gc["method"] == "grad_cam" and gc["layer"] == ("Transformer", "encoderblock_0", "LayerNorm_0")
    np.testing.assert_allclose(gc["maps"], np.asarray(explain.grad_cam(pm, pv, x[:1], layer=gc["layer"])), atol=1e-6)
    np.testing.assert_array_equal(out["preds"], np.argmax(np.asarray(pm.apply(pv, jnp.asarray(x), train=False)), -1))
    with pytest.raises(podlet.PodletError, match="classifier='gap'"):
        explain.attention_rollout(gap, gv, x)
    cnn = TinyCNN()
    with pytest.raises(podlet.PodletError, match="TinyCNN calls no nn.MultiHeadDotProductAttention"):
        explain.attention_rollout(cnn, cnn.init(podlet.random.PRNGKey(0), jnp.asarray(x)), x)
    with pytest.raises(podlet.PodletError, match="'median'"):
        explain.attention_rollout(pm, pv, x, head_fusion="median")
    with pytest.raises(podlet.PodletError, match=r"\(N, H, W, C\)"):
        explain.attention_rollout(pm, pv, x[0])
    with pytest.raises(podlet.PodletError, match="'rollout' takes no layer"):
        explain.explain_to_dir(pm, pv, x, str(tmp_path / "l"), method="rollout", layer="Transformer")
    with pytest.raises(podlet.PodletError, match="'lime'"):
        explain.explain_run(str(tmp_path), method="lime")


def numpy_swin_grad_cam(acts, params, target, image_size, eps=1e-5):
    """Grad-CAM of the last Swin block's output A (N, h, w, C), by hand: the rest of the
    network is LayerNorm -> mean over (h, w) -> Dense, so dy_t/dA is LayerNorm's
    backward of W[:, t] / (h w)."""
    a = np.asarray(acts, np.float64)
    n, h, w, _ = a.shape
    mu, sig = a.mean(-1, keepdims=True), np.sqrt(a.var(-1, keepdims=True) + eps)
    xhat = (a - mu) / sig
    W = np.asarray(params["head"]["kernel"], np.float64)
    g = (W[:, target].T / (h * w))[:, None, None, :] * np.asarray(params["norm"]["scale"], np.float64)
    grads = (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True)) / sig
    cam = np.maximum(np.einsum("nhwc,nc->nhw", a, grads.mean(axis=(1, 2))), 0)
    cam = np.asarray(jax.image.resize(jjnp.asarray(cam, jjnp.float32), (n,) + image_size, "bilinear"))
    cam = cam - cam.min(axis=(1, 2), keepdims=True)
    return cam / (cam.max(axis=(1, 2), keepdims=True) + 1e-7)


def test_grad_cam_swin_last_stage_matches_numpy():
    # 32x32 images: an 8x8 then a 4x4 token grid, both stages with shifted windows
    m = models.SwinTransformer(num_classes=3, embed_dim=8, depths=(2, 2), num_heads=(1, 2), window_size=2)
    x = np.random.default_rng(5).standard_normal((2, 32, 32, 1)).astype(np.float32)
    rs = np.random.RandomState(3)
    v = podlet.tree_util.tree_map(lambda a: jnp.asarray(np.asarray(a) + 0.3 * rs.randn(*a.shape).astype(np.float32)),
                                  m.init(podlet.random.PRNGKey(0), jnp.asarray(x), train=False))
    layer = explain.default_layer(m, v, jnp.asarray(x))
    assert layer == ("stage_1_block_1",) and explain.default_method(m) == "grad_cam"
    logits, state = m.apply(v, jnp.asarray(x), train=False, capture_intermediates=True, mutable=["intermediates"])
    acts = np.asarray(state["intermediates"]["stage_1_block_1"]["__call__"][0])
    assert acts.shape == (2, 4, 4, 16)
    for target in ([2, 0], [1, 1]):
        got = np.asarray(explain.grad_cam(m, v, x, target_class=target))
        assert got.shape == (2, 32, 32) and np.all(got.max(axis=(1, 2)) > 0.99)
        np.testing.assert_allclose(got, numpy_swin_grad_cam(acts, v["params"], np.array(target), (32, 32)),
                                   atol=2e-4)
    plain = np.asarray(m.apply(v, jnp.asarray(x), train=False))
    np.testing.assert_array_equal(np.asarray(logits), plain)
    explain_logits, *_ = explain.layer_activations_and_grads(m, v, x)
    np.testing.assert_allclose(np.asarray(explain_logits), plain, rtol=1e-6, atol=1e-6)


def test_rollout_of_bf16_model_close_to_f32(vit):
    pm, pv, x = vit
    m16 = models.VisionTransformer(**KW, dtype=jnp.bfloat16)
    _, w16 = explain.attention_weights(m16, pv, x)
    assert w16[0][1].dtype == jnp.bfloat16                   # the weights the model really used
    r16 = np.asarray(explain.attention_rollout(m16, pv, x))
    r32 = np.asarray(explain.attention_rollout(pm, pv, x))
    assert r16.dtype == np.float32 and np.max(np.abs(r16 - r32)) < 0.05
