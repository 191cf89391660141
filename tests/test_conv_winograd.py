"""Winograd F(2x2, 3x3) convolutions (kernels/conv_winograd.h), forward, backward-data
and backward-filter, against the float64 convolution of the same bf16 operands. The
default for bf16 3x3 stride-1 layers at precision DEFAULT; precision HIGH / HIGHEST and
PODLET_CONV_WINOGRAD=0 keep the direct kernels (tested at the end).

Not bit-compared with the direct kernels: the transformed tiles (and filters, or output
gradients) are rounded to bf16 before the products, so each element may be off by a few
2^-9 of the sum of |terms| it is built from. Checked per element: |wino - exact| <=
2^-6 * that sum (plus one bf16 ulp for a bf16 output) - a wrong tap or transform row is
off by whole terms and fails it; and over the array: rms error <= 2^-7 of the rms output
(measured ~4e-3; the direct kernels' bf16 output rounding alone gives ~1.7e-3). For the
forward and backward-data the sum is sum|x w| over the taps; backward-filter's products
are between transformed tiles, so its sum is the Winograd computation itself on |x|,
|g| and the transforms' |entries| (wino_filter_abs). Each test asserts the Winograd
kernel ran (its call counter), so a fallback cannot pass for it.
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
from prim_check import as_podlet

BF16 = ml_dtypes.bfloat16
# The kernel exists on AVX512_BF16 hosts; elsewhere the same tests assert it never runs.
# On AMX hosts the convolutions take the tiles before Winograd, so the tests run there at
# avx512bf16, where Winograd is the bf16 path.
HAVE = "avx512bf16" in _core.cpu_info()["available_isas"]


@pytest.fixture(autouse=True)
def winograd_on():
    on, isa, n = podlet.config.conv_winograd, _core.active_isa(), podlet.config.num_threads
    podlet.config.update("conv_winograd", True)
    if isa == "amx":
        _core.set_isa("avx512bf16")
    yield
    podlet.config.update("conv_winograd", on)
    _core.set_isa(isa)
    podlet.config.update("num_threads", n)


def attrs(pad, **kw):
    return dict(window_strides=[1, 1], padding=list(pad), lhs_dilation=[1, 1], rhs_dilation=[1, 1],
                feature_group_count=1, **kw)


def out_hw(xs, pad):
    return xs[1] + pad[0] + pad[1] - 2, xs[2] + pad[2] + pad[3] - 2


# name -> (x NHWC, output channels, padding [lo_h, hi_h, lo_w, hi_w]).
CASES = {
    "resnet_3x3": ((2, 10, 10, 64), 64, (1, 1, 1, 1)),
    "odd_height_width": ((3, 7, 5, 32), 16, (1, 1, 1, 1)),  # half tiles on both edges
    "asymmetric_padding": ((1, 9, 6, 16), 80, (0, 2, 1, 0)),  # 80: a 64 panel and a 16 tail
    "negative_padding": ((1, 9, 9, 16), 32, (-1, 2, 1, -2)),
    "padding_2": ((2, 6, 7, 48), 48, (2, 2, 2, 2)),  # 48: a 3-vector panel
    "valid_1x1_output": ((2, 3, 3, 16), 16, (0, 0, 0, 0)),
    "two_panels_and_tail": ((1, 6, 6, 32), 144, (1, 1, 1, 1)),
    # 3 x 7 x 7 = 147 tiles: three tasks of 48 and one of 3 (a partial microkernel row group).
    "task_tail": ((3, 13, 13, 16), 32, (1, 1, 1, 1)),
    # backward-filter: 1600 tiles = two splits of 400 steps (tile pairs) in blocks of 58;
    # 272 input channels = two row blocks (256 + 16); 48 output channels = two 32-column
    # panels, the second half zeros.
    "two_splits": ((4, 40, 40, 16), 16, (1, 1, 1, 1)),
    "channels_past_256": ((1, 5, 5, 272), 48, (1, 1, 1, 1)),
    # backward-filter with odd outputs: 3200 tiles in the order [last column 600][full
    # 1800][last row 600][corner 200], four splits of 400 steps; position (3, 3) multiplies
    # steps [300, 1200) only, so the last split has none of its steps (a zero partial),
    # and a = 3 / b = 3 start or end mid-split.
    "odd_output_splits": ((200, 7, 7, 16), 16, (1, 1, 1, 1)),
}


def operands(name, seed=0):
    xs, o, pad = CASES[name]
    rng = np.random.default_rng(seed)
    ho, wo = out_hw(xs, pad)
    x = rng.standard_normal(xs).astype(BF16)
    w = (rng.standard_normal((3, 3, xs[3], o)) * 0.1).astype(BF16)
    g = rng.standard_normal((xs[0], ho, wo, o)).astype(BF16)
    return x, w, g, pad


def call(prim, args, a):
    return np.asarray(bind(prim, *[as_podlet(v) for v in args], **a)).copy()


def exact(prim, args, a, absolute=False):
    """The float64 result (or sum of |terms|) on the reference kernels."""
    isa = _core.active_isa()
    _core.set_isa("ref")
    try:
        f64 = [np.asarray(v).astype(np.float64) for v in args]
        if absolute:
            f64 = [np.abs(v) for v in f64]
        return call(prim, f64, {k: v for k, v in a.items() if k != "preferred_element_type"})
    finally:
        _core.set_isa(isa)


def counted(key, fn):
    before = _core.conv_winograd_stats()[key]
    out = fn()
    return out, _core.conv_winograd_stats()[key] - before


def directions(x, w, g, pad):
    return [("fwd", "conv_general_dilated", [x, w], attrs(pad)),
            ("bwd_data", "conv_bwd_data", [g, w], attrs(pad, lhs_shape=list(x.shape))),
            ("bwd_filter", "conv_bwd_filter", [x, g], attrs(pad, rhs_shape=list(w.shape)))]


def wino_filter_abs(x, g, pad):
    """|G^T| (sum over tiles of (|B^T| |x tile| |B|) * (|A| |g tile| |A^T|)) |G| in float64:
    what each backward-filter element's products add up to in absolute value."""
    x, g = np.abs(np.asarray(x, np.float64)), np.abs(np.asarray(g, np.float64))
    (_, h, w, _), (_, ho, wo, _) = x.shape, g.shape
    th, tw = -(-ho // 2), -(-wo // 2)

    def tiles(a, size, lo_h, lo_w, hh, ww):
        ih = 2 * np.arange(th)[:, None] - lo_h + np.arange(size)
        iw = 2 * np.arange(tw)[:, None] - lo_w + np.arange(size)
        t = a[:, np.clip(ih, 0, hh - 1)][:, :, :, np.clip(iw, 0, ww - 1)]
        inside = ((ih >= 0) & (ih < hh))[:, :, None, None] & ((iw >= 0) & (iw < ww))[None, None]
        return t * inside[None, ..., None]

    bt = np.array([[1, 0, 1, 0], [0, 1, 1, 0], [0, 1, 1, 0], [0, 1, 0, 1]], np.float64)
    a = np.array([[1, 0], [1, 1], [1, 1], [0, 1]], np.float64)
    gt = np.array([[1, .5, .5, 0], [0, .5, .5, 0], [0, .5, .5, 1]])
    u = np.einsum("ai,nxiyjc,bj->nxyabc", bt, tiles(x, 4, pad[0], pad[2], h, w), bt)
    m = np.einsum("ai,nxiyjo,bj->nxyabo", a, tiles(g, 2, 0, 0, ho, wo), a)
    return np.einsum("ia,abco,jb->ijco", gt, np.einsum("nxyabc,nxyabo->abco", u, m), gt)


def check_close(got, args, prim, a):
    ex = exact(prim, args, a)
    if prim == "conv_bwd_filter":
        bound = 2.0 ** -6 * wino_filter_abs(*args, a["padding"])
    else:
        bound = 2.0 ** -6 * exact(prim, args, a, absolute=True)
    g64 = got.astype(np.float64)
    if got.dtype == BF16:
        bound = bound + np.abs(ex) * 2.0 ** -8
    err = np.abs(g64 - ex)
    assert (err <= bound).all(), f"max excess {np.max(err - bound)}"
    assert np.sqrt(np.mean(err ** 2)) <= 2.0 ** -7 * np.sqrt(np.mean(ex ** 2))


@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("name", list(CASES))
def test_matches_exact_convolution(name, out_dtype):
    x, w, g, pad = operands(name)
    for key, prim, args, a in directions(x, w, g, pad):
        a = dict(a, preferred_element_type=out_dtype)
        got, runs = counted(key, lambda: call(prim, args, a))
        assert got.dtype == np.dtype(BF16 if out_dtype == "bfloat16" else np.float32)
        assert runs == (1 if HAVE else 0), key
        check_close(got, args, prim, a)


def test_error_is_a_few_times_the_direct_kernels():
    x, w, g, pad = operands("resnet_3x3", seed=3)
    for key, prim, args, a in directions(x, w, g, pad):
        ex = exact(prim, args, a)
        wino = call(prim, args, a).astype(np.float64)
        podlet.config.update("conv_winograd", False)
        direct = call(prim, args, a).astype(np.float64)
        podlet.config.update("conv_winograd", True)
        rms = lambda v: np.sqrt(np.mean(v ** 2))
        e_w, e_d = rms(wino - ex) / rms(ex), rms(direct - ex) / rms(ex)
        assert e_d < 2.5e-3, key
        if HAVE:
            assert 1.2 * e_d < e_w < 4 * e_d, (key, e_w, e_d)  # really a different algorithm
        else:
            assert e_w == e_d


@pytest.mark.parametrize("name", ["resnet_3x3", "task_tail", "two_panels_and_tail", "two_splits",
                                  "channels_past_256", "odd_output_splits"])
def test_bits_do_not_depend_on_threads(name):
    x, w, g, pad = operands(name, seed=1)
    for key, prim, args, a in directions(x, w, g, pad):
        # The forward / backward-data task split follows the thread count (3: a split
        # neither 1 nor 2 threads uses); the bits must not.
        podlet.config.update("num_threads", 1)
        one = call(prim, args, a)
        podlet.config.update("num_threads", 3)
        three = call(prim, args, a)
        podlet.config.update("num_threads", 2)
        two, runs = counted(key, lambda: call(prim, args, a))
        assert runs == (1 if HAVE else 0)
        assert one.tobytes() == two.tobytes() == three.tobytes() == call(prim, args, a).tobytes(), key


def test_off_gives_the_direct_kernels_bits():
    x, w, g, pad = operands("resnet_3x3", seed=2)
    for key, prim, args, a in directions(x, w, g, pad):
        podlet.config.update("conv_winograd", False)
        off, runs = counted(key, lambda: call(prim, args, a))
        assert runs == 0
        podlet.config.update("conv_winograd", True)
        on = call(prim, args, a)
        assert (off.tobytes() != on.tobytes()) == HAVE
        podlet.config.update("conv_winograd", False)
        assert call(prim, args, a).tobytes() == off.tobytes()


# Layers it does not cover keep the direct kernels (no Winograd call, same bits as off).
UNCOVERED = {
    "stride_2": ((2, 9, 9, 16), (3, 3, 16, 32), dict(window_strides=[2, 2], padding=[1, 1, 1, 1])),
    "kernel_5x5": ((1, 9, 9, 16), (5, 5, 16, 16), dict(padding=[2, 2, 2, 2])),
    "dilated": ((1, 9, 9, 16), (3, 3, 16, 16), dict(rhs_dilation=[2, 2], padding=[2, 2, 2, 2])),
    "groups_2": ((1, 8, 8, 32), (3, 3, 16, 32), dict(feature_group_count=2, padding=[1, 1, 1, 1])),
    "channels_not_16": ((1, 8, 8, 24), (3, 3, 24, 32), dict(padding=[1, 1, 1, 1])),
    "kernel_3x1": ((1, 8, 8, 16), (3, 1, 16, 16), dict(padding=[1, 1, 0, 0])),
}


@pytest.mark.parametrize("name", list(UNCOVERED))
def test_uncovered_layers_keep_the_direct_kernels(name):
    xs, ws, extra = UNCOVERED[name]
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal(xs).astype(BF16), rng.standard_normal(ws).astype(BF16)
    a = dict(attrs([0, 0, 0, 0]), **extra)
    on, runs = counted("fwd", lambda: call("conv_general_dilated", [x, w], a))
    assert runs == 0
    podlet.config.update("conv_winograd", False)
    assert call("conv_general_dilated", [x, w], a).tobytes() == on.tobytes()


def test_f32_operands_and_lower_isas_keep_the_direct_kernels():
    x, w, g, pad = operands("resnet_3x3")
    a = attrs(pad)
    _, runs = counted("fwd", lambda: call("conv_general_dilated", [x.astype(np.float32), w.astype(np.float32)], a))
    assert runs == 0
    for isa in ("avx512", "avx2", "ref"):
        if isa in _core.cpu_info()["available_isas"]:
            _core.set_isa(isa)
            _, runs = counted("fwd", lambda: call("conv_general_dilated", [x, w], a))
            assert runs == 0, isa


def test_training_gradients_through_winograd_layers():
    """value_and_grad of a two-layer bf16 conv net: every gradient close to the direct one."""
    import podlet.numpy as jnp
    from podlet import lax
    rng = np.random.default_rng(5)
    x = jnp.asarray(rng.standard_normal((4, 12, 12, 16)), dtype=jnp.bfloat16)
    params = {"w1": jnp.asarray(rng.standard_normal((3, 3, 16, 32)) * 0.1, dtype=jnp.float32),
              "w2": jnp.asarray(rng.standard_normal((3, 3, 32, 32)) * 0.1, dtype=jnp.float32)}

    def loss(p, x):
        conv = lambda v, w: lax.conv_general_dilated(v, w.astype(jnp.bfloat16), (1, 1), "SAME",
                                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
        h = jnp.maximum(conv(x, p["w1"]), 0)
        return jnp.mean(conv(h, p["w2"]).astype(jnp.float32) ** 2)

    def run():
        v, gr = podlet.value_and_grad(loss)(params, x)
        return float(v), {k: np.asarray(a) for k, a in gr.items()}

    before = _core.conv_winograd_stats()
    v_on, g_on = run()
    runs = {k: _core.conv_winograd_stats()[k] - before[k] for k in ("fwd", "bwd_data", "bwd_filter")}
    # the first layer's input needs no gradient
    assert runs == ({"fwd": 2, "bwd_data": 1, "bwd_filter": 2} if HAVE else dict.fromkeys(runs, 0))
    podlet.config.update("conv_winograd", False)
    v_off, g_off = run()
    assert abs(v_on - v_off) <= 2e-2 * abs(v_off)
    for k in g_off:
        assert np.linalg.norm(g_on[k] - g_off[k]) <= 2e-2 * np.linalg.norm(g_off[k]), k


def test_config_and_environment_switch():
    assert podlet.config.conv_winograd is True and _core.conv_winograd_stats()["enabled"]
    assert podlet.cpu_info()["conv_winograd"] is True
    podlet.config.update("conv_winograd", False)
    assert podlet.config.conv_winograd is False and not podlet.cpu_info()["conv_winograd"]
    code = "import podlet; print(podlet.config.conv_winograd, podlet.cpu_info()['conv_winograd'])"
    env = {k: v for k, v in os.environ.items() if k != "PODLET_CONV_WINOGRAD"}
    # On by default (unset or empty); 0 / false / off turn it off.
    for value, want in ((None, "True True"), ("", "True True"), ("1", "True True"), ("0", "False False"),
                        ("false", "False False"), ("OFF", "False False")):
        if value is not None:
            env["PODLET_CONV_WINOGRAD"] = value
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.split() == want.split(), value


@pytest.mark.parametrize("precision", ["high", "highest"])
def test_precision_above_default_keeps_the_direct_kernels(precision):
    """lax.Precision HIGH / HIGHEST on a primitive: the direct kernels' bits, no Winograd
    call; DEFAULT (or no attr) takes Winograd."""
    x, w, g, pad = operands("resnet_3x3", seed=6)
    for key, prim, args, a in directions(x, w, g, pad):
        podlet.config.update("conv_winograd", False)
        direct = call(prim, args, a)
        podlet.config.update("conv_winograd", True)
        got, runs = counted(key, lambda: call(prim, args, dict(a, precision=precision)))
        assert runs == 0 and got.tobytes() == direct.tobytes(), key
        _, runs = counted(key, lambda: call(prim, args, dict(a, precision="default")))
        assert runs == (1 if HAVE else 0), key


def _grad_runs(precision, via_flax=False):
    """Winograd calls of one value_and_grad through a 3x3 bf16 conv at `precision`."""
    import podlet.numpy as jnp
    from podlet import lax, nn
    rng = np.random.default_rng(7)
    x = jnp.asarray(rng.standard_normal((2, 8, 8, 16)), dtype=jnp.bfloat16)
    if via_flax:
        model = nn.Conv(32, (3, 3), padding="SAME", use_bias=False, dtype=jnp.bfloat16, precision=precision)
        params = model.init(podlet.random.PRNGKey(0), x)
        f = lambda p, x: jnp.sum(model.apply(p, x).astype(jnp.float32) ** 2)
    else:
        params = jnp.asarray(rng.standard_normal((3, 3, 16, 32)) * 0.1, dtype=jnp.bfloat16)
        f = lambda w, x: jnp.sum(lax.conv_general_dilated(x, w, (1, 1), "SAME", precision=precision,
                                                          dimension_numbers=("NHWC", "HWIO", "NHWC"))
                                 .astype(jnp.float32) ** 2)
    before = _core.conv_winograd_stats()
    # argnums (0, 1): backward-data runs too
    podlet.jit(podlet.grad(f, argnums=(0, 1)))(params, x)
    return tuple(_core.conv_winograd_stats()[k] - before[k] for k in ("fwd", "bwd_data", "bwd_filter"))


@pytest.mark.parametrize("via_flax", [False, True], ids=["lax", "nn.Conv"])
def test_precision_carries_to_the_gradient_convolutions(via_flax):
    from podlet import lax
    on = (1, 1, 1) if HAVE else (0, 0, 0)
    assert _grad_runs(None, via_flax) == on
    assert _grad_runs(lax.Precision.DEFAULT, via_flax) == on
    assert _grad_runs("bfloat16", via_flax) == on
    for p in (lax.Precision.HIGHEST, "highest", "float32", lax.Precision.HIGH, "tensorfloat32",
              ("default", "highest"), (lax.Precision.HIGH, lax.Precision.DEFAULT)):
        assert _grad_runs(p, via_flax) == (0, 0, 0), p


def test_precision_values_are_checked():
    from podlet import lax
    assert lax.Precision("float32") is lax.Precision.HIGHEST and lax.Precision("high") is lax.Precision.HIGH
    assert lax.canonicalize_precision(None) is None
    assert lax.canonicalize_precision("bfloat16") == (lax.Precision.DEFAULT,) * 2
    assert lax.canonicalize_precision(("highest", lax.Precision.HIGH)) == (lax.Precision.HIGHEST, lax.Precision.HIGH)
    import jax
    assert lax.canonicalize_precision(jax.lax.Precision.HIGHEST) == (lax.Precision.HIGHEST,) * 2
    x, w, _, _ = operands("resnet_3x3")
    for bad in ("fast", 3, ("default",), ("default", "high", "highest")):
        with pytest.raises(ValueError, match="precision must be"):
            lax.conv_general_dilated(as_podlet(x), as_podlet(w), (1, 1), "SAME", precision=bad,
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
    with pytest.raises(ValueError, match="precision must be"):
        lax.dot(as_podlet(np.ones((2, 2), np.float32)), as_podlet(np.ones((2, 2), np.float32)), precision="exact")
    # The primitive's own attr (for graphs built without lax) names the value too.
    with pytest.raises(podlet.PodletError, match="'fastest'"):
        call("conv_general_dilated", [x, w], attrs([1, 1, 1, 1], precision="fastest"))
