"""The small remainder of jax.numpy's namespace: bit packing, NumPy I/O and printing
helpers (NumPy's own, as in JAX; podlet arrays convert through __array__), and the
scalar type aliases whose canonical podlet dtype is the one JAX picks with x64 off."""
import numpy as _np

from .. import lax
from .. import numpy as jnp
from . import dtypes as _dtypes

__all__ = [
    "packbits", "unpackbits", "load", "save", "savez", "frombuffer", "fromstring", "from_dlpack",
    "printoptions", "get_printoptions", "set_printoptions", "array_repr", "array_str", "ComplexWarning",
    "bool", "int64", "uint64", "int_", "uint", "float_", "double", "single", "generic", "flexible", "character",
    "object_",
]

# Scalar types: NumPy's, as podlet.numpy.float32 is. Arrays made with the 64-bit ones are
# 32-bit unless x64 is enabled, exactly as jnp.int64 / jnp.float64 with x64 off.
bool = _np.bool_  # noqa: A001 (jnp.bool)
int64 = _np.int64
uint64 = _np.uint64
int_ = _np.int64
uint = _np.uint64
float_ = _np.float64
double = _np.float64
single = _np.float32
generic = _np.generic
flexible = _np.flexible
character = _np.character
object_ = _np.object_
ComplexWarning = _np.exceptions.ComplexWarning

printoptions = _np.printoptions
get_printoptions = _np.get_printoptions
set_printoptions = _np.set_printoptions
array_repr = _np.array_repr
array_str = _np.array_str
save = _np.save
savez = _np.savez


def load(file, *args, **kwargs):
    """np.load, then a podlet array (bfloat16 data NumPy saved as void16 comes back as
    bfloat16, as jnp.load)."""
    out = _np.load(file, *args, **kwargs)
    if isinstance(out, _np.ndarray):
        if out.dtype == "V2":
            out = out.view(_dtypes.bfloat16)
        try:
            out = jnp.asarray(out)
        except (TypeError, ValueError):
            pass
    return out


def frombuffer(buffer, dtype=float, count=-1, offset=0):
    return jnp.asarray(_np.frombuffer(buffer=buffer, dtype=dtype, count=count, offset=offset))


def fromstring(string, dtype=float, count=-1, *, sep):
    return jnp.asarray(_np.fromstring(string=string, dtype=dtype, count=count, sep=sep))


def from_dlpack(x, /, *, device=None, copy=None):
    """An array from any DLPack exporter on the CPU (through NumPy's from_dlpack)."""
    if device is not None:
        raise ValueError("podlet has one CPU device; from_dlpack takes no device")
    return jnp.array(_np.from_dlpack(x), copy=True) if copy else jnp.asarray(_np.from_dlpack(x))


def packbits(a, axis=None, bitorder="big"):
    """Bits of a != 0 packed into uint8 along axis (the last byte zero-padded)."""
    arr = jnp.asarray(a)
    if arr.dtype.kind not in "iub":
        raise TypeError(f"Expected an input array of integer or boolean data type; got {arr.dtype}")
    if bitorder not in ("little", "big"):
        raise ValueError(f"'order' must be either 'little' or 'big'; got {bitorder!r}")
    arr = jnp.astype(jnp.not_equal(arr, 0), _np.uint8)
    bits = _np.arange(8, dtype=_np.uint8)
    if bitorder == "big":
        bits = bits[::-1]
    if axis is None:
        arr, axis = jnp.ravel(arr), 0
    arr = jnp.swapaxes(arr, axis, -1)
    rem = arr.shape[-1] % 8
    if rem:
        arr = lax.pad(arr, _np.uint8(0), (arr.ndim - 1) * [(0, 0, 0)] + [(0, 8 - rem, 0)])
    arr = jnp.reshape(arr, tuple(arr.shape[:-1]) + (arr.shape[-1] // 8, 8))
    packed = jnp.sum(jnp.left_shift(arr, jnp.asarray(bits)), axis=-1, dtype=_np.uint32)
    return jnp.swapaxes(jnp.astype(packed, _np.uint8), axis, -1)


def unpackbits(a, axis=None, count=None, bitorder="big"):
    arr = jnp.asarray(a)
    if arr.dtype != _np.uint8:
        raise TypeError(f"Expected an input array of unsigned byte data type; got {arr.dtype}")
    if bitorder not in ("little", "big"):
        raise ValueError(f"'order' must be either 'little' or 'big'; got {bitorder!r}")
    bits = (_np.uint8(1) << _np.arange(8, dtype=_np.uint8)).astype(_np.uint8)
    if bitorder == "big":
        bits = bits[::-1]
    if axis is None:
        arr, axis = jnp.ravel(arr), 0
    arr = jnp.swapaxes(arr, axis, -1)
    unpacked = jnp.astype(jnp.greater(jnp.bitwise_and(jnp.expand_dims(arr, -1), jnp.asarray(bits)), 0), _np.uint8)
    unpacked = jnp.reshape(unpacked, tuple(unpacked.shape[:-2]) + (-1,))
    if count is not None:
        if count > unpacked.shape[-1]:
            unpacked = jnp.pad(unpacked, [(0, 0)] * (unpacked.ndim - 1) + [(0, count - unpacked.shape[-1])])
        else:
            unpacked = unpacked[..., :count]
    return jnp.swapaxes(unpacked, axis, -1)
