"""Checkpoints: the whole train state in one HDF5 file per step (Orbax's job, done in HDF5).

    mgr = CheckpointManager(run_dir / "checkpoints", max_to_keep=3, best_metric="macro_f1")
    mgr.save(step, state, metrics={"macro_f1": 0.41}, config=yaml_text, model=model_def)
    mgr.wait_until_finished()
    state = mgr.restore(target_state, step="best")      # or "latest" or an int

Layout (readable with plain h5py): the pytree path of every leaf is its HDF5 path under
``/state`` (``/state/params/conv_init/kernel``, ``/state/opt_state/1/0/mu/...``: dict keys,
sequence indices and dataclass/namedtuple field names, "/" in a key escaped as ``%2F``).
Every dataset carries a ``dtype`` attribute; bfloat16 (which HDF5 has no type for) is
stored as its uint16 bit pattern. The root's attributes pin what is needed to trust the
file later: ``step``, ``config`` (the resolved YAML), ``model`` (the model definition as
JSON), ``metrics`` (JSON), ``format`` and ``podlet_version``.

Checksums (format ``podlet-checkpoint-v2``), in two layers:

* Per leaf and over the metadata, inside HDF5 (readable with plain h5py): every dataset
  carries ``crc32``, the ``zlib.crc32`` of its data exactly as stored (C order, bfloat16
  as its uint16 view). The root carries ``manifest``, a JSON list sorted by path of
  ``[path, dtype attribute, shape, python_type or null, crc32]`` for every dataset, and
  ``checksum``, the crc32 of a canonical text (``_root_checksum``: a compact JSON list) of
  ``format``, ``podlet_version``, ``step``, ``config``, ``model``, ``metrics`` and
  ``manifest``. So the metadata, the tree (paths, dtypes, shapes, Python scalar types)
  and every value are covered.
* Over HDF5's own structure: parsing a damaged HDF5 file can crash or hang the process
  (most of HDF5's structures, such as the global heap holding the string attributes, have
  no checksum of their own), so the file starts with an HDF5 user block holding an
  integrity header (see ``_check_header``): the file size, the byte ranges of the leaves'
  data, and the crc32 of every other byte. It is checked, reading no leaf data, before
  HDF5 opens the file.

Every read verifies what it reads: ``read_metadata`` the header and the root checksum;
``read_checkpoint``, ``restore_checkpoint`` and ``verify_checkpoint`` (a full check) also
that the datasets are exactly the manifest's, each with the attributes, dtype, shape and
crc32 it records. Any failure, a truncated file, and any error h5py raises while opening
or reading, is a CheckpointError naming the file and every failing leaf: a damaged file
is refused, or (damage in unused bytes) reads back bit-identical, never silently changed.
``CheckpointManager.latest_valid_step`` (what ``--resume`` uses) is the newest step whose
file verifies, ``best_step`` (what the end of training selects) the best one that
verifies, and pruning never deletes either because damaged files are newer or score
better. Files in the older ``podlet-checkpoint-v1`` format (no checksums, no
header) still load as before, with a warning (once per file per process) that they
cannot be verified; HDF5 parses them unprotected.

A file appears under its final name only once complete: it is written to a temporary
name in the same directory, fsynced, renamed, and the directory fsynced, so a crash
leaves the previous checkpoints intact and no half file. Restoring into a target pytree
checks every path: all missing, extra, mis-shaped and mis-typed paths are reported in one
error (Orbax silently restores partial trees; podlet refuses).
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import warnings
import zlib

import h5py
import numpy as np

from .. import tree_util
from .._src import dtypes as _dtypes
from .._src.errors import PodletError

__all__ = ["CheckpointError", "CheckpointMismatchError", "save_checkpoint", "restore_checkpoint",
           "read_checkpoint", "read_metadata", "verify_checkpoint", "CheckpointManager", "checkpoint_path",
           "check_structure"]

FORMAT = "podlet-checkpoint-v2"
FORMAT_V1 = "podlet-checkpoint-v1"  # no checksums: still read, with a warning
_NAME = re.compile(r"^checkpoint_(\d+)\.h5$")


class CheckpointError(PodletError):
    """A checkpoint file is missing, unreadable, damaged or not a podlet checkpoint."""


class CheckpointMismatchError(CheckpointError):
    """The checkpoint's tree differs from the target's; the message lists every path."""

    def __init__(self, message, missing=(), extra=(), mismatched=()):
        super().__init__(message)
        self.missing, self.extra, self.mismatched = list(missing), list(extra), list(mismatched)


# ---------------------------------------------------------------------------- paths

def _entry_name(key):
    if isinstance(key, tree_util.DictKey):
        s = str(key.key)
    elif isinstance(key, tree_util.SequenceKey):
        s = str(key.idx)
    elif isinstance(key, tree_util.GetAttrKey):
        s = key.name
    elif isinstance(key, tree_util.FlattenedIndexKey):
        s = str(key.key)
    else:
        s = str(key)
    # HDF5 names cannot hold "/" and "." is the group itself.
    s = s.replace("%", "%25").replace("/", "%2F")
    return "%2E" if s == "." else s


def _leaf_paths(tree):
    """[(hdf5 path under /state, leaf)] in flatten order."""
    leaves, _ = tree_util.tree_flatten_with_path(tree)
    out = []
    for keys, leaf in leaves:
        out.append(("/".join(_entry_name(k) for k in keys) or "_root", leaf))
    return out


def _host(leaf, path):
    """A NumPy copy of a leaf (the live state may be reused by the next step)."""
    if isinstance(leaf, (bool, int, float, np.number, np.bool_)):
        return np.asarray(leaf), type(leaf).__name__ if isinstance(leaf, (bool, int, float)) else None
    if hasattr(leaf, "__array__") or isinstance(leaf, np.ndarray):
        return np.array(leaf, copy=True), None
    raise CheckpointError(f"cannot checkpoint the leaf at {path!r}: {type(leaf).__name__} is not an array "
                          f"or a number")


def _snapshot(tree):
    return [(p, *_host(leaf, p)) for p, leaf in _leaf_paths(tree)]


# ---------------------------------------------------------------------------- files

def checkpoint_path(directory, step: int) -> str:
    return os.path.join(os.fspath(directory), f"checkpoint_{int(step):08d}.h5")


def _fsync_dir(d):
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _crc32(a) -> int:
    """zlib.crc32 of an array's bytes in C order (zlib releases the GIL for large buffers)."""
    return zlib.crc32(a if a.flags.c_contiguous else np.ascontiguousarray(a))


def _storage_dtype(name):
    """The NumPy dtype a leaf whose ``dtype`` attribute is `name` is stored (and read back) as."""
    return np.dtype(np.uint16) if name == "bfloat16" else np.dtype(name)


_ROOT_KEYS = ("format", "podlet_version", "step", "config", "model", "metrics", "manifest")


def _root_checksum(fmt, podlet_version, step, config, model, metrics, manifest) -> int:
    """crc32 of the canonical text of the root attributes (the strings exactly as stored)."""
    text = json.dumps([str(fmt), str(podlet_version), int(step), str(config), str(model), str(metrics),
                       str(manifest)], ensure_ascii=True, separators=(",", ":"))
    return zlib.crc32(text.encode("ascii"))


# ----------------------------------------------------------- the integrity header
# HDF5 has no checksum over most of its own structures (the global heap that holds string
# attributes, v1 object headers, B-trees, local heaps), and parsing a damaged one can
# crash or hang the process rather than raise. So a v2 file starts with a user block
# (HDF5 ignores it; the superblock follows it) holding a header that lets a reader check
# every byte HDF5 will parse before HDF5 sees the file:
#     b"podlet-checkpoint-v2 integrity header <user block size>\n"
#     b'{"size": <file size>, "data": [[offset, length], ...], "crc32": <crc>}\n'
#     b"<crc32 of the two lines above, 8 hex digits>\n"
# where "data" are the byte ranges of the leaves' raw data (checked per leaf, by their
# crc32s) and "crc32" is the crc32 of every other byte after the user block.
_HEADER_MAGIC = b"podlet-checkpoint-v2 integrity header "
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def _userblock_size(n_leaves):
    need, size = 512 + 48 * n_leaves, 512  # a power of two >= 512, room for every data range
    while size < need:
        size *= 2
    return size


def _merge(ranges):
    out = []
    for off, n in sorted((int(o), int(n)) for o, n in ranges if n):
        if out and off <= out[-1][0] + out[-1][1]:
            out[-1][1] = max(out[-1][1], off + n - out[-1][0])
        else:
            out.append([off, n])
    return out


def _crc_outside(fh, start, size, data):
    """crc32 of the bytes [start, size) of `fh` outside the (merged, sorted) `data` ranges."""
    crc, pos, gaps = 0, start, []
    for off, n in data:
        gaps.append((pos, off))
        pos = max(pos, off + n)
    gaps.append((pos, size))
    for lo, hi in gaps:
        fh.seek(lo)
        while lo < hi:
            b = fh.read(min(hi - lo, 1 << 22))
            if not b:
                raise EOFError(f"end of file at byte {lo}")
            crc = zlib.crc32(b, crc)
            lo += len(b)
    return crc


def _write_header(fh, userblock, data):
    size = os.fstat(fh.fileno()).st_size
    body = json.dumps({"size": size, "data": data, "crc32": _crc_outside(fh, userblock, size, data)},
                      separators=(",", ":")).encode("ascii")
    head = _HEADER_MAGIC + b"%d\n" % userblock + body + b"\n"
    head += b"%08x\n" % zlib.crc32(head)
    if len(head) > userblock:  # cannot happen: _userblock_size leaves room
        raise CheckpointError(f"the checkpoint header ({len(head)} bytes) does not fit its {userblock}-byte block")
    fh.seek(0)
    fh.write(head)


def _check_header(path):
    """Checks a v2 file's integrity header and every byte HDF5 will parse; returns False for
    a file without one (HDF5's signature at byte 0: the v1 layout). Reads no leaf data."""
    def damaged(why):
        return CheckpointError(f"checkpoint {path} is damaged: {why}")
    with open(path, "rb") as fh:
        start = fh.read(512)
        if start.startswith(_HDF5_SIGNATURE):
            return False
        if not start.startswith(_HEADER_MAGIC):
            raise CheckpointError(f"checkpoint {path} is not a readable HDF5 file: it starts with neither a podlet "
                                  f"checkpoint header nor the HDF5 signature")
        actual = os.fstat(fh.fileno()).st_size
        try:
            userblock = int(start[len(_HEADER_MAGIC):start.index(b"\n")])
        except ValueError:
            raise damaged("its integrity header is unreadable") from None
        if userblock < 512 or userblock & (userblock - 1) or userblock > actual:
            raise damaged(f"its integrity header records a {userblock}-byte user block")
        fh.seek(0)
        block = fh.read(userblock)
        lines = block.split(b"\n", 3)
        if len(lines) < 4 or lines[2] != b"%08x" % zlib.crc32(lines[0] + b"\n" + lines[1] + b"\n"):
            raise damaged("its integrity header fails its checksum")
        try:
            head = json.loads(lines[1])
            size, crc, data = int(head["size"]), int(head["crc32"]), _merge(head["data"])
        except (ValueError, TypeError, KeyError, AttributeError) as e:  # a bug, or a crc collision
            raise damaged(f"its integrity header is unreadable ({e})") from None
        if actual != size:
            raise damaged(f"it has {actual} bytes, its header records {size} (truncated or extended)")
        got = _crc_outside(fh, userblock, size, data)
        if got != crc:
            raise damaged(f"the checksum of its HDF5 structure (every byte outside the leaves' data) is "
                          f"{got:#010x}, its header records {crc:#010x}")
    return True


def _write(path, snapshot, step, config, model, metrics):
    import podlet
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    tmp = os.path.join(d, f".tmp-{os.path.basename(path)}.{os.getpid()}.{threading.get_ident()}")
    try:
        userblock = _userblock_size(len(snapshot))
        data_ranges = []
        with h5py.File(tmp, "w", userblock_size=userblock) as f:
            root = {"format": FORMAT, "podlet_version": str(podlet.__version__), "step": int(step),
                    "config": config if isinstance(config, str) else json.dumps(config or {}),
                    "model": model if isinstance(model, str) else json.dumps(model or {}, default=str),
                    "metrics": json.dumps(metrics or {})}
            g = f.create_group("state")
            manifest = []
            for p, a, pytype in snapshot:
                name = str(a.dtype)
                data = a.view(np.uint16) if a.dtype == _dtypes.bfloat16 else a
                if not data.flags.c_contiguous:  # what HDF5 stores, and what a read returns
                    data = np.ascontiguousarray(data)
                crc = _crc32(data)
                ds = g.create_dataset(p, data=data)
                ds.attrs["dtype"] = name
                if pytype:
                    ds.attrs["python_type"] = pytype
                ds.attrs["crc32"] = crc
                data_ranges.append((ds.id.get_offset() or 0, ds.id.get_storage_size() if data.size else 0))
                manifest.append([p, name, [int(n) for n in data.shape], pytype or None, crc])
            root["manifest"] = json.dumps(sorted(manifest, key=lambda e: e[0]), separators=(",", ":"))
            for k, v in root.items():
                f.attrs[k] = v
            f.attrs["checksum"] = _root_checksum(*(root[k] for k in _ROOT_KEYS))
        with open(tmp, "rb+") as fh:
            _write_header(fh, userblock, _merge(data_ranges))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        _fsync_dir(d)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise
    return path


def save_checkpoint(path, target, *, step: int, config=None, model=None, metrics=None) -> str:
    """Writes `target` (any pytree of arrays/numbers) to `path` atomically; returns `path`."""
    return _write(os.fspath(path), _snapshot(target), step, config, model, metrics)


# Whatever h5py/HDF5 raises on a damaged file (and json/int on a damaged attribute).
_READ_ERRORS = (OSError, LookupError, RuntimeError, ValueError, TypeError, AttributeError, ArithmeticError)
_warned_v1 = set()


@contextlib.contextmanager
def _guard(path):
    """Turns an h5py/HDF5 error while reading `path` into a CheckpointError naming it."""
    try:
        yield
    except CheckpointError:
        raise
    except _READ_ERRORS as e:
        raise CheckpointError(f"checkpoint {path} is damaged or unreadable: {type(e).__name__}: {e}") from e


def _close(f):
    try:
        f.close()
    except Exception:  # noqa: BLE001  (a read-only file: nothing to lose)
        pass


def _check_root(path, f, has_header):
    """The manifest ({path: (dtype, shape, python_type, crc32)}) of an open file after checking
    its root checksum; None for a v1 file (no checksums: warns once per file)."""
    a = f.attrs
    fmt = a.get("format")
    if fmt not in (FORMAT, FORMAT_V1) or "state" not in f:
        raise CheckpointError(f"{path} is not a podlet checkpoint (format attribute {fmt!r}, "
                              f"expected {FORMAT!r})")
    if fmt == FORMAT_V1:
        if has_header or "checksum" in a or "manifest" in a:  # a v2 file whose format attribute was damaged
            raise CheckpointError(f"checkpoint {path} is damaged: its format attribute says {FORMAT_V1!r} "
                                  f"but it carries {FORMAT} checksums")
        key = os.path.abspath(path)
        if key not in _warned_v1:
            _warned_v1.add(key)
            warnings.warn(f"checkpoint {path} has no checksums (format {FORMAT_V1}): its contents cannot be "
                          f"verified; saving it again writes {FORMAT}", stacklevel=2)
        return None
    if not has_header:
        raise CheckpointError(f"checkpoint {path} is damaged: a {FORMAT} file without its integrity header")
    absent = [k for k in _ROOT_KEYS + ("checksum",) if k not in a]
    if absent:
        raise CheckpointError(f"checkpoint {path} is damaged: root attribute(s) {', '.join(absent)} missing")
    want = int(a["checksum"])
    got = _root_checksum(*(a[k] for k in _ROOT_KEYS))
    if got != want:
        raise CheckpointError(f"checkpoint {path} is damaged: the checksum of its metadata ({', '.join(_ROOT_KEYS)}) "
                              f"is {got:#010x}, the file records {want:#010x}")
    manifest = {}
    for p, dtype, shape, pytype, crc in json.loads(a["manifest"]):
        manifest[str(p)] = (str(dtype), tuple(int(n) for n in shape), pytype, int(crc))
    return manifest


def _open(path):
    """(open h5py.File, manifest or None for v1): a podlet checkpoint whose root checksum holds."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        has_header = _check_header(path)
    except OSError as e:
        raise CheckpointError(f"checkpoint {path} is not readable: {e}") from None
    except EOFError as e:
        raise CheckpointError(f"checkpoint {path} is damaged: {e}") from None
    try:
        f = h5py.File(path, "r")
    except _READ_ERRORS as e:
        raise CheckpointError(f"checkpoint {path} is not a readable HDF5 file: {e}") from None
    try:
        with _guard(path):
            return f, _check_root(path, f, has_header)
    except BaseException:
        _close(f)
        raise


@contextlib.contextmanager
def _reading(path):
    """with _reading(path) as (f, manifest): every error inside is a CheckpointError naming `path`."""
    path = os.fspath(path)
    f, manifest = _open(path)
    try:
        with _guard(path):
            yield f, manifest
    finally:
        _close(f)


def read_metadata(path) -> dict:
    """``{"step", "config" (YAML text), "model", "metrics", "podlet_version"}`` of a file
    (its root checksum verified)."""
    with _reading(path) as (f, _):
        a = f.attrs
        return {"step": int(a["step"]), "config": str(a["config"]), "model": json.loads(a["model"] or "{}"),
                "metrics": json.loads(a["metrics"] or "{}"), "podlet_version": str(a["podlet_version"])}


def _all_datasets(f):
    out = {}

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            out[name] = obj
    f["state"].visititems(visit)
    return out


def _damaged(path, failures):
    """Raises one CheckpointError naming `path` and every failing leaf ([(leaf path, why)])."""
    if not failures:
        return
    failures = sorted(failures)
    names = [p for p, _ in failures]
    shown = ", ".join(dict.fromkeys(names[:8])) + (", ..." if len(set(names)) > 8 else "")
    lines = [f"checkpoint {path} is damaged: {len(set(names))} leaf/leaves fail verification: {shown}"]
    lines += [f"  {p}: {why}" for p, why in failures]
    raise CheckpointError("\n".join(lines))


def _why(e):
    return f"unreadable ({type(e).__name__}: {e})"


def _checked_datasets(path, f, manifest):
    """{path: dataset} under /state; for a v2 file, after checking that the file holds exactly
    the manifest's datasets, each with the attributes, dtype and shape it records."""
    stored = _all_datasets(f)
    failures = []
    if manifest is None:  # v1: nothing to check against, but a leaf with a crc32 is a damaged v2 file
        for p, ds in stored.items():
            if "crc32" in ds.attrs:
                failures.append((p, f"carries a crc32 attribute in a file whose format attribute says {FORMAT_V1!r}"))
        _damaged(path, failures)
        return stored
    failures += [(p, "listed in the manifest, missing from the file") for p in set(manifest) - set(stored)]
    failures += [(p, "in the file, not in the manifest") for p in set(stored) - set(manifest)]
    for p in set(stored) & set(manifest):
        name, shape, pytype, crc = manifest[p]
        ds = stored[p]
        try:
            at = ds.attrs
            got = (at.get("dtype"), at.get("python_type"), at.get("crc32"))
            if got[0] != name:
                failures.append((p, f"dtype attribute {got[0]!r}, the manifest records {name!r}"))
            if got[1] != pytype:
                failures.append((p, f"python_type attribute {got[1]!r}, the manifest records {pytype!r}"))
            if got[2] is None or int(got[2]) != crc:
                failures.append((p, f"crc32 attribute {got[2]!r}, the manifest records {crc}"))
            if ds.shape != shape:
                failures.append((p, f"shape {ds.shape}, the manifest records {shape}"))
            if ds.dtype != _storage_dtype(name):
                failures.append((p, f"stored as {ds.dtype.str}, the manifest's {name} is stored as "
                                    f"{_storage_dtype(name).str}"))
        except _READ_ERRORS as e:
            failures.append((p, _why(e)))
    _damaged(path, failures)
    return stored


def _read_checked(path, items, manifest, keep=True):
    """{path: array} of the datasets in `items` ([(path, dataset)]), each checked against its
    manifest crc32, dtype and shape (v2); raises once naming every failing leaf."""
    out, failures = {}, []
    for p, ds in items:
        try:
            a = np.asarray(ds[()])
            if manifest is not None:
                name, shape, _, crc = manifest[p]
                if a.dtype != _storage_dtype(name) or a.shape != shape:
                    failures.append((p, f"read as {a.dtype.str}{list(a.shape)}, the manifest records "
                                        f"{name}{list(shape)}"))
                    continue
                got = _crc32(a)
                if got != crc:
                    failures.append((p, f"crc32 of its data is {got:#010x}, the manifest records {crc:#010x}"))
                    continue
            if keep:
                out[p] = a.view(_dtypes.bfloat16) if ds.attrs.get("dtype") == "bfloat16" else a
        except _READ_ERRORS as e:
            failures.append((p, _why(e)))
    _damaged(path, failures)
    return out


def read_checkpoint(path) -> dict:
    """The stored state as ``{hdf5 path: numpy array}`` (no target needed), every leaf verified."""
    with _reading(path) as (f, manifest):
        stored = _checked_datasets(path, f, manifest)
        return _read_checked(path, stored.items(), manifest)


def verify_checkpoint(path) -> None:
    """Reads all of `path` and checks every checksum (root, manifest, every leaf's crc32);
    raises CheckpointError naming the file and every failing leaf. A v1 file (no checksums)
    passes if it reads, with a warning."""
    with _reading(path) as (f, manifest):
        stored = _checked_datasets(path, f, manifest)
        _read_checked(path, stored.items(), manifest, keep=False)


def _shape_of(leaf):
    return tuple(np.shape(leaf)) if not hasattr(leaf, "shape") else tuple(leaf.shape)


def _dtype_of(leaf):
    if isinstance(leaf, (bool, int, float)):
        return None  # Python scalars take whatever was stored
    return np.dtype(leaf.dtype) if hasattr(leaf, "dtype") else np.asarray(leaf).dtype


def _as_target_type(a, leaf):
    if isinstance(leaf, bool):
        return bool(a)
    if isinstance(leaf, int):
        return int(a)
    if isinstance(leaf, float):
        return float(a)
    if isinstance(leaf, (np.ndarray, np.number)):
        return a.astype(leaf.dtype, copy=False) if isinstance(leaf, np.ndarray) else leaf.dtype.type(a)
    from .._src.core import to_array
    return to_array(a if a.flags.c_contiguous else a.copy())  # ascontiguousarray would make 0-d 1-d


def restore_checkpoint(path, target):
    """`target`'s pytree with every leaf read from `path`.

    The target fixes structure, shapes and dtypes (a freshly initialised state, or one of
    ``ShapeDtypeStruct``). Raises CheckpointMismatchError listing every missing, extra,
    mis-shaped and mis-typed path, so a model change is diagnosed in one go, and
    CheckpointError naming every leaf whose checksum fails (a damaged file).
    """
    path = os.fspath(path)
    with _reading(path) as (f, manifest):
        stored = _checked_datasets(path, f, manifest)
        leaves_with_paths = _leaf_paths(target)
        treedef = tree_util.tree_structure(target)
        missing, mismatched, values = [], [], []
        for p, leaf in leaves_with_paths:
            ds = stored.get(p)
            if ds is None:
                missing.append(p)
                continue
            dt = ds.attrs.get("dtype", str(ds.dtype))
            tshape, tdtype = _shape_of(leaf), _dtype_of(leaf)
            if tuple(ds.shape) != tshape or (tdtype is not None and ds.attrs.get("python_type") is None
                                             and str(tdtype) != dt):
                mismatched.append(f"{p}: checkpoint has {dt}{list(ds.shape)}, target expects "
                                  f"{tdtype or type(leaf).__name__}{list(tshape)}")
                continue
            values.append((p, ds, leaf))
        extra = sorted(set(stored) - {p for p, _ in leaves_with_paths})
        if missing or extra or mismatched:
            lines = [f"checkpoint {path} does not match the target: {len(missing)} missing, "
                     f"{len(extra)} extra, {len(mismatched)} mismatched path(s)"]
            lines += [f"  missing from the checkpoint: {p}" for p in missing]
            lines += [f"  not in the target:           {p}" for p in extra]
            lines += [f"  mismatched:                  {m}" for m in mismatched]
            raise CheckpointMismatchError("\n".join(lines), missing, extra, mismatched)
        arrays = _read_checked(path, [(p, ds) for p, ds, _ in values], manifest)
        return treedef.unflatten([_as_target_type(arrays[p], leaf) for p, _, leaf in values])


def check_structure(tree, target, where):
    """Raises CheckpointMismatchError naming every path of `target` missing from `tree`,
    every extra path and every shape mismatch (e.g. imported weights vs a model)."""
    got = {p: _shape_of(x) for p, x in _leaf_paths(tree)}
    want = {p: _shape_of(x) for p, x in _leaf_paths(target)}
    missing = [p for p in want if p not in got]
    extra = sorted(p for p in got if p not in want)
    bad = [f"{p}: {where} has {list(got[p])}, target expects {list(want[p])}"
           for p in want if p in got and got[p] != want[p]]
    if missing or extra or bad:
        lines = [f"{where} does not match the target: {len(missing)} missing, {len(extra)} extra, "
                 f"{len(bad)} mismatched path(s)"]
        lines += [f"  missing: {p}" for p in missing] + [f"  extra: {p}" for p in extra]
        lines += [f"  mismatched: {b}" for b in bad]
        raise CheckpointMismatchError("\n".join(lines), missing, extra, bad)


# -------------------------------------------------------------------------- manager

class CheckpointManager:
    """Numbered checkpoints in one directory: background writes, keep-last-N + best.

    Args:
      directory: where ``checkpoint_<step>.h5`` files live (created).
      max_to_keep: how many of the most recent checkpoints to keep.
      best_metric: a key of the ``metrics`` passed to ``save``; the best checkpoint by it is
        kept as well (None: keep only the last N).
      best_mode: ``"max"`` or ``"min"``.

    ``save`` snapshots the state to host memory and returns; a thread writes the file. A
    second ``save`` first waits for the previous write, and so do ``wait_until_finished``,
    ``restore`` and interpreter exit (the thread is not a daemon). A write error is raised
    by the next call.

    Damaged files: every choice that leads to reading a file (``best_step``,
    ``latest_valid_step``, ``resolve("best"/"latest")``, ``restore``, ``metadata``) takes
    the best or newest checkpoint that passes ``verify_checkpoint`` and reports each one it
    skips (``on_skip(step, error)``, or a warning naming the file and the reason). Pruning
    keeps what it always kept (the last ``max_to_keep`` files and the best by the metrics
    they record) and also the newest and the best checkpoints that verify, so damaged
    files can never crowd out the last usable ones. Damaged files are never deleted for
    being damaged (only by the ordinary rule, once older than the last N); they are left
    for inspection.

    Verification reads a whole file, so only the candidates actually considered are
    verified, newest (or best) first, and each verdict is cached while the file's inode,
    size and timestamps stay the same. A file this manager wrote counts as verified
    without a read while its ``os.stat`` is still the one it had right after the write
    (its crc32s were computed from the very arrays written); ``restore_checkpoint`` checks
    every leaf it reads in any case.
    """

    def __init__(self, directory, max_to_keep: int = 3, best_metric: str | None = None, best_mode: str = "max"):
        if best_mode not in ("max", "min"):
            raise ValueError(f"best_mode must be 'max' or 'min', got {best_mode!r}")
        if max_to_keep < 1:
            raise ValueError(f"max_to_keep must be >= 1, got {max_to_keep}")
        self.directory = os.fspath(directory)
        self.max_to_keep, self.best_metric, self.best_mode = max_to_keep, best_metric, best_mode
        os.makedirs(self.directory, exist_ok=True)
        for name in os.listdir(self.directory):  # leftovers of a write killed mid-way
            if name.startswith(".tmp-checkpoint_"):
                try:
                    os.remove(os.path.join(self.directory, name))
                except OSError:
                    pass
        self._metrics = {}
        # step -> (stat signature, None or the CheckpointError): the verdicts of
        # verify_checkpoint (and of this manager's own writes), valid while the file is unchanged
        self._verdicts = {}
        self._reported = set()  # (step, signature) already warned about
        self._lock = threading.Lock()  # the writer thread prunes while the caller may select
        for s in self.all_steps():
            try:
                self._metrics[s] = read_metadata(self.path(s))["metrics"]
            except CheckpointError as e:
                self._metrics[s] = {}
                self._remember(s, e)  # the header or metadata is damaged: the file cannot verify
        self._thread = None
        self._error = None

    def path(self, step: int) -> str:
        return checkpoint_path(self.directory, step)

    def all_steps(self) -> list[int]:
        return sorted(int(m.group(1)) for m in map(_NAME.match, os.listdir(self.directory)) if m)

    def latest_step(self):
        """The newest step with a file, damaged or not (None if there is none).

        Deliberately unverified: it costs a directory listing, and it answers "how far did
        the run get" (the run directory checks, Ctrl-C's report). To read a checkpoint, use
        ``latest_valid_step`` or ``resolve("latest")``, which skip damaged files.
        """
        steps = self.all_steps()
        return steps[-1] if steps else None

    # ---------------------------------------------------------------- verification

    def _signature(self, step):
        try:
            st = os.stat(self.path(step))
        except OSError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def _remember(self, step, error):
        sig = self._signature(step)
        if sig is not None:
            with self._lock:
                self._verdicts[step] = (sig, error)

    def _check(self, step):
        """None if the file of `step` verifies, else its CheckpointError (cached per file state)."""
        sig = self._signature(step)
        if sig is None:
            return CheckpointError(f"checkpoint {self.path(step)} does not exist")
        with self._lock:
            cached = self._verdicts.get(step)
        if cached is not None and cached[0] == sig:
            return cached[1]
        try:
            verify_checkpoint(self.path(step))
            error = None
        except CheckpointError as e:
            error = e
        with self._lock:
            self._verdicts[step] = (sig, error)
        return error

    def _skip(self, step, error, on_skip, what):
        """Reports a damaged candidate: to `on_skip` every time, as a warning only if this
        file (in this state) has not been reported yet (pruning asks again after every save)."""
        key = (step, self._signature(step))
        with self._lock:
            seen = key in self._reported
            self._reported.add(key)
        if on_skip is not None:
            on_skip(step, error)
            return
        if seen:
            return
        warnings.warn(f"step {step} is not used as the {what} checkpoint: {str(error).splitlines()[0]}",
                      stacklevel=4)

    def _first_valid(self, candidates, on_skip, what):
        for s in candidates:
            error = self._check(s)
            if error is None:
                return s
            self._skip(s, error, on_skip, what)
        return None

    def latest_valid_step(self, on_skip=None):
        """The newest step whose file passes ``verify_checkpoint`` (None if none does).

        Each newer step whose file fails is passed to ``on_skip(step, error)`` (the
        CheckpointError; its first line names the file and the failing leaves), or without
        `on_skip` reported once as a warning.
        """
        self.wait_until_finished()
        return self._first_valid(reversed(self.all_steps()), on_skip, "newest")

    def _ranked(self):
        """Steps with a usable score, best first (ties: the earlier step, the first to reach it)."""
        if self.best_metric is None:
            return []
        present = set(self.all_steps())
        with self._lock:
            metrics = list(self._metrics.items())
        scored = [(m[self.best_metric], s) for s, m in metrics
                  if s in present and isinstance(m.get(self.best_metric), (int, float))
                  and not isinstance(m.get(self.best_metric), bool)]
        scored = [(v, s) for v, s in scored if v == v]  # NaN is never best
        sign = -1 if self.best_mode == "max" else 1
        return [s for v, s in sorted(scored, key=lambda vs: (sign * vs[0], vs[1]))]

    def best_step(self, on_skip=None):
        """The best step by ``best_metric`` whose file verifies (None without a metric or
        without a scored checkpoint that verifies).

        A better-scored file that fails verification is skipped: passed to
        ``on_skip(step, error)``, or reported once as a warning naming the file and why.
        Only candidates down to the first that verifies are read (see the class docstring).
        """
        return self._first_valid(self._ranked(), on_skip, "best")

    def resolve(self, step, on_skip=None) -> int:
        """An int step from ``"latest"``, ``"best"`` or a number.

        ``"latest"`` and ``"best"`` skip damaged files (``latest_valid_step``,
        ``best_step``); an explicit number is taken as given (reading a damaged file then
        raises its CheckpointError)."""
        self.wait_until_finished()
        if step == "latest" or step is None:
            s = self.latest_valid_step(on_skip)
        elif step == "best":
            s = self.best_step(on_skip)
        else:
            s = int(step)
            if s not in self.all_steps():
                raise CheckpointError(f"no checkpoint for step {s} in {self.directory}; "
                                      f"available: {self.all_steps()}")
        if s is None:
            with self._lock:
                damaged = [t for t in self.all_steps() if self._verdicts.get(t, (None, None))[1] is not None]
            raise CheckpointError(f"no {step or 'latest'} checkpoint that verifies in {self.directory} "
                                  f"(steps: {self.all_steps()}" + (f"; damaged: {damaged})" if damaged else ")"))
        return s

    # ------------------------------------------------------------------- writing

    def save(self, step: int, state, *, metrics=None, config=None, model=None, wait: bool = False):
        self.wait_until_finished()
        snap = _snapshot(state)
        metrics = dict(metrics or {})

        def run():
            try:
                _write(self.path(step), snap, step, config, model, metrics)
                with self._lock:
                    self._metrics[int(step)] = metrics
                self._remember(int(step), None)  # written from these arrays, crc32s and all
                self._prune()
            except BaseException as e:  # surfaced by the next call
                self._error = e

        self._thread = threading.Thread(target=run, name=f"podlet-checkpoint-{step}")
        self._thread.start()
        if wait:
            self.wait_until_finished()

    def _prune(self):
        steps = self.all_steps()
        keep = set(steps[-self.max_to_keep:])
        ranked = self._ranked()
        if ranked:
            keep.add(ranked[0])  # the best by its metrics, even if damaged: pruning only ever keeps more
        # the newest and the best that verify: damaged files must not push them out
        newest_valid = self._first_valid(reversed(steps), None, "newest")
        best_valid = self._first_valid(ranked, None, "best")
        keep |= {s for s in (newest_valid, best_valid) if s is not None}
        for s in steps:
            if s not in keep:
                try:
                    os.remove(self.path(s))
                except FileNotFoundError:
                    pass
                with self._lock:
                    self._metrics.pop(s, None)
                    self._verdicts.pop(s, None)

    def wait_until_finished(self):
        t = self._thread
        if t is not None:
            t.join()
            self._thread = None
        if self._error is not None:
            e, self._error = self._error, None
            raise CheckpointError(f"writing a checkpoint in {self.directory} failed: {e}") from e

    def restore(self, target, step="latest", on_skip=None):
        return restore_checkpoint(self.path(self.resolve(step, on_skip)), target)

    def metadata(self, step="latest", on_skip=None) -> dict:
        return read_metadata(self.path(self.resolve(step, on_skip)))

    def close(self):
        self.wait_until_finished()
