"""Swin Transformers (https://arxiv.org/abs/2103.14030), as torchvision's ``swin_t`` / ``swin_s`` (v1).

A 4x4 patch partition (a convolution with stride 4, then LayerNorm), four stages of
Swin blocks at 1/4, 1/8, 1/16 and 1/32 of the image side with patch merging between
them, a final LayerNorm, a global average pool and a linear head:

    model = SwinT(num_classes=5, dtype=jnp.bfloat16)
    variables = model.init(key, jnp.zeros((1, 224, 224, 1)), train=False)
    logits = model.apply(variables, images, train=True, rngs={"dropout": key})

A block is pre-LN: LayerNorm -> window attention -> DropPath -> residual; LayerNorm ->
MLP (exact GELU) -> DropPath -> residual. Attention runs inside non-overlapping
``window_size`` x ``window_size`` windows, with a learned relative position bias per head;
every second block of a stage first rolls the map by ``window_size // 2`` (``jnp.roll``)
so that windows straddle the previous block's boundaries, and masks the pairs of tokens
the roll brought together from opposite borders (``shifted_window_mask``).

The algorithm follows torchvision's (torchvision/models/swin_transformer.py) step for
step, so its state_dicts load with ``podlet.models.load_torchvision_swin`` and give
torch's logits (timm's load with ``load_timm_swin``, with timm's logits where every
stage's map is a multiple of the window, as at 224 px): a feature map whose side is not a
multiple of the window is padded with zeros at the bottom/right before the windows are
cut (the padded tokens take part in attention, as in torchvision); a map no larger than
one window is not shifted; patch merging pads odd sides with a zero row/column.
Stochastic depth rises linearly from 0 at the first block to ``stochastic_depth_rate`` at
the last, over all stages (torchvision's "row" mode: one keep/drop draw per example, from
the ``'dropout'`` rng).

Parameter names follow torchvision's modules (``norm1``, ``attn/qkv``, ``attn/proj``,
``attn/relative_position_bias_table``, ``norm2``, ``mlp/fc1``, ``mlp/fc2``, ``merge_{s}/norm``,
``merge_{s}/reduction``, ``norm``, ``head``); the blocks of stage ``s`` are
``stage_{s}_block_{j}``. Initialisers are torchvision's: truncated N(0, 0.02) for every
Dense kernel and for the bias table, zero Dense biases; the patch embedding keeps
``nn.Conv``'s default. The residual stream is float32; LayerNorm, attention and the MLP
compute in ``dtype`` (the attention softmax in float32). The windows' attention runs as the
fused ``dot_product_attention`` primitive (bias and boolean shift mask, f32 logits, the
scores never stored) wherever ``config.fused_attention`` allows: by default for windows of
at most 64 tokens; ``fused_attention=False`` restores torchvision's op-by-op rounding.
"""
import functools
from typing import Any, Sequence

import numpy as np

from .. import numpy as jnp
from .. import nn
from .._src import attention as _attention

__all__ = ["relative_position_index", "shifted_window_mask", "WindowAttention", "SwinMlp", "SwinBlock",
           "PatchMerging", "SwinTransformer", "SwinT", "SwinS"]

_dense_init = nn.initializers.truncated_normal(stddev=0.02)


def relative_position_index(window_size: int) -> np.ndarray:
    """``(N * N,)`` int32 index into the ``((2w - 1)^2, heads)`` bias table, N = w * w:
    the entry for query token i and key token j (row-major inside the window) is
    ``(dy + w - 1) * (2w - 1) + (dx + w - 1)`` with (dy, dx) = pos(i) - pos(j)
    (torchvision's ``relative_position_index`` buffer)."""
    w = int(window_size)
    if w < 1:
        raise ValueError(f"window_size must be a positive integer, got {window_size!r}")
    ys, xs = np.meshgrid(np.arange(w), np.arange(w), indexing="ij")
    ys, xs = ys.reshape(-1), xs.reshape(-1)
    dy = ys[:, None] - ys[None, :] + w - 1
    dx = xs[:, None] - xs[None, :] + w - 1
    return (dy * (2 * w - 1) + dx).reshape(-1).astype(np.int32)


def shifted_window_mask(height: int, width: int, window_size: int, shift: Sequence[int]) -> np.ndarray:
    """The additive attention mask of shifted windows on a (padded) ``height`` x ``width``
    map: ``(num_windows, N, N)`` float32, 0 where query and key tokens came from the same
    region of the map before the cyclic shift, -100 where the roll brought them together
    from opposite borders. Regions are cut by the slices ``[0, -w)``, ``[-w, -s)``,
    ``[-s, end)`` along each axis (w the window, s that axis's shift), as torchvision does.
    `height` and `width` must be multiples of `window_size`."""
    w = int(window_size)
    sh, sw = (int(s) for s in shift)
    if height % w or width % w:
        raise ValueError(f"shifted_window_mask: the map {height}x{width} is not a multiple of the window {w}")
    label = np.zeros((height, width), np.float32)
    count = 0
    for h0, h1 in ((0, -w), (-w, -sh), (-sh, None)):
        for w0, w1 in ((0, -w), (-w, -sw), (-sw, None)):
            label[h0:h1, w0:w1] = count
            count += 1
    label = label.reshape(height // w, w, width // w, w).transpose(0, 2, 1, 3).reshape(-1, w * w)
    diff = label[:, None, :] - label[:, :, None]
    return np.where(diff != 0, np.float32(-100.0), np.float32(0.0)).astype(np.float32)


def _window_geometry(h, w, window_size, shift_size):
    """(padded h, padded w, row shift, column shift) of torchvision's shifted_window_attention."""
    ws = window_size
    ph, pw = h + (ws - h % ws) % ws, w + (ws - w % ws) % ws
    return ph, pw, (0 if ws >= ph else shift_size), (0 if ws >= pw else shift_size)


class WindowAttention(nn.Module):
    """Multi-head self-attention inside (shifted) windows, with relative position bias.

    Takes and returns ``(B, H, W, C)`` maps. Attributes: ``num_heads``, ``window_size``,
    ``shift_size`` (0 for plain windows), ``attention_dropout_rate`` (on the attention
    weights), ``dropout_rate`` (after the output projection)."""
    num_heads: int
    window_size: int = 7
    shift_size: int = 0
    attention_dropout_rate: float = 0.0
    dropout_rate: float = 0.0
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, *, deterministic: bool):
        if x.ndim != 4:
            raise ValueError(f"WindowAttention expects (batch, height, width, channels) maps, got shape {x.shape}")
        b, h, w, c = x.shape
        if c % self.num_heads:
            raise ValueError(f"WindowAttention: {c} channels are not divisible by num_heads={self.num_heads}")
        ws, heads, hd = self.window_size, self.num_heads, c // self.num_heads
        ph, pw, sh, sw = _window_geometry(h, w, ws, self.shift_size)
        x = jnp.pad(x, ((0, 0), (0, ph - h), (0, pw - w), (0, 0)))
        if sh or sw:
            x = jnp.roll(x, (-sh, -sw), axis=(1, 2))
        nh, nw, n = ph // ws, pw // ws, ws * ws
        # (B, nh, ws, nw, ws, C) -> (B * windows, ws * ws, C)
        x = jnp.reshape(jnp.transpose(jnp.reshape(x, (b, nh, ws, nw, ws, c)), (0, 1, 3, 2, 4, 5)),
                        (b * nh * nw, n, c))
        dense = functools.partial(nn.Dense, dtype=self.dtype, param_dtype=self.param_dtype,
                                  kernel_init=_dense_init, bias_init=nn.initializers.zeros)
        qkv = jnp.reshape(dense(3 * c, name="qkv")(x), (b * nh * nw, n, 3, heads, hd))
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]            # (Bw, N, heads, hd)
        table = self.param("relative_position_bias_table", _dense_init, ((2 * ws - 1) ** 2, heads),
                           self.param_dtype)
        bias = jnp.take(table, jnp.asarray(relative_position_index(ws)), axis=0)      # (N * N, heads)
        bias = jnp.transpose(jnp.reshape(bias, (n, n, heads)), (2, 0, 1))
        dropout_active = self.attention_dropout_rate > 0.0 and not deterministic
        if _attention.fusable(n * n, dropout_active):
            # The fused primitive: the same softmax(q k^T / sqrt(hd) + bias, masked) v with
            # f32 logits, the (N x N) scores never stored. The shift's mask is boolean there:
            # torchvision's -100 leaves the other region's tokens a weight below e^-100.
            mask = None
            if sh or sw:
                allowed = shifted_window_mask(ph, pw, ws, (sh, sw)) == 0                # (nW, N, N)
                mask = np.broadcast_to(allowed[None, :, None], (b, nh * nw, 1, n, n)).reshape(b * nh * nw, 1, n, n)
            x, _ = _attention.fused(q, k, v, jnp.asarray(bias, jnp.float32)[None], mask, scale=hd ** -0.5)
            x = jnp.reshape(x, (b * nh * nw, n, c))
        else:
            q = q * jnp.asarray(hd ** -0.5, q.dtype)
            attn = jnp.einsum("bqhd,bkhd->bhqk", q, k)
            attn = jnp.asarray(attn, jnp.float32) + jnp.asarray(bias, jnp.float32)
            if sh or sw:
                mask = jnp.asarray(shifted_window_mask(ph, pw, ws, (sh, sw)))            # (nW, N, N)
                attn = jnp.reshape(jnp.reshape(attn, (b, nh * nw, heads, n, n)) + mask[None, :, None],
                                   (b * nh * nw, heads, n, n))
            attn = jnp.asarray(nn.softmax(attn, axis=-1), self.dtype)
            attn = nn.Dropout(self.attention_dropout_rate)(attn, deterministic=deterministic)
            x = jnp.reshape(jnp.einsum("bhqk,bkhd->bqhd", attn, v), (b * nh * nw, n, c))
        x = dense(c, name="proj")(x)
        x = nn.Dropout(self.dropout_rate)(x, deterministic=deterministic)
        x = jnp.reshape(jnp.transpose(jnp.reshape(x, (b, nh, nw, ws, ws, c)), (0, 1, 3, 2, 4, 5)), (b, ph, pw, c))
        if sh or sw:
            x = jnp.roll(x, (sh, sw), axis=(1, 2))
        return x[:, :h, :w, :]


class SwinMlp(nn.Module):
    """fc1 -> exact GELU -> Dropout -> fc2 -> Dropout (torchvision's ``ops.MLP``)."""
    hidden_dim: int
    dropout_rate: float = 0.0
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, *, deterministic: bool):
        dense = functools.partial(nn.Dense, dtype=self.dtype, param_dtype=self.param_dtype,
                                  kernel_init=_dense_init, bias_init=nn.initializers.zeros)
        out = x.shape[-1]
        x = nn.gelu(dense(self.hidden_dim, name="fc1")(x), approximate=False)
        x = nn.Dropout(self.dropout_rate)(x, deterministic=deterministic)
        x = dense(out, name="fc2")(x)
        return nn.Dropout(self.dropout_rate)(x, deterministic=deterministic)


class SwinBlock(nn.Module):
    """norm1 -> (shifted) window attention -> DropPath -> residual; norm2 -> MLP -> DropPath -> residual."""
    num_heads: int
    window_size: int = 7
    shift_size: int = 0
    mlp_ratio: float = 4.0
    dropout_rate: float = 0.0
    attention_dropout_rate: float = 0.0
    drop_path_rate: float = 0.0
    layer_norm_epsilon: float = 1e-5
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, *, deterministic: bool):
        norm = functools.partial(nn.LayerNorm, epsilon=self.layer_norm_epsilon, dtype=self.dtype,
                                 param_dtype=self.param_dtype)
        y = norm(name="norm1")(x)
        y = WindowAttention(num_heads=self.num_heads, window_size=self.window_size, shift_size=self.shift_size,
                            attention_dropout_rate=self.attention_dropout_rate, dropout_rate=self.dropout_rate,
                            dtype=self.dtype, param_dtype=self.param_dtype, name="attn")(y, deterministic=deterministic)
        x = x + nn.DropPath(self.drop_path_rate)(y, deterministic=deterministic)
        y = norm(name="norm2")(x)
        y = SwinMlp(int(x.shape[-1] * self.mlp_ratio), dropout_rate=self.dropout_rate, dtype=self.dtype,
                    param_dtype=self.param_dtype, name="mlp")(y, deterministic=deterministic)
        return x + nn.DropPath(self.drop_path_rate)(y, deterministic=deterministic)


class PatchMerging(nn.Module):
    """Halves the map and doubles the width: each 2x2 neighbourhood (odd sides padded with
    zeros) concatenated as [(0,0), (1,0), (0,1), (1,1)] (row, column) -> LayerNorm(4C) ->
    Dense(2C, no bias)."""
    layer_norm_epsilon: float = 1e-5
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x):
        b, h, w, c = x.shape
        x = jnp.pad(x, ((0, 0), (0, h % 2), (0, w % 2), (0, 0)))
        h2, w2 = (h + 1) // 2, (w + 1) // 2
        # (B, h2, row parity, w2, column parity, C) -> (B, h2, w2, column parity, row parity, C)
        x = jnp.transpose(jnp.reshape(x, (b, h2, 2, w2, 2, c)), (0, 1, 3, 4, 2, 5))
        x = jnp.reshape(x, (b, h2, w2, 4 * c))
        x = nn.LayerNorm(epsilon=self.layer_norm_epsilon, dtype=self.dtype, param_dtype=self.param_dtype,
                         name="norm")(x)
        return nn.Dense(2 * c, use_bias=False, dtype=self.dtype, param_dtype=self.param_dtype,
                        kernel_init=_dense_init, name="reduction")(x)


class SwinTransformer(nn.Module):
    """Swin Transformer classifier for NHWC images.

    Attributes:
      num_classes: logits per example (default 5).
      patch_size: side of the patch partition (default 4).
      embed_dim: width of the first stage; stage s is ``embed_dim * 2**s`` wide.
      depths: blocks per stage; num_heads: attention heads per stage.
      window_size: side of the attention windows (default 7); shifted blocks roll by half of it.
      mlp_ratio: MLP width over block width (default 4).
      dropout_rate: dropout after the attention projection and inside the MLP.
      attention_dropout_rate: dropout on the attention weights.
      stochastic_depth_rate: the DropPath rate of the last block, rising linearly from 0
        at the first (swin_t 0.2, swin_s 0.3).
      in_channels: documentation only (the patch embedding adapts to the input).
      dtype: the compute dtype; params stay ``param_dtype`` (float32); logits are float32.
    """
    num_classes: int = 5
    patch_size: int = 4
    embed_dim: int = 96
    depths: Sequence[int] = (2, 2, 6, 2)
    num_heads: Sequence[int] = (3, 6, 12, 24)
    window_size: int = 7
    mlp_ratio: float = 4.0
    dropout_rate: float = 0.0
    attention_dropout_rate: float = 0.0
    stochastic_depth_rate: float = 0.2
    in_channels: int = 1
    layer_norm_epsilon: float = 1e-5
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, *, train: bool):
        if len(self.depths) != len(self.num_heads) or not self.depths:
            raise ValueError(f"SwinTransformer: depths {list(self.depths)} and num_heads {list(self.num_heads)} "
                             f"must be non-empty lists of the same length (one entry per stage)")
        if x.ndim != 4:
            raise ValueError(f"SwinTransformer expects NHWC images, got shape {x.shape}")
        p = self.patch_size
        if x.shape[1] < p or x.shape[2] < p:
            raise ValueError(f"SwinTransformer: a {x.shape[1]}x{x.shape[2]} image is smaller than one "
                             f"{p}x{p} patch")
        norm = functools.partial(nn.LayerNorm, epsilon=self.layer_norm_epsilon, dtype=self.dtype,
                                 param_dtype=self.param_dtype)
        x = nn.Conv(self.embed_dim, (p, p), strides=(p, p), padding="VALID", dtype=self.dtype,
                    param_dtype=self.param_dtype, name="patch_embed")(x)
        x = jnp.asarray(norm(name="patch_norm")(x), jnp.float32)
        total, k = sum(self.depths), 0
        for s, (depth, heads) in enumerate(zip(self.depths, self.num_heads)):
            for j in range(depth):
                x = SwinBlock(num_heads=heads, window_size=self.window_size,
                              shift_size=0 if j % 2 == 0 else self.window_size // 2, mlp_ratio=self.mlp_ratio,
                              dropout_rate=self.dropout_rate, attention_dropout_rate=self.attention_dropout_rate,
                              drop_path_rate=self.stochastic_depth_rate * k / max(total - 1, 1),
                              layer_norm_epsilon=self.layer_norm_epsilon, dtype=self.dtype,
                              param_dtype=self.param_dtype, name=f"stage_{s}_block_{j}")(x, deterministic=not train)
                k += 1
            if s < len(self.depths) - 1:
                x = jnp.asarray(PatchMerging(layer_norm_epsilon=self.layer_norm_epsilon, dtype=self.dtype,
                                             param_dtype=self.param_dtype, name=f"merge_{s}")(x), jnp.float32)
        x = norm(name="norm")(x)
        x = jnp.mean(jnp.asarray(x, jnp.float32), axis=(1, 2))
        x = nn.Dense(self.num_classes, dtype=self.dtype, param_dtype=self.param_dtype, kernel_init=_dense_init,
                     name="head")(x)
        return jnp.asarray(x, jnp.float32)


SwinT = functools.partial(SwinTransformer, embed_dim=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24),
                          window_size=7, stochastic_depth_rate=0.2)
SwinS = functools.partial(SwinTransformer, embed_dim=96, depths=(2, 2, 18, 2), num_heads=(3, 6, 12, 24),
                          window_size=7, stochastic_depth_rate=0.3)
