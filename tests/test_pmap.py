"""pmap and the collectives, against NumPy (forward) and JAX's transposition rules
(gradients; the same values JAX's pmap gives on 8 forced host devices)."""
import ml_dtypes
import numpy as np
import pytest

import podlet as jax
import podlet.numpy as jnp
from podlet import lax, jax_utils

N = jax.local_device_count()


def test_default_device_count():
    assert N == 8
    assert jax.device_count() == 8 and jax.process_count() == 1 and jax.process_index() == 0
    assert [d.id for d in jax.devices()] == list(range(8))
    assert len(jax.local_devices()) == 8


@pytest.mark.parametrize("dtype", [np.float32, np.float64, ml_dtypes.bfloat16, np.int32])
def test_reductions_match_numpy(dtype):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((N, 5, 3)) * 10).astype(dtype)
    f = jax.pmap(lambda v: (lax.psum(v, "i"), lax.pmax(v, "i"), lax.pmin(v, "i")), axis_name="i")
    s, mx, mn = f(x)
    if dtype == np.float64:  # canonicalised to float32 unless x64 is enabled, as in JAX
        x = x.astype(np.float32)
    acc = x.astype(np.float64) if dtype != np.int32 else x
    want_sum = acc[0].copy()
    for r in range(1, N):  # replica order, as podlet promises
        want_sum = want_sum + acc[r]
        if dtype == np.float32:
            want_sum = want_sum.astype(np.float32)
    for r in range(N):
        np.testing.assert_allclose(np.asarray(s)[r].astype(np.float64), np.asarray(want_sum, np.float64),
                                   rtol=1e-2 if dtype == ml_dtypes.bfloat16 else 1e-6)
        np.testing.assert_array_equal(np.asarray(mx)[r], x.max(0))
        np.testing.assert_array_equal(np.asarray(mn)[r], x.min(0))


def test_pmean_is_psum_over_n():
    x = np.random.default_rng(1).standard_normal((N, 7)).astype(np.float32)
    m = jax.pmap(lambda v: lax.pmean(v, "i"), axis_name="i")(x)
    s = x[0].copy()
    for r in range(1, N):
        s = (s + x[r]).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(m)[3], (s / np.float32(N)).astype(np.float32))


def test_pmean_of_widened_bf16_equals_widening_first():
    """pmean/psum of x.astype(float32) with x bfloat16 (a bf16 model's gradients) reads the
    bf16 buffers and widens while reducing; the bits are those of converting first (here
    the converted value has a second use, so it is materialised)."""
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((N, 6, 5)) * 3).astype(ml_dtypes.bfloat16)
    x[0, 0, :4] = [np.inf, np.nan, 1e-40, -0.0]  # inf, NaN, a denormal (in f32), -0
    x[3, 1, 0] = -np.inf

    def folded(v):
        w = v.astype(jnp.float32)
        return lax.pmean(w, "i"), lax.psum(v.astype(jnp.float32), "i")

    def materialised(v):
        w = v.astype(jnp.float32)
        return lax.pmean(w, "i"), lax.psum(w, "i"), w

    try:
        for n in (N, 1):
            jax.config.update("num_devices", n)
            a, b = jax.pmap(folded, axis_name="i")(x[:n])
            c, d, w = jax.pmap(materialised, axis_name="i")(x[:n])
            assert np.asarray(w).dtype == np.float32
            assert np.asarray(a).tobytes() == np.asarray(c).tobytes()
            assert np.asarray(b).tobytes() == np.asarray(d).tobytes()
    finally:
        jax.config.update("num_devices", N)
    want = x.astype(np.float32)[0].copy()
    for r in range(1, N):
        want = (want + x.astype(np.float32)[r]).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(jax.pmap(folded, axis_name="i")(x)[1])[0], want)


def test_reduced_results_are_replicated_and_stored_once():
    x = np.ones((N, 4), np.float32)
    out, local = jax.pmap(lambda v: (lax.psum(v, "i"), v * 2), axis_name="i")(x)
    assert isinstance(out, jax.ReplicatedArray) and out.shape == (N, 4)
    assert not isinstance(local, jax.ReplicatedArray) and local.shape == (N, 4)
    np.testing.assert_array_equal(np.asarray(out), np.full((N, 4), N, np.float32))
    assert jax_utils.unreplicate(out) is out[0]


def test_axis_index_all_gather_ppermute():
    x = np.arange(N * 3, dtype=np.float32).reshape(N, 3)

    def f(v):
        return (lax.axis_index("i"), lax.all_gather(v, "i"), lax.all_gather(v, "i", axis=1),
                lax.all_gather(v, "i", tiled=True), lax.ppermute(v, "i", [(k, (k + 1) % N) for k in range(N - 1)]))
    idx, g0, g1, gt, pp = jax.pmap(f, axis_name="i")(x)
    np.testing.assert_array_equal(np.asarray(idx), np.arange(N))
    for r in range(N):
        np.testing.assert_array_equal(np.asarray(g0)[r], x)
        np.testing.assert_array_equal(np.asarray(g1)[r], x.T)
        np.testing.assert_array_equal(np.asarray(gt)[r], x.reshape(-1))
    want = np.zeros_like(x)
    want[1:] = x[:-1]  # replica 0 receives from nobody: zeros, as in JAX
    np.testing.assert_array_equal(np.asarray(pp), want)


def test_psum_scatter():
    x = np.arange(N * N * 2, dtype=np.float32).reshape(N, N, 2)
    out = jax.pmap(lambda v: lax.psum_scatter(v, "i"), axis_name="i")(x)
    np.testing.assert_array_equal(np.asarray(out), x.sum(0))


def test_psum_of_python_constant_counts_devices():
    out = jax.pmap(lambda v: lax.psum(1, "i"), axis_name="i")(np.zeros((N, 1)))
    np.testing.assert_array_equal(np.asarray(out), np.full(N, N))


# Gradients through collectives: each collective's transpose is the one JAX uses
# (psum -> psum, pmean -> pmean, all_gather -> psum + own slot, ppermute -> inverse
# permutation); the expected values below are what jax.pmap returns on 8 host devices.
def test_grad_through_pmean_is_local_gradient():
    x = np.arange(N * 3, dtype=np.float32).reshape(N, 3)
    g = jax.pmap(jax.grad(lambda w, xb: lax.pmean(jnp.sum((xb * w) ** 2), "i")), axis_name="i")(
        jnp.ones((N, 3)), x)
    np.testing.assert_allclose(np.asarray(g), 2 * x ** 2)


def test_grad_through_all_gather_and_ppermute():
    x = np.arange(N * 3, dtype=np.float32).reshape(N, 3)
    w = jnp.ones((N, 3))
    g = jax.pmap(jax.grad(lambda w, xb: jnp.sum(lax.all_gather(xb * w, "i") ** 2)), axis_name="i")(w, x)
    np.testing.assert_allclose(np.asarray(g), N * 2 * x ** 2)
    perm = [(k, (k + 1) % N) for k in range(N)]
    g = jax.pmap(jax.grad(lambda w, xb: jnp.sum(lax.ppermute(xb * w, "i", perm) * jnp.arange(3.0))),
                 axis_name="i")(w, x)
    np.testing.assert_allclose(np.asarray(g), x * np.arange(3.0))


def test_in_axes_none_and_static_args():
    x = np.arange(N * 2, dtype=np.float32).reshape(N, 2)
    b = np.array([10.0, 20.0], np.float32)
    f = jax.pmap(lambda v, c, k: v * k + c, axis_name="i", in_axes=(0, None, None), static_broadcasted_argnums=2)
    np.testing.assert_array_equal(np.asarray(f(x, b, 3)), x * 3 + b)
    assert f.trace_count == 1
    f(x, b, 3)
    assert f.trace_count == 1
    f(x, b, 4)
    assert f.trace_count == 2


def test_replicate_roundtrip_and_shard():
    tree = {"w": np.arange(6.0, dtype=np.float32).reshape(2, 3), "step": 0}
    rep = jax_utils.replicate(tree)
    assert rep["w"].shape == (N, 2, 3)
    back = jax_utils.unreplicate(rep)
    np.testing.assert_array_equal(np.asarray(back["w"]), tree["w"])
    batch = {"image": np.zeros((32, 5)), "label": np.zeros(32)}
    sh = jax.shard(batch)
    assert sh["image"].shape == (N, 32 // N, 5) and sh["label"].shape == (N, 32 // N)
    with pytest.raises(ValueError, match="not divisible"):
        jax.shard(np.zeros((10, 2)))
    items = list(jax_utils.prefetch_to_device(iter([{"a": np.ones(2)}] * 3), 2))
    assert len(items) == 3 and isinstance(items[0]["a"], jax.Array)


def test_replicated_input_runs_once_and_matches_materialised():
    w = jax_utils.replicate(jnp.arange(4.0))
    x = np.random.default_rng(2).standard_normal((N, 4)).astype(np.float32)
    f = jax.pmap(lambda w, x: (w * 2.0 + 1.0, w * x), axis_name="i")
    a, b = f(w, x)
    a2, b2 = f(np.asarray(w), x)  # the same values, not known to be replicated
    assert isinstance(a, jax.ReplicatedArray) and not isinstance(a2, jax.ReplicatedArray)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(a2))
    np.testing.assert_array_equal(np.asarray(b), np.asarray(b2))


def test_errors_name_the_problem():
    with pytest.raises(NameError, match="unbound axis name: 'i'"):
        lax.psum(np.ones(3), "i")
    f = jax.pmap(lambda v: lax.psum(v, "j"), axis_name="i")
    with pytest.raises(NameError, match=r"unbound axis name: 'j'.*axes in scope: \['i'\]"):
        f(np.ones((N, 2)))
    g = jax.pmap(lambda v: v + 1, axis_name="i")
    with pytest.raises(jax.ShapeError, match=r"leading axis 4 must equal the local device count 8"):
        g(np.ones((4, 2)))
    with pytest.raises(jax.ShapeError, match="is a scalar"):
        g(1.0)
    with pytest.raises(jax.DTypeError, match="pmean needs a floating-point operand"):
        jax.pmap(lambda v: lax.pmean(v, "i"), axis_name="i")(np.ones((N, 2), np.int32))
    with pytest.raises(ValueError, match="is a source twice"):
        jax.pmap(lambda v: lax.ppermute(v, "i", [(0, 1), (0, 2)]), axis_name="i")(np.ones((N, 2)))
    with pytest.raises(jax.PodletError, match="can only run inside pmap"):
        # A graph holding a collective cannot run without replicas.
        jax.numpy  # noqa: B018
        from podlet import _core
        gr = _core.Graph()
        v = gr.add_input("float32", [2])
        (o, _, _), = gr.add("psum", [v], {"axis_name": "i", "axis_size": 8})
        gr.outputs = [o]
        gr.run([jax.numpy.ones(2)])


def test_num_devices_config():
    try:
        jax.config.update("num_devices", 4)
        assert jax.local_device_count() == 4 and jax.config.num_devices == 4
        out = jax.pmap(lambda v: lax.psum(v, "i"), axis_name="i")(np.ones((4, 2), np.float32))
        np.testing.assert_array_equal(np.asarray(out), np.full((4, 2), 4.0))
        with pytest.raises(ValueError, match="num_devices must be >= 1"):
            jax.config.update("num_devices", 0)
    finally:
        jax.config.update("num_devices", 8)


def test_thread_count_does_not_change_bits():
    x = np.random.default_rng(3).standard_normal((N, 64, 33)).astype(np.float32)
    f = jax.pmap(lambda v: lax.pmean(jnp.tanh(v) @ v.T, "i"), axis_name="i")
    old = jax.config.num_threads
    try:
        jax.config.update("num_threads", 1)
        a = np.asarray(f(x))
        jax.config.update("num_threads", 2)
        b = np.asarray(f(x))
    finally:
        jax.config.update("num_threads", old)
    np.testing.assert_array_equal(a, b)
