"""How a scan runs, checked against JAX and by the graphs podlet builds:

- the body's work that reads only constants and x_t (an RNN's input projection) runs
  once for every iteration before the loop (one stacked GEMM), with the same results;
- Graph.dce drops a scan's unused outputs and the body work only they need (the
  cotangent of xs nobody differentiates, a final carry nobody reads);
- the cotangents of jnp.split's pieces meet in one concatenate, not a pad and an add
  each (JAX's transpose of a split)."""
import numpy as np
import pytest

import jax
import jax.numpy as jnp

import podlet
import podlet.numpy as pnp
from podlet import _core
from podlet import lax as plax
from podlet import nn as pnn

rng = np.random.default_rng(7)


def randn(*s):
    return rng.standard_normal(s).astype(np.float32)


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=tol, atol=tol)


def lstm_loss(lib, lax, sigmoid):
    def loss(p, xs):
        Wx, Wh, b = p
        B, H = xs.shape[1], Wh.shape[0]

        def cell(carry, x):
            h, c = carry
            z = x @ Wx + h @ Wh + b
            i, f, g, o = lib.split(z, 4, axis=-1)
            c = sigmoid(f) * c + sigmoid(i) * lib.tanh(g)
            h = sigmoid(o) * lib.tanh(c)
            return (h, c), h
        h0 = lib.zeros((B, H), lib.float32)
        _, hs = lax.scan(cell, (h0, h0), xs)
        return (hs ** 2).mean()
    return loss


def lstm_case(T=9, B=3, D=5, H=4):
    return (randn(D, 4 * H) * 0.4, randn(H, 4 * H) * 0.4, randn(4 * H) * 0.1), randn(T, B, D)


def shaped_dots(fn):
    """{input shapes: calls} of the dot_general nodes fn runs (profile counters)."""
    _core.take_profile_detailed()
    _core.set_profiling(True, True)
    try:
        fn()
    finally:
        _core.set_profiling(False)
    rows = _core.take_profile_detailed()
    out = {}
    for key, e in rows.items():
        name = key[0]
        if name.startswith("dot_general"):
            out[name[len("dot_general "):]] = e[0]
    return out


# ---- hoisting the x_t-only work -------------------------------------------------------
def test_lstm_value_and_grad_vs_jax_eager_and_jit():
    p, xs = lstm_case()
    want = jax.value_and_grad(lstm_loss(jnp, jax.lax, jax.nn.sigmoid))(p, xs)
    f = lstm_loss(pnp, plax, pnn.sigmoid)
    for got in (podlet.value_and_grad(f)(p, xs), podlet.jit(podlet.value_and_grad(f))(p, xs)):
        close(got[0], want[0], 1e-5)
        for a, b in zip(got[1], want[1]):
            close(a, b, 1e-4)


def test_input_projection_runs_once_for_all_steps():
    T, B, D, H = 9, 3, 5, 4
    p, xs = lstm_case(T, B, D, H)
    f = podlet.jit(lstm_loss(pnp, plax, pnn.sigmoid))
    f(p, xs)
    dots = shaped_dots(lambda: f(p, xs))
    # x_t @ Wx: one call over the stacked xs, none per step; h @ Wh stays in the loop.
    assert dots.get(f"float32[{T},{B},{D}] float32[{D},{4 * H}]") == 1, dots
    assert f"float32[{B},{D}] float32[{D},{4 * H}]" not in dots, dots
    assert dots.get(f"float32[{B},{H}] float32[{H},{4 * H}]") == T, dots


def test_hoisted_work_with_constant_only_ancestors_conv_and_shared_values():
    # x_t-only work mixing constant-only nodes (W * 2), elementwise on x_t before the
    # contraction, a convolution of x_t, and a hoisted value that is also a ys output.
    W, U, K = randn(6, 4) * 0.3, randn(4, 4) * 0.3, randn(3, 3, 1, 2) * 0.3
    xs, imgs = randn(5, 2, 6), randn(5, 2, 4, 4, 1)

    def make(lib, lax):
        def run(W, U, K, xs, imgs):
            def body(h, inp):
                x, im = inp
                a = lib.sin(x) @ (W * 2.0)
                cv = lax.conv_general_dilated(im, K, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
                h = lib.tanh(a + h @ U + cv.mean(axis=(1, 2, 3))[:, None])
                return h, (a, h)
            hT, (aa, hs) = lax.scan(body, lib.zeros((2, 4)), (xs, imgs))
            return (hT ** 2).sum() + (aa * hs).sum()
        return run
    prun, jrun = make(pnp, plax), make(jnp, jax.lax)
    close(prun(W, U, K, xs, imgs), jrun(W, U, K, xs, imgs), 1e-4)
    close(podlet.jit(prun)(W, U, K, xs, imgs), jrun(W, U, K, xs, imgs), 1e-4)
    g = podlet.jit(podlet.grad(prun, argnums=(0, 1, 2, 3)))(W, U, K, xs, imgs)
    gj = jax.grad(jrun, argnums=(0, 1, 2, 3))(W, U, K, xs, imgs)
    for a, b in zip(g, gj):
        close(a, b, 2e-4)


def test_hoisting_under_vmap_and_reverse():
    W, U = randn(3, 4) * 0.5, randn(4, 4) * 0.5
    xs = randn(2, 6, 3)

    def make(lib, lax, rev):
        return lambda x: lax.scan(lambda h, xt: (lib.tanh(xt @ W + h @ U),) * 2, lib.zeros(4), x, reverse=rev)
    for rev in (False, True):
        got = podlet.vmap(make(pnp, plax, rev))(xs)
        want = jax.vmap(make(jnp, jax.lax, rev))(xs)
        close(got[0], want[0])
        close(got[1], want[1])


def test_no_hoisting_when_the_stacked_results_would_be_huge():
    # 1100 iterations x a [1, 65536] f32 projection = 288 MB stacked: over the 256 MiB
    # cap, so the projection stays in the loop (and the results stay right).
    T, N = 1100, 65536
    W = randn(1, N) * 0.1
    xs = randn(T, 1, 1)
    f = podlet.jit(lambda W, xs: plax.scan(lambda c, x: (c + (x @ W).sum(), None), np.float32(0), xs)[0])
    want = float((xs[:, 0, :] @ W).sum(axis=1).astype(np.float64).sum())
    dots = shaped_dots(lambda: f(W, xs))
    assert dots.get(f"float32[1,1] float32[1,{N}]") == T, dots
    assert f"float32[{T},1,1] float32[1,{N}]" not in dots, dots
    np.testing.assert_allclose(float(f(W, xs)), want, rtol=1e-4)


def test_same_bits_whatever_the_thread_count():
    p, xs = lstm_case(T=16, B=8, D=24, H=32)
    f = podlet.jit(podlet.value_and_grad(lstm_loss(pnp, plax, pnn.sigmoid)))
    n = _core.num_threads()
    try:
        _core.set_num_threads(1)
        one = f(p, xs)
        _core.set_num_threads(max(2, n))
        many = f(p, xs)
    finally:
        _core.set_num_threads(n)
    assert np.asarray(one[0]).tobytes() == np.asarray(many[0]).tobytes()
    for a, b in zip(one[1], many[1]):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


# ---- dead scan outputs ---------------------------------------------------------------
def grad_graph(f, *args, argnums=0):
    """The differentiated graph of f (forward + backward), after dce."""
    g = podlet.make_graph(f, *args)
    nin = len(g.inputs)
    wrt = [argnums] if isinstance(argnums, int) else list(argnums)
    v = g.vjp(wrt, [0])
    assert nin
    return v


def test_cotangent_of_xs_is_not_computed_when_not_asked_for():
    T, B, D, H = 6, 2, 5, 4
    p, xs = lstm_case(T, B, D, H)
    f = lambda Wx, Wh, b, xs: lstm_loss(pnp, plax, pnn.sigmoid)((Wx, Wh, b), xs)
    only_params = grad_graph(f, *p, xs, argnums=(0, 1, 2)).prim_counts(nested=True)
    with_xs = grad_graph(f, *p, xs, argnums=(0, 1, 2, 3)).prim_counts(nested=True)
    # dz_t @ Wx^T (the cotangent of x_t) is one dot_general more, only when xs is asked for
    assert with_xs["dot_general"] == only_params["dot_general"] + 1, (only_params, with_xs)
    g = podlet.jit(podlet.grad(f, argnums=(0, 1, 2, 3)))(*p, xs)
    gj = jax.grad(lambda Wx, Wh, b, xs: lstm_loss(jnp, jax.lax, jax.nn.sigmoid)((Wx, Wh, b), xs),
                  argnums=(0, 1, 2, 3))(*p, xs)
    for a, b in zip(g, gj):
        close(a, b, 1e-4)


def test_unused_ys_and_carries_are_dropped():
    W = randn(4, 4) * 0.5
    xs = randn(5, 4)

    def f(xs, keep):
        def body(carry, x):
            h, n = carry
            h = pnp.tanh(h @ W + x)
            return (h, n + 1.0), (pnp.exp(h), h @ W)
        (hT, nT), (e, hw) = plax.scan(body, (pnp.zeros(4), np.float32(0)), xs)
        return {"all": (hT, nT, e, hw), "hT": hT, "e": e}[keep]
    full = podlet.make_graph(lambda x: f(x, "all"), xs).prim_counts(nested=True)
    only_h = podlet.make_graph(lambda x: f(x, "hT"), xs).prim_counts(nested=True)
    only_e = podlet.make_graph(lambda x: f(x, "e"), xs).prim_counts(nested=True)
    assert full["exp"] == 1 and full["dot_general"] == 2
    # neither ys is read: exp and the second dot go; the counter carry n goes too
    assert "exp" not in only_h and only_h["dot_general"] == 1 and "add" in full
    assert only_h.get("add", 0) == full["add"] - 1
    assert only_e["exp"] == 1 and only_e["dot_general"] == 1
    got = podlet.jit(lambda x: f(x, "e"))(xs)
    want = jax.lax.scan(lambda h, x: (jnp.tanh(h @ W + x),) * 2, jnp.zeros(4), xs)[1]
    close(got, jnp.exp(want))


# ---- split's cotangent -----------------------------------------------------------------
def test_split_cotangent_is_one_concatenate():
    x = randn(3, 12)

    def f(lib):
        def g(x):
            a, b, c = lib.split(x, 3, axis=1)
            return (lib.sin(a) * lib.cos(c) + b ** 2).sum()
        return g
    v = grad_graph(f(pnp), x).prim_counts()
    assert "pad" not in v and v.get("concatenate") == 1, v
    close(podlet.grad(f(pnp))(x), jax.grad(f(jnp))(x))


@pytest.mark.parametrize("pieces", [
    [(0, 4), (4, 8)],            # a piece not read: zeros fill its range
    [(2, 5), (7, 12)],           # gaps at both ends and between
    [(0, 6), (3, 9)],            # overlapping: summed, not concatenated
    [(0, 12), (0, 12), (4, 8)],  # whole + whole + a middle piece
])
def test_slice_cotangents_with_gaps_and_overlaps(pieces):
    x = randn(2, 12)

    def f(lib):
        def g(x):
            tot = 0.0
            for k, (s, e) in enumerate(pieces):
                tot = tot + (lib.sin(x[:, s:e] * (k + 1))).sum()
            return tot
        return g
    close(podlet.grad(f(pnp))(x), jax.grad(f(jnp))(x))
    close(podlet.jit(podlet.grad(f(pnp)))(x), jax.grad(f(jnp))(x))
