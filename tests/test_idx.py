"""IDX reader (podlet._core.read_idx) and the Fashion-MNIST loader.

Files are written here with NumPy, read back by the C++ reader and compared with a
small NumPy reader; broken files must raise podlet.PodletError naming the file.
"""
import gzip
import os
import re

import numpy as np
import pytest

import podlet
from podlet import _core
from podlet.data import CLASS_NAMES, load_fashion_mnist

# type code -> (big-endian NumPy dtype in the file, dtype podlet returns)
CODES = {
    0x08: (">u1", np.uint8),
    0x09: (">i1", np.int32),
    0x0B: (">i2", np.int32),
    0x0C: (">i4", np.int32),
    0x0D: (">f4", np.float32),
    0x0E: (">f8", np.float64),
}


def idx_bytes(arr, code):
    arr = np.asarray(arr)
    header = bytes([0, 0, code, arr.ndim]) + np.asarray(arr.shape, ">i4").tobytes()
    return header + arr.astype(CODES[code][0]).tobytes()


def write(path, data, gz=False):
    with (gzip.open(path, "wb") if gz else open(path, "wb")) as f:
        f.write(data)
    return str(path)


def numpy_read_idx(path):
    """Reference reader."""
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    assert raw[:2] == b"\0\0"
    code, ndim = raw[2], raw[3]
    shape = tuple(np.frombuffer(raw, ">i4", ndim, 4))
    return np.frombuffer(raw, CODES[code][0], offset=4 + 4 * ndim).reshape(shape)


def sample(code, shape, rng):
    if code == 0x08:
        return rng.integers(0, 256, shape).astype(np.uint8)
    if code == 0x09:
        return rng.integers(-128, 128, shape).astype(np.int8)
    if code == 0x0B:
        return rng.integers(-2**15, 2**15, shape).astype(np.int16)
    if code == 0x0C:
        x = rng.integers(-2**31, 2**31, shape, dtype=np.int64).astype(np.int32)
        if x.size >= 2:
            x.flat[0], x.flat[1] = -2**31, 2**31 - 1  # extremes survive the byte swap
        return x
    x = rng.standard_normal(shape) * 1e3
    if x.size >= 3:
        x.flat[0], x.flat[1], x.flat[2] = np.inf, -0.0, np.nan
    return x.astype(np.float32 if code == 0x0D else np.float64)


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("shape", [(7,), (3, 4, 5), (2, 1, 3, 2), (0,), (2, 0, 3)])
@pytest.mark.parametrize("code", sorted(CODES), ids=[f"0x{c:02X}" for c in sorted(CODES)])
def test_round_trip(tmp_path, code, shape, gz):
    rng = np.random.default_rng(code * 100 + len(shape))
    x = sample(code, shape, rng)
    path = write(tmp_path / ("x.idx.gz" if gz else "x.idx"), idx_bytes(x, code), gz)
    got = np.asarray(_core.read_idx(path))
    ref = numpy_read_idx(path)
    assert got.dtype == CODES[code][1]
    assert got.shape == shape == ref.shape
    np.testing.assert_array_equal(got, ref.astype(got.dtype))
    np.testing.assert_array_equal(got, x.astype(got.dtype))
    if got.dtype.kind == "f":  # bit-exact, including -0.0 and NaN payloads
        np.testing.assert_array_equal(got.view(np.uint8), ref.astype(got.dtype).view(np.uint8))


def test_mnist_magic_numbers(tmp_path):
    labels = np.arange(10, dtype=np.uint8)
    images = np.arange(2 * 28 * 28).astype(np.uint8).reshape(2, 28, 28)
    lb, ib = idx_bytes(labels, 0x08), idx_bytes(images, 0x08)
    assert lb[:4] == b"\x00\x00\x08\x01" and ib[:4] == b"\x00\x00\x08\x03"
    np.testing.assert_array_equal(np.asarray(_core.read_idx(write(tmp_path / "l", lb))), labels)
    np.testing.assert_array_equal(np.asarray(_core.read_idx(write(tmp_path / "i", ib, gz=True))), images)


def test_path_like_and_concatenated_gzip(tmp_path):
    x = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    data = idx_bytes(x, 0x0C)
    path = tmp_path / "multi.gz"
    path.write_bytes(gzip.compress(data[:20]) + gzip.compress(data[20:]))  # two gzip members
    np.testing.assert_array_equal(np.asarray(_core.read_idx(path)), x)


def _raises(path, *patterns):
    with pytest.raises(podlet.PodletError) as e:
        _core.read_idx(path)
    msg = str(e.value)
    assert str(path) in msg, msg
    for p in patterns:
        assert re.search(p, msg), f"{p!r} not in {msg!r}"
    return msg


GOOD = idx_bytes(np.arange(60, dtype=np.uint8).reshape(3, 4, 5), 0x08)


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_truncated_data(tmp_path, gz):
    path = write(tmp_path / "short.idx", GOOD[:-1], gz)
    _raises(path, r"truncated data", r"\(3, 4, 5\)", r"60 bytes", r"only 59")


def test_truncated_header(tmp_path):
    _raises(write(tmp_path / "a", GOOD[:3]), r"truncated header")
    _raises(write(tmp_path / "b", GOOD[:10]), r"truncated header", r"16-byte header")


def test_trailing_bytes(tmp_path):
    _raises(write(tmp_path / "long.idx", GOOD + b"\0\0"), r"wrong size", r"2 trailing bytes")


def test_bad_magic(tmp_path):
    _raises(write(tmp_path / "text.idx", b"hello world, not IDX"), r"bad magic number 0x68656C6C", r"0x00000803")
    _raises(write(tmp_path / "code.idx", b"\0\0\x0a\x01" + b"\0\0\0\0"), r"unknown type code 0x0A")
    _raises(write(tmp_path / "nodim.idx", b"\0\0\x08\x00"), r"zero dimensions")
    _raises(write(tmp_path / "neg.idx", b"\0\0\x08\x01\xff\xff\xff\xff"), r"negative size -1")


def test_huge_shapes_are_errors_not_overflows(tmp_path):
    # ~2^62 float64 elements: the byte count overflows uint64.
    header = b"\0\0\x0e\x02" + np.full(2, 2**31 - 1, ">i4").tobytes()
    _raises(write(tmp_path / "huge.idx", header + b"\0" * 8), r"truncated data", r"more than 2\^64")
    header = b"\0\0\x08\x04" + np.full(4, 2**31 - 1, ">i4").tobytes()
    _raises(write(tmp_path / "huger.idx", header + b"\0" * 8), r"too large", r"more than 2\^63 elements")
    # Empty (a zero dimension), but the other sizes overflow int64 (found by fuzz/idx_fuzz.cc).
    header = b"\0\0\x08\x04" + np.array([0] + [2**31 - 1] * 3, ">i4").tobytes()
    _raises(write(tmp_path / "empty_huge.idx", header), r"too large", r"more than 2\^63 elements")


def test_bad_gzip(tmp_path):
    blob = gzip.compress(GOOD)
    _raises(write(tmp_path / "cut.gz", blob[: len(blob) // 2]), r"truncated gzip")
    corrupt = bytearray(blob)
    corrupt[10:20] = b"\xff" * 10
    _raises(write(tmp_path / "bad.gz", bytes(corrupt)), r"corrupt gzip|truncated gzip")
    _raises(write(tmp_path / "junk.gz", blob + b"junk"), r"unexpected bytes after the end")


def test_missing_file(tmp_path):
    _raises(str(tmp_path / "nope.idx"), r"cannot open", r"No such file")
    _raises(str(tmp_path), r"read error|Is a directory")


# --- Fashion-MNIST (Debian package dataset-fashion-mnist) ---

def test_fashion_mnist_train():
    images, labels = load_fashion_mnist("train")
    assert images.shape == (60000, 28, 28, 1) and images.dtype == np.uint8
    assert labels.shape == (60000,) and labels.dtype == np.int32
    np.testing.assert_array_equal(np.bincount(labels, minlength=10), [6000] * 10)
    assert labels.min() == 0 and labels.max() == 9
    assert images.flags.writeable
    ref = numpy_read_idx("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
    np.testing.assert_array_equal(images[..., 0], ref)
    assert 0 < images.mean() < 255


def test_fashion_mnist_test_split_and_names():
    images, labels = load_fashion_mnist("test")
    assert images.shape == (10000, 28, 28, 1)
    np.testing.assert_array_equal(np.bincount(labels, minlength=10), [1000] * 10)
    assert len(CLASS_NAMES) == 10 and CLASS_NAMES[0] == "T-shirt/top" and CLASS_NAMES[9] == "Ankle boot"


def test_fashion_mnist_data_dir(tmp_path):
    x = np.arange(3 * 28 * 28).astype(np.uint8).reshape(3, 28, 28)
    y = np.array([9, 0, 4], np.uint8)
    write(tmp_path / "t10k-images-idx3-ubyte.gz", idx_bytes(x, 0x08), gz=True)
    write(tmp_path / "t10k-labels-idx1-ubyte.gz", idx_bytes(y, 0x08), gz=True)
    images, labels = load_fashion_mnist("test", data_dir=tmp_path)
    np.testing.assert_array_equal(images[..., 0], x)
    np.testing.assert_array_equal(labels, y.astype(np.int32))
    with pytest.raises(FileNotFoundError, match=r"train-images-idx3-ubyte.gz.*dataset-fashion-mnist"):
        load_fashion_mnist("train", data_dir=tmp_path)
    with pytest.raises(ValueError, match="unknown Fashion-MNIST split 'validation'"):
        load_fashion_mnist("validation")
    write(tmp_path / "t10k-labels-idx1-ubyte.gz", idx_bytes(y[:2], 0x08), gz=True)
    with pytest.raises(podlet.PodletError, match=r"expected 3 labels"):
        load_fashion_mnist("test", data_dir=tmp_path)
