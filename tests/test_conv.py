"""conv_general_dilated, conv_bwd_data, conv_bwd_filter: forward vs a NumPy float64
reference and jax.lax.conv_general_dilated, eager == jit, VJPs (first and second order)
vs finite differences and JAX, dtype rules, shape errors, FLOPs, thread determinism."""
import jax
import ml_dtypes
import numpy as np
import pytest

import podlet
from podlet import lax
from podlet._src.core import bind
from prim_check import as_podlet, check_prim, check_vjp



@pytest.fixture(autouse=True, scope="module")
def _jax_x64_for_this_module():
    """JAX is only an oracle here; float64 keeps it exact. Restored after the module so
    other test files see JAX's default."""
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", False)
BF16 = ml_dtypes.bfloat16
DN = ("NHWC", "HWIO", "NHWC")


# ---- NumPy float64 reference -----------------------------------------------------
def _geometry(xs, ws, strides, pad, ld, rd):
    n, h, w, c = xs
    kh, kw = ws[:2]
    hd, wd = (h - 1) * ld[0] + 1, (w - 1) * ld[1] + 1
    hp, wp = hd + pad[0] + pad[1], wd + pad[2] + pad[3]
    eh, ew = (kh - 1) * rd[0] + 1, (kw - 1) * rd[1] + 1
    ho = max(0, (hp - eh) // strides[0] + 1) if hp >= eh else 0
    wo = max(0, (wp - ew) // strides[1] + 1) if wp >= ew else 0
    return hd, wd, hp, wp, ho, wo


def _dilate_pad(x, ld, pad):
    """lhs-dilate then pad (negative padding crops), NHWC."""
    n, h, w, c = x.shape
    xd = np.zeros((n, (h - 1) * ld[0] + 1, (w - 1) * ld[1] + 1, c))
    xd[:, ::ld[0], ::ld[1]] = x
    lo_h, hi_h, lo_w, hi_w = pad
    xp = np.pad(xd, [(0, 0), (max(lo_h, 0), max(hi_h, 0)), (max(lo_w, 0), max(hi_w, 0)), (0, 0)])
    return xp[:, max(-lo_h, 0):xp.shape[1] - max(-hi_h, 0), max(-lo_w, 0):xp.shape[2] - max(-hi_w, 0)]


def _taps(ws, rd, ho, wo, strides):
    """(kh, kw, row slice, col slice) of the padded input read by each filter tap."""
    for kh in range(ws[0]):
        for kw in range(ws[1]):
            r0, c0 = kh * rd[0], kw * rd[1]
            yield kh, kw, slice(r0, r0 + (ho - 1) * strides[0] + 1, strides[0]), \
                slice(c0, c0 + (wo - 1) * strides[1] + 1, strides[1])


def ref_conv(x, w, strides=(1, 1), pad=(0, 0, 0, 0), ld=(1, 1), rd=(1, 1), groups=1):
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    n, c = x.shape[0], x.shape[3]
    o = w.shape[3]
    *_, ho, wo = _geometry(x.shape, w.shape, strides, pad, ld, rd)
    xp = _dilate_pad(x, ld, pad)
    y = np.zeros((n, ho, wo, groups, o // groups))
    if ho == 0 or wo == 0:
        return y.reshape(n, ho, wo, o)
    wg = w.reshape(w.shape[0], w.shape[1], c // groups, groups, o // groups)
    for kh, kw, rs, cs in _taps(w.shape, rd, ho, wo, strides):
        patch = xp[:, rs, cs].reshape(n, ho, wo, groups, c // groups)
        y += np.einsum("nhwgc,cgo->nhwgo", patch, wg[kh, kw])
    return y.reshape(n, ho, wo, o)


def ref_bwd_data(g, w, x_shape, strides=(1, 1), pad=(0, 0, 0, 0), ld=(1, 1), rd=(1, 1), groups=1):
    """The adjoint of ref_conv in x: scatter each tap back, then undo padding and dilation."""
    g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
    n, h, wd_, c = x_shape
    o = w.shape[3]
    hd, wd, hp, wp, ho, wo = _geometry(x_shape, w.shape, strides, pad, ld, rd)
    lo_h, hi_h, lo_w, hi_w = pad
    # Work on the dilated input extended by max(pad, 0) on each side (the crop is undone by slicing).
    big = np.zeros((n, hd + max(lo_h, 0) + max(hi_h, 0), wd + max(lo_w, 0) + max(hi_w, 0), groups, c // groups))
    off_h, off_w = max(-lo_h, 0), max(-lo_w, 0)
    wg = w.reshape(w.shape[0], w.shape[1], c // groups, groups, o // groups)
    gg = g.reshape(n, ho, wo, groups, o // groups)
    for kh, kw, rs, cs in _taps(w.shape, rd, ho, wo, strides):
        rs = slice(rs.start + off_h, rs.stop + off_h, rs.step)
        cs = slice(cs.start + off_w, cs.stop + off_w, cs.step)
        big[:, rs, cs] += np.einsum("nhwgo,cgo->nhwgc", gg, wg[kh, kw])
    xd = big[:, max(lo_h, 0):max(lo_h, 0) + hd, max(lo_w, 0):max(lo_w, 0) + wd]
    return xd[:, ::ld[0], ::ld[1]].reshape(n, h, wd_, c)


def ref_bwd_filter(x, g, w_shape, strides=(1, 1), pad=(0, 0, 0, 0), ld=(1, 1), rd=(1, 1), groups=1):
    x, g = np.asarray(x, np.float64), np.asarray(g, np.float64)
    n, c = x.shape[0], x.shape[3]
    o = w_shape[3]
    *_, ho, wo = _geometry(x.shape, w_shape, strides, pad, ld, rd)
    xp = _dilate_pad(x, ld, pad)
    dw = np.zeros((w_shape[0], w_shape[1], c // groups, groups, o // groups))
    gg = g.reshape(n, ho, wo, groups, o // groups)
    for kh, kw, rs, cs in _taps(w_shape, rd, ho, wo, strides):
        patch = xp[:, rs, cs].reshape(n, ho, wo, groups, c // groups)
        dw[kh, kw] = np.einsum("nhwgc,nhwgo->cgo", patch, gg)
    return dw.reshape(w_shape)


# ---- cases -------------------------------------------------------------------------
def same_pads(in_hw, k_hw, strides, rd=(1, 1)):
    eff = [(k - 1) * d + 1 for k, d in zip(k_hw, rd)]
    p = jax.lax.padtype_to_pads(in_hw, eff, strides, "SAME")
    return [int(v) for pair in p for v in pair]


# name -> (x shape, w shape, strides, padding, lhs_dilation, rhs_dilation, groups)
CASES = {
    "stem_7x7_s2_p3": ((2, 15, 16, 3), (7, 7, 3, 8), (2, 2), (3, 3, 3, 3), (1, 1), (1, 1), 1),
    "3x3_s1_same": ((2, 8, 9, 5), (3, 3, 5, 6), (1, 1), tuple(same_pads((8, 9), (3, 3), (1, 1))), (1, 1), (1, 1), 1),
    "3x3_s2_same": ((2, 9, 8, 4), (3, 3, 4, 8), (2, 2), tuple(same_pads((9, 8), (3, 3), (2, 2))), (1, 1), (1, 1), 1),
    "1x1_s2_projection": ((2, 7, 8, 6), (1, 1, 6, 10), (2, 2), (0, 0, 0, 0), (1, 1), (1, 1), 1),
    "asymmetric_padding": ((1, 6, 7, 3), (3, 2, 3, 4), (1, 2), (0, 2, 1, 0), (1, 1), (1, 1), 1),
    "negative_padding": ((1, 8, 8, 2), (3, 3, 2, 3), (1, 1), (-1, 2, 1, -2), (1, 1), (1, 1), 1),
    "rhs_dilation_2": ((2, 9, 10, 3), (3, 3, 3, 4), (1, 1), (2, 2, 2, 2), (1, 1), (2, 2), 1),
    "lhs_dilation_2": ((2, 5, 6, 3), (3, 3, 3, 4), (1, 1), (1, 1, 2, 1), (2, 2), (1, 1), 1),
    "lhs_and_rhs_dilation_strided": ((1, 6, 5, 2), (2, 3, 2, 3), (2, 1), (1, 0, 0, 2), (2, 3), (2, 1), 1),
    "groups_2": ((2, 7, 6, 6), (3, 3, 3, 8), (1, 1), (1, 1, 1, 1), (1, 1), (1, 1), 2),
    "groups_2_wide": ((1, 5, 5, 32), (3, 3, 16, 32), (2, 1), (1, 1, 1, 1), (1, 1), (1, 1), 2),
    "depthwise": ((2, 8, 7, 5), (3, 3, 1, 5), (1, 1), (1, 1, 1, 1), (1, 1), (1, 1), 5),
    "depthwise_multiplier_2_s2": ((1, 9, 9, 4), (3, 3, 1, 8), (2, 2), (1, 1, 1, 1), (1, 1), (1, 1), 4),
    "window_larger_than_input": ((1, 2, 2, 2), (3, 3, 2, 3), (1, 1), (0, 0, 0, 0), (1, 1), (1, 1), 1),
}


def attrs_of(case, **kw):
    _, _, s, p, ld, rd, g = case
    return dict(window_strides=list(s), padding=list(p), lhs_dilation=list(ld), rhs_dilation=list(rd),
                feature_group_count=g, **kw)


def ref_kwargs(case):
    _, _, s, p, ld, rd, g = case
    return dict(strides=s, pad=p, ld=ld, rd=rd, groups=g)


def jax_conv(x, w, case, **kw):
    _, _, s, p, ld, rd, g = case
    return jax.lax.conv_general_dilated(x, w, s, [(p[0], p[1]), (p[2], p[3])], lhs_dilation=ld, rhs_dilation=rd,
                                        dimension_numbers=DN, feature_group_count=g, **kw)


def inputs(case, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    xs, ws = case[0], case[1]
    return rng.standard_normal(xs).astype(dtype), rng.standard_normal(ws).astype(dtype)


def out_shape(case):
    xs, ws, s, p, ld, rd, g = case
    *_, ho, wo = _geometry(xs, ws, s, p, ld, rd)
    return (xs[0], ho, wo, ws[3])


# Tolerances: bf16 outputs are rounded once from an f32 sum of up to a few hundred terms.
def tol(dtype):
    return {np.dtype(np.float64): dict(rtol=1e-12, atol=1e-12), np.dtype(np.float32): dict(rtol=1e-5, atol=1e-5),
            np.dtype(BF16): dict(rtol=1.6e-2, atol=5e-2)}[np.dtype(dtype)]


# ---- forward -------------------------------------------------------------------------
def test_reference_matches_jax():
    """The NumPy oracles themselves agree with JAX (float64) on every case."""
    for name, case in CASES.items():
        x, w = inputs(case)
        y = jax_conv(x, w, case)
        np.testing.assert_allclose(ref_conv(x, w, **ref_kwargs(case)), y, rtol=1e-12, atol=1e-12, err_msg=name)
        g = np.random.default_rng(1).standard_normal(y.shape)
        _, vjp = jax.vjp(lambda a, b: jax_conv(a, b, case), x, w)
        dx, dw = vjp(g)
        np.testing.assert_allclose(ref_bwd_data(g, w, x.shape, **ref_kwargs(case)), dx, rtol=1e-12, atol=1e-12, err_msg=name)
        np.testing.assert_allclose(ref_bwd_filter(x, g, w.shape, **ref_kwargs(case)), dw, rtol=1e-12, atol=1e-11, err_msg=name)


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("dtype", [np.float32, BF16, np.float64])
def test_forward(name, dtype):
    case = CASES[name]
    x, w = inputs(case, dtype)
    y = check_prim("conv_general_dilated", [x, w], attrs_of(case), ref=lambda a, b: ref_conv(a, b, **ref_kwargs(case)),
                   **tol(dtype))
    assert y.dtype == np.dtype(dtype) and y.shape == out_shape(case)
    if dtype == np.float64:  # second oracle
        np.testing.assert_allclose(y, jax_conv(x, w, case), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("dtype", [np.float32, BF16, np.float64])
def test_bwd_data(name, dtype):
    case = CASES[name]
    x, w = inputs(case, dtype)
    g = np.random.default_rng(2).standard_normal(out_shape(case)).astype(dtype)
    dx = check_prim("conv_bwd_data", [g, w], attrs_of(case, lhs_shape=list(x.shape)),
                    ref=lambda a, b: ref_bwd_data(a, b, x.shape, **ref_kwargs(case)), **tol(dtype))
    assert dx.dtype == np.dtype(dtype) and dx.shape == x.shape


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("dtype", [np.float32, BF16, np.float64])
def test_bwd_filter(name, dtype):
    case = CASES[name]
    x, w = inputs(case, dtype)
    g = np.random.default_rng(3).standard_normal(out_shape(case)).astype(dtype)
    dw = check_prim("conv_bwd_filter", [x, g], attrs_of(case, rhs_shape=list(w.shape)),
                    ref=lambda a, b: ref_bwd_filter(a, b, w.shape, **ref_kwargs(case)), **tol(dtype))
    assert dw.dtype == np.dtype(dtype) and dw.shape == w.shape


def test_bf16_accumulates_in_f32_with_preferred_element_type():
    case = ((2, 12, 12, 64), (3, 3, 64, 16), (1, 1), (1, 1, 1, 1), (1, 1), (1, 1), 1)
    x, w = inputs(case, BF16)
    # precision 'highest': the direct kernel, exact products (DEFAULT would take Winograd).
    y = check_prim("conv_general_dilated", [x, w], attrs_of(case, preferred_element_type="float32", precision="highest"),
                   ref=lambda a, b: ref_conv(a, b, **ref_kwargs(case)), rtol=1e-5, atol=1e-4)
    assert y.dtype == np.float32
    # The bf16 result is the same f32 sum rounded once.
    y16 = np.asarray(bind("conv_general_dilated", as_podlet(x), as_podlet(w), **attrs_of(case, precision="highest")))
    np.testing.assert_array_equal(y16, y.astype(BF16))


def test_public_lax_wrapper_with_string_padding_matches_jax():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 9, 10, 3)).astype(np.float32)
    w = rng.standard_normal((3, 3, 3, 4)).astype(np.float32)
    for padding in ("SAME", "VALID"):
        for strides in ((1, 1), (2, 2)):
            got = lax.conv_general_dilated(as_podlet(x), as_podlet(w), strides, padding, dimension_numbers=DN)
            want = jax.lax.conv_general_dilated(x, w, strides, padding, dimension_numbers=DN)
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


# ---- VJPs ----------------------------------------------------------------------------
VJP_CASES = [n for n in CASES if n not in ("groups_2_wide", "window_larger_than_input")]


@pytest.mark.parametrize("name", VJP_CASES)
def test_conv_vjp_finite_differences(name):
    case = CASES[name]
    check_vjp("conv_general_dilated", list(inputs(case)), attrs_of(case), grad_argnums=(0, 1), n_dirs=1)


@pytest.mark.parametrize("name", ["stem_7x7_s2_p3", "3x3_s2_same", "negative_padding", "lhs_and_rhs_dilation_strided",
                                  "groups_2", "depthwise_multiplier_2_s2"])
def test_bwd_prims_vjp_finite_differences(name):
    """The VJPs of the backward prims (what makes conv differentiable twice)."""
    case = CASES[name]
    x, w = inputs(case)
    g = np.random.default_rng(5).standard_normal(out_shape(case))
    check_vjp("conv_bwd_data", [g, w], attrs_of(case, lhs_shape=list(x.shape)), grad_argnums=(0, 1), n_dirs=1)
    check_vjp("conv_bwd_filter", [x, g], attrs_of(case, rhs_shape=list(w.shape)), grad_argnums=(0, 1), n_dirs=1)


@pytest.fixture
def x64():
    """podlet.numpy ops keep float64 only with x64 enabled (like JAX)."""
    podlet.config.update("jax_enable_x64", True)
    yield
    podlet.config.update("jax_enable_x64", False)


@pytest.mark.parametrize("name", ["3x3_s2_same", "lhs_and_rhs_dilation_strided", "depthwise_multiplier_2_s2"])
def test_second_derivative_matches_jax(name, x64):
    """grad of (a function of grad of conv) == JAX's, through podlet.lax."""
    case = CASES[name]
    x, w = inputs(case)
    v = np.random.default_rng(6).standard_normal(x.shape)
    _, _, s, p, ld, rd, g = case
    pads = [(p[0], p[1]), (p[2], p[3])]

    def make(m, as_arr):
        def loss(x, w):
            y = m.conv_general_dilated(x, w, s, pads, lhs_dilation=ld, rhs_dilation=rd, dimension_numbers=DN,
                                       feature_group_count=g)
            return (y * y * y).sum()

        def outer(x, w):
            gx, gw = (jax.grad if m is jax.lax else podlet.grad)(loss, argnums=(0, 1))(x, w)
            return (gx * as_arr(v)).sum() + (gw * gw).sum()
        return outer

    want = jax.grad(make(jax.lax, lambda a: a), argnums=(0, 1))(x, w)
    got = podlet.grad(make(lax, as_podlet), argnums=(0, 1))(as_podlet(x), as_podlet(w))
    for gg, ww in zip(got, want):
        np.testing.assert_allclose(np.asarray(gg), ww, rtol=1e-10, atol=1e-10)


def test_vjp_dtypes_follow_operands():
    """bf16 operands with an f32 output: dx and dw come back as bf16, rounded once."""
    case = CASES["3x3_s2_same"]
    x, w = inputs(case, BF16)
    attrs = attrs_of(case, preferred_element_type="float32")
    ct = np.random.default_rng(7).standard_normal(out_shape(case)).astype(np.float32)
    _, vjp_fn = podlet.vjp(lambda a, b: bind("conv_general_dilated", a, b, **attrs), as_podlet(x), as_podlet(w))
    dx, dw = (np.asarray(t) for t in vjp_fn(as_podlet(ct)))
    assert dx.dtype == BF16 and dw.dtype == BF16
    np.testing.assert_allclose(dx.astype(np.float64), ref_bwd_data(ct, w, x.shape, **ref_kwargs(case)), **tol(BF16))
    np.testing.assert_allclose(dw.astype(np.float64), ref_bwd_filter(x, ct, w.shape, **ref_kwargs(case)), rtol=1.6e-2,
                               atol=1e-1)


def test_grad_graph_uses_the_backward_prims():
    case = CASES["3x3_s1_same"]
    x, w = inputs(case, np.float32)
    f = lambda a, b: bind("conv_general_dilated", a, b, **attrs_of(case)).sum()
    gfun = podlet.grad(f, argnums=(0, 1))
    counts = podlet.make_graph(gfun, as_podlet(x), as_podlet(w)).prim_counts()
    assert counts.get("conv_bwd_data") == 1 and counts.get("conv_bwd_filter") == 1


# ---- errors, FLOPs, determinism --------------------------------------------------------
def test_shape_errors():
    x = as_podlet(np.zeros((1, 5, 5, 6), np.float32))
    with pytest.raises(podlet.ShapeError, match=r"feature_group_count 4 must divide the lhs feature dim \(6\)"):
        bind("conv_general_dilated", x, as_podlet(np.zeros((3, 3, 1, 4), np.float32)), feature_group_count=4)
    with pytest.raises(podlet.ShapeError, match=r"rhs input-feature dim \(HWIO dim 2\) is 4, expected lhs features 6"):
        bind("conv_general_dilated", x, as_podlet(np.zeros((3, 3, 4, 4), np.float32)))
    with pytest.raises(podlet.ShapeError, match="rank 4"):
        bind("conv_general_dilated", as_podlet(np.zeros((5, 5, 6), np.float32)), as_podlet(np.zeros((3, 3, 6, 4), np.float32)))
    with pytest.raises(podlet.ShapeError, match="window_strides must have 2 entries"):
        bind("conv_general_dilated", x, as_podlet(np.zeros((3, 3, 6, 4), np.float32)), window_strides=[1, 1, 1])
    with pytest.raises(podlet.ShapeError, match=r"g has shape \(1, 4, 4, 4\), expected \(1, 3, 3, 4\)"):
        bind("conv_bwd_data", as_podlet(np.zeros((1, 4, 4, 4), np.float32)), as_podlet(np.zeros((3, 3, 6, 4), np.float32)),
             lhs_shape=[1, 5, 5, 6])
    with pytest.raises(podlet.DTypeError, match="int32"):
        bind("conv_general_dilated", as_podlet(np.zeros((1, 5, 5, 6), np.int32)), as_podlet(np.zeros((3, 3, 6, 4), np.int32)))


def test_flops():
    case = CASES["groups_2"]
    x, w = inputs(case, np.float32)
    n, ho, wo, o = out_shape(case)
    want = 2 * n * ho * wo * o * 3 * 3 * 6 // 2
    g = podlet.make_graph(lambda a, b: bind("conv_general_dilated", a, b, **attrs_of(case)), as_podlet(x), as_podlet(w))
    assert g.flops() == want
    gy = np.zeros(out_shape(case), np.float32)
    gd = podlet.make_graph(lambda a, b: bind("conv_bwd_data", a, b, **attrs_of(case, lhs_shape=list(x.shape))),
                           as_podlet(gy), as_podlet(w))
    gf = podlet.make_graph(lambda a, b: bind("conv_bwd_filter", a, b, **attrs_of(case, rhs_shape=list(w.shape))),
                           as_podlet(x), as_podlet(gy))
    assert gd.flops() == want and gf.flops() == want


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_bits_do_not_depend_on_thread_count(dtype):
    case = ((4, 20, 18, 16), (3, 3, 16, 24), (2, 1), (1, 1, 1, 1), (1, 1), (1, 1), 1)
    dw_case = ((2, 10, 9, 12), (3, 3, 3, 8), (1, 1), (1, 1, 1, 1), (1, 1), (1, 1), 4)
    n0 = podlet.config.num_threads
    runs = []
    try:
        for n in (1, 2):
            podlet.config.update("num_threads", n)
            outs = []
            for c in (case, dw_case):
                x, w = inputs(c, dtype)
                g = np.random.default_rng(8).standard_normal(out_shape(c)).astype(dtype)
                a = attrs_of(c)
                outs.append(np.asarray(bind("conv_general_dilated", as_podlet(x), as_podlet(w), **a)).copy())
                outs.append(np.asarray(bind("conv_bwd_data", as_podlet(g), as_podlet(w), lhs_shape=list(x.shape), **a)).copy())
                outs.append(np.asarray(bind("conv_bwd_filter", as_podlet(x), as_podlet(g), rhs_shape=list(w.shape), **a)).copy())
            runs.append(outs)
    finally:
        podlet.config.update("num_threads", n0)
    for a, b in zip(*runs):
        assert a.tobytes() == b.tobytes()
