"""HDF5 dataset shards: export_hdf5 files read by plain h5py, h5py-written shards
(variable- and fixed-length ids, any integer labels, (N, H, W) images) read by
podlet.data.hdf5_source, and bad shards giving errors that name the file."""
import glob
import os
import re
import threading

import h5py
import numpy as np
import pytest

import podlet
from podlet.data.export import export_hdf5
from podlet.data.hdf5 import hdf5_source
from podlet.data.export import export_tfds
from podlet.data.sources import array_source, read_batch
from podlet.data.tfds import tfds_source

import formats_oracle as orc

NAMES = ["BACKGROUND", "BENING_CALCIFICATION", "BENING_MASS", "MALIGNANT_CALCIFICATION", "MALIGNANT_MASS"]


def data(n=17, h=9, w=7, c=1, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 256, (n, h, w, c), dtype=np.uint8), rng.integers(0, 5, n),
            [f"id-{seed}-{i}-é" for i in range(n)])


def test_export_read_by_h5py_and_podlet(tmp_path):
    images, labels, ids = data(c=3)
    path = str(tmp_path / "train.h5")
    assert export_hdf5(array_source(images, labels, ids, NAMES), path) == path
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(f["image"][...], images)
        np.testing.assert_array_equal(f["label"][...], labels)
        assert f["label"].dtype == np.int64
        assert [s.decode() for s in f["id"][...]] == ids
        assert [s.decode() if isinstance(s, bytes) else s for s in f.attrs["class_names"]] == NAMES
    src = hdf5_source(path)
    assert len(src) == len(images) and src.class_names() == NAMES
    for i in range(len(images)):
        ex = src.get(i)
        np.testing.assert_array_equal(ex["image"], images[i])  # lossless
        assert (ex["label"], ex["id"]) == (labels[i], ids[i])
    assert not [f for f in os.listdir(tmp_path) if f != "train.h5"]  # no temporary left


def test_gzip_and_empty(tmp_path):
    images, labels, ids = data(n=5)
    export_hdf5(array_source(images, labels, ids, NAMES), tmp_path / "z.h5", gzip_level=4)
    with h5py.File(tmp_path / "z.h5", "r") as f:
        assert f["image"].compression == "gzip"
    np.testing.assert_array_equal(hdf5_source(tmp_path / "z.h5").get(4)["image"], images[4])
    export_hdf5(array_source(np.zeros((0, 4, 4, 1), np.uint8), np.zeros(0, np.int64), [], NAMES), tmp_path / "e.h5")
    assert len(hdf5_source(tmp_path / "e.h5")) == 0


def write_h5py(path, images, labels, ids=None, id_kind="vlen", class_names=None, label_dtype=np.int64):
    with h5py.File(path, "w") as f:
        f["image"] = images
        f["label"] = np.asarray(labels).astype(label_dtype)
        if ids is not None:
            if id_kind == "vlen":
                f.create_dataset("id", data=ids, dtype=h5py.string_dtype())
            else:
                f["id"] = np.array([s.encode() for s in ids], dtype="S12")
        if class_names is not None:
            f.attrs["class_names"] = class_names


def test_h5py_written_shards_glob(tmp_path):
    parts = [data(n=n, seed=s) for s, n in ((1, 6), (2, 0), (3, 11))]
    kinds = ["vlen", "fixed", "vlen"]
    dtypes = [np.int64, np.uint8, np.int32]
    for k, ((im, lb, ids), kind, dt) in enumerate(zip(parts, kinds, dtypes)):
        ids = [f"s{k}-{i}" for i in range(len(lb))]
        write_h5py(tmp_path / f"train-{k:02d}.h5", im[..., 0] if k == 2 else im, lb, ids, kind, NAMES, dt)
    src = hdf5_source(str(tmp_path / "train-*.h5"))
    assert len(src) == 17 and src.class_names() == NAMES
    images = np.concatenate([p[0] for p in parts])
    labels = np.concatenate([p[1] for p in parts])
    got_images, got_labels, got_ids = read_batch(src, range(17))
    np.testing.assert_array_equal(got_images, images)
    np.testing.assert_array_equal(got_labels, labels)
    assert got_ids == [f"s0-{i}" for i in range(6)] + [f"s2-{i}" for i in range(11)]
    assert len(hdf5_source(tmp_path)) == 17  # a directory means all its .h5 files
    assert len(hdf5_source([tmp_path / "train-00.h5", tmp_path / "train-02.h5"])) == 17


def test_ids_and_class_names_optional(tmp_path):
    im, lb, _ = data(n=3)
    write_h5py(tmp_path / "a.h5", im, lb)
    src = hdf5_source(tmp_path / "a.h5")
    assert src.class_names() == [] and src.get(2)["id"].endswith("a.h5:2")


def test_concurrent_reads_are_serialised(tmp_path):
    images, labels, ids = data(n=40, h=32, w=32)
    export_hdf5(array_source(images, labels, ids, NAMES), tmp_path / "c.h5")
    src = hdf5_source(tmp_path / "c.h5")
    errors = []

    def work(offset):
        try:
            for i in range(offset, 40, 4):
                np.testing.assert_array_equal(src.get(i)["image"], images[i])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    imgs, _, _ = read_batch(src, range(40), 2)  # the C++ parallel reader
    np.testing.assert_array_equal(imgs, images)


@pytest.mark.parametrize("setup,msg", [
    (lambda f: f.create_dataset("label", data=np.zeros(3, np.int64)), "no dataset 'image'"),
    (lambda f: (f.create_dataset("image", data=np.zeros((3, 4, 4, 1), np.float32)),
                f.create_dataset("label", data=np.zeros(3))), "'image' must be uint8"),
    (lambda f: (f.create_dataset("image", data=np.zeros((3, 4), np.uint8)),
                f.create_dataset("label", data=np.zeros(3, np.int64))), r"'image' has shape \(3, 4\)"),
    (lambda f: (f.create_dataset("image", data=np.zeros((3, 4, 4, 1), np.uint8)),
                f.create_dataset("label", data=np.zeros(2, np.int64))), r"'label' has shape \(2,\); expected \(3,\)"),
    (lambda f: (f.create_dataset("image", data=np.zeros((3, 4, 4, 1), np.uint8)),
                f.create_dataset("label", data=np.zeros(3, np.float32))), "'label' must hold integers"),
    (lambda f: (f.create_dataset("image", data=np.zeros((3, 4, 4, 1), np.uint8)),
                f.create_dataset("label", data=np.array([0, 5, 1])), f.attrs.create("class_names", NAMES)),
     r"label\[1\] = 5 out of range; expected 0..4"),
    (lambda f: (f.create_dataset("image", data=np.zeros((3, 4, 4, 1), np.uint8)),
                f.create_dataset("label", data=np.array([0, -2, 1]))), r"label\[1\] = -2 out of range"),
    (lambda f: (f.create_dataset("image", data=np.zeros((3, 4, 4, 1), np.uint8)),
                f.create_dataset("label", data=np.zeros(3, np.int64)), f.create_dataset("id", data=np.zeros(3))),
     "'id' must hold strings"),
])
def test_bad_shards_named(tmp_path, setup, msg):
    path = str(tmp_path / "bad.h5")
    with h5py.File(path, "w") as f:
        setup(f)
    with pytest.raises(podlet.PodletError) as e:
        hdf5_source(path)
    assert str(e.value).startswith(f"HDF5 shard '{path}':") and re.search(msg, str(e.value)), str(e.value)


def test_shape_mismatch_across_shards_and_not_hdf5(tmp_path):
    im, lb, _ = data(n=2, h=4, w=4)
    write_h5py(tmp_path / "a.h5", im, lb)
    im2, lb2, _ = data(n=2, h=5, w=4)
    write_h5py(tmp_path / "b.h5", im2, lb2)
    with pytest.raises(podlet.PodletError, match=r"b.h5': images are 5x4x1, but the first shard .*a.h5' has 4x4x1"):
        hdf5_source(str(tmp_path / "*.h5"))
    (tmp_path / "c.h5").write_bytes(b"not hdf5 at all")
    with pytest.raises(podlet.PodletError, match=r"c.h5': cannot open"):
        hdf5_source(tmp_path / "c.h5")
    with pytest.raises(FileNotFoundError, match="no files match"):
        hdf5_source(str(tmp_path / "zzz*.h5"))


def test_failed_export_keeps_old_file(tmp_path):
    im, lb, ids = data(n=4)
    path = tmp_path / "keep.h5"
    export_hdf5(array_source(im, lb, ids, NAMES), path)
    before = path.read_bytes()
    # A source that fails after 64 examples were written: a TFDS build with a bad JPEG.
    src = array_source(data(n=80, h=8, w=8)[0], np.zeros(80, np.int64), None, NAMES)
    export_tfds(src, tmp_path / "tfds", "train", num_shards=1)
    (shard,) = glob.glob(str(tmp_path / "tfds" / "*" / "*" / "*" / "*-train.tfrecord-*"))
    recs = orc.read_records(open(shard, "rb").read())
    recs[70] = orc.example_bytes({**orc.example_dict(recs[70]), "image": ("bytes_list", [b"\xff\xd8\xff"])})
    open(shard, "wb").write(b"".join(orc.frame(r) for r in recs))
    with pytest.raises(podlet.PodletError, match="record 70 .*undecodable JPEG"):
        export_hdf5(tfds_source(tmp_path / "tfds", split="train"), path)
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["keep.h5", "tfds"]
