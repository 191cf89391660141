"""Heatmaps over images, as PNG files (matplotlib's Agg canvas: no display needed).

    paths = podlet.explain.save_overlays(images, cams, "run/explain", labels=y, preds=p,
                                         class_names=names)
    # run/explain/<true class>/0003_pred-<class>.png: the image beside its overlay

Each file is written to a temporary name and renamed, so a crash never leaves a
half-written PNG.
"""
import os
import re
import tempfile

import numpy as np

from .._src.errors import PodletError

__all__ = ["overlay", "save_overlays"]


def _to_gray01(image):
    img = np.asarray(image, np.float32)
    if img.ndim == 3 and img.shape[-1] == 1:
        img = img[..., 0]
    lo, hi = float(img.min()), float(img.max())
    return (img - lo) / (hi - lo) if hi > lo else np.zeros_like(img)


def overlay(image, cam, alpha=0.4, cmap="jet"):
    """The (H, W, 3) uint8 RGB of `image` (H, W) or (H, W, C), min-max scaled, blended
    with `cam` (H, W, values in [0, 1]) coloured by `cmap`."""
    from matplotlib import colormaps
    cam = np.asarray(cam, np.float32)
    base = _to_gray01(image)
    if base.ndim == 2:
        base = np.repeat(base[..., None], 3, axis=-1)
    if base.shape[:2] != cam.shape:
        raise PodletError(f"overlay: image {base.shape[:2]} and cam {cam.shape} differ in size")
    heat = colormaps[cmap](np.clip(cam, 0.0, 1.0))[..., :3]
    return np.round(255 * ((1 - alpha) * base[..., :3] + alpha * heat)).astype(np.uint8)


def _safe(name):
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(name))


def _write_png_atomic(fig, path):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    FigureCanvasAgg(fig)
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".png", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            fig.savefig(f, format="png")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def save_overlays(images, cams, out_dir, labels=None, preds=None, class_names=None, alpha=0.4, cmap="jet",
                  prefix="", dpi=100):
    """Writes one PNG per image: the image, and the image with its heatmap over it.

    Args:
      images: (N, H, W) or (N, H, W, C).
      cams: (N, H, W) heatmaps in [0, 1] (grad_cam's output; saliency maps are rescaled).
      out_dir: the directory (created); with `labels`, one subdirectory per true class.
      labels, preds: optional (N,) class indices, shown in the title and file name.
      class_names: names for the class indices.
      prefix: prepended to every file name.
    Returns the list of paths written.
    """
    from matplotlib.figure import Figure
    images, cams = np.asarray(images), np.asarray(cams, np.float32)
    if images.ndim not in (3, 4) or cams.ndim != 3 or len(images) != len(cams):
        raise PodletError(f"save_overlays: expected images (N, H, W[, C]) and cams (N, H, W), got "
                          f"{images.shape} and {cams.shape}")
    n = len(images)
    for name, v in (("labels", labels), ("preds", preds)):
        if v is not None and len(v) != n:
            raise PodletError(f"save_overlays: {name} has {len(v)} entries for {n} images")

    def cname(c):
        c = int(c)
        return class_names[c] if class_names is not None and 0 <= c < len(class_names) else str(c)
    paths = []
    for i in range(n):
        cam = cams[i]
        lo, hi = float(cam.min()), float(cam.max())
        if lo < 0 or hi > 1:  # e.g. raw saliency: shown on its own scale
            cam = (cam - lo) / (hi - lo) if hi > lo else np.zeros_like(cam)
        sub = out_dir if labels is None else os.path.join(out_dir, _safe(cname(labels[i])))
        os.makedirs(sub, exist_ok=True)
        stem = f"{prefix}{i:04d}" + (f"_pred-{_safe(cname(preds[i]))}" if preds is not None else "")
        title = " ".join(([f"true: {cname(labels[i])}"] if labels is not None else []) +
                         ([f"pred: {cname(preds[i])}"] if preds is not None else []))
        fig = Figure(figsize=(6, 3.2), dpi=dpi)
        ax0, ax1 = fig.subplots(1, 2)
        ax0.imshow(_to_gray01(images[i]), cmap="gray", vmin=0, vmax=1)
        ax1.imshow(overlay(images[i], cam, alpha, cmap))
        for ax in (ax0, ax1):
            ax.set_axis_off()
        if title:
            fig.suptitle(title, fontsize=9)
        path = os.path.join(sub, stem + ".png")
        _write_png_atomic(fig, path)
        paths.append(path)
    return paths
