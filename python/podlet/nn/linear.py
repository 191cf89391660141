"""Linear layers (flax.linen.linear): Dense, DenseGeneral; dtype promotion helpers
(flax.linen.dtypes): canonicalize_dtype, promote_dtype.

Flax's mixed-precision policy: parameters are created and stored in ``param_dtype``
(float32 by default); at use, inputs and parameters are cast to ``dtype`` (or, when
``dtype`` is None, to the promoted dtype of inputs and parameters) and the layer
computes in it, the matmul accumulating in float32. ``Dense(features, dtype=jnp.bfloat16)``
keeps float32 params and returns bfloat16.
"""
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from .. import lax
from .. import numpy as jnp
from . import initializers
from .module import Module, compact

__all__ = ["Dense", "DenseGeneral", "canonicalize_dtype", "promote_dtype", "default_kernel_init"]

default_kernel_init = initializers.lecun_normal()


def canonicalize_dtype(*args, dtype=None, inexact: bool = True):
    """The dtype `args` should be cast to: `dtype` if given, else their promoted dtype
    (float32 when that is not inexact and `inexact`)."""
    if dtype is None:
        args_filtered = [jnp.asarray(x) for x in args if x is not None]
        dtype = jnp.result_type(*args_filtered)
        if inexact and not jnp.issubdtype(dtype, np.inexact):
            dtype = np.dtype(np.float32)
    if inexact and not jnp.issubdtype(dtype, np.inexact):
        raise ValueError(f"Dtype must be inexact: {dtype}")
    return dtype


def promote_dtype(*args, dtype=None, inexact: bool = True) -> list:
    """`args` cast to one dtype (see :func:`canonicalize_dtype`); None entries stay None."""
    dtype = canonicalize_dtype(*args, dtype=dtype, inexact=inexact)
    return [jnp.asarray(x, dtype) if x is not None else None for x in args]


def _normalize_axes(axes, ndim):
    return tuple(sorted(ax if ax >= 0 else ndim + ax for ax in axes))


def _canonicalize_tuple(x):
    if isinstance(x, Iterable):
        return tuple(x)
    return (x,)


class Dense(Module):
    """A linear transformation applied over the last dimension of the input.

    Attributes:
      features: the number of output features.
      use_bias: whether to add a bias to the output (default: True).
      dtype: the dtype of the computation (default: infer from input and params).
      param_dtype: the dtype passed to parameter initializers (default: float32).
      precision: numerical precision of the computation (accepted; podlet's matmuls
        always accumulate in float32).
      kernel_init: initializer for the weight matrix (default: lecun_normal()).
      bias_init: initializer for the bias (default: zeros).

    Params: ``kernel`` (in_features, features), ``bias`` (features,).
    """
    features: int
    use_bias: bool = True
    dtype: Any = None
    param_dtype: Any = jnp.float32
    precision: Any = None
    kernel_init: Any = default_kernel_init
    bias_init: Any = initializers.zeros_init()
    promote_dtype: Any = promote_dtype
    dot_general: Any = None
    dot_general_cls: Any = None

    @compact
    def __call__(self, inputs):
        kernel = self.param("kernel", self.kernel_init, (np.shape(inputs)[-1], self.features), self.param_dtype)
        if self.use_bias:
            bias = self.param("bias", self.bias_init, (self.features,), self.param_dtype)
        else:
            bias = None
        inputs, kernel, bias = self.promote_dtype(inputs, kernel, bias, dtype=self.dtype)
        if self.dot_general_cls is not None:
            dot_general = self.dot_general_cls()
        elif self.dot_general is not None:
            dot_general = self.dot_general
        else:
            dot_general = lax.dot_general
        y = dot_general(inputs, kernel, (((inputs.ndim - 1,), (0,)), ((), ())), precision=self.precision)
        if bias is not None:
            y += jnp.reshape(bias, (1,) * (y.ndim - 1) + (-1,))
        return y


class DenseGeneral(Module):
    """A linear transformation with flexible axes.

    Attributes:
      features: int or tuple of output feature sizes.
      axis: int or tuple of input axes to contract (default: -1).
      batch_dims: leading input axes treated as independent batches (each gets its own
        kernel slice).
      use_bias, dtype, param_dtype, kernel_init, bias_init, precision: as in Dense.

    Params: ``kernel`` batch_shape + contracted shape + features, ``bias`` batch_shape + features.
    """
    features: Any
    axis: Any = -1
    batch_dims: Sequence[int] = ()
    use_bias: bool = True
    dtype: Any = None
    param_dtype: Any = jnp.float32
    kernel_init: Any = default_kernel_init
    bias_init: Any = initializers.zeros_init()
    precision: Any = None
    promote_dtype: Any = promote_dtype
    dot_general: Any = None
    dot_general_cls: Any = None

    @compact
    def __call__(self, inputs):
        features = _canonicalize_tuple(self.features)
        axis = _canonicalize_tuple(self.axis)
        batch_dims = _canonicalize_tuple(self.batch_dims)
        if batch_dims:
            max_dim = np.max(batch_dims)
            if set(batch_dims) != set(range(max_dim + 1)):
                raise ValueError("batch_dims %s must be consecutive leading dimensions starting from 0."
                                 % str(batch_dims))
        ndim = inputs.ndim
        n_batch_dims = len(batch_dims)
        axis = _normalize_axes(axis, ndim)
        batch_dims = _normalize_axes(batch_dims, ndim)
        n_axis, n_features = len(axis), len(features)

        def kernel_init_wrap(rng, shape, dtype=jnp.float32):
            flat_shape = (int(np.prod(shape[:n_batch_dims]) * np.prod(shape[n_batch_dims:n_axis + n_batch_dims])),
                          int(np.prod(shape[-n_features:])))
            return jnp.reshape(self.kernel_init(rng, flat_shape, dtype), shape)

        batch_shape = tuple(inputs.shape[ax] for ax in batch_dims)
        expanded_batch_shape = tuple(inputs.shape[ax] if ax in batch_dims else 1
                                     for ax in range(inputs.ndim) if ax not in axis)
        kernel_shape = tuple(inputs.shape[ax] for ax in axis) + features
        kernel = self.param("kernel", kernel_init_wrap, batch_shape + kernel_shape, self.param_dtype)
        batch_ind = tuple(range(n_batch_dims))
        contract_ind = tuple(range(n_batch_dims, n_axis + n_batch_dims))
        if self.use_bias:
            def bias_init_wrap(rng, shape, dtype=jnp.float32):
                flat_shape = (int(np.prod(shape[:n_batch_dims]) * np.prod(shape[-n_features:])),)
                return jnp.reshape(self.bias_init(rng, flat_shape, dtype), shape)

            bias = self.param("bias", bias_init_wrap, batch_shape + features, self.param_dtype)
        else:
            bias = None
        inputs, kernel, bias = self.promote_dtype(inputs, kernel, bias, dtype=self.dtype)
        if self.dot_general_cls is not None:
            dot_general = self.dot_general_cls()
        elif self.dot_general is not None:
            dot_general = self.dot_general
        else:
            dot_general = lax.dot_general
        out = dot_general(inputs, kernel, ((axis, contract_ind), (batch_dims, batch_ind)), precision=self.precision)
        if self.use_bias:
            out += jnp.reshape(bias, expanded_batch_shape + features)
        return out
