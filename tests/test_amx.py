"""The AMX kernels (kernels/gemm_amx_impl.h, conv_amx_impl.h) on every host, through the
emulation (_core.set_amx_emulation: the same blocking and packing on tiles emulated in
plain C++ with TDPBF16PS's arithmetic):

* dot_general on emulated tiles equals, bit for bit, a NumPy model of TDPBF16PS as the
  hardware computes it: per chunk of 32 K, an even-K and an odd-K f32 partial sum from
  zero (each bf16 product is exact in f32, so an f32 add is the FMA's one rounding), the
  two added, then that added to the output; bf16 denormal inputs read as zero, denormal
  sums flushed to zero; shapes with tails in M, N and K, batch dims, transposed
  operands, K long enough to be cut into blocks, bf16 output, NaN / Inf;
* the three convolutions on emulated tiles equal the same model applied to NumPy's
  im2col matrices in conv.h's K orders, bit for bit, the ref kernels and NumPy float64
  to rounding, over strides, padding, dilation and tails;
* the same bits for any thread count; the dispatch (which kernels take the tiles);
* the ISA level `amx`: cpu_info, set_isa / PODLET_ISA clamping on hosts without it, and
  on a host with AMX, the hardware equal to the emulation bit for bit.
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
HAS_AMX = "amx" in INFO["available_isas"]


@pytest.fixture(autouse=True)
def restore_state():
    isa, n, emu = _core.active_isa(), podlet.config.num_threads, _core.amx_emulation()
    yield
    _core.set_isa(isa)
    restore_bf16_dot()
    _core.set_amx_emulation(emu)
    podlet.config.update("num_threads", n)


def dot(a, b, emulate, out=None, threads=None, **dims):
    _core.set_amx_emulation(emulate)
    if threads:
        podlet.config.update("num_threads", threads)
    attrs = {"lhs_contracting": [a.ndim - 1], "rhs_contracting": [0], **dims}
    if out is not None:
        attrs["preferred_element_type"] = out
    return np.asarray(bind("dot_general", as_podlet(a), as_podlet(b), **attrs)).copy()


def bf16_bits_daz(x):
    """bf16 values with denormals read as zero (TDPBF16PS's DAZ), as float32."""
    bits = np.asarray(x, BF16).view(np.uint16)
    bits = np.where((bits & 0x7F80) == 0, bits & 0x8000, bits).astype(np.uint16)
    return bits.view(BF16).astype(np.float32)


def ftz(x):
    tiny = np.finfo(np.float32).tiny
    return np.where(np.abs(x) < tiny, np.copysign(np.float32(0), x), x).astype(np.float32)


def tdpbf16ps_model(a, b):
    """C = A @ B for bf16 A [M, K], B [K, N] as the tiles compute it: K padded with zeros
    to a multiple of 32 as the packed tiles are; per chunk of 32, the even K and the odd K
    each summed from zero one product at a time in f32, the two partials added, then that
    added to C (TDPBF16PS on a Xeon, checked against the hardware); DAZ inputs, FTZ after
    every add."""
    A, B = bf16_bits_daz(a), bf16_bits_daz(b)
    K = A.shape[1]
    Kp = -(-K // 32) * 32
    A = np.pad(A, ((0, 0), (0, Kp - K)))
    B = np.pad(B, ((0, Kp - K), (0, 0)))
    A, B = A.astype(np.float64), B.astype(np.float64)  # bf16 products are exact in float64 ...
    acc = np.zeros((A.shape[0], B.shape[1]), np.float32)

    def fma(s, k):  # ... so float64 then one rounding to f32 is the FMA (no product overflow)
        return ftz((s.astype(np.float64) + A[:, k:k + 1] * B[k:k + 1, :]).astype(np.float32))

    with np.errstate(invalid="ignore", over="ignore"):
        for q in range(0, Kp, 32):
            even, odd = np.zeros_like(acc), np.zeros_like(acc)
            for k in range(q, q + 32, 2):
                even, odd = fma(even, k), fma(odd, k + 1)
            acc = ftz((acc + ftz((even + odd).astype(np.float32))).astype(np.float32))
    return acc


def bits(x):
    x = np.ascontiguousarray(x)
    return x.view(np.uint16 if x.dtype == BF16 else np.uint32)


def rand(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(BF16)


# ---- dot_general on emulated tiles == the TDPBF16PS model -----------------------------
@pytest.mark.parametrize("M,K,N", [(1, 1, 1), (16, 32, 16), (37, 70, 45), (64, 96, 33), (5, 300, 130),
                                   (130, 33, 17), (32, 2100, 40)])
def test_gemm_emulated_equals_tdpbf16ps_model(M, K, N):
    rng = np.random.default_rng(M * 1000 + K + N)
    a, b = rand(rng, (M, K)), rand(rng, (K, N))
    got = dot(a, b, True, out="float32")
    assert _core.gemm_last_path() == "amx_emu"
    np.testing.assert_array_equal(bits(got), bits(tdpbf16ps_model(a, b)))
    # and the product, to f32 accumulation error (an independent float64 oracle)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    bound = 2e-6 * np.sqrt(K) * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))) + 1e-30
    assert np.all(np.abs(got - exact) <= bound)


def test_gemm_emulated_bf16_output_is_the_model_rounded_once():
    rng = np.random.default_rng(1)
    a, b = rand(rng, (40, 77)), rand(rng, (77, 50))
    got = dot(a, b, True)
    assert got.dtype == BF16
    np.testing.assert_array_equal(bits(got), bits(tdpbf16ps_model(a, b).astype(BF16)))


def test_gemm_emulated_batch_dims_and_transposed_operands():
    rng = np.random.default_rng(2)
    a, b = rand(rng, (3, 50, 20)), rand(rng, (3, 40, 50))  # a: [B, K, M], b: [B, N, K]
    got = dot(a, b, True, out="float32", lhs_contracting=[1], rhs_contracting=[2], lhs_batch=[0], rhs_batch=[0])
    assert _core.gemm_last_path() == "amx_emu"
    want = np.stack([tdpbf16ps_model(a[i].T, b[i].T) for i in range(3)])
    np.testing.assert_array_equal(bits(got), bits(want))


def test_gemm_emulated_denormals_nan_inf():
    rng = np.random.default_rng(3)
    a, b = rand(rng, (20, 40)), rand(rng, (40, 18))
    # bf16 denormals in the inputs (read as zero), products whose sums underflow (flushed),
    # and NaN / Inf that must propagate
    a[0, :] = np.asarray(np.float32(1e-39), BF16)
    a[1, :5] = BF16(1e-20)
    b[:5, :] = BF16(1e-20)
    a[2, 3] = BF16(np.nan)
    a[3, 7] = BF16(np.inf)
    b[8, 4] = BF16(-np.inf)
    got = dot(a, b, True, out="float32")
    want = tdpbf16ps_model(a, b)
    np.testing.assert_array_equal(bits(got), bits(want))
    assert np.all(np.delete(got[0], 4) == 0) and np.isnan(got[0, 4])  # DAZ zeros; 0 x -inf is NaN
    assert np.isnan(got[2]).all() and np.isinf(got[3, :4]).all()
    # a row whose only terms are denormal products sums to a flushed zero
    a2, b2 = np.zeros((16, 32), BF16), np.zeros((32, 16), BF16)
    a2[:, :2], b2[:2, :] = BF16(1e-20), BF16(1e-20)
    assert np.all(bits(dot(a2, b2, True, out="float32")) == 0)


def test_gemm_emulated_same_bits_any_thread_count():
    rng = np.random.default_rng(4)
    a, b = rand(rng, (300, 200)), rand(rng, (200, 170))
    one = dot(a, b, True, out="float32", threads=1)
    two = dot(a, b, True, out="float32", threads=2)
    np.testing.assert_array_equal(bits(one), bits(two))


def test_gemm_dispatch_takes_tiles_only_for_bf16_operands():
    rng = np.random.default_rng(5)
    a, b = rand(rng, (20, 30)), rand(rng, (30, 10))
    dot(a, b, True)
    assert _core.gemm_last_path() == "amx_emu"
    dot(a.astype(np.float32), b, True)  # an f32 operand keeps exact f32 products: not the tiles
    assert _core.gemm_last_path() != "amx_emu"
    dot(a, b, False)
    bf16_dot = _core.bf16_dot() and _core.active_isa() in ("avx512bf16", "amx")
    assert _core.gemm_last_path() == ("amx" if HAS_AMX and _core.active_isa() == "amx" else
                                      "avx512bf16" if bf16_dot else
                                      {"avx512bf16": "avx512"}.get(_core.active_isa(), _core.gemm_last_path()))


# ---- convolutions on emulated tiles == the ref kernels ---------------------------------
CONVS = [  # N, H, W, C, O, KH, KW, stride, padding, rhs_dilation
    (2, 9, 7, 16, 24, 3, 3, (1, 1), [(1, 1), (1, 1)], (1, 1)),
    (1, 11, 10, 40, 8, 3, 3, (2, 2), [(1, 0), (2, 1)], (1, 1)),
    (2, 12, 12, 1, 16, 7, 7, (2, 2), [(3, 3), (3, 3)], (1, 1)),  # a grayscale stem
    (1, 9, 9, 20, 16, 3, 3, (1, 1), [(2, 2), (2, 2)], (2, 2)),
    (2, 5, 5, 33, 70, 1, 1, (1, 1), [(0, 0), (0, 0)], (1, 1)),
    (1, 8, 9, 64, 32, 3, 2, (2, 1), [(1, 1), (0, 1)], (1, 1)),
]


def conv_prims(x, w, g, stride, padding, dilation, emulate, isa=None):
    if isa:
        select_isa(isa)
    _core.set_amx_emulation(emulate)
    attrs = dict(window_strides=list(stride), padding=[int(v) for p in padding for v in p],
                 rhs_dilation=list(dilation))
    X, Wt, G = as_podlet(x), as_podlet(w), as_podlet(g)
    y = bind("conv_general_dilated", X, Wt, preferred_element_type="float32", **attrs)
    dx = bind("conv_bwd_data", G, Wt, lhs_shape=list(x.shape), preferred_element_type="float32", **attrs)
    dw = bind("conv_bwd_filter", X, G, rhs_shape=list(w.shape), preferred_element_type="float32", **attrs)
    return [np.asarray(t).copy() for t in (y, dx, dw)]


def out_hw(H, K, s, p, d):
    return (H + p[0] + p[1] - (d * (K - 1) + 1)) // s + 1


def conv_gemm_operands(x, w, g, stride, padding, dil):
    """The three convolutions as the GEMMs the AMX kernels run (conv_amx_impl.h), their
    A and B built in NumPy in conv.h's K orders: forward patches[(n,ho,wo)][(kh,kw,c)] @
    w[(kh,kw,c)][o]; backward-data taps[(n,h,w)][(kh,kw,o)] of g that read (h, w) @
    w[kh,kw,c,o] as [(kh,kw,o)][c]; backward-filter patches^T[(kh,kw,c)][(n,ho,wo)] @
    g[(n,ho,wo)][o]."""
    N, H, W, C = x.shape
    KH, KW, _, O = w.shape
    Ho, Wo = g.shape[1:3]
    (sh, sw), ((ph0, ph1), (pw0, pw1)), (dh, dw_) = stride, padding, dil
    xp = np.pad(x, ((0, 0), (ph0, ph1), (pw0, pw1), (0, 0)))
    patches = np.stack([xp[:, i * dh:i * dh + sh * (Ho - 1) + 1:sh, j * dw_:j * dw_ + sw * (Wo - 1) + 1:sw, :]
                        for i in range(KH) for j in range(KW)], axis=3)  # N, Ho, Wo, taps, C
    patches = patches.reshape(N * Ho * Wo, KH * KW * C)
    taps = np.zeros((N, H, W, KH * KW, O), x.dtype)
    h, ww = np.meshgrid(np.arange(H), np.arange(W), indexing="ij")
    for i in range(KH):
        for j in range(KW):
            hs, ws = h + ph0 - i * dh, ww + pw0 - j * dw_  # tap (i, j) of output (hs/sh, ws/sw) reads (h, w)
            ok = (hs >= 0) & (ws >= 0) & (hs % sh == 0) & (ws % sw == 0) & (hs // sh < Ho) & (ws // sw < Wo)
            hi, wi = np.where(ok)
            taps[:, hi, wi, i * KW + j, :] = g[:, hs[hi, wi] // sh, ws[hi, wi] // sw, :]
    w_t = np.transpose(w.reshape(KH * KW, C, O), (0, 2, 1)).reshape(KH * KW * O, C)
    return [(patches, w.reshape(-1, O)), (taps.reshape(N * H * W, KH * KW * O), w_t),
            (np.ascontiguousarray(patches.T), g.reshape(-1, O))]


@pytest.mark.parametrize("case", CONVS, ids=lambda c: "x".join(map(str, c[:7])))
def test_conv_emulated_equals_tdpbf16ps_model(case):
    N, H, W, C, O, KH, KW, stride, padding, dil = case
    rng = np.random.default_rng(sum(case[:7]))
    Ho, Wo = out_hw(H, KH, stride[0], padding[0], dil[0]), out_hw(W, KW, stride[1], padding[1], dil[1])
    x, w, g = rand(rng, (N, H, W, C)), rand(rng, (KH, KW, C, O)), rand(rng, (N, Ho, Wo, O))
    before = _core.conv_amx_calls()
    emu = conv_prims(x, w, g, stride, padding, dil, True, isa="ref")  # what leaves the tiles runs ref too
    taken = _core.conv_amx_calls() - before
    ref = conv_prims(x, w, g, stride, padding, dil, False, isa="ref")
    assert taken == (3 if C >= 8 else 2)  # backward-data needs 8 input channels to fill the tiles
    gemms = conv_gemm_operands(x, w, g, stride, padding, dil)
    for i, (name, e, r, (A, B)) in enumerate(zip(("forward", "backward-data", "backward-filter"), emu, ref, gemms)):
        if i == 1 and C < 8:
            np.testing.assert_array_equal(bits(e), bits(r), err_msg=name)  # not on the tiles: the ref itself
            continue
        np.testing.assert_array_equal(bits(e), bits(tdpbf16ps_model(A, B).reshape(e.shape)), err_msg=name)
        K = A.shape[1]
        np.testing.assert_allclose(e, r, rtol=0, atol=4e-6 * np.sqrt(K) * np.abs(r).max() + 1e-30, err_msg=name)


def test_conv_emulated_against_float64():
    rng = np.random.default_rng(7)
    x, w = rand(rng, (2, 10, 10, 16)), rand(rng, (3, 3, 16, 24))
    g = rand(rng, (2, 10, 10, 24))
    y, dx, dw = conv_prims(x, w, g, (1, 1), [(1, 1), (1, 1)], (1, 1), True)
    X, Wt, G = (t.astype(np.float64) for t in (x, w, g))
    Xp = np.pad(X, ((0, 0), (1, 1), (1, 1), (0, 0)))
    patches = np.stack([Xp[:, i:i + 10, j:j + 10, :] for i in range(3) for j in range(3)], axis=3)  # N,H,W,9,C
    y64 = np.einsum("nhwtc,tco->nhwo", patches, Wt.reshape(9, 16, 24))
    dw64 = np.einsum("nhwtc,nhwo->tco", patches, G).reshape(3, 3, 16, 24)
    Gp = np.pad(G, ((0, 0), (1, 1), (1, 1), (0, 0)))
    dx64 = sum(np.einsum("nhwo,co->nhwc", Gp[:, 2 - i:12 - i, 2 - j:12 - j, :], Wt[i, j]) for i in range(3)
               for j in range(3))
    for got, want in ((y, y64), (dx, dx64), (dw, dw64)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4 * np.abs(want).max())


def test_conv_emulated_same_bits_any_thread_count():
    rng = np.random.default_rng(8)
    x, w, g = rand(rng, (4, 14, 14, 32)), rand(rng, (3, 3, 32, 48)), rand(rng, (4, 14, 14, 48))
    podlet.config.update("num_threads", 1)
    one = conv_prims(x, w, g, (1, 1), [(1, 1), (1, 1)], (1, 1), True)
    podlet.config.update("num_threads", 2)
    two = conv_prims(x, w, g, (1, 1), [(1, 1), (1, 1)], (1, 1), True)
    for a, b in zip(one, two):
        np.testing.assert_array_equal(bits(a), bits(b))


def test_conv_groups_and_f32_stay_off_the_tiles():
    rng = np.random.default_rng(9)
    _core.set_amx_emulation(True)
    before = _core.conv_amx_calls()
    x, w = rand(rng, (1, 6, 6, 16)), rand(rng, (3, 3, 8, 16))
    bind("conv_general_dilated", as_podlet(x), as_podlet(w), window_strides=[1, 1], padding=[1, 1, 1, 1],
         feature_group_count=2)
    bind("conv_general_dilated", as_podlet(x.astype(np.float32)),
         as_podlet(rand(rng, (3, 3, 16, 16)).astype(np.float32)), window_strides=[1, 1], padding=[1, 1, 1, 1])
    assert _core.conv_amx_calls() == before


# ---- a training step on emulated tiles -----------------------------------------------
def test_bf16_cnn_step_on_emulated_tiles_close_to_the_host_kernels():
    import podlet.numpy as jnp
    from podlet import lax

    rng = np.random.default_rng(10)
    x = jnp.asarray(rand(rng, (4, 12, 12, 8)))
    w1 = jnp.asarray(rand(rng, (3, 3, 8, 16), 0.2))
    w2 = jnp.asarray(rand(rng, (16 * 36, 5), 0.05))

    def loss(w1, w2):
        h = lax.conv_general_dilated(x, w1, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        h = podlet.nn.relu(h).reshape(4, -1)
        return jnp.sum(jnp.square((h @ w2).astype(jnp.float32)))

    step = podlet.jit(podlet.value_and_grad(loss, argnums=(0, 1)))
    _core.set_amx_emulation(True)
    c0 = _core.conv_amx_calls()
    v_emu, (g1_emu, g2_emu) = step(w1, w2)
    assert _core.conv_amx_calls() > c0
    v_emu2, (g1_emu2, _) = step(w1, w2)
    _core.set_amx_emulation(False)
    v, (g1, g2) = step(w1, w2)
    assert float(v_emu) == float(v_emu2)
    np.testing.assert_array_equal(bits(np.asarray(g1_emu)), bits(np.asarray(g1_emu2)))
    np.testing.assert_allclose(float(v_emu), float(v), rtol=2e-2)
    for a, b in ((g1_emu, g1), (g2_emu, g2)):
        a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
        assert np.abs(a - b).max() <= 3e-2 * np.abs(b).max()


# ---- the ISA level -------------------------------------------------------------------
def test_cpu_info_reports_amx():
    f = INFO["features"]
    for k in ("amx_tile", "amx_bf16", "amx_os", "amx_permitted"):
        assert isinstance(f[k], bool)
    usable = f["amx_tile"] and f["amx_bf16"] and f["amx_os"] and f["amx_permitted"] and f["avx512_bf16"]
    assert HAS_AMX == usable
    assert (INFO["best_isa"] == "amx") == usable
    if f["amx_tile"] and not usable:
        assert INFO["amx_note"]  # says why the tiles sit idle


def test_set_isa_amx_clamps_or_selects():
    assert _core.set_isa("amx") == ("amx" if HAS_AMX else INFO["best_isa"])
    with pytest.raises(Exception, match="expected ref, avx2, avx512, avx512bf16 or amx"):
        _core.set_isa("amx2")


def test_podlet_isa_and_emulate_env():
    code = ("from podlet import _core; i = _core.cpu_info(); "
            "print(i['active_isa'], i['amx_emulation'])")
    env = dict(os.environ, PODLET_ISA="amx", PODLET_AMX_EMULATE="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    isa, emu = out.stdout.split()
    assert isa == ("amx" if HAS_AMX else INFO["best_isa"]) and emu == "True"
    if not HAS_AMX:
        assert "ISA 'amx' requested" in out.stderr


def test_amx_peak_measured_only_on_amx():
    peak = _core.measure_amx_peak(1, 2)
    if HAS_AMX and _core.active_isa() == "amx":
        assert peak > _core.measure_bf16_peak(1, 2)  # the tiles outrun vdpbf16ps
    else:
        assert peak == 0.0


def test_hardware_tiles_equal_the_emulation():
    """On an AMX host the tiles and their emulation give the same bits (GEMM and the
    three convolutions); elsewhere the host's own bf16 kernels agree with the emulation
    to rounding, which is all a host without tiles can check. Winograd is off: on an
    AVX512_BF16 host it takes the 3x3 stride-1 convolutions (another algorithm, with its
    own bounds in test_conv_winograd.py), and the comparison is of the direct kernels."""
    was = _core.conv_winograd_stats()["enabled"]
    _core.set_conv_winograd(False)
    try:
        _tiles_against_the_emulation()
    finally:
        _core.set_conv_winograd(was)


def _tiles_against_the_emulation():
    rng = np.random.default_rng(11)
    a, b = rand(rng, (70, 300)), rand(rng, (300, 90))
    x, w, g = rand(rng, (2, 9, 9, 24)), rand(rng, (3, 3, 24, 40)), rand(rng, (2, 9, 9, 40))
    # and a batched product with both operands transposed ([B, K, M] x [B, N, K]: attention's dV / dK)
    at, bt = rand(rng, (6, 197, 50)), rand(rng, (6, 40, 197))
    bdims = dict(lhs_contracting=[1], rhs_contracting=[2], lhs_batch=[0], rhs_batch=[0])
    emu = [dot(a, b, True, out="float32"), dot(at, bt, True, out="float32", **bdims)] + conv_prims(
        x, w, g, (1, 1), [(1, 1), (1, 1)], (1, 1), True)
    host = [dot(a, b, False, out="float32"), dot(at, bt, False, out="float32", **bdims)] + conv_prims(
        x, w, g, (1, 1), [(1, 1), (1, 1)], (1, 1), False)
    # channels in 16s: the hardware builds backward-filter tiles by AVX-512 transposes
    # (conv_amx_impl.h), stride 2 and padding leaving taps in the padding
    x2, w2 = rand(rng, (2, 11, 10, 32)), rand(rng, (3, 3, 32, 48))
    g2 = rand(rng, (2, 6, 5, 48))
    emu += conv_prims(x2, w2, g2, (2, 2), [(1, 1), (1, 0)], (1, 1), True)
    host += conv_prims(x2, w2, g2, (2, 2), [(1, 1), (1, 0)], (1, 1), False)
    # backward-filter over 2,304 pixels: K in two blocks, each task packing its own B
    x3, w3, g3 = rand(rng, (4, 24, 24, 32)), rand(rng, (3, 3, 32, 16)), rand(rng, (4, 24, 24, 16))
    emu += conv_prims(x3, w3, g3, (1, 1), [(1, 1), (1, 1)], (1, 1), True)
    host += conv_prims(x3, w3, g3, (1, 1), [(1, 1), (1, 1)], (1, 1), False)
    for e, h in zip(emu, host):
        if HAS_AMX and _core.active_isa() == "amx":
            np.testing.assert_array_equal(bits(e), bits(h))
        else:
            np.testing.assert_allclose(e, h, rtol=1e-4, atol=1e-4 * np.abs(h).max())


def same_bits_nan_as_nan(e, h):
    """Bit for bit, except that a NaN equals any NaN: the tiles' NaN payloads are their
    own (the hardware returns the default NaN or an operand's where the emulation's FMA
    picks another), and no kernel promises a payload."""
    e, h = np.asarray(e, np.float32), np.asarray(h, np.float32)
    np.testing.assert_array_equal(np.isnan(e), np.isnan(h))
    ok = ~np.isnan(e)
    np.testing.assert_array_equal(bits(e[ok]), bits(h[ok]))


@pytest.mark.parametrize("layout", ["nn", "tn", "nt", "tt"])
@pytest.mark.parametrize("M,K,N", [(1, 1, 1), (37, 70, 45), (130, 33, 17), (32, 2100, 40), (256, 512, 384),
                                   (17, 31, 15)])
def test_hardware_gemm_equals_the_emulation_with_specials(M, K, N, layout):
    """K cut into blocks (2100 > 64 chunks of 32), tails in every dimension, and values
    that exercise DAZ / FTZ, overflow, Inf and NaN: on an AMX host the tiles against the
    emulation; elsewhere the emulation against the NumPy model, specials included. Each
    operand as stored (n) or transposed (t: A's K or B's N is its slow dim), which the
    hardware kernel packs with AVX-512 transposes (amx_pack_avx512.h) and the emulation
    element by element."""
    rng = np.random.default_rng(M + K + N)
    a, b = rand(rng, (M, K)), rand(rng, (K, N))
    specials = np.asarray([1e-39, -1e-39, 1e-20, 3e38, -3e38, np.inf, -np.inf, np.nan, 0.0, -0.0], np.float32)
    for arr in (a, b):
        flat = arr.reshape(-1)
        idx = rng.choice(flat.size, size=max(1, flat.size // 50), replace=False)
        flat[idx] = specials[rng.integers(0, specials.size, idx.size)].astype(BF16)
    # the operands as stored, and dot_general's contracting dims for them
    at, lc = (np.ascontiguousarray(a.T), 0) if layout[0] == "t" else (a, 1)
    bt, rc = (np.ascontiguousarray(b.T), 1) if layout[1] == "t" else (b, 0)

    def run(emulate, out):
        _core.set_amx_emulation(emulate)
        attrs = {"lhs_contracting": [lc], "rhs_contracting": [rc]}
        if out is not None:
            attrs["preferred_element_type"] = out
        return np.asarray(bind("dot_general", as_podlet(at), as_podlet(bt), **attrs)).copy()

    if not HAS_AMX:
        model = tdpbf16ps_model(a, b)
        same_bits_nan_as_nan(run(True, "float32"), model)
        np.testing.assert_array_equal(np.isnan(run(True, None)), np.isnan(model))
        return
    select_isa("amx")
    for out in ("float32", None):
        same_bits_nan_as_nan(run(True, out), run(False, out))
        assert _core.gemm_last_path() == "amx"

