"""podlet.profile: the per-op table is consistent with the graph it ran (call counts
per primitive = node counts, FLOPs = Graph.flops()), peaks are measured, memory and
MFU are reported, and PODLET_PROFILE=1 prints a table at exit."""
import os
import subprocess
import sys

import numpy as np

import podlet
import podlet.numpy as jnp
from podlet import _core, profiler
from podlet._src import fusion


def _mlp_step():
    rng = np.random.default_rng(0)
    w1 = jnp.asarray(rng.standard_normal((64, 128)).astype(np.float32))
    w2 = jnp.asarray(rng.standard_normal((128, 10)).astype(np.float32))
    x = jnp.asarray(rng.standard_normal((32, 64)).astype(np.float32))

    def loss(w1, w2, x):
        h = podlet.nn.relu(x @ w1 + 0.5)
        return jnp.mean(jnp.tanh(h @ w2) ** 2)

    @podlet.jit
    def step(w1, w2, x):
        l, (g1, g2) = podlet.value_and_grad(loss, argnums=(0, 1))(w1, w2, x)
        return w1 - 0.1 * g1, w2 - 0.1 * g2, l

    return step, (w1, w2, x)


def _executed_graph(step, args):
    return fusion.executable_graph(step.lower(*args))


def test_counts_and_flops_match_the_graph():
    step, args = _mlp_step()
    for steps in (1, 3):
        stats = profiler.run(step, args, steps=steps, quiet=True)
        g = _executed_graph(step, args)
        calls = {}
        for r in stats["ops"]:
            calls[r["prim"]] = calls.get(r["prim"], 0) + r["calls"]
        assert calls == {k: v * steps for k, v in g.prim_counts().items()}
        assert np.isclose(stats["flops"], steps * g.flops(), rtol=1e-12)
        # FLOPs of the traced (unfused) graph: fusion moves FLOPs, never changes them.
        assert np.isclose(stats["flops"], steps * step.lower(*args).graph.flops(), rtol=1e-12)
        assert all(r["seconds"] >= 0 and r["bytes"] > 0 for r in stats["ops"])
        assert stats["op_seconds"] <= stats["wall_seconds"] * 1.01


def test_bytes_are_inputs_plus_outputs():
    x = jnp.asarray(np.ones((100, 30), np.float32))
    f = podlet.jit(lambda a: jnp.exp(a) * 2.0)
    os.environ["PODLET_FUSION"] = "0"
    try:
        stats = profiler.run(f, (x,), quiet=True)
    finally:
        del os.environ["PODLET_FUSION"]
    by = {r["prim"]: r for r in stats["ops"]}
    assert by["exp"]["bytes"] == 2 * 100 * 30 * 4
    assert by["mul"]["bytes"] == 2 * 100 * 30 * 4 + 4  # the 0-d constant too
    assert by["exp"]["flops"] == 3000


def test_peak_memory_and_mfu_reported(capsys):
    step, args = _mlp_step()
    stats = podlet.profile(step, *args)
    out = capsys.readouterr().out
    for word in ("dot_general", "GFLOP/s", "%peak", "peak memory", "MFU", "measured peak"):
        assert word in out
    # The step holds at least its inputs and its outputs.
    in_bytes = sum(np.asarray(a).nbytes for a in args)
    assert stats["peak_memory_bytes"] >= in_bytes
    assert 0 < stats["mfu"] < 1.5
    dot = [r for r in stats["ops"] if r["prim"] == "dot_general"][0]
    assert dot["pct_peak"] is not None and dot["pct_peak"] > 0


def test_measured_peak_is_cached_and_plausible():
    pk = profiler.measured_peak(1)
    assert pk["float32"] > 1.0  # GFLOP/s; any AVX2 core does far more than this
    assert profiler.measured_peak(1) == pk
    assert pk["float64"] == pk["float32"] / 2
    if not _core.have_bf16_dot():
        assert pk["bfloat16"] == pk["float32"]


def test_eager_ops_are_counted_too():
    a = jnp.asarray(np.ones((8, 8), np.float32))
    _core.take_profile_detailed()
    _core.set_profiling(True)
    try:
        jnp.exp(a)
    finally:
        _core.set_profiling(False)
    d = _core.take_profile_detailed()
    assert d[("exp", "float32")][0] == 1


def test_env_var_prints_table_at_exit():
    code = ("import numpy as np, podlet, podlet.numpy as jnp\n"
            "f = podlet.jit(lambda a: (a @ a).sum())\n"
            "f(jnp.asarray(np.ones((16, 16), np.float32)))\n")
    env = dict(os.environ, PODLET_PROFILE="1")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "dot_general" in r.stderr and "MFU" in r.stderr
