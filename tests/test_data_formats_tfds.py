"""TFDS layout: export_tfds -> tfds_source round trip, dataset_info / features.json /
label.labels.txt handling, and hand-corrupted shards giving errors that name the file
and record.

Images are stored as JPEG, so the round trip is checked in two honest halves: every
image read back equals the decode of the exact JPEG bytes in the shard (parsed by the
independent Python oracle, decoded by Pillow), and those JPEGs stay within a small
error of the source pixels at quality 95."""
import io
import json
import os
import struct

import numpy as np
import pytest
from PIL import Image

import podlet
from podlet import _core
from podlet.data.export import export_tfds
from podlet.data.sources import array_source, read_batch
from podlet.data.synthetic_ddsm import synthetic_ddsm
from podlet.data.tfds import tfds_source

import formats_oracle as orc

NAME = "curated_breast_imaging_ddsm/patches:3.0.0"
TFDS_NAMES = ["BACKGROUND", "BENING_CALCIFICATION", "BENING_MASS", "MALIGNANT_CALCIFICATION", "MALIGNANT_MASS"]


def smooth_images(n, h, w, c, seed=0):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    out = np.empty((n, h, w, c), np.uint8)
    for i in range(n):
        base = np.stack([128 + 60 * np.sin(xx / rng.uniform(3, 8) + rng.uniform(0, 6)) +
                         40 * np.cos(yy / rng.uniform(3, 8)) for _ in range(c)], -1)
        out[i] = np.clip(base + rng.normal(0, 3, base.shape), 0, 255)
    return out


def make_source(n=23, h=24, w=20, c=1, seed=0, names=TFDS_NAMES):
    images = smooth_images(n, h, w, c, seed)
    labels = np.random.default_rng(seed + 1).integers(0, len(names), n)
    ids = [f"P_{seed:02d}_{i:04d}" for i in range(n)]
    return images, labels, ids, array_source(images, labels, ids, names)


def vdir_of(root):
    return os.path.join(root, "curated_breast_imaging_ddsm", "patches", "3.0.0")


def shard_files(root, split):
    d = vdir_of(root)
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.startswith(f"curated_breast_imaging_ddsm-{split}."))


@pytest.mark.parametrize("c", [1, 3])
def test_round_trip(tmp_path, c):
    images, labels, ids, src = make_source(c=c, seed=c)
    vdir = export_tfds(src, tmp_path, "train", name=NAME, num_shards=3)
    assert vdir == vdir_of(str(tmp_path))
    files = shard_files(tmp_path, "train")
    assert [os.path.basename(f) for f in files] == [
        f"curated_breast_imaging_ddsm-train.tfrecord-0000{k}-of-00003" for k in range(3)]
    assert sorted(os.listdir(vdir)) == sorted(
        [os.path.basename(f) for f in files] + ["dataset_info.json", "features.json", "label.labels.txt"])

    back = tfds_source(tmp_path, NAME, "train")
    assert len(back) == len(images)
    assert back.class_names() == TFDS_NAMES
    # The oracle: records parsed in Python, JPEGs decoded by Pillow.
    oracle = []
    for f in files:
        for rec in orc.read_records(open(f, "rb").read()):
            oracle.append(orc.example_dict(rec))
    assert [len(orc.read_records(open(f, "rb").read())) for f in files] == [7, 8, 8]
    assert back.shard_lengths() == [7, 8, 8]
    errs = []
    for i in range(len(images)):
        ex = back.get(i)
        ref = oracle[i]
        assert sorted(ref) == ["id", "image", "label"]
        assert ex["label"] == labels[i] == ref["label"][1][0]
        assert ex["id"] == ids[i] == ref["id"][1][0].decode()
        jpeg = ref["image"][1][0]
        pil = np.asarray(Image.open(io.BytesIO(jpeg)))
        np.testing.assert_array_equal(ex["image"], pil.reshape(ex["image"].shape))
        assert ex["image"].shape == images[i].shape
        errs.append(np.abs(ex["image"].astype(int) - images[i]))
    errs = np.stack(errs)
    # The pipeline's parallel reader (C++ threads, GIL released) sees the same examples.
    got_images, got_labels, got_ids = read_batch(back, range(len(images)), 2)
    np.testing.assert_array_equal(got_images, np.stack([back.get(i)["image"] for i in range(len(images))]))
    np.testing.assert_array_equal(got_labels, labels)
    assert list(got_ids) == ids
    assert errs.mean() < (1.5 if c == 1 else 3.0) and errs.max() <= (12 if c == 1 else 32)

    info = json.load(open(os.path.join(vdir, "dataset_info.json")))
    (split,) = info["splits"]
    assert split["name"] == "train" and split["shardLengths"] == ["7", "8", "8"]
    assert int(split["numBytes"]) == sum(os.path.getsize(f) for f in files)
    assert info["name"] == "curated_breast_imaging_ddsm" and info["version"] == "3.0.0"
    feats = json.load(open(os.path.join(vdir, "features.json")))["featuresDict"]["features"]
    assert feats["image"]["image"]["shape"]["dimensions"] == ["24", "20", str(c)]
    assert feats["label"]["classLabel"]["numClasses"] == "5"
    assert open(os.path.join(vdir, "label.labels.txt")).read() == "".join(n + "\n" for n in TFDS_NAMES)


def test_round_trip_synthetic_ddsm_and_splits(tmp_path):
    train = synthetic_ddsm("train", image_size=32, scale=0.001, seed=3)
    test = synthetic_ddsm("test", image_size=32, scale=0.002, seed=3)
    export_tfds(train, tmp_path, "train", num_shards=2)
    export_tfds(test, tmp_path, "test", num_shards=1)
    info = json.load(open(os.path.join(vdir_of(tmp_path), "dataset_info.json")))
    assert [s["name"] for s in info["splits"]] == ["test", "train"]
    for split, src in (("train", train), ("test", test)):
        back = tfds_source(tmp_path, NAME, split)
        assert len(back) == len(src) and back.class_names() == list(src.class_names())
        for i in range(len(src)):
            a, b = src.get(i), back.get(i)
            assert (a["label"], a["id"]) == (b["label"], b["id"])
            assert np.abs(a["image"].astype(int) - b["image"]).mean() < 3
    # Re-exporting a split with another shard count replaces its shards.
    export_tfds(train, tmp_path, "train", num_shards=3)
    assert len(shard_files(tmp_path, "train")) == 3
    n = len(train)
    assert tfds_source(tmp_path, NAME, "train").shard_lengths() == [(k + 1) * n // 3 - k * n // 3 for k in range(3)]


def test_export_is_deterministic_across_threads(tmp_path):
    _, _, _, src = make_source(n=70, seed=4)
    old = _core.num_threads()
    try:
        blobs = []
        for t in (1, 2):
            _core.set_num_threads(t)
            export_tfds(src, tmp_path / f"t{t}", "train", num_shards=2)
            blobs.append([open(f, "rb").read() for f in shard_files(tmp_path / f"t{t}", "train")])
    finally:
        _core.set_num_threads(old)
    assert blobs[0] == blobs[1]


# --- metadata --------------------------------------------------------------------------
@pytest.fixture
def built(tmp_path):
    images, labels, ids, src = make_source(n=12, seed=5)
    export_tfds(src, tmp_path, "train", num_shards=2)
    return tmp_path, vdir_of(tmp_path)


def edit_json(path, fn):
    d = json.load(open(path))
    fn(d)
    json.dump(d, open(path, "w"))


def test_shard_length_mismatch_named(built):
    root, vdir = built
    edit_json(os.path.join(vdir, "dataset_info.json"), lambda d: d["splits"][0].update(shardLengths=["6", "7"]))
    with pytest.raises(podlet.PodletError) as e:
        tfds_source(root, NAME, "train")
    assert "train.tfrecord-00001-of-00002' holds 6 records, but" in str(e.value)
    assert "dataset_info.json says 7" in str(e.value)


def test_missing_shard_and_extra_shard(built):
    root, vdir = built
    edit_json(os.path.join(vdir, "dataset_info.json"), lambda d: d["splits"][0].update(shardLengths=["6", "6", "0"]))
    with pytest.raises(podlet.PodletError, match="should have 3 shards"):
        tfds_source(root, NAME, "train")


def test_unknown_split_and_missing_dirs(built, tmp_path):
    root, vdir = built
    with pytest.raises(podlet.PodletError, match=r"no split 'validation'; the build has \['train'\]"):
        tfds_source(root, NAME, "validation")
    with pytest.raises(FileNotFoundError, match="3.0.1"):
        tfds_source(root, "curated_breast_imaging_ddsm/patches:3.0.1", "train")
    with pytest.raises(ValueError, match="whole splits"):
        tfds_source(root, NAME, "train[:10%]")
    # No version: the newest present is used.
    assert len(tfds_source(root, "curated_breast_imaging_ddsm/patches", "train")) == 12


def test_old_features_json_and_statistics(built):
    root, vdir = built
    old = {"type": "tensorflow_datasets.core.features.features_dict.FeaturesDict", "content": {
        "id": {"type": "tensorflow_datasets.core.features.text_feature.Text", "content": {}},
        "image": {"type": "tensorflow_datasets.core.features.image_feature.Image",
                  "content": {"shape": [None, None, 1], "dtype": "uint8", "encoding_format": "jpeg"}},
        "label": {"type": "tensorflow_datasets.core.features.class_label_feature.ClassLabel",
                  "content": {"num_classes": 5}}}}
    json.dump(old, open(os.path.join(vdir, "features.json"), "w"))
    edit_json(os.path.join(vdir, "dataset_info.json"),
              lambda d: d["splits"][0].update(statistics={"numExamples": "12"}))
    src = tfds_source(root, NAME, "train")
    assert len(src) == 12 and src.get(3)["image"].shape == (24, 20, 1)
    edit_json(os.path.join(vdir, "dataset_info.json"),
              lambda d: d["splits"][0].update(statistics={"numExamples": "13"}))
    with pytest.raises(podlet.PodletError, match="numExamples 13 but its shardLengths sum to 12"):
        tfds_source(root, NAME, "train")


def test_features_json_disagreements(built):
    root, vdir = built
    fp = os.path.join(vdir, "features.json")
    good = json.load(open(fp))
    edit_json(fp, lambda d: d["featuresDict"]["features"]["label"]["classLabel"].update(numClasses="4"))
    with pytest.raises(podlet.PodletError, match="5 class names, but .*numClasses 4"):
        tfds_source(root, NAME, "train")
    json.dump(good, open(fp, "w"))
    edit_json(fp, lambda d: d["featuresDict"]["features"]["image"]["image"].update(encodingFormat="png"))
    with pytest.raises(podlet.PodletError, match="'png'-encoded; podlet decodes JPEG only"):
        tfds_source(root, NAME, "train")
    json.dump(good, open(fp, "w"))
    edit_json(fp, lambda d: d["featuresDict"]["features"]["image"]["image"]["shape"].update(dimensions=["24", "21", "1"]))
    with pytest.raises(podlet.PodletError, match=r"record 0 \(example 0 .*image is 24x20x1, but features.json declares 24x21x1"):
        tfds_source(root, NAME, "train").get(0)


def test_class_names_verbatim_and_label_range(tmp_path):
    # A label beyond label.labels.txt: the reader names file and record.
    images = smooth_images(4, 8, 8, 1)
    src = array_source(images, [0, 1, 4, 2], None, ["A", "B", "C", "D", "E"])
    export_tfds(src, tmp_path, "train", num_shards=1)
    vdir = vdir_of(tmp_path)
    open(os.path.join(vdir, "label.labels.txt"), "w").write("A\nB\nC\n")
    edit_json(os.path.join(vdir, "features.json"),
              lambda d: d["featuresDict"]["features"]["label"]["classLabel"].update(numClasses="3"))
    src = tfds_source(tmp_path, NAME, "train")
    assert src.class_names() == ["A", "B", "C"]
    src.get(1)
    with pytest.raises(podlet.PodletError) as e:
        src.get(2)
    assert "-train.tfrecord-00000-of-00001' record 2 (example 2 of tfds:" in str(e.value)
    assert "label 4 out of range; expected 0..2" in str(e.value)


# --- hand-corrupted shards -----------------------------------------------------------------
def test_flipped_data_byte_named(built):
    root, vdir = built
    f = shard_files(root, "train")[1]
    blob = bytearray(open(f, "rb").read())
    recs = orc.read_records(bytes(blob))
    off = sum(16 + len(r) for r in recs[:2])  # record 2 of shard 1 = example 8
    blob[off + 12 + 40] ^= 0x10
    open(f, "wb").write(bytes(blob))
    src = tfds_source(root, NAME, "train")  # indexing reads headers only
    src.get(7)
    with pytest.raises(podlet.PodletError) as e:
        src.get(8)
    assert f"TFRecord file '{f}' record 2 (at byte {off}): data CRC mismatch" in str(e.value)


def test_flipped_length_byte_named(built):
    root, vdir = built
    f = shard_files(root, "train")[0]
    blob = bytearray(open(f, "rb").read())
    off = 16 + len(orc.read_records(bytes(blob))[0])
    blob[off + 1] ^= 0x01
    open(f, "wb").write(bytes(blob))
    with pytest.raises(podlet.PodletError) as e:
        tfds_source(root, NAME, "train")
    assert f"TFRecord file '{f}' record 1 (at byte {off}): length CRC mismatch" in str(e.value)


def test_truncated_shard_named(built):
    root, vdir = built
    f = shard_files(root, "train")[1]
    blob = open(f, "rb").read()
    last = sum(16 + len(r) for r in orc.read_records(blob)[:-1])
    open(f, "wb").write(blob[:-5])
    with pytest.raises(podlet.PodletError) as e:
        tfds_source(root, NAME, "train")
    assert f"TFRecord file '{f}' record 5 (at byte {last}): truncated" in str(e.value)


def rewrite_record(f, k, fn):
    """Replaces record k of shard f by fn(features) with valid framing (a bad payload,
    not a bad file)."""
    recs = orc.read_records(open(f, "rb").read())
    recs[k] = fn(orc.example_dict(recs[k]))
    open(f, "wb").write(b"".join(orc.frame(r) for r in recs))


def test_corrupt_jpeg_named(built):
    root, vdir = built
    f = shard_files(root, "train")[0]

    def damage(ex):
        jpeg = ex["image"][1][0]
        ex["image"] = ("bytes_list", [jpeg[: len(jpeg) // 2]])
        return orc.example_bytes(ex)
    rewrite_record(f, 3, damage)
    src = tfds_source(root, NAME, "train")
    with pytest.raises(podlet.PodletError) as e:
        src.get(3)
    assert f"TFRecord file '{f}' record 3 (example 3 of tfds:{NAME}[train]), feature 'image': undecodable JPEG" in str(e.value)


@pytest.mark.parametrize("fn,msg", [
    (lambda ex: orc.example_bytes({k: v for k, v in ex.items() if k != "label"}), "feature 'label' missing (the example has: 'id', 'image')"),
    (lambda ex: orc.example_bytes({**ex, "label": ("float_list", [1.0])}), "feature 'label' is a float_list, expected a int64_list"),
    (lambda ex: orc.example_bytes({**ex, "label": ("int64_list", [1, 2])}), "feature 'label' holds 2 values, expected exactly 1"),
    (lambda ex: orc.example_bytes({**ex, "label": ("int64_list", [-1])}), "label -1 out of range"),
    (lambda ex: b"\x0a\x10garbage", "malformed tf.train.Example"),
])
def test_bad_example_named(built, fn, msg):
    root, vdir = built
    f = shard_files(root, "train")[1]
    rewrite_record(f, 0, fn)
    src = tfds_source(root, NAME, "train")
    with pytest.raises(podlet.PodletError) as e:
        src.get(6)
    assert f"TFRecord file '{f}' record 0 (example 6 of" in str(e.value) and msg in str(e.value), str(e.value)


def test_failed_export_leaves_good_files(built, tmp_path):
    root, vdir = built
    before = {f: open(os.path.join(vdir, f), "rb").read() for f in os.listdir(vdir)}
    # A source that fails half way: a TFDS source with a corrupt record 9.
    bad_root = tmp_path / "bad"
    _, _, _, src = make_source(n=12, seed=5)
    export_tfds(src, bad_root, "train", num_shards=1)
    f = shard_files(bad_root, "train")[0]
    rewrite_record(f, 9, lambda ex: orc.example_bytes({**ex, "image": ("bytes_list", [b"\xff\xd8\xffjunk"])}))
    broken = tfds_source(bad_root, NAME, "train")
    with pytest.raises(podlet.PodletError, match="record 9"):
        export_tfds(broken, root, "train", num_shards=3)
    assert {f: open(os.path.join(vdir, f), "rb").read() for f in os.listdir(vdir)} == before
    assert len(tfds_source(root, NAME, "train")) == 12


def test_export_refuses_conflicting_class_names(built):
    root, vdir = built
    src = array_source(smooth_images(2, 8, 8, 1), [0, 1], None, ["x", "y"])
    with pytest.raises(podlet.PodletError, match="lists classes"):
        export_tfds(src, root, "test")


def test_export_needs_a_source(tmp_path):
    with pytest.raises(TypeError, match="expected a data source .* got list"):
        export_tfds([1, 2], tmp_path, "train")


def test_build_without_id_feature(built):
    root, vdir = built
    edit_json(os.path.join(vdir, "features.json"), lambda d: d["featuresDict"]["features"].pop("id"))
    for f in shard_files(root, "train"):
        for k in range(6):
            rewrite_record(f, k, lambda ex: orc.example_bytes({k2: v for k2, v in ex.items() if k2 != "id"}))
    src = tfds_source(root, NAME, "train")
    assert src.get(7)["id"] == "curated_breast_imaging_ddsm-train.tfrecord-00001-of-00002:1"


@pytest.mark.parametrize("which,edit,msg", [
    ("dataset_info.json", lambda d: d["splits"][0].update(shardLengths=["six", "6"]), "unexpected dataset_info layout"),
    ("dataset_info.json", lambda d: d.update(splits={"train": 1}), "unexpected dataset_info layout"),
    ("features.json", lambda d: d["featuresDict"].update(features=[1]), "unexpected TFDS features schema"),
    ("features.json", lambda d: d.clear(), "neither TFDS features format"),
])
def test_malformed_metadata_named(built, which, edit, msg):
    root, vdir = built
    path = os.path.join(vdir, which)
    edit_json(path, edit)
    with pytest.raises(podlet.PodletError) as e:
        tfds_source(root, NAME, "train")
    assert str(e.value).startswith(path) and msg in str(e.value), str(e.value)
    open(path, "w").write("{not json")
    with pytest.raises(podlet.PodletError, match="not valid JSON"):
        tfds_source(root, NAME, "train")
