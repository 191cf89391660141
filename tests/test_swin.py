"""podlet.models.SwinTransformer against torchvision's Swin (v1), rebuilt here in plain
torch with torchvision's module names (torchvision is not installable next to the test
venv's torch): the same state_dict layout loads through ``load_torchvision_swin`` and must
give torch's logits. Reduced widths/depths and 64-112 px images keep the file fast; the
full-size swin_t / swin_s are checked by parameter count (``eval_shape``)."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn as tnn

import podlet
import podlet.numpy as jnp
from podlet import models
from podlet.models import swin


# --- torchvision.models.swin_transformer (v1), same module and buffer names -----------
def torch_window_mask(pad_h, pad_w, ws, shift):
    """torchvision's attention mask of shifted windows, computed with torch slicing."""
    m = torch.zeros((pad_h, pad_w))
    count = 0
    for h in ((0, -ws), (-ws, -shift[0]), (-shift[0], None)):
        for w in ((0, -ws), (-ws, -shift[1]), (-shift[1], None)):
            m[h[0]:h[1], w[0]:w[1]] = count
            count += 1
    nw = (pad_h // ws) * (pad_w // ws)
    m = m.view(pad_h // ws, ws, pad_w // ws, ws).permute(0, 2, 1, 3).reshape(nw, ws * ws)
    m = m.unsqueeze(1) - m.unsqueeze(2)
    return m.masked_fill(m != 0, -100.0).masked_fill(m == 0, 0.0)


class TorchWindowAttention(tnn.Module):
    def __init__(self, dim, ws, shift, heads):
        super().__init__()
        self.ws, self.shift, self.heads = ws, shift, heads
        self.qkv = tnn.Linear(dim, 3 * dim)
        self.proj = tnn.Linear(dim, dim)
        self.relative_position_bias_table = tnn.Parameter(torch.randn((2 * ws - 1) ** 2, heads) * 0.02)
        c = torch.stack(torch.meshgrid(torch.arange(ws), torch.arange(ws), indexing="ij")).flatten(1)
        rel = (c[:, :, None] - c[:, None, :]).permute(1, 2, 0).contiguous()
        rel[:, :, 0] += ws - 1
        rel[:, :, 1] += ws - 1
        rel[:, :, 0] *= 2 * ws - 1
        self.register_buffer("relative_position_index", rel.sum(-1).flatten())

    def forward(self, x):
        B, H, W, C = x.shape
        ws = self.ws
        x = F.pad(x, (0, 0, 0, (ws - W % ws) % ws, 0, (ws - H % ws) % ws))
        _, ph, pw, _ = x.shape
        shift = [0 if ws >= ph else self.shift, 0 if ws >= pw else self.shift]
        if sum(shift):
            x = torch.roll(x, (-shift[0], -shift[1]), (1, 2))
        nw = (ph // ws) * (pw // ws)
        x = x.view(B, ph // ws, ws, pw // ws, ws, C).permute(0, 1, 3, 2, 4, 5).reshape(B * nw, ws * ws, C)
        q, k, v = self.qkv(x).reshape(x.size(0), x.size(1), 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        attn = (q * (C // self.heads) ** -0.5) @ k.transpose(-2, -1)
        n = ws * ws
        bias = self.relative_position_bias_table[self.relative_position_index].view(n, n, -1).permute(2, 0, 1)
        attn = attn + bias.unsqueeze(0)
        if sum(shift):
            mask = torch_window_mask(ph, pw, ws, shift)
            attn = (attn.view(B, nw, self.heads, n, n) + mask.unsqueeze(1).unsqueeze(0)).view(-1, self.heads, n, n)
        x = (attn.softmax(-1) @ v).transpose(1, 2).reshape(x.size(0), n, C)
        x = self.proj(x).view(B, ph // ws, pw // ws, ws, ws, C).permute(0, 1, 3, 2, 4, 5).reshape(B, ph, pw, C)
        if sum(shift):
            x = torch.roll(x, (shift[0], shift[1]), (1, 2))
        return x[:, :H, :W, :].contiguous()


class TorchSwinBlock(tnn.Module):
    def __init__(self, dim, heads, ws, shift, mlp_ratio=4.0):
        super().__init__()
        self.norm1 = tnn.LayerNorm(dim, eps=1e-5)
        self.attn = TorchWindowAttention(dim, ws, shift, heads)
        self.norm2 = tnn.LayerNorm(dim, eps=1e-5)
        hidden = int(dim * mlp_ratio)
        self.mlp = tnn.Sequential(tnn.Linear(dim, hidden), tnn.GELU(), tnn.Dropout(0.0), tnn.Linear(hidden, dim),
                                  tnn.Dropout(0.0))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TorchPatchMerging(tnn.Module):
    def __init__(self, dim):
        super().__init__()
        self.reduction = tnn.Linear(4 * dim, 2 * dim, bias=False)
        self.norm = tnn.LayerNorm(4 * dim, eps=1e-5)

    def forward(self, x):
        H, W = x.shape[-3:-1]
        x = F.pad(x, (0, 0, 0, W % 2, 0, H % 2))
        x = torch.cat([x[..., 0::2, 0::2, :], x[..., 1::2, 0::2, :], x[..., 0::2, 1::2, :], x[..., 1::2, 1::2, :]], -1)
        return self.reduction(self.norm(x))


class Permute(tnn.Module):
    def forward(self, x):
        return x.permute(0, 2, 3, 1)


class TorchSwin(tnn.Module):
    def __init__(self, embed_dim=96, depths=(2, 2, 6, 2), heads=(3, 6, 12, 24), ws=7, num_classes=1000, in_ch=3):
        super().__init__()
        layers = [tnn.Sequential(tnn.Conv2d(in_ch, embed_dim, 4, 4), Permute(), tnn.LayerNorm(embed_dim, eps=1e-5))]
        for s, (d, h) in enumerate(zip(depths, heads)):
            dim = embed_dim * 2 ** s
            layers.append(tnn.Sequential(*[TorchSwinBlock(dim, h, ws, 0 if j % 2 == 0 else ws // 2)
                                           for j in range(d)]))
            if s < len(depths) - 1:
                layers.append(TorchPatchMerging(dim))
        self.features = tnn.Sequential(*layers)
        nf = embed_dim * 2 ** (len(depths) - 1)
        self.norm = tnn.LayerNorm(nf, eps=1e-5)
        self.avgpool = tnn.AdaptiveAvgPool2d(1)
        self.head = tnn.Linear(nf, num_classes)

    def forward(self, x):
        x = self.norm(self.features(x)).permute(0, 3, 1, 2)
        return self.head(torch.flatten(self.avgpool(x), 1))


SMALL = dict(embed_dim=24, depths=(2, 2, 2, 2), heads=(1, 2, 3, 4), ws=7)


def random_torch_swin(seed, num_classes=1000, **kw):
    torch.manual_seed(seed)
    net = TorchSwin(num_classes=num_classes, **{**SMALL, **kw})
    with torch.no_grad():  # non-trivial LayerNorm affines and biases, so a wrong mapping shows
        for m in net.modules():
            if isinstance(m, tnn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.2)
            if isinstance(m, tnn.Linear) and m.bias is not None:
                m.bias.normal_(0, 0.1)
            if isinstance(m, TorchWindowAttention):
                m.relative_position_bias_table.normal_(0, 1.0)
    return net.eval()


def podlet_small(**kw):
    cfg = {**SMALL, **kw}
    return models.SwinTransformer(num_classes=cfg.pop("num_classes", 1000), embed_dim=cfg["embed_dim"],
                                  depths=cfg["depths"], num_heads=cfg["heads"], window_size=cfg["ws"],
                                  stochastic_depth_rate=cfg.get("sd", 0.0), in_channels=cfg.get("in_ch", 3),
                                  dtype=cfg.get("dtype", jnp.float32))


def max_abs(a, b):
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


# ------------------------------------------------------------------------------- tests

@pytest.mark.parametrize("size", [112, 60])
def test_logits_match_torch(tmp_path, size):
    """112: stage maps 28, 14, 7, 4 (shifted windows with masks; a 7x7 map is one
    unshifted window; 4x4 is padded to 7x7); 60: 15, 8, 4, 2 (padded windows that are
    still shifted: 15 -> 21 and 8 -> 14; patch merging pads 15 -> 16)."""
    net = random_torch_swin(seed=1)
    path = tmp_path / "swin.pth"
    torch.save(net.state_dict(), path)
    x = np.random.default_rng(0).standard_normal((2, 3, size, size)).astype(np.float32)
    with torch.no_grad():
        want = net(torch.from_numpy(x)).numpy()
    v = models.load_torchvision_swin(str(path), arch=_small_arch(), in_channels=3)
    model = podlet_small()
    init = podlet.eval_shape(lambda k: model.init(k, jnp.zeros((1, size, size, 3)), train=False),
                             podlet.random.PRNGKey(0))
    assert podlet.tree_util.tree_map(lambda a: a.shape, v) == podlet.tree_util.tree_map(lambda a: a.shape, dict(init))
    got = np.asarray(model.apply(v, jnp.asarray(x.transpose(0, 2, 3, 1)), train=False))
    assert max_abs(got, want) < 1e-4, max_abs(got, want)
    assert np.std(want) > 0.1  # the comparison is not between two near-constant outputs


def _small_arch():
    return {"embed_dim": SMALL["embed_dim"], "depths": SMALL["depths"], "num_heads": SMALL["heads"],
            "window_size": SMALL["ws"]}


def test_param_counts_match_torchvision():
    # torchvision's own figures (Swin_T_Weights / Swin_S_Weights meta num_params)
    spec = podlet.ShapeDtypeStruct((1, 224, 224, 3), jnp.float32)
    assert models.param_count(models.SwinT(num_classes=1000, in_channels=3), spec, train=False) == 28288354
    assert models.param_count(models.SwinS(num_classes=1000, in_channels=3), spec, train=False) == 49606258
    # and the rebuilt torch twin counts the same (minus the index buffers, which are not params)
    tw = TorchSwin(num_classes=1000)
    assert sum(p.numel() for p in tw.parameters()) == 28288354
    # grayscale: the patch embedding has one input channel
    gray = podlet.ShapeDtypeStruct((1, 224, 224, 1), jnp.float32)
    assert models.param_count(models.SwinT(num_classes=5), gray, train=False) == \
        28288354 - 2 * 96 * 16 - 995 * 769  # 2 fewer input channels, 995 fewer classes


def test_defaults_are_torchvisions():
    for ctor, depths, sd in [(models.SwinT, (2, 2, 6, 2), 0.2), (models.SwinS, (2, 2, 18, 2), 0.3)]:
        m = ctor()
        assert (m.embed_dim, tuple(m.depths), tuple(m.num_heads), m.window_size, m.mlp_ratio, m.patch_size,
                m.stochastic_depth_rate) == (96, depths, (3, 6, 12, 24), 7, 4.0, 4, sd)
    assert models.get_model("swin_tiny", num_classes=5).depths == (2, 2, 6, 2)
    assert models.get_model("swin_small", num_classes=5).depths == (2, 2, 18, 2)


@pytest.mark.parametrize("h,w,shift", [(14, 14, (3, 3)), (21, 28, (3, 3)), (14, 7, (3, 0)), (8, 12, (2, 2))])
def test_shifted_window_mask_matches_torchvision(h, w, shift):
    ws = 7 if shift != (2, 2) else 4
    got = swin.shifted_window_mask(h, w, ws, shift)
    np.testing.assert_array_equal(got, torch_window_mask(h, w, ws, list(shift)).numpy())
    # independently: 0 exactly where both tokens lie in the same region of the rolled map
    assert got.shape == ((h // ws) * (w // ws), ws * ws, ws * ws)
    assert set(np.unique(got)) <= {0.0, -100.0} and (got == 0).any()
    assert (got[0] == 0).all()  # the top-left window holds one region only


def test_relative_position_index_matches_torchvision():
    for ws in (7, 4, 1):
        np.testing.assert_array_equal(swin.relative_position_index(ws),
                                      TorchWindowAttention(8, ws, 0, 1).relative_position_index.numpy())


def test_train_mode_drop_path_and_gradients():
    # two stages: 16x16 (padded to 21x21) and 8x8 (padded to 14x14) maps, both with shifted blocks
    model = podlet_small(sd=0.5, in_ch=1, num_classes=5, depths=(2, 2), heads=(1, 2))
    x = jnp.asarray(np.random.default_rng(2).standard_normal((4, 64, 64, 1)).astype(np.float32))
    v = model.init(podlet.random.PRNGKey(0), x, train=False)
    ev = np.asarray(model.apply(v, x, train=False))
    a = np.asarray(model.apply(v, x, train=True, rngs={"dropout": podlet.random.PRNGKey(5)}))
    b = np.asarray(model.apply(v, x, train=True, rngs={"dropout": podlet.random.PRNGKey(5)}))
    c = np.asarray(model.apply(v, x, train=True, rngs={"dropout": podlet.random.PRNGKey(6)}))
    np.testing.assert_array_equal(a, b)            # deterministic given the rng
    assert max_abs(a, ev) > 1e-3 and max_abs(a, c) > 1e-3  # and drop path really drops
    with pytest.raises(Exception, match="dropout"):
        model.apply(v, x, train=True)               # train mode needs the 'dropout' rng

    def loss(p):
        out = model.apply({"params": p}, x, train=True, rngs={"dropout": podlet.random.PRNGKey(5)})
        return jnp.mean(out ** 2)
    g = podlet.jit(podlet.grad(loss))(v["params"])
    leaves = podlet.tree_util.tree_flatten_with_path(g)[0]
    assert len(leaves) == len(podlet.tree_util.tree_leaves(v["params"]))
    for path, leaf in leaves:
        arr = np.asarray(leaf)
        assert np.all(np.isfinite(arr)), podlet.tree_util.keystr(path)
    table = np.asarray(g["stage_0_block_1"]["attn"]["relative_position_bias_table"])
    assert np.abs(table).max() > 0  # the gather into the bias table passes gradients back


def test_bf16_forward_close_to_f32():
    model32 = podlet_small(in_ch=1, num_classes=5)
    model16 = podlet_small(in_ch=1, num_classes=5, dtype=jnp.bfloat16)
    x = jnp.asarray(np.random.default_rng(3).standard_normal((2, 64, 64, 1)).astype(np.float32))
    v = model32.init(podlet.random.PRNGKey(1), x, train=False)
    a = np.asarray(model32.apply(v, x, train=False))
    b = model16.apply(v, x, train=False)
    assert b.dtype == jnp.float32 and np.all(np.isfinite(np.asarray(b)))
    assert max_abs(b, a) < 5e-2 * max(1.0, float(np.abs(a).max()))
    assert podlet.tree_util.tree_leaves(v)[0].dtype == jnp.float32


def test_bad_configs_are_named():
    x = jnp.zeros((1, 64, 64, 1))
    with pytest.raises(ValueError, match=r"depths \[2, 2\].*num_heads \[3\]"):
        models.SwinTransformer(depths=(2, 2), num_heads=(3,)).init(podlet.random.PRNGKey(0), x, train=False)
    with pytest.raises(ValueError, match="not divisible by num_heads=5"):
        models.SwinTransformer(embed_dim=24, depths=(1,), num_heads=(5,)).init(podlet.random.PRNGKey(0), x,
                                                                              train=False)
    with pytest.raises(ValueError, match="2x2 image is smaller than one 4x4 patch"):
        models.SwinT().init(podlet.random.PRNGKey(0), jnp.zeros((1, 2, 2, 1)), train=False)
    with pytest.raises(ValueError, match="window_size must be a positive integer"):
        swin.relative_position_index(0)


def test_gray_patch_embedding_and_new_head(tmp_path):
    net = random_torch_swin(seed=3)
    gray = np.random.default_rng(4).standard_normal((2, 1, 64, 64)).astype(np.float32)
    feats = {}
    net.head.register_forward_hook(lambda m, i, o: feats.setdefault("x", i[0].detach().numpy()))
    with torch.no_grad():  # a gray image seen as R=G=B by torch
        net(torch.from_numpy(np.repeat(gray, 3, axis=1)))
    torch.save(net.state_dict(), tmp_path / "swin.pth")
    v = models.load_torchvision_swin(tmp_path / "swin.pth", _small_arch(), in_channels=1, num_classes=5,
                                     rng=podlet.random.PRNGKey(7))
    assert v["params"]["patch_embed"]["kernel"].shape == (4, 4, 1, 24)
    np.testing.assert_allclose(np.asarray(v["params"]["patch_embed"]["kernel"])[:, :, 0],
                               net.features[0][0].weight.detach().numpy().sum(1).transpose(1, 2, 0), rtol=1e-6)
    assert v["params"]["head"]["kernel"].shape == (192, 5)
    np.testing.assert_array_equal(np.asarray(v["params"]["head"]["bias"]), np.zeros(5, np.float32))
    v2 = models.load_torchvision_swin(tmp_path / "swin.pth", _small_arch(), in_channels=1, num_classes=5,
                                      rng=podlet.random.PRNGKey(7))
    np.testing.assert_array_equal(np.asarray(v["params"]["head"]["kernel"]), np.asarray(v2["params"]["head"]["kernel"]))
    # the features under the new head are torch's features of the RGB-repeated image
    model = podlet_small(in_ch=1, num_classes=5)
    _, state = model.apply(v, jnp.asarray(gray.transpose(0, 2, 3, 1)), train=False,
                           capture_intermediates=lambda mdl, name: mdl.name == "head", mutable=["intermediates"])
    logits = np.asarray(state["intermediates"]["head"]["__call__"][0])
    np.testing.assert_allclose(logits, feats["x"] @ np.asarray(v["params"]["head"]["kernel"]), rtol=1e-4, atol=1e-4)


def test_swin_key_errors_named_in_one_message():
    sd = random_torch_swin(seed=0).state_dict()
    del sd["features.3.1.attn.qkv.bias"]
    sd["features.5.0.mlp.0.weight"] = torch.zeros(7, 96)
    sd["features.2.reduction.bias"] = torch.zeros(48)
    with pytest.raises(podlet.PodletError) as e:
        models.load_torchvision_swin(sd, _small_arch())
    msg = str(e.value)
    for needle in ["missing keys ['features.3.1.attn.qkv.bias']", "unexpected keys ['features.2.reduction.bias']",
                   "features.5.0.mlp.0.weight: got (7, 96), expected (384, 96)"]:
        assert needle in msg, msg
    # a small checkpoint is not swin_t: every swin_t key it lacks and every shape that differs is named
    with pytest.raises(podlet.PodletError, match=r"torchvision swin_t.*missing keys.*features\.5\.2\.norm1\.weight"):
        models.load_torchvision_swin(random_torch_swin(seed=0).state_dict(), "swin_t")
    with pytest.raises(podlet.PodletError, match="unknown Swin arch 'swin_b'"):
        models.load_torchvision_swin(sd, "swin_b")
    with pytest.raises(podlet.PodletError, match=r"mapping of exactly .*'window_size'"):
        models.load_torchvision_swin(sd, {"embed_dim": 24})
    bad = random_torch_swin(seed=0).state_dict()
    bad["features.1.0.attn.relative_position_index"] = torch.zeros(2401, dtype=torch.int64)
    with pytest.raises(podlet.PodletError, match=r"features\.1\.0\.attn\.relative_position_index.*7x7 windows"):
        models.load_torchvision_swin(bad, _small_arch())


@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16])
@pytest.mark.parametrize("hw,ws,shift", [((8, 8), 4, 0), ((8, 8), 4, 2), ((10, 9), 4, 2)],
                         ids=["plain", "shifted", "padded_shifted"])
def test_fused_window_attention_matches_op_by_op(dtype, hw, ws, shift):
    """The windows on the fused primitive (bias + boolean shift mask, "auto"'s choice for
    7x7 windows) against torchvision's op-by-op algorithm (fused_attention=False): the
    output and the gradients of the input, qkv/proj and the bias table."""
    attn = swin.WindowAttention(num_heads=2, window_size=ws, shift_size=shift, dtype=dtype)
    rng = np.random.default_rng(4)
    x = jnp.asarray(rng.standard_normal((3, *hw, 16)).astype(np.float32))
    v = attn.init(podlet.random.PRNGKey(2), x, deterministic=True)
    v = podlet.tree_util.tree_map(lambda p: p + 0.3 * jnp.asarray(rng.standard_normal(p.shape), p.dtype), v)
    w = jnp.asarray(rng.standard_normal((3, *hw, 16)).astype(np.float32))

    def loss(v, x):
        return jnp.sum(jnp.asarray(attn.apply(v, x, deterministic=True), jnp.float32) * w)

    before = podlet.config.fused_attention
    try:
        got = {}
        for fused in (True, False):
            podlet.config.update("fused_attention", fused)
            assert ("dot_product_attention" in str(podlet.make_jaxpr(loss)(v, x))) == fused
            got[fused] = (attn.apply(v, x, deterministic=True), *podlet.jit(podlet.grad(loss, argnums=(0, 1)))(v, x))
    finally:
        podlet.config.update("fused_attention", before)
    tol = 1e-4 if dtype == np.float32 else 3e-2
    for a, b in zip(podlet.tree_util.tree_leaves(got[True]), podlet.tree_util.tree_leaves(got[False])):
        a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
        assert max_abs(a, b) <= tol * max(1.0, float(np.abs(b).max())), (max_abs(a, b), np.abs(b).max())
