"""flax.training.common_utils: helpers of pmap-based data-parallel loops.

    batch = common_utils.shard(batch)                    # (B, ...) -> (devices, B // devices, ...)
    rngs = common_utils.shard_prng_key(rng)              # one different key per device
    metrics = common_utils.get_metrics(all_step_metrics) # device 0's copy, stacked over steps
"""
import numpy as np

from .. import numpy as jnp
from .. import random
from .. import tree_util
from .._src.core import device_get
from .._src.pmap import local_device_count

__all__ = ["shard", "shard_prng_key", "stack_forest", "get_metrics", "onehot"]


def shard(xs):
    """Every leaf's leading axis split into (local device count, rest): a batch laid out
    for ``pmap``. NumPy leaves stay NumPy, podlet arrays stay podlet arrays."""
    n = local_device_count()
    return tree_util.tree_map(lambda x: x.reshape((n, -1) + tuple(x.shape[1:])), xs)


def shard_prng_key(prng_key):
    """``random.split(prng_key, local device count)``: a different key per device (for
    dropout and other per-replica randomness)."""
    return random.split(prng_key, num=local_device_count())


def stack_forest(forest):
    """A sequence of pytrees of one structure -> one pytree whose leaves are stacked."""
    return tree_util.tree_map(lambda *args: jnp.stack(args), *forest)


def get_metrics(device_metrics):
    """A sequence (over steps) of replicated metric pytrees, as returned by a pmapped
    step -> device 0's values, on the host, stacked over steps."""
    device_metrics = tree_util.tree_map(lambda x: x[0], device_metrics)
    return stack_forest(device_get(device_metrics))


def onehot(labels, num_classes, on_value=1.0, off_value=0.0):
    """A float32 one-hot encoding of the integer `labels` along a new last axis of size
    `num_classes` (``on_value`` at the label, ``off_value`` elsewhere). ``jax.nn.one_hot``
    (``nn.one_hot``) is the more standard spelling."""
    labels = jnp.asarray(labels)
    x = labels[..., None] == jnp.arange(num_classes).reshape((1,) * labels.ndim + (-1,))
    x = jnp.where(x, jnp.full(x.shape, on_value), jnp.full(x.shape, off_value))
    return x.astype(np.float32)
