"""jit with a data-parallel in_shardings splits the work (cpp/podlet/ir/partition.cc):
each of the mesh's n devices computes its block of the batch on the pmap executor.

The oracle is the same function under a plain jit (the global computation): values
agree up to the order of floating-point sums (a psum of per-device partial sums). The
partition report says which primitives could not be split and gathered their inputs;
every rule of the pass is reached by a case below, and every case that must fall back
is checked to compute the right values anyway.
"""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import podlet
import podlet.numpy as jnp
import podlet.optim as optax
from podlet import lax, nn
from podlet.sharding import Mesh, NamedSharding, PartitionSpec as P

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(autouse=True)
def eight_devices():
    podlet.config.update("num_devices", 8)
    yield
    podlet.config.update("num_devices", 8)


def _mesh(n):
    return Mesh(np.array(podlet.devices()[:n]), ("data",))


def _shardings(n):
    m = _mesh(n)
    return NamedSharding(m, P()), NamedSharding(m, P("data"))


def _close(a, b, rtol=1e-5):
    for u, v in zip(podlet.tree_util.tree_leaves(a), podlet.tree_util.tree_leaves(b)):
        u, v = np.asarray(u, np.float64), np.asarray(v, np.float64)
        assert u.shape == v.shape
        np.testing.assert_allclose(u, v, rtol=rtol, atol=rtol * (np.abs(v).max() + 1e-30))


# ---- whole training steps: nothing left unsplit ----------------------------------------
def _mlp():
    rs = np.random.RandomState(0)
    w = {"a": rs.normal(size=(8, 16)).astype(np.float32), "b": np.zeros(16, np.float32),
         "c": rs.normal(size=(16, 3)).astype(np.float32)}
    x, y = rs.normal(size=(32, 8)).astype(np.float32), rs.normal(size=(32, 3)).astype(np.float32)

    def step(w, x, y):
        def loss(w):
            return jnp.mean((jnp.tanh(x @ w["a"] + w["b"]) @ w["c"] - y) ** 2)
        l, g = podlet.value_and_grad(loss)(w)
        return l, podlet.tree_util.tree_map(lambda p, q: p - 0.1 * q, w, g)
    return step, (w, x, y)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_mlp_step_is_split(n):
    step, args = _mlp()
    rep, data = _shardings(n)
    f = podlet.jit(step, in_shardings=(rep, data, data))
    rpt = f.partition_report(*args)
    assert rpt["devices"] == n and rpt["unsplit"] == {}
    per_device, total = rpt["flops"]
    assert per_device < 1.3 * total / n  # the matmuls are split, only the update is not
    _close(f(*args), podlet.jit(step)(*args), rtol=1e-6)


class _CNN(nn.Module):
    @nn.compact
    def __call__(self, x, train=True):
        x = nn.Conv(8, (3, 3), strides=2)(x)
        x = nn.BatchNorm(use_running_average=not train)(x)
        x = nn.relu(x)
        x = nn.max_pool(x, (2, 2), (2, 2), padding="SAME")
        x = nn.Conv(8, (3, 3))(x)
        x = nn.avg_pool(x, (2, 2), (2, 2))
        x = nn.Dropout(0.1, deterministic=not train)(x)
        return nn.Dense(5)(x.reshape((x.shape[0], -1)))


def test_cnn_batchnorm_dropout_adamw_step_is_split():
    m = _CNN()
    rs = np.random.RandomState(1)
    x = rs.normal(size=(8, 16, 16, 1)).astype(np.float32)
    y = rs.randint(0, 5, size=(8,)).astype(np.int32)
    v = m.init({"params": podlet.random.PRNGKey(0), "dropout": podlet.random.PRNGKey(1)}, x)
    tx = optax.adamw(1e-3)

    def step(params, bs, opt, x, y, key):
        def loss(p):
            logits, upd = m.apply({"params": p, "batch_stats": bs}, x, mutable=["batch_stats"],
                                  rngs={"dropout": key})
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), (upd, logits)
        (l, (upd, logits)), g = podlet.value_and_grad(loss, has_aux=True)(params)
        u, opt = tx.update(g, opt, params)
        return l, optax.apply_updates(params, u), upd["batch_stats"], opt, jnp.argmax(logits, -1)

    rep, data = _shardings(2)
    f = podlet.jit(step, in_shardings=(rep, rep, rep, data, data, rep))
    args = (v["params"], v["batch_stats"], tx.init(v["params"]), x, y, podlet.random.PRNGKey(2))
    assert f.partition_report(*args)["unsplit"] == {}
    out, want = f(*args), podlet.jit(step)(*args)
    _close(out, want, rtol=2e-5)
    np.testing.assert_array_equal(np.asarray(out[-1]), np.asarray(want[-1]))  # predictions


class _LM(nn.Module):
    @nn.compact
    def __call__(self, tokens):
        # shift right (pad + slice), embed, causal attention, LayerNorm, tied logits
        x = jnp.pad(tokens, ((0, 0), (1, 0)))[:, :-1]
        emb = nn.Embed(40, 16)
        h = emb(x)
        pos = self.param("pos", nn.initializers.normal(0.02), (1, tokens.shape[1], 16))
        h = jnp.concatenate([h[..., :8] + pos[..., :8], h[..., 8:]], axis=-1)
        mask = nn.make_causal_mask(tokens)
        h = h + nn.MultiHeadDotProductAttention(num_heads=2, qkv_features=16, deterministic=True)(nn.LayerNorm()(h), mask=mask)
        h = h + nn.Dense(16)(nn.gelu(nn.Dense(32)(nn.LayerNorm()(h))))
        return emb.attend(h)


def test_transformer_lm_step_is_split():
    m = _LM()
    rs = np.random.RandomState(2)
    tokens = rs.randint(1, 40, size=(8, 12)).astype(np.int32)
    params = m.init(podlet.random.PRNGKey(0), tokens)["params"]
    tx = optax.adam(1e-3)

    def step(params, opt, tokens):
        def loss(p):
            logits = m.apply({"params": p}, tokens)
            return optax.softmax_cross_entropy_with_integer_labels(logits, tokens).mean()
        l, g = podlet.value_and_grad(loss)(params)
        u, opt = tx.update(g, opt, params)
        return l, optax.apply_updates(params, u), opt

    rep, data = _shardings(4)
    f = podlet.jit(step, in_shardings=(rep, rep, data))
    args = (params, tx.init(params), tokens)
    assert f.partition_report(*args)["unsplit"] == {}
    _close(f(*args), podlet.jit(step)(*args), rtol=2e-5)


# ---- one rule at a time ----------------------------------------------------------------
X = np.random.RandomState(3).normal(size=(8, 6)).astype(np.float32)

# (name, function of the split x, the primitives that must fall back: "" = none)
CASES = [
    ("elementwise", lambda x: jnp.exp(x) * 2 + x, ""),
    ("replicated_operand_localized", lambda x: jnp.where(jnp.arange(8)[:, None] > 3, x, 0.0), ""),
    ("mean", lambda x: x.mean(), ""),
    ("sum_features", lambda x: x.sum(1), ""),
    ("max_batch", lambda x: x.max(0), ""),
    ("min_batch", lambda x: x.min(0), ""),
    ("logsumexp_batch", lambda x: podlet.nn.logsumexp(x, 0), ""),
    ("softmax_features", lambda x: podlet.nn.softmax(x, -1), ""),
    # the fused row primitives (prims/norm.cc): rows split, dscale / dbias psum'd
    ("fused_softmax_grad", lambda x: podlet.grad(lambda x: (podlet.nn.softmax(x) * x).sum())(x), ""),
    ("fused_log_softmax_grad", lambda x: podlet.grad(lambda x: (podlet.nn.log_softmax(x) ** 2).sum())(x), ""),
    ("fused_layer_norm_grads", lambda x: podlet.grad(
        lambda x, s, b: (podlet.nn.LayerNorm().apply({"params": {"scale": s, "bias": b}}, x) ** 3).sum(),
        argnums=(0, 1, 2))(x, jnp.linspace(0.5, 2.0, 6), jnp.linspace(-1.0, 1.0, 6)), ""),
    ("fused_rms_norm_grads", lambda x: podlet.grad(
        lambda x, s: (podlet.nn.RMSNorm().apply({"params": {"scale": s}}, x) ** 3).sum(),
        argnums=(0, 1))(x, jnp.linspace(0.5, 2.0, 6)), ""),
    ("argmax_features", lambda x: jnp.argmax(x, 1), ""),
    ("cumsum_features", lambda x: jnp.cumsum(x, 1), ""),
    ("rev_features", lambda x: x[:, ::-1], ""),
    ("transpose", lambda x: x.T * 3, ""),
    ("reshape_keeps_batch", lambda x: x.reshape(8, 2, 3).sum(2), ""),
    ("reshape_flatten", lambda x: x.reshape(-1), ""),
    ("gram_over_batch", lambda x: x.T @ x, ""),
    ("batched_dot", lambda x: jnp.einsum("bi,bj->bij", x, x), ""),
    ("dot_with_replicated", lambda x: x @ jnp.ones((6, 4)), ""),
    # a TPU's bf16 algorithms stay on the split dots (a dropped attr would be off by ~1e-2)
    ("dot_bf16_with_replicated", lambda x: jnp.dot(x, jnp.full((6, 4), 0.3), precision="bfloat16"), ""),
    ("gram_bf16_3x_over_batch", lambda x: jnp.dot(x.T, x, precision="bfloat16_3x"), ""),
    ("concat_features", lambda x: jnp.concatenate([x, 2 * x], 1), ""),
    ("slice_features", lambda x: x[:, 1:4], ""),
    ("pad_features", lambda x: jnp.pad(x, ((0, 0), (1, 2))), ""),
    ("take_along_features", lambda x: jnp.take_along_axis(x, jnp.argsort(x, 1)[:, :2], 1), "argsort"),
    ("embedding_rows", lambda x: jnp.take(jnp.arange(60.0).reshape(10, 6), (jnp.abs(x) * 3).astype(jnp.int32) % 10,
                                          axis=0), ""),
    # these cannot stay split: the values must still be right
    ("cumsum_batch", lambda x: jnp.cumsum(x, 0), "cumsum"),
    ("argmax_batch", lambda x: jnp.argmax(x, 0), "argmax"),
    ("prod_batch", lambda x: x.prod(0), "reduce_prod"),
    ("rev_batch", lambda x: x[::-1], "rev"),
    ("slice_batch", lambda x: x[1:5], "slice"),
    ("pad_batch", lambda x: jnp.pad(x, ((1, 1), (0, 0))), "pad"),
    ("concat_batch", lambda x: jnp.concatenate([x, x], 0), "concatenate"),
    ("outer_over_batch", lambda x: x @ x.T, "dot_general"),
    ("reshape_across_batch", lambda x: x.T.reshape(-1), "reshape"),
    ("rows_of_split_table", lambda x: jnp.take(x, jnp.array([0, 7, 3]), axis=0), "take"),
    ("scan_over_batch", lambda x: lax.scan(lambda c, r: (c + r, c * r), jnp.zeros(6), x), "scan"),
]


@pytest.mark.parametrize("name,fn,unsplit", CASES, ids=[c[0] for c in CASES])
def test_rule(name, fn, unsplit):
    rep, data = _shardings(2)
    f = podlet.jit(fn, in_shardings=(data,))
    rpt = f.partition_report(X)
    got = set(rpt["unsplit"])
    if unsplit:
        assert unsplit in got, rpt
    else:
        assert got == set(), rpt
    _close(f(X), podlet.jit(fn)(X), rtol=1e-6)


def test_outputs_come_back_whole_and_in_order():
    rep, data = _shardings(4)
    x = np.arange(8 * 6, dtype=np.float32).reshape(8, 6)
    f = podlet.jit(lambda x: (x.T, x * 2, x.sum(1), x[:, None, :] + 1), in_shardings=(data,))
    a, b, c, d = f(x)
    np.testing.assert_array_equal(np.asarray(a), x.T)
    np.testing.assert_array_equal(np.asarray(b), x * 2)
    np.testing.assert_array_equal(np.asarray(c), x.sum(1))
    np.testing.assert_array_equal(np.asarray(d), x[:, None, :] + 1)


def test_same_bits_whatever_the_thread_count_and_every_call():
    step, args = _mlp()
    rep, data = _shardings(4)
    f = podlet.jit(step, in_shardings=(rep, data, data))
    before = podlet._core.num_threads()
    try:
        podlet._core.set_num_threads(1)
        one = [np.asarray(t) for t in podlet.tree_util.tree_leaves(f(*args))]
        podlet._core.set_num_threads(2)
        two = [np.asarray(t) for t in podlet.tree_util.tree_leaves(f(*args))]
        again = [np.asarray(t) for t in podlet.tree_util.tree_leaves(f(*args))]
    finally:
        podlet._core.set_num_threads(before)
    for a, b, c in zip(one, two, again):
        assert a.tobytes() == b.tobytes() == c.tobytes()


def test_static_args_kwargs_and_a_prefix_spec():
    rep, data = _shardings(2)

    def f(x, scale, *, bias):
        return (x * scale).sum(0) + bias

    g = podlet.jit(f, static_argnums=(1,), in_shardings=data)  # one spec for every positional arg
    assert g.partition_report(X, 3.0, bias=jnp.ones(6))["unsplit"] == {}
    _close(g(X, 3.0, bias=jnp.ones(6)), podlet.jit(f, static_argnums=(1,))(X, 3.0, bias=jnp.ones(6)), rtol=1e-6)


def test_replicated_or_mixed_layouts_run_whole():
    m2, m4 = _mesh(2), _mesh(4)
    f = podlet.jit(lambda x, y: x + y, in_shardings=(NamedSharding(m2, P("data")), NamedSharding(m4, P("data"))))
    assert f.partition_report(X, X) is None  # two different device counts: no single split
    np.testing.assert_array_equal(np.asarray(f(X, X)), X + X)
    g = podlet.jit(lambda x: x * 2, in_shardings=(NamedSharding(m4, P()),))
    assert g.partition_report(X) is None
    np.testing.assert_array_equal(np.asarray(g(X)), X * 2)


def test_more_devices_than_podlet_has_is_a_clear_error():
    rep, data = _shardings(4)
    f = podlet.jit(lambda x: x * 2, in_shardings=(data,))
    podlet.config.update("num_devices", 2)
    with pytest.raises(ValueError, match=r"over 4 devices, but podlet has 2 local device"):
        f(X)


def test_inside_another_transformation_it_is_the_global_computation():
    rep, data = _shardings(2)
    f = podlet.jit(lambda x: (x ** 2).mean(), in_shardings=(data,))
    g = podlet.grad(lambda x: f(x) * 3)(X)
    np.testing.assert_allclose(np.asarray(g), 6 * X / X.size, rtol=1e-6)


def test_two_processes_match_one_process_bitwise(tmp_path):
    """A 4-device mesh as one process with 4 devices and as `mpirun -np 2` with 2 each:
    the collectives reduce in global device order, so the bits agree."""
    worker = os.path.join(HERE, "mpi_sharded_worker.py")
    env = dict(os.environ, PODLET_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    one = subprocess.run([sys.executable, worker, str(tmp_path / "one.npz")], env=dict(env, PODLET_NUM_DEVICES="4"),
                         capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stderr[-3000:]
    cmd = [shutil.which("mpirun"), "-np", "2", "--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,tcp",
           "--mca", "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo"]
    for k in ("PODLET_CORE_DIR", "PYTHONPATH", "PODLET_NUM_THREADS"):
        if k in env:
            cmd += ["-x", k]
    two = subprocess.run(cmd + ["-x", "PODLET_NUM_DEVICES=2", sys.executable, worker, str(tmp_path / "two.npz"),
                                "--mpi"], env=env, capture_output=True, text=True, timeout=300)
    assert two.returncode == 0, two.stdout[-2000:] + two.stderr[-3000:]
    a, b = np.load(tmp_path / "one.npz"), np.load(tmp_path / "two.npz")
    assert sorted(a.files) == sorted(b.files) and len(a.files) == 3
    for k in a.files:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_device_put_commits_and_a_plain_jit_splits_by_it():
    """JAX's other idiom: device_put the batch to a sharding, jit without in_shardings."""
    step, (w, x, y) = _mlp()
    rep, data = _shardings(4)
    xs, ys = podlet.device_put((x, y), data)
    assert xs.sharding == data and ys.sharding == data
    np.testing.assert_array_equal(np.asarray(xs), x)
    wr = podlet.device_put(w, rep)  # replicated: nothing to split, nothing remembered
    assert not hasattr(wr["a"], "_sharding")
    assert isinstance(wr["a"].sharding, podlet.sharding.SingleDeviceSharding)
    f = podlet.jit(step)
    rpt = f.partition_report(wr, xs, ys)
    assert rpt["devices"] == 4 and rpt["unsplit"] == {}
    assert f.partition_report(w, x, y) is None  # the same function on uncommitted arrays runs whole
    _close(f(wr, xs, ys), f(w, x, y), rtol=1e-6)
    # an output split along the batch stays committed, so the next jit splits too
    h = podlet.jit(lambda x: jnp.tanh(x) * 2)(xs)
    assert h.sharding == NamedSharding(_mesh(4), P("data"))
    g = podlet.jit(lambda h: (h ** 2).sum(0))
    assert g.partition_report(h)["devices"] == 4
    _close(g(h), ((np.tanh(x.astype(np.float64)) * 2) ** 2).sum(0), rtol=1e-5)


def test_device_put_with_a_spec_under_set_mesh():
    with podlet.set_mesh(_mesh(2)):
        xs = podlet.device_put(X, P("data"))
    assert xs.sharding.spec == P("data") and xs.sharding.mesh.shape["data"] == 2
    f = podlet.jit(lambda x: x.mean(0))
    assert f.partition_report(xs)["devices"] == 2
    _close(f(xs), X.mean(0), rtol=1e-6)
