"""A TPU's matmul numerics on request (python/podlet/_src/precision.py,
cpp/podlet/prims/dot_algorithm.h): 'bfloat16' / BF16_BF16_F32 round f32 operands to bf16
(one pass), 'bfloat16_3x' / BF16_BF16_F32_X3 split them into hi + lo (three passes),
BF16_BF16_F32_X6 into three parts (six passes), in dot_general and the convolutions,
their gradients, vmap, jit, the sharded jit, pmap and the ONNX export.

The oracle is a NumPy model: the bf16 parts made with ml_dtypes (in float32, as the
kernels make them), the products and sums in float64; podlet's float32 sums must agree
to a float32-accumulation bound, far tighter than the distance between the algorithms.
"""
import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest

import podlet
import podlet.numpy as jnp
from podlet import export, lax, nn
from podlet._core import Array
from podlet._src.core import bind
from podlet.sharding import Mesh, NamedSharding, PartitionSpec as P

BF16 = ml_dtypes.bfloat16
ISAS = podlet.cpu_info()["available_isas"]
NHWC = ("NHWC", "HWIO", "NHWC")

# name -> (bf16 parts per f32 operand, the small products (part of a, part of b) in XLA's order)
ALGORITHMS = {"exact": (0, []), "bf16": (1, []), "bf16_3x": (2, [(1, 0), (0, 1)]),
              "bf16_6x": (3, [(1, 1), (0, 2), (2, 0), (0, 1), (1, 0)])}
# precision= values and the algorithm each selects
PRECISIONS = [("bfloat16", "bf16"), (lax.DotAlgorithmPreset.BF16_BF16_F32, "bf16"), ("bfloat16_3x", "bf16_3x"),
              ("BF16_BF16_F32_X3", "bf16_3x"), (lax.DotAlgorithmPreset.BF16_BF16_F32_X6, "bf16_6x"),
              (("bfloat16", "bfloat16"), "bf16"), (("bfloat16_3x", "bfloat16"), "bf16_3x")]
EXACT = [None, "default", "fastest", "high", "tensorfloat32", "highest", "float32", lax.Precision.DEFAULT,
         lax.Precision.HIGH, lax.Precision.HIGHEST, lax.Precision("bfloat16"), ("bfloat16", "highest"),
         lax.DotAlgorithmPreset.DEFAULT, "F32_F32_F32"]


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def parts(x, alg):
    """x's bf16 parts as float64 (float32 operands), x itself when exact / already bf16."""
    n = ALGORITHMS[alg][0]
    x = np.asarray(x)
    if n == 0 or x.dtype != np.float32:
        return [x.astype(np.float64)] + [np.zeros(x.shape)] * max(n - 1, 0)
    out, rest = [], x
    for _ in range(n):
        h = rest.astype(BF16).astype(np.float32)
        out.append(h.astype(np.float64))
        rest = rest - h
    return out


def model(product, a, b, alg):
    """The algorithm's result, products and sums in float64, from product(a_part, b_part)."""
    pa, pb = parts(a, alg), parts(b, alg)
    small = ALGORITHMS[alg][1]
    return sum((product(pa[i], pb[j]) for i, j in small), np.zeros(())) + product(pa[0], pb[0])


def bound(product, a, b, terms):
    """A float32-accumulation bound: 4 ulps of sum |a| |b| (the rounding of the partial
    sums of `terms` random products is about 0.6 ulp of it, measured; the worst case,
    terms ulps, would not tell 'bfloat16_3x' from exact)."""
    del terms
    return 4 * np.finfo(np.float32).eps * product(np.abs(np.asarray(a, np.float64)),
                                                  np.abs(np.asarray(b, np.float64))) + 1e-30


def assert_model(got, product, a, b, alg, terms):
    got = np.asarray(got, np.float64)
    want = model(product, a, b, alg)
    tol = bound(product, a, b, terms)
    err = np.abs(got - want)
    assert (err <= tol).all(), f"{alg}: max error {err.max():.3g}, bound {tol[err > tol].min():.3g}"
    if alg in ("bf16", "bf16_3x"):  # and the check can tell them from exact f32 (six passes are f32's accuracy)
        assert (np.abs(got - model(product, a, b, "exact")) > tol).any(), alg


@pytest.fixture(params=ISAS)
def isa(request):
    before = podlet._core.active_isa()
    podlet._core.set_isa(request.param)
    yield request.param
    podlet._core.set_isa(before)


@pytest.fixture
def threads():
    before = podlet.config.num_threads
    yield lambda n: podlet.config.update("num_threads", n)
    podlet.config.update("num_threads", before)


# ---- NumPy convolution model: y, and the two transposes (NHWC, HWIO, groups 1) ----------
def conv_np(x, w, stride, pad):
    N, H, W, C = x.shape
    KH, KW, _, O = w.shape
    xp = np.pad(x, ((0, 0), pad[0], pad[1], (0, 0)))
    Ho = (xp.shape[1] - KH) // stride[0] + 1
    Wo = (xp.shape[2] - KW) // stride[1] + 1
    y = np.zeros((N, Ho, Wo, O))
    for kh in range(KH):
        for kw in range(KW):
            patch = xp[:, kh:kh + stride[0] * (Ho - 1) + 1:stride[0], kw:kw + stride[1] * (Wo - 1) + 1:stride[1]]
            y += patch @ w[kh, kw]
    return y


def conv_np_dx(g, w, x_shape, stride, pad):
    """The transpose of conv_np in x, applied to g."""
    N, H, W, C = x_shape
    KH, KW, _, O = w.shape
    Ho, Wo = g.shape[1:3]
    dxp = np.zeros((N, H + sum(pad[0]), W + sum(pad[1]), C))
    for kh in range(KH):
        for kw in range(KW):
            dxp[:, kh:kh + stride[0] * (Ho - 1) + 1:stride[0], kw:kw + stride[1] * (Wo - 1) + 1:stride[1]] += \
                g @ w[kh, kw].T
    return dxp[:, pad[0][0]:pad[0][0] + H, pad[1][0]:pad[1][0] + W]


def conv_np_dw(x, g, w_shape, stride, pad):
    """The transpose of conv_np in w, applied to g."""
    KH, KW, C, O = w_shape
    xp = np.pad(x, ((0, 0), pad[0], pad[1], (0, 0)))
    Ho, Wo = g.shape[1:3]
    dw = np.zeros(w_shape)
    for kh in range(KH):
        for kw in range(KW):
            patch = xp[:, kh:kh + stride[0] * (Ho - 1) + 1:stride[0], kw:kw + stride[1] * (Wo - 1) + 1:stride[1]]
            dw[kh, kw] = np.einsum("nhwc,nhwo->co", patch, g)
    return dw


CONVS = {"3x3_same": ((2, 7, 6, 5), (3, 3, 5, 4), (1, 1), ((1, 1), (1, 1))),
         "3x3_stride2": ((2, 9, 8, 3), (3, 3, 3, 6), (2, 2), ((1, 0), (0, 1))),
         "1x1": ((3, 4, 5, 16), (1, 1, 16, 8), (1, 1), ((0, 0), (0, 0)))}


def conv_podlet(x, w, stride, pad, precision):
    return lax.conv_general_dilated(x, w, stride, pad, dimension_numbers=NHWC, precision=precision)


# ---- dot_general ----------------------------------------------------------------------
@pytest.mark.parametrize("precision,alg", PRECISIONS, ids=[str(p) for p, _ in PRECISIONS])
def test_dot_matches_the_numpy_model(isa, precision, alg):
    a, b = rand(9, 70, seed=1), rand(70, 13, seed=2)
    assert_model(lax.dot(a, b, precision=precision), np.matmul, a, b, alg, 70)
    # batch dims, contracting dims anywhere (einsum's dot_general)
    x, y = rand(3, 40, 5, seed=3), rand(3, 6, 40, seed=4)
    got = lax.dot_general(x, y, (([1], [2]), ([0], [0])), precision=precision)
    prod = lambda u, v: np.einsum("bkm,bnk->bmn", u, v)  # noqa: E731
    assert_model(got, prod, x, y, alg, 40)


@pytest.mark.parametrize("precision", EXACT, ids=[str(p) for p in EXACT])
def test_every_other_precision_keeps_f32_products_exact(precision):
    a, b = rand(9, 70, seed=1), rand(70, 13, seed=2)
    assert_model(lax.dot(a, b, precision=precision), np.matmul, a, b, "exact", 70)
    x, w, stride, pad = rand(2, 7, 6, 5), rand(3, 3, 5, 4, seed=5), (1, 1), ((1, 1), (1, 1))
    assert_model(conv_podlet(x, w, stride, pad, precision), lambda u, v: conv_np(u, v, stride, pad), x, w, "exact",
                 45)


def test_three_passes_are_much_closer_to_exact_than_one():
    a, b = rand(64, 256, seed=6), rand(256, 48, seed=7)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    err = {p: (np.abs(np.asarray(lax.dot(a, b, precision=p), np.float64) - exact) / scale).max()
           for p in ("bfloat16", "bfloat16_3x", "BF16_BF16_F32_X6", "highest")}
    assert err["bfloat16"] > 2 ** -12                  # one pass: bf16's 8 bits per operand
    assert err["bfloat16"] > 100 * err["bfloat16_3x"]   # three passes: about 2^-17 per operand
    assert err["bfloat16_3x"] > 2 * err["highest"]       # ... not float32's exact products
    assert err["BF16_BF16_F32_X6"] < 4 * err["highest"] + 1e-7  # six: float32's accuracy


def test_bf16_operands_are_unaffected_and_f64_stays_exact():
    a, b = rand(8, 40, seed=8).astype(BF16), rand(40, 5, seed=9).astype(BF16)
    plain = np.asarray(lax.dot(a, b))
    for p in ("bfloat16", "bfloat16_3x", lax.DotAlgorithmPreset.BF16_BF16_F32):
        assert np.asarray(lax.dot(a, b, precision=p)).tobytes() == plain.tobytes(), p
    # one bf16 and one f32 operand: only the f32 one is rounded / split
    af, bb = rand(8, 40, seed=10), rand(40, 5, seed=11).astype(BF16)
    for p, alg in (("bfloat16", "bf16"), ("bfloat16_3x", "bf16_3x")):
        assert_model(lax.dot(af, bb, precision=p), np.matmul, af, bb.astype(np.float32), alg, 40)
    # f64 operands (the primitive itself; without x64 the API makes none): exact, f64 sums
    a64, b64 = rand(8, 40, seed=12).astype(np.float64) / 3, rand(40, 5, seed=13).astype(np.float64) / 7
    attrs = {"lhs_contracting": [1], "rhs_contracting": [0], "lhs_batch": [], "rhs_batch": []}
    run = lambda alg: np.asarray(podlet._core.apply(  # noqa: E731
        "dot_general", [Array.from_numpy(a64), Array.from_numpy(b64)], dict(attrs, algorithm=alg))[0])
    assert run("bf16").dtype == np.float64
    for alg in ("bf16", "bf16_3x", "bf16_6x"):
        assert run(alg).tobytes() == run("").tobytes(), alg
    np.testing.assert_allclose(run(""), a64 @ b64, rtol=1e-13)


def test_preferred_element_type_bf16_rounds_the_f32_result():
    a, b = rand(6, 50, seed=14), rand(50, 7, seed=15)
    got = lax.dot(a, b, precision="bfloat16_3x", preferred_element_type=jnp.bfloat16)
    assert got.dtype == jnp.bfloat16
    want = np.asarray(lax.dot(a, b, precision="bfloat16_3x")).astype(BF16)
    assert np.asarray(got).tobytes() == want.tobytes()


def test_nan_of_the_small_terms_alone_is_dropped_as_in_xla():
    # 1.0 splits into hi = 1, lo = 0; lo * inf is NaN, which must not reach the inf result
    a = np.ones((2, 3), np.float32)
    b = np.array([[np.inf, 1.0], [1.0, 1.0], [1.0, 1.0]], np.float32)
    for p in ("bfloat16_3x", "BF16_BF16_F32_X6"):
        got = np.asarray(lax.dot(a, b, precision=p))
        np.testing.assert_array_equal(got, [[np.inf, 3.0], [np.inf, 3.0]], err_msg=str(p))
    nan_in = b.copy()
    nan_in[1, 1] = np.nan
    got = np.asarray(lax.dot(a, nan_in, precision="bfloat16_3x"))
    assert np.isnan(got[:, 1]).all() and np.isinf(got[:, 0]).all()


# ---- convolutions ----------------------------------------------------------------------
@pytest.mark.parametrize("name", list(CONVS))
@pytest.mark.parametrize("precision,alg", [("bfloat16", "bf16"), ("bfloat16_3x", "bf16_3x"),
                                           ("BF16_BF16_F32_X6", "bf16_6x")])
def test_conv_matches_the_numpy_model(isa, name, precision, alg):
    xs, ws, stride, pad = CONVS[name]
    x, w = rand(*xs, seed=20), rand(*ws, seed=21)
    winograd_before = podlet._core.conv_winograd_stats()
    got = conv_podlet(x, w, stride, pad, precision)
    assert podlet._core.conv_winograd_stats() == winograd_before  # the direct kernel: exact products
    terms = ws[0] * ws[1] * ws[2]
    assert_model(got, lambda u, v: conv_np(u, v, stride, pad), x, w, alg, terms)


def test_conv_transpose_and_nn_conv_take_the_algorithm():
    x, w = rand(2, 5, 5, 4, seed=22), rand(3, 3, 4, 3, seed=23)
    exact = np.asarray(lax.conv_transpose(x, w, (2, 2), "SAME", dimension_numbers=NHWC))
    xb, wb = (t.astype(BF16).astype(np.float32) for t in (x, w))
    model_bf16 = np.asarray(lax.conv_transpose(xb, wb, (2, 2), "SAME", dimension_numbers=NHWC, precision="highest"))
    got = np.asarray(lax.conv_transpose(x, w, (2, 2), "SAME", dimension_numbers=NHWC, precision="bfloat16"))
    np.testing.assert_allclose(got, model_bf16, rtol=1e-5, atol=1e-5)
    assert np.abs(got - exact).max() > 1e-3


# ---- gradients: the transposed dots and convolutions use the same algorithm ------------
@pytest.mark.parametrize("precision,alg", [("bfloat16", "bf16"), ("bfloat16_3x", "bf16_3x"),
                                           (lax.DotAlgorithmPreset.BF16_BF16_F32, "bf16")])
def test_dot_gradients_use_the_algorithm(precision, alg):
    a, b, c = rand(7, 60, seed=30), rand(60, 11, seed=31), rand(7, 11, seed=32)
    # d/da sum(dot(a, b) * c) = c b^T and d/db = a^T c: the cotangent c enters the transposed dots
    ga, gb = podlet.grad(lambda a, b: (lax.dot(a, b, precision=precision) * c).sum(), (0, 1))(a, b)
    assert_model(ga, lambda u, v: u @ v.T, c, b, alg, 11)
    assert_model(gb, lambda u, v: u.T @ v, a, c, alg, 7)


@pytest.mark.parametrize("precision,alg", [("bfloat16", "bf16"), ("bfloat16_3x", "bf16_3x")])
def test_conv_gradients_use_the_algorithm(isa, precision, alg):
    xs, ws, stride, pad = CONVS["3x3_stride2"]
    x, w = rand(*xs, seed=33), rand(*ws, seed=34)
    c = rand(*conv_np(x, w, stride, pad).shape, seed=35)
    gx, gw = podlet.grad(lambda x, w: (conv_podlet(x, w, stride, pad, precision) * c).sum(), (0, 1))(x, w)
    assert_model(gx, lambda g, v: conv_np_dx(g, v, xs, stride, pad), c, w, alg, ws[0] * ws[1] * ws[3])
    assert_model(gw, lambda u, g: conv_np_dw(u, g, ws, stride, pad), x, c, alg, xs[0] * c.shape[1] * c.shape[2])


def test_second_order_gradients_keep_the_algorithm():
    a, b = rand(5, 30, seed=36), rand(30, 4, seed=37)

    def loss(a):
        return (lax.dot(a, b, precision="bfloat16_3x") ** 3).sum()
    jaxpr = str(podlet.make_jaxpr(podlet.grad(lambda a: podlet.grad(loss)(a).sum()))(a))
    n_dots = jaxpr.count("dot_general[")
    assert n_dots >= 3 and jaxpr.count("algorithm=bf16_3x") == n_dots, jaxpr


# ---- transformations ------------------------------------------------------------------
def test_jit_and_eager_agree_bit_for_bit():
    a, b = rand(12, 80, seed=40), rand(80, 9, seed=41)
    xs, ws, stride, pad = CONVS["3x3_same"]
    x, w = rand(*xs, seed=42), rand(*ws, seed=43)

    def f(a, b, x, w):
        y = lax.dot(a, b, precision="bfloat16_3x")
        z = conv_podlet(x, w, stride, pad, "bfloat16")
        return y, z, podlet.grad(lambda x, w: (conv_podlet(x, w, stride, pad, "bfloat16_3x") ** 2).sum(), (0, 1))(x, w)
    eager = podlet.tree_util.tree_leaves(f(a, b, x, w))
    jitted = podlet.tree_util.tree_leaves(podlet.jit(f)(a, b, x, w))
    for e, j in zip(eager, jitted):
        assert np.asarray(e).tobytes() == np.asarray(j).tobytes()


def test_same_bits_for_one_and_two_threads(isa, threads):
    a, b = rand(300, 256, seed=44), rand(256, 200, seed=45)
    x, w = rand(4, 20, 18, 16, seed=46), rand(3, 3, 16, 24, seed=47)

    def run():
        outs = [lax.dot(a, b, precision=p) for p in ("bfloat16", "bfloat16_3x", "BF16_BF16_F32_X6")]
        outs += podlet.grad(lambda x, w: (conv_podlet(x, w, (1, 1), "SAME", "bfloat16_3x") ** 2).sum(), (0, 1))(x, w)
        return [np.asarray(o).tobytes() for o in outs]
    threads(1)
    one = run()
    threads(2)
    assert run() == one


def test_vmap_keeps_the_algorithm():
    a, b = rand(4, 6, 50, seed=50), rand(50, 5, seed=51)
    got = podlet.vmap(lambda u: lax.dot(u, b, precision="bfloat16"))(a)
    loop = np.stack([np.asarray(lax.dot(u, b, precision="bfloat16")) for u in a])
    assert np.asarray(got).tobytes() == loop.tobytes()
    assert_model(got, lambda u, v: u @ v, a, b, "bf16", 50)
    # both operands batched: the conv's batching rule makes feature groups
    x, w = rand(3, 2, 6, 6, 4, seed=52), rand(3, 3, 3, 4, 5, seed=53)
    got = podlet.vmap(lambda u, v: conv_podlet(u, v, (1, 1), ((1, 1), (1, 1)), "bfloat16"))(x, w)
    for i in range(3):
        assert_model(np.asarray(got)[i], lambda u, v: conv_np(u, v, (1, 1), ((1, 1), (1, 1))), x[i], w[i], "bf16", 36)


def test_jit_retraces_when_the_default_changes():
    a, b = rand(10, 64, seed=54), rand(64, 8, seed=55)
    f = podlet.jit(lambda a, b: a @ b)
    exact = np.asarray(f(a, b))
    assert_model(exact, np.matmul, a, b, "exact", 64)
    with podlet.default_matmul_precision("bfloat16"):
        assert_model(f(a, b), np.matmul, a, b, "bf16", 64)
    podlet.config.update("jax_default_matmul_precision", "bfloat16_3x")
    try:
        assert_model(f(a, b), np.matmul, a, b, "bf16_3x", 64)
        assert_model(jnp.matmul(a, b, precision="highest"), np.matmul, a, b, "exact", 64)  # explicit wins
    finally:
        podlet.config.update("jax_default_matmul_precision", None)
    assert np.asarray(f(a, b)).tobytes() == exact.tobytes()


def test_jnp_contractions_under_the_default():
    a, b, v = rand(6, 48, seed=56), rand(48, 5, seed=57), rand(48, seed=58)
    with podlet.default_matmul_precision("bfloat16"):
        assert_model(jnp.matmul(a, b), np.matmul, a, b, "bf16", 48)
        assert_model(jnp.einsum("ij,jk->ik", a, b), np.matmul, a, b, "bf16", 48)
        assert_model(jnp.tensordot(a, b, 1), np.matmul, a, b, "bf16", 48)
        assert_model(jnp.inner(a, b.T), np.matmul, a, b, "bf16", 48)
        assert_model(jnp.vdot(v, v), np.dot, v, v, "bf16", 48)


# ---- Flax-style layers ------------------------------------------------------------------
def test_flax_dense_and_conv_under_the_default():
    x = rand(4, 6, 6, 3, seed=60)

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.Conv(5, (3, 3), use_bias=False, name="conv")(x)
            return h, nn.Dense(7, use_bias=False, name="dense")(h.reshape(h.shape[0], -1))

    net = Net()
    v = net.init(podlet.random.PRNGKey(0), x)
    w_conv = np.asarray(v["params"]["conv"]["kernel"])
    w_dense = np.asarray(v["params"]["dense"]["kernel"])
    pad = ((1, 1), (1, 1))
    with podlet.default_matmul_precision("bfloat16"):
        h, y = net.apply(v, x)
        grads = podlet.grad(lambda p: net.apply({"params": p}, x)[1].sum())(v["params"])
    assert_model(h, lambda u, w: conv_np(u, w, (1, 1), pad), x, w_conv, "bf16", 27)
    flat = np.asarray(h).reshape(4, -1)
    assert_model(y, np.matmul, flat, w_dense, "bf16", flat.shape[1])
    # the Dense kernel's gradient: h^T 1, in bf16 passes too (1 is exact in bf16)
    assert_model(grads["dense"]["kernel"], lambda u, g: u.T @ g, flat, np.ones((4, 7), np.float32), "bf16", 4)
    h_exact, _ = net.apply(v, x)  # outside the context: exact again
    assert_model(h_exact, lambda u, w: conv_np(u, w, (1, 1), pad), x, w_conv, "exact", 27)


def test_flax_attention_form_follows_a_bf16_default():
    q = rand(2, 5, 2, 8, seed=61)
    exact = np.asarray(nn.dot_product_attention(q, q, q))
    with podlet.default_matmul_precision("bfloat16"):
        got = np.asarray(nn.dot_product_attention(q, q, q))
    qb = q.astype(BF16).astype(np.float32)
    logits = np.einsum("bqhd,bkhd->bhqk", qb.astype(np.float64), qb.astype(np.float64)) / np.sqrt(8)
    # the op-by-op form: q scaled first (Flax), then bf16 passes; a loose model, a clear difference
    assert np.abs(got - exact).max() > 1e-4
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    want = np.einsum("bhqk,bkhd->bqhd", probs, qb)
    np.testing.assert_allclose(got, want, atol=2e-2)


# ---- the sharded jit, pmap, ONNX ---------------------------------------------------------
def test_sharded_jit_keeps_the_algorithm():
    podlet.config.update("num_devices", 8)
    mesh = Mesh(np.array(podlet.devices()[:2]), ("data",))
    rep, data = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    x, w = rand(8, 6, 6, 3, seed=70), rand(3, 3, 3, 4, seed=71)

    def loss(w, x):
        return (conv_podlet(x, w, (1, 1), "SAME", "bfloat16") ** 2).sum()
    step = lambda w, x: (loss(w, x), podlet.grad(loss)(w, x))  # noqa: E731
    f = podlet.jit(step, in_shardings=(rep, data))
    assert not f.partition_report(w, x)["unsplit"]
    (l_split, g_split), (l_whole, g_whole) = f(w, x), podlet.jit(step)(w, x)
    np.testing.assert_allclose(np.asarray(g_split), np.asarray(g_whole), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(float(l_split), float(l_whole), rtol=1e-6)
    g_exact = podlet.grad(lambda w, x: (conv_podlet(x, w, (1, 1), "SAME", None) ** 2).sum())(w, x)
    assert np.abs(np.asarray(g_split) - np.asarray(g_exact)).max() > 1e-3


def test_pmap_keeps_the_algorithm():
    podlet.config.update("num_devices", 8)
    a, b = rand(8, 5, 40, seed=72), rand(40, 3, seed=73)
    got = podlet.pmap(lambda u: lax.dot(u, b, precision="bfloat16"))(a)
    assert_model(got, lambda u, v: u @ v, a, b, "bf16", 40)


@pytest.mark.parametrize("precision", ["bfloat16", "bfloat16_3x", "BF16_BF16_F32_X6"])
def test_onnx_export_keeps_the_algorithm(tmp_path, precision):
    x = rand(3, 6, 6, 2, seed=74)

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.Conv(4, (3, 3))(x)
            return nn.Dense(5)(x.reshape(x.shape[0], -1))

    net = Net()
    v = net.init(podlet.random.PRNGKey(1), x)
    path = tmp_path / "net.onnx"
    with podlet.default_matmul_precision(precision):
        want = np.asarray(net.apply(v, x))
        proto = export.to_onnx(net, v, jnp.asarray(x), path)
    assert any(n.op_type == "Cast" for n in proto.graph.node)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)
    # and far from the exact export (six passes are about exact f32)
    distance = {"bfloat16": 1e-3, "bfloat16_3x": 2e-6, "BF16_BF16_F32_X6": 0.0}[precision]
    assert np.abs(got - np.asarray(net.apply(v, x))).max() >= distance


# ---- bad names ---------------------------------------------------------------------------
def test_bad_names_raise_value_error_naming_the_value():
    a, b = rand(3, 4), rand(4, 2)
    with pytest.raises(ValueError, match="bfloat16_9x"):
        lax.dot(a, b, precision="bfloat16_9x")
    with pytest.raises(ValueError, match="'bf16'"):
        lax.conv_general_dilated(rand(1, 3, 3, 1), rand(1, 1, 1, 1), (1, 1), "SAME", dimension_numbers=NHWC,
                                 precision="bf16")
    with pytest.raises(ValueError, match="jax_default_matmul_precision must be one of .* got 'bfloat32'"):
        podlet.config.update("jax_default_matmul_precision", "bfloat32")
    with pytest.raises(ValueError, match="algorithm must be '', 'bf16', 'bf16_3x' or 'bf16_6x', got 'bf16_2x'"):
        bind("dot_general", jnp.asarray(a), jnp.asarray(b), lhs_contracting=[1], rhs_contracting=[0], lhs_batch=[],
             rhs_batch=[], algorithm="bf16_2x")
    with pytest.raises(ValueError, match="got 'fp8'"):
        bind("conv_general_dilated", jnp.asarray(rand(1, 3, 3, 1)), jnp.asarray(rand(1, 1, 1, 1)),
             window_strides=[1, 1], padding=[0, 0, 0, 0], algorithm="fp8")
