"""Fused programs compiled to machine code: AVX-512 (cpp/podlet/prims/fused_jit.cc) and
AVX2 (fused_jit_ymm.cc). For every instruction the generators emit, the compiled program
gives the interpreter's bits and the unfused graph's bits (special values: NaNs of both
signs and with payloads, infinities, signed zeros, subnormals, values that round to
infinity in bf16, the branch points of exp / tanh / logistic), on 1 and 2 threads, with
periodic, per-row and scalar operands, partial last vectors, non-temporal outputs and
fused sums. Each test checks that compiled code really ran (the JIT's run counter moved),
so a program the generator refused cannot pass for one it compiled.

Every test runs once per generator the host can run (the `isa` fixture: AVX2, and the
best ISA where it is AVX-512), so an AVX-512 host checks the AVX2 code too. Where the two
differ the tests say so: the AVX2 code refuses periods that are not multiples of 8 and
leaf sums (the interpreter keeps those), and chooses its vectors per iteration by what
fits in its 16 registers."""
import numpy as np
import pytest

import podlet
import podlet.numpy as jnp
from podlet import _core, lax
from fusion_chains import BF16, active_isa, assert_same_bits, bn_statistics, random_chain

JIT_ISAS = [i for i in dict.fromkeys(["avx2", podlet.cpu_info()["best_isa"]]) if i in podlet.cpu_info()["available_isas"]]


@pytest.fixture(autouse=True, params=JIT_ISAS or ["ref"])
def isa(request):
    """Runs the test with the active ISA set to each that has a code generator (back to the
    host's after)."""
    with active_isa(request.param) as name:
        yield name


def have_jit():
    return _core.active_isa() in ("avx2", "avx512", "avx512bf16", "amx")


def ymm():
    """The AVX2 generator is the one in use (8 lanes, periods in 8s, no leaf sums)."""
    return _core.active_isa() == "avx2"


def _special(rng, shape, dtype=np.float32):
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    flat = x.reshape(-1)
    bits = flat.view(np.uint32)
    # and the edges of exp / tanh / logistic: exp's clamps at -104 and 89, tanh's clamps at
    # +-7.9988 and its x-itself switch at |x| = 0.0004, logistic's subnormal range
    vals = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 3.4e38, -3.4e38, 1.0, -1.0, 0.5,
            88.72, 89.5, -103.9, -104.5, 7.9988122, -7.998811, 0.0004, -0.00039999, -87.5, -100.0]
    idx = rng.choice(flat.size, size=min(flat.size, 3 * len(vals)), replace=False)
    for j, i in enumerate(idx):
        flat[i] = vals[j % len(vals)]
    # NaNs with payloads (quiet and signalling), both signs: the NaN rules pick operands.
    for j, i in enumerate(rng.choice(flat.size, size=min(flat.size, 8), replace=False)):
        bits[i] = [0x7fc01234, 0xffc00abc, 0x7f800001, 0xff812345][j % 4]
    with np.errstate(invalid="ignore"):
        return x.astype(dtype)


def _run(fun, *args, expect_compiled=True):
    """Unfused outputs, and the fused graph's outputs interpreted and compiled (1 and 2
    threads). Asserts the compiled runs happened (or, expect_compiled=False or below AVX2,
    did not; None: some of its programs may be compiled, some not)."""
    expect_compiled = expect_compiled and have_jit() if expect_compiled is not None else None
    g = podlet.make_graph(fun, *args)
    fg = _core.fuse_elementwise(g)
    assert "fused_elementwise" in fg.prim_counts()
    arrs = [podlet._src.core.to_array(a) for a in podlet.tree_util.tree_leaves(args)]
    ref = g.run(arrs)
    try:
        _core.set_fused_jit(False)
        interpreted = fg.run(arrs)
        _core.set_fused_jit(True)
        compiled = []
        for n in (1, 2):
            podlet.config.update("num_threads", n)
            before = _core.fused_jit_stats()["runs"]
            compiled.append(fg.run(arrs))
            ran = _core.fused_jit_stats()["runs"] - before
            assert expect_compiled is None or (ran > 0) == expect_compiled, (ran, fg.dump())
    finally:
        _core.set_fused_jit(True)
        podlet.config.update("num_threads", 2)
    assert_same_bits(ref, interpreted)
    for c in compiled:
        assert_same_bits(ref, c)
    return fg


UNARY = ["neg", "abs", "sqrt", "rsqrt", "exp", "tanh", "logistic", "erf"]
BINARY = ["add", "sub", "mul", "div", "max", "min"]
COMPARE = ["eq", "ne", "lt", "le", "gt", "ge"]


def _bcast(r, a, b, c, s):
    w = r.integers(3)
    if w == 0:
        return a * lax.broadcast_in_dim(c, a.shape, (a.ndim - 1,)) + s
    if w == 1:
        return lax.broadcast_in_dim(s, a.shape, ()) - a
    return jnp.maximum(a, c) / (s + 2.0)


def _logic(r, a, b, c, s):
    p, q = a > b, a <= 0.5
    m = [p & q, p | q, p ^ q, ~p][r.integers(4)]
    return lax.select(m == (a != a), a, b)  # a bool compare too


STEPS = {  # only what the generator compiles
    "u": lambda r, a, b, c, s: getattr(lax, UNARY[r.integers(len(UNARY))])(a),
    "b": lambda r, a, b, c, s: getattr(lax, BINARY[r.integers(len(BINARY))])(a, b),
    "cmp_select": lambda r, a, b, c, s: lax.select(podlet._src.core.bind(COMPARE[r.integers(len(COMPARE))], a, b), a, b),
    "bcast": _bcast,
    # f32 -> bf16 -> f32 (or bf16 arithmetic rounding)
    "round": lambda r, a, b, c, s: lax.convert_element_type(lax.convert_element_type(a, BF16) * 1.5, a.dtype),
    "ipow": lambda r, a, b, c, s: lax.integer_pow(a, int(r.choice([-3, -2, -1, 0, 1, 2, 3, 5, 7]))),
    "clamp": lambda r, a, b, c, s: lax.clamp(lax.convert_element_type(-1.0, a.dtype), a,
                                            lax.convert_element_type(2.0, a.dtype)),
    "logic": _logic,
    "finite": lambda r, a, b, c, s: lax.select(lax.is_finite(a), b, a),
    # float <-> bool converts
    "boolcast": lambda r, a, b, c, s: lax.convert_element_type(lax.convert_element_type(a, np.bool_), a.dtype) + b,
}


def _jit_chain(seed, n_ops=16):
    return random_chain(seed, STEPS, n_ops, lambda vals: (vals[-1], vals[len(vals) // 2], vals[-2] > vals[-3]))


@pytest.mark.parametrize("channels", [32, 24, 197])
@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["f32", "bf16"])
@pytest.mark.parametrize("seed", range(6))
def test_compiled_random_chains_keep_the_bits(seed, dtype, channels):
    # Per-channel operands whose period is a multiple of 16 (one load per vector) and not
    # (the lanes past the period's end read its start: two masked loads). The AVX2 code
    # takes periods in 8s (24 but not 197: the chain's programs that read the per-channel
    # operand are interpreted there, the others compiled).
    rng = np.random.default_rng(500 + seed)
    shape = (3, 5, 7, channels)
    x, y, z = (_special(rng, shape, dtype) for _ in range(3))
    c = _special(rng, (channels,), dtype)
    s = np.asarray(rng.standard_normal(), dtype)
    _run(_jit_chain(seed), x, y, z, c, s, expect_compiled=None if ymm() and channels % 8 else True)


@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["f32", "bf16"])
def test_exp_tanh_logistic_across_their_ranges(dtype):
    # A dense sweep over every branch of the three (clamps, polynomial / rational switch,
    # subnormal results, overflow) plus the special values.
    rng = np.random.default_rng(9)
    sweep = np.concatenate([np.linspace(-110, 95, 40000), np.linspace(-1, 1, 4000), np.geomspace(1e-30, 1, 2000)])
    x = np.concatenate([sweep, -sweep, _special(rng, (4096,)).astype(np.float64)]).astype(np.float32).astype(dtype)

    def f(x, s):
        return jnp.exp(x) * s, jnp.tanh(x) * s, podlet.nn.sigmoid(x) * s, jnp.exp(jnp.tanh(x) * 3.0) + x

    _run(f, x, np.asarray(1.0, dtype))


@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["f32", "bf16"])
def test_erf_and_exact_gelu_across_their_range(dtype):
    # erf's rational form with FMAs (jax's): its clamps at +-3.8325, the subnormal inputs,
    # the special values; and the exact GELU (ViT-B's and Swin's) with its derivative.
    rng = np.random.default_rng(10)
    sweep = np.concatenate([np.linspace(-6, 6, 40000), np.linspace(3.78, 3.88, 2000), np.geomspace(1e-45, 1, 3000)])
    x = np.concatenate([sweep, -sweep, _special(rng, (4096,)).astype(np.float64)]).astype(np.float32).astype(dtype)

    def f(x, s):
        gelu = lambda t: podlet.nn.gelu(t, approximate=False)
        return lax.erf(x) * s, gelu(x) * s, podlet.grad(lambda t: gelu(t).sum())(x) + s

    _run(f, x, np.asarray(1.0, dtype))


@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["f32", "bf16"])
@pytest.mark.parametrize("shape", [(64, 197, 192), (3, 40, 32), (6, 197, 197), (5, 7, 33), (2, 3, 17)],
                         ids=["vit_tokens", "small", "attention_rows", "odd_rows", "rows_of_17"])
def test_per_row_operands(shape, dtype):
    # LayerNorm's per-token mean and scale (and softmax's row max and sum) are constant
    # along a row of the pass (with a per-channel gain on top, and a per-row bool mask):
    # row index = element // row length; a row length that is not a multiple of 16 puts
    # two rows in some vectors.
    rng = np.random.default_rng(23)
    x = _special(rng, shape, dtype)
    gain = _special(rng, shape[-1:], np.float32)
    keep = rng.random(shape[:-1]) > 0.3

    def f(x, gain, keep):
        xf = x.astype(np.float32)
        mean = xf.mean(-1, keepdims=True)
        var = (xf * xf).mean(-1, keepdims=True) - mean * mean
        y = (xf - mean) * lax.rsqrt(var + 1e-6) * gain
        y = jnp.where(jnp.expand_dims(keep, -1), y, -y)
        return y.astype(dtype), jnp.tanh(y) * mean, podlet.nn.softmax(xf * 0.5, axis=-1)

    _run(f, x, gain, keep)


@pytest.mark.parametrize("n", [1, 15, 16, 17, 1000, 4 * 1024 * 1024 + 77])
def test_partial_vectors_and_streamed_outputs(n):
    # A last vector of 1-15 lanes runs masked; outputs of 4 MiB and more are written with
    # non-temporal stores (f32, bf16 and bool layouts), the masked tail with plain ones.
    rng = np.random.default_rng(n)
    x = _special(rng, (n,))
    y = _special(rng, (n,), BF16)

    def f(x, y, s):
        h = x * s + y.astype(np.float32)
        return h, h.astype(BF16), h > 0, jnp.where(h > 1, x, 0.0), (y * y).astype(BF16)

    _run(f, x, y, np.float32(0.75))


def _leaf_runs():
    return _core.fused_jit_stats()["leaf_runs"]


def _reg_leaf_runs():
    return _core.fused_jit_stats()["reg_leaf_runs"]


@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["f32", "bf16"])
@pytest.mark.parametrize("shape", [(4, 37, 33, 64), (2, 9, 11, 512), (5, 300, 48), (3, 77, 41, 16),
                                   (2, 30, 31, 128), (7, 13, 17, 256), (8, 64, 65, 64)],
                         ids=["64ch", "512ch", "48ch", "16ch", "128ch", "256ch", "many_chunks"])
def test_fused_sums_come_out_of_compiled_passes(shape, dtype):
    # BatchNorm's statistics. A whole chunk of rows of a power of two of >= 16 columns
    # adds its 16-row leaves in the compiled code (kLeaves); other chunks (48 columns;
    # the partial last chunk of the others) write their rows for sum_rows. Both in
    # reduce_sum's order. many_chunks: tasks of several chunks (130 of them).
    rng = np.random.default_rng(17)
    x = _special(rng, shape, dtype)
    f = bn_statistics(len(shape), dtype)
    before, before_reg = _leaf_runs(), _reg_leaf_runs()
    fg = _run(f, x)
    assert "reduce_sum" not in fg.prim_counts()
    # (the AVX2 code writes every chunk's rows)
    assert (_leaf_runs() > before) == (have_jit() and not ymm() and shape[-1] != 48)
    # The two sums' leaves in registers up to 128 columns (16 accumulators); in memory
    # slots at 256 and 512.
    assert (_reg_leaf_runs() > before_reg) == (have_jit() and not ymm() and shape[-1] in (16, 64, 128))


def test_leaf_sums_start_like_the_rows_path():
    # A leaf's sum starts from -0.0 in the compiled code and from its first row in
    # sum_rows: the same for an all -0.0 column (-0.0), a +0.0 / -0.0 mix, and a
    # signalling NaN in a leaf's first or last row (quieted either way). bf16 in, summed
    # after the exact widening, as BatchNorm's statistics are: a signalling NaN reaches
    # the sum as it is.
    x = np.random.default_rng(5).standard_normal((4, 8, 8, 64)).astype(BF16)  # 256 rows: one chunk
    rows = x.reshape(-1, 64)
    bits = rows.view(np.uint16)
    bits[:, 0] = 0x8000  # -0.0
    bits[:, 1] = 0
    bits[::3, 2] = 0x8000
    bits[1::3, 2] = 0
    for j, r in enumerate([0, 15, 16, 31, 255, 128]):
        bits[:, 3 + j] = 0
        bits[r, 3 + j] = [0x7f81, 0xff92][j % 2]  # signalling NaNs
    bits[16:32, 9] = 0x8000  # a leaf of -0.0 among positive rows

    def f(x):
        xf = x.astype(np.float32)
        return jnp.sum(xf, (0, 1, 2)), jnp.sum(-(xf * xf), (0, 1, 2))

    before, before_reg = _leaf_runs(), _reg_leaf_runs()
    fg = _run(f, x)
    assert "reduce_sum" not in fg.prim_counts()
    assert (_leaf_runs() > before) == (have_jit() and not ymm())
    assert (_reg_leaf_runs() > before_reg) == (have_jit() and not ymm())


@pytest.mark.parametrize("channels", [64, 512, 80])
def test_fused_sums_keep_the_first_nan(channels):
    # Column sums add row after row into an accumulator; once it is a NaN, every later add
    # must return that NaN (quieted), not the row's: reduce_sum's rule. Two NaNs of other
    # payloads and signs in every column, in the same 16-row leaf of the pairwise tree and
    # in different leaves; 80 channels: a 64-column block and a 16-column tail.
    rng = np.random.default_rng(channels)
    x = rng.standard_normal((4, 8, 8, channels)).astype(np.float32)
    rows = x.reshape(-1, channels)
    bits = rows.view(np.uint32)
    payloads = [0x7fc01234, 0xffc00abc, 0x7f800001, 0xff812345, 0x7fc00001, 0xffffffff]
    for j in range(channels):
        r1, r2, r3 = 1 + j % 5, 9 + j % 6, 40 + j % 7
        bits[r1, j] = payloads[j % 6]
        bits[r2, j] = payloads[(j + 1) % 6]
        if j % 3 == 0:  # a third NaN in another leaf: the tree's combines
            bits[r3, j] = payloads[(j + 2) % 6]
        if j % 4 == 1:  # an infinity before the NaNs in some columns
            rows[0, j] = np.inf
    before, before_reg = _leaf_runs(), _reg_leaf_runs()
    _run(bn_statistics(4, np.float32), x)
    assert (_leaf_runs() > before) == (have_jit() and not ymm() and channels != 80)  # 256 rows: whole chunks
    assert (_reg_leaf_runs() > before_reg) == (have_jit() and not ymm() and channels == 64)  # 512: memory slots


def test_batchnorm_train_pass_forward_and_backward():
    # The ResNet BatchNorm passes (normalise, scale, shift, ReLU, residual; and their VJP
    # with the statistics' gradients), the programs the JIT exists for.
    rng = np.random.default_rng(3)
    x = _special(rng, (8, 14, 14, 64), BF16)
    r = _special(rng, (8, 14, 14, 64), BF16)
    gamma = rng.standard_normal(64).astype(np.float32)
    beta = rng.standard_normal(64).astype(np.float32)

    def loss(x, r, gamma, beta):
        xf = x.astype(np.float32)
        mean = xf.mean((0, 1, 2))
        var = (xf * xf).mean((0, 1, 2)) - mean * mean
        y = (xf - mean) * lax.rsqrt(var + 1e-5) * gamma + beta
        y = jnp.maximum(y.astype(BF16) + r, 0)
        return (y.astype(np.float32) ** 2).sum()

    _run(podlet.grad(loss, argnums=(0, 2, 3)), x, r, gamma, beta)


def test_programs_it_cannot_compile_are_interpreted():
    # log has no compiled form: the interpreter runs the program, same bits.
    rng = np.random.default_rng(5)
    x = _special(rng, (64, 32))
    before = _core.fused_jit_stats()["refused"]
    fg = _run(lambda x: jnp.log(x * 0.5) * x + 1.0, x, expect_compiled=False)
    assert fg.prim_counts().get("fused_elementwise") == 1
    assert (_core.fused_jit_stats()["refused"] > before) == have_jit()


def test_off_below_avx2_and_by_switch():
    isa = _core.active_isa()
    try:
        _core.set_isa("ref")
        assert not _core.fused_jit_stats()["enabled"]
    finally:
        _core.set_isa(isa)
    assert _core.fused_jit_stats()["enabled"] == podlet.cpu_info()["fused_jit"] == have_jit()
    podlet.config.update("fused_jit", False)
    try:
        assert not podlet.config.fused_jit
        assert not _core.fused_jit_stats()["enabled"] and not podlet.cpu_info()["fused_jit"]
    finally:
        podlet.config.update("fused_jit", True)
    assert podlet.config.fused_jit and podlet.cpu_info()["fused_jit"] == have_jit()


def _way_runs():
    return np.asarray(_core.fused_jit_stats()["way_runs"])


def _ymm_ways(ran_w, total, channels, ways):
    """The AVX2 code's vectors per iteration (fused_jit_ymm.cc choose_ways: the most whose
    values mostly fit its 16 registers): every run at one W, a power of two of at least 2
    and at most `ways`, in whole period rows (the period a multiple of 8 W)."""
    used = np.flatnonzero(ran_w)
    assert len(used) == 1 and ran_w[used[0]] == total > 0, ran_w
    w = int(used[0]) + 1
    assert w & (w - 1) == 0 and 2 <= w <= ways and channels % (8 * w) == 0, ran_w


@pytest.fixture
def max_ways():
    """Sets the most vectors per iteration for programs compiled in the test (back to 8, the
    default, after)."""
    try:
        yield _core.set_fused_jit_ways
    finally:
        _core.set_fused_jit_ways(8)


@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["f32", "bf16"])
@pytest.mark.parametrize("ways", [2, 3, 4, 8])
@pytest.mark.parametrize("channels", [256, 192, 96, 64, 48])
def test_several_vectors_per_iteration_keep_the_bits(channels, ways, dtype, max_ways):
    # W vectors per iteration (fused_jit.cc body, W = 8, 4 or 2): a per-channel operand
    # whose period is a multiple of 16 W lets W vectors share one period row; one that is
    # not takes the largest W that divides it (only powers of two: chunks start on
    # multiples of 1024 elements, not of 48). Every chunk must run compiled (a chunk whose start is
    # off the W vectors' boundary would go to the interpreter): as many compiled runs as
    # one vector per iteration gets.
    rng = np.random.default_rng(channels * 10 + ways)
    shape = (40, 7, channels)
    x, y = _special(rng, shape, dtype), _special(rng, shape, dtype)
    c = _special(rng, (channels,), dtype)
    s = np.asarray(0.75, dtype)

    def f(x, y, c, s):  # few live values: W register sets fit
        h = jnp.tanh(x * c + s) * y
        return h, (jnp.exp(-(h * h)) - x).astype(np.float32) > s, lax.erf(y * s) + h

    ran = {}
    for w in (1, ways):
        max_ways(w)
        before = _way_runs()
        _run(f, x, y, c, s)
        ran[w] = _way_runs() - before
    # (f's live values take too many registers for 8 sets)
    expect = max(w for w in (1, 2, 4) if w <= ways and channels % (16 * w) == 0)
    if have_jit():
        assert ran[1][0] > 0 and ran[1][1:].sum() == 0, ran
    if ymm():
        _ymm_ways(ran[ways], ran[1][0], channels, ways)
    elif have_jit():
        assert ran[ways][expect - 1] == ran[1][0] and ran[ways].sum() == ran[1][0], (ran, expect)


@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["f32", "bf16"])
@pytest.mark.parametrize("channels", [256, 128, 192])
def test_eight_vectors_per_iteration(channels, dtype, max_ways):
    # A short chain with three live values fits eight register sets (its scalar moved to
    # memory): W = 8 where the per-channel period is a multiple of 128, else 4.
    rng = np.random.default_rng(channels)
    shape = (24, 5, channels)
    x, y = _special(rng, shape, dtype), _special(rng, shape, dtype)
    c = _special(rng, (channels,), dtype)
    s = np.asarray(-1.25, dtype)

    def f(x, y, c, s):
        return (x * c + s) * y - s

    outs, ran = [], {}
    for w in (1, 8):
        max_ways(w)
        before = _way_runs()
        fg = _run(f, x, y, c, s)
        ran[w] = _way_runs() - before
        outs.append(fg.run([podlet._src.core.to_array(a) for a in (x, y, c, s)]))
    assert_same_bits(outs[0], outs[1])
    if ymm():
        _ymm_ways(ran[8], ran[1][0], channels, 8)
    elif have_jit():
        expect = 8 if channels % 128 == 0 else 4
        assert ran[8][expect - 1] == ran[1][0] > 0 and ran[8].sum() == ran[1][0], (ran, expect)


@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["f32", "bf16"])
@pytest.mark.parametrize("special_scalars", [False, True], ids=["finite", "special"])
def test_scalars_kept_in_memory_for_more_vectors(special_scalars, dtype, max_ways):
    # Broadcast scalars each hold a register shared by the W vectors; when the vectors'
    # registers and the scalars' do not fit, the scalars read only by operations that can
    # stage them (arithmetic, max / min, comparisons, logic, select, clamp) move to memory
    # and W doubles. Here in every operand position (first and second of sub / div / max,
    # compares, select's branches, clamp's bounds), NaN and subnormal scalars included.
    rng = np.random.default_rng(41 + special_scalars)
    shape = (16, 9, 64)
    x, y = _special(rng, shape, dtype), _special(rng, shape, dtype)
    c = _special(rng, (64,), dtype)
    vals = [np.nan, 1e-39, -0.0, 2.5, np.inf, -3.0] if special_scalars else [2.0, -1.5, 3.0, 0.25, -0.5, 0.75]
    ss = [np.asarray(v, dtype) for v in vals]

    def f(x, y, c, s1, s2, s3, s4, s5, s6):
        a = s1 - x * c
        b = jnp.maximum(s2, a) / s3
        e = jnp.minimum(y, s4) * b
        m = (b > s4) & (s5 <= y)
        r = jnp.where(m, s6, e * y + a)
        q = lax.clamp(s5, r + x, s1) if not special_scalars else jnp.minimum(s1, r + x)
        return q, s3 / (a + y + e), jnp.where(m, b, s2)

    outs, ran = [], {}
    for w in (1, 4):
        max_ways(w)
        before = (_way_runs(), _core.fused_jit_stats()["spill_runs"])
        fg = _run(f, x, y, c, *ss)
        ran[w] = (_way_runs() - before[0], _core.fused_jit_stats()["spill_runs"] - before[1])
        outs.append(fg.run([podlet._src.core.to_array(a) for a in (x, y, c, *ss)]))
    assert_same_bits(outs[0], outs[1])
    if ymm():  # values and scalars beyond the 8 value registers go to stack slots
        _ymm_ways(ran[4][0], ran[1][0][0], 64, 4)
        assert ran[4][1] == ran[1][0][0], ran
    elif have_jit():
        assert ran[1][1] == 0 and ran[4][1] == ran[1][0][0] > 0, ran
        assert ran[4][0][3] == ran[1][0][0], ran


@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["f32", "bf16"])
@pytest.mark.parametrize("seed", range(4))
def test_random_chains_on_one_and_several_vectors_per_iteration(seed, dtype, max_ways):
    # The random chains of the first test with periods of 64 (and a 0-d scalar shared by
    # all vectors): the same bits whether compiled one vector or up to four per iteration.
    rng = np.random.default_rng(700 + seed)
    shape = (3, 11, 64)
    x, y, z = (_special(rng, shape, dtype) for _ in range(3))
    c = _special(rng, (64,), dtype)
    s = np.asarray(rng.standard_normal(), dtype)
    outs = []
    for ways in (1, 4, 8):
        max_ways(ways)
        before = _way_runs()
        fg = _run(_jit_chain(seed), x, y, z, c, s)
        ran = _way_runs() - before
        assert (ran[0] > 0) == (ways == 1 and have_jit()) and (ways == 1 or not have_jit() or ran[1:].sum() > 0), ran
        arrs = [podlet._src.core.to_array(a) for a in (x, y, z, c, s)]
        outs.append(fg.run(arrs))
    assert_same_bits(outs[0], outs[1])


@pytest.mark.parametrize("isa", ["avx512", "avx512bf16"])
def test_bf16_rounding_with_and_without_avx512_bf16(isa):
    # On AVX512_BF16 hosts a bf16 rounding is vcvtneps2bf16, with vectors holding a NaN or
    # a subnormal sent to the integer form (the instruction flushes subnormals and keeps NaN
    # payloads); below it, the integer form throughout. Both give the interpreter's bits,
    # on values next to every rounding boundary: ties to even and odd, the largest finite
    # bf16 and what rounds past it, the subnormal range, NaN payloads.
    if isa not in podlet.cpu_info()["available_isas"]:
        isa = podlet.cpu_info()["best_isa"]  # the host lacks it: the test checks the form it has
    rng = np.random.default_rng(31)
    hi = rng.integers(0, 1 << 16, 40000, dtype=np.uint32) << 16
    lo = np.concatenate([np.full(10000, 0x8000), np.full(10000, 0x7fff), np.full(10000, 0x8001),
                         rng.integers(0, 1 << 16, 10000)]).astype(np.uint32)
    x = (hi | lo).view(np.float32)
    x[:64] = np.asarray([3.3895314e38, 3.3961775e38, 3.4e38, 1e-39, -1e-39, 1.2e-38, 9.1e-41, -5e-45] * 8, np.float32)
    old = _core.active_isa()
    try:
        _core.set_isa(isa)
        _run(lambda x, s: ((x * s).astype(BF16) * np.asarray(1.5, BF16), (x + s).astype(BF16)), x, np.float32(1.0),
             expect_compiled=have_jit())
    finally:
        _core.set_isa(old)


# --- the unchecked bf16 loop (fused_jit.cc Gen::unchecked_ways_loop) ---
# On AVX512_BF16 hosts a bf16 program run several vectors per iteration rounds the results
# of arithmetic without checking each rounding's inputs; a block of iterations is checked
# at its end by the MXCSR underflow / denormal flags (the loop runs under FTZ) and by the
# NaNs it stored, and a flagged block sends the rest of the run back to the checked loop.
# Values that must be caught are planted one at a time, late in the array (after blocks
# that ran unchecked) and mid-block: a subnormal product of normal inputs and an exp that
# underflows (the underflow flag), a subnormal behind a negation (a bit operation: its
# rounding stays checked), a subnormal a maximum passes on (the denormal flag), a NaN with
# a payload (the NaN check). Each check, and FTZ, has a case here that gives other bits
# without it (checked by building the generator with each one dropped).


def _unchecked_loop():
    """The active ISA compiles the unchecked loop (the zmm generator with vcvtne2ps2bf16)."""
    return _core.active_isa() in ("avx512bf16", "amx")


def _unchecked_stats():
    s = _core.fused_jit_stats()
    return np.asarray([s["unchecked_runs"], s["unchecked_fallbacks"]])


@pytest.fixture
def no_tables():
    """Values of one bf16 value computed, not read from tables (the tables are built by a
    program of their own over every bf16 value, subnormals and NaNs included, whose blocks
    fall back: counted by the same statistics)."""
    _core.set_fused_tables(False)
    try:
        yield
    finally:
        _core.set_fused_tables(True)


def _unchecked_program(x, y, z, c, r):
    # Six outputs, a per-channel operand (period 256: the loop's period counters) and a
    # per-row one (its rows), the transcendentals and a negation. x * y and exp(x * y) reach
    # outputs directly (a subnormal flushed there shows); z reaches them through a maximum
    # and an addition only (no product to underflow: the denormal flag and the NaN check
    # alone see what is planted there).
    p = x * y
    ep = jnp.exp(p)
    h = jnp.tanh(x * c + y) * r
    e = ep - (-x) * c
    return h * e, e + y * y, jnp.maximum(z, x * c), z + x, p, ep * r


def _unchecked_inputs(plant, seed=0):
    rng = np.random.default_rng(seed)
    shape = (48, 9, 256)  # 110,592 elements: runs of several blocks of 8 x 8 vectors
    x, y, z = ((rng.standard_normal(shape) * 2).astype(BF16) for _ in range(3))
    c = (rng.standard_normal((256,)) + 0.5).astype(BF16)
    r = (rng.standard_normal((48, 9, 1)) + 0.5).astype(BF16)
    i = np.unravel_index(x.size - 3000, shape)
    if plant == "subnormal_result":  # x * y below the normal range from two normal values
        x[i], y[i] = np.asarray(3e-20, BF16), np.asarray(2e-19, BF16)
    elif plant == "exp_underflow":  # exp(x * y) = exp(-90) = 8.2e-40: a bf16 subnormal
        x[i], y[i] = np.asarray(9.0, BF16), np.asarray(-10.0, BF16)
    elif plant == "negated_subnormal":
        x[i] = np.asarray(-2e-39, BF16)
    elif plant == "max_of_subnormal":  # max(z, x * c) = z, subnormal: only the denormal flag
        z[i], x[i] = np.asarray(1e-39, BF16), np.asarray(-1.0, BF16) * np.sign(c[i[-1]].astype(np.float32))
    elif plant == "nan_payload":  # a NaN with a payload through max and add: only the NaN check
        z.view(np.uint16)[i] = 0x7fc1
    return x, y, z, c, r


@pytest.mark.parametrize("plant", ["none", "subnormal_result", "exp_underflow", "negated_subnormal", "max_of_subnormal",
                                   "nan_payload"])
def test_unchecked_rounding_keeps_the_bits(plant, no_tables):
    args = _unchecked_inputs(plant)
    before = _unchecked_stats()
    _run(_unchecked_program, *args)
    runs, fallbacks = _unchecked_stats() - before
    if not _unchecked_loop():
        assert runs == 0 and fallbacks == 0
        return
    assert runs > 0
    # Two compiled runs of the graph (1 and 2 threads): each meets the planted value (in
    # each fused program that reads it).
    assert (fallbacks == 0) if plant == "none" else (fallbacks >= 2), (plant, fallbacks)


@pytest.mark.parametrize("seed", range(4))
def test_unchecked_rounding_with_tables_and_special_values(seed):
    # Tables (values of one bf16 value gathered, subnormals among them) and _special's
    # values scattered through the array: blocks fall back early and often.
    rng = np.random.default_rng(100 + seed)
    shape = (32, 7, 256)
    x, y, z = (_special(rng, shape, BF16) for _ in range(3))
    c = _special(rng, (256,), BF16)
    r = (rng.standard_normal((32, 7, 1)) + 0.5).astype(BF16)
    before = _unchecked_stats()
    _run(_unchecked_program, x, y, z, c, r)
    runs, _ = _unchecked_stats() - before
    assert (runs > 0) == _unchecked_loop()


def test_unchecked_rounding_off_by_switch(no_tables):
    # set_fused_jit_unchecked(False): programs compiled from then on keep the check at
    # every rounding (the same bits; no run of the unchecked loop).
    args = _unchecked_inputs("subnormal_result", seed=1)
    _core.set_fused_jit_unchecked(False)
    try:
        before = _unchecked_stats()
        _run(lambda *a: [v * np.asarray(1.25, BF16) for v in _unchecked_program(*a)], *args)
        assert (_unchecked_stats() - before == 0).all()
    finally:
        _core.set_fused_jit_unchecked(True)


# --- canonical NaNs in the AVX2 code (fused_jit_ymm.cc plan_canonical) ---
# A bf16 rounding there is an integer rounding plus a NaN check that puts NaN lanes back as
# sign | 0x7fc00000. The check is skipped where the rounded value's NaNs are already that
# canonical NaN: results of roundings, and loads, table values and scalars made canonical
# where they are read, when every use of them is a rounding or a compare. bf16 inputs
# converted from f32 by ml_dtypes hold canonical NaNs only, so these tests plant raw bf16
# words with payloads (signalling, all payload bits set, both signs), and f32 NaNs whose
# integer rounding alone would carry into infinity or wrap around to zero.

BF16_PAYLOAD_NANS = [0x7f81, 0xffc1, 0x7fff, 0xffff, 0x7fa5, 0xff80 | 0x0042]
F32_PAYLOAD_NANS = [0x7fffffff, 0x7f800001, 0xffff8000, 0x7fff8000, 0x7fc0ffff, 0xff80ffff]


def _plant_bf16_nans(rng, a, n=12):
    """a (bf16) with raw NaN words with payloads at n random places (a 0-d a: one of them)."""
    a = np.array(a, dtype=BF16)
    flat = a.reshape(-1).view(np.uint16)
    for j, i in enumerate(rng.choice(flat.size, size=min(flat.size, n), replace=False)):
        flat[i] = BF16_PAYLOAD_NANS[j % len(BF16_PAYLOAD_NANS)]
    return a


def _canonical_runs():
    return _core.fused_jit_stats()["canonical_runs"]


@pytest.mark.parametrize("seed", range(6))
def test_canonical_roundings_with_nan_payloads_in_random_chains(seed):
    rng = np.random.default_rng(900 + seed)
    shape = (3, 9, 64)
    x, y, z = (_plant_bf16_nans(rng, _special(rng, shape, BF16)) for _ in range(3))
    c = _plant_bf16_nans(rng, _special(rng, (64,), BF16), 4)
    s = _plant_bf16_nans(rng, np.asarray(rng.standard_normal(), BF16)) if seed % 2 else np.asarray(1.5, BF16)
    before = _canonical_runs()
    _run(_jit_chain(seed, n_ops=24), x, y, z, c, s)
    assert (_canonical_runs() > before) == ymm()


@pytest.mark.parametrize("approximate", [True, False], ids=["tanh", "exact"])
def test_gelu_vjp_with_nan_payloads(approximate):
    # The MLP's bias + GELU and its VJP in bf16, large enough for tables (each read by one
    # rounding or more, and its index a raw input word), NaN payloads in x, the bias and dy.
    rng = np.random.default_rng(31)
    x = _plant_bf16_nans(rng, (rng.standard_normal((112, 768)) * 3).astype(BF16), 40)
    b = _plant_bf16_nans(rng, rng.standard_normal(768).astype(BF16), 3)
    dy = _plant_bf16_nans(rng, rng.standard_normal((112, 768)).astype(BF16), 40)

    def f(x, b, dy):
        y, vjp = podlet.vjp(lambda x: podlet.nn.gelu(x + b, approximate=approximate), x)
        return y, vjp(dy)[0]

    before = _canonical_runs(), _core.fused_tables_stats()["used"]
    _run(f, x, b, dy)
    assert (_canonical_runs() > before[0]) == ymm()
    assert _core.fused_tables_stats()["used"] > before[1]


def test_canonical_roundings_of_f32_payloads():
    # f32 NaNs whose integer rounding alone goes wrong (0x7f800001 -> infinity, 0x7fff8000
    # -> -0), read by two roundings (the load made canonical) or one (the check kept), and
    # a bf16 load read by roundings and also passed on raw by a select and an output (never
    # made canonical: its payload reaches the outputs).
    rng = np.random.default_rng(5)
    shape = (4, 128)
    x = _special(rng, shape)
    xb = x.reshape(-1).view(np.uint32)
    for j, i in enumerate(rng.choice(xb.size, size=36, replace=False)):
        xb[i] = F32_PAYLOAD_NANS[j % len(F32_PAYLOAD_NANS)]
    y = _plant_bf16_nans(rng, _special(rng, shape, BF16), 24)
    w = _plant_bf16_nans(rng, _special(rng, shape, BF16), 24)

    def f(x, y, w):
        a = x.astype(BF16) * y
        b = (x * 2.0).astype(BF16) - (x + 1.0).astype(BF16)
        return a + b, jnp.where(y > w, y, w), y * w + w, w, (x * x).astype(BF16)

    before = _canonical_runs()
    _run(f, x, y, w)
    assert (_canonical_runs() > before) == ymm()


def test_canonical_roundings_off_by_switch():
    # set_fused_jit_unchecked(False): AVX2 programs compiled from then on check every
    # rounding (the same bits; no run counted).
    rng = np.random.default_rng(8)
    x, y = (_plant_bf16_nans(rng, _special(rng, (6, 64), BF16)) for _ in range(2))
    s = np.asarray(0.75, BF16)
    f = lambda x, y, s: ((x * s + y) * (y - s)) * x  # noqa: E731
    _core.set_fused_jit_unchecked(False)
    try:
        before = _canonical_runs()
        off = _run(f, x, y, s)
        assert _canonical_runs() == before
    finally:
        _core.set_fused_jit_unchecked(True)
    before = _canonical_runs()
    on = _run(f, x, y, s)
    assert (_canonical_runs() > before) == ymm()
    arrs = [podlet._src.core.to_array(a) for a in (x, y, s)]
    assert_same_bits(off.run(arrs), on.run(arrs))
