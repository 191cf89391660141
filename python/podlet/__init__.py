"""podlet: a TPU pod on a CPU.

    import podlet as jax
    import podlet.numpy as jnp
"""
import importlib.machinery
import importlib.util
import glob as _glob
import os as _os
import sys as _sys


def _load_core():
    # PODLET_CORE_DIR lets engineers run the Python package against their own CMake
    # build directory without reinstalling.
    d = _os.environ.get("PODLET_CORE_DIR")
    if d:
        hits = _glob.glob(_os.path.join(d, "_core*.so"))
        if not hits:
            raise ImportError(f"PODLET_CORE_DIR={d} holds no _core*.so")
        loader = importlib.machinery.ExtensionFileLoader("podlet._core", hits[0])
        spec = importlib.util.spec_from_file_location("podlet._core", hits[0], loader=loader)
        mod = importlib.util.module_from_spec(spec)
        loader.exec_module(mod)
        _sys.modules["podlet._core"] = mod
        return mod
    from . import _core as mod
    return mod


_core = _load_core()

from . import tree_util  # noqa: E402
from ._src import dtypes as _dtypes  # noqa: E402
from ._src.errors import (PodletError, ShapeError, DTypeError, ConcretizationError,  # noqa: E402
                          UnexpectedTracerError, NonConcreteBooleanIndexError)
from ._src.core import (Array, jit, grad, value_and_grad, vjp, device_get, block_until_ready,  # noqa: E402
                        make_graph, eval_shape, ShapeDtypeStruct)
from ._src.config import config  # noqa: E402
from ._src.batching import vmap  # noqa: E402
from ._src.forward import jvp, linearize, jacfwd, jacrev, jacobian, hessian, linear_transpose  # noqa: E402
from ._src.custom_derivatives import custom_vjp, custom_jvp  # noqa: E402
from ._src.remat import checkpoint, remat, checkpoint_policies  # noqa: E402
from . import ad_checkpoint  # noqa: E402
from . import numpy  # noqa: E402  (installs Array/Tracer methods)
from . import lax  # noqa: E402
from . import random  # noqa: E402
from . import nn  # noqa: E402
from . import struct  # noqa: E402  (podlet.struct.dataclass, as flax.struct)
from . import serialization, traverse_util  # noqa: E402  (as flax.serialization, flax.traverse_util)
from .profiler import profile  # noqa: E402  (podlet.profile; PODLET_PROFILE=1)

__version__ = "0.1.0"
__all__ = ["Array", "jit", "grad", "value_and_grad", "vjp", "vmap", "jvp", "linearize", "jacfwd", "jacrev",
           "jacobian", "hessian", "linear_transpose", "custom_vjp", "custom_jvp", "checkpoint", "remat",
           "checkpoint_policies", "device_get", "block_until_ready", "pmap",
           "devices", "local_devices", "device_count", "local_device_count", "process_count", "process_index",
           "tree_util", "numpy", "lax", "random", "nn", "config", "PodletError", "ShapeError", "DTypeError",
           "debug", "pure_callback", "named_scope", "named_call", "make_jaxpr", "typeof", "device_put",
           "clear_caches", "float0", "print_environment_info", "host_count", "host_id", "host_ids",
           "custom_gradient", "closure_convert", "disable_jit", "ensure_compile_time_eval", "debug_nans",
           "debug_infs", "log_compiles", "checking_leaks", "check_tracer_leaks", "enable_x64",
           "numpy_rank_promotion", "numpy_dtype_promotion", "default_device", "transfer_guard",
           "transfer_guard_host_to_device", "transfer_guard_device_to_host", "transfer_guard_device_to_device",
           "no_tracing", "no_execution", "explain_cache_misses", "threefry_partitionable", "make_user_context",
           "fwd_and_bwd", "sharding", "NamedSharding", "P", "make_mesh", "set_mesh", "reshard",
           "default_matmul_precision", "enable_checks", "debug_key_reuse", "default_prng_impl", "legacy_prng_key",
           "enable_custom_prng", "allow_f16_reductions", "thread_guard", "array_garbage_collection_guard",
           "allow_excess_precision"]


def cpu_info():
    """Which CPU this is (``cpu``: vendor, brand, family, model, stepping), what it offers and
    which kernel ISA podlet uses (PODLET_ISA forces a lower one)."""
    return _core.cpu_info()


from ._src.pmap import (pmap, devices, local_devices, device_count, local_device_count,  # noqa: E402
                        process_count, process_index, Device, ReplicatedArray)
from . import jax_utils  # noqa: E402
from . import debug  # noqa: E402
from ._src.callback import pure_callback  # noqa: E402
from ._src.scopes import named_scope, named_call  # noqa: E402
from ._src.jaxpr import make_jaxpr, typeof  # noqa: E402
from ._src.environment import (print_environment_info, host_count, host_id, host_ids,  # noqa: E402
                               device_put, clear_caches)
from ._src.custom_gradient import custom_gradient, closure_convert  # noqa: E402
from ._src.forward import float0  # noqa: E402
from ._src.config_contexts import (disable_jit, ensure_compile_time_eval, debug_nans, debug_infs,  # noqa: E402
                                   log_compiles, checking_leaks, check_tracer_leaks, enable_x64,
                                   numpy_rank_promotion, numpy_dtype_promotion, default_device,
                                   transfer_guard, transfer_guard_host_to_device,
                                   transfer_guard_device_to_host, transfer_guard_device_to_device,
                                   no_tracing, no_execution, explain_cache_misses, threefry_partitionable,
                                   make_user_context, default_matmul_precision, enable_checks, debug_key_reuse,
                                   default_prng_impl, legacy_prng_key, enable_custom_prng, allow_f16_reductions,
                                   thread_guard, array_garbage_collection_guard, allow_excess_precision)
from ._src.fwd_and_bwd import fwd_and_bwd  # noqa: E402
from . import distributed  # noqa: E402
from .jax_utils import shard, device_put_replicated, device_put_sharded  # noqa: E402
from . import sharding  # noqa: E402  (as jax.sharding)
from ._src.sharding import NamedSharding, PartitionSpec as P, make_mesh, set_mesh, reshard  # noqa: E402
