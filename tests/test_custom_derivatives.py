"""podlet.custom_vjp / podlet.custom_jvp against jax with identical definitions: eager,
under grad, jit, vmap, pmap, grad-of-grad and forward mode."""
import functools

import jax
import jax.numpy as jnp_jax
import numpy as np
import pytest

import podlet
import podlet.numpy as pnp


@pytest.fixture(autouse=True, scope="module")
def _x64():
    jax.config.update("jax_enable_x64", True)
    podlet.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", False)
    podlet.config.update("jax_enable_x64", False)


def _P(x):
    return podlet._core.Array.from_numpy(np.array(x, order="C", copy=True), copy=True)


def _close(got, want, rtol=1e-10, atol=1e-12):
    gl = jax.tree_util.tree_leaves(got)
    wl = jax.tree_util.tree_leaves(want)
    assert len(gl) == len(wl)
    for a, b in zip(gl, wl):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


# ---- definitions, written once per framework --------------------------------------
def clip_gradient_defs(jx, m):
    """JAX docs' clip_gradient: identity forward, gradient clipped to [lo, hi]."""
    @functools.partial(jx.custom_vjp, nondiff_argnums=(0, 1))
    def clip_gradient(lo, hi, x):
        return x

    def fwd(lo, hi, x):
        return x, None

    def bwd(lo, hi, _, g):
        return (m.clip(g, lo, hi),)

    clip_gradient.defvjp(fwd, bwd)
    return clip_gradient


def pytree_res_defs(jx, m):
    """Pytree args, outputs and residuals; None cotangent for the second argument."""
    @jx.custom_vjp
    def f(p, scale):
        return {"y": m.sin(p["a"]) * p["b"], "z": p["b"] ** 2}, scale * 0.0

    def fwd(p, scale):
        s, c = m.sin(p["a"]), m.cos(p["a"])
        return f(p, scale), {"sc": (s, c), "b": p["b"], "k": scale}

    def bwd(res, g):
        s, c = res["sc"]
        gy, gz = g[0]["y"], g[0]["z"]
        # deliberately scaled by k so the rule is distinguishable from autodiff
        return {"a": res["k"] * gy * c * res["b"], "b": gy * s + 2.0 * gz * res["b"]}, None

    f.defvjp(fwd, bwd)
    return f


def log1pexp_defs(jx, m):
    """JAX docs' numerically stable log1pexp."""
    @jx.custom_jvp
    def log1pexp(x):
        return m.log(1.0 + m.exp(x))

    @log1pexp.defjvp
    def log1pexp_jvp(primals, tangents):
        x, = primals
        x_dot, = tangents
        ans = log1pexp(x)
        ans_dot = (1 - 1 / (1 + m.exp(x))) * x_dot
        return ans, ans_dot

    return log1pexp


def safe_norm_defs(jx, m):
    """JAX docs' safe_norm: gradient 0 (not NaN) at the origin."""
    @jx.custom_jvp
    def safe_norm(x, threshold):
        return m.sqrt(m.sum(x * x))

    @safe_norm.defjvp
    def safe_norm_jvp(primals, tangents):
        x, threshold = primals
        x_dot, _ = tangents
        y = safe_norm(x, threshold)
        y_safe = m.maximum(y, threshold)
        return y, m.where(y > threshold, m.sum(x * x_dot) / y_safe, 0.0)

    return safe_norm


def defjvps_defs(jx, m):
    @jx.custom_jvp
    def f(x, y):
        return m.sin(x) * y

    f.defjvps(lambda x_dot, primal_out, x, y: 2.0 * m.cos(x) * x_dot * y,
              lambda y_dot, primal_out, x, y: m.sin(x) * y_dot)
    return f


def both(defs):
    return defs(podlet, pnp), defs(jax, jnp_jax)


# ---- custom_vjp -------------------------------------------------------------------
def test_clip_gradient():
    pc, jc = both(clip_gradient_defs)
    x = np.linspace(-3.0, 3.0, 7)

    def make(jx, m, c):
        return lambda x: m.sum(c(-0.5, 0.5, x) * x ** 2)
    got = podlet.grad(make(podlet, pnp, pc))(_P(x))
    want = jax.grad(make(jax, jnp_jax, jc))(x)
    _close(got, want)
    np.testing.assert_array_equal(np.asarray(pc(-0.5, 0.5, _P(x))), x)  # eager: the function itself
    # the clipped gradient differs from the true one: the rule was used
    assert np.abs(np.asarray(got) - 3 * x ** 2).max() > 1


def test_clip_gradient_under_jit_vmap_pmap():
    pc, jc = both(clip_gradient_defs)
    gp = podlet.grad(lambda x: pnp.sum(pc(-1.0, 1.0, pnp.sin(x)) * x))
    gj = jax.grad(lambda x: jnp_jax.sum(jc(-1.0, 1.0, jnp_jax.sin(x)) * x))
    x = np.linspace(-2.0, 2.0, 5)
    _close(podlet.jit(gp)(_P(x)), gj(x))
    xs = np.stack([x, 2 * x, -x])
    _close(podlet.vmap(gp)(_P(xs)), jax.vmap(gj)(xs))
    _close(podlet.jit(podlet.vmap(gp))(_P(xs)), jax.vmap(gj)(xs))
    n = podlet.local_device_count()
    xp = np.stack([x * (i + 1) / n for i in range(n)])
    _close(podlet.pmap(gp)(_P(xp)), jax.vmap(gj)(xp))
    # forward under vmap (the batched node's kernel)
    _close(podlet.jit(podlet.vmap(lambda v: pc(-1.0, 1.0, v * 2.0)))(_P(xs)), xs * 2.0)


def test_custom_vjp_pytrees_residuals_and_none():
    pf, jf = both(pytree_res_defs)
    rng = np.random.default_rng(0)
    p = {"a": rng.standard_normal(4), "b": rng.standard_normal(4)}

    def loss(jx, m, f):
        def l(p, s):
            out, zero = f(p, s)
            return m.sum(out["y"] * 1.5) + m.sum(m.sin(out["z"])) + zero
        return l
    got = podlet.grad(loss(podlet, pnp, pf), argnums=(0, 1))(podlet.tree_util.tree_map(_P, p), 3.0)
    want = jax.grad(loss(jax, jnp_jax, jf), argnums=(0, 1))(p, 3.0)
    _close(got, want)
    # values too
    _close(podlet.jit(pf)(podlet.tree_util.tree_map(_P, p), 3.0), jf(p, 3.0))


def test_custom_vjp_vjp_and_none_cotangent_for_whole_arg():
    @podlet.custom_vjp
    def f(x, y):
        return x * y

    f.defvjp(lambda x, y: (x * y, (x, y)), lambda r, g: (g * r[1] * 10.0, None))
    x, y = _P(np.array([1.0, 2.0])), _P(np.array([3.0, 4.0]))
    out, vjp_fn = podlet.vjp(f, x, y)
    gx, gy = vjp_fn(_P(np.ones(2)))
    np.testing.assert_allclose(np.asarray(gx), [30.0, 40.0])
    np.testing.assert_allclose(np.asarray(gy), [0.0, 0.0])


def test_custom_vjp_grad_of_grad():
    """grad of grad differentiates through fwd and bwd, as in JAX."""
    def defs(jx, m):
        @jx.custom_vjp
        def f(x):
            return m.sin(x)

        def fwd(x):
            return m.sin(x), (m.cos(x), x)

        def bwd(res, g):
            c, x = res
            return (g * c * x * x,)  # not the true derivative: second order shows it

        f.defvjp(fwd, bwd)
        return f
    pf, jf = both(defs)
    x = np.array(0.7)
    got = podlet.grad(podlet.grad(lambda x: pf(x) * 2.0))(_P(x))
    want = jax.grad(jax.grad(lambda x: jf(x) * 2.0))(x)
    np.testing.assert_allclose(float(got), float(want), rtol=1e-12)
    xs = np.linspace(0.1, 1.0, 3)
    got = podlet.jit(podlet.vmap(podlet.grad(podlet.grad(pf))))(_P(xs))
    want = jax.vmap(jax.grad(jax.grad(jf)))(xs)
    _close(got, want)
    # forward-over-reverse: jvp of the gradient differentiates bwd, fine in JAX too
    got = podlet.jvp(podlet.grad(pf), (_P(np.array(0.3)),), (_P(np.array(1.0)),))
    want = jax.jvp(jax.grad(jf), (0.3,), (1.0,))
    _close(got, want)


def test_custom_vjp_forward_mode_error():
    pc, _ = both(clip_gradient_defs)
    with pytest.raises(TypeError, match=r"can't apply forward-mode autodiff \(jvp\) to a custom_vjp function."):
        podlet.jvp(lambda x: pc(-1.0, 1.0, x), (_P(np.ones(2)),), (_P(np.ones(2)),))
    with pytest.raises(TypeError, match="custom_vjp function"):
        podlet.jacfwd(podlet.jit(lambda x: pc(-1.0, 1.0, x) * 2.0))(_P(np.ones(2)))


def test_custom_vjp_bwd_errors_like_jax():
    @podlet.custom_vjp
    def f(x):
        return x

    f.defvjp(lambda x: (x, None), lambda r, g: (g, g))
    with pytest.raises(TypeError, match="same container"):
        podlet.grad(f)(1.0)
    f.defvjp(lambda x: (x, None), lambda r, g: (pnp.ones(3),))
    with pytest.raises(ValueError, match="shapes do not match"):
        podlet.grad(f)(1.0)


def test_custom_vjp_closure_over_tracer():
    """A custom function closing over a traced value (e.g. a jit argument)."""
    @podlet.jit
    def run(x, w):
        @podlet.custom_vjp
        def f(x):
            return x * w

        f.defvjp(lambda x: (x * w, None), lambda r, g: (g * w * 100.0,))
        return podlet.grad(lambda x: pnp.sum(f(x)))(x)

    np.testing.assert_allclose(np.asarray(run(_P(np.ones(3)), _P(np.array(2.0)))), np.full(3, 200.0))


# ---- custom_jvp -------------------------------------------------------------------
@pytest.mark.parametrize("x", [-50.0, 0.3, 30.0, 1000.0])
def test_log1pexp(x):
    pf, jf = both(log1pexp_defs)
    x = _P(np.array(x))  # float64 (a Python float is weakly typed float32 in podlet)
    np.testing.assert_allclose(float(podlet.grad(pf)(x)), float(jax.grad(jf)(np.asarray(x))), rtol=1e-12)
    assert np.isfinite(float(podlet.grad(pf)(x)))
    got = podlet.jvp(pf, (x,), (2.0,))
    want = jax.jvp(jf, (np.asarray(x),), (2.0,))
    _close(got, want)


def test_log1pexp_jit_vmap_pmap_grad_of_grad():
    pf, jf = both(log1pexp_defs)
    xs = np.array([-3.0, 0.0, 2.0, 500.0])
    _close(podlet.jit(podlet.vmap(podlet.grad(pf)))(_P(xs)), jax.vmap(jax.grad(jf))(xs))
    _close(podlet.vmap(pf)(_P(xs)), jax.vmap(jf)(xs))
    _close(podlet.vmap(podlet.grad(podlet.grad(pf)))(_P(xs)), jax.vmap(jax.grad(jax.grad(jf)))(xs))
    n = podlet.local_device_count()
    xp = np.linspace(-2, 2, n)
    _close(podlet.pmap(podlet.grad(pf))(_P(xp)), jax.vmap(jax.grad(jf))(xp))
    _close(podlet.pmap(lambda v: pf(v) * 2.0)(_P(xp)), jax.vmap(lambda v: jf(v) * 2.0)(xp))  # the node's kernel
    _close(podlet.jit(lambda v: pf(v) + 1.0)(_P(xs)), jf(xs) + 1.0)
    _close(podlet.pmap(lambda v: podlet.jvp(pf, (v,), (v,)))(_P(xp)), jax.vmap(lambda v: jax.jvp(jf, (v,), (v,)))(xp))
    _close(podlet.hessian(lambda v: pnp.sum(pf(v)))(_P(xs[:3])), jax.hessian(lambda v: jnp_jax.sum(jf(v)))(xs[:3]))


def test_safe_norm():
    pf, jf = both(safe_norm_defs)
    for x in (np.zeros(3), np.array([3.0, 4.0, 0.0])):
        got = podlet.grad(pf)(_P(x), 0.5)
        want = jax.grad(jf)(x, 0.5)
        _close(got, want)
        assert np.all(np.isfinite(np.asarray(got)))
        _close(podlet.jit(podlet.grad(pf))(_P(x), 0.5), want)
        _close(podlet.jacfwd(pf)(_P(x), 0.5), jax.jacfwd(jf)(x, 0.5))
    xs = np.array([[0.0, 0.0, 0.0], [1.0, 2.0, 2.0]])
    _close(podlet.vmap(podlet.grad(pf), in_axes=(0, None))(_P(xs), 0.5),
           jax.vmap(jax.grad(jf), in_axes=(0, None))(xs, 0.5))


def test_defjvps():
    pf, jf = both(defjvps_defs)
    x, y = np.linspace(0, 1, 3), np.linspace(1, 2, 3)
    got = podlet.jvp(pf, (_P(x), _P(y)), (_P(np.ones(3)), _P(np.full(3, 0.5))))
    want = jax.jvp(jf, (x, y), (np.ones(3), np.full(3, 0.5)))
    _close(got, want)
    loss_p = lambda a, b: pnp.sum(pf(a, b))
    loss_j = lambda a, b: jnp_jax.sum(jf(a, b))
    _close(podlet.grad(loss_p, argnums=(0, 1))(_P(x), _P(y)), jax.grad(loss_j, argnums=(0, 1))(x, y))


def test_custom_jvp_nondiff_argnums():
    def defs(jx, m):
        @functools.partial(jx.custom_jvp, nondiff_argnums=(0,))
        def app(f, x):
            return f(x)

        @app.defjvp
        def app_jvp(f, primals, tangents):
            x, = primals
            t, = tangents
            return app(f, x), 3.0 * t  # deliberately not f'
        return app
    pf, jf = both(defs)
    got = podlet.grad(lambda x: pf(pnp.sin, x))(_P(np.array(0.4)))
    want = jax.grad(lambda x: jf(jnp_jax.sin, x))(0.4)
    np.testing.assert_allclose(float(got), float(want))
    np.testing.assert_allclose(float(got), 3.0)


def test_custom_jvp_inside_jvp_of_grad():
    pf, jf = both(log1pexp_defs)
    got = podlet.jvp(podlet.grad(lambda x: pf(x) * x), (_P(np.array(0.5)),), (1.0,))
    want = jax.jvp(jax.grad(lambda x: jf(x) * x), (0.5,), (1.0,))
    _close(got, want)


def test_flops_of_custom_node():
    pf, _ = both(log1pexp_defs)
    g = podlet.make_graph(podlet.grad(lambda x: pnp.sum(pf(x))), _P(np.ones(4)))
    assert g.flops() >= 0
    g2 = podlet.make_graph(lambda x: pf(x), _P(np.ones(1000)))
    assert "custom_jvp_call" in g2.prim_counts()
    assert g2.flops() > 0
