"""jax.custom_gradient and jax.closure_convert.

``custom_gradient(fun)``: ``fun(*args)`` returns ``(value, vjp_rule)`` with
``vjp_rule(g)`` giving one cotangent per positional argument. podlet's custom_vjp
traces fwd and bwd into separate sub-graphs whose residuals must be arrays, and the
rule is a Python closure; so the residuals are the primal arguments and bwd calls
``fun`` again to get the rule (the forward pass is recomputed inside the backward
graph, as remat would). Values and gradients are jax's; the backward pass costs one
more forward.
"""
import functools

from .. import tree_util
from .core import Tracer, _abstractify_all, _Traced, call_graph
from .custom_derivatives import custom_vjp


def custom_gradient(fun):
    """Defines ``fun``'s gradient by the rule it returns beside its value."""

    @custom_vjp
    @functools.wraps(fun)
    def wrapped(*args):
        return fun(*args)[0]

    def fwd(*args):
        return fun(*args)[0], args

    def bwd(args, g):
        rule = fun(*args)[1]
        cts = rule(g)
        if not isinstance(cts, tuple):
            cts = (cts,)
        return cts

    wrapped.defvjp(fwd, bwd)
    return wrapped


def closure_convert(fun, *example_args):
    """``(converted, consts)``: the traced values ``fun`` closes over (tracers of an
    enclosing transformation) hoisted out as ``consts``, so that
    ``converted(*args, *consts) == fun(*args)`` and ``converted`` closes over no
    tracer (what custom_vjp rules need). Concrete closed-over arrays stay inside."""
    leaves, in_tree = tree_util.tree_flatten((example_args, {}))
    _, sig = _abstractify_all(leaves)
    entry = _Traced(lambda a, k: fun(*a, **k), sig, in_tree, effects=True)
    entry.graph.dce()
    consts = [c for c in entry.captures if isinstance(c, Tracer)]
    n_args = len(leaves)

    def converted(*args_and_consts):
        args, cs = args_and_consts[:len(example_args)], args_and_consts[len(example_args):]
        flat = tree_util.tree_leaves(args)
        if len(flat) != n_args:
            raise TypeError(f"closure_convert: expected {n_args} argument leaves, got {len(flat)}")
        return tree_util.tree_unflatten(entry.out_tree, call_graph(entry.graph, flat + list(cs)))

    return converted, consts
