"""Normalization layers (flax.linen.normalization): BatchNorm, LayerNorm, GroupNorm, RMSNorm.

Flax's numerics, step for step: statistics are computed in at least float32 whatever
the input dtype (``_compute_stats``: E[x] and E[x^2] in one pass, var = max(0, E[x^2] -
E[x]^2), the biased estimator), normalisation is ``(x - mean) * (rsqrt(var + eps) *
scale) + bias`` in float32, and the result is cast to ``dtype`` (or, when None, to the
promoted dtype of the input and the params: a bf16 input with f32 params comes out f32).

BatchNorm keeps running statistics in the ``batch_stats`` collection, updated in
training (``use_running_average=False``, ``mutable=['batch_stats']``) as
``ra = momentum * ra + (1 - momentum) * batch_stat``, never during ``init``:

    y, updates = model.apply(variables, x, train=True, mutable=['batch_stats'])
    variables = {**variables, 'batch_stats': updates['batch_stats']}

With ``axis_name`` set, batch statistics are averaged over that pmap axis
(``lax.pmean``) so every replica normalises with the global batch's statistics.
"""
from collections.abc import Iterable
from typing import Any

from .. import lax
from .. import numpy as jnp
from . import initializers
from .linear import canonicalize_dtype
from .module import Module, compact, merge_param

__all__ = ["BatchNorm", "LayerNorm", "GroupNorm", "RMSNorm"]


def _canonicalize_axes(rank: int, axes) -> tuple:
    """Deduplicated, non-negative axes (order as Flax's: a set, iterated)."""
    if not isinstance(axes, Iterable):
        axes = (axes,)
    return tuple({rank + axis if axis < 0 else axis for axis in axes})


def _compute_stats(x, axes, dtype, axis_name=None, axis_index_groups=None, use_mean=True,
                   use_fast_variance=True, mask=None, force_float32_reductions=True):
    """(mean, var) of `x` over `axes`, in at least float32 (flax.linen.normalization._compute_stats).

    With `axis_name`, the per-replica means of x and x^2 are averaged over that pmap axis
    in one ``pmean`` of their stack.
    """
    if dtype is None:
        dtype = jnp.result_type(x)
    if force_float32_reductions:
        dtype = jnp.promote_types(dtype, jnp.float32)
    x = jnp.asarray(x, dtype)
    axes = _canonicalize_axes(x.ndim, axes)

    def maybe_distributed_mean(*xs, mask=None):
        if mask is not None:
            mask = jnp.asarray(mask, dtype=bool)
        mus = tuple(jnp.mean(v, axes, where=mask) for v in xs)
        if axis_name is None:
            return mus if len(xs) > 1 else mus[0]
        if len(xs) > 1:
            reduced = lax.pmean(jnp.stack(mus, axis=0), axis_name, axis_index_groups=axis_index_groups)
            return tuple(reduced[i] for i in range(len(xs)))
        return lax.pmean(mus[0], axis_name, axis_index_groups=axis_index_groups)

    if use_mean:
        if use_fast_variance:
            mu, mu2 = maybe_distributed_mean(x, lax.square(x), mask=mask)
            var = jnp.maximum(0.0, mu2 - lax.square(mu))
        else:
            mu = maybe_distributed_mean(x, mask=mask)
            var = maybe_distributed_mean(lax.square(x - jnp.expand_dims(mu, axes)), mask=mask)
    else:
        var = maybe_distributed_mean(lax.square(x), mask=mask)
        mu = jnp.zeros_like(var)
    return mu, var


def _normalize(mdl, x, mean, var, reduction_axes, feature_axes, dtype, param_dtype, epsilon, use_bias,
               use_scale, bias_init, scale_init, force_float32_reductions=True):
    """``(x - mean) * rsqrt(var + eps) * scale + bias``, declaring ``scale`` then ``bias``
    in `mdl` (flax.linen.normalization._normalize)."""
    reduction_axes = _canonicalize_axes(x.ndim, reduction_axes)
    feature_axes = _canonicalize_axes(x.ndim, feature_axes)
    feature_shape = [1] * x.ndim
    reduced_feature_shape = []
    for ax in feature_axes:
        feature_shape[ax] = x.shape[ax]
        reduced_feature_shape.append(x.shape[ax])

    mean = jnp.expand_dims(mean, reduction_axes)
    var = jnp.expand_dims(var, reduction_axes)
    y = x - mean
    mul = lax.rsqrt(var + epsilon)
    args = [x]
    if use_scale:
        scale = jnp.reshape(mdl.param("scale", scale_init, reduced_feature_shape, param_dtype), feature_shape)
        if not force_float32_reductions:
            scale = jnp.asarray(scale, param_dtype)
        mul = mul * scale
        args.append(scale)
    y = y * mul
    if use_bias:
        bias = jnp.reshape(mdl.param("bias", bias_init, reduced_feature_shape, param_dtype), feature_shape)
        if not force_float32_reductions:
            bias = jnp.asarray(bias, param_dtype)
        y = y + bias
        args.append(bias)
    dtype = canonicalize_dtype(*args, dtype=dtype)
    return jnp.asarray(y, dtype)


class BatchNorm(Module):
    """Batch normalization (https://arxiv.org/abs/1502.03167).

    Attributes:
      use_running_average: if True, normalise with the stored running statistics
        (evaluation); if False, with the batch's and update the running statistics
        (training). May instead be passed at call time.
      axis: the feature axis (default -1: channels last).
      momentum: decay of the running averages (default 0.99; ResNets use 0.9).
      epsilon: added to the variance (default 1e-5).
      dtype: the dtype of the result (default: promoted from input and params).
      param_dtype: the dtype of ``scale`` / ``bias`` (default float32).
      use_bias, use_scale: whether to learn ``bias`` (beta) / ``scale`` (gamma).
      bias_init, scale_init: their initializers (default zeros / ones).
      axis_name: pmap axis over which batch statistics are averaged (default None).
      axis_index_groups: accepted for compatibility; ignored by podlet's pmean.
      use_fast_variance: var = E[x^2] - E[x]^2 (default) or E[(x - E[x])^2].

    Variables: ``params/{scale, bias}`` and ``batch_stats/{mean, var}`` (float32,
    shape = the feature axes).
    """
    use_running_average: Any = None
    axis: int = -1
    momentum: float = 0.99
    epsilon: float = 1e-5
    dtype: Any = None
    param_dtype: Any = jnp.float32
    use_bias: bool = True
    use_scale: bool = True
    bias_init: Any = initializers.zeros
    scale_init: Any = initializers.ones
    axis_name: Any = None
    axis_index_groups: Any = None
    use_fast_variance: bool = True
    force_float32_reductions: bool = True

    @compact
    def __call__(self, x, use_running_average=None, *, mask=None):
        use_running_average = merge_param("use_running_average", self.use_running_average, use_running_average)
        feature_axes = _canonicalize_axes(x.ndim, self.axis)
        reduction_axes = tuple(i for i in range(x.ndim) if i not in feature_axes)
        feature_shape = [x.shape[ax] for ax in feature_axes]
        stat_dtype = jnp.float32 if self.force_float32_reductions else self.param_dtype

        ra_mean = self.variable("batch_stats", "mean", lambda s: jnp.zeros(s, stat_dtype), feature_shape)
        ra_var = self.variable("batch_stats", "var", lambda s: jnp.ones(s, stat_dtype), feature_shape)

        if use_running_average:
            mean, var = ra_mean.value, ra_var.value
            if not self.force_float32_reductions:
                mean, var = jnp.asarray(mean, self.param_dtype), jnp.asarray(var, self.param_dtype)
        else:
            mean, var = _compute_stats(
                x, reduction_axes, dtype=self.dtype,
                axis_name=self.axis_name if not self.is_initializing() else None,
                axis_index_groups=self.axis_index_groups, use_fast_variance=self.use_fast_variance,
                mask=mask, force_float32_reductions=self.force_float32_reductions)
            if not self.is_initializing():
                ra_mean.value = self.momentum * ra_mean.value + (1 - self.momentum) * mean
                ra_var.value = self.momentum * ra_var.value + (1 - self.momentum) * var

        return _normalize(self, x, mean, var, reduction_axes, feature_axes, self.dtype, self.param_dtype,
                          self.epsilon, self.use_bias, self.use_scale, self.bias_init, self.scale_init,
                          self.force_float32_reductions)


class LayerNorm(Module):
    """Layer normalization (https://arxiv.org/abs/1607.06450): each example normalised
    over `reduction_axes` (default the last), with a learned per-feature scale and bias.

    Attributes:
      epsilon: added to the variance (default 1e-6).
      dtype, param_dtype, use_bias, use_scale, bias_init, scale_init: as in BatchNorm.
      reduction_axes: axes the statistics are computed over (default -1).
      feature_axes: axes of the learned scale / bias (default -1).
      axis_name, axis_index_groups, use_fast_variance: as in BatchNorm.

    Params: ``scale``, ``bias`` (shape = the feature axes).
    """
    epsilon: float = 1e-6
    dtype: Any = None
    param_dtype: Any = jnp.float32
    use_bias: bool = True
    use_scale: bool = True
    bias_init: Any = initializers.zeros
    scale_init: Any = initializers.ones
    reduction_axes: Any = -1
    feature_axes: Any = -1
    axis_name: Any = None
    axis_index_groups: Any = None
    use_fast_variance: bool = True
    force_float32_reductions: bool = True

    @compact
    def __call__(self, x, *, mask=None):
        mean, var = _compute_stats(x, self.reduction_axes, self.dtype, self.axis_name, self.axis_index_groups,
                                   use_fast_variance=self.use_fast_variance, mask=mask,
                                   force_float32_reductions=self.force_float32_reductions)
        return _normalize(self, x, mean, var, self.reduction_axes, self.feature_axes, self.dtype, self.param_dtype,
                          self.epsilon, self.use_bias, self.use_scale, self.bias_init, self.scale_init,
                          self.force_float32_reductions)


class RMSNorm(Module):
    """RMS layer normalization (https://arxiv.org/abs/1910.07467): ``x * rsqrt(E[x^2] + eps) * scale``.

    Params: ``scale``.
    """
    epsilon: float = 1e-6
    dtype: Any = None
    param_dtype: Any = jnp.float32
    use_scale: bool = True
    scale_init: Any = initializers.ones
    reduction_axes: Any = -1
    feature_axes: Any = -1
    axis_name: Any = None
    axis_index_groups: Any = None
    use_fast_variance: bool = True
    force_float32_reductions: bool = True

    @compact
    def __call__(self, x, *, mask=None):
        mean, var = _compute_stats(x, self.reduction_axes, self.dtype, self.axis_name, self.axis_index_groups,
                                   use_mean=False, use_fast_variance=self.use_fast_variance, mask=mask,
                                   force_float32_reductions=self.force_float32_reductions)
        return _normalize(self, x, mean, var, self.reduction_axes, self.feature_axes, self.dtype, self.param_dtype,
                          self.epsilon, False, self.use_scale, initializers.zeros, self.scale_init,
                          self.force_float32_reductions)


class GroupNorm(Module):
    """Group normalization (https://arxiv.org/abs/1803.08494): statistics per example over
    the spatial axes and groups of ``group_size`` channels.

    Attributes:
      num_groups: number of channel groups (default 32), or
      group_size: channels per group (pass ``num_groups=None`` with it).
      epsilon: added to the variance (default 1e-6).
      reduction_axes: axes to reduce (default: all but the leading batch axis; must
        include the last, the feature axis).
      dtype, param_dtype, use_bias, use_scale, bias_init, scale_init, axis_name,
      axis_index_groups, use_fast_variance: as in LayerNorm.

    Params: ``scale``, ``bias`` (channels,).
    """
    num_groups: Any = 32
    group_size: Any = None
    epsilon: float = 1e-6
    dtype: Any = None
    param_dtype: Any = jnp.float32
    use_bias: bool = True
    use_scale: bool = True
    bias_init: Any = initializers.zeros
    scale_init: Any = initializers.ones
    reduction_axes: Any = None
    axis_name: Any = None
    axis_index_groups: Any = None
    use_fast_variance: bool = True
    force_float32_reductions: bool = True

    @compact
    def __call__(self, x, *, mask=None):
        if self.reduction_axes is not None:
            reduction_axes = self.reduction_axes
        else:
            reduction_axes = list(range(1, x.ndim - 1)) + [-1]
        feature_axis = -1
        reduction_axes = _canonicalize_axes(x.ndim, reduction_axes)
        if reduction_axes[-1] != (feature_axis % x.ndim):
            raise ValueError("The reduction axes must include the final dimension as this is assumed to be the "
                             "feature axis.")
        if (self.num_groups is None and self.group_size is None) or (
                self.num_groups is not None and self.group_size is not None):
            raise ValueError("Either `num_groups` or `group_size` should be specified. If `group_size` is to be "
                             "specified, pass `num_groups=None` as argument to override the default `num_groups` "
                             "value of 32.")
        channels = x.shape[-1]
        if self.group_size is not None:
            if channels % self.group_size != 0:
                raise ValueError(f"Number of channels ({channels}) is not multiple of the group size "
                                 f"({self.group_size}).")
            num_groups = channels // self.group_size
        else:
            num_groups = self.num_groups
        if num_groups <= 0 or channels % num_groups != 0:
            raise ValueError(f"Number of groups ({num_groups}) does not divide the number of channels ({channels}).")
        group_size = channels // num_groups
        group_shape = tuple(x.shape[:-1]) + (num_groups, group_size)
        if mask is not None:
            mask = jnp.reshape(mask, tuple(mask.shape[:-1]) + (num_groups, group_size))
        mean, var = _compute_stats(jnp.reshape(x, group_shape), list(reduction_axes[:-1]) + [-1], self.dtype,
                                   self.axis_name, self.axis_index_groups, use_fast_variance=self.use_fast_variance,
                                   mask=mask, force_float32_reductions=self.force_float32_reductions)
        mean = jnp.repeat(mean, group_size, axis=-1)
        var = jnp.repeat(var, group_size, axis=-1)
        return _normalize(self, x, mean, var, reduction_axes[:-1], (feature_axis,), self.dtype, self.param_dtype,
                          self.epsilon, self.use_bias, self.use_scale, self.bias_init, self.scale_init,
                          self.force_float32_reductions)
