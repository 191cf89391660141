"""The subset of msgpack (https://github.com/msgpack/msgpack/blob/master/spec.md) that Flax's
checkpoint format uses, in pure Python, so podlet needs no ``msgpack`` package.

``packb`` writes the same bytes as ``msgpack.packb(obj, use_bin_type=True)`` (and, with
``strict_types=True``, as msgpack's ``strict_types``: a subclass of int/float/dict/... is
handed to ``default``): the smallest integer encoding, float64 for Python floats, str8 for
short strings, bin for bytes, ext types through ``ExtType``. ``unpackb`` reads every type
byte of the spec (float32 included) and hands extension payloads to ``ext_hook``.
"""
import struct
from typing import NamedTuple

__all__ = ["ExtType", "packb", "unpackb", "UnpackError"]


class ExtType(NamedTuple):
    """A msgpack extension: an application type code (0..127) and its raw payload."""
    code: int
    data: bytes


class UnpackError(ValueError):
    """The bytes are not (exactly one) valid msgpack object."""


def _pack_len(out, n, fix_base, fix_max, codes, what):
    # codes: type bytes for the 8-, 16- and 32-bit length forms (None where absent).
    if fix_base is not None and n <= fix_max:
        out.append(fix_base | n)
    elif codes[0] is not None and n < 1 << 8:
        out += struct.pack(">BB", codes[0], n)
    elif n < 1 << 16:
        out += struct.pack(">BH", codes[1], n)
    elif n < 1 << 32:
        out += struct.pack(">BI", codes[2], n)
    else:
        raise ValueError(f"{what} is too large for msgpack ({n} >= 2**32)")


def _pack_int(out, x):
    if 0 <= x < 0x80:
        out.append(x)
    elif -32 <= x < 0:
        out.append(x + 0x100)
    elif x >= 0:
        for lim, fmt in ((1 << 8, ">BB"), (1 << 16, ">BH"), (1 << 32, ">BI"), (1 << 64, ">BQ")):
            if x < lim:
                out += struct.pack(fmt, {">BB": 0xCC, ">BH": 0xCD, ">BI": 0xCE, ">BQ": 0xCF}[fmt], x)
                return
        raise OverflowError(f"int {x} is too large for msgpack")
    else:
        for lim, fmt, code in ((1 << 7, ">Bb", 0xD0), (1 << 15, ">Bh", 0xD1), (1 << 31, ">Bi", 0xD2),
                               (1 << 63, ">Bq", 0xD3)):
            if x >= -lim:
                out += struct.pack(fmt, code, x)
                return
        raise OverflowError(f"int {x} is too small for msgpack")


def _pack(out, obj, default, strict, depth):
    if depth > 512:
        raise ValueError("msgpack: object nested too deeply (recursive?)")
    is_ = (lambda t: type(obj) is t) if strict else (lambda t: isinstance(obj, t))
    if obj is None:
        out.append(0xC0)
    elif is_(bool):
        out.append(0xC3 if obj else 0xC2)
    elif is_(int):
        _pack_int(out, int(obj))
    elif is_(float):
        out += struct.pack(">Bd", 0xCB, obj)
    elif is_(str):
        b = obj.encode("utf-8")
        _pack_len(out, len(b), 0xA0, 31, (0xD9, 0xDA, 0xDB), "str")
        out += b
    elif is_(bytes) or is_(bytearray) or is_(memoryview):
        b = bytes(obj)
        _pack_len(out, len(b), None, -1, (0xC4, 0xC5, 0xC6), "bin")
        out += b
    elif type(obj) is ExtType:
        code, data = obj
        n = len(data)
        fixext = {1: 0xD4, 2: 0xD5, 4: 0xD6, 8: 0xD7, 16: 0xD8}
        if n in fixext:
            out.append(fixext[n])
        else:
            _pack_len(out, n, None, -1, (0xC7, 0xC8, 0xC9), "ext")
        out += struct.pack(">b", code)
        out += data
    elif is_(list) or is_(tuple):
        _pack_len(out, len(obj), 0x90, 15, (None, 0xDC, 0xDD), "array")
        for x in obj:
            _pack(out, x, default, strict, depth + 1)
    elif is_(dict):
        _pack_len(out, len(obj), 0x80, 15, (None, 0xDE, 0xDF), "map")
        for k, v in obj.items():
            _pack(out, k, default, strict, depth + 1)
            _pack(out, v, default, strict, depth + 1)
    elif default is not None:
        new = default(obj)
        if new is obj:
            raise TypeError(f"can not serialize {type(obj).__name__!r} object")
        _pack(out, new, default, strict, depth + 1)
    else:
        raise TypeError(f"can not serialize {type(obj).__name__!r} object")


def packb(obj, default=None, strict_types=False) -> bytes:
    """msgpack bytes of `obj` (``msgpack.packb(obj, use_bin_type=True, ...)``)."""
    out = bytearray()
    _pack(out, obj, default, strict_types, 0)
    return bytes(out)


class _Reader:
    def __init__(self, data, ext_hook, raw):
        self.b, self.i, self.ext_hook, self.raw = memoryview(data), 0, ext_hook, raw

    def take(self, n):
        if self.i + n > len(self.b):
            raise UnpackError(f"truncated msgpack data: wanted {n} bytes at offset {self.i}, "
                              f"{len(self.b)} in total")
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
        if t <= 0x8F:
            return self.map(t & 0x0F)
        if t <= 0x9F:
            return [self.obj() for _ in range(t & 0x0F)]
        if t <= 0xBF:
            return self.str(t & 0x1F)
        if t in _SIMPLE:
            return _SIMPLE[t]
        if t in (0xC4, 0xC5, 0xC6):
            return bytes(self.take(self.unpack(_LEN[t])))
        if t in (0xC7, 0xC8, 0xC9):
            n = self.unpack(_LEN[t])
            return self.ext(self.unpack(">b"), n)
        if t in _FIXEXT:
            return self.ext(self.unpack(">b"), _FIXEXT[t])
        if t in _NUMS:
            return self.unpack(_NUMS[t])
        if t in (0xD9, 0xDA, 0xDB):
            return self.str(self.unpack(_LEN[t]))
        if t in (0xDC, 0xDD):
            return [self.obj() for _ in range(self.unpack(_LEN[t]))]
        if t in (0xDE, 0xDF):
            return self.map(self.unpack(_LEN[t]))
        raise UnpackError(f"invalid msgpack type byte 0x{t:02x} at offset {self.i - 1}")

    def str(self, n):
        b = bytes(self.take(n))
        if self.raw:
            return b
        try:
            return b.decode("utf-8")
        except UnicodeDecodeError as e:
            raise UnpackError(f"invalid UTF-8 in a msgpack string at offset {self.i - n}: {e}") from None

    def map(self, n):
        out = {}
        for _ in range(n):
            k = self.obj()
            if isinstance(k, (list, dict)):
                raise UnpackError(f"unhashable msgpack map key of type {type(k).__name__}")
            out[k] = self.obj()
        return out

    def ext(self, code, n):
        data = bytes(self.take(n))
        return self.ext_hook(code, data) if self.ext_hook is not None else ExtType(code, data)


_SIMPLE = {0xC0: None, 0xC2: False, 0xC3: True}
_LEN = {0xC4: ">B", 0xC5: ">H", 0xC6: ">I", 0xC7: ">B", 0xC8: ">H", 0xC9: ">I", 0xD9: ">B", 0xDA: ">H",
        0xDB: ">I", 0xDC: ">H", 0xDD: ">I", 0xDE: ">H", 0xDF: ">I"}
_FIXEXT = {0xD4: 1, 0xD5: 2, 0xD6: 4, 0xD7: 8, 0xD8: 16}
_NUMS = {0xCA: ">f", 0xCB: ">d", 0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q",
         0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q"}


def unpackb(data, ext_hook=None, raw=False):
    """The object encoded in `data` (``msgpack.unpackb(data, raw=raw, strict_map_key=False)``):
    arrays come back as lists, strings as str (bytes when `raw`), bin as bytes."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"msgpack data must be bytes, got {type(data).__name__}")
    r = _Reader(data, ext_hook, raw)
    out = r.obj()
    if r.i != len(r.b):
        raise UnpackError(f"{len(r.b) - r.i} extra bytes after the msgpack object")
    return out
