"""Fashion-MNIST, read from the IDX files of Debian's ``dataset-fashion-mnist`` package.

The files are decoded by the C++ IDX reader (``podlet._core.read_idx``): gzip, header,
magic number and sizes are all checked there, and errors name the file.
"""
from __future__ import annotations

import os

import numpy as np

#: Where ``apt-get install dataset-fashion-mnist`` puts the files.
DEFAULT_DATA_DIR = "/usr/share/datasets/fashion-mnist"

#: Label index -> name, as in the Fashion-MNIST paper (Xiao et al., 2017).
CLASS_NAMES = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)

_PREFIX = {"train": "train", "test": "t10k"}


def _files(split: str, data_dir: str) -> tuple[str, str]:
    p = _PREFIX[split]
    return (os.path.join(data_dir, f"{p}-images-idx3-ubyte.gz"),
            os.path.join(data_dir, f"{p}-labels-idx1-ubyte.gz"))


def load_fashion_mnist(split: str = "train", data_dir: str | os.PathLike | None = None):
    """Loads one split of Fashion-MNIST.

    Args:
      split: ``"train"`` (60000 examples) or ``"test"`` (10000 examples).
      data_dir: directory holding ``{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz``;
        defaults to ``/usr/share/datasets/fashion-mnist`` (Debian package
        ``dataset-fashion-mnist``).

    Returns:
      ``(images, labels)``: images uint8 of shape ``(N, 28, 28, 1)`` (NHWC), labels int32
      of shape ``(N,)`` with values 0..9 (see ``CLASS_NAMES``). Both are fresh, writable
      NumPy arrays.

    Raises:
      ValueError: unknown split.
      FileNotFoundError: the files are missing (the message says which package to install).
      podlet.PodletError: a file is not a valid IDX file, or images and labels disagree.
    """
    if split not in _PREFIX:
        raise ValueError(f"unknown Fashion-MNIST split {split!r}; expected 'train' or 'test'")
    default = data_dir is None
    data_dir = os.fspath(DEFAULT_DATA_DIR if default else data_dir)
    images_path, labels_path = _files(split, data_dir)
    missing = [f for f in (images_path, labels_path) if not os.path.isfile(f)]
    if missing:
        hint = ("install it with: apt-get install dataset-fashion-mnist" if default else
                "pass data_dir=None to use Debian's dataset-fashion-mnist package "
                "(apt-get install dataset-fashion-mnist)")
        raise FileNotFoundError(
            f"Fashion-MNIST {split} split not found: missing {', '.join(missing)}; {hint}")

    from podlet import _core  # the compiled reader; imported late so podlet.data imports cheaply

    images = np.array(_core.read_idx(images_path), copy=True)
    labels = np.asarray(_core.read_idx(labels_path)).astype(np.int32)
    if images.dtype != np.uint8 or images.ndim != 3 or images.shape[1:] != (28, 28):
        raise _core.PodletError(
            f"IDX file '{images_path}': expected uint8 images of shape (N, 28, 28), "
            f"got {images.dtype} {images.shape}")
    if labels.ndim != 1 or labels.shape[0] != images.shape[0]:
        raise _core.PodletError(
            f"IDX file '{labels_path}': expected {images.shape[0]} labels (one per image in "
            f"'{images_path}'), got shape {labels.shape}")
    if labels.size and (labels.min() < 0 or labels.max() >= len(CLASS_NAMES)):
        raise _core.PodletError(
            f"IDX file '{labels_path}': labels must be in 0..{len(CLASS_NAMES) - 1}, "
            f"got range {labels.min()}..{labels.max()}")
    return images.reshape(images.shape + (1,)), labels
