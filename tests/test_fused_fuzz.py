"""A fixed-seed sample of the fused-program differential fuzzer (fuzz/fused_diff.py):
random elementwise programs over every fusible primitive and dtype, broadcasts, tails
and special values give the unfused graph's bits under every configuration this host
has (eager, the fused interpreter at each ISA, the AVX-512 JIT where there is one, one
thread). The sample also has to reach what it claims to test (fused instructions of
every opcode, broadcast load patterns, column sums), and the harness has to catch a
difference: a single flipped bit in one configuration's results (a NaN payload, the
sign of a zero, a bool byte) is reported with a reproducer and a non-zero exit.

The one mismatch the fuzzer has found (2026-11-28: float64 floor / ceil of a signalling
NaN came out quiet from the fused interpreter's AVX2 / AVX-512 builds, which compiled
std::floor to vroundpd, and unchanged from the baseline build and the unfused kernel) is
fixed (one branch-free fm::floor/ceil for double in kernels/fastmath.h) and kept below
as a regression test."""
import importlib.util
import io
import pathlib
import sys

import numpy as np
import pytest

import podlet

_PATH = pathlib.Path(__file__).resolve().parent.parent / "fuzz" / "fused_diff.py"
_spec = importlib.util.spec_from_file_location("fused_diff", _PATH)
fd = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("fused_diff", fd)
_spec.loader.exec_module(fd)

SAMPLE_SEED = 1729
SAMPLE_PROGRAMS = 110   # ~8 s of CPU on 2 cores of an AVX2 host


@pytest.fixture(autouse=True)
def _x64():
    old = podlet.config.enable_x64
    podlet.config.update("enable_x64", True)   # the programs have float64 values
    yield
    podlet.config.update("enable_x64", old)


@pytest.fixture(scope="module")
def sample():
    old = podlet.config.enable_x64
    podlet.config.update("enable_x64", True)
    buf = io.StringIO()
    try:
        s = fd.fuzz(SAMPLE_SEED, programs=SAMPLE_PROGRAMS, out=buf)
    finally:
        podlet.config.update("enable_x64", old)
    s["log"] = buf.getvalue()
    return s


def test_sample_programs_keep_the_bits_in_every_configuration(sample):
    assert not sample["mismatches"], sample["log"] + "\n" + fd.summary_text(sample)
    assert not sample["invalid"], sample["log"]   # programs the generator got wrong
    assert sample["programs"] == SAMPLE_PROGRAMS


def test_sample_runs_every_configuration_the_host_has(sample):
    info = podlet.cpu_info()
    names = sample["configs"]
    assert names[:2] == ["unfused", "eager"]
    for isa in info["available_isas"]:
        if isa not in ("avx512bf16", "amx"):  # the fused kernels stop at avx512
            assert f"fused/{isa}" in names
    if "avx512" in info["available_isas"]:
        assert "fused/jit" in names
        assert sample["compiled_runs"] > 0, "no fused program ran as compiled code"
    else:
        assert "fused/jit" not in names and sample["compiled_runs"] == 0


def test_sample_reaches_every_fused_opcode_and_load_pattern(sample):
    seen = {op for op, _, _ in sample["coverage"]}
    assert set(fd.OPCODES) - seen == set()
    # converts between many dtype pairs, float ops in all three float dtypes
    converts = {(d, r) for op, d, r in sample["coverage"] if op == "convert"}
    assert len(converts) >= 35
    for op in ("add", "exp", "tanh", "select", "clamp"):
        assert {d for o, d, _ in sample["coverage"] if o == op} >= {"float32", "bfloat16", "float64"}
    paths = sample["paths"]
    for p in ("load full", "load scalar", "load row-constant", "column sums", "several chunks", "n % 16 != 0"):
        assert paths.get(p, 0) > 0, (p, paths)
    assert paths.get("load periodic", 0) + paths.get("load periodic/tile-invariant", 0) > 0
    assert sample["fused_programs"] >= SAMPLE_PROGRAMS // 2
    # the best configuration also without tables (prims/fused.cc; the large programs that
    # read values from tables: tests/test_fused_tables.py)
    assert any(n.endswith("/notables") for n in sample["configs"])


@pytest.mark.parametrize("prim", ["floor", "ceil"])
def test_f64_floor_ceil_keep_a_signalling_nan_when_fused(prim):
    x = np.array([0x7ff0000000000001, 0xfff0000000000001, 0x7ff8000000000002, 0x3ff8000000000000] * 5,
                 np.uint64).view(np.float64)
    prog = fd.Program(0, [fd.Input("x0", "float64", x.shape, "arg", x)],
                      [fd.Node("v1", "float64", x.shape, prim, ["x0"]),
                       fd.Node("v2", "float64", x.shape, "neg", ["v1"])], ["v1", "v2"])
    res = fd.run_program(prog, fd.available_configs())
    assert res.fused_nodes == 1
    assert not res.mismatches, [str(m) for m in res.mismatches]
    # And the NaN is kept as it is (payload and signalling bit), as floor(NaN) in the
    # unfused kernel has always returned it.
    got = np.asarray(getattr(podlet.lax, prim)(x)).view(np.uint64)
    np.testing.assert_array_equal(got[:3], x.view(np.uint64)[:3])


def test_programs_are_determined_by_their_seed():
    a, b = fd.generate(123456), fd.generate(123456)
    assert a.source() == b.source()
    for x, y in zip(a.inputs, b.inputs):
        np.testing.assert_array_equal(fd.bits(x.array), fd.bits(y.array))
    assert fd.generate(123457).source() != a.source()


@pytest.mark.parametrize("dtype,ref,other", [
    ("float32", 0x7fc00000, 0x7fc00001),   # NaN payloads
    ("float32", 0x00000000, 0x80000000),   # +0 / -0
    ("float32", 0x00000001, 0x00000000),   # a subnormal flushed
    ("bfloat16", 0x7fc0, 0xffc0),          # NaN sign
    ("float64", 0x7ff8000000000000, 0x7ff8000000000001),
    ("int32", 0x80000000, 0x80000001),
    ("uint8", 255, 254),
    ("bool", 1, 2),                         # a bool byte that is not 0/1
])
def test_compare_sees_a_single_changed_bit(dtype, ref, other):
    shape = (3, 17)
    r = np.zeros(shape, fd.BITS[dtype])
    r[2, 16] = ref
    o = r.copy()
    o[2, 16] = other
    view = fd.NP_DTYPE[dtype]
    ms = fd.compare([r.view(view)], [o.view(view)], "x")
    assert len(ms) == 1 and ms[0].what == "bits" and ms[0].index == (2, 16) and ms[0].count == 1
    assert fd.compare([r.view(view)], [r.copy().view(view)], "x") == []


def test_compare_sees_dtype_shape_and_count_changes():
    a = np.zeros((4,), np.float32)
    assert fd.compare([a], [a.astype(np.float64)], "x")[0].what == "dtype"
    assert fd.compare([a], [a.reshape(2, 2)], "x")[0].what == "shape"
    assert fd.compare([a], [a, a], "x")[0].what == "count"


def test_a_perturbed_configuration_is_reported_with_a_reproducer():
    configs = fd.available_configs()
    buf = io.StringIO()
    s = fd.fuzz(5, programs=2, configs=configs, perturb=(configs[-1].name, fd._flip_last_bit), out=buf)
    assert s["mismatches"] == [5_000_000, 5_000_001]
    log = buf.getvalue()
    assert log.count("MISMATCH program seed") == 2
    assert "def program(" in log and "--replay 5000000" in log and configs[-1].name in log


def test_cli_exits_non_zero_on_a_mismatch(capsys):
    assert fd.main(["--programs", "1", "--seed", "2", "--perturb"]) == 1
    out = capsys.readouterr().out
    assert "MISMATCH" in out and "mismatching programs: 1" in out
    assert fd.main(["--programs", "2", "--seed", "2"]) == 0
    assert "programs/s" in capsys.readouterr().out
