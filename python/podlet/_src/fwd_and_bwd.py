"""jax.fwd_and_bwd: a function's forward and backward passes as two functions.

``fwd(*args) -> (y, f_vjp)`` (``(y, f_vjp, aux)`` with ``has_aux``) is ``vjp`` of
``fun`` w.r.t. ``argnums``; ``bwd(f_vjp, cotangent)`` gives the gradients (one value
for an int ``argnums``, a tuple otherwise). jax jits both when ``jitted=True``, passing
``f_vjp`` across the boundary as a pytree; podlet's ``f_vjp`` is a closure over the
traced backward graph, which cannot be a jit output, so ``jitted`` changes nothing here:
``fwd`` traces and runs ``fun``'s graph on each call and ``bwd`` runs the backward graph,
with the same values.
"""
import operator

from .core import vjp


def fwd_and_bwd(fun, argnums, has_aux=False, jitted=True):
    if not callable(fun):
        raise TypeError(f"Expected a callable value, got {fun!r}")
    single = isinstance(argnums, int)
    nums = (operator.index(argnums),) if single else tuple(operator.index(a) for a in argnums)

    def fwd(*args):
        nums_ = tuple(a % len(args) for a in nums)

        def partial(*dyn):
            full = list(args)
            for i, v in zip(nums_, dyn):
                full[i] = v
            return fun(*full)

        return vjp(partial, *[args[i] for i in nums_], has_aux=has_aux)

    def bwd(f_vjp, outgrad):
        g = f_vjp(outgrad)
        return g[0] if single else g

    del jitted
    return fwd, bwd
