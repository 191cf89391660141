"""Attention rollout (Abnar & Zuidema, https://arxiv.org/abs/2005.00928) for Vision
Transformers.

    maps = podlet.explain.attention_rollout(model, variables, images)     # (N, H, W) in [0, 1]
    logits, weights = podlet.explain.attention_weights(model, variables, images)

Each layer's attention weights A_l (N, heads, L, L) are averaged over heads (or their
max / min), the identity is added for the residual connection, and the rows are
re-normalised to sum to 1: Â_l = (mean_h A_l + I) / row sums. The rollout is the
product through the layers, R = Â_L ... Â_2 Â_1, and the map of an image is the class
token's row of R over the patch tokens, laid back on the (g, g) patch grid, upsampled
bilinearly to the image (as Grad-CAM's) and min-max normalised. It explains what the
class token attends to, not a particular class.

The weights come from the model itself: every ``nn.MultiHeadDotProductAttention`` call
is intercepted (``nn.intercept_methods``) and run with ``sow_weights=True``, which sows
its softmax weights into the 'intermediates' collection (Flax's switch) and leaves its
output unchanged; no model code changes.
"""
import math

import numpy as np

from .. import numpy as jnp
from .._src import core
from .._src.errors import PodletError
from ..nn import Module
from ..nn.attention import MultiHeadDotProductAttention
from ..nn.module import intercept_methods
from .grad_cam import _eval_kwargs, bilinear_resize_matrix

__all__ = ["attention_weights", "attention_rollout", "rollout_matrix", "HEAD_FUSIONS"]

HEAD_FUSIONS = ("mean", "max", "min")


def attention_weights(model, variables, images, apply_kwargs=None):
    """``(logits, [(path, weights)])``: the model's logits and the attention weights
    ``(N, heads, L, L)`` of every ``MultiHeadDotProductAttention`` call, in call order
    (for a ViT, encoder block 0 first), from one forward pass in eval mode."""
    if not isinstance(model, Module):
        raise TypeError(f"attention_weights: model must be a podlet.nn.Module, got {type(model).__name__}")
    images = jnp.asarray(images)
    kw = _eval_kwargs(model) if apply_kwargs is None else dict(apply_kwargs)
    paths = []

    def interceptor(next_fun, args, kwargs, context):
        if context.method_name == "__call__" and isinstance(context.module, MultiHeadDotProductAttention):
            paths.append(tuple(context.module.path))
            kwargs = dict(kwargs, sow_weights=True)
        return next_fun(*args, **kwargs)

    def run(v, x):
        paths.clear()
        with intercept_methods(interceptor):
            logits, state = model.apply(v, x, mutable=["intermediates"], **kw)
        weights = []
        for p in paths:
            node = state["intermediates"]
            for k in p:
                node = node[k]
            weights.append(node["attention_weights"][-1])
        return logits, weights

    logits, weights = core.jit(run)(variables, images)
    if not paths:
        raise PodletError(f"attention_weights: {type(model).__name__} calls no nn.MultiHeadDotProductAttention; "
                          "attention rollout needs a transformer (e.g. podlet.models.VisionTransformer)")
    return logits, list(zip(paths, weights))


def rollout_matrix(weights, head_fusion="mean"):
    """R = Â_L ... Â_1 (N, L, L), float64, from a list of (N, heads, L, L) weights."""
    if head_fusion not in HEAD_FUSIONS:
        raise PodletError(f"attention_rollout: head_fusion {head_fusion!r} is not one of {HEAD_FUSIONS}")
    if not weights:
        raise PodletError("attention_rollout: no attention weights to roll out")
    result = None
    for a in weights:
        a = np.asarray(a, np.float64)
        if a.ndim != 4 or a.shape[-1] != a.shape[-2]:
            raise PodletError(f"attention_rollout: attention weights must be (N, heads, L, L), got shape {a.shape}")
        a = getattr(a, head_fusion)(axis=1) + np.eye(a.shape[-1])
        a = a / a.sum(axis=-1, keepdims=True)
        result = a if result is None else a @ result
    return result


def attention_rollout(model, variables, images, head_fusion="mean", apply_kwargs=None, normalize=True):
    """Attention-rollout heatmaps, (N, H, W) float32, for NHWC `images`.

    Args:
      model: a podlet.nn.Module whose tokens are a class token followed by a square
        grid of patch tokens, row-major (``podlet.models.VisionTransformer`` with
        ``classifier='token'``), attending through ``nn.MultiHeadDotProductAttention``.
      variables: its variables.
      images: (N, H, W, C).
      head_fusion: how each layer's heads are combined: 'mean' (the paper), 'max' or 'min'.
      apply_kwargs: keyword arguments for ``model.apply`` instead of the eval-mode guess.
      normalize: min-max normalise each map to [0, 1] (a constant map becomes 0).
    """
    if not isinstance(model, Module):
        raise TypeError(f"attention_rollout: model must be a podlet.nn.Module, got {type(model).__name__}")
    from ..models.vit import VisionTransformer
    if isinstance(model, VisionTransformer) and model.classifier != "token":
        raise PodletError(f"attention_rollout: the ViT has classifier={model.classifier!r} and so no class token "
                          "whose attention to roll out; use grad_cam (method='grad_cam')")
    images = jnp.asarray(images)
    if images.ndim != 4:
        raise PodletError(f"attention_rollout: images must be (N, H, W, C), got shape {images.shape}")
    if head_fusion not in HEAD_FUSIONS:
        raise PodletError(f"attention_rollout: head_fusion {head_fusion!r} is not one of {HEAD_FUSIONS}")
    _, weights = attention_weights(model, variables, images, apply_kwargs)
    r = rollout_matrix([w for _, w in weights], head_fusion)
    n, length, _ = r.shape
    g = math.isqrt(length - 1)
    if g * g != length - 1:
        raise PodletError(f"attention_rollout: {length} tokens are not a class token plus a square grid of patches")
    cam = r[:, 0, 1:].reshape(n, g, g)
    rh = bilinear_resize_matrix(images.shape[1], g).astype(np.float64)
    rw = bilinear_resize_matrix(images.shape[2], g).astype(np.float64)
    cam = np.einsum("Hh,nhw,Ww->nHW", rh, cam, rw)
    if normalize:
        cam = cam - cam.min(axis=(1, 2), keepdims=True)
        cam = cam / (cam.max(axis=(1, 2), keepdims=True) + 1e-7)
    return jnp.asarray(cam.astype(np.float32))
