"""The pointing game (Zhang et al., https://arxiv.org/abs/1608.00507): does a heatmap's
maximum fall inside the object? Here the object is the lesion of a patch.

    acc = pointing_game(cams, masks)        # fraction of images whose argmax is in the mask
    chance = random_baseline(masks)         # what a uniformly random point scores
"""
import numpy as np

from .._src.errors import PodletError

__all__ = ["pointing_game", "random_baseline", "boxes_to_masks"]


def boxes_to_masks(boxes, height, width):
    """(N, H, W) bool masks of (N, 4) boxes ``(y0, x0, y1, x1)``, ends exclusive."""
    boxes = np.asarray(boxes)
    if boxes.ndim != 2 or boxes.shape[1] != 4:
        raise PodletError(f"boxes must be (N, 4) as (y0, x0, y1, x1), got shape {boxes.shape}")
    yy, xx = np.arange(height)[:, None], np.arange(width)[None, :]
    return np.stack([(yy >= y0) & (yy < y1) & (xx >= x0) & (xx < x1) for y0, x0, y1, x1 in boxes])


def _masks(cams, masks, boxes):
    cams = np.asarray(cams)
    if cams.ndim != 3:
        raise PodletError(f"pointing_game: cams must be (N, H, W), got shape {cams.shape}")
    if (masks is None) == (boxes is None):
        raise PodletError("pointing_game: pass exactly one of masks= or boxes=")
    m = boxes_to_masks(boxes, *cams.shape[1:]) if boxes is not None else np.asarray(masks).astype(bool)
    if m.ndim == 4 and m.shape[-1] == 1:
        m = m[..., 0]
    if m.shape != cams.shape:
        raise PodletError(f"pointing_game: masks {m.shape} and cams {cams.shape} differ in shape")
    return cams, m


def pointing_game(cams, masks=None, boxes=None, tolerance=0):
    """Fraction of images whose heatmap maximum (first in row-major order on ties) lies
    inside its mask, or within `tolerance` pixels (Chebyshev distance) of it."""
    cams, m = _masks(cams, masks, boxes)
    hits = []
    for cam, mask in zip(cams, m):
        y, x = np.unravel_index(int(np.argmax(cam)), cam.shape)
        t = int(tolerance)
        hits.append(bool(mask[max(y - t, 0):y + t + 1, max(x - t, 0):x + t + 1].any()))
    return float(np.mean(hits)) if hits else float("nan")


def random_baseline(masks=None, boxes=None, shape=None):
    """The expected pointing-game accuracy of a uniformly random point: the mean
    fraction of each image covered by its mask (pass `shape` (H, W) with boxes)."""
    if boxes is not None:
        if shape is None:
            raise PodletError("random_baseline: pass shape=(H, W) with boxes=")
        masks = boxes_to_masks(boxes, *shape)
    m = np.asarray(masks).astype(bool)
    return float(m.reshape(len(m), -1).mean(axis=1).mean())
