"""podlet.optim.microbatching: optax.microbatching (0.2.8), running a function over a
batch in microbatches and combining the results, to bound memory.

    grad_fn = optax.microbatch(podlet.grad(loss), argnums=1, microbatch_size=8)
    grads = grad_fn(params, batch)          # the sum of 8-example gradients

Microbatch ``i`` holds the examples ``i, i + n, i + 2n, ...`` (``n`` microbatches), as
optax's Fortran-order reshape gives; the loop is a ``lax.fori_loop``, so the whole
thing traces under ``podlet.jit``.
"""
import collections
import dataclasses
import enum
import functools
from typing import Any, Callable

from .. import lax
from .. import numpy as jnp
from .. import tree_util as _tu
from .._src import dtypes as _dtypes
from .._src.core import eval_shape as _eval_shape

__all__ = ["Accumulator", "AccumulationType", "microbatch", "micro_grad", "micro_vmap", "reshape_batch_axis"]

IndividualOutputs = collections.namedtuple("Aux", ["values", "metrics", "aux"])


@dataclasses.dataclass(frozen=True)
class Accumulator:
    """How microbatch outputs combine: ``init(value) -> carry``, ``update(carry,
    value, index) -> carry``, ``finalize(carry) -> result``, and ``aggregate(values)``
    for outputs stacked along axis 0."""
    init: Callable
    update: Callable
    finalize: Callable
    aggregate: Callable


class AccumulationType(enum.Enum):
    """The built-in accumulators."""
    MEAN = enum.auto()
    SUM = enum.auto()
    RUNNING_MEAN = enum.auto()
    CONCAT = enum.auto()


def _with_floating_check(fn):
    def wrapper(*args, **kwargs):
        leaves = _tu.tree_leaves((args, kwargs))
        if not all(_dtypes.is_float(x.dtype) for x in leaves):
            raise ValueError("MEAN and RUNNING_MEAN Accumulators require floating-point values.")
        return fn(*args, **kwargs)
    return wrapper


def reshape_batch_axis(tree, microbatch_size: int, axis: int = 0):
    """Splits ``axis`` of every leaf into ``(num_microbatches, microbatch_size)``,
    microbatch ``i`` holding the examples ``i, i + n, ...`` (optax's order='F')."""
    def reshape_leaf(x):
        b = x.shape[axis]
        n = b // microbatch_size
        y = jnp.reshape(x, x.shape[:axis] + (microbatch_size, n) + x.shape[axis + 1:])
        return jnp.swapaxes(y, axis, axis + 1)
    return _tu.tree_map(reshape_leaf, tree)


def _lift(acc: Accumulator) -> Accumulator:
    return Accumulator(lambda value: _tu.tree_map(acc.init, value),
                       lambda carry, value, i: _tu.tree_map(lambda c, v: acc.update(c, v, i), carry, value),
                       lambda carry: _tu.tree_map(acc.finalize, carry),
                       lambda values: _tu.tree_map(acc.aggregate, values))


def _compose(accumulators) -> Accumulator:
    is_acc = lambda x: isinstance(x, Accumulator)  # noqa: E731
    return Accumulator(
        lambda values: _tu.tree_map(lambda a, v: a.init(v), accumulators, values, is_leaf=is_acc),
        lambda carry, value, index: _tu.tree_map(lambda a, c, v: a.update(c, v, index), accumulators, carry, value,
                                                 is_leaf=is_acc),
        lambda carry: _tu.tree_map(lambda a, c: a.finalize(c), accumulators, carry, is_leaf=is_acc),
        lambda values: _tu.tree_map(lambda a, v: a.aggregate(v), accumulators, values, is_leaf=is_acc))


def _sum() -> Accumulator:
    return _lift(Accumulator(init=jnp.zeros_like, update=lambda carry, value, _: carry + value,
                             finalize=lambda x: x, aggregate=functools.partial(jnp.sum, axis=0)))


def _mean(num_microbatches: int) -> Accumulator:
    if num_microbatches <= 0:
        raise ValueError(f"num_microbatches={num_microbatches} must be positive.")
    return _lift(Accumulator(init=_with_floating_check(jnp.zeros_like), update=lambda carry, value, _: carry + value,
                             finalize=lambda carry: carry / num_microbatches,
                             aggregate=functools.partial(jnp.mean, axis=0)))


def _running_mean() -> Accumulator:
    def update(carry, value, index):
        p = index / (index + 1)
        return carry * p + value * (1 - p)
    return _lift(Accumulator(init=_with_floating_check(jnp.zeros_like), update=update, finalize=lambda x: x,
                             aggregate=functools.partial(jnp.mean, axis=0)))


def _concat(num_microbatches: int) -> Accumulator:
    if num_microbatches <= 0:
        raise ValueError(f"num_microbatches={num_microbatches} must be positive.")

    def init(value):
        return jnp.zeros((num_microbatches,) + tuple(value.shape), value.dtype)

    def update(carry, value, index):
        return carry.at[index].set(value)

    def finalize(carry):  # (n, m, ...) -> (n * m, ...) with example i + n * j at row i + n * j
        return jnp.reshape(jnp.swapaxes(carry, 0, 1), (-1,) + tuple(carry.shape[2:]))

    return _lift(Accumulator(init, update, finalize, lambda x: x))


def _canonicalize(tree, num_microbatches) -> Accumulator:
    def fun(acc):
        if isinstance(acc, Accumulator):
            return acc
        if acc is AccumulationType.MEAN:
            return _mean(num_microbatches)
        if acc is AccumulationType.SUM:
            return _sum()
        if acc is AccumulationType.RUNNING_MEAN:
            return _running_mean()
        if acc is AccumulationType.CONCAT:
            return _concat(num_microbatches)
        raise ValueError(f"Unknown accumulator: {acc}")
    return _compose(_tu.tree_map(fun, tree, is_leaf=lambda x: isinstance(x, (Accumulator, AccumulationType))))


def _reshape_all_args(microbatch_size, argnums, argnames, in_axes, args, kwargs):
    new_args, new_kwargs = list(args), dict(kwargs)
    batch_args = [args[i] for i in argnums] + [kwargs[n] for n in argnames]
    sizes = []
    for ax, sub in zip(in_axes, batch_args):
        sizes += [x.shape[ax] for x in _tu.tree_leaves(sub)]
    if len(set(sizes)) > 1:
        raise ValueError(f"Batch Arguments must have equal-size batch axes, found {tuple(sizes)}.")
    batch_size = sizes[0]
    if batch_size % microbatch_size != 0:
        raise ValueError(f"batch_size={batch_size} must be divisible by microbatch_size={microbatch_size}.")
    for i, ax in zip(argnums, in_axes):
        new_args[i] = reshape_batch_axis(args[i], microbatch_size, ax)
    for name, ax in zip(argnames, in_axes[len(argnums):]):
        new_kwargs[name] = reshape_batch_axis(kwargs[name], microbatch_size, ax)
    return tuple(new_args), new_kwargs, batch_size


def microbatch(fun: Callable, argnums, microbatch_size, accumulator=AccumulationType.SUM, *, argnames=(),
               in_axes=0, num_real_microbatches=None) -> Callable:
    """``fun`` run on microbatches of its batch arguments, the outputs combined.

    Args:
      fun: the function.
      argnums: positions of the batch arguments.
      microbatch_size: examples per microbatch (None: ``fun`` itself).
      accumulator: an :class:`AccumulationType`, an :class:`Accumulator`, or a pytree
        of them matching ``fun``'s output.
      argnames: names of keyword batch arguments.
      in_axes: the batch axis of each batch argument.
      num_real_microbatches: stop after this many microbatches (padding batches).

    Returns:
      The microbatched function.
    """
    if microbatch_size is None:
        return fun
    argnums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    argnames = (argnames,) if isinstance(argnames, str) else tuple(argnames)
    in_axes = (in_axes,) * (len(argnums) + len(argnames)) if isinstance(in_axes, int) else tuple(in_axes)

    def microbatched_fun(*args, **kwargs):
        r_args, r_kwargs, batch_size = _reshape_all_args(microbatch_size, argnums, argnames, in_axes, args, kwargs)
        num_microbatches = batch_size // microbatch_size
        acc = _canonicalize(accumulator, num_microbatches)

        def f(index):
            a, k = list(r_args), dict(r_kwargs)
            for i, ax in zip(argnums, in_axes):
                a[i] = _tu.tree_map(lambda x: jnp.take(x, index, axis=ax), a[i])
            for n, ax in zip(argnames, in_axes[len(argnums):]):
                k[n] = _tu.tree_map(lambda x: jnp.take(x, index, axis=ax), k[n])
            return fun(*a, **k)

        loop_bound = num_real_microbatches if num_real_microbatches is not None else num_microbatches
        shapes = _eval_shape(f, jnp.asarray(0))
        init_carry = acc.init(_tu.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes))
        answer = lax.fori_loop(0, loop_bound, lambda index, carry: acc.update(carry, f(index), index), init_carry)
        return acc.finalize(answer)

    return microbatched_fun


def micro_vmap(fun: Callable, in_axes=0, out_axes: Any = 0, *, microbatch_size=None, vmap_fn=None,
               accumulator=AccumulationType.CONCAT, num_real_microbatches=None) -> Callable:
    """``vmap(fun)`` evaluated ``microbatch_size`` examples at a time (CONCAT: the same
    result as the plain vmap, in less memory)."""
    from .._src.batching import vmap
    vmap_fn = vmap if vmap_fn is None else vmap_fn
    if out_axes != 0:
        raise ValueError("micro_vmap: out_axes != 0 is not supported (as in optax)")
    in_axes = (in_axes,) if isinstance(in_axes, int) else tuple(in_axes)

    def vmap_reduce_fn(*args, kwargs):
        output = vmap_fn(fun, in_axes, out_axes)(*args, **kwargs)
        size = _tu.tree_leaves(output)[0].shape[0]
        return _canonicalize(accumulator, size).aggregate(output)

    micro_vmap_fn = microbatch(vmap_reduce_fn, argnums=tuple(i for i, ax in enumerate(in_axes) if ax is not None),
                               argnames="kwargs", microbatch_size=microbatch_size, accumulator=accumulator,
                               in_axes=tuple(ax for ax in in_axes if ax is not None) + (0,),
                               num_real_microbatches=num_real_microbatches)
    return lambda *args, **kwargs: micro_vmap_fn(*args, kwargs=kwargs)


def micro_grad(fun: Callable, has_aux: bool = False, argnums=0, *, batch_argnums=1, keep_batch_dim: bool = True,
               microbatch_size=None, accumulator=AccumulationType.SUM, transform_fn: Callable = lambda x: x,
               metrics_fn: Callable = lambda x: None, num_real_microbatches=None):
    """Per-example gradients of ``fun``, transformed by ``transform_fn`` (e.g. a clip)
    and accumulated; returns ``(gradients, Aux(values, metrics, aux))`` with one value
    per example."""
    from .._src.core import value_and_grad
    batch_argnums = (batch_argnums,) if isinstance(batch_argnums, int) else tuple(batch_argnums)
    if not has_aux:
        fun_aux = lambda *a, **k: (fun(*a, **k), None)  # noqa: E731
    else:
        fun_aux = fun
    value_and_grad_fn = value_and_grad(fun_aux, argnums, has_aux=True)

    def grad_fn(*args, **kwargs):
        value_and_aux, grad = value_and_grad_fn(*args, **kwargs)
        return transform_fn(grad), IndividualOutputs(values=value_and_aux[0], metrics=metrics_fn(grad),
                                                     aux=value_and_aux[1])

    in_axes = [None] * (max(batch_argnums) + 1)
    for i in batch_argnums:
        in_axes[i] = 0
    micro_fun = micro_vmap(grad_fn, in_axes=in_axes, accumulator=(accumulator, AccumulationType.CONCAT),
                           microbatch_size=microbatch_size, num_real_microbatches=num_real_microbatches)
    if not keep_batch_dim:
        return micro_fun

    def with_extra_batch_axis(*args, **kwargs):
        args = list(args)
        for i in batch_argnums:
            args[i] = _tu.tree_map(lambda x: jnp.expand_dims(x, axis=1), args[i])
        return micro_fun(*args, **kwargs)

    return with_extra_batch_axis

