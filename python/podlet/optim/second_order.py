"""podlet.optim.second_order: optax.second_order (0.2.8, deprecated there: removal in
0.2.9), curvature of a loss ``loss(params, inputs, targets)`` on the raveled params."""
import functools
import warnings

from .. import numpy as jnp
from .._src.batching import vmap
from .._src.core import grad
from .._src.forward import jvp
from .projections import _ravel

__all__ = ["fisher_diag", "hessian_diag", "hvp"]


def _deprecated(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        warnings.warn(f"The function {fn.__name__} is deprecated. This function will be/was removed in optax 0.2.9.",
                      DeprecationWarning)
        return fn(*args, **kwargs)
    return wrapper


def _hvp(loss, v, params, inputs, targets):
    _, unravel = _ravel(params)
    return jvp(grad(lambda p: loss(p, inputs, targets)), [params], [unravel(v)])[1]


@_deprecated
def hvp(loss, v, params, inputs, targets):
    """Hessian-vector product ``H v`` (``v`` raveled like the params), by forward over
    reverse differentiation; returns a params-shaped tree."""
    return _hvp(loss, v, params, inputs, targets)


@_deprecated
def hessian_diag(loss, params, inputs, targets):
    """The Hessian's diagonal, one HVP per parameter (raveled)."""
    n = _ravel(params)[0].shape[0]
    comp = lambda v: jnp.vdot(v, _ravel(_hvp(loss, v, params, inputs, targets))[0])  # noqa: E731
    return vmap(comp)(jnp.eye(n))


@_deprecated
def fisher_diag(negative_log_likelihood, params, inputs, targets):
    """The empirical Fisher diagonal: the squared gradient (raveled)."""
    return jnp.square(_ravel(grad(negative_log_likelihood)(params, inputs, targets))[0])
