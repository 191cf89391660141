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

A file appears under its final name only once complete: it is written to a temporary
name in the same directory, fsynced, renamed, and the directory fsynced, so a crash
leaves the previous checkpoints intact and no half file. Restoring into a target pytree
checks every path: all missing, extra, mis-shaped and mis-typed paths are reported in one
error (Orbax silently restores partial trees; podlet refuses).
"""
from __future__ import annotations

import json
import os
import re
import threading

import h5py
import numpy as np

from .. import tree_util
from .._src import dtypes as _dtypes
from .._src.errors import PodletError

__all__ = ["CheckpointError", "CheckpointMismatchError", "save_checkpoint", "restore_checkpoint",
           "read_checkpoint", "read_metadata", "CheckpointManager", "checkpoint_path", "check_structure"]

FORMAT = "podlet-checkpoint-v1"
_NAME = re.compile(r"^checkpoint_(\d+)\.h5$")


class CheckpointError(PodletError):
    """A checkpoint file is missing, unreadable or not a podlet checkpoint."""


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


def _write(path, snapshot, step, config, model, metrics):
    import podlet
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    tmp = os.path.join(d, f".tmp-{os.path.basename(path)}.{os.getpid()}.{threading.get_ident()}")
    try:
        with h5py.File(tmp, "w") as f:
            f.attrs["format"] = FORMAT
            f.attrs["podlet_version"] = podlet.__version__
            f.attrs["step"] = int(step)
            f.attrs["config"] = config if isinstance(config, str) else json.dumps(config or {})
            f.attrs["model"] = model if isinstance(model, str) else json.dumps(model or {}, default=str)
            f.attrs["metrics"] = json.dumps(metrics or {})
            g = f.create_group("state")
            for p, a, pytype in snapshot:
                name = str(a.dtype)
                data = a.view(np.uint16) if a.dtype == _dtypes.bfloat16 else a
                ds = g.create_dataset(p, data=data)
                ds.attrs["dtype"] = name
                if pytype:
                    ds.attrs["python_type"] = pytype
        with open(tmp, "rb+") as fh:
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


def _open(path):
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise CheckpointError(f"checkpoint {path} is not a readable HDF5 file: {e}") from None
    fmt = f.attrs.get("format")
    if fmt != FORMAT or "state" not in f:
        f.close()
        raise CheckpointError(f"{path} is not a podlet checkpoint (format attribute {fmt!r}, "
                              f"expected {FORMAT!r})")
    return f


def read_metadata(path) -> dict:
    """``{"step", "config" (YAML text), "model", "metrics", "podlet_version"}`` of a file."""
    with _open(path) as f:
        a = f.attrs
        return {"step": int(a["step"]), "config": str(a["config"]), "model": json.loads(a["model"] or "{}"),
                "metrics": json.loads(a["metrics"] or "{}"), "podlet_version": str(a["podlet_version"])}


def _stored(ds):
    a = ds[()]
    a = np.asarray(a)
    if ds.attrs.get("dtype") == "bfloat16":
        a = a.view(_dtypes.bfloat16)
    return a


def _all_datasets(f):
    out = {}

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            out[name] = obj
    f["state"].visititems(visit)
    return out


def read_checkpoint(path) -> dict:
    """The stored state as ``{hdf5 path: numpy array}`` (no target needed)."""
    with _open(path) as f:
        return {p: _stored(ds) for p, ds in _all_datasets(f).items()}


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
    mis-shaped and mis-typed path, so a model change is diagnosed in one go.
    """
    path = os.fspath(path)
    with _open(path) as f:
        stored = _all_datasets(f)
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
            values.append((_stored(ds), leaf))
        extra = sorted(set(stored) - {p for p, _ in leaves_with_paths})
        if missing or extra or mismatched:
            lines = [f"checkpoint {path} does not match the target: {len(missing)} missing, "
                     f"{len(extra)} extra, {len(mismatched)} mismatched path(s)"]
            lines += [f"  missing from the checkpoint: {p}" for p in missing]
            lines += [f"  not in the target:           {p}" for p in extra]
            lines += [f"  mismatched:                  {m}" for m in mismatched]
            raise CheckpointMismatchError("\n".join(lines), missing, extra, mismatched)
        return treedef.unflatten([_as_target_type(a, leaf) for a, leaf in values])


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
        for s in self.all_steps():
            try:
                self._metrics[s] = read_metadata(self.path(s))["metrics"]
            except CheckpointError:
                self._metrics[s] = {}
        self._thread = None
        self._error = None

    def path(self, step: int) -> str:
        return checkpoint_path(self.directory, step)

    def all_steps(self) -> list[int]:
        return sorted(int(m.group(1)) for m in map(_NAME.match, os.listdir(self.directory)) if m)

    def latest_step(self):
        steps = self.all_steps()
        return steps[-1] if steps else None

    def best_step(self):
        if self.best_metric is None:
            return None
        scored = [(m[self.best_metric], s) for s, m in self._metrics.items()
                  if isinstance(m.get(self.best_metric), (int, float)) and s in set(self.all_steps())]
        scored = [(v, s) for v, s in scored if v == v]  # NaN is never best
        if not scored:
            return None
        # Ties go to the earlier step (the first to reach the score).
        if self.best_mode == "max":
            return max(scored, key=lambda vs: (vs[0], -vs[1]))[1]
        return min(scored, key=lambda vs: (vs[0], vs[1]))[1]

    def resolve(self, step) -> int:
        """An int step from ``"latest"``, ``"best"`` or a number."""
        self.wait_until_finished()
        if step == "latest" or step is None:
            s = self.latest_step()
        elif step == "best":
            s = self.best_step()
        else:
            s = int(step)
            if s not in self.all_steps():
                raise CheckpointError(f"no checkpoint for step {s} in {self.directory}; "
                                      f"available: {self.all_steps()}")
        if s is None:
            raise CheckpointError(f"no {step} checkpoint in {self.directory} (steps: {self.all_steps()})")
        return s

    def save(self, step: int, state, *, metrics=None, config=None, model=None, wait: bool = False):
        self.wait_until_finished()
        snap = _snapshot(state)
        metrics = dict(metrics or {})

        def run():
            try:
                _write(self.path(step), snap, step, config, model, metrics)
                self._metrics[int(step)] = metrics
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
        best = self.best_step()
        if best is not None:
            keep.add(best)
        for s in steps:
            if s not in keep:
                try:
                    os.remove(self.path(s))
                except FileNotFoundError:
                    pass
                self._metrics.pop(s, None)

    def wait_until_finished(self):
        t = self._thread
        if t is not None:
            t.join()
            self._thread = None
        if self._error is not None:
            e, self._error = self._error, None
            raise CheckpointError(f"writing a checkpoint in {self.directory} failed: {e}") from e

    def restore(self, target, step="latest"):
        return restore_checkpoint(self.path(self.resolve(step)), target)

    def metadata(self, step="latest") -> dict:
        return read_metadata(self.path(self.resolve(step)))

    def close(self):
        self.wait_until_finished()
