"""One call from a trained model and a batch of images to PNG explanations on disk (what
``podlet explain RUN_DIR --split test -n 16`` runs).

    out = podlet.explain.explain_to_dir(model, variables, images, "run/explain",
                                        labels=labels, class_names=names)
    out["paths"], out["preds"]
"""
import numpy as np

from .. import numpy as jnp
from .._src.errors import PodletError
from .grad_cam import _eval_kwargs, _path, default_layer, grad_cam
from .overlays import save_overlays
from .rollout import attention_rollout
from .saliency import saliency

__all__ = ["explain_to_dir", "default_method", "METHODS"]

METHODS = ("grad_cam", "rollout", "saliency")


def default_method(model):
    """The explanation ``podlet explain`` uses for `model` by default: attention rollout
    for a Vision Transformer with a class token, Grad-CAM otherwise (ResNets, a ViT
    with ``classifier='gap'``, CNNs)."""
    from ..models.vit import VisionTransformer
    if isinstance(model, VisionTransformer) and model.classifier == "token":
        return "rollout"
    return "grad_cam"


def explain_to_dir(model, variables, images, out_dir, labels=None, class_names=None, method="grad_cam",
                   layer=None, target_class=None, batch_size=16, apply_kwargs=None):
    """Predicts `images` (N, H, W, C), explains each prediction (or `target_class`) with
    `method` ('grad_cam', 'rollout', 'saliency', or None: Grad-CAM when `layer` is given,
    else :func:`default_method`) and
    writes one PNG per image under `out_dir` (a subdirectory per true class when
    `labels` are given, file names carrying the predicted class). Returns
    ``{'paths', 'preds', 'maps', 'layer', 'method'}``. Rollout explains what the class
    token attends to, whatever the class: `target_class` and `layer` do not apply."""
    if method is None:  # a layer asks for Grad-CAM
        method = "grad_cam" if layer is not None else default_method(model)
    if method not in METHODS:
        raise PodletError(f"explain: unknown method {method!r}; expected one of {', '.join(METHODS)}")
    if method == "rollout" and (layer is not None or target_class is not None):
        raise PodletError(f"explain: method 'rollout' takes no layer= or target_class= (got layer={layer!r}, "
                          f"target_class={target_class!r}); it rolls out every attention layer")
    images = np.asarray(images, np.float32)
    if images.ndim != 4:
        raise PodletError(f"explain: images must be (N, H, W, C), got shape {images.shape}")
    kw = _eval_kwargs(model) if apply_kwargs is None else dict(apply_kwargs)
    if method == "grad_cam":
        layer = _path(layer) if layer is not None else default_layer(model, variables, jnp.asarray(images[:1]),
                                                                      apply_kwargs)
    preds, maps = [], []
    for s in range(0, len(images), batch_size):
        x = jnp.asarray(images[s:s + batch_size])
        preds.append(np.asarray(jnp.argmax(model.apply(variables, x, **kw), axis=-1)))
        t = None if target_class is None else np.broadcast_to(np.asarray(target_class), (len(images),))[s:s + len(x)]
        if method == "grad_cam":
            maps.append(np.asarray(grad_cam(model, variables, x, target_class=t, layer=layer,
                                            apply_kwargs=apply_kwargs)))
        elif method == "rollout":
            maps.append(np.asarray(attention_rollout(model, variables, x, apply_kwargs=apply_kwargs)))
        else:
            maps.append(np.asarray(saliency(model, variables, x, target_class=t, apply_kwargs=apply_kwargs)))
    preds, maps = np.concatenate(preds), np.concatenate(maps)
    paths = save_overlays(images, maps, out_dir, labels=labels, preds=preds, class_names=class_names,
                          prefix=f"{method}_")
    return {"paths": paths, "preds": preds, "maps": maps, "layer": layer, "method": method}
