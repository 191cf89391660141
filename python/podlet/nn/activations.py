"""jax.nn activation functions, written with podlet.numpy (same formulas as jax.nn), and
flax.linen's PReLU."""
import math
from typing import Any

import numpy as _np

from .. import numpy as jnp
from .. import lax
from .._src.core import bind
from .._src import norm as _fused_norm
from .module import Module, compact


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
    """jax.nn.log_softmax (with jax's `where` semantics); over the last axis without
    `where`, one fused node (_src/norm.py)."""
    x = jnp.asarray(x)
    if _fused_norm.softmax_fusable(x, axis, where):
        return _fused_norm.log_softmax(x)
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
    """jax.nn.softmax (with jax's `where` semantics); over the last axis without `where`,
    one fused node (_src/norm.py)."""
    x = jnp.asarray(x)
    if _fused_norm.softmax_fusable(x, axis, where):
        return _fused_norm.softmax(x)
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


# ---- the rest of jax.nn's elementwise activations (jax's formulas, in jax's order) ----
def identity(x):
    """x, as an array."""
    return jnp.asarray(x)


def celu(x, alpha=1.0):
    """Continuously-differentiable ELU: ``max(x, 0) + alpha * expm1(min(x, 0) / alpha)``."""
    x = jnp.asarray(x)
    return jnp.maximum(x, 0.0) + alpha * jnp.expm1(jnp.minimum(x, 0.0) / alpha)


def selu(x):
    """Scaled ELU (https://arxiv.org/abs/1706.02515) with its fixed alpha and scale."""
    alpha = 1.6732632423543772848170429916717
    scale = 1.0507009873554804934193349852946
    return scale * elu(x, alpha)


def glu(x, axis=-1):
    """Gated linear unit: the halves a, b of `axis`, ``a * sigmoid(b)``."""
    x = jnp.asarray(x)
    assert x.shape[axis] % 2 == 0, "axis size must be divisible by 2"
    x1, x2 = jnp.split(x, 2, axis)
    return x1 * sigmoid(x2)


def hard_sigmoid(x):
    """``relu6(x + 3) / 6``."""
    return relu6(jnp.asarray(x) + 3.0) / 6.0


def hard_silu(x):
    """``x * hard_sigmoid(x)``."""
    x = jnp.asarray(x)
    return x * hard_sigmoid(x)


hard_swish = hard_silu


def hard_tanh(x):
    """x clipped to [-1, 1]."""
    x = jnp.asarray(x)
    return jnp.where(x > 1, 1, jnp.where(x < -1, -1, x))


def mish(x):
    """``x * tanh(softplus(x))`` (https://arxiv.org/abs/1908.08681)."""
    x = jnp.asarray(x)
    return x * jnp.tanh(softplus(x))


def soft_sign(x):
    """``x / (|x| + 1)``."""
    x = jnp.asarray(x)
    return x / (jnp.abs(x) + 1)


def sparse_plus(x):
    """0 for x <= -1, x for x >= 1, ``(x + 1)^2 / 4`` between."""
    x = jnp.asarray(x)
    return jnp.where(x <= -1.0, 0.0, jnp.where(x >= 1.0, x, (x + 1.0) ** 2 / 4))


def sparse_sigmoid(x):
    """``clip(x + 1, 0, 2) / 2``, the derivative of sparse_plus."""
    return 0.5 * jnp.clip(jnp.asarray(x) + 1.0, 0.0, 2.0)


def squareplus(x, b=4):
    """``(x + sqrt(x^2 + b)) / 2`` (https://arxiv.org/abs/2112.11687)."""
    x = jnp.asarray(x)
    return (x + jnp.sqrt(jnp.square(x) + b)) / 2


def _log1mexp(x):
    x = jnp.asarray(x)
    c = math.log(2.0)
    return jnp.where(x < c, jnp.log(-jnp.expm1(-x)), jnp.log1p(-jnp.exp(-x)))


def log1mexp(x):
    """``log(1 - exp(-x))``, accurate on both sides of log 2; its derivative is
    ``1 / expm1(x)`` (jax's custom JVP)."""
    return _log1mexp_jvp(jnp.asarray(x))


def logmeanexp(x, axis=None, where=None, keepdims=False):
    """``logsumexp(x) - log(count)`` over `axis` (the count of `where` when given)."""
    x = jnp.asarray(x)
    lse = logsumexp(x, axis=axis, where=where, keepdims=keepdims)
    if where is None:
        dims = jnp._axes(axis, x.ndim)
        count = jnp.asarray(int(_np.prod([x.shape[d] for d in dims])), lse.dtype)
    else:
        count = jnp.sum(jnp.broadcast_to(where, x.shape), axis, dtype=lse.dtype, keepdims=keepdims)
    return lse - jnp.log(count)


def _make_log1mexp_jvp():
    from .._src.custom_derivatives import custom_jvp
    f = custom_jvp(_log1mexp)
    f.defjvps(lambda g, ans, x: g / jnp.expm1(x))
    return f


_log1mexp_jvp = _make_log1mexp_jvp()

normalize = standardize   # flax.linen's older name


class PReLU(Module):
    """Parametric ReLU (https://arxiv.org/abs/1502.01852): ``x`` for x >= 0, else
    ``negative_slope * x`` with a learned scalar ``negative_slope``.

    Attributes: param_dtype (float32), negative_slope_init (0.01).

    Params: ``negative_slope`` (a scalar).
    """
    param_dtype: Any = jnp.float32
    negative_slope_init: float = 0.01

    @compact
    def __call__(self, inputs):
        negative_slope = self.param("negative_slope", lambda k: jnp.asarray(self.negative_slope_init, self.param_dtype))
        inputs = jnp.asarray(inputs)
        return jnp.where(inputs >= 0, inputs, jnp.asarray(negative_slope, inputs.dtype) * inputs)
