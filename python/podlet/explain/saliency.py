"""Vanilla gradient saliency (Simonyan et al., https://arxiv.org/abs/1312.6034).

    maps = podlet.explain.saliency(model, variables, images)     # (N, H, W): max_c |dy/dx|

The map of each image is the largest absolute gradient, over its channels, of the
explained class's logit with respect to the input pixels.
"""
import numpy as np

from .. import numpy as jnp
from .._src import core
from .._src.errors import PodletError
from ..nn import Module
from .grad_cam import _eval_kwargs

__all__ = ["saliency"]


def saliency(model, variables, images, target_class=None, apply_kwargs=None):
    """|d score / d input|, reduced by the maximum over channels: (N, H, W) float32.

    `target_class` is an int, one int per image, or None (each image's predicted class);
    the other arguments are as for :func:`grad_cam`."""
    if not isinstance(model, Module):
        raise TypeError(f"saliency: model must be a podlet.nn.Module, got {type(model).__name__}")
    images = jnp.asarray(images)
    if images.ndim != 4:
        raise PodletError(f"saliency: images must be (N, H, W, C), got shape {images.shape}")
    kw = _eval_kwargs(model) if apply_kwargs is None else dict(apply_kwargs)
    n = images.shape[0]
    fixed = None
    if target_class is not None:
        fixed = np.broadcast_to(np.asarray(target_class), (n,)).astype(np.int32)

    def score(x):
        logits = model.apply(variables, x, **kw)
        if logits.ndim != 2:
            raise PodletError(f"saliency: the model must return (N, num_classes) logits, got shape {logits.shape}")
        if fixed is not None and (int(fixed.max()) >= logits.shape[1] or int(fixed.min()) < 0):
            raise PodletError(f"saliency: target_class {target_class} out of range for {logits.shape[1]} classes")
        tgt = jnp.argmax(core.bind("stop_gradient", logits), axis=-1) if fixed is None else jnp.asarray(fixed)
        onehot = (tgt[:, None] == jnp.arange(logits.shape[1])[None, :]).astype(logits.dtype)
        return jnp.sum(logits * onehot)

    g = core.grad(score)(images.astype(jnp.float32))
    return jnp.max(jnp.abs(g), axis=-1)
