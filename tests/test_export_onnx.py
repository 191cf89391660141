"""ONNX export: podlet's traced primitives as an ONNX graph, run in onnxruntime."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest

import podlet
import podlet.numpy as jnp
from podlet import export, lax, models, nn


def jitter(variables, seed=1):
    """Variables with noise added: zero-initialised params (the last BatchNorm scale of
    each block, ViT's head and class token) would hide a wrong mapping."""
    rng = np.random.default_rng(seed)
    return podlet.tree_util.tree_map(
        lambda a: jnp.asarray(np.asarray(a) + 0.1 * rng.standard_normal(a.shape).astype(np.float32)), variables)


def run_onnx(path, *inputs):
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    return sess.run(None, dict(zip(names, inputs)))


def rel_err(got, want):
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))


@pytest.mark.parametrize("name,model,shape", [
    ("resnet18", models.ResNet18(num_classes=5), (2, 32, 32, 1)),
    ("resnet18_torchpad", models.ResNet18(num_classes=3, torchvision_padding=True), (1, 40, 40, 3)),
    ("vit_tiny", models.ViTTiny(num_classes=5), (2, 32, 32, 1)),
    ("vit_gap_bf16", models.VisionTransformer(num_classes=4, patch_size=8, hidden_size=16, num_layers=2, num_heads=2,
                                              mlp_dim=32, classifier="gap", dtype=jnp.bfloat16), (3, 32, 32, 1)),
    # shifted windows (roll, masks) in both stages, relative position bias, patch merging
    ("swin_shifted", models.SwinTransformer(num_classes=5, embed_dim=8, depths=(2, 2), num_heads=(1, 2),
                                            window_size=2), (2, 32, 32, 1)),
    # a 7x7 map padded to 9x9 windows of 3, odd sides padded by patch merging
    ("swin_padded", models.SwinTransformer(num_classes=3, embed_dim=8, depths=(2, 2), num_heads=(2, 2),
                                           window_size=3), (1, 28, 28, 1)),
])
def test_model_matches_onnxruntime(tmp_path, name, model, shape):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    variables = jitter(model.init(podlet.random.PRNGKey(0), jnp.zeros(shape), train=False))
    path = tmp_path / f"{name}.onnx"
    proto = export.to_onnx(model, variables, jnp.asarray(x), path)
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    assert [i.name for i in proto.graph.input] == ["input"] and [o.name for o in proto.graph.output] == ["output"]
    ops = {n.op_type for n in proto.graph.node}
    assert ("Conv" in ops) and ("MatMul" in ops)
    # a model that computes in bfloat16 is exported in float32 (to_onnx's dtype default)
    want = np.asarray(model.clone(dtype=jnp.float32).apply(variables, jnp.asarray(x), train=False))
    (got,) = run_onnx(path, x)
    assert got.shape == want.shape and got.dtype == np.float32
    assert rel_err(got, want) < 1e-4 and np.max(np.abs(got - want)) < 1e-4


@pytest.mark.parametrize("opset", [13, 17, 18])
def test_many_primitives_match(tmp_path, opset):
    """Pooling, reductions, indexing, padding, contractions, casts: one function through
    every family the exporter maps."""
    rng = np.random.default_rng(0)
    w_dw = jnp.asarray(rng.standard_normal((3, 3, 1, 4)).astype(np.float32))
    w_dil = jnp.asarray(rng.standard_normal((2, 2, 4, 6)).astype(np.float32))
    idx = jnp.asarray(np.array([2, 0, 1, 7, -3], np.int32))      # out of range: clamped, as in jax
    idx_row = jnp.asarray(np.array([[0, 1, 2, 3, 4]], np.int32))

    def f(x):                                    # x: (2, 9, 9, 4)
        y = lax.conv_general_dilated(x, w_dw, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                     feature_group_count=4)
        y = lax.conv_general_dilated(y, w_dil, (2, 1), [(1, 0), (2, 1)], rhs_dilation=(2, 1),
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
        m = nn.max_pool(x, (3, 3), (2, 2), "SAME") + nn.avg_pool(x, (2, 2), (2, 2), "SAME")
        s = lax.reduce_window(x, 0.0, lax.add, (1, 1, 3, 2), (1, 1, 1, 2), "VALID")   # window on W and C
        z = jnp.concatenate([jnp.sum(y, axis=(1, 2)), jnp.max(m, axis=(1, 2)), jnp.min(s, axis=(1, 2, 3))[:, None],
                             jnp.prod(jnp.tanh(x[:, :2, :2, :]), axis=(1, 2))], axis=1)
        z = jnp.pad(z, ((0, 0), (2, 1))) + jnp.flip(jnp.pad(z, ((0, 0), (1, 2)), constant_values=0.5), axis=1)
        z = z[:, 1:12:2]
        t = jnp.take(z, idx, axis=1) + jnp.take_along_axis(z, jnp.argmax(z, axis=1)[:, None] % 3 + idx_row, axis=1)
        a = jnp.argmax(z, axis=1).astype(jnp.float32)[:, None] + jnp.argmin(z, axis=1).astype(jnp.float32)[:, None]
        q = jnp.einsum("bij,bjk->bik", x[:, :3, :3, 0], x[:, :3, :, 1])            # batched dot_general
        r = jnp.cumsum(t, axis=1) + lax.integer_pow(t, 3) - lax.integer_pow(jnp.abs(t) + 1, -2)
        r = jnp.where(r > 0, jnp.clip(r, -2.0, 2.0), jnp.round(r * 3.0)) + jnp.sign(r) * jnp.exp(-jnp.abs(r))
        r = r + jnp.log1p(jnp.abs(r)) + jnp.expm1(-jnp.abs(r)) + lax.rsqrt(1.0 + r * r) + nn.gelu(r, approximate=False)
        flags = (jnp.isfinite(r) & (r != 0.25)).astype(jnp.float32)
        return jnp.concatenate([r * flags, a, jnp.reshape(q, (2, -1))[:, :4], jnp.broadcast_to(z[:, :1], (2, 3))],
                               axis=1)

    x = rng.standard_normal((2, 9, 9, 4)).astype(np.float32)
    path = tmp_path / "ops.onnx"
    proto = export.to_onnx(f, None, jnp.asarray(x), path, opset=opset)
    assert proto.opset_import[0].version == opset
    want = np.asarray(f(jnp.asarray(x)))
    (got,) = run_onnx(path, x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_swin_primitives_on_traced_values(tmp_path):
    """What a Swin needs when its operands are traced, not folded weights: a gather with
    constant indices (the relative position bias), static and traced rolls, masks through
    select, window partitions (6-D transposes), strided patch-merging slices, and the
    dynamic slices a traced roll lowers to. One graph, run on several inputs."""
    rng = np.random.default_rng(3)
    ws = 2
    yy, xx = np.meshgrid(np.arange(ws), np.arange(ws), indexing="ij")
    rel = np.stack([yy.ravel()[:, None] - yy.ravel()[None], xx.ravel()[:, None] - xx.ravel()[None]]) + ws - 1
    index = jnp.asarray((rel[0] * (2 * ws - 1) + rel[1]).astype(np.int32))         # (4, 4) into 9 rows
    mask = jnp.asarray(np.triu(np.ones((4, 4), bool)))

    def f(x):                                           # x: (2, 4, 4, 3)
        table = jnp.tanh(x[0, :3, :3, :].reshape(9, 3))             # traced (9, heads=3) bias table
        bias = jnp.transpose(table[index], (2, 0, 1))                 # gather -> (3, 4, 4)
        s = jnp.roll(x, (-1, -1), axis=(1, 2))                       # static shift: slices + concatenate
        w = s.reshape(2, 2, ws, 2, ws, 3).transpose(0, 1, 3, 2, 4, 5).reshape(8, ws * ws, 3)
        a = jnp.einsum("bqc,bkc->bcqk", w, w) + bias[None]
        a = nn.softmax(jnp.where(mask, a, -100.0), axis=-1)
        o = jnp.einsum("bcqk,bkc->bqc", a, w).reshape(2, 2, 2, ws, ws, 3).transpose(0, 1, 3, 2, 4, 5)
        o = jnp.roll(o.reshape(2, 4, 4, 3), (1, 1), axis=(1, 2))
        m = jnp.concatenate([o[:, 0::2, 0::2], o[:, 1::2, 0::2], o[:, 0::2, 1::2], o[:, 1::2, 1::2]], axis=-1)
        k = jnp.argmax(x[:, 0, 0, 0]).astype(jnp.int32)             # a traced shift and start
        r = jnp.roll(m, k + 1, axis=2)
        d = lax.dynamic_slice(r, (k, k, jnp.int32(1), jnp.int32(3)), (1, 2, 2, 4))
        u = lax.dynamic_update_slice(r, d * 10.0, (k, k + 1, jnp.int32(-1), jnp.int32(20)))   # clamped starts
        return jnp.concatenate([u.reshape(-1), d.reshape(-1), jnp.take(bias.reshape(-1), index.reshape(-1))])

    path = tmp_path / "swin_ops.onnx"
    proto = export.to_onnx(f, None, podlet.ShapeDtypeStruct((2, 4, 4, 3), jnp.float32), path)
    ops = {n.op_type for n in proto.graph.node}
    assert {"Gather", "Where", "Concat", "Slice", "Pad"} <= ops
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    seen = set()
    for _ in range(4):
        x = rng.standard_normal((2, 4, 4, 3)).astype(np.float32)
        x[rng.integers(2), 0, 0, 0] = 5.0
        seen.add(int(np.argmax(x[:, 0, 0, 0])))
        (got,) = sess.run(None, {"input": x})
        np.testing.assert_allclose(got, np.asarray(f(jnp.asarray(x))), rtol=1e-5, atol=1e-5)
    assert seen == {0, 1}                               # both traced shifts ran through one graph


def test_user_module_with_deterministic_flag(tmp_path):
    class Net(nn.Module):
        @nn.compact
        def __call__(self, x, deterministic: bool):
            x = nn.Dense(8)(x)
            x = nn.Dropout(0.5)(x, deterministic=deterministic)      # must vanish in the export
            x = nn.LayerNorm()(nn.relu(x))
            return nn.log_softmax(nn.Dense(3)(x))

    net = Net()
    x = np.random.default_rng(2).standard_normal((4, 6)).astype(np.float32)
    v = jitter(net.init(podlet.random.PRNGKey(1), jnp.asarray(x), deterministic=True))
    proto = export.to_onnx(net, v, podlet.ShapeDtypeStruct((4, 6), jnp.float32), tmp_path / "net.onnx")
    assert not any("random" in n.op_type.lower() for n in proto.graph.node)
    (got,) = run_onnx(tmp_path / "net.onnx", x)
    np.testing.assert_allclose(got, np.asarray(net.apply(v, jnp.asarray(x), deterministic=True)),
                               rtol=1e-5, atol=1e-5)


def test_unsupported_primitive_named_and_no_partial_file(tmp_path):
    path = tmp_path / "model.onnx"
    path.write_bytes(b"previous good model")

    def f(x):
        return lax.atan2(x, x + 1.0)

    with pytest.raises(export.UnsupportedPrimitiveError, match=r"'atan2'.*test_export_onnx.py"):
        export.to_onnx(f, None, jnp.zeros((2, 3)), path)
    assert path.read_bytes() == b"previous good model"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]      # no temporary left behind

    with pytest.raises(export.UnsupportedPrimitiveError, match="'erf_inv'"):
        export.to_onnx(lambda x: lax.erf_inv(x * 0.5), None, jnp.zeros((2, 3)), path)
    assert path.read_bytes() == b"previous good model"
    with pytest.raises(podlet.PodletError, match="opset 11"):
        export.to_onnx(lambda x: x + 1.0, None, jnp.zeros((2, 3)), path, opset=11)
    with pytest.raises(TypeError, match="Module or a callable"):
        export.to_onnx(42, None, jnp.zeros((2, 3)), path)
