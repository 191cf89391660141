"""Reads a PyTorch ``torch.save`` file (the zip format of torch >= 1.6) without torch.

A .pth is a zip holding ``<name>/data.pkl`` (a pickle whose tensors refer to storages by
persistent id) and one raw little-endian file per storage, ``<name>/data/<key>``. The
unpickler below allows only the handful of globals a state_dict uses, so loading an
untrusted file cannot run code (what ``torch.load(weights_only=True)`` guarantees).
"""
import collections
import pickle
import zipfile

import numpy as np

from .._src import dtypes
from .._src.errors import PodletError

_STORAGE_DTYPES = {
    "FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
    "BFloat16Storage": dtypes.bfloat16, "LongStorage": np.int64, "IntStorage": np.int32,
    "ShortStorage": np.int16, "CharStorage": np.int8, "ByteStorage": np.uint8, "BoolStorage": np.bool_,
}


class _StorageType:
    def __init__(self, name):
        self.name = name
        self.dtype = np.dtype(_STORAGE_DTYPES[name])


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False, backward_hooks=None,
                       metadata=None):
    size, stride = tuple(size), tuple(stride)
    item = storage.dtype.itemsize
    if not size:
        return storage[storage_offset].copy().reshape(())
    view = np.lib.stride_tricks.as_strided(storage[storage_offset:], shape=size,
                                           strides=tuple(s * item for s in stride))
    return np.ascontiguousarray(view).copy()


def _rebuild_parameter(data, requires_grad=False, backward_hooks=None):
    return data


def _rebuild_parameter_with_state(data, requires_grad=False, backward_hooks=None, state=None):
    return data


_GLOBALS = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter_with_state,
}


class _Unpickler(pickle.Unpickler):
    def __init__(self, f, zf, prefix, path):
        super().__init__(f)
        self._zf, self._prefix, self._path = zf, prefix, path
        self._storages = {}

    def find_class(self, module, name):
        if module == "torch" and name in _STORAGE_DTYPES:
            return _StorageType(name)
        try:
            return _GLOBALS[(module, name)]
        except KeyError:
            raise PodletError(f"{self._path}: unsupported object {module}.{name} in the pickle; "
                              "expected a state_dict of tensors (torch.save(model.state_dict(), path))") from None

    def persistent_load(self, pid):
        # ('storage', storage_type, key, location, numel)
        if not (isinstance(pid, tuple) and pid and pid[0] == "storage"):
            raise PodletError(f"{self._path}: unsupported persistent id {pid!r}")
        stype, key = pid[1], pid[2]
        if not isinstance(stype, _StorageType):
            raise PodletError(f"{self._path}: unsupported storage type {stype!r}")
        if key not in self._storages:
            name = f"{self._prefix}data/{key}"
            try:
                raw = self._zf.read(name)
            except KeyError:
                raise PodletError(f"{self._path}: storage file {name!r} is missing from the archive") from None
            self._storages[key] = np.frombuffer(raw, dtype=stype.dtype.newbyteorder("<")).astype(stype.dtype)
        return self._storages[key]


def load(path):
    """The object saved at `path` (a dict of NumPy arrays for a state_dict)."""
    path = str(path)
    if not zipfile.is_zipfile(path):
        raise PodletError(f"{path}: not a zip-format torch.save file (expected a .pth written by torch >= 1.6; "
                          "re-save it with torch.save(state_dict, path))")
    with zipfile.ZipFile(path) as zf:
        pkl = [n for n in zf.namelist() if n.endswith("data.pkl")]
        if len(pkl) != 1:
            raise PodletError(f"{path}: expected exactly one data.pkl in the archive, found {pkl}")
        prefix = pkl[0][:-len("data.pkl")]
        order = zf.read(prefix + "byteorder").decode() if prefix + "byteorder" in zf.namelist() else "little"
        if order != "little":
            raise PodletError(f"{path}: byteorder {order!r} is not supported (expected 'little')")
        with zf.open(pkl[0]) as f:
            return _Unpickler(f, zf, prefix, path).load()
