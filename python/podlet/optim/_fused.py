"""The fused AdamW step: ``[clip_by_global_norm ->] adamw`` as one pass per parameter.

``fused_adamw(lr, ..., clip_norm=c)`` is a drop-in for
``chain(clip_by_global_norm(c), adamw(lr, ...))``: same ``init`` (the state pytree is
the unfused chain's, so checkpoints, optax comparisons and state surgery keep working),
same updates bit for bit. Its ``update`` computes the global norm (one reduction over
the gradients, as the clip does) and then, for every leaf, one ``adamw_update``
primitive that reads param, grad, mu, nu once and writes the update, mu and nu: the
clip scale, both moment EMAs, the bias corrections, the Adam ratio, the decoupled
weight decay and the learning-rate scale happen in one pass instead of ~20
elementwise ops (see cpp/podlet/prims/optim.cc for the exact op order, which is
optax's). ``update`` still returns *updates* (optax's API); ``apply_updates`` adds them.

``adamw(...)`` and ``chain(clip_by_global_norm(c), adamw(...))`` return this fused
transform by themselves whenever it computes the same thing: Python-number
hyperparameters, a constant (Python-number) weight decay, ``mask`` None / a pytree /
a callable, no Nesterov, ``mu_dtype`` None, a positive Python-number clip norm. At
update time, leaves that are not float arrays sharing one dtype with their grad and
moments (e.g. Python scalars as params) send the whole step down the unfused chain,
which gives the same numbers by definition.
"""
from typing import Any

from .. import numpy as jnp
from .. import tree_util as _tu
from .._src import core as _core
from .._src import dtypes as _dtypes
from . import _base
from . import transform

_FUSED_DTYPES = ("float32", "bfloat16", "float64")


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def adamw_update(param, grad, mu, nu, lr, gnorm, bc1, bc2, *, b1, b2, eps, eps_root=0.0,
                 weight_decay=0.0, max_norm=0.0, apply=True):
    """The ``adamw_update`` primitive for one array (see cpp/podlet/prims/optim.cc).

    Args:
      param, grad, mu, nu: arrays of one shape and one float dtype.
      lr: 0-d float learning rate (positive; the update is ``-lr * u``).
      gnorm: 0-d float global gradient norm (ignored when ``max_norm <= 0``).
      bc1, bc2: 0-d float bias corrections ``1 - b1**count``, ``1 - b2**count``.
      b1, b2, eps, eps_root, weight_decay: the AdamW hyperparameters (Python floats).
      max_norm: clip threshold of ``clip_by_global_norm``; ``<= 0`` disables clipping.
      apply: return the new parameter (True) or the update (False) first.

    Returns:
      ``(new_param or update, new_mu, new_nu)``.
    """
    scalars = [x if hasattr(x, "dtype") else jnp.asarray(float(x), jnp.float32) for x in (lr, gnorm, bc1, bc2)]
    return _core.bind("adamw_update", param, grad, mu, nu, *scalars, b1=float(b1), b2=float(b2),
                      eps=float(eps), eps_root=float(eps_root), weight_decay=float(weight_decay),
                      max_norm=float(max_norm), apply=int(bool(apply)))


def can_fuse(learning_rate, b1, b2, eps, eps_root, mu_dtype, weight_decay, mask, nesterov,
             clip_norm=None) -> bool:
    """Whether :func:`fused_adamw` computes exactly what the unfused chain computes."""
    if nesterov or mu_dtype is not None:
        return False
    if not all(_is_number(x) for x in (b1, b2, eps, eps_root, weight_decay)):
        return False
    if not (callable(learning_rate) or _is_number(learning_rate)):
        return False
    if clip_norm is not None and not (_is_number(clip_norm) and clip_norm > 0):
        return False
    return True


def fused_adamw(learning_rate, b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0, weight_decay=1e-4, mask=None,
                clip_norm=None) -> _base.GradientTransformationExtraArgs:
    """AdamW (optionally after ``clip_by_global_norm(clip_norm)``) in one fused pass.

    Args:
      learning_rate: a Python float or a schedule ``count -> lr``.
      b1, b2, eps, eps_root: as :func:`adamw` (Python floats).
      weight_decay: a Python float (a schedule is not fused: use :func:`adamw`).
      mask: None, a pytree of bools, or a callable returning one (as :func:`adamw`).
      clip_norm: None, or the ``max_norm`` of a preceding ``clip_by_global_norm``.

    Returns:
      A :class:`GradientTransformationExtraArgs` whose state is that of
      ``adamw(...)`` (``clip_norm=None``) or of
      ``chain(clip_by_global_norm(clip_norm), adamw(...))``.
    """
    if not can_fuse(learning_rate, b1, b2, eps, eps_root, None, weight_decay, mask, False, clip_norm):
        raise ValueError("fused_adamw needs Python-number b1, b2, eps, eps_root and weight_decay, a Python "
                         "number or schedule learning rate and a positive Python-number clip_norm; use "
                         "chain(clip_by_global_norm(...), adamw(...)) for anything else")
    from . import alias
    ref = alias._adamw_unfused(learning_rate, b1=b1, b2=b2, eps=eps, eps_root=eps_root, mu_dtype=None,
                               weight_decay=weight_decay, mask=mask)
    if clip_norm is not None:
        ref = _base._chain(transform.clip_by_global_norm(clip_norm), ref)
    ref_update = ref.update

    def leaf_ok(p, g, m, v):
        d = getattr(p, "dtype", None)
        if d is None or _dtypes.dtype(d).name not in _FUSED_DTYPES:
            return False
        return all(getattr(x, "dtype", None) == d and tuple(getattr(x, "shape", ())) == tuple(p.shape)
                   for x in (g, m, v))

    def update_fn(updates, state, params=None, **extra_args):
        if params is None:
            return ref_update(updates, state, params, **extra_args)  # raises optax's NO_PARAMS_MSG
        inner = state[1] if clip_norm is not None else state
        adam_state, wd_state, lr_state = inner
        g_leaves, treedef = _tu.tree_flatten(updates)
        p_leaves, p_def = _tu.tree_flatten(params)
        m_leaves, m_def = _tu.tree_flatten(adam_state.mu)
        v_leaves, v_def = _tu.tree_flatten(adam_state.nu)
        if not (treedef == p_def == m_def == v_def) or not all(map(leaf_ok, p_leaves, g_leaves, m_leaves, v_leaves)):
            return ref_update(updates, state, params, **extra_args)

        if mask is None:
            decay = [True] * len(p_leaves)
        else:
            mask_tree = mask(updates) if transform._mask_callable(mask) else mask
            full = _tu.tree_map(lambda m, p: _tu.tree_map(lambda _: bool(m), p), mask_tree, params)
            decay = _tu.tree_leaves(full)
            if len(decay) != len(p_leaves):
                return ref_update(updates, state, params, **extra_args)

        # Exactly the scalar computations of the unfused chain.
        if clip_norm is not None:
            g_norm = _base.tree_norm(updates)
            if jnp.squeeze(g_norm).shape != ():
                raise ValueError(f"clip_by_global_norm: the norm must be a scalar, got shape {g_norm.shape}")
            g_norm, max_norm = jnp.squeeze(g_norm), float(clip_norm)
        else:
            g_norm, max_norm = jnp.zeros([], jnp.float32), 0.0
        count_inc = _base.safe_increment(adam_state.count)
        bc1 = 1 - b1 ** count_inc
        bc2 = 1 - b2 ** count_inc
        if callable(learning_rate):
            lr = learning_rate(lr_state.count)
            new_lr_state = transform.ScaleByScheduleState(count=_base.safe_increment(lr_state.count))
        else:
            lr, new_lr_state = learning_rate, lr_state
        if not hasattr(lr, "dtype"):
            lr = jnp.asarray(float(lr), jnp.float64)  # f64 -> f32 when x64 is off, as weak typing does
        elif not _dtypes.is_float(lr.dtype):
            lr = jnp.asarray(lr).astype(jnp.float32)

        new_u, new_m, new_v = [], [], []
        for p, g, m, v, dk in zip(p_leaves, g_leaves, m_leaves, v_leaves, decay):
            u, m2, v2 = adamw_update(p, g, m, v, lr, g_norm, bc1, bc2, b1=b1, b2=b2, eps=eps, eps_root=eps_root,
                                     weight_decay=weight_decay if dk else 0.0, max_norm=max_norm, apply=False)
            new_u.append(u)
            new_m.append(m2)
            new_v.append(v2)
        new_adam = transform.ScaleByAdamState(count=count_inc, mu=_tu.tree_unflatten(m_def, new_m),
                                              nu=_tu.tree_unflatten(v_def, new_v))
        new_inner = (new_adam, wd_state, new_lr_state)
        new_state = (state[0], new_inner) if clip_norm is not None else new_inner
        return _tu.tree_unflatten(treedef, new_u), new_state

    update_fn._podlet_fused_adamw = dict(learning_rate=learning_rate, b1=b1, b2=b2, eps=eps, eps_root=eps_root,
                                         weight_decay=weight_decay, mask=mask, clip_norm=clip_norm)
    return _base.GradientTransformationExtraArgs(ref.init, update_fn)


def maybe_fuse_chain(args) -> Any:
    """``chain(clip_by_global_norm(c), <fused adamw without clip>)`` -> ``fused_adamw(..., clip_norm=c)``;
    None when the chain is anything else."""
    if len(args) != 2:
        return None
    c = getattr(getattr(args[0], "update", None), "_podlet_clip_max_norm", None)
    spec = getattr(getattr(args[1], "update", None), "_podlet_fused_adamw", None)
    if c is None or spec is None or spec["clip_norm"] is not None:
        return None
    if not can_fuse(spec["learning_rate"], spec["b1"], spec["b2"], spec["eps"], spec["eps_root"], None,
                    spec["weight_decay"], spec["mask"], False, c):
        return None
    return fused_adamw(**{**spec, "clip_norm": c})
