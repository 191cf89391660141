"""ViT-Tiny/16, ViT-Small/16 and Swin-T for bench/train_step.py, in Flax (flax.linen) and in
plain torch: the architectures of podlet.models.ViTTiny / ViTSmall / SwinT, layer for layer
and parameter for parameter (train_step.py asserts equal counts before it times anything).

Every dropout rate and the stochastic depth are 0 in all three frameworks (as for the
ResNet rows), so the step has no random draws; podlet's SwinT is built with
``stochastic_depth_rate=0.0`` to match (torchvision's swin_t trains with 0.2).

ViT (podlet.models.vit): a patch_size x patch_size convolution with that stride, a class
token, learned position embeddings, pre-LN encoder blocks (LayerNorm eps 1e-6 -> multi-head
self-attention with biased q/k/v/out projections -> residual; LayerNorm -> Dense -> tanh
GELU -> Dense -> residual), a final LayerNorm and a linear head on the class token. The
residual stream is float32; LayerNorm, attention and MLP compute in the compute dtype.
torchvision has no ViT-Tiny/Small; the torch version is torchvision's VisionTransformer
layout (nn.MultiheadAttention, need_weights=False) with podlet's tanh GELU.

Swin-T (podlet.models.swin, torchvision's swin_t v1): a 4x4 patch partition + LayerNorm,
stages of (2, 2, 6, 2) blocks at widths 96 * 2**s with (3, 6, 12, 24) heads, 7x7 window
attention with a relative position bias, every second block shifted by 3 with torchvision's
-100 mask, patch merging between stages, exact GELU, LayerNorm eps 1e-5, final LayerNorm,
global average pool, linear head. Maps smaller than a multiple of the window are padded at
the bottom/right as torchvision does, so any size >= 4 px runs. The torch version follows
torchvision/models/swin_transformer.py (the mask rebuilt every forward, as there).
"""
import functools

import numpy as np

NUM_CLASSES = 5
VIT = {"vit_tiny": dict(patch=16, width=192, layers=12, heads=3, mlp=768),
       "vit_small": dict(patch=16, width=384, layers=12, heads=6, mlp=1536)}
SWIN = {"swin_tiny": dict(embed=96, depths=(2, 2, 6, 2), heads=(3, 6, 12, 24), window=7)}
TRANSFORMERS = tuple(VIT) + tuple(SWIN)


def podlet_model(name, dtype):
    """podlet's own model for `name` (dropout and stochastic depth 0)."""
    from podlet import models
    if name == "vit_tiny":
        return models.ViTTiny(num_classes=NUM_CLASSES, in_channels=1, dtype=dtype)
    if name == "vit_small":
        return models.ViTSmall(num_classes=NUM_CLASSES, in_channels=1, dtype=dtype)
    if name == "swin_tiny":
        return models.SwinT(num_classes=NUM_CLASSES, in_channels=1, stochastic_depth_rate=0.0, dtype=dtype)
    raise ValueError(name)


# --- shared window geometry (numpy; podlet.models.swin's, as torchvision computes it) ---
# Copied, not imported: the JAX and torch workers of train_step.py never load podlet's
# runtime (its OpenMP pool beside torch's would be part of what they time).
def relative_position_index(ws):
    ys, xs = np.meshgrid(np.arange(ws), np.arange(ws), indexing="ij")
    ys, xs = ys.reshape(-1), xs.reshape(-1)
    dy = ys[:, None] - ys[None, :] + ws - 1
    dx = xs[:, None] - xs[None, :] + ws - 1
    return (dy * (2 * ws - 1) + dx).reshape(-1).astype(np.int32)


def shifted_window_mask(h, w, ws, sh, sw):
    """(windows, N, N) additive mask: -100 between tokens the cyclic shift brought together."""
    label = np.zeros((h, w), np.float32)
    count = 0
    for h0, h1 in ((0, -ws), (-ws, -sh), (-sh, None)):
        for w0, w1 in ((0, -ws), (-ws, -sw), (-sw, None)):
            label[h0:h1, w0:w1] = count
            count += 1
    label = label.reshape(h // ws, ws, w // ws, ws).transpose(0, 2, 1, 3).reshape(-1, ws * ws)
    diff = label[:, None, :] - label[:, :, None]
    return np.where(diff != 0, np.float32(-100.0), np.float32(0.0))


def window_geometry(h, w, ws, shift):
    ph, pw = h + (ws - h % ws) % ws, w + (ws - w % ws) % ws
    return ph, pw, (0 if ws >= ph else shift), (0 if ws >= pw else shift)


# ---------------------------------------------------------------------------------
# Flax
# ---------------------------------------------------------------------------------
def flax_model(name, cdt):
    """The Flax twin of podlet_model(name); `cdt` the compute dtype (params float32)."""
    return _flax_vit(VIT[name], cdt) if name in VIT else _flax_swin(SWIN[name], cdt)


def _flax_vit(cfg, cdt):
    import jax.numpy as jnp
    import flax.linen as nn

    class Block(nn.Module):
        @nn.compact
        def __call__(self, inputs):
            x = nn.LayerNorm(dtype=cdt)(inputs)
            x = nn.MultiHeadDotProductAttention(num_heads=cfg["heads"], dtype=cdt,
                                                kernel_init=nn.initializers.xavier_uniform(),
                                                deterministic=True)(x, x)
            x = x + inputs
            dense = functools.partial(nn.Dense, dtype=cdt, kernel_init=nn.initializers.xavier_uniform(),
                                      bias_init=nn.initializers.normal(stddev=1e-6))
            y = nn.LayerNorm(dtype=cdt)(x)
            y = dense(x.shape[-1])(nn.gelu(dense(cfg["mlp"])(y), approximate=True))
            return x + y

    class ViT(nn.Module):
        @nn.compact
        def __call__(self, x, train):
            p = cfg["patch"]
            x = nn.Conv(cfg["width"], (p, p), strides=(p, p), padding="VALID", dtype=cdt, name="embedding")(x)
            n, h, w, c = x.shape
            x = jnp.reshape(x, (n, h * w, c))
            cls = self.param("cls", nn.initializers.zeros, (1, 1, c))
            x = jnp.concatenate([jnp.tile(cls, (n, 1, 1)), x], axis=1)
            x = x + self.param("pos_embedding", nn.initializers.normal(stddev=0.02), (1,) + x.shape[1:])
            for i in range(cfg["layers"]):
                x = Block(name=f"encoderblock_{i}")(x)
            x = nn.LayerNorm(dtype=cdt, name="encoder_norm")(x)
            x = nn.Dense(NUM_CLASSES, dtype=cdt, kernel_init=nn.initializers.zeros, name="head")(x[:, 0])
            return jnp.asarray(x, jnp.float32)

    return ViT()


def _flax_swin(cfg, cdt):
    import jax.numpy as jnp
    import flax.linen as nn

    dinit = nn.initializers.truncated_normal(stddev=0.02)
    dense = functools.partial(nn.Dense, dtype=cdt, kernel_init=dinit, bias_init=nn.initializers.zeros)
    norm = functools.partial(nn.LayerNorm, epsilon=1e-5, dtype=cdt)

    class WindowAttention(nn.Module):
        heads: int
        shift: int

        @nn.compact
        def __call__(self, x):
            b, h, w, c = x.shape
            ws, heads, hd = cfg["window"], self.heads, c // self.heads
            ph, pw, sh, sw = window_geometry(h, w, ws, self.shift)
            x = jnp.pad(x, ((0, 0), (0, ph - h), (0, pw - w), (0, 0)))
            if sh or sw:
                x = jnp.roll(x, (-sh, -sw), axis=(1, 2))
            nh, nw, n = ph // ws, pw // ws, ws * ws
            x = jnp.reshape(jnp.transpose(jnp.reshape(x, (b, nh, ws, nw, ws, c)), (0, 1, 3, 2, 4, 5)),
                            (b * nh * nw, n, c))
            qkv = jnp.reshape(dense(3 * c, name="qkv")(x), (b * nh * nw, n, 3, heads, hd))
            q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
            q = q * jnp.asarray(hd ** -0.5, q.dtype)
            attn = jnp.einsum("bqhd,bkhd->bhqk", q, k)
            table = self.param("relative_position_bias_table", dinit, ((2 * ws - 1) ** 2, heads))
            bias = jnp.take(table, jnp.asarray(relative_position_index(ws)), axis=0)
            bias = jnp.transpose(jnp.reshape(bias, (n, n, heads)), (2, 0, 1))
            attn = jnp.asarray(attn, jnp.float32) + bias
            if sh or sw:
                mask = jnp.asarray(shifted_window_mask(ph, pw, ws, sh, sw))
                attn = jnp.reshape(jnp.reshape(attn, (b, nh * nw, heads, n, n)) + mask[None, :, None],
                                   (b * nh * nw, heads, n, n))
            attn = jnp.asarray(nn.softmax(attn, axis=-1), cdt)
            x = jnp.reshape(jnp.einsum("bhqk,bkhd->bqhd", attn, v), (b * nh * nw, n, c))
            x = dense(c, name="proj")(x)
            x = jnp.reshape(jnp.transpose(jnp.reshape(x, (b, nh, nw, ws, ws, c)), (0, 1, 3, 2, 4, 5)),
                            (b, ph, pw, c))
            if sh or sw:
                x = jnp.roll(x, (sh, sw), axis=(1, 2))
            return x[:, :h, :w, :]

    class Block(nn.Module):
        heads: int
        shift: int

        @nn.compact
        def __call__(self, x):
            x = x + WindowAttention(self.heads, self.shift, name="attn")(norm(name="norm1")(x))
            y = norm(name="norm2")(x)
            y = dense(x.shape[-1], name="fc2")(nn.gelu(dense(4 * x.shape[-1], name="fc1")(y), approximate=False))
            return x + y

    class Merge(nn.Module):
        @nn.compact
        def __call__(self, x):
            b, h, w, c = x.shape
            x = jnp.pad(x, ((0, 0), (0, h % 2), (0, w % 2), (0, 0)))
            h2, w2 = (h + 1) // 2, (w + 1) // 2
            x = jnp.reshape(jnp.transpose(jnp.reshape(x, (b, h2, 2, w2, 2, c)), (0, 1, 3, 4, 2, 5)), (b, h2, w2, 4 * c))
            x = norm(name="norm")(x)
            return nn.Dense(2 * c, use_bias=False, dtype=cdt, kernel_init=dinit, name="reduction")(x)

    class Swin(nn.Module):
        @nn.compact
        def __call__(self, x, train):
            x = nn.Conv(cfg["embed"], (4, 4), strides=(4, 4), padding="VALID", dtype=cdt, name="patch_embed")(x)
            x = jnp.asarray(norm(name="patch_norm")(x), jnp.float32)
            ws = cfg["window"]
            for s, (depth, heads) in enumerate(zip(cfg["depths"], cfg["heads"])):
                for j in range(depth):
                    x = Block(heads, 0 if j % 2 == 0 else ws // 2, name=f"stage_{s}_block_{j}")(x)
                if s < len(cfg["depths"]) - 1:
                    x = jnp.asarray(Merge(name=f"merge_{s}")(x), jnp.float32)
            x = jnp.mean(jnp.asarray(norm(name="norm")(x), jnp.float32), axis=(1, 2))
            return jnp.asarray(dense(NUM_CLASSES, name="head")(x), jnp.float32)

    return Swin()


# ---------------------------------------------------------------------------------
# plain torch
# ---------------------------------------------------------------------------------
def torch_model(name):
    """The torch twin of podlet_model(name) (float32 params; bf16 through autocast)."""
    return _torch_vit(VIT[name]) if name in VIT else _torch_swin(SWIN[name])


def _torch_vit(cfg):
    import torch
    import torch.nn as tnn
    import torch.nn.functional as F

    class Block(tnn.Module):
        def __init__(self, d):
            super().__init__()
            self.ln_1 = tnn.LayerNorm(d, eps=1e-6)
            self.self_attention = tnn.MultiheadAttention(d, cfg["heads"], batch_first=True)
            self.ln_2 = tnn.LayerNorm(d, eps=1e-6)
            self.fc1 = tnn.Linear(d, cfg["mlp"])
            self.fc2 = tnn.Linear(cfg["mlp"], d)

        def forward(self, inp):
            x = self.ln_1(inp)
            x, _ = self.self_attention(x, x, x, need_weights=False)
            x = x + inp
            return x + self.fc2(F.gelu(self.fc1(self.ln_2(x)), approximate="tanh"))

    class ViT(tnn.Module):
        def __init__(self):
            super().__init__()
            d, p = cfg["width"], cfg["patch"]
            self.patch = p
            self.conv_proj = tnn.Conv2d(1, d, p, p)
            self.class_token = tnn.Parameter(torch.zeros(1, 1, d))
            self.pos_embedding = None  # (1, tokens, d), made for the input size by build()
            self.layers = tnn.Sequential(*[Block(d) for _ in range(cfg["layers"])])
            self.ln = tnn.LayerNorm(d, eps=1e-6)
            self.head = tnn.Linear(d, NUM_CLASSES)
            tnn.init.zeros_(self.head.weight)
            tnn.init.zeros_(self.head.bias)

        def build(self, size):
            tokens = (size // self.patch) ** 2 + 1
            self.pos_embedding = tnn.Parameter(torch.empty(1, tokens, cfg["width"]).normal_(std=0.02))
            return self

        def forward(self, x):
            x = self.conv_proj(x).flatten(2).transpose(1, 2)
            x = torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embedding
            x = self.ln(self.layers(x))
            return self.head(x[:, 0])

    return ViT()


def _torch_swin(cfg):
    import torch
    import torch.nn as tnn
    import torch.nn.functional as F

    def window_mask(ph, pw, ws, shift):
        """torchvision's attention mask of shifted windows (built in torch every forward, as there)."""
        m = torch.zeros((ph, pw))
        count = 0
        for h in ((0, -ws), (-ws, -shift[0]), (-shift[0], None)):
            for w in ((0, -ws), (-ws, -shift[1]), (-shift[1], None)):
                m[h[0]:h[1], w[0]:w[1]] = count
                count += 1
        nw = (ph // ws) * (pw // ws)
        m = m.view(ph // ws, ws, pw // ws, ws).permute(0, 2, 1, 3).reshape(nw, ws * ws)
        m = m.unsqueeze(1) - m.unsqueeze(2)
        return m.masked_fill(m != 0, -100.0).masked_fill(m == 0, 0.0)

    class WindowAttention(tnn.Module):
        def __init__(self, dim, ws, shift, heads):
            super().__init__()
            self.ws, self.shift, self.heads = ws, shift, heads
            self.qkv = tnn.Linear(dim, 3 * dim)
            self.proj = tnn.Linear(dim, dim)
            self.relative_position_bias_table = tnn.Parameter(torch.empty((2 * ws - 1) ** 2, heads))
            tnn.init.trunc_normal_(self.relative_position_bias_table, std=0.02)
            self.register_buffer("relative_position_index",
                                 torch.from_numpy(relative_position_index(ws)).long(), persistent=False)

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
                mask = window_mask(ph, pw, ws, shift).to(attn.device)
                attn = (attn.view(B, nw, self.heads, n, n) + mask.unsqueeze(1).unsqueeze(0)).view(-1, self.heads, n, n)
            x = (attn.softmax(-1) @ v).transpose(1, 2).reshape(x.size(0), n, C)
            x = self.proj(x).view(B, ph // ws, pw // ws, ws, ws, C).permute(0, 1, 3, 2, 4, 5).reshape(B, ph, pw, C)
            if sum(shift):
                x = torch.roll(x, (shift[0], shift[1]), (1, 2))
            return x[:, :H, :W, :].contiguous()

    class Block(tnn.Module):
        def __init__(self, dim, heads, ws, shift):
            super().__init__()
            self.norm1 = tnn.LayerNorm(dim, eps=1e-5)
            self.attn = WindowAttention(dim, ws, shift, heads)
            self.norm2 = tnn.LayerNorm(dim, eps=1e-5)
            self.mlp = tnn.Sequential(tnn.Linear(dim, 4 * dim), tnn.GELU(), tnn.Linear(4 * dim, dim))

        def forward(self, x):
            x = x + self.attn(self.norm1(x))
            return x + self.mlp(self.norm2(x))

    class Merge(tnn.Module):
        def __init__(self, dim):
            super().__init__()
            self.reduction = tnn.Linear(4 * dim, 2 * dim, bias=False)
            self.norm = tnn.LayerNorm(4 * dim, eps=1e-5)

        def forward(self, x):
            H, W = x.shape[-3:-1]
            x = F.pad(x, (0, 0, 0, W % 2, 0, H % 2))
            x = torch.cat([x[..., 0::2, 0::2, :], x[..., 1::2, 0::2, :], x[..., 0::2, 1::2, :],
                           x[..., 1::2, 1::2, :]], -1)
            return self.reduction(self.norm(x))

    class Permute(tnn.Module):
        def forward(self, x):
            return x.permute(0, 2, 3, 1)

    class Swin(tnn.Module):
        def __init__(self):
            super().__init__()
            e, ws = cfg["embed"], cfg["window"]
            layers = [tnn.Sequential(tnn.Conv2d(1, e, 4, 4), Permute(), tnn.LayerNorm(e, eps=1e-5))]
            for s, (d, h) in enumerate(zip(cfg["depths"], cfg["heads"])):
                dim = e * 2 ** s
                layers.append(tnn.Sequential(*[Block(dim, h, ws, 0 if j % 2 == 0 else ws // 2) for j in range(d)]))
                if s < len(cfg["depths"]) - 1:
                    layers.append(Merge(dim))
            self.features = tnn.Sequential(*layers)
            nf = e * 2 ** (len(cfg["depths"]) - 1)
            self.norm = tnn.LayerNorm(nf, eps=1e-5)
            self.head = tnn.Linear(nf, NUM_CLASSES)
            for m in self.modules():  # torchvision's init
                if isinstance(m, tnn.Linear):
                    tnn.init.trunc_normal_(m.weight, std=0.02)
                    if m.bias is not None:
                        tnn.init.zeros_(m.bias)

        def build(self, size):
            return self

        def forward(self, x):
            x = self.norm(self.features(x))
            return self.head(x.mean((1, 2)))

    return Swin()
