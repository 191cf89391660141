"""CRC32C, TFRecord framing, tf.train.Example wire format and JPEG codec of
podlet._core, against independent oracles (tests/formats_oracle.py: pure-Python CRC and
framing, the protobuf runtime with example.proto's schema; Pillow for JPEG)."""
import io
import struct

import numpy as np
import pytest
from PIL import Image

import podlet
from podlet import _core

import formats_oracle as orc


# --- CRC32C -------------------------------------------------------------------------
@pytest.mark.parametrize("data,crc", [
    (b"123456789", 0xE3069283),                 # the CRC catalogue's check value
    (b"", 0),
    (bytes(32), 0x8A9136AA),                    # RFC 3720 B.4 test vectors
    (b"\xff" * 32, 0x62A8AB43),
    (bytes(range(32)), 0x46DD794E),
    (bytes(range(31, -1, -1)), 0x113FDB5C),
])
def test_crc32c_known_vectors(data, crc):
    assert _core.crc32c(data) == crc
    assert orc.crc32c(data) == crc


def test_crc32c_matches_oracle_all_lengths_and_continuation():
    rng = np.random.default_rng(0)
    blob = rng.integers(0, 256, 300, dtype=np.uint8).tobytes()
    for n in range(0, 300, 7):  # every alignment and tail length of the 8-byte loop
        assert _core.crc32c(blob[:n]) == orc.crc32c(blob[:n]), n
    assert _core.crc32c(blob[100:], _core.crc32c(blob[:100])) == _core.crc32c(blob)


def test_masked_crc():
    for crc in (0, 1, 0xE3069283, 0xFFFFFFFF, 0x12345678):
        m = _core.mask_crc(crc)
        assert m == orc.mask(crc)
        assert _core.unmask_crc(m) == crc
    # The masked CRC of an empty TFRecord's length field, as TensorFlow writes it.
    assert _core.mask_crc(_core.crc32c(bytes(8))) == orc.mask(orc.crc32c(bytes(8)))


# --- TFRecord framing ---------------------------------------------------------------
def test_frame_matches_oracle_and_parses_back(tmp_path):
    records = [b"", b"x", b"hello world" * 50, bytes(range(256))]
    blob = b"".join(_core.tfrecord_frame(r) for r in records)
    assert blob == b"".join(orc.frame(r) for r in records)
    assert _core.tfrecord_parse(blob) == records
    assert orc.read_records(blob) == records
    path = str(tmp_path / "x.tfrecord")
    _core.tfrecord_write(path, records)
    assert open(path, "rb").read() == blob
    assert _core.tfrecord_read(path) == records


def _corrupt_cases(blob, second):
    """(description, bytes, expected message part): one flip in each field of record 1."""
    b = bytearray(blob)
    yield "data byte", (lambda x: x.__setitem__(second + 12 + 3, x[second + 12 + 3] ^ 0x01)), "record 1 (at byte %d): data CRC mismatch" % second
    yield "length byte", (lambda x: x.__setitem__(second, x[second] ^ 0x40)), "record 1 (at byte %d): length CRC mismatch" % second
    yield "length crc", (lambda x: x.__setitem__(second + 9, x[second + 9] ^ 0x01)), "record 1 (at byte %d): length CRC mismatch" % second
    yield "data crc", (lambda x: x.__setitem__(len(x) - 1, x[len(x) - 1] ^ 0x80)), "record 1 (at byte %d): data CRC mismatch" % second
    del b


@pytest.mark.parametrize("case", range(4))
def test_corrupt_framing_named(tmp_path, case):
    records = [b"first record", b"second record, a little longer"]
    blob = b"".join(orc.frame(r) for r in records)
    second = len(orc.frame(records[0]))
    desc, mutate, msg = list(_corrupt_cases(blob, second))[case]
    bad = bytearray(blob)
    mutate(bad)
    path = str(tmp_path / "bad.tfrecord")
    open(path, "wb").write(bytes(bad))
    with pytest.raises(podlet.PodletError) as e:
        _core.tfrecord_read(path)
    assert f"TFRecord file '{path}'" in str(e.value) and msg in str(e.value), (desc, str(e.value))
    with pytest.raises(podlet.PodletError, match="record 1"):
        _core.tfrecord_parse(bytes(bad), "mem")


@pytest.mark.parametrize("cut", [1, 4, 13, 30])
def test_truncated_named(tmp_path, cut):
    blob = orc.frame(b"a" * 20) + orc.frame(b"b" * 20)
    path = str(tmp_path / "t.tfrecord")
    open(path, "wb").write(blob[:-cut])
    with pytest.raises(podlet.PodletError, match=r"record 1 \(at byte 36\): truncated"):
        _core.tfrecord_read(path)


def test_missing_file_named(tmp_path):
    with pytest.raises(podlet.PodletError, match="nope.tfrecord.*cannot open"):
        _core.tfrecord_read(str(tmp_path / "nope.tfrecord"))


# --- tf.train.Example ---------------------------------------------------------------
def varint(v):
    v &= (1 << 64) - 1
    out = b""
    while v >= 0x80:
        out += bytes([v & 0x7F | 0x80])
        v >>= 7
    return out + bytes([v])


def ld(field, payload):  # length-delimited field
    return varint(field << 3 | 2) + varint(len(payload)) + payload


def entry(key, feature):
    return ld(1, ld(1, key.encode()) + ld(2, feature))


def test_example_hand_built_wire_bytes():
    ints = [0, 1, -1, 300, 2**63 - 1, -2**63]
    unpacked_ints = b"".join(varint(1 << 3 | 0) + varint(v) for v in ints)
    packed_ints = ld(1, b"".join(varint(v) for v in ints))
    floats = [1.5, -0.0, -2.0**35 - 2.0**12, float("inf")]  # float32-exact
    unpacked_floats = b"".join(varint(1 << 3 | 5) + struct.pack("<f", f) for f in floats)
    packed_floats = ld(1, struct.pack("<4f", *floats))
    bytes_list = ld(1, b"") + ld(1, b"\x00\xffjpeg")
    features = (entry("i_unpacked", ld(3, unpacked_ints)) + entry("i_packed", ld(3, packed_ints)) +
                entry("f_unpacked", ld(2, unpacked_floats)) + entry("f_packed", ld(2, packed_floats)) +
                entry("b", ld(1, bytes_list)) + entry("empty", b""))
    # An unknown field in Example and in Features (fixed64, fixed32, varint) is skipped.
    unknown = varint(7 << 3 | 1) + bytes(8) + varint(8 << 3 | 5) + bytes(4) + varint(9 << 3 | 0) + varint(5)
    wire = ld(1, features + unknown) + unknown
    got = _core.example_parse(wire)
    assert got["i_unpacked"] == ("int64_list", ints)
    assert got["i_packed"] == ("int64_list", ints)
    assert got["f_unpacked"] == ("float_list", floats)
    assert got["f_packed"] == ("float_list", floats)
    assert struct.pack("<4f", *got["f_packed"][1]) == struct.pack("<4f", *floats)  # -0.0 keeps its sign
    assert got["b"] == ("bytes_list", [b"", b"\x00\xffjpeg"])
    assert got["empty"] == ("none", [])
    # The protobuf runtime reads the same bytes the same way.
    ref = orc.example_dict(wire)
    for k in ("i_unpacked", "i_packed", "f_unpacked", "f_packed", "b"):
        assert ref[k][1] == got[k][1], k


def test_example_protobuf_semantics():
    # Repeated key: last wins. Same list twice: merged. Different oneof member: replaces.
    wire = ld(1, entry("k", ld(3, ld(1, varint(1)))) + entry("k", ld(3, ld(1, varint(2)))) +
              entry("m", ld(3, ld(1, varint(1))) + ld(3, ld(1, varint(2)))) +
              entry("o", ld(3, ld(1, varint(9))) + ld(1, ld(1, b"z"))))
    got = _core.example_parse(wire)
    assert got["k"] == ("int64_list", [2])
    assert got["m"] == ("int64_list", [1, 2])
    assert got["o"] == ("bytes_list", [b"z"])
    assert orc.example_dict(wire) == got


def test_example_serialize_matches_protobuf():
    feats = {"image": ("bytes_list", [b"\xff\xd8\xff" + bytes(range(200))]),
             "label": ("int64_list", [3]), "neg": ("int64_list", [-5, 0, 2**40]),
             "f": ("float_list", [0.5, -2.0]), "id": ("bytes_list", ["Mass-Training_P_00001".encode()])}
    ours = _core.example_serialize(feats)
    assert orc.example_dict(ours) == feats
    assert _core.example_parse(orc.example_bytes(feats)) == feats
    # Deterministic and canonical: protobuf's deterministic serialisation of the same
    # message (sorted map keys, packed lists) is byte-identical.
    ex = orc.PB["Example"]()
    ex.ParseFromString(ours)
    assert ex.SerializeToString(deterministic=True) == ours


@pytest.mark.parametrize("wire,msg", [
    (ld(1, entry("k", ld(3, ld(1, b"\x80")))), "varint runs past the end"),
    (b"\x0a\x05ab", "runs past the end of the message"),
    (varint(1 << 3 | 3), "groups"),
    (varint(1 << 3 | 7), "invalid wire type 7"),
    (b"\x00", "invalid field number 0"),
    (ld(1, entry("k", ld(2, ld(1, b"abc")))), "not a multiple of 4"),
    (ld(1, entry("k", ld(3, varint(1 << 3 | 5) + bytes(4)))), "Int64List.value has wire type 5"),
    (ld(1, entry("k", ld(3, ld(1, b"\xff" * 10 + b"\x01")))), "varint"),
])
def test_example_malformed_named(wire, msg):
    with pytest.raises(podlet.PodletError) as e:
        _core.example_parse(wire, "shard-7 record 3")
    assert str(e.value).startswith("shard-7 record 3: malformed tf.train.Example") and msg in str(e.value), str(e.value)


# --- JPEG ---------------------------------------------------------------------------
def smooth_image(rng, h, w, c):
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([128 + 60 * np.sin(xx / (4 + k) + rng.uniform(0, 6)) + 40 * np.cos(yy / (3 + k))
                     for k in range(c)], -1)
    return np.clip(base + rng.normal(0, 3, base.shape), 0, 255).astype(np.uint8)


def pil_decode(data, mode=None):
    im = Image.open(io.BytesIO(data))
    if mode:
        im = im.convert(mode)
    a = np.asarray(im)
    return a[..., None] if a.ndim == 2 else a


@pytest.mark.parametrize("c", [1, 3])
def test_jpeg_encode_decode_vs_pillow(c):
    rng = np.random.default_rng(c)
    for _ in range(5):
        img = smooth_image(rng, 37, 53, c)
        data = _core.jpeg_encode(img, 95)
        ours = _core.jpeg_decode(data)
        assert ours.shape == img.shape and ours.dtype == np.uint8
        np.testing.assert_array_equal(ours, pil_decode(data))     # same decoder result as Pillow
        err = np.abs(ours.astype(int) - img)
        assert err.mean() < (2.0 if c == 1 else 4.0) and err.max() <= (12 if c == 1 else 32)
        # Pillow's encoder output decodes identically with podlet.
        buf = io.BytesIO()
        Image.fromarray(img[..., 0] if c == 1 else img).save(buf, "JPEG", quality=90)
        np.testing.assert_array_equal(_core.jpeg_decode(buf.getvalue()), pil_decode(buf.getvalue()))


def test_jpeg_channel_conversion():
    rng = np.random.default_rng(5)
    rgb = _core.jpeg_encode(smooth_image(rng, 16, 24, 3), 90)
    gray = _core.jpeg_encode(smooth_image(rng, 16, 24, 1), 90)
    assert _core.jpeg_decode(rgb, 1).shape == (16, 24, 1)
    assert _core.jpeg_decode(gray, 3).shape == (16, 24, 3)
    g3 = _core.jpeg_decode(gray, 3)
    np.testing.assert_array_equal(g3[..., 0], g3[..., 2])
    np.testing.assert_array_equal(_core.jpeg_decode(gray, 3), pil_decode(gray, "RGB"))


def test_jpeg_encode_deterministic():
    img = smooth_image(np.random.default_rng(1), 20, 20, 1)
    assert _core.jpeg_encode(img, 95) == _core.jpeg_encode(img.copy(), 95)
    assert _core.jpeg_encode(img, 95) != _core.jpeg_encode(img, 50)


@pytest.mark.parametrize("mutate,msg", [
    (lambda d: d[: len(d) // 2], "undecodable JPEG"),
    (lambda d: d[:2] + b"\x00" * 30, "not a JPEG image"),
    (lambda d: b"\x89PNG\r\n\x1a\n" + d, "it is a PNG"),
    (lambda d: d[:20] + bytes(200) + d[220:], "undecodable JPEG"),
    (lambda d: b"", "not a JPEG image"),
])
def test_jpeg_corrupt_named(mutate, msg):
    data = _core.jpeg_encode(smooth_image(np.random.default_rng(2), 32, 32, 1), 95)
    with pytest.raises(podlet.PodletError) as e:
        _core.jpeg_decode(mutate(data), 0, "file 'x' record 4")
    assert str(e.value).startswith("file 'x' record 4:") and msg in str(e.value), str(e.value)


def test_jpeg_bad_arguments():
    with pytest.raises(podlet.PodletError, match="quality 0 out of range"):
        _core.jpeg_encode(np.zeros((4, 4), np.uint8), 0)
    with pytest.raises(podlet.PodletError, match="2 channels"):
        _core.jpeg_encode(np.zeros((4, 4, 2), np.uint8), 90)
    with pytest.raises(podlet.PodletError, match="0x4"):
        _core.jpeg_encode(np.zeros((0, 4, 1), np.uint8), 90)


def test_jpeg_huge_header_rejected_before_allocating():
    data = bytearray(_core.jpeg_encode(smooth_image(np.random.default_rng(3), 16, 16, 1), 90))
    sof = data.index(b"\xff\xc0")
    data[sof + 5:sof + 9] = b"\xea\x60\xea\x60"  # height, width = 60000 (libjpeg allows 65500)
    with pytest.raises(podlet.PodletError, match="JPEG of 60000x60000 pixels is too large"):
        _core.jpeg_decode(bytes(data), 0, "huge")
