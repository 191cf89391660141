"""config allow_excess_precision (XLA's --xla_allow_excess_precision, a TPU's fusions):
bf16 arithmetic inside a fused elementwise node keeps its f32 value and rounds once, where
the value leaves the node. The oracle is exact: with bf16-exact constants, an all-bf16
chain under the flag must give the same f32 chain's result rounded once to bf16, bit for
bit, in the interpreter and in compiled code, on 1 and 2 threads, in jit and in pmap. Off
(the default) nothing changes: jit gives the op-by-op bits of jax on CPU."""
import numpy as np
import pytest

import podlet
import podlet.numpy as jnp
from podlet import _core
from fusion_chains import BF16, assert_same_bits, bits

HAVE_JIT = podlet.cpu_info()["active_isa"] in ("avx2", "avx512", "avx512bf16", "amx")  # fused_jit.h: AVX2 and up


def chain(x, y):
    # constants exact in bf16, so the bf16 and f32 graphs compute the same function
    return jnp.tanh(x * 0.75 + y) * jnp.exp(x * 0.5) - y * y / (1.0 + jnp.abs(x)) + jnp.maximum(x, y) * 0.25


def _inputs(n=40_000, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * 2).astype(BF16)
    y = (rng.standard_normal(n) * 2).astype(BF16)
    # specials travel through as they would in f32: NaNs, infinities, signed zeros, a bf16 subnormal
    x[:8] = np.array([np.nan, -np.inf, np.inf, 0.0, -0.0, 1e-39, 60.0, -60.0], dtype=np.float32).astype(BF16)
    return x, y


@pytest.fixture
def restore():
    threads = podlet.config.num_threads
    yield
    _core.set_fused_jit(podlet.config.fused_jit)
    podlet.config.update("num_threads", threads)
    podlet.config.update("allow_excess_precision", False)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
def test_bf16_chain_rounds_once_where_it_leaves_the_fusion(compiled, threads, restore):
    x, y = _inputs()
    f = podlet.jit(chain)
    want = np.asarray(f(x.astype(np.float32), y.astype(np.float32))).astype(BF16)
    per_op = np.asarray(f(x, y))
    _core.set_fused_jit(compiled)
    podlet.config.update("num_threads", threads)
    before = _core.fused_jit_stats()["runs"]
    with podlet.allow_excess_precision():
        got = np.asarray(f(x, y))          # the same jit'd function: the flag is in its cache key
    ran = _core.fused_jit_stats()["runs"] - before
    assert (ran > 0) == (compiled and HAVE_JIT)
    assert got.dtype == BF16
    assert_same_bits([got], [want])
    # the flag did something: the per-op chain rounds ~10 times and differs in many elements
    assert (bits(per_op) != bits(got)).mean() > 0.2
    # and the once-rounded chain is within half a bf16 ulp of the float64 value
    xd, yd = x.astype(np.float64)[8:], y.astype(np.float64)[8:]
    exact = np.tanh(xd * 0.75 + yd) * np.exp(xd * 0.5) - yd * yd / (1.0 + np.abs(xd)) + np.maximum(xd, yd) * 0.25
    err_once = np.abs(got[8:].astype(np.float64) - exact)
    err_per_op = np.abs(per_op[8:].astype(np.float64) - exact)
    ulp = np.spacing(np.abs(exact).astype(BF16).astype(np.float32)).astype(np.float64) * 2 ** 16
    assert np.all(err_once <= 0.5 * ulp * 1.001 + 1e-30)
    assert err_once.mean() < 0.5 * err_per_op.mean()


def test_off_by_default_is_the_op_by_op_graph(restore):
    x, y = _inputs(5000, seed=1)
    assert podlet.config.allow_excess_precision is False
    fused = np.asarray(podlet.jit(chain)(x, y))
    with podlet.disable_jit():
        eager = np.asarray(chain(jnp.asarray(x), jnp.asarray(y)))  # podlet's ops one by one
    assert_same_bits([fused], [eager])


def test_explicit_converts_and_outputs_still_round(restore):
    """astype(bfloat16) keeps its meaning under the flag, and a value that is both an
    output and read further inside the fusion is read rounded by both."""
    x, _ = _inputs(20_000, seed=2)

    def f(x):
        e = jnp.exp(x.astype(jnp.float32) * 0.5).astype(jnp.bfloat16)   # an explicit rounding
        h = e * 0.75 + x                                                  # bf16 arithmetic: kept f32
        return h, h * h + 1.0                                             # h leaves and is read on

    with podlet.allow_excess_precision():
        h, z = map(np.asarray, podlet.jit(f)(x))
    x32 = x.astype(np.float32)
    e = np.asarray(podlet.jit(lambda v: jnp.exp(v * 0.5).astype(jnp.bfloat16))(x32))
    want_h = np.asarray(podlet.jit(lambda e, v: e * 0.75 + v)(e.astype(np.float32), x32)).astype(BF16)
    want_z = np.asarray(podlet.jit(lambda hh: hh * hh + 1.0)(want_h.astype(np.float32))).astype(BF16)
    assert_same_bits([h, z], [want_h, want_z])


def test_config_update_and_context(restore):
    assert podlet.config.allow_excess_precision is False
    with podlet.allow_excess_precision(True):
        assert podlet.config.allow_excess_precision is True
        with podlet.allow_excess_precision(False):
            assert podlet.config.allow_excess_precision is False
        assert podlet.config.allow_excess_precision is True
    assert podlet.config.allow_excess_precision is False
    podlet.config.update("jax_allow_excess_precision", True)
    assert podlet.config.allow_excess_precision is True


def test_marks_every_fused_node_and_only_then():
    x, y = _inputs(4096)
    g = podlet.make_graph(lambda x, y: (chain(x, y), (x * y).sum(0)), x, y)
    plain = _core.fuse_elementwise(g)
    marked = _core.fuse_elementwise(g, excess_precision=True)
    assert "fused_elementwise" in marked.prim_counts()
    assert "excess_precision" not in plain.dump()
    assert marked.dump().count("excess_precision") == marked.prim_counts()["fused_elementwise"]


def test_gradients_of_a_bf16_mlp_come_closer_to_f32(restore):
    """A GELU MLP's gradients in bf16: under the flag they are closer to the f32 model's
    (the GELU's backward chain rounds once instead of at each of its ~25 ops)."""
    rng = np.random.default_rng(3)
    w1 = (rng.standard_normal((64, 256)) * 0.125).astype(np.float32)
    w2 = (rng.standard_normal((256, 8)) * 0.0625).astype(np.float32)
    xb = rng.standard_normal((128, 64)).astype(np.float32)

    def loss(ws, x):
        h = podlet.nn.gelu(x @ ws[0])
        return jnp.mean(jnp.square(h @ ws[1]).astype(jnp.float32))

    g = podlet.jit(podlet.grad(loss))
    ref = g((w1, w2), xb)
    b16 = lambda a: a.astype(BF16)
    per_op = g((b16(w1), b16(w2)), b16(xb))
    with podlet.allow_excess_precision():
        once = g((b16(w1), b16(w2)), b16(xb))
    for r, p, o in zip(ref, per_op, once):
        r, p, o = (np.asarray(a, dtype=np.float32) for a in (r, p, o))
        assert (bits(np.asarray(p, BF16)) != bits(np.asarray(o, BF16))).any()
        assert np.abs(o - r).mean() < np.abs(p - r).mean()


def test_pmap_gives_jit_bits(restore):
    n = podlet.local_device_count()
    x, y = _inputs(n * 4096, seed=4)
    xs, ys = x.reshape(n, -1), y.reshape(n, -1)
    with podlet.allow_excess_precision():
        want = [np.asarray(podlet.jit(chain)(xs[i], ys[i])) for i in range(n)]
        got = np.asarray(podlet.pmap(chain)(xs, ys))
    assert_same_bits(list(got), want)
    assert (bits(got) != bits(np.asarray(podlet.pmap(chain)(xs, ys)))).any()  # and off again: per-op bits


def test_environment_variable_sets_it_at_import():
    import os
    import subprocess
    import sys
    code = ("import podlet, numpy as np, podlet.numpy as jnp\n"
            "from podlet._src import dtypes\n"
            "x = np.linspace(-3, 3, 4096, dtype=np.float32).astype(dtypes.bfloat16)\n"
            "f = podlet.jit(lambda x: jnp.tanh(x * 0.75 + 1.0) * jnp.exp(x * 0.5))\n"
            "once = np.asarray(f(x.astype(np.float32))).astype(dtypes.bfloat16)\n"
            "print(podlet.config.allow_excess_precision, bool((np.asarray(f(x)).view(np.uint16) == once.view(np.uint16)).all()))\n")
    out = {}
    for value in ("1", "0"):
        env = dict(os.environ, PODLET_EXCESS_PRECISION=value)
        out[value] = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                    check=True).stdout.split()
    assert out["1"] == ["True", "True"]    # on: the bf16 chain is the f32 chain rounded once
    assert out["0"] == ["False", "False"]  # off: rounded after every op, other bits
