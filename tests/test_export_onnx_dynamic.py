"""ONNX export with a symbolic batch (to_onnx(dynamic_batch=True), `podlet export`): one
exported file run by onnxruntime at batch 1, 3 and 8 against podlet's own outputs."""
import types

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

import podlet
import podlet.numpy as jnp
from podlet import cli, export, lax, models, nn
from podlet.training.small_cnn import SmallCNN

BATCHES = (1, 3, 8)


def jitter(variables, seed=1):
    """Variables with noise added: zero-initialised params (a block's last BatchNorm
    scale, ViT's head and class token) would hide a wrong mapping."""
    rng = np.random.default_rng(seed)
    return podlet.tree_util.tree_map(
        lambda a: jnp.asarray(np.asarray(a) + 0.1 * rng.standard_normal(a.shape).astype(np.float32)), variables)


def dims(value_info):
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


@pytest.fixture
def fusion():
    """Sets podlet.config's fused_attention / fused_norms for one test, then restores them."""
    saved = podlet.config.fused_attention, podlet.config.fused_norms

    def set_(attention, norms):
        podlet.config.update("fused_attention", attention)
        podlet.config.update("fused_norms", norms)
    yield set_
    set_(*saved)


def vit(**kw):
    return models.VisionTransformer(num_classes=4, patch_size=4, hidden_size=16, num_layers=2, num_heads=2,
                                    mlp_dim=32, **kw)


# name, model, one example's shape, fused attention and norms, opset, ONNX ops that must appear
# (LayerNormalization: the fused layer_norm; ReduceLogSumExp: the fused attention's lse)
CASES = [
    ("resnet_basic", models.ResNet(stage_sizes=[1, 1], widths=[8, 16], num_classes=5), (32, 32, 1), True, 17,
     {"Conv", "MaxPool", "MatMul"}),
    ("resnet_bottleneck_torchpad", models.ResNet50(stage_sizes=[1, 1], widths=[4, 8], num_classes=3,
                                                   torchvision_padding=True), (24, 24, 3), True, 17,
     {"Conv", "MaxPool"}),
    ("small_cnn", SmallCNN(widths=(4, 8, 8), num_classes=5), (16, 16, 1), True, 17, {"Conv", "MaxPool"}),
    # class token (concatenate with a weight broadcast over the batch), position embedding,
    # fused attention and LayerNormalization
    ("vit_token_fused", vit(), (16, 16, 1), True, 17, {"LayerNormalization", "ReduceLogSumExp", "Tile"}),
    # op-by-op attention (batched dot_generals, softmax) and the ReduceMean LayerNorm of opset 13
    ("vit_token_unfused_opset13", vit(), (16, 16, 1), False, 13, {"Exp", "ReduceMax", "Tile"}),
    ("vit_gap_fused_opset13", vit(classifier="gap"), (16, 16, 1), True, 13,
     {"Softmax", "ReduceMean", "ReduceLogSumExp"}),
    # shifted windows (rolls, masks) in both stages, relative position bias, patch merging
    ("swin_shifted", models.SwinTransformer(num_classes=5, embed_dim=8, depths=(2, 2), num_heads=(1, 2),
                                            window_size=2), (16, 16, 1), True, 17, {"LayerNormalization", "Softmax"}),
    # a 7x7 map padded to 9x9 windows of 3, odd sides padded by patch merging; unfused
    ("swin_padded_unfused", models.SwinTransformer(num_classes=3, embed_dim=8, depths=(2, 2), num_heads=(2, 2),
                                                   window_size=3), (28, 28, 1), False, 17, {"Pad", "Exp"}),
]


@pytest.mark.parametrize("name,model,example,fused,opset,ops", CASES, ids=[c[0] for c in CASES])
def test_one_export_runs_at_every_batch(tmp_path, fusion, name, model, example, fused, opset, ops):
    fusion(fused, fused)
    variables = jitter(model.init(podlet.random.PRNGKey(0), jnp.zeros((1,) + example), train=False))
    path = tmp_path / f"{name}.onnx"
    proto = export.to_onnx(model, variables, jnp.zeros((1,) + example), path, opset=opset, dynamic_batch=True)
    loaded = onnx.load(str(path))
    onnx.checker.check_model(loaded, full_check=True)
    assert dims(loaded.graph.input[0]) == ["batch", *example]
    assert dims(loaded.graph.output[0]) == ["batch", model.num_classes]
    assert ops <= {n.op_type for n in proto.graph.node}
    if not fused:                    # Flax's op-by-op LayerNorm and softmax
        assert not {"LayerNormalization", "Softmax"} & {n.op_type for n in proto.graph.node}
    assert "Shape" in {n.op_type for n in proto.graph.node}     # the batch is read at run time
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for batch in BATCHES:
        x = rng.standard_normal((batch,) + example).astype(np.float32)
        (got,) = sess.run(None, {"input": x})
        want = np.asarray(model.apply(variables, jnp.asarray(x), train=False))
        assert got.shape == want.shape == (batch, model.num_classes)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"{name} at batch {batch}")


def test_batch_dependent_shapes_of_every_family(tmp_path):
    """Slices, flips, pads, dynamic slices and updates along the batch axis (ends and
    clamp bounds that are ``batch + c``), pooling and reduce_window folding the batch into
    channels, a constant broadcast over the batch and one tiled over batch * 3 rows,
    reshapes merging the batch with other dims, broadcast_in_dim and take_along_axis."""
    rng = np.random.default_rng(0)
    w = jnp.asarray(rng.standard_normal((3, 3, 4, 5)).astype(np.float32))
    row = jnp.asarray(rng.standard_normal((1, 4)).astype(np.float32))
    idx_row = jnp.asarray(np.array([[0, 3, 1, 2]], np.int32))

    def f(x):                                            # x: (B, 6, 6, 4)
        b = x.shape[0]
        y = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        y = nn.max_pool(y, (2, 2), (2, 2)) + lax.reduce_window(y, 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        z = jnp.mean(y, axis=(1, 2))                                          # (B, 5)
        z = z + jnp.flip(z, axis=0) + z[-1:] + jnp.pad(z, ((1, 2), (0, 0)))[2:b + 2]
        k = jnp.argmax(x[0, 0, 0]).astype(jnp.int32)                          # a traced start
        d = lax.dynamic_slice(z, (k + b, jnp.int32(1)), (1, 3))               # clamped to b - 1
        z = lax.dynamic_update_slice(z, d * 2.0, (k, jnp.int32(0)))
        t = x[:, 0, 0, :] * jnp.broadcast_to(row, (b, 4))                      # a weight over the batch
        t = jnp.take_along_axis(t, jnp.broadcast_to(idx_row, (b, 4)), axis=1)
        tiles = jnp.tile(jnp.arange(12, dtype=jnp.float32).reshape(3, 4), (b, 1))   # (3B, 4) constant
        u = (x[:, :3, 0, :].reshape(b * 3, 4) * tiles).reshape(b, 12)
        return jnp.concatenate([z, t, u, jnp.broadcast_to(jnp.cumsum(d, axis=1), (b, 3))], axis=1)

    path = tmp_path / "families.onnx"
    export.to_onnx(f, None, podlet.ShapeDtypeStruct((4, 6, 6, 4), jnp.float32), path, dynamic_batch=True)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [i.shape for i in sess.get_inputs()] == [["batch", 6, 6, 4]]
    assert [o.shape for o in sess.get_outputs()] == [["batch", 24]]
    for batch in BATCHES:
        x = rng.standard_normal((batch, 6, 6, 4)).astype(np.float32)
        x[0, 0, 0, rng.integers(4)] = 9.0                                     # the traced start moves
        (got,) = sess.run(None, {"input": x})
        np.testing.assert_allclose(got, np.asarray(f(jnp.asarray(x))), rtol=1e-5, atol=1e-5,
                                   err_msg=f"batch {batch}")


def test_static_export_keeps_the_sample_batch(tmp_path):
    model = models.ResNet(stage_sizes=[1], widths=[4], num_classes=3)
    variables = jitter(model.init(podlet.random.PRNGKey(0), jnp.zeros((1, 16, 16, 1)), train=False))
    path = tmp_path / "static.onnx"
    proto = export.to_onnx(model, variables, jnp.zeros((2, 16, 16, 1)), path)             # the default
    assert dims(proto.graph.input[0]) == [2, 16, 16, 1] and dims(proto.graph.output[0]) == [2, 3]
    assert "Shape" not in {n.op_type for n in proto.graph.node}
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal((2, 16, 16, 1)).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"input": x})[0],
                               np.asarray(model.apply(variables, jnp.asarray(x), train=False)), rtol=1e-4, atol=1e-4)
    with pytest.raises(InvalidArgument, match="Got: 3 Expected: 2"):                 # batch 3 is not this graph's
        sess.run(None, {"input": np.zeros((3, 16, 16, 1), np.float32)})


def test_cli_export_is_dynamic_unless_told(tmp_path, monkeypatch, capsys):
    model = SmallCNN(widths=(4, 8), num_classes=3)
    variables = jitter(model.init(podlet.random.PRNGKey(0), jnp.zeros((1, 8, 8, 1)), train=False))
    cfg = types.SimpleNamespace(data=types.SimpleNamespace(image_size=(8, 8, 1)))
    seen = []
    monkeypatch.setattr(cli, "_run_model", lambda run_dir, checkpoint: seen.append((run_dir, checkpoint)) or
                        (cfg, model, variables))
    out = str(tmp_path / "m.onnx")
    assert cli.main(["export", "runs/x", "--format", "onnx", "--out", out, "--checkpoint", "latest"]) == 0
    assert seen == [("runs/x", "latest")] and "batch symbolic" in capsys.readouterr().out
    m = onnx.load(out)
    assert dims(m.graph.input[0]) == ["batch", 8, 8, 1] and dims(m.graph.output[0]) == ["batch", 3]
    x = np.random.default_rng(2).standard_normal((5, 8, 8, 1)).astype(np.float32)
    (got,) = ort.InferenceSession(out, providers=["CPUExecutionProvider"]).run(None, {"input": x})
    np.testing.assert_allclose(got, np.asarray(model.apply(variables, jnp.asarray(x), train=False)),
                               rtol=1e-4, atol=1e-4)
    assert cli.main(["export", "runs/x", "--format", "onnx", "--out", out, "--no-dynamic-batch"]) == 0
    assert "batch fixed at 1" in capsys.readouterr().out
    m = onnx.load(out)
    assert dims(m.graph.input[0]) == [1, 8, 8, 1] and dims(m.graph.output[0]) == [1, 3]


def test_what_cannot_be_dynamic_is_named(tmp_path, capsys):
    path = tmp_path / "model.onnx"
    path.write_bytes(b"previous good model")
    sample = podlet.ShapeDtypeStruct((2, 4), jnp.float32)

    # a mean over the batch axis divides by a constant batch size
    with pytest.raises(export.DynamicBatchError,
                       match=r"primitive '(div|mul)' \[at .*test_export_onnx_dynamic.py.*mean over the batch"):
        export.to_onnx(lambda x: x - jnp.mean(x, axis=0), None, sample, path, dynamic_batch=True)
    # a size quadratic in the batch
    with pytest.raises(export.DynamicBatchError, match=r"primitive 'reshape' .*not a \* batch \+ c"):
        export.to_onnx(lambda x: (x.reshape(-1)[:, None] * x.reshape(-1)[None, :]).reshape(-1), None, sample,
                       path, dynamic_batch=True)
    # a slice of the batch axis: the whole batch at 2 and 3, eight rows at larger batches
    with pytest.raises(export.DynamicBatchError, match=r"at batch 2 primitive 'mul' .* ONNX Mul, at batch 101 "
                                                       r"primitive 'slice' .* ONNX Slice"):
        export.to_onnx(lambda x: x[:8] * 2.0, None, sample, path, dynamic_batch=True)
    # a constant that differs per example
    with pytest.raises(export.DynamicBatchError, match=r"not one block repeated for every example"):
        export.to_onnx(lambda x: x + jnp.arange(x.shape[0], dtype=jnp.float32)[:, None], None, sample, path,
                       dynamic_batch=True)
    # code that fixes the batch size fails to trace at another
    with pytest.raises(export.DynamicBatchError, match=r"at batch 3 it failed.*shapes \(3, 4\) and \(2, 4\).*dynamic_batch=False"):
        export.to_onnx(lambda x: x + jnp.ones((2, 4)), None, sample, path, dynamic_batch=True)
    # a graph whose operations change with the batch size
    with pytest.raises(export.DynamicBatchError, match=r"at batch 2 primitive 'add' .* ONNX Add, at batch 3 "
                                                       r"primitive 'mul' .* ONNX Mul"):
        export.to_onnx(lambda x: x * 2.0 if x.shape[0] == 3 else x + 1.0, None, sample, path, dynamic_batch=True)
    # an error of the model's own, at any batch size, is reported as it is
    with pytest.raises(podlet.PodletError, match=r"calls a jitted function") as e:
        export.to_onnx(podlet.jit(lambda x: x * 2.0), None, sample, path, dynamic_batch=True)
    assert not isinstance(e.value, export.DynamicBatchError)
    with pytest.raises(podlet.PodletError, match=r"a scalar \(shape \(\)\)"):
        export.to_onnx(lambda x: x * 2.0, None, podlet.ShapeDtypeStruct((), jnp.float32), path,
                       dynamic_batch=True)
    assert path.read_bytes() == b"previous good model"
    # the same graphs export with a fixed batch
    export.to_onnx(lambda x: x - jnp.mean(x, axis=0), None, sample, path)
    (got,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"input": np.arange(8, dtype=np.float32).reshape(2, 4)})
    np.testing.assert_allclose(got, np.array([[-2.0] * 4, [2.0] * 4]), atol=1e-6)
