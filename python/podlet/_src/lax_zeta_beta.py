"""jax.lax.zeta, polygamma and betainc (issue 26), on top of the lgamma / digamma of
_src/special.py.

* zeta(x, q): XLA's Hurwitz zeta (``xla/hlo/builder/lib/math.cc``): 10 terms of the
  series, then a 12-term Euler-Maclaurin tail by Horner's rule, with XLA's domain rules
  (nan for x < 1, at non-integer x for q <= 0; inf at x == 1 and at the poles).
* polygamma(m, x): digamma for m == 0, else (-1)^(m+1) m! zeta(m+1, x) (XLA's); its
  derivative in x is polygamma(m+1, x), as JAX's.
* betainc(a, b, x): JAX's regularized incomplete beta (Lentz's continued fraction as a
  while_loop over the whole array, the symmetry relation where it converges slowly);
  its derivative in x is JAX's closed form.

bfloat16 is computed in float32, as JAX does. JAX raises for derivatives of zeta, of
polygamma w.r.t. m and of betainc w.r.t. a and b; podlet gives none there (zeta
differentiates its formula; the others treat m, a, b as constants)."""
import numpy as _np

from .control_flow import while_loop
from .custom_derivatives import custom_vjp

__all__ = ["zeta", "polygamma", "betainc"]


class _Special:
    """_src/special.py, imported on first use (it is imported after podlet.numpy)."""

    def __getattr__(self, name):
        from . import special
        return getattr(special, name)


_sp = _Special()

# (2k)! / B_2k, the Euler-Maclaurin coefficients, in reverse (XLA's kZetaCoeffs)
_ZETA_COEFFS = (-7.1661652561756670113e18, 1.8152105401943546773e17, -4.5979787224074726105e15,
                1.1646782814350067249e14, -2.950130727918164224e12, 7.47242496e10,
                -1.8924375803183791606e9, 47900160.0, -1209600.0, 30240.0, -720.0, 12.0)


def _zeta_impl(x, q):
    jnp, lax = _sp._np_mod()
    c = lambda v: jnp.full((), v, x.dtype)  # noqa: E731
    a = q
    neg_x = -x
    initial_sum = lax.pow(q, neg_x)
    for _ in range(9):
        a = a + c(1.0)
        initial_sum = initial_sum + lax.pow(a, neg_x)
    a = a + c(1.0)
    neg_power = lax.pow(a, neg_x)
    s = initial_sum + neg_power * a / (x - c(1.0))
    a_inverse_square = c(1.0) / (a * a)
    horner = jnp.zeros_like(a)
    for i in range(11):
        factor = (x - c(22.0 - 2.0 * i)) * (x - c(21.0 - 2.0 * i))
        horner = factor * a_inverse_square * (horner + c(1.0 / _ZETA_COEFFS[i]))
    s = s + neg_power * (c(0.5) + x / a * (c(1.0 / _ZETA_COEFFS[11]) + horner))
    eps = float(_np.finfo(_np.float32 if x.dtype == _np.float32 else _np.float64).eps)
    out = lax.select(lax.abs(neg_power) < lax.abs(initial_sum) * c(eps), initial_sum, s)
    nan, inf = jnp.full_like(x, _np.nan), jnp.full_like(x, _np.inf)
    out = lax.select(x < c(1.0), nan, out)
    q_le_zero = q <= c(0.0)
    out = lax.select(q_le_zero & (x != lax.floor(x)), nan, out)
    at_pole = q_le_zero & (q == lax.floor(q))
    x_even = (lax.rem(x, c(2.0)) == c(0.0)) & (x == lax.floor(x))
    out = lax.select(at_pole, lax.select(x_even, inf, nan), out)
    return lax.select(x == c(1.0), inf, out)


def zeta(x, q):
    """jax.lax.zeta: the Hurwitz zeta function sum_k (k + q)^-x (XLA's algorithm)."""
    (x, q), out = _sp._float_args("zeta", x, q)
    return _sp._finish(_zeta_impl(x, q), out)


def _polygamma_impl(m, x):
    jnp, lax = _sp._np_mod()
    c = lambda v: jnp.full((), v, x.dtype)  # noqa: E731
    n1 = m + c(1.0)
    sign = c(2.0) * lax.rem(m, c(2.0)) - c(1.0)
    val = sign * lax.exp(_sp._lgamma_impl(n1)) * _zeta_impl(n1, x)
    out = lax.select(m == c(0.0), _sp._digamma_impl(x), val)
    return lax.select((m != lax.floor(m)) | (m < c(0.0)), jnp.full_like(x, _np.nan), out)


def _polygamma_fn(m):
    f = custom_vjp(lambda x: _polygamma_impl(m, x))
    f.defvjp(lambda x: (_polygamma_impl(m, x), x),
             lambda x, g: (g * _polygamma_impl(m + 1.0, x),))
    return f


def polygamma(m, x):
    """jax.lax.polygamma: the m-th derivative of digamma (m a natural number, as a float
    array like x; nan otherwise)."""
    (m, x), out = _sp._float_args("polygamma", m, x)
    return _sp._finish(_polygamma_fn(m)(x), out)


def _lentz(num_iterations, small, threshold, numerator, denominator, inputs):
    jnp, lax = _sp._np_mod()
    h0 = denominator(0, *inputs)
    small_c = jnp.full_like(h0, small)
    h = lax.select(lax.abs(h0) < small_c, small_c, h0)

    def cond(v):
        return (v[0] < num_iterations) & v[1]

    def body(v):
        it, _, c_, d_, h_ = v
        pn, pd = numerator(it, *inputs), denominator(it, *inputs)
        cc = pd + pn / c_
        cc = lax.select(lax.abs(cc) < small_c, small_c, cc)
        dd = pd + pn * d_
        dd = lax.select(lax.abs(dd) < small_c, small_c, dd)
        dd = jnp.full((), 1.0, dd.dtype) / dd
        delta = cc * dd
        unconverged = jnp.any(lax.abs(delta - jnp.full((), 1.0, delta.dtype)) >= jnp.full((), threshold, delta.dtype))
        return it + 1, unconverged, cc, dd, h_ * delta
    init = (jnp.asarray(_np.int32(1)), jnp.asarray(True), h, jnp.zeros_like(h), h)
    return while_loop(cond, body, init)[4]


def _betainc_impl(a, b, x):
    jnp, lax = _sp._np_mod()
    dt = x.dtype
    c = lambda v: jnp.full((), v, dt)  # noqa: E731
    shape = a.shape

    def numerator(it, a, b, x):
        i = jnp.broadcast_to(it, shape) if hasattr(it, "shape") else jnp.full(shape, it, _np.int32)
        is_even = (i % 2) == 0
        is_one = i == 1
        m_i = (i - 1) // 2
        m_zero = m_i == 0
        m = lax.convert_element_type(m_i, dt)
        zero_num = -(a + b) * x / (a + c(1.0))
        even = lax.select(m_zero, zero_num, -(a + m) * (a + b + m) * x / ((a + c(2.0) * m) * (a + c(2.0) * m + c(1.0))))
        odd = m * (b - m) * x / ((a + c(2.0) * m - c(1.0)) * (a + c(2.0) * m))
        return lax.select(is_one, jnp.ones_like(x), lax.select(is_even, even, odd))

    def denominator(it, a, b, x):
        i = jnp.broadcast_to(it, shape) if hasattr(it, "shape") else jnp.full(shape, it, _np.int32)
        return lax.select(i == 0, jnp.zeros_like(x), jnp.ones_like(x))

    inf = c(_np.inf)
    a_is_zero = (a == c(0.0)) | (b == inf)
    b_is_zero = (b == c(0.0)) | (a == inf)
    x_is_zero, x_is_one = x == c(0.0), x == c(1.0)
    is_nan = (a != a) | (b != b) | (x != x)
    result_is_zero = (b_is_zero & ~x_is_one) | (a_is_zero & x_is_zero)
    result_is_one = (a_is_zero & ~x_is_zero) | (b_is_zero & x_is_one)
    result_is_nan = (a < c(0.0)) | (b < c(0.0)) | (x < c(0.0)) | (x > c(1.0)) | (a_is_zero & b_is_zero) | is_nan
    fast = x < (a + c(1.0)) / (a + b + c(2.0))
    a, b = lax.select(fast, a, b), lax.select(fast, b, a)
    x = lax.select(fast, x, c(1.0) - x)
    finfo = _np.finfo(_np.float32 if dt == _np.float32 else _np.float64)
    eps = float(finfo.eps) / 2
    cf = _lentz(200 if dt == _np.float32 else 600, eps, eps, numerator, denominator, [a, b, x])
    very_small = float(finfo.tiny) * 2
    lbeta_small_a = _sp._lgamma_impl(b) - _sp._lgamma_impl(a + b)
    lbeta = _sp._lgamma_impl(a) + lbeta_small_a
    factor = lax.select(a < c(very_small), lax.exp(lax.log1p(-x) * b - lbeta_small_a),
                        lax.exp(lax.log(x) * a + lax.log1p(-x) * b - lbeta) / a)
    r = cf * factor
    r = lax.select(fast, r, c(1.0) - r)
    r = lax.select(result_is_zero, jnp.zeros_like(r), r)
    r = lax.select(result_is_one, jnp.ones_like(r), r)
    return lax.select(result_is_nan, jnp.full_like(r, _np.nan), r)


def _betainc_gradx(a, b, x):
    _, lax = _sp._np_mod()
    lbeta = _sp._lgamma_impl(a) + _sp._lgamma_impl(b) - _sp._lgamma_impl(a + b)
    one = lax.full_like(x, 1.0)
    return lax.exp((b - one) * lax.log1p(-x) + (a - one) * lax.log(x) - lbeta)


def betainc(a, b, x):
    """jax.lax.betainc: the regularized incomplete beta function I_x(a, b)."""
    (a, b, x), out = _sp._float_args("betainc", a, b, x)
    f = custom_vjp(lambda xx: _betainc_impl(a, b, xx))
    f.defvjp(lambda xx: (_betainc_impl(a, b, xx), xx), lambda xx, g: (g * _betainc_gradx(a, b, xx),))
    return _sp._finish(f(x), out)
