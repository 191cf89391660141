"""jax's host and runtime helpers: print_environment_info, host_count / host_id /
host_ids (the old names of process_count / process_index), device_put, clear_caches."""
import platform
import sys
import warnings

import numpy as np

from .. import tree_util
from .core import Array, Tracer, to_array


def print_environment_info(return_string: bool = False):
    """podlet's, NumPy's and Python's versions, the devices and the CPU's kernel ISA;
    returned as a string with ``return_string=True``, else printed."""
    import podlet
    from .pmap import local_device_count, process_count
    info = podlet._core.cpu_info()
    isa = info.get("active_isa", "?") if isinstance(info, dict) else info
    text = "\n".join([
        f"podlet: {podlet.__version__}",
        f"numpy:  {np.__version__}",
        f"python: {sys.version}",
        f"device info: cpu-{local_device_count()}, {local_device_count()} local devices",
        f"process_count: {process_count()}",
        f"kernel ISA: {isa}",
        f"platform: {platform.uname()}",
    ]) + "\n"
    if return_string:
        return text
    print(text)
    return None


def host_count(backend=None):
    """Deprecated jax alias of process_count (warns, as jax does)."""
    warnings.warn("podlet.host_count has been renamed to podlet.process_count. This alias will "
                  "eventually be removed; please update your code.", stacklevel=2)
    from .pmap import process_count
    return process_count()


def host_id(backend=None):
    """Deprecated jax alias of process_index (warns, as jax does)."""
    warnings.warn("podlet.host_id has been renamed to podlet.process_index. This alias will "
                  "eventually be removed; please update your code.", stacklevel=2)
    from .pmap import process_index
    return process_index()


def host_ids(backend=None):
    """Deprecated jax: the list of process indices (warns, as jax does)."""
    warnings.warn("podlet.host_ids has been renamed to podlet.process_indices. This alias will "
                  "eventually be removed; please update your code.", stacklevel=2)
    from .pmap import process_count
    return list(range(process_count()))


def _is_device(d):
    from .pmap import Device
    return isinstance(d, Device)


def device_put(x, device=None, *, src=None, donate=False, may_alias=None):
    """Every leaf as a podlet Array (podlet has one host device: nothing moves; Arrays
    and tracers pass through, NumPy arrays and Python scalars are converted, scalars
    keep jax's weak type). A sharding (or a tree prefix of shardings, or a
    PartitionSpec under ``set_mesh``) is checked against each leaf as JAX checks it
    (_src/sharding.py); the values stay where they are, and a leaf split along its
    batch axis comes back committed (``x.sharding``): jit splits its work by it."""
    del src, donate, may_alias
    sharded = device is not None and not _is_device(device)
    if sharded:
        from .sharding import device_put_checked
        device_put_checked(x, device)

    def put(a):
        if isinstance(a, (Array, Tracer)):
            return a
        out = to_array(a)
        if isinstance(a, (int, float)) and not isinstance(a, bool):
            out.weak_type = True
        return out

    out = tree_util.tree_map(put, x)
    if sharded:  # split along the batch axis: a later jit splits its work by them
        from .sharding import commit
        out = commit(out, device)
    return out


def clear_caches():
    """Drops every jit's traced graphs (they are traced again on the next call)."""
    import gc
    from .core import JittedFunction
    for obj in gc.get_objects():
        if isinstance(obj, JittedFunction):
            obj._cache.clear()
            obj._last_key = None
