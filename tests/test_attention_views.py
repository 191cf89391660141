"""Attention views (cpp/podlet/ir/attention_views.h): the fused attention reads q, k, v
sliced from one projection in place and writes dq, dk, dv into the concatenation of their
gradients. Checked against the same step with the pass off (PODLET_ATTENTION_VIEWS=0:
slices and a concatenation, the same kernels on packed arrays) bit for bit, forward and
gradient, on every kernel the host has (the widening kernel on each ISA, the bf16 pair
kernel emulated and on the instruction) and for 1 and 2 threads; the graph's rewrite; the
slices it must leave alone; the primitive's checks of views that do not fit."""
import ml_dtypes
import numpy as np
import pytest

import podlet
import podlet.numpy as jnp
from podlet import _core
from podlet._src import fusion

BF16 = ml_dtypes.bfloat16
FAST_ISAS = [i for i in _core.cpu_info()["available_isas"] if i in ("avx2", "avx512")]
HAS_BF16_PAIRS = "avx512bf16" in _core.cpu_info()["available_isas"]


@pytest.fixture(autouse=True)
def restore_kernels():
    isa, n = _core.active_isa(), podlet.config.num_threads
    yield
    _core.set_isa(isa)
    _core.set_attention_pairs_emulation(False)
    podlet.config.update("num_threads", n)


def _heads(qkv, layout, B, T, N, K, H):
    """q [B, T, N, H], k and v [B, T, K, H] cut from the projection qkv [B, T, (N + 2K) H]."""
    if layout == "swin":  # [B, T, 3, N, H], indexed (models/swin.py)
        x = jnp.reshape(qkv, (B, T, 3, N, H))
        return x[:, :, 0], x[:, :, 1], x[:, :, 2]
    if layout == "swin_permuted":
        x = jnp.reshape(qkv, (B, T, 3, N, H))
        return x[:, :, 2], x[:, :, 0], x[:, :, 1]
    if layout == "split":  # jnp.split on the channels, then the heads (K < N: grouped queries)
        q, k, v = jnp.split(qkv, [N * H, (N + K) * H], axis=-1)
        return jnp.reshape(q, (B, T, N, H)), jnp.reshape(k, (B, T, K, H)), jnp.reshape(v, (B, T, K, H))
    if layout == "flat":  # a 2-D [B * T, 3 N H] projection
        x = jnp.reshape(qkv, (B * T, 3 * N * H))
        return tuple(jnp.reshape(x[:, i * N * H:(i + 1) * N * H], (B, T, N, H)) for i in range(3))
    raise ValueError(layout)


def _step(layout, B, T, N, K, H, dtype, masked):
    def loss(x, w, bias, mask):
        qkv = jnp.asarray(x @ w, dtype)
        q, k, v = _heads(qkv, layout, B, T, N, K, H)
        o = podlet.nn.dot_product_attention(q, k, v, bias=bias, mask=mask if masked else None, scale=H ** -0.5)
        c = jnp.cos(jnp.arange(o.size, dtype=jnp.float32)).reshape(o.shape)
        return jnp.sum(jnp.asarray(o, jnp.float32) * c)
    return podlet.jit(podlet.value_and_grad(loss, argnums=(0, 1)))


def _data(B, T, N, K, H, seed=0):
    rs = np.random.RandomState(seed)
    C = 24
    x = rs.normal(size=(B, T, C)).astype(np.float32)
    w = (rs.normal(size=(C, (N + 2 * K) * H)) / np.sqrt(C)).astype(np.float32)
    bias = rs.normal(size=(1, N, T, T)).astype(np.float32)
    mask = rs.rand(B, 1, T, T) > 0.3
    return tuple(jnp.asarray(a) for a in (x, w, bias, mask))


def _run(monkeypatch, on, layout, dims, dtype, masked, args):
    monkeypatch.setenv("PODLET_ATTENTION_VIEWS", "1" if on else "0")
    step = _step(layout, *dims, dtype, masked)
    g = fusion.executable_graph(step.lower(*args))
    l, (gx, gw) = step(*args)
    return g, tuple(np.asarray(a).tobytes() for a in (l, gx, gw))


def _kernels(dtype):
    """(isa, pair emulation) runs the host has for this dtype: the widening kernel on every
    ISA (bf16 below AVX512_BF16 widens too), and for bf16 the pair kernel, emulated and on
    the instruction."""
    runs = [(isa, False) for isa in ["ref"] + FAST_ISAS]
    if dtype == jnp.bfloat16:
        runs += [(None, True)] + ([("avx512bf16", False)] if HAS_BF16_PAIRS else [])
    return runs


LAYOUTS = {"swin": (2, 49, 3, 3, 32), "swin_permuted": (2, 17, 2, 2, 16), "split": (2, 21, 4, 2, 8),
           "flat": (3, 9, 2, 2, 20)}


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_views_give_the_bits_of_the_sliced_arrays(monkeypatch, layout, dtype):
    dims = LAYOUTS[layout]
    args = _data(*dims)
    for isa, emulated in _kernels(dtype):
        _core.set_attention_pairs_emulation(emulated)
        for threads in (1, 2):
            if isa:
                _core.set_isa(isa)
            podlet.config.update("num_threads", threads)
            g1, on = _run(monkeypatch, True, layout, dims, dtype, True, args)
            assert _core.attention_last_isa() == ("pairs_ref" if emulated else isa)
            g0, off = _run(monkeypatch, False, layout, dims, dtype, True, args)
            assert on == off, (layout, isa, emulated, threads)
    text = g1.dump()
    assert "qkv_views" in text and "dqkv=" in text
    prims = [l.split("=", 1)[1].strip().split("(")[0] for l in text.splitlines() if " = " in l]
    assert "slice" not in prims and "concatenate" not in prims, prims
    assert "slice" in g0.dump() and "concatenate" in g0.dump()


def test_stats_and_a_step_without_bias_or_mask(monkeypatch):
    dims = LAYOUTS["swin"]
    args = _data(*dims)
    lowered = _step("swin", *dims, jnp.bfloat16, False).lower(*args)
    assert _core.attention_view_stats(lowered.graph) == {"views": 6, "packed": 1}
    assert _run(monkeypatch, True, "swin", dims, jnp.bfloat16, False, args)[1] == \
        _run(monkeypatch, False, "swin", dims, jnp.bfloat16, False, args)[1]


def test_slices_it_leaves_alone(monkeypatch):
    """Every other token (rows not one stride apart), and a q also read by another op (its
    slice stays, the attention still reads the projection)."""
    B, T, N, H = 2, 10, 2, 16

    def loss(x, w):
        qkv = jnp.reshape(x @ w, (B, 2 * T, 3, N, H))
        q, k, v = qkv[:, ::2, 0], qkv[:, ::2, 1], qkv[:, 1::2, 2]
        o = podlet.nn.dot_product_attention(q, k, v, scale=0.25)
        return jnp.sum(o * o)

    def loss2(x, w):
        qkv = jnp.reshape(x @ w, (B, 2 * T, 3, N, H))
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        return jnp.sum(podlet.nn.dot_product_attention(q, k, v, scale=0.25) ** 2) + jnp.sum(q)

    rs = np.random.RandomState(3)
    x = jnp.asarray(rs.normal(size=(B, 2 * T, 8)).astype(np.float32))
    w = jnp.asarray(rs.normal(size=(8, 3 * N * H)).astype(np.float32))
    g = podlet.jit(podlet.grad(loss, argnums=(0, 1)))
    assert _core.attention_view_stats(g.lower(x, w).graph) == {"views": 0, "packed": 0}
    g2 = podlet.jit(podlet.grad(loss2, argnums=(0, 1)))
    st = _core.attention_view_stats(g2.lower(x, w).graph)
    assert st["views"] == 6 and st["packed"] == 0  # dq also flows into sum(q)'s gradient
    for f in (loss, loss2):
        monkeypatch.setenv("PODLET_ATTENTION_VIEWS", "1")
        a = podlet.jit(podlet.grad(f, argnums=(0, 1)))(x, w)
        monkeypatch.setenv("PODLET_ATTENTION_VIEWS", "0")
        b = podlet.jit(podlet.grad(f, argnums=(0, 1)))(x, w)
        assert all(np.asarray(p).tobytes() == np.asarray(q).tobytes() for p, q in zip(a, b))


def test_views_that_do_not_fit_are_errors():
    x = jnp.zeros((2, 5, 3, 2, 4), jnp.float32)
    attrs = {"scale": 0.5, "q_shape": [2, 5, 2, 4], "kv_shape": [2, 5, 2, 4]}
    (o, _) = _core.apply("dot_product_attention", [x, x, x], dict(attrs, qkv_views=[0, 24, 8, 24, 16, 24]))
    assert np.asarray(o).shape == (2, 5, 2, 4)
    with pytest.raises(ValueError, match="the value view .* does not fit its array"):
        _core.apply("dot_product_attention", [x, x, x], dict(attrs, qkv_views=[0, 24, 8, 24, 17, 24]))
    with pytest.raises(ValueError, match="the query view"):
        _core.apply("dot_product_attention", [x, x, x], dict(attrs, qkv_views=[0, 4, 8, 24, 16, 24]))
    with pytest.raises(ValueError, match="sizes >= 0"):
        _core.apply("dot_product_attention", [x, x, x],
                    dict(attrs, q_shape=[2, -5, 2, 4], qkv_views=[0, 24, 8, 24, 16, 24]))
    lse = jnp.zeros((2, 2, 5), jnp.float32)
    bwd = dict(attrs, qkv_views=[0, 24, 8, 24, 16, 24], dqkv_shape=[2, 5, 3, 2, 4])
    d = _core.apply("dot_product_attention_bwd", [x, x, x, o, lse, o], dict(bwd, dqkv=[8, 0, 16, 24]))
    assert len(d) == 1 and np.asarray(d[0]).shape == (2, 5, 3, 2, 4)
    with pytest.raises(ValueError, match="side by side"):
        _core.apply("dot_product_attention_bwd", [x, x, x, o, lse, o], dict(bwd, dqkv=[0, 8, 8, 24]))


# ---- the bias gradient summed over the batch in the kernel (sum_attention_dbias) ----

def _bias_step(causal=False):
    def loss(q, k, v, bias, mask):
        o = podlet.nn.dot_product_attention(q, k, v, bias=bias, mask=mask, scale=0.25, is_causal=causal)
        c = jnp.cos(jnp.arange(o.size, dtype=jnp.float32)).reshape(o.shape)
        return jnp.sum(jnp.asarray(o, jnp.float32) * c)
    return podlet.value_and_grad(loss, argnums=(0, 3))


def _bias_data(B, T, N, H, bias_shape, dtype, seed=3):
    rs = np.random.RandomState(seed)
    q, k, v = (jnp.asarray(rs.standard_normal((B, T, N, H)).astype(dtype)) for _ in range(3))
    bias = jnp.asarray(rs.standard_normal(bias_shape).astype(np.float32))
    mask = jnp.asarray(rs.rand(B, 1, T, T) > 0.2)  # Swin's shift masks: per window
    return q, k, v, bias, mask


def _dbias_kernels():
    """(isa, pair emulation) for every attention kernel the host has."""
    ks = [(i, False) for i in FAST_ISAS]
    if HAS_BF16_PAIRS:
        ks += [("avx512bf16", False), ("avx512bf16", True)]
    return ks or [("ref", False)]


@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["f32", "bf16"])
@pytest.mark.parametrize("bias_shape, causal", [((1, 3, 20, 20), False), ((1, 1, 20, 20), False),
                                                ((1, 3, 20, 20), True)], ids=["heads", "shared", "causal"])
def test_dbias_summed_over_the_batch_in_the_kernel(monkeypatch, dtype, bias_shape, causal):
    """Swin's relative-position bias is shared by every window (the batch): its gradient
    comes out of the backward kernel summed over the batch (fixed chunks of the batch in
    order, then the chunks) instead of per window and reduce_sum'd. Close to the unsummed
    graph's (another summation order), the same bits for 1 and 2 threads, and where the
    pair kernel runs, the instruction's bits are its emulation's."""
    B, T, N, H = 70, 20, 3, 16  # 70 windows: chunks of 2, the last one short
    args = _bias_data(B, T, N, H, bias_shape, dtype)
    step = _bias_step(causal)
    assert _core.attention_dbias_stats(podlet.jit(step).lower(*args).graph) == 1
    bits = set()
    for isa, emu in _dbias_kernels():
        _core.set_isa(isa)
        _core.set_attention_pairs_emulation(emu)
        monkeypatch.setenv("PODLET_ATTENTION_DBIAS", "0")  # the same kernel, per window, then reduce_sum
        _, (_, want) = podlet.jit(step)(*args)
        want = np.asarray(want)
        monkeypatch.setenv("PODLET_ATTENTION_DBIAS", "1")
        for threads in (1, 2):
            podlet.config.update("num_threads", threads)
            _, (_, got) = podlet.jit(step)(*args)
            got = np.asarray(got)
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())
            bits.add((isa if isa == "avx512bf16" else "widening", got.tobytes()))
    # One result per kernel family (the f32 widening kernels agree across ISAs; bf16 pairs
    # on the instruction and emulated agree).
    assert len(bits) == len({k for k, _ in bits}), [k for k, _ in bits]


def test_dbias_sum_leaves_a_per_entry_bias_alone():
    args = _bias_data(6, 20, 3, 16, (6, 3, 20, 20), np.float32)
    assert _core.attention_dbias_stats(podlet.jit(_bias_step()).lower(*args).graph) == 0
