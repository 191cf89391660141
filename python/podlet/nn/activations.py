"""jax.nn activation functions, written with podlet.numpy (same formulas as jax.nn)."""
import math

import numpy as _np

from .. import numpy as jnp
from .. import lax
from .._src.core import bind


def relu(x):
    """max(x, 0) with jax's derivative convention: relu'(0) = 0."""
    x = jnp.asarray(x)
    return jnp.where(x > 0, x, jnp.zeros_like(x))


def relu6(x):
    """min(max(x, 0), 6) with jax's derivative: 1 on (0, 6), 0 elsewhere."""
    x = jnp.asarray(x)
    return jnp.where(x > 0, jnp.where(x < 6, x, jnp.full_like(x, 6)), jnp.zeros_like(x))


def sigmoid(x):
    return bind("logistic", jnp.asarray(x))


def silu(x):
    x = jnp.asarray(x)
    return x * sigmoid(x)


swish = silu


def log_sigmoid(x):
    return -softplus(-jnp.asarray(x))


def softplus(x):
    x = jnp.asarray(x)
    return jnp.logaddexp(x, 0.0)


def tanh(x):
    return jnp.tanh(x)


def elu(x, alpha=1.0):
    x = jnp.asarray(x)
    safe = jnp.where(x > 0, 0.0, x)
    return jnp.where(x > 0, x, alpha * jnp.expm1(safe))


def leaky_relu(x, negative_slope=0.01):
    x = jnp.asarray(x)
    return jnp.where(x >= 0, x, negative_slope * x)


def gelu(x, approximate=True):
    """jax.nn.gelu: tanh approximation by default, exact erf form otherwise."""
    x = jnp.asarray(x)
    if approximate:
        c = math.sqrt(2 / math.pi)
        return 0.5 * x * (1.0 + jnp.tanh(c * (x + 0.044715 * (x * x * x))))
    return x * (1.0 + bind("erf", x * (1.0 / math.sqrt(2)))) / 2.0


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False, where=None):
    """jax.nn.logsumexp: entries with b == 0 (or where=False) do not set the shift."""
    a = jnp.asarray(a)
    if b is not None:
        b = jnp.asarray(b)
        a = jnp.where(b != 0, a, -jnp.inf)
    if where is not None:
        a = jnp.where(where, a, -jnp.inf)
    if b is not None:
        a = jnp.broadcast_to(a, jnp.broadcast_shapes(a.shape, b.shape))
    dims = jnp._axes(axis, a.ndim)
    amax = jnp.max(a, axis=dims, keepdims=True)
    # A row of -inf has max -inf: subtracting it would give NaN.
    amax = lax.stop_gradient(jnp.where(jnp.isfinite(amax), amax, jnp.zeros_like(amax)))
    e = jnp.exp(a - amax)
    if b is not None:
        e = e * b
    s = jnp.sum(e, axis=dims, keepdims=True)
    if return_sign:
        sign = jnp.sign(s)
        s = jnp.abs(s)
    out = jnp.log(s) + amax
    if not keepdims:
        out = jnp.squeeze(out, dims) if dims else out
        if return_sign:
            sign = jnp.squeeze(sign, dims) if dims else sign
    return (out, sign) if return_sign else out


def log_softmax(x, axis=-1, where=None):
    """jax.nn.log_softmax (with jax's `where` semantics)."""
    x = jnp.asarray(x)
    if where is not None:
        x_max = jnp.max(x, axis, keepdims=True, where=where, initial=-jnp.inf)
    else:
        x_max = jnp.max(x, axis, keepdims=True)
    x_max = jnp.where(jnp.isfinite(x_max), x_max, jnp.zeros_like(x_max))
    shifted = x - lax.stop_gradient(x_max)
    shifted_lse = jnp.log(jnp.sum(jnp.exp(shifted), axis, keepdims=True, where=where))
    out = shifted - shifted_lse
    if where is not None:
        out = jnp.where(where, out, -jnp.inf)
    return out


def softmax(x, axis=-1, where=None):
    """jax.nn.softmax (with jax's `where` semantics)."""
    x = jnp.asarray(x)
    if where is not None:
        x_max = jnp.max(x, axis, keepdims=True, where=where, initial=-jnp.inf)
    else:
        x_max = jnp.max(x, axis, keepdims=True)
    x_max = jnp.where(jnp.isfinite(x_max), x_max, jnp.zeros_like(x_max))
    e = jnp.exp(x - lax.stop_gradient(x_max))
    out = e / jnp.sum(e, axis, keepdims=True, where=where)
    if where is not None:
        out = jnp.where(where, out, 0.0)
    return out


def one_hot(x, num_classes, *, dtype=jnp.float32, axis=-1):
    """jax.nn.one_hot: compares against an iota, so it traces and differentiates cleanly."""
    x = jnp.asarray(x)
    nd = x.ndim + 1
    ax = axis % nd
    shape = list(x.shape)
    shape.insert(ax, int(num_classes))
    classes = lax.broadcasted_iota(x.dtype, shape, ax)
    return (jnp.expand_dims(x, ax) == classes).astype(dtype)


def standardize(x, axis=-1, mean=None, variance=None, epsilon=1e-5):
    x = jnp.asarray(x)
    if mean is None:
        mean = jnp.mean(x, axis, keepdims=True)
    if variance is None:
        variance = jnp.mean(jnp.square(x - mean), axis, keepdims=True)
    return (x - mean) * lax.rsqrt(variance + epsilon)
