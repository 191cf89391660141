"""jax.lax's general gather and scatter (XLA's dimension numbers), lowered onto podlet's
flat indexing primitives (issue 26).

Both compute, for every element of the result (gather) or of the updates (scatter),
its flat position in the operand from the start indices, the window offsets and the
batching dimensions, with int32 index arithmetic. A gather is then one `take` of the
flattened operand (its VJP is scatter_add, so gradients flow as in JAX); a scatter is
one `scatter_add` into the flattened operand plus a drop slot (add / sub) or the
segment reduction of podlet.numpy's .at[] (set / mul / min / max). Out-of-bounds
windows follow GatherScatterMode: CLIP clamps the start so the window fits, FILL_OR_DROP
fills a gathered window (NaN, INT_MIN, UINT_MAX or True unless `fill_value`) and drops
a scattered one, PROMISE_IN_BOUNDS clamps gathers and drops scatters (what XLA does).
ONE_HOT is not supported."""
import enum
from typing import NamedTuple

import numpy as _np

from .. import lax
from .. import numpy as jnp
from . import dtypes as _dtypes
from .control_flow import while_loop
from .core import Tracer, bind

__all__ = ["GatherDimensionNumbers", "ScatterDimensionNumbers", "GatherScatterMode", "gather", "scatter",
           "scatter_add", "scatter_sub", "scatter_mul", "scatter_min", "scatter_max", "scatter_apply"]


class GatherScatterMode(enum.Enum):
    """How a gather or scatter treats out-of-bounds indices (jax.lax.GatherScatterMode)."""
    CLIP = enum.auto()
    FILL_OR_DROP = enum.auto()
    PROMISE_IN_BOUNDS = enum.auto()
    ONE_HOT = enum.auto()

    @staticmethod
    def from_any(s):
        if isinstance(s, GatherScatterMode):
            return s
        if s == "clip":
            return GatherScatterMode.CLIP
        if s is None or s == "fill" or s == "drop":
            return GatherScatterMode.FILL_OR_DROP
        if s == "promise_in_bounds":
            return GatherScatterMode.PROMISE_IN_BOUNDS
        if s == "one_hot":
            return GatherScatterMode.ONE_HOT
        raise ValueError(f'Unknown gather mode "{s}"')


class GatherDimensionNumbers(NamedTuple):
    """XLA's gather dimension numbers (jax.lax.GatherDimensionNumbers)."""
    offset_dims: tuple
    collapsed_slice_dims: tuple
    start_index_map: tuple
    operand_batching_dims: tuple = ()
    start_indices_batching_dims: tuple = ()


class ScatterDimensionNumbers(NamedTuple):
    """XLA's scatter dimension numbers (jax.lax.ScatterDimensionNumbers)."""
    update_window_dims: tuple
    inserted_window_dims: tuple
    scatter_dims_to_operand_dims: tuple
    operand_batching_dims: tuple = ()
    scatter_indices_batching_dims: tuple = ()


def _i32(v):
    return jnp.asarray(_np.int32(v))


def _indices(idx, what):
    idx = jnp.asarray(idx)
    if idx.dtype.kind not in "iu":
        raise ValueError(f"lax.{what}: indices must have an integer type, got {idx.dtype}")
    if idx.ndim == 0:
        raise ValueError(f"lax.{what}: indices must have rank >= 1 (the last dimension is the index vector)")
    return lax.convert_element_type(idx, _np.int32) if idx.dtype != _dtypes.int32 else idx


def _positions(x_shape, out_shape, batch_pos, idx, index_map, window, batching, clip):
    """Flat positions (int32, out_shape) in an operand of x_shape, and the validity of
    each start (batch-shaped; None when every start fits).

    batch_pos: the result dims that run over idx's batch dims (idx.shape[:-1]), in order;
    index_map[k]: the operand dim idx[..., k] starts; window: {operand dim: result dim of
    its window offset}; batching: {operand dim: idx batch dim giving its index}."""
    r = len(x_shape)
    wsize = [out_shape[window[d]] if d in window else 1 for d in range(r)]
    strides = [int(_np.prod(x_shape[d + 1:], dtype=_np.int64)) for d in range(r)]
    lin = None
    valid = None

    def add(term):
        nonlocal lin
        lin = term if lin is None else bind("add", lin, term)

    for k, d in enumerate(index_map):
        s = bind("reshape", lax.slice_in_dim(idx, k, k + 1, axis=idx.ndim - 1), new_sizes=list(idx.shape[:-1]))
        hi = x_shape[d] - wsize[d]
        if clip:
            s = bind("clamp", _i32(0), s, _i32(max(hi, 0)))
        else:
            ok = bind("and", bind("ge", s, _i32(0)), bind("le", s, _i32(hi)))
            valid = ok if valid is None else bind("and", valid, ok)
        s = bind("mul", s, _i32(strides[d]))
        add(lax.broadcast_in_dim(s, out_shape, batch_pos))
    for d in range(r):
        step = None
        if d in window:
            step = window[d]
        elif d in batching:
            step = batch_pos[batching[d]]
        if step is not None and out_shape[step] > 1 and strides[d]:
            add(bind("mul", lax.broadcasted_iota(_np.int32, out_shape, step), _i32(strides[d])))
    if lin is None:
        lin = jnp.zeros(out_shape, _np.int32)
    elif tuple(lin.shape) != tuple(out_shape):
        lin = jnp.broadcast_to(lin, out_shape)
    return lin, valid


def _sorted_unique(name, dims, bound, what):
    dims = tuple(int(d) for d in dims)
    if list(dims) != sorted(set(dims)) or any(not 0 <= d < bound for d in dims):
        raise TypeError(f"lax.{what}: {name} must be sorted, unique and in [0, {bound}), got {dims}")
    return dims


def _default_fill(dtype):
    d = _np.dtype(dtype)
    if d == _np.bool_:
        return True
    if d.kind == "f" or d == _dtypes.bfloat16:
        return _np.nan
    return _np.iinfo(d).min if d.kind == "i" else _np.iinfo(d).max


def gather(operand, start_indices, dimension_numbers, slice_sizes, *, unique_indices=False,
           indices_are_sorted=False, mode=None, fill_value=None):
    """jax.lax.gather: XLA's Gather. The default mode (None) is PROMISE_IN_BOUNDS, which
    clamps the starts as XLA does; 'fill' gives `fill_value` (NaN / INT_MIN / UINT_MAX /
    True by default) for every window that does not fit."""
    x = jnp.asarray(operand)
    idx = _indices(start_indices, "gather")
    dn = dimension_numbers
    if not isinstance(dn, GatherDimensionNumbers):
        raise TypeError(f"lax.gather: dimension_numbers must be a GatherDimensionNumbers, got {type(dn).__name__}")
    m = GatherScatterMode.from_any(GatherScatterMode.PROMISE_IN_BOUNDS if mode is None else mode)
    if m == GatherScatterMode.ONE_HOT:
        raise ValueError("lax.gather: podlet does not support mode ONE_HOT")
    r = x.ndim
    slice_sizes = tuple(int(s) for s in slice_sizes)
    if len(slice_sizes) != r:
        raise TypeError(f"lax.gather: slice_sizes must have one entry per operand dimension ({r}), got {slice_sizes}")
    for d, (s, n) in enumerate(zip(slice_sizes, x.shape)):
        if not 0 <= s <= n:
            raise TypeError(f"lax.gather: slice_sizes[{d}]={s} must be in [0, {n}] (operand shape {tuple(x.shape)})")
    collapsed = _sorted_unique("collapsed_slice_dims", dn.collapsed_slice_dims, r, "gather")
    obatch = _sorted_unique("operand_batching_dims", dn.operand_batching_dims, r, "gather")
    if set(collapsed) & set(obatch):
        raise TypeError(f"lax.gather: collapsed_slice_dims {collapsed} and operand_batching_dims {obatch} "
                         "must be disjoint")
    for d in collapsed + obatch:
        if slice_sizes[d] != 1:
            raise TypeError(f"lax.gather: slice_sizes[{d}] must be 1 for a collapsed or batching dimension, "
                             f"got {slice_sizes[d]}")
    index_map = tuple(int(d) for d in dn.start_index_map)
    if idx.shape[-1] != len(index_map):
        raise TypeError(f"lax.gather: start_index_map {index_map} must have one entry per index in the last "
                         f"dimension of start_indices (shape {tuple(idx.shape)})")
    batch_shape = tuple(idx.shape[:-1])
    offset_operand = [d for d in range(r) if d not in collapsed and d not in obatch]
    offset_dims = tuple(int(d) for d in dn.offset_dims)
    out_rank = len(batch_shape) + len(offset_operand)
    if len(offset_dims) != len(offset_operand) or _sorted_unique("offset_dims", offset_dims, out_rank, "gather") != offset_dims:
        raise TypeError(f"lax.gather: offset_dims {offset_dims} must name {len(offset_operand)} output dimensions")
    batch_pos = [p for p in range(out_rank) if p not in offset_dims]
    out_shape = [0] * out_rank
    for p, d in zip(offset_dims, offset_operand):
        out_shape[p] = slice_sizes[d]
    for p, n in zip(batch_pos, batch_shape):
        out_shape[p] = n
    window = {d: p for p, d in zip(offset_dims, offset_operand)}
    batching = {d: int(j) for d, j in zip(obatch, dn.start_indices_batching_dims)}
    if _np.prod(out_shape, dtype=_np.int64) == 0:
        return jnp.zeros(out_shape, x.dtype)
    lin, valid = _positions(tuple(x.shape), out_shape, batch_pos, idx, index_map, window, batching,
                            clip=m != GatherScatterMode.FILL_OR_DROP)
    if valid is not None:
        lin = bind("select", lax.broadcast_in_dim(valid, out_shape, batch_pos), lin, jnp.zeros(out_shape, _np.int32))
    out = bind("reshape", bind("take", lax.reshape(x, [x.size]), lax.reshape(lin, [lin.size]), axis=0),
               new_sizes=out_shape)
    if valid is not None:
        fill = _default_fill(x.dtype) if fill_value is None else fill_value
        out = bind("select", lax.broadcast_in_dim(valid, out_shape, batch_pos), out,
                   jnp.full(out_shape, fill, x.dtype))
    return out


def _scatter_positions(x, idx, upd, dn, mode, what):
    """Flat positions of the update elements in x (x.size for a dropped one)."""
    if not isinstance(dn, ScatterDimensionNumbers):
        raise TypeError(f"lax.{what}: dimension_numbers must be a ScatterDimensionNumbers, got {type(dn).__name__}")
    m = GatherScatterMode.from_any(mode)
    if m == GatherScatterMode.ONE_HOT:
        raise ValueError(f"lax.{what}: podlet does not support mode ONE_HOT")
    r = x.ndim
    inserted = _sorted_unique("inserted_window_dims", dn.inserted_window_dims, r, what)
    obatch = _sorted_unique("operand_batching_dims", dn.operand_batching_dims, r, what)
    window_dims = _sorted_unique("update_window_dims", dn.update_window_dims, upd.ndim, what)
    if set(inserted) & set(obatch):
        raise TypeError(f"lax.{what}: inserted_window_dims {inserted} and operand_batching_dims {obatch} "
                         "must be disjoint")
    window_operand = [d for d in range(r) if d not in inserted and d not in obatch]
    if len(window_dims) != len(window_operand):
        raise TypeError(f"lax.{what}: update_window_dims {window_dims} must name {len(window_operand)} update "
                         f"dimensions (operand rank {r} minus inserted and batching dimensions)")
    index_map = tuple(int(d) for d in dn.scatter_dims_to_operand_dims)
    if idx.shape[-1] != len(index_map):
        raise TypeError(f"lax.{what}: scatter_dims_to_operand_dims {index_map} must have one entry per index in "
                         f"the last dimension of scatter_indices (shape {tuple(idx.shape)})")
    batch_pos = [p for p in range(upd.ndim) if p not in window_dims]
    if [upd.shape[p] for p in batch_pos] != list(idx.shape[:-1]):
        raise TypeError(f"lax.{what}: updates shape {tuple(upd.shape)} does not match scatter_indices shape "
                         f"{tuple(idx.shape)} outside update_window_dims {window_dims}")
    for p, d in zip(window_dims, window_operand):
        if upd.shape[p] > x.shape[d]:
            raise TypeError(f"lax.{what}: update window dimension {p} of size {upd.shape[p]} exceeds operand "
                             f"dimension {d} of size {x.shape[d]}")
    window = {d: p for p, d in zip(window_dims, window_operand)}
    batching = {d: int(j) for d, j in zip(obatch, dn.scatter_indices_batching_dims)}
    lin, valid = _positions(tuple(x.shape), list(upd.shape), batch_pos, idx, index_map, window, batching,
                            clip=m == GatherScatterMode.CLIP)
    if valid is not None:
        lin = bind("select", lax.broadcast_in_dim(valid, list(upd.shape), batch_pos), lin,
                   jnp.full(upd.shape, x.size, _np.int32))
    return lax.reshape(lin, [lin.size])


def _prep(operand, scatter_indices, updates, what):
    x = jnp.asarray(operand)
    idx = _indices(scatter_indices, what)
    u = jnp.asarray(updates)
    if u.dtype != x.dtype:
        if jnp._weak(updates) or not hasattr(updates, "dtype"):
            u = jnp.asarray(updates, dtype=x.dtype)
        else:
            raise TypeError(f"lax.{what}: updates dtype {u.dtype} must match operand dtype {x.dtype}")
    return x, idx, u


def _scatter_op(op, what):
    def f(operand, scatter_indices, updates, dimension_numbers, *, indices_are_sorted=False,
          unique_indices=False, mode=None):
        x, idx, u = _prep(operand, scatter_indices, updates, what)
        if x.dtype == _dtypes.bool_ and op in ("add", "sub", "mul"):
            raise TypeError(f"lax.{what} does not accept dtype bool")
        pos = _scatter_positions(x, idx, u, dimension_numbers, mode, what)
        n = x.size
        if pos.size == 0 or n == 0:
            return x
        uf = lax.reshape(u, [u.size])
        if op in ("add", "sub"):
            if op == "sub":
                uf = bind("neg", uf)
            ext = lax.concatenate([lax.reshape(x, [n]), jnp.zeros((1,), x.dtype)], 0)
            return lax.reshape(lax.slice_in_dim(bind("scatter_add", ext, pos, uf, axis=0), 0, n), x.shape)
        reducer = {"set": None, "mul": jnp.multiply, "min": jnp.minimum, "max": jnp.maximum}[op]
        src, touched, vals = jnp._segment_reduce(pos, uf, n, reducer)
        picked = lax.reshape(bind("take", vals, src, axis=0), x.shape)
        new = picked if reducer is None else reducer(x, picked)
        return jnp.where(lax.reshape(touched, x.shape), new, x)
    f.__name__ = f.__qualname__ = what
    f.__doc__ = (f"jax.lax.{what}: XLA's Scatter with the `{op}` combiner (default mode FILL_OR_DROP: a "
                 "window that does not fit is dropped; 'clip' clamps its start). Repeated indices combine "
                 "in order (set: the last update wins).")
    return f


scatter = _scatter_op("set", "scatter")
scatter_add = _scatter_op("add", "scatter_add")
scatter_sub = _scatter_op("sub", "scatter_sub")
scatter_mul = _scatter_op("mul", "scatter_mul")
scatter_min = _scatter_op("min", "scatter_min")
scatter_max = _scatter_op("max", "scatter_max")


def scatter_apply(operand, scatter_indices, func, dimension_numbers, *, update_shape=(), indices_are_sorted=False,
                  unique_indices=False, mode=None):
    """jax.lax.scatter_apply: func applied to the operand elements the scatter reaches,
    once per time an index reaches them (as XLA's scatter applies its combiner)."""
    x = jnp.asarray(operand)
    idx = _indices(scatter_indices, "scatter_apply")
    u = jnp.zeros(tuple(update_shape), x.dtype)
    pos = _scatter_positions(x, idx, u, dimension_numbers, mode, "scatter_apply")
    n = x.size
    if pos.size == 0 or n == 0:
        return x
    count = lax.slice_in_dim(bind("scatter_add", jnp.zeros((n + 1,), _np.int32), pos,
                                  jnp.ones((pos.size,), _np.int32), axis=0), 0, n)
    count = lax.reshape(count, x.shape)
    if not isinstance(count, Tracer):
        for r in range(int(_np.asarray(count).max())):
            x = jnp.where(count > r, func(x), x)
        return x

    def body(c):
        r, v = c
        return r + 1, jnp.where(count > r, func(v), v)
    return while_loop(lambda c: c[0] < jnp.max(count), body, (_i32(0), x))[1]
