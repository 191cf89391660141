"""lax control flow (cond, switch, select_n, scan, fori_loop, while_loop, map,
associative_scan) against JAX and against the Python-unrolled program, with gradients,
eagerly, under jit, vmap and pmap; and JAX's errors."""
import numpy as np
import pytest

import jax
import jax.numpy as jnp

import podlet
import podlet.numpy as pnp
from podlet import lax as plax

rng = np.random.default_rng(1)


def randn(*s):
    return rng.standard_normal(s).astype(np.float32)


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=tol, atol=tol)


# ---- scan ----------------------------------------------------------------------------
def _rnn(lib, lax):
    def step(h, x, W, U):
        h = lib.tanh(x @ W + h @ U)
        return h, h.sum()

    def run(params, xs, h0):
        W, U = params
        hT, ys = lax.scan(lambda h, x: step(h, x, W, U), h0, xs)
        return (hT ** 2).sum() + ys.sum()
    return step, run


def test_scan_rnn_forward_and_grad_vs_jax_and_unrolled():
    W, U, xs, h0 = randn(3, 4) * 0.5, randn(4, 4) * 0.5, randn(7, 2, 3), randn(2, 4)
    _, prun = _rnn(pnp, plax)
    _, jrun = _rnn(jnp, jax.lax)
    close(prun((W, U), xs, h0), jrun((W, U), xs, h0), 1e-5)
    g = podlet.grad(prun)((W, U), xs, h0)
    gj = jax.grad(jrun)((W, U), xs, h0)
    close(g[0], gj[0], 1e-4)
    close(g[1], gj[1], 1e-4)
    # gradient wrt xs and h0 as well, under jit
    g2 = podlet.jit(podlet.grad(prun, argnums=(1, 2)))((W, U), xs, h0)
    gj2 = jax.grad(jrun, argnums=(1, 2))((W, U), xs, h0)
    close(g2[0], gj2[0], 1e-4)
    close(g2[1], gj2[1], 1e-4)

    # the Python-unrolled program gives the same gradients
    def unrolled(params, xs, h0):
        W, U = params
        h, tot = h0, 0.0
        for t in range(xs.shape[0]):
            h = pnp.tanh(xs[t] @ W + h @ U)
            tot = tot + h.sum()
        return (h ** 2).sum() + tot
    gu = podlet.grad(unrolled)((W, U), xs, h0)
    close(g[0], gu[0], 1e-5)
    close(g[1], gu[1], 1e-5)


def test_scan_reverse_pytrees_and_xs_none():
    xs = {"a": randn(5, 2), "b": randn(5)}
    init = (np.float32(0.0), np.zeros(2, np.float32))

    def f(lib):
        def body(c, x):
            s, v = c
            return (s + x["b"], v * 0.5 + x["a"]), {"o": v.sum() + s, "p": x["a"] * 2}
        return body
    for rev in (False, True):
        got = plax.scan(f(pnp), init, xs, reverse=rev)
        want = jax.lax.scan(f(jnp), init, xs, reverse=rev)
        for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
            close(g, w)
    c, ys = plax.scan(lambda c, _: (c + 1.0, c * 2.0), np.float32(1.0), None, length=4)
    close(c, 5.0)
    close(ys, [2, 4, 6, 8])


def test_scan_closure_over_tracer_and_jit_no_retrace_per_step():
    calls = []

    def body(c, x):
        calls.append(1)
        return c * x, c

    def f(xs, k):
        return plax.scan(lambda c, x: body(c * k, x), np.float32(1.0), xs)

    xs = randn(50)
    c, ys = podlet.jit(f)(xs, np.float32(0.9))
    assert len(calls) == 1  # traced once, not once per iteration
    cj, ysj = jax.lax.scan(lambda c, x: (c * 0.9 * x, c * 0.9), np.float32(1.0), xs)
    close(c, cj)
    close(ys, ysj)


def test_scan_carry_type_error():
    with pytest.raises(TypeError, match="carry"):
        plax.scan(lambda c, x: (c.astype(np.int32), x), np.float32(0), randn(3))
    with pytest.raises(ValueError, match="length"):
        plax.scan(lambda c, x: (c, x), 0.0, randn(3), length=4)


def test_vmap_of_scan_and_scan_of_vmap():
    xs = randn(3, 6, 2)  # batch of sequences
    f = lambda lib, lax: (lambda s: lax.scan(lambda c, x: (c * 0.9 + x, (c * x).sum()), lib.zeros(2), s))
    got = podlet.vmap(f(pnp, plax))(xs)
    want = jax.vmap(f(jnp, jax.lax))(xs)
    close(got[0], want[0])
    close(got[1], want[1])
    # batched carry init only (xs unbatched): the carry becomes batched
    init = randn(4, 2)
    g2 = podlet.vmap(lambda c0: plax.scan(lambda c, x: (c + x, c), c0, xs[0]))(init)
    w2 = jax.vmap(lambda c0: jax.lax.scan(lambda c, x: (c + x, c), c0, xs[0]))(init)
    close(g2[0], w2[0])
    close(g2[1], w2[1])


def test_scan_under_pmap():
    n = podlet.local_device_count()
    xs = randn(n, 5, 3)
    got = podlet.pmap(lambda s: plax.scan(lambda c, x: (c + x, c.sum()), pnp.zeros(3), s))(xs)
    want = jax.vmap(lambda s: jax.lax.scan(lambda c, x: (c + x, c.sum()), jnp.zeros(3), s))(xs)
    close(got[0], want[0])
    close(got[1], want[1])


def test_collectives_inside_bodies_under_pmap():
    # The replicas run such bodies in lockstep (scan: per iteration), so psum / pmean
    # inside a scan, a checkpoint, a custom_vjp, a cond or a while_loop see every
    # replica; oracle: jax.vmap with the same axis_name.
    n = podlet.local_device_count()
    xs = randn(n, 4, 3)
    w = randn(3)

    def scan_fn(lib, lx, ckpt):
        def f(w, s):
            def body(c, x):
                t = lx.psum(x * w, "i")
                return c + t, lx.pmean(lib.tanh(x * c), "i")
            c, ys = lx.scan(ckpt(body), lib.zeros(3), s)
            return (c ** 2).sum() + (ys * ys).sum()
        return f
    for ckpt_p, ckpt_j in ((lambda f: f, lambda f: f), (podlet.checkpoint, jax.checkpoint)):
        got = podlet.pmap(scan_fn(pnp, plax, ckpt_p), axis_name="i", in_axes=(None, 0))(w, xs)
        want = jax.vmap(scan_fn(jnp, jax.lax, ckpt_j), axis_name="i", in_axes=(None, 0))(w, xs)
        close(got, want, 1e-5)
        g = podlet.pmap(podlet.grad(scan_fn(pnp, plax, ckpt_p)), axis_name="i", in_axes=(None, 0))(w, xs)
        gj = jax.vmap(jax.grad(scan_fn(jnp, jax.lax, ckpt_j)), axis_name="i", in_axes=(None, 0))(w, xs)
        close(g, gj, 1e-4)

    # cond with the same index on every replica; a per-replica index is a clear error
    def cond_fn(lib, lx):
        return lambda k, x: lx.cond(k > 0, lambda v: lx.psum(v, "i") * 2.0, lambda v: v - lx.pmean(v, "i"), x)
    for k in (np.int32(1), np.int32(0)):
        got = podlet.pmap(cond_fn(pnp, plax), axis_name="i", in_axes=(None, 0))(k, xs[:, 0])
        want = jax.vmap(cond_fn(jnp, jax.lax), axis_name="i", in_axes=(None, 0))(k, xs[:, 0])
        close(got, want)
    if n > 1:
        with pytest.raises(ValueError, match="differs between replicas"):
            podlet.pmap(cond_fn(pnp, plax), axis_name="i")(np.arange(n, dtype=np.int32), xs[:, 0])

    # while_loop whose predicate is made equal across replicas with pmax
    def while_fn(lib, lx):
        def f(x):
            return lx.while_loop(lambda c: lx.pmax(c[0], "i") < 3, lambda c: (c[0] + 1, c[1] + lx.psum(c[1], "i")),
                                 (lib.int32(0), x))
        return f
    got = podlet.pmap(while_fn(pnp, plax), axis_name="i")(xs[:, 0])
    want = jax.vmap(while_fn(jnp, jax.lax), axis_name="i")(xs[:, 0])
    close(got[1], want[1], 1e-5)

    # custom_vjp whose primal holds a collective
    @podlet.custom_vjp
    def centred(x):
        return x - plax.pmean(x, "i")
    centred.defvjp(lambda x: (centred(x), None), lambda _, g: (g - plax.pmean(g, "i"),))
    got = podlet.pmap(lambda x: centred(x) * 3.0, axis_name="i")(xs[:, 0])
    want = jax.vmap(lambda x: (x - jax.lax.pmean(x, "i")) * 3.0, axis_name="i")(xs[:, 0])
    close(got, want)


def test_map_and_batch_size():
    xs = randn(7, 3)
    close(plax.map(lambda x: pnp.sin(x).sum(), xs), jax.lax.map(lambda x: jnp.sin(x).sum(), xs))
    close(plax.map(lambda x: pnp.sin(x).sum(), xs, batch_size=3), np.sin(xs).sum(1))


# ---- fori_loop / while_loop ----------------------------------------------------------
def test_fori_loop_static_is_differentiable():
    def f(lib, lax):
        return lambda x: lax.fori_loop(0, 5, lambda i, v: v * lib.cos(v) + i, x)
    x = randn(3)
    close(f(pnp, plax)(x), f(jnp, jax.lax)(x))
    g = podlet.grad(lambda x: f(pnp, plax)(x).sum())(x)
    gj = jax.grad(lambda x: f(jnp, jax.lax)(x).sum())(x)
    close(g, gj, 1e-4)


def test_fori_loop_dynamic_bounds_is_a_while_loop():
    f = podlet.jit(lambda n, x: plax.fori_loop(0, n, lambda i, v: v + i, x))
    close(f(np.int32(5), np.float32(1.0)), 11.0)
    with pytest.raises(podlet.PodletError, match="Reverse-mode differentiation does not work for lax.while_loop"):
        podlet.grad(lambda x, n: plax.fori_loop(0, n, lambda i, v: v * 2.0, x))(np.float32(1.0), np.int32(3))


def test_newton_while_loop():
    def sqrt_newton(lib, lax, a):
        def cond(s):
            x, i = s
            return (lib.abs(x * x - a) > 1e-5) & (i < 50)

        def body(s):
            x, i = s
            return 0.5 * (x + a / x), i + 1
        return lax.while_loop(cond, body, (a, 0))
    a = np.float32(7.0)
    got = sqrt_newton(pnp, plax, a)
    want = sqrt_newton(jnp, jax.lax, a)
    close(got[0], want[0])
    assert int(got[1]) == int(want[1])
    close(podlet.jit(lambda a: sqrt_newton(pnp, plax, a)[0])(a), np.sqrt(7.0))


def test_vmap_while_batched_predicate():
    a = np.array([2.0, 9.0, 100.0], np.float32)

    def count(lib, lax, x):
        return lax.while_loop(lambda s: s[0] > 1.0, lambda s: (s[0] / 2.0, s[1] + 1), (x, 0))
    got = podlet.vmap(lambda x: count(pnp, plax, x))(a)
    want = jax.vmap(lambda x: count(jnp, jax.lax, x))(a)
    close(got[0], want[0])
    assert np.array_equal(np.asarray(got[1]), np.asarray(want[1]))


def test_while_loop_errors():
    with pytest.raises(TypeError, match="boolean scalar"):
        plax.while_loop(lambda x: x, lambda x: x, np.float32(1.0))
    with pytest.raises(TypeError, match="carry"):
        plax.while_loop(lambda x: x < 3, lambda x: x.astype(np.float32), np.int32(0))


# ---- cond / switch / select_n ---------------------------------------------------------
def test_cond_under_jit_grad():
    def f(lib, lax):
        return lambda x, p: lax.cond(p > 0, lambda v: lib.sin(v) * p, lambda v: lib.cos(v) - p, x).sum()
    x = randn(4)
    for p in (np.float32(1.5), np.float32(-2.0)):
        close(podlet.jit(f(pnp, plax))(x, p), f(jnp, jax.lax)(x, p))
        g = podlet.jit(podlet.grad(f(pnp, plax), argnums=(0, 1)))(x, p)
        gj = jax.grad(f(jnp, jax.lax), argnums=(0, 1))(x, p)
        close(g[0], gj[0])
        close(g[1], gj[1])


def test_cond_type_mismatch_error():
    with pytest.raises(TypeError, match="identical types"):
        plax.cond(True, lambda: np.float32(1.0), lambda: np.zeros(2, np.float32))


def test_switch_and_clamping():
    branches = [lambda x: x + 1.0, lambda x: x * 10.0, lambda x: -x]
    jbr = branches
    x = randn(3)
    for i in (-3, 0, 1, 2, 7):
        close(plax.switch(i, branches, x), jax.lax.switch(i, jbr, x))
    f = podlet.jit(lambda i, x: plax.switch(i, branches, x))
    close(f(np.int32(1), x), x * 10)
    g = podlet.grad(lambda x, i: plax.switch(i, branches, x).sum())(x, np.int32(2))
    close(g, -np.ones(3))


def test_vmap_of_cond_batched_predicate():
    xs = randn(6)
    got = podlet.vmap(lambda v: plax.cond(v > 0, lambda u: u * 2.0, lambda u: u - 1.0, v))(xs)
    want = jax.vmap(lambda v: jax.lax.cond(v > 0, lambda u: u * 2.0, lambda u: u - 1.0, v))(xs)
    close(got, want)


def test_select_n():
    a, b, c = randn(4), randn(4), randn(4)
    w = np.array([0, 1, 2, 1], np.int32)
    close(plax.select_n(w, a, b, c), jax.lax.select_n(w, a, b, c))
    p = np.array([True, False, True, False])
    close(plax.select_n(p, a, b), jax.lax.select_n(p, a, b))


def test_associative_scan():
    x = randn(9, 2)
    close(plax.associative_scan(lambda a, b: a + b, x), jax.lax.associative_scan(jnp.add, x), 1e-5)
    close(plax.associative_scan(pnp.maximum, x, reverse=True), jax.lax.associative_scan(jnp.maximum, x, reverse=True))
    close(plax.associative_scan(lambda a, b: a * b, x, axis=1), jax.lax.associative_scan(jnp.multiply, x, axis=1))


def test_python_control_flow_on_tracer_still_errors():
    with pytest.raises(podlet.ConcretizationError):
        podlet.jit(lambda x: x if x > 0 else -x)(np.float32(1.0))


def test_scan_with_checkpointed_body_same_grads():
    W = randn(4, 4) * 0.5
    xs = randn(6, 4)

    def loss(W, body_wrap):
        body = body_wrap(lambda h, x: (pnp.tanh(h @ W + x), h.sum()))
        h, ys = plax.scan(body, pnp.zeros(4), xs)
        return (h ** 2).sum() + ys.sum()
    g_plain = podlet.grad(lambda W: loss(W, lambda f: f))(W)
    g_remat = podlet.grad(lambda W: loss(W, podlet.checkpoint))(W)
    close(g_plain, g_remat, 1e-6)
    gj = jax.grad(lambda W: (lambda r: (r[0] ** 2).sum() + r[1].sum())(
        jax.lax.scan(jax.checkpoint(lambda h, x: (jnp.tanh(h @ W + x), h.sum())), jnp.zeros(4), xs)))(W)
    close(g_remat, gj, 1e-5)


def test_tracer_leak_from_scan_body_is_a_clear_error():
    leaked = []

    def body(c, x):
        leaked.append(c)
        return c + x, None
    plax.scan(body, np.float32(0.0), randn(3))
    with pytest.raises(podlet.UnexpectedTracerError):
        pnp.sin(leaked[0])
