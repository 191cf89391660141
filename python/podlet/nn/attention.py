"""Attention (flax.linen.attention): dot_product_attention(_weights),
MultiHeadDotProductAttention (alias MultiHeadAttention), SelfAttention, and the mask helpers.

    y = nn.MultiHeadDotProductAttention(num_heads=3)(x)                 # self-attention
    y = nn.MultiHeadDotProductAttention(num_heads=3, dropout_rate=0.1)(x, deterministic=not train)

Params (as Flax's): ``query``, ``key``, ``value`` are DenseGeneral layers with kernel
``(features, num_heads, head_dim)`` and bias ``(num_heads, head_dim)``; ``out`` has kernel
``(num_heads, head_dim, out_features)``. ``decode=True`` keeps Flax's autoregressive cache
(the ``cache`` collection: ``cached_key``, ``cached_value``, ``cache_index``; apply with
``mutable=["cache"]``, one position per call after an ``init`` on the full length).
"""
import functools
import inspect
import warnings
from typing import Any, Callable

import numpy as np

from .. import lax
from .. import numpy as jnp
from .. import random
from .._src import attention as _attention
from . import initializers
from .activations import softmax
from .linear import DenseGeneral, default_kernel_init, promote_dtype
from .module import Module, compact, merge_param
from .normalization import LayerNorm

__all__ = ["dot_product_attention_weights", "dot_product_attention", "MultiHeadDotProductAttention",
           "MultiHeadAttention", "SelfAttention", "make_attention_mask", "make_causal_mask", "combine_masks"]


def dot_product_attention_weights(query, key, bias=None, mask=None, broadcast_dropout=True, dropout_rng=None,
                                  dropout_rate=0.0, deterministic=False, dtype=None, precision=None, module=None,
                                  force_fp32_for_softmax=False, einsum_dot_general=None, einsum=None):
    """softmax(q k^T / sqrt(depth) + bias, masked) with optional dropout.

    Args:
      query: ``[batch..., q_length, num_heads, depth]``.
      key: ``[batch..., kv_length, num_heads, depth]``.
      bias: added to the logits; broadcastable to ``[batch..., num_heads, q_length, kv_length]``.
      mask: boolean, same broadcast shape; False entries get the dtype's lowest value.
      broadcast_dropout: one dropout mask shared across the batch dims.
      dropout_rng, dropout_rate, deterministic: attention-weight dropout.
      dtype: the computation dtype (default: promoted from query and key).
      module: if given, the weights are sown into its 'intermediates' collection.
      force_fp32_for_softmax: compute the softmax in float32 for half-precision inputs.

    Returns:
      ``[batch..., num_heads, q_length, kv_length]`` weights.
    """
    if (precision or einsum_dot_general) and einsum:
        raise ValueError("precision/einsum_dot_general and einsum are mutually exclusive. Please specify only one "
                         "of them.")
    if not einsum:
        einsum = jnp.einsum
    query, key = promote_dtype(query, key, dtype=dtype)
    dtype = query.dtype
    assert query.ndim == key.ndim, "q, k must have same rank."
    assert query.shape[:-3] == key.shape[:-3], "q, k batch dims must match."
    assert query.shape[-2] == key.shape[-2], "q, k num_heads must match."
    assert query.shape[-1] == key.shape[-1], "q, k depths must match."

    depth = query.shape[-1]
    query = query / jnp.sqrt(depth).astype(dtype)
    attn_weights = einsum("...qhd,...khd->...hqk", query, key)
    if bias is not None:
        attn_weights = attn_weights + bias
    if mask is not None:
        big_neg = jnp.finfo(dtype).min
        attn_weights = jnp.where(mask, attn_weights, big_neg)
    if force_fp32_for_softmax and dtype != jnp.float32:
        attn_weights = softmax(attn_weights.astype(jnp.float32))
    else:
        attn_weights = softmax(attn_weights).astype(dtype)
    if module:
        module.sow("intermediates", "attention_weights", attn_weights)
    if not deterministic and dropout_rate > 0.0:
        keep_prob = 1.0 - dropout_rate
        if broadcast_dropout:
            dropout_shape = tuple([1] * (key.ndim - 2)) + tuple(attn_weights.shape[-2:])
            keep = random.bernoulli(dropout_rng, keep_prob, dropout_shape)
        else:
            keep = random.bernoulli(dropout_rng, keep_prob, tuple(attn_weights.shape))
        multiplier = keep.astype(dtype) / jnp.asarray(keep_prob, dtype=dtype)
        attn_weights = attn_weights * multiplier
    return attn_weights


_JAX_NN_ONLY = ("scale", "is_causal", "query_seq_lengths", "key_value_seq_lengths", "local_window_size",
                "implementation", "return_residual")


def dot_product_attention(query, key, value, bias=None, mask=None, broadcast_dropout=True, dropout_rng=None,
                          dropout_rate=0.0, deterministic=False, dtype=None, precision=None, module=None,
                          force_fp32_for_softmax=False, einsum_dot_general=None, qk_attn_weights_einsum=None,
                          attn_weights_value_einsum=None, **jax_nn_kwargs):
    """Scaled dot-product attention (https://arxiv.org/abs/1706.03762): Flax's
    ``flax.linen.dot_product_attention`` and ``jax.nn.dot_product_attention`` in one.

    Flax's form (args as :func:`dot_product_attention_weights`, plus ``value``
    ``[batch..., kv_length, num_heads, v_depth]``) returns ``[batch..., q_length,
    num_heads, v_depth]``; without attention-weight dropout, sown weights, custom einsums
    or precision it runs as one fused primitive (``_src/attention.py``).

    jax.nn's form: any of its keyword-only arguments (``scale``, ``is_causal``,
    ``query_seq_lengths``, ``key_value_seq_lengths``, ``local_window_size``,
    ``implementation``, ``return_residual``) selects jax.nn's semantics: query
    ``[B, T, N, H]`` (or ``[T, N, H]``), key / value ``[B, S, K, H]`` with grouped-query
    heads, f32 logits and softmax, always fused. A call with none of them and no Flax-only
    argument computes the same thing either way.
    """
    if jax_nn_kwargs:
        unknown = set(jax_nn_kwargs) - set(_JAX_NN_ONLY)
        if unknown:
            raise TypeError(f"dot_product_attention() got unexpected keyword argument(s) {sorted(unknown)}")
        if dropout_rate or dropout_rng is not None or dtype is not None or precision is not None or module:
            raise TypeError("dot_product_attention: jax.nn's keyword arguments "
                            f"({', '.join(sorted(jax_nn_kwargs))}) cannot be combined with Flax's dropout, dtype, "
                            "precision or module arguments")
        return _attention.jax_nn_dot_product_attention(query, key, value, bias, mask, **jax_nn_kwargs)
    flax_defaults = (broadcast_dropout is True and dropout_rng is None and not dropout_rate and dtype is None
                     and precision is None and module is None and not force_fp32_for_softmax
                     and einsum_dot_general is None and qk_attn_weights_einsum is None
                     and attn_weights_value_einsum is None)
    if flax_defaults and np.ndim(query) in (3, 4) and np.shape(key)[-2] != np.shape(query)[-2]:
        # grouped-query heads: only jax.nn's form has them
        return _attention.jax_nn_dot_product_attention(query, key, value, bias, mask)
    if bool(qk_attn_weights_einsum) != bool(attn_weights_value_einsum):
        raise ValueError("qk_attn_weights_einsum and attn_weights_value_einsum must be specified together.")
    if (precision or einsum_dot_general) and (qk_attn_weights_einsum or attn_weights_value_einsum):
        raise ValueError("precision/einsum_dot_general and qk_attn_weights_einsum/attn_weights_value_einsum are "
                         "mutually exclusive. Please specify only one of them.")
    query, key, value = promote_dtype(query, key, value, dtype=dtype)
    dtype = query.dtype
    assert key.ndim == query.ndim == value.ndim, "q, k, v must have same rank."
    assert query.shape[:-3] == key.shape[:-3] == value.shape[:-3], "q, k, v batch dims must match."
    assert query.shape[-2] == key.shape[-2] == value.shape[-2], "q, k, v num_heads must match."
    assert key.shape[-3] == value.shape[-3], "k, v lengths must match."
    if _attention.flax_fusable(query, key, value, bias, mask, dropout_rate > 0.0 and not deterministic,
                               precision, einsum_dot_general, qk_attn_weights_einsum, attn_weights_value_einsum):
        if module:  # the weights are sown (Flax's switch); the output stays the fused one
            dot_product_attention_weights(query, key, bias, mask, dtype=dtype, module=module,
                                          force_fp32_for_softmax=force_fp32_for_softmax, deterministic=True)
        return _attention.flax_fused(query, key, value, bias, mask)
    attn_weights = dot_product_attention_weights(query, key, bias, mask, broadcast_dropout, dropout_rng, dropout_rate,
                                                 deterministic, dtype, precision, module, force_fp32_for_softmax,
                                                 einsum_dot_general=einsum_dot_general, einsum=qk_attn_weights_einsum)
    if not attn_weights_value_einsum:
        attn_weights_value_einsum = jnp.einsum
    return attn_weights_value_einsum("...hqk,...khd->...qhd", attn_weights, value)


class MultiHeadDotProductAttention(Module):
    """Multi-head dot-product attention.

    Attributes:
      num_heads: number of heads; ``qkv_features`` must be divisible by it.
      dtype: the computation dtype (default: promoted from inputs and params).
      param_dtype: the dtype of the params (default float32).
      qkv_features: width of query/key/value (default: the input's last dim).
      out_features: width of the output (default: the input's last dim).
      broadcast_dropout: share the attention-dropout mask across batch dims (default True).
      dropout_rate: dropout on the attention weights (default 0).
      deterministic: disable dropout (attribute or call argument; only needed when
        dropout_rate > 0).
      kernel_init, bias_init: initializers of the four DenseGeneral layers
        (``out_kernel_init`` / ``out_bias_init`` override them for ``out``).
      use_bias: whether the projections have biases (default True).
      attention_fn: ``dot_product_attention`` or a compatible function.
      decode: keep an autoregressive cache in the ``cache`` collection (as Flax's): ``init``
        on a full-length input makes it, each later call takes one position.
      normalize_qk: LayerNorm (no bias) on queries and keys (``query_ln``, ``key_ln``).
      force_fp32_for_softmax: softmax in float32 for half-precision inputs.
    """
    num_heads: int
    dtype: Any = None
    param_dtype: Any = jnp.float32
    qkv_features: Any = None
    out_features: Any = None
    broadcast_dropout: bool = True
    dropout_rate: float = 0.0
    deterministic: Any = None
    precision: Any = None
    kernel_init: Any = default_kernel_init
    out_kernel_init: Any = None
    bias_init: Any = initializers.zeros_init()
    out_bias_init: Any = None
    use_bias: bool = True
    attention_fn: Callable[..., Any] = dot_product_attention
    decode: bool = False
    normalize_qk: bool = False
    force_fp32_for_softmax: bool = False
    qkv_dot_general: Any = None
    out_dot_general: Any = None
    qkv_dot_general_cls: Any = None
    out_dot_general_cls: Any = None
    qk_attn_weights_einsum_cls: Any = None
    attn_weights_value_einsum_cls: Any = None

    @compact
    def __call__(self, inputs_q, inputs_k=None, inputs_v=None, *, inputs_kv=None, mask=None, deterministic=None,
                 dropout_rng=None, sow_weights=False):
        """Projects the inputs to multi-head queries, keys and values, attends, projects back.

        With `inputs_k` and `inputs_v` None this is self-attention; with only
        `inputs_v` None the values are `inputs_k`. `mask` is boolean,
        ``[batch..., num_heads, q_length, kv_length]`` (broadcastable).
        """
        if inputs_kv is not None:
            if inputs_k is not None or inputs_v is not None:
                raise ValueError("If either `inputs_k` or `inputs_v` is not None, `inputs_kv` must be None. If "
                                 "`inputs_kv` is not None, both `inputs_k` and `inputs_v` must be None.")
            inputs_k = inputs_v = inputs_kv
            warnings.warn("The inputs_kv arg will be deprecated soon. Use inputs_k and inputs_v instead.",
                          DeprecationWarning)
        else:
            if inputs_k is None:
                if inputs_v is not None:
                    raise ValueError("`inputs_k` cannot be None if `inputs_v` is not None.")
                inputs_k = inputs_q
            if inputs_v is None:
                inputs_v = inputs_k

        features = self.out_features or inputs_q.shape[-1]
        qkv_features = self.qkv_features or inputs_q.shape[-1]
        assert qkv_features % self.num_heads == 0, (
            f"Memory dimension ({qkv_features}) must be divisible by number of heads ({self.num_heads}).")
        head_dim = qkv_features // self.num_heads

        dense = functools.partial(DenseGeneral, axis=-1, dtype=self.dtype, param_dtype=self.param_dtype,
                                  features=(self.num_heads, head_dim), kernel_init=self.kernel_init,
                                  bias_init=self.bias_init, use_bias=self.use_bias, precision=self.precision,
                                  dot_general=self.qkv_dot_general, dot_general_cls=self.qkv_dot_general_cls)
        query, key, value = (dense(name="query")(inputs_q), dense(name="key")(inputs_k),
                             dense(name="value")(inputs_v))
        if self.normalize_qk:
            query = LayerNorm(name="query_ln", use_bias=False, dtype=self.dtype, param_dtype=self.param_dtype)(query)
            key = LayerNorm(name="key_ln", use_bias=False, dtype=self.dtype, param_dtype=self.param_dtype)(key)

        if self.decode:
            # The autoregressive cache (flax's 'cache' collection): `init` on a full-length input makes
            # zero-filled cached_key / cached_value and cache_index 0; each later call with a single
            # position writes its key and value at cache_index and attends to positions <= it.
            is_initialized = self.has_variable("cache", "cached_key")
            cached_key = self.variable("cache", "cached_key", jnp.zeros, key.shape, key.dtype)
            cached_value = self.variable("cache", "cached_value", jnp.zeros, value.shape, value.dtype)
            cache_index = self.variable("cache", "cache_index", lambda: jnp.array(0, dtype=jnp.int32))
            if is_initialized:
                *batch_dims, max_length, num_heads, depth_per_head = cached_key.value.shape
                expected_shape = tuple(batch_dims) + (1, num_heads, depth_per_head)
                if expected_shape != tuple(query.shape):
                    raise ValueError(f"Autoregressive cache shape error, expected query shape {expected_shape} "
                                     f"instead got {tuple(query.shape)}.")
                cur_index = cache_index.value
                zero = jnp.array(0, dtype=cur_index.dtype)
                indices = (zero,) * len(batch_dims) + (cur_index, zero, zero)
                key = lax.dynamic_update_slice(cached_key.value, key, indices)
                value = lax.dynamic_update_slice(cached_value.value, value, indices)
                cached_key.value = key
                cached_value.value = value
                cache_index.value = cache_index.value + 1
                mask = combine_masks(mask, jnp.broadcast_to(jnp.arange(max_length) <= cur_index,
                                                            tuple(batch_dims) + (1, 1, max_length)))

        if self.dropout_rate > 0.0:  # `deterministic` is required only with dropout
            m_deterministic = merge_param("deterministic", self.deterministic, deterministic)
            if not m_deterministic and dropout_rng is None:
                dropout_rng = self.make_rng("dropout")
        else:
            m_deterministic = True

        attn_kwargs = dict(
            mask=mask, dropout_rng=dropout_rng, dropout_rate=self.dropout_rate,
            broadcast_dropout=self.broadcast_dropout, deterministic=m_deterministic, dtype=self.dtype,
            precision=self.precision, force_fp32_for_softmax=self.force_fp32_for_softmax,
            qk_attn_weights_einsum=self.qk_attn_weights_einsum_cls() if self.qk_attn_weights_einsum_cls else None,
            attn_weights_value_einsum=(self.attn_weights_value_einsum_cls()
                                       if self.attn_weights_value_einsum_cls else None))
        params = inspect.signature(self.attention_fn).parameters
        attn_kwargs = {k: v for k, v in attn_kwargs.items() if k in params}
        if sow_weights:
            x = self.attention_fn(query, key, value, **attn_kwargs, module=self)
        else:
            x = self.attention_fn(query, key, value, **attn_kwargs)
        return DenseGeneral(features=features, axis=(-2, -1), kernel_init=self.out_kernel_init or self.kernel_init,
                            bias_init=self.out_bias_init or self.bias_init, use_bias=self.use_bias,
                            dtype=self.dtype, param_dtype=self.param_dtype, precision=self.precision,
                            dot_general=self.out_dot_general, dot_general_cls=self.out_dot_general_cls,
                            name="out")(x)


class MultiHeadAttention(MultiHeadDotProductAttention):
    """Alias of MultiHeadDotProductAttention (auto-named ``MultiHeadAttention_{i}``)."""


class SelfAttention(MultiHeadDotProductAttention):
    """Self-attention: ``MultiHeadDotProductAttention.__call__(inputs_q)`` (deprecated in Flax)."""

    @compact
    def __call__(self, inputs_q, mask=None, deterministic=None, dropout_rng=None, sow_weights=False):
        warnings.warn("SelfAttention will be deprecated soon. Use `MultiHeadDotProductAttention.__call__(inputs_q)` "
                      "instead.", DeprecationWarning)
        return super().__call__(inputs_q, mask=mask, deterministic=deterministic, dropout_rng=dropout_rng,
                                sow_weights=sow_weights)


def make_attention_mask(query_input, key_input, pairwise_fn=jnp.multiply, extra_batch_dims=0, dtype=jnp.float32):
    """A ``[batch..., 1, len_q, len_kv]`` mask ``pairwise_fn(query_input[..., :, None], key_input[..., None, :])``."""
    mask = pairwise_fn(jnp.expand_dims(query_input, axis=-1), jnp.expand_dims(key_input, axis=-2))
    mask = jnp.expand_dims(mask, axis=-3)
    mask = jnp.expand_dims(mask, axis=tuple(range(extra_batch_dims)))
    return mask.astype(dtype)


def make_causal_mask(x, extra_batch_dims=0, dtype=jnp.float32):
    """A ``[batch..., 1, len, len]`` lower-triangular mask for inputs ``[batch..., len]``."""
    idxs = jnp.broadcast_to(jnp.arange(x.shape[-1], dtype=jnp.int32), x.shape)
    return make_attention_mask(idxs, idxs, jnp.greater_equal, extra_batch_dims=extra_batch_dims, dtype=dtype)


def combine_masks(*masks, dtype=jnp.float32):
    """The logical and of the masks that are not None (None if all are)."""
    masks_list = [m for m in masks if m is not None]
    if not masks_list:
        return None
    assert all(m.ndim == masks_list[0].ndim for m in masks_list), (
        f"masks must have same rank: {tuple(m.ndim for m in masks_list)}")
    mask, *other_masks = masks_list
    for other in other_masks:
        mask = jnp.logical_and(mask, other)
    return mask.astype(dtype)
