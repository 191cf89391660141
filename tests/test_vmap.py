"""podlet.vmap against jax.vmap and against an explicit Python loop: in/out axes as ints,
None and pytrees, axis_size, nesting, vmap(grad) and grad(vmap), under jit and pmap,
collectives over a named vmap axis, and the error for a bad specification."""
import numpy as np
import pytest

import jax
import jax.numpy as jnp

import podlet
import podlet.numpy as pnp
from podlet import lax as plax

rng = np.random.default_rng(0)


def randn(*s):
    return rng.standard_normal(s).astype(np.float32)


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=tol, atol=tol)


def test_in_axes_none_and_tuple():
    x, w = randn(5, 3), randn(3, 4)
    got = podlet.vmap(lambda x, w: pnp.tanh(x @ w), in_axes=(0, None))(x, w)
    want = jax.vmap(lambda x, w: jnp.tanh(x @ w), in_axes=(0, None))(x, w)
    close(got, want)


def test_matches_explicit_loop_bitwise():
    x, y = randn(4, 6), randn(6, 4)
    f = lambda a, b: pnp.exp(a) * b.sum() - pnp.maximum(a, 0.5)
    got = np.asarray(podlet.vmap(f, in_axes=(0, 1))(x, y))
    loop = np.stack([np.asarray(f(podlet.numpy.asarray(x[i]), podlet.numpy.asarray(y[:, i]))) for i in range(4)])
    assert np.array_equal(got.view(np.uint32), loop.view(np.uint32))


@pytest.mark.parametrize("in_ax,out_ax", [(0, 0), (1, 0), (2, 1), (-1, -1), (0, 2)])
def test_in_out_axes(in_ax, out_ax):
    x = randn(3, 4, 5)
    f = lambda a: pnp.sin(a) * 2.0 + a.sum()
    jf = lambda a: jnp.sin(a) * 2.0 + a.sum()
    close(podlet.vmap(f, in_axes=in_ax, out_axes=out_ax)(x), jax.vmap(jf, in_axes=in_ax, out_axes=out_ax)(x))


def test_pytree_in_out_axes():
    p = {"a": randn(3, 2), "b": randn(2)}
    x = randn(3, 2)
    f = lambda p, x: {"s": p["a"] * x + p["b"], "t": (x.sum(), p["b"])}
    jf = lambda p, x: {"s": p["a"] * x + p["b"], "t": (x.sum(), p["b"])}
    ia = ({"a": 0, "b": None}, 0)
    oa = {"s": 1, "t": (0, None)}
    got = podlet.vmap(f, in_axes=ia, out_axes=oa)(p, x)
    want = jax.vmap(jf, in_axes=ia, out_axes=oa)(p, x)
    close(got["s"], want["s"])
    close(got["t"][0], want["t"][0])
    close(got["t"][1], want["t"][1])


def test_unbatched_output_broadcast_and_axis_size():
    c = randn(3)
    got = podlet.vmap(lambda: c * 2.0, in_axes=(), axis_size=4)()
    assert got.shape == (4, 3)
    close(got, np.broadcast_to(c * 2, (4, 3)))
    got2 = podlet.vmap(lambda x: c, in_axes=0)(randn(5, 2))
    assert got2.shape == (5, 3)


def test_jit_vmap_dot():
    a, b = randn(7, 3, 4), randn(7, 4, 2)
    got = podlet.jit(podlet.vmap(pnp.dot))(a, b)
    close(got, jax.jit(jax.vmap(jnp.dot))(a, b))


def test_dot_one_side_batched_with_batch_dims():
    a, b = randn(2, 5, 3, 4), randn(5, 4, 6)
    f = lambda x, y: plax.dot_general(x, y, (((2,), (1,)), ((0,), (0,))))
    jf = lambda x, y: jax.lax.dot_general(x, y, (((2,), (1,)), ((0,), (0,))))
    close(podlet.vmap(f, in_axes=(0, None))(a, b), jax.vmap(jf, in_axes=(0, None))(a, b))
    bb = randn(3, 5, 4, 6)
    aa = randn(5, 3, 4)
    close(podlet.vmap(f, in_axes=(None, 0))(aa, bb), jax.vmap(jf, in_axes=(None, 0))(aa, bb))


def test_nested_vmap():
    x = randn(3, 4, 5)
    f = podlet.vmap(podlet.vmap(lambda v: (v * v).sum(), in_axes=0), in_axes=2, out_axes=1)
    jf = jax.vmap(jax.vmap(lambda v: (v * v).sum(), in_axes=0), in_axes=2, out_axes=1)
    close(f(x), jf(x))


def _mlp_loss(w, x, y):
    h = pnp.tanh(x @ w["w1"] + w["b1"])
    return ((h @ w["w2"] - y) ** 2).mean()


def _jmlp_loss(w, x, y):
    h = jnp.tanh(x @ w["w1"] + w["b1"])
    return ((h @ w["w2"] - y) ** 2).mean()


def test_per_example_gradients():
    w = {"w1": randn(6, 8), "b1": randn(8), "w2": randn(8, 2)}
    x, y = randn(10, 6), randn(10, 2)
    got = podlet.jit(podlet.vmap(podlet.grad(_mlp_loss), in_axes=(None, 0, 0)))(w, x, y)
    want = jax.vmap(jax.grad(_jmlp_loss), in_axes=(None, 0, 0))(w, x, y)
    for k in w:
        assert got[k].shape == (10,) + w[k].shape
        close(got[k], want[k], 1e-5)
    # per-example gradients equal a loop of single-example gradients
    for i in (0, 7):
        gi = podlet.grad(_mlp_loss)(w, x[i], y[i])
        close(got["w1"][i], gi["w1"], 1e-6)


def test_grad_of_vmap():
    w = randn(4, 3)
    x = randn(6, 4)
    got = podlet.grad(lambda w: podlet.vmap(lambda xi: pnp.tanh(xi @ w).sum())(x).sum())(w)
    want = jax.grad(lambda w: jax.vmap(lambda xi: jnp.tanh(xi @ w).sum())(x).sum())(w)
    close(got, want)


def test_vmap_reductions_and_structural():
    x = randn(4, 3, 5)
    f = lambda a: (a.max(axis=0), pnp.transpose(a)[1:, ::2].reshape(-1), pnp.concatenate([a, a[:1]], 0),
                   pnp.argmax(a, axis=-1), pnp.cumsum(a, axis=1), pnp.pad(a, ((1, 0), (0, 2))))
    jf = lambda a: (a.max(axis=0), jnp.transpose(a)[1:, ::2].reshape(-1), jnp.concatenate([a, a[:1]], 0),
                    jnp.argmax(a, axis=-1), jnp.cumsum(a, axis=1), jnp.pad(a, ((1, 0), (0, 2))))
    for g, w in zip(podlet.vmap(f)(x), jax.vmap(jf)(x)):
        close(g, w)


def test_vmap_conv_lhs_rhs_and_both():
    x = randn(3, 2, 6, 6, 4)
    w = randn(3, 3, 3, 4, 5)
    f = lambda x, w: plax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    jf = lambda x, w: jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    for ia in [(0, None), (None, 0), (0, 0)]:
        xs = x if ia[0] == 0 else x[0]
        ws = w if ia[1] == 0 else w[0]
        close(podlet.vmap(f, in_axes=ia)(xs, ws), jax.vmap(jf, in_axes=ia)(xs, ws), 1e-4)


def test_collective_over_named_vmap_axis():
    x = randn(5, 3)
    got = podlet.vmap(lambda a: a - plax.pmean(a, "i"), axis_name="i")(x)
    want = jax.vmap(lambda a: a - jax.lax.pmean(a, "i"), axis_name="i")(x)
    close(got, want)


def test_vmap_inside_pmap():
    n = podlet.local_device_count()
    x = randn(n, 3, 4)
    got = podlet.pmap(podlet.vmap(lambda a: pnp.tanh(a) * 2.0))(x)
    close(got, np.tanh(x) * 2.0)


def test_vmap_thread_count_bitwise():
    w = {"w1": randn(6, 8), "b1": randn(8), "w2": randn(8, 2)}
    x, y = randn(16, 6), randn(16, 2)
    f = podlet.jit(podlet.vmap(podlet.grad(_mlp_loss), in_axes=(None, 0, 0)))
    old = podlet._core.num_threads()
    try:
        podlet._core.set_num_threads(1)
        a = f(w, x, y)
        podlet._core.set_num_threads(2)
        b = f(w, x, y)
    finally:
        podlet._core.set_num_threads(old)
    for k in w:
        assert np.array_equal(np.asarray(a[k]), np.asarray(b[k]))


def test_errors():
    x = randn(3, 4)
    with pytest.raises(ValueError, match="inconsistent sizes"):
        podlet.vmap(lambda a, b: a + b)(x, randn(4, 4))
    with pytest.raises(ValueError, match="at least one non-None"):
        podlet.vmap(lambda a: a, in_axes=None)(x)
    with pytest.raises(ValueError, match="out_axes is None"):
        podlet.vmap(lambda a: a, out_axes=None)(x)
    with pytest.raises(ValueError, match="rank"):
        podlet.vmap(lambda a: a, in_axes=2)(x)
