"""Pooling (flax.linen.pooling): pool, avg_pool, max_pool, min_pool over channels-last inputs.

    x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")   # ResNet stem
    x = nn.avg_pool(x, (2, 2), strides=(2, 2))

Inputs are ``(batch..., window dims..., features)``; a missing batch dim is added and
removed. Windows cover only the spatial dims; padding is 'SAME', 'VALID' or one
``(lo, hi)`` pair per spatial dim. Max pooling pads with -inf, so padded positions never win.
"""
import numpy as np

from .. import lax
from .. import numpy as jnp

__all__ = ["pool", "avg_pool", "max_pool", "min_pool"]


def pool(inputs, init, reduce_fn, window_shape, strides, padding):
    """``lax.reduce_window`` of `reduce_fn` (lax.add or lax.max) over the spatial dims."""
    window_shape = tuple(window_shape)
    num_batch_dims = inputs.ndim - (len(window_shape) + 1)
    strides = tuple(strides) if strides else (1,) * len(window_shape)
    assert len(window_shape) == len(strides), f"len({window_shape}) must equal len({strides})"
    strides = (1,) * num_batch_dims + strides + (1,)
    dims = (1,) * num_batch_dims + window_shape + (1,)
    is_single_input = False
    if num_batch_dims == 0:
        inputs = inputs[None]
        strides = (1,) + strides
        dims = (1,) + dims
        is_single_input = True
    assert inputs.ndim == len(dims), f"len({inputs.shape}) != len({dims})"
    if not isinstance(padding, str):
        padding = tuple(map(tuple, padding))
        assert len(padding) == len(window_shape), (
            f"padding {padding} must specify pads for same number of dims as window_shape {window_shape}")
        assert all(len(x) == 2 for x in padding), f"each entry in padding {padding} must be length 2"
        padding = ((0, 0),) * (inputs.ndim - len(window_shape) - 1) + padding + ((0, 0),)
    y = lax.reduce_window(inputs, init, reduce_fn, dims, strides, padding)
    if is_single_input:
        y = jnp.squeeze(y, axis=0)
    return y


def avg_pool(inputs, window_shape, strides=None, padding="VALID", count_include_pad=True):
    """The mean over each window. With ``count_include_pad=False`` padded positions are
    left out of the count (the divisor is the number of real elements in the window)."""
    y = pool(inputs, 0.0, lax.add, window_shape, strides, padding)
    if count_include_pad:
        y = y / np.prod(window_shape)
    else:
        div_shape = tuple(inputs.shape[:-1]) + (1,)
        if len(div_shape) - 2 == len(window_shape):
            div_shape = (1,) + div_shape[1:]
        y = y / pool(jnp.ones(div_shape), 0.0, lax.add, window_shape, strides, padding)
    return y


def max_pool(inputs, window_shape, strides=None, padding="VALID"):
    """The maximum over each window."""
    return pool(inputs, -jnp.inf, lax.max, window_shape, strides, padding)


def min_pool(inputs, window_shape, strides=None, padding="VALID"):
    """The minimum over each window (max pooling of the negation)."""
    return -pool(-inputs, -jnp.inf, lax.max, window_shape, strides, padding)
