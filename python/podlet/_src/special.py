"""Special functions of jax.lax (lgamma, digamma, igamma, igammac, igamma_grad_a,
random_gamma_grad), built from podlet's elementwise primitives.

The algorithms are XLA's and JAX's, operation for operation, so float32 values agree
with ``jax.lax`` to a few ulp (the differences come from the last bit of log / sin /
cos / exp):

* ``lgamma`` and ``digamma``: XLA's Lanczos approximation (g = 7, 9 coefficients) with
  the reflection formula below 1/2 (``xla/hlo/builder/lib/math.cc``, also CHLO's
  decomposition);
* ``igamma`` / ``igammac`` / ``igamma_grad_a`` / ``random_gamma_grad``: JAX's power
  series and Lentz continued fraction run as masked ``while_loop`` s over the whole
  array (``jax/_src/lax/special.py``).

bfloat16 inputs are computed in float32 and rounded back, as JAX does. ``lgamma`` and
``digamma`` differentiate (``lgamma``' = ``digamma``, through a custom JVP); the
incomplete gamma functions have JAX's derivative w.r.t. x and ``igamma_grad_a`` w.r.t.
a (the series loops themselves have no reverse mode).
"""
import math

import numpy as np

from . import dtypes
from .core import Array, Tracer, to_array

_LANCZOS_G = 7.0
_LANCZOS_BASE = 0.99999999999980993227684700473478
_LANCZOS_COEFFS = (676.520368121885098567009190444019, -1259.13921672240287047156078755283,
                   771.3234287776530788486528258894, -176.61502916214059906584551354,
                   12.507343278686904814458936853, -0.13857109526572011689554707,
                   9.984369578019570859563e-6, 1.50563273514931155834e-7)


def _np_mod():
    from .. import numpy as jnp
    from .. import lax
    return jnp, lax


def _float_args(name, *args):
    """Converts the arguments to one float dtype (bfloat16 -> float32) and broadcasts them.
    Returns (arrays, result dtype)."""
    jnp, _ = _np_mod()
    arrs = []
    for a in args:
        if not isinstance(a, (Array, Tracer)):
            a = jnp.asarray(a)
        arrs.append(a)
    dts = [a.dtype for a in arrs]
    for d in dts:
        if not dtypes.is_float(d):
            raise TypeError(f"{name} does not accept dtype {np.dtype(d).name}. Accepted dtypes are subtypes of "
                            "floating.")
    if any(d != dts[0] for d in dts):
        raise TypeError(f"{name} requires arguments to have the same dtypes, got "
                        f"{', '.join(np.dtype(d).name for d in dts)}.")
    out = dts[0]
    work = dtypes.float32 if out == dtypes.bfloat16 else out
    shape = np.broadcast_shapes(*(tuple(a.shape) for a in arrs))
    arrs = [jnp.broadcast_to(jnp.astype(a, work), shape) for a in arrs]
    return arrs, out


def _finish(y, out):
    jnp, _ = _np_mod()
    return y if y.dtype == out else jnp.astype(y, out)


def _fma(a, b, c):
    """a * b + c rounded once, as XLA:CPU contracts it: float32 goes through float64
    (the product is exact there; the double rounding of the sum is harmless here)."""
    jnp, _ = _np_mod()
    if a.dtype != dtypes.float32:
        return a * b + c
    from .core import bind
    a64, b64 = (bind("convert_element_type", v, new_dtype="float64") for v in (a, b))
    s = bind("add", bind("mul", a64, b64), bind("convert_element_type", to_array(np.asarray(c, np.float32)),
                                                        new_dtype="float64"))
    return bind("convert_element_type", s, new_dtype="float32")


# ---- lgamma / digamma ------------------------------------------------------------------
def _lgamma_impl(x):
    jnp, lax = _np_mod()
    need_to_reflect = x < 0.5
    z = lax.select(need_to_reflect, -x, x - 1.0)
    acc = _LANCZOS_COEFFS[0] / (z + 1.0) + _LANCZOS_BASE  # XLA folds (z + i) + 1 into z + (i + 1)
    for i, c in enumerate(_LANCZOS_COEFFS[1:], 1):
        acc = acc + c / (z + float(i + 1))
    t = (_LANCZOS_G + 0.5) + z
    log_t = math.log(_LANCZOS_G + 0.5) + jnp.log1p(z * (1.0 / (_LANCZOS_G + 0.5)))  # XLA multiplies by the reciprocal
    log_y = _fma(z + 0.5 - t / log_t, log_t, (math.log(2.0) + math.log(math.pi)) / 2) + jnp.log(acc)
    abs_x = jnp.abs(x)
    abs_frac = abs_x - jnp.floor(abs_x)
    reduced = lax.select(abs_frac > 0.5, 1.0 - abs_frac, abs_frac)
    reflection_denom = jnp.log(jnp.sin(math.pi * reduced))
    reflection = lax.select(jnp.isfinite(reflection_denom), math.log(math.pi) - reflection_denom - log_y,
                            -reflection_denom)
    result = lax.select(need_to_reflect, reflection, log_y)
    return lax.select(jnp.isinf(x), jnp.full_like(x, np.inf), result)


def _digamma_impl(x):
    jnp, lax = _np_mod()
    need_to_reflect = x < 0.5
    z = lax.select(need_to_reflect, -x, x - 1.0)
    z1 = z + 1.0
    num = -(_LANCZOS_COEFFS[0] / (z1 * z1))
    denom = _LANCZOS_COEFFS[0] / z1 + _LANCZOS_BASE
    for i, c in enumerate(_LANCZOS_COEFFS[1:], 1):
        zi = z + float(i + 1)
        num = num - c / (zi * zi)
        denom = denom + c / zi
    t = (_LANCZOS_G + 0.5) + z
    log_t = math.log(_LANCZOS_G + 0.5) + jnp.log1p(z * (1.0 / (_LANCZOS_G + 0.5)))  # XLA multiplies by the reciprocal
    y = log_t + num / denom - _LANCZOS_G / t
    reduced = x + jnp.abs(jnp.floor(x + 0.5))
    reflection = y - math.pi * jnp.cos(math.pi * reduced) / jnp.sin(math.pi * reduced)
    real = lax.select(need_to_reflect, reflection, y)
    return lax.select((x <= 0.0) & (x == jnp.floor(x)), jnp.full_like(x, np.nan), real)


def digamma(x):
    """The digamma function psi(x) = d/dx lgamma(x) (XLA's Lanczos algorithm); nan at the
    poles (0 and the negative integers)."""
    (x,), out = _float_args("digamma", x)
    return _finish(_digamma_impl(x), out)


def _lgamma_custom():
    from .custom_derivatives import custom_jvp

    @custom_jvp
    def lg(x):
        return _lgamma_impl(x)

    @lg.defjvp
    def _jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return lg(x), t * _digamma_impl(x)
    return lg


_lgamma_fn = None


def lgamma(x):
    """log|Gamma(x)| (XLA's Lanczos approximation with reflection below 1/2); its
    derivative is digamma."""
    global _lgamma_fn
    (x,), out = _float_args("lgamma", x)
    if _lgamma_fn is None:
        _lgamma_fn = _lgamma_custom()
    return _finish(_lgamma_fn(x), out)


# ---- incomplete gamma ------------------------------------------------------------------
_VALUE, _DERIVATIVE, _SAMPLE_DERIVATIVE = 1, 2, 3


def _eps(x):
    return float(np.finfo(np.dtype(x.dtype)).eps)


def _igamma_series(ax, x, a, enabled, mode):
    jnp, lax = _np_mod()
    eps = _eps(x)

    def cond_fn(vals):
        return jnp.any(vals[0])

    def body_fn(vals):
        en, r, c, ans, xx, dc_da, dans_da = vals
        r = r + 1.0
        dc_da = dc_da * (xx / r) - (c * xx) / (r * r)
        dans_da = dans_da + dc_da
        c = c * (xx / r)
        ans = ans + c
        if mode == _VALUE:
            conditional = en & (c / ans > eps)
        else:
            conditional = en & (jnp.abs(dc_da / dans_da) > eps)
        return (conditional, lax.select(en, r, vals[1]), lax.select(en, c, vals[2]),
                lax.select(en, ans, vals[3]), lax.select(en, xx, vals[4]),
                lax.select(en, dc_da, vals[5]), lax.select(en, dans_da, vals[6]))

    init = (enabled, a, jnp.ones_like(a), jnp.ones_like(a), x, jnp.zeros_like(a), jnp.zeros_like(a))
    vals = lax.while_loop(cond_fn, body_fn, init)
    ans, dans_da = vals[3], vals[6]
    if mode == _VALUE:
        return (ans * ax) / a
    dlogax_da = jnp.log(x) - _digamma_impl(a + 1.0)
    if mode == _DERIVATIVE:
        return ax * (ans * dlogax_da + dans_da) / a
    return -(dans_da + ans * dlogax_da) * x / a


def _igammac_continued_fraction(ax, x, a, enabled, mode):
    jnp, lax = _np_mod()
    eps = _eps(x)

    def cond_fn(vals):
        return (vals[5] < 2000.0) & jnp.any(vals[0])

    def body_fn(vals):
        (en, ans, t, y, z, c, pkm1, qkm1, pkm2, qkm2, dpkm2_da, dqkm2_da, dpkm1_da, dqkm1_da, dans_da) = vals
        c = c + 1.0
        y = y + 1.0
        z = z + 2.0
        yc = y * c
        pk = pkm1 * z - pkm2 * yc
        qk = qkm1 * z - qkm2 * yc
        qk_nz = qk != 0.0
        r = pk / qk
        t = lax.select(qk_nz, jnp.abs((ans - r) / r), jnp.ones_like(r))
        ans = lax.select(qk_nz, r, ans)
        dpk_da = dpkm1_da * z - pkm1 - dpkm2_da * yc + pkm2 * c
        dqk_da = dqkm1_da * z - qkm1 - dqkm2_da * yc + qkm2 * c
        dans_da_new = lax.select(qk_nz, (dpk_da - ans * dqk_da) / qk, dans_da)
        grad_cond = lax.select(qk_nz, jnp.abs(dans_da_new - dans_da), jnp.ones_like(dans_da))
        pkm2, pkm1, qkm2, qkm1 = pkm1, pk, qkm1, qk
        dpkm2_da, dqkm2_da, dpkm1_da, dqkm1_da = dpkm1_da, dqkm1_da, dpk_da, dqk_da
        rescale = jnp.abs(pk) > 1.0 / eps
        pkm2, pkm1, qkm2, qkm1, dpkm2_da, dqkm2_da, dpkm1_da, dqkm1_da = (
            lax.select(rescale, v * eps, v)
            for v in (pkm2, pkm1, qkm2, qkm1, dpkm2_da, dqkm2_da, dpkm1_da, dqkm1_da))
        if mode == _VALUE:
            conditional = en & (t > eps)
        else:
            conditional = en & (grad_cond > eps)
        new = (ans, t, y, z)
        out = [conditional] + [lax.select(en, v, o) for v, o in zip(new, vals[1:5])] + [c]
        new2 = (pkm1, qkm1, pkm2, qkm2, dpkm2_da, dqkm2_da, dpkm1_da, dqkm1_da, dans_da_new)
        out += [lax.select(en, v, o) for v, o in zip(new2, vals[6:])]
        return tuple(out)

    y = 1.0 - a
    z = x + y + 1.0
    c = jnp.zeros((), x.dtype)
    pkm2 = jnp.ones_like(x)
    qkm2 = x
    pkm1 = x + 1.0
    qkm1 = z * x
    ans = pkm1 / qkm1
    t = jnp.ones_like(x)
    dpkm2_da = jnp.zeros_like(x)
    dqkm2_da = jnp.zeros_like(x)
    dpkm1_da = jnp.zeros_like(x)
    dqkm1_da = -x
    dans_da = (dpkm1_da - ans * dqkm1_da) / qkm1
    init = (enabled, ans, t, y, z, c, pkm1, qkm1, pkm2, qkm2, dpkm2_da, dqkm2_da, dpkm1_da, dqkm1_da, dans_da)
    vals = lax.while_loop(cond_fn, body_fn, init)
    ans = vals[1]
    if mode == _VALUE:
        return ans * ax
    dlogax_da = jnp.log(x) - _digamma_impl(a)
    if mode == _DERIVATIVE:
        return ax * (ans * dlogax_da + vals[14])
    return -(vals[14] + ans * dlogax_da) * x


def _log_max(x):
    return math.log(float(np.finfo(np.dtype(x.dtype)).max))


def _igamma_impl(a, x):
    jnp, lax = _np_mod()
    is_nan = jnp.isnan(a) | jnp.isnan(x)
    x_inf = x == np.inf
    a_zero = a == 0.0
    x_zero = x == 0.0
    domain_error = (x < 0.0) | (a < 0.0) | (a_zero & x_zero) | is_nan
    use_igammac = (x >= 1.0) & (x > a)
    ax = a * jnp.log(x) - x - _lgamma_impl(a)
    underflow = ax < -_log_max(x)
    ax = jnp.exp(ax)
    enabled = ~(x_zero | domain_error | underflow | x_inf)
    out = lax.select(use_igammac,
                     1.0 - _igammac_continued_fraction(ax, x, a, enabled & use_igammac, _VALUE),
                     _igamma_series(ax, x, a, enabled & ~use_igammac, _VALUE))
    out = lax.select(x_zero, jnp.zeros_like(a), out)
    out = lax.select(x_inf, jnp.ones_like(a), out)
    return lax.select(domain_error, jnp.full_like(a, np.nan), out)


def _igammac_impl(a, x):
    jnp, lax = _np_mod()
    is_nan = jnp.isnan(a) | jnp.isnan(x)
    a_zero = a == 0.0
    x_zero = x == 0.0
    x_inf = x == np.inf
    domain_error = (x < 0.0) | (a < 0.0) | (a_zero & x_zero) | is_nan
    use_igamma = (x < 1.0) | (x < a)
    ax = a * jnp.log(x) - x - _lgamma_impl(a)
    underflow = ax < -_log_max(x)
    enabled = ~(domain_error | underflow | x_inf | a_zero)
    ax = jnp.exp(ax)
    series = _igamma_series(ax, x, a, enabled & use_igamma, _VALUE)
    cf = _igammac_continued_fraction(ax, x, a, enabled & ~use_igamma, _VALUE)
    out = lax.select(use_igamma, 1.0 - series, cf)
    out = lax.select(x_inf | a_zero, jnp.zeros_like(out), out)
    return lax.select(domain_error, jnp.full_like(a, np.nan), out)


def _grad_a_impl(a, x, mode):
    jnp, lax = _np_mod()
    is_nan = jnp.isnan(a) | jnp.isnan(x)
    x_zero = x == 0.0
    domain_error = (x < 0.0) | (a <= 0.0)
    use_igammac = (x > 1.0) & (x > a)
    ax = a * jnp.log(x) - x - _lgamma_impl(a)
    underflow = ax < -_log_max(x)
    ax = jnp.exp(ax)
    enabled = ~(x_zero | domain_error | underflow | is_nan)
    out = lax.select(use_igammac,
                     -_igammac_continued_fraction(ax, x, a, enabled & use_igammac, mode),
                     _igamma_series(ax, x, a, enabled & ~use_igammac, mode))
    out = lax.select(x_zero, jnp.zeros_like(out), out)
    return lax.select(domain_error | is_nan, jnp.full_like(a, np.nan), out)


def _igamma_gradx(a, x):
    jnp, _ = _np_mod()
    return jnp.exp(-x + (a - 1.0) * jnp.log(x) - _lgamma_impl(a))


def _make_igammas():
    from .custom_derivatives import custom_jvp

    @custom_jvp
    def ig(a, x):
        return _igamma_impl(a, x)

    @ig.defjvp
    def _ig_jvp(primals, tangents):
        (a, x), (ta, tx) = primals, tangents
        return ig(a, x), ta * _grad_a_impl(a, x, _DERIVATIVE) + tx * _igamma_gradx(a, x)

    @custom_jvp
    def igc(a, x):
        return _igammac_impl(a, x)

    @igc.defjvp
    def _igc_jvp(primals, tangents):
        (a, x), (ta, tx) = primals, tangents
        return igc(a, x), -(ta * _grad_a_impl(a, x, _DERIVATIVE) + tx * _igamma_gradx(a, x))
    return ig, igc


_igammas = None


def _ig():
    global _igammas
    if _igammas is None:
        _igammas = _make_igammas()
    return _igammas


def igamma(a, x):
    """The regularized lower incomplete gamma function P(a, x) (JAX's series / continued
    fraction); nan outside a >= 0, x >= 0."""
    (a, x), out = _float_args("igamma", a, x)
    return _finish(_ig()[0](a, x), out)


def igammac(a, x):
    """The regularized upper incomplete gamma function Q(a, x) = 1 - P(a, x)."""
    (a, x), out = _float_args("igammac", a, x)
    return _finish(_ig()[1](a, x), out)


def igamma_grad_a(a, x):
    """d/da of igamma(a, x)."""
    (a, x), out = _float_args("igamma_grad_a", a, x)
    return _finish(_grad_a_impl(a, x, _DERIVATIVE), out)


def random_gamma_grad(a, x):
    """d sample / d a of a Gamma(a, 1) sample x drawn by inverting its CDF: the implicit
    reparameterisation gradient -(dP/da) / (dP/dx) that jax.random.gamma uses."""
    (a, x), out = _float_args("random_gamma_grad", a, x)
    return _finish(_grad_a_impl(a, x, _SAMPLE_DERIVATIVE), out)


__all__ = ["lgamma", "digamma", "igamma", "igammac", "igamma_grad_a", "random_gamma_grad"]
