"""Stochastic layers: Dropout (flax.linen.stochastic) and DropPath (stochastic depth).

Both draw their mask from the ``'dropout'`` rng stream (``apply(..., rngs={'dropout':
key})``), exactly as Flax does: ``mask = random.bernoulli(rng, keep_prob, shape)`` and
``select(mask, x / keep_prob, 0)``. Since ``podlet.random`` is bit-identical to jax's
and ``make_rng`` derives keys as Flax does, the masks are the same bits as Flax's for
the same key and module path.
"""
from collections.abc import Sequence
from typing import Any

from .. import lax
from .. import numpy as jnp
from .. import random
from .module import Module, compact, merge_param

__all__ = ["Dropout", "DropPath"]


def _dropout(inputs, rate, broadcast_dims, rng):
    """Zero each element (or each slice along `broadcast_dims`) with probability `rate`,
    scale the survivors by 1 / (1 - rate)."""
    if rate == 1.0:
        return jnp.zeros_like(inputs)
    keep_prob = 1.0 - rate
    broadcast_shape = list(inputs.shape)
    for dim in broadcast_dims:
        broadcast_shape[dim] = 1
    mask = random.bernoulli(rng, p=keep_prob, shape=broadcast_shape)
    mask = jnp.broadcast_to(mask, inputs.shape)
    return lax.select(mask, inputs / keep_prob, jnp.zeros_like(inputs))


class Dropout(Module):
    """Dropout (https://jmlr.org/papers/v15/srivastava14a.html).

    Attributes:
      rate: the probability of dropping an element (not the keep rate).
      broadcast_dims: dimensions that share one mask value (e.g. ``(1, 2)`` drops
        whole channels of an NHWC map).
      deterministic: if True the input is returned unchanged; may instead be passed at
        call time (``Dropout(0.1)(x, deterministic=not train)``).
      rng_collection: the rng stream the mask is drawn from (default ``'dropout'``).
    """
    rate: float
    broadcast_dims: Sequence[int] = ()
    deterministic: Any = None
    rng_collection: str = "dropout"

    @compact
    def __call__(self, inputs, deterministic=None, rng=None):
        deterministic = merge_param("deterministic", self.deterministic, deterministic)
        if (self.rate == 0.0) or deterministic:
            return inputs
        if self.rate == 1.0:
            return jnp.zeros_like(inputs)
        if rng is None:
            rng = self.make_rng(self.rng_collection)
        return _dropout(inputs, self.rate, self.broadcast_dims, rng)


class DropPath(Module):
    """Stochastic depth (https://arxiv.org/abs/1603.09382): drops a residual branch for
    whole examples.

    In training each example's branch output is kept with probability ``1 - rate`` and
    then scaled by ``1 / (1 - rate)``, otherwise zeroed: a mask of shape ``(B, 1, ...,
    1)``. It is the same computation (and the same bits) as ``nn.Dropout(rate,
    broadcast_dims=range(1, x.ndim))``. The identity when deterministic or rate == 0.

        x = DropPath(self.drop_path_rate)(x, deterministic=not train)
        return nn.relu(x + residual)

    Attributes:
      rate: the probability of dropping an example's branch.
      deterministic: as in Dropout (attribute or call argument).
      rng_collection: the rng stream (default ``'dropout'``).
    """
    rate: float = 0.0
    deterministic: Any = None
    rng_collection: str = "dropout"

    @compact
    def __call__(self, inputs, deterministic=None, rng=None):
        if self.rate == 0.0:
            return inputs
        deterministic = merge_param("deterministic", self.deterministic, deterministic)
        if deterministic:
            return inputs
        if self.rate == 1.0:
            return jnp.zeros_like(inputs)
        if rng is None:
            rng = self.make_rng(self.rng_collection)
        return _dropout(inputs, self.rate, tuple(range(1, inputs.ndim)), rng)
