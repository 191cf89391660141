"""The synthetic DDSM patch set: split sizes, class table, determinism, lesion geometry."""
import numpy as np
import pytest

import podlet
from podlet import data

FULL = {"train": 49780, "validation": 5580, "test": 9770}


@pytest.mark.parametrize("split", list(FULL))
def test_split_sizes_and_class_table(split):
    src = data.synthetic_ddsm(split, image_size=32)
    assert len(src) == FULL[split]
    labels = src.labels()
    counts = np.bincount(labels, minlength=5)
    assert counts.tolist() == src.class_counts()
    frac = counts / len(src)
    # BACKGROUND 46.6% and malignant classes 22.3% (CBIS-DDSM train), exact up to rounding
    assert abs(frac[0] - 0.466) < 0.5 / len(src) + 1e-12
    assert abs(frac[3] + frac[4] - 0.223) < 1.0 / len(src) + 1e-12
    np.testing.assert_allclose(frac, [0.466, 0.168, 0.143, 0.099, 0.124], atol=1.0 / len(src))
    assert list(src.class_names()) == list(data.DDSM_CLASS_NAMES) == [
        "BACKGROUND", "BENIGN_CALCIFICATION", "BENIGN_MASS", "MALIGNANT_CALCIFICATION", "MALIGNANT_MASS"]


def test_train_counts_match_the_documented_table():
    assert data.synthetic_ddsm("train", 32).class_counts() == [23197, 8363, 7119, 4928, 6173]
    assert data.synthetic_ddsm("validation", 32).class_counts() == [2600, 938, 798, 552, 692]
    assert data.synthetic_ddsm("test", 32).class_counts() == [4553, 1641, 1397, 967, 1212]


def test_scale_keeps_every_class():
    src = data.synthetic_ddsm("train", 32, scale=0.01)
    assert len(src) == round(49780 * 0.01)
    tiny = data.synthetic_ddsm("validation", 32, scale=1e-6)
    assert len(tiny) == 5 and sorted(tiny.labels().tolist()) == [0, 1, 2, 3, 4]
    big = data.synthetic_ddsm("test", 32, scale=2.0)
    assert len(big) == 2 * 9770


def test_labels_are_spread_over_indices():
    # A keyed permutation, not class-sorted blocks: every window of 1000 has all classes.
    labels = data.synthetic_ddsm("train", 32).labels()
    for s in range(0, 40000, 10000):
        assert set(np.unique(labels[s:s + 1000]).tolist()) == {0, 1, 2, 3, 4}


def test_examples_are_pure_functions_of_seed_split_index():
    a = data.synthetic_ddsm("train", 64, seed=3)
    b = data.synthetic_ddsm("train", 64, seed=3)
    for i in (0, 17, 49779):
        ea, eb = a.get(i), b.get(i)
        assert ea["image"].dtype == np.uint8 and ea["image"].shape == (64, 64, 1)
        assert ea["image"].tobytes() == eb["image"].tobytes()
        assert ea["label"] == eb["label"] == a.label(i)
        assert ea["id"] == f"train/{i}"
    # seed and split change the images
    c = data.synthetic_ddsm("train", 64, seed=4)
    v = data.synthetic_ddsm("validation", 64, seed=3)
    assert a.get(5)["image"].tobytes() != c.get(5)["image"].tobytes()
    assert a.get(5)["image"].tobytes() != v.get(5)["image"].tobytes()
    # parallel batch reads give the same bytes whatever the thread count
    imgs1, lab1, ids1 = data.read_batch(a, range(40), threads=1)
    imgs2, lab2, ids2 = data.read_batch(a, range(40), threads=2)
    assert imgs1.tobytes() == imgs2.tobytes() and lab1.tolist() == lab2.tolist() and ids1 == ids2


def test_default_size_and_texture():
    src = data.synthetic_ddsm("test")
    img = src.get(0)["image"]
    assert img.shape == (224, 224, 1)
    # textured grayscale tissue: neither flat nor saturated
    assert 10 < img.std() < 80 and 30 < img.mean() < 200
    assert (img == 255).mean() < 0.01


def _pick(src, label, k):
    labels = src.labels()
    return [int(i) for i in np.nonzero(labels == label)[0][:k]]


def test_lesion_geometry():
    src = data.synthetic_ddsm("train", 96)
    for i in _pick(src, 0, 3):
        assert src.lesion(i) is None
    for c in range(1, 5):
        for i in _pick(src, c, 5):
            les = src.lesion(i)
            assert les["label"] == c and les["class_name"] == data.DDSM_CLASS_NAMES[c]
            m = les["mask"]
            assert m.dtype == np.bool_ and m.shape == (96, 96) and m.any()
            ys, xs = np.nonzero(m)
            x0, y0, x1, y1 = les["bbox"]
            assert (x0, y0, x1, y1) == (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1)
            cx, cy = les["center"]
            assert x0 - 1 <= cx <= x1 and y0 - 1 <= cy <= y1
            assert 0 < les["radius"] < 96
    # the module-level helper agrees with the method
    i = _pick(src, 4, 1)[0]
    les = data.synthetic_ddsm_lesion("train", i, image_size=96)
    assert les["bbox"] == src.lesion(i)["bbox"] and (les["mask"] == src.lesion(i)["mask"]).all()


def test_lesion_is_where_the_geometry_says():
    # Lesions add density: inside the mask the image is brighter than in a ring around it
    # (on average over examples; tissue varies from one example to the next).
    src = data.synthetic_ddsm("train", 96)
    for c, min_gain in ((2, 1.0), (4, 1.0), (1, 2.0), (3, 2.0)):
        gains = []
        for i in _pick(src, c, 25):
            les = src.lesion(i)
            img = src.get(i)["image"][..., 0].astype(np.float64)
            yy, xx = np.mgrid[:96, :96]
            cx, cy = les["center"]
            d = np.hypot(xx - cx, yy - cy)
            r = max(les["radius"], 2.0)
            ring = (d > r * 1.6) & (d < r * 2.6)
            inside = les["mask"] if c in (2, 4) else les["mask"] & (img >= np.percentile(img[les["mask"]], 90))
            gains.append(img[inside].mean() - img[ring].mean())
        assert np.mean(gains) > min_gain, (c, np.mean(gains))


def test_same_example_at_every_resolution():
    big, small = data.synthetic_ddsm("train", 224), data.synthetic_ddsm("train", 64)
    i = _pick(big, 2, 1)[0]
    lb, ls = big.lesion(i), small.lesion(i)
    np.testing.assert_allclose((np.array(lb["center"]) + 0.5) / 224, (np.array(ls["center"]) + 0.5) / 64, atol=1e-12)
    np.testing.assert_allclose(lb["radius"] / 224, ls["radius"] / 64, rtol=1e-12)
    # and the picture agrees: 224 px block-averaged to 64 px is close to the 64 px render
    a = big.get(i)["image"][..., 0].astype(np.float64)
    b = small.get(i)["image"][..., 0].astype(np.float64)
    # compare on a common 32x32 grid
    a32 = a[:224, :224].reshape(32, 7, 32, 7).mean(axis=(1, 3))
    b32 = b.reshape(32, 2, 32, 2).mean(axis=(1, 3))
    assert np.corrcoef(a32.ravel(), b32.ravel())[0, 1] > 0.9


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown split 'valid'"):
        data.synthetic_ddsm("valid")
    with pytest.raises(podlet.PodletError, match="image_size must be in"):
        data.synthetic_ddsm("train", image_size=8)
    with pytest.raises(podlet.PodletError, match="scale must be a positive"):
        data.synthetic_ddsm("train", scale=0.0)
    with pytest.raises(podlet.PodletError, match="scale must be a positive"):
        data.synthetic_ddsm("train", scale=float("nan"))
    with pytest.raises(ValueError, match="seed must be a non-negative int"):
        data.synthetic_ddsm("train", seed=-1)
    src = data.synthetic_ddsm("validation", 32)
    with pytest.raises(podlet.PodletError, match=r"index 5580 out of range"):
        src.get(5580)
    with pytest.raises(podlet.PodletError, match=r"synthetic_ddsm validation: index 9999 out of range \[0, 5580\)"):
        src.lesion(9999)
    with pytest.raises(podlet.PodletError, match="out of range"):
        src.label(-1)
