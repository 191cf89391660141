"""``podlet explain RUN_DIR --split test -n 16 [--method gradcam|rollout|saliency]``:
heatmap overlays of a run's predictions.

    out_dir = podlet.explain.explain_run("runs/smoke", split="test", n=16)
    # runs/smoke/explain/test/<true class>/grad_cam_0003_pred-<class>.png, summary.json

The method defaults by architecture (:func:`podlet.explain.default_method`): attention
rollout for a ViT with a class token, Grad-CAM for ResNets and the rest.

The run's selected checkpoint (EMA params when the run kept them) explains the first `n`
examples of the split, preprocessed as the run evaluated them. On the synthetic patches,
where each lesion's mask is known, summary.json also holds the pointing-game accuracy
of the lesion examples and its random-point baseline.
"""
import json
import os
import tempfile

import numpy as np

from .._src.errors import PodletError
from .pointing_game import pointing_game, random_baseline
from .report import METHODS, default_method, explain_to_dir

__all__ = ["explain_run", "load_run"]


def load_run(run_dir, checkpoint="best"):
    """``(cfg, model, variables)`` of a run directory's checkpoint ('best', 'latest' or a
    step), with the EMA params when the run kept them."""
    import yaml
    from .. import random
    from ..training import checkpoints as ckpt
    from ..training import config as C
    from ..training import steps as S
    cfg_path = os.path.join(run_dir, "config.yaml")
    if not os.path.exists(cfg_path):
        raise PodletError(f"{run_dir} has no config.yaml (is it a run directory?)")
    with open(cfg_path) as f:
        cfg = C.config_from_dict(yaml.safe_load(f), default_origin=cfg_path)
    model = S.build_model(cfg)
    state = S.create_train_state(cfg, model, S.create_learning_rate_schedule(cfg.train, 1), random.PRNGKey(0))
    mgr = ckpt.CheckpointManager(os.path.join(run_dir, "checkpoints"), best_metric=cfg.train.selection_metric,
                                 best_mode=C.METRIC_MODES[cfg.train.selection_metric])
    state = mgr.restore(state, checkpoint)
    params = state.ema_params if state.ema_params is not None else state.params
    return cfg, model, {"params": params, "batch_stats": state.batch_stats}


def _first_examples(data, role, n):
    images, labels = [], []
    for b in data.eval_batches(role, min(n, 64)):
        keep = np.asarray(b["mask"]) > 0
        images.append(np.asarray(b["image"])[keep])
        labels.append(np.asarray(b["label"])[keep])
        if sum(len(x) for x in labels) >= n:
            break
    return np.concatenate(images)[:n], np.concatenate(labels)[:n]


def _write_json_atomic(obj, path):
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=2)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def explain_run(run_dir, split="test", n=16, checkpoint="best", method=None, layer=None, out_dir=None,
                data=None):
    """Writes PNG explanations of the first `n` examples of `split` under
    ``RUN_DIR/explain/<split>/`` (or `out_dir`), one subdirectory per true class, plus
    summary.json; returns the directory. `method` is 'grad_cam', 'rollout', 'saliency'
    or None (Grad-CAM when `layer` is given, else by architecture:
    :func:`podlet.explain.default_method`). `data` replaces
    the run's dataset (an object with ``eval_batches(split, batch_size)`` and
    ``class_names``, as podlet.training's)."""
    if n < 1:
        raise PodletError(f"explain: n must be >= 1, got {n}")
    if method is not None and method not in METHODS:
        raise PodletError(f"explain: unknown method {method!r}; expected one of {', '.join(METHODS)}")
    cfg, model, variables = load_run(run_dir, checkpoint)
    if method is None:  # a layer asks for Grad-CAM
        method = "grad_cam" if layer is not None else default_method(model)
    if data is None:
        from ..training.input import make_data
        data = make_data(cfg)
    splits = dict(cfg.data.splits)
    role = split if split in splits else next((r for r, s in splits.items() if s == split), None)
    if role is None:
        raise PodletError(f"explain: unknown split {split!r}; the run's splits are {splits}")
    images, labels = _first_examples(data, role, n)
    out_dir = out_dir or os.path.join(run_dir, "explain", split)
    res = explain_to_dir(model, variables, images, out_dir, labels=labels, class_names=list(data.class_names),
                         method=method, layer=layer)
    summary = {"run_dir": os.path.abspath(run_dir), "checkpoint": checkpoint, "split": split, "n": int(len(labels)),
               "method": method, "layer": "/".join(res["layer"]) if res["layer"] else None,
               "accuracy": float(np.mean(res["preds"] == labels)),
               "files": [os.path.relpath(p, out_dir) for p in res["paths"]]}
    source = getattr(data, "sources", {}).get(role)
    if source is not None and hasattr(source, "lesion"):
        lesions = [source.lesion(i) for i in range(len(labels))]
        idx = [i for i, les in enumerate(lesions) if les is not None]
        if idx:
            masks = np.stack([lesions[i]["mask"] for i in idx])
            if masks.shape[1:] == res["maps"].shape[1:]:
                summary["pointing_game"] = {"lesion_examples": len(idx),
                                            "accuracy": pointing_game(res["maps"][idx], masks=masks),
                                            "random_baseline": random_baseline(masks)}
    _write_json_atomic(summary, os.path.join(out_dir, "summary.json"))
    return out_dir
