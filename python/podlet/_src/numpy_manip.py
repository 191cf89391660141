"""jax.numpy's array manipulation, function application, calculus, polynomial and 1-D
signal functions, composed from podlet.numpy and its primitives (concatenate, slice,
take, scatter, conv_general_dilated, vmap ...), with JAX's semantics."""
import functools as _functools
import math as _math
import operator as _operator
import re as _re

import numpy as _np

from .. import lax
from .. import numpy as jnp
from . import dtypes as _dtypes
from .core import Array, Tracer, bind
from .errors import ConcretizationError

__all__ = [
    "append", "insert", "delete", "array_split", "split", "dsplit", "hsplit", "vsplit", "column_stack", "dstack",
    "block", "rot90", "resize", "atleast_3d", "unstack", "permute_dims", "rollaxis", "concat", "matrix_transpose",
    "trim_zeros", "select", "piecewise", "choose", "put", "put_along_axis", "place", "apply_along_axis",
    "apply_over_axes", "vectorize", "ediff1d", "gradient", "trapezoid", "cross", "vecdot", "matvec", "vecmat",
    "interp", "convolve", "correlate", "polyfit", "polyval", "polyadd", "polysub", "polymul", "polydiv", "polyder", "polyint",
    "poly", "roots",
]

_i32 = _np.int32


def _arr(x):
    return x if isinstance(x, (Array, Tracer)) else jnp.asarray(x)


def _static_index(v, what):
    if isinstance(v, Tracer):
        raise ConcretizationError(f"{what} must be static; got the traced {v!r}")
    return _operator.index(v) if not isinstance(v, Array) else _operator.index(int(v))


def _traced_like(ref, shape, dtype):
    """zeros of shape / dtype, staged into ref's trace when ref is a tracer."""
    return jnp._zeros_like_trace(ref, tuple(shape), dtype) if isinstance(ref, Tracer) else jnp.zeros(shape, dtype)


# ---------------------------------------------------------------------------------
# joining and splitting
# ---------------------------------------------------------------------------------
def append(arr, values, axis=None):
    if axis is None:
        out = jnp.concatenate([jnp.ravel(_arr(arr)), jnp.ravel(_arr(values))], 0)
    else:
        out = jnp.concatenate([_arr(arr), _arr(values)], axis=axis)
    return jnp._weak_if(out, arr, values)


def concat(arrays, /, *, axis=0):
    return jnp.concatenate(arrays, axis=axis)


def _split(op, ary, indices_or_sections, axis=0):
    ary = _arr(ary)
    axis = jnp._norm_axis(_static_index(axis, f"jax.numpy.{op} argument `axis`"), ary.ndim)
    size = ary.shape[axis]
    ios = indices_or_sections
    if isinstance(ios, (tuple, list)) or (isinstance(ios, (_np.ndarray, Array, Tracer)) and ios.ndim > 0):
        idx = [_static_index(i, f"jax.numpy.{op} argument 1") for i in (ios if not hasattr(ios, "tolist")
                                                                       else _np.asarray(ios).tolist())]
        bounds = _np.asarray([0] + idx + [size])
        sizes = _np.diff(bounds)
        if (sizes < 0).any():  # JAX's rule (NumPy would clip and wrap the indices)
            raise ValueError(f"Sizes passed to split must be nonnegative, got {sizes.tolist()} (jax.numpy.{op} "
                             f"indices {idx} for a dimension of size {size})")
        return [lax.slice_in_dim(ary, int(s), int(e), 1, axis) for s, e in zip(bounds[:-1], bounds[1:])]
    n = _static_index(ios, f"jax.numpy.{op} argument 1")
    if n <= 0:
        raise ValueError(f"jax.numpy.{op}: number sections must be larger than 0; got {n}")
    part, r = divmod(size, n)
    if r == 0:
        sizes = [part] * n
    elif op == "array_split":
        sizes = [part + 1] * r + [part] * (n - r)
    else:
        raise ValueError(f"array split does not result in an equal division: rest is {r}")
    starts = _np.cumsum([0] + sizes)
    return [lax.slice_in_dim(ary, int(s), int(s + z), 1, axis) for s, z in zip(starts, sizes)]


def split(ary, indices_or_sections, axis=0):
    return _split("split", ary, indices_or_sections, axis)


def array_split(ary, indices_or_sections, axis=0):
    return _split("array_split", ary, indices_or_sections, axis)


def vsplit(ary, indices_or_sections):
    return _split("vsplit", ary, indices_or_sections, axis=0)


def hsplit(ary, indices_or_sections):
    a = _arr(ary)
    return _split("hsplit", a, indices_or_sections, axis=0 if a.ndim == 1 else 1)


def dsplit(ary, indices_or_sections):
    return _split("dsplit", ary, indices_or_sections, axis=2)


def atleast_3d(*arys):
    if len(arys) == 1:
        a = _arr(arys[0])
        if a.ndim == 0:
            return jnp._weak_if(jnp.reshape(a, (1, 1, 1)), arys[0])
        if a.ndim == 1:
            return jnp.reshape(a, (1, a.shape[0], 1))
        if a.ndim == 2:
            return jnp.reshape(a, tuple(a.shape) + (1,))
        return a
    return [atleast_3d(a) for a in arys]


def _rows(tup):
    if isinstance(tup, (_np.ndarray, Array, Tracer)):
        return [tup[i] for i in range(tup.shape[0])]
    return list(tup)


def dstack(tup, dtype=None):
    out = jnp.concatenate([atleast_3d(m) for m in _rows(tup)], axis=2)
    return out if dtype is None else jnp.astype(out, dtype)


def column_stack(tup):
    if isinstance(tup, (_np.ndarray, Array, Tracer)) and tup.ndim >= 3:
        return jnp.concatenate(_rows(tup), axis=1)
    arrs = [_arr(a) for a in _rows(tup)]
    return jnp.concatenate([jnp.transpose(jnp.atleast_2d(a)) if a.ndim < 2 else a for a in arrs], axis=1)


def _block(xs):
    if isinstance(xs, tuple):
        raise ValueError(f"jax.numpy.block does not allow tuples, got {xs}")
    if isinstance(xs, list):
        if len(xs) == 0:
            raise ValueError("jax.numpy.block does not allow empty list arguments")
        parts, depths = zip(*[_block(x) for x in xs])
        if any(d != depths[0] for d in depths[1:]):
            raise ValueError(f"Mismatched list depths in jax.numpy.block: {list(depths)}")
        rank = max(depths[0], max(p.ndim for p in parts))
        parts = [jnp.reshape(p, (1,) * (rank - p.ndim) + tuple(p.shape)) for p in parts]
        return jnp.concatenate(parts, axis=-depths[0]), depths[0] + 1
    return _arr(xs), 1


def block(arrays):
    return _block(arrays)[0]


def unstack(x, /, *, axis=0):
    x = _arr(x)
    axis = jnp._norm_axis(axis, x.ndim)
    return tuple(jnp.squeeze(lax.slice_in_dim(x, i, i + 1, 1, axis), axis) for i in range(x.shape[axis]))


# ---------------------------------------------------------------------------------
# rearranging
# ---------------------------------------------------------------------------------
def permute_dims(a, /, axes):
    a = _arr(a)
    return lax.transpose(a, [jnp._norm_axis(x, a.ndim) for x in axes])


def matrix_transpose(x, /):
    x = _arr(x)
    if x.ndim < 2:
        raise ValueError(f"x must be at least two-dimensional for matrix_transpose; got ndim={x.ndim}")
    return lax.transpose(x, (*range(x.ndim - 2), x.ndim - 1, x.ndim - 2))


def rollaxis(a, axis, start=0):
    a = _arr(a)
    nd = a.ndim
    axis = jnp._norm_axis(axis, nd)
    start = _static_index(start, "'start' argument of jnp.rollaxis()")
    if not -nd <= start <= nd:
        raise ValueError(f"start={start} must satisfy {-nd}<=start<={nd}")
    if start < 0:
        start += nd
    if start > axis:
        start -= 1
    return jnp.moveaxis(a, axis, start)


def rot90(m, k=1, axes=(0, 1)):
    m = _arr(m)
    if m.ndim < 2:
        raise ValueError(f"rot90 requires its first argument to have ndim at least two, but got first argument "
                         f"of shape {tuple(m.shape)}, which has ndim {m.ndim}")
    ax1, ax2 = (jnp._norm_axis(x, m.ndim) for x in axes)
    if ax1 == ax2:
        raise ValueError(f"Axes must be different; got axes={tuple(axes)}")
    k = _static_index(k, "k argument of jnp.rot90") % 4
    if k == 0:
        return m
    if k == 2:
        return jnp.flip(jnp.flip(m, ax1), ax2)
    perm = list(range(m.ndim))
    perm[ax1], perm[ax2] = perm[ax2], perm[ax1]
    return jnp.transpose(jnp.flip(m, ax2), perm) if k == 1 else jnp.flip(jnp.transpose(m, perm), ax2)


def resize(a, new_shape):
    new_shape = (new_shape,) if isinstance(new_shape, (int, _np.integer)) else tuple(new_shape)
    if any(d < 0 for d in new_shape):
        raise ValueError(f"all elements of `new_shape` must be non-negative; got {new_shape}")
    arr = jnp.ravel(_arr(a))
    n = int(_np.prod(new_shape, dtype=_np.int64))
    if arr.shape[0] == 0 or n == 0:
        return jnp.zeros_like(arr, shape=new_shape)
    reps = -(-n // arr.shape[0])
    return jnp.reshape(jnp.tile(arr, reps)[:n], new_shape)


def trim_zeros(filt, trim="fb", axis=None):
    """filt without its leading ('f') / trailing ('b') all-zero slices (needs a concrete
    filt: the result's shape depends on its values)."""
    filt = _arr(filt)
    if isinstance(filt, Tracer):
        raise ConcretizationError(f"trim_zeros: the result's shape depends on the values of the traced {filt!r}")
    v = _np.asarray(filt)
    axes = range(v.ndim) if axis is None else [jnp._norm_axis(x, v.ndim) for x in
                                               ((axis,) if isinstance(axis, int) else axis)]
    t = trim.lower()
    if not axes or ("f" not in t and "b" not in t):
        return filt
    key = []
    for ax in range(v.ndim):
        if ax not in axes:
            key.append(slice(None))
            continue
        mask = v.any(axis=tuple(i for i in range(v.ndim) if i != ax)) if v.ndim > 1 else v != 0
        if not mask.any():
            key.append(slice(0, 0))
            continue
        start = int(mask.argmax()) if "f" in t else None
        stop = v.shape[ax] - int(mask[::-1].argmax()) if "b" in t else None
        key.append(slice(start, stop))
    return filt[tuple(key)]


# ---------------------------------------------------------------------------------
# inserting and deleting (static indices, or unique array indices)
# ---------------------------------------------------------------------------------
def delete(arr, obj, axis=None, *, assume_unique_indices=False):
    a = _arr(arr)
    if axis is None:
        a, axis = jnp.ravel(a), 0
    axis = jnp._norm_axis(axis, a.ndim)
    n = a.shape[axis]
    try:
        i = _operator.index(obj)
    except TypeError:
        pass
    else:
        i = jnp._norm_axis(i, n)
        return jnp.concatenate([lax.slice_in_dim(a, 0, i, 1, axis), lax.slice_in_dim(a, i + 1, n, 1, axis)], axis=axis)
    if isinstance(obj, slice):
        obj = _np.arange(n)[obj]
        assume_unique_indices = True
    if assume_unique_indices and _np.dtype(jnp._dt(obj)).kind in "iu":
        o = jnp.ravel(_arr(obj))
        o = jnp.clip(jnp.where(jnp.less(o, 0), jnp.add(o, n), o), 0, n)
        o = jnp.sort(o)
        o = jnp.subtract(o, jnp.arange(o.shape[0], dtype=o.dtype))
        i = jnp.arange(n - o.shape[0], dtype=o.dtype)
        i = jnp.add(i, jnp.sum(jnp.greater_equal(i[None, :], o[:, None]), axis=0, dtype=i.dtype))
        return jnp.take(a, i, axis=axis, mode="clip")
    if isinstance(obj, Tracer):
        raise ConcretizationError("'obj' array argument of jnp.delete() must be concrete "
                                  "(or pass assume_unique_indices=True for unique integer indices)")
    o = _np.asarray(obj)
    if o.dtype.kind in "iu":
        mask = _np.ones(n, dtype=bool)
        mask[o] = False
    elif o.dtype == _np.bool_:
        if o.shape != (n,):
            raise ValueError("np.delete(arr, obj): for boolean indices, obj must be one-dimensional with length "
                             f"matching specified axis ({n}); got shape {o.shape}.")
        mask = ~o
    else:
        raise ValueError(f"np.delete(arr, obj): got obj.dtype={o.dtype}; must be integer or bool.")
    return jnp.take(a, jnp.asarray(_np.nonzero(mask)[0].astype(_i32)), axis=axis)


def insert(arr, obj, values, axis=None):
    """values inserted before the indices obj along axis (JAX's algorithm: the target
    positions of the values and of the old entries, then two scatters)."""
    a = _arr(arr)
    if axis is None:
        a, axis = jnp.ravel(a), 0
    axis = jnp._norm_axis(_static_index(axis, "axis argument of jnp.insert()"), a.ndim)
    n_in = a.shape[axis]
    if isinstance(obj, slice):
        indices = jnp.arange(*obj.indices(n_in), dtype=_i32)
    else:
        indices = _arr(obj)
    if indices.ndim > 1:
        raise ValueError(f"jnp.insert(): obj must be a slice, a one-dimensional array, or a scalar; got {obj}")
    if indices.dtype.kind not in "iu":
        if indices.size == 0 and not isinstance(obj, (Array, Tracer)):
            indices = jnp.astype(indices, _i32)
        else:
            raise ValueError(f"jnp.insert(): index array must be integer typed; got {obj}")
    v = jnp.array(jnp.astype(_arr(values), a.dtype), ndmin=a.ndim)
    if indices.size == 1:
        index = jnp.ravel(indices)[0]
        if indices.ndim == 0:
            v = jnp.moveaxis(v, 0, axis)
        indices = jnp.full((v.shape[axis],), index, indices.dtype)
    n_ins = jnp.broadcast_shapes(indices.shape, (v.shape[axis],))[0]
    out_shape = list(a.shape)
    out_shape[axis] += n_ins
    indices = jnp.astype(indices, _i32)
    indices = jnp.clip(jnp.where(jnp.less(indices, 0), jnp.add(indices, n_in), indices), 0, n_in)
    values_ind = indices.at[jnp.argsort(indices)].add(jnp.arange(n_ins, dtype=_i32))
    keep = jnp.ones(n_in + n_ins, bool)
    if isinstance(values_ind, Tracer):
        keep = jnp.full_like(jnp.zeros_like(values_ind, shape=(n_in + n_ins,)), True, dtype=bool)
    keep = keep.at[values_ind].set(False)
    arr_ind = jnp.nonzero(keep, size=n_in)[0]
    out = jnp.zeros_like(a, shape=tuple(out_shape))
    pre = (slice(None),) * axis
    v = jnp.broadcast_to(v, tuple(out_shape[:axis]) + (n_ins,) + tuple(out_shape[axis + 1:])) \
        if v.ndim == a.ndim else v
    out = out.at[pre + (values_ind,)].set(v)
    return out.at[pre + (arr_ind,)].set(a)


# ---------------------------------------------------------------------------------
# choosing and placing
# ---------------------------------------------------------------------------------
def select(condlist, choicelist, default=0):
    """choicelist[i] where condlist[i] is the first true condition, else default."""
    if len(condlist) != len(choicelist):
        raise ValueError(f"condlist must have length equal to choicelist ({len(condlist)} vs {len(choicelist)})")
    if len(condlist) == 0:
        raise ValueError("condlist must be non-empty")
    conds = [jnp.astype(_arr(cnd), bool) for cnd in condlist]
    choices = jnp._promote(default, *choicelist)
    weak = jnp._result_weak(default, *choicelist)
    shape = jnp.broadcast_shapes(*[x.shape for x in conds], *[x.shape for x in choices])
    out = jnp.broadcast_to(choices[0], shape)
    for cnd, ch in reversed(list(zip(conds, choices[1:]))):
        out = bind("select", jnp.broadcast_to(cnd, shape), jnp.broadcast_to(ch, shape), out)
    if weak:
        out.weak_type = True
    return out


def piecewise(x, condlist, funclist, *args, **kw):
    """funclist[i] (a function of x or a constant) where condlist[i] is the last true
    condition; funclist may hold one extra entry for 'no condition true'. Every
    function is evaluated on all of x and the results selected (what vmap of JAX's
    per-element switch computes)."""
    x = _arr(x)
    nc, nf = len(condlist), len(funclist)
    if nf == nc + 1:
        funclist = list(funclist[-1:]) + list(funclist[:-1])
    elif nf == nc:
        funclist = [0] + list(funclist)
    else:
        raise ValueError(f"with {nc} condition(s), either {nc} or {nc + 1} functions are expected; got {nf}")
    conds = jnp.astype(jnp.stack([jnp.broadcast_to(_arr(cnd), x.shape) for cnd in condlist]) if nc else
                       jnp.zeros((0,) + tuple(x.shape), bool), bool)
    cum = jnp.cumsum(jnp.concatenate([jnp.zeros_like(conds[:1]), conds], 0), axis=0)
    idx = jnp.argmax(cum, axis=0)
    outs = [jnp.astype(f(x, *args, **kw), x.dtype) if callable(f) else jnp.full_like(x, f) for f in funclist]
    outs = [jnp.broadcast_to(o, x.shape) for o in outs]
    return lax.select_n(idx, *outs)


def choose(a, choices, out=None, mode="raise"):
    if out is not None:
        raise NotImplementedError("The 'out' argument to jnp.choose is not supported.")
    a = _arr(a)
    choices = [_arr(ch) for ch in _rows(choices)]
    if a.dtype.kind not in "iu":
        raise ValueError(f"`a` array must be integer typed; got {a.dtype}")
    n = len(choices)
    if mode == "raise":
        if isinstance(a, Tracer):
            raise ConcretizationError("jnp.choose with mode='raise' needs a concrete `a`; use mode='wrap' or "
                                      "mode='clip' under jit")
        v = _np.asarray(a)
        if ((v < 0) | (v >= n)).any():
            raise ValueError(f"invalid entry in choice array: entries of `a` must be in [0, {n}); got {v}")
    elif mode == "wrap":
        a = jnp.remainder(a, n)
    elif mode == "clip":
        a = jnp.clip(a, 0, n - 1)
    else:
        raise ValueError(f"mode={mode!r} not understood. Must be 'raise', 'wrap', or 'clip'")
    parts = jnp.broadcast_arrays(a, *choices)
    a, choices = parts[0], jnp._promote(*parts[1:])
    return lax.select_n(jnp.astype(a, _i32), *choices)


def _tile_to_size(arr, size):
    if arr.shape[0] < size:
        arr = jnp.tile(arr, int(_np.ceil(size / arr.shape[0])))
    return arr[:size] if arr.shape[0] > size else arr


def put(a, ind, v, mode=None, *, inplace=True):
    if inplace:
        raise ValueError("jax.numpy.put cannot modify arrays in-place, because JAX arrays are immutable. "
                         "Pass inplace=False to instead return an updated array.")
    arr = _arr(a)
    ind = jnp.ravel(_arr(ind))
    v = jnp.ravel(_arr(v))
    if not arr.size or not ind.size or not v.size:
        return arr
    v = _tile_to_size(v, ind.shape[0])
    if mode is None:
        smode = "drop"
    elif mode == "clip":
        ind, smode = jnp.clip(ind, 0, arr.size - 1), "clip"
    elif mode == "wrap":
        ind, smode = jnp.remainder(ind, arr.size), "clip"
    elif mode == "raise":
        raise NotImplementedError("The 'raise' mode to jnp.put is not supported.")
    else:
        raise ValueError(f"mode should be one of 'wrap' or 'clip'; got mode={mode!r}")
    return arr.at[jnp.unravel_index(ind, arr.shape)].set(v, mode=smode)


def put_along_axis(arr, indices, values, axis, inplace=True, *, mode=None):
    if inplace:
        raise ValueError("jax.numpy.put_along_axis cannot modify arrays in-place, because JAX arrays are immutable. "
                         "Pass inplace=False to instead return an updated array.")
    arr, indices, values = _arr(arr), _arr(indices), _arr(values)
    shape0 = tuple(arr.shape)
    if axis is None:
        arr, axis = jnp.ravel(arr), 0
    if arr.ndim != indices.ndim:
        raise ValueError(f"put_along_axis arguments 'arr' and 'indices' must have same ndim. Got arr.ndim={arr.ndim} "
                         f"and indices.ndim={indices.ndim}.")
    try:
        values = jnp.broadcast_to(values, indices.shape)
    except Exception:
        raise ValueError(f"put_along_axis argument 'values' must be broadcastable to 'indices'. Got "
                         f"values.shape={tuple(values.shape)} and indices.shape={tuple(indices.shape)}.") from None
    axis = jnp._norm_axis(axis, arr.ndim)
    key = tuple(indices if d == axis else
                jnp.reshape(jnp.arange(indices.shape[d], dtype=_i32), tuple(-1 if e == d else 1 for e in range(arr.ndim)))
                for d in range(arr.ndim))
    out = arr.at[key].set(values, mode=mode)
    return jnp.reshape(out, shape0)


def place(arr, mask, vals, *, inplace=True):
    data, m, v = _arr(arr), _arr(mask), jnp.ravel(_arr(vals))
    if inplace:
        raise ValueError("jax.numpy.place cannot modify arrays in-place, because JAX arrays are immutable. "
                         "Pass inplace=False to instead return an updated array.")
    if data.size != m.size:
        raise ValueError(f"place: arr and mask must be the same size; got {data.size} and {m.size}")
    if not v.size:
        raise ValueError("Cannot place values from an empty array")
    if not data.size:
        return data
    idx = jnp.nonzero(jnp.ravel(m), size=m.size, fill_value=m.size)[0]
    v = _tile_to_size(v, idx.shape[0])
    return jnp.reshape(jnp.ravel(data).at[idx].set(v, mode="drop"), data.shape)


# ---------------------------------------------------------------------------------
# applying functions
# ---------------------------------------------------------------------------------
def _vmap(*a, **k):
    from .batching import vmap
    return vmap(*a, **k)


def apply_along_axis(func1d, axis, arr, *args, **kwargs):
    """func1d applied to the 1-D slices along axis, by podlet.vmap over the other axes."""
    arr = _arr(arr)
    nd = arr.ndim
    axis = jnp._norm_axis(axis, nd)
    func = lambda a: func1d(a, *args, **kwargs)
    for i in range(1, nd - axis):
        func = _vmap(func, in_axes=i, out_axes=-1)
    for _ in range(axis):
        func = _vmap(func, in_axes=0, out_axes=0)
    return func(arr)


def apply_over_axes(func, a, axes):
    a = _arr(a)
    for axis in axes:
        b = func(a, axis)
        if b.ndim == a.ndim:
            a = b
        elif b.ndim == a.ndim - 1:
            a = jnp.expand_dims(b, axis)
        else:
            raise ValueError(f"function is not returning an array of the correct shape: got {tuple(b.shape)} "
                             f"for an input of shape {tuple(a.shape)} along axis {axis}")
    return a


_DIM = r"\w+"
_CORE = "(?:{0:}(?:,{0:})*)?".format(_DIM)
_ARG = rf"\({_CORE}\)"
_ARGS = "{0:}(?:,{0:})*".format(_ARG)
_SIG = "^{0:}->{0:}$".format(_ARGS)


def _parse_signature(signature):
    if not _re.match(_SIG, signature):
        raise ValueError(f"not a valid gufunc signature: {signature}")
    return ([tuple(_re.findall(_DIM, arg)) for arg in _re.findall(_ARG, part)] for part in signature.split("->"))


def _update_dims(sizes, shape, core, ctx, *, is_input):
    if is_input and len(shape) < len(core):
        raise ValueError(f"input with shape {tuple(shape)} does not have enough dimensions for all core dimensions "
                         f"{core} {ctx}")
    if not is_input and len(shape) != len(core):
        raise ValueError(f"output shape {tuple(shape)} does not match core dimensions {core} {ctx}")
    core_shape = tuple(shape[len(shape) - len(core):]) if core else ()
    for d, s in zip(core, core_shape):
        if d not in sizes:
            sizes[d] = s
        elif s != sizes[d]:
            raise ValueError(f"inconsistent size for core dimension {d!r}: {s} vs {sizes[d]} {ctx}")


def _apply_excluded(func, excluded, args, kwargs):
    if not excluded:
        return func, args, kwargs
    dyn_args = [a for i, a in enumerate(args) if i not in excluded]
    dyn_kwargs = {k: v for k, v in kwargs.items() if k not in excluded}
    static_args = [(i, args[i]) for i in sorted(e for e in excluded if isinstance(e, int)) if i < len(args)]
    static_kwargs = {k: v for k, v in kwargs.items() if k in excluded}

    def new_func(*a, **k):
        a = list(a)
        for i, v in static_args:
            a.insert(i, v)
        return func(*a, **k, **static_kwargs)
    return new_func, dyn_args, dyn_kwargs


def vectorize(pyfunc, *, excluded=frozenset(), signature=None):
    """jnp.vectorize: pyfunc mapped over the broadcast leading (non-core) dimensions of
    its arguments by podlet.vmap, one vmap per dimension; signature='(n),(n)->()'
    names core dimensions, excluded argument positions / names pass through as they
    are."""
    if any(not isinstance(e, (str, int)) for e in excluded):
        raise TypeError(f"jax.numpy.vectorize can only exclude integer or string arguments, but excluded={excluded!r}")
    if any(isinstance(e, int) and e < 0 for e in excluded):
        raise ValueError(f"excluded={excluded!r} contains negative numbers")

    @_functools.wraps(pyfunc)
    def wrapped(*args, **kwargs):
        ctx = f"on vectorized function with excluded={excluded!r} and signature={signature!r}"
        func, args, kwargs = _apply_excluded(pyfunc, excluded, args, kwargs)
        if signature is not None:
            in_core, out_core = _parse_signature(signature)
        else:
            in_core, out_core = [()] * len(args), None
        none_args = {i for i, a in enumerate(args) if a is None}
        if none_args:
            if any(in_core[i] != () for i in none_args):
                raise ValueError(f"Cannot pass None at locations {none_args} with signature={signature!r}")
            func, args, _ = _apply_excluded(func, none_args, args, {})
            in_core = [d for i, d in enumerate(in_core) if i not in none_args]
        args = tuple(jnp._weak_if(_arr(a), a) for a in args)  # Python scalars stay weak, as jnp.asarray's
        if len(args) != len(in_core):
            raise TypeError(f"wrong number of positional arguments: expected {len(in_core)}, got {len(args)} {ctx}")
        sizes, shapes = {}, []
        for a, core in zip(args, in_core):
            _update_dims(sizes, a.shape, core, ctx, is_input=True)
            shapes.append(tuple(a.shape[:a.ndim - len(core)]))
        bshape = jnp.broadcast_shapes(*shapes)
        if out_core is None:
            checked = func
        else:
            def checked(*a):
                out = func(*a)
                outs = out if isinstance(out, tuple) else [out]
                if len(out_core) > 1 and not isinstance(out, tuple):
                    raise TypeError(f"output must be a tuple when multiple outputs are expected, got: {out!r}\n{ctx}")
                if len(outs) != len(out_core):
                    raise TypeError(f"wrong number of output arguments: expected {len(out_core)}, got {len(outs)} "
                                    f"{ctx}")
                s = dict(sizes)
                for o, core in zip(outs, out_core):
                    _update_dims(s, _np.shape(o) if not hasattr(o, "shape") else o.shape, core, ctx, is_input=False)
                return out
        squeezed, rev_filled = [], []
        for a, core in zip(args, in_core):
            noncore = tuple(a.shape[:a.ndim - len(core)])
            filled = (1,) * (len(bshape) - len(noncore)) + noncore
            rev_filled.append(filled[::-1])
            squeezed.append(jnp.squeeze(a, axis=tuple(i for i, s in enumerate(noncore) if s == 1)))
        vf = checked
        expand = []
        for negdim, axis_sizes in enumerate(zip(*rev_filled)):
            in_axes = tuple(None if s == 1 else 0 for s in axis_sizes)
            if all(ax is None for ax in in_axes):
                expand.append(len(bshape) - 1 - negdim)
            else:
                vf = _vmap(vf, in_axes=in_axes)
        result = vf(*squeezed)
        if not expand:
            return result
        if isinstance(result, tuple):
            return tuple(jnp.expand_dims(r, expand) for r in result)
        return jnp.expand_dims(result, expand)
    return wrapped


# ---------------------------------------------------------------------------------
# differences, gradients, integrals, products
# ---------------------------------------------------------------------------------
def ediff1d(ary, to_end=None, to_begin=None):
    arr = jnp.ravel(_arr(ary))
    result = bind("sub", arr[1:], arr[:-1])
    if to_begin is not None:
        result = jnp.concatenate([jnp.ravel(jnp.astype(_arr(to_begin), arr.dtype)), result])
    if to_end is not None:
        result = jnp.concatenate([result, jnp.ravel(jnp.astype(_arr(to_end), arr.dtype))])
    return result


def gradient(f, *varargs, axis=None, edge_order=None):
    """Central differences inside, one-sided at the edges (JAX's: spacing scalars or
    1-D coordinates per axis)."""
    if edge_order is not None:
        raise NotImplementedError("The 'edge_order' argument to jnp.gradient is not supported.")
    a, *spacing = jnp._promote_float(f, *varargs)

    def along(a, h, ax):
        sl = lambda s, e: lax.slice_in_dim(a, s, e, 1, ax)
        n = a.shape[ax]
        upper = jnp.subtract(sl(1, 2), sl(0, 1))
        lower = jnp.subtract(sl(n - 1, n), sl(n - 2, n - 1))
        if h.ndim == 0:
            inner = jnp.true_divide(jnp.multiply(jnp.subtract(sl(2, n), sl(0, n - 2)), 0.5), h)
            lower, upper = jnp.true_divide(lower, h), jnp.true_divide(upper, h)
        elif h.ndim == 1:
            if h.shape[0] != n:
                raise ValueError("Spacing arrays must have the same length as the dimension along which the "
                                 f"gradient is calculated; got {h.shape[0]} for a dimension of {n}")
            hs = [1] * a.ndim
            hs[ax] = n
            h = jnp.reshape(h, hs)
            sx = lambda s, e: lax.slice_in_dim(h, s, e, 1, ax)
            upper = jnp.true_divide(upper, jnp.subtract(sx(1, 2), sx(0, 1)))
            lower = jnp.true_divide(lower, jnp.subtract(sx(n - 1, n), sx(n - 2, n - 1)))
            dx1 = jnp.subtract(sx(1, n - 1), sx(0, n - 2))
            dx2 = jnp.subtract(sx(2, n), sx(1, n - 1))
            ca = jnp.true_divide(jnp.negative(dx2), jnp.multiply(dx1, jnp.add(dx1, dx2)))
            cb = jnp.true_divide(jnp.subtract(dx2, dx1), jnp.multiply(dx1, dx2))
            cc = jnp.true_divide(dx1, jnp.multiply(dx2, jnp.add(dx1, dx2)))
            inner = jnp.add(jnp.add(jnp.multiply(ca, sl(0, n - 2)), jnp.multiply(cb, sl(1, n - 1))),
                            jnp.multiply(cc, sl(2, n)))
        else:
            raise ValueError("Spacing arrays must be 1D arrays or scalars.")
        return jnp.concatenate([upper, inner, lower], axis=ax)

    if axis is None:
        axes = tuple(range(a.ndim))
    else:
        axes = tuple(jnp._norm_axis(i, a.ndim) for i in ((axis,) if isinstance(axis, int) else axis))
    if not axes:
        return []
    if min(s for i, s in enumerate(a.shape) if i in axes) < 2:
        raise ValueError("Shape of array too small to calculate a numerical gradient, at least 2 elements are "
                         f"required; got shape {tuple(a.shape)}")
    if len(spacing) == 0:
        dx = [jnp._const_like(a, 1.0)] * len(axes)
    elif len(spacing) == 1:
        dx = spacing * len(axes)
    elif len(spacing) == len(axes):
        dx = spacing
    else:
        raise TypeError(f"Invalid number of spacing arguments {len(spacing)} for axis={axis}")
    grads = [along(a, h, ax) for ax, h in zip(axes, dx)]
    return grads[0] if len(axes) == 1 else grads


def trapezoid(y, x=None, dx=1.0, axis=-1):
    if x is None:
        (ya,) = jnp._promote_float(y)
        dxa = _arr(dx)
        if dxa.ndim > 0:
            dxa = jnp.reshape(dxa, (1,) * (ya.ndim - dxa.ndim) + tuple(dxa.shape))
            dxa = jnp.moveaxis(dxa, axis, -1)
    else:
        ya, xa = jnp._promote_float(y, x)
        dxa = jnp.diff(xa) if xa.ndim == 1 else jnp.moveaxis(jnp.diff(xa, axis=axis), axis, -1)
    ya = jnp.moveaxis(ya, axis, -1)
    if dxa.ndim == 0 or dxa.shape[-1] == 1:
        d = dxa if dxa.ndim == 0 else dxa[..., 0]
        return jnp.multiply(d, jnp.subtract(jnp.sum(ya, -1), jnp.multiply(0.5, jnp.add(ya[..., 0], ya[..., -1]))))
    return jnp.multiply(0.5, jnp.sum(jnp.multiply(dxa, jnp.add(ya[..., 1:], ya[..., :-1])), -1))


def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = jnp.moveaxis(_arr(a), axisa, -1), jnp.moveaxis(_arr(b), axisb, -1)
    if a.shape[-1] not in (2, 3) or b.shape[-1] not in (2, 3):
        raise ValueError(f"Dimension must be either 2 or 3 for cross product; got {a.shape[-1]} and {b.shape[-1]}")
    if a.shape[-1] == 2 and b.shape[-1] == 2:
        return jnp.subtract(jnp.multiply(a[..., 0], b[..., 1]), jnp.multiply(a[..., 1], b[..., 0]))
    a0, a1 = a[..., 0], a[..., 1]
    a2 = a[..., 2] if a.shape[-1] == 3 else jnp.zeros_like(a0)
    b0, b1 = b[..., 0], b[..., 1]
    b2 = b[..., 2] if b.shape[-1] == 3 else jnp.zeros_like(b0)
    sub, mul = jnp.subtract, jnp.multiply
    c = jnp.stack([sub(mul(a1, b2), mul(a2, b1)), sub(mul(a2, b0), mul(a0, b2)), sub(mul(a0, b1), mul(a1, b0))])
    return jnp.moveaxis(c, 0, axisc)


def vecdot(x1, x2, /, *, axis=-1, precision=None, preferred_element_type=None):
    x1, x2 = _arr(x1), _arr(x2)
    if x1.shape[axis] != x2.shape[axis]:
        raise ValueError(f"axes must match; got shapes {tuple(x1.shape)} and {tuple(x2.shape)} with axis={axis}")
    x1, x2 = jnp.moveaxis(x1, axis, -1), jnp.moveaxis(x2, axis, -1)

    def vdot(u, v):
        return jnp.vdot(u, v, precision=precision, preferred_element_type=preferred_element_type)
    return vectorize(vdot, signature="(n),(n)->()")(x1, x2)


def matvec(x1, x2, /):
    return vectorize(jnp.matmul, signature="(n,m),(m)->(n)")(_arr(x1), _arr(x2))


def vecmat(x1, x2, /):
    return vectorize(jnp.matmul, signature="(n),(n,m)->(m)")(_arr(x1), _arr(x2))


# ---------------------------------------------------------------------------------
# interpolation and 1-D convolution
# ---------------------------------------------------------------------------------
def interp(x, xp, fp, left=None, right=None, period=None):
    """Piecewise-linear interpolation of (xp, fp) at x (JAX's algorithm: searchsorted,
    a guarded slope, left / right values or 'extrapolate', periodic xp)."""
    x, xp, fp = _arr(x), _arr(xp), _arr(fp)
    if tuple(xp.shape) != tuple(fp.shape) or xp.ndim != 1:
        raise ValueError(f"xp and fp must be one-dimensional arrays of equal size; got {tuple(xp.shape)} and "
                         f"{tuple(fp.shape)}")
    x, xp = jnp._promote_float(x, xp)
    (fp,) = jnp._promote_float(fp)
    ex_left = ex_right = False
    if isinstance(left, str):
        if left != "extrapolate":
            raise ValueError(f"the only valid string value of `left` is 'extrapolate', but got: {left!r}")
        ex_left = True
    if isinstance(right, str):
        if right != "extrapolate":
            raise ValueError(f"the only valid string value of `right` is 'extrapolate', but got: {right!r}")
        ex_right = True
    if period is not None:
        if _np.ndim(period) != 0:
            raise ValueError(f"period must be a scalar; got {period}")
        period = jnp.abs(period)
        x = jnp.remainder(x, period)
        xp = jnp.remainder(xp, period)
        order = jnp.argsort(xp)
        xp, fp = jnp.take(xp, order), jnp.take(fp, order)
        xp = jnp.concatenate([jnp.subtract(xp[-1:], period), xp, jnp.add(xp[:1], period)])
        fp = jnp.concatenate([fp[-1:], fp, fp[:1]])
    n = xp.shape[0]
    i = jnp.clip(jnp.searchsorted(xp, x, side="right"), 1, n - 1)
    im1 = jnp.subtract(i, 1)
    fpi, fpm = jnp.take(fp, i, mode="clip"), jnp.take(fp, im1, mode="clip")
    xpi, xpm = jnp.take(xp, i, mode="clip"), jnp.take(xp, im1, mode="clip")
    df = jnp.subtract(fpi, fpm)
    dx = jnp.subtract(xpi, xpm)
    delta = jnp.subtract(x, xpm)
    eps = _np.spacing(_np.finfo(_np.float32 if xp.dtype == _dtypes.bfloat16 else xp.dtype).eps)
    dx0 = jnp.less_equal(jnp.abs(dx), eps)
    f = jnp.where(dx0, fpm, jnp.add(fpm, jnp.multiply(jnp.true_divide(delta, jnp.where(dx0, 1, dx)), df)))
    if not ex_left:
        lv = fp[0] if left is None else left
        if period is None:
            f = jnp.where(jnp.less(x, xp[0]), lv, f)
    if not ex_right:
        rv = fp[-1] if right is None else right
        if period is None:
            f = jnp.where(jnp.greater(x, xp[-1]), rv, f)
    return f


def _conv1d(x, y, mode, op, precision, preferred_element_type):
    x, y = _arr(x), _arr(y)
    if x.ndim != 1 or y.ndim != 1:
        raise ValueError(f"{op}() only support 1-dimensional inputs; got shapes {tuple(x.shape)} and {tuple(y.shape)}")
    if preferred_element_type is None:
        x, y = jnp._promote_float(x, y)
    else:
        x, y = jnp._promote(x, y)
    if x.shape[0] == 0 or y.shape[0] == 0:
        raise ValueError(f"{op}: inputs cannot be empty, got shapes {tuple(x.shape)} and {tuple(y.shape)}.")
    reverse_out = False
    if op == "correlate":
        if x.shape[0] < y.shape[0]:
            x, y, reverse_out = y, x, True
    else:
        if x.shape[0] < y.shape[0]:
            x, y = y, x
        y = jnp.flip(y)
    k = y.shape[0]
    if mode == "valid":
        pad = (0, 0)
    elif mode == "same":
        pad = (k // 2, k - k // 2 - 1)
    elif mode == "full":
        pad = (k - 1, k - 1)
    else:
        raise ValueError(f"mode must be one of ['full', 'same', 'valid']; got {mode!r}")
    out = lax.conv_general_dilated(jnp.reshape(x, (1, 1, 1, -1)), jnp.reshape(y, (1, 1, 1, -1)), (1, 1),
                                   [(0, 0), pad], precision=precision,
                                   preferred_element_type=preferred_element_type)
    out = out[0, 0, 0]
    return jnp.flip(out) if reverse_out else out


def convolve(a, v, mode="full", *, precision=None, preferred_element_type=None):
    """1-D discrete convolution (modes full / same / valid) by one conv_general_dilated."""
    return _conv1d(a, v, mode, "convolve", precision, preferred_element_type)


def correlate(a, v, mode="valid", *, precision=None, preferred_element_type=None):
    return _conv1d(a, v, mode, "correlate", precision, preferred_element_type)


# ---------------------------------------------------------------------------------
# polynomials (coefficients highest power first)
# ---------------------------------------------------------------------------------
def polyfit(x, y, deg, rcond=None, full=False, w=None, cov=False):
    """Least-squares polynomial fit (coefficients highest power first), jax.numpy's
    algorithm: the Vandermonde matrix, weighted, its columns scaled to unit norm, solved by
    ``linalg.lstsq``; ``full`` adds (residuals, rank, singular values, rcond), ``cov`` the
    coefficients' covariance (``'unscaled'``: without the residual factor)."""
    x, y = jnp.asarray(x), jnp.asarray(y)
    try:
        deg = _operator.index(deg)
    except TypeError:
        raise ConcretizationError(f"polyfit: deg must be a concrete int, got {deg!r}") from None
    order = deg + 1
    if deg < 0:
        raise ValueError("expected deg >= 0")
    if x.ndim != 1:
        raise TypeError("expected 1D vector for x")
    if x.size == 0:
        raise TypeError("expected non-empty vector for x")
    if y.ndim < 1 or y.ndim > 2:
        raise TypeError("expected 1D or 2D array for y")
    if x.shape[0] != y.shape[0]:
        raise TypeError("expected x and y to have same length")
    if rcond is None and not _dtypes.is_float(x.dtype):
        raise ValueError(f"data type {x.dtype} not inexact")  # jax's finfo(x.dtype)
    x, y = jnp._promote_float(x, y)
    if rcond is None:
        rcond = len(x) * float(jnp.finfo(x.dtype).eps)
    rcond = float(rcond)
    lhs, rhs = jnp.vander(x, order), y
    if w is not None:
        w = jnp.asarray(w)
        if w.ndim != 1:
            raise TypeError("expected a 1-d array for weights")
        if w.shape[0] != y.shape[0]:
            raise TypeError("expected w and y to have the same length")
        w = w.astype(lhs.dtype)
        lhs = lhs * w[:, None]
        rhs = rhs * (w[:, None] if rhs.ndim == 2 else w)
    scale = jnp.sqrt((lhs * lhs).sum(axis=0))
    lhs = lhs / scale[None, :]
    c, resids, rank, s = jnp.linalg.lstsq(lhs, rhs, rcond)
    c = (c.T / scale[None, :]).T if c.ndim > 1 else c / scale
    if full:
        return c, resids, rank, s, jnp.full((), rcond)  # weakly typed, as jax's lax.asarray(rcond)
    if not cov:
        return c
    vbase = jnp.linalg.inv(jnp.dot(lhs.T, lhs)) / jnp.outer(scale, scale)
    if cov == "unscaled":
        fac = jnp.asarray(1.0, dtype=vbase.dtype)
    else:
        if len(x) <= order:
            raise ValueError("the number of data points must exceed order to scale the covariance matrix")
        fac = resids / (len(x) - order)
    if y.ndim == 1:
        return c, vbase * jnp.atleast_1d(fac)[None]
    return c, vbase[:, :, None] * jnp.atleast_1d(fac)[None, None, :]


def polyval(p, x, *, unroll=16):
    """Horner's scheme over the leading axis of p (a Python loop: p's length is static)."""
    p, x = jnp._promote(p, x)
    shape = jnp.broadcast_shapes(tuple(p.shape[1:]), tuple(x.shape))
    y = jnp.zeros_like(x, shape=shape)
    for i in range(p.shape[0]):
        y = jnp.add(jnp.multiply(y, x), p[i])
    return y


def polyadd(a1, a2):
    a1, a2 = jnp._promote(a1, a2)
    if a2.shape[0] <= a1.shape[0]:
        return a1.at[a1.shape[0] - a2.shape[0]:].add(a2)
    return a2.at[a2.shape[0] - a1.shape[0]:].add(a1)


def polysub(a1, a2):
    a1, a2 = jnp._promote(a1, a2)
    return polyadd(a1, jnp.negative(a2))


def polymul(a1, a2, *, trim_leading_zeros=False):
    a1, a2 = jnp._promote_float(a1, a2)
    if trim_leading_zeros and (a1.shape[0] > 1 or a2.shape[0] > 1):
        a1, a2 = trim_zeros(a1, trim="f"), trim_zeros(a2, trim="f")
    if a1.shape[0] == 0:
        a1 = jnp.zeros(1, a2.dtype)
    if a2.shape[0] == 0:
        a2 = jnp.zeros(1, a1.dtype)
    return convolve(a1, a2, mode="full")


def polydiv(u, v, *, trim_leading_zeros=False):
    """(quotient, remainder) by long division (a Python loop over the static degree)."""
    u, v = jnp._promote_float(u, v)
    m, n = u.shape[0] - 1, v.shape[0] - 1
    scale = jnp.true_divide(1.0, v[0])
    q = jnp.zeros(max(m - n + 1, 1), u.dtype)
    if isinstance(u, Tracer) or isinstance(v, Tracer):
        q = jnp.zeros_like(u if isinstance(u, Tracer) else v, shape=(max(m - n + 1, 1),), dtype=u.dtype)
    for k in range(0, m - n + 1):
        d = jnp.multiply(scale, u[k])
        q = q.at[k].set(d)
        u = u.at[k:k + n + 1].add(jnp.negative(jnp.multiply(d, v)))
    if trim_leading_zeros:
        uv = _np.asarray(u)
        tol = float(_np.sqrt(_np.finfo(_np.float32).eps))
        nz = _np.nonzero(_np.abs(uv) > tol)[0]
        u = u[int(nz[0]):] if nz.size else u[:0]
    return q, u


def polyder(p, m=1):
    m = _static_index(m, "'m' argument of jnp.polyder")
    (p,) = jnp._promote_float(p)
    if m < 0:
        raise ValueError(f"Order of derivative must be positive; got m={m}")
    if m == 0:
        return p
    n = p.shape[0]
    coeff = _np.prod(_np.arange(m, n)[None, :] - _np.arange(m)[:, None], axis=0).astype(_np.float64)
    return jnp.multiply(p[:max(n - m, 0)], jnp.asarray(coeff[::-1].astype(_np.float32)).astype(p.dtype))


def polyint(p, m=1, k=None):
    m = _static_index(m, "'m' argument of jnp.polyint")
    k = 0 if k is None else k
    p, k = jnp._promote_float(p, k)
    if m < 0:
        raise ValueError(f"Order of integral must be positive (see polyder); got m={m}")
    k = jnp.atleast_1d(k)
    if k.shape[0] == 1:
        k = jnp.full((m,), k[0])
    if tuple(k.shape) != (m,):
        raise ValueError(f"k must be a scalar or a rank-1 array of length 1 or m; got shape {tuple(k.shape)}")
    if m == 0:
        return p
    n = p.shape[0]
    grid = _np.arange(n + m, dtype=_np.float64)[None, :] - _np.arange(m, dtype=_np.float64)[:, None]
    coeff = _np.maximum(1, grid).prod(0)[::-1].astype(_np.float32)
    return jnp.true_divide(jnp.concatenate([p, k]), jnp.asarray(coeff).astype(p.dtype))


def roots(p, *, strip_zeros=True):
    """jnp.roots: the eigenvalues of the companion matrix of p (rank 1, highest power first),
    complex64 for float32 coefficients. strip_zeros=True drops leading zeros (a concrete
    count, so not under jit); strip_zeros=False keeps the length and returns NaN for the
    roots that leading zeros remove, as JAX."""
    from . import complex as _c
    from .linalg import eigvals
    if isinstance(p, _c.ComplexArray) or _c.is_complex_value(p):
        raise TypeError("roots: podlet takes real coefficients only (its eigensolver is real)")
    (p,) = jnp._promote_float(p)
    p = jnp.atleast_1d(p)
    if p.ndim != 1:
        raise ValueError("Input must be a rank-1 array.")
    if p.shape[0] < 2:
        return _c.make(jnp.zeros((0,), p.dtype), None)
    is_zero = p == 0
    lead = jnp.where(jnp.all(is_zero), p.shape[0], jnp.argmin(is_zero))
    if strip_zeros:
        if isinstance(lead, Tracer):
            raise ConcretizationError("Abstract tracer value encountered where concrete value is expected: the "
                                      "number of leading zeros of p. The error occurred in the jnp.roots() "
                                      "function. To use this within a JIT-compiled context, pass "
                                      "strip_zeros=False, but be aware that leading zeros will result in some "
                                      "returned roots being set to NaN.")
        lead = int(lead)
        return _roots_no_zeros(p[lead:], eigvals, _c)
    n = p.shape[0]
    p = jnp.where(lead == n, jnp.ones((), p.dtype), p)
    r = _roots_no_zeros(jnp.roll(p, -lead), eigvals, _c)
    # zero roots to the end (stable), then NaN for the roots the leading zeros remove
    order = jnp.argsort(jnp.astype((r.real == 0) & (r.imag == 0), jnp.int32), stable=True)
    re, im = jnp.take(r.real, order), jnp.take(r.imag, order)
    keep = jnp.arange(n - 1) < (n - 1) - lead
    nan = jnp.full((), _np.nan, re.dtype)
    return _c.make(jnp.where(keep, re, nan), jnp.where(keep, im, nan))


def _roots_no_zeros(p, eigvals, _c):
    if p.shape[0] < 2:
        return _c.make(jnp.zeros((0,), p.dtype), None)
    m = p.shape[0] - 1
    a = jnp.eye(m, k=-1, dtype=p.dtype)
    a = a.at[0, :].set(-p[1:] / p[0])
    return eigvals(a)


def poly(seq_of_zeros):
    """The coefficients of the monic polynomial with the given roots (1-D input), or a square
    matrix's characteristic polynomial (complex, from its eigenvalues, as JAX)."""
    (z,) = jnp._promote_float(seq_of_zeros)
    z = jnp.atleast_1d(z)
    if z.ndim == 2 and z.shape[0] == z.shape[1] and z.shape[0] != 0:
        from . import complex as _c
        from .linalg import eigvals
        w = eigvals(z)
        re, im = jnp.ones((1,), z.dtype), jnp.zeros((1,), z.dtype)
        zero = jnp.zeros((1,), z.dtype)
        for i in range(z.shape[0]):  # a(x) (x - w_i), in real and imaginary parts
            wr, wi = w.real[i], w.imag[i]
            sr, si = jnp.concatenate([zero, re]), jnp.concatenate([zero, im])
            re, im = jnp.concatenate([re, zero]) - (wr * sr - wi * si), jnp.concatenate([im, zero]) - (wr * si + wi * sr)
        return _c.make(re, im)
    if z.ndim != 1:
        raise ValueError(f"input must be 1d or non-empty square 2d array; got shape {tuple(z.shape)}")
    if z.shape[0] == 0:
        return jnp.ones((), z.dtype)
    a = jnp.ones((1,), z.dtype)
    for i in range(z.shape[0]):
        a = convolve(a, jnp.stack([jnp.ones((), z.dtype), jnp.negative(z[i])]), mode="full")
    return a
