"""The smoke-test network: a small plain CNN for 64 px patches.

The seed smoke-tested every TPU session with ``configs/experiments/smoke_small_cnn.yaml``
on a laptop. A ResNet's stem (7x7 stride 2, then a stride-2 max pool) shrinks a 64 px
patch to 16 x 16 before the first block, which erases the fine calcifications the
synthetic classes differ by; this network keeps full resolution in its first layer:
``len(widths)`` stages of Conv 3x3 -> BatchNorm -> relu, a 2x2 max pool between stages,
global average pool, Dropout, Dense.
"""
from collections.abc import Sequence
from typing import Any

from .. import nn
from .. import numpy as jnp

__all__ = ["SmallCNN"]


class SmallCNN(nn.Module):
    widths: Sequence[int] = (16, 32, 64, 96)
    num_classes: int = 5
    dropout_rate: float = 0.0
    in_channels: int = 1  # documentation only (the first conv adapts to the input)
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, *, train: bool):
        for i, w in enumerate(self.widths):
            x = nn.Conv(w, (3, 3), padding="SAME", use_bias=False, dtype=self.dtype)(x)
            x = nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-5)(x)
            x = nn.relu(x)
            if i < len(self.widths) - 1:
                x = nn.max_pool(x, (2, 2), strides=(2, 2))
        x = jnp.mean(x, axis=(1, 2))
        x = nn.Dropout(self.dropout_rate)(x, deterministic=not train)
        return jnp.asarray(nn.Dense(self.num_classes, dtype=self.dtype)(x), jnp.float32)
