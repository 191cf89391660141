"""dtype names, NumPy dtypes and JAX-style promotion (x64 off by default, as in JAX)."""
import numpy as np
import ml_dtypes

bfloat16 = np.dtype(ml_dtypes.bfloat16)
float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
int32 = np.dtype(np.int32)
uint32 = np.dtype(np.uint32)
uint8 = np.dtype(np.uint8)
bool_ = np.dtype(np.bool_)

SUPPORTED = {d.name: d for d in (bfloat16, float32, float64, int32, uint32, uint8, bool_)}

_x64 = [False]


def enable_x64(on=True):
    _x64[0] = bool(on)


def x64_enabled():
    return _x64[0]


def dtype(x):
    """np.dtype of a dtype-like (np.float32, 'bfloat16', jnp.float32, an array ...)."""
    if isinstance(x, np.dtype):
        d = x
    elif hasattr(x, "dtype") and not isinstance(x, type):
        d = np.dtype(x.dtype)
    elif x is float:
        d = float32
    elif x is int:
        d = int32
    elif x is bool:
        d = bool_
    else:
        d = np.dtype(x)
    return d


def canonicalize(d):
    """64-bit types become 32-bit unless x64 is enabled (JAX's default)."""
    d = dtype(d)
    if d.name in SUPPORTED:
        if d == float64 and not _x64[0]:
            return float32
        return d
    if d.kind == "f":
        return float64 if (_x64[0] and d.itemsize == 8) else float32
    if d.kind == "i":
        return int32
    if d.kind == "u":
        return uint32 if d.itemsize >= 4 else uint8
    if d.kind == "b":
        return bool_
    from .errors import DTypeError
    raise DTypeError(f"unsupported dtype {d}; podlet supports {', '.join(SUPPORTED)}")


def is_float(d):
    d = dtype(d)
    return d == bfloat16 or d.kind == "f"


def is_int(d):
    return dtype(d).kind in "iu"


_RANK = {"bool": 0, "uint8": 1, "uint32": 2, "int32": 2, "bfloat16": 4, "float32": 5, "float64": 6}


def promote(a, b, a_weak=False, b_weak=False):
    """Result dtype of a binary op. Weak (Python scalar) operands defer to the other's
    kind: bf16 * 2.0 stays bf16, int32 * 2.5 becomes float32."""
    a, b = dtype(a), dtype(b)
    if a == b:
        return a
    if a_weak and not b_weak:
        if is_float(a) and not is_float(b):
            return float32
        return b
    if b_weak and not a_weak:
        if is_float(b) and not is_float(a):
            return float32
        return a
    if {a.name, b.name} == {"uint32", "int32"}:
        return int32
    return a if _RANK[a.name] >= _RANK[b.name] else b
