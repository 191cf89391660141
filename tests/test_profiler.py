"""podlet.profile: the per-op table is consistent with the graph it ran (call counts
per primitive = node counts, FLOPs = Graph.flops()), peaks are measured, memory and
MFU are reported, and PODLET_PROFILE=1 prints a table at exit."""
import os
import subprocess
import sys

import numpy as np
import pytest

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


def test_rows_by_shape_split_each_primitive_by_its_operands(capsys):
    step, args = _mlp_step()
    counts = _executed_graph(step, args).prim_counts()
    stats = profiler.run(step, args, by_shape=True)
    out = capsys.readouterr().out
    dots = [r for r in stats["ops"] if r["prim"].split(" ")[0] == "dot_general"]
    # x @ w1 in the forward: its row names both operands, printed whole.
    fwd = "dot_general float32[32,64] float32[64,128]"
    assert fwd in [r["prim"] for r in dots] and fwd in out
    assert len(dots) >= 3 and sum(r["calls"] for r in dots) == counts["dot_general"]
    total = profiler.run(step, args, quiet=True)
    assert np.isclose(sum(r["flops"] for r in stats["ops"]), total["flops"], rtol=1e-12)
    # Off again after the run: the plain table has one row per primitive.
    assert [r["calls"] for r in total["ops"] if r["prim"] == "dot_general"] == [counts["dot_general"]]
    assert not _core.profiling()
    # A run restores whatever was on before it, by-shape counting included.
    _core.set_profiling(True, by_shape=True)
    try:
        profiler.run(step, args, quiet=True)
        assert _core.profiling() and _core.profiling_by_shape()
    finally:
        _core.set_profiling(False)
        _core.take_profile_detailed()
    assert not _core.profiling_by_shape()


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


def test_profiled_steps_hold_one_steps_outputs_at_a_time():
    # As in a training loop that replaces its state: the last step's outputs are gone
    # before the next step runs, so steps write into recycled buffers and the peak is
    # the inputs plus one step's outputs.
    x = jnp.asarray(np.ones((2048, 1024), np.float32))  # 8 MB
    step = podlet.jit(lambda x: x * 2.0)
    stats = profiler.run(step, (x,), steps=3, quiet=True)
    assert np.asarray(stats["output"])[0, 0] == 2.0
    grew = stats["peak_memory_bytes"] - stats["live_before_bytes"]
    assert x.nbytes <= grew < 1.5 * x.nbytes, grew


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


@pytest.mark.parametrize("value", ["1", "shapes"])
def test_env_var_prints_table_at_exit(value):
    code = ("import numpy as np, podlet, podlet.numpy as jnp\n"
            "f = podlet.jit(lambda a: (a @ a).sum())\n"
            "f(jnp.asarray(np.ones((16, 16), np.float32)))\n")
    env = dict(os.environ, PODLET_PROFILE=value)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "dot_general" in r.stderr and "MFU" in r.stderr
    assert ("dot_general float32[16,16] float32[16,16]" in r.stderr) == (value == "shapes")
