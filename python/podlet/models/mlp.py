"""A multilayer perceptron classifier (the Fashion-MNIST baseline)."""
from collections.abc import Sequence
from typing import Any

from .. import numpy as jnp
from .. import nn

__all__ = ["MLP"]


class MLP(nn.Module):
    """Flatten -> [Dense(f) -> relu -> Dropout] for each hidden width -> Dense(num_classes).

    Attributes:
      features: hidden widths (default (512, 256)).
      num_classes: logits per example (default 10).
      dropout_rate: dropout after every hidden layer (default 0).
      dtype: the compute dtype (params stay float32); logits are returned in float32.

    Params: Dense_0 ... Dense_{len(features)} (the last is the classifier).
    """
    features: Sequence[int] = (512, 256)
    num_classes: int = 10
    dropout_rate: float = 0.0
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, *, train: bool):
        x = jnp.reshape(x, (x.shape[0], -1))
        for f in self.features:
            x = nn.relu(nn.Dense(f, dtype=self.dtype)(x))
            x = nn.Dropout(self.dropout_rate)(x, deterministic=not train)
        x = nn.Dense(self.num_classes, dtype=self.dtype)(x)
        return jnp.asarray(x, jnp.float32)
