"""Vision Transformers (https://arxiv.org/abs/2010.11929), from scratch.

A patch embedding (a ``patch_size`` x ``patch_size`` convolution with that stride), a
learned class token prepended, learned position embeddings, ``num_layers`` pre-LN
encoder blocks (LayerNorm -> multi-head self-attention -> residual; LayerNorm -> MLP
-> residual), a final LayerNorm, and a linear head on the class token:

    model = ViTTiny(num_classes=5, dtype=jnp.bfloat16)
    variables = model.init(key, jnp.zeros((1, 224, 224, 1)), train=False)
    logits = model.apply(variables, images, train=True, rngs={"dropout": key})

Parameter names follow google-research/vision_transformer (``embedding``, ``cls``,
``Transformer/posembed_input/pos_embedding``, ``Transformer/encoderblock_{i}/...``,
``Transformer/encoder_norm``, ``head``) and so do the initialisers: Xavier-uniform
kernels, N(0, 1e-6) MLP biases, N(0, 0.02) position embeddings, zero class token and
head. The residual stream is float32 (the class token and position embeddings are
float32 params); LayerNorm, attention and MLP compute in ``dtype``.

Pretrained weights: ``load_torchvision_vit`` (vit_b_16/32) and ``load_timm_vit``
(vit_tiny/small/base_patch16_224, vit_base_patch32_224; build ViTTiny/ViTSmall with
``approximate_gelu=False`` for timm's logits). The position embeddings fix the patch grid:
pass ``image_size=`` to the loader to resize them for another image size.
"""
import functools
from typing import Any, Optional

from .. import numpy as jnp
from .. import nn

__all__ = ["AddPositionEmbs", "MlpBlock", "Encoder1DBlock", "Encoder", "VisionTransformer", "ViTTiny", "ViTSmall",
           "ViTB16", "ViTB32"]


class AddPositionEmbs(nn.Module):
    """Adds a learned ``(1, length, width)`` position embedding (``pos_embedding``)."""
    posemb_init: Any = nn.initializers.normal(stddev=0.02)
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, inputs):
        if inputs.ndim != 3:
            raise ValueError(f"AddPositionEmbs expects (batch, length, width) inputs, got shape {inputs.shape}")
        pe = self.param("pos_embedding", self.posemb_init, (1, inputs.shape[1], inputs.shape[2]), self.param_dtype)
        return inputs + pe


class MlpBlock(nn.Module):
    """Dense(mlp_dim) -> gelu -> Dropout -> Dense(width) -> Dropout."""
    mlp_dim: int
    out_dim: Optional[int] = None
    dropout_rate: float = 0.0
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32
    kernel_init: Any = nn.initializers.xavier_uniform()
    bias_init: Any = nn.initializers.normal(stddev=1e-6)
    approximate_gelu: bool = True

    @nn.compact
    def __call__(self, inputs, *, deterministic: bool):
        out_dim = inputs.shape[-1] if self.out_dim is None else self.out_dim
        dense = functools.partial(nn.Dense, dtype=self.dtype, param_dtype=self.param_dtype,
                                  kernel_init=self.kernel_init, bias_init=self.bias_init)
        x = nn.gelu(dense(self.mlp_dim)(inputs), approximate=self.approximate_gelu)
        x = nn.Dropout(self.dropout_rate)(x, deterministic=deterministic)
        x = dense(out_dim)(x)
        return nn.Dropout(self.dropout_rate)(x, deterministic=deterministic)


class Encoder1DBlock(nn.Module):
    """A pre-LN transformer encoder block; ``drop_path_rate`` drops each residual branch
    per example (stochastic depth; 0 disables it)."""
    mlp_dim: int
    num_heads: int
    dropout_rate: float = 0.0
    attention_dropout_rate: float = 0.0
    drop_path_rate: float = 0.0
    approximate_gelu: bool = True
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, inputs, *, deterministic: bool):
        x = nn.LayerNorm(dtype=self.dtype, param_dtype=self.param_dtype)(inputs)
        x = nn.MultiHeadDotProductAttention(num_heads=self.num_heads, dtype=self.dtype, param_dtype=self.param_dtype,
                                            kernel_init=nn.initializers.xavier_uniform(), broadcast_dropout=False,
                                            dropout_rate=self.attention_dropout_rate,
                                            deterministic=deterministic)(x, x)
        x = nn.Dropout(self.dropout_rate)(x, deterministic=deterministic)
        x = nn.DropPath(self.drop_path_rate)(x, deterministic=deterministic)
        x = x + inputs
        y = nn.LayerNorm(dtype=self.dtype, param_dtype=self.param_dtype)(x)
        y = MlpBlock(mlp_dim=self.mlp_dim, dropout_rate=self.dropout_rate, dtype=self.dtype,
                     param_dtype=self.param_dtype,
                     approximate_gelu=self.approximate_gelu)(y, deterministic=deterministic)
        y = nn.DropPath(self.drop_path_rate)(y, deterministic=deterministic)
        return x + y


class Encoder(nn.Module):
    """Position embeddings + Dropout + ``num_layers`` blocks + the final LayerNorm."""
    num_layers: int
    mlp_dim: int
    num_heads: int
    dropout_rate: float = 0.0
    attention_dropout_rate: float = 0.0
    stochastic_depth_rate: float = 0.0
    approximate_gelu: bool = True
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, *, train: bool):
        x = AddPositionEmbs(param_dtype=self.param_dtype, name="posembed_input")(x)
        x = nn.Dropout(self.dropout_rate)(x, deterministic=not train)
        for i in range(self.num_layers):
            rate = self.stochastic_depth_rate * i / max(self.num_layers - 1, 1)
            x = Encoder1DBlock(mlp_dim=self.mlp_dim, num_heads=self.num_heads, dropout_rate=self.dropout_rate,
                               attention_dropout_rate=self.attention_dropout_rate, drop_path_rate=rate,
                               approximate_gelu=self.approximate_gelu, dtype=self.dtype, param_dtype=self.param_dtype,
                               name=f"encoderblock_{i}")(x, deterministic=not train)
        return nn.LayerNorm(dtype=self.dtype, param_dtype=self.param_dtype, name="encoder_norm")(x)


class VisionTransformer(nn.Module):
    """ViT classifier for NHWC images.

    Attributes:
      num_classes: logits per example (default 5).
      patch_size: side of the square patches (default 16).
      hidden_size: token width.
      num_layers, num_heads, mlp_dim: encoder depth, heads per block, MLP width.
      dropout_rate: dropout after the position embeddings and inside the blocks.
      attention_dropout_rate: dropout on the attention weights.
      stochastic_depth_rate: the largest DropPath rate (last block), rising linearly from 0.
      classifier: ``'token'`` (class token, default) or ``'gap'`` (mean of the tokens,
        no class token).
      in_channels: documentation only (the embedding adapts to the input).
      approximate_gelu: the MLP's GELU in its tanh form (Flax's default, True) or exact
        (erf; torchvision's ViTs, and so ``ViTB16``/``ViTB32``).
      dtype: the compute dtype; params stay ``param_dtype`` (float32).
    """
    num_classes: int = 5
    patch_size: int = 16
    hidden_size: int = 192
    num_layers: int = 12
    num_heads: int = 3
    mlp_dim: int = 768
    dropout_rate: float = 0.0
    attention_dropout_rate: float = 0.0
    stochastic_depth_rate: float = 0.0
    classifier: str = "token"
    in_channels: int = 1
    approximate_gelu: bool = True
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, *, train: bool):
        p = self.patch_size
        x = nn.Conv(self.hidden_size, (p, p), strides=(p, p), padding="VALID", dtype=self.dtype,
                    param_dtype=self.param_dtype, name="embedding")(x)
        n, h, w, c = x.shape
        x = jnp.reshape(x, (n, h * w, c))
        if self.classifier == "token":
            cls = self.param("cls", nn.initializers.zeros, (1, 1, c), self.param_dtype)
            x = jnp.concatenate([jnp.tile(cls, (n, 1, 1)), x], axis=1)
        elif self.classifier != "gap":
            raise ValueError(f"Invalid classifier={self.classifier!r}; expected 'token' or 'gap'")
        x = Encoder(num_layers=self.num_layers, mlp_dim=self.mlp_dim, num_heads=self.num_heads,
                    dropout_rate=self.dropout_rate, attention_dropout_rate=self.attention_dropout_rate,
                    stochastic_depth_rate=self.stochastic_depth_rate, approximate_gelu=self.approximate_gelu,
                    dtype=self.dtype, param_dtype=self.param_dtype, name="Transformer")(x, train=train)
        x = x[:, 0] if self.classifier == "token" else jnp.mean(x, axis=1)
        x = nn.Dense(self.num_classes, dtype=self.dtype, param_dtype=self.param_dtype,
                     kernel_init=nn.initializers.zeros, name="head")(x)
        return jnp.asarray(x, jnp.float32)


ViTTiny = functools.partial(VisionTransformer, patch_size=16, hidden_size=192, num_layers=12, num_heads=3, mlp_dim=768)
ViTSmall = functools.partial(VisionTransformer, patch_size=16, hidden_size=384, num_layers=12, num_heads=6,
                             mlp_dim=1536)
# ViT-B/16 and ViT-B/32 as torchvision's vit_b_16 / vit_b_32 (86.6M / 88.2M params at
# 1000 classes, 224 px), with its exact GELU, so that load_torchvision_vit's weights give
# torch's logits.
ViTB16 = functools.partial(VisionTransformer, patch_size=16, hidden_size=768, num_layers=12, num_heads=12,
                           mlp_dim=3072, approximate_gelu=False)
ViTB32 = functools.partial(VisionTransformer, patch_size=32, hidden_size=768, num_layers=12, num_heads=12,
                           mlp_dim=3072, approximate_gelu=False)
