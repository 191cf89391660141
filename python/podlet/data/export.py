"""Writing a ``DataSource`` to disk: ``export_tfds`` (a TFDS build directory) and
``export_hdf5`` (one HDF5 shard). ``podlet data export`` calls these.

Every file is written under a temporary name in its final directory and renamed into
place once complete, so an interrupted export never leaves a partial file where a good
one was. Images are stored as JPEG in TFRecords (as TFDS stores CBIS-DDSM patches) and
losslessly in HDF5. A TFRecord round trip is therefore exact with respect to the JPEG
bytes written (reading gives ``decode(jpeg_written)`` bit for bit), and at the default
quality 95 the decoded pixels stay within a few grey levels of the source.
"""
from __future__ import annotations

import json
import math
import os
import re

from .. import _core
from .tfds import DEFAULT_NAME, DEFAULT_TEMPLATE, parse_name

_FEATURE_CLASS = "tensorflow_datasets.core.features."


def _atomic_write_text(path: str, text: str) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise




def _check_source(source, fn):
    if not isinstance(source, _core.DataSource):
        raise TypeError(f"{fn}: expected a data source (podlet.data.synthetic_ddsm, array_source, "
                        f"tfds_source, hdf5_source, ...), got {type(source).__name__}; export the source "
                        "a Dataset pipeline reads, not the pipeline")


def _features_json(shape, num_classes: int) -> dict:
    dims = [str(d) for d in shape]
    return {
        "pythonClassName": _FEATURE_CLASS + "features_dict.FeaturesDict",
        "featuresDict": {"features": {
            "id": {"pythonClassName": _FEATURE_CLASS + "text_feature.Text", "text": {}},
            "image": {"pythonClassName": _FEATURE_CLASS + "image_feature.Image",
                      "image": {"shape": {"dimensions": dims}, "dtype": "uint8", "encodingFormat": "jpeg"}},
            "label": {"pythonClassName": _FEATURE_CLASS + "class_label_feature.ClassLabel",
                      "classLabel": {"numClasses": str(num_classes)}},
        }},
    }


def export_tfds(source, data_dir, split: str, *, name: str = DEFAULT_NAME, num_shards: int | None = None,
                quality: int = 95, class_names=None) -> str:
    """Writes ``source`` as split ``split`` of a TFDS build that ``tfds.load`` and
    ``podlet.data.tfds_source`` read.

    Layout: ``<data_dir>/<dataset>/<config>/<version>/`` with shards
    ``<dataset>-<split>.tfrecord-XXXXX-of-YYYYY`` (tf.train.Example: ``image`` JPEG bytes,
    ``label`` int64, ``id`` bytes), ``dataset_info.json`` (this split's ``shardLengths`` and
    ``numBytes`` added to any splits already there), ``features.json`` and
    ``label.labels.txt``. Shards of this split from an earlier export are replaced.

    Args:
      source: a ``DataSource`` (e.g. ``synthetic_ddsm("train")``).
      data_dir: TFDS data directory (created if missing).
      split: split name, e.g. ``"train"``.
      name: ``"dataset[/config]:version"``.
      num_shards: default one shard per 2048 examples.
      quality: JPEG quality 1..100.
      class_names: overrides ``source.class_names()``.

    Returns:
      The version directory written.
    """
    _check_source(source, "export_tfds")
    dataset, config, version = parse_name(name)
    if version is None:
        raise ValueError(f"export_tfds: name {name!r} needs a version, e.g. {DEFAULT_NAME!r}")
    if not re.fullmatch(r"\w+", split):
        raise ValueError(f"export_tfds: split {split!r} must be a word like 'train'")
    n = len(source)
    if num_shards is None:
        num_shards = max(1, math.ceil(n / 2048))
    if isinstance(num_shards, bool) or not isinstance(num_shards, int) or num_shards < 1:
        raise ValueError(f"export_tfds: num_shards must be a positive int, got {num_shards!r}")
    vdir = os.path.join(os.fspath(data_dir), dataset, *([config] if config else []), version)
    os.makedirs(vdir, exist_ok=True)

    names = list(class_names) if class_names is not None else list(source.class_names())
    labels_path = os.path.join(vdir, "label.labels.txt")
    if names and os.path.isfile(labels_path):
        with open(labels_path, encoding="utf-8") as f:
            old = [line.rstrip("\r\n") for line in f if line.rstrip("\r\n")]
        if old != names:
            raise _core.PodletError(f"export_tfds: {labels_path} lists classes {old}, but {source.describe()} "
                                    f"has {names}; export to a different data_dir or name")

    finals = [f"{dataset}-{split}.tfrecord-{k:05d}-of-{num_shards:05d}" for k in range(num_shards)]
    temps = [os.path.join(vdir, f".{fn}.tmp-{os.getpid()}") for fn in finals]
    try:
        stats = _core.tfrecord_export(source, temps, int(quality))
        for t, fn in zip(temps, finals):
            os.replace(t, os.path.join(vdir, fn))
    finally:
        for t in temps:
            if os.path.exists(t):
                os.unlink(t)
    stale = re.compile(re.escape(f"{dataset}-{split}.tfrecord-") + r"\d{5}-of-\d{5}")
    for fn in os.listdir(vdir):
        if stale.fullmatch(fn) and fn not in finals:
            os.unlink(os.path.join(vdir, fn))

    if not names:
        names = [str(i) for i in range(stats["max_label"] + 1)]
    if stats["max_label"] >= len(names):
        raise _core.PodletError(f"export_tfds: {source.describe()} has label {stats['max_label']} but only "
                                f"{len(names)} class names")
    _atomic_write_text(labels_path, "".join(f"{c}\n" for c in names))
    _atomic_write_text(os.path.join(vdir, "features.json"),
                       json.dumps(_features_json(stats["shape"] if n else (-1, -1, -1), len(names)), indent=2))

    info_path = os.path.join(vdir, "dataset_info.json")
    info = {}
    if os.path.isfile(info_path):
        with open(info_path, encoding="utf-8") as f:
            info = json.load(f)
    info.update({"name": dataset, "version": version, "fileFormat": "tfrecord",
                 "description": info.get("description") or f"Exported by podlet from {source.describe()}"})
    if config:
        info["configName"] = config
    info.setdefault("supervisedKeys", {"tuple": {"items": [{"featureKey": "image"}, {"featureKey": "label"}]}})
    entry = {"name": split, "filepathTemplate": DEFAULT_TEMPLATE,
             "numBytes": str(stats["num_bytes"]),
             "shardLengths": [str(x) for x in stats["shard_lengths"]]}
    info["splits"] = [s for s in info.get("splits", []) if s.get("name") != split] + [entry]
    info["splits"].sort(key=lambda s: s.get("name", ""))
    _atomic_write_text(info_path, json.dumps(info, indent=2))
    return vdir


def export_hdf5(source, path, *, gzip_level: int = 0) -> str:
    """Writes ``source`` to one HDF5 file: ``image`` (N, H, W, C) uint8 (one chunk per
    image; gzip-compressed when ``gzip_level`` > 0), ``label`` (N,) int64, ``id`` (N,)
    UTF-8 strings, and the class names as the root attribute ``class_names``. Every image
    must have the same shape. Returns ``path``."""
    _check_source(source, "export_hdf5")
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"export_hdf5: directory {directory} does not exist")
    tmp = os.path.join(directory, f".{os.path.basename(path)}.tmp-{os.getpid()}")
    try:
        _core.hdf5_write(source, tmp, int(gzip_level))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path
