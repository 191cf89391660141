"""Tables in fused programs (cpp/podlet/prims/fused.cc, "tables"): a value computed from
one bf16 value and scalars alone is read from a table of its 65536 results, built by
running the same instructions over every bf16 word. Same bits as computing it, for every
word (NaNs with payloads, infinities, signed zeros, subnormals), compiled and interpreted,
on 1 and 2 threads, with the table's root loaded or itself a rounded result. Each test
checks through the counters that tables were (or were not) used, so a program that
quietly computed its values cannot pass for one that read them."""
import ml_dtypes
import numpy as np
import pytest

import podlet
import podlet.numpy as jnp
from podlet import _core, nn
from podlet.lax import erf as jax_erf
from fusion_chains import active_isa, assert_same_bits

BF16 = np.dtype(ml_dtypes.bfloat16)
WORDS = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(BF16)


def _every_word(extra=77):
    """Every bf16 word once, then `extra` more (a partial last vector)."""
    return np.concatenate([WORDS, WORDS[1000:1000 + extra]])


def _used():
    return _core.fused_tables_stats()["used"]


def _runs(fun, *args):
    """The fused graph's outputs: tables off, on (compiled, 1 and 2 threads) and on with
    the interpreter; asserts the 'on' runs read tables and the 'off' run did not. Returns
    the fused graph and the values read from tables per run."""
    g = podlet.make_graph(fun, *args)
    fg = _core.fuse_elementwise(g)
    arrs = [podlet._src.core.to_array(a) for a in args]
    per_run = []
    try:
        _core.set_fused_tables(False)
        before = _used()
        ref = fg.run(arrs)
        assert _used() == before
        _core.set_fused_tables(True)
        outs = []
        for threads in (1, 2):
            podlet.config.update("num_threads", threads)
            before = _used()
            outs.append(fg.run(arrs))
            per_run.append(_used() - before)
        _core.set_fused_jit(False)
        before = _used()
        outs.append(fg.run(arrs))
        per_run.append(_used() - before)
    finally:
        _core.set_fused_jit(True)
        _core.set_fused_tables(True)
        podlet.config.update("num_threads", 2)
    for o in outs:
        assert_same_bits(ref, o)
    assert len(set(per_run)) == 1, per_run
    return fg, per_run[0]


# Every generator the host has: AVX2's (ymm, each read its own gather) and the host's best.
JIT_ISAS = [i for i in dict.fromkeys(["avx2", "avx512", podlet.cpu_info()["best_isa"]])
            if i in podlet.cpu_info()["available_isas"]]


@pytest.fixture(params=JIT_ISAS)
def isa(request):
    with active_isa(request.param) as name:
        yield name


def _paired_runs(fun, *args):
    """_runs, and the values read in pairs per run (the same in every run)."""
    before = _core.fused_tables_stats()["paired"]
    fg, used = _runs(fun, *args)
    paired = _core.fused_tables_stats()["paired"] - before
    assert paired % 3 == 0, paired  # three runs with tables
    return fg, used, paired // 3


UNARY = {
    "gelu_tanh": lambda x: nn.gelu(x, approximate=True),
    "gelu_exact": lambda x: nn.gelu(x, approximate=False),
    "silu": nn.silu,
    "softplus_ish": lambda x: jnp.log1p(jnp.exp(-jnp.abs(x))) + jnp.maximum(x, 0),
    "tanh_scaled": lambda x: jnp.tanh(x * 0.7978) * 0.5 + 0.5,
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_every_word_through_a_table(name):
    x = _every_word()
    fg, used = _runs(UNARY[name], x)
    assert used >= 1, fg.dump()


@pytest.mark.parametrize("approximate", [True, False], ids=["tanh", "erf"])
def test_a_rounded_sum_as_the_root(approximate):
    # The MLP's bias + GELU: the table's index is x + b, rounded, not a loaded value.
    rng = np.random.default_rng(0)
    x = _every_word(extra=0).reshape(512, 128)
    b = rng.standard_normal(128).astype(BF16)
    fg, used = _runs(lambda x, b: nn.gelu(x + b, approximate=approximate), x, b)
    assert used == 1


@pytest.mark.parametrize("approximate", [True, False], ids=["tanh", "erf"])
def test_gelu_vjp_reads_its_tanh_from_a_table(isa, approximate):
    # The VJP mixes dy into everything but the chains of x: tanh's (erf's and exp's) are
    # read, the products with dy computed. Two values of x share one pair table, side by
    # side in the program (one gather where the generator can): erf's and exp's; tanh's
    # and 0.5 x, its partner.
    rng = np.random.default_rng(1)
    x = _every_word(extra=0).reshape(256, 256)
    dy = rng.standard_normal((256, 256)).astype(BF16)

    def f(x, dy):
        _, vjp = podlet.vjp(lambda x: nn.gelu(x, approximate=approximate), x)
        return vjp(dy)[0]

    _, used, paired = _paired_runs(f, x, dy)
    assert (used, paired) == (2, 2)


def test_a_table_whose_values_pass_through_another():
    # tanh(x) takes a table (read beside y), and so does exp(0.3 tanh(x)): its table is
    # built from the instructions, not from the other table (which its program would not
    # have: building it from the rewritten program read a table that was not there).
    x = _every_word()
    y = np.random.default_rng(4).standard_normal(x.shape).astype(BF16)

    def f(x, y):
        t = jnp.tanh(x)
        return t + y, jnp.exp(t * 0.3) * y

    _, used = _runs(f, x, y)
    assert used == 2


def test_an_output_computed_anyway_takes_no_table_for_its_cone():
    # expm1(x) leaves as f32 (no table can give it), so what is made from it costs one
    # operation more: computed, not read.
    x = _every_word()
    y = np.random.default_rng(5).standard_normal(x.shape).astype(BF16)

    def f(x, y):
        e = jnp.expm1(x.astype(jnp.float32))
        return e, (e.astype(jnp.bfloat16) - x) + y

    _, used = _runs(f, x, y)
    assert used == 0


@pytest.mark.parametrize("read", ["first_stored", "second_stored", "both_read"])
def test_pair_table_values_stored_or_read(isa, read):
    # exp(u) and tanh(u) of one rounded u, a pair. A pair's first value only stored frees
    # its register for the second (plan()): then each reads its own gather; read on, they
    # share one.
    x = _every_word()
    y = np.random.default_rng(7).standard_normal(x.shape).astype(BF16)

    def f(x, y):
        u = x * 0.3
        if read == "first_stored":
            e = jnp.exp(u)
            return e, jnp.tanh(u) * y
        t = jnp.tanh(u)
        e = jnp.exp(u)
        if read == "second_stored":
            return t * y, e
        return t * y + e, e - y

    _, used, paired = _paired_runs(f, x, y)
    assert (used, paired) == (2, 2)


def test_pair_whose_first_value_frees_its_register(isa):
    # A program written out (the fusion pass does not group it so): exp(x) only stored,
    # tanh(x) read, x read after both. The pair's first value frees its register at once
    # and the second takes it (plan()), so a shared gather would overwrite exp(x) before
    # its store: each reads its own.
    LOAD, EXP, TANH, ADD, MUL, BF = 0, 4, 8, 19, 21, 1  # ir/fusion.h's ops; bf16's dtype code
    x = _every_word()
    y = np.random.default_rng(9).standard_normal(x.shape).astype(BF16)
    n = x.size
    code = [LOAD, BF, BF, 0, 0, 0, 0,   # 0: x
            EXP, BF, BF, 0, 0, 0, 0,    # 1: exp(x), an output only
            TANH, BF, BF, 0, 0, 0, 0,   # 2: tanh(x)
            LOAD, BF, BF, 1, 0, 0, 0,   # 3: y
            MUL, BF, BF, 2, 3, 0, 0,    # 4: tanh(x) y
            ADD, BF, BF, 4, 0, 0, 0]    # 5: tanh(x) y + x
    attrs = dict(n=n, code=code, loads=[0, 1, n, 1, 1, 1, n, 1], outs=[1, 1, n, 5, 1, n], flops=0,
                 prims="exp,tanh,mul,add")
    args = [podlet._src.core.to_array(a) for a in (x, y)]
    run = lambda: [np.asarray(o) for o in _core.apply("fused_elementwise", args, attrs)]
    try:
        _core.set_fused_tables(False)
        ref = run()
        _core.set_fused_tables(True)
        before = _core.fused_tables_stats()["paired"]
        outs = [run()]
        _core.set_fused_jit(False)
        outs.append(run())
    finally:
        _core.set_fused_jit(True)
        _core.set_fused_tables(True)
    assert _core.fused_tables_stats()["paired"] - before == 4
    for o in outs:
        for a, b in zip(ref, o):
            assert_same_bits(a, b)


def test_an_odd_table_takes_a_partner(isa):
    # tanh(x) is worth a table; x * 0.5, one product, is not, but it rides in the second
    # word of tanh's entries for nothing. A third table of x has no partner left.
    x = _every_word()
    y = np.random.default_rng(8).standard_normal(x.shape).astype(BF16)
    _, used, paired = _paired_runs(lambda x, y: jnp.tanh(x) * y + (x * 0.5) * y, x, y)
    assert (used, paired) == (2, 2)
    _, used, paired = _paired_runs(lambda x, y: (jnp.tanh(x) * y + jnp.exp(x) * y) + jax_erf(x) * y, x, y)
    assert (used, paired) == (3, 2)


def test_scalars_are_part_of_the_table():
    # The same instructions with another scalar make another table, and one cached table
    # serves every call with the same scalar.
    x = _every_word()

    def f(x, c):
        return jnp.tanh(x * c) * c + jnp.exp(x * c)

    built = _core.fused_tables_stats()["built"]
    for c in (0.5, 2.0, 0.5):
        c = np.asarray(c, BF16)
        _, used = _runs(f, x, c)
        assert used == 1
    assert _core.fused_tables_stats()["built"] - built == 2


def test_what_takes_no_table():
    rng = np.random.default_rng(2)
    x = rng.standard_normal(1 << 17).astype(BF16)
    y = rng.standard_normal(1 << 17).astype(BF16)
    # too cheap to be worth a gather; f32 (no 16-bit root); two inputs mixed up to the end
    for fun, args in ((lambda x: x * 2.0 + 1.0, (x,)),
                      (lambda x: jnp.tanh(x) * 3.0, (x.astype(np.float32),)),
                      (lambda x, y: (x * y + x) * (y - x * 0.5), (x, y))):
        _, used = _runs(fun, *args)
        assert used == 0
    # ... but a rounded product is a bf16 value like any other: its tanh is a table
    _, used = _runs(lambda x, y: jnp.tanh(x * y) + x, x, y)
    assert used == 1
    # below 65536 elements a table is not worth building
    _, used = _runs(UNARY["gelu_tanh"], x[:60000])
    assert used == 0


def test_excess_precision_rounds_once_through_the_table():
    # allow_excess_precision: the chain keeps f32 inside and rounds its result once; the
    # table holds that rounding of it.
    x = _every_word()
    podlet.config.update("allow_excess_precision", True)
    try:
        g = podlet.make_graph(UNARY["gelu_tanh"], x)
        fg = _core.fuse_elementwise(g, excess_precision=True)
        arrs = [podlet._src.core.to_array(x)]
        _core.set_fused_tables(False)
        ref = fg.run(arrs)
        _core.set_fused_tables(True)
        before = _used()
        out = fg.run(arrs)
        assert _used() - before == 1
        assert_same_bits(ref, out)
    finally:
        _core.set_fused_tables(True)
        podlet.config.update("allow_excess_precision", False)


def test_jitted_mlp_step_same_bits():
    # A Dense -> GELU -> Dense block's value and gradients, jitted, tables on and off.
    rng = np.random.default_rng(3)
    x = jnp.asarray(rng.standard_normal((512, 96)).astype(BF16))
    w1 = jnp.asarray((rng.standard_normal((96, 384)) * 0.1).astype(BF16))
    w2 = jnp.asarray((rng.standard_normal((384, 96)) * 0.1).astype(BF16))
    b = jnp.asarray(rng.standard_normal(384).astype(BF16))

    def loss(w1, w2, b):
        return (nn.gelu(x @ w1 + b) @ w2).astype(jnp.float32).sum()

    step = podlet.jit(podlet.value_and_grad(loss, argnums=(0, 1, 2)))
    res = {}
    try:
        for on in (False, True):
            _core.set_fused_tables(on)
            before = _used()
            res[on] = podlet.tree_util.tree_leaves(step(w1, w2, b))
            assert (_used() > before) == on
    finally:
        _core.set_fused_tables(True)
    assert_same_bits(res[False], res[True])


def test_the_table_op_is_not_accepted_from_a_graph():
    # kTable is the kernel's own instruction: a `code` attr naming it is refused (it would
    # read a table the graph does not have).
    x = podlet._src.core.to_array(np.ones(16, np.float32))
    load = [0, 0, 0, 0, 0, 0, 0]  # load 0 (dtype codes do not matter: parsing refuses first)
    for op in (37, 99, -1):
        attrs = dict(n=16, code=load + [op, 0, 0, 0, 0, -1, 0], loads=[0, 1, 16, 1], outs=[1, 1, 16],
                     flops=0.0, prims="exp")
        with pytest.raises(ValueError, match=f"unknown op {op}"):
            _core.apply("fused_elementwise", [x], attrs)


def test_random_large_programs_keep_the_bits():
    # The fused-program fuzzer's generator (fuzz/fused_diff.py), its programs of 65536
    # elements and more: every configuration (tables on, and the best one without) against
    # the unfused graph, and some of them must have read tables.
    import importlib.util
    import pathlib
    import sys
    path = pathlib.Path(__file__).resolve().parent.parent / "fuzz" / "fused_diff.py"
    spec = importlib.util.spec_from_file_location("fused_diff", path)
    fd = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("fused_diff", fd)
    spec.loader.exec_module(fd)
    old = podlet.config.enable_x64
    podlet.config.update("enable_x64", True)  # the programs have float64 values
    try:
        configs = fd.available_configs()
        before = _core.fused_tables_stats()["runs"]
        ran, seed = 0, 4_000_000
        while ran < 24:
            prog = fd.generate(seed)
            seed += 1
            if prog.numel() < 65536:
                continue
            res = fd.run_program(prog, configs)
            assert not res.mismatches, (seed - 1, [str(m) for m in res.mismatches])
            ran += 1
        assert _core.fused_tables_stats()["runs"] > before
    finally:
        podlet.config.update("enable_x64", old)


def test_config_switch():
    assert podlet.config.fused_tables
    x = _every_word()
    f = podlet.jit(UNARY["gelu_tanh"])
    try:
        podlet.config.update("fused_tables", False)
        assert not _core.fused_tables_stats()["enabled"]
        before = _used()
        off = f(x)
        assert _used() == before
        podlet.config.update("fused_tables", True)
        on = f(x)
        assert _used() > before
    finally:
        podlet.config.update("fused_tables", True)
    assert_same_bits([off], [on])
