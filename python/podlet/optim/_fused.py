"""The fused optimizer steps: ``[clip_by_global_norm ->] adamw | sgd(momentum) | lion`` as
one pass per parameter.

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
``fused_sgd`` (``trace`` then the learning rate, one ``sgd_momentum_update`` per leaf)
and ``fused_lion`` (``scale_by_lion``, decoupled weight decay, the learning rate, one
``lion_update`` per leaf; cpp/podlet/prims/optim_sgd_lion.cc) are built the same way.

``adamw(...)``, ``sgd(..., momentum=m)``, ``lion(...)`` and each of them after
``clip_by_global_norm(c)`` in a ``chain`` return these fused transforms by themselves
whenever they compute the same thing: Python-number hyperparameters, a learning rate
that is a Python number or a schedule, a constant (Python-number) weight decay, ``mask``
None / a pytree / a callable, no Nesterov for AdamW, ``mu_dtype`` /
``accumulator_dtype`` None, a positive Python-number clip norm. At update time, leaves
that are not float arrays sharing one dtype with their grad and state (e.g. Python
scalars as params) send the whole step down the unfused chain, which gives the same
numbers by definition.
"""
from typing import Any

from .. import numpy as jnp
from .. import tree_util as _tu
from .._src import core as _core
from .._src import dtypes as _dtypes
from . import _base
from . import _moments
from . import transform

_FUSED_DTYPES = ("float32", "bfloat16", "float64")


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _scalar_arg(x):
    """A step scalar as the primitives take it: a 0-d float array (float64 where x64 allows)."""
    return x if hasattr(x, "dtype") else jnp.asarray(float(x), jnp.float32)


def _leaves_ok(p, *others) -> bool:
    """Whether a leaf can take the fused path: a float array of a fused dtype, with every
    other array (grad, optimizer state) of its dtype and shape."""
    d = getattr(p, "dtype", None)
    if d is None or _dtypes.dtype(d).name not in _FUSED_DTYPES:
        return False
    return all(getattr(x, "dtype", None) == d and tuple(getattr(x, "shape", ())) == tuple(p.shape) for x in others)


def _decay_flags(mask, updates, params, n):
    """Per flattened param leaf, whether ``add_decayed_weights(wd, mask)`` decays it; None
    when the mask does not expand to the params' leaves (the unfused chain then decides)."""
    if mask is None:
        return [True] * n
    mask_tree = mask(updates) if transform._mask_callable(mask) else mask
    full = _tu.tree_map(lambda m, p: _tu.tree_map(lambda _: bool(m), p), mask_tree, params)
    decay = _tu.tree_leaves(full)
    return decay if len(decay) == n else None


def _clip_scalars(updates, clip_norm):
    """``(g_norm, max_norm)`` of ``clip_by_global_norm(clip_norm)`` (its own norm, its own
    check); a zero norm and ``max_norm = 0`` (no clip) without one."""
    if clip_norm is None:
        return jnp.zeros([], jnp.float32), 0.0
    g_norm = _base.tree_norm(updates)
    if jnp.squeeze(g_norm).shape != ():
        raise ValueError(f"clip_by_global_norm: the norm must be a scalar, got shape {g_norm.shape}")
    return jnp.squeeze(g_norm), float(clip_norm)


def _learning_rate(learning_rate, lr_state):
    """The step's learning rate as a float scalar, and the new state of
    ``scale_by_learning_rate`` (a schedule counts its steps; a constant has none)."""
    if callable(learning_rate):
        lr = learning_rate(lr_state.count)
        new_lr_state = transform.ScaleByScheduleState(count=_base.safe_increment(lr_state.count))
    else:
        lr, new_lr_state = learning_rate, lr_state
    if not hasattr(lr, "dtype"):
        lr = jnp.asarray(float(lr), jnp.float64)  # f64 -> f32 when x64 is off, as weak typing does
    elif not _dtypes.is_float(lr.dtype):
        lr = jnp.asarray(lr).astype(jnp.float32)
    return lr, new_lr_state


def _clip_ok(clip_norm) -> bool:
    return clip_norm is None or (_is_number(clip_norm) and clip_norm > 0)


def _lr_ok(learning_rate) -> bool:
    return callable(learning_rate) or _is_number(learning_rate)


def _reference(unfused, clip_norm):
    """The unfused transform a fused one must equal: ``unfused``, after
    ``clip_by_global_norm(clip_norm)`` when clip_norm is given (the state layout too)."""
    return unfused if clip_norm is None else _base._chain(transform.clip_by_global_norm(clip_norm), unfused)


def _inner_state(state, clip_norm):
    """The optimizer's own state inside the (clip, optimizer) chain state."""
    return state[1] if clip_norm is not None else state


def _outer_state(state, new_inner, clip_norm):
    """The chain state with the optimizer's part replaced (the clip's state is empty)."""
    return (state[0], new_inner) if clip_norm is not None else new_inner


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
    scalars = [_scalar_arg(x) for x in (lr, gnorm, bc1, bc2)]
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
    return _lr_ok(learning_rate) and _clip_ok(clip_norm)


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
    ref = _reference(alias._adamw_unfused(learning_rate, b1=b1, b2=b2, eps=eps, eps_root=eps_root, mu_dtype=None,
                                          weight_decay=weight_decay, mask=mask), clip_norm)
    ref_update = ref.update

    def update_fn(updates, state, params=None, **extra_args):
        if params is None:
            return ref_update(updates, state, params, **extra_args)  # raises optax's NO_PARAMS_MSG
        adam_state, wd_state, lr_state = _inner_state(state, clip_norm)
        g_leaves, treedef = _tu.tree_flatten(updates)
        p_leaves, p_def = _tu.tree_flatten(params)
        m_leaves, m_def = _tu.tree_flatten(adam_state.mu)
        v_leaves, v_def = _tu.tree_flatten(adam_state.nu)
        if not (treedef == p_def == m_def == v_def) or not all(map(_leaves_ok, p_leaves, g_leaves, m_leaves,
                                                                    v_leaves)):
            return ref_update(updates, state, params, **extra_args)
        decay = _decay_flags(mask, updates, params, len(p_leaves))
        if decay is None:
            return ref_update(updates, state, params, **extra_args)

        # Exactly the scalar computations of the unfused chain.
        g_norm, max_norm = _clip_scalars(updates, clip_norm)
        count_inc = _base.safe_increment(adam_state.count)
        bc1 = 1 - b1 ** count_inc
        bc2 = 1 - b2 ** count_inc
        lr, new_lr_state = _learning_rate(learning_rate, lr_state)

        new_u, new_m, new_v = [], [], []
        for p, g, m, v, dk in zip(p_leaves, g_leaves, m_leaves, v_leaves, decay):
            u, m2, v2 = adamw_update(p, g, m, v, lr, g_norm, bc1, bc2, b1=b1, b2=b2, eps=eps, eps_root=eps_root,
                                     weight_decay=weight_decay if dk else 0.0, max_norm=max_norm, apply=False)
            new_u.append(u)
            new_m.append(m2)
            new_v.append(v2)
        new_adam = transform.ScaleByAdamState(count=count_inc, mu=_tu.tree_unflatten(m_def, new_m),
                                              nu=_tu.tree_unflatten(v_def, new_v))
        return _tu.tree_unflatten(treedef, new_u), _outer_state(state, (new_adam, wd_state, new_lr_state), clip_norm)

    update_fn._podlet_fused_adamw = dict(learning_rate=learning_rate, b1=b1, b2=b2, eps=eps, eps_root=eps_root,
                                         weight_decay=weight_decay, mask=mask, clip_norm=clip_norm)
    return _base.GradientTransformationExtraArgs(ref.init, update_fn)


# ---------------------------------------------------------------------------------
# SGD with momentum, Lion
# ---------------------------------------------------------------------------------
def sgd_momentum_update(param, grad, trace, lr, gnorm, *, momentum, nesterov=False, max_norm=0.0, apply=True):
    """The ``sgd_momentum_update`` primitive for one array (see cpp/podlet/prims/optim_sgd_lion.cc).

    Args:
      param: the parameter (read only when ``apply``; pass ``grad`` otherwise).
      grad, trace: the gradient and the momentum accumulator, of param's shape and float dtype.
      lr: 0-d float learning rate (the update is ``-lr * ...``).
      gnorm: 0-d float global gradient norm (ignored when ``max_norm <= 0``).
      momentum, nesterov: as :func:`trace`.
      max_norm: clip threshold of ``clip_by_global_norm``; ``<= 0`` disables clipping.
      apply: return the new parameter (True) or the update (False) first.

    Returns:
      ``(new_param or update, new_trace)``.
    """
    return _core.bind("sgd_momentum_update", param, grad, trace, _scalar_arg(lr), _scalar_arg(gnorm),
                      momentum=float(momentum), nesterov=int(bool(nesterov)), max_norm=float(max_norm),
                      apply=int(bool(apply)))


def lion_update(param, grad, mu, lr, gnorm, *, b1, b2, weight_decay=0.0, max_norm=0.0, apply=True):
    """The ``lion_update`` primitive for one array (see cpp/podlet/prims/optim_sgd_lion.cc).

    Args:
      param, grad, mu: arrays of one shape and one float dtype (param is read by the
        weight decay and by ``apply``).
      lr: 0-d float learning rate (the update is ``-lr * ...``).
      gnorm: 0-d float global gradient norm (ignored when ``max_norm <= 0``).
      b1, b2, weight_decay: the Lion hyperparameters (Python floats).
      max_norm: clip threshold of ``clip_by_global_norm``; ``<= 0`` disables clipping.
      apply: return the new parameter (True) or the update (False) first.

    Returns:
      ``(new_param or update, new_mu)``.
    """
    return _core.bind("lion_update", param, grad, mu, _scalar_arg(lr), _scalar_arg(gnorm), b1=float(b1),
                      b2=float(b2), weight_decay=float(weight_decay), max_norm=float(max_norm),
                      apply=int(bool(apply)))


def can_fuse_sgd(learning_rate, momentum, accumulator_dtype=None, clip_norm=None) -> bool:
    """Whether :func:`fused_sgd` computes exactly what ``sgd(learning_rate, momentum, ...)``
    (after ``clip_by_global_norm(clip_norm)``) computes."""
    return (_is_number(momentum) and accumulator_dtype is None and _lr_ok(learning_rate)
            and _clip_ok(clip_norm))


def fused_sgd(learning_rate, momentum, nesterov: bool = False,
              clip_norm=None) -> _base.GradientTransformationExtraArgs:
    """SGD with (Nesterov) momentum, optionally after ``clip_by_global_norm(clip_norm)``,
    in one fused pass.

    Args:
      learning_rate: a Python float or a schedule ``count -> lr``.
      momentum: the momentum coefficient (a Python float).
      nesterov: use Nesterov momentum.
      clip_norm: None, or the ``max_norm`` of a preceding ``clip_by_global_norm``.

    Returns:
      A :class:`GradientTransformationExtraArgs` whose state is that of
      ``sgd(learning_rate, momentum, nesterov)`` (``clip_norm=None``) or of
      ``chain(clip_by_global_norm(clip_norm), sgd(...))``.
    """
    if not can_fuse_sgd(learning_rate, momentum, None, clip_norm):
        raise ValueError("fused_sgd needs a Python-number momentum, a Python number or schedule learning rate and "
                         "a positive Python-number clip_norm; use chain(clip_by_global_norm(...), sgd(...)) for "
                         "anything else")
    from . import alias
    ref = _reference(alias._sgd_unfused(learning_rate, momentum=momentum, nesterov=nesterov), clip_norm)
    ref_update = ref.update

    def update_fn(updates, state, params=None, **extra_args):
        trace_state, lr_state = _inner_state(state, clip_norm)
        g_leaves, treedef = _tu.tree_flatten(updates)
        t_leaves, t_def = _tu.tree_flatten(trace_state.trace)
        if treedef != t_def or not all(map(_leaves_ok, g_leaves, t_leaves)):
            return ref_update(updates, state, params, **extra_args)
        # SGD's update does not read the params (optax's takes none), and apply=False
        # never reads the param slot. Given params fill it, so that jit's optimizer pass
        # (ir/optim_fusion.h) can fold apply_updates' add(param, update) into the node;
        # without them (or with params that are not the grads' twins) the grads do.
        slot = g_leaves
        if params is not None:
            p_leaves, p_def = _tu.tree_flatten(params)
            if p_def == treedef and all(map(_leaves_ok, p_leaves, g_leaves)):
                slot = p_leaves
        g_norm, max_norm = _clip_scalars(updates, clip_norm)
        lr, new_lr_state = _learning_rate(learning_rate, lr_state)
        new_u, new_t = [], []
        for p, g, t in zip(slot, g_leaves, t_leaves):
            u, t2 = sgd_momentum_update(p, g, t, lr, g_norm, momentum=momentum, nesterov=nesterov,
                                        max_norm=max_norm, apply=False)
            new_u.append(u)
            new_t.append(t2)
        new_inner = (transform.TraceState(trace=_tu.tree_unflatten(t_def, new_t)), new_lr_state)
        return _tu.tree_unflatten(treedef, new_u), _outer_state(state, new_inner, clip_norm)

    update_fn._podlet_fused_sgd = dict(learning_rate=learning_rate, momentum=momentum, nesterov=nesterov,
                                       clip_norm=clip_norm)
    return _base.GradientTransformationExtraArgs(ref.init, update_fn)


def can_fuse_lion(learning_rate, b1, b2, mu_dtype, weight_decay, mask, clip_norm=None) -> bool:
    """Whether :func:`fused_lion` computes exactly what ``lion(...)`` (after
    ``clip_by_global_norm(clip_norm)``) computes."""
    del mask  # None, a pytree or a callable: all fused
    return (mu_dtype is None and all(_is_number(x) for x in (b1, b2, weight_decay)) and _lr_ok(learning_rate)
            and _clip_ok(clip_norm))


def fused_lion(learning_rate, b1=0.9, b2=0.99, weight_decay=1e-3, mask=None,
               clip_norm=None) -> _base.GradientTransformationExtraArgs:
    """Lion (optionally after ``clip_by_global_norm(clip_norm)``) in one fused pass.

    Args:
      learning_rate: a Python float or a schedule ``count -> lr``.
      b1, b2: as :func:`lion` (Python floats).
      weight_decay: a Python float (a schedule is not fused: use :func:`lion`).
      mask: None, a pytree of bools, or a callable returning one (as :func:`lion`).
      clip_norm: None, or the ``max_norm`` of a preceding ``clip_by_global_norm``.

    Returns:
      A :class:`GradientTransformationExtraArgs` whose state is that of ``lion(...)``
      (``clip_norm=None``) or of ``chain(clip_by_global_norm(clip_norm), lion(...))``.
    """
    if not can_fuse_lion(learning_rate, b1, b2, None, weight_decay, mask, clip_norm):
        raise ValueError("fused_lion needs Python-number b1, b2 and weight_decay, a Python number or schedule "
                         "learning rate and a positive Python-number clip_norm; use "
                         "chain(clip_by_global_norm(...), lion(...)) for anything else")
    from . import alias
    ref = _reference(alias._lion_unfused(learning_rate, b1=b1, b2=b2, mu_dtype=None, weight_decay=weight_decay,
                                         mask=mask), clip_norm)
    ref_update = ref.update

    def update_fn(updates, state, params=None, **extra_args):
        if params is None:
            return ref_update(updates, state, params, **extra_args)  # raises optax's NO_PARAMS_MSG
        lion_state, wd_state, lr_state = _inner_state(state, clip_norm)
        g_leaves, treedef = _tu.tree_flatten(updates)
        p_leaves, p_def = _tu.tree_flatten(params)
        m_leaves, m_def = _tu.tree_flatten(lion_state.mu)
        if not (treedef == p_def == m_def) or not all(map(_leaves_ok, p_leaves, g_leaves, m_leaves)):
            return ref_update(updates, state, params, **extra_args)
        decay = _decay_flags(mask, updates, params, len(p_leaves))
        if decay is None:
            return ref_update(updates, state, params, **extra_args)
        g_norm, max_norm = _clip_scalars(updates, clip_norm)
        lr, new_lr_state = _learning_rate(learning_rate, lr_state)
        new_u, new_m = [], []
        for p, g, m, dk in zip(p_leaves, g_leaves, m_leaves, decay):
            u, m2 = lion_update(p, g, m, lr, g_norm, b1=b1, b2=b2, weight_decay=weight_decay if dk else 0.0,
                                max_norm=max_norm, apply=False)
            new_u.append(u)
            new_m.append(m2)
        new_lion = _moments.ScaleByLionState(count=_base.safe_increment(lion_state.count),
                                             mu=_tu.tree_unflatten(m_def, new_m))
        return _tu.tree_unflatten(treedef, new_u), _outer_state(state, (new_lion, wd_state, new_lr_state), clip_norm)

    update_fn._podlet_fused_lion = dict(learning_rate=learning_rate, b1=b1, b2=b2, weight_decay=weight_decay,
                                        mask=mask, clip_norm=clip_norm)
    return _base.GradientTransformationExtraArgs(ref.init, update_fn)


# The fused transforms chain() folds a preceding clip_by_global_norm into: the update
# function's spec attribute, and the constructor taking the spec plus clip_norm.
_FUSED_KINDS = (("_podlet_fused_adamw", fused_adamw), ("_podlet_fused_sgd", fused_sgd),
                ("_podlet_fused_lion", fused_lion))


def maybe_fuse_chain(args) -> Any:
    """``chain(clip_by_global_norm(c), <fused adamw / sgd / lion without clip>)`` -> the same
    fused transform with ``clip_norm=c``; None when the chain is anything else."""
    if len(args) != 2:
        return None
    c = getattr(getattr(args[0], "update", None), "_podlet_clip_max_norm", None)
    if c is None or not _clip_ok(c):
        return None
    for attr, make in _FUSED_KINDS:
        spec = getattr(getattr(args[1], "update", None), attr, None)
        if spec is not None:
            return make(**{**spec, "clip_norm": c}) if spec["clip_norm"] is None else None
    return None
