"""flax.jax_utils: replicate / unreplicate / prefetch_to_device, plus
flax.training.common_utils.shard (also exported as podlet.shard)."""
import collections
import itertools

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
