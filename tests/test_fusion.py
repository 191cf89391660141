"""Elementwise fusion (cpp/podlet/ir/fusion.cc, prims/fused.cc): a fused graph gives
exactly the unfused graph's bits (random elementwise graphs over every fusible op and
dtype, special values, broadcasts; an MLP and a ResNet train step), for 1 and 2
threads, and it actually fuses (node counts drop, FLOPs are unchanged)."""
import os

import numpy as np
import pytest

import podlet
import podlet.numpy as jnp
from podlet import _core, lax, models, optim
from podlet.training import train_state

from fusion_chains import BF16, assert_same_bits, bn_statistics, random_chain


def _run_both(fun, *args):
    """Outputs of fun's traced graph unfused and fused, on 1 and on 2 threads."""
    g = podlet.make_graph(fun, *args)
    fg = _core.fuse_elementwise(g)
    leaves = podlet.tree_util.tree_leaves(args)
    arrs = [podlet._src.core.to_array(a) for a in leaves]
    ref = g.run(arrs)
    outs = []
    for n in (1, 2):
        podlet.config.update("num_threads", n)
        outs.append(fg.run(arrs))
    podlet.config.update("num_threads", 2)
    return g, fg, ref, outs


def _special(rng, shape, dtype=np.float32):
    x = rng.standard_normal(shape).astype(np.float32) * 3
    flat = x.reshape(-1)
    k = flat.size
    vals = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 88.9, -104.5, 1.0, -1.0]
    idx = rng.choice(k, size=min(k, len(vals) * 2), replace=False)
    for j, i in enumerate(idx):
        flat[i] = vals[j % len(vals)]
    return x.astype(dtype)


UNARY = ["neg", "abs", "sign", "exp", "log", "log1p", "expm1", "tanh", "logistic", "sqrt", "rsqrt", "erf",
         "floor", "ceil"]
BINARY = ["add", "sub", "mul", "div", "max", "min", "pow"]
COMPARE = ["eq", "ne", "lt", "le", "gt", "ge"]


def _bcast(r, a, b, c, s):  # per-channel vector, scalar, or an implicit broadcast
    w = r.integers(3)
    if w == 0:
        return a * lax.broadcast_in_dim(c, a.shape, (a.ndim - 1,)) + s
    if w == 1:
        return a - lax.broadcast_in_dim(s, a.shape, ())
    return jnp.maximum(a, c) / (s + 2.0)


def _cast(r, a, b, c, s):  # through another float dtype and back (rounds)
    other = [np.float32, BF16, np.float64][r.integers(3)]
    return lax.convert_element_type(lax.convert_element_type(a, other) * 1.5, a.dtype)


STEPS = {
    "u": lambda r, a, b, c, s: getattr(lax, UNARY[r.integers(len(UNARY))])(a),
    "b": lambda r, a, b, c, s: getattr(lax, BINARY[r.integers(len(BINARY))])(a, b),
    "cmp_select": lambda r, a, b, c, s: lax.select(podlet._src.core.bind(COMPARE[r.integers(len(COMPARE))], a, b), a, b),
    "bcast": _bcast,
    "cast": _cast,
    "ipow": lambda r, a, b, c, s: lax.integer_pow(a, int(r.integers(-3, 4))),
    "clamp": lambda r, a, b, c, s: lax.clamp(lax.convert_element_type(-1.0, a.dtype), a,
                                            lax.convert_element_type(2.0, a.dtype)),
    "reshape": lambda r, a, b, c, s: (a.reshape(a.shape[0], -1) * 2.0).reshape(a.shape),  # inside a chain, then back
}


def _random_chain(seed, dtype, n_ops=14):
    """A random elementwise function of (x, y, z [full], c [per channel], s [0-d]) over
    every fusible op. Outputs: the last value, one intermediate, a bool mask, an int cast."""
    return random_chain(seed, STEPS, n_ops, lambda vals: (vals[-1], vals[len(vals) // 2], vals[-2] > vals[-3],
                                                          lax.convert_element_type(vals[-1], np.int32)))


@pytest.mark.parametrize("dtype", [np.float32, BF16, np.float64])
@pytest.mark.parametrize("seed", range(6))
def test_random_chains_bit_identical(seed, dtype):
    rng = np.random.default_rng(100 + seed)
    shape = (3, 5, 7, 24)  # 2520 elements: several tiles of 512 and a partial one
    x, y, z = (_special(rng, shape, dtype) for _ in range(3))
    c = _special(rng, (24,), dtype)
    s = np.asarray(rng.standard_normal(), dtype)
    fun = _random_chain(seed, dtype)
    g, fg, ref, outs = _run_both(fun, x, y, z, c, s)
    assert "fused_elementwise" in fg.prim_counts()
    assert fg.num_nodes < g.num_nodes
    assert fg.flops() == g.flops()
    for o in outs:
        assert_same_bits(ref, o)


def test_f32_results_cast_to_bf16_round_in_their_own_op():
    # An f32 value read only by a cast to bf16 is rounded by the op that makes it (the
    # cast becomes an alias): every op kind, special values, and a value that is also
    # used elsewhere (so stays f32). Bits of the unfused graph, 1 and 2 threads.
    rng = np.random.default_rng(5)
    x, y = _special(rng, (5, 7, 64)), _special(rng, (5, 7, 64))
    x16 = x.astype(BF16)

    def f(x, y, x16):
        outs = [getattr(lax, u)(x).astype(BF16) for u in UNARY]
        outs += [getattr(lax, b)(x, y).astype(BF16) for b in BINARY]
        outs += [lax.integer_pow(x, 3).astype(BF16), lax.integer_pow(x, -2).astype(BF16)]
        outs.append(lax.select(x > y, x, y).astype(BF16))
        outs.append(lax.clamp(jnp.float32(-1.0), x, jnp.float32(2.5)).astype(BF16))
        h = x * y
        outs += [h.astype(BF16), h]
        outs.append((x16.astype(jnp.float32) * 3.0).astype(BF16))
        return outs

    g, fg, ref, outs = _run_both(f, x, y, x16)
    assert "convert_element_type" not in fg.prim_counts()  # every cast is inside a fused pass
    for o in outs:
        assert_same_bits(ref, o)


@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["f32", "bf16"])
def test_division_by_a_power_of_two_constant_is_a_multiply(dtype):
    # x / c == x * (1 / c) exactly when c is a power of two (one rounding of the same
    # exact value): NaN, infinities and results that underflow to subnormals included.
    rng = np.random.default_rng(11)
    x = _special(rng, (64, 33)).astype(dtype)
    x.reshape(-1)[:6] = np.array([1.2e-38, -3e-38, 2.3509887e-38, 3e38, 6e-39, 1e-45], np.float32).astype(dtype)
    c4 = np.full((64, 33), 4.0, dtype)

    def f(x):
        d = jnp.asarray(np.array(2.0, dtype))
        return (x / d, (x * 3.0) / jnp.asarray(np.array(0.125, dtype)), x / jnp.asarray(c4), x / 3.0,
                x / jnp.asarray(np.where(np.arange(33) % 2, 2.0, 4.0).astype(dtype)))

    g, fg, ref, outs = _run_both(f, jnp.asarray(x))
    for o in outs:
        assert_same_bits(ref, o)
    # Three divisions by one power of two become multiplies; by 3 and by a mixed
    # array they stay divisions.
    fused_prims = ",".join(l.split("prims=")[1].rstrip("}") for l in str(fg).splitlines() if "prims=" in l)
    assert g.prim_counts()["div"] == 5 and fused_prims.split(",").count("div") == 2, fused_prims


def test_large_array_many_chunks():
    # More than one parallel chunk (8192 elements) so the 2-thread run really splits.
    rng = np.random.default_rng(7)
    x = rng.standard_normal((64, 33, 40)).astype(np.float32)
    b = rng.standard_normal((40,)).astype(np.float32)

    def f(x, b):
        h = x * 0.5 + b
        return jnp.where(h > 0, h, jnp.zeros_like(h)).astype(BF16), jnp.tanh(h) * jnp.exp(-h)

    g, fg, ref, outs = _run_both(f, x, b)
    assert fg.prim_counts().get("fused_elementwise") == 1
    for o in outs:
        assert_same_bits(ref, o)


def test_streamed_outputs_of_every_layout():
    # Outputs of 4 MiB and more leave the fused pass through non-temporal stores: whole
    # 64-byte lines from a staged tile, the partial last tile (77 elements past a tile
    # boundary) by plain stores. Every storage layout: f32 (computed straight into its
    # output otherwise), bf16 and bool (converted from their registers), f64, an input
    # passed through.
    rng = np.random.default_rng(11)
    n = 4 * 1024 * 1024 + 77
    x = _special(rng, (n,))
    b = rng.standard_normal((n,)).astype(np.float32)

    def f(x, b):
        h = x * 0.5 + b
        return (h, h.astype(BF16), h > 0, h.astype(jnp.float64) * 3.0, jnp.where(h > 1, x, b),
                jnp.maximum(h, 0.0).astype(jnp.int32))

    g, fg, ref, outs = _run_both(f, x, b)
    assert fg.prim_counts().get("fused_elementwise") == 1
    for o in outs:
        assert_same_bits(ref, o)


def test_bn_relu_residual_cast_is_one_node():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 8, 8, 16)).astype(np.float32)
    r = rng.standard_normal((4, 8, 8, 16)).astype(np.float32)
    mean, var, gamma, beta = (rng.standard_normal(16).astype(np.float32) for _ in range(4))

    def f(x, r, mean, var, gamma, beta):
        y = (x - mean.reshape(1, 1, 1, 16)) * (lax.rsqrt(jnp.abs(var) + 1e-5) * gamma).reshape(1, 1, 1, 16)
        y = y + beta.reshape(1, 1, 1, 16)
        return podlet.nn.relu(y + r).astype(BF16)

    g, fg, ref, outs = _run_both(f, x, r, mean, var, gamma, beta)
    big = [n for n in fg.dump().splitlines() if "fused_elementwise" in n and "(4, 8, 8, 16)" in n]
    assert len(big) == 1, fg.dump()
    for o in outs:
        assert_same_bits(ref, o)


def test_uniform_constant_read_as_scalar_and_dropout_mask():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((16, 300)).astype(np.float32)
    key = podlet.random.PRNGKey(0)

    def f(x, key):
        keep = podlet.random.bernoulli(key, 0.8, x.shape)
        return jnp.where(keep, x / 0.8, jnp.zeros_like(x))

    g, fg, ref, outs = _run_both(f, x, key)
    for o in outs:
        assert_same_bits(ref, o)


def _mlp_setup():
    rng = np.random.default_rng(0)
    params = {"w1": jnp.asarray(rng.standard_normal((64, 96)).astype(np.float32) * 0.1),
              "b1": jnp.asarray(np.zeros(96, np.float32)),
              "w2": jnp.asarray(rng.standard_normal((96, 10)).astype(np.float32) * 0.1),
              "b2": jnp.asarray(np.zeros(10, np.float32))}
    x = jnp.asarray(rng.standard_normal((32, 64)).astype(np.float32))
    y = jnp.asarray(rng.integers(0, 10, 32).astype(np.int32))
    tx = optim.adamw(1e-2, weight_decay=1e-4)

    def loss(p, x, y):
        h = podlet.nn.relu(x @ p["w1"] + p["b1"])
        logits = h @ p["w2"] + p["b2"]
        return optim.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    def step(p, o, x, y):
        l, g = podlet.value_and_grad(loss)(p, x, y)
        u, o = tx.update(g, o, p)
        return optim.apply_updates(p, u), o, x, y

    return step, params, tx.init(params), x, y


def _run_steps(step, state, n, fusion, threads):
    os.environ["PODLET_FUSION"] = "1" if fusion else "0"
    podlet.config.update("num_threads", threads)
    try:
        j = podlet.jit(step)
        for _ in range(n):
            state = j(*state)
    finally:
        os.environ.pop("PODLET_FUSION", None)
        podlet.config.update("num_threads", 2)
    return podlet.tree_util.tree_leaves(state)


@pytest.mark.parametrize("dtype", [np.float32, BF16])
@pytest.mark.parametrize("shape", [(4, 37, 33, 64), (2, 9, 11, 512), (8, 65, 3), (2, 600, 40)],
                         ids=["bn_64ch", "bn_512ch_two_column_tiles", "3_columns", "40_columns"])
def test_bn_statistics_are_summed_in_the_fused_pass(shape, dtype):
    """BatchNorm's sum(x) and sum(x*x) over the leading axes come out of the pass that
    computes x (no reduce_sum node, the squared array never written), with exactly
    reduce_sum's bits: several row chunks, partial chunks, column tiles, odd column counts."""
    rng = np.random.default_rng(11)
    x = _special(rng, shape, dtype)
    f = bn_statistics(len(shape), dtype)
    g, fg, ref, outs = _run_both(f, x)
    assert "reduce_sum" in g.prim_counts()
    assert "reduce_sum" not in fg.prim_counts(), fg.dump()
    assert fg.prim_counts().get("fused_elementwise") == 1
    assert fg.flops() == g.flops()
    for o in outs:
        assert_same_bits(ref, o)


def test_bn_apply_recomputes_the_f32_copy_instead_of_reading_it():
    """BatchNorm on a bf16 conv output: the statistics pass converts x to f32 and sums it;
    the mean seals that pass, so the apply pass is another one. It used to read x's f32
    copy, which the statistics pass wrote for it (4 bytes an element out, 4 back in);
    the apply pass now loads x (2 bytes) and converts it again. Same bits, and the only
    full-size f32 array a fused node writes is the graph's own output."""
    rng = np.random.default_rng(19)
    x = _special(rng, (4, 9, 9, 16), BF16)

    def f(x):
        xf = x.astype(np.float32)
        n = xf.size / 16
        mean = jnp.sum(xf, (0, 1, 2)) / n
        var = jnp.sum(xf * xf, (0, 1, 2)) / n - mean * mean
        z = jnp.maximum((xf - mean) * lax.rsqrt(var + 1e-5), 0.0)
        return z.astype(BF16), z

    g, fg, ref, outs = _run_both(f, x)
    for o in outs:
        assert_same_bits(ref, o)
    lhs = [line.split("=")[0] for line in fg.dump().splitlines() if "= fused_elementwise" in line]
    assert len(lhs) >= 2 and sum(side.count("float32(4, 9, 9, 16)") for side in lhs) == 1, fg.dump()
    assert fg.flops() == g.flops()


@pytest.mark.parametrize("shape", [(4, 37, 33, 64), (3, 1000, 7)], ids=["64ch", "7_columns"])
def test_register_aliases_and_one_pass_forms_keep_the_bits(shape):
    """Converts that leave a register as it is (bf16 -> f32, bf16 -> bf16) alias their
    operand instead of copying it, also when the alias is summed, stored, or read after
    its root's last direct use; x**2 and x**3 take their one-pass forms; bf16 results are
    rounded in the op's own loop. All with the unfused graph's bits, special values too."""
    rng = np.random.default_rng(13)
    x = _special(rng, shape, BF16)
    r = _special(rng, shape, BF16)
    axes = tuple(range(len(shape) - 1))

    def f(x, r):
        xf = x.astype(np.float32)                  # alias of the loaded register
        same = lax.convert_element_type(x, BF16)   # bf16 -> bf16: alias, then stored
        y = (xf * 0.75 + 0.5).astype(BF16) + r     # bf16 add, rounded in its loop
        return (jnp.sum(xf, axes), jnp.sum(lax.integer_pow(xf, 2), axes), jnp.sum(lax.integer_pow(xf, 3), axes),
                same, y, jnp.maximum(y, 0).astype(np.float32) * xf)

    g, fg, ref, outs = _run_both(f, x, r)
    assert fg.prim_counts().get("fused_elementwise") == 1, fg.dump()
    for o in outs:
        assert_same_bits(ref, o)


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_sibling_sums_read_their_shared_array_once(dtype):
    """Two column sums over the same gradient g from separate chains (BatchNorm's backward
    computes sum(g * c) and sum(g * xhat) so) run as one pass: g is loaded once. The small
    node between them that reads the first sum moves after the merged pass; a third sum
    that needs the first one's result stays its own pass. Bits as unfused, 1 and 2 threads."""
    rng = np.random.default_rng(17)
    shape = (4, 13, 11, 64)
    g = _special(rng, shape)
    x = _special(rng, shape, dtype)
    m = rng.standard_normal(64).astype(np.float32)
    axes = (0, 1, 2)

    def f(g, x, m):
        s1 = jnp.sum(-(g * 0.5), axes)
        t = s1 * 3.0                                    # reads s1; sits between the passes
        s2 = jnp.sum((x.astype(np.float32) - m) * g, axes)
        s3 = jnp.sum((x.astype(np.float32) - t) * g, axes)  # needs s1: cannot join it
        return s1, t, s2, s3

    gr, fg, ref, outs = _run_both(f, g, x, m)
    assert _core.fusion_stats(gr)["siblings_merged"] == 1, fg.dump()
    assert "reduce_sum" not in fg.prim_counts(), fg.dump()
    assert fg.flops() == gr.flops()
    for o in outs:
        assert_same_bits(ref, o)
    with np.errstate(invalid="ignore", over="ignore"):
        want = ((x.astype(np.float64) - m) * g).sum(axis=axes)
    np.testing.assert_allclose(np.asarray(outs[0][2]), want, rtol=1e-4, atol=0.05, equal_nan=True)


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_per_channel_math_on_a_sum_does_not_split_the_pass(dtype):
    """BatchNorm's backward in autodiff order: g = relu mask of dy, sum(g), per-channel
    arithmetic on that sum, then g * k and sum((x - m) * g) and sum(-g * k). The
    per-channel nodes sink below the full-size ones (ir/fusion_order.cc), so g, g * k and
    all three sums come out of one pass (g is never written); only what needs the
    per-channel result is a second pass. Bits as unfused, 1 and 2 threads."""
    rng = np.random.default_rng(19)
    shape = (4, 13, 11, 64)
    dy = _special(rng, shape, dtype)
    x = _special(rng, shape, dtype)
    m = rng.standard_normal(64).astype(np.float32)
    k = rng.standard_normal(64).astype(np.float32)
    axes = (0, 1, 2)

    def f(dy, x, m, k):
        xf = x.astype(np.float32)
        g = jnp.where(xf > 0, dy.astype(np.float32), 0.0)
        s = jnp.sum(g, axes)
        c = s * 2.0 + 1.0  # per-channel, reads the sum
        gk = g * k
        return c, jnp.sum((xf - m) * g, axes), jnp.sum(-gk, axes), (gk * c).astype(dtype)

    gr, fg, ref, outs = _run_both(f, dy, x, m, k)
    passes = [line for line in fg.dump().splitlines() if "fused_elementwise(" in line and f"n={np.prod(shape)}," in line]
    assert len(passes) == 2, fg.dump()
    assert passes[0].count("reduce_sum") == 3, fg.dump()  # one pass: g stays in registers
    for o in outs:
        assert_same_bits(ref, o)


def test_reductions_that_do_not_fit_stay_reductions():
    """Sums over trailing axes, over everything, or of a value outside any group keep their
    own reduce_sum node, and the results are unchanged."""
    rng = np.random.default_rng(12)
    x = rng.standard_normal((6, 40, 32)).astype(np.float32)

    def f(x):
        h = jnp.exp(x) * 2.0
        return jnp.sum(h, axis=-1), jnp.sum(h), jnp.sum(x, axis=0), jnp.sum(h, axis=(0, 2))

    g, fg, ref, outs = _run_both(f, x)
    assert fg.prim_counts().get("reduce_sum") == 4
    for o in outs:
        assert_same_bits(ref, o)


def test_mlp_train_steps_bit_identical():
    step, p, o, x, y = _mlp_setup()
    ref = _run_steps(step, (p, o, x, y), 3, False, 2)
    for threads in (1, 2):
        assert_same_bits(ref, _run_steps(step, (p, o, x, y), 3, True, threads))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_resnet_train_step_bit_identical(dtype):
    model = models.ResNet(stage_sizes=[1, 1], num_filters=8, num_classes=5, dtype=dtype)
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.standard_normal((4, 24, 24, 1)).astype(np.float32))
    y = jnp.asarray(rng.integers(0, 5, 4).astype(np.int32))
    v = model.init(podlet.random.PRNGKey(0), x, train=False)
    st = train_state.TrainState.create(apply_fn=model.apply, params=v["params"], tx=optim.adamw(1e-3, weight_decay=1e-4))

    def step(st, bs, x, y):
        def loss(p):
            logits, upd = model.apply({"params": p, "batch_stats": bs}, x, train=True, mutable=["batch_stats"])
            return optim.softmax_cross_entropy_with_integer_labels(logits, y).mean(), upd
        (l, upd), g = podlet.value_and_grad(loss, has_aux=True)(st.params)
        return st.apply_gradients(grads=g), upd["batch_stats"], x, y

    ref = _run_steps(step, (st, v["batch_stats"], x, y), 2, False, 2)
    for threads in (1, 2):
        assert_same_bits(ref, _run_steps(step, (st, v["batch_stats"], x, y), 2, True, threads))
    g = podlet.jit(step).lower(st, v["batch_stats"], x, y).graph
    fg = _core.fuse_elementwise(g)
    stats = _core.fusion_stats(g)
    assert stats["groups"] > 10 and fg.num_nodes < 0.7 * g.num_nodes, stats
    assert fg.flops() == g.flops()


def test_jit_uses_the_fused_graph_and_env_switch():
    f = podlet.jit(lambda a: jnp.exp(a) * 2.0 + 1.0)
    a = jnp.asarray(np.ones((50,), np.float32))
    for env, want in (("1", True), ("0", False)):
        os.environ["PODLET_FUSION"] = env
        try:
            _core.take_profile_detailed()
            _core.set_profiling(True)
            f(a)
        finally:
            _core.set_profiling(False)
            os.environ.pop("PODLET_FUSION", None)
        prims = {k[0] for k in _core.take_profile_detailed()}
        assert ("fused_elementwise" in prims) == want, prims


def test_grad_of_jit_still_differentiates():
    # A jit'd function inlined into a grad trace must stay unfused (fused nodes have no VJP).
    f = podlet.jit(lambda a: jnp.sum(jnp.tanh(a) * 3.0 + a))
    a = jnp.asarray(np.linspace(-1, 1, 20).astype(np.float32))
    f(a)
    g = podlet.grad(f)(a)
    np.testing.assert_allclose(np.asarray(g), 3 * (1 - np.tanh(np.asarray(a)) ** 2) + 1, rtol=1e-5)
