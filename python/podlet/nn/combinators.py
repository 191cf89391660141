"""Combinators (flax.linen.combinators): Sequential; BatchApply (flax.linen.batch_apply)."""
from collections.abc import Sequence
from typing import Any, Callable

import numpy as np

from .. import numpy as jnp
from .. import tree_util
from .module import Module, compact

__all__ = ["Sequential", "BatchApply"]


class Sequential(Module):
    """Applies a sequence of modules or functions in order.

    A layer's output feeds the next layer: a tuple is splatted as positional arguments,
    a dict as keyword arguments, anything else is passed as the single argument.
    Submodules given in ``layers`` are named ``layers_0``, ``layers_1``, ...:

        model = nn.Sequential([nn.Dense(4), nn.relu, nn.Dense(2)])
        # params: {'layers_0': {...}, 'layers_2': {...}}
    """
    layers: Sequence[Callable[..., Any]]

    def __post_init__(self):
        if not isinstance(self.layers, Sequence):
            raise ValueError(f"'layers' must be a sequence, got '{type(self.layers).__name__}'.")
        super().__post_init__()

    @compact
    def __call__(self, *args, **kwargs):
        if not self.layers:
            raise ValueError(f"Empty Sequential module {self.name}.")
        outputs = self.layers[0](*args, **kwargs)
        for layer in self.layers[1:]:
            if isinstance(outputs, tuple):
                outputs = layer(*outputs)
            elif isinstance(outputs, dict):
                outputs = layer(**outputs)
            else:
                outputs = layer(outputs)
        return outputs


def _ndim_at_least(x, num_dims):
    if not hasattr(x, "ndim"):
        x = jnp.asarray(x)
    return x.ndim >= num_dims


class BatchApply:
    """Merges the leading ``num_dims`` axes of the inputs into one, calls ``f``, and
    splits them back out of the outputs (e.g. a layer applied to every step of a
    ``(time, batch, ...)`` array). Inputs of rank below ``num_dims`` pass unchanged.

        y = nn.BatchApply(nn.Dense(4))(x)        # x (T, B, F) -> y (T, B, 4)
    """

    def __init__(self, f, num_dims=2):
        self._f = f
        self.num_dims = num_dims

    def __call__(self, *args, **kwargs):
        leaves = tree_util.tree_leaves(args) + tree_util.tree_leaves(kwargs)
        example = next((a for a in leaves if _ndim_at_least(a, self.num_dims)), None)
        if example is None:
            raise ValueError(f"BatchApply requires at least one input with ndim >= {self.num_dims}.")
        lead = tuple(example.shape[:self.num_dims])

        def merge(x):
            if not _ndim_at_least(x, self.num_dims):
                return x
            return x.reshape((int(np.prod(x.shape[:self.num_dims])),) + tuple(x.shape[self.num_dims:]))

        outputs = self._f(*tree_util.tree_map(merge, args), **tree_util.tree_map(merge, kwargs))
        return tree_util.tree_map(lambda x: x.reshape(lead + tuple(x.shape[1:])), outputs)
