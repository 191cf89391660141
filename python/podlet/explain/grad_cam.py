"""Grad-CAM (Selvaraju et al., https://arxiv.org/abs/1610.02391) for any podlet.nn model.

    cams = podlet.explain.grad_cam(model, variables, images)           # (N, H, W) in [0, 1]
    cams = podlet.explain.grad_cam(model, variables, images, target_class=3, layer="ResNetBlock_7")

For the chosen layer's activations A (N, h, w, C) and the class score y_c (the logit):
channel weights a_c = mean over (h, w) of dy_c/dA, cam = relu(sum_c a_c A_c), upsampled
bilinearly (half-pixel centres, as jax.image.resize and OpenCV) to the image size and
min-max normalised per image (as pytorch-grad-cam). dy_c/dA is the gradient with respect
to a zero perturbation added to the layer's output through a method interceptor, so no
model code has to change (the same trick as Flax's ``Module.perturb``). A transformer
layer's (N, L, C) tokens are explained as the (N, g, g, C) grid of patches they stand
for (the class token dropped), as pytorch-grad-cam's ViT ``reshape_transform``.
"""
import inspect
import math

import numpy as np

from .. import numpy as jnp
from .. import tree_util
from .._src import core
from .._src.errors import PodletError
from ..nn import Module
from ..nn.module import intercept_methods

__all__ = ["grad_cam", "find_layers", "default_layer", "bilinear_resize_matrix", "layer_activations_and_grads",
           "tokens_to_grid"]


def _eval_kwargs(model):
    try:
        params = inspect.signature(type(model).__call__).parameters
    except (TypeError, ValueError):
        return {}
    for name, value in (("train", False), ("training", False), ("deterministic", True), ("is_training", False)):
        if name in params:
            return {name: value}
    return {}


def _path(layer):
    if isinstance(layer, str):
        return tuple(p for p in layer.split("/") if p)
    return tuple(layer)


def find_layers(model, variables, images, apply_kwargs=None):
    """``[(path, output shape)]`` of every submodule ``__call__`` of `model` on `images`,
    in the order the calls return (found by tracing: no kernel runs)."""
    return [(p, s) for p, s, _ in _find_layers(model, variables, images, apply_kwargs)]


def _find_layers(model, variables, images, apply_kwargs=None):
    kw = _eval_kwargs(model) if apply_kwargs is None else dict(apply_kwargs)
    found = []

    def interceptor(next_fun, args, kwargs, context):
        out = next_fun(*args, **kwargs)
        if context.method_name == "__call__" and context.module.path and hasattr(out, "shape"):
            found.append((tuple(context.module.path), tuple(out.shape), out.dtype))
        return out

    def run(v, x):
        with intercept_methods(interceptor):
            return model.apply(v, x, **kw)
    core.eval_shape(run, variables, images)
    return found


def default_layer(model, variables, images, apply_kwargs=None):
    """The layer Grad-CAM explains by default: for a Vision Transformer the first
    LayerNorm of the last encoder block (its tokens, as pytorch-grad-cam advises: after
    the last block only the class token reaches the head); for a Swin Transformer the
    last block of the last stage (its tokens, already an (N, h, w, C) grid); otherwise
    the last submodule whose output is a 4-D (N, h, w, C) feature map (for podlet's
    ResNets, the last residual block: the last conv stage)."""
    from ..models.swin import SwinTransformer
    from ..models.vit import VisionTransformer
    if isinstance(model, VisionTransformer):
        return ("Transformer", f"encoderblock_{model.num_layers - 1}", "LayerNorm_0")
    if isinstance(model, SwinTransformer):
        stage = len(model.depths) - 1
        return (f"stage_{stage}_block_{model.depths[stage] - 1}",)
    maps = [p for p, s in find_layers(model, variables, images, apply_kwargs) if len(s) == 4]
    if not maps:
        raise PodletError(f"grad_cam: {type(model).__name__} has no submodule returning a 4-D (N, h, w, C) "
                          "feature map; pass layer= the path of the layer to explain")
    return maps[-1]


def layer_activations_and_grads(model, variables, images, target_class=None, layer=None, apply_kwargs=None):
    """``(logits, A, dscore/dA, targets)`` for the layer at path `layer`: the class
    score is the logit of `target_class` (an int, one int per image, or None for each
    image's predicted class)."""
    images = jnp.asarray(images)
    kw = _eval_kwargs(model) if apply_kwargs is None else dict(apply_kwargs)
    if layer is None:
        layer = default_layer(model, variables, images, apply_kwargs)
    layer = _path(layer)
    shapes = {p: (s, d) for p, s, d in _find_layers(model, variables, images, apply_kwargs)}
    if layer not in shapes:
        known = ", ".join("/".join(p) for p in shapes) or "(none)"
        raise PodletError(f"grad_cam: layer {'/'.join(layer)!r} is not a submodule of {type(model).__name__}; "
                          f"submodules: {known}")
    n = images.shape[0]
    if target_class is not None:
        t = np.broadcast_to(np.asarray(target_class), (n,)).astype(np.int32)
        if t.ndim != 1:
            raise PodletError(f"grad_cam: target_class must be an int or one int per image, got shape {t.shape}")
    calls = []

    def score(delta, x):
        def interceptor(next_fun, args, kwargs, context):
            out = next_fun(*args, **kwargs)
            if context.method_name == "__call__" and tuple(context.module.path) == layer:
                calls.append(out)
                out = out + delta
            return out
        with intercept_methods(interceptor):
            logits = model.apply(variables, x, **kw)
        if logits.ndim != 2:
            raise PodletError(f"grad_cam: the model must return (N, num_classes) logits, got shape {logits.shape}")
        if target_class is None:
            tgt = jnp.argmax(core.bind("stop_gradient", logits), axis=-1)
        else:
            if int(t.max()) >= logits.shape[1] or int(t.min()) < 0:
                raise PodletError(f"grad_cam: target_class {target_class} out of range for "
                                  f"{logits.shape[1]} classes")
            tgt = jnp.asarray(t)
        onehot = (tgt[:, None] == jnp.arange(logits.shape[1])[None, :]).astype(logits.dtype)
        # Images are independent in eval mode, so the gradient of the sum is each
        # image's own gradient.
        return jnp.sum(logits * onehot), (logits, calls[-1], tgt)

    zeros = jnp.zeros(*shapes[layer])  # the activation's dtype, so a bf16 model stays bf16
    (_, (logits, acts, tgt)), grads = core.value_and_grad(score, has_aux=True)(zeros, images)
    if len(calls) != 1:
        raise PodletError(f"grad_cam: layer {'/'.join(layer)!r} is called {len(calls)} times per forward pass; "
                          "choose a layer called once")
    return logits, acts, grads, tgt


def tokens_to_grid(x):
    """(N, L, C) tokens as an (N, g, g, C) grid, dropping the leading class token(s) when
    L is a square plus one (a ViT's patch tokens are row-major patches)."""
    n, length, c = x.shape
    g = math.isqrt(length)
    extra = 0
    if g * g != length:
        g = math.isqrt(length - 1)
        extra = 1
        if g * g != length - 1:
            raise PodletError(f"grad_cam: a layer with {length} tokens is neither a square grid of patches nor "
                              "one plus a square grid; explain a 4-D feature map instead")
    return jnp.reshape(x[:, extra:], (n, g, g, c))


def bilinear_resize_matrix(out_size, in_size):
    """(out_size, in_size) interpolation matrix of bilinear resizing with half-pixel
    centres (edge samples clamped), so ``R_h @ img @ R_w.T`` resizes an image."""
    src = (np.arange(out_size) + 0.5) * (in_size / out_size) - 0.5
    src = np.clip(src, 0, in_size - 1)
    lo = np.floor(src).astype(np.int64)
    hi = np.minimum(lo + 1, in_size - 1)
    frac = src - lo
    m = np.zeros((out_size, in_size), np.float64)
    m[np.arange(out_size), lo] += 1 - frac
    m[np.arange(out_size), hi] += frac
    return m.astype(np.float32)


def grad_cam(model, variables, images, target_class=None, layer=None, apply_kwargs=None, normalize=True):
    """Grad-CAM heatmaps, (N, H, W) float32, for NHWC `images`.

    Args:
      model: a podlet.nn.Module returning (N, num_classes) logits (called in eval mode:
        ``train=False`` or ``deterministic=True``, whichever its ``__call__`` takes).
      variables: its variables.
      images: (N, H, W, C).
      target_class: the class to explain: an int, one int per image, or None (each
        image's predicted class).
      layer: path of the submodule whose output is explained, as 'A/B' or ('A', 'B')
        (default: see :func:`default_layer`). Its output is a 4-D (N, h, w, C) feature
        map or (N, L, C) transformer tokens (a square grid, after a class token).
      apply_kwargs: keyword arguments for ``model.apply`` instead of the eval-mode guess.
      normalize: min-max normalise each map to [0, 1] (a constant map becomes 0).
    """
    if not isinstance(model, Module):
        raise TypeError(f"grad_cam: model must be a podlet.nn.Module, got {type(model).__name__}")
    images = jnp.asarray(images)
    if images.ndim != 4:
        raise PodletError(f"grad_cam: images must be (N, H, W, C), got shape {images.shape}")
    _, acts, grads, _ = layer_activations_and_grads(model, variables, images, target_class, layer, apply_kwargs)
    if acts.ndim == 3:  # transformer tokens
        acts, grads = tokens_to_grid(acts), tokens_to_grid(grads)
    if acts.ndim != 4:
        raise PodletError(f"grad_cam: layer output must be a 4-D (N, h, w, C) feature map or (N, L, C) tokens, "
                          f"got shape {acts.shape}")
    acts = acts.astype(jnp.float32)
    weights = jnp.mean(grads.astype(jnp.float32), axis=(1, 2))                                # (N, C)
    cam = jnp.maximum(jnp.einsum("nhwc,nc->nhw", acts, weights), 0.0)     # (N, h, w)
    _, h, w = cam.shape
    rh = jnp.asarray(bilinear_resize_matrix(images.shape[1], h))
    rw = jnp.asarray(bilinear_resize_matrix(images.shape[2], w))
    cam = jnp.einsum("nHw,Ww->nHW", jnp.einsum("Hh,nhw->nHw", rh, cam), rw)
    if normalize:
        cam = cam - jnp.min(cam, axis=(1, 2), keepdims=True)
        cam = cam / (jnp.max(cam, axis=(1, 2), keepdims=True) + 1e-7)
    return cam
