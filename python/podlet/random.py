"""podlet.random: jax.random's API, with the same keys and the same bits.

A key is what ``jax.random.PRNGKey`` returns: a uint32 array of shape (2,) (podlet has
no typed key arrays, so ``key`` is ``PRNGKey`` and ``key_data`` / ``wrap_key_data`` are
the identity). Every function reproduces jax 0.10.2's default PRNG ("threefry2x32",
``jax_threefry_partitionable=True``) bit for bit: the same keys from ``PRNGKey``,
``split`` and ``fold_in``, the same ``bits``, and the same floats from ``uniform``,
``normal``, ``truncated_normal``, ``bernoulli``, ``randint`` and ``permutation`` in
float32 and bfloat16 (the C++ samplers replay the exact float operations XLA:CPU runs,
FMAs included); ``gumbel``, ``categorical``, ``exponential``, ``laplace``, ``logistic``
and ``rademacher`` apply jax's formulas to those uniforms (equal up to the last bit of
log / log1p; categorical's indices equal). float64 (x64 enabled) draws the same bits; ``uniform`` and ``bernoulli``
match bitwise, ``normal`` / ``truncated_normal`` to ~1e-13 relative (different erf_inv).

The long tail (``gamma``, ``loggamma``, ``beta``, ``dirichlet``, ``chisquare``, ``f``,
``t``, ``poisson``, ``binomial``, ``multinomial``, ``cauchy``, ``lognormal``, ``pareto``,
``maxwell``, ``double_sided_maxwell``, ``weibull_min``, ``rayleigh``, ``wald``,
``triangular``, ``geometric``, ``generalized_normal``, ``ball``, ``random_gamma_p``,
``key_dtype``) lives in ``_src/random_dists.py``: jax's algorithms (key splits,
rejection loops) on these samplers, so poisson / binomial / multinomial / geometric /
triangular draws equal jax's bit for bit and the others agree to a few ulp (the last
bits of log / exp / log1p / tan, and of XLA:CPU's approximate rsqrt in gamma);
``gamma`` is differentiable in ``a`` like jax's. With x64,
``poisson`` and ``geometric`` still return int32.

    key = podlet.random.PRNGKey(0)
    key, sub = podlet.random.split(key)
    w = podlet.random.normal(sub, (3, 3))

Everything works eagerly and under ``podlet.jit`` (a traced key or a traced ``fold_in``
datum, e.g. ``lax.axis_index``, is fine). One jax quirk is not copied: inside
``jax.jit``, ``truncated_normal`` with literal (Python-float) bounds lets XLA
constant-fold erf(bound) with its compile-time evaluator, which can differ from the
runtime erf that eager jax (and jit with array bounds) use; podlet always gives the
runtime result. With x64, ``bits`` still defaults to uint32 (podlet has no uint64) and
``randint`` to int32. Set ``podlet.random.threefry_partitionable =
False`` (or ``config.update("jax_threefry_partitionable", False)`` where the config knows
it) to reproduce jax's legacy non-partitionable scheme.
"""
import math as _math
from collections.abc import Sequence as _Sequence

import numpy as _np

from ._src import dtypes as _dtypes
from ._src.core import Array, Tracer, bind, to_array

__all__ = ["PRNGKey", "key", "key_data", "wrap_key_data", "key_impl", "clone", "split", "fold_in",
           "bits", "uniform", "normal", "truncated_normal", "bernoulli", "randint", "permutation",
           "shuffle", "choice"]

# None: follow podlet.config's "threefry_partitionable" if it has one, else jax's
# default (True).
threefry_partitionable = None


def _partitionable():
    if threefry_partitionable is not None:
        return int(bool(threefry_partitionable))
    from ._src.config import config
    try:
        return int(bool(config.threefry_partitionable))
    except AttributeError:
        return 1


def _is_array(x):
    return isinstance(x, (Array, Tracer))


def _shape(shape, name="shape"):
    if isinstance(shape, (int, _np.integer)):
        shape = (shape,)
    try:
        shape = tuple(int(_np.asarray(d).item()) if not isinstance(d, int) else d for d in shape)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of integers, got {shape!r}") from None
    if any(d < 0 for d in shape):
        raise ValueError(f"{name} must not have negative dimensions, got {shape}")
    return shape


def _float_dtype(dtype, fname):
    if dtype is None:
        return _dtypes.float64 if _dtypes.x64_enabled() else _dtypes.float32
    d = _dtypes.canonicalize(dtype)
    if not _dtypes.is_float(d):
        raise ValueError(f"dtype argument to `{fname}` must be a float dtype, got {_np.dtype(dtype)}")
    return d


def _as(x, dtype):
    """x as a podlet value of `dtype` (converting tracers with a primitive)."""
    if _is_array(x):
        return x if x.dtype == dtype else bind("convert_element_type", x, new_dtype=dtype.name)
    return to_array(_np.asarray(x, dtype=dtype))


def _key(key, name, allow_batched=False):
    """Validates a raw threefry key (uint32, shape (2,)) and returns it as a podlet value."""
    if not _is_array(key):
        k = _np.asarray(key)
        if k.dtype != _np.uint32:
            raise TypeError(f"{name}: JAX encountered invalid PRNG key data: expected key_data.dtype = uint32; "
                            f"got dtype={k.dtype}")
        key = to_array(k)
    if key.dtype != _dtypes.uint32:
        raise TypeError(f"{name}: JAX encountered invalid PRNG key data: expected key_data.dtype = uint32; "
                        f"got dtype={key.dtype}")
    if len(key.shape) == 0 or key.shape[-1] != 2:
        raise TypeError(f"{name}: JAX encountered invalid PRNG key data: expected key_data.shape to end with (2,); "
                        f"got shape={tuple(key.shape)} for impl=PRNGImpl(threefry2x32)")
    if not allow_batched and len(key.shape) != 1:
        raise ValueError(f"{name} accepts a single key, but was given a key array of shape {tuple(key.shape)} "
                         "!= (). Use jax.vmap for batching.")
    return key


# ---------------------------------------------------------------------------------
# keys
# ---------------------------------------------------------------------------------
def PRNGKey(seed, *, impl=None):
    """A raw key (uint32[2]) from an integer seed, like jax.random.PRNGKey.

    With x64 disabled (the default) the key is [0, seed mod 2**32]; with x64 enabled a
    64-bit seed is split into [high word, low word]. Python ints outside int64 raise
    OverflowError, as in jax.
    """
    if impl is None:  # jax's default_prng_impl flag (podlet.default_prng_impl)
        from ._src.config import flags
        impl = flags["default_prng_impl"]
    if impl != "threefry2x32":
        raise ValueError(f"podlet.random only implements impl='threefry2x32', got {impl!r} (the impl argument or "
                         "config.default_prng_impl)")
    if _is_array(seed):
        if seed.shape != ():
            raise TypeError(f"PRNGKey accepts a scalar seed, but was given an array of shape {seed.shape} != (). "
                            "Use jax.vmap for batching")
        if not (_dtypes.is_int(seed.dtype) or seed.dtype == _dtypes.bool_):
            raise TypeError(f"PRNG key seed must be an integer; got {seed!r}")
        return bind("random_seed", seed)
    if isinstance(seed, int):  # bool included, like jax
        s = int(_np.int64(seed))  # OverflowError outside int64, as in jax
        if not _dtypes.x64_enabled():
            s = int(_np.int64(s).astype(_np.int32))  # jax canonicalises the seed to int32
    else:
        a = _np.asarray(seed)
        if a.ndim:
            raise TypeError(f"PRNGKey accepts a scalar seed, but was given an array of shape {a.shape} != (). "
                            "Use jax.vmap for batching")
        if not (_np.issubdtype(a.dtype, _np.integer) or a.dtype == _np.bool_):
            raise TypeError(f"PRNG key seed must be an integer; got {seed!r}")
        if a.dtype.itemsize > 4 and not _dtypes.x64_enabled():
            a = a.astype(_np.int32 if _np.issubdtype(a.dtype, _np.signedinteger) else _np.uint32)
        s = int(a)
    u = s % (1 << 64) if _dtypes.x64_enabled() else s % (1 << 32)
    return to_array(_np.array([(u >> 32) & 0xFFFFFFFF, u & 0xFFFFFFFF], dtype=_np.uint32))


def key(seed, *, impl=None, dtype=None):
    """jax.random.key. podlet has no typed key arrays: returns the raw key of PRNGKey."""
    return PRNGKey(seed, impl=impl if dtype is None else dtype)


def key_data(keys):
    """The uint32 data of a key array: the key itself (keys are raw in podlet)."""
    return _key(keys, "key_data", allow_batched=True)


def wrap_key_data(key_bits_array, *, impl=None, dtype=None):
    """Inverse of key_data: validates and returns the raw key array."""
    return _key(key_bits_array, "wrap_key_data", allow_batched=True)


def key_impl(keys):
    _key(keys, "key_impl", allow_batched=True)
    return "threefry2x32"


def clone(key):
    return key


def split(key, num=2):
    """Splits a key into `num` new keys (an int or a shape): uint32[*num, 2]."""
    key = _key(key, "split")
    shape = tuple(num) if isinstance(num, _Sequence) else (num,)
    return bind("random_split", key, shape=list(_shape(shape, "num")), partitionable=_partitionable())


def fold_in(key, data):
    """A new key from `key` and a 32-bit integer `data` (concrete or traced)."""
    key = _key(key, "fold_in")
    if _np.ndim(data) if not _is_array(data) else len(data.shape):
        raise TypeError(f"fold_in accepts a scalar, but was given an array of shape {_np.shape(data)} != (). "
                        "Use jax.vmap for batching.")
    if _is_array(data):
        if not (_dtypes.is_int(data.dtype) or data.dtype == _dtypes.bool_):
            raise TypeError(f"fold_in data must be an integer, got {data.dtype}")
    else:
        a = _np.asarray(data)
        if isinstance(data, int):
            a = _np.asarray(data, dtype=_np.uint32)  # OverflowError for negative / huge ints, as in jax
        elif not (_np.issubdtype(a.dtype, _np.integer) or a.dtype == _np.bool_):
            raise TypeError(f"fold_in data must be an integer, got {a.dtype}")
        data = to_array(a.astype(_np.uint32))
    return bind("random_fold_in", key, data)


# ---------------------------------------------------------------------------------
# samplers
# ---------------------------------------------------------------------------------
def bits(key, shape=(), dtype=None):
    """Uniform random bits as unsigned integers (uint32 by default; uint8 also)."""
    key = _key(key, "bits")
    d = _np.dtype(_np.uint32 if dtype is None else dtype)
    if d.kind != "u":
        raise ValueError(f"dtype argument to `bits` must be an unsigned int dtype, got {d}")
    if d.itemsize not in (1, 4):
        raise _dtypes_error(f"podlet.random.bits supports uint8 and uint32, got {d} (podlet has no {d} arrays)")
    return bind("random_bits", key, shape=list(_shape(shape)), bit_width=8 * d.itemsize,
                partitionable=_partitionable())


def _dtypes_error(msg):
    from ._src.errors import DTypeError
    return DTypeError(msg)


def uniform(key, shape=(), dtype=None, minval=0., maxval=1.):
    """Uniform floats in [minval, maxval) (minval/maxval broadcast to `shape`)."""
    key = _key(key, "uniform")
    d = _float_dtype(dtype, "uniform")
    return bind("random_uniform", key, _as(minval, d), _as(maxval, d), shape=list(_shape(shape)),
                partitionable=_partitionable())


def normal(key, shape=(), dtype=None):
    """Standard normal floats: sqrt(2) * erf_inv(uniform(nextafter(-1, 0), 1))."""
    key = _key(key, "normal")
    d = _float_dtype(dtype, "normal")
    return bind("random_normal", key, shape=list(_shape(shape)), dtype=d.name, partitionable=_partitionable())


def truncated_normal(key, lower, upper, shape=None, dtype=None):
    """Standard normal floats truncated to the open interval (lower, upper)."""
    key = _key(key, "truncated_normal")
    d = _float_dtype(dtype, "truncated_normal")
    lo, hi = _as(lower, d), _as(upper, d)
    if shape is None:
        shape = _np.broadcast_shapes(tuple(lo.shape), tuple(hi.shape))
    return bind("random_truncated_normal", key, lo, hi, shape=list(_shape(shape)), partitionable=_partitionable())


def bernoulli(key, p=0.5, shape=None, mode="low"):
    """Booleans that are True with probability p (uniform(key, shape, p.dtype) < p)."""
    if mode not in ("high", "low"):
        raise ValueError(f"got mode={mode!r}, expected 'high' or 'low'")
    key = _key(key, "bernoulli")
    if _is_array(p):
        if not _dtypes.is_float(p.dtype):
            raise TypeError(f"bernoulli probability `p` must have a floating dtype, got {p.dtype}.")
    else:
        a = _np.asarray(p)
        if isinstance(p, float):
            d = _float_dtype(None, "bernoulli")
        elif _dtypes.is_float(a.dtype):
            d = _dtypes.canonicalize(a.dtype)
        else:
            raise TypeError(f"bernoulli probability `p` must have a floating dtype, got {a.dtype}.")
        p = to_array(a.astype(d))
    if shape is None:
        shape = tuple(p.shape)
    return bind("random_bernoulli", key, p, shape=list(_shape(shape)), mode=mode, partitionable=_partitionable())


def _int_bound(v, name):
    if _is_array(v):
        if _dtypes.is_float(v.dtype):
            return bind("convert_element_type", v, new_dtype="int32")
        if v.dtype == _dtypes.bool_:
            return bind("convert_element_type", v, new_dtype="int32")
        return v
    a = _np.asarray(v)
    if isinstance(v, int) and not isinstance(v, bool):
        if not -2**31 <= v < 2**31:
            raise OverflowError(f"Python int {v} too large to convert to int32 ({name} of randint)")
        a = _np.asarray(v, dtype=_np.int32)
    elif a.dtype.kind == "f":
        a = a.astype(_np.int32)
    elif a.dtype.kind not in "iub":
        raise TypeError(f"randint {name} must be an integer, got {a.dtype}")
    return to_array(a.astype(_dtypes.canonicalize(a.dtype) if a.dtype != _np.bool_ else _np.int32))


def randint(key, shape, minval, maxval, dtype=None):
    """Integers uniform in [minval, maxval) (jax's two-draw modulus method)."""
    key = _key(key, "randint")
    d = _dtypes.int32 if dtype is None else _np.dtype(dtype)
    if d.kind not in "iu":
        raise TypeError(f"randint only accepts integer dtypes, got {d}")
    if d.itemsize == 8 and not _dtypes.x64_enabled():
        d = _dtypes.canonicalize(d)
    if d not in (_dtypes.int32, _dtypes.uint32, _dtypes.uint8):
        raise _dtypes_error(f"podlet.random.randint supports int32, uint32 and uint8, got {d}")
    return bind("random_randint", key, _int_bound(minval, "minval"), _int_bound(maxval, "maxval"),
                shape=list(_shape(shape)), dtype=d.name, partitionable=_partitionable())


def _perm_indices(key, shape, axis):
    return bind("random_permutation_indices", key, shape=list(shape), axis=axis, partitionable=_partitionable())


def permutation(key, x, axis=0, independent=False):
    """A shuffled arange(x) (x an int) or x shuffled along `axis` (rows moved together
    unless independent=True), by jax's repeated stable sort on random 32-bit keys."""
    key = _key(key, "permutation")
    if not _is_array(x) and _np.ndim(x) == 0:
        if not _np.issubdtype(_np.asarray(x).dtype, _np.integer):
            raise TypeError("x must be an integer or at least 1-dimensional")
        n = int(x)
        if n < 0:
            raise ValueError(f"permutation of a negative size {n}")
        return _perm_indices(key, (n,), 0)
    if not _is_array(x):
        x = to_array(_np.asarray(x))
    nd = len(x.shape)
    if nd == 0:
        if not _dtypes.is_int(x.dtype):
            raise TypeError("x must be an integer or at least 1-dimensional")
        from ._src.errors import ConcretizationError
        if isinstance(x, Tracer):
            raise ConcretizationError("argument x of jax.random.permutation() must be concrete (a Python int)")
        return _perm_indices(key, (int(_np.asarray(x)),), 0)
    if not -nd <= axis < nd:
        raise ValueError(f"axis {axis} is out of bounds for array of dimension {nd}")
    axis %= nd
    if independent or nd == 1:
        idx = _perm_indices(key, tuple(x.shape), axis)
        return bind("take_along_axis", x, idx, axis=axis)
    idx = _perm_indices(key, (x.shape[axis],), 0)
    return bind("take", x, idx, axis=axis)


def shuffle(key, x, axis=0):
    """Shuffles each slice of x along `axis` independently (jax's removed random.shuffle)."""
    return permutation(key, x, axis=axis, independent=True)


def choice(key, a, shape=(), replace=True, p=None, axis=0, mode=None):
    """A random sample of a (an array, or arange(a) for an int), like jax.random.choice.

    Supported: replace=True with or without p, and replace=False without p (both
    bitwise like jax, except that with p the cumulative sum may differ from XLA's in the
    last bit). replace=False with p (jax's Gumbel top-k) raises NotImplementedError.
    """
    from . import numpy as jnp
    key = _key(key, "choice")
    if not isinstance(shape, _Sequence):
        raise TypeError(f"shape argument of jax.random.choice must be a sequence, got {shape}")
    shape = _shape(shape)
    arr = a if _is_array(a) else to_array(_np.asarray(a))
    if len(arr.shape) == 0:
        if isinstance(arr, Tracer):
            from ._src.errors import ConcretizationError
            raise ConcretizationError("The error occurred in jax.random.choice(): `a` must be concrete")
        n_inputs = int(_np.asarray(arr))
    else:
        if not -len(arr.shape) <= axis < len(arr.shape):
            raise ValueError(f"axis {axis} is out of bounds for array of dimension {len(arr.shape)}")
        axis %= len(arr.shape)
        n_inputs = arr.shape[axis]
    n_draws = _math.prod(shape)
    if n_draws == 0:
        return jnp.zeros(shape, dtype=arr.dtype)
    if n_inputs <= 0:
        raise ValueError("a must be greater than 0 unless no samples are taken")
    if not replace and n_draws > n_inputs:
        raise ValueError(f"Cannot take a larger sample (size {n_draws}) than population (size {n_inputs}) "
                         "when 'replace=False'")
    if p is None:
        if replace:
            ind = randint(key, shape, 0, n_inputs)
            result = ind if len(arr.shape) == 0 else bind("take", arr, ind, axis=axis)
        else:
            from . import lax
            perm = permutation(key, n_inputs if len(arr.shape) == 0 else arr, axis)
            result = lax.slice_in_dim(perm, 0, n_draws, axis=0 if len(arr.shape) == 0 else axis)
    else:
        p_arr = p if _is_array(p) else to_array(_np.asarray(p, dtype=_float_dtype(None, "choice")))
        if not _dtypes.is_float(p_arr.dtype):
            p_arr = jnp.astype(p_arr, _float_dtype(None, "choice"))
        if tuple(p_arr.shape) != (n_inputs,):
            raise ValueError("p must be None or a 1D vector with the same size as a.shape[axis]. "
                             f"p has shape {tuple(p_arr.shape)} and a.shape[axis] is {n_inputs}.")
        if not replace:
            raise NotImplementedError("podlet.random.choice(replace=False, p=...) (jax's Gumbel top-k) is not "
                                      "implemented")
        p_cuml = jnp.cumsum(p_arr)
        r = p_cuml[-1] * (1 - uniform(key, shape, dtype=p_cuml.dtype))
        # searchsorted(p_cuml, r, side='left') == number of entries < r
        ind = jnp.sum(jnp.astype(p_cuml < jnp.expand_dims(r, -1), _np.int32), axis=-1)
        result = ind if len(arr.shape) == 0 else bind("take", arr, ind, axis=axis)
    out_shape = shape if len(arr.shape) == 0 else tuple(arr.shape[:axis]) + shape + tuple(arr.shape[axis + 1:])
    return jnp.reshape(result, out_shape)


# ---- distributions built on uniform (jax 0.10.2's formulas, so the same draws up to the
# last bit of log / log1p) ----------------------------------------------------------------
def _finfo(d):
    import ml_dtypes
    return ml_dtypes.finfo(d)


def _tiny(d):
    return float(_finfo(d).tiny)


def gumbel(key, shape=(), dtype=None, mode="low"):
    """Standard Gumbel samples: -log(-log(uniform(tiny, 1))); mode='high' adds the low
    bits of a second uniform (jax's formula) for more resolution near 1."""
    from . import numpy as jnp
    if mode not in ("low", "high"):
        raise ValueError(f"gumbel: mode must be 'low' or 'high', got {mode!r}")
    d = _float_dtype(dtype, "gumbel")
    shape = tuple(_shape(shape))
    if mode == "high":
        hl = uniform(key, (2,) + shape, d, 0., 1.)
        high, low = hl[0], hl[1]
        nmant = _finfo(d).nmant
        x = jnp.where(high >= 0.5, high, high + 2.0 ** -nmant * low + _tiny(d))
        return -jnp.log(-jnp.log1p(-x))
    return -jnp.log(-jnp.log(uniform(key, shape, d, _tiny(d), 1.)))


def categorical(key, logits, axis=-1, shape=None, replace=True, mode=None):
    """Samples of category indices from unnormalised log-probabilities along `axis` (the
    Gumbel-max trick, as jax: argmax of logits + gumbel; without replacement: top-k)."""
    from . import numpy as jnp
    from . import lax
    logits = jnp.asarray(logits)
    nd = logits.ndim
    if not -nd <= axis < nd:
        raise ValueError(f"categorical: axis {axis} is out of bounds for logits of rank {nd}")
    batch_shape = tuple(_np.delete(_np.array(logits.shape, dtype=_np.int64), axis).tolist())
    if shape is None:
        shape = batch_shape
    else:
        shape = tuple(_shape(shape))
        if shape[len(shape) - len(batch_shape):] != batch_shape:
            raise ValueError(f"categorical: shape {shape} must end with the logits' batch shape {batch_shape}")
    mode = mode or "low"
    prefix = shape[:len(shape) - len(batch_shape)]
    if replace:
        if axis >= 0:
            axis -= nd
        lshape = list(shape[len(shape) - len(batch_shape):])
        lshape.insert(axis % nd, logits.shape[axis])
        g = gumbel(key, (*prefix, *lshape), logits.dtype, mode=mode)
        return jnp.argmax(g + jnp.reshape(logits, (1,) * len(prefix) + tuple(logits.shape)), axis=axis)
    logits = logits + gumbel(key, tuple(logits.shape), logits.dtype, mode=mode)
    k = int(_np.prod(prefix)) if prefix else 1
    if k > logits.shape[axis]:
        raise ValueError(f"Number of samples without replacement ({k}) cannot exceed number of categories "
                         f"({logits.shape[axis]}).")
    _, idx = lax.top_k(jnp.moveaxis(logits, axis, -1), k)
    return jnp.reshape(jnp.moveaxis(idx, -1, 0), shape)


def exponential(key, shape=(), dtype=None):
    """Standard exponential samples: -log1p(-uniform)."""
    from . import numpy as jnp
    d = _float_dtype(dtype, "exponential")
    return -jnp.log1p(-uniform(key, tuple(_shape(shape)), d))


def laplace(key, shape=(), dtype=None):
    """Standard Laplace samples: sign(u) * log1p(-|u|), u uniform in (-1, 1)."""
    from . import numpy as jnp
    d = _float_dtype(dtype, "laplace")
    epsneg = float(_finfo(d).epsneg)
    u = uniform(key, tuple(_shape(shape)), d, -1. + epsneg, 1.)
    return jnp.sign(u) * jnp.log1p(-jnp.abs(u))


def logistic(key, shape=(), dtype=None):
    """Standard logistic samples: log(x) - log1p(-x), x uniform in (tiny, 1)."""
    from . import numpy as jnp
    d = _float_dtype(dtype, "logistic")
    x = uniform(key, tuple(_shape(shape)), d, _tiny(d), 1.)
    return jnp.log(x) - jnp.log1p(-x)


def rademacher(key, shape=(), dtype=None):
    """+1 / -1 with equal probability (2 * bernoulli(0.5) - 1), as integers by default."""
    d = _np.dtype(_np.int32) if dtype is None else _dtypes.canonicalize(dtype)
    b = bernoulli(key, 0.5, tuple(_shape(shape))).astype(d)
    return (2 * b - 1).astype(d)


__all__ += ["gumbel", "categorical", "exponential", "laplace", "logistic", "rademacher"]


# ---- the long tail (gamma family, poisson, binomial, ...): python/podlet/_src/random_dists.py
from ._src.random_dists import (  # noqa: E402
    gamma, loggamma, random_gamma_p, beta, dirichlet, chisquare, f, t, cauchy, lognormal, pareto, maxwell,
    double_sided_maxwell, weibull_min, rayleigh, wald, triangular, geometric, generalized_normal, ball, poisson,
    binomial, multinomial, key_dtype)
from ._src import random_dists as _random_dists  # noqa: E402

__all__ += list(_random_dists.__all__)

# ---- samplers built on linear algebra: python/podlet/_src/random_matrices.py
from ._src.random_matrices import multivariate_normal, orthogonal  # noqa: E402

__all__ += ["multivariate_normal", "orthogonal"]
