"""Synthetic mammography patches: the embedded default dataset.

Shaped like TFDS ``curated_breast_imaging_ddsm/patches:3.0.0`` (grayscale patches, five
classes, the real split sizes and class imbalance), generated procedurally in C++ from
``(seed, split, index)``: nothing is stored, any example can be produced on any thread,
and the same arguments give the same bytes on every run.

Classes and their fractions (every split; BACKGROUND 46.6% and malignant 22.3% are
CBIS-DDSM's train split, the rest follows its case mix):

=====  ========================  ========  =====  ==========  =====
label  name                      fraction  train  validation  test
=====  ========================  ========  =====  ==========  =====
0      BACKGROUND                46.6%     23197  2600        4553
1      BENIGN_CALCIFICATION      16.8%     8363   938         1641
2      BENIGN_MASS               14.3%     7119   798         1397
3      MALIGNANT_CALCIFICATION    9.9%     4928   552         967
4      MALIGNANT_MASS            12.4%     6173   692         1212
=====  ========================  ========  =====  ==========  =====

What each class looks like (over fibroglandular texture: fat and dense tissue from
filtered noise, curvilinear strands, grain):

* BENIGN_MASS: oval, at most gently lobulated, smooth wide margin, low contrast.
* MALIGNANT_MASS: irregular outline, sharper margin, 0-14 spicules; sizes overlap.
* BENIGN_CALCIFICATION: 2-8 coarse round dots scattered widely.
* MALIGNANT_CALCIFICATION: 6-20 fine pleomorphic specks in a tight cluster.
* BACKGROUND: tissue only; 30% carry one or two isolated coarse dots.

Masses lose contrast in dense tissue, as in real mammograms. Geometry is in units of the
image side, so an example looks the same at 224 and at 64 pixels, only coarser.
"""
from __future__ import annotations

import numpy as np

from .. import _core

#: Label index -> name, spelled as TFDS's curated_breast_imaging_ddsm/patches.
CLASS_NAMES = ("BACKGROUND", "BENIGN_CALCIFICATION", "BENIGN_MASS",
               "MALIGNANT_CALCIFICATION", "MALIGNANT_MASS")
SPLITS = ("train", "validation", "test")


def synthetic_ddsm(split: str = "train", image_size: int = 224, scale: float = 1.0, seed: int = 0):
    """The synthetic patch dataset, one split, as a source.

    Args:
      split: ``"train"`` (49,780 examples), ``"validation"`` (5,580) or ``"test"`` (9,770).
      image_size: side of the square uint8 patches (16..4096; 224 as the seed, 64 for
        smoke runs).
      scale: multiplies the split size (rounded; at least one example per class).
      seed: selects the dataset; examples are pure functions of (seed, split, index).

    Returns:
      A ``podlet._core.SyntheticDDSM`` (a ``DataSource``) with, besides ``get``/``len``:
      ``label(i)`` and ``labels()`` (cheap: no image is generated), ``class_counts()``,
      ``lesion(i)`` (see ``synthetic_ddsm_lesion``).
    """
    if split not in SPLITS:
        raise ValueError(f"synthetic_ddsm: unknown split {split!r}; expected one of {SPLITS}")
    if isinstance(image_size, bool) or not isinstance(image_size, (int, np.integer)):
        raise TypeError(f"synthetic_ddsm: image_size must be an int, got {image_size!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"synthetic_ddsm: seed must be a non-negative int, got {seed!r}")
    return _core.SyntheticDDSM(split, int(image_size), float(scale), int(seed))


def synthetic_ddsm_lesion(split: str, index: int, image_size: int = 224, scale: float = 1.0, seed: int = 0):
    """Where the lesion of one example is, without generating its image.

    Returns ``None`` for BACKGROUND, else a dict: ``label``, ``class_name``, ``center``
    ``(x, y)`` in pixel-index coordinates (pixel ``[row, col]`` has its centre at
    ``(col, row)``), ``radius`` in pixels (mass: mean radius of the outline;
    calcifications: radius of the cluster), ``bbox`` ``(x0, y0, x1, y1)`` half-open, and
    ``mask``: bool ``(image_size, image_size)``, True inside the mass outline or the
    calcification cluster.
    """
    return synthetic_ddsm(split, image_size, scale, seed).lesion(int(index))
