"""Datasets and the input pipeline.

Sources (random access to decoded uint8 examples): ``synthetic_ddsm`` (the embedded
default: synthetic mammography patches), ``fashion_mnist``, ``array_source``. The
pipeline: ``Dataset(source).shuffle(...).normalize(...).augment(...).batch(...)
.repeat().prefetch(...)``, in C++ on TBB, deterministic for a seed whatever the thread
count. ``load_fashion_mnist`` returns plain NumPy arrays. A user's TFDS build and HDF5
shards: ``tfds_source``, ``hdf5_source``; writing them: ``export_tfds``, ``export_hdf5``.
"""
from .fashion_mnist import CLASS_NAMES, load_fashion_mnist
from .sources import array_source, fashion_mnist, read_batch, FASHION_MNIST_CLASS_NAMES
from .synthetic_ddsm import synthetic_ddsm, synthetic_ddsm_lesion
from .synthetic_ddsm import CLASS_NAMES as DDSM_CLASS_NAMES
from .pipeline import (Dataset, DatasetIterator, shard_batch, AUTOTUNE, CONSERVATIVE_AUGMENTATION,
                       WEAK_AUGMENTATION)

# The file-format readers and writers load on first use (they pull in more of _core).
_LAZY = {"tfds_source": ("tfds", "tfds_source"), "hdf5_source": ("hdf5", "hdf5_source"),
         "export_tfds": ("export", "export_tfds"), "export_hdf5": ("export", "export_hdf5")}


def __getattr__(name):
    if name in _LAZY:
        import importlib
        mod, attr = _LAZY[name]
        return getattr(importlib.import_module(f"{__name__}.{mod}"), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CLASS_NAMES", "load_fashion_mnist", "array_source", "fashion_mnist", "read_batch",
           "FASHION_MNIST_CLASS_NAMES", "synthetic_ddsm", "synthetic_ddsm_lesion", "DDSM_CLASS_NAMES",
           "Dataset", "DatasetIterator", "shard_batch", "AUTOTUNE", "CONSERVATIVE_AUGMENTATION",
           "WEAK_AUGMENTATION"]
