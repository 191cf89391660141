"""flax.jax_utils: replicate / unreplicate / prefetch_to_device, pad_shard_unpad,
scan_in_dim, partial_eval_by_shape and pmean, plus
flax.training.common_utils.shard (also exported as podlet.shard)."""
import collections
import itertools
import warnings
from collections.abc import Iterable

import numpy as np

from . import tree_util
from ._src.core import Array, to_array
from ._src.pmap import ReplicatedArray, local_device_count


def _n(devices):
    return len(devices) if devices is not None else local_device_count()


def replicate(tree, devices=None):
    """A copy of every leaf on each local device (stored once: a ReplicatedArray)."""
    n = _n(devices)

    def one(x):
        if isinstance(x, ReplicatedArray):
            return x if x._n == n else ReplicatedArray(x._value, n)
        weak = isinstance(x, (int, float)) and not isinstance(x, bool) or getattr(x, "weak_type", False)
        r = ReplicatedArray(to_array(x), n)
        r.weak_type = weak
        return r
    return tree_util.tree_map(one, tree)


def unreplicate(tree):
    """Device 0's copy of every leaf."""
    return tree_util.tree_map(lambda x: x[0], tree)


def shard(xs):
    """Reshapes every leaf's leading axis B to (local devices, B // local devices)."""
    n = local_device_count()

    def one(x):
        x = np.asarray(x)
        if x.ndim == 0 or x.shape[0] % n:
            raise ValueError(f"shard: leading axis of shape {x.shape} is not divisible by the "
                             f"{n} local devices")
        return x.reshape((n, x.shape[0] // n) + x.shape[1:])
    return tree_util.tree_map(one, xs)


def shard_prng_key(prng_key):
    """A different key per local device: jax.random.split(key, n), as
    flax.training.common_utils.shard_prng_key (flax.jax_utils has no such name; it stays
    here for code written against earlier podlet)."""
    from .training.common_utils import shard_prng_key as split_per_device
    return split_per_device(prng_key)


def prefetch_to_device(iterator, size, devices=None):
    """Yields the iterator's pytrees with their leaves already converted to podlet Arrays,
    keeping `size` items converted ahead (the host->device copy of JAX's version)."""
    queue = collections.deque()

    def put(k):
        for data in itertools.islice(iterator, k):
            queue.append(tree_util.tree_map(lambda x: x if isinstance(x, (Array, ReplicatedArray)) else to_array(x),
                                            data))

    put(max(int(size), 1))
    while queue:
        yield queue.popleft()
        put(1)


def device_put_replicated(x, devices):
    return replicate(x, devices)


def device_put_sharded(shards, devices):
    if len(shards) != len(devices):
        raise ValueError(f"device_put_sharded got {len(shards)} shards for {len(devices)} devices")
    return tree_util.tree_map(lambda *xs: to_array(np.stack([np.asarray(x) for x in xs])), *shards)


def pmean(xs, axis_name):
    """Deprecated flax alias of lax.pmean (warns, as flax does)."""
    warnings.warn("use jax.lax.pmean instead", DeprecationWarning)
    from . import lax
    return lax.pmean(xs, axis_name)


def _parse_spec(spec):
    """A ShapeDtypeStruct from ``shape`` or ``(shape, dtype)`` (float32 by default)."""
    from ._src.core import ShapeDtypeStruct
    spec = tuple(spec)
    if len(spec) == 2 and isinstance(spec[0], Iterable):
        return ShapeDtypeStruct(tuple(spec[0]), spec[1])
    return ShapeDtypeStruct(spec, np.float32)


def partial_eval_by_shape(fn, input_spec, *args, **kwargs):
    """``fn(*inputs, *args, **kwargs)`` traced on inputs given only by shape: outputs
    that do not depend on the inputs come back as values, the others as
    ShapeDtypeStructs (like eval_shape, keeping what is computable)."""
    from ._src.core import ShapeDtypeStruct, _Traced, Tracer
    structs = [_parse_spec(spec) for spec in input_spec]
    leaves, in_tree = tree_util.tree_flatten((tuple(structs), {}))
    sig = [(np.dtype(s.dtype).name, tuple(s.shape), False) for s in leaves]
    entry = _Traced(lambda a, k: fn(*a, *args, **kwargs), sig, in_tree, effects=True)
    outs = [ShapeDtypeStruct(o.shape, o.dtype) if isinstance(o, Tracer) else o
            for o in entry.out_leaves_raw]
    return tree_util.tree_unflatten(entry.out_tree, outs)


def _scan_nd(body_fn, init, xs, n=1, unroll=(1,)):
    from . import lax
    if n == 1:
        return lax.scan(body_fn, init, xs, unroll=unroll[0])

    def scan_body(c, x):
        return _scan_nd(body_fn, c, x, n=n - 1, unroll=unroll[1:])

    return lax.scan(scan_body, init, xs, unroll=unroll[0])


def _invert_perm(perm):
    inv = [0] * len(perm)
    for i, j in enumerate(perm):
        inv[j] = i
    return tuple(inv)


def scan_in_dim(body_fn, init, xs, axis=(0,), unroll=(1,), keepdims=False):
    """lax.scan along ``axis`` (an int or a tuple of axes, scanned outermost first) of
    every leaf of ``xs``; ``keepdims`` gives the body slices with the scanned axes kept
    at size 1. ``unroll`` is left-padded with ones to the number of axes."""
    if not isinstance(axis, Iterable):
        axis = (axis,)
    axis = tuple(axis)
    if not isinstance(unroll, Iterable):
        unroll = (unroll,)
    unroll = (1,) * (len(axis) - len(unroll)) + tuple(unroll)

    def perm_of(x):
        return axis + tuple(int(i) for i in np.delete(np.arange(x.ndim), axis))

    def transpose_in(x):
        return x.transpose(perm_of(x))

    def transpose_out(x):
        return x.transpose(_invert_perm(perm_of(x)))

    def body_wrapper(c, xs):
        if keepdims:
            xs = tree_util.tree_map(lambda x: x.reshape((1,) * len(axis) + x.shape), xs)
            xs = tree_util.tree_map(transpose_out, xs)
        c, ys = body_fn(c, xs)
        if keepdims:
            ys = tree_util.tree_map(transpose_in, ys)
            ys = tree_util.tree_map(lambda x: x.reshape(x.shape[len(axis):]), ys)
        return c, ys

    xs = tree_util.tree_map(transpose_in, xs)
    c, ys = _scan_nd(body_wrapper, init, xs, n=len(axis), unroll=unroll)
    return c, tree_util.tree_map(transpose_out, ys)


def pad_shard_unpad(wrapped, static_argnums=(0,), static_argnames=(), static_return=False):
    """Wraps a pmapped ``wrapped(params, *args, **kw)``: pads the batch (leading axis)
    of the non-static arguments to a multiple of the local device count (at least
    ``min_device_batch`` per device when given), shards it as (devices, batch / devices,
    ...), calls ``wrapped``, and un-shards and un-pads the result (unless
    ``static_return``). Padding and un-padding happen in host memory, as in flax."""
    def pad_shard_unpad_wrapper(*args, min_device_batch=None, **kw):
        d = local_device_count()
        batch_sizes = set()
        for i, a in enumerate(args):
            if i not in static_argnums:
                batch_sizes |= {t.shape[0] for t in tree_util.tree_leaves(a)}
        for k, v in kw.items():
            if k not in static_argnames:
                batch_sizes |= {t.shape[0] for t in tree_util.tree_leaves(v)}
        assert len(batch_sizes) == 1, f"Inconsistent batch-sizes: {batch_sizes}"
        b = batch_sizes.pop()

        def pad(x):
            x = np.asarray(x)
            _, *shape = x.shape
            db, rest = divmod(b, d)
            if rest:
                x = np.concatenate([x, np.zeros((d - rest, *shape), x.dtype)], axis=0)
                db += 1
            if min_device_batch and db < min_device_batch:
                x = np.concatenate([x, np.zeros((d * (min_device_batch - db), *shape), x.dtype)])
                db = min_device_batch
            return x.reshape(d, db, *shape)

        def maybe_pad(tree, actually_pad=True):
            return tree_util.tree_map(pad, tree) if actually_pad else tree

        args = [maybe_pad(a, i not in static_argnums) for i, a in enumerate(args)]
        kw = {k: maybe_pad(v, k not in static_argnames) for k, v in kw.items()}
        out = wrapped(*args, **kw)

        def unpad(x):
            x = np.asarray(x)
            return x.reshape([int(np.prod(x.shape[:2])), *x.shape[2:]])[:b]

        return out if static_return else tree_util.tree_map(unpad, out)

    return pad_shard_unpad_wrapper
