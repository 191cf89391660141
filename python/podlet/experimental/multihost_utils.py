"""jax.experimental.multihost_utils: host-side collectives between the processes of a
multi-process run (``podlet.distributed.initialize()`` under ``mpirun``).

    from podlet.experimental import multihost_utils
    multihost_utils.sync_global_devices("checkpoint written")   # a named barrier
    step = multihost_utils.broadcast_one_to_all(np.int64(step))  # process 0's value everywhere
    all_logits = multihost_utils.process_allgather(local_logits)  # [processes, ...]

They run over the same deadline-bounded MPI exchange as pmap's collectives (a dead or
stuck process is an error naming it after ``PODLET_COLLECTIVE_TIMEOUT`` seconds) and
work on pytrees of arrays. In a single process they return their input (stacked for
``process_allgather``). Every process must call them in the same order.
"""
import hashlib

import numpy as np

from .. import tree_util
from .. import _core
from ..distributed import allgather_object

__all__ = ["sync_global_devices", "broadcast_one_to_all", "process_allgather"]


def _host(x):
    a = np.asarray(x)
    return np.ascontiguousarray(a)


def sync_global_devices(name: str):
    """Blocks until every process has called ``sync_global_devices`` with the same `name`
    (a mismatch, which means the processes took different paths, is an error)."""
    h = hashlib.sha256(str(name).encode()).hexdigest()
    names = allgather_object((h, str(name)))
    if any(n[0] != h for n in names):
        raise RuntimeError(f"sync_global_devices: processes disagree: " +
                           ", ".join(f"process {i} at {n[1]!r}" for i, n in enumerate(names)))


def broadcast_one_to_all(in_tree, is_source=None):
    """Process 0's values of a pytree of arrays on every process (or those of the one
    process whose `is_source` is True)."""
    leaves, treedef = tree_util.tree_flatten(in_tree)
    leaves = [_host(x) for x in leaves]
    src = _core.process_index() == 0 if is_source is None else bool(is_source)
    gathered = allgather_object(leaves if src else None)
    sources = [i for i, g in enumerate(gathered) if g is not None]
    if len(sources) != 1:
        raise ValueError(f"broadcast_one_to_all needs exactly one source process, got {sources}")
    return tree_util.tree_unflatten(treedef, gathered[sources[0]])


def process_allgather(in_tree, tiled=False):
    """Every process's values of a pytree of arrays: stacked on a new leading process axis,
    or concatenated along axis 0 when `tiled`. Shapes must agree across processes."""
    leaves, treedef = tree_util.tree_flatten(in_tree)
    leaves = [_host(x) for x in leaves]
    gathered = allgather_object(leaves)
    out = []
    for i, mine in enumerate(leaves):
        parts = [g[i] for g in gathered]
        shapes = {(p.shape, p.dtype.str) for p in parts}
        if len(shapes) != 1 and not tiled:
            raise ValueError(f"process_allgather: leaf {i} differs between processes: "
                             + ", ".join(f"process {k}: {p.dtype}{list(p.shape)}" for k, p in enumerate(parts)))
        out.append(np.concatenate(parts) if tiled else np.stack(parts))
    return tree_util.tree_unflatten(treedef, out)
