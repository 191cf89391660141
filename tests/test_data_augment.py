"""Augmentations against a NumPy float64 reference applied with the parameters the
pipeline drew (exposed by Dataset.augment_params), and the distribution of the draws."""
import numpy as np
import pytest

from podlet import data


# ---- NumPy reference -----------------------------------------------------------------------
def ref_rotate(x, angle_deg):
    """ImageProjectiveTransformV3(BILINEAR, CONSTANT fill 0) with tfa's rotation matrix."""
    H, W, C = x.shape
    a = np.deg2rad(angle_deg)
    c, s = np.cos(a), np.sin(a)
    xo = ((W - 1) - (c * (W - 1) - s * (H - 1))) / 2
    yo = ((H - 1) - (s * (W - 1) + c * (H - 1))) / 2
    yy, xx = np.mgrid[:H, :W].astype(np.float64)
    ix = c * xx - s * yy + xo
    iy = s * xx + c * yy + yo
    x0, y0 = np.floor(ix), np.floor(iy)

    def read(yi, xi):
        ok = (yi >= 0) & (yi < H) & (xi >= 0) & (xi < W)
        v = x[np.clip(yi, 0, H - 1).astype(int), np.clip(xi, 0, W - 1).astype(int)]
        return np.where(ok[..., None], v, 0.0)

    wx, wy = (ix - x0)[..., None], (iy - y0)[..., None]
    top = (1 - wx) * read(y0, x0) + wx * read(y0, x0 + 1)
    bot = (1 - wx) * read(y0 + 1, x0) + wx * read(y0 + 1, x0 + 1)
    return (1 - wy) * top + wy * bot


def ref_augment(x, p, contrast):
    x = np.asarray(x, np.float64)
    if p["flip"]:
        x = x[:, ::-1]
    x = np.roll(x, (p["dy"], p["dx"]), axis=(0, 1))  # tf.roll
    if p["angle_deg"] != 0:
        x = ref_rotate(x, p["angle_deg"])
    x = x + p["brightness"]
    if contrast:
        m = x.mean(axis=(0, 1), keepdims=True)
        x = (x - m) * p["contrast"] + m
    return x


def test_reference_rotation_convention():
    # the reference itself: +90 degrees on a square image is np.rot90 (counterclockwise)
    x = np.random.default_rng(0).random((9, 9, 2))
    np.testing.assert_allclose(ref_rotate(x, 90.0), np.rot90(x, 1, axes=(0, 1)), atol=1e-12)
    np.testing.assert_allclose(ref_rotate(x, 0.0), x, atol=0)


# ---- pipeline vs reference -----------------------------------------------------------------
def _images(n=12, h=24, w=31, c=1, seed=0):
    rng = np.random.default_rng(seed)
    # smooth-ish content so interpolation matters, plus some sharp pixels
    base = rng.integers(0, 256, (n, h // 4 + 1, w // 4 + 1, c)).repeat(4, 1).repeat(4, 2)[:, :h, :w]
    noise = rng.integers(-20, 21, (n, h, w, c))
    return np.clip(base + noise, 0, 255).astype(np.uint8)


RECIPES = {
    "translate": dict(translate=6),
    "rotate": dict(rotate=10.0),
    "rotate_large": dict(rotate=170.0),
    "brightness": dict(brightness=0.05),
    "contrast": dict(contrast=(0.6, 1.4)),
    "hflip": dict(hflip=True),
    "conservative": data.CONSERVATIVE_AUGMENTATION,
    "everything": dict(translate=3, rotate=25.0, brightness=0.2, contrast=(0.5, 1.5), hflip=True),
}


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("name", list(RECIPES))
def test_augment_matches_numpy_reference(name, channels):
    imgs = _images(c=channels, seed=len(name))
    src = data.array_source(imgs, np.zeros(len(imgs), np.int32))
    recipe = RECIPES[name]
    ds = data.Dataset(src).normalize("mean_std", mean=0.45, std=0.2).augment(**recipe, seed=17).batch(len(imgs))
    b = next(iter(ds))
    x = (imgs.astype(np.float32) / np.float32(255) - np.float32(0.45)) / np.float32(0.2)
    changed = 0
    for i in range(len(imgs)):
        p = ds.augment_params(epoch=0, position=i)
        want = ref_augment(x[i], p, recipe.get("contrast") is not None)
        np.testing.assert_allclose(b["image"][i], want, atol=2e-5, rtol=1e-5, err_msg=f"{name} image {i} params {p}")
        changed += not np.array_equal(b["image"][i], x[i])
    # the augmentation did something (a flip only half the time)
    assert changed >= (3 if name == "hflip" else len(imgs) - 1)
    if name == "hflip":
        assert changed <= len(imgs) - 3


def test_geometry_alone_is_exact():
    # roll and flip only move pixels: bit-exact, not just close
    imgs = _images(seed=3)
    src = data.array_source(imgs, np.zeros(len(imgs), np.int32))
    ds = data.Dataset(src).augment(translate=5, hflip=True, seed=4).batch(len(imgs))
    b = next(iter(ds))
    x = imgs.astype(np.float32) / np.float32(255)
    for i in range(len(imgs)):
        p = ds.augment_params(0, i)
        want = np.roll(x[i][:, ::-1] if p["flip"] else x[i], (p["dy"], p["dx"]), axis=(0, 1))
        np.testing.assert_array_equal(b["image"][i], want)


def test_ops_run_in_the_order_written():
    # augment before normalize: brightness is in [0, 1] units, then scaled by 1/std
    imgs = _images(seed=5)
    src = data.array_source(imgs, np.zeros(len(imgs), np.int32))
    ds = data.Dataset(src).augment(brightness=0.1, seed=1).normalize("mean_std", mean=0.5, std=0.25).batch(4)
    b = next(iter(ds))
    for i in range(4):
        d = ds.augment_params(0, i)["brightness"]
        want = (imgs[i].astype(np.float64) / 255 + d - 0.5) / 0.25
        np.testing.assert_allclose(b["image"][i], want, atol=1e-5)


def test_shuffled_stream_is_keyed_by_epoch_and_position():
    src = data.synthetic_ddsm("train", 32, scale=0.0005)  # 25 examples
    ds = (data.Dataset(src).shuffle(8, seed=2).normalize("minus_one_to_one")
          .augment(**data.CONSERVATIVE_AUGMENTATION, seed=6).repeat(2).batch(10))
    seen_epochs = set()
    for b in ds.iterator(with_positions=True):
        for j in range(len(b["label"])):
            e, pos, idx = int(b["epoch"][j]), int(b["position"][j]), int(b["index"][j])
            seen_epochs.add(e)
            x = src.get(idx)["image"].astype(np.float32) / np.float32(255) * np.float32(2) - np.float32(1)
            want = ref_augment(x, ds.augment_params(e, pos), True)
            np.testing.assert_allclose(b["image"][j], want, atol=2e-5)
    assert seen_epochs == {0, 1}


# ---- the draws --------------------------------------------------------------------------------
def _draws(recipe, n=4000, seed=0, epoch=0):
    ds = data.Dataset(data.synthetic_ddsm("test", 32)).augment(**recipe, seed=seed)
    return [ds.augment_params(epoch, i) for i in range(n)]


def test_draw_distributions():
    d = _draws(dict(translate=6, rotate=10.0, brightness=0.05, contrast=(0.9, 1.1), hflip=True))
    for key in ("dy", "dx"):
        v = np.array([p[key] for p in d])
        counts = np.bincount(v + 6, minlength=13)
        assert v.min() == -6 and v.max() == 6 and len(counts) == 13
        chi2 = ((counts - len(v) / 13) ** 2 / (len(v) / 13)).sum()
        assert chi2 < 32.9  # p = 0.001, 12 dof
    for key, lo, hi in (("angle_deg", -10, 10), ("brightness", -0.05, 0.05), ("contrast", 0.9, 1.1)):
        v = np.array([p[key] for p in d])
        assert lo <= v.min() and v.max() <= hi
        u = (v - lo) / (hi - lo)
        assert np.abs(np.sort(u) - (np.arange(len(u)) + 0.5) / len(u)).max() < 0.03  # KS at ~0.1%
    flips = np.mean([p["flip"] for p in d])
    assert 0.46 < flips < 0.54


def test_disabled_augmentations_draw_nothing_and_slots_are_independent():
    off = _draws(dict(translate=6), n=50)
    assert all(p["flip"] is False and p["angle_deg"] == 0 and p["brightness"] == 0 and p["contrast"] == 1
               for p in off)
    on = _draws(dict(translate=6, rotate=10.0, brightness=0.05, hflip=True), n=50)
    # enabling more augmentations does not change the translation of any element
    assert [(p["dy"], p["dx"]) for p in off] == [(p["dy"], p["dx"]) for p in on]


def test_draws_depend_on_seed_epoch_and_position():
    a = _draws(dict(rotate=10.0), n=20)
    assert len({p["angle_deg"] for p in a}) == 20
    b = _draws(dict(rotate=10.0), n=20, epoch=1)
    c = _draws(dict(rotate=10.0), n=20, seed=1)
    assert all(x["angle_deg"] != y["angle_deg"] for x, y in zip(a, b))
    assert all(x["angle_deg"] != y["angle_deg"] for x, y in zip(a, c))
    assert a == _draws(dict(rotate=10.0), n=20)


def test_bad_augment_arguments():
    ds = data.Dataset(data.synthetic_ddsm("test", 32))
    with pytest.raises(ValueError, match="augment translate must be >= 0, got -1"):
        ds.augment(translate=-1)
    with pytest.raises(TypeError, match="augment translate must be an int"):
        ds.augment(translate=2.5)
    with pytest.raises(ValueError, match="rotate is in degrees and must be <= 180"):
        ds.augment(rotate=400)
    with pytest.raises(ValueError, match="augment brightness must be a finite number >= 0.0"):
        ds.augment(brightness=-0.1)
    with pytest.raises(ValueError, match=r"contrast needs lo <= hi, got \(1.2, 0.8\)"):
        ds.augment(contrast=(1.2, 0.8))
    with pytest.raises(TypeError, match="contrast must be None or a pair"):
        ds.augment(contrast=0.5)
    with pytest.raises(ValueError, match="augment seed must be >= 0"):
        ds.augment(seed=-3)
    with pytest.raises(ValueError, match="augment op 1 does not exist; the pipeline has 1"):
        ds.augment(translate=1).augment_params(0, 0, op=1)
