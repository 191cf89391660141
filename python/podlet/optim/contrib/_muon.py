"""Muon (Jordan et al. 2024, "MomentUm Orthogonalized by Newton-schulz"),
``optax/contrib/_muon.py``: Nesterov momentum whose update, for each 2-D weight (or
each matrix of a weight reshaped by ``MuonDimensionNumbers``), is replaced by its
orthogonalisation ``U V^T`` computed with a few quintic Newton-Schulz iterations;
parameters of other ranks go to AdamW.

Preconditionings ``'frobenius'`` (the default), ``'aol'`` and ``'schatten'`` are
optax's; ``'spectral'`` divides by the largest singular value, which needs an SVD that
podlet lacks, so it raises.
"""
import math
from typing import Any, NamedTuple, Optional, Sequence, Union

from ... import lax
from ... import numpy as jnp
from ... import tree_util as _tu
from ..._src.batching import vmap
from .. import _base, alias, transform
from .._combine import partition
from ..transform import MaskedNode

_PRECONDITIONINGS = ["frobenius", "spectral", "aol", "schatten"]
_DEFAULT_NS_COEFFS = (3.4445, -4.7750, 2.0315)
_DION_NS_COEFFS = [(4.0848, -6.8946, 2.9270), (3.9505, -6.3029, 2.6377), (3.7418, -5.5913, 2.3037),
                   (2.8769, -3.1427, 1.2046), (2.8366, -3.0525, 1.2012)]
_NS_COEFFS_PRESET_DICT = {"standard": _DEFAULT_NS_COEFFS, "dion": _DION_NS_COEFFS}


class MuonDimensionNumbers(NamedTuple):
    """Which axes of a weight are its input (reduction) and output axes; the rest
    are batch axes, each slice orthogonalised separately."""
    reduction_axis: Union[Sequence[int], int] = 0
    output_axis: Union[Sequence[int], int] = 1


def _is_weight_dim_nums(x):
    return isinstance(x, MuonDimensionNumbers)


def _normalize_axes(x, dim_nums):
    red = (dim_nums.reduction_axis,) if isinstance(dim_nums.reduction_axis, int) else dim_nums.reduction_axis
    out = (dim_nums.output_axis,) if isinstance(dim_nums.output_axis, int) else dim_nums.output_axis
    return tuple(ax % x.ndim for ax in red), tuple(ax % x.ndim for ax in out)


def _compute_muon_reshape(x, dim_nums):
    if x.ndim < 2:
        raise ValueError(f"Muon optimized parameters must have rank >= 2, got x.ndim={x.ndim}")
    reduction_axes, output_axes = _normalize_axes(x, dim_nums)
    if set(reduction_axes) & set(output_axes):
        raise ValueError(f"Normalized reduction axes and output axes must be disjoint, got {reduction_axes} and "
                         f"{output_axes}. Originally dim_nums={dim_nums} and x.shape={x.shape}")
    batch_axes = tuple(sorted(set(range(x.ndim)) - set(reduction_axes) - set(output_axes)))
    perm = batch_axes + reduction_axes + output_axes
    inv_perm = tuple(sorted(range(x.ndim), key=lambda i: perm[i]))
    shape_of = lambda axes: tuple(x.shape[ax] for ax in axes)  # noqa: E731
    flat_shape = (math.prod(shape_of(batch_axes)), math.prod(shape_of(reduction_axes)),
                  math.prod(shape_of(output_axes)))
    unflat_shape = shape_of(batch_axes) + shape_of(reduction_axes) + shape_of(output_axes)
    return (lambda y: jnp.reshape(jnp.transpose(y, perm), flat_shape),
            lambda y: jnp.transpose(jnp.reshape(y, unflat_shape), inv_perm))


def _shape_products(x, dim_nums):
    reduction_axes, output_axes = _normalize_axes(x, dim_nums)
    return math.prod(x.shape[ax] for ax in reduction_axes), math.prod(x.shape[ax] for ax in output_axes)


def scale_by_shape(weight_dimension_numbers=None, consistent_rms=None) -> _base.GradientTransformation:
    """Scales each muon update by ``sqrt(max(1, fan_out / fan_in))`` (or to a
    consistent RMS ``consistent_rms * sqrt(max(fan_in, fan_out))``)."""

    def update_fn(updates, state, params=None):
        del params
        dim_nums = weight_dimension_numbers(updates) if callable(weight_dimension_numbers) \
            else weight_dimension_numbers

        def scale(u, d):
            fan_in, fan_out = _shape_products(u, d)
            if consistent_rms is not None:
                return jnp.sqrt(jnp.maximum(fan_in, fan_out)) * consistent_rms * u
            return jnp.sqrt(jnp.maximum(1, fan_out / fan_in)) * u

        return _tu.tree_map(scale, updates, dim_nums, is_leaf=_is_weight_dim_nums), state

    return _base.GradientTransformation(_base.init_empty_state, update_fn)


def _base_newton_schulz_iteration(x, coeffs):
    a = x @ x.T
    b = coeffs[1] * a + coeffs[2] * a @ a
    return coeffs[0] * x + b @ x


def _aol_first_newton_schulz_iteration(x, coeffs, eps=1e-8):
    a = x @ x.T
    s = jnp.expand_dims(lax.rsqrt(jnp.maximum(jnp.sum(jnp.abs(a), axis=-1), eps)), -1)
    x, a = x * s, a * s * jnp.swapaxes(s, -1, -2)
    b = coeffs[1] * a + coeffs[2] * a @ a
    return coeffs[0] * x + b @ x


def _schatten_first_newton_schulz_iteration(x, coeffs, eps=1e-8):
    a = x @ x.T
    s = lax.rsqrt(jnp.maximum(jnp.sqrt(jnp.sum(jnp.square(a))), eps))
    x, a = x * s, a * s ** 2
    b = coeffs[1] * a + coeffs[2] * a @ a
    return coeffs[0] * x + b @ x


def _iterator(preconditioning):
    first = {"aol": _aol_first_newton_schulz_iteration,
             "schatten": _schatten_first_newton_schulz_iteration}.get(preconditioning)
    if first is None:
        return lambda i, x, coeffs: _base_newton_schulz_iteration(x, coeffs)
    return lambda i, x, coeffs: lax.cond(i == 0, lambda x: first(x, coeffs),
                                         lambda x: _base_newton_schulz_iteration(x, coeffs), x)


def orthogonalize_via_newton_schulz(x, ns_coeffs, ns_steps=5, preconditioning: str = "frobenius", eps=1e-8,
                                    dimension_numbers: Optional[MuonDimensionNumbers] = None):
    """The orthogonal factor ``U V^T`` of ``x = U S V^T``, approximately, by
    ``ns_steps`` Newton-Schulz iterations ``x <- a x + (b A + c A^2) x``, ``A = x x^T``.

    Args:
      x: a matrix, or any array with ``dimension_numbers``.
      ns_coeffs: ``(a, b, c)``, or one triple per step ``(n, 3)``.
      ns_steps: iterations (with ``(n, 3)`` coefficients: ``n``).
      preconditioning: ``'frobenius'`` (divide by the Frobenius norm), ``'aol'``,
        ``'schatten'`` (rescale in the first iteration); ``'spectral'`` raises.
      eps: added to the norm.
      dimension_numbers: the reduction and output axes of ``x``.
    """
    ns_coeffs = jnp.asarray(ns_coeffs)
    if x.ndim != 2 and not isinstance(dimension_numbers, MuonDimensionNumbers):
        raise ValueError(f"Input must have shape (m, n) or weight dimension numbers must be provided. Got "
                         f"shape={x.shape} and dimension_numbers={dimension_numbers}.")
    if x.ndim == 2:
        dimension_numbers = MuonDimensionNumbers(reduction_axis=0, output_axis=1)
    if ns_coeffs.ndim > 2 or ns_coeffs.shape[-1] != 3:
        raise ValueError(f"Newton-Schulz coefficients must have shape (3,) or (n, 3), got {ns_coeffs.shape}")
    if preconditioning not in _PRECONDITIONINGS:
        raise ValueError(f"Unknown preconditioning {preconditioning}")
    if preconditioning == "spectral":
        raise NotImplementedError("preconditioning='spectral' divides by the largest singular value (an SVD); "
                                  "podlet has no SVD: use 'frobenius', 'aol' or 'schatten'")
    step = _iterator(preconditioning)

    def _orthogonalize(x):
        transposed = x.shape[0] > x.shape[1]
        if transposed:
            x = x.T
        if preconditioning == "frobenius":
            x = x / (jnp.sqrt(jnp.sum(jnp.square(x))) + eps)
        coeffs = ns_coeffs.astype(x.dtype)
        if coeffs.ndim == 1:
            for i in range(int(ns_steps)):  # unrolled, as optax's fori_loop(unroll=True)
                x = step(jnp.asarray(i), x, coeffs)
        else:
            for i in range(coeffs.shape[0]):
                x = step(jnp.asarray(i), x, coeffs[i])
        return x.T if transposed else x

    reshape_fn, inverse_fn = _compute_muon_reshape(x, dimension_numbers)
    return inverse_fn(vmap(_orthogonalize)(reshape_fn(x)))


class MuonState(NamedTuple):
    """Muon's step count, momentum and Newton-Schulz coefficients."""
    count: Any
    mu: Any
    ns_coeffs: Any


def scale_by_muon(ns_coeffs=_DEFAULT_NS_COEFFS, ns_steps=5, beta=0.95, eps=1e-8, mu_dtype=None, *,
                  nesterov: bool = True, adaptive: bool = False, preconditioning: str = "frobenius",
                  weight_dimension_numbers=None) -> _base.GradientTransformation:
    """Muon's scaling: (Nesterov) momentum, bias-corrected, orthogonalised per matrix
    (``adaptive``: scaled by ``<m, O>``). State ``MuonState(count, mu, ns_coeffs)``."""
    mu_dtype = _base.canonicalize_dtype(mu_dtype)

    def init_fn(params):
        coeffs = jnp.asarray(ns_coeffs)
        if coeffs.ndim > 2 or coeffs.shape[-1] != 3:
            raise ValueError(f"ns_coeffs must have shape (3,) or (n, 3), got {coeffs.shape}")
        if coeffs.ndim == 2:
            if not coeffs.shape[0] <= ns_steps:
                raise ValueError(f"Not enough coeffs to perform {ns_steps} steps")
            coeffs = coeffs[-ns_steps:]
        return MuonState(count=jnp.zeros([], jnp.int32), mu=_base.tree_zeros_like(params, mu_dtype), ns_coeffs=coeffs)

    def update_fn(updates, state, params=None):
        del params
        dim_nums = weight_dimension_numbers(updates) if callable(weight_dimension_numbers) \
            else weight_dimension_numbers
        mu = transform.update_moment(updates, state.mu, beta, 1)
        count_inc = _base.safe_increment(state.count)
        if nesterov:
            mu_hat = _tu.tree_map(lambda m, g: beta * m + (1 - beta) * g,
                                  transform.bias_correction(mu, beta, _base.safe_increment(count_inc)),
                                  transform.bias_correction(updates, beta, count_inc))
        else:
            mu_hat = transform.bias_correction(mu, beta, count_inc)
        updates = _tu.tree_map(lambda x, d: orthogonalize_via_newton_schulz(x, state.ns_coeffs, ns_steps,
                                                                            preconditioning, eps, d),
                               mu_hat, dim_nums, is_leaf=_is_weight_dim_nums)
        if adaptive:
            updates = _tu.tree_map(lambda x, y: jnp.sum(x * y) * y, mu_hat, updates)
        return updates, MuonState(count=count_inc, mu=_base.tree_cast(mu, mu_dtype), ns_coeffs=state.ns_coeffs)

    return _base.GradientTransformation(init_fn, update_fn)


def muon(learning_rate, ns_coeffs=_DEFAULT_NS_COEFFS, ns_steps=5, beta=0.95, eps=1e-8, weight_decay=0.0,
         weight_decay_mask=None, mu_dtype=None, *, nesterov: bool = True, adaptive: bool = False,
         preconditioning: str = "frobenius", adam_b1=0.9, adam_b2=0.999, adam_eps_root=0.0, adam_weight_decay=0.0,
         adam_learning_rate=None, muon_weight_dimension_numbers=None,
         consistent_rms=None) -> _base.GradientTransformationExtraArgs:
    """Muon for the 2-D weights (or those ``muon_weight_dimension_numbers`` selects),
    AdamW for the rest, through :func:`partition` (labels ``'muon'`` / ``'adam'``)."""
    if adam_learning_rate is None:
        adam_learning_rate = learning_rate
    if isinstance(ns_coeffs, str):
        if ns_coeffs not in _NS_COEFFS_PRESET_DICT:
            raise ValueError(f"Unknown ns_coeff preset string: {ns_coeffs}")
        ns_coeffs = _NS_COEFFS_PRESET_DICT[ns_coeffs]
    dim_spec = muon_weight_dimension_numbers
    if dim_spec is None:
        def param_labels(params):
            return _tu.tree_map(lambda x: "muon" if x.ndim == 2 else "adam", params)
        dim_spec = MuonDimensionNumbers()
    else:
        def param_labels(params):
            dim_nums = dim_spec(params) if callable(dim_spec) else dim_spec
            return _tu.tree_map(lambda d, x: _tu.tree_map(lambda y: "muon" if d is not None else "adam", x),
                                dim_nums, params, is_leaf=lambda x: x is None or _is_weight_dim_nums(x))

    def muon_weight_dim_nums_fn(params):
        dim_nums = dim_spec(params) if callable(dim_spec) else dim_spec
        mask = _tu.tree_map(lambda label: label == "muon", param_labels(params))
        is_leaf = lambda x: x is None or _is_weight_dim_nums(x) or isinstance(x, MaskedNode)  # noqa: E731
        return _tu.tree_map(lambda d, submask: _tu.tree_map(lambda m: d if m else MaskedNode(), submask),
                            dim_nums, mask, is_leaf=is_leaf)

    return partition(
        transforms={
            "muon": _base.chain(
                scale_by_muon(ns_coeffs=ns_coeffs, ns_steps=ns_steps, beta=beta, eps=eps, mu_dtype=mu_dtype,
                              nesterov=nesterov, adaptive=adaptive, preconditioning=preconditioning,
                              weight_dimension_numbers=muon_weight_dim_nums_fn),
                scale_by_shape(weight_dimension_numbers=muon_weight_dim_nums_fn, consistent_rms=consistent_rms),
                transform.add_decayed_weights(weight_decay, weight_decay_mask),
                transform.scale_by_learning_rate(learning_rate)),
            "adam": alias.adamw(learning_rate=adam_learning_rate, b1=adam_b1, b2=adam_b2, eps=eps,
                                eps_root=adam_eps_root, weight_decay=adam_weight_decay, mu_dtype=mu_dtype,
                                nesterov=nesterov),
        },
        param_labels=param_labels)

