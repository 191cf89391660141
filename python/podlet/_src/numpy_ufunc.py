"""jnp.ufunc and jnp.frompyfunc: a scalar function with NumPy's ufunc methods (outer,
reduce, accumulate, at, reduceat), by JAX's generic algorithms (vmap, fori_loop, scan)
over podlet's primitives. podlet.numpy's own add / multiply ... stay plain functions."""
import math as _math
import operator as _operator

import numpy as _np

from .. import lax
from .. import numpy as jnp
from .core import eval_shape

__all__ = ["ufunc", "frompyfunc"]

_AT_INPLACE = ("jnp.ufunc.at cannot update arrays in place, because podlet arrays (like JAX's) are immutable; "
               "pass inplace=False and use the returned array.")


def _vmap(*a, **k):
    from .batching import vmap
    return vmap(*a, **k)


def _one(x):
    x = jnp.asarray(x)
    return jnp.ones((), x.dtype)


class ufunc:
    """A function of nin scalars returning nout values, with NumPy's ufunc methods.

    Calls broadcast the arguments and map func over them (jnp.vectorize); reduce,
    accumulate, at and reduceat (binary, single-output ufuncs) loop with fori_loop / scan
    as jax.numpy.ufunc does when no specialised implementation is given."""

    def __init__(self, func, /, nin, nout, *, name=None, nargs=None, identity=None, call=None, reduce=None,
                 accumulate=None, at=None, reduceat=None):
        self.__doc__ = func.__doc__
        self.__name__ = name or getattr(func, "__name__", "ufunc")
        self._func = func
        self._props = {"nin": _operator.index(nin), "nout": _operator.index(nout),
                       "nargs": _operator.index(nargs or nin), "identity": identity, "call": call, "reduce": reduce,
                       "accumulate": accumulate, "at": at, "reduceat": reduceat}

    nin = property(lambda self: self._props["nin"])
    nout = property(lambda self: self._props["nout"])
    nargs = property(lambda self: self._props["nargs"])
    identity = property(lambda self: self._props["identity"])

    def __repr__(self):
        return f"<podlet.numpy.ufunc '{self.__name__}'>"

    def __hash__(self):
        return hash((self._func, self.__name__, self.nin, self.nout, self.identity))

    def __eq__(self, other):
        return isinstance(other, ufunc) and (self._func, self.__name__, self.nin, self.nout, self.identity) == \
            (other._func, other.__name__, other.nin, other.nout, other.identity)

    def __call__(self, *args, out=None, where=None):
        if out is not None:
            raise NotImplementedError(f"out argument of {self}")
        if where is not None:
            raise NotImplementedError(f"where argument of {self}")
        if len(args) != self.nin:
            raise TypeError(f"{self.__name__}() takes {self.nin} positional arguments but {len(args)} were given")
        call = self._props["call"] or jnp.vectorize(self._func)
        return call(*args)

    def _binary_only(self, what):
        if self.nin != 2:
            raise ValueError(f"{what} only supported for binary ufuncs; {self.__name__} takes {self.nin} inputs")
        if self.nout != 1:
            raise ValueError(f"{what} only supported for functions returning a single value; {self.__name__} "
                             f"returns {self.nout}")

    def _dtype(self, *args):
        return eval_shape(self._func, *[_one(a) for a in args]).dtype

    def outer(self, A, B, /):
        self._binary_only("outer")
        A, B = jnp.asarray(A), jnp.asarray(B)
        r = _vmap(_vmap(self, (None, 0)), (0, None))(jnp.ravel(A), jnp.ravel(B))
        return jnp.reshape(r, tuple(A.shape) + tuple(B.shape))

    def reduce(self, a, axis=0, dtype=None, out=None, keepdims=False, initial=None, where=None):
        self._binary_only("reduce")
        if out is not None:
            raise NotImplementedError(f"out argument of {self.__name__}.reduce()")
        if where is not None:
            if self.identity is None and initial is None:
                raise ValueError(f"reduction operation {self.__name__!r} does not have an identity, so to use a "
                                 "where mask one has to specify 'initial'.")
            if jnp.asarray(where).dtype != _np.bool_:
                raise ValueError(f"where argument must have dtype=bool; got dtype={jnp.asarray(where).dtype}")
        if self._props["reduce"] is not None:
            return self._props["reduce"](a, axis=axis, dtype=dtype, keepdims=keepdims, initial=initial, where=where)
        arr = jnp.asarray(a)
        initial = self.identity if initial is None else initial
        dtype = self._dtype(arr, arr) if dtype is None else dtype
        if where is not None:
            where = jnp.broadcast_to(jnp.asarray(where), arr.shape)
        if isinstance(axis, tuple):
            raise NotImplementedError(f"{self.__name__}.reduce over a tuple of axes")
        if axis is None:
            final = (1,) * arr.ndim if keepdims else ()
            arr = jnp.ravel(arr)
            where = None if where is None else jnp.ravel(where)
            axis = 0
        else:
            axis = jnp._norm_axis(axis, arr.ndim)
            final = tuple(arr.shape[:axis]) + ((1,) if keepdims else ()) + tuple(arr.shape[axis + 1:])
        if axis != 0:
            arr = jnp.moveaxis(arr, axis, 0)
            where = None if where is None else jnp.moveaxis(where, axis, 0)
        if arr.shape[0] == 0:
            if initial is None:
                raise ValueError(f"zero-size array to reduction operation {self.__name__} which has no identity")
            return jnp.full(final, initial, dtype)

        def body(i, val):
            nxt = self(val, jnp.astype(arr[i], dtype))
            return nxt if where is None else jnp.where(where[i], nxt, val)
        if initial is None:
            start, val = 1, arr[0]
        else:
            start, val = 0, initial
        val = jnp.broadcast_to(jnp.astype(jnp.asarray(val), dtype), tuple(arr.shape[1:]))
        result = lax.fori_loop(start, arr.shape[0], body, val)
        return jnp.reshape(result, final) if keepdims else result

    def accumulate(self, a, axis=0, dtype=None, out=None):
        self._binary_only("accumulate")
        if out is not None:
            raise NotImplementedError(f"out argument of {self.__name__}.accumulate()")
        if self._props["accumulate"] is not None:
            return self._props["accumulate"](a, axis=axis, dtype=dtype)
        arr = jnp.asarray(a)
        dtype = self._dtype(arr, arr) if dtype is None else dtype
        if axis is None or isinstance(axis, tuple):
            raise ValueError("accumulate does not allow multiple axes")
        axis = jnp._norm_axis(axis, arr.ndim)
        if arr.size == 0:
            return jnp.zeros(arr.shape, dtype)
        arr = jnp.moveaxis(arr, axis, 0)

        def step(carry, x):
            y = self(carry, jnp.astype(x, dtype))
            return y, y
        first = jnp.astype(arr[0], dtype)
        _, rest = lax.scan(step, first, arr[1:])
        return jnp.moveaxis(jnp.concatenate([first[None], rest], 0), 0, axis)

    def at(self, a, indices, b=None, /, *, inplace=True):
        if inplace:
            raise NotImplementedError(_AT_INPLACE)
        if self._props["at"] is not None:
            return self._props["at"](a, indices) if b is None else self._props["at"](a, indices, b)
        args = () if b is None else (b,)
        dtype = self._dtype(a, *args)
        a = jnp.astype(jnp.asarray(a), dtype)
        args = tuple(jnp.astype(jnp.asarray(x), dtype) for x in args)
        indices = indices if isinstance(indices, tuple) else (indices,)
        if not indices:
            return a
        shapes = [_np.shape(i) for i in indices if not isinstance(i, slice)]
        shape = jnp.broadcast_shapes(*shapes) if shapes else ()
        if not shape:
            return a.at[indices].set(self(a.at[indices].get(), *args))
        n = _math.prod(shape)
        if args:
            arg = jnp.broadcast_to(args[0], tuple(shape) + tuple(args[0].shape[len(shape):]))
            args = (jnp.reshape(arg, (n,) + tuple(args[0].shape[len(shape):])),)
        idx = [i if isinstance(i, slice) else jnp.ravel(jnp.broadcast_to(jnp.asarray(i), shape)) for i in indices]

        def step(a, k):
            key = tuple(i if isinstance(i, slice) else i[k] for i in idx)
            return a.at[key].set(self(a.at[key].get(), *(x[k] for x in args))), None
        a, _ = lax.scan(step, a, jnp.arange(n, dtype=_np.int32))
        return a

    def reduceat(self, a, indices, axis=0, dtype=None, out=None):
        self._binary_only("reduceat")
        if out is not None:
            raise NotImplementedError(f"out argument of {self.__name__}.reduceat()")
        if self._props["reduceat"] is not None:
            return self._props["reduceat"](a, indices, axis=axis, dtype=dtype)
        a = jnp.asarray(a)
        indices = jnp.asarray(indices)
        if a.ndim == 0:
            raise ValueError(f"reduceat: a must have 1 or more dimension, got a.shape={tuple(a.shape)}")
        if indices.ndim != 1:
            raise ValueError(f"reduceat: indices must be one-dimensional, got indices.shape={tuple(indices.shape)}")
        if axis is None or isinstance(axis, (tuple, list)):
            raise ValueError("reduceat requires a single integer axis.")
        axis = jnp._norm_axis(axis, a.ndim)
        out = jnp.take(a, indices, axis=axis)
        if dtype is not None:
            out = jnp.astype(out, dtype)
        others = [d for d in range(out.ndim) if d != axis]
        ind = jnp.expand_dims(jnp.append(indices, a.shape[axis]), others)
        lo = lax.slice_in_dim(ind, 0, ind.shape[axis] - 1, 1, axis)
        hi = lax.slice_in_dim(ind, 1, ind.shape[axis], 1, axis)

        def body(i, out):
            inside = jnp.logical_and(jnp.greater(i, lo), jnp.less(i, hi))
            return jnp.where(inside, self(out, jnp.take(a, jnp.expand_dims(i, 0), axis=axis)), out)
        return lax.fori_loop(0, a.shape[axis], body, out)


def frompyfunc(func, /, nin, nout, *, identity=None):
    """A ufunc from a function of nin scalars (its methods loop; see ufunc)."""
    return ufunc(func, nin, nout, identity=identity)
