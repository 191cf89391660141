"""Combinators (flax.linen.combinators): Sequential."""
from collections.abc import Sequence
from typing import Any, Callable

from .module import Module, compact

__all__ = ["Sequential"]


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
