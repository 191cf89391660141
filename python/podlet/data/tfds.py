"""A user's TFDS build read directly from its TFRecord shards, without TensorFlow.

``tfds_source(data_dir, name, split)`` mirrors ``tfds.load(name, split=split,
data_dir=data_dir)`` for image-classification datasets such as the seed's
``curated_breast_imaging_ddsm/patches:3.0.0``: it finds the shards
``<data_dir>/<dataset>/<config>/<version>/<dataset>-<split>.tfrecord-XXXXX-of-YYYYY``,
checks them against ``dataset_info.json`` (shard count and every shard's record count;
``numBytes`` is not checked, TFDS versions count it differently),
reads the feature schema from ``features.json`` (both the older ``{"type", "content"}``
format and the newer proto-JSON ``featuresDict`` one) and the class names from
``label.labels.txt`` (verbatim: TFDS spells CBIS-DDSM's "BENING_CALCIFICATION" and
"BENING_MASS"). Records are CRC-checked, parsed and JPEG-decoded in C++
(``podlet._core.tfrecord_source``) when the pipeline asks for them.
"""
from __future__ import annotations

import contextlib
import json
import os
import re

from .. import _core

DEFAULT_NAME = "curated_breast_imaging_ddsm/patches:3.0.0"
DEFAULT_TEMPLATE = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"


def parse_name(name: str):
    """``"dataset/config:1.2.3"`` -> ``("dataset", "config" or None, "1.2.3" or None)``."""
    m = re.fullmatch(r"(\w+)(?:/(\w+))?(?::(\d+\.\d+\.\d+))?", name)
    if not m:
        raise ValueError(f"TFDS name {name!r} is not of the form 'dataset[/config][:x.y.z]', "
                         f"e.g. {DEFAULT_NAME!r}")
    return m.group(1), m.group(2), m.group(3)


def _version_dir(data_dir: str, name: str) -> str:
    dataset, config, version = parse_name(name)
    base = os.path.join(data_dir, dataset, *( [config] if config else []))
    if version is None:
        found = sorted((tuple(map(int, v.split("."))), v) for v in
                       (os.listdir(base) if os.path.isdir(base) else [])
                       if re.fullmatch(r"\d+\.\d+\.\d+", v))
        if not found:
            raise FileNotFoundError(f"TFDS dataset {name!r}: no version directory (like 3.0.0) in {base}")
        version = found[-1][1]
    vdir = os.path.join(base, version)
    if not os.path.isdir(vdir):
        raise FileNotFoundError(
            f"TFDS dataset {name!r} not found: {vdir} is not a directory (expected the layout "
            f"<data_dir>/<dataset>/<config>/<version>/ that `tfds build` writes)")
    return vdir


def _load_json(path: str):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise _core.PodletError(f"{path}: not valid JSON ({e})") from None


@contextlib.contextmanager
def _schema(path: str, what: str):
    """Metadata of an unexpected shape is an error naming the file, not a KeyError."""
    try:
        yield
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        if isinstance(e, _core.PodletError):
            raise
        raise _core.PodletError(f"{path}: unexpected {what} ({type(e).__name__}: {e})") from None


def _class_suffix(python_class: str) -> str:
    return python_class.rsplit(".", 1)[-1] if python_class else ""


def read_features(path: str) -> dict:
    """features.json -> ``{key: {"class", "shape", "encoding", "num_classes"}}`` for the
    top-level features, from either TFDS format."""
    doc = _load_json(path)
    with _schema(path, "TFDS features schema"):
        return _read_features(doc, path)


def _read_features(doc, path):
    out = {}
    if "featuresDict" in doc:  # newer: proto-JSON of tensorflow_datasets.FeaturesDict
        for key, f in doc["featuresDict"].get("features", {}).items():
            cls = _class_suffix(f.get("pythonClassName", ""))
            image = f.get("image") or {}
            dims = (image.get("shape") or {}).get("dimensions")
            if not cls:
                cls = ("Image" if "image" in f else "ClassLabel" if "classLabel" in f else
                       "Text" if "text" in f else "")
            num = (f.get("classLabel") or {}).get("numClasses")
            out[key] = {"class": cls, "shape": [int(d) for d in dims] if dims is not None else None,
                        "encoding": image.get("encodingFormat"),
                        "num_classes": int(num) if num is not None else None}
    elif "content" in doc:  # older: {"type": ..., "content": {key: {"type", "content"}}}
        for key, f in doc["content"].items():
            c = f.get("content") or {}
            shape = c.get("shape")
            num = c.get("num_classes")
            out[key] = {"class": _class_suffix(f.get("type", "")),
                        "shape": [-1 if d is None else int(d) for d in shape] if shape is not None else None,
                        "encoding": c.get("encoding_format"),
                        "num_classes": int(num) if num is not None else None}
    else:
        raise _core.PodletError(f"{path}: neither TFDS features format (no 'featuresDict' or 'content' key)")
    return out


def _shard_regex(template: str, dataset: str, split: str, fileformat: str):
    parts = re.split(r"(\{\w+\})", template)
    rx = ""
    for p in parts:
        rx += {"{DATASET}": re.escape(dataset), "{SPLIT}": re.escape(split),
               "{FILEFORMAT}": re.escape(fileformat),
               "{SHARD_X_OF_Y}": r"(?P<x>\d{5})-of-(?P<y>\d{5})",
               "{SHARD_INDEX}": r"(?P<x>\d{5})"}.get(p, re.escape(p)) if p else ""
    return re.compile(rx)


def tfds_source(data_dir, name: str = DEFAULT_NAME, split: str = "train"):
    """One split of a TFDS image-classification build as a ``DataSource``.

    Args:
      data_dir: the TFDS data directory (what ``tfds.load(..., data_dir=)`` takes).
      name: ``"dataset[/config][:version]"``; without a version the newest present is used.
      split: a split name from ``dataset_info.json`` (slices like ``"train[:10%]"`` are
        not supported).

    Returns:
      A ``podlet._core.TfrecordSource`` (a ``DataSource``; also ``shards()`` and
      ``shard_lengths()``) yielding ``{"image": uint8 HxWxC, "label": int, "id": str}``.

    Raises:
      FileNotFoundError: no such dataset directory, metadata file or shard.
      podlet.PodletError: the metadata and shards disagree (split missing, shard count or
        record counts differ from ``dataset_info.json``), an unsupported encoding, or (as
        examples are read) a bad CRC, truncated record, malformed Example, undecodable
        JPEG or label out of range; each message names the file and the record.
    """
    data_dir = os.fspath(data_dir)
    if not re.fullmatch(r"\w+", split):
        raise ValueError(f"split {split!r}: only whole splits are supported (a name like 'train')")
    dataset, _, _ = parse_name(name)
    vdir = _version_dir(data_dir, name)
    info_path = os.path.join(vdir, "dataset_info.json")
    if not os.path.isfile(info_path):
        raise FileNotFoundError(f"TFDS dataset {name!r}: missing {info_path}")
    info = _load_json(info_path)
    fileformat = info.get("fileFormat", "tfrecord")
    if fileformat != "tfrecord":
        raise _core.PodletError(f"{info_path}: fileFormat {fileformat!r}; podlet reads 'tfrecord' builds only")
    with _schema(info_path, "dataset_info layout"):
        splits = {s.get("name"): s for s in info.get("splits", [])}
        if split not in splits:
            raise _core.PodletError(f"{info_path}: no split {split!r}; the build has {sorted(map(str, splits))}")
        sinfo = splits[split]
        lengths = [int(x) for x in sinfo.get("shardLengths", [])]
        expected_total = sum(lengths) if lengths else None
        # Older builds record the total as statistics.numExamples.
        v = sinfo.get("numExamples", (sinfo.get("statistics") or {}).get("numExamples"))
        if v is not None and expected_total is not None and int(v) != expected_total:
            raise _core.PodletError(f"{info_path}: split {split!r} says numExamples {v} but its shardLengths "
                                    f"sum to {expected_total}")
        if v is not None and expected_total is None:
            expected_total = int(v)

    # Schema: image / label / id, checked against features.json when present.
    feats = {}
    feats_path = os.path.join(vdir, "features.json")
    if os.path.isfile(feats_path):
        feats = read_features(feats_path)
        for key, cls in (("image", "Image"), ("label", "ClassLabel")):
            if key not in feats:
                raise _core.PodletError(f"{feats_path}: no feature {key!r} (features: {sorted(feats)}); "
                                        "podlet reads image-classification builds with 'image' and 'label'")
            if feats[key]["class"] and feats[key]["class"] != cls:
                raise _core.PodletError(f"{feats_path}: feature {key!r} is a {feats[key]['class']}, expected {cls}")
        enc = feats["image"]["encoding"]
        if enc not in (None, "", "jpeg"):
            raise _core.PodletError(f"{feats_path}: images are {enc!r}-encoded; podlet decodes JPEG only")
    shape = (feats.get("image") or {}).get("shape") or [-1, -1, -1]
    if len(shape) != 3:
        raise _core.PodletError(f"{feats_path}: image shape {shape} is not (height, width, channels)")
    height, width, channels = shape
    if channels not in (-1, 1, 3):
        raise _core.PodletError(f"{feats_path}: images with {channels} channels are not supported (1 or 3)")
    id_key = "id" if (not feats or "id" in feats) else ""

    labels_path = os.path.join(vdir, "label.labels.txt")
    if not os.path.isfile(labels_path):
        raise FileNotFoundError(f"TFDS dataset {name!r}: missing {labels_path} (the class names)")
    with open(labels_path, encoding="utf-8") as f:
        class_names = [line.rstrip("\r\n") for line in f]
    while class_names and not class_names[-1]:
        class_names.pop()
    num_classes = (feats.get("label") or {}).get("num_classes")
    if num_classes is not None and num_classes != len(class_names):
        raise _core.PodletError(f"{labels_path}: {len(class_names)} class names, but {feats_path} says "
                                f"numClasses {num_classes}")

    rx = _shard_regex(sinfo.get("filepathTemplate") or DEFAULT_TEMPLATE, dataset, split, fileformat)
    found = []
    for fn in os.listdir(vdir):
        m = rx.fullmatch(fn)
        if m:
            found.append((int(m.group("x")), int(m.group("y")) if "y" in m.groupdict() else None, fn))
    found.sort()
    if not found:
        raise FileNotFoundError(f"TFDS dataset {name!r}: no shards of split {split!r} in {vdir} "
                                f"(expected files like {dataset}-{split}.tfrecord-00000-of-00001)")
    count = len(lengths) if lengths else len(found)
    want = list(range(count))
    have = [x for x, _, _ in found]
    if have != want or any(y is not None and y != count for _, y, _ in found):
        raise _core.PodletError(
            f"{vdir}: split {split!r} should have {count} shards (-00000-of-{count:05d} .. "
            f"-{count - 1:05d}-of-{count:05d}, per {info_path}), found {[fn for _, _, fn in found]}")
    shards = [os.path.join(vdir, fn) for _, _, fn in found]

    src = _core.tfrecord_source(
        shards, class_names, len(class_names), "image", "label", id_key, int(height), int(width),
        max(int(channels), 0), f"tfds:{name}[{split}]")
    actual = src.shard_lengths()
    if lengths:
        for path, n, want_n in zip(shards, actual, lengths):
            if n != want_n:
                raise _core.PodletError(
                    f"TFRecord file '{path}' holds {n} records, but {info_path} says {want_n} "
                    f"(split {split!r}); the build is incomplete or the metadata is stale")
    if expected_total is not None and sum(actual) != expected_total:
        raise _core.PodletError(f"split {split!r} of {vdir} has {sum(actual)} records, but {info_path} "
                                f"says {expected_total}")
    return src
