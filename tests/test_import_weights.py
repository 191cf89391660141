"""Pretrained-weight import: torchvision ResNets and ViTs (rebuilt here in plain torch with
torchvision's module names, since torchvision itself is not installable next to torch
2.13) and Flax msgpack files. Swin's import is tested in tests/test_swin.py."""
import os
from collections import OrderedDict

import numpy as np
import pytest
import torch
from torch import nn as tnn

import jax.numpy as jjnp
from flax import serialization

import podlet
import podlet.numpy as jnp
from podlet import models


# --- torchvision's ResNet (torchvision/models/resnet.py, v1.5), same module names -----
class BasicBlock(tnn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = tnn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = tnn.BatchNorm2d(planes)
        self.relu = tnn.ReLU(inplace=True)
        self.conv2 = tnn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = tnn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        idt = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + idt)


class Bottleneck(tnn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = tnn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = tnn.BatchNorm2d(planes)
        self.conv2 = tnn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = tnn.BatchNorm2d(planes)
        self.conv3 = tnn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = tnn.BatchNorm2d(planes * 4)
        self.relu = tnn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        idt = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.relu(self.bn3(self.conv3(out)) + idt)


class TorchResNet(tnn.Module):
    def __init__(self, block, layers, num_classes=1000):
        super().__init__()
        self.inplanes = 64
        self.conv1 = tnn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = tnn.BatchNorm2d(64)
        self.relu = tnn.ReLU(inplace=True)
        self.maxpool = tnn.MaxPool2d(3, 2, 1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], 2)
        self.layer3 = self._make_layer(block, 256, layers[2], 2)
        self.layer4 = self._make_layer(block, 512, layers[3], 2)
        self.avgpool = tnn.AdaptiveAvgPool2d((1, 1))
        self.fc = tnn.Linear(512 * block.expansion, num_classes)

    def _make_layer(self, block, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = tnn.Sequential(tnn.Conv2d(self.inplanes, planes * block.expansion, 1, stride, bias=False),
                                        tnn.BatchNorm2d(planes * block.expansion))
        layers = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return tnn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


TORCH_ARCHS = {"resnet18": (BasicBlock, [2, 2, 2, 2]), "resnet34": (BasicBlock, [3, 4, 6, 3]),
               "resnet50": (Bottleneck, [3, 4, 6, 3])}
PODLET_ARCHS = {"resnet18": models.ResNet18, "resnet34": models.ResNet34, "resnet50": models.ResNet50}


def random_torch_resnet(arch, seed, num_classes=1000):
    torch.manual_seed(seed)
    block, layers = TORCH_ARCHS[arch]
    net = TorchResNet(block, layers, num_classes)
    with torch.no_grad():  # random BN statistics and affine params, so a wrong mapping shows
        for m in net.modules():
            if isinstance(m, tnn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.2)
                m.running_mean.normal_(0, 0.2)
                m.running_var.uniform_(0.5, 2.0)
    return net.eval()


def rel_err(a, b):
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


@pytest.mark.parametrize("arch,size", [("resnet34", 64), ("resnet18", 48), ("resnet50", 40)])
def test_torchvision_logits_match(tmp_path, arch, size):
    net = random_torch_resnet(arch, seed=1)
    path = tmp_path / f"{arch}.pth"
    torch.save(net.state_dict(), path)
    x = np.random.default_rng(0).standard_normal((2, 3, size, size)).astype(np.float32)
    with torch.no_grad():
        want = net(torch.from_numpy(x)).numpy()

    variables = models.load_torchvision_resnet(str(path), arch, in_channels=3)
    model = PODLET_ARCHS[arch](num_classes=1000, torchvision_padding=True)
    # the loaded tree has exactly model.init's structure and shapes
    init = podlet.eval_shape(lambda k: model.init(k, jnp.zeros((1, size, size, 3)), train=False),
                             podlet.random.PRNGKey(0))
    got_shapes = podlet.tree_util.tree_map(lambda a: a.shape, variables)
    assert got_shapes == podlet.tree_util.tree_map(lambda a: a.shape, dict(init))
    got = np.asarray(model.apply(variables, jnp.asarray(x.transpose(0, 2, 3, 1)), train=False))
    assert rel_err(got, want) < 1e-4


def test_gray_stem_and_new_head(tmp_path):
    net = random_torch_resnet("resnet18", seed=2)
    path = tmp_path / "r18.pth"
    torch.save(net.state_dict(), path)
    gray = np.random.default_rng(1).standard_normal((2, 1, 32, 32)).astype(np.float32)
    with torch.no_grad():  # a gray image seen as RGB by torch
        feats = {}
        net.fc.register_forward_hook(lambda m, i, o: feats.setdefault("x", i[0].numpy()))
        net(torch.from_numpy(np.repeat(gray, 3, axis=1)))

    v = models.load_torchvision_resnet(path, "resnet18", in_channels=1, num_classes=5,
                                       rng=podlet.random.PRNGKey(3))
    assert v["params"]["conv_init"]["kernel"].shape == (7, 7, 1, 64)
    assert v["params"]["Dense_0"]["kernel"].shape == (512, 5)
    np.testing.assert_array_equal(np.asarray(v["params"]["Dense_0"]["bias"]), np.zeros(5, np.float32))
    # same key, same head bits; another key, another head
    v2 = models.load_torchvision_resnet(path, "resnet18", in_channels=1, num_classes=5,
                                        rng=podlet.random.PRNGKey(3))
    np.testing.assert_array_equal(np.asarray(v["params"]["Dense_0"]["kernel"]),
                                  np.asarray(v2["params"]["Dense_0"]["kernel"]))
    # the features under the new head are torch's features of the RGB-repeated image
    model = models.ResNet18(num_classes=5, torchvision_padding=True)
    _, state = model.apply(v, jnp.asarray(gray.transpose(0, 2, 3, 1)), train=False,
                           capture_intermediates=lambda mdl, name: mdl.name == "Dense_0", mutable=["intermediates"])
    logits = np.asarray(state["intermediates"]["Dense_0"]["__call__"][0])
    k = np.asarray(v["params"]["Dense_0"]["kernel"])
    np.testing.assert_allclose(logits, feats["x"] @ k, rtol=1e-4, atol=1e-4)


def test_mismatches_named_in_one_error(tmp_path):
    sd = random_torch_resnet("resnet18", seed=0).state_dict()
    del sd["layer2.0.downsample.0.weight"]
    sd["layer3.1.bn2.bias"] = torch.zeros(7)
    sd["extra.weight"] = torch.zeros(1)
    with pytest.raises(podlet.PodletError) as e:
        models.load_torchvision_resnet(sd, "resnet18")
    msg = str(e.value)
    for needle in ["layer2.0.downsample.0.weight", "extra.weight", "layer3.1.bn2.bias", "(7,)", "(256,)"]:
        assert needle in msg
    # a resnet34 checkpoint is not a resnet18 one
    with pytest.raises(podlet.PodletError, match="unexpected keys.*layer1.2.conv1.weight"):
        models.load_torchvision_resnet(random_torch_resnet("resnet34", seed=0).state_dict(), "resnet18")
    with pytest.raises(podlet.PodletError, match="resnet101"):
        models.load_torchvision_resnet(sd, "resnet101")
    with pytest.raises(FileNotFoundError, match="nope.pth"):
        models.load_torchvision_resnet(str(tmp_path / "nope.pth"), "resnet18")
    bad = tmp_path / "bad.pth"
    bad.write_bytes(b"not a zip")
    with pytest.raises(podlet.PodletError, match="bad.pth"):
        models.load_torchvision_resnet(str(bad), "resnet18")


def test_pth_reader_refuses_code(tmp_path):
    import pickle
    import zipfile
    path = tmp_path / "evil.pth"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("archive/data.pkl", pickle.dumps(os.system))
    with pytest.raises(podlet.PodletError, match="unsupported object"):
        models.load_torchvision_resnet(str(path), "resnet18")


def test_pth_reader_dtypes_and_strides(tmp_path):
    from podlet.models import _torch_pth
    t = torch.arange(24, dtype=torch.float64).reshape(4, 6)
    sd = {"f64": t, "view": t.t()[1:], "i64": torch.tensor([1, -2], dtype=torch.int64),
          "bf16": torch.tensor([1.5, -2.25], dtype=torch.bfloat16), "b": torch.tensor([True, False]),
          "scalar": torch.tensor(3.0)}
    torch.save(sd, tmp_path / "t.pth")
    got = _torch_pth.load(str(tmp_path / "t.pth"))
    for k, v in sd.items():
        want = v.float().numpy() if v.dtype == torch.bfloat16 else v.numpy()
        np.testing.assert_array_equal(np.asarray(got[k], dtype=want.dtype), want)
        assert got[k].shape == tuple(v.shape)


def test_load_flax_params_matches_flax(tmp_path):
    rng = np.random.default_rng(0)
    tree = {"params": {"Dense_0": {"kernel": rng.standard_normal((3, 4)).astype(np.float32),
                                   "bias": np.zeros(4, np.float32)},
                       "layers": [rng.standard_normal(2).astype(np.float32), np.arange(3, dtype=np.int32)],
                       "bf": jjnp.asarray([1.5, -3.0], jjnp.bfloat16)},
            "batch_stats": {"mean": rng.standard_normal(300).astype(np.float32)},
            "step": np.int32(7), "big": rng.standard_normal((70, 70)).astype(np.float32)}
    path = tmp_path / "ckpt.msgpack"
    data = serialization.to_bytes(tree)
    path.write_bytes(data)
    want = serialization.msgpack_restore(data)
    got = models.load_flax_params(path)
    flat_w = podlet.tree_util.tree_flatten_with_path(want)[0]
    flat_g = podlet.tree_util.tree_flatten_with_path(got)[0]
    assert [p for p, _ in flat_w] == [p for p, _ in flat_g]
    for (_, w), (_, g) in zip(flat_w, flat_g):
        assert isinstance(g, podlet.Array)
        np.testing.assert_array_equal(np.asarray(g).astype(np.float64), np.asarray(w).astype(np.float64))
    assert got["params"]["bf"].dtype == jnp.bfloat16

    # against a model's variables: structure checked, mismatches named
    target = {"params": {"Dense_0": {"kernel": podlet.ShapeDtypeStruct((3, 5), jnp.float32),
                                     "bias": podlet.ShapeDtypeStruct((4,), jnp.float32)},
                         "Dense_1": {"bias": podlet.ShapeDtypeStruct((4,), jnp.float32)}}}
    path2 = tmp_path / "p.msgpack"
    path2.write_bytes(serialization.to_bytes({"params": {"Dense_0": tree["params"]["Dense_0"],
                                                         "extra": np.zeros(1, np.float32)}}))
    with pytest.raises(podlet.PodletError) as e:
        models.load_flax_params(path2, target=target)
    for needle in ["Dense_1", "extra", "(3, 4)", "(3, 5)", "p.msgpack"]:
        assert needle in str(e.value)


def test_flax_msgpack_decoder_corner_cases(tmp_path):
    # every msgpack width class, as flax's encoder (msgpack) writes them
    from podlet.models import _flax_msgpack
    obj = {"a" * 40: [1, -1, -33, 200, 70000, 2 ** 40, -(2 ** 40), 1.5, None, True, False, "x" * 300, b"\x00" * 70],
           "m": {str(i): i for i in range(20)}, "l": list(range(20)), "c": complex(1, 2)}
    data = serialization.msgpack_serialize(obj)
    assert _flax_msgpack.restore(data) == serialization.msgpack_restore(data)
    with pytest.raises(podlet.PodletError, match="truncated"):
        _flax_msgpack.restore(data[:-5], where="cut.msgpack")
    bad = tmp_path / "bad.msgpack"
    bad.write_bytes(data[:-5])
    with pytest.raises(podlet.PodletError, match="bad.msgpack"):
        models.load_flax_params(bad)


def test_load_pretrained_dispatches_on_file_type(tmp_path):
    net = random_torch_resnet("resnet18", seed=4)
    torch.save(net.state_dict(), tmp_path / "r18.pth")
    v = models.load_pretrained(tmp_path / "r18.pth", "resnet18", in_channels=1, num_classes=5)
    assert v["params"]["conv_init"]["kernel"].shape == (7, 7, 1, 64) and set(v) == {"params", "batch_stats"}
    # a PyTorch training checkpoint of a DataParallel model: weights one level down, 'module.' prefixed
    wrapped = {"epoch": 3, "state_dict": {"module." + k: t for k, t in net.state_dict().items()}}
    torch.save(wrapped, tmp_path / "ckpt.pt")
    v2 = models.load_pretrained(tmp_path / "ckpt.pt", "resnet18", in_channels=1, num_classes=5)
    for a, b in zip(podlet.tree_util.tree_leaves(v), podlet.tree_util.tree_leaves(v2)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))

    model = models.MLP(features=(6,), num_classes=3)
    target = model.init(podlet.random.PRNGKey(0), jnp.zeros((1, 4)), train=False)
    fv = {k: podlet.tree_util.tree_map(np.asarray, target[k]) for k in target}
    (tmp_path / "vars.msgpack").write_bytes(serialization.to_bytes(fv))
    (tmp_path / "params.flax").write_bytes(serialization.to_bytes(fv["params"]))
    (tmp_path / "state.msgpack").write_bytes(serialization.to_bytes({"step": 3, "params": fv["params"],
                                                                    "opt_state": {"mu": fv["params"]}}))
    for name in ["vars.msgpack", "params.flax", "state.msgpack"]:
        got = models.load_pretrained(tmp_path / name, "mlp", target=target)
        assert set(got) == {"params"}
        np.testing.assert_array_equal(np.asarray(got["params"]["Dense_0"]["kernel"]),
                                      fv["params"]["Dense_0"]["kernel"])
    other = models.MLP(features=(7,), num_classes=3).init(podlet.random.PRNGKey(0), jnp.zeros((1, 4)), train=False)
    with pytest.raises(podlet.PodletError, match=r"Dense_0.*\(4, 6\).*\(4, 7\)"):
        models.load_pretrained(tmp_path / "vars.msgpack", "mlp", target=other)
    with pytest.raises(podlet.PodletError, match=r"'\.npz'"):
        models.load_pretrained(tmp_path / "w.npz", "resnet18")


# --- torchvision's VisionTransformer (torchvision/models/vision_transformer.py), same names ---
class TorchEncoderBlock(tnn.Module):
    def __init__(self, heads, d, mlp):
        super().__init__()
        self.ln_1 = tnn.LayerNorm(d, eps=1e-6)
        self.self_attention = tnn.MultiheadAttention(d, heads, batch_first=True)
        self.dropout = tnn.Dropout(0.0)
        self.ln_2 = tnn.LayerNorm(d, eps=1e-6)
        self.mlp = tnn.Sequential(tnn.Linear(d, mlp), tnn.GELU(), tnn.Dropout(0.0), tnn.Linear(mlp, d),
                                  tnn.Dropout(0.0))

    def forward(self, inp):
        x = self.ln_1(inp)
        x, _ = self.self_attention(x, x, x, need_weights=False)
        x = self.dropout(x) + inp
        return x + self.mlp(self.ln_2(x))


class TorchViTEncoder(tnn.Module):
    def __init__(self, seq, layers, heads, d, mlp):
        super().__init__()
        self.pos_embedding = tnn.Parameter(torch.randn(1, seq, d) * 0.02)
        self.dropout = tnn.Dropout(0.0)
        self.layers = tnn.Sequential(OrderedDict((f"encoder_layer_{i}", TorchEncoderBlock(heads, d, mlp))
                                                 for i in range(layers)))
        self.ln = tnn.LayerNorm(d, eps=1e-6)

    def forward(self, x):
        return self.ln(self.layers(self.dropout(x + self.pos_embedding)))


class TorchViT(tnn.Module):
    def __init__(self, image_size, patch, layers, heads, d, mlp, num_classes=1000):
        super().__init__()
        self.patch, self.d = patch, d
        self.conv_proj = tnn.Conv2d(3, d, patch, patch)
        self.class_token = tnn.Parameter(torch.zeros(1, 1, d))
        self.encoder = TorchViTEncoder((image_size // patch) ** 2 + 1, layers, heads, d, mlp)
        self.heads = tnn.Sequential(OrderedDict(head=tnn.Linear(d, num_classes)))

    def forward(self, x):
        n = x.shape[0]
        x = self.conv_proj(x).reshape(n, self.d, -1).permute(0, 2, 1)
        x = torch.cat([self.class_token.expand(n, -1, -1), x], dim=1)
        return self.heads(self.encoder(x)[:, 0])


VIT_SMALL = {"patch_size": 16, "hidden_size": 48, "num_layers": 2, "num_heads": 4, "mlp_dim": 96}


def random_torch_vit(seed, image_size=48, num_classes=1000, arch=VIT_SMALL):
    torch.manual_seed(seed)
    net = TorchViT(image_size, arch["patch_size"], arch["num_layers"], arch["num_heads"], arch["hidden_size"],
                   arch["mlp_dim"], num_classes)
    with torch.no_grad():  # random class token, norms and biases, so a wrong mapping shows
        net.class_token.normal_(0, 1.0)
        for m in net.modules():
            if isinstance(m, tnn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.2)
            if isinstance(m, tnn.MultiheadAttention):
                m.in_proj_bias.normal_(0, 0.2)
                m.out_proj.bias.normal_(0, 0.2)
            if isinstance(m, tnn.Linear) and m.bias is not None:
                m.bias.normal_(0, 0.1)
        for blk in net.encoder.layers:  # MLP pre-activations of a few units, where GELU's two forms differ
            blk.mlp[0].weight.mul_(4.0)
    return net.eval()


def small_vit(**kw):
    return models.VisionTransformer(**VIT_SMALL, approximate_gelu=False, **kw)


def test_torchvision_vit_logits_match(tmp_path):
    net = random_torch_vit(seed=1)
    torch.save(net.state_dict(), tmp_path / "vit.pth")
    x = np.random.default_rng(0).standard_normal((2, 3, 48, 48)).astype(np.float32)
    with torch.no_grad():
        want = net(torch.from_numpy(x)).numpy()
    v = models.load_torchvision_vit(str(tmp_path / "vit.pth"), VIT_SMALL, in_channels=3)
    model = small_vit(num_classes=1000, in_channels=3)
    init = podlet.eval_shape(lambda k: model.init(k, jnp.zeros((1, 48, 48, 3)), train=False),
                             podlet.random.PRNGKey(0))
    assert podlet.tree_util.tree_map(lambda a: a.shape, v) == podlet.tree_util.tree_map(lambda a: a.shape, dict(init))
    got = np.asarray(model.apply(v, jnp.asarray(x.transpose(0, 2, 3, 1)), train=False))
    assert float(np.max(np.abs(got - want))) < 1e-4 and np.std(want) > 0.1
    # the tanh GELU (Flax's default) is not torchvision's
    approx = np.asarray(models.VisionTransformer(**VIT_SMALL, num_classes=1000).apply(
        v, jnp.asarray(x.transpose(0, 2, 3, 1)), train=False))
    assert float(np.max(np.abs(approx - want))) > 1e-4  # the 1e-4 comparison above tells the two apart


def test_torchvision_vit_gray_new_head_and_errors(tmp_path):
    net = random_torch_vit(seed=2, image_size=32)
    sd = net.state_dict()
    v = models.load_torchvision_vit(sd, VIT_SMALL, in_channels=1, num_classes=5, rng=podlet.random.PRNGKey(1))
    assert v["params"]["embedding"]["kernel"].shape == (16, 16, 1, 48)
    np.testing.assert_allclose(np.asarray(v["params"]["embedding"]["kernel"])[..., 0, :],
                               sd["conv_proj.weight"].numpy().sum(1).transpose(1, 2, 0), rtol=1e-6)
    assert v["params"]["head"]["kernel"].shape == (48, 5) and np.abs(np.asarray(v["params"]["head"]["kernel"])).max() > 0
    # the class token sits on the patch tokens: a gray image gives torch's logits of its RGB repeat
    gray = np.random.default_rng(1).standard_normal((2, 1, 32, 32)).astype(np.float32)
    v_same = models.load_torchvision_vit(sd, VIT_SMALL, in_channels=1)
    with torch.no_grad():
        want = net(torch.from_numpy(np.repeat(gray, 3, axis=1))).numpy()
    got = np.asarray(small_vit(num_classes=1000).apply(v_same, jnp.asarray(gray.transpose(0, 2, 3, 1)), train=False))
    assert float(np.max(np.abs(got - want))) < 1e-4

    # q/k/v split: the query kernel is the first third of in_proj_weight, transposed, heads split
    w = sd["encoder.layers.encoder_layer_1.self_attention.in_proj_weight"].numpy()
    q = np.asarray(v["params"]["Transformer"]["encoderblock_1"]["MultiHeadDotProductAttention_0"]["key"]["kernel"])
    np.testing.assert_array_equal(q, w[48:96].T.reshape(48, 4, 12))

    bad = dict(sd)
    del bad["encoder.layers.encoder_layer_0.ln_2.bias"]
    bad["encoder.layers.encoder_layer_1.self_attention.in_proj_weight"] = torch.zeros(48, 48)
    bad["encoder.layers.encoder_layer_2.ln_1.weight"] = torch.zeros(48)
    with pytest.raises(podlet.PodletError) as e:
        models.load_torchvision_vit(bad, VIT_SMALL)
    msg = str(e.value)
    for needle in ["missing keys ['encoder.layers.encoder_layer_0.ln_2.bias']",
                   "unexpected keys ['encoder.layers.encoder_layer_2.ln_1.weight']",
                   "in_proj_weight: got (48, 48), expected (144, 48)"]:
        assert needle in msg, msg
    with pytest.raises(podlet.PodletError, match=r"torchvision vit_b_16 state_dict.*mis-shaped keys.*"
                                                 r"conv_proj\.weight: got \(48, 3, 16, 16\), expected \(768, 3, 16, 16\)"):
        models.load_torchvision_vit(sd, "vit_b_16")
    with pytest.raises(podlet.PodletError, match="unknown ViT arch 'vit_l_16'"):
        models.load_torchvision_vit(sd, "vit_l_16")


def test_vit_b_configs_match_torchvision_param_counts():
    # torchvision's ViT_B_16_Weights / ViT_B_32_Weights meta num_params (1000 classes, 224 px, RGB)
    spec = podlet.ShapeDtypeStruct((1, 224, 224, 3), jnp.float32)
    assert models.param_count(models.ViTB16(num_classes=1000), spec, train=False) == 86567656
    assert models.param_count(models.ViTB32(num_classes=1000), spec, train=False) == 88224232
    assert models.get_model("vit_b16").approximate_gelu is False


def test_load_pretrained_dispatches_transformers(tmp_path):
    # the torchvision name picks the loader; a full-size layout is needed for the registered names
    net = random_torch_vit(seed=3, image_size=224, arch=dict(VIT_SMALL, hidden_size=768, num_heads=12,
                                                             mlp_dim=3072, num_layers=1))
    sd = net.state_dict()
    torch.save(sd, tmp_path / "vit1.pth")
    with pytest.raises(podlet.PodletError, match=r"torchvision vit_b_16 state_dict: missing keys "
                                                 r"\['encoder\.layers\.encoder_layer_1\.ln_1\.weight'"):
        models.load_pretrained(tmp_path / "vit1.pth", "vit_b16", in_channels=1, num_classes=5)
    with pytest.raises(podlet.PodletError, match=r"torchvision swin_t state_dict: missing keys \['features"):
        models.load_pretrained(tmp_path / "vit1.pth", "swin_tiny")
    with pytest.raises(podlet.PodletError, match=r"no torchvision layout for model 'mlp'.*'swin_tiny'"):
        models.load_pretrained(tmp_path / "vit1.pth", "mlp")
