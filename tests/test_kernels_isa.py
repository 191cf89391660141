"""The ISA kernel variants against the reference: every fast path this host has
(_core.set_isa('avx2') ...) vs _core.set_isa('ref') for dot_general and the three
convolutions, bit-determinism across thread counts on the fast paths, ResNet shapes,
tile edges, dtype mixes, and the ISA selection API (cpu_info, set_isa, PODLET_ISA).

Tolerance: the fast paths sum in another order than the reference (K in fixed blocks),
so an f32 result may differ by a few ulps of the sum of |terms|: we check
|fast - ref| <= 1e-5 * (sum of |a*b|) element by element (the float64 sum of absolute
products, computed by the same primitive on |operands| in float64), plus one bf16 ulp
when the output is bf16.
"""
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import podlet
from podlet import _core
from podlet._src.core import bind
from prim_check import as_podlet, restore_bf16_dot, select_isa

BF16 = ml_dtypes.bfloat16
INFO = _core.cpu_info()
# Every fast ISA the host runs; on a host with none the ref path is compared with itself.
FAST_ISAS = [i for i in INFO["available_isas"] if i != "ref"] or ["ref"]


@pytest.fixture(autouse=True)
def restore_isa_and_threads():
    isa, n = _core.active_isa(), podlet.config.num_threads
    yield
    _core.set_isa(isa)
    restore_bf16_dot()
    podlet.config.update("num_threads", n)


def run(isa, prim, args, attrs, threads=None):
    select_isa(isa)
    if threads:
        podlet.config.update("num_threads", threads)
    return np.asarray(bind(prim, *[as_podlet(a) for a in args], **attrs)).copy()


def abs_sum(prim, args, attrs):
    """The float64 sum of |terms| of each output element: prim on |operands| in f64."""
    a64 = [np.abs(np.asarray(a).astype(np.float64)) for a in args]
    attrs = {k: v for k, v in attrs.items() if k != "preferred_element_type"}
    return run("ref", prim, a64, attrs)


def check_fast_vs_ref(isa, prim, args, attrs):
    """Runs prim on `isa` and on ref; returns (fast, ref) after checking they agree."""
    ref = run("ref", prim, args, attrs)
    fast = run(isa, prim, args, attrs)
    assert fast.dtype == ref.dtype and fast.shape == ref.shape
    bound = 1e-5 * abs_sum(prim, args, attrs) + 1e-30
    f64, r64 = fast.astype(np.float64), ref.astype(np.float64)
    if ref.dtype == BF16:
        bound = bound + 2.0 ** -7 * np.abs(r64)  # one rounding flip of the bf16 output (1 ulp <= 2^-7 |x|)
    err = np.abs(f64 - r64)
    worst = np.unravel_index(np.argmax(err - bound), err.shape) if err.size else None
    assert np.all(err <= bound), (f"{prim} on {isa}: |fast - ref| = {err[worst]:.3g} > bound {bound[worst]:.3g} "
                                  f"at {worst} (fast {f64[worst]!r}, ref {r64[worst]!r})")
    return fast, ref


def rand(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


# ---- ISA selection ------------------------------------------------------------------
def test_cpu_info_and_set_isa():
    feats = INFO["features"]
    for k in ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_bf16"):
        assert isinstance(feats[k], bool)
    assert INFO["available_isas"][0] == "ref" and INFO["available_isas"][-1] == INFO["best_isa"]
    assert (INFO["best_isa"] != "ref") == (feats["avx2"] and feats["fma"])
    with open("/proc/cpuinfo") as f:
        flags = next(l for l in f if l.startswith("flags")).split()
    assert feats["avx2"] == ("avx2" in flags) and feats["avx512f"] == ("avx512f" in flags)
    assert _core.set_isa("ref") == "ref" and _core.cpu_info()["active_isa"] == "ref"
    # Asking for more than the host has clamps down to its best ISA (amx is the top level).
    assert _core.set_isa("amx") == INFO["best_isa"]
    assert _core.active_isa() == INFO["best_isa"]
    chosen = _core.set_isa("avx512bf16")
    assert chosen == ("avx512bf16" if "avx512bf16" in INFO["available_isas"] else INFO["best_isa"])
    with pytest.raises(podlet.PodletError, match="unknown ISA 'sse9'"):
        _core.set_isa("sse9")
    assert _core.active_isa() == chosen  # a refused name leaves the active ISA as it was


def test_cpu_identity_matches_proc_cpuinfo():
    """cpu_info()["cpu"] (cpuid) names the host as /proc/cpuinfo does: vendor, family and model
    numbers (Linux's decoding of the extended fields), stepping, and the brand string."""
    with open("/proc/cpuinfo") as f:
        first = f.read().split("\n\n")[0]
    proc = dict((k.strip(), v.strip()) for k, _, v in (l.partition(":") for l in first.splitlines()))
    cpu = INFO["cpu"]
    assert cpu["vendor"] == proc["vendor_id"]
    assert cpu["family"] == int(proc["cpu family"]) and cpu["model"] == int(proc["model"])
    assert cpu["stepping"] == int(proc["stepping"])
    assert " ".join(cpu["brand"].split()) == " ".join(proc["model name"].split())


def test_podlet_isa_environment_variable():
    code = "from podlet import _core; print(_core.cpu_info()['active_isa'])"
    env = dict(os.environ, PODLET_ISA="ref")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ref"
    env["PODLET_ISA"] = "amx"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == INFO["best_isa"]
    if INFO["best_isa"] != "amx":
        assert "requested but this CPU supports up to" in out.stderr


def test_bf16_dot_switch_default_and_environment_variable():
    """Whether bf16 GEMMs and direct convolutions use vdpbf16ps: off on Intel (half the
    FMAs' FLOP rate there, bench/peak.py), on elsewhere; PODLET_BF16_DOT overrides."""
    env_value = os.environ.get("PODLET_BF16_DOT")
    if not env_value:
        assert INFO["bf16_dot"] == (INFO["cpu"]["vendor"] != "GenuineIntel")
    code = "from podlet import _core; print(_core.cpu_info()['bf16_dot'], _core.bf16_dot())"
    for value, want in (("0", "False False"), ("off", "False False"), ("1", "True True")):
        env = dict(os.environ, PODLET_BF16_DOT=value)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == want, (value, out.stdout, out.stderr)


def test_bf16_dot_off_runs_the_avx512_kernels_bit_for_bit():
    """With the bf16 dot set aside, bf16 x bf16 dot_general and the three direct
    convolutions at avx512bf16 are the avx512 kernels (same bits); with it on, the
    vdpbf16ps kernels (close to ref: test_dot_matches_ref, test_conv_matches_ref). On a
    host without AVX512_BF16 the switch changes nothing."""
    rng = np.random.default_rng(3)
    a, b = rand(rng, (131, 300), BF16), rand(rng, (300, 259), BF16)
    x, w, g, ca = conv_args("resnet_3x3_s2", (BF16, BF16))
    cases = [("dot_general", [a, b], dot_attrs([1], [0], preferred_element_type="float32")),
             ("conv_general_dilated", [x, w], ca),
             ("conv_bwd_data", [g, w], dict(ca, lhs_shape=list(x.shape))),
             ("conv_bwd_filter", [x, g], dict(ca, rhs_shape=list(w.shape)))]
    top = INFO["best_isa"] if INFO["best_isa"] != "amx" else "avx512bf16"
    for prim, args, attrs in cases:
        ref_isa = "avx512" if top == "avx512bf16" else top
        _core.set_isa(ref_isa)
        want = np.asarray(bind(prim, *[as_podlet(t) for t in args], **attrs)).copy()
        _core.set_isa(top)
        _core.set_bf16_dot(False)
        off = np.asarray(bind(prim, *[as_podlet(t) for t in args], **attrs)).copy()
        assert off.tobytes() == want.tobytes(), prim
        if prim == "dot_general":
            assert _core.gemm_last_path() == ("avx512" if top == "avx512bf16" else top)
            _core.set_bf16_dot(True)
            bind(prim, *[as_podlet(t) for t in args], **attrs)
            assert _core.gemm_last_path() == top


# ---- dot_general ----------------------------------------------------------------------
def dot_attrs(lc, rc, lb=(), rb=(), **kw):
    return dict(lhs_contracting=list(lc), rhs_contracting=list(rc), lhs_batch=list(lb), rhs_batch=list(rb), **kw)


# name -> (lhs shape, rhs shape, attrs): every packing path of A and B, and tile edges
# (MR = 6, NR = 16, K block 256, tiles 120 x 256).
DOT_CASES = {
    "matmul_edges": ((131, 300), (300, 259), dot_attrs([1], [0])),
    "lhs_transposed": ((300, 37), (300, 45), dot_attrs([0], [0])),        # x^T g
    "lhs_transposed_8_rows": ((700, 40), (700, 13), dot_attrs([0], [0])),  # 8-row k-major groups, 16-column panel
    "rhs_transposed": ((37, 520), (45, 520), dot_attrs([1], [1])),        # g W^T
    "both_gathered": ((7, 9, 13), (13, 5, 7), dot_attrs([0, 2], [2, 0])),  # neither side contiguous
    "batched": ((3, 50, 70), (3, 70, 33), dot_attrs([2], [1], [0], [0])),
    "batch_not_leading": ((20, 4, 30), (30, 4, 17), dot_attrs([2], [0], [1], [1])),
    # B packed per task (batched): two K blocks, two column tiles, kept across row tiles
    "batched_k_blocks": ((2, 40, 600), (2, 600, 150), dot_attrs([2], [1], [0], [0])),
    # B packed per task with two column tiles per entry (the kept panels change hands)
    "batched_wide": ((3, 130, 70), (3, 70, 300), dot_attrs([2], [1], [0], [0])),
    # attention's heads: [B, T, N, H] operands, P^T dO read k-major, 197 = 12 x 16 + 5
    "heads_pv": ((2, 3, 197, 197), (2, 197, 3, 64), dot_attrs([3], [1], [0, 1], [0, 2])),
    "heads_ptdo": ((2, 3, 197, 197), (2, 197, 3, 64), dot_attrs([2], [1], [0, 1], [0, 2])),
    "heads_qkt": ((2, 197, 3, 64), (2, 197, 3, 64), dot_attrs([3], [3], [0, 2], [0, 2])),
    "matvec": ((40, 600), (600,), dot_attrs([1], [0])),
    "skinny": ((1, 8), (8, 1), dot_attrs([1], [0])),
    "empty_k": ((5, 0), (0, 7), dot_attrs([1], [0])),
    # long K, small output: summed in K chunks (gemm_avx512_impl.h k_chunks), each task
    # packing its own B blocks; odd K ends in a half pair inside the last chunk
    "long_k_weight_grad": ((9000, 40), (9000, 70), dot_attrs([0], [0])),    # x^T g, B rows
    # x^T g with a packed B past L2 (551 steps x 1,024 columns): packed per K block inside
    # each task, not up front (gemm_avx512_impl.h stream_b); odd K's half pair at the end
    "weight_grad_streamed_b": ((1101, 300), (1101, 1000), dot_attrs([0], [0])),
    "long_k_odd_rows": ((30, 9001), (50, 9001), dot_attrs([1], [1])),       # B columns contiguous in K
    "long_k_gathered": ((9001, 3, 5), (5, 9001, 7), dot_attrs([0], [1])),   # B gathered
    "long_k_batched": ((2, 8500, 20), (2, 8500, 30), dot_attrs([1], [1], [0], [0])),
    # K chunks over several full-size tiles each way (3 x 2 of 84 x 160): every chunk's
    # partial lands in its tile's slot, rows and columns past the edge left out
    "long_k_tiles": ((4100, 250), (4100, 300), dot_attrs([0], [0])),
}


@pytest.mark.parametrize("isa", FAST_ISAS)
@pytest.mark.parametrize("name", list(DOT_CASES))
@pytest.mark.parametrize("dtypes", [(np.float32, np.float32), (BF16, BF16), (BF16, np.float32)],
                         ids=["f32", "bf16", "bf16xf32"])
def test_dot_fast_vs_ref(isa, name, dtypes):
    ls, rs, attrs = DOT_CASES[name]
    rng = np.random.default_rng(0)
    check_fast_vs_ref(isa, "dot_general", [rand(rng, ls, dtypes[0]), rand(rng, rs, dtypes[1])], attrs)


@pytest.mark.parametrize("isa", FAST_ISAS)
@pytest.mark.parametrize("out", ["float32", "bfloat16"])
def test_dot_preferred_element_type(isa, out):
    rng = np.random.default_rng(1)
    a, b = rand(rng, (2, 33, 400), BF16), rand(rng, (2, 400, 21), BF16)
    attrs = dot_attrs([2], [1], [0], [0], preferred_element_type=out)
    fast, _ = check_fast_vs_ref(isa, "dot_general", [a, b], attrs)
    assert fast.dtype == np.dtype(out if out == "float32" else BF16)
    if out == "bfloat16":  # the bf16 output is the f32 result of the same path rounded once
        f32 = run(isa, "dot_general", [a, b], dict(attrs, preferred_element_type="float32"))
        np.testing.assert_array_equal(fast, f32.astype(BF16))


@pytest.mark.parametrize("isa", FAST_ISAS)
@pytest.mark.parametrize("case", ["rows", "kmajor", "kmajor8", "batched", "bt", "long_k"])
def test_dot_bf16_output_is_its_f32_output_rounded_once(isa, case):
    """The last K block's microkernels round straight into the output (no C tile pass):
    the bits must be those of the f32 output rounded once, at every tile edge (rows and
    columns past the 12 x 32 blocks), after several K blocks summed through the C tile,
    and for NaN, infinities, and sums too small to be normal."""
    ls, rs, attrs = {"rows": ((37, 1100), (1100, 45), dot_attrs([1], [0])),      # 3 K blocks
                     "kmajor": ((700, 37), (700, 71), dot_attrs([0], [0])),      # A read transposed
                     "kmajor8": ((3, 300, 64), (3, 300, 45), dot_attrs([1], [1], [0], [0])),  # 8-row groups
                     "batched": ((5, 13, 64), (5, 64, 197), dot_attrs([2], [1], [0], [0])),
                     "bt": ((29, 96), (300, 96), dot_attrs([1], [1])),
                     "long_k": ((9000, 30), (9000, 20), dot_attrs([0], [0]))}[case]  # K chunks
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal(ls), rng.standard_normal(rs)
    am = a.reshape(-1, a.shape[-1])
    am[0, :] *= 2.0 ** -100                         # sums near 2^-100 * |b|: tiny ...
    b_flat = b.reshape(-1, b.shape[-1])
    b_flat[:, :3] *= 2.0 ** -28                     # ... times 2^-28: f32 subnormals or flushed
    am[1, 0], am[2, 0], am[3, 1] = np.inf, np.nan, -np.inf
    a, b = a.astype(BF16), b.astype(BF16)
    out16 = run(isa, "dot_general", [a, b], dict(attrs, preferred_element_type="bfloat16"))
    out32 = run(isa, "dot_general", [a, b], dict(attrs, preferred_element_type="float32"))
    assert out16.dtype == BF16 and out32.dtype == np.float32
    assert np.isnan(out32).any() and np.isinf(out32).any()
    np.testing.assert_array_equal(out16.view(np.uint16), out32.astype(BF16).view(np.uint16))


@pytest.mark.parametrize("isa", FAST_ISAS)
def test_dot_bf16_output_subnormal_from_the_block_sum(isa):
    """vdpbf16ps flushes subnormal sums, but the epilogue's addition of a tile's earlier K
    blocks (plain f32) can make one: 1.5 * 2^-126 from the first block plus -2^-126 from
    the second is 2^-127. Rounded to bf16 it must stay 2^-127 (the conversion instructions
    would flush it), in full 32-column rows as at the edges."""
    K, N = 1100, 70  # three K blocks of 368; two full panels and an edge
    a, b = np.zeros((13, K)), np.zeros((K, N))
    a[:, 0], b[0, :] = 2.0 ** -63, 1.5 * 2.0 ** -63   # block 1: 1.5 * 2^-126
    a[:, 400], b[400, :] = -(2.0 ** -63), 2.0 ** -63  # block 2: -2^-126
    b[0, 1::3] = 2.0 ** -60                           # other columns stay normal
    a, b = a.astype(BF16), b.astype(BF16)
    attrs = dot_attrs([1], [0])
    out16 = run(isa, "dot_general", [a, b], dict(attrs, preferred_element_type="bfloat16"))
    out32 = run(isa, "dot_general", [a, b], dict(attrs, preferred_element_type="float32"))
    tiny = (out32 != 0) & (np.abs(out32) < np.finfo(np.float32).tiny)
    if _core.gemm_last_path() == "amx":
        assert tiny.sum() == 0  # the tiles flush every sum, the earlier K blocks' reloaded one included
    else:
        assert tiny.sum() > 100, tiny.sum()
    np.testing.assert_array_equal(out16.view(np.uint16), out32.astype(BF16).view(np.uint16))


@pytest.mark.parametrize("isa", FAST_ISAS)
def test_dot_fast_path_is_taken(isa):
    """With K > 256 the block order differs from the reference's somewhere."""
    rng = np.random.default_rng(2)
    a, b = rand(rng, (64, 700), np.float32), rand(rng, (700, 48), np.float32)
    fast, ref = check_fast_vs_ref(isa, "dot_general", [a, b], dot_attrs([1], [0]))
    if isa != "ref":
        assert not np.array_equal(fast, ref)


@pytest.mark.parametrize("isa", FAST_ISAS)
@pytest.mark.parametrize("dtype", [np.float32, BF16])
@pytest.mark.parametrize("case", ["rows", "rows_strided", "odd_k"])
def test_dot_row_bits_do_not_depend_on_the_rows_beside_it(isa, dtype, case):
    """Each output row is the same sum whatever other rows are multiplied with it. The
    AVX-512 kernels read whole 12-row groups of a row-major A in place and pack only a
    tile's last partial group (ARows in avx512_engine.h), so a product of 40 rows mixes
    both; one row alone is always packed. K = 600 is several K blocks (the in-place rows
    are read from each block's offset); rows 1,800 elements apart (a batch dim between M
    and K) and odd K (bf16 pairs that cannot be read in place) too."""
    rng = np.random.default_rng(11)
    ls, rs, attrs = {"rows": ((40, 600), (600, 70), dot_attrs([1], [0])),
                     "rows_strided": ((40, 3, 600), (3, 600, 50), dot_attrs([2], [1], [1], [0])),
                     "odd_k": ((40, 301), (301, 70), dot_attrs([1], [0]))}[case]
    a, b = rand(rng, ls, dtype), rand(rng, rs, dtype)
    whole = run(isa, "dot_general", [a, b], attrs)
    for i in (0, 11, 12, 23, 35, 36, 39):
        one = run(isa, "dot_general", [np.ascontiguousarray(a[i:i + 1]), b], attrs)
        got = whole[:, i:i + 1] if case == "rows_strided" else whole[i:i + 1]
        assert one.tobytes() == np.ascontiguousarray(got).tobytes(), (case, i)


@pytest.mark.parametrize("isa", FAST_ISAS)
@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_dot_bits_do_not_depend_on_thread_count(isa, dtype):
    rng = np.random.default_rng(3)
    cases = [((250, 530), (530, 300), dot_attrs([1], [0])), ((530, 70), (90, 530), dot_attrs([0], [1])),
             ((4, 90, 300), (4, 300, 40), dot_attrs([2], [1], [0], [0])),
             ((9000, 40), (9000, 70), dot_attrs([0], [0])), ((30, 9001), (50, 9001), dot_attrs([1], [1])),
             ((4100, 250), (4100, 300), dot_attrs([0], [0]))]
    for ls, rs, attrs in cases:
        a, b = rand(rng, ls, dtype), rand(rng, rs, dtype)
        one = run(isa, "dot_general", [a, b], attrs, threads=1)
        two = run(isa, "dot_general", [a, b], attrs, threads=2)
        assert one.tobytes() == two.tobytes(), f"{ls} x {rs}"


# ---- convolutions -----------------------------------------------------------------------
def conv_attrs(strides=(1, 1), pad=(0, 0, 0, 0), rd=(1, 1), groups=1, ld=(1, 1), precision="highest", **kw):
    # precision 'highest': the direct kernels, whose products are exact (at DEFAULT, bf16
    # 3x3 stride-1 layers take Winograd, checked in test_conv_winograd.py).
    return dict(window_strides=list(strides), padding=list(pad), lhs_dilation=list(ld), rhs_dilation=list(rd),
                feature_group_count=groups, precision=precision, **kw)


def conv_out_hw(xs, ws, a):
    out = []
    for i in range(2):
        n, k = xs[1 + i], ws[i]
        s, lo, hi, ld, rd = a["window_strides"][i], a["padding"][2 * i], a["padding"][2 * i + 1], \
            a["lhs_dilation"][i], a["rhs_dilation"][i]
        padded = (n - 1) * ld + 1 + lo + hi if n else lo + hi
        win = (k - 1) * rd + 1
        out.append(0 if padded < win else (padded - win) // s + 1)
    return out


# name -> (x NHWC, w HWIO, attrs). ResNet layers at batch 2 on small images, then edge
# geometries; channels are >= 8 per group so the fast paths take them.
CONV_CASES = {
    "resnet_stem_7x7_s2": ((2, 20, 18, 3), (7, 7, 3, 64), conv_attrs((2, 2), (3, 3, 3, 3))),
    "resnet_3x3_s1": ((2, 10, 10, 64), (3, 3, 64, 64), conv_attrs((1, 1), (1, 1, 1, 1))),
    "resnet_3x3_s2": ((2, 12, 12, 32), (3, 3, 32, 64), conv_attrs((2, 2), (0, 1, 0, 1))),
    "resnet_1x1_s2_projection": ((2, 11, 12, 32), (1, 1, 32, 64), conv_attrs((2, 2))),
    "tile_edges": ((2, 13, 11, 40), (3, 3, 40, 40), conv_attrs((1, 1), (1, 1, 1, 1))),  # K=360, N=40
    # 36 output channels: backward-filter's 12-row groups (3 x 12 pads none, 8-row 4).
    "output_channels_36": ((2, 7, 9, 32), (3, 3, 32, 36), conv_attrs((1, 1), (1, 1, 1, 1))),
    "asymmetric_pad_stride_1x2": ((1, 9, 10, 16), (3, 2, 16, 24), conv_attrs((1, 2), (0, 2, 1, 0))),
    "negative_padding": ((1, 9, 9, 16), (3, 3, 16, 20), conv_attrs((1, 1), (-1, 2, 1, -2))),
    "rhs_dilation_2": ((2, 11, 10, 16), (3, 3, 16, 24), conv_attrs((1, 1), (2, 2, 2, 2), rd=(2, 2))),
    "dilated_strided": ((1, 13, 12, 16), (3, 2, 16, 24), conv_attrs((2, 3), (1, 0, 0, 2), rd=(2, 1))),
    "stride_3_kernel_2": ((1, 11, 10, 16), (2, 2, 16, 16), conv_attrs((3, 3), (0, 0, 0, 0))),  # dx phases without taps
    "groups_2": ((2, 8, 9, 32), (3, 3, 16, 48), conv_attrs((1, 1), (1, 1, 1, 1), groups=2)),
    "groups_4_strided": ((1, 9, 9, 64), (3, 3, 16, 32), conv_attrs((2, 2), (1, 1, 1, 1), groups=4)),
    "window_larger_than_input": ((1, 2, 2, 16), (3, 3, 16, 16), conv_attrs()),
    # Fewer than 8 input channels: backward-data takes the col2im path (taps as the wide
    # GEMM dim, then a gather), forward and backward-filter the implicit GEMMs.
    "mammogram_stem_1_channel": ((2, 22, 19, 1), (7, 7, 1, 64), conv_attrs((2, 2), (3, 3, 3, 3))),
    "narrow_dilated_odd_padding": ((2, 11, 13, 2), (3, 4, 2, 24), conv_attrs((2, 1), (-1, 2, 3, 0), rd=(2, 1))),
    "narrow_kernel_wider_than_padded_row": ((1, 5, 3, 3), (2, 6, 3, 16), conv_attrs((1, 3), (0, 1, 4, 2))),
    # 32-channel panels built inside the backward-filter microkernel: odd pixel count
    # (the last step pairs a pixel with zeros), padding rows, dilation.
    "odd_pixels_32_channels": ((1, 7, 9, 32), (3, 3, 32, 32), conv_attrs((1, 1), (1, 1, 1, 1))),
    "dilated_strided_64_channels": ((1, 9, 11, 64), (3, 3, 64, 24), conv_attrs((2, 1), (2, 1, 0, 2), rd=(2, 2))),
    "narrow_3x3_1_channel": ((3, 9, 12, 1), (3, 3, 1, 32), conv_attrs((1, 1), (1, 1, 1, 1))),  # kh pieces of 3
    # 1-channel layers with output channels in multiples of 16 take the stem kernels in
    # bf16 (conv_stem_avx512bf16.cc): an odd KW's last tap unpaired, an odd Wo's last pixel
    # unpaired, 48 / 80 channels (partial 64-channel panels, a 16-channel half), KW > 7
    # (two tap chunks), unequal strides, negative padding.
    "stem_1_channel_odd_wo_48": ((2, 23, 21, 1), (7, 7, 1, 48), conv_attrs((2, 2), (3, 3, 3, 3))),
    "stem_1_channel_even_kernel_80": ((1, 17, 20, 1), (4, 6, 1, 80), conv_attrs((3, 2), (2, 1, 0, 3))),
    "stem_1_channel_wide_kernel_negative_pad": ((2, 12, 30, 1), (3, 9, 1, 16), conv_attrs((1, 1), (-1, 2, -2, 1))),
    # Kept on the reference by the dispatcher (depthwise, lhs dilation): must still agree.
    "depthwise": ((2, 8, 7, 16), (3, 3, 1, 16), conv_attrs((1, 1), (1, 1, 1, 1), groups=16)),
    "lhs_dilation": ((1, 5, 6, 16), (3, 3, 16, 16), conv_attrs((1, 1), (1, 1, 2, 1), ld=(2, 2))),
}


def conv_args(name, dtypes, seed=0):
    xs, ws, a = CONV_CASES[name]
    rng = np.random.default_rng(seed)
    ho, wo = conv_out_hw(xs, ws, a)
    gs = (xs[0], ho, wo, ws[3])
    x, w, g = rand(rng, xs, dtypes[0]), rand(rng, ws, dtypes[1]), rand(rng, gs, dtypes[0])
    return x, w, g, a


def conv_calls(x, w, g, a):
    """(prim, operands, attrs) of the three convolutions of one geometry."""
    return [("conv_general_dilated", [x, w], a),
            ("conv_bwd_data", [g, w], dict(a, lhs_shape=list(x.shape))),
            ("conv_bwd_filter", [x, g], dict(a, rhs_shape=list(w.shape)))]


@pytest.mark.parametrize("isa", FAST_ISAS)
@pytest.mark.parametrize("name", list(CONV_CASES))
@pytest.mark.parametrize("dtypes", [(np.float32, np.float32), (BF16, BF16), (BF16, np.float32)],
                         ids=["f32", "bf16", "bf16xf32"])
def test_conv_fast_vs_ref(isa, name, dtypes):
    x, w, g, a = conv_args(name, dtypes)
    for prim, args, attrs in conv_calls(x, w, g, a):
        check_fast_vs_ref(isa, prim, args, attrs)


@pytest.mark.parametrize("isa", FAST_ISAS)
@pytest.mark.parametrize("dtype", [np.float32, BF16])
@pytest.mark.parametrize("C", [600, 301, 2048])
def test_conv_1x1_pixel_bits_do_not_depend_on_the_pixels_beside_it(isa, dtype, C):
    """A 1x1 stride-1 layer's patch rows are x's pixels: the AVX-512 kernels read whole
    12-pixel groups in place (conv_fwd_run, rows_in_place) and pack a tile's last partial group;
    one pixel alone is always packed. 40 pixels (three groups in place, 4 packed) against
    each pixel alone; C = 301 (bf16: odd, packed) and 2048 (rows 4 or 8 KB apart, packed:
    rows_in_place's 4 KB rule)."""
    rng = np.random.default_rng(12)
    x, w = rand(rng, (1, 5, 8, C), dtype), rand(rng, (1, 1, C, 40), dtype)
    a = conv_attrs()
    whole = run(isa, "conv_general_dilated", [x, w], a)
    for h, c in ((0, 0), (1, 3), (1, 4), (2, 7), (4, 3), (4, 7)):
        one = run(isa, "conv_general_dilated", [np.ascontiguousarray(x[:, h:h + 1, c:c + 1]), w], a)
        assert one.tobytes() == np.ascontiguousarray(whole[:, h:h + 1, c:c + 1]).tobytes(), (h, c)


@pytest.mark.parametrize("isa", FAST_ISAS)
def test_conv_bf16_with_f32_output(isa):
    x, w, g, a = conv_args("resnet_3x3_s2", (BF16, BF16))
    for prim, args, attrs in conv_calls(x, w, g, a):
        fast, _ = check_fast_vs_ref(isa, prim, args, dict(attrs, preferred_element_type="float32"))
        assert fast.dtype == np.float32
        # The bf16 result of the same path is that f32 sum rounded once.
        np.testing.assert_array_equal(run(isa, prim, args, attrs), fast.astype(BF16))


@pytest.mark.parametrize("isa", FAST_ISAS)
@pytest.mark.parametrize("name", ["mammogram_stem_1_channel", "resnet_3x3_s2", "resnet_3x3_s1"])
def test_conv_bf16_output_rounds_subnormals_exactly(isa, name):
    """bf16 outputs are rounded from the f32 sums by vcvtneps2bf16 where the host has it,
    which flushes f32 subnormals to zero: those vectors take the exact rounding instead.
    Inputs of ~1e-19 give sums of ~1e-38, many of them subnormal; the bf16 output must be
    the f32 output rounded once (ml_dtypes: round to nearest even, subnormals kept), on
    the direct, stem and Winograd paths alike. (vdpbf16ps itself flushes most subnormal
    sums; the Winograd output transform's f32 adds make plenty.)"""
    x, w, g, a = conv_args(name, (BF16, BF16))
    x, w, g = ((v.astype(np.float32) * 1e-19).astype(BF16) for v in (x, w, g))
    for prim, args, attrs in conv_calls(x, w, g, a):
        f32 = run(isa, prim, args, dict(attrs, preferred_element_type="float32"))
        tiny = (f32 != 0) & (np.abs(f32) < np.finfo(np.float32).tiny)
        if name == "resnet_3x3_s1" and prim != "conv_bwd_filter" and isa == "avx512bf16":
            assert tiny.sum() > 10, prim
        np.testing.assert_array_equal(run(isa, prim, args, attrs).view(np.uint16), f32.astype(BF16).view(np.uint16))


@pytest.mark.parametrize("isa", FAST_ISAS)
def test_conv_fast_path_is_taken(isa):
    x, w, g, a = conv_args("tile_edges", (np.float32, np.float32))
    for prim, args, attrs in conv_calls(x, w, g, a):
        fast, ref = check_fast_vs_ref(isa, prim, args, attrs)
        if isa != "ref":
            assert not np.array_equal(fast, ref), prim


@pytest.mark.parametrize("isa", FAST_ISAS)
def test_conv_bwd_data_narrow_channels_leave_the_reference(isa):
    """Backward-data of a 1-channel stem used to run on the reference (~2 s at batch 32,
    224x224); the col2im path sums in another order, so its f32 bits differ from the
    reference's while agreeing to rounding - on every fast ISA."""
    x, w, g, a = conv_args("mammogram_stem_1_channel", (np.float32, np.float32), seed=3)
    attrs = dict(a, lhs_shape=list(x.shape))
    fast, ref = check_fast_vs_ref(isa, "conv_bwd_data", [g, w], attrs)
    if isa != "ref":
        assert not np.array_equal(fast, ref)
    # Images in several chunks (the tap matrix holds ~2^20 floats at a time: one 128x128
    # image of 49 taps), bf16 operands, bit-identical on 1 and 2 threads.
    rng = np.random.default_rng(4)
    g = rand(rng, (3, 128, 128, 16), BF16)
    w = rand(rng, (7, 7, 1, 16), BF16)
    attrs = dict(conv_attrs((1, 1), (3, 3, 3, 3)), lhs_shape=[3, 128, 128, 1])
    check_fast_vs_ref(isa, "conv_bwd_data", [g, w], attrs)
    one = run(isa, "conv_bwd_data", [g, w], attrs, threads=1)
    assert one.tobytes() == run(isa, "conv_bwd_data", [g, w], attrs, threads=2).tobytes()


@pytest.mark.parametrize("isa", FAST_ISAS)
@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_conv_bits_do_not_depend_on_thread_count(isa, dtype):
    for name in ("resnet_stem_7x7_s2", "resnet_3x3_s2", "tile_edges", "groups_4_strided", "mammogram_stem_1_channel"):
        x, w, g, a = conv_args(name, (dtype, dtype), seed=5)
        if name == "tile_edges":  # more rows: several M tiles and K blocks of pixels
            x = np.concatenate([x] * 3)
            g = np.concatenate([g] * 3)
        for prim, args, attrs in conv_calls(x, w, g, a):
            one = run(isa, prim, args, attrs, threads=1)
            two = run(isa, prim, args, attrs, threads=2)
            assert one.tobytes() == two.tobytes(), f"{name} {prim}"


@pytest.mark.parametrize("isa", FAST_ISAS)
def test_conv_stem_unpaired_taps_ignore_their_partner(isa):
    """The 1-channel kernels read input pairs: an odd KW's last tap (forward) and an odd
    Wo's last pixel (backward-filter) have no partner, and the word's other half is a
    real pixel no window uses. It is masked, not multiplied by a zero: an inf there must
    not turn outputs into NaN (0 * inf), as it does not in the reference."""
    rng = np.random.default_rng(13)
    x = rand(rng, (2, 9, 8, 1), BF16)
    x[:, :, 7, :] = np.inf  # column 7: in no 3-wide window at stride 2 (Wo = 3)
    w, g = rand(rng, (3, 3, 1, 32), BF16), rand(rng, (2, 4, 3, 32), BF16)
    a = conv_attrs((2, 2), (0, 0, 0, 0))
    for prim, args, attrs in conv_calls(x, w, g, a):
        if prim == "conv_bwd_data":
            continue
        fast, ref = check_fast_vs_ref(isa, prim, args, attrs)
        assert np.isfinite(fast.astype(np.float32)).all() and np.isfinite(ref.astype(np.float32)).all(), prim


def streamed_case(prim, dtype, ch, images):
    """(operands, attrs) of a stride-2 layer whose output (dx or y) of `ch` channels over
    `images` images is 4 MiB or more for a batch sized to it: a 3x3 backward-data, or a
    1-channel 7x7/2 stem forward as in ResNet."""
    rng = np.random.default_rng(12)
    if prim == "conv_bwd_data":
        n = (4 if dtype == np.float32 else 8) * (64 // ch + (64 % ch > 0))
        out = [n, 64, 64, ch]
        attrs = dict(conv_attrs((2, 2), (0, 1, 0, 1)), lhs_shape=[images or n] + out[1:])
        args = [rand(rng, (n, 32, 32, 16), dtype), rand(rng, (3, 3, ch, 16), dtype)]
    else:
        n = (16 if dtype == np.float32 else 32) * (64 // ch + (64 % ch > 0))
        out = [n, 32, 32, ch]
        attrs = conv_attrs((2, 2), (2, 3, 2, 3))
        args = [rand(rng, (n, 64, 64, 1), dtype), rand(rng, (7, 7, 1, ch), dtype)]
    assert np.prod(out) * np.dtype(dtype).itemsize >= 4 << 20
    return [args[0][:images] if images else args[0], args[1]], attrs


@pytest.mark.parametrize("isa", FAST_ISAS)
@pytest.mark.parametrize("dtype", [np.float32, BF16])
@pytest.mark.parametrize("ch", [64, 24])
@pytest.mark.parametrize("prim", ["conv_bwd_data", "conv_general_dilated"])
def test_conv_large_output_streamed(isa, dtype, ch, prim):
    """A dx (backward-data) or y (forward) of 4 MiB or more is written with non-temporal
    stores (store_out_stream) where a row is aligned: whole 16-channel groups streamed, a
    24-channel row's tail (and rows not 32-byte aligned) stored plainly. Against the
    reference, the same bits as the output of one image, and on 1 and 2 threads."""
    args, attrs = streamed_case(prim, dtype, ch, 0)
    fast, _ = check_fast_vs_ref(isa, prim, args, attrs)
    one_image = run(isa, prim, *streamed_case(prim, dtype, ch, 1))
    assert one_image.tobytes() == fast[:1].tobytes()
    assert run(isa, prim, args, attrs, threads=1).tobytes() == fast.tobytes()
    assert run(isa, prim, args, attrs, threads=2).tobytes() == fast.tobytes()


@pytest.mark.parametrize("isa", FAST_ISAS)
@pytest.mark.parametrize("dtype", [np.float32, BF16])
@pytest.mark.parametrize("cin", [16, 32])
def test_conv_bwd_filter_over_many_pixel_chunks(isa, dtype, cin):
    """Backward-filter sums pixels in fixed chunks (4096 K steps) computed as separate
    tasks and added in chunk order: several chunks and a partial one, against the
    reference, and bit-identical on 1 and 2 threads (16 channels: one column tile, A
    packed per task; 32: panels built by the microkernel)."""
    rng = np.random.default_rng(9)
    x = rand(rng, (3, 75, 61, cin), dtype)  # 13725 pixels: 4 chunks in f32, 2 in bf16 pairs
    g = rand(rng, (3, 75, 61, 64), dtype)
    attrs = dict(conv_attrs((1, 1), (1, 1, 1, 1)), rhs_shape=[3, 3, cin, 64])
    check_fast_vs_ref(isa, "conv_bwd_filter", [x, g], attrs)
    one = run(isa, "conv_bwd_filter", [x, g], attrs, threads=1)
    two = run(isa, "conv_bwd_filter", [x, g], attrs, threads=2)
    assert one.tobytes() == two.tobytes()


@pytest.mark.parametrize("isa", FAST_ISAS)
@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_conv_bwd_filter_column_split_is_not_in_the_bits(isa, dtype):
    """Backward-filter picks its tasks' column width by how evenly they share out over
    the threads: 2304 columns (3x3x256) are 9 tiles of 256 on 1 thread (bf16: one task of
    all 2304, packing its own A) but 12 of 192 on 2. Each sum runs over the pixels
    whatever the split: same bits, and the reference's
    values (f32 results, so a changed summation order cannot hide in a bf16 rounding)."""
    rng = np.random.default_rng(11)
    x = rand(rng, (2, 7, 7, 256), dtype)
    g = rand(rng, (2, 7, 7, 24), dtype)
    attrs = dict(conv_attrs((1, 1), (1, 1, 1, 1)), rhs_shape=[3, 3, 256, 24], preferred_element_type="float32")
    check_fast_vs_ref(isa, "conv_bwd_filter", [x, g], attrs)
    one = run(isa, "conv_bwd_filter", [x, g], attrs, threads=1)
    two = run(isa, "conv_bwd_filter", [x, g], attrs, threads=2)
    assert one.tobytes() == two.tobytes()


@pytest.mark.parametrize("isa", FAST_ISAS)
def test_conv_grad_matches_ref(isa):
    """A whole conv VJP (forward, backward-data, backward-filter) on the fast path."""
    x, w, _, a = conv_args("resnet_3x3_s1", (np.float32, np.float32))

    def grads(which):
        select_isa(which)
        f = lambda x_, w_: (bind("conv_general_dilated", x_, w_, **a) ** 2).sum()
        return [np.asarray(t) for t in podlet.grad(f, argnums=(0, 1))(as_podlet(x), as_podlet(w))]

    for fast, ref in zip(grads(isa), grads("ref")):
        np.testing.assert_allclose(fast, ref, rtol=1e-4, atol=1e-3 * np.abs(ref).max())
