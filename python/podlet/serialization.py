"""State dicts and Flax's msgpack checkpoint bytes (flax.serialization).

    state = serialization.to_state_dict(train_state)          # nested dicts of leaves
    data = serialization.to_bytes(train_state)                # == flax.serialization.to_bytes
    restored = serialization.from_bytes(train_state, data)    # the template gives the structure

The bytes are Flax's: a msgpack map of the state dict, arrays as extension type 1 (an
inner msgpack ``[shape, dtype name, C-order bytes]``), NumPy scalars as type 3, complex
as type 2, and arrays over ``MAX_CHUNK_SIZE`` bytes split into
``{'__msgpack_chunked_array__', 'shape', 'chunks'}``. A file written by Flax reads here
and one written here reads in Flax. The msgpack codec is podlet's own
(``podlet._src.msgpack``), not the ``msgpack`` package. The code follows
flax/serialization.py (Apache-2.0) function by function.

Registered types are those of Flax: dict, list, tuple, namedtuples, ``tree_util.Partial``,
``nn.FrozenDict`` and every ``podlet.struct`` dataclass (registered the first time one is
seen, where Flax registers it in the decorator). ``from_bytes`` returns array leaves as
podlet arrays (as ``podlet.numpy.asarray``) when podlet holds their dtype exactly, and as
NumPy arrays otherwise (int8, float16, complex, ...); ``msgpack_restore`` returns NumPy
leaves, as Flax does.
"""
import dataclasses
import enum
import threading
from contextlib import contextmanager
from typing import Any

import numpy as np

from . import numpy as _pnp
from . import tree_util
from ._src import dtypes as _dtypes
from ._src import msgpack as _msgpack
from ._src.core import Array as _Array
from .nn.frozen_dict import FrozenDict

__all__ = ["to_state_dict", "from_state_dict", "register_serialization_state", "is_serializable",
           "current_path", "msgpack_serialize", "msgpack_restore", "to_bytes", "from_bytes",
           "MAX_CHUNK_SIZE"]

_STATE_DICT_REGISTRY: dict[Any, Any] = {}


class _ErrorContext(threading.local):
    def __init__(self):
        self.path = []


_error_context = _ErrorContext()


@contextmanager
def _record_path(name):
    try:
        _error_context.path.append(name)
        yield
    finally:
        _error_context.path.pop()


def current_path():
    """Current state_dict path during deserialization for error messages."""
    return "/".join(_error_context.path)


class _NamedTuple:
    """Registry key standing for every namedtuple type."""


def _is_namedtuple(x):
    return isinstance(x, tuple) and hasattr(x, "_fields")


def _handlers(target):
    ty = _NamedTuple if _is_namedtuple(target) else type(target)
    if ty not in _STATE_DICT_REGISTRY and "_flax_dataclass" in getattr(ty, "__dict__", {}):
        _register_struct_dataclass(ty)
    return _STATE_DICT_REGISTRY.get(ty)


def from_state_dict(target, state: dict[str, Any], name: str = "."):
    """A copy of `target` with its state replaced by `state` (a ``to_state_dict`` result).

    Only the structure of `target` is used; its leaves are replaced by those of `state`."""
    h = _handlers(target)
    if h is None:
        return state
    with _record_path(name):
        return h[1](target, state)


def to_state_dict(target) -> dict[str, Any]:
    """The state of `target` as nested dicts with string keys (leaves unchanged)."""
    h = _handlers(target)
    if h is None:
        return target
    state_dict = h[0](target)
    if isinstance(state_dict, dict):
        for key in state_dict.keys():
            assert isinstance(key, str), "A state dict must only have string keys."
    return state_dict


def is_serializable(target):
    if not isinstance(target, type):
        target = type(target)
    if "_flax_dataclass" in getattr(target, "__dict__", {}):
        return True
    return target in _STATE_DICT_REGISTRY


def register_serialization_state(ty, ty_to_state_dict, ty_from_state_dict, override=False):
    """Registers `ty` for serialization.

    Args:
      ty: the type to register.
      ty_to_state_dict: instance of `ty` -> its state as a dict.
      ty_from_state_dict: (instance of `ty`, state dict) -> a copy with the state restored.
      override: replace a handler already registered for `ty` (else ValueError).
    """
    if ty in _STATE_DICT_REGISTRY and not override:
        raise ValueError(f'a serialization handler for "{ty.__name__}" is already registered')
    _STATE_DICT_REGISTRY[ty] = (ty_to_state_dict, ty_from_state_dict)


def _list_state_dict(xs):
    return {str(i): to_state_dict(x) for i, x in enumerate(xs)}


def _restore_list(xs, state_dict):
    if len(state_dict) != len(xs):
        raise ValueError("The size of the list and the state dict do not match,"
                         f" got {len(xs)} and {len(state_dict)} at path {current_path()}")
    return [from_state_dict(xs[i], state_dict[str(i)], name=str(i)) for i in range(len(state_dict))]


def _dict_state_dict(xs):
    str_keys = {str(k) for k in xs.keys()}
    if len(str_keys) != len(xs):
        raise ValueError(f"Dict keys do not have a unique string representation: {str_keys} vs given: {xs}")
    return {str(key): to_state_dict(value) for key, value in xs.items()}


def _restore_dict(xs, states):
    diff = set(map(str, xs.keys())).difference(states.keys())
    if diff:
        raise ValueError("The target dict keys and state dict keys do not match, target dict"
                         f" contains keys {diff} which are not present in state dict at path {current_path()}")
    return {key: from_state_dict(value, states[str(key)], name=str(key)) for key, value in xs.items()}


def _restore_frozen_dict(xs, states):
    diff = set(map(str, xs.keys())).difference(map(str, states.keys()))
    if diff:
        raise ValueError("The target dict keys and state dict keys do not match, target dict"
                         f" contains keys {diff} which are not present in state dict at path {current_path()}")
    return FrozenDict({key: from_state_dict(value, states[str(key)], name=key) for key, value in xs.items()})


def _namedtuple_state_dict(nt):
    return {key: to_state_dict(getattr(nt, key)) for key in nt._fields}


def _restore_namedtuple(xs, state_dict):
    if set(state_dict.keys()) == {"name", "fields", "values"}:  # Flax's pre-2022 namedtuple form
        state_dict = {state_dict["fields"][str(i)]: state_dict["values"][str(i)]
                      for i in range(len(state_dict["fields"]))}
    sd_keys, nt_keys = set(state_dict.keys()), set(xs._fields)
    if sd_keys != nt_keys:
        raise ValueError("The field names of the state dict and the named tuple do not match,"
                         f" got {sd_keys} and {nt_keys} at path {current_path()}")
    return type(xs)(**{k: from_state_dict(getattr(xs, k), v, name=k) for k, v in state_dict.items()})


def _register_struct_dataclass(clz):
    """What flax.struct.dataclass registers: the pytree (data) fields by name."""
    data_fields = [f.name for f in dataclasses.fields(clz) if f.metadata.get("pytree_node", True)]

    def to_sd(x):
        return {name: to_state_dict(getattr(x, name)) for name in data_fields}

    def from_sd(x, state):
        state = dict(state)
        updates = {}
        for name in data_fields:
            if name not in state:
                raise ValueError(f"Missing field {name} in state dict while restoring an instance of"
                                 f" {clz.__name__}, at path {current_path()}")
            updates[name] = from_state_dict(getattr(x, name), state.pop(name), name=name)
        if state:
            raise ValueError(f'Unknown field(s) "{",".join(state.keys())}" in state dict while restoring an'
                             f" instance of {clz.__name__} at path {current_path()}")
        return x.replace(**updates)

    register_serialization_state(clz, to_sd, from_sd, override=True)


register_serialization_state(dict, _dict_state_dict, _restore_dict)
register_serialization_state(list, _list_state_dict, _restore_list)
register_serialization_state(tuple, _list_state_dict, lambda xs, sd: tuple(_restore_list(list(xs), sd)))
register_serialization_state(_NamedTuple, _namedtuple_state_dict, _restore_namedtuple)
register_serialization_state(FrozenDict, _dict_state_dict, _restore_frozen_dict)
register_serialization_state(
    tree_util.Partial,
    lambda x: {"args": to_state_dict(x.args), "keywords": to_state_dict(x.keywords)},
    lambda x, sd: tree_util.Partial(x.func, *from_state_dict(x.args, sd["args"]),
                                    **from_state_dict(x.keywords, sd["keywords"])))


# On the wire: msgpack with Flax's extension types.

class _MsgpackExtType(enum.IntEnum):
    ndarray = 1
    native_complex = 2
    npscalar = 3


def _ndarray_to_bytes(arr) -> bytes:
    if isinstance(arr, _Array):
        arr = np.array(arr)
    if arr.dtype.hasobject or arr.dtype.isalignedstruct:
        raise ValueError("Object and structured dtypes not supported for serialization of ndarrays.")
    return _msgpack.packb((arr.shape, arr.dtype.name, arr.tobytes("C")))


def _ndarray_from_bytes(data: bytes) -> np.ndarray:
    shape, dtype_name, buffer = _msgpack.unpackb(data, raw=True)
    dt = _dtypes.bfloat16 if dtype_name == b"bfloat16" else np.dtype(dtype_name.decode())
    return np.frombuffer(buffer, dtype=dt, count=-1, offset=0).reshape(shape, order="C")


def _msgpack_ext_pack(x):
    if isinstance(x, (np.ndarray, _Array)):
        return _msgpack.ExtType(_MsgpackExtType.ndarray, _ndarray_to_bytes(x))
    if isinstance(x, np.generic):
        return _msgpack.ExtType(_MsgpackExtType.npscalar, _ndarray_to_bytes(np.asarray(x)))
    if isinstance(x, complex):
        return _msgpack.ExtType(_MsgpackExtType.native_complex, _msgpack.packb((x.real, x.imag)))
    return x


def _msgpack_ext_unpack(code, data):
    try:
        if code == _MsgpackExtType.ndarray:
            return _ndarray_from_bytes(data)
        if code == _MsgpackExtType.native_complex:
            re, im = _msgpack.unpackb(data)
            return complex(re, im)
        if code == _MsgpackExtType.npscalar:
            return _ndarray_from_bytes(data)[()]
    except (ValueError, TypeError) as e:  # a malformed payload (UnpackError is a ValueError)
        raise _msgpack.UnpackError(f"malformed msgpack extension of type {code}: {e}") from None
    return _msgpack.ExtType(code, data)


# The msgpack package holds at most 2**31 - 1 bytes per object; Flax splits larger arrays
# (with a margin), and so does podlet, so that its files read in Flax.
MAX_CHUNK_SIZE = 2**30


def _np_convert_in_place(d):
    if isinstance(d, dict):
        for k, v in d.items():
            if isinstance(v, _Array):
                d[k] = np.array(v)
            elif isinstance(v, dict):
                _np_convert_in_place(v)
    elif isinstance(d, _Array):
        return np.array(d)
    return d


def _tuple_to_dict(tpl):
    return {str(x): y for x, y in enumerate(tpl)}


def _dict_to_tuple(dct):
    return tuple(dct[str(i)] for i in range(len(dct)))


def _chunk(arr):
    chunksize = max(1, int(MAX_CHUNK_SIZE / arr.dtype.itemsize))
    data = {"__msgpack_chunked_array__": True, "shape": _tuple_to_dict(arr.shape)}
    flatarr = arr.reshape(-1)
    data["chunks"] = _tuple_to_dict([flatarr[i:i + chunksize] for i in range(0, flatarr.size, chunksize)])
    return data


def _unchunk(data):
    shape = _dict_to_tuple(data["shape"])
    return np.concatenate(_dict_to_tuple(data["chunks"])).reshape(shape)


def _chunk_array_leaves_in_place(d):
    if isinstance(d, dict):
        for k, v in d.items():
            if isinstance(v, np.ndarray):
                if v.size * v.dtype.itemsize > MAX_CHUNK_SIZE:
                    d[k] = _chunk(v)
            elif isinstance(v, dict):
                _chunk_array_leaves_in_place(v)
    elif isinstance(d, np.ndarray):
        if d.size * d.dtype.itemsize > MAX_CHUNK_SIZE:
            return _chunk(d)
    return d


def _unchunk_array_leaves_in_place(d):
    if isinstance(d, dict):
        if "__msgpack_chunked_array__" in d:
            return _unchunk(d)
        for k, v in d.items():
            if isinstance(v, dict) and "__msgpack_chunked_array__" in v:
                d[k] = _unchunk(v)
            elif isinstance(v, dict):
                _unchunk_array_leaves_in_place(v)
    return d


def msgpack_serialize(pytree, in_place: bool = False) -> bytes:
    """msgpack bytes of a tree of dicts, lists and tuples with Python scalar and array leaves
    (arrays over ``MAX_CHUNK_SIZE`` bytes are chunked). Use ``to_bytes`` for other objects.

    Args:
      pytree: the tree.
      in_place: allow converting and chunking leaves in `pytree` itself.
    """
    if not in_place:
        pytree = tree_util.tree_map(lambda x: x, pytree)
    pytree = _np_convert_in_place(pytree)
    pytree = _chunk_array_leaves_in_place(pytree)
    return _msgpack.packb(pytree, default=_msgpack_ext_pack, strict_types=True)


def msgpack_restore(encoded_pytree: bytes):
    """The tree of dicts, lists, Python scalars and NumPy arrays encoded by ``msgpack_serialize``
    (or Flax's). Raises ValueError on bytes that are not one valid msgpack object."""
    state_dict = _msgpack.unpackb(encoded_pytree, ext_hook=_msgpack_ext_unpack, raw=False)
    return _unchunk_array_leaves_in_place(state_dict)


def _to_podlet(x):
    """Array leaves of a restored state dict (dicts and lists) as podlet arrays, in place:
    key order is kept (a tree_map would sort it)."""
    if isinstance(x, dict):
        for k, v in x.items():
            x[k] = _to_podlet(v)
    elif isinstance(x, list):
        x[:] = [_to_podlet(v) for v in x]
    elif isinstance(x, np.ndarray) and x.dtype.name in _dtypes.SUPPORTED:
        a = _pnp.asarray(x)
        return a if a.dtype == x.dtype else x
    return x


def from_bytes(target, encoded_bytes: bytes):
    """`target` with the state decoded from `encoded_bytes` (written by ``to_bytes``, here or
    in Flax). `target` is a template of the same structure; array leaves come back as podlet
    arrays."""
    state_dict = _to_podlet(msgpack_restore(encoded_bytes))
    return from_state_dict(target, state_dict)


def to_bytes(target) -> bytes:
    """The msgpack bytes of ``to_state_dict(target)`` (those of ``flax.serialization.to_bytes``)."""
    return msgpack_serialize(to_state_dict(target), in_place=True)
