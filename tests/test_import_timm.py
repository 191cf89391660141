"""timm's ViT and Swin state_dicts into podlet.models, and ViT position embeddings resized
for another image size.

timm is not a dependency: its VisionTransformer and SwinTransformer are rebuilt here in
plain torch with timm's module names, buffers and forward math (timm/models/
vision_transformer.py and swin_transformer.py; the Swin in both key layouts: timm >= 0.9
with the patch merging at the start of stages 1..3 and ``head.fc``, and timm < 0.9 with it
at the end of stages 0..2, ``head`` and persistent index/mask buffers). Random weights, and
podlet's logits must equal torch's within 1e-4 on the same input. The torchvision layouts
are tested in tests/test_import_weights.py and tests/test_swin.py, whose twins are reused
here for the torchvision side of the position-embedding resize."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn as tnn

import podlet
import podlet.numpy as jnp
from podlet import models

from test_import_weights import VIT_SMALL, random_torch_vit, small_vit
from test_swin import max_abs, torch_window_mask


# --- timm's VisionTransformer (class token, global_pool='token'), same module names ------
class TimmAttention(tnn.Module):
    def __init__(self, dim, num_heads):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.qkv = tnn.Linear(dim, 3 * dim)
        self.proj = tnn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        attn = ((q * self.scale) @ k.transpose(-2, -1)).softmax(-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(B, N, C))


class TimmMlp(tnn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = tnn.Linear(dim, hidden)
        self.act = tnn.GELU()
        self.fc2 = tnn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class TimmViTBlock(tnn.Module):
    def __init__(self, dim, heads, mlp):
        super().__init__()
        self.norm1 = tnn.LayerNorm(dim, eps=1e-6)
        self.attn = TimmAttention(dim, heads)
        self.norm2 = tnn.LayerNorm(dim, eps=1e-6)
        self.mlp = TimmMlp(dim, mlp)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TimmPatchEmbed(tnn.Module):
    def __init__(self, in_ch, dim, patch, norm=False):
        super().__init__()
        self.proj = tnn.Conv2d(in_ch, dim, patch, patch)
        self.norm = tnn.LayerNorm(dim, eps=1e-5) if norm else tnn.Identity()

    def forward(self, x):  # NCHW -> NHWC
        return self.norm(self.proj(x).permute(0, 2, 3, 1))


class TimmViT(tnn.Module):
    def __init__(self, img, patch_size, hidden_size, num_layers, num_heads, mlp_dim, num_classes=1000, in_ch=3):
        super().__init__()
        grid = img // patch_size
        self.patch_embed = TimmPatchEmbed(in_ch, hidden_size, patch_size)
        self.cls_token = tnn.Parameter(torch.zeros(1, 1, hidden_size))
        self.pos_embed = tnn.Parameter(torch.randn(1, grid * grid + 1, hidden_size) * 0.02)
        self.blocks = tnn.Sequential(*[TimmViTBlock(hidden_size, num_heads, mlp_dim) for _ in range(num_layers)])
        self.norm = tnn.LayerNorm(hidden_size, eps=1e-6)
        self.head = tnn.Linear(hidden_size, num_classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        return self.head(self.norm(self.blocks(x))[:, 0])


def randomize(net, seed):
    """Non-trivial norms, biases, tokens and bias tables, so a wrong mapping shows."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, tnn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.2)
            if isinstance(m, (tnn.Linear, tnn.Conv2d)) and m.bias is not None:
                m.bias.normal_(0, 0.1)
            if isinstance(m, TimmMlp):  # pre-activations where the exact and tanh GELU differ
                m.fc1.weight.mul_(4.0)
            if isinstance(m, TimmWindowAttention):
                m.relative_position_bias_table.normal_(0, 1.0)
        for name in ("cls_token", "pos_embed"):
            if hasattr(net, name):
                getattr(net, name).normal_(0, 0.5)
    return net.eval()


def timm_vit(seed, img=48, num_classes=1000, arch=VIT_SMALL):
    torch.manual_seed(seed)
    return randomize(TimmViT(img, num_classes=num_classes, **arch), seed)


def timm_resample_abs_pos_embed(posemb, new_size, antialias=True):
    """timm.layers.resample_abs_pos_embed (one class token, square old grid)."""
    old = int(round((posemb.shape[1] - 1) ** 0.5))
    grid = posemb[:, 1:].reshape(1, old, old, -1).permute(0, 3, 1, 2)
    grid = F.interpolate(grid, size=new_size, mode="bicubic", antialias=antialias)
    return torch.cat([posemb[:, :1], grid.permute(0, 2, 3, 1).reshape(1, -1, posemb.shape[-1])], dim=1)


def torchvision_interpolate_embeddings(posemb, new_side):
    """torchvision.models.vision_transformer.interpolate_embeddings' resize."""
    old = int(round((posemb.shape[1] - 1) ** 0.5))
    grid = posemb[:, 1:].permute(0, 2, 1).reshape(1, -1, old, old)
    grid = F.interpolate(grid, size=new_side, mode="bicubic", align_corners=True)
    return torch.cat([posemb[:, :1], grid.reshape(1, posemb.shape[-1], -1).permute(0, 2, 1)], dim=1)


# --- timm's SwinTransformer (v1), same module and buffer names --------------------------
def relative_index(ws):
    """timm's get_relative_position_index: (N, N), N = ws * ws."""
    c = torch.stack(torch.meshgrid(torch.arange(ws), torch.arange(ws), indexing="ij")).flatten(1)
    rel = (c[:, :, None] - c[:, None, :]).permute(1, 2, 0).contiguous()
    rel[:, :, 0] += ws - 1
    rel[:, :, 1] += ws - 1
    rel[:, :, 0] *= 2 * ws - 1
    return rel.sum(-1)


class TimmWindowAttention(tnn.Module):
    def __init__(self, dim, num_heads, ws, persistent):
        super().__init__()
        self.num_heads, self.ws = num_heads, ws
        self.scale = (dim // num_heads) ** -0.5
        self.relative_position_bias_table = tnn.Parameter(torch.randn((2 * ws - 1) ** 2, num_heads) * 0.02)
        self.register_buffer("relative_position_index", relative_index(ws), persistent=persistent)
        self.qkv = tnn.Linear(dim, 3 * dim)
        self.proj = tnn.Linear(dim, dim)

    def forward(self, x, mask=None):  # x: (windows * B, N, C)
        B_, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B_, N, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4).unbind(0)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)].view(N, N, -1)
        attn = attn + bias.permute(2, 0, 1).unsqueeze(0)
        if mask is not None:
            nw = mask.shape[0]
            attn = (attn.view(-1, nw, self.num_heads, N, N) + mask.unsqueeze(1).unsqueeze(0)).view(-1, self.num_heads,
                                                                                                     N, N)
        return self.proj((attn.softmax(-1) @ v).transpose(1, 2).reshape(B_, N, -1))


def window_partition(x, ws):
    B, H, W, C = x.shape
    return x.view(B, H // ws, ws, W // ws, ws, C).permute(0, 1, 3, 2, 4, 5).reshape(-1, ws * ws, C)


def window_reverse(w, ws, H, W):
    C = w.shape[-1]
    return w.view(-1, H // ws, W // ws, ws, ws, C).permute(0, 1, 3, 2, 4, 5).reshape(-1, H, W, C)


class TimmSwinBlock(tnn.Module):
    def __init__(self, dim, res, num_heads, ws, shift, persistent):
        super().__init__()
        # timm's _calc_window_shift: a map no larger than the window is one unshifted window
        self.ws, self.shift = (res, 0) if res <= ws else (ws, shift)
        self.norm1 = tnn.LayerNorm(dim)
        self.attn = TimmWindowAttention(dim, num_heads, self.ws, persistent)
        self.norm2 = tnn.LayerNorm(dim)
        self.mlp = TimmMlp(dim, 4 * dim)
        pad = -(-res // self.ws) * self.ws
        mask = torch_window_mask(pad, pad, self.ws, [self.shift] * 2) if self.shift else None
        self.register_buffer("attn_mask", mask, persistent=persistent)

    def _attn(self, x):
        B, H, W, C = x.shape
        if self.shift:
            x = torch.roll(x, (-self.shift, -self.shift), (1, 2))
        x = F.pad(x, (0, 0, 0, (self.ws - W % self.ws) % self.ws, 0, (self.ws - H % self.ws) % self.ws))
        Hp, Wp = x.shape[1:3]
        x = window_reverse(self.attn(window_partition(x, self.ws), self.attn_mask), self.ws, Hp, Wp)[:, :H, :W]
        return torch.roll(x, (self.shift, self.shift), (1, 2)) if self.shift else x

    def forward(self, x):
        x = x + self._attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TimmPatchMerging(tnn.Module):
    """timm >= 0.9: reshape (B, H/2, 2, W/2, 2, C), permute (0, 1, 3, 4, 2, 5), flatten."""

    def __init__(self, dim):
        super().__init__()
        self.norm = tnn.LayerNorm(4 * dim)
        self.reduction = tnn.Linear(4 * dim, 2 * dim, bias=False)

    def merge(self, x):
        B, H, W, C = x.shape
        x = F.pad(x, (0, 0, 0, W % 2, 0, H % 2))
        B, H, W, C = x.shape
        return x.reshape(B, H // 2, 2, W // 2, 2, C).permute(0, 1, 3, 4, 2, 5).flatten(3)

    def forward(self, x):
        return self.reduction(self.norm(self.merge(x)))


class OldTimmPatchMerging(TimmPatchMerging):
    """timm < 0.9: x0 = x[0::2, 0::2], x1 = x[1::2, 0::2], x2 = x[0::2, 1::2], x3 = x[1::2, 1::2]."""

    def merge(self, x):
        return torch.cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]], -1)


class TimmSwinStage(tnn.Module):
    def __init__(self, dim, res, depth, num_heads, ws, merge, old):
        super().__init__()
        self.old = old
        if old:  # blocks at (dim, res), then the merging into the next stage
            self.blocks = tnn.Sequential(*[TimmSwinBlock(dim, res, num_heads, ws, 0 if j % 2 == 0 else ws // 2, True)
                                           for j in range(depth)])
            if merge:
                self.downsample = OldTimmPatchMerging(dim)
        else:    # the merging from the previous stage (dim / 2 at 2 * res), then the blocks
            self.downsample = TimmPatchMerging(dim // 2) if merge else tnn.Identity()
            self.blocks = tnn.Sequential(*[TimmSwinBlock(dim, res, num_heads, ws, 0 if j % 2 == 0 else ws // 2, False)
                                           for j in range(depth)])

    def forward(self, x):
        if self.old:
            x = self.blocks(x)
            return self.downsample(x) if hasattr(self, "downsample") else x
        return self.blocks(self.downsample(x))


class TimmClassifierHead(tnn.Module):
    def __init__(self, c, num_classes):
        super().__init__()
        self.fc = tnn.Linear(c, num_classes)

    def forward(self, x):
        return self.fc(x.mean((1, 2)))


class TimmSwin(tnn.Module):
    def __init__(self, img, embed_dim, depths, num_heads, window_size, num_classes=1000, in_ch=3, old=False):
        super().__init__()
        self.patch_embed = TimmPatchEmbed(in_ch, embed_dim, 4, norm=True)
        n = len(depths)
        self.layers = tnn.Sequential(*[
            TimmSwinStage(embed_dim * 2 ** s, img // 4 // 2 ** s, depths[s], num_heads[s], window_size,
                          merge=(s < n - 1) if old else s > 0, old=old) for s in range(n)])
        nf = embed_dim * 2 ** (n - 1)
        self.norm = tnn.LayerNorm(nf)
        self.old = old
        self.head = tnn.Linear(nf, num_classes) if old else TimmClassifierHead(nf, num_classes)

    def forward(self, x):
        x = self.norm(self.layers(self.patch_embed(x)))
        return self.head(x.mean((1, 2))) if self.old else self.head(x)


SWIN_SMALL = {"embed_dim": 24, "depths": (2, 2, 2, 2), "num_heads": (1, 2, 3, 4), "window_size": 7}


def timm_swin(seed, img, old=False, num_classes=1000, **kw):
    torch.manual_seed(seed)
    return randomize(TimmSwin(img, num_classes=num_classes, old=old, **{**SWIN_SMALL, **kw}), seed)


def podlet_swin(num_classes=1000, in_channels=3, **kw):
    a = {**SWIN_SMALL, **kw}
    return models.SwinTransformer(num_classes=num_classes, in_channels=in_channels, stochastic_depth_rate=0.0, **a)


def nhwc(x):
    return jnp.asarray(np.ascontiguousarray(x.transpose(0, 2, 3, 1)))


def shapes(tree):
    return podlet.tree_util.tree_map(lambda a: tuple(a.shape), dict(tree))


def init_shapes(model, size, channels):
    return shapes(podlet.eval_shape(lambda k: model.init(k, jnp.zeros((1, size, size, channels)), train=False),
                                    podlet.random.PRNGKey(0)))


# ------------------------------------------------------------------------------- ViT

def test_timm_vit_logits_match(tmp_path):
    net = timm_vit(seed=1)
    torch.save(net.state_dict(), tmp_path / "vit.pth")
    x = np.random.default_rng(0).standard_normal((2, 3, 48, 48)).astype(np.float32)
    with torch.no_grad():
        want = net(torch.from_numpy(x)).numpy()
    v = models.load_timm_vit(str(tmp_path / "vit.pth"), VIT_SMALL, in_channels=3)
    model = small_vit(num_classes=1000, in_channels=3)
    assert shapes(v) == init_shapes(model, 48, 3)
    got = np.asarray(model.apply(v, nhwc(x), train=False))
    assert max_abs(got, want) < 1e-4 and np.std(want) > 0.1, max_abs(got, want)
    # qkv rows are [query; key; value], each head-major: the value kernel of head 2
    w = net.blocks[1].attn.qkv.weight.detach().numpy()
    val = np.asarray(v["params"]["Transformer"]["encoderblock_1"]["MultiHeadDotProductAttention_0"]["value"]["kernel"])
    np.testing.assert_array_equal(val[:, 2], w[96 + 24:96 + 36].T)
    # timm's GELU is the exact one: the tanh form is outside the tolerance
    approx = np.asarray(models.VisionTransformer(**VIT_SMALL, num_classes=1000).apply(v, nhwc(x), train=False))
    assert max_abs(approx, want) > 1e-4


def test_timm_vit_gray_and_new_head():
    net = timm_vit(seed=2)
    sd = net.state_dict()
    v = models.load_timm_vit(sd, VIT_SMALL, in_channels=1, num_classes=5, rng=podlet.random.PRNGKey(3))
    np.testing.assert_allclose(np.asarray(v["params"]["embedding"]["kernel"])[..., 0, :],
                               sd["patch_embed.proj.weight"].numpy().sum(1).transpose(1, 2, 0), rtol=1e-6)
    head = np.asarray(v["params"]["head"]["kernel"])
    assert head.shape == (48, 5) and 0 < np.abs(head).max() < 0.1  # truncated normal(0.02)
    np.testing.assert_array_equal(np.asarray(v["params"]["head"]["bias"]), np.zeros(5, np.float32))
    again = models.load_timm_vit(sd, VIT_SMALL, in_channels=1, num_classes=5, rng=podlet.random.PRNGKey(3))
    np.testing.assert_array_equal(head, np.asarray(again["params"]["head"]["kernel"]))
    # a gray image gives torch's logits of its RGB repeat
    gray = np.random.default_rng(1).standard_normal((2, 1, 48, 48)).astype(np.float32)
    with torch.no_grad():
        want = net(torch.from_numpy(np.repeat(gray, 3, axis=1))).numpy()
    got = np.asarray(small_vit(num_classes=1000).apply(models.load_timm_vit(sd, VIT_SMALL), nhwc(gray), train=False))
    assert max_abs(got, want) < 1e-4


def test_timm_vit_errors_named_in_one_message():
    sd = timm_vit(seed=0).state_dict()
    del sd["blocks.0.norm2.bias"]
    sd["blocks.1.attn.qkv.weight"] = torch.zeros(48, 48)
    sd["fc_norm.weight"] = torch.zeros(48)  # a global_pool='avg' ViT: not the class-token layout
    with pytest.raises(podlet.PodletError) as e:
        models.load_timm_vit(sd, VIT_SMALL)
    msg = str(e.value)
    for needle in ["is not a timm ViT state_dict", "missing keys ['blocks.0.norm2.bias']",
                   "unexpected keys ['fc_norm.weight']", "blocks.1.attn.qkv.weight: got (48, 48), expected (144, 48)"]:
        assert needle in msg, msg
    with pytest.raises(podlet.PodletError, match=r"timm vit_tiny_patch16_224 state_dict: missing keys "
                                                 r"\['blocks\.2\.norm1\.weight'.*patch_embed\.proj\.weight: got "
                                                 r"\(48, 3, 16, 16\), expected \(192, 3, 16, 16\)"):
        models.load_timm_vit(timm_vit(seed=0).state_dict(), "vit_tiny_patch16_224")
    with pytest.raises(podlet.PodletError, match="unknown timm ViT arch 'vit_large_patch16_224'"):
        models.load_timm_vit(sd, "vit_large_patch16_224")
    with pytest.raises(podlet.PodletError, match=r"image_size 8x8 is smaller than one 16x16 patch"):
        models.load_timm_vit(timm_vit(seed=0).state_dict(), VIT_SMALL, image_size=8)
    with pytest.raises(podlet.PodletError, match=r"image_size: expected a positive int or \(rows, columns\).*'224'"):
        models.load_timm_vit(timm_vit(seed=0).state_dict(), VIT_SMALL, image_size="224")


def test_vit_configs_match_timm_archs():
    # timm's vit_*_patch16_224 are podlet's ViTTiny / ViTSmall / ViTB16 (5.72M / 22.05M / 86.57M params)
    spec = podlet.ShapeDtypeStruct((1, 224, 224, 3), jnp.float32)
    for ctor, name, count in [(models.ViTTiny, "vit_tiny_patch16_224", 5717416),
                              (models.ViTSmall, "vit_small_patch16_224", 22050664),
                              (models.ViTB16, "vit_base_patch16_224", 86567656)]:
        assert models.param_count(ctor(num_classes=1000), spec, train=False) == count
        layout = models.import_weights.timm_vit_layout(name)
        assert sum(int(np.prod(s)) for s, _ in layout.values()) == count


# ------------------------------------------------------------------------------- Swin

@pytest.mark.parametrize("old,size,ws", [(False, 224, 7), (True, 128, 4)])
def test_timm_swin_logits_match(tmp_path, old, size, ws):
    """timm >= 0.9 at 224 px with 7x7 windows (maps 56, 28, 14, 7: the last one a single
    unshifted window) and timm < 0.9 at 128 px with 4x4 windows (32, 16, 8, 4), its buffers
    saved in the state_dict."""
    net = timm_swin(seed=1, img=size, old=old, window_size=ws)
    sd = net.state_dict()
    assert ("layers.0.downsample.reduction.weight" in sd) == old and ("head.fc.weight" in sd) == (not old)
    assert ("layers.0.blocks.1.attn_mask" in sd) == old
    assert ("layers.0.blocks.0.attn.relative_position_index" in sd) == old
    torch.save(sd, tmp_path / "swin.pth")
    x = np.random.default_rng(0).standard_normal((2, 3, size, size)).astype(np.float32)
    with torch.no_grad():
        want = net(torch.from_numpy(x)).numpy()
    arch = {**SWIN_SMALL, "window_size": ws}
    v = models.load_timm_swin(str(tmp_path / "swin.pth"), arch, in_channels=3)
    model = podlet_swin(window_size=ws)
    assert shapes(v) == init_shapes(model, size, 3)
    got = np.asarray(model.apply(v, nhwc(x), train=False))
    assert max_abs(got, want) < 1e-4 and np.std(want) > 0.1, max_abs(got, want)


def test_patch_merging_orders_agree():
    """timm >= 0.9's reshape/permute, timm < 0.9's x0..x3 and podlet's PatchMerging
    concatenate the 2x2 neighbourhood in the same order ((0,0), (1,0), (0,1), (1,1))."""
    x = torch.randn(2, 6, 10, 5)
    new, old = TimmPatchMerging(5), OldTimmPatchMerging(5)
    np.testing.assert_array_equal(new.merge(x).numpy(), old.merge(x).numpy())
    m = new.merge(x).numpy()
    np.testing.assert_array_equal(m[0, 1, 2, 5:10], x[0, 3, 4].numpy())  # (row 1, column 0) of block (1, 2)
    np.testing.assert_array_equal(m[0, 1, 2, 10:15], x[0, 2, 5].numpy())  # (row 0, column 1)
    randomize(new, 0)
    v = {"params": {"norm": {"scale": jnp.asarray(new.norm.weight.detach().numpy()),
                             "bias": jnp.asarray(new.norm.bias.detach().numpy())},
                    "reduction": {"kernel": jnp.asarray(new.reduction.weight.detach().numpy().T)}}}
    got = np.asarray(models.swin.PatchMerging().apply(v, jnp.asarray(x.numpy())))
    with torch.no_grad():
        want = new(x).numpy()
    assert max_abs(got, want) < 1e-5


def test_timm_swin_gray_and_new_head():
    net = timm_swin(seed=3, img=128, window_size=4)
    sd = net.state_dict()
    arch = {**SWIN_SMALL, "window_size": 4}
    v = models.load_timm_swin(sd, arch, in_channels=1, num_classes=5, rng=podlet.random.PRNGKey(7))
    np.testing.assert_allclose(np.asarray(v["params"]["patch_embed"]["kernel"])[:, :, 0],
                               sd["patch_embed.proj.weight"].numpy().sum(1).transpose(1, 2, 0), rtol=1e-6)
    assert v["params"]["head"]["kernel"].shape == (192, 5)
    np.testing.assert_array_equal(np.asarray(v["params"]["head"]["bias"]), np.zeros(5, np.float32))
    gray = np.random.default_rng(4).standard_normal((2, 1, 128, 128)).astype(np.float32)
    with torch.no_grad():
        want = net(torch.from_numpy(np.repeat(gray, 3, axis=1))).numpy()
    got = np.asarray(podlet_swin(in_channels=1, window_size=4).apply(models.load_timm_swin(sd, arch), nhwc(gray),
                                                                       train=False))
    assert max_abs(got, want) < 1e-4


def test_timm_swin_errors_named_in_one_message():
    arch = {**SWIN_SMALL, "window_size": 4}
    sd = timm_swin(seed=0, img=128, window_size=4).state_dict()
    del sd["layers.2.blocks.1.attn.qkv.bias"]
    sd["layers.3.blocks.0.mlp.fc1.weight"] = torch.zeros(7, 192)
    sd["layers.1.downsample.reduction.bias"] = torch.zeros(48)
    with pytest.raises(podlet.PodletError) as e:
        models.load_timm_swin(sd, arch)
    msg = str(e.value)
    for needle in ["is not a timm Swin state_dict", "missing keys ['layers.2.blocks.1.attn.qkv.bias']",
                   "unexpected keys ['layers.1.downsample.reduction.bias']",
                   "layers.3.blocks.0.mlp.fc1.weight: got (7, 192), expected (768, 192)"]:
        assert needle in msg, msg
    # older timm's layout read as timm >= 0.9's: every merging is in the wrong place, named at once
    old = timm_swin(seed=0, img=128, old=True, window_size=4).state_dict()
    with pytest.raises(podlet.PodletError) as e:
        models.load_timm_swin(old, arch, downsample="start", head="head")
    msg = str(e.value)
    for needle in ["missing keys ['layers.3.downsample.reduction.weight', 'layers.3.downsample.norm.weight', "
                   "'layers.3.downsample.norm.bias']",
                   "unexpected keys ['layers.0.downsample.norm.weight', 'layers.0.downsample.norm.bias', "
                   "'layers.0.downsample.reduction.weight']",
                   "layers.1.downsample.reduction.weight: got (96, 192), expected (48, 96)"]:
        assert needle in msg, msg
    with pytest.raises(podlet.PodletError, match=r"downsample='middle': expected 'start'"):
        models.load_timm_swin(old, arch, downsample="middle")
    bad = dict(old)
    bad["layers.1.blocks.0.attn.relative_position_index"] = torch.zeros(16, 16, dtype=torch.int64)
    with pytest.raises(podlet.PodletError, match=r"layers\.1\.blocks\.0\.attn\.relative_position_index.*4x4 windows"):
        models.load_timm_swin(bad, arch)
    with pytest.raises(podlet.PodletError, match="unknown timm Swin arch 'swin_t'"):
        models.load_timm_swin(old, "swin_t")


def test_timm_swin_tiny_layout_is_podlets_swin_t():
    layout = models.import_weights.timm_swin_layout("swin_tiny_patch4_window7_224")
    params = sum(int(np.prod(s)) for k, (s, t) in layout.items() if t)
    assert params == 28288354  # timm's and torchvision's swin_t count
    assert "layers.1.downsample.reduction.weight" in layout and "layers.0.downsample.norm.weight" not in layout
    old = models.import_weights.timm_swin_layout("swin_tiny_patch4_window7_224", downsample="end", head="head")
    assert layout["layers.1.downsample.reduction.weight"][0] == old["layers.0.downsample.reduction.weight"][0]
    assert "head.weight" in old and "head.fc.weight" in layout


# ------------------------------------------------------------------- load_pretrained

def test_load_pretrained_reads_timm_vit_tiny(tmp_path):
    """The train.init_from entry point: a full-size timm vit_tiny_patch16_224 file for
    model 'vit_tiny' at 224 px, and resized to a 192 px config (image_size as
    data.image_size gives it)."""
    torch.manual_seed(0)
    net = TimmViT(224, 16, 192, 12, 3, 768).eval()
    torch.save(net.state_dict(), tmp_path / "vit_tiny.pth")
    v = models.load_pretrained(tmp_path / "vit_tiny.pth", "vit_tiny", in_channels=3)
    model = models.ViTTiny(num_classes=1000, in_channels=3, approximate_gelu=False)
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    with torch.no_grad():
        want = net(torch.from_numpy(x)).numpy()
    got = np.asarray(model.apply(v, nhwc(x), train=False))
    assert max_abs(got, want) < 1e-4 and np.std(want) > 0.05, (max_abs(got, want), np.std(want))

    v = models.load_pretrained(tmp_path / "vit_tiny.pth", "vit_tiny", in_channels=1, num_classes=5,
                               image_size=[192, 192, 1])
    assert shapes(v) == init_shapes(models.ViTTiny(num_classes=5), 192, 1)
    out = np.asarray(models.ViTTiny(num_classes=5).apply(v, jnp.zeros((2, 192, 192, 1)) + 0.5, train=False))
    assert out.shape == (2, 5) and np.all(np.isfinite(out))


def test_load_pretrained_detects_the_layout(tmp_path):
    # timm and torchvision ViT-B files (one block) for 'vit_b16': each is read with its own layout
    big = dict(VIT_SMALL, hidden_size=768, num_heads=12, mlp_dim=3072, num_layers=1)
    torch.manual_seed(0)
    torch.save(TimmViT(224, **big).state_dict(), tmp_path / "timm.pth")
    torch.save(random_torch_vit(seed=0, image_size=224, arch=big).state_dict(), tmp_path / "tv.pth")
    with pytest.raises(podlet.PodletError, match=r"timm vit_base_patch16_224 state_dict: missing keys "
                                                 r"\['blocks\.1\.norm1\.weight'"):
        models.load_pretrained(tmp_path / "timm.pth", "vit_b16")
    with pytest.raises(podlet.PodletError, match=r"torchvision vit_b_16 state_dict: missing keys "
                                                 r"\['encoder\.layers\.encoder_layer_1\.ln_1\.weight'"):
        models.load_pretrained(tmp_path / "tv.pth", "vit_base_patch16_224")
    # torchvision has no ViT-Tiny: its file is checked against timm's layout and every key named
    with pytest.raises(podlet.PodletError, match=r"timm vit_tiny_patch16_224 state_dict: missing keys "
                                                 r"\['cls_token'.*unexpected keys \['class_token'"):
        models.load_pretrained(tmp_path / "tv.pth", "vit_tiny")
    # a timm Swin for swin_tiny (both layouts), a timm ViT for swin_small
    for old in (False, True):
        torch.save(timm_swin(seed=0, img=128, old=old, window_size=4).state_dict(), tmp_path / "swin.pth")
        with pytest.raises(podlet.PodletError, match=r"timm swin_tiny_patch4_window7_224 state_dict: missing keys "
                                                     r"\['layers\.2\.blocks\.2\.norm1\.weight'"):
            models.load_pretrained(tmp_path / "swin.pth", "swin_tiny")
    with pytest.raises(podlet.PodletError, match=r"timm swin_small_patch4_window7_224 state_dict: missing keys "
                                                 r"\['patch_embed\.norm\.weight'.*unexpected keys \['cls_token'"):
        models.load_pretrained(tmp_path / "timm.pth", "swin_small")
    with pytest.raises(podlet.PodletError, match=r"no torchvision layout for model 'mlp' and no timm one"):
        models.load_pretrained(tmp_path / "timm.pth", "mlp")


def test_load_pretrained_reads_timm_swin_tiny(tmp_path):
    torch.manual_seed(0)
    net = TimmSwin(224, 96, (2, 2, 6, 2), (3, 6, 12, 24), 7)
    torch.save(net.state_dict(), tmp_path / "swin_tiny.pth")
    v = models.load_pretrained(tmp_path / "swin_tiny.pth", "swin_tiny", in_channels=1, num_classes=5)
    assert shapes(v) == init_shapes(models.SwinT(num_classes=5), 224, 1)
    np.testing.assert_array_equal(np.asarray(v["params"]["merge_2"]["reduction"]["kernel"]),
                                  net.layers[3].downsample.reduction.weight.detach().numpy().T)
    np.testing.assert_array_equal(np.asarray(v["params"]["stage_2_block_5"]["mlp"]["fc2"]["bias"]),
                                  net.layers[2].blocks[5].mlp.fc2.bias.detach().numpy())


# ----------------------------------------------------------- position-embedding resize

@pytest.mark.parametrize("old,new", [((14, 14), (24, 24)), ((14, 14), (12, 12)), ((7, 7), (5, 9)),
                                     ((4, 6), (9, 2)), ((14, 14), (3, 3))])
def test_resample_pos_embed_matches_torch_interpolate(old, new):
    """224 -> 384 and 224 -> 192 px at /16, a non-square target, a non-square source, a
    large shrink; against F.interpolate on the same numbers."""
    rng = np.random.default_rng(sum(old) + sum(new))
    pe = rng.standard_normal((1, 1 + old[0] * old[1], 8)).astype(np.float32)
    grid = torch.from_numpy(pe[:, 1:]).reshape(1, *old, 8).permute(0, 3, 1, 2)
    outs = []
    for align_corners, antialias in [(True, False), (False, True), (False, False)]:
        got = models.resample_pos_embed(pe, new, old_grid=old, align_corners=align_corners, antialias=antialias)
        want = F.interpolate(grid, size=new, mode="bicubic", align_corners=align_corners, antialias=antialias)
        want = want.permute(0, 2, 3, 1).reshape(1, -1, 8).numpy()
        assert got.shape == (1, 1 + new[0] * new[1], 8) and got.dtype == np.float32
        np.testing.assert_array_equal(got[:, :1], pe[:, :1])  # the class token is kept
        assert max_abs(got[:, 1:], want) < 1e-5, (align_corners, antialias, max_abs(got[:, 1:], want))
        outs.append(got)
    # the three conventions are different functions: the 1e-5 comparisons tell them apart
    assert max_abs(outs[0], outs[1]) > 1e-3 and max_abs(outs[1], outs[2]) > 1e-3


def test_resample_pos_embed_helpers():
    pe = np.random.default_rng(0).standard_normal((1, 1 + 16, 4)).astype(np.float32)
    np.testing.assert_array_equal(models.resample_pos_embed(pe, 4), pe)  # same grid: unchanged
    # a square grid is read from the length; prefix tokens other than one are kept too
    two = models.resample_pos_embed(pe, 6, num_prefix_tokens=0, old_grid=(1, 17), antialias=True)
    assert two.shape == (1, 36, 4)
    with pytest.raises(podlet.PodletError, match=r"15 grid tokens .* are not a square grid; pass old_grid"):
        models.resample_pos_embed(pe[:, :16], 5)
    with pytest.raises(podlet.PodletError, match=r"expected position embeddings of shape \(1, tokens, width\)"):
        models.resample_pos_embed(pe[0], 5)
    with pytest.raises(podlet.PodletError, match="antialias=True takes align_corners=False"):
        models.resample_pos_embed(pe, 5, antialias=True, align_corners=True)
    with pytest.raises(podlet.PodletError, match=r"old_grid 3x3 has 9 tokens, the embeddings 16"):
        models.resample_pos_embed(pe, 5, old_grid=3)
    with pytest.raises(podlet.PodletError, match=r"new_grid: expected a positive int.*got 0"):
        models.resample_pos_embed(pe, 0)


@pytest.mark.parametrize("src,dst", [(48, 80), (80, 48)])
def test_timm_vit_at_another_image_size(src, dst):
    """A timm checkpoint of a 3x3 (or 5x5) grid in a model at 80 (48) px: podlet's logits
    equal timm's model at that size, whose pos_embed timm resamples on load
    (resample_abs_pos_embed, antialias=True)."""
    net = timm_vit(seed=5, img=src)
    sd = net.state_dict()
    at_dst = timm_vit(seed=0, img=dst)
    sd_dst = dict(sd, pos_embed=timm_resample_abs_pos_embed(sd["pos_embed"], (dst // 16,) * 2))
    at_dst.load_state_dict(sd_dst)
    x = np.random.default_rng(2).standard_normal((2, 3, dst, dst)).astype(np.float32)
    with torch.no_grad():
        want = at_dst(torch.from_numpy(x)).numpy()
    v = models.load_timm_vit(sd, VIT_SMALL, in_channels=3, image_size=dst)
    model = small_vit(num_classes=1000, in_channels=3)
    assert shapes(v) == init_shapes(model, dst, 3)
    got = np.asarray(model.apply(v, nhwc(x), train=False))
    assert max_abs(got, want) < 1e-4 and np.std(want) > 0.1, max_abs(got, want)
    # timm's older resize (no antialias) gives other embeddings
    plain = models.load_timm_vit(sd, VIT_SMALL, in_channels=3, image_size=dst, antialias=False)
    pe = lambda t: np.asarray(t["params"]["Transformer"]["posembed_input"]["pos_embedding"])  # noqa: E731
    assert max_abs(pe(plain), pe(v)) > 1e-3
    np.testing.assert_allclose(pe(plain), timm_resample_abs_pos_embed(sd["pos_embed"], (dst // 16,) * 2,
                                                                      antialias=False).numpy(), atol=1e-5)


def test_torchvision_vit_at_another_image_size():
    """torchvision's vit at 48 px (3x3) run at 80 px (5x5) after interpolate_embeddings."""
    net = random_torch_vit(seed=6, image_size=48)
    sd = net.state_dict()
    at_80 = random_torch_vit(seed=0, image_size=80)
    at_80.load_state_dict(dict(sd, **{"encoder.pos_embedding": torchvision_interpolate_embeddings(
        sd["encoder.pos_embedding"], 5)}))
    x = np.random.default_rng(3).standard_normal((2, 3, 80, 80)).astype(np.float32)
    with torch.no_grad():
        want = at_80(torch.from_numpy(x)).numpy()
    v = models.load_torchvision_vit(sd, VIT_SMALL, in_channels=3, image_size=(80, 80))
    got = np.asarray(small_vit(num_classes=1000, in_channels=3).apply(v, nhwc(x), train=False))
    assert max_abs(got, want) < 1e-4 and np.std(want) > 0.1, max_abs(got, want)
    # a grid of another shape than torchvision's squares runs too (96 x 48 px: 6 x 3 patches)
    v = models.load_torchvision_vit(sd, VIT_SMALL, in_channels=1, num_classes=5, image_size=(96, 48))
    assert v["params"]["Transformer"]["posembed_input"]["pos_embedding"].shape == (1, 19, 48)
    out = np.asarray(small_vit(num_classes=5).apply(v, jnp.ones((1, 96, 48, 1)), train=False))
    assert out.shape == (1, 5) and np.all(np.isfinite(out))


def test_train_init_from_timm_vit_tiny_at_another_image_size(tmp_path):
    """train.init_from with a timm vit_tiny file (224 px, 14x14 grid): the config accepts
    it for model vit_tiny, and the loop's _init_from resizes the position embeddings to
    the run's 32 px (2x2 grid) as timm would, replacing the head with a 5-class one."""
    import os
    from podlet.training import config as C, loop as L, steps as S
    torch.manual_seed(0)
    net = TimmViT(224, 16, 192, 12, 3, 768).eval()
    path = tmp_path / "vit_tiny.pth"
    torch.save(net.state_dict(), path)
    cfg_file = os.path.join(os.path.dirname(__file__), "..", "configs", "experiments", "vit_tiny_baseline.yaml")
    cfg = C.load_config(cfg_file, [f"train.init_from={path}", "data.image_size=[32, 32, 1]", "data.scale=0.01",
                                   "train.batch_size=8"], num_devices=8)
    assert cfg.model.architecture == "vit_tiny"
    model = S.build_model(cfg)
    state = S.create_train_state(cfg, model, S.create_learning_rate_schedule(cfg.train, 10), podlet.random.PRNGKey(0))
    new = L._init_from(state, cfg.train.init_from, cfg)
    pos = next(np.asarray(v) for k, v in podlet.traverse_util.flatten_dict(new.params).items()
               if "pos" in "/".join(k))
    grid = net.pos_embed.detach()[:, 1:]
    want = timm_resample_abs_pos_embed(net.pos_embed.detach(), (2, 2)).numpy()
    assert pos.shape == want.shape == (1, 5, 192) and grid.shape[1] == 196
    np.testing.assert_allclose(pos, want, atol=5e-6)
    assert podlet.tree_util.tree_structure(new.params) == podlet.tree_util.tree_structure(state.params)
