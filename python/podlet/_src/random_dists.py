"""jax.random's long tail of distributions (re-exported by podlet.random).

Each function replays jax 0.10.2's algorithm on podlet's threefry samplers: the same key
splits in the same order, the same uniforms / normals, the same rejection loops, so a
key gives the same draws as ``jax.random``. poisson, binomial, multinomial, geometric
and triangular are bit for bit jax's (tested in float32); the others differ in the last
bit or few of log / exp / log1p / tan (podlet's kernels against XLA:CPU's; tan is
sin / cos here), of a sum of squares XLA contracts to FMAs, or of XLA:CPU's rsqrt.

* ``gamma`` / ``loggamma``: Marsaglia-Tsang, one rejection ``while_loop`` per element
  under ``vmap``, the element keys from ``split(key, a.size)`` (jax's
  ``random_gamma_p``). XLA:CPU's FMA in ``v = 1 + x c`` and its rewrite of
  ``1/3 / sqrt(d)`` into ``1/3 * rsqrt(d)`` are replayed, but its rsqrt is a hardware
  estimate refined by a Newton step, not correctly rounded: ~95% of float32 samples are
  jax's bits, the rest a few ulp off (a flipped acceptance, which would give another
  sample, was not seen in tests). Subnormal samples are flushed to zero as XLA:CPU
  does. Gradient w.r.t. ``a`` by implicit reparameterisation (``random_gamma_grad``),
  through a custom VJP.
* ``beta``, ``dirichlet``, ``chisquare``, ``f``, ``t``, ``generalized_normal``,
  ``ball`` are built on them as in jax.
* ``poisson`` (Knuth below lam = 10, Hormann's transformed rejection above),
  ``binomial`` (inversion for n p <= 10, BTRS above) and ``multinomial`` (a scan of
  conditional binomials) run jax's vectorised ``while_loop`` s.
"""
import math

import numpy as np

from . import dtypes
from .core import Array, Tracer, bind, to_array
from . import special as _special


def _rnd():
    from .. import random
    return random


def _mods():
    from .. import numpy as jnp
    from .. import lax
    return jnp, lax


def _is_array(x):
    return isinstance(x, (Array, Tracer))


def _shape_of(x):
    return tuple(x.shape) if _is_array(x) else np.shape(x)


def _check_shape(name, shape, *param_shapes):
    if param_shapes:
        try:
            bshape = np.broadcast_shapes(shape, *param_shapes)
        except ValueError:
            bshape = None
        if bshape != tuple(shape):
            raise ValueError(f"{name} parameter shapes must be broadcast-compatible with shape argument, and the "
                             f"result of broadcasting the shapes must equal the shape argument, but got result "
                             f"{bshape} for shape argument {tuple(shape)}.")


def _broadcast_shapes(name, shape, *params):
    """jax's _check_broadcast_shapes: the parameters' broadcast shape when shape is None."""
    pshapes = [_shape_of(p) for p in params]
    if shape is None:
        try:
            return tuple(np.broadcast_shapes(*pshapes))
        except ValueError:
            raise ValueError(f"{name}: incompatible shapes for broadcasting: {tuple(pshapes)}") from None
    shape = _rnd()._shape(shape)
    _check_shape(name, shape, *pshapes)
    return shape


def _fdtype(dtype, name):
    rnd = _rnd()
    if dtype is None:
        return rnd._float_dtype(None, name)
    d = np.dtype(dtype)
    if not np.issubdtype(d, np.floating) and d != dtypes.bfloat16:
        raise ValueError(f"dtype argument to `{name}` must be a float dtype, got {d}")
    return dtypes.canonicalize(d)


def _idtype(dtype, name):
    d = np.dtype(np.int64 if dtype is None else dtype)
    if d.kind not in "iu":
        raise ValueError(f"dtype argument to `{name}` must be an int dtype, got {d}")
    d = dtypes.canonicalize(d)
    if d not in (dtypes.int32, dtypes.uint32, dtypes.uint8):
        raise _rnd()._dtypes_error(f"podlet.random.{name} supports int32, uint32 and uint8, got {d}")
    return d


def _param(x, d, name):
    """A distribution parameter as a podlet value of float dtype d."""
    if _is_array(x):
        if not (dtypes.is_float(x.dtype) or dtypes.is_int(x.dtype) or x.dtype == dtypes.bool_):
            raise TypeError(f"{name}: parameters must be real numbers, got {x.dtype}")
        return x if x.dtype == d else bind("convert_element_type", x, new_dtype=np.dtype(d).name)
    a = np.asarray(x)
    if a.dtype.kind not in "biuf" and a.dtype != dtypes.bfloat16:
        raise TypeError(f"{name}: parameters must be real numbers, got {a.dtype}")
    return to_array(a.astype(d))


def _bcast(x, shape):
    jnp, _ = _mods()
    return x if tuple(x.shape) == tuple(shape) else jnp.broadcast_to(x, shape)


def _key(key, name):
    return _rnd()._key(key, name)


# ---- gamma -------------------------------------------------------------------------
def _gamma_one(key, alpha, log_space):
    """One Gamma(alpha) sample (scalar key and alpha), jax's Marsaglia-Tsang loop."""
    jnp, lax = _mods()
    rnd = _rnd()
    d_type = alpha.dtype
    zero = jnp.zeros((), d_type)
    one = jnp.ones((), d_type)
    boost_mask = alpha >= 1.0
    alpha_orig = alpha
    alpha = lax.select(boost_mask, alpha, alpha + 1.0)
    d = alpha - 1.0 / 3.0
    # XLA:CPU rewrites jax's 1/3 / sqrt(d) into 1/3 * rsqrt(d) (its rsqrt is approximate:
    # podlet's is 1 / sqrt, so c can differ in the last bit) and contracts 1 + x * c into
    # an FMA in float32 (float64 too, where podlet has no exact FMA); bfloat16 draws
    # agree best with the plain operations (each rounded to bfloat16)
    plain = d_type == dtypes.bfloat16
    c = (1.0 / 3.0) / jnp.sqrt(d) if plain else (1.0 / 3.0) * lax.rsqrt(d)

    def cond_fn(kxvu):
        _, X, V, U = kxvu
        return (U >= 1.0 - 0.0331 * (X * X)) & (jnp.log(U) >= X * 0.5 + d * ((1.0 - V) + jnp.log(V)))

    def body_fn(kxvu):
        def next_kxv(kxv):
            k, sub = rnd.split(kxv[0])
            x = rnd.normal(sub, (), d_type)
            return k, x, (1.0 + x * c) if plain else _special._fma(x, c, 1.0)

        k, x_key, u_key = rnd.split(kxvu[0], 3)
        _, x, v = lax.while_loop(lambda kxv: kxv[2] <= 0.0, next_kxv, (x_key, zero, -one))
        return k, x * x, (v * v) * v, rnd.uniform(u_key, (), d_type)

    key, subkey = rnd.split(key)
    _, _, V, _ = lax.while_loop(cond_fn, body_fn, (key, zero, one, one + one))
    if log_space:
        log_samples = -rnd.exponential(subkey, (), d_type)
        log_boost = lax.select(boost_mask | (log_samples == 0.0), zero, log_samples * (1.0 / alpha_orig))
        return (jnp.log(d) + jnp.log(V)) + log_boost
    samples = 1.0 - rnd.uniform(subkey, (), d_type)
    boost = lax.select(boost_mask, one, samples ** (1.0 / alpha_orig))
    out = (d * V) * boost
    # XLA:CPU flushes subnormal results to zero (a tiny alpha can underflow the boost)
    return lax.select(out < float(rnd._finfo(d_type).tiny), zero, out)


def _gamma_sample(key, a, log_space):
    """jax's random_gamma_p impl: a key per element of a, then the loop under vmap."""
    jnp, _ = _mods()
    from .batching import vmap
    shape = tuple(a.shape)
    n = math.prod(shape)
    if n == 0:
        return jnp.zeros(shape, a.dtype)
    keys = _rnd().split(key, n)
    out = vmap(lambda k, al: _gamma_one(k, al, log_space))(keys, jnp.reshape(a, (n,)))
    return jnp.reshape(out, shape)


def _gamma_grad(sample, a, log_space):
    jnp, lax = _mods()
    if log_space:
        s = jnp.exp(sample)
        # jax replaces a zero exp by the smallest normal float; XLA:CPU flushes subnormal
        # results to zero, so a subnormal exp is replaced too
        tiny = float(_rnd()._finfo(s.dtype).tiny)
        s = lax.select(s < tiny, jnp.full_like(s, tiny), s)
        return _special.random_gamma_grad(a, s) / s
    return _special.random_gamma_grad(a, sample)


def _gamma_with_grad(key, a, log_space):
    from .custom_derivatives import custom_vjp

    @custom_vjp
    def g(a):
        return _gamma_sample(key, a, log_space)

    def fwd(a):
        s = _gamma_sample(key, a, log_space)
        return s, (s, a)

    def bwd(res, ct):
        s, a = res
        return (ct * _gamma_grad(s, a, log_space),)

    g.defvjp(fwd, bwd)
    return g(a)


def _gamma(name, key, a, shape, dtype, log_space):
    key = _key(key, name)
    d = _fdtype(dtype, "gamma")
    if shape is None:
        shape = _shape_of(a)
    else:
        shape = _rnd()._shape(shape)
        _check_shape("gamma", shape, _shape_of(a))
    a = _bcast(_param(a, d, name), shape)
    return _gamma_with_grad(key, a, log_space)


def gamma(key, a, shape=None, dtype=None):
    """Gamma(a, 1) samples (Marsaglia-Tsang, jax's per-element loop); differentiable in a."""
    return _gamma("gamma", key, a, shape, dtype, False)


def loggamma(key, a, shape=None, dtype=None):
    """log of Gamma(a, 1) samples, computed in log space (accurate for small a)."""
    return _gamma("loggamma", key, a, shape, dtype, True)


class _RandomGammaPrimitive:
    """jax.random.random_gamma_p: ``bind(key, a, log_space=False)`` draws one Gamma(a)
    sample per element of a (float a, a raw key)."""
    name = "random_gamma"

    def bind(self, key, a, *, log_space=False):
        key = _key(key, "random_gamma")
        if not _is_array(a):
            a = to_array(np.asarray(a))
        if not dtypes.is_float(a.dtype):
            raise TypeError(f"random_gamma: a must be a float array, got {a.dtype}")
        return _gamma_with_grad(key, a, bool(log_space))

    def __repr__(self):
        return self.name


random_gamma_p = _RandomGammaPrimitive()


def beta(key, a, b, shape=None, dtype=None):
    """Beta(a, b) samples from two log-gamma draws (jax's log-space ratio)."""
    jnp, lax = _mods()
    rnd = _rnd()
    key = _key(key, "beta")
    d = _fdtype(dtype, "beta")
    shape = _broadcast_shapes("beta", shape, a, b)
    a = _bcast(_param(a, d, "beta"), shape)
    b = _bcast(_param(b, d, "beta"), shape)
    key_a, key_b = rnd.split(key)
    lga = loggamma(key_a, a, shape, d)
    lgb = loggamma(key_b, b, shape, d)
    log_max = lax.max(lga, lgb)
    ga = jnp.exp(lga - log_max)
    gb = jnp.exp(lgb - log_max)
    return ga / (ga + gb)


def dirichlet(key, alpha, shape=None, dtype=None):
    """Dirichlet(alpha) samples along the last axis: softmax of log-gamma draws."""
    jnp, _ = _mods()
    key = _key(key, "dirichlet")
    d = _fdtype(dtype, "dirichlet")
    ashape = _shape_of(alpha)
    if len(ashape) < 1:
        raise ValueError(f"dirichlet requires alpha.ndim >= 1, got alpha.ndim == {len(ashape)}")
    if shape is None:
        shape = ashape[:-1]
    else:
        shape = _rnd()._shape(shape)
        _check_shape("dirichlet", shape, ashape[:-1])
    alpha = _param(alpha, d, "dirichlet")
    lg = loggamma(key, alpha, tuple(shape) + ashape[-1:], d)
    m = jnp.max(lg, axis=-1, keepdims=True)
    e = jnp.exp(lg - m)  # jax.nn.softmax
    return e / jnp.sum(e, axis=-1, keepdims=True)


def chisquare(key, df, shape=None, dtype=None):
    """Chi-square(df) samples: 2 * exp(loggamma(df / 2))."""
    jnp, _ = _mods()
    key = _key(key, "chisquare")
    d = _fdtype(dtype, "chisquare")
    shape = _broadcast_shapes("chisquare", shape, df)
    df = _param(df, d, "chisquare")
    return jnp.exp(loggamma(key, df / 2.0, shape, d)) * 2.0


def f(key, dfnum, dfden, shape=None, dtype=None):
    """F(dfnum, dfden) samples: (chi2(dfnum) / dfnum) / (chi2(dfden) / dfden)."""
    key = _key(key, "f")
    d = _fdtype(dtype, "f")
    shape = _broadcast_shapes("f", shape, dfnum, dfden)
    dfnum = _param(dfnum, d, "f")
    dfden = _param(dfden, d, "f")
    key_dfd, key_dfn = _rnd().split(key)
    chi2_dfn = chisquare(key_dfn, dfnum, shape, d)
    chi2_dfd = chisquare(key_dfd, dfden, shape, d)
    return (chi2_dfn / dfnum) / (chi2_dfd / dfden)


def t(key, df, shape=None, dtype=None):
    """Student's t(df) samples: normal * sqrt((df / 2) / gamma(df / 2))."""
    jnp, _ = _mods()
    rnd = _rnd()
    key = _key(key, "t")
    d = _fdtype(dtype, "t")
    shape = _broadcast_shapes("t", shape, df)
    df = _param(df, d, "t")
    key_n, key_g = rnd.split(key)
    n = rnd.normal(key_n, shape, d)
    half_df = df / 2.0
    g = gamma(key_g, half_df, shape, d)
    return n * jnp.sqrt(half_df / g)


# ---- closed-form transforms of uniform / normal ----------------------------------
def cauchy(key, shape=(), dtype=None):
    """Standard Cauchy samples: tan(pi (u - 1/2)), u uniform in [eps, 1)."""
    jnp, _ = _mods()
    rnd = _rnd()
    key = _key(key, "cauchy")
    d = _fdtype(dtype, "cauchy")
    u = rnd.uniform(key, rnd._shape(shape), d, float(rnd._finfo(d).eps), 1.)
    return jnp.tan(math.pi * (u - 0.5))


def lognormal(key, sigma=np.float32(1.0), shape=None, dtype=None):
    """Log-normal samples: exp(sigma * normal)."""
    jnp, _ = _mods()
    key = _key(key, "lognormal")
    d = _fdtype(dtype, "lognormal")
    shape = _broadcast_shapes("lognormal", shape, sigma)
    sigma = _param(sigma, d, "lognormal")
    return jnp.exp(_rnd().normal(key, shape, d) * sigma)


def pareto(key, b, shape=None, dtype=None):
    """Pareto(b) samples: exp(exponential / b)."""
    jnp, _ = _mods()
    key = _key(key, "pareto")
    d = _fdtype(dtype, "pareto")
    shape = _broadcast_shapes("pareto", shape, b)
    b = _param(b, d, "pareto")
    return jnp.exp(_rnd().exponential(key, shape, d) / b)


def maxwell(key, shape=(), dtype=None):
    """Maxwell samples: the norm of 3 standard normals."""
    jnp, _ = _mods()
    key = _key(key, "maxwell")
    d = _fdtype(dtype, "maxwell")
    x = _rnd().normal(key, tuple(_rnd()._shape(shape)) + (3,), d)
    return jnp.sqrt(jnp.sum(x * x, axis=-1))


def double_sided_maxwell(key, loc, scale, shape=(), dtype=None):
    """Double-sided Maxwell samples: rademacher * maxwell * scale + loc."""
    rnd = _rnd()
    key = _key(key, "double_sided_maxwell")
    d = _fdtype(dtype, "double_sided_maxwell")
    pshape = tuple(np.broadcast_shapes(_shape_of(loc), _shape_of(scale)))
    shape = tuple(rnd._shape(shape))
    if not shape:
        shape = pshape
    shape = shape + pshape
    mkey, rkey = rnd.split(key)
    m = maxwell(mkey, shape, d)
    sign = rnd.rademacher(rkey, shape, d)
    return sign * m * _param(scale, d, "double_sided_maxwell") + _param(loc, d, "double_sided_maxwell")


def weibull_min(key, scale, concentration, shape=(), dtype=None):
    """Weibull samples: (-log1p(-u)) ** (1 / concentration) * scale."""
    jnp, _ = _mods()
    key = _key(key, "weibull_min")
    d = _fdtype(dtype, "weibull_min")
    u = _rnd().uniform(key, _rnd()._shape(shape), d, 0., 1.)
    conc = _param(concentration, d, "weibull_min")
    return jnp.power(-jnp.log1p(-u), 1.0 / conc) * _param(scale, d, "weibull_min")


def rayleigh(key, scale, shape=None, dtype=None):
    """Rayleigh samples: scale * sqrt(-2 log u)."""
    jnp, _ = _mods()
    key = _key(key, "rayleigh")
    d = _fdtype(dtype, "rayleigh")
    shape = _broadcast_shapes("rayleigh", shape, scale)
    u = _rnd().uniform(key, shape, d)
    scale = _bcast(_param(scale, d, "rayleigh"), shape)
    return scale * jnp.sqrt(jnp.log(u) * -2.0)


def wald(key, mean, shape=None, dtype=None):
    """Wald (inverse Gaussian) samples, jax's normal + uniform transform."""
    jnp, lax = _mods()
    rnd = _rnd()
    key = _key(key, "wald")
    d = _fdtype(dtype, "wald")
    shape = _broadcast_shapes("wald", shape, mean)
    k1, k2 = rnd.split(key)
    mean = _bcast(_param(mean, d, "wald"), shape)
    v = rnd.normal(k1, shape, d)
    z = rnd.uniform(k2, shape, d)
    y = lax.integer_pow(v, 2)
    y_sq = lax.integer_pow(y, 2)
    mean_sq = lax.integer_pow(mean, 2)
    sqrt_term = jnp.sqrt(4.0 * mean * y + mean_sq * y_sq)
    x = mean + mean_sq * y / 2.0 - mean / 2.0 * sqrt_term
    return lax.select(z <= mean / (mean + x), x, mean_sq / x)


def triangular(key, left, mode, right, shape=None, dtype=None):
    """Triangular(left, mode, right) samples by inverting the CDF."""
    jnp, lax = _mods()
    key = _key(key, "triangular")
    d = _fdtype(dtype, "triangular")
    shape = _broadcast_shapes("triangular", shape, left, mode, right)
    left = _bcast(_param(left, d, "triangular"), shape)
    right = _bcast(_param(right, d, "triangular"), shape)
    mode = _bcast(_param(mode, d, "triangular"), shape)
    fc = (mode - left) / (right - left)
    u = _rnd().uniform(key, shape, d)
    out1 = left + jnp.sqrt(u * (right - left) * (mode - left))
    out2 = right - jnp.sqrt((1.0 - u) * (right - left) * (right - mode))
    return lax.select(u < fc, out1, out2)


def geometric(key, p, shape=None, dtype=None):
    """Geometric(p) samples (number of trials to the first success, >= 1)."""
    jnp, _ = _mods()
    key = _key(key, "geometric")
    d = _idtype(dtype, "geometric")
    shape = _broadcast_shapes("geometric", shape, p)
    if _is_array(p):
        pd = p.dtype if dtypes.is_float(p.dtype) else _fdtype(None, "geometric")
    else:
        pa = np.asarray(p)
        pd = dtypes.canonicalize(pa.dtype) if pa.dtype.kind == "f" and not isinstance(p, float) \
            else _fdtype(None, "geometric")
    p = _param(p, pd, "geometric")
    u = _rnd().uniform(key, shape, pd)
    u = jnp.where(u == 0.0, jnp.ones_like(u), u)
    log_one_minus_p = _bcast(jnp.log1p(-p), shape)
    g = jnp.floor(jnp.log(u) / log_one_minus_p) + 1.0
    return jnp.astype(g, d)


def generalized_normal(key, p, shape=(), dtype=None):
    """Generalized normal samples with shape parameter p: rademacher * gamma(1/p) ** (1/p)."""
    rnd = _rnd()
    key = _key(key, "generalized_normal")
    d = _fdtype(dtype, "generalized_normal")
    shape = tuple(rnd._shape(shape))
    k0, k1 = rnd.split(key)
    g = gamma(k0, 1 / p, shape, d)
    r = rnd.rademacher(k1, shape, d)
    return r * g ** (1 / p)


def ball(key, d, p=2, shape=(), dtype=None):
    """Samples uniform in the d-dimensional unit p-norm ball (shape + (d,))."""
    jnp, _ = _mods()
    rnd = _rnd()
    key = _key(key, "ball")
    dt = _fdtype(dtype, "ball")
    if _is_array(d) and isinstance(d, Tracer):
        from .errors import ConcretizationError
        raise ConcretizationError("The error occurred in jax.random.ball(): d must be concrete (a Python int)")
    d = int(np.asarray(d)) if _is_array(d) else int(d)
    shape = tuple(rnd._shape(shape))
    k1, k2 = rnd.split(key)
    g = generalized_normal(k1, p, (*shape, d), dt)
    e = rnd.exponential(k2, shape, dt)
    return g / jnp.expand_dims((jnp.sum(jnp.abs(g) ** p, axis=-1) + e) ** (1 / p), -1)


# ---- poisson / binomial / multinomial -----------------------------------------------
def _poisson_knuth(key, lam, shape, max_iters):
    jnp, lax = _mods()
    rnd = _rnd()

    def body_fn(carry):
        i, k, rng, log_prod = carry
        rng, sub = rnd.split(rng)
        k = lax.select(log_prod > -lam, k + 1, k)
        u = rnd.uniform(sub, shape, np.float32)
        return i + 1, k, rng, log_prod + jnp.log(u)

    def cond_fn(carry):
        return jnp.any(carry[3] > -lam) & (carry[0] < max_iters)

    init = (jnp.zeros((), np.int32), jnp.zeros(shape, np.int32), key, jnp.zeros(shape, np.float32))
    return lax.while_loop(cond_fn, body_fn, init)[1] - 1


def _poisson_rejection(key, lam, shape, max_iters):
    jnp, lax = _mods()
    rnd = _rnd()
    log_lam = jnp.log(lam)
    b = 0.931 + 2.53 * jnp.sqrt(lam)
    a = -0.059 + 0.02483 * b
    inv_alpha = 1.1239 + 1.1328 / (b - 3.4)
    v_r = 0.9277 - 3.6224 / (b - 2.0)

    def body_fn(carry):
        i, k_out, accepted, k_ = carry
        k_, s0, s1 = rnd.split(k_, 3)
        u = rnd.uniform(s0, shape, lam.dtype) - 0.5
        v = rnd.uniform(s1, shape, lam.dtype)
        us = 0.5 - jnp.abs(u)
        k = jnp.floor((2.0 * a / us + b) * u + lam + 0.43)
        s = jnp.log(v * inv_alpha / (a / (us * us) + b))
        tt = -lam + k * log_lam - _special.lgamma(k + 1.0)
        accept1 = (us >= 0.07) & (v <= v_r)
        reject = (k < 0.0) | ((us < 0.013) & (v > us))
        accept = accept1 | (~reject & (s <= tt))
        return i + 1, lax.select(accept, k, k_out), accepted | accept, k_

    def cond_fn(carry):
        return jnp.any(~carry[2]) & (carry[0] < max_iters)

    init = (jnp.zeros((), np.int32), jnp.full(shape, -1.0, lam.dtype), jnp.zeros(shape, bool), key)
    return jnp.astype(lax.while_loop(cond_fn, body_fn, init)[1], np.int32)


def poisson(key, lam, shape=None, dtype=None):
    """Poisson(lam) samples (int32 by default): Knuth for lam < 10, else transformed rejection."""
    jnp, lax = _mods()
    key = _key(key, "poisson")
    d = _idtype(dtype, "poisson")
    shape = _shape_of(lam) if shape is None else tuple(_rnd()._shape(shape))
    try:
        np.broadcast_shapes(_shape_of(lam), shape)
    except ValueError:
        raise ValueError(f"poisson: lam of shape {_shape_of(lam)} cannot be broadcast to shape {shape}") from None
    lam = _bcast(_param(lam, dtypes.float32, "poisson"), shape)
    max_iters = int(np.iinfo(np.int32).max)
    use_knuth = jnp.isnan(lam) | (lam < 10.0)
    lam_knuth = lax.select(use_knuth, lam, jnp.zeros_like(lam))
    lam_rej = lax.select(use_knuth, jnp.full_like(lam, 1e5), lam)
    res = lax.select(use_knuth, _poisson_knuth(key, lam_knuth, shape, max_iters),
                     _poisson_rejection(key, lam_rej, shape, max_iters))
    res = lax.select(lam == 0.0, jnp.zeros_like(res), res)
    return res if res.dtype == d else jnp.astype(res, d)


_STIRLING_TAIL = (0.0810614667953272, 0.0413406959554092, 0.0276779256849983, 0.02079067210376509,
                  0.0166446911898211, 0.0138761288230707, 0.0118967099458917, 0.0104112652619720,
                  0.00925546218271273, 0.00833056343336287)


def _stirling_approx_tail(k):
    jnp, lax = _mods()
    vals = jnp.asarray(np.asarray(_STIRLING_TAIL, dtype=np.dtype(k.dtype)))
    use_tail = k <= 9.0
    k = jnp.clip(k, 0.0, 9.0)
    kp1sq = (k + 1.0) * (k + 1.0)
    approx = (1.0 / 12 - (1.0 / 360 - 1.0 / 1260 / kp1sq) / kp1sq) / (k + 1.0)
    idx = jnp.astype(jnp.floor(k), np.int32)
    return lax.select(use_tail, jnp.take(vals, idx), approx)


def _binomial_inversion(key, count, prob, shape, max_iters):
    jnp, lax = _mods()
    rnd = _rnd()
    log1mp = jnp.log1p(-prob)

    def body_fn(carry):
        i, num_geom, geom_sum, k_ = carry
        sub, k_ = rnd.split(k_)
        num_geom_out = lax.select(geom_sum <= count, num_geom + 1.0, num_geom)
        u = rnd.uniform(sub, shape, prob.dtype)
        geom = jnp.ceil(jnp.log(u) / log1mp)
        return i + 1, num_geom_out, geom_sum + geom, k_

    def cond_fn(carry):
        return jnp.any(carry[2] <= count) & (carry[0] < max_iters)

    init = (jnp.zeros((), np.int32), jnp.zeros(shape, prob.dtype), jnp.zeros(shape, prob.dtype), key)
    return lax.while_loop(cond_fn, body_fn, init)[1] - 1.0


def _btrs(key, count, prob, shape, max_iters):
    jnp, lax = _mods()
    rnd = _rnd()
    stddev = jnp.sqrt(count * prob * (1.0 - prob))
    b = 1.15 + 2.53 * stddev
    a = -0.0873 + 0.0248 * b + 0.01 * prob
    c = count * prob + 0.5
    v_r = 0.92 - 4.2 / b
    r = prob / (1.0 - prob)
    alpha = (2.83 + 5.1 / b) * stddev
    m = jnp.floor((count + 1.0) * prob)

    def body_fn(carry):
        i, k_out, accepted, k_ = carry
        k_, s0, s1 = rnd.split(k_, 3)
        u = rnd.uniform(s0, shape, prob.dtype)
        v = rnd.uniform(s1, shape, prob.dtype)
        u = u - 0.5
        us = 0.5 - jnp.abs(u)
        accept1 = (us >= 0.07) & (v <= v_r)
        k = jnp.floor((2.0 * a / us + b) * u + c)
        reject = (k < 0.0) | (k > count)
        v = jnp.log(v * alpha / (a / (us * us) + b))
        ub = ((m + 0.5) * jnp.log((m + 1.0) / (r * (count - m + 1.0)))
              + (count + 1.0) * jnp.log((count - m + 1.0) / (count - k + 1.0))
              + (k + 0.5) * jnp.log(r * (count - k + 1.0) / (k + 1.0))
              + _stirling_approx_tail(m) + _stirling_approx_tail(count - m)
              - _stirling_approx_tail(k) - _stirling_approx_tail(count - k))
        accept = accept1 | (~reject & (v <= ub))
        return i + 1, lax.select(accept, k, k_out), accepted | accept, k_

    def cond_fn(carry):
        return jnp.any(~carry[2]) & (carry[0] < max_iters)

    init = (jnp.zeros((), np.int32), jnp.full(shape, -1.0, prob.dtype), jnp.zeros(shape, bool), key)
    return lax.while_loop(cond_fn, body_fn, init)[1]


def _binomial(key, count, prob, shape, d):
    jnp, lax = _mods()
    count = _bcast(count, shape)
    prob = _bcast(prob, shape)
    p_lt_half = prob < 0.5
    q = lax.select(p_lt_half, prob, 1.0 - prob)
    count_nan_or_neg = jnp.isnan(count) | (count < 0.0)
    count_inf = jnp.isinf(count)
    q_is_nan = jnp.isnan(q)
    q_l_0 = q < 0.0
    q = lax.select(q_is_nan | q_l_0, jnp.full_like(q, 0.01), q)
    use_inversion = count_nan_or_neg | (count * q <= 10.0)
    count = jnp.floor(count)
    count_inv = lax.select(use_inversion, count, jnp.zeros_like(count))
    count_btrs = lax.select(use_inversion, jnp.full_like(count, 1e4), count)
    q_btrs = lax.select(use_inversion, jnp.full_like(q, 0.5), q)
    max_iters = int(min(np.iinfo(np.int32).max, 2 ** 31 - 1))
    samples = lax.select(use_inversion, _binomial_inversion(key, count_inv, q, shape, max_iters),
                         _btrs(key, count_btrs, q_btrs, shape, max_iters))
    samples = jnp.astype(samples, d)
    invalid = q_l_0 | q_is_nan | count_nan_or_neg
    samples = lax.select(invalid, jnp.full_like(samples, np.nan), samples)
    samples = lax.select(count_inf & ~invalid, jnp.full_like(samples, np.inf), samples)
    return lax.select(p_lt_half | count_nan_or_neg | q_is_nan | count_inf, samples,
                      jnp.astype(count, d) - samples)


def _inexact_dtype(x):
    if _is_array(x):
        return x.dtype if dtypes.is_float(x.dtype) else _fdtype(None, "binomial")
    a = np.asarray(x)
    if a.dtype.kind == "f" and not isinstance(x, float):
        return dtypes.canonicalize(a.dtype)
    if a.dtype.kind not in "biuf":
        raise TypeError(f"binomial: parameters must be real numbers, got {a.dtype}")
    return _fdtype(None, "binomial")


def binomial(key, n, p, shape=None, dtype=None):
    """Binomial(n, p) samples as floats: inversion for n p <= 10, BTRS above."""
    key = _key(key, "binomial")
    d = _fdtype(dtype, "binomial")
    if shape is None:
        shape = tuple(np.broadcast_shapes(_shape_of(n), _shape_of(p)))
    else:
        shape = tuple(_rnd()._shape(shape))
        _check_shape("binomial", shape, _shape_of(n), _shape_of(p))
    pd = _inexact_dtype(p)
    prob = _param(p, pd, "binomial")
    count = _param(n, pd, "binomial")
    return _binomial(key, count, prob, shape, d)


def multinomial(key, n, p, *, shape=None, dtype=None, unroll=1):
    """Multinomial(n, p) counts along the last axis (p's), by jax's scan of conditional binomials."""
    jnp, lax = _mods()
    rnd = _rnd()
    key = _key(key, "multinomial")
    pd = _inexact_dtype(p)
    if _is_array(n) and dtypes.is_float(n.dtype) and n.dtype != pd:
        pd = np.promote_types(pd, n.dtype)
    d = _fdtype(dtype, "multinomial")
    p = _param(p, pd, "multinomial")
    n = _param(n, pd, "multinomial")
    if shape is None:
        shape = tuple(p.shape)
    else:
        shape = tuple(rnd._shape(shape))
    if len(shape) < 1:
        raise ValueError("multinomial: p must have at least one dimension (the outcomes)")
    n = jnp.broadcast_to(n, shape[:-1])
    p = jnp.broadcast_to(p, shape)

    def body(remainder, ratio_key):
        ratio, k = ratio_key
        count = binomial(k, remainder, jnp.clip(ratio, 0, 1), dtype=remainder.dtype)
        return remainder - count, count

    p = jnp.moveaxis(p, -1, 0)
    remaining = lax.cumsum(p, 0, reverse=True)
    ratios = p / jnp.where(remaining == 0.0, jnp.ones_like(remaining), remaining)
    keys = rnd.split(key, ratios.shape[0])
    _, counts = lax.scan(body, n, (ratios, keys), unroll=unroll)
    return jnp.astype(jnp.moveaxis(counts, 0, -1), d)


# ---- keys --------------------------------------------------------------------------
def key_dtype(impl_spec=None):
    """The dtype of podlet's key arrays for a PRNG implementation. podlet keys are raw
    threefry2x32 data, so this is uint32 (jax returns its typed key<fry> dtype)."""
    if impl_spec is not None:
        if isinstance(impl_spec, str):
            if impl_spec != "threefry2x32":
                raise ValueError(f'unrecognized PRNG implementation "{impl_spec}". Did you mean one of: '
                                 '"threefry2x32"? (podlet implements only threefry2x32)')
        else:
            raise TypeError(f"unrecognized type {type(impl_spec)} for specifying PRNG implementation.")
    return np.dtype(np.uint32)


__all__ = ["gamma", "loggamma", "random_gamma_p", "beta", "dirichlet", "chisquare", "f", "t", "cauchy",
           "lognormal", "pareto", "maxwell", "double_sided_maxwell", "weibull_min", "rayleigh", "wald",
           "triangular", "geometric", "generalized_normal", "ball", "poisson", "binomial", "multinomial",
           "key_dtype"]
