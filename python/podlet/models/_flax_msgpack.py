"""Decodes the msgpack bytes of ``flax.serialization.to_bytes`` / ``msgpack_serialize``.

A small decoder of the msgpack wire format (https://github.com/msgpack/msgpack/blob/master/spec.md)
plus flax's extension types (1: ndarray, 2: complex, 3: NumPy scalar, each an inner
msgpack ``[shape, dtype name, raw bytes]``) and its chunked form for arrays over 1 GiB,
so reading a Flax checkpoint needs neither flax nor the msgpack package.
"""
import struct

import numpy as np

from .._src import dtypes
from .._src.errors import PodletError

_EXT_NDARRAY, _EXT_COMPLEX, _EXT_NPSCALAR = 1, 2, 3


class _Reader:
    def __init__(self, data, where):
        self.b, self.i, self.where = memoryview(data), 0, where

    def take(self, n):
        if self.i + n > len(self.b):
            raise PodletError(f"{self.where}: truncated msgpack data (wanted {n} bytes at offset {self.i}, "
                              f"{len(self.b)} in total)")
        out = self.b[self.i:self.i + n]
        self.i += n
        return out

    def unpack(self, fmt):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def obj(self):
        t = self.take(1)[0]
        if t <= 0x7F:
            return t
        if t >= 0xE0:
            return t - 0x100
        if 0x80 <= t <= 0x8F:
            return self.map(t & 0x0F)
        if 0x90 <= t <= 0x9F:
            return [self.obj() for _ in range(t & 0x0F)]
        if 0xA0 <= t <= 0xBF:
            return self.str(t & 0x1F)
        simple = {0xC0: None, 0xC2: False, 0xC3: True}
        if t in simple:
            return simple[t]
        if t in (0xC4, 0xC5, 0xC6):
            return bytes(self.take(self.unpack({0xC4: ">B", 0xC5: ">H", 0xC6: ">I"}[t])))
        if t in (0xC7, 0xC8, 0xC9):
            n = self.unpack({0xC7: ">B", 0xC8: ">H", 0xC9: ">I"}[t])
            return self.ext(self.unpack(">b"), n)
        if t in (0xD4, 0xD5, 0xD6, 0xD7, 0xD8):
            return self.ext(self.unpack(">b"), {0xD4: 1, 0xD5: 2, 0xD6: 4, 0xD7: 8, 0xD8: 16}[t])
        nums = {0xCA: ">f", 0xCB: ">d", 0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q",
                0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q"}
        if t in nums:
            return self.unpack(nums[t])
        if t in (0xD9, 0xDA, 0xDB):
            return self.str(self.unpack({0xD9: ">B", 0xDA: ">H", 0xDB: ">I"}[t]))
        if t in (0xDC, 0xDD):
            return [self.obj() for _ in range(self.unpack(">H" if t == 0xDC else ">I"))]
        if t in (0xDE, 0xDF):
            return self.map(self.unpack(">H" if t == 0xDE else ">I"))
        raise PodletError(f"{self.where}: invalid msgpack type byte 0x{t:02x} at offset {self.i - 1}")

    def str(self, n):
        return bytes(self.take(n)).decode("utf-8")

    def map(self, n):
        out = {}
        for _ in range(n):
            k = self.obj()
            out[k] = self.obj()
        return out

    def ext(self, code, n):
        data = bytes(self.take(n))
        if code == _EXT_COMPLEX:
            re, im = _Reader(data, self.where).obj()
            return complex(re, im)
        if code in (_EXT_NDARRAY, _EXT_NPSCALAR):
            shape, name, buf = _Reader(data, self.where).obj()
            name = name.decode() if isinstance(name, bytes) else name
            try:
                dt = dtypes.bfloat16 if name == "bfloat16" else np.dtype(name)
            except TypeError:
                raise PodletError(f"{self.where}: unknown array dtype {name!r} in the msgpack data") from None
            arr = np.frombuffer(buf, dtype=dt).reshape(shape)
            return arr[()] if code == _EXT_NPSCALAR else arr
        raise PodletError(f"{self.where}: unknown msgpack extension type {code}")


def _unchunk(d):
    """Flax splits arrays over 1 GiB into {'__msgpack_chunked_array__', 'shape', 'chunks'}."""
    if isinstance(d, dict):
        if "__msgpack_chunked_array__" in d:
            shape = tuple(d["shape"][str(i)] for i in range(len(d["shape"])))
            chunks = [d["chunks"][str(i)] for i in range(len(d["chunks"]))]
            return np.concatenate(chunks).reshape(shape)
        return {k: _unchunk(v) for k, v in d.items()}
    return d


def restore(data: bytes, where="<bytes>"):
    """The pytree (nested dicts, NumPy arrays and scalars) encoded in `data`."""
    r = _Reader(data, where)
    out = r.obj()
    if r.i != len(r.b):
        raise PodletError(f"{where}: {len(r.b) - r.i} trailing bytes after the msgpack object")
    return _unchunk(out)
