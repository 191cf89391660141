"""jax.lax.custom_root and custom_linear_solve (issue 26): solutions computed by the
user's solver, differentiated implicitly as JAX defines it, without differentiating
through the solver.

Both return x = x0 + (y - stop_gradient(y)) with x0 = stop_gradient(solver's answer)
and y = -L(residual(x0)): the value is exactly x0, and the derivative is
-L(d residual) -- the implicit function theorem, where L applies the inverse of the
linearised system (the user's tangent_solve / solve) through a custom_vjp whose
backward pass is the transposed solve (transpose_solve, or solve when symmetric, for
custom_linear_solve; the transpose of tangent_solve for custom_root, as JAX's
reverse mode does). Values the system closes over get their gradients through the
residual, as JAX's closure-converted rules give them. Forward mode is not supported
(a custom_vjp)."""
from .. import tree_util
from .core import Tracer, vjp
from .custom_derivatives import custom_vjp
from .forward import jvp

__all__ = ["custom_root", "custom_linear_solve"]


def _sg(t):
    from .. import lax
    return lax.stop_gradient(t)


def _traced(tree):
    return any(isinstance(v, Tracer) for v in tree_util.tree_leaves(tree))


def _implicit(x0, residual, apply_inverse):
    """x0 + (y - stop_gradient(y)), y = -apply_inverse(residual)."""
    y = apply_inverse(residual)
    return tree_util.tree_map(lambda a, c: a + (_sg(c) - c), x0, y)


def _split_aux(out, has_aux):
    return out if has_aux else (out, None)


def custom_linear_solve(matvec, b, solve, transpose_solve=None, symmetric=False, has_aux=False):
    """jax.lax.custom_linear_solve: x = solve(matvec, b), whose gradient with respect to b
    and to what matvec closes over is that of the exact solution of matvec(x) = b
    (cotangents solved with transpose_solve(vecmat, ct), or solve when `symmetric`)."""
    x0, aux = _split_aux(solve(matvec, b), has_aux)
    if not (_traced(x0) or _traced(b)):
        return (x0, aux) if has_aux else x0
    x0 = _sg(x0)

    def inv(r):
        return _split_aux(solve(matvec, r), has_aux)[0]

    def inv_fwd(r):
        return inv(r), ()

    def inv_bwd(_, ct):
        if symmetric:
            return (_split_aux(solve(matvec, ct), has_aux)[0],)
        if transpose_solve is None:
            raise TypeError("transpose_solve required for backwards mode automatic differentiation of "
                            "custom_linear_solve")
        _, pull = vjp(matvec, x0)
        vecmat = lambda y: pull(y)[0]  # noqa: E731  (matvec is linear: its VJP is its transpose)
        return (_split_aux(transpose_solve(vecmat, ct), has_aux)[0],)

    lin = custom_vjp(inv)
    lin.defvjp(inv_fwd, inv_bwd)
    r = tree_util.tree_map(lambda m, c: m - c, matvec(x0), b)
    x = _implicit(x0, r, lin)
    return (x, aux) if has_aux else x


def custom_root(f, initial_guess, solve, tangent_solve, has_aux=False):
    """jax.lax.custom_root: x = solve(f, initial_guess), a root of f, differentiated
    implicitly: dx = -(df/dx)^-1 (df/dparams) at the root, with
    tangent_solve(g, y) solving the linearised g(x) = y (e.g. lambda g, y: y / g(1.0))."""
    x0, aux = _split_aux(solve(f, initial_guess), has_aux)
    if not (_traced(x0) or _traced(initial_guess)):
        return (x0, aux) if has_aux else x0
    x0 = _sg(x0)

    def g(t):
        return jvp(f, (x0,), (t,))[1]

    def inv(r):
        return tangent_solve(g, r)

    def inv_fwd(r):
        return inv(r), r

    def inv_bwd(r, ct):
        _, pull = vjp(inv, r)  # tangent_solve is linear in r: its VJP is its transpose
        return (pull(ct)[0],)

    lin = custom_vjp(inv)
    lin.defvjp(inv_fwd, inv_bwd)
    x = _implicit(x0, f(x0), lin)
    return (x, aux) if has_aux else x
