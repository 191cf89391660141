"""HDF5 dataset shards: ``hdf5_source(path_or_glob)``.

Each shard holds ``image`` (N, H, W, C) uint8, ``label`` (N,) integers and ``id`` (N,)
strings, and optionally a ``class_names`` attribute on the root group: what
``h5py.File(p, "w").create_dataset(...)`` writes from NumPy arrays, and what
``podlet.data.export_hdf5`` writes. Read in C++ with the HDF5 C library
(``podlet._core.hdf5_source``).
"""
from __future__ import annotations

import glob
import os

from .. import _core


def _expand(spec) -> list[str]:
    if isinstance(spec, (list, tuple)):
        out = []
        for s in spec:
            out += _expand(s)
        return out
    spec = os.fspath(spec)
    if os.path.isdir(spec):
        paths = sorted(p for p in glob.glob(os.path.join(spec, "*")) if p.endswith((".h5", ".hdf5")))
        if not paths:
            raise FileNotFoundError(f"hdf5_source: no *.h5 or *.hdf5 files in directory {spec}")
        return paths
    if glob.has_magic(spec):
        paths = sorted(glob.glob(spec))
        if not paths:
            raise FileNotFoundError(f"hdf5_source: no files match {spec!r}")
        return paths
    if not os.path.isfile(spec):
        raise FileNotFoundError(f"hdf5_source: no such file {spec!r}")
    return [spec]


def hdf5_source(path_or_glob):
    """HDF5 shards as one ``DataSource`` (examples in shard order, shards sorted by name).

    Args:
      path_or_glob: a file, a glob pattern (``"data/train-*.h5"``), a directory (all its
        ``*.h5``/``*.hdf5`` files), or a list of any of these.

    Raises:
      FileNotFoundError: nothing matched.
      podlet.PodletError: a shard is not HDF5, lacks ``image``/``label``, has the wrong
        dtype or rank, disagrees with the first shard's image shape or class names, or has
        a label out of range; the message names the file.
    """
    return _core.hdf5_source(_expand(path_or_glob))
