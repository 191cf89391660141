"""jax.lax's convolution helpers (issue 26): dimension-number conversion, output-shape
arithmetic, conv_with_general_padding and conv_general_dilated_patches (a grouped
convolution with an identity kernel, as in JAX), over podlet.lax.conv_general_dilated
(2-D convolutions)."""
import math
from typing import Union

import numpy as _np

from .. import lax
from .. import numpy as jnp

__all__ = ["ConvGeneralDilatedDimensionNumbers", "conv_dimension_numbers", "conv_general_permutations",
           "conv_shape_tuple", "conv_general_shape_tuple", "conv_transpose_shape_tuple",
           "conv_with_general_padding", "conv_general_dilated_patches", "reduce_window_shape_tuple",
           "conv_general_dilated_local"]

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
