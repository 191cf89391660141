"""Reads the msgpack bytes of ``flax.serialization.to_bytes`` / ``msgpack_serialize`` for the
weight importer: ``podlet.serialization.msgpack_restore`` (the pure-Python msgpack codec
in ``_src/msgpack.py`` plus Flax's extension types and chunked arrays, so reading a Flax
checkpoint needs neither flax nor the msgpack package), with errors that name the file."""
from .._src.errors import PodletError


def restore(data: bytes, where="<bytes>"):
    """The tree of dicts, lists, Python scalars and NumPy arrays in `data`; damaged data is
    a PodletError naming `where`."""
    from ..serialization import msgpack_restore
    try:
        return msgpack_restore(bytes(data))
    except (ValueError, TypeError) as e:
        raise PodletError(f"{where}: {e}") from None
