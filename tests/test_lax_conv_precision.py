"""lax.conv_general_dilated beyond the 2-D primitive (issue 26): batch_group_count, 0-, 1-
and 3-D convolutions, dimension numbers in any order, JAX's checks; and the precision
API (lax.Precision, DotAlgorithm, DotAlgorithmPreset, AccuracyMode, Tolerance,
default_matmul_precision) in dot_general, dot, the jnp contractions and the
convolutions, each against jax 0.10.2 on the same inputs; plus lax tokens."""
import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax import lax as jlax
from jax._src.lax.lax import canonicalize_precision as _jax_canonicalize_precision

import podlet
import podlet.numpy as pnp
from podlet import lax

rng = np.random.default_rng(0)


def r(*shape):
    return rng.standard_normal(shape).astype(np.float32)


NHWC = ("NHWC", "HWIO", "NHWC")
CONV_CASES = {
    "batch_groups_nhwc": ((4, 6, 5, 3), (3, 2, 3, 6), dict(window_strides=(1, 2), padding=[(1, 0), (2, 1)],
                                                        rhs_dilation=(1, 2), dimension_numbers=NHWC,
                                                        batch_group_count=2)),
    "batch_groups_nchw_same": ((6, 4, 5, 5), (6, 4, 3, 3), dict(window_strides=(1, 1), padding="SAME",
                                                               batch_group_count=3)),
    "batch_groups_lhs_dilation": ((4, 3, 7, 6), (4, 3, 2, 2), dict(window_strides=(2, 1), padding=[(1, 1), (0, 1)],
                                                                  lhs_dilation=(2, 1), batch_group_count=4)),
    "conv1d_nwc": ((2, 9, 3), (3, 3, 4), dict(window_strides=(2,), padding="SAME",
                                             dimension_numbers=("NWC", "WIO", "NWC"))),
    "conv1d_batch_groups": ((4, 3, 9), (4, 3, 3), dict(window_strides=(1,), padding="VALID", batch_group_count=2)),
    "conv3d_groups_dilations": ((2, 5, 4, 6, 4), (3, 2, 2, 2, 6),
                                dict(window_strides=(2, 1, 1), padding=[(1, 2), (1, 1), (0, 0)],
                                     lhs_dilation=(2, 1, 1), rhs_dilation=(1, 1, 2),
                                     dimension_numbers=("NDHWC", "DHWIO", "NDHWC"), feature_group_count=2)),
    "conv3d_batch_groups": ((4, 3, 4, 4, 4), (4, 3, 2, 3, 2), dict(window_strides=(1, 1, 1), padding="SAME",
                                                                 batch_group_count=2)),
    "conv3d_no_window": ((1, 2, 2, 2, 2), (3, 1, 1, 2, 2), dict(window_strides=(1, 1, 1), padding="VALID",
                                                               dimension_numbers=("NDHWC", "DHWIO", "NDHWC"))),
    "rhs_spatial_order": ((2, 6, 7, 3), (3, 2, 3, 4), dict(window_strides=(1, 2), padding="VALID",
                                                          dimension_numbers=("NHWC", "WHIO", "NCHW"))),
    "no_spatial_dims": ((2, 3), (4, 3), dict(window_strides=(), padding=[])),
}
GRAD_CASES = ["batch_groups_nhwc", "batch_groups_nchw_same", "conv1d_batch_groups", "conv3d_groups_dilations",
              "conv3d_batch_groups", "rhs_spatial_order"]
OPERANDS = {k: (r(*ls), r(*rs)) for k, (ls, rs, _) in CONV_CASES.items()}


def _conv(L, name):
    kwargs = CONV_CASES[name][2]
    return lambda x, w: L.conv_general_dilated(x, w, **kwargs)


@pytest.mark.parametrize("name", list(CONV_CASES))
def test_conv_general_dilated_matches_jax(name):
    x, w = OPERANDS[name]
    want = np.asarray(_conv(jlax, name)(x, w))
    for got in (_conv(lax, name)(x, w), podlet.jit(_conv(lax, name))(x, w)):
        got = np.asarray(got)
        assert got.shape == want.shape and got.dtype == want.dtype, name
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(want).max(initial=0)))


@pytest.mark.parametrize("name", GRAD_CASES)
def test_conv_general_dilated_gradients_match_jax(name):
    x, w = OPERANDS[name]
    ct = r(*np.shape(_conv(jlax, name)(x, w)))

    def loss(L, S):
        return lambda x, w: S.sum(_conv(L, name)(x, w) * ct)
    want = jax.grad(loss(jlax, jnp), (0, 1))(x, w)
    got = podlet.grad(loss(lax, pnp), (0, 1))(x, w)
    for g, j in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(j), rtol=1e-4, atol=1e-4 * np.abs(np.asarray(j)).max())


def test_batch_group_count_is_the_kernel_gradient_of_a_grouped_conv():
    """What batch_group_count is for: jax's kernel gradient of a grouped convolution is a
    convolution with batch_group_count = the group count; podlet's gives the same."""
    x, w = r(3, 5, 5, 4), r(3, 3, 2, 6)
    ct = r(3, 5, 5, 6)
    f = lambda w: jnp.sum(jlax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=NHWC,  # noqa: E731
                                                    feature_group_count=2) * ct)
    want = jax.grad(f)(w)
    # the same gradient written as a batch-grouped convolution: features of x become the
    # batch (2 groups of 2), the cotangent's batch becomes the features
    lhs = np.transpose(x, (3, 1, 2, 0))            # (C=4, H, W, N): batch groups of the input features
    rhs = np.transpose(ct, (1, 2, 0, 3))           # (H, W, N, O=6): kernel in HWIO, I = N
    got = lax.conv_general_dilated(lhs, rhs, (1, 1), [(1, 1), (1, 1)], dimension_numbers=NHWC,
                                   batch_group_count=2)  # (2, 3, 3, 6): (I, kh, kw, O)
    np.testing.assert_allclose(np.transpose(np.asarray(got), (1, 2, 0, 3)), np.asarray(want), rtol=1e-4,
                               atol=1e-4)


BAD_CONVS = [  # (lhs shape, rhs shape, kwargs): JAX's checks
    ((4, 5, 5, 3), (3, 3, 3, 4), dict(batch_group_count=3)),                           # batch not divisible
    ((4, 5, 5, 3), (3, 3, 3, 3), dict(batch_group_count=2)),                           # out features not divisible
    ((4, 5, 5, 4), (3, 3, 2, 4), dict(batch_group_count=2, feature_group_count=2)),    # both > 1
    ((4, 5, 5, 3), (3, 3, 3, 4), dict(batch_group_count=0)),
    ((4, 5, 5, 3), (3, 3, 3, 4), dict(feature_group_count=2)),                         # groups don't divide C
    ((4, 5, 5, 4), (3, 3, 4, 4), dict(feature_group_count=2)),                         # rhs I != C / groups
    ((4, 5, 5, 4), (3, 3, 2, 3), dict(feature_group_count=2)),                         # O not divisible
    ((4, 5, 5, 3), (3, 3, 3, 4), dict(feature_group_count=0)),
]


@pytest.mark.parametrize("ls, rs, kwargs", BAD_CONVS)
def test_conv_errors_match_jax(ls, rs, kwargs):
    x, w = np.ones(ls, np.float32), np.ones(rs, np.float32)
    with pytest.raises(ValueError) as je:
        jlax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=NHWC, **kwargs)
    with pytest.raises(ValueError) as pe:
        lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=NHWC, **kwargs)
    assert str(pe.value) == str(je.value)
    assert isinstance(pe.value, podlet.ShapeError)


def test_conv_argument_checks():
    x, w = np.ones((2, 5, 5, 3), np.float32), np.ones((3, 3, 3, 4), np.float32)
    conv = lambda L, *a, **k: L.conv_general_dilated(x, w, *a, dimension_numbers=NHWC, **k)  # noqa: E731
    for L in (jlax, lax):  # same exception types as jax
        with pytest.raises(ValueError, match="String padding is not implemented for transposed convolution"):
            conv(L, (1, 1), "SAME", lhs_dilation=(2, 1))
        with pytest.raises(ValueError, match="padding argument to conv_general_dilated should be"):
            conv(L, (1, 1), [(1, "a"), (0, 0)])
        with pytest.raises(TypeError, match="Wrong number of explicit pads"):
            conv(L, (1, 1), [(1, 1)])
        with pytest.raises(TypeError, match="convolution requires lhs and rhs ndim to be equal, got 4 and 3"):
            L.conv_general_dilated(x, w[0], (1, 1), "SAME", dimension_numbers=NHWC)
        dn = L.ConvDimensionNumbers((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2))
        with pytest.raises(ValueError, match="lhs and rhs must have the same number of dimensions"):
            L.conv_general_dilated(x, w[0], (1, 1), [(1, 1), (1, 1)], dimension_numbers=dn)
        with pytest.raises(TypeError, match="must have len equal to the ndim"):
            L.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWO", "NHWC"))
        with pytest.raises(TypeError, match="requires arguments to have the same dtypes, got float32, bfloat16"):
            L.conv_general_dilated(x, w.astype(jnp.bfloat16), (1, 1), "SAME", dimension_numbers=NHWC)
        with pytest.raises(TypeError, match="`preferred_element_type` must not be narrower than the original type"):
            conv(L, (1, 1), "SAME", preferred_element_type=jnp.bfloat16)
        with pytest.raises(TypeError, match="Input type is incompatible with `preferred_element_type`"):
            conv(L, (1, 1), "SAME", preferred_element_type=np.int32)
    got = lax.conv_general_dilated(x.astype(jnp.bfloat16), w.astype(jnp.bfloat16), (1, 1), "SAME",
                                   dimension_numbers=NHWC, preferred_element_type=np.float32)
    assert got.dtype == np.float32
    with pytest.raises(ValueError, match=r"window and window_strides must have the same number of dimensions"):
        conv(lax, (1,), "SAME")
    with pytest.raises(ValueError, match=r"rhs_dilation must be positive integers, got \(0, 1\)"):
        conv(lax, (1, 1), "SAME", rhs_dilation=(0, 1))


def test_conv_wrappers_take_nd_inputs():
    x, w = r(2, 3, 9), r(4, 3, 3)  # 1-D, NCW / OIW
    for got, want in ((lax.conv(x, w, (2,), "SAME"), jlax.conv(x, w, (2,), "SAME")),
                      (lax.conv_with_general_padding(x, w, (1,), [(2, 1)], (2,), (1,)),
                       jlax.conv_with_general_padding(x, w, (1,), [(2, 1)], (2,), (1,)))):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
    # conv_transpose with jax's default layouts for 1-D and 3-D inputs
    for xs, ws, strides, pad in (((2, 7, 3), (3, 3, 4), (2,), "SAME"), ((1, 4, 5, 3, 2), (2, 3, 2, 2, 3), (2, 1, 2),
                                                                          "VALID")):
        x, w = r(*xs), r(*ws)
        np.testing.assert_allclose(np.asarray(lax.conv_transpose(x, w, strides, pad)),
                                   np.asarray(jlax.conv_transpose(x, w, strides, pad)), rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ precision
PRESETS = list(jlax.DotAlgorithmPreset)


def _outcome(fn):
    try:
        return "ok", np.asarray(fn())
    except ValueError as e:
        return "error", str(e)


# The presets podlet runs as a TPU's bf16 algorithms on f32 operands (jax's CPU keeps them
# exact there): (number of bf16 parts per operand, the small products in XLA's order).
TPU_PRESETS = {"BF16_BF16_F32": (1, []), "BF16_BF16_F32_X3": (2, [(1, 0), (0, 1)]),
               "BF16_BF16_F32_X6": (3, [(1, 1), (0, 2), (2, 0), (0, 1), (1, 0)])}


# The presets whose f32 result is an f32 sum of exact products, as podlet's default f32 dot.
EXACT_F32_PRESETS = ("DEFAULT", "F32_F32_F32")


def _bf16_parts(x, n):
    parts, rest = [], np.asarray(x, np.float32)
    for _ in range(n):
        h = rest.astype(jnp.bfloat16).astype(np.float32)
        parts.append(h)
        rest = rest - h
    return parts


def _tpu_dot_with_jax(a, b, preset):
    """The bf16 algorithm of `preset` built from jax's (exact f32) dots of the bf16 parts."""
    n, small = TPU_PRESETS[preset]
    pa, pb = _bf16_parts(a, n), _bf16_parts(b, n)
    dot = lambda i, j: np.asarray(jlax.dot(pa[i], pb[j]))  # noqa: E731
    if not small:
        return dot(0, 0)
    acc = dot(*small[0])
    for ij in small[1:]:
        acc = acc + dot(*ij)
    return np.where(np.isnan(acc), np.float32(0), acc) + dot(0, 0)


@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16])
@pytest.mark.parametrize("preset", PRESETS, ids=[p.name for p in PRESETS])
def test_dot_presets_match_jax_on_cpu(preset, dtype):
    """Presets jax's CPU runs give the same bits (F16_F16_F16 rounds operands and result to
    float16 values, F64_F64_F64 sums in float64, the others keep f32 / bf16 exact), except
    the bf16 presets on f32 operands, which run a TPU's algorithm (the same bits as that
    algorithm built from jax's dots of the bf16 parts); the ones it refuses raise its
    ValueError. By preset and by name."""
    a, b = r(8, 16).astype(dtype), r(16, 5).astype(dtype)
    kind, want = _outcome(lambda: jlax.dot(a, b, precision=preset))
    if preset.name in TPU_PRESETS and dtype == np.float32:
        assert not np.array_equal(_tpu_dot_with_jax(a, b, preset.name), want)
        want = _tpu_dot_with_jax(a, b, preset.name)
    for p in (getattr(lax.DotAlgorithmPreset, preset.name), preset.name, preset):
        got_kind, got = _outcome(lambda: lax.dot(a, b, precision=p))
        assert got_kind == kind, (preset, p)
        if kind == "ok":
            assert got.dtype == want.dtype
            if preset.name in TPU_PRESETS:  # bf16 passes: the bf16 kernel's sum order (AVX512_BF16, AMX) may differ
                np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
            elif preset.name in EXACT_F32_PRESETS and dtype == np.float32:
                # f32 sums of exact products: podlet's exact f32 dot, bit for bit; jax's sum
                # order depends on the host's ISA (it matches podlet's on AVX2, not on AVX-512)
                assert got.tobytes() == np.asarray(lax.dot(a, b)).tobytes()
                np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
            else:
                np.testing.assert_array_equal(got, want)
        else:
            assert got.startswith(want)


@pytest.mark.parametrize("preset", ["F16_F16_F16", "F64_F64_F64", "F32_F32_F32"])
def test_dot_preset_gradients_and_vmap_match_jax(preset):
    a, b = r(4, 8), r(8, 3)
    loss = lambda L: lambda a, b: (L.dot(a, b, precision=preset) ** 2).sum()  # noqa: E731
    want = jax.grad(loss(jlax), (0, 1))(a, b)
    got = podlet.grad(loss(lax), (0, 1))(a, b)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-6, atol=2e-5)
    a3 = a.reshape(2, 2, 8)
    got = np.asarray(podlet.vmap(lambda x: lax.dot(x, b, precision=preset))(a3))
    want = np.asarray(jax.vmap(lambda x: jlax.dot(x, b, precision=preset))(a3))
    if preset == "F32_F32_F32":  # exact f32 products; the f32 sums may round in another order
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    else:  # rounded to float16 values / computed in float64: the same bits
        np.testing.assert_array_equal(got, want)


def test_dot_algorithm_and_precision_values():
    a, b = r(4, 8), r(8, 3)
    want = np.asarray(jlax.dot(a, b))
    for p in (None, "default", "fastest", "bfloat16", "high", "bfloat16_3x", "tensorfloat32", "highest", "float32",
              lax.Precision.HIGH, ("highest", "default"), (lax.Precision.HIGH, lax.Precision.DEFAULT),
              jlax.Precision.HIGHEST, lax.Precision("bfloat16"), ("bfloat16", "highest")):
        got = np.asarray(lax.dot(a, b, precision=p))
        if p in ("bfloat16", "bfloat16_3x"):  # a TPU's algorithms (tests/test_precision_tpu.py)
            assert np.abs(got - want).max() > 1e-5, p
        else:
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        as_jax = lambda q: jlax.Precision[q.name] if isinstance(q, lax.Precision) else q  # noqa: E731
        jp = tuple(map(as_jax, p)) if isinstance(p, tuple) else as_jax(p)
        assert lax.canonicalize_precision(p) == (None if p is None else tuple(
            lax.Precision[q.name] for q in _jax_canonicalize_precision(jp)))
    alg = lax.DotAlgorithm(jnp.bfloat16, jnp.bfloat16, np.float32)
    assert lax.canonicalize_precision(alg) == alg
    with pytest.raises(ValueError, match="is not supported by dot_general on CPU"):
        jlax.dot(a, b, precision=jlax.DotAlgorithm(jnp.bfloat16, jnp.bfloat16, np.float32))
    with pytest.raises(ValueError, match="is not supported by dot_general on CPU"):
        lax.dot(a, b, precision=alg)
    with pytest.raises(ValueError, match="lhs_component_count must be >= 1"):
        lax.dot(a, b, precision=lax.DotAlgorithm(np.float32, np.float32, np.float32, lhs_component_count=0))
    for bad in ("exact", 3, ("default",), ("default", "high", "highest"), ("F32_F32_F32", "highest")):
        with pytest.raises(ValueError, match=f"precision must be .* got {bad!r}".replace("(", r"\(").replace(
                ")", r"\)")):
            lax.dot(a, b, precision=bad)
    assert str(lax.DotAlgorithmPreset.BF16_BF16_F32) == "BF16_BF16_F32"
    assert repr(lax.DotAlgorithmPreset.F32_F32_F32) == repr(jlax.DotAlgorithmPreset.F32_F32_F32)
    for p in PRESETS:
        q = getattr(lax.DotAlgorithmPreset, p.name)
        assert q.accumulation_type == p.accumulation_type
        assert q.supported_lhs_types == p.supported_lhs_types


def test_precision_in_jnp_contractions():
    a, b, v = r(3, 8), r(8, 5), r(8)
    calls = {"matmul": lambda m, p: m.matmul(a, b, precision=p), "dot": lambda m, p: m.dot(a, b, precision=p),
             "einsum": lambda m, p: m.einsum("ij,jk->ik", a, b, precision=p),
             "einsum3": lambda m, p: m.einsum("ij,jk,k->i", a, b, b[0], precision=p),
             "inner": lambda m, p: m.inner(a, b.T, precision=p),
             "tensordot": lambda m, p: m.tensordot(a, b, 1, precision=p),
             "vecdot": lambda m, p: m.vecdot(a, a, precision=p),
             "vdot": lambda m, p: m.vdot(v, v, precision=p),
             "linalg.matmul": lambda m, p: m.linalg.matmul(a, b, precision=p)}
    for name, f in calls.items():
        for p in ("F16_F16_F16", "highest", "F32_F32_F32"):
            if name == "vdot" and p == "F16_F16_F16":
                continue  # jax's CPU fails to compile a 1-D dot with this algorithm
            want, got = np.asarray(f(jnp, p)), np.asarray(f(pnp, p))
            assert got.dtype == want.dtype
            if p == "F16_F16_F16":
                np.testing.assert_array_equal(got, want, err_msg=name)
            else:
                np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6, err_msg=name)
        with pytest.raises(ValueError, match="'TF32_TF32_F32' is not supported"):
            f(pnp, "TF32_TF32_F32")


def test_convolutions_ignore_algorithms_like_jax():
    """All but the bf16 ones ('bfloat16', 'bfloat16_3x', BF16_BF16_F32(_X3/_X6): a TPU's
    algorithms, tests/test_precision_tpu.py)."""
    x, w = r(2, 6, 6, 3), r(3, 3, 3, 4)
    want = np.asarray(jlax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=NHWC))
    for p in ("F16_F16_F16", lax.DotAlgorithmPreset.TF32_TF32_F32, "high", ("highest", "default"),
              ("bfloat16", "float32"), lax.DotAlgorithm(np.float32, np.float32, np.float32)):
        got = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=NHWC, precision=p)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_default_matmul_precision_context_and_config():
    a, b = r(6, 16), r(16, 4)
    with jax.default_matmul_precision("F16_F16_F16"):
        want16 = np.asarray(jlax.dot(a, b))
    exact = np.asarray(lax.dot(a, b))
    assert not np.array_equal(want16, exact)
    f = podlet.jit(lambda a, b: lax.dot(a, b))
    assert podlet.config.default_matmul_precision is None
    with podlet.default_matmul_precision("F16_F16_F16"):
        assert podlet.config.jax_default_matmul_precision == "F16_F16_F16"
        np.testing.assert_array_equal(np.asarray(lax.dot(a, b)), want16)
        np.testing.assert_array_equal(np.asarray(f(a, b)), want16)      # jit retraces under the new value
        np.testing.assert_array_equal(np.asarray(lax.dot(a, b, precision="highest")), exact)  # explicit wins
    np.testing.assert_array_equal(np.asarray(f(a, b)), exact)
    podlet.config.update("jax_default_matmul_precision", "TF32_TF32_F32")
    try:
        with pytest.raises(ValueError, match="'TF32_TF32_F32' is not supported"):
            pnp.matmul(a, b)
    finally:
        podlet.config.update("jax_default_matmul_precision", None)
    with pytest.raises(ValueError, match="jax_default_matmul_precision must be one of"):
        podlet.config.update("jax_default_matmul_precision", "exact")
    assert podlet.config.default_matmul_precision is None


def test_accuracy_mode_and_tolerance():
    x = np.linspace(0.1, 2, 7).astype(np.float32)
    for name in ("exp", "log", "tanh", "sqrt", "cbrt", "tan", "exp2", "logistic"):
        for acc in (None, lax.AccuracyMode.HIGHEST, lax.Tolerance(atol=1e-5, ulps=2), jlax.AccuracyMode.DEFAULT):
            np.testing.assert_allclose(np.asarray(getattr(lax, name)(x, accuracy=acc)),
                                       np.asarray(getattr(jlax, name)(x)), rtol=2e-6, err_msg=name)
    with pytest.raises(ValueError, match="accuracy must be None, a lax.AccuracyMode or a lax.Tolerance, got 3"):
        lax.exp(x, accuracy=3)
    for bad in (dict(), dict(atol=-1.0)):
        with pytest.raises(ValueError) as pe:
            lax.Tolerance(**bad)
        with pytest.raises(ValueError) as je:
            jlax.Tolerance(**bad)
        assert str(pe.value).startswith(str(je.value).rstrip("."))
    assert [m.name for m in lax.AccuracyMode] == [m.name for m in jlax.AccuracyMode]


# ------------------------------------------------------------------ tokens
def test_tokens():
    t = lax.create_token()
    assert lax.after_all(t, lax.create_token(3.0)) == t and lax.after_all() == t
    f = podlet.jit(lambda x, tok: (x + 1, lax.after_all(tok, lax.create_token(x))))
    y, t2 = f(np.ones(2, np.float32), t)
    assert isinstance(t2, type(t)) and float(y[0]) == 2.0
    ys, ts = podlet.vmap(lambda x, tok: (x * 2, lax.after_all(tok)), in_axes=(0, None))(np.ones(3, np.float32), t)
    assert isinstance(ts, type(t)) and ys.shape == (3,)
    with pytest.raises(TypeError, match="Arguments to after_all must be tokens; operand 1 is a float"):
        lax.after_all(t, 1.0)
