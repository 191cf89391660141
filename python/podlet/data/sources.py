"""Data sources: random access to decoded examples, the thing every ``Dataset`` reads.

A source is a ``podlet._core.DataSource`` (C++): ``len(src)``, ``src.get(i)`` ->
``{"image": uint8 HxWxC, "label": int, "id": str}``, ``src.describe()``,
``src.class_names()``. The pipeline calls ``get`` from its worker threads without the
GIL, so every source is implemented in C++; this module builds them from NumPy arrays
and from Fashion-MNIST.
"""
from __future__ import annotations

import os

import numpy as np

from .. import _core
from .fashion_mnist import CLASS_NAMES as FASHION_MNIST_CLASS_NAMES
from .fashion_mnist import load_fashion_mnist


def array_source(images, labels, ids=None, class_names=None, *, name="array_source"):
    """A source over images held in memory.

    Args:
      images: ``(N, H, W)`` or ``(N, H, W, C)`` array. uint8 is used as is (borrowed
        without a copy when C-contiguous: do not modify it while a pipeline reads it).
        Other integer dtypes (and bool) are accepted when every value is in 0..255 and are
        copied to uint8. Float arrays are rejected: the pipeline divides pixels by 255 as
        the seed's ``tf.cast(image, tf.float32) / 255.0`` does, so convert first, e.g.
        ``np.round(x * 255).astype(np.uint8)`` for images in [0, 1].
      labels: ``(N,)`` non-negative integers (below ``len(class_names)`` if given).
      ids: optional ``N`` strings (the ``"id"`` of each example); default ``"0", "1", ...``.
      class_names: optional label names.

    Returns:
      A ``podlet._core.DataSource``.
    """
    images = np.asarray(images)
    if images.ndim == 3:
        images = images[..., None]
    if images.ndim != 4:
        raise ValueError(f"{name}: images must have shape (N, H, W) or (N, H, W, C), got {images.shape}")
    if images.dtype != np.uint8:
        if images.dtype == np.bool_ or np.issubdtype(images.dtype, np.integer):
            if images.size and (images.min() < 0 or images.max() > 255):
                raise ValueError(f"{name}: {images.dtype} pixel values must be in 0..255 to become uint8, "
                                 f"got range {images.min()}..{images.max()}")
            images = images.astype(np.uint8)
        else:
            raise TypeError(f"{name}: images must be uint8 (or integers in 0..255), got {images.dtype}; "
                            "convert floats in [0, 1] with np.round(x * 255).astype(np.uint8)")
    images = np.ascontiguousarray(images)
    labels = np.asarray(labels)
    if labels.ndim != 1 or not (np.issubdtype(labels.dtype, np.integer) or labels.size == 0):
        raise ValueError(f"{name}: labels must be a 1-D integer array, got {labels.dtype} {labels.shape}")
    if labels.shape[0] != images.shape[0]:
        raise ValueError(f"{name}: {images.shape[0]} images but {labels.shape[0]} labels")
    if labels.size and (labels.min() < 0 or labels.max() > np.iinfo(np.int32).max):
        raise ValueError(f"{name}: labels must be in 0..2**31-1, got range {labels.min()}..{labels.max()}")
    if ids is not None:
        ids = [str(i) for i in ids]
        if len(ids) != images.shape[0]:
            raise ValueError(f"{name}: {images.shape[0]} images but {len(ids)} ids")
    names = [str(c) for c in class_names] if class_names is not None else []
    return _core.data_array_source(images, labels.astype(np.int32), ids, names, name)


def fashion_mnist(split: str = "train", data_dir: str | os.PathLike | None = None):
    """Fashion-MNIST as a source (28x28x1 uint8, 10 classes, ids ``"<split>/<index>"``),
    read from Debian's ``dataset-fashion-mnist`` IDX files (see ``load_fashion_mnist``)."""
    images, labels = load_fashion_mnist(split, data_dir)
    ids = [f"{split}/{i}" for i in range(images.shape[0])]
    return array_source(images, labels, ids, FASHION_MNIST_CLASS_NAMES, name=f"fashion_mnist:{split}")


def read_batch(source, indices, threads: int = 0):
    """Decodes ``source[indices]`` in parallel: ``(images uint8 (n, H, W, C), labels int32 (n,),
    ids list of str)``, no normalisation or augmentation (evaluation, export, plots)."""
    return _core.data_read_batch(source, [int(i) for i in indices], int(threads))
