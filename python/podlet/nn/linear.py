"""Linear layers (flax.linen.linear): Dense, DenseGeneral, Conv, ConvLocal, ConvTranspose; dtype
promotion helpers (flax.linen.dtypes): canonicalize_dtype, promote_dtype.

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
from .module import Module, compact, nowrap

__all__ = ["Dense", "DenseGeneral", "Conv", "ConvLocal", "ConvTranspose", "canonicalize_dtype", "promote_dtype",
           "canonicalize_padding", "default_kernel_init"]

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
      precision: numerical precision of the computation: lax.dot_general's (f32 products
        exact, except 'bfloat16' / 'bfloat16_3x', a TPU's bf16 passes; _src/precision.py).
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


def _reshape_init(value, shape):
    """An initializer's flat value reshaped; a boxed one (nn.with_logical_partitioning)
    keeps its box and names, as in Flax."""
    from .meta import AxisMetadata, replace_boxed
    if isinstance(value, AxisMetadata):
        return replace_boxed(value, jnp.reshape(value.unbox(), shape))
    return jnp.reshape(value, shape)


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
            return _reshape_init(self.kernel_init(rng, flat_shape, dtype), shape)

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
                return _reshape_init(self.bias_init(rng, flat_shape, dtype), shape)

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


# =====================================================================================
# Convolutions (flax.linen.linear.Conv / ConvTranspose): NHWC inputs, HWIO kernels.
# =====================================================================================
def canonicalize_padding(padding, rank: int):
    """Conv padding in a form lax accepts: a string stays, an int n becomes ``[(n, n)] * rank``,
    a length-`rank` sequence of ints / ``(lo, hi)`` pairs becomes a list of pairs."""
    if isinstance(padding, str):
        return padding
    if isinstance(padding, (int, np.integer)):
        return [(int(padding), int(padding))] * rank
    if isinstance(padding, Sequence) and len(padding) == rank:
        new_pad = []
        for p in padding:
            if isinstance(p, (int, np.integer)):
                new_pad.append((int(p), int(p)))
            elif isinstance(p, tuple) and len(p) == 2:
                new_pad.append(p)
            else:
                break
        if len(new_pad) == rank:
            return new_pad
    raise ValueError(f"Invalid padding format: {padding}, should be str, int, or a sequence of len {rank} "
                     "where each element is an int or pair of ints.")


def _conv_kernel_size(kernel_size):
    if isinstance(kernel_size, (int, np.integer)):
        return (int(kernel_size),)
    return tuple(kernel_size)


def _broadcast_dims(x, n):
    """An int / None / sequence attribute as an n-tuple (None means 1, as in Flax)."""
    if x is None:
        x = 1
    if isinstance(x, (int, np.integer)):
        return (int(x),) * n
    return tuple(x)


def _flatten_batch(inputs, n_spatial):
    """Inputs with all leading batch dims merged into one (added when absent), and a
    function restoring them on the output."""
    num_batch_dimensions = inputs.ndim - (n_spatial + 1)
    if num_batch_dimensions == 1:
        return inputs, lambda y: y
    input_batch_shape = tuple(inputs.shape[:num_batch_dimensions])
    inputs = jnp.reshape(inputs, (-1,) + tuple(inputs.shape[num_batch_dimensions:]))
    return inputs, lambda y: jnp.reshape(y, input_batch_shape + tuple(y.shape[1:]))


def _as_2d(inputs, kernel, strides, in_dil, k_dil, padding):
    """1-D convolution operands lifted to 2-D (a unit leading spatial dim): podlet's
    convolution primitive is 2-D. Returns the lifted operands and an output squeezer."""
    if kernel.ndim == 4:
        return inputs, kernel, strides, in_dil, k_dil, padding, lambda y: y
    if kernel.ndim != 3:
        raise NotImplementedError(f"podlet convolutions are 1-D or 2-D; got a kernel of shape {tuple(kernel.shape)}")
    inputs = jnp.expand_dims(inputs, 1)
    kernel = jnp.expand_dims(kernel, 0)
    if not isinstance(padding, str):
        padding = [(0, 0)] + list(padding)
    return (inputs, kernel, (1,) + strides, (1,) + in_dil, (1,) + k_dil, padding,
            lambda y: jnp.squeeze(y, 1))


def _pre_pad(inputs, padding_lax, kernel_size, kernel_dilation):
    """Flax's padding modes that lax lacks ('CIRCULAR', 'REFLECT', 'CAUSAL') applied to
    the (batch-flattened) inputs; returns (inputs, the padding left for lax)."""
    if padding_lax in ("CIRCULAR", "REFLECT"):
        dilated = [(k - 1) * d + 1 for k, d in zip(kernel_size, kernel_dilation)]
        pads = [(0, 0)] + [((k - 1) // 2, k // 2) for k in dilated] + [(0, 0)]
        inputs = jnp.pad(inputs, pads, mode={"CIRCULAR": "wrap", "REFLECT": "reflect"}[padding_lax])
        return inputs, "VALID"
    if padding_lax == "CAUSAL":
        if len(kernel_size) != 1:
            raise ValueError("Causal padding is only implemented for 1D convolutions.")
        inputs = jnp.pad(inputs, [(0, 0), (kernel_dilation[0] * (kernel_size[0] - 1), 0), (0, 0)])
        return inputs, "VALID"
    return inputs, padding_lax


class _ConvBase(Module):
    """What Conv and ConvLocal share: the attributes, the geometry of the spatial axes and
    the (masked) kernel and bias parameters."""
    features: int
    kernel_size: Any
    strides: Any = 1
    padding: Any = "SAME"
    input_dilation: Any = 1
    kernel_dilation: Any = 1
    feature_group_count: int = 1
    use_bias: bool = True
    mask: Any = None
    dtype: Any = None
    param_dtype: Any = jnp.float32
    precision: Any = None
    kernel_init: Any = default_kernel_init
    bias_init: Any = initializers.zeros_init()
    promote_dtype: Any = promote_dtype
    conv_general_dilated: Any = None
    conv_general_dilated_cls: Any = None

    @nowrap
    def _geometry(self, inputs):
        """(inputs with batch dims flattened and explicit padding applied, restore, kernel_size,
        strides, input_dilation, kernel_dilation, lax padding)."""
        kernel_size = _conv_kernel_size(self.kernel_size)
        n = len(kernel_size)
        inputs, restore = _flatten_batch(inputs, n)
        kernel_dilation = _broadcast_dims(self.kernel_dilation, n)
        inputs, padding_lax = _pre_pad(inputs, canonicalize_padding(self.padding, n), kernel_size,
                                       kernel_dilation)
        return (inputs, restore, kernel_size, _broadcast_dims(self.strides, n), _broadcast_dims(self.input_dilation, n),
                kernel_dilation, padding_lax)

    @nowrap
    def _kernel_and_bias(self, kernel_shape, bias_shape):
        if self.mask is not None and tuple(self.mask.shape) != kernel_shape:
            raise ValueError("Mask needs to have the same shape as weights. "
                             f"Shapes are: {tuple(self.mask.shape)}, {kernel_shape}")
        kernel = self.param("kernel", self.kernel_init, kernel_shape, self.param_dtype)
        if self.mask is not None:
            kernel = kernel * self.mask
        bias = self.param("bias", self.bias_init, bias_shape, self.param_dtype) if self.use_bias else None
        return kernel, bias


class Conv(_ConvBase):
    """A convolution (``lax.conv_general_dilated``) over channels-last inputs.

    Attributes:
      features: number of convolution filters.
      kernel_size: shape of the kernel, e.g. ``(3, 3)`` (an int means a 1-D kernel).
      strides: an int or one int per spatial dim (default 1).
      padding: ``'SAME'``, ``'VALID'``, ``'CIRCULAR'`` (periodic), ``'REFLECT'``,
        ``'CAUSAL'`` (1-D only), an int, or per-dim ints / ``(lo, hi)`` pairs.
      input_dilation: an int or one int per spatial dim (default 1).
      kernel_dilation: an int or one int per spatial dim (atrous convolution, default 1).
      feature_group_count: split the input features into this many groups (default 1).
      use_bias: whether to add a bias (default True).
      mask: optional mask multiplied into the kernel (same shape as the kernel).
      dtype: the dtype of the computation (default: infer from input and params).
      param_dtype: the dtype passed to parameter initializers (default float32).
      precision: lax.conv_general_dilated's (f32 products exact, except 'bfloat16' /
        'bfloat16_3x', a TPU's bf16 passes; _src/precision.py).
      kernel_init: initializer for the kernel (default lecun_normal()).
      bias_init: initializer for the bias (default zeros).

    Inputs are ``(*batch_dims, spatial..., features)`` (NHWC for 2-D, NLC for 1-D); the
    kernel is ``kernel_size + (in_features // feature_group_count, features)`` (HWIO).

    Params: ``kernel``, ``bias`` (features,).
    """

    @compact
    def __call__(self, inputs):
        inputs, restore, kernel_size, strides, input_dilation, kernel_dilation, padding_lax = self._geometry(inputs)
        in_features = inputs.shape[-1]
        assert in_features % self.feature_group_count == 0
        kernel, bias = self._kernel_and_bias(kernel_size + (in_features // self.feature_group_count, self.features),
                                             (self.features,))

        inputs, kernel, bias = self.promote_dtype(inputs, kernel, bias, dtype=self.dtype)
        if self.conv_general_dilated_cls is not None:
            conv_general_dilated = self.conv_general_dilated_cls()
        elif self.conv_general_dilated is not None:
            conv_general_dilated = self.conv_general_dilated
        else:
            conv_general_dilated = lax.conv_general_dilated
        x, k, s, ind, kd, pad, squeeze = _as_2d(inputs, kernel, strides, input_dilation, kernel_dilation,
                                                 padding_lax)
        y = conv_general_dilated(x, k, s, pad, lhs_dilation=ind, rhs_dilation=kd,
                                 dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                 feature_group_count=self.feature_group_count, precision=self.precision)
        y = squeeze(y)
        if bias is not None:
            y += jnp.reshape(bias, (1,) * (y.ndim - 1) + (-1,))
        return restore(y)


def _local_geometry(in_sp, kernel_size, strides, padding, input_dilation, kernel_dilation):
    """(lax.pad config of the spatial axes, output spatial shape) of a convolution: the
    input dilated, then padded (a string `padding` only without input dilation, as
    lax), then windows of the dilated kernel taken every `strides`."""
    if isinstance(padding, str) and any(d > 1 for d in input_dilation):
        raise ValueError("String padding is not implemented for transposed convolution using this op. Please "
                         "either exactly specify the required padding or use conv_transpose.")
    window = [(k - 1) * d + 1 for k, d in zip(kernel_size, kernel_dilation)]
    pads = lax.padtype_to_pads(in_sp, window, strides, padding) if isinstance(padding, str) else padding
    config = [(int(lo), int(hi), d - 1) for (lo, hi), d in zip(pads, input_dilation)]
    padded = [(i - 1) * d + 1 + lo + hi if i else lo + hi for i, (lo, hi, _), d in zip(in_sp, config, input_dilation)]
    out_sp = tuple((p - w) // s + 1 for p, w, s in zip(padded, window, strides))
    if any(o <= 0 for o in out_sp):
        raise ValueError(f"the window {tuple(kernel_size)} does not fit the padded input {tuple(padded)}")
    return config, out_sp


def _local_patches(inputs, kernel_size, strides, config, out_sp, kernel_dilation):
    """``lax.conv_general_dilated_patches`` of NHWC inputs, by slicing: (B, *out, C *
    prod(window)), the patch axis channel-major (``c * prod(window) + window offset``, jax's
    order). Exact: no products."""
    if any(c != (0, 0, 0) for c in config):
        inputs = lax.pad(inputs, np.zeros((), inputs.dtype), [(0, 0, 0)] + list(config) + [(0, 0, 0)])
    slices = []
    for offset in np.ndindex(*kernel_size):
        start = [0] + [o * d for o, d in zip(offset, kernel_dilation)] + [0]
        limit = ([inputs.shape[0]] + [st + (o - 1) * s + 1 for st, o, s in zip(start[1:], out_sp, strides)]
                 + [inputs.shape[-1]])
        slices.append(lax.slice(inputs, start, limit, [1] + list(strides) + [1]))
    patches = jnp.stack(slices, axis=-1)                       # (B, *out, C, prod(window))
    return jnp.reshape(patches, tuple(patches.shape[:-2]) + (-1,))


class ConvLocal(_ConvBase):
    """A locally connected ("unshared") convolution (``lax.conv_general_dilated_local``):
    a separate kernel at every output position.

    Attributes: as in :class:`Conv` (``feature_group_count`` must be 1).

    Params: ``kernel`` ``out_spatial + (prod(kernel_size) * in_features, features)`` (the
    input axis ordered channel-major over the window, as jax's), ``bias``
    ``out_spatial + (features,)``.
    """

    @compact
    def __call__(self, inputs):
        inputs, restore, kernel_size, strides, input_dilation, kernel_dilation, padding_lax = self._geometry(inputs)
        n = len(kernel_size)
        if self.feature_group_count != 1:
            raise NotImplementedError("`lax.conv_general_dilated_local` does not support "
                                      f"`feature_group_count != 1`, got `{self.feature_group_count}`.")
        in_features = inputs.shape[-1]
        config, out_sp = _local_geometry(tuple(inputs.shape[1:-1]), kernel_size, strides, padding_lax,
                                         input_dilation, kernel_dilation)
        kernel, bias = self._kernel_and_bias(out_sp + (int(np.prod(kernel_size)) * in_features, self.features),
                                             out_sp + (self.features,))
        inputs, kernel, bias = self.promote_dtype(inputs, kernel, bias, dtype=self.dtype)
        patches = _local_patches(inputs, kernel_size, strides, config, out_sp, kernel_dilation)  # (B, *out, K)
        # one (K, features) product per output position: batch over the spatial axes
        y = lax.dot_general(patches, kernel, (((n + 1,), (n,)), (tuple(range(1, n + 1)), tuple(range(n)))),
                            precision=self.precision)               # (*out, B, features)
        y = jnp.moveaxis(y, -2, 0)
        if bias is not None:
            y += jnp.reshape(bias, (1,) + tuple(bias.shape))
        return restore(y)


class ConvTranspose(Module):
    """A transposed convolution (``lax.conv_transpose``) over channels-last inputs.

    Attributes:
      features: number of output features.
      kernel_size: shape of the kernel (an int means a 1-D kernel).
      strides: an int or one int per spatial dim: the upsampling factor (default 1).
      padding: ``'SAME'``, ``'VALID'``, ``'CIRCULAR'``, or per-dim ``(lo, hi)`` pairs
        (interpreted as by ``lax.conv_transpose``).
      kernel_dilation: an int or one int per spatial dim (default 1).
      use_bias, mask, dtype, param_dtype, precision, kernel_init, bias_init: as in Conv.
      transpose_kernel: if True, flip the spatial axes and swap the in/out axes of the
        kernel (the gradient of a Conv); the kernel is then ``kernel_size + (features, in)``.

    Params: ``kernel`` ``kernel_size + (in_features, features)``, ``bias`` (features,).
    """
    features: int
    kernel_size: Any
    strides: Any = None
    padding: Any = "SAME"
    kernel_dilation: Any = None
    use_bias: bool = True
    mask: Any = None
    dtype: Any = None
    param_dtype: Any = jnp.float32
    precision: Any = None
    kernel_init: Any = default_kernel_init
    bias_init: Any = initializers.zeros_init()
    transpose_kernel: bool = False
    promote_dtype: Any = promote_dtype
    preferred_element_type: Any = None

    @compact
    def __call__(self, inputs):
        kernel_size = _conv_kernel_size(self.kernel_size)
        n = len(kernel_size)
        inputs, restore = _flatten_batch(inputs, n)
        strides = _broadcast_dims(self.strides, n)
        kernel_dilation = _broadcast_dims(self.kernel_dilation, n)
        in_features = inputs.shape[-1]
        if self.transpose_kernel:
            kernel_shape = kernel_size + (self.features, in_features)
        else:
            kernel_shape = kernel_size + (in_features, self.features)
        if self.mask is not None and tuple(self.mask.shape) != kernel_shape:
            raise ValueError("Mask needs to have the same shape as weights. "
                             f"Shapes are: {tuple(self.mask.shape)}, {kernel_shape}")
        kernel = self.param("kernel", self.kernel_init, kernel_shape, self.param_dtype)
        if self.mask is not None:
            kernel = kernel * self.mask
        padding_lax = canonicalize_padding(self.padding, n)
        if padding_lax == "CIRCULAR":
            padding_lax = "VALID"
        bias = self.param("bias", self.bias_init, (self.features,), self.param_dtype) if self.use_bias else None
        inputs, kernel, bias = self.promote_dtype(inputs, kernel, bias, dtype=self.dtype)

        x, k = inputs, kernel
        s, kd, pad = strides, kernel_dilation, padding_lax
        squeeze = lambda y: y  # noqa: E731
        if n == 1:
            x, k = jnp.expand_dims(inputs, 1), jnp.expand_dims(kernel, 0)
            s, kd = (1,) + s, (1,) + kd
            if not isinstance(pad, str):
                pad = [(0, 0)] + list(pad)   # the lifted unit dim stays unit
            squeeze = lambda y: jnp.squeeze(y, 1)  # noqa: E731
        elif n != 2:
            raise NotImplementedError(f"podlet convolutions are 1-D or 2-D; got kernel_size {kernel_size}")
        y = lax.conv_transpose(x, k, s, pad, rhs_dilation=kd, transpose_kernel=self.transpose_kernel,
                               precision=self.precision, preferred_element_type=self.preferred_element_type)
        y = squeeze(y)

        if self.padding == "CIRCULAR":
            scaled_x_dims = [x_dim * stride for x_dim, stride in zip(inputs.shape[1:-1], strides)]
            size_diffs = [-(y_dim - x_dim) % (2 * x_dim) for y_dim, x_dim in zip(y.shape[1:-1], scaled_x_dims)]
            if self.transpose_kernel:
                total_pad = [(d // 2, (d + 1) // 2) for d in size_diffs]
            else:
                total_pad = [((d + 1) // 2, d // 2) for d in size_diffs]
            y = jnp.pad(y, [(0, 0)] + total_pad + [(0, 0)])
            for i in range(1, y.ndim - 1):
                y = jnp.reshape(y, tuple(y.shape[:i]) + (-1, scaled_x_dims[i - 1]) + tuple(y.shape[i + 1:]))
                y = jnp.sum(y, axis=i)
        if bias is not None:
            y += jnp.reshape(bias, (1,) * (y.ndim - 1) + (-1,))
        return restore(y)
