"""podlet.explain: why a model predicts what it predicts.

    cams = podlet.explain.grad_cam(model, variables, images)          # (N, H, W) in [0, 1]
    maps = podlet.explain.saliency(model, variables, images)          # (N, H, W) max_c |dy/dx|
    maps = podlet.explain.attention_rollout(vit, variables, images)   # (N, H, W), ViTs
    podlet.explain.save_overlays(images, cams, "run/explain", labels=labels, class_names=names)
    podlet.explain.pointing_game(cams, masks)                         # fraction of maxima inside
    podlet.explain.explain_to_dir(model, variables, images, "run/explain", labels=y, class_names=names)
"""
from .grad_cam import grad_cam, find_layers, default_layer, layer_activations_and_grads
from .saliency import saliency
from .overlays import save_overlays, overlay
from .pointing_game import pointing_game, random_baseline, boxes_to_masks
from .rollout import attention_rollout, attention_weights, rollout_matrix
from .report import explain_to_dir, default_method, METHODS
from .run import explain_run, load_run

__all__ = ["grad_cam", "saliency", "attention_rollout", "attention_weights", "rollout_matrix", "save_overlays",
           "overlay", "find_layers", "default_layer", "default_method", "METHODS", "layer_activations_and_grads",
           "pointing_game", "random_baseline", "boxes_to_masks", "explain_to_dir", "explain_run", "load_run"]
