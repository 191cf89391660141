"""Stored JAX oracles ("golden files"): JAX results that are too slow to compute live in
every run (an XLA compile of minutes), written once by ``tests/oracles/make_oracles.py``
and read by the tests, with a fingerprint of exactly what was computed.

One ``.npz`` per oracle (compressed), holding

- ``blob``: every array's bytes, one after another (uint8);
- ``index``: JSON (as uint8): for every case id, its outputs as ``[dtype, shape,
  weak_type, offset, nbytes]``, the fingerprint of every case (a hash of its inputs:
  names, arguments, the bytes of its arrays) and the library versions that computed it.

A test compares the stored fingerprints with the ones of its current cases and fails,
naming the regeneration command, when any is missing or differs (``stale``): a stored
value is never used for inputs other than the ones it was computed from.
"""
import hashlib
import json
import os
import tempfile
import types

import ml_dtypes
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def path(name):
    return os.path.join(HERE, f"{name}.npz")


def command(name):
    return f".venv/bin/python tests/oracles/make_oracles.py {name}"


class Ref:
    """A stored output: what the tests read of a jax.Array (np.asarray and weak_type)."""

    def __init__(self, value, weak_type):
        self.value = value
        self.weak_type = weak_type

    def __array__(self, dtype=None, copy=None):
        return self.value if dtype is None else self.value.astype(dtype)

    def __repr__(self):
        return f"Ref({self.value!r}, weak_type={self.weak_type})"


def _canon(v, h):
    """Feeds a stable description of an argument into the hash `h` (no ids, no addresses)."""
    if isinstance(v, np.ndarray):
        h.update(f"nd|{v.dtype.name}|{v.shape}|".encode())
        h.update(np.ascontiguousarray(v).tobytes())
    elif isinstance(v, np.generic):
        h.update(f"np|{v.dtype.name}|".encode() + v.tobytes())
    elif isinstance(v, (tuple, list)):
        h.update(f"{type(v).__name__}[{len(v)}|".encode())
        for x in v:
            _canon(x, h)
    elif isinstance(v, dict):
        h.update(f"dict[{len(v)}|".encode())
        for k in sorted(v, key=repr):
            _canon(k, h)
            _canon(v[k], h)
    elif isinstance(v, (set, frozenset)):
        _canon(sorted(v, key=repr), h)
    elif isinstance(v, types.FunctionType):  # a lambda argument: its code, constants, closure
        h.update(b"fn|")
        _canon(v.__code__, h)
        _canon(v.__defaults__, h)
        _canon([c.cell_contents for c in v.__closure__ or ()], h)
    elif isinstance(v, types.CodeType):
        h.update(b"code|" + v.co_code)
        _canon([c for c in v.co_consts], h)
        _canon(list(v.co_names) + list(v.co_varnames), h)
    elif isinstance(v, slice):
        h.update(b"slice|")
        _canon([v.start, v.stop, v.step], h)
    elif v is None or v is Ellipsis or isinstance(v, (bool, int, float, complex, str, bytes, type, np.dtype)):
        h.update(f"{type(v).__name__}|{v!r}|".encode())
    elif hasattr(v, "__dict__") and type(v).__module__ not in ("builtins",):  # e.g. tests' Concrete
        h.update(f"obj|{type(v).__qualname__}|".encode())
        _canon(vars(v), h)
    else:
        raise TypeError(f"no stable fingerprint for argument {v!r} of type {type(v)}")


def fingerprint(*parts):
    h = hashlib.sha256()
    _canon(list(parts), h)
    return h.hexdigest()[:24]


def _dtype_str(dt):
    """A dtype as text np.dtype reads back: ml_dtypes' (bfloat16) by name, others by str."""
    return dt.name if hasattr(ml_dtypes, dt.name) else dt.str


def _dtype(s):
    return np.dtype(getattr(ml_dtypes, s)) if hasattr(ml_dtypes, s) else np.dtype(s)


def save(name, outputs, fingerprints, versions):
    """outputs: {case id: [array-like with optional weak_type, ...]}; fingerprints: {case
    id: str}; versions: {library: version}. Written to a temporary file, then renamed."""
    assert set(outputs) == set(fingerprints)
    chunks, index, offset = [], {}, 0
    for cid in sorted(outputs):
        entry = []
        for out in outputs[cid]:
            a = np.asarray(out).copy(order="C")  # (np.ascontiguousarray makes 0-d arrays 1-d)
            raw = a.reshape(-1).view(np.uint8)
            entry.append([_dtype_str(a.dtype), list(a.shape), bool(getattr(out, "weak_type", False)), offset, raw.size])
            chunks.append(raw)
            offset += raw.size
        index[cid] = entry
    header = {"versions": versions, "fingerprints": {k: fingerprints[k] for k in sorted(fingerprints)},
              "outputs": index}
    blob = np.concatenate(chunks) if chunks else np.zeros(0, np.uint8)
    fd, tmp = tempfile.mkstemp(dir=HERE, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:  # a file object: savez would append ".npz" to a name
            np.savez_compressed(f, blob=blob, index=np.frombuffer(json.dumps(header).encode(), np.uint8))
        os.chmod(tmp, 0o644)
        os.replace(tmp, path(name))
    except BaseException:
        os.unlink(tmp)
        raise
    stored, _ = load(name)  # read back: the same dtypes, shapes, weak types and bytes
    for cid, outs in outputs.items():
        for out, ref in zip(outs, stored[cid], strict=True):
            a = np.asarray(out)
            assert (a.dtype, a.shape, a.tobytes(), bool(getattr(out, "weak_type", False))) == \
                (ref.value.dtype, ref.value.shape, ref.value.tobytes(), ref.weak_type), f"{name}/{cid} reads back differently"


def load(name):
    """Returns ({case id: [Ref, ...]}, header) or ({}, None) when the file is missing."""
    if not os.path.exists(path(name)):
        return {}, None
    with np.load(path(name)) as f:
        blob, header = f["blob"], json.loads(f["index"].tobytes().decode())
    outputs = {}
    for cid, entry in header["outputs"].items():
        outputs[cid] = [Ref(blob[off:off + n].view(_dtype(dt)).reshape(tuple(shape)).copy(), weak)
                        for dt, shape, weak, off, n in entry]
    return outputs, header


def staleness(name, fingerprints, versions):
    """What makes the stored oracle `name` differ from the current cases: a message naming
    the regeneration command, or None when it is current. fingerprints: {case id: str}."""
    _, header = load(name)
    if header is None:
        return f"stored oracle {os.path.relpath(path(name), REPO)} is missing: regenerate it with `{command(name)}`"
    problems = []
    if header["versions"] != versions:
        problems.append(f"computed with {header['versions']}, installed {versions}")
    stored = header["fingerprints"]
    missing = sorted(set(fingerprints) - set(stored))
    changed = sorted(k for k in set(fingerprints) & set(stored) if stored[k] != fingerprints[k])
    extra = sorted(set(stored) - set(fingerprints))
    for what, ids in (("missing", missing), ("inputs changed", changed), ("no longer a case", extra)):
        if ids:
            problems.append(f"{len(ids)} case(s) {what}: {', '.join(ids[:10])}{' ...' if len(ids) > 10 else ''}")
    if not problems:
        return None
    return (f"stored oracle {os.path.relpath(path(name), REPO)} is stale ({'; '.join(problems)}): "
            f"regenerate it with `{command(name)}`")


def current(name, fingerprints, versions):
    """The stored outputs whose fingerprint matches `fingerprints` (and all of them only
    when the versions match): {case id: [Ref, ...]}. Others are left out; the caller
    fails on them with `staleness`."""
    outputs, header = load(name)
    if header is None or header["versions"] != versions:
        return {}
    return {k: v for k, v in outputs.items() if header["fingerprints"].get(k) == fingerprints.get(k)
            and k in fingerprints}
