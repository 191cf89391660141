"""jax.pure_callback: a Python function whose result feeds the computation.

podlet's C++ engine has no host-callback primitive (the core never calls up into
Python: CONTRIBUTING "Layers"), so a callback cannot sit inside a compiled graph.
What podlet does instead, all with the values of this call:

* eagerly: calls ``callback`` with podlet Arrays (jax 0.10.2 passes jax Arrays) and
  checks the result against ``result_shape_dtypes`` (jax's RuntimeError messages);
* under ``jit``: tracing meets a tracer and raises :class:`HostCallbackError`; jit
  catches it and runs the function op by op for that signature (the same bits as the
  compiled graph: eager == jit is a podlet invariant), so the callback runs once per
  call with run-time values;
* under ``vmap`` with a ``vmap_method``: the vmapped function runs op by op once per
  batch element and the results are stacked (for every method: the callback sees one
  element's arguments, where jax's 'expand_dims' / 'broadcast_all' pass the batch);
  without one, jax's NotImplementedError;
* under ``grad``: jax's "Pure callbacks do not support JVP" ValueError.

Inside scan / while_loop / cond bodies and other traces the HostCallbackError (a
ValueError and TypeError) says what is missing.
"""
import numpy as np

from .. import tree_util
from . import dtypes
from .core import HostCallbackError, Tracer, _trace_stack, to_array

_VMAP_METHODS = ("sequential", "sequential_unrolled", "expand_dims", "broadcast_all",
                 "legacy_vectorized")


def pure_callback(callback, result_shape_dtypes, *args, sharding=None, vmap_method=None,
                  **kwargs):
    """Calls ``callback(*args, **kwargs)`` and returns its result as arrays of
    ``result_shape_dtypes`` (a pytree of objects with ``shape`` and ``dtype``)."""
    del sharding  # one host device
    if vmap_method is not None and vmap_method not in _VMAP_METHODS:
        raise ValueError(f"vmap_method must be one of the allowed methods {_VMAP_METHODS}, "
                         f"but got: {vmap_method}")
    leaves = tree_util.tree_leaves((args, kwargs))
    if any(isinstance(x, Tracer) for x in leaves) or _trace_stack:
        raise HostCallbackError(
            "pure_callback was called on traced values: podlet's compiled graphs cannot call "
            "Python (its C++ engine has no host-callback primitive). jit and vmap (with a "
            "vmap_method) run such a function op by op; inside grad, scan, while_loop, cond "
            "or remat bodies the callback has no values to run on",
            vmap_method=vmap_method)
    a, kw = tree_util.tree_map(
        lambda x: to_array(x) if isinstance(x, (np.ndarray, np.generic, bool, int, float)) else x,
        (args, kwargs))
    result = callback(*a, **kw)
    specs, spec_tree = tree_util.tree_flatten(result_shape_dtypes)
    outs = tree_util.tree_leaves(result)
    if len(outs) != len(specs):
        raise RuntimeError(f"Incorrect number of return values: expected {len(specs)}, "
                           f"got {len(outs)}")
    converted = []
    for i, (o, s) in enumerate(zip(outs, specs)):
        o = np.asarray(o)
        want = dtypes.canonicalize(s.dtype)
        if tuple(o.shape) != tuple(s.shape):
            raise RuntimeError(f"Incorrect output shape for return value #{i}: "
                               f"Expected: {tuple(s.shape)}, Actual: {tuple(o.shape)}")
        if dtypes.canonicalize(o.dtype) != want:
            raise RuntimeError(f"Incorrect output dtype for return value #{i}: "
                               f"Expected: {np.dtype(want).name}, Actual: {o.dtype.name}")
        converted.append(to_array(o, want))
    return tree_util.tree_unflatten(spec_tree, converted)
