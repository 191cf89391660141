"""podlet.optim.projections: optax.projections (0.2.8), Euclidean projections of pytrees
onto convex sets, for projected gradient methods:

    params = optax.apply_updates(params, updates)
    params = optax.projections.projection_non_negative(params)

All are pure functions of arrays (``projection_l1_ball`` is a ``lax.cond``), so they
trace under ``podlet.jit``; ``projection_simplex`` has optax's custom JVP.
"""
from typing import Any

from .. import lax
from .. import numpy as jnp
from .. import tree_util as _tu
from .._src.custom_derivatives import custom_jvp
from . import tree as _tree

__all__ = ["projection_box", "projection_halfspace", "projection_hypercube", "projection_hyperplane",
           "projection_l1_ball", "projection_l1_sphere", "projection_l2_ball", "projection_l2_sphere",
           "projection_linf_ball", "projection_non_negative", "projection_simplex", "projection_vector"]


def _ravel(tree):
    """(flat vector, unravel) as jax.flatten_util.ravel_pytree."""
    leaves, treedef = _tu.tree_flatten(tree)
    leaves = [jnp.asarray(x) for x in leaves]
    shapes = [tuple(x.shape) for x in leaves]
    flat = jnp.concatenate([jnp.reshape(x, (-1,)) for x in leaves]) if leaves else jnp.zeros((0,))

    def unravel(v):
        out, offset = [], 0
        for shape in shapes:
            size = 1
            for d in shape:
                size *= d
            out.append(jnp.reshape(v[offset:offset + size], shape))
            offset += size
        return _tu.tree_unflatten(treedef, out)

    return flat, unravel


def projection_non_negative(tree: Any) -> Any:
    """``max(x, 0)`` leafwise."""
    return _tu.tree_map(lambda x: jnp.maximum(x, 0), tree)


def projection_box(tree: Any, lower: Any, upper: Any) -> Any:
    """``clip(x, lower, upper)`` leafwise (bounds: scalars or trees)."""
    return _tu.tree_map(jnp.clip, tree, lower, upper) if _tu.tree_structure(lower) == _tu.tree_structure(tree) \
        else _tu.tree_map(lambda x: jnp.clip(x, lower, upper), tree)


def projection_hypercube(tree: Any, scale: Any = 1) -> Any:
    """Onto ``[0, scale]^n``."""
    return projection_box(tree, lower=0, upper=scale)


@custom_jvp
def _projection_unit_simplex(values):
    n = values.shape[0]
    u = jnp.flip(jnp.sort(values))
    cumsum_u = jnp.cumsum(u)
    ind = jnp.arange(n) + 1
    cond = 1 / ind + (u - cumsum_u / ind) > 0
    idx = jnp.count_nonzero(cond)
    return jnp.maximum(1 / idx + (values - cumsum_u[idx - 1] / idx), 0)


@_projection_unit_simplex.defjvp
def _projection_unit_simplex_jvp(primals, tangents):
    (values,), (values_dot,) = primals, tangents
    primal_out = _projection_unit_simplex(values)
    supp = (primal_out > 0).astype(values.dtype)
    card = jnp.count_nonzero(supp)
    return primal_out, supp * values_dot - (jnp.dot(supp, values_dot) / card) * supp


def projection_simplex(tree: Any, scale=1) -> Any:
    """Onto ``{p >= 0, sum(p) = scale}`` (sort-based, Held et al. 1974), over all
    leaves together."""
    values, unravel = _ravel(tree)
    return unravel(scale * _projection_unit_simplex(values / scale))


def projection_l1_sphere(tree: Any, scale=1) -> Any:
    """Onto ``{||x||_1 = scale}``."""
    tree_abs = _tu.tree_map(jnp.abs, tree)
    tree_sign = _tu.tree_map(jnp.sign, tree)
    return _tree.mul(tree_sign, projection_simplex(tree_abs, scale))


def projection_l1_ball(tree: Any, scale=1) -> Any:
    """Onto ``{||x||_1 <= scale}``."""
    l1_norm = _tree.norm(tree, ord=1)
    return lax.cond(l1_norm <= scale, lambda t: t, lambda t: projection_l1_sphere(t, scale), tree)


def projection_l2_sphere(tree: Any, scale=1) -> Any:
    """Onto ``{||x||_2 = scale}``."""
    return _tree.scale(scale / _tree.norm(tree), tree)


def projection_l2_ball(tree: Any, scale=1) -> Any:
    """Onto ``{||x||_2 <= scale}``."""
    squared_norm = _tree.norm(tree, squared=True)
    return _tree.scale(scale / jnp.sqrt(jnp.maximum(squared_norm, scale ** 2)), tree)


def projection_linf_ball(tree: Any, scale=1) -> Any:
    """Onto ``{||x||_inf <= scale}``."""
    return projection_box(tree, lower=_tree.full_like(tree, -scale), upper=_tree.full_like(tree, scale))


def projection_vector(x: Any, a: Any) -> Any:
    """Onto the line spanned by ``a``."""
    return _tree.scale(_tree.vdot(x, a) / _tree.vdot(a, a), a)


def projection_hyperplane(x: Any, a: Any, b) -> Any:
    """Onto ``{<a, x> = b}``."""
    return _tree.add_scale(x, (b - _tree.vdot(x, a)) / _tree.vdot(a, a), a)


def projection_halfspace(x: Any, a: Any, b) -> Any:
    """Onto ``{<a, x> <= b}``."""
    scalar = jnp.minimum((b - _tree.vdot(x, a)) / _tree.vdot(a, a), 0)
    return _tree.add_scale(x, scalar, a)
