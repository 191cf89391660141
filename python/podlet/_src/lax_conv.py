"""jax.lax's convolutions (issue 26): conv_general_dilated in any number of spatial
dimensions with JAX's checks and batch_group_count, dimension-number conversion,
output-shape arithmetic, conv_with_general_padding and conv_general_dilated_patches (a
grouped convolution with an identity kernel, as in JAX), all over the one 2-D
`conv_general_dilated` primitive (NHWC / HWIO)."""
import math
import operator
from typing import Union

import numpy as _np

from .. import lax
from .. import numpy as jnp

__all__ = ["ConvGeneralDilatedDimensionNumbers", "conv_dimension_numbers", "conv_general_permutations",
           "conv_shape_tuple", "conv_general_shape_tuple", "conv_transpose_shape_tuple",
           "conv_with_general_padding", "conv_general_dilated_patches", "reduce_window_shape_tuple",
           "conv_general_dilated_local", "conv_general_dilated"]

ConvGeneralDilatedDimensionNumbers = Union[tuple, lax.ConvDimensionNumbers, None]


def _stride_dim(d, window, stride):
    return max(0, (int(d) - int(window)) // int(stride) + 1)


def conv_general_permutations(dimension_numbers):
    """jax.lax.conv_general_permutations: (lhs_perm, rhs_perm, out_perm) taking layout
    strings to (N, C, spatial...) / (O, I, spatial...), spatial dims in rhs's order."""
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    charpairs = ("N", "C"), ("O", "I"), ("N", "C")
    for i, (a, b) in enumerate(charpairs):
        if not dimension_numbers[i].count(a) == dimension_numbers[i].count(b) == 1:
            raise TypeError(f"convolution dimension_numbers[{i}] must contain the characters '{a}' and '{b}' "
                            f"exactly once, got {dimension_numbers[i]}.")
        if len(dimension_numbers[i]) != len(set(dimension_numbers[i])):
            raise TypeError(f"convolution dimension_numbers[{i}] cannot have duplicate characters, got "
                            f"{dimension_numbers[i]}.")
    if not (set(lhs_spec) - {"N", "C"} == set(rhs_spec) - {"O", "I"} == set(out_spec) - {"N", "C"}):
        raise TypeError(f"convolution dimension_numbers elements must each have the same set of spatial "
                        f"characters, got {dimension_numbers}.")

    def getperm(spec, pair):
        spatial = [i for i, c in enumerate(spec) if c not in pair]
        if spec is not rhs_spec:
            spatial = sorted(spatial, key=lambda i: rhs_spec.index(spec[i]))
        return (spec.index(pair[0]), spec.index(pair[1])) + tuple(spatial)
    return tuple(getperm(s, p) for s, p in zip(dimension_numbers, charpairs))


def conv_dimension_numbers(lhs_shape, rhs_shape, dimension_numbers):
    """jax.lax.conv_dimension_numbers: None / layout strings / a ConvDimensionNumbers ->
    a ConvDimensionNumbers of dimension indices."""
    if isinstance(dimension_numbers, lax.ConvDimensionNumbers):
        return dimension_numbers
    if len(lhs_shape) != len(rhs_shape):
        raise TypeError(f"convolution requires lhs and rhs ndim to be equal, got {len(lhs_shape)} and "
                        f"{len(rhs_shape)}.")
    if dimension_numbers is None:
        iota = tuple(range(len(lhs_shape)))
        return lax.ConvDimensionNumbers(iota, iota, iota)
    if isinstance(dimension_numbers, (list, tuple)):
        if len(dimension_numbers) != 3:
            raise TypeError(f"convolution dimension_numbers list/tuple must be length 3, got "
                            f"{len(dimension_numbers)}.")
        if not all(isinstance(e, str) for e in dimension_numbers):
            raise TypeError(f"convolution dimension_numbers elements must be strings, got "
                            f"{tuple(map(type, dimension_numbers))}.")
        for i, e in enumerate(dimension_numbers):
            if len(e) != len(lhs_shape):
                raise TypeError(f"convolution dimension_numbers[{i}] must have len equal to the ndim of lhs and "
                                f"rhs, got {len(e)} for lhs and rhs shapes {lhs_shape} and {rhs_shape}.")
        return lax.ConvDimensionNumbers(*conv_general_permutations(dimension_numbers))
    raise TypeError(f"convolution dimension_numbers must be tuple/list or None, got {type(dimension_numbers)}.")


def conv_shape_tuple(lhs_shape, rhs_shape, strides, pads, batch_group_count=1):
    """jax.lax.conv_shape_tuple: the output shape of a conv in canonical (N, C, spatial) order."""
    if isinstance(pads, str):
        pads = lax.padtype_to_pads(lhs_shape[2:], rhs_shape[2:], strides, pads)
    if len(pads) != len(lhs_shape) - 2:
        raise TypeError(f"Wrong number of explicit pads for convolution: expected {len(lhs_shape) - 2}, got "
                        f"{len(pads)}.")
    padded = [int(d) + int(lo) + int(hi) for d, (lo, hi) in zip(lhs_shape[2:], pads)]
    if any(p < 0 for p in padded):
        raise ValueError(f"Negative padding is larger than the size of the corresponding dimension: got "
                         f"padding={pads} for lhs_shape[2:]={lhs_shape[2:]}")
    space = tuple(_stride_dim(p, k, s) for p, k, s in zip(padded, rhs_shape[2:], strides))
    n = int(lhs_shape[0])
    if batch_group_count > 1:
        if n % batch_group_count:
            raise ValueError(f"batch size {n} is not a multiple of batch_group_count {batch_group_count}")
        n //= batch_group_count
    return (n, int(rhs_shape[0])) + space


def conv_general_shape_tuple(lhs_shape, rhs_shape, window_strides, padding, dimension_numbers):
    """jax.lax.conv_general_shape_tuple: conv_shape_tuple in the layouts of dimension_numbers."""
    lhs_perm, rhs_perm, out_perm = conv_general_permutations(dimension_numbers)
    out = conv_shape_tuple([lhs_shape[i] for i in lhs_perm], [rhs_shape[i] for i in rhs_perm],
                           window_strides, padding)
    return tuple(out[i] for i in _np.argsort(out_perm))


def conv_transpose_shape_tuple(lhs_shape, rhs_shape, window_strides, padding, dimension_numbers):
    """jax.lax.conv_transpose_shape_tuple: the output shape of conv_transpose."""
    lhs_perm, rhs_perm, out_perm = conv_general_permutations(dimension_numbers)
    lt = [int(lhs_shape[i]) for i in lhs_perm]
    rt = [int(rhs_shape[i]) for i in rhs_perm]
    if isinstance(padding, str):
        padding = [lax._conv_transpose_padding(k, s, padding) for k, s in zip(rt[2:], window_strides)]
    pads = [int(lo) + int(hi) for lo, hi in padding]
    space = [(i - 1) * s - k + 2 + p for i, k, s, p in zip(lt[2:], rt[2:], window_strides, pads)]
    out = (lt[0], rt[0]) + tuple(space)
    return tuple(out[i] for i in _np.argsort(out_perm))


def conv_with_general_padding(lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation, precision=None,
                              preferred_element_type=None):
    """jax.lax.conv_with_general_padding: conv_general_dilated in NCHW / OIHW layout."""
    return lax.conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation=lhs_dilation,
                                    rhs_dilation=rhs_dilation, precision=precision,
                                    preferred_element_type=preferred_element_type)


def conv_general_dilated_patches(lhs, filter_shape, window_strides, padding, lhs_dilation=None, rhs_dilation=None,
                                 dimension_numbers=None, precision=None, preferred_element_type=None):
    """jax.lax.conv_general_dilated_patches: the patches a convolution with a filter of
    `filter_shape` would see, flattened into the feature dimension (channel-major, as
    JAX): a grouped convolution with an identity kernel, so the values are exact."""
    x = jnp.asarray(lhs)
    filter_shape = tuple(int(f) for f in filter_shape)
    dn = conv_dimension_numbers(x.shape, (1, 1) + filter_shape, dimension_numbers)
    lhs_spec, rhs_spec, out_spec = dn
    spatial = math.prod(filter_shape)
    c = x.shape[lhs_spec[1]]
    eye = jnp.eye(spatial, dtype=x.dtype)
    rhs = lax.broadcast_in_dim(eye, (c, spatial, spatial), (1, 2))
    rhs = lax.reshape(rhs, (c * spatial, 1) + filter_shape)
    rhs = jnp.moveaxis(rhs, (0, 1), (rhs_spec[0], rhs_spec[1]))
    return lax.conv_general_dilated(x, rhs, window_strides, padding, lhs_dilation=lhs_dilation,
                                    rhs_dilation=rhs_dilation, dimension_numbers=dn, precision=precision,
                                    feature_group_count=c, preferred_element_type=preferred_element_type)


def reduce_window_shape_tuple(operand_shape, window_dimensions, window_strides, padding, base_dilation=None,
                              window_dilation=None):
    """jax.lax.reduce_window_shape_tuple: the output shape of a reduce_window."""
    if base_dilation is not None:
        operand_shape = [0 if d == 0 else 1 + r * (d - 1) for d, r in zip(operand_shape, base_dilation)]
    if window_dilation is not None:
        window_dimensions = [0 if d == 0 else 1 + r * (d - 1) for d, r in zip(window_dimensions, window_dilation)]
    padded = [int(d) + int(lo) + int(hi) for d, (lo, hi) in zip(operand_shape, padding)]
    return tuple(_stride_dim(p, w, s) for p, w, s in zip(padded, window_dimensions, window_strides))


def conv_general_dilated_local(lhs, rhs, window_strides, padding, filter_shape, lhs_dilation=None, rhs_dilation=None,
                               dimension_numbers=None, precision=None):
    """jax.lax.conv_general_dilated_local: an unshared convolution (a different filter at
    every output position): the patches of conv_general_dilated_patches contracted with
    rhs, whose spatial dimensions are the output's and whose input-feature dimension
    holds C * prod(filter_shape) (channel-major), as in JAX."""
    x = jnp.asarray(lhs)
    filter_shape = tuple(int(f) for f in filter_shape)
    patches = conv_general_dilated_patches(x, filter_shape, window_strides, padding, lhs_dilation=lhs_dilation,
                                           rhs_dilation=rhs_dilation, dimension_numbers=dimension_numbers)
    lhs_spec, rhs_spec, out_spec = conv_dimension_numbers(x.shape, (1, 1) + filter_shape, dimension_numbers)
    lhs_b, rhs_b = list(out_spec[2:]), list(rhs_spec[2:])
    rhs_b = [rhs_b[i] for i in sorted(range(len(rhs_b)), key=lambda k: lhs_b[k])]
    lhs_b = sorted(lhs_b)
    dn = (([out_spec[1]], [rhs_spec[1]]), (lhs_b, rhs_b))
    out = lax.dot_general(patches, jnp.asarray(rhs), dn, precision=precision)
    return jnp.moveaxis(out, (-2, -1), (out_spec[0], out_spec[1]))


# ---- conv_general_dilated: JAX's checks, then everything lowered to the 2-D primitive ----
def _check_groups(lhs_shape, rhs_shape, dn, feature_group_count, batch_group_count):
    """JAX's shape rule (jax/_src/lax/convolution.py), its checks and messages in its order."""
    from .errors import ShapeError
    if not (isinstance(feature_group_count, int) and feature_group_count > 0):
        raise ShapeError(f"conv_general_dilated feature_group_count must be a positive integer, got "
                         f"{feature_group_count}.")
    lhs_features, rhs_in, rhs_out = lhs_shape[dn.lhs_spec[1]], rhs_shape[dn.rhs_spec[1]], rhs_shape[dn.rhs_spec[0]]
    quot, rem = divmod(lhs_features, feature_group_count)
    if rem:
        raise ShapeError(f"conv_general_dilated feature_group_count must divide lhs feature dimension size, but "
                         f"{feature_group_count} does not divide {lhs_features}.")
    if quot != rhs_in:
        raise ShapeError(f"conv_general_dilated lhs feature dimension size divided by feature_group_count must "
                         f"equal the rhs input feature dimension size, but {lhs_features} // "
                         f"{feature_group_count} != {rhs_in}.")
    if rhs_out % feature_group_count:
        raise ShapeError(f"conv_general_dilated rhs output feature dimension size must be a multiple of "
                         f"feature_group_count, but {rhs_out} is not a multiple of {feature_group_count}.")
    if not (isinstance(batch_group_count, int) and batch_group_count > 0):
        raise ShapeError(f"conv_general_dilated batch_group_count must be a positive integer, got "
                         f"{batch_group_count}.")
    lhs_batch = lhs_shape[dn.lhs_spec[0]]
    if batch_group_count > 1 and lhs_batch % batch_group_count:
        raise ShapeError(f"conv_general_dilated batch_group_count must divide lhs batch dimension size, but "
                         f"{batch_group_count} does not divide {lhs_batch}.")
    if rhs_out % batch_group_count:
        raise ShapeError(f"conv_general_dilated rhs output feature dimension size must be a multiple of "
                         f"batch_group_count, but {rhs_out} is not a multiple of {batch_group_count}.")
    if batch_group_count > 1 and feature_group_count > 1:
        raise ShapeError(f"At most one of batch_group_count and feature_group_count may be > 1, got "
                         f"batch_group_count={batch_group_count} and feature_group_count={feature_group_count}")


def _check_dtypes(lhs_dtype, rhs_dtype, preferred_element_type):
    """jax's dtype rule: equal operand dtypes, and a preferred_element_type of the same
    kind and at least as wide (its messages; DTypeError is a TypeError, as jax raises)."""
    from .errors import DTypeError
    from . import dtypes
    if lhs_dtype != rhs_dtype:
        raise DTypeError(f"lax.conv_general_dilated requires arguments to have the same dtypes, got {lhs_dtype}, "
                         f"{rhs_dtype}.")
    if preferred_element_type is None:
        return
    pet = dtypes.dtype(preferred_element_type)
    kind = lambda d: "f" if dtypes.is_float(d) else dtypes.dtype(d).kind  # noqa: E731
    if not (kind(lhs_dtype) in "iu" and kind(pet) == "f"):
        if kind(lhs_dtype) != kind(pet) and not (kind(lhs_dtype) in "iu" and kind(pet) in "iu"):
            raise DTypeError("Input type is incompatible with `preferred_element_type`. The compatible combinations "
                             "of (input_type, preferred_element_type) are (integral, integral), (integral, "
                             f"floating), (floating, floating), (complex, complex; got ({lhs_dtype}, {pet}).")
        if kind(lhs_dtype) == "i" and kind(pet) != "i":
            raise DTypeError(f"`preferred_element_type` must have the same signedness as the original type; got "
                             f"({lhs_dtype}, {pet}).")
    if pet.itemsize < dtypes.dtype(lhs_dtype).itemsize:
        raise DTypeError(f"`preferred_element_type` must not be narrower than the original type; got {pet} for "
                         f"{lhs_dtype} operands.")


def _ints(name, values, n):
    """A tuple of n ints (one per spatial dim) from `values`, or a ShapeError naming it."""
    from .errors import ShapeError
    try:
        out = tuple(operator.index(v) for v in values)
    except TypeError:
        raise TypeError(f"conv_general_dilated {name} must be a sequence of {n} integers, got {values!r}") from None
    if len(out) != n:
        raise ShapeError(f"conv_general_dilated window and {name} must have the same number of dimensions, "
                         f"but got {n} and {len(out)}")
    if any(v < 1 for v in out):
        raise ShapeError(f"conv_general_dilated {name} must be positive integers, got {out}")
    return out


def _conv_nd(x, w, strides, pads, lhs_dil, rhs_dil, attrs):
    """A convolution of x (N, *spatial, C) with w (*spatial, I, O), any number of spatial
    dims, on the 2-D primitive: fewer than two spatial dims get unit ones; from three on,
    the leading spatial dim is unrolled over the kernel's taps (a strided slice of the
    dilated, padded input per tap, folded into the batch, one (n-1)-D convolution each,
    summed in tap order)."""
    from .core import bind
    nsp = x.ndim - 2
    if nsp < 2:
        y = _conv_nd(lax.expand_dims(x, (1,)), lax.expand_dims(w, (0,)), (1,) + strides, ((0, 0),) + pads,
                     (1,) + lhs_dil, (1,) + rhs_dil, attrs)
        return lax.squeeze(y, (1,))
    if nsp == 2:
        flat = [int(v) for p in pads for v in p]
        return bind("conv_general_dilated", x, w, window_strides=list(strides), padding=flat,
                    lhs_dilation=list(lhs_dil), rhs_dilation=list(rhs_dil), **attrs)
    # three or more spatial dims: unroll the first over the kernel taps
    n, kd = x.shape[0], w.shape[0]
    (lo, hi), s, ld, rd = pads[0], strides[0], lhs_dil[0], rhs_dil[0]
    xp = lax.pad(x, _np.zeros((), x.dtype), [(0, 0, 0), (lo, hi, ld - 1)] + [(0, 0, 0)] * (x.ndim - 2))
    d_out = _stride_dim(xp.shape[1], (kd - 1) * rd + 1 if kd else 0, s)
    if d_out == 0 or kd == 0:  # no window: the shape of the rest from an empty batch, zeros
        xs = lax.reshape(lax.slice_in_dim(xp, 0, 0, axis=1), (0,) + tuple(xp.shape[2:]))
        ws = w[0] if kd else jnp.zeros(tuple(w.shape[1:]), w.dtype)
        rest = _conv_nd(xs, ws, strides[1:], pads[1:], lhs_dil[1:], rhs_dil[1:], attrs)
        return jnp.zeros((n, d_out) + tuple(rest.shape[1:]), rest.dtype)
    y = None
    for k in range(kd):
        xs = lax.slice_in_dim(xp, k * rd, k * rd + (d_out - 1) * s + 1, stride=s, axis=1)
        xs = lax.reshape(xs, (n * d_out,) + tuple(xs.shape[2:]))
        yk = _conv_nd(xs, w[k], strides[1:], pads[1:], lhs_dil[1:], rhs_dil[1:], attrs)
        yk = lax.reshape(yk, (n, d_out) + tuple(yk.shape[1:]))
        y = yk if y is None else y + yk
    return y


def _transpose(x, perm):
    perm = tuple(int(i) for i in perm)
    return x if perm == tuple(range(x.ndim)) else lax.transpose(x, perm)


def conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation=None, rhs_dilation=None,
                         dimension_numbers=None, feature_group_count=1, batch_group_count=1,
                         precision=None, preferred_element_type=None):
    """jax.lax.conv_general_dilated, in any number of spatial dimensions, with JAX's
    checks (ShapeError, a ValueError, where JAX raises ValueError; TypeError where JAX
    does) and its shape rule. Lowered to the 2-D primitive (see _conv_nd).

    batch_group_count=G (what the kernel gradient of a grouped convolution uses): the lhs
    batch is G groups of N/G (group-major), the output features G groups of O/G, and
    output group g is the convolution of batch group g with kernel group g over all
    input features; the result has N/G in its batch dim. Computed as one convolution
    with feature_group_count=G after moving the batch groups into the features.

    precision / preferred_element_type (podlet/_src/precision.py): products are exact
    and summed in f32, except under 'bfloat16' / 'bfloat16_3x' / BF16_BF16_F32(_X3/_X6),
    which round f32 operands to bf16 (one, three or six passes of the direct kernels, a
    TPU's numerics, also in the gradient); other presets do not change a convolution's
    operands, as on jax's CPU. DEFAULT (or None) lets bf16 3x3 stride-1 layers take
    Winograd; HIGH, HIGHEST and any algorithm but DEFAULT keep the direct kernel (also
    for the convolutions of the gradient)."""
    from . import precision as _precision
    from . import dtypes as _dtypes
    lhs, rhs = jnp.asarray(lhs), jnp.asarray(rhs)
    dn = conv_dimension_numbers(lhs.shape, rhs.shape, dimension_numbers)
    _check_dtypes(lhs.dtype, rhs.dtype, preferred_element_type)
    if lhs.ndim != rhs.ndim:
        from .errors import ShapeError
        raise ShapeError(f"conv_general_dilated lhs and rhs must have the same number of dimensions, but got "
                         f"{tuple(lhs.shape)} and {tuple(rhs.shape)}.")
    if lhs.ndim < 2:
        raise TypeError(f"conv_general_dilated needs operands with a batch and a feature dimension (rank >= 2), "
                        f"got shapes {tuple(lhs.shape)} and {tuple(rhs.shape)}")
    nsp = lhs.ndim - 2
    lhs_dil = (1,) * nsp if lhs_dilation is None else _ints("lhs_dilation", lhs_dilation, nsp)
    if isinstance(padding, str) and any(v != 1 for v in lhs_dil):
        raise ValueError("String padding is not implemented for transposed convolution using this op. Please "
                         "either exactly specify the required padding or use conv_transpose.")
    rhs_dil = (1,) * nsp if rhs_dilation is None else _ints("rhs_dilation", rhs_dilation, nsp)
    strides = _ints("window_strides", window_strides, nsp)
    _check_groups(tuple(lhs.shape), tuple(rhs.shape), dn, feature_group_count, batch_group_count)
    lp, rp, op = dn
    x = _transpose(lhs, (lp[0],) + tuple(lp[2:]) + (lp[1],))   # (N, *spatial, C)
    w = _transpose(rhs, tuple(rp[2:]) + (rp[1], rp[0]))         # (*spatial, I, O)
    if isinstance(padding, str):
        eff = [(k - 1) * r + 1 if k else 0 for k, r in zip(w.shape[:nsp], rhs_dil)]
        pads = tuple(tuple(p) for p in lax.padtype_to_pads(x.shape[1:-1], eff, strides, padding))
    else:
        try:
            pads = tuple((operator.index(lo), operator.index(hi)) for lo, hi in padding)
        except (ValueError, TypeError) as e:
            raise ValueError("padding argument to conv_general_dilated should be a string or a sequence of (low, "
                             f"high) pairs, got {padding}") from e
    # JAX's output-shape arithmetic (and its TypeError / ValueError on bad pads)
    conv_shape_tuple([x.shape[0], x.shape[-1]] + [(i - 1) * d + 1 if i else 0
                                                  for i, d in zip(x.shape[1:-1], lhs_dil)],
                     [w.shape[-1], w.shape[-2]] + [(k - 1) * d + 1 if k else 0 for k, d in zip(w.shape[:nsp], rhs_dil)],
                     strides, pads, batch_group_count)
    x, w, attrs = _precision.conv_operands(x, w, precision, preferred_element_type)
    groups = int(feature_group_count)
    if batch_group_count > 1:
        g = int(batch_group_count)
        # (N, *sp, C) -> (G, N/G, *sp, C) -> (N/G, *sp, G, C) -> (N/G, *sp, G*C): batch group g
        # becomes feature group g, which a grouped convolution pairs with kernel group g
        xg = lax.reshape(x, (g, x.shape[0] // g) + tuple(x.shape[1:]))
        xg = lax.transpose(xg, tuple(range(1, x.ndim)) + (0, x.ndim))
        x = lax.reshape(xg, tuple(xg.shape[:-2]) + (g * x.shape[-1],))
        groups = g
    attrs["feature_group_count"] = groups
    y = _conv_nd(x, w, strides, pads, lhs_dil, rhs_dil, attrs)     # (N', *spatial, O)
    src = (op[0],) + tuple(op[2:]) + (op[1],)                       # y's dims' places in the output
    return _transpose(y, _np.argsort(src))
