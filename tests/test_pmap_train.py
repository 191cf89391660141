"""The seed's pmap'd train step on 8 virtual devices: equal to JAX's pmap on 8 forced
host devices (BatchNorm, dropout keys folded with axis_index, EMA), equal to a
single-device jit step for a model without BatchNorm, deterministic across threads."""
import importlib.metadata
import inspect
import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import podlet as jax
import podlet.numpy as jnp
import podlet.optim as optax
from podlet import lax, jax_utils, nn, _core
from podlet.data import load_fashion_mnist

import pmap_seed_step
from oracles import store as oracle_store

HERE = os.path.dirname(os.path.abspath(__file__))
N = 8


def _batches():
    x, y = load_fashion_mnist("train")
    steps, per = 2, 4
    k = steps * N * per
    x = ((x[:k].astype(np.float32) / 255.0 - 0.286) / 0.353).reshape(steps, N, per, 28, 28, 1)
    return x, y[:k].astype(np.int32).reshape(steps, N, per)


@pytest.fixture(scope="module")
def batches():
    return _batches()


# JAX's side of test_seed_step_equals_jax_pmap_on_8_host_devices (pmap_seed_step.py run by
# JAX on 8 forced host devices, in a subprocess: about a minute, mostly XLA compiles) is
# stored in tests/oracles/pmap_seed_step.npz by tests/oracles/make_oracles.py.
ORACLE = "pmap_seed_step"
CASE = "seed_step_float32"


def oracle_fingerprints():
    """The batches' bytes and the code JAX ran: pmap_seed_step.py and the model
    definitions of examples/cnn_fashion_mnist.py (its build())."""
    x, y = _batches()
    with open(os.path.join(HERE, "pmap_seed_step.py"), "rb") as f:
        step_src = f.read()
    model_src = inspect.getsource(pmap_seed_step.cnn_fashion_mnist.build)
    return {CASE: oracle_store.fingerprint(CASE, x, y, len(x), "float32", step_src, model_src)}


def oracle_versions():
    return {lib: importlib.metadata.version(lib) for lib in ("jax", "jaxlib", "flax", "optax")}


def _jax_seed_step(x, y, tmp):
    np.savez(os.path.join(tmp, "in.npz"), images=x, labels=y, steps=len(x), dtype="float32")
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, os.path.join(HERE, "pmap_seed_step.py"), "jax",
                           os.path.join(tmp, "in.npz"), os.path.join(tmp, "jax.npz")],
                          env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with np.load(os.path.join(tmp, "jax.npz")) as f:
        return {k: f[k] for k in f.files}


def oracle_outputs():
    """For make_oracles.py: the names of JAX's results, then the results in that order."""
    with tempfile.TemporaryDirectory() as tmp:
        want = _jax_seed_step(*_batches(), tmp)
    names = sorted(want)
    return {CASE: [np.array(names)] + [want[k] for k in names]}


def test_stored_jax_seed_step_is_current():
    """tests/oracles/pmap_seed_step.npz was computed from these batches and this code
    by the installed jax, jaxlib, flax and optax."""
    problem = oracle_store.staleness(ORACLE, oracle_fingerprints(), oracle_versions())
    assert problem is None, problem


def test_seed_step_equals_jax_pmap_on_8_host_devices(batches):
    x, y = batches
    stored = oracle_store.current(ORACLE, oracle_fingerprints(), oracle_versions())
    if CASE not in stored:
        pytest.fail(oracle_store.staleness(ORACLE, oracle_fingerprints(), oracle_versions()))
    names, *values = [np.asarray(r) for r in stored[CASE]]
    want = dict(zip(names.tolist(), values))
    got = pmap_seed_step.run("podlet", x, y, len(x))
    assert sorted(got) == sorted(want)
    # Loss is pmean'd: one value, the same on every device.
    assert np.all(got["losses"] == got["losses"][:, :1])
    np.testing.assert_allclose(got["losses"], want["losses"], rtol=2e-6)
    for k in want:
        scale = np.max(np.abs(want[k])) + 1e-12
        err = np.max(np.abs(got[k].astype(np.float64) - want[k])) / scale
        assert err < 5e-5, f"{k}: max error {err:.3g} of its largest magnitude"


def test_seed_step_bits_do_not_depend_on_threads_or_replica_merging(batches):
    """1 vs 2 threads, batch-separable nodes run once over all replicas (default) vs once
    per replica, and per-replica nodes run side by side (default) vs one after another:
    the same bits."""
    x, y = batches
    old = jax.config.num_threads
    try:
        jax.config.update("num_threads", 1)
        a = pmap_seed_step.run("podlet", x[:1], y[:1], 1, dtype_name="bfloat16")
        jax.config.update("num_threads", 2)
        b = pmap_seed_step.run("podlet", x[:1], y[:1], 1, dtype_name="bfloat16")
        _core.set_pmap_merge(False)
        c = pmap_seed_step.run("podlet", x[:1], y[:1], 1, dtype_name="bfloat16")
        _core.set_pmap_replica_parallel(False)
        d = pmap_seed_step.run("podlet", x[:1], y[:1], 1, dtype_name="bfloat16")
        _core.set_pmap_merge(True)
        e = pmap_seed_step.run("podlet", x[:1], y[:1], 1, dtype_name="bfloat16")
    finally:
        jax.config.update("num_threads", old)
        _core.set_pmap_merge(True)
        _core.set_pmap_replica_parallel(True)
    for k in a:
        for other in (b, c, d, e):
            np.testing.assert_array_equal(a[k], other[k], err_msg=k)


def test_seed_step_trains_bf16_cnn_on_8_devices():
    xs, ys = load_fashion_mnist("train")
    per, steps = 8, 8
    idx = np.random.default_rng(0).permutation(len(xs))[:N * per * 3]
    x = ((xs[idx].astype(np.float32) / 255.0 - 0.286) / 0.353).reshape(3, N, per, 28, 28, 1)
    y = ys[idx].astype(np.int32).reshape(3, N, per)
    order = [s % 3 for s in range(steps)]
    out = pmap_seed_step.run("podlet", x[order], y[order], steps, dtype_name="bfloat16")
    losses = out["losses"][:, 0]
    assert np.all(np.isfinite(losses))
    assert losses[-3:].mean() < 0.92 * losses[:3].mean(), losses


class _MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Dense(32)(x.reshape(x.shape[0], -1)))
        return nn.Dense(10)(x)


def test_pmap_without_batchnorm_equals_one_device_jit():
    rng = np.random.default_rng(4)
    B = 64
    x = rng.standard_normal((B, 20)).astype(np.float32)
    y = rng.integers(0, 10, B).astype(np.int32)
    model = _MLP()
    params = model.init(jax.random.PRNGKey(0), x[:1])["params"]
    tx = optax.adamw(1e-2)

    def loss_fn(p, xb, yb):
        return optax.softmax_cross_entropy_with_integer_labels(model.apply({"params": p}, xb), yb).mean()

    @jax.jit
    def step(p, o, xb, yb):
        g = jax.grad(loss_fn)(p, xb, yb)
        u, o = tx.update(g, o, p)
        return optax.apply_updates(p, u), o

    def pstep(p, o, xb, yb):
        g = lax.pmean(jax.grad(loss_fn)(p, xb, yb), "batch")
        u, o = tx.update(g, o, p)
        return optax.apply_updates(p, u), o

    p1, o1 = params, tx.init(params)
    pp, po = jax_utils.replicate(params), jax_utils.replicate(tx.init(params))
    pm = jax.pmap(pstep, axis_name="batch")
    for _ in range(3):
        p1, o1 = step(p1, o1, x, y)
        pp, po = pm(pp, po, jax.shard(x), jax.shard(y))
    # Replicated in, pmean'd grads: the whole update ran once and stays replicated.
    assert all(isinstance(l, jax.ReplicatedArray) for l in jax.tree_util.tree_leaves(pp))
    for a, b in zip(jax.tree_util.tree_leaves(jax_utils.unreplicate(pp)), jax.tree_util.tree_leaves(p1)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
