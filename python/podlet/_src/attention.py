"""jax.nn.dot_product_attention on the fused primitive (cpp/podlet/prims/attention.cc).

One ``dot_product_attention`` node computes softmax((q . k) * scale + bias, masked) . v
in flash-style tiles (the [T, S] score matrix of a head is never materialised); its VJP
is one ``dot_product_attention_bwd`` node. ``podlet.nn.dot_product_attention`` is both
Flax's function and jax.nn's (their positional arguments agree; jax.nn's are keyword
only): jax.nn's keywords select jax.nn's semantics, and Flax's form takes the fused path
whenever it computes the same thing (no attention-weight dropout, no custom einsums or
precision; sown weights are computed beside it, so capturing them leaves the output's
bits unchanged) and, by default ("auto"), where the fused kernel is the faster: float32
heads of any size, other dtypes' heads of at most AUTO_MAX_SCORES score entries (Swin's
windows, not ViT's 197 tokens in bf16). ``podlet.config.update("fused_attention", True)``
fuses every Flax-form call (the memory of a long sequence: no [T, S] scores), ``False``
(PODLET_FUSED_ATTENTION=0) none, for Flax's exact rounding (it computes bf16 logits and
softmax in bf16; the fused kernel works in f32).
"""
import numpy as np

from . import dtypes
from .core import bind


def _as4(x, full=None):
    """x with leading 1s up to rank 4; with ``full`` ([B, N, T, S]), broadcast to it
    where a dim is neither 1 nor full (the primitive's bias / mask contract)."""
    from .. import numpy as jnp
    x = jnp.asarray(x)
    x = jnp.reshape(x, (1,) * (4 - x.ndim) + tuple(x.shape)) if x.ndim < 4 else x
    if full is not None and any(d not in (1, f) for d, f in zip(x.shape, full)):
        x = jnp.broadcast_to(x, full)
    return x


def fused(query, key, value, bias=None, mask=None, *, scale, is_causal=False, query_seq_lengths=None,
          key_value_seq_lengths=None, local_window_size=None):
    """The primitive on 4-D [B, T, N, H] / [B, S, K, H] operands: (out, lse [B, N, T])."""
    args = [query, key, value]
    attrs = {"scale": float(scale), "causal": int(bool(is_causal))}
    for flag, x in (("has_bias", bias), ("has_mask", mask), ("has_qlen", query_seq_lengths),
                    ("has_kvlen", key_value_seq_lengths)):
        if x is not None:  # the primitive takes the present ones in this order
            args.append(x)
            attrs[flag] = 1
    if local_window_size is not None:
        attrs["window_left"], attrs["window_right"] = (int(w) for w in local_window_size)
    return bind("dot_product_attention", *args, **attrs)


def jax_nn_dot_product_attention(query, key, value, bias=None, mask=None, *, scale=None, is_causal=False,
                                 query_seq_lengths=None, key_value_seq_lengths=None, local_window_size=None,
                                 implementation=None, return_residual=False):
    """jax.nn.dot_product_attention (implementation 'xla' semantics, fused)."""
    from .. import numpy as jnp
    from .. import lax
    if implementation not in (None, "xla"):
        if implementation == "cudnn":
            raise RuntimeError("implementation='cudnn' is cuDNN flash attention, a GPU kernel; podlet runs on the "
                               "CPU: use implementation=None or 'xla'")
        raise ValueError(f"Unsupported implementation option: {implementation}")
    query, key, value = jnp.asarray(query), jnp.asarray(key), jnp.asarray(value)
    out_shape = tuple(query.shape)
    q, k, v = _as4(query), _as4(key), _as4(value)
    bias = _as4(bias) if bias is not None else None
    mask = _as4(mask) if mask is not None else None

    def check(t, shape, dtype, name):
        if t is None:
            return
        if t.ndim != len(shape):
            raise ValueError(f"{name} ndim should be {len(shape)}, but got {t.ndim}")
        if dtype is not None and np.dtype(t.dtype) != np.dtype(dtype):
            raise ValueError(f"{name} dtype should be {np.dtype(dtype)}, but got {np.dtype(t.dtype)}")
        for i in range(t.ndim):
            if shape[i] != -1 and t.shape[i] != shape[i]:
                raise ValueError(f"{name} shape should be {shape}: but got {tuple(t.shape)}")

    if query_seq_lengths is not None:
        query_seq_lengths = jnp.asarray(query_seq_lengths)
    if key_value_seq_lengths is not None:
        key_value_seq_lengths = jnp.asarray(key_value_seq_lengths)
    if isinstance(local_window_size, int):
        local_window_size = (local_window_size, local_window_size)
    B, S, K, H = k.shape
    check(v, [B, S, K, H], k.dtype, "value")
    check(q, [B, -1, -1, H], k.dtype, "query")
    check(mask, [-1] * 4, np.bool_, "mask")
    check(bias, [-1] * 4, None, "bias")
    check(query_seq_lengths, [B], np.int32, "query_seq_lengths")
    check(key_value_seq_lengths, [B], np.int32, "key_value_seq_lengths")
    if q.shape[-2] % K != 0:
        raise ValueError(f"The number of query heads must be a multiple of key/value heads, but got "
                         f"{q.shape[-2]} vs {K}")
    if not dtypes.is_float(q.dtype):
        raise ValueError(f"dot_product_attention needs floating-point query/key/value, got {np.dtype(q.dtype)}")
    scale_val = (1.0 / np.sqrt(H)) if scale is None else scale
    full = (B, q.shape[2], q.shape[1], S)
    bias = _as4(bias, full) if bias is not None else None
    mask = _as4(mask, full) if mask is not None else None
    out, lse = fused(q, k, v, bias, mask, scale=scale_val, is_causal=is_causal,
                     query_seq_lengths=query_seq_lengths, key_value_seq_lengths=key_value_seq_lengths,
                     local_window_size=local_window_size)
    out = jnp.reshape(out, out_shape)
    if not return_residual:
        return out
    res = lax.stop_gradient(jnp.transpose(lse, (0, 2, 1)).astype(k.dtype))  # B N T -> B T N, as jax
    return out, jnp.reshape(res, out_shape[:-1])


def flax_fusable(query, key, value, bias, mask, dropout_active, precision, einsum_dot_general, qk_einsum,
                 av_einsum):
    """Whether Flax's dot_product_attention may run as the fused primitive: the same
    softmax(q k^T / sqrt(d) + bias, masked) v, only rounded differently."""
    if precision is not None:
        return False
    if einsum_dot_general is not None or qk_einsum is not None or av_einsum is not None:
        return False
    if getattr(query, "ndim", 0) != 4 or key.ndim != 4 or value.ndim != 4:
        return False
    if query.shape[2] != key.shape[2] or key.shape != value.shape or query.shape[0] != key.shape[0]:
        return False  # Flax's own assertions report these
    for t in (bias, mask):
        if t is not None and (getattr(t, "ndim", np.ndim(t)) > 4):
            return False
    return fusable(query.shape[1] * key.shape[1], dropout_active, query.dtype)


def fusable(scores, dropout_active, dtype=None):
    """Whether the config lets an attention with ``scores`` (T x S) entries per head of
    ``dtype`` run as the fused primitive: ``fused_attention`` on ("auto": float32, or at
    most AUTO_MAX_SCORES), no active dropout on the attention weights, no bf16
    default_matmul_precision (the einsums take it, op by op). Flax's form
    (``flax_fusable``) and Swin's windows ask it."""
    from .config import config
    from .precision import algorithm
    mode = config.fused_attention
    if not mode or dropout_active or algorithm(None):
        return False
    if mode is True or scores <= AUTO_MAX_SCORES:
        return True
    return dtype is not None and np.dtype(dtype) == np.float32


# "auto" fuses heads whose score matrix has at most this many entries, and float32 heads
# of any size. bench/attention.py (2 threads), fused forward + backward against the
# unfused graph: Swin's 7x7 windows (49 x 49) 2.4x faster fused on a Zen 3 host (AVX2,
# 2026-11-29), 1.47x (bf16) / 1.53x (f32) on a Zen 4 (AVX512_BF16, 2026-11-30); ViT's
# 197 x 197 heads in f32 1.03x (Zen 3) and 1.25x (Zen 4; the ViT-Tiny f32 train step
# 1680 -> 1614-1624 ms), in bf16 0.86x (Zen 3) and 1.04x (Zen 4, within the step's noise):
# bf16 ViT stays unfused (Flax's bf16 softmax rounding); fused_attention=True there saves
# the [T, S] scores' memory at about the same speed. After the unfused graph's products
# got faster on Zen 4 (GEMM edges, 2026-11-30): Swin's windows 1.13x (bf16), ViT's f32
# heads 0.98x (a tie; still fused: no [T, S] scores, peak RSS 1140 vs 1328 MB), bf16
# 0.94x. With exp on FMAs (2026-11-30): bf16 ViT heads 1.12x fused alone, but the ViT-Tiny
# bf16 step fused 37.4-37.7 img/s against 36.9-39.0 unfused (alternating runs): unchanged.
AUTO_MAX_SCORES = 64 * 64


def flax_fused(query, key, value, bias, mask):
    """Flax's dot_product_attention (query, key, value promoted to one dtype) fused: the
    scale is 1/sqrt(depth), masked logits take a large negative value as Flax's
    finfo.min does (a fully masked row averages the values, as in Flax)."""
    B, T, N, _ = query.shape
    full = (B, N, T, key.shape[1])
    if mask is not None:
        mask = _as4(mask, full)
        if mask.dtype != np.bool_:
            mask = mask.astype(bool)
    if bias is not None:
        bias = _as4(bias, full)
    out, _ = fused(query, key, value, bias, mask, scale=1.0 / np.sqrt(query.shape[-1]))
    return out
