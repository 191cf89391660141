"""Regenerates the seed corpora of tfrecord_fuzz.cc and jpeg_fuzz.cc (fuzz/corpus/
{tfrecord,jpeg}/): small valid inputs covering each feature of the formats. Needs
Pillow; run from the repo root with PYTHONPATH=python:tests."""
import io
import os

import numpy as np
from PIL import Image

import formats_oracle as orc

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def jpeg(img, **kw):
    buf = io.BytesIO()
    (img if isinstance(img, Image.Image) else Image.fromarray(img)).save(buf, "JPEG", **kw)
    return buf.getvalue()


def write(sub, name, data):
    os.makedirs(os.path.join(ROOT, sub), exist_ok=True)
    with open(os.path.join(ROOT, sub, name), "wb") as f:
        f.write(data)


rng = np.random.default_rng(0)
gray = rng.integers(0, 256, (8, 8), dtype=np.uint8)
rgb = rng.integers(0, 256, (8, 16, 3), dtype=np.uint8)
jpegs = {
    "gray_q95.jpg": jpeg(gray, quality=95),
    "rgb_420_q50.jpg": jpeg(rgb, quality=50),
    "rgb_444.jpg": jpeg(rgb, quality=80, subsampling=0),
    "rgb_progressive.jpg": jpeg(rgb, quality=70, progressive=True),
    "gray_optimized.jpg": jpeg(np.tile(gray, (2, 3)), quality=60, optimize=True),
    "cmyk.jpg": jpeg(Image.fromarray(rgb).convert("CMYK"), quality=75),
    "odd_17x9.jpg": jpeg(rng.integers(0, 256, (9, 17, 3), dtype=np.uint8), quality=85),
}
# jpeg_fuzz.cc reads the channel choice from the first byte.
for i, (name, data) in enumerate(jpegs.items()):
    write("jpeg", name, bytes([i % 3]) + data)

ex_gray = orc.example_bytes({"image": ("bytes_list", [jpegs["gray_q95.jpg"]]), "label": ("int64_list", [2]),
                             "id": ("bytes_list", [b"Calc-Training_P_00005"])})
ex_rgb = orc.example_bytes({"image": ("bytes_list", [jpegs["rgb_420_q50.jpg"]]), "label": ("int64_list", [4]),
                            "id": ("bytes_list", [b"x"])})
ex_mixed = orc.example_bytes({"f": ("float_list", [1.5, -2.0]), "i": ("int64_list", [-1, 0, 2**40]),
                              "b": ("bytes_list", [b"", b"ab"])})
write("tfrecord", "two_records", b"\0" + orc.frame(ex_gray) + orc.frame(ex_rgb))
write("tfrecord", "empty_record", b"\0" + orc.frame(b""))
write("tfrecord", "mixed_features", b"\0" + orc.frame(ex_mixed))
write("tfrecord", "raw_example_gray", b"\1" + ex_gray)
write("tfrecord", "raw_example_mixed", b"\1" + ex_mixed)
# Unpacked int64 and float lists (field 1 repeated, wire types 0 and 5).
def ld(field, payload):
    assert len(payload) < 128
    return bytes([field << 3 | 2, len(payload)]) + payload


unpacked_ints = ld(3, b"\x08\x01\x08\x02\x08\x7f")                    # Int64List, one tag per value
unpacked_floats = ld(2, b"\x0d\x00\x00\xc0\x3f\x0d\x00\x00\x80\xbf")  # FloatList 1.5, -1.0
raw = ld(1, ld(1, ld(1, b"i") + ld(2, unpacked_ints)) + ld(1, ld(1, b"f") + ld(2, unpacked_floats)))
assert orc.example_dict(raw) == {"i": ("int64_list", [1, 2, 127]), "f": ("float_list", [1.5, -1.0])}
write("tfrecord", "raw_example_unpacked", b"\1" + raw)
