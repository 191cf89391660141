"""The optax core: GradientTransformation, EmptyState, chain, apply_updates, global_norm.

An optimizer is a pair of pure functions ``init(params) -> state`` and
``update(updates, state, params=None) -> (updates, state)`` held in a NamedTuple, as
in optax (``optax/_src/base.py``, ``combine.py``, ``update.py``). States are pytrees of
podlet arrays, so a whole optimizer step traces under ``podlet.jit`` and its state
flattens, replicates and checkpoints like any other pytree. The names, signatures and
state structures are optax 0.2.8's, so ``import podlet.optim as optax`` works.
"""
import functools
import operator
from typing import Any, Callable, NamedTuple, Optional, Protocol, Union, runtime_checkable

import numpy as _np

from .. import numpy as jnp
from .. import tree_util as _tu
from .._src import dtypes as _dtypes

PyTree = Any
Params = Any
Updates = Any
OptState = Any
Schedule = Callable[[Any], Any]
ScheduleState = Any
ScalarOrSchedule = Union[float, Any, Schedule]


@runtime_checkable
class StatefulSchedule(Protocol):
    """A schedule with a state: ``init() -> state``, ``update(state, **extra_args)
    -> state``, ``__call__(state, **extra_args) -> value`` (see
    :func:`inject_hyperparams`)."""

    def init(self) -> ScheduleState:
        ...

    def update(self, state: ScheduleState, **extra_args) -> ScheduleState:
        ...

    def __call__(self, state: ScheduleState, **extra_args):
        ...


class TransformInitFn(Protocol):
    """``init(params) -> state``."""

    def __call__(self, params: Params) -> OptState:
        ...


class TransformUpdateFn(Protocol):
    """``update(updates, state, params=None) -> (updates, state)``."""

    def __call__(self, updates: Updates, state: OptState, params: Optional[Params] = None):
        ...


class TransformUpdateExtraArgsFn(Protocol):
    """``update(updates, state, params=None, **extra_args) -> (updates, state)``."""

    def __call__(self, updates: Updates, state: OptState, params: Optional[Params] = None, **extra_args: Any):
        ...

NO_PARAMS_MSG = (
    "You are using a transformation that requires the current value of "
    "parameters, but you are not passing `params` when calling `update`.")


class GradientTransformation(NamedTuple):
    """A pair of pure functions implementing a gradient transformation.

    Attributes:
      init: ``init(params) -> state``: the initial optimizer state for a pytree of
        parameters.
      update: ``update(updates, state, params=None) -> (updates, new_state)``: transforms
        a pytree of candidate updates (e.g. gradients) with the current state.
    """
    init: Callable
    update: Callable


class GradientTransformationExtraArgs(GradientTransformation):
    """A GradientTransformation whose ``update`` accepts extra keyword arguments
    (``update(updates, state, params=None, **extra_args)``), as optax's."""


class EmptyState(NamedTuple):
    """An empty state for the simplest stateless transformations."""


def init_empty_state(params: Params) -> EmptyState:
    """Init function of a stateless transformation.

    Args:
      params: ignored.

    Returns:
      ``EmptyState()``.
    """
    del params
    return EmptyState()


def identity() -> GradientTransformation:
    """Stateless transformation that passes updates through unchanged.

    Returns:
      A :class:`GradientTransformation`.
    """

    def update_fn(updates, state, params=None):
        del params
        return updates, state

    return GradientTransformation(init_empty_state, update_fn)


def set_to_zero() -> GradientTransformation:
    """Stateless transformation mapping every update to zero (freezes parameters).

    Returns:
      A :class:`GradientTransformation`.
    """

    def update_fn(updates, state, params=None):
        del params
        return _tu.tree_map(jnp.zeros_like, updates), state

    return GradientTransformation(init_empty_state, update_fn)


def stateless(f: Callable[[Updates, Optional[Params]], Updates]) -> GradientTransformation:
    """A stateless transformation from an update-like function ``f(updates, params)``.

    Args:
      f: function of (updates, params) returning updates; params may be None.

    Returns:
      A :class:`GradientTransformation`.
    """

    def update_fn(updates, state, params=None):
        del state
        return f(updates, params), EmptyState()

    return GradientTransformation(init_empty_state, update_fn)


def stateless_with_tree_map(f: Callable[[Any, Optional[Any]], Any]) -> GradientTransformation:
    """Like :func:`stateless`, with ``f(update_leaf, param_leaf)`` mapped over the leaves.

    Args:
      f: function of one update array and its parameter array (or None).

    Returns:
      A :class:`GradientTransformation`.
    """

    def update_fn(updates, state, params=None):
        del state
        if params is not None:
            return _tu.tree_map(f, updates, params), EmptyState()
        return _tu.tree_map(lambda u: f(u, None), updates), EmptyState()

    return GradientTransformation(init_empty_state, update_fn)


def with_extra_args_support(tx: GradientTransformation) -> GradientTransformationExtraArgs:
    """Wraps a transformation so that its update accepts (and ignores) extra args.

    Args:
      tx: a :class:`GradientTransformation`.

    Returns:
      A :class:`GradientTransformationExtraArgs` (``tx`` itself if it already is one).
    """
    if isinstance(tx, GradientTransformationExtraArgs):
        return tx

    def update(updates, state, params=None, **extra_args):
        del extra_args
        return tx.update(updates, state, params)

    return GradientTransformationExtraArgs(tx.init, update)


def chain(*args: GradientTransformation) -> GradientTransformationExtraArgs:
    """Applies a list of chainable update transformations in order.

    The state is the tuple of the transformations' states (optax's ``chain``), so
    ``chain(clip_by_global_norm(1.0), adamw(lr))`` has state
    ``(EmptyState(), (ScaleByAdamState(...), EmptyState(), EmptyState()))``.

    Args:
      *args: :class:`GradientTransformation` objects.

    Returns:
      A :class:`GradientTransformationExtraArgs`; extra keyword arguments given to
      ``update`` are passed to every transformation that accepts them.
    """
    # chain(clip_by_global_norm(c), adamw(...)) -> one fused pass per parameter (same
    # state pytree, same numbers); see _fused.py.
    from ._fused import maybe_fuse_chain
    fused = maybe_fuse_chain(args)
    if fused is not None:
        return fused
    return _chain(*args)


def _chain(*args: GradientTransformation) -> GradientTransformationExtraArgs:
    """:func:`chain` without the fused fast path."""
    transforms = [with_extra_args_support(t) for t in args]
    init_fns = [t.init for t in transforms]
    update_fns = [t.update for t in transforms]

    def init_fn(params):
        return tuple(fn(params) for fn in init_fns)

    def update_fn(updates, state, params=None, **extra_args):
        if len(update_fns) != len(state):
            raise ValueError("The number of updates and states has to be the same in chain! "
                             "Make sure you have called init first!")
        new_state = []
        for s, fn in zip(state, update_fns):
            updates, new_s = fn(updates, s, params, **extra_args)
            new_state.append(new_s)
        return updates, tuple(new_state)

    return GradientTransformationExtraArgs(init_fn, update_fn)


def named_chain(*args) -> GradientTransformationExtraArgs:
    """Like :func:`chain`, with ``(name, transformation)`` pairs; the state is an
    ``OrderedDict`` keyed by name.

    Args:
      *args: ``(name, transformation)`` pairs with unique names.

    Returns:
      A :class:`GradientTransformationExtraArgs`.
    """
    import collections
    names = [name for name, _ in args]
    if len(names) != len(set(names)):
        raise ValueError(f"Named transformations must have unique names, but got {names}")
    transforms = [(name, with_extra_args_support(t)) for name, t in args]

    def init_fn(params):
        states = collections.OrderedDict()
        for name, tx in transforms:
            states[name] = tx.init(params)
        return states

    def update_fn(updates, state, params=None, **extra_args):
        new_state = collections.OrderedDict()
        for name, tx in transforms:
            updates, new_state[name] = tx.update(updates, state[name], params, **extra_args)
        return updates, new_state

    return GradientTransformationExtraArgs(init_fn, update_fn)


def apply_updates(params: Params, updates: Updates) -> Params:
    """Adds updates to parameters, keeping each parameter's dtype.

    Args:
      params: a pytree of parameters.
      updates: a pytree of updates with the same structure and shapes.

    Returns:
      ``params + updates`` leafwise, cast back to the parameters' dtypes.
    """
    return _tu.tree_map(
        lambda p, u: None if p is None else jnp.asarray(p + u).astype(jnp.asarray(p).dtype),
        params, updates, is_leaf=lambda x: x is None)


def periodic_update(new_tensors: Params, old_tensors: Params, steps, update_period) -> Params:
    """``new_tensors`` every ``update_period`` steps (when ``steps % update_period ==
    0``), ``old_tensors`` otherwise (a ``lax.cond``, so ``steps`` may be traced).

    Args:
      new_tensors: the latest values.
      old_tensors: the values kept between updates.
      steps: the step count.
      update_period: the period.

    Returns:
      One of the two trees.
    """
    from .. import lax
    return lax.cond(jnp.mod(steps, update_period) == 0, lambda _: new_tensors, lambda _: old_tensors, None)


def incremental_update(new_tensors: Params, old_tensors: Params, step_size) -> Params:
    """Polyak averaging: ``step_size * new + (1 - step_size) * old`` leafwise.

    Args:
      new_tensors: the latest values.
      old_tensors: the moving average.
      step_size: the averaging step (``1 - ema_decay``).

    Returns:
      The updated moving average.
    """
    return _tu.tree_map(
        lambda new, old: None if new is None else step_size * new + (1.0 - step_size) * old,
        new_tensors, old_tensors, is_leaf=lambda x: x is None)


def tree_sum(tree: PyTree):
    """Sum of all elements of a pytree (``0 + sum(leaf_0) + sum(leaf_1) + ...``).

    Args:
      tree: a pytree of arrays.

    Returns:
      A scalar.
    """
    sums = _tu.tree_map(jnp.sum, tree)
    return functools.reduce(operator.add, _tu.tree_leaves(sums), 0)


def tree_norm(tree: PyTree, ord=None, squared: bool = False):
    """Vector norm of a pytree (optax.tree.norm): ord None/2, 1 or inf.

    Args:
      tree: a pytree of arrays.
      ord: None or 2 (L2), 1, or ``inf``/``'inf'``.
      squared: return the squared norm.

    Returns:
      A scalar array.
    """
    if ord is None or ord == 2:
        sq = tree_sum(_tu.tree_map(jnp.square, tree))
        return jnp.asarray(sq if squared else jnp.sqrt(sq))
    if ord == 1:
        ret = tree_sum(_tu.tree_map(jnp.abs, tree))
    elif ord == _np.inf or ord in ("inf", "infinity"):
        ret = functools.reduce(jnp.maximum, _tu.tree_leaves(_tu.tree_map(lambda x: jnp.max(jnp.abs(x)), tree)))
    else:
        raise ValueError(f"Unsupported ord: {ord}")
    return jnp.asarray(ret if not squared else jnp.square(ret))


def global_norm(updates: PyTree):
    """Global L2 norm of a pytree: ``sqrt(sum over leaves of sum(leaf ** 2))``.

    Args:
      updates: a pytree of arrays.

    Returns:
      A scalar array.
    """
    return tree_norm(updates)


def safe_increment(count):
    """``count + 1``, saturating at the dtype's maximum instead of overflowing.

    Args:
      count: an integer (or float) scalar array.

    Returns:
      The incremented counter.
    """
    count = jnp.asarray(count)
    d = count.dtype
    if _dtypes.is_int(d):
        max_value = _np.iinfo(d).max
    elif _dtypes.is_float(d):
        max_value = float(_np.finfo(_np.float32 if d == _dtypes.bfloat16 else d).max)
    else:
        raise ValueError(f"Cannot safely increment count with dtype {d}, valid dtypes are "
                         "subdtypes of integer or floating")
    # jnp.asarray, not jnp.array as optax writes: podlet.numpy.array(<scalar>) returns
    # shape (1,) (np.ascontiguousarray promotes 0-d to 1-d), which would turn the count
    # into a 1-vector after one step. Same values either way.
    max_value = jnp.asarray(max_value, d)
    one = jnp.asarray(1, d)
    return jnp.where(count < max_value, count + one, max_value)


safe_int32_increment = safe_increment


def canonicalize_dtype(dtype):
    """The podlet dtype of ``dtype`` (64-bit types become 32-bit), None stays None."""
    if dtype is not None:
        return _dtypes.canonicalize(dtype)
    return dtype


def tree_zeros_like(tree: PyTree, dtype=None) -> PyTree:
    """All-zeros pytree with ``tree``'s structure and shapes (optionally another dtype)."""
    # jnp.asarray first: podlet's zeros_like needs an array (JAX's also takes scalars).
    return _tu.tree_map(lambda x: jnp.zeros_like(jnp.asarray(x), dtype=dtype), tree)


def tree_cast(tree: PyTree, dtype) -> PyTree:
    """Casts every leaf to ``dtype``; None leaves the tree unchanged."""
    if dtype is not None:
        return _tu.tree_map(lambda t: t.astype(dtype), tree)
    return tree


def tree_cast_like(tree: PyTree, other_tree: PyTree) -> PyTree:
    """Casts every leaf of ``tree`` to the dtype of the matching leaf of ``other_tree``."""
    return _tu.tree_map(lambda t, o: t.astype(o.dtype) if hasattr(o, "dtype") else t, tree, other_tree)


def _scale_gradient_impl():
    from .._src.custom_derivatives import custom_vjp

    @custom_vjp
    def _scale(inputs, scale):
        del scale  # only used by the backward pass
        return inputs

    def fwd(inputs, scale):
        return inputs, scale

    def bwd(scale, g):
        return _tu.tree_map(lambda g_: g_ * scale, g), None

    _scale.defvjp(fwd, bwd)
    return _scale


_SCALE_GRADIENT = []


def scale_gradient(inputs, scale):
    """The identity forward, ``scale`` times the cotangent backward (a custom VJP).

    Args:
      inputs: a pytree of arrays.
      scale: the factor of the backward pass (1: the identity, 0: ``stop_gradient``).

    Returns:
      ``inputs``.
    """
    if isinstance(scale, (int, float)) and scale == 1.0:
        return inputs
    if isinstance(scale, (int, float)) and scale == 0.0:
        from .. import lax
        return _tu.tree_map(lax.stop_gradient, inputs)
    if not _SCALE_GRADIENT:
        _SCALE_GRADIENT.append(_scale_gradient_impl())
    return _SCALE_GRADIENT[0](inputs, scale)
