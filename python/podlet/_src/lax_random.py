"""jax.lax's low-level random number generators (issue 26): rng_bit_generator (with
RandomAlgorithm) and rng_uniform, over podlet's threefry primitives.

The bits are NOT XLA's (XLA's RngBitGenerator streams are backend-defined anyway):
the contract kept is JAX's shape / dtype / key one, and determinism (the same key gives
the same bits and the same next key)."""
import enum
import itertools

import numpy as _np

from .. import lax
from .. import numpy as jnp
from . import dtypes as _dtypes


def _rnd():
    from .. import random  # at call time: podlet.random imports podlet.numpy / lax itself
    return random

__all__ = ["RandomAlgorithm", "rng_bit_generator", "rng_uniform"]


class RandomAlgorithm(enum.IntEnum):
    """The algorithm of rng_bit_generator (jax.lax.RandomAlgorithm). podlet derives the
    bits of every one from threefry2x32, keyed by the algorithm too."""
    RNG_DEFAULT = 0
    RNG_THREE_FRY = 1
    RNG_PHILOX = 2


def _base_key(key, algorithm):
    k = jnp.asarray(key)
    if k.dtype != _dtypes.uint32 or tuple(k.shape) != (4,):
        raise TypeError(f"rng_bit_generator: key must be a uint32 array of shape (4,), got {k.dtype}{tuple(k.shape)}")
    _random = _rnd()
    base = lax.slice(k, [0], [2])
    for i in (2, 3):
        base = _random.fold_in(base, lax.reshape(lax.slice(k, [i], [i + 1]), ()))
    return _random.fold_in(base, int(RandomAlgorithm(algorithm)))


def rng_bit_generator(key, shape, dtype=_np.uint32, algorithm=RandomAlgorithm.RNG_DEFAULT, *, out_sharding=None):
    """jax.lax.rng_bit_generator: (new_key, bits): uniform random bits of `shape` and the
    unsigned `dtype` (uint8 or uint32 in podlet), and the next uint32 (4,) key. A pure
    function of (key, algorithm); the bits differ from XLA's."""
    d = _np.dtype(dtype)
    if d.kind != "u":
        raise TypeError(f"rng_bit_generator: unsupported dtype {d}")
    if d.itemsize not in (1, 4):
        raise TypeError(f"rng_bit_generator: podlet supports uint8 and uint32 bits, got {d}")
    shape = tuple(int(s) for s in shape)
    _random = _rnd()
    base = _base_key(key, algorithm)
    k_bits, k_next = _random.fold_in(base, 0), _random.fold_in(base, 1)
    return _random.bits(k_next, (4,), _np.uint32), _random.bits(k_bits, shape, d)


_calls = itertools.count()


def rng_uniform(a, b, shape):
    """jax.lax.rng_uniform: uniform values in [a, b) of `shape` (a, b scalars of one float
    dtype). Stateful like XLA's RngUniform: each call draws from a process-wide counter,
    so eager calls differ; under jit the draw is fixed when the function is traced (XLA
    makes no promise across executions either)."""
    x, y = jnp.asarray(a), jnp.asarray(b)
    if x.shape != () or y.shape != ():
        raise TypeError(f"rng_uniform: a and b must be scalars, got shapes {tuple(x.shape)} and {tuple(y.shape)}")
    if x.dtype != y.dtype:
        raise TypeError(f"rng_uniform: a and b must have one dtype, got {x.dtype} and {y.dtype}")
    if x.dtype.kind != "f" and x.dtype != _dtypes.bfloat16:
        raise TypeError(f"rng_uniform: podlet draws floating values, got {x.dtype}")
    _random = _rnd()
    k = _random.fold_in(_random.PRNGKey(0x5EED), next(_calls) & 0xFFFFFFFF)
    return _random.uniform(k, tuple(int(s) for s in shape), x.dtype, x, y)
