"""jax.nn activation functions, written with podlet.numpy (same formulas as jax.nn)."""
import math

import numpy as _np

from .. import numpy as jnp
from .. import lax
from .._src.core import bind


def relu(x):
    x = jnp.asarray(x)
    return jnp.maximum(x, 0)


def relu6(x):
    return jnp.minimum(jnp.maximum(x, 0), 6.0)


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


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
    a = jnp.asarray(a)
    dims = jnp._axes(axis, a.ndim)
    m = lax.stop_gradient(jnp.max(a, axis=dims, keepdims=True))
    # A row of -inf has max -inf: subtracting it would give NaN.
    m = jnp.where(jnp.isfinite(m), m, jnp.zeros_like(m))
    e = jnp.exp(a - m)
    if b is not None:
        e = e * b
    s = jnp.sum(e, axis=dims, keepdims=True)
    out = jnp.log(s) + m
    if not keepdims:
        out = jnp.squeeze(out, dims) if dims else out
    return out


def log_softmax(x, axis=-1, where=None):
    x = jnp.asarray(x)
    shifted = x - lax.stop_gradient(jnp.max(x, axis, keepdims=True))
    return shifted - jnp.log(jnp.sum(jnp.exp(shifted), axis, keepdims=True))


def softmax(x, axis=-1, where=None):
    x = jnp.asarray(x)
    e = jnp.exp(x - lax.stop_gradient(jnp.max(x, axis, keepdims=True)))
    return e / jnp.sum(e, axis, keepdims=True)


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
