"""Normalization layers (flax.linen.normalization): BatchNorm, LayerNorm, GroupNorm, RMSNorm,
InstanceNorm, and the weight wrappers SpectralNorm and WeightNorm.

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
import dataclasses
from collections.abc import Iterable
from typing import Any

from .. import lax
from .. import numpy as jnp
from .._src import norm as _fused_norm
from . import initializers
from .linear import canonicalize_dtype
from .module import Module, compact, merge_param, nowrap

__all__ = ["BatchNorm", "LayerNorm", "GroupNorm", "RMSNorm", "InstanceNorm", "SpectralNorm", "WeightNorm"]


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


class _StatsNorm(Module):
    """LayerNorm, RMSNorm, GroupNorm and InstanceNorm: statistics of the input over some
    axes, then scale and bias per feature, all reading the same attributes."""

    @nowrap
    def _stats(self, x, axes, mask, use_mean=True):
        return _compute_stats(x, axes, self.dtype, self.axis_name, self.axis_index_groups, use_mean=use_mean,
                              use_fast_variance=self.use_fast_variance, mask=mask,
                              force_float32_reductions=self.force_float32_reductions)

    @nowrap
    def _normalize(self, x, mean, var, reduction_axes, feature_axes, use_bias=None, bias_init=None):
        return _normalize(self, x, mean, var, reduction_axes, feature_axes, self.dtype, self.param_dtype,
                          self.epsilon, self.use_bias if use_bias is None else use_bias, self.use_scale,
                          self.bias_init if bias_init is None else bias_init, self.scale_init,
                          self.force_float32_reductions)


    @nowrap
    def _fused(self, x, mask, use_mean, use_bias):
        """The layer as one fused layer_norm node (_src/norm.py), declaring the same
        params; None where Flax's ops compute something else (then nothing is declared)."""
        plan = _fused_norm.layer_norm_plan(self, x, self.reduction_axes, self.feature_axes, mask)
        if plan is None:
            return None
        k, acc = plan
        used = [jnp.result_type(x)] + [jnp.dtype(self.param_dtype)] * (int(self.use_scale) + int(use_bias))
        dtype = canonicalize_dtype(*[jnp.zeros((), d) for d in used], dtype=self.dtype)
        if not _fused_norm.out_dtype(acc, dtype):
            return None
        feature_shape = [x.shape[ax] for ax in _canonicalize_axes(x.ndim, self.feature_axes)]
        trailing = tuple(x.shape[x.ndim - k:])
        scale = bias = None
        if self.use_scale:
            scale = self.param("scale", self.scale_init, feature_shape, self.param_dtype)
            scale = jnp.reshape(jnp.asarray(scale, acc), trailing)
        if use_bias:
            bias = self.param("bias", self.bias_init, feature_shape, self.param_dtype)
            bias = jnp.reshape(jnp.asarray(bias, acc), trailing)
        y, _, _ = _fused_norm.layer_norm(jnp.asarray(x), scale, bias, epsilon=self.epsilon, use_mean=use_mean,
                                         feature_ndim=k, dtype=dtype)
        return y


class LayerNorm(_StatsNorm):
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
        y = self._fused(x, mask, True, self.use_bias)
        if y is not None:
            return y
        mean, var = self._stats(x, self.reduction_axes, mask)
        return self._normalize(x, mean, var, self.reduction_axes, self.feature_axes)


class RMSNorm(_StatsNorm):
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
        y = self._fused(x, mask, False, False)
        if y is not None:
            return y
        mean, var = self._stats(x, self.reduction_axes, mask, use_mean=False)
        return self._normalize(x, mean, var, self.reduction_axes, self.feature_axes, use_bias=False,
                               bias_init=initializers.zeros)


class GroupNorm(_StatsNorm):
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
        mean, var = self._stats(jnp.reshape(x, group_shape), list(reduction_axes[:-1]) + [-1], mask)
        mean = jnp.repeat(mean, group_size, axis=-1)
        var = jnp.repeat(var, group_size, axis=-1)
        return self._normalize(x, mean, var, reduction_axes[:-1], (feature_axis,))


class InstanceNorm(_StatsNorm):
    """Instance normalization (https://arxiv.org/abs/1607.08022): each example and each
    feature normalised over the remaining axes (all but the leading batch axis and
    ``feature_axes``), with a learned per-feature scale and bias.

    Attributes: epsilon (1e-6), dtype, param_dtype, use_bias, use_scale, bias_init,
    scale_init, feature_axes (default -1; may not include axis 0), axis_name,
    axis_index_groups, use_fast_variance: as in LayerNorm.

    Params: ``scale``, ``bias`` (shape = the feature axes).
    """
    epsilon: float = 1e-6
    dtype: Any = None
    param_dtype: Any = jnp.float32
    use_bias: bool = True
    use_scale: bool = True
    bias_init: Any = initializers.zeros
    scale_init: Any = initializers.ones
    feature_axes: Any = -1
    axis_name: Any = None
    axis_index_groups: Any = None
    use_fast_variance: bool = True
    force_float32_reductions: bool = True

    @compact
    def __call__(self, x, *, mask=None):
        feature_axes = _canonicalize_axes(x.ndim, self.feature_axes)
        if 0 in feature_axes:
            raise ValueError("The channel axes cannot include the leading dimension as this is assumed to be the "
                             "batch axis.")
        reduction_axes = [i for i in range(1, x.ndim) if i not in feature_axes]
        mean, var = self._stats(x, reduction_axes, mask)
        return self._normalize(x, mean, var, reduction_axes, feature_axes)


# =====================================================================================
# Weight reparametrisations (wrappers around another layer, through nn.map_variables)
# =====================================================================================
def _l2_normalize(x, axis=None, eps=1e-12):
    """``x / sqrt(sum(x^2, axis) + eps)`` (``axis=None``: over all of x)."""
    return x * lax.rsqrt(jnp.sum(x * x, axis=axis, keepdims=True) + eps)


def _path_name(layer_name, path):
    """'Dense_1/kernel' for the key path (collection, 'kernel') of a leaf of ``Dense_1``."""
    return layer_name + "/" + "/".join(str(getattr(k, "key", k)) for k in path[1:])


class SpectralNorm(Module):
    """Spectral normalization (https://arxiv.org/abs/1802.05957): the wrapped layer runs
    with each of its weight matrices divided by its largest singular value, estimated by
    power iteration.

        y = nn.SpectralNorm(nn.Dense(4))(x, update_stats=train)

    The power iteration's ``u`` vector and the last ``sigma`` of each weight are kept in
    ``collection_name`` (default 'batch_stats') under ``'<layer>/<param path>/u'`` and
    ``.../sigma``; with ``update_stats=True`` they are updated (pass
    ``mutable=['batch_stats']`` to ``apply``). Scalars and vectors are left as they are;
    higher-rank weights are flattened to (-1, last axis) unless ``error_on_non_matrix``.

    Attributes: layer_instance, n_steps (1), epsilon (1e-12), dtype, param_dtype,
    error_on_non_matrix (False), collection_name ('batch_stats').
    """
    layer_instance: Module
    n_steps: int = 1
    epsilon: float = 1e-12
    dtype: Any = None
    param_dtype: Any = jnp.float32
    error_on_non_matrix: bool = False
    collection_name: str = "batch_stats"

    @compact
    def __call__(self, *args, update_stats, **kwargs):
        from .. import tree_util
        from . import transforms

        def layer_forward(layer_instance):
            return layer_instance(*args, **kwargs)

        return transforms.map_variables(
            layer_forward,
            trans_in_fn=lambda vs: tree_util.tree_map_with_path(
                lambda path, v: self._spectral_normalize(path, v, update_stats), vs),
            init=self.is_initializing(), mutable=True)(self.layer_instance)

    def _spectral_normalize(self, path, vs, update_stats):
        from .. import random
        value = jnp.asarray(vs)
        value_shape = value.shape
        if value.ndim <= 1 or self.n_steps < 1:
            return value
        if value.ndim > 2:
            if self.error_on_non_matrix:
                raise ValueError(f"Input is {value.ndim}D but error_on_non_matrix is True")
            value = jnp.reshape(value, (-1, value.shape[-1]))
        name = _path_name(self.layer_instance.name, path)
        u_var = self.variable(self.collection_name, name + "/u", random.normal,
                              self.make_rng("params") if not self.has_variable(self.collection_name, name + "/u")
                              else None, (1, value.shape[-1]), self.param_dtype)
        u0 = u_var.value
        sigma_var = self.variable(self.collection_name, name + "/sigma", jnp.ones, (), self.param_dtype)
        for _ in range(self.n_steps):
            v0 = _l2_normalize(jnp.matmul(u0, jnp.transpose(value, (1, 0))), eps=self.epsilon)
            u0 = _l2_normalize(jnp.matmul(v0, value), eps=self.epsilon)
        u0 = lax.stop_gradient(u0)
        v0 = lax.stop_gradient(v0)
        sigma = jnp.matmul(jnp.matmul(v0, value), jnp.transpose(u0))[0, 0]
        value = value / jnp.where(sigma != 0, sigma, 1)
        value_bar = jnp.reshape(value, value_shape)
        if update_stats:
            u_var.value = u0
            sigma_var.value = sigma
        dtype = canonicalize_dtype(vs, u0, v0, sigma, dtype=self.dtype)
        return jnp.asarray(value_bar, dtype)


class WeightNorm(Module):
    """L2 weight normalization (https://arxiv.org/abs/1602.07868): the wrapped layer runs
    with each selected weight divided by its l2 norm over the non-feature axes and, with
    ``use_scale``, times a learned per-feature ``scale``.

        y = nn.WeightNorm(nn.Dense(4))(x)      # params: WeightNorm_0/{'Dense_1/kernel/scale'}

    Attributes:
      layer_instance: the wrapped module.
      epsilon (1e-12), dtype, param_dtype, use_scale (True), scale_init (ones).
      feature_axes: axes that keep their own norm and scale (default -1; None: one norm
        over the whole weight).
      variable_filter: names; a weight is normalised when its path ``'<layer>/<param
        path>'`` contains one of them (default ``{'kernel'}``; None or empty: all).
    """
    layer_instance: Module
    epsilon: float = 1e-12
    dtype: Any = None
    param_dtype: Any = jnp.float32
    use_scale: bool = True
    scale_init: Any = initializers.ones
    feature_axes: Any = -1
    variable_filter: Any = dataclasses.field(default_factory=lambda: {"kernel"})

    @compact
    def __call__(self, *args, **kwargs):
        from .. import tree_util
        from . import transforms

        def layer_forward(layer_instance):
            return layer_instance(*args, **kwargs)

        return transforms.map_variables(
            layer_forward, trans_in_fn=lambda vs: tree_util.tree_map_with_path(self._l2_normalize, vs),
            init=self.is_initializing())(self.layer_instance)

    def _l2_normalize(self, path, vs):
        value = jnp.asarray(vs)
        str_path = _path_name(self.layer_instance.name, path)
        if self.variable_filter and not any(name in str_path for name in self.variable_filter):
            return value
        if self.feature_axes is None:
            feature_axes = ()
            reduction_axes = tuple(range(value.ndim))
        else:
            feature_axes = _canonicalize_axes(value.ndim, self.feature_axes)
            reduction_axes = tuple(i for i in range(value.ndim) if i not in feature_axes)
        feature_shape = [1] * value.ndim
        reduced_feature_shape = []
        for ax in feature_axes:
            feature_shape[ax] = value.shape[ax]
            reduced_feature_shape.append(value.shape[ax])
        value_bar = _l2_normalize(value, axis=reduction_axes, eps=self.epsilon)
        args = [vs]
        if self.use_scale:
            scale = jnp.reshape(self.param(str_path + "/scale", self.scale_init, reduced_feature_shape,
                                           self.param_dtype), feature_shape)
            value_bar = value_bar * scale
            args.append(scale)
        dtype = canonicalize_dtype(*args, dtype=self.dtype)
        return jnp.asarray(value_bar, dtype)
