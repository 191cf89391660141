"""Flax's LayerNorm / RMSNorm and jax.nn's softmax / log_softmax on the fused row
primitives (cpp/podlet/prims/norm.cc).

``layer_norm`` is one pass over each row (sum and sum of squares, then normalise, scale
and shift from cache) with Flax's arithmetic: statistics in float32 (float64 for float64
input), var = max(0, E[x^2] - E[x]^2), ``(x - mean) * (rsqrt(var + eps) * scale) + bias``,
cast to Flax's output dtype. Its VJP is one ``layer_norm_bwd`` node. ``softmax`` and
``log_softmax`` over the last axis read and write each row once (max subtraction as
jax.nn's); their VJPs are ``softmax_bwd`` / ``log_softmax_bwd``.

The layers and functions take the fused path only where they compute the same thing
(``layer_norm_fusable``, ``softmax_fusable``); ``podlet.config.update("fused_norms",
False)`` (or PODLET_FUSED_NORMS=0 at start) turns it off for Flax's op-by-op graph.
A bf16 softmax is computed in float32 and rounded once (jax rounds each op to bf16).
"""
import numpy as np

from . import dtypes
from .core import bind


def layer_norm(x, scale, bias, *, epsilon, use_mean, feature_ndim, dtype):
    """The primitive: (y, mean, rstd). `scale` / `bias` (or None) have x's trailing
    `feature_ndim` dims and the statistics dtype (float32; float64 for float64 x)."""
    args = [x]
    attrs = {"epsilon": float(epsilon), "use_mean": int(bool(use_mean)), "feature_ndim": int(feature_ndim),
             "dtype": dtypes.dtype(dtype).name}
    for flag, p in (("has_scale", scale), ("has_bias", bias)):
        if p is not None:
            args.append(p)
            attrs[flag] = 1
    return bind("layer_norm", *args, **attrs)


def _trailing(axes, ndim):
    """k when `axes` (canonical, non-negative) are the last k axes, else None."""
    s = sorted(axes)
    k = len(s)
    return k if k >= 1 and s == list(range(ndim - k, ndim)) else None


def layer_norm_plan(mdl, x, reduction_axes, feature_axes, mask):
    """The fused plan for a Flax LayerNorm / RMSNorm `mdl` on `x`: (feature_ndim, stats
    dtype) when the fused primitive computes what Flax's ops do, else None."""
    from .config import config
    from ..nn.normalization import _canonicalize_axes
    if not config.fused_norms or mask is not None or getattr(mdl, "axis_name", None) is not None:
        return None
    if not getattr(mdl, "use_fast_variance", True):
        return None  # E[(x - E[x])^2]: another rounding than the one-pass statistics
    if not hasattr(x, "ndim") or x.ndim < 1:
        return None
    red = _canonicalize_axes(x.ndim, reduction_axes)
    feat = _canonicalize_axes(x.ndim, feature_axes)
    k = _trailing(red, x.ndim)
    if k is None or set(red) != set(feat):
        return None
    xd = dtypes.dtype(x.dtype)
    if xd not in (dtypes.float32, dtypes.bfloat16, dtypes.float64):
        return None
    acc = dtypes.float64 if xd == dtypes.float64 else dtypes.float32
    # Flax's statistics dtype: dtype (or x's), promoted to float32 when forced.
    from .. import numpy as jnp
    sd = dtypes.dtype(mdl.dtype) if mdl.dtype is not None else xd
    if getattr(mdl, "force_float32_reductions", True):
        sd = dtypes.dtype(jnp.promote_types(sd, dtypes.float32))
    if sd != acc:
        return None
    pd = dtypes.dtype(mdl.param_dtype)
    if pd not in ((dtypes.float32, dtypes.bfloat16) if acc == dtypes.float32 else (dtypes.float32, dtypes.bfloat16,
                                                                                  dtypes.float64)):
        return None  # float64 params with float32 x: Flax normalises in float64
    return k, acc


def out_dtype(acc, dtype):
    """Whether layer_norm can produce `dtype` from statistics in `acc`."""
    d = dtypes.dtype(dtype)
    return d in ((dtypes.float32, dtypes.bfloat16) if acc == dtypes.float32 else (dtypes.float64,))


def softmax_fusable(x, axis, where):
    """jax.nn.softmax / log_softmax as the fused primitive: no `where`, the last axis, a
    float32 / bfloat16 / float64 x, fusion on."""
    from .config import config
    if not config.fused_norms or where is not None:
        return False
    nd = getattr(x, "ndim", None)
    if not nd:
        return False
    if isinstance(axis, (tuple, list)):
        if len(axis) != 1:
            return False
        axis = axis[0]
    if not isinstance(axis, (int, np.integer)) or axis % nd != nd - 1:
        return False
    return dtypes.dtype(x.dtype) in (dtypes.float32, dtypes.bfloat16, dtypes.float64)


def softmax(x):
    return bind("softmax", x)


def log_softmax(x):
    return bind("log_softmax", x)
