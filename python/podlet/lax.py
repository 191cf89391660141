"""podlet.lax: the jax.lax subset, thin wrappers over primitives (core.bind)."""
import builtins as _bi
from typing import NamedTuple as _NamedTuple

import numpy as _np

from ._src.core import bind, Tracer, Array, to_array
from ._src import dtypes as _dtypes
from ._src import pmap as _pmap
from ._src.precision import (Precision, DotAlgorithm, DotAlgorithmPreset, AccuracyMode, Tolerance,  # noqa: F401
                             canonicalize_precision)
from ._src import precision as _precision
from ._src.config import flags as _config_flags
from .tree_util import tree_map as _tree_map


def _b(name):
    def f(*args):
        return bind(name, *args)
    f.__name__ = name
    f.__doc__ = f"Elementwise `{name}` primitive (NumPy broadcasting)."
    return f


add, sub, mul, div, pow, max, min, rem = (_b(n) for n in ("add", "sub", "mul", "div", "pow", "max", "min", "rem"))
atan2 = _b("atan2")
neg, abs, sign, exp, log, log1p, expm1, tanh, logistic, sqrt, rsqrt, erf, erf_inv, sin, cos, floor, ceil = (
    _b(n) for n in ("neg", "abs", "sign", "exp", "log", "log1p", "expm1", "tanh", "logistic", "sqrt",
                    "rsqrt", "erf", "erf_inv", "sin", "cos", "floor", "ceil"))
is_finite = _b("is_finite")
eq, ne, lt, le, gt, ge = (_b(n) for n in ("eq", "ne", "lt", "le", "gt", "ge"))
bitwise_and, bitwise_or, bitwise_xor, bitwise_not = _b("and"), _b("or"), _b("xor"), _b("not")
shift_left, shift_right_logical, shift_right_arithmetic = (
    _b("shift_left"), _b("shift_right_logical"), _b("shift_right_arithmetic"))


def round(x, rounding_method=0):
    return bind("round", x, rounding_method=int(rounding_method))


def integer_pow(x, y):
    return bind("integer_pow", x, y=int(y))


def square(x):
    return integer_pow(x, 2)


def select(pred, on_true, on_false):
    return bind("select", pred, on_true, on_false)


def clamp(min, x, max):
    return bind("clamp", min, x, max)


def convert_element_type(operand, new_dtype):
    d = _dtypes.canonicalize(new_dtype)
    if operand.dtype == d if hasattr(operand, "dtype") else False:
        return operand
    return bind("convert_element_type", operand, new_dtype=d.name)


def bitcast_convert_type(operand, new_dtype):
    return bind("bitcast_convert_type", operand, new_dtype=_dtypes.dtype(new_dtype).name)


def stop_gradient(x):
    """Identity whose gradient is zero (applied to every leaf of a pytree)."""
    from . import tree_util
    return tree_util.tree_map(lambda a: bind("stop_gradient", a), x)


# ---- shapes ----
def reshape(operand, new_sizes, dimensions=None):
    if dimensions is not None:
        operand = transpose(operand, dimensions)
    return bind("reshape", operand, new_sizes=[int(d) for d in new_sizes])


def transpose(operand, permutation):
    return bind("transpose", operand, permutation=[int(p) for p in permutation])


def broadcast_in_dim(operand, shape, broadcast_dimensions):
    return bind("broadcast_in_dim", operand, shape=[int(d) for d in shape],
                broadcast_dimensions=[int(d) for d in broadcast_dimensions])


def broadcast(operand, sizes):
    nd = len(operand.shape)
    return broadcast_in_dim(operand, tuple(sizes) + tuple(operand.shape),
                            list(range(len(sizes), len(sizes) + nd)))


def expand_dims(x, dimensions):
    shape = list(x.shape)
    for d in sorted(dd % (len(shape) + len(dimensions)) for dd in dimensions):
        shape.insert(d, 1)
    return reshape(x, shape)


def squeeze(x, dimensions):
    dims = {d % len(x.shape) for d in dimensions}
    return reshape(x, [s for i, s in enumerate(x.shape) if i not in dims])


def slice(operand, start_indices, limit_indices, strides=None):
    attrs = dict(start_indices=[int(i) for i in start_indices], limit_indices=[int(i) for i in limit_indices])
    if strides is not None:
        attrs["strides"] = [int(s) for s in strides]
    return bind("slice", operand, **attrs)


def slice_in_dim(operand, start_index, limit_index, stride=1, axis=0):
    nd = len(operand.shape)
    axis %= nd
    starts = [0] * nd
    limits = list(operand.shape)
    strides = [1] * nd
    n = operand.shape[axis]
    s = 0 if start_index is None else (start_index + n if start_index < 0 else start_index)
    e = n if limit_index is None else (limit_index + n if limit_index < 0 else limit_index)
    starts[axis], limits[axis], strides[axis] = s, e, stride
    return slice(operand, starts, limits, strides)


def _index_scalar(i):
    if isinstance(i, (Tracer, Array)):
        return convert_element_type(i, _np.int32) if i.dtype != _dtypes.int32 else i
    return to_array(_np.int32(i))


def dynamic_slice(operand, start_indices, slice_sizes):
    return bind("dynamic_slice", operand, *[_index_scalar(i) for i in start_indices],
                slice_sizes=[int(s) for s in slice_sizes])


def dynamic_update_slice(operand, update, start_indices):
    return bind("dynamic_update_slice", operand, update, *[_index_scalar(i) for i in start_indices])


def dynamic_slice_in_dim(operand, start_index, slice_size, axis=0):
    starts = [0] * len(operand.shape)
    starts[axis] = start_index
    sizes = list(operand.shape)
    sizes[axis] = slice_size
    return dynamic_slice(operand, starts, sizes)


def concatenate(operands, dimension):
    return bind("concatenate", *operands, dimension=int(dimension))


def pad(operand, padding_value, padding_config):
    lo, hi, it = zip(*padding_config) if padding_config else ((), (), ())
    pv = padding_value if isinstance(padding_value, (Tracer, Array)) else to_array(_np.asarray(padding_value, operand.dtype))
    return bind("pad", operand, pv, low=list(lo), high=list(hi), interior=list(it))


def rev(operand, dimensions):
    return bind("rev", operand, dimensions=[int(d) for d in dimensions])


def iota(dtype, size):
    return broadcasted_iota(dtype, (size,), 0)


def broadcasted_iota(dtype, shape, dimension):
    return bind("iota", dtype=_dtypes.canonicalize(dtype).name, shape=[int(s) for s in shape], dimension=int(dimension))


# ---- reductions ----
def reduce_sum(operand, axes):
    axes = [int(a) for a in axes]
    if operand.dtype == _dtypes.bfloat16 and not _config_flags["allow_f16_reductions"] and \
            _bi.any(operand.shape[a] != 1 for a in axes):
        raise ValueError(f"reduce_sum on operand bfloat16{list(operand.shape)} is not allowed when "
                         "jax_allow_f16_reductions=False.")
    return bind("reduce_sum", operand, axes=axes)


def reduce_max(operand, axes):
    return bind("reduce_max", operand, axes=[int(a) for a in axes])


def reduce_min(operand, axes):
    return bind("reduce_min", operand, axes=[int(a) for a in axes])


def reduce_prod(operand, axes):
    return bind("reduce_prod", operand, axes=[int(a) for a in axes])


def argmax(operand, axis, index_dtype):
    return bind("argmax", operand, axis=int(axis), index_dtype=_dtypes.canonicalize(index_dtype).name)


def argmin(operand, axis, index_dtype):
    return bind("argmin", operand, axis=int(axis), index_dtype=_dtypes.canonicalize(index_dtype).name)


def cumsum(operand, axis=0, reverse=False):
    return bind("cumsum", operand, axis=int(axis), reverse=int(bool(reverse)))


# ---- contractions ----
def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None):
    """jax.lax.dot_general. precision: a Precision (values unchanged: every product is
    exact, sums in f32), 'bfloat16' / 'bfloat16_3x' / BF16_BF16_F32(_X3/_X6) (a TPU's bf16
    passes on f32 operands), another DotAlgorithmPreset / DotAlgorithm (operands cast as
    jax's CPU does), see podlet/_src/precision.py."""
    (lc, rc), (lb, rb) = dimension_numbers
    lhs, rhs, attrs, finish = _precision.dot_operands(lhs, rhs, precision, preferred_element_type)
    attrs.update(lhs_contracting=[int(i) for i in lc], rhs_contracting=[int(i) for i in rc],
                 lhs_batch=[int(i) for i in lb], rhs_batch=[int(i) for i in rb])
    return finish(bind("dot_general", lhs, rhs, **attrs))


def dot(lhs, rhs, precision=None, preferred_element_type=None):
    return dot_general(lhs, rhs, (([len(lhs.shape) - 1], [0]), ([], [])), precision=precision,
                       preferred_element_type=preferred_element_type)


def _dilate(k, d):
    return 0 if k == 0 else 1 + d * (k - 1)


def padtype_to_pads(in_shape, window_shape, window_strides, padding):
    """jax.lax.padtype_to_pads: 'SAME' / 'SAME_LOWER' / 'VALID' -> [(lo, hi), ...]."""
    if not isinstance(padding, str):
        return [tuple(int(v) for v in p) for p in padding]
    p = padding.upper()
    if p == "VALID":
        return [(0, 0)] * len(in_shape)
    if p in ("SAME", "SAME_LOWER"):
        out = [-(-i // s) for i, s in zip(in_shape, window_strides)]
        sizes = [_bi.max(0, (o - 1) * s + w - i) for o, s, w, i in zip(out, window_strides, window_shape, in_shape)]
        if p == "SAME":
            return [(t // 2, t - t // 2) for t in sizes]
        return [(t - t // 2, t // 2) for t in sizes]
    raise ValueError(f"unknown padding {padding!r}; expected 'SAME', 'SAME_LOWER', 'VALID' or (lo, hi) pairs")


class ConvDimensionNumbers(_NamedTuple):
    """jax.lax.ConvDimensionNumbers: (batch, feature, spatial...) dimension numbers of
    lhs and out, (out feature, in feature, spatial...) of rhs."""
    lhs_spec: tuple
    rhs_spec: tuple
    out_spec: tuple


def _specs_to_strings(dn):
    """Layout strings ('NCHW', 'OIHW', 'NCHW' style) of a ConvDimensionNumbers."""
    sp = "HWDXYZ"

    def one(spec, a, b):
        chars = [""] * len(spec)
        chars[spec[0]], chars[spec[1]] = a, b
        for i, d in enumerate(spec[2:]):
            chars[d] = sp[i]
        return "".join(chars)
    return one(dn.lhs_spec, "N", "C"), one(dn.rhs_spec, "O", "I"), one(dn.out_spec, "N", "C")


def conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation=None, rhs_dilation=None,
                         dimension_numbers=None, feature_group_count=1, batch_group_count=1,
                         precision=None, preferred_element_type=None):
    """jax.lax.conv_general_dilated: any number of spatial dims, batch_group_count, JAX's
    checks; lowered to the 2-D primitive in podlet/_src/lax_conv.py (read there)."""
    from ._src import lax_conv as _lax_conv
    return _lax_conv.conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation,
                                          dimension_numbers, feature_group_count, batch_group_count,
                                          precision, preferred_element_type)


def _conv_transpose_padding(k, s, padding):
    """(before, after) padding of one spatial dim of a transposed convolution (jax's rule)."""
    if padding == "SAME":
        pad_len = k + s - 2
        pad_a = k - 1 if s > k - 1 else int(_np.ceil(pad_len / 2))
    elif padding == "VALID":
        pad_len = k + s - 2 + _bi.max(k - s, 0)
        pad_a = k - 1
    elif isinstance(padding, tuple):
        pads = tuple(k - p - 1 for p in padding)
        pad_a = pads[0]
        pad_len = _bi.sum(pads)
    else:
        raise ValueError(f"Invalid padding mode: {padding}")
    return pad_a, pad_len - pad_a


def conv_transpose(lhs, rhs, strides, padding, rhs_dilation=None, dimension_numbers=None,
                   transpose_kernel=False, precision=None, preferred_element_type=None,
                   use_consistent_padding=False):
    """jax.lax.conv_transpose (0- to 3-D): a convolution with input dilation `strides`.

    String padding ('SAME' / 'VALID') names the padding of the forward convolution this
    one transposes; explicit (lo, hi) pairs are used as they are (unless
    `use_consistent_padding`), exactly as in jax.
    """
    if dimension_numbers is None:
        defaults = {2: ("NC", "IO", "NC"), 3: ("NHC", "HIO", "NHC"), 4: ("NHWC", "HWIO", "NHWC"),
                    5: ("NHWDC", "HWDIO", "NHWDC")}
        if len(lhs.shape) not in defaults:
            raise ValueError("No 4+ dimensional dimension_number defaults.")
        dimension_numbers = defaults[len(lhs.shape)]
    if isinstance(dimension_numbers, ConvDimensionNumbers):
        dimension_numbers = _specs_to_strings(dimension_numbers)
    lhs_spec, rhs_spec, _ = tuple(dimension_numbers)
    k_sdims = [rhs.shape[rhs_spec.index(c)] for c in rhs_spec if c not in "OI"]
    rhs_dilation = tuple(rhs_dilation or (1,) * len(k_sdims))
    if use_consistent_padding or (isinstance(padding, str) and padding in ("SAME", "VALID")):
        eff = [_dilate(k, d) for k, d in zip(k_sdims, rhs_dilation)]
        rep = [padding] * len(strides) if isinstance(padding, str) else [tuple(p) for p in padding]
        pads = [_conv_transpose_padding(k, s, p) for k, s, p in zip(eff, strides, rep)]
    else:
        pads = [tuple(p) for p in padding]
    if transpose_kernel:
        sp_axes = [rhs_spec.index(c) for c in rhs_spec if c not in "OI"]
        rhs = rev(rhs, sp_axes)
        i, o = rhs_spec.index("I"), rhs_spec.index("O")
        perm = list(range(len(rhs.shape)))
        perm[i], perm[o] = perm[o], perm[i]
        rhs = transpose(rhs, perm)
    one = (1,) * len(k_sdims)
    return conv_general_dilated(lhs, rhs, one, pads, lhs_dilation=tuple(strides), rhs_dilation=rhs_dilation,
                                dimension_numbers=dimension_numbers, precision=precision,
                                preferred_element_type=preferred_element_type)


def conv(lhs, rhs, window_strides, padding, precision=None, preferred_element_type=None):
    return conv_general_dilated(lhs, rhs, window_strides, padding, precision=precision,
                                preferred_element_type=preferred_element_type)


def reduce_window(operand, init_value, computation, window_dimensions, window_strides, padding,
                  base_dilation=None, window_dilation=None):
    """jax.lax.reduce_window with computation lax.add or lax.max (or 'sum' / 'max')."""
    if base_dilation not in (None, (1,) * len(operand.shape)) or window_dilation not in (None, (1,) * len(operand.shape)):
        raise NotImplementedError("reduce_window dilation is not supported")
    comp = {add: "sum", max: "max", "sum": "sum", "max": "max", "add": "sum"}.get(computation)
    if comp is None:
        raise ValueError(f"reduce_window computation must be lax.add or lax.max, got {computation!r}")
    if isinstance(padding, str):
        padding = padtype_to_pads(operand.shape, window_dimensions, window_strides, padding)
    pads = [int(v) for p in padding for v in p]
    out = bind("reduce_window", operand, computation=comp, window_dimensions=[int(d) for d in window_dimensions],
               window_strides=[int(s) for s in window_strides], padding=pads)
    iv = _np.asarray(init_value if not isinstance(init_value, (Array,)) else _np.asarray(init_value))
    if comp == "sum" and iv.item() != 0:
        out = add(out, to_array(iv.astype(operand.dtype)))
    return out


# ---- collectives: valid inside pmap with a matching axis_name (see _src/pmap.py) ----
def _no_groups(axis_index_groups, what):
    if axis_index_groups is not None:
        raise NotImplementedError(f"{what}: axis_index_groups is not supported")


def psum(x, axis_name, *, axis_index_groups=None):
    """Sum over the replicas of a pmap axis, in replica order (deterministic)."""
    _no_groups(axis_index_groups, "psum")
    return _pmap.collective("psum", x, axis_name)


def pmean(x, axis_name, *, axis_index_groups=None):
    """Mean over the replicas of a pmap axis: psum(x) / axis size."""
    _no_groups(axis_index_groups, "pmean")
    return _pmap.collective("pmean", x, axis_name)


def pmax(x, axis_name, *, axis_index_groups=None):
    _no_groups(axis_index_groups, "pmax")
    return _pmap.collective("pmax", x, axis_name)


def pmin(x, axis_name, *, axis_index_groups=None):
    _no_groups(axis_index_groups, "pmin")
    return _pmap.collective("pmin", x, axis_name)


def all_gather(x, axis_name, *, axis_index_groups=None, axis=0, tiled=False):
    """Every replica's x, stacked along a new `axis` (or concatenated when tiled)."""
    _no_groups(axis_index_groups, "all_gather")
    return _pmap.collective("all_gather", x, axis_name, axis=int(axis), tiled=bool(tiled))


def ppermute(x, axis_name, perm):
    """Sends replica i's x to replica j for each (i, j) in perm; replicas nobody sends to get zeros."""
    pairs = [int(v) for p in perm for v in p]
    return _pmap.collective("ppermute", x, axis_name, perm=pairs)


def axis_index(axis_name):
    """This replica's index along a pmap axis (int32)."""
    return _pmap.axis_index(axis_name)


def psum_scatter(x, axis_name, *, scatter_dimension=0, axis_index_groups=None, tiled=False):
    """psum, then keep this replica's block of `scatter_dimension`."""
    _no_groups(axis_index_groups, "psum_scatter")
    n = _pmap.axis_size(axis_name)

    def one(leaf):
        total = psum(leaf, axis_name)
        d = scatter_dimension % total.ndim
        if tiled:
            if total.shape[d] % n:
                raise ValueError(f"psum_scatter: dimension {d} of size {total.shape[d]} is not divisible by "
                                 f"the axis size {n}")
            size = total.shape[d] // n
        else:
            if total.shape[d] != n:
                raise ValueError(f"psum_scatter: dimension {d} has size {total.shape[d]}, expected the axis "
                                 f"size {n} (or pass tiled=True)")
            size = 1
        start = [0] * total.ndim
        start[d] = axis_index(axis_name) * size
        sizes = list(total.shape)
        sizes[d] = size
        out = dynamic_slice(total, start, sizes)
        return out if tiled else squeeze(out, (d,))
    return _tree_map(one, x)


# ---- top-k ----
def _sort_key(x):
    """An integer key whose order is jax's total order of x's values: for floats
    -NaN < -inf < ... < -0.0 < 0.0 < ... < inf < NaN (bf16 / f16 widen to f32 exactly)."""
    d = _np.dtype(x.dtype)
    if d == _np.bool_:
        return convert_element_type(x, _np.int32)
    if d.kind != "f" and d != _dtypes.bfloat16:
        return x
    if d.itemsize > 4:
        return x  # float64: argsort's order (NaN last, -0.0 == 0.0)
    bits = bitcast_convert_type(convert_element_type(x, _np.float32), _np.int32)
    flipped = bind("xor", bits, to_array(_np.int32(0x7FFFFFFF)))
    return select(lt(bits, to_array(_np.int32(0))), flipped, bits)


def _top_k_last(operand, k, largest):
    n = operand.shape[-1]
    key = _sort_key(stop_gradient(operand))
    # argsort is stable: among equal keys the lower index comes first, as in jax.lax.top_k.
    order = bind("argsort", key, axis=len(operand.shape) - 1, descending=int(largest))
    nd = len(operand.shape)
    idx = order if k == n else slice(order, [0] * nd, list(operand.shape[:-1]) + [k])
    return bind("take_along_axis", operand, idx, axis=nd - 1), idx


def _check_k(operand, k, axis, what):
    nd = len(operand.shape)
    if nd == 0 or not -nd <= axis < nd:
        raise ValueError(f"axis {axis} is out of bounds for array of dimension {nd}")
    axis %= nd
    if int(k) != k or k < 0:
        raise ValueError(f"k argument to {what} must be a non-negative integer, got {k}")
    if k > operand.shape[axis]:
        raise ValueError(f"k argument to {what} must be no larger than size along axis; got k={k} with "
                         f"shape={list(operand.shape)} and axis={axis}")
    return int(k), axis


def _top_k_axis(operand, k, axis, largest, what):
    from . import numpy as jnp
    operand = jnp.asarray(operand)
    k, axis = _check_k(operand, k, axis, what)
    nd = len(operand.shape)
    if axis != nd - 1:
        operand = jnp.moveaxis(operand, axis, -1)
    vals, idx = _top_k_last(operand, k, largest)
    if axis != nd - 1:
        vals, idx = jnp.moveaxis(vals, -1, axis), jnp.moveaxis(idx, -1, axis)
    return vals, idx


def top_k(operand, k, *, axis=-1):
    """jax.lax.top_k: the k largest entries along `axis` (default the last), sorted
    descending, and their int32 indices. Exact; ties keep the lower index first; NaN is
    above +inf and -NaN below -inf (jax's total order). The values' gradient scatters
    the cotangent back to the chosen positions."""
    return _top_k_axis(operand, k, axis, True, "top_k")


def approx_max_k(operand, k, reduction_dimension=-1, recall_target=0.95, reduction_input_size_override=-1,
                 aggregate_to_topk=True):
    """jax.lax.approx_max_k, computed EXACTLY (recall 1.0): the same (values, indices)
    as top_k along `reduction_dimension`. jax allows any result with at least the
    requested recall; podlet returns the exact one (approximate top-k gave wrong answers
    on TPU). recall_target and reduction_input_size_override are accepted and unused;
    aggregate_to_topk=False also returns exactly k results (jax allows >= k)."""
    return _top_k_axis(operand, k, reduction_dimension, True, "approx_max_k")


def approx_min_k(operand, k, reduction_dimension=-1, recall_target=0.95, reduction_input_size_override=-1,
                 aggregate_to_topk=True):
    """jax.lax.approx_min_k, computed EXACTLY: the k smallest entries along
    `reduction_dimension`, ascending, ties lower index first, NaN last (see approx_max_k)."""
    return _top_k_axis(operand, k, reduction_dimension, False, "approx_min_k")


# ---- control flow: nodes that own traced sub-graphs (_src/control_flow.py) ----
from ._src.control_flow import (cond, switch, select_n, scan, fori_loop, while_loop,  # noqa: E402
                                map, associative_scan)

# ---- the long tail (issue 26): groups in _src/lax_*.py, one concept a file ----
from ._src.lax_elementwise import (acos, acosh, asin, asinh, atan, atanh, cosh, sinh, tan, cbrt,  # noqa: E402
                                   exp2, erfc, reciprocal, nextafter, population_count, clz, mulhi,
                                   bessel_i0e, bessel_i1e)
from ._src.lax_reductions import (cumprod, cummax, cummin, cumlogsumexp, reduce, reduce_and,  # noqa: E402
                                  reduce_or, reduce_xor, reduce_precision)
from ._src.lax_sort import sort, sort_key_val  # noqa: E402
from ._src.lax_gather import (GatherDimensionNumbers, ScatterDimensionNumbers, GatherScatterMode,  # noqa: E402
                              gather, scatter, scatter_add, scatter_sub, scatter_mul, scatter_min,
                              scatter_max, scatter_apply)
from ._src.lax_shapes import (full, full_like, empty, broadcast_to_rank, broadcast_shapes,  # noqa: E402
                              broadcast_like, tile, stack, unstack, split, collapse, index_in_dim,
                              dynamic_index_in_dim, dynamic_update_index_in_dim, dynamic_update_slice_in_dim,
                              index_take, batch_matmul, DotDimensionNumbers, dtype, RoundingMethod,
                              optimization_barrier, shape_as_value, composite, with_sharding_constraint)
from ._src.lax_conv import (ConvGeneralDilatedDimensionNumbers, conv_dimension_numbers,  # noqa: E402
                            conv_general_permutations, conv_shape_tuple, conv_general_shape_tuple,
                            conv_transpose_shape_tuple, conv_with_general_padding, conv_general_dilated_patches,
                            reduce_window_shape_tuple, conv_general_dilated_local)
from ._src.lax_random import RandomAlgorithm, rng_bit_generator, rng_uniform  # noqa: E402
from ._src.lax_tokens import create_token, after_all  # noqa: E402
from ._src.lax_solve import custom_root, custom_linear_solve  # noqa: E402
from ._src.lax_zeta_beta import zeta, polygamma, betainc  # noqa: E402
from ._src.lax_collectives import axis_size, pshuffle, pbroadcast, all_to_all, pswapaxes  # noqa: E402


# ---- lgamma, digamma and the incomplete gamma functions: _src/special.py (imported on
# first use; it is loaded after podlet.numpy) ----
def _special(name):
    def f(*args):
        from ._src import special
        return getattr(special, name)(*args)
    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"jax.lax.{name} (podlet._src.special.{name}: XLA's / JAX's algorithm)."
    return f


lgamma, digamma, igamma, igammac, igamma_grad_a, random_gamma_grad = (
    _special(n) for n in ("lgamma", "digamma", "igamma", "igammac", "igamma_grad_a", "random_gamma_grad"))


# ---- jax's `accuracy=` of the unary functions (lax.Tolerance / lax.AccuracyMode): checked,
# then ignored, as on jax's CPU (podlet's kernels have one accuracy) ----
def _with_accuracy(f):
    def g(x, accuracy=None):
        _precision.check_accuracy(accuracy)
        return f(x)
    g.__name__ = g.__qualname__ = f.__name__
    g.__doc__ = f.__doc__
    return g


for _n in ("cbrt", "cos", "exp", "exp2", "expm1", "log", "log1p", "logistic", "rsqrt", "sin", "sqrt", "tan", "tanh"):
    globals()[_n] = _with_accuracy(globals()[_n])
