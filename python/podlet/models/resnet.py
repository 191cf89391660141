"""ResNets (https://arxiv.org/abs/1512.03385) for the mammography patch classifier.

The seed recipe (``resnet34_gray``: ``stage_sizes: [3, 4, 6, 3]``, ``widths: [64, 128,
256, 512]``, ``in_channels: 1``, ``dropout_rate``, ``stochastic_depth_rate``), written
with ``podlet.nn`` exactly as it is written with ``flax.linen``:

    model = ResNet34(num_classes=5, dropout_rate=0.1, stochastic_depth_rate=0.05, dtype=jnp.bfloat16)
    variables = model.init(key, jnp.zeros((1, 224, 224, 1)), train=False)
    logits, updates = model.apply(variables, images, train=True, rngs={"dropout": key},
                                  mutable=["batch_stats"])

Structure: a stem ``Conv(w0, (7, 7), (2, 2))`` + BatchNorm + relu + 3x3/2 'SAME' max
pool (``conv_init``, ``bn_init``); stages of residual blocks, the first block of every
stage after the first with stride 2; global average pool; Dropout; ``Dense(num_classes)``.
Every BatchNorm uses momentum 0.9 and epsilon 1e-5 and, as in the seed, no ``dtype``
(its float32 params make its output float32: the convolutions compute in ``dtype``,
the normalisation and residual sums in float32). The last BatchNorm of each residual
branch starts with scale 0, so every block is the identity at initialisation. Block
``b`` of ``N`` drops its branch (DropPath) with rate ``stochastic_depth_rate * b / (N - 1)``.
Logits are returned in float32 (losses are computed in float32).
"""
import functools
from collections.abc import Sequence
from typing import Any

from .. import numpy as jnp
from .. import nn

__all__ = ["ResNetBlock", "BottleneckResNetBlock", "ResNet", "ResNet18", "ResNet34", "ResNet50"]


def _bn(train, **kw):
    return nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-5, **kw)


class ResNetBlock(nn.Module):
    """The basic block: two 3x3 convolutions (ResNet-18/34), output width ``features``.

    Params: Conv_0, BatchNorm_0, Conv_1, BatchNorm_1 (scale initialised to 0) and, when
    the shape changes, the 1x1 projection Conv_2 + BatchNorm_2.
    """
    features: int
    stride: int = 1
    drop_path_rate: float = 0.0
    dtype: Any = jnp.float32
    padding: Any = "SAME"

    @nn.compact
    def __call__(self, x, *, train: bool):
        residual = x
        x = nn.Conv(self.features, (3, 3), self.stride, padding=self.padding, use_bias=False, dtype=self.dtype)(x)
        x = _bn(train)(x)
        x = nn.relu(x)
        x = nn.Conv(self.features, (3, 3), 1, padding=self.padding, use_bias=False, dtype=self.dtype)(x)
        x = _bn(train, scale_init=nn.initializers.zeros_init())(x)
        if residual.shape != x.shape:
            residual = nn.Conv(self.features, (1, 1), self.stride, use_bias=False, dtype=self.dtype)(residual)
            residual = _bn(train)(residual)
        x = nn.DropPath(self.drop_path_rate)(x, deterministic=not train)
        return nn.relu(x + residual)


class BottleneckResNetBlock(nn.Module):
    """The bottleneck block (ResNet-50): 1x1 -> 3x3 (stride) -> 1x1 to ``4 * features``.

    Params: Conv_0/BatchNorm_0, Conv_1/BatchNorm_1, Conv_2/BatchNorm_2 (scale
    initialised to 0) and, when the shape changes, ``conv_proj`` + ``norm_proj``
    (flax examples/imagenet names).
    """
    features: int
    stride: int = 1
    drop_path_rate: float = 0.0
    dtype: Any = jnp.float32
    padding: Any = "SAME"

    @nn.compact
    def __call__(self, x, *, train: bool):
        residual = x
        y = nn.Conv(self.features, (1, 1), use_bias=False, dtype=self.dtype)(x)
        y = _bn(train)(y)
        y = nn.relu(y)
        y = nn.Conv(self.features, (3, 3), self.stride, padding=self.padding, use_bias=False, dtype=self.dtype)(y)
        y = _bn(train)(y)
        y = nn.relu(y)
        y = nn.Conv(self.features * 4, (1, 1), use_bias=False, dtype=self.dtype)(y)
        y = _bn(train, scale_init=nn.initializers.zeros_init())(y)
        if residual.shape != y.shape:
            residual = nn.Conv(self.features * 4, (1, 1), self.stride, use_bias=False, dtype=self.dtype,
                               name="conv_proj")(residual)
            residual = _bn(train, name="norm_proj")(residual)
        y = nn.DropPath(self.drop_path_rate)(y, deterministic=not train)
        return nn.relu(y + residual)


class ResNet(nn.Module):
    """A ResNet classifier for NHWC images.

    Attributes:
      stage_sizes: blocks per stage, e.g. ``[3, 4, 6, 3]``.
      block_cls: ResNetBlock or BottleneckResNetBlock.
      num_classes: logits per example (default 5).
      num_filters: stem width; stage ``i`` has width ``num_filters * 2**i`` (default 64).
      widths: explicit stage widths (overrides num_filters; the stem gets ``widths[0]``).
      in_channels: the channels the model is meant for (documentation only: the stem
        adapts to the input; 1 for the grayscale patches).
      dropout_rate: dropout on the pooled features before the classifier.
      stochastic_depth_rate: the largest DropPath rate (last block); rates rise linearly from 0.
      dtype: the convolution / classifier compute dtype (params stay float32).
      torchvision_padding: pad symmetrically as torchvision does (3 for the stem, 1 for
        the max pool and every 3x3 convolution) instead of 'SAME', which on even sizes
        pads one row/column less at the top/left of every stride-2 window. Needed for
        the logits of imported torchvision weights to match torch's exactly.
    """
    stage_sizes: Sequence[int]
    block_cls: Any = ResNetBlock
    num_classes: int = 5
    num_filters: int = 64
    widths: Any = None
    in_channels: int = 1
    dropout_rate: float = 0.0
    stochastic_depth_rate: float = 0.0
    dtype: Any = jnp.float32
    torchvision_padding: bool = False

    @nn.compact
    def __call__(self, x, *, train: bool):
        pad = (lambda p: ((p, p), (p, p))) if self.torchvision_padding else (lambda p: "SAME")
        # Only passed when asked for, so a user's block_cls without `padding` still works.
        block_kw = {"padding": pad(1)} if self.torchvision_padding else {}
        widths = (list(self.widths) if self.widths is not None
                  else [self.num_filters * 2 ** i for i in range(len(self.stage_sizes))])
        if len(widths) != len(self.stage_sizes):
            raise ValueError(f"widths {widths} and stage_sizes {list(self.stage_sizes)} differ in length")
        x = nn.Conv(widths[0], (7, 7), (2, 2), padding=pad(3), use_bias=False, dtype=self.dtype,
                    name="conv_init")(x)
        x = _bn(train, name="bn_init")(x)
        x = nn.relu(x)
        x = nn.max_pool(x, (3, 3), strides=(2, 2), padding=pad(1))
        n_blocks = sum(self.stage_sizes)
        b = 0
        for i, block_size in enumerate(self.stage_sizes):
            for j in range(block_size):
                stride = 2 if i > 0 and j == 0 else 1
                rate = self.stochastic_depth_rate * b / max(n_blocks - 1, 1)
                x = self.block_cls(widths[i], stride=stride, drop_path_rate=rate, dtype=self.dtype,
                                   **block_kw)(x, train=train)
                b += 1
        x = jnp.mean(x, axis=(1, 2))
        x = nn.Dropout(self.dropout_rate)(x, deterministic=not train)
        x = nn.Dense(self.num_classes, dtype=self.dtype)(x)
        return jnp.asarray(x, jnp.float32)


ResNet18 = functools.partial(ResNet, stage_sizes=[2, 2, 2, 2], block_cls=ResNetBlock)
ResNet34 = functools.partial(ResNet, stage_sizes=[3, 4, 6, 3], block_cls=ResNetBlock)
ResNet50 = functools.partial(ResNet, stage_sizes=[3, 4, 6, 3], block_cls=BottleneckResNetBlock)
