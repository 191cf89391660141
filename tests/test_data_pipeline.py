"""The input pipeline against a plain-Python model of tf.data: buffer shuffle, repeat,
batch, drop_remainder, take/skip, resume; determinism across thread counts; sources;
prefetch shutdown; bad arguments."""
import subprocess
import sys
import os

import numpy as np
import pytest

import podlet
from podlet import data

M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


# ---- the documented counter-based generator, re-implemented ------------------------------
def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def fold(key, v):
    return mix64(key ^ mix64((v + GOLDEN) & M64))


def draw_below(key, counter, n):
    return (mix64((key + (counter + 1) * GOLDEN) & M64) * n) >> 64


def shuffle_key(seed, epoch, reshuffle=True):
    return fold(fold(seed, 0x73687566), epoch if reshuffle else 0)


def buffer_shuffle(n, buffer_size, key):
    """tf.data's ShuffleDataset on indices, as documented in cpp/podlet/data/shuffle.h."""
    buf, nxt, out, t = [], 0, [], 0
    while nxt < n and len(buf) < buffer_size:
        buf.append(nxt)
        nxt += 1
    while buf:
        j = draw_below(key, t, len(buf))
        t += 1
        out.append(buf[j])
        if nxt < n:
            buf[j] = nxt
            nxt += 1
        else:
            buf[j] = buf[-1]
            buf.pop()
    return out


def model_stream(n, *, buffer=None, seed=0, reshuffle=True, repeat=1, batch=None, drop=False,
                 repeat_first=True, first_epoch=0):
    """tf.data's semantics, in plain Python: a list of lists of source indices."""
    def epoch_order(e):
        return buffer_shuffle(n, buffer, shuffle_key(seed, e, reshuffle)) if buffer else list(range(n))
    if batch is None:
        return [[i] for r in range(repeat) for i in epoch_order(first_epoch + r)]
    if repeat_first:
        stream = [i for r in range(repeat) for i in epoch_order(first_epoch + r)]
        out = [stream[k:k + batch] for k in range(0, len(stream), batch)]
    else:
        out = []
        for r in range(repeat):
            o = epoch_order(first_epoch + r)
            out += [o[k:k + batch] for k in range(0, n, batch)]
    return [b for b in out if len(b) == batch or not drop]


def counting_source(n, h=3, w=2, c=1):
    # image pixel 0 encodes the index (mod 256), ids are the index
    imgs = np.zeros((n, h, w, c), np.uint8)
    imgs[:, 0, 0, 0] = np.arange(n) % 256
    imgs[:, 1:, :, :] = (np.arange(n) * 7 % 256)[:, None, None, None]
    return data.array_source(imgs, np.arange(n) % 5, ids=[str(i) for i in range(n)])


def ids_of(ds, **kw):
    return [[int(x) for x in np.atleast_1d(b["id"])] for b in ds.iterator(**kw)]


# ---- shuffle ------------------------------------------------------------------------------
@pytest.mark.parametrize("n,buffer", [(1, 1), (10, 1), (10, 3), (37, 8), (37, 37), (37, 1000), (500, 64)])
def test_buffer_shuffle_matches_the_python_model(n, buffer):
    key = shuffle_key(11, 3)
    got = podlet._core.data_shuffle_order(n, buffer, key).tolist()
    assert got == buffer_shuffle(n, buffer, key)
    assert sorted(got) == list(range(n))
    # an element moves ahead by less than buffer_size places
    assert all(pos > i - buffer for pos, i in enumerate(got))
    if buffer == 1:
        assert got == list(range(n))


def test_full_buffer_shuffle_is_uniform():
    # position of element 0 after a full-buffer shuffle of 8, over many keys: ~uniform
    counts = np.zeros(8)
    for s in range(2000):
        counts[podlet._core.data_shuffle_order(8, 8, shuffle_key(s, 0)).tolist().index(0)] += 1
    expected = 2000 / 8
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 24.3  # p = 0.001 for 7 dof


@pytest.mark.parametrize("repeat_first", [True, False])
@pytest.mark.parametrize("drop", [True, False])
def test_shuffle_repeat_batch_semantics(repeat_first, drop):
    n = 23
    ds = data.Dataset(counting_source(n)).shuffle(5, seed=7)
    ds = ds.repeat(3).batch(4, drop_remainder=drop) if repeat_first else ds.batch(4, drop_remainder=drop).repeat(3)
    want = model_stream(n, buffer=5, seed=7, repeat=3, batch=4, drop=drop, repeat_first=repeat_first)
    assert ids_of(ds) == want
    assert len(ds) == len(want)
    # a second iterator over the same Dataset is the next pass: new epochs, new order
    assert ids_of(ds) == model_stream(n, buffer=5, seed=7, repeat=3, batch=4, drop=drop,
                                      repeat_first=repeat_first, first_epoch=3)


def test_reshuffle_each_iteration_false_repeats_the_order():
    ds = data.Dataset(counting_source(12)).shuffle(12, seed=1, reshuffle_each_iteration=False).repeat(3)
    flat = [b[0] for b in ids_of(ds)]
    assert flat[:12] == flat[12:24] == flat[24:]
    assert flat[:12] == [b[0] for b in model_stream(12, buffer=12, seed=1, reshuffle=False)]
    ds2 = data.Dataset(counting_source(12)).shuffle(12, seed=1).repeat(2)
    flat2 = [b[0] for b in ids_of(ds2)]
    assert flat2[:12] != flat2[12:] and sorted(flat2[:12]) == sorted(flat2[12:]) == list(range(12))


def test_unbatched_items_and_types():
    src = counting_source(6)
    items = list(data.Dataset(src))
    assert [int(it["id"]) for it in items] == list(range(6))
    it = items[4]
    assert it["image"].shape == (3, 2, 1) and it["image"].dtype == np.float32
    assert it["label"].dtype == np.int32 and it["label"] == 4
    np.testing.assert_array_equal(it["image"][0, 0, 0], np.float32(4) / np.float32(255))
    b = next(iter(data.Dataset(src).batch(4)))
    assert b["image"].shape == (4, 3, 2, 1) and b["label"].dtype == np.int32
    assert b["id"].dtype.kind == "U" and b["id"].tolist() == ["0", "1", "2", "3"]


def test_take_skip_and_cardinality():
    ds = data.Dataset(counting_source(10)).batch(3)
    assert ds.cardinality() == 4 and len(ds) == 4
    assert ids_of(ds.take(2)) == [[0, 1, 2], [3, 4, 5]]
    assert ids_of(ds.skip(1)) == [[3, 4, 5], [6, 7, 8], [9]]
    assert ids_of(ds.skip(1).take(2)) == [[3, 4, 5], [6, 7, 8]]
    assert len(ds.skip(1).take(2)) == 2
    inf = data.Dataset(counting_source(10)).repeat().batch(3)
    assert inf.cardinality() == -1
    with pytest.raises(TypeError, match="infinite"):
        len(inf)
    assert ids_of(inf.take(5))[-1] == [2, 3, 4]  # batches span the epoch boundary


def test_resume_sees_the_uninterrupted_batches():
    src = data.synthetic_ddsm("train", 32, scale=0.001)  # 50 examples
    ds = (data.Dataset(src).shuffle(16, seed=3).normalize("minus_one_to_one")
          .augment(**data.CONSERVATIVE_AUGMENTATION, seed=5).repeat().batch(8, drop_remainder=True))
    full = [b for _, b in zip(range(20), ds.iterator(iteration=0))]
    for start in (0, 6, 13):  # 13 * 8 = 104: the third epoch
        it = ds.iterator(start_step=start, iteration=0)
        assert it.step == start
        for k in range(start, 20):
            b = next(it)
            assert b["id"].tolist() == full[k]["id"].tolist()
            assert b["image"].tobytes() == full[k]["image"].tobytes()
        assert it.step == 20
        it.close()


@pytest.mark.parametrize("prefetch", [0, 3])
def test_same_batches_whatever_the_thread_count(prefetch):
    src = data.synthetic_ddsm("train", 48, scale=0.002)
    ds = (data.Dataset(src).shuffle(64, seed=9).normalize("mean_std", mean=0.5, std=0.25)
          .augment(**data.CONSERVATIVE_AUGMENTATION, seed=2).repeat(2).batch(16, drop_remainder=True))
    if prefetch:
        ds = ds.prefetch(prefetch)
    runs = [list(ds.with_threads(t).iterator(iteration=0)) for t in (1, 2, 4)]
    assert len(runs[0]) == 2 * len(src) // 16
    for other in runs[1:]:
        for a, b in zip(runs[0], other):
            assert a["image"].tobytes() == b["image"].tobytes()
            assert a["label"].tolist() == b["label"].tolist() and a["id"].tolist() == b["id"].tolist()


def test_labels_and_images_follow_the_source():
    src = data.synthetic_ddsm("validation", 32, scale=0.01)
    ds = data.Dataset(src).shuffle(10, seed=1).batch(7)
    for b in ds.iterator(with_positions=True):
        for j, idx in enumerate(b["index"]):
            ex = src.get(int(idx))
            assert b["label"][j] == ex["label"] and b["id"][j] == ex["id"]
            np.testing.assert_array_equal(b["image"][j], ex["image"].astype(np.float32) / np.float32(255))


def test_normalize_matches_the_seed_bit_for_bit():
    rng = np.random.default_rng(0)
    imgs = rng.integers(0, 256, (5, 7, 6, 3), dtype=np.uint8)
    src = data.array_source(imgs, np.zeros(5, np.int64))
    x = imgs.astype(np.float32) / np.float32(255.0)
    b = next(iter(data.Dataset(src).normalize("mean_std", mean=0.5, std=0.25).batch(5)))
    np.testing.assert_array_equal(b["image"], (x - np.float32(0.5)) / np.float32(0.25))
    b = next(iter(data.Dataset(src).normalize("mean_std", mean=[0.4, 0.5, 0.6], std=[0.2, 0.3, 0.1]).batch(5)))
    np.testing.assert_array_equal(b["image"], (x - np.float32([0.4, 0.5, 0.6])) / np.float32([0.2, 0.3, 0.1]))
    b = next(iter(data.Dataset(src).normalize("minus_one_to_one").batch(5)))
    np.testing.assert_array_equal(b["image"], x * np.float32(2.0) - np.float32(1.0))
    b = next(iter(data.Dataset(src).batch(5)))
    np.testing.assert_array_equal(b["image"], x)


def test_per_device_and_shard_batch():
    ds = data.Dataset(counting_source(20)).batch(8, drop_remainder=True).per_device(4)
    b = next(iter(ds))
    assert b["image"].shape == (4, 2, 3, 2, 1) and b["label"].shape == (4, 2) and b["id"].shape == (4, 2)
    assert b["id"].tolist() == [["0", "1"], ["2", "3"], ["4", "5"], ["6", "7"]]
    s = data.shard_batch({"x": np.arange(6)}, 3)
    assert s["x"].tolist() == [[0, 1], [2, 3], [4, 5]]
    with pytest.raises(ValueError, match="divisible by 4 devices"):
        data.shard_batch({"x": np.arange(6)}, 4)
    with pytest.raises(ValueError, match="batch size 8 is not divisible by 3"):
        data.Dataset(counting_source(20)).batch(8).per_device(3)


# ---- sources ------------------------------------------------------------------------------
def test_array_source_dtypes_and_shapes():
    imgs = np.arange(2 * 4 * 5, dtype=np.int64).reshape(2, 4, 5) % 256
    src = data.array_source(imgs, [3, 1], class_names=["a", "b", "c", "d"])
    e = src.get(1)
    assert e["image"].shape == (4, 5, 1) and e["image"].dtype == np.uint8
    np.testing.assert_array_equal(e["image"][..., 0], imgs[1])
    assert e["label"] == 1 and e["id"] == "1" and list(src.class_names()) == ["a", "b", "c", "d"]
    assert len(src) == 2
    with pytest.raises(TypeError, match="must be uint8.*float64"):
        data.array_source(np.zeros((2, 4, 4)), [0, 0])
    with pytest.raises(ValueError, match="0..255.*-1..3"):
        data.array_source(np.array([[[-1, 3]]]), [0])
    with pytest.raises(ValueError, match="2 images but 3 labels"):
        data.array_source(np.zeros((2, 4, 4), np.uint8), [0, 0, 0])
    with pytest.raises(ValueError, match=r"\(N, H, W\) or \(N, H, W, C\)"):
        data.array_source(np.zeros((4, 4), np.uint8), [0] * 4)
    with pytest.raises(podlet.PodletError, match="label 4 of example 1 out of range for 2 class names"):
        data.array_source(np.zeros((2, 4, 4), np.uint8), [0, 4], class_names=["x", "y"])
    with pytest.raises(ValueError, match="2 images but 1 ids"):
        data.array_source(np.zeros((2, 4, 4), np.uint8), [0, 0], ids=["a"])


def test_fashion_mnist_source_matches_the_loader():
    src = data.fashion_mnist("test")
    x, y = data.load_fashion_mnist("test")
    assert len(src) == 10000 and list(src.class_names()) == list(data.FASHION_MNIST_CLASS_NAMES)
    for i in (0, 4321, 9999):
        e = src.get(i)
        np.testing.assert_array_equal(e["image"], x[i])
        assert e["label"] == y[i] and e["id"] == f"test/{i}"


# ---- shutdown and errors ------------------------------------------------------------------
def test_prefetch_iterator_stops_cleanly():
    ds = data.Dataset(data.synthetic_ddsm("train", 64, scale=0.01)).repeat().batch(4).prefetch(3)
    it = iter(ds)
    next(it)
    it.close()
    with pytest.raises(StopIteration):
        next(it)
    it2 = iter(ds)
    next(it2)
    del it2  # dropping a running prefetcher joins its thread


def test_interpreter_exit_with_a_live_prefetcher():
    code = ("import podlet.data as d\n"
            "ds = d.Dataset(d.synthetic_ddsm('train', 64, scale=0.05)).repeat().batch(8).prefetch(4)\n"
            "it = iter(ds); next(it); print('ok')\n")
    env = dict(os.environ)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


@pytest.mark.parametrize("prefetch", [0, 2])
def test_a_failing_record_raises_a_named_error(prefetch):
    src = podlet._core.data_debug_source(40, fail_at=13)
    ds = data.Dataset(src).batch(4)
    if prefetch:
        ds = ds.prefetch(prefetch)
    it = iter(ds)
    got = [next(it)["id"].tolist() for _ in range(3)]
    assert got[0] == ["debug/0", "debug/1", "debug/2", "debug/3"]
    with pytest.raises(podlet.PodletError, match="debug source: record 13 is corrupt"):
        next(it)
    with pytest.raises(StopIteration):  # the stream ends after the error; nothing hangs
        next(it)


def test_a_record_of_another_shape_is_named():
    src = podlet._core.data_debug_source(10, odd_shape_at=6)
    with pytest.raises(podlet.PodletError, match=r"record 6 \(id 'debug/6'\) has shape \(5, 4, 1\), "
                                                 r"expected \(4, 4, 1\) like record 0"):
        list(data.Dataset(src).batch(5).prefetch(1))


def test_bad_pipeline_arguments():
    src = counting_source(10)
    ds = data.Dataset(src)
    with pytest.raises(TypeError, match="Dataset needs a podlet data source"):
        data.Dataset(np.zeros(3))
    with pytest.raises(ValueError, match="shuffle buffer_size must be >= 1, got 0"):
        ds.shuffle(0)
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        ds.batch(0)
    with pytest.raises(TypeError, match="batch_size must be an int"):
        ds.batch(2.5)
    with pytest.raises(ValueError, match="unknown mode 'zscore'"):
        ds.normalize("zscore")
    with pytest.raises(ValueError, match="needs mean= and std="):
        ds.normalize("mean_std")
    with pytest.raises(ValueError, match="std must be > 0"):
        ds.normalize("mean_std", mean=0.5, std=0.0)
    with pytest.raises(ValueError, match="shuffle\\(\\) must come before repeat\\(\\) and batch\\(\\)"):
        ds.batch(2).shuffle(4)
    with pytest.raises(ValueError, match="normalize\\(\\) works on single examples: call it before batch"):
        ds.batch(2).normalize("minus_one_to_one")
    with pytest.raises(ValueError, match="batch\\(\\) may appear once"):
        ds.batch(2).batch(2)
    with pytest.raises(ValueError, match="take\\(\\) counts output items: call it after batch"):
        ds.take(3).batch(2)
    with pytest.raises(ValueError, match="per_device\\(\\) reshapes batches"):
        ds.per_device(2)
    with pytest.raises(ValueError, match="start_step must be >= 0"):
        ds.iterator(start_step=-1)
    with pytest.raises(podlet.PodletError, match="mean and std need 1 or 1 values"):
        iter(ds.normalize("mean_std", mean=[0.1, 0.2, 0.3], std=1.0))
    with pytest.raises(podlet.PodletError, match="never yields: the dataset has fewer than 16 examples"):
        iter(ds.batch(16, drop_remainder=True).repeat())
