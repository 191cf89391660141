"""jax.debug.print and jax.debug.callback: Python called on a computation's values.

Eagerly the callback runs at once. Inside a trace the call is recorded on the trace
(``core.record_effect``) with the values it reads; the transformation that runs the
graph makes those values extra outputs and calls back when the graph has run:

* ``jit``: once per execution, with that execution's values, after the graph finishes
  (all of one execution's callbacks in program order; jax orders them only with
  ``ordered=True``). Nested jits hand their callbacks to the enclosing trace.
* ``vmap``: once per batch element, as jax's batching rule does (each callback over
  the elements in turn).
* ``grad`` / ``value_and_grad`` / ``vjp``: once, on the forward (primal) values.

pmap, jvp and the bodies of scan / while_loop / cond / remat and custom-derivative
rules run inside the C++ engine, which cannot call Python (podlet has no host-callback
primitive): their callbacks are dropped with a warning.
"""
import functools
import string
import sys

import numpy as np

from .. import tree_util
from .core import Array, Tracer, record_effect, to_array


def _is_dynamic(x):
    return isinstance(x, (Array, Tracer, np.ndarray, np.generic, bool, int, float))


def _values(xs):
    return [x if isinstance(x, (Array, Tracer)) else to_array(x) for x in xs]


def callback(callback=None, *args, ordered=False, partitioned=False, **kwargs):
    """Calls ``callback(*args, **kwargs)`` with the arrays' values (podlet Arrays;
    other leaves passed through), now or when the traced computation runs. Two-call
    form: ``callback(ordered=True)(fn, *args)``. Returns None."""
    del ordered, partitioned  # one host, callbacks already in program order

    def _callback(fn, *c_args, **c_kwargs):
        leaves, tree = tree_util.tree_flatten((c_args, c_kwargs))
        dyn = [i for i, x in enumerate(leaves) if _is_dynamic(x)]

        def run(values):
            full = list(leaves)
            for i, v in zip(dyn, values):
                full[i] = v
            a, kw = tree_util.tree_unflatten(tree, full)
            fn(*a, **kw)

        record_effect(run, _values([leaves[i] for i in dyn]))

    if callback is not None:
        _callback(callback, *args, **kwargs)
        return None
    if args or kwargs:
        raise TypeError("debug_callback received unexpected arguments in the two-call form:"
                        f" {args=} {kwargs=}")
    return _callback


class _FormatChecker(string.Formatter):
    """Checks that ``fmt`` uses exactly the arguments given (formats nothing)."""

    def format_field(self, value, format_spec):
        return ""

    def check_unused_args(self, used_args, args, kwargs):
        unused_args = [arg for i, arg in enumerate(args) if i not in used_args]
        unused_kwargs = [k for k in kwargs if k not in used_args]
        if unused_args:
            raise ValueError(f"Unused positional arguments to `jax.debug.print`: {unused_args}")
        if unused_kwargs:
            raise ValueError(
                f"Unused keyword arguments to `jax.debug.print`: {unused_kwargs}. "
                "You may be passing an f-string (i.e, `f\"{x}\"`) into "
                "`jax.debug.print` and instead should pass in a regular string.")


_checker = _FormatChecker()


def _as_numpy(x):
    return np.asarray(x) if isinstance(x, Array) else x


def _format_print(fmt, np_printoptions, has_placeholders, *args, **kwargs):
    args = [_as_numpy(a) for a in args]
    kwargs = {k: _as_numpy(v) for k, v in kwargs.items()}
    if has_placeholders:
        with np.printoptions(**np_printoptions):
            msg = fmt.format(*args, **kwargs)
    else:
        msg = " ".join((fmt, *(str(a) for a in args)))
    sys.stdout.write(msg + "\n")


def debug_print(fmt=None, *args, ordered=False, partitioned=False, skip_format_check=False,
                **kwargs):
    """Prints ``fmt.format(*args, **kwargs)`` with the arrays' values (as NumPy arrays,
    so ``{x:.2f}`` works on scalars), eagerly or when the traced computation runs.
    Two-call form: ``print(ordered=True)("x={x}", x=x)``."""
    def _print(fmt, *c_args, **c_kwargs):
        if not skip_format_check:
            _checker.format(fmt, *c_args, **c_kwargs)
        has_placeholders = False
        if fmt:
            _, field_name, *_ = next(iter(string.Formatter().parse(fmt)))
            has_placeholders = field_name is not None
        opts = dict(np.get_printoptions())
        callback(functools.partial(_format_print, fmt, opts, has_placeholders),
                 *c_args, **c_kwargs)

    if fmt is not None:
        _print(fmt, *args, **kwargs)
        return None
    if args or kwargs:
        raise TypeError("debug_print received unexpected arguments in the two-call form:"
                        f" {args=} {kwargs=}")
    return _print
