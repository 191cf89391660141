"""Clipping beyond ``clip`` and ``clip_by_global_norm``: per block, adaptive
(unit-wise, relative to the params) and per example (``optax/transforms/_clipping.py``).
"""
from typing import Optional, Tuple, Union

from .. import numpy as jnp
from .. import tree_util as _tu
from ._base import NO_PARAMS_MSG, EmptyState, GradientTransformation, init_empty_state

AdaptiveGradClipState = EmptyState


def clip_by_block_rms(threshold) -> GradientTransformation:
    """Rescales each leaf ("block") whose RMS exceeds ``threshold`` down to it:
    ``u / max(1, rms(u) / threshold)``.

    Args:
      threshold: the largest RMS let through.

    Returns:
      A :class:`GradientTransformation` with state ``EmptyState()``.
    """

    def update_fn(updates, state, params=None):
        del params

        def _clip_fn(u):
            clip_denom = jnp.maximum(1.0, jnp.sqrt(jnp.mean(jnp.square(u))) / threshold)
            return u / clip_denom

        return _tu.tree_map(_clip_fn, updates), state

    return GradientTransformation(init_empty_state, update_fn)


def _check_batch_dim(grads, what, shapes_in_message=False):
    leaves = _tu.tree_leaves(grads)
    batch = leaves[0].shape[0] if leaves and leaves[0].ndim else None
    if not leaves or not all(g.ndim >= 1 and g.shape[0] == batch for g in leaves):
        extra = f"; got shapes: {_tu.tree_map(jnp.shape, grads)}." if shapes_in_message else ""
        raise ValueError(f"Unlike other transforms, `{what}` expects `grads` to have a batch dimension in the "
                         f"0th axis{extra}")


def _per_example_norms(grads):
    """Global L2 norm of each example's gradient (axis 0 indexes the examples)."""
    sq = [jnp.sum(jnp.square(g).reshape(g.shape[0], -1), axis=1) for g in _tu.tree_leaves(grads)]
    total = sq[0]
    for s in sq[1:]:
        total = total + s
    return jnp.sqrt(total)


def per_example_global_norm_clip(grads, l2_norm_clip):
    """Clips each example's gradient to global L2 norm ``l2_norm_clip`` and sums them
    (DP-SGD, Abadi et al. 2016).

    Args:
      grads: a pytree whose leaves all have the examples on axis 0.
      l2_norm_clip: the per-example norm bound.

    Returns:
      ``(sum of the clipped per-example grads, number of examples clipped)``.
    """
    _check_batch_dim(grads, "per_example_global_norm_clip")
    norms = _per_example_norms(grads)
    multipliers = jnp.nan_to_num(jnp.minimum(l2_norm_clip / norms, 1.0), nan=1.0)
    num_clipped = jnp.sum(multipliers < 1.0)
    clipped_sum = _tu.tree_map(lambda g: jnp.tensordot(multipliers, g, axes=1), grads)
    return clipped_sum, num_clipped


def per_example_layer_norm_clip(grads, global_l2_norm_clip, uniform: bool = True):
    """Clips each layer (leaf) of each example separately, then sums over examples
    (McMahan et al. 2017): layer bound ``C / sqrt(L)`` (uniform) or
    ``C * sqrt(size_i / size)``.

    Args:
      grads: a pytree whose leaves all have the examples on axis 0.
      global_l2_norm_clip: the overall bound ``C``.
      uniform: the same bound for every layer.

    Returns:
      ``(summed clipped grads, per-layer number of examples clipped)``, both with
      ``grads``' structure.
    """
    _check_batch_dim(grads, "per_example_layer_norm_clip", shapes_in_message=True)
    leaves, treedef = _tu.tree_flatten(grads)
    if uniform:
        bounds = [global_l2_norm_clip * (1.0 / len(leaves)) ** 0.5 for _ in leaves]
    else:
        total = sum(g[0].size for g in leaves)
        bounds = [global_l2_norm_clip * (g[0].size / total) ** 0.5 for g in leaves]
    results = [per_example_global_norm_clip(g, b) for g, b in zip(leaves, bounds)]
    return (_tu.tree_unflatten(treedef, [r[0] for r in results]),
            _tu.tree_unflatten(treedef, [r[1] for r in results]))


def unitwise_norm(x, axis: Optional[Union[int, Tuple[int, ...]]] = None):
    """L2 norm of each unit (output neuron / channel), broadcast to ``x``'s shape.

    Units by rank when ``axis`` is None: the whole array for scalars and vectors, axis
    0 for rank 2-3 (``IO`` linear, multi-head), axes (0, 1, 2) for ``HWIO`` convs,
    (0, 1, 2, 3) for ``DHWIO``.
    """
    sq = jnp.square(x)
    if axis is not None:
        squared_norm = jnp.sum(sq, axis=axis, keepdims=True)
    elif jnp.squeeze(x).ndim <= 1:
        squared_norm = jnp.sum(sq, keepdims=True)
    elif x.ndim in (2, 3):
        squared_norm = jnp.sum(sq, axis=0, keepdims=True)
    elif x.ndim == 4:
        squared_norm = jnp.sum(sq, axis=(0, 1, 2), keepdims=True)
    elif x.ndim == 5:
        squared_norm = jnp.sum(sq, axis=(0, 1, 2, 3), keepdims=True)
    else:
        raise ValueError(f"Expected parameter with shape in {{1, 2, 3, 4, 5}}, got {x.shape}. "
                         "Use axis parameter to specify reduction axes for other shapes.")
    return jnp.broadcast_to(jnp.sqrt(squared_norm), x.shape)


def unitwise_clip(g_norm, max_norm, grad, div_eps=1e-6):
    """``grad`` where ``g_norm < max_norm``, else ``grad * max_norm / g_norm``."""
    for a in (max_norm, grad):
        if tuple(jnp.shape(g_norm)) != tuple(jnp.shape(a)):
            raise ValueError(f"Shape mismatch: got {tuple(jnp.shape(g_norm))} and {tuple(jnp.shape(a))}.")
    clipped_grad = grad * (max_norm / jnp.maximum(g_norm, div_eps))
    return jnp.where(g_norm < max_norm, grad, clipped_grad)


def adaptive_grad_clip(clipping, eps=1e-3, axis=None) -> GradientTransformation:
    """Adaptive gradient clipping (Brock et al. 2021): each unit's update norm is at
    most ``clipping * max(param unit norm, eps)``.

    Args:
      clipping: the largest ratio of update norm to param norm.
      eps: floor of the param norm (so zero-initialised params can move).
      axis: reduction axes of a unit (None: by rank, see :func:`unitwise_norm`).

    Returns:
      A :class:`GradientTransformation` with state ``EmptyState()``; ``update`` needs
      ``params``.
    """

    def update_fn(updates, state, params):
        if params is None:
            raise ValueError(NO_PARAMS_MSG)
        g_norm = _tu.tree_map(lambda x: unitwise_norm(x, axis=axis), updates)
        p_norm = _tu.tree_map(lambda x: unitwise_norm(x, axis=axis), params)
        max_norm = _tu.tree_map(lambda x: clipping * jnp.maximum(x, eps), p_norm)
        return _tu.tree_map(unitwise_clip, g_norm, max_norm, updates), state

    return GradientTransformation(init_empty_state, update_fn)
