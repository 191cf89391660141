"""Transposes folded into products (cpp/podlet/ir/dot_layout.h): dot_general's out_perm
(prims/dot.cc) stores transpose(product, out_perm) straight from the GEMM, and a product
reads a transpose's input in place through its dims.
Checked on concrete arrays against the product followed by NumPy's transpose (same
bits) on every GEMM path the host has (ref, avx2, avx512, avx512bf16, the emulated AMX
tiles), f32 / bf16 / f64 / int32, tiled, batched-per-task and K-chunked products, a TPU
precision algorithm; the pass on a jitted attention forward and backward against the
same graph with the pass off (same bits); its VJP and vmap rules; the layouts and
graphs it must leave alone."""
import ml_dtypes
import numpy as np
import pytest

import podlet
import podlet.numpy as jnp
from podlet import _core
from podlet._src import fusion
from podlet._src.core import bind

BF16 = ml_dtypes.bfloat16
INFO = _core.cpu_info()
ISAS = list(INFO["available_isas"])  # "ref" and every faster path the host runs


@pytest.fixture(autouse=True)
def restore_isa_threads_and_emulation():
    isa, n, emu = _core.active_isa(), podlet.config.num_threads, _core.amx_emulation()
    yield
    _core.set_isa(isa)
    podlet.config.update("num_threads", n)
    _core.set_amx_emulation(emu)


def _dot(x, y, lc, rc, lb=(), rb=(), **attrs):
    return bind("dot_general", x, y, lhs_contracting=list(lc), rhs_contracting=list(rc), lhs_batch=list(lb),
                rhs_batch=list(rb), **attrs)


# (lhs shape, rhs shape, (lc, rc, lb, rb), out_perm): each a layout the GEMM stores row by row.
CASES = {
    # Flax's attention output: [b, h, q, d] stored as [b, q, h, d].
    "heads": ((2, 3, 5, 7), (2, 7, 3, 4), ((3,), (1,), (0, 1), (0, 2)), (0, 2, 1, 3)),
    # Batch entries swapped, tiles past 144 rows and 256 columns.
    "batch_swap": ((2, 3, 150, 40), (2, 3, 40, 260), ((3,), (2,), (0, 1), (0, 1)), (1, 0, 2, 3)),
    # Two lhs free dims that stay one row stride apart, moved in front of the batch.
    "rows_merge": ((3, 4, 5, 6), (3, 6, 8), ((3,), (1,), (0,), (0,)), (1, 2, 0, 3)),
    # No lhs free dim (one row per batch entry), size-1 dims.
    "no_rows": ((2, 1, 3, 6), (2, 3, 6, 1, 9), ((3,), (2,), (0, 2), (0, 1)), (2, 1, 0, 3, 4)),
    # Long K over few tiles: the K-chunked product (chunk partials, then the stores).
    "k_chunks": ((2, 40, 4200), (2, 4200, 24), ((2,), (1,), (0,), (0,)), (1, 0, 2)),
    # Many small batch entries (each task packs its own B: attention's heads).
    "many_heads": ((4, 6, 33, 16), (4, 6, 16, 20), ((3,), (2,), (0, 1), (0, 1)), (0, 2, 1, 3)),
}


def _operands(name, dtype, seed=0):
    ls, rs, _, _ = CASES[name]
    rng = np.random.default_rng(seed)
    if dtype == np.int32:
        return rng.integers(-50, 50, ls).astype(dtype), rng.integers(-50, 50, rs).astype(dtype)
    return rng.standard_normal(ls).astype(dtype), rng.standard_normal(rs).astype(dtype)


def _paths():
    """(isa, amx emulation) for every GEMM the host can run: each ISA, and the AMX kernel
    on emulated tiles."""
    return [(i, False) for i in ISAS] + [(ISAS[-1], True)]


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("dtype", [np.float32, BF16, np.float64, np.int32], ids=["f32", "bf16", "f64", "i32"])
def test_out_perm_is_the_transposed_product_on_every_path(name, dtype):
    _, _, (lc, rc, lb, rb), perm = CASES[name]
    x, y = _operands(name, dtype)
    for isa, emu in _paths():
        _core.set_isa(isa)
        _core.set_amx_emulation(emu)
        for threads in (1, 2):
            podlet.config.update("num_threads", threads)
            want = np.transpose(np.asarray(_dot(jnp.asarray(x), jnp.asarray(y), lc, rc, lb, rb)), perm)
            got = np.asarray(_dot(jnp.asarray(x), jnp.asarray(y), lc, rc, lb, rb, out_perm=list(perm)))
            assert got.shape == want.shape and got.dtype == want.dtype, (isa, emu, got.shape, want.shape)
            assert got.tobytes() == want.tobytes(), (isa, emu, threads)


def test_out_perm_with_a_tpu_precision_algorithm():
    """bf16_3x runs three bf16 products into f32 partials laid out like the output."""
    _, _, (lc, rc, lb, rb), perm = CASES["batch_swap"]
    x, y = _operands("batch_swap", np.float32)
    for isa in ISAS:
        _core.set_isa(isa)
        want = np.transpose(np.asarray(_dot(jnp.asarray(x), jnp.asarray(y), lc, rc, lb, rb, algorithm="bf16_3x")), perm)
        got = np.asarray(_dot(jnp.asarray(x), jnp.asarray(y), lc, rc, lb, rb, algorithm="bf16_3x", out_perm=list(perm)))
        assert got.tobytes() == want.tobytes(), isa


@pytest.mark.parametrize("perm, why", [
    ((1, 0, 2, 3), "splits the lhs free dims"),  # rows 4 and 5 no longer one stride apart
    ((0, 1, 3, 2), "rhs free dims last"),
    ((0, 1, 2), "must have 4 entries"),
    ((0, 0, 1, 2), "not a permutation"),
])
def test_layouts_the_gemm_cannot_store_are_refused(perm, why):
    x, y = (jnp.zeros(s, jnp.float32) for s in ((3, 4, 5, 6), (3, 6, 8)))
    with pytest.raises(podlet.ShapeError, match=why):
        _dot(x, y, (3,), (1,), (0,), (0,), out_perm=list(perm))


def test_vjp_and_vmap_of_a_product_with_out_perm():
    """The node's rules see the transposed output: its VJP transposes the cotangent back,
    its vmap puts the mapped dim in front of the transposed dims."""
    _, _, (lc, rc, lb, rb), perm = CASES["heads"]
    x, y = (jnp.asarray(a) for a in _operands("heads", np.float64))
    t = jnp.asarray(np.random.default_rng(1).standard_normal(np.transpose(np.zeros((2, 3, 5, 4)), perm).shape))

    def loss(x, y, folded):
        o = _dot(x, y, lc, rc, lb, rb, out_perm=list(perm)) if folded else jnp.transpose(_dot(x, y, lc, rc, lb, rb), perm)
        return jnp.sum(o * t)

    for got, want in zip(podlet.grad(lambda a, b: loss(a, b, True), argnums=(0, 1))(x, y),
                         podlet.grad(lambda a, b: loss(a, b, False), argnums=(0, 1))(x, y)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    xs = jnp.stack([x, x * 2.0, x - 1.0])
    for in_axes in ((0, None), (0, 0)):
        ys = y if in_axes[1] is None else jnp.stack([y, y, y * 0.5])
        f = lambda a, b, folded: (_dot(a, b, lc, rc, lb, rb, out_perm=list(perm)) if folded
                                  else jnp.transpose(_dot(a, b, lc, rc, lb, rb), perm))
        got = podlet.vmap(lambda a, b: f(a, b, True), in_axes=in_axes)(xs, ys)
        want = podlet.vmap(lambda a, b: f(a, b, False), in_axes=in_axes)(xs, ys)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def _attention_loss(q, k, v, t):
    """Flax's attention without the fused kernel (nn.dot_product_attention's einsums)."""
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1]).astype(q.dtype)
    w = podlet.nn.softmax(logits.astype(jnp.float32), axis=-1).astype(q.dtype)
    out = jnp.einsum("bhqk,bkhd->bqhd", w, v)
    return jnp.sum((out * t).astype(jnp.float32))


def _prims(graph):
    return [l.split("=", 1)[1].strip().split("(")[0] for l in graph.dump().splitlines() if " = " in l]


@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["f32", "bf16"])
def test_attention_step_same_bits_with_the_pass_off(dtype, monkeypatch):
    rng = np.random.default_rng(2)
    q, k, v, t = (jnp.asarray(rng.standard_normal((2, 17, 3, 8)).astype(dtype)) for _ in range(4))
    step = podlet.value_and_grad(_attention_loss, argnums=(0, 1, 2))
    entry = podlet.jit(step).lower(q, k, v, t)
    folded = _core.dot_transpose_stats(entry.graph)
    # Written in place: the forward output and the backward pass's dq, dk and dv ([b, h, t,
    # d] products stored as [b, t, h, d]; dv's product is taken as [b, h, k, d] for that,
    # prims/dot.cc); read in place: dout as [b, h, q, d]. No transpose is left.
    assert folded == 5, folded
    on = _prims(fusion.executable_graph(entry))
    assert "transpose" not in on, on
    monkeypatch.setenv("PODLET_DOT_TRANSPOSES", "0")
    off = _prims(fusion.executable_graph(podlet.jit(step).lower(q, k, v, t)))
    assert off.count("transpose") - on.count("transpose") == folded, (on, off)
    results = {}
    for flag in ("1", "0"):
        monkeypatch.setenv("PODLET_DOT_TRANSPOSES", flag)
        for threads in (1, 2):
            podlet.config.update("num_threads", threads)
            loss, grads = podlet.jit(step)(q, k, v, t)  # a new jit: a fresh cache entry
            results[(flag, threads)] = [np.asarray(a).tobytes() for a in (loss, *grads)]
    assert len({tuple(r) for r in results.values()}) == 1


def test_pass_leaves_products_read_elsewhere_and_graph_outputs():
    x, y = (jnp.ones(s, jnp.float32) for s in ((2, 3, 5, 7), (2, 7, 3, 4)))

    def two_readers(a, b):
        p = jnp.einsum("bhqk,bkhd->bhqd", a, b)
        return jnp.transpose(p, (0, 2, 1, 3)), p * 2.0

    def product_is_an_output(a, b):
        p = jnp.einsum("bhqk,bkhd->bhqd", a, b)
        return p, jnp.transpose(p, (0, 2, 1, 3))

    for f in (two_readers, product_is_an_output):
        assert _core.dot_transpose_stats(podlet.jit(f).lower(x, y).graph) == 0, f.__name__
    # The same product read by its transpose only is folded, and gives the same values.
    g = lambda a, b: jnp.transpose(jnp.einsum("bhqk,bkhd->bhqd", a, b), (0, 2, 1, 3))
    assert _core.dot_transpose_stats(podlet.jit(g).lower(x, y).graph) == 1
    np.testing.assert_array_equal(np.asarray(podlet.jit(g)(x, y)), np.transpose(np.full((2, 3, 5, 4), 7.0), (0, 2, 1, 3)))


def _dg(a, b, lc, rc, lb=(), rb=()):
    return podlet.lax.dot_general(a, b, ((lc, rc), (lb, rb)))


def test_products_read_a_transposes_input_in_place():
    rng = np.random.default_rng(4)
    a, b = jnp.asarray(rng.standard_normal((2, 5, 3, 4))), jnp.asarray(rng.standard_normal((2, 3, 4, 6)))
    c = jnp.asarray(rng.standard_normal((4, 5, 6)))
    cases = {  # function of (a, b, c), transposes folded
        "dout_as_heads": (lambda a, b, c: _dg(jnp.transpose(a, (0, 2, 1, 3)), b, (3,), (2,), (0, 1), (0, 1)), 1),
        "two_products": (lambda a, b, c: (lambda t: (_dg(t, b, (3,), (2,), (0, 1), (0, 1)),
                                                     _dg(b, t, (2,), (3,), (0, 1), (0, 1))))(jnp.transpose(a, (0, 2, 1, 3))),
                         1),
        "x_t_x": (lambda a, b, c: (lambda t: _dg(t, t, (2,), (2,), (0,), (0,)))(jnp.transpose(c, (1, 0, 2))), 1),
        # Left alone: another reader, the last dim moved, the free dims' order changed.
        "other_reader": (lambda a, b, c: (lambda t: (_dg(t, b, (3,), (2,), (0, 1), (0, 1)), t * 2.0))(
            jnp.transpose(a, (0, 2, 1, 3))), 0),
        "last_dim_moved": (lambda a, b, c: _dg(jnp.transpose(c, (0, 2, 1)), c, (2,), (1,)), 0),
        # (square, so that only the values could tell: the output's two free dims swapped)
        "free_order": (lambda a, b, c: _dg(jnp.transpose(c[:, :4], (1, 0, 2)), c[0], (2,), (1,)), 0),
    }
    for name, (f, n) in cases.items():
        assert _core.dot_transpose_stats(podlet.jit(f).lower(a, b, c).graph) == n, name
        got = podlet.tree_util.tree_leaves(podlet.jit(f)(a, b, c))
        want = podlet.tree_util.tree_leaves(f(a, b, c))  # eager: no passes
        for x, y in zip(got, want):
            assert np.asarray(x).tobytes() == np.asarray(y).tobytes(), name


def test_pmap_runs_a_folded_product_per_replica(monkeypatch):
    """pmap's executor stacks a product's replicas into one call only when its output leads
    with the batch; a folded product runs per replica and gives the unfolded bits."""
    n = podlet.local_device_count()
    rng = np.random.default_rng(3)
    q, k, v, t = (jnp.asarray(rng.standard_normal((n, 2, 9, 3, 8)).astype(np.float32)) for _ in range(4))
    a, b = (jnp.asarray(rng.standard_normal((n,) + s).astype(np.float32)) for s in ((2, 3, 5, 7), (2, 3, 7, 4)))
    # The batch swapped to the second place: stacked over the replicas in its first dim,
    # this product's output would be laid out wrongly.
    swapped = lambda a, b: jnp.transpose(_dg(a, b, (3,), (2,), (0, 1), (0, 1)), (1, 0, 2, 3))
    assert _core.dot_transpose_stats(podlet.jit(swapped).lower(a[0], b[0]).graph) == 1
    results = []
    for flag in ("1", "0"):
        monkeypatch.setenv("PODLET_DOT_TRANSPOSES", flag)
        step = podlet.pmap(podlet.value_and_grad(_attention_loss, argnums=(0, 1, 2)))  # a fresh cache entry
        out = podlet.tree_util.tree_leaves(step(q, k, v, t)) + [podlet.pmap(swapped)(a, b)]
        results.append([np.asarray(x).tobytes() for x in out])
    assert results[0] == results[1]
