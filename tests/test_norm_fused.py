"""The fused row primitives (cpp/podlet/prims/norm.cc, kernels/norm_impl.h): layer_norm
(Flax's LayerNorm and RMSNorm), softmax and log_softmax, forward and backward, against
flax.linen / jax.nn (values, gradients, grad of grad), float64 finite differences, and
themselves: eager == jit, vmap == a loop, the same bits for any thread count and on every
ISA build; the fusion switch; ViT and Swin forwards fused vs unfused."""
import re

import jax
import jax.numpy as jjnp
import ml_dtypes
import numpy as np
import pytest

import flax.linen as fnn

import podlet
import podlet.numpy as jnp
from podlet import _core, models, nn
from podlet._src.core import bind

BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.dtype(np.float32)
FAST_ISAS = [i for i in _core.cpu_info()["available_isas"] if i in ("avx2", "avx512", "avx512bf16")]


@pytest.fixture(autouse=True)
def restore_state():
    isa, n, fused = _core.active_isa(), podlet.config.num_threads, podlet.config.fused_norms
    yield
    _core.set_isa(isa)
    podlet.config.update("num_threads", n)
    podlet.config.update("fused_norms", fused)


def _x(shape, seed=0, dtype=np.float32, loc=1.0, scl=3.0):
    rs = np.random.RandomState(seed)
    return (rs.normal(size=shape) * scl + loc).astype(np.float32).astype(dtype)


def _randomised(v, seed=1):
    """Flax variables with random (non-trivial) scale / bias of their dtype."""
    rs = np.random.RandomState(seed)
    return jax.tree_util.tree_map(lambda a: jjnp.asarray(rs.normal(size=a.shape).astype(np.float32) + 1, a.dtype), v)


def _to_podlet(v):
    return jax.tree_util.tree_map(lambda a: jnp.asarray(np.asarray(a)), v)


def _jaxpr(f, *args):
    return str(podlet.make_jaxpr(f)(*args))


def _has(jaxpr, prim):
    """Whether a node of primitive `prim` is in the printed graph."""
    return re.search(rf"= {prim}(\[| )", jaxpr) is not None


def _close(got, want, dtype):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if np.dtype(dtype) == BF16:  # one rounding to bf16 apart, at most
        np.testing.assert_allclose(got, want, rtol=2 ** -7, atol=1e-6)
    else:
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


# (module name, kwargs): LayerNorm / RMSNorm with and without scale and bias, epsilons,
# output / param dtypes, two trailing axes.
LAYERS = {
    "ln": ("LayerNorm", {}),
    "ln_eps": ("LayerNorm", {"epsilon": 1e-2}),
    "ln_noscale": ("LayerNorm", {"use_scale": False}),
    "ln_nobias": ("LayerNorm", {"use_bias": False}),
    "ln_bare": ("LayerNorm", {"use_scale": False, "use_bias": False}),
    "ln_out_bf16": ("LayerNorm", {"dtype": BF16}),
    "ln_param_bf16": ("LayerNorm", {"param_dtype": BF16}),
    "ln_two_axes": ("LayerNorm", {"reduction_axes": (-2, -1), "feature_axes": (-2, -1)}),
    "rms": ("RMSNorm", {}),
    "rms_noscale": ("RMSNorm", {"use_scale": False}),
    "rms_out_bf16": ("RMSNorm", {"dtype": BF16, "epsilon": 1e-5}),
}
SHAPES = {"vit": (2, 5, 384), "odd": (3, 7, 100), "tiny": (4, 13), "one": (6, 1), "wide4": (2, 3, 4, 21)}


@pytest.mark.parametrize("dtype", [F32, BF16], ids=["f32", "bf16"])
@pytest.mark.parametrize("shape", SHAPES, ids=list(SHAPES))
@pytest.mark.parametrize("layer", LAYERS, ids=list(LAYERS))
def test_layers_match_flax(layer, shape, dtype):
    name, kw = LAYERS[layer]
    x = _x(SHAPES[shape], dtype=dtype)
    fm, pm = getattr(fnn, name)(**kw), getattr(nn, name)(**kw)
    v = _randomised(fm.init(jax.random.PRNGKey(0), jjnp.asarray(x)))
    want = fm.apply(v, jjnp.asarray(x))
    pv = _to_podlet(v)
    got = pm.apply(pv, jnp.asarray(x))
    assert np.dtype(got.dtype) == np.dtype(want.dtype)
    _close(got, want, want.dtype)
    assert _has(_jaxpr(lambda p, x: pm.apply(p, x), pv, jnp.asarray(x)), "layer_norm")
    # the variables podlet creates are Flax's
    pinit = pm.init(podlet.random.PRNGKey(0), jnp.asarray(x))
    assert jax.tree_util.tree_structure(pinit) == jax.tree_util.tree_structure(v)
    for a, b in zip(jax.tree_util.tree_leaves(pinit), jax.tree_util.tree_leaves(v)):
        assert a.shape == b.shape and np.dtype(a.dtype) == np.dtype(b.dtype)


@pytest.mark.parametrize("shape", ["vit", "odd", "wide4"])
@pytest.mark.parametrize("layer", ["ln", "ln_noscale", "ln_nobias", "ln_two_axes", "rms", "rms_noscale"])
def test_gradients_match_jax(layer, shape):
    name, kw = LAYERS[layer]
    x = _x(SHAPES[shape])
    w = np.cos(np.arange(x.size)).reshape(x.shape).astype(np.float32)
    fm, pm = getattr(fnn, name)(**kw), getattr(nn, name)(**kw)
    v = _randomised(fm.init(jax.random.PRNGKey(0), jjnp.asarray(x)))
    jg = jax.grad(lambda v, x: (fm.apply(v, x) * w).sum(), argnums=(0, 1))(v, jjnp.asarray(x))
    pg = podlet.grad(lambda v, x: (pm.apply(v, x) * w).sum(), argnums=(0, 1))(_to_podlet(v), jnp.asarray(x))
    for a, b in zip(jax.tree_util.tree_leaves(pg), jax.tree_util.tree_leaves(jg)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-4 * np.abs(np.asarray(b)).max())


def _ln_f64(x, s, b, use_mean):
    y, _, _ = bind("layer_norm", x, s, b, epsilon=1e-3, use_mean=int(use_mean), feature_ndim=1, dtype="float64",
                   has_scale=1, has_bias=1)
    return y


@pytest.mark.parametrize("use_mean", [True, False], ids=["ln", "rms"])
def test_layer_norm_finite_differences_f64(use_mean):
    podlet.config.update("enable_x64", True)
    try:
        rs = np.random.RandomState(3)
        x, s, b = rs.normal(size=(5, 11)), rs.normal(size=11), rs.normal(size=11)
        w = rs.normal(size=(5, 11))

        def f(x, s, b):
            return (_ln_f64(x, s, b, use_mean) * w).sum()
        g = podlet.grad(f, argnums=(0, 1, 2))(x, s, b)
        for i, arg in enumerate((x, s, b)):
            d = rs.normal(size=arg.shape)
            e = 1e-6
            hi = [a + e * d if k == i else a for k, a in enumerate((x, s, b))]
            lo = [a - e * d if k == i else a for k, a in enumerate((x, s, b))]
            fd = (float(f(*hi)) - float(f(*lo))) / (2 * e)
            np.testing.assert_allclose(float((np.asarray(g[i]) * d).sum()), fd, rtol=1e-6, atol=1e-8)
        # second order: the gradient's directional derivative
        hx = podlet.grad(lambda x: (podlet.grad(f)(x, s, b) * w).sum())(x)
        d = rs.normal(size=x.shape)
        e = 1e-5
        fd = ((podlet.grad(f)(x + e * d, s, b) * w).sum() - (podlet.grad(f)(x - e * d, s, b) * w).sum()) / (2 * e)
        np.testing.assert_allclose(float((np.asarray(hx) * d).sum()), float(fd), rtol=1e-5, atol=1e-7)
    finally:
        podlet.config.update("enable_x64", False)


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_softmax_finite_differences_f64(log):
    podlet.config.update("enable_x64", True)
    try:
        rs = np.random.RandomState(4)
        x, w = rs.normal(size=(4, 9)), rs.normal(size=(4, 9))
        fn = nn.log_softmax if log else nn.softmax

        def f(x):
            return (fn(x) * w).sum()
        assert _has(_jaxpr(f, x), "log_softmax" if log else "softmax")
        g = podlet.grad(f)(x)
        d, e = rs.normal(size=x.shape), 1e-6
        fd = (float(f(x + e * d)) - float(f(x - e * d))) / (2 * e)
        np.testing.assert_allclose(float((np.asarray(g) * d).sum()), fd, rtol=1e-6, atol=1e-9)
        gg = podlet.grad(lambda x: (podlet.grad(f)(x) * w).sum())(x)
        fd2 = ((np.asarray(podlet.grad(f)(x + e * d)) * w).sum() - (np.asarray(podlet.grad(f)(x - e * d)) * w).sum())
        np.testing.assert_allclose(float((np.asarray(gg) * d).sum()), fd2 / (2 * e), rtol=1e-5, atol=1e-8)
    finally:
        podlet.config.update("enable_x64", False)


@pytest.mark.parametrize("layer", ["ln", "rms"])
def test_grad_of_grad_matches_jax(layer):
    name, kw = LAYERS[layer]
    x = _x((3, 17))
    w = np.sin(np.arange(x.size)).reshape(x.shape).astype(np.float32)
    fm, pm = getattr(fnn, name)(**kw), getattr(nn, name)(**kw)
    v = _randomised(fm.init(jax.random.PRNGKey(0), jjnp.asarray(x)))

    def outer(mod, grad, v, x):
        inner = grad(lambda v, x: (mod.apply(v, x) * w).sum(), argnums=(0, 1))
        return lambda v, x: sum((t ** 2).sum() for t in jax.tree_util.tree_leaves(inner(v, x)))
    jg = jax.grad(outer(fm, jax.grad, v, x), argnums=(0, 1))(v, jjnp.asarray(x))
    pv = _to_podlet(v)
    pg = podlet.grad(outer(pm, podlet.grad, pv, x), argnums=(0, 1))(pv, jnp.asarray(x))
    for a, b in zip(jax.tree_util.tree_leaves(pg), jax.tree_util.tree_leaves(jg)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-3, atol=2e-3 * np.abs(np.asarray(b)).max())
    # forward mode: jvp of the layer and of its gradient (jvp transposes the VJP graph)
    t = np.cos(np.arange(x.size)).reshape(x.shape).astype(np.float32)
    _, jt = jax.jvp(lambda x: fm.apply(v, x), (jjnp.asarray(x),), (jjnp.asarray(t),))
    _, ptan = podlet.jvp(lambda x: pm.apply(pv, x), (jnp.asarray(x),), (jnp.asarray(t),))
    np.testing.assert_allclose(np.asarray(ptan), np.asarray(jt), rtol=1e-4, atol=1e-4)
    _, jt = jax.jvp(jax.grad(lambda x: (fm.apply(v, x) * w).sum()), (jjnp.asarray(x),), (jjnp.asarray(t),))
    _, ptan = podlet.jvp(podlet.grad(lambda x: (pm.apply(pv, x) * w).sum()), (jnp.asarray(x),), (jnp.asarray(t),))
    np.testing.assert_allclose(np.asarray(ptan), np.asarray(jt), rtol=2e-3, atol=2e-3 * np.abs(np.asarray(jt)).max())


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_softmax_grad_of_grad_matches_jax(log):
    x = _x((3, 29))
    w = np.sin(np.arange(x.size)).reshape(x.shape).astype(np.float32)
    jf, pf = (jax.nn.log_softmax, nn.log_softmax) if log else (jax.nn.softmax, nn.softmax)

    def outer(fn, grad, np_):
        return lambda x: (grad(lambda x: (fn(x) * w).sum())(x) ** 2).sum()
    jg = jax.grad(outer(jf, jax.grad, jjnp))(x)
    pg = podlet.grad(outer(pf, podlet.grad, jnp))(x)
    np.testing.assert_allclose(np.asarray(pg), np.asarray(jg), rtol=1e-4, atol=1e-5)
    # and jax.hessian-style forward-over-reverse through podlet.jvp
    t = np.cos(np.arange(x.size)).reshape(x.shape).astype(np.float32)
    _, jt = jax.jvp(jax.grad(lambda x: (jf(x) * w).sum()), (x,), (t,))
    _, pt = podlet.jvp(podlet.grad(lambda x: (pf(x) * w).sum()), (x,), (t,))
    np.testing.assert_allclose(np.asarray(pt), np.asarray(jt), rtol=1e-4, atol=1e-5)


SOFTMAX_SHAPES = {"one": (5, 1), "odd": (3, 13), "vit": (2, 3, 197), "swin": (4, 49), "wide": (2, 1000)}


@pytest.mark.parametrize("dtype", [F32, BF16], ids=["f32", "bf16"])
@pytest.mark.parametrize("shape", SOFTMAX_SHAPES, ids=list(SOFTMAX_SHAPES))
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_softmax_matches_jax(log, shape, dtype):
    x = _x(SOFTMAX_SHAPES[shape], dtype=dtype, loc=0.0, scl=4.0)
    jf, pf = (jax.nn.log_softmax, nn.log_softmax) if log else (jax.nn.softmax, nn.softmax)
    # bf16: jax rounds every op to bf16; the fused kernel computes in f32 and rounds once,
    # so the oracle is jax in f32, rounded
    want = np.asarray(jf(jjnp.asarray(x, np.float32))).astype(dtype)
    got = pf(jnp.asarray(x))
    assert np.dtype(got.dtype) == dtype
    if dtype == BF16:
        np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=2 ** -7,
                                   atol=2 ** -7 if log else 1e-6)
    else:
        np.testing.assert_allclose(np.asarray(got), want, rtol=2e-6, atol=2e-6 if log else 1e-7)
    assert _has(_jaxpr(pf, jnp.asarray(x)), "log_softmax" if log else "softmax")
    w = np.cos(np.arange(x.size)).reshape(x.shape).astype(np.float32)
    if dtype == F32:
        jg = jax.grad(lambda x: (jf(x) * w).sum())(x)
        pg = podlet.grad(lambda x: (pf(x) * w).sum())(x)
        np.testing.assert_allclose(np.asarray(pg), np.asarray(jg), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_softmax_special_values_as_jax(log):
    inf, nan = np.inf, np.nan
    x = np.array([[0.0, -inf, 1.0, -inf], [-inf, -inf, -inf, -inf], [1.0, inf, 0.0, 2.0], [nan, 0.0, 1.0, 2.0],
                  [3.0, 3.0, 3.0, 3.0], [-1e30, 1e30, 0.0, 5.0]], np.float32)
    jf, pf = (jax.nn.log_softmax, nn.log_softmax) if log else (jax.nn.softmax, nn.softmax)
    want = np.asarray(jf(x))
    got = np.asarray(pf(jnp.asarray(x)))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(np.nan_to_num(got, nan=7.0), np.nan_to_num(want, nan=7.0), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_softmax_where_and_other_axes_stay_unfused(log):
    x = _x((3, 8), loc=0.0)
    where = np.arange(24).reshape(3, 8) % 3 != 0
    jf, pf = (jax.nn.log_softmax, nn.log_softmax) if log else (jax.nn.softmax, nn.softmax)
    np.testing.assert_allclose(np.asarray(pf(jnp.asarray(x), where=where)), np.asarray(jf(x, where=where)),
                               rtol=1e-6, atol=1e-7)
    name = "log_softmax" if log else "softmax"
    assert not _has(_jaxpr(lambda x: pf(x, where=where), jnp.asarray(x)), name)
    assert not _has(_jaxpr(lambda x: pf(x, axis=0), jnp.asarray(x)), name)
    np.testing.assert_allclose(np.asarray(pf(jnp.asarray(x), axis=0)), np.asarray(jf(x, axis=0)), rtol=1e-6,
                               atol=1e-7)
    assert _has(_jaxpr(lambda x: pf(x, axis=(1,)), jnp.asarray(x)), name)


def test_flax_arguments_the_fusion_does_not_cover_stay_unfused():
    x = _x((2, 6, 8))
    for kw in ({"use_fast_variance": False}, {"reduction_axes": (-2, -1)}, {"reduction_axes": 1, "feature_axes": 1},
               {"force_float32_reductions": False, "dtype": BF16}):
        fm, pm = fnn.LayerNorm(**kw), nn.LayerNorm(**kw)
        v = _randomised(fm.init(jax.random.PRNGKey(0), jjnp.asarray(x)))
        pv = _to_podlet(v)
        assert not _has(_jaxpr(lambda p, x: pm.apply(p, x), pv, jnp.asarray(x)), "layer_norm"), kw
        _close(pm.apply(pv, jnp.asarray(x)), fm.apply(v, jjnp.asarray(x)), fm.apply(v, jjnp.asarray(x)).dtype)
    mask = np.arange(96).reshape(2, 6, 8) % 5 != 0
    fm, pm = fnn.LayerNorm(), nn.LayerNorm()
    v = _randomised(fm.init(jax.random.PRNGKey(0), jjnp.asarray(x)))
    got = pm.apply(_to_podlet(v), jnp.asarray(x), mask=mask)
    np.testing.assert_allclose(np.asarray(got), np.asarray(fm.apply(v, jjnp.asarray(x), mask=mask)), rtol=1e-5,
                               atol=1e-5)


def test_switch_off_gives_the_unfused_graph():
    x = _x((4, 10, 48))
    pm = nn.LayerNorm()
    pv = _randomised(_to_podlet(pm.init(podlet.random.PRNGKey(0), jnp.asarray(x))))
    fused = np.asarray(pm.apply(pv, jnp.asarray(x)))
    sm_fused = np.asarray(nn.softmax(jnp.asarray(x)))
    podlet.config.update("fused_norms", False)
    jp = _jaxpr(lambda p, x: (pm.apply(p, x), nn.softmax(x), nn.log_softmax(x)), pv, jnp.asarray(x))
    assert not _has(jp, "layer_norm") and not _has(jp, "softmax") and not _has(jp, "log_softmax")
    assert _has(jp, "reduce_sum")
    unfused = np.asarray(pm.apply(pv, jnp.asarray(x)))
    assert not np.array_equal(unfused, fused)  # another rounding: the switch really changed the path
    np.testing.assert_allclose(unfused, fused, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(nn.softmax(jnp.asarray(x))), sm_fused, rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="fused_norms must be True or False"):
        podlet.config.update("fused_norms", "auto")


def _step_fns():
    """(name, f, args): forward and backward of every primitive, as jittable functions."""
    rs = np.random.RandomState(7)
    x = rs.normal(size=(70, 129)).astype(np.float32)
    xb = x.astype(BF16)
    s, b = rs.normal(size=129).astype(np.float32), rs.normal(size=129).astype(np.float32)
    w = rs.normal(size=x.shape).astype(np.float32)

    def ln(dtype, use_mean):
        def f(x, s, b):
            y, _, _ = bind("layer_norm", x, s, b, epsilon=1e-5, use_mean=use_mean, feature_ndim=1, dtype=dtype,
                           has_scale=1, has_bias=1)
            return y
        return lambda x, s, b: podlet.value_and_grad(lambda x, s, b: (f(x, s, b).astype(jnp.float32) * w).sum(),
                                                     argnums=(0, 1, 2))(x, s, b)

    def sm(fn):
        return lambda x: podlet.value_and_grad(lambda x: (fn(x).astype(jnp.float32) * w).sum())(x)
    return [("ln_f32", ln("float32", 1), (x, s, b)), ("ln_bf16_to_f32", ln("float32", 1), (xb, s, b)),
            ("ln_f32_to_bf16", ln("bfloat16", 1), (x, s, b)), ("rms_bf16", ln("bfloat16", 0), (xb, s, b)),
            ("softmax_f32", sm(nn.softmax), (x,)), ("softmax_bf16", sm(nn.softmax), (xb,)),
            ("log_softmax_f32", sm(nn.log_softmax), (x,)), ("log_softmax_bf16", sm(nn.log_softmax), (xb,))]


def _bits(tree):
    return [np.asarray(t).tobytes() for t in jax.tree_util.tree_leaves(tree)]


def test_eager_jit_threads_and_isas_give_the_same_bits():
    for name, f, args in _step_fns():
        ref = _bits(f(*args))
        assert _bits(podlet.jit(f)(*args)) == ref, name
        podlet.config.update("num_threads", 1)
        assert _bits(f(*args)) == ref, name
        podlet.config.update("num_threads", 2)
        for isa in ["ref"] + FAST_ISAS:
            _core.set_isa(isa)
            assert _bits(f(*args)) == ref, (name, isa)
            assert _core.norm_last_isa() == isa, (name, isa)
        _core.set_isa(FAST_ISAS[-1] if FAST_ISAS else "ref")


# Every row length's tail (C % 16 = 0..15, rows shorter than one chunk, Swin's 49, ViT's
# 197), with rows of -inf, +inf, NaN, -0.0, denormals and a wide range (exps that underflow).
ROW_LENGTHS = list(range(1, 34)) + [47, 48, 49, 63, 64, 65, 129, 197]


def _special_rows(C, seed):
    rs = np.random.RandomState(seed)
    x = rs.normal(size=(10, C)) * 3
    x[1, :] = -np.inf
    x[2, rs.randint(C)] = np.inf
    x[3, rs.randint(C)] = np.nan
    x[4, :] = -0.0
    x[5, ::2] = -np.inf
    x[6, rs.randint(C)] = 1e-40
    x[7] *= 40
    x[8, :] = 0.0
    # x - max around exp's lower clamp (-104, where exp rounds to +0: the AVX-512 exp leaves
    # those lanes out of vscalefps), denormal exps just above it.
    x[9, :] = np.resize(np.float32([-103.9, -103.97, -103.98, -104.0, -104.5, -150.0]), C)
    x[9, 0] = 0.0
    return x.astype(np.float32)


def _nan_canonical(a):
    """The bits with every NaN as one NaN: a NaN's sign and payload follow the order of a
    commutative operation's operands, which the compiler may swap."""
    a = np.array(a)
    half = a.dtype.itemsize == 2
    bits = a.view(np.uint16 if half else np.uint32).copy()
    bits[np.isnan(a.astype(np.float32))] = 0x7FC0 if half else 0x7FC00000  # a NaN, so never equal to a number
    return bits.tobytes()


def _all_row_kernels(x, dy, s, b):
    """The outputs of every fused row kernel, forward and backward, on rows x."""
    arr = _core.Array.from_numpy
    outs = []
    for prim in ("softmax", "log_softmax"):
        (y,) = _core.apply(prim, [arr(x)], {})
        outs += [y, *_core.apply(prim + "_bwd", [y, arr(dy)], {})]
    for use_mean in (1, 0):
        a = dict(epsilon=1e-6, use_mean=use_mean, feature_ndim=1, dtype=x.dtype.name, has_scale=1, has_bias=use_mean)
        ins = [arr(x), arr(s)] + ([arr(b)] if use_mean else [])
        y, mean, rstd = _core.apply("layer_norm", ins, a)
        outs += [y, mean, rstd, *_core.apply("layer_norm_bwd", [arr(dy), ins[0], mean, rstd, ins[1]], a)]
    return [_nan_canonical(np.asarray(o)) for o in outs]


@pytest.mark.parametrize("dtype", [F32, BF16], ids=["f32", "bf16"])
def test_every_row_tail_gives_the_reference_bits_on_every_isa(dtype):
    # The vector builds read a row's last C % 16 elements with masked loads and pad the
    # lanes past the row; the reference pads through a copy. Both must add into the same
    # lanes in the same order, whatever the values.
    for C in ROW_LENGTHS:
        x = _special_rows(C, C).astype(dtype)
        rs = np.random.RandomState(100 + C)
        dy = rs.normal(size=x.shape).astype(np.float32).astype(dtype)
        dy[4, 0] = -0.0
        s, b = rs.normal(size=C).astype(np.float32), rs.normal(size=C).astype(np.float32)
        _core.set_isa("ref")
        want = _all_row_kernels(x, dy, s, b)
        for isa in FAST_ISAS:
            _core.set_isa(isa)
            got = _all_row_kernels(x, dy, s, b)
            assert _core.norm_last_isa() == isa
            for k, (g, w) in enumerate(zip(got, want)):
                assert g == w, (C, isa, k)


@pytest.mark.parametrize("dtype", [F32, BF16], ids=["f32", "bf16"])
@pytest.mark.parametrize("C", [7, 16, 17, 31, 49, 64, 96, 100, 128, 129, 384])
def test_rows_in_groups_of_16_give_the_reference_bits(C, dtype):
    # The AVX-512 softmax and its backward on rows of 16..128, and the LayerNorm / RMSNorm
    # forward on any rows, take 16 rows at a time: the softmax's exps and outputs run over
    # the rows' elements as one stream (a vector's lanes may belong to two rows), and the
    # lane sums of 16 rows reduce together, LayerNorm's statistics as vectors. Every count
    # of rows in the last group, special rows (NaN, infinities, -0, subnormals) at every
    # position of a group, a row whose rounded variance goes below 0, parallel chunks of
    # 16384 / C rows (rounded up to 16) that end mid-stream, and outputs large enough to
    # go out with non-temporal stores: the softmax's from 4 MB (C = 17, 49: 4 MB + 21
    # rows), LayerNorm's y and dx from 8 MB (C = 96: 8 MB + 21 rows).
    specials = _special_rows(C, 7 * C)[:9]
    rs = np.random.RandomState(C)
    chunks = 2 * 16384 // C + 37
    stream_bytes = {17: 4 << 20, 49: 4 << 20, 96: 8 << 20}.get(C)
    nbig = stream_bytes // (C * dtype.itemsize) + 21 if stream_bytes else max(chunks, 160)
    big = (rs.normal(size=(nbig, C)) * 3 + 5).astype(np.float32)
    big[10] = 1e4 + rs.normal(size=C).astype(np.float32) * 1e-3  # sum2 / n - mu mu may round below 0
    for k, i in enumerate(range(0, nbig, max(17, nbig // 40))):  # specials land in every lane group
        big[i] = specials[k % 9]
    dy = rs.normal(size=big.shape).astype(np.float32)
    dy[3, 0], dy[5, 2], dy[20, 1] = np.nan, np.inf, np.inf
    s, b = rs.normal(size=C).astype(np.float32), rs.normal(size=C).astype(np.float32)
    for n in (1, 5, 15, 16, 17, 31, 33, chunks, nbig):
        x, d = big[:n].astype(dtype), dy[:n].astype(dtype)
        _core.set_isa("ref")
        want = _all_row_kernels(x, d, s, b)
        for isa in FAST_ISAS:
            _core.set_isa(isa)
            for threads in (1, 2):
                podlet.config.update("num_threads", threads)
                got = _all_row_kernels(x, d, s, b)
                assert _core.norm_last_isa() == isa
                for k, (g, w) in enumerate(zip(got, want)):
                    assert g == w, (C, n, isa, threads, k)


def test_dscale_sums_over_many_blocks_in_a_fixed_order():
    rs = np.random.RandomState(8)
    x, dy = rs.normal(size=(1000, 40)).astype(np.float32), rs.normal(size=(1000, 40)).astype(np.float32)
    s = rs.normal(size=40).astype(np.float32)
    a = dict(epsilon=1e-6, use_mean=1, feature_ndim=1, dtype="float32", has_scale=1)
    _, mean, rstd = bind("layer_norm", x, s, **a)
    outs = []
    for n in (1, 2):
        podlet.config.update("num_threads", n)
        outs.append(_bits(bind("layer_norm_bwd", dy, x, mean, rstd, s, **a)))
    assert outs[0] == outs[1]
    dx, ds, db = bind("layer_norm_bwd", dy, x, mean, rstd, s, **a)
    xh = (x.astype(np.float64) - np.asarray(mean)[:, None]) * np.asarray(rstd)[:, None]
    np.testing.assert_allclose(np.asarray(ds), (dy * xh).sum(0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(db), dy.astype(np.float64).sum(0), rtol=1e-4, atol=1e-4)


def test_vmap_matches_a_loop_bit_for_bit():
    rs = np.random.RandomState(9)
    xs = rs.normal(size=(3, 5, 24)).astype(np.float32)
    s, b = rs.normal(size=24).astype(np.float32), rs.normal(size=24).astype(np.float32)
    ss = rs.normal(size=(3, 24)).astype(np.float32)
    a = dict(epsilon=1e-6, use_mean=1, feature_ndim=1, dtype="float32", has_scale=1, has_bias=1)

    def f(x, s):
        y, _, _ = bind("layer_norm", x, s, b, **a)
        return y
    g = podlet.grad(lambda x, s: (f(x, s) ** 3).sum(), argnums=(0, 1))
    for vf, args, axes in ((f, (xs, s), (0, None)), (f, (xs, ss), (0, 0)), (g, (xs, s), (0, None)),
                           (g, (xs, ss), (0, 0)), (nn.softmax, (xs,), (0,)), (nn.log_softmax, (xs,), (0,)),
                           (podlet.grad(lambda x: (nn.softmax(x) ** 3).sum()), (xs,), (0,)),
                           (podlet.grad(lambda x: (nn.log_softmax(x) ** 3).sum()), (xs,), (0,))):
        got = podlet.vmap(vf, in_axes=axes)(*args)
        for i in range(3):
            one = vf(*[t[i] if ax == 0 else t for t, ax in zip(args, axes)])
            assert _bits(jax.tree_util.tree_map(lambda t: np.asarray(t)[i], got)) == _bits(one)


def test_bad_inputs_name_the_value():
    x = np.ones((4, 8), np.float32)
    a = dict(epsilon=1e-6, use_mean=1, feature_ndim=1, dtype="float32", has_scale=1)
    with pytest.raises(Exception, match=r"scale must be float32\(8,\).*got float32\(7,\)"):
        bind("layer_norm", x, np.ones(7, np.float32), **a)
    with pytest.raises(Exception, match="feature_ndim must be in"):
        bind("layer_norm", x, **dict(a, has_scale=0, feature_ndim=3))
    with pytest.raises(Exception, match="x must be float32, bfloat16 or float64, got int32"):
        bind("softmax", np.ones((2, 3), np.int32))
    with pytest.raises(Exception, match="dtype int32 is not supported"):
        bind("layer_norm", x, **dict(a, has_scale=0, dtype="int32"))
    with pytest.raises(Exception, match="epsilon must be >= 0"):
        bind("layer_norm", x, **dict(a, has_scale=0, epsilon=-1.0))


def test_vit_and_swin_forward_fused_equals_unfused():
    x = _x((2, 32, 32, 1), loc=0.0, scl=1.0)
    attention = podlet.config.fused_attention
    podlet.config.update("fused_attention", False)  # Flax's attention: its softmax is jax.nn's
    try:
        _vit_and_swin(x)
    finally:
        podlet.config.update("fused_attention", attention)


def _vit_and_swin(x):
    for model in (models.VisionTransformer(num_classes=5, patch_size=8, hidden_size=48, num_layers=2, num_heads=3,
                                           mlp_dim=96),
                  models.SwinTransformer(num_classes=5, patch_size=4, embed_dim=24, depths=(2, 2), num_heads=(3, 6),
                                         window_size=4, stochastic_depth_rate=0.0)):
        v = model.init(podlet.random.PRNGKey(0), jnp.asarray(x), train=False)
        f = podlet.jit(lambda v, x: model.apply(v, x, train=False))
        podlet.config.update("fused_norms", True)
        jp = _jaxpr(lambda v, x: model.apply(v, x, train=False), v, jnp.asarray(x))
        assert _has(jp, "layer_norm") and _has(jp, "softmax"), type(model).__name__
        fused = np.asarray(f(v, jnp.asarray(x)))
        podlet.config.update("fused_norms", False)
        unfused = np.asarray(podlet.jit(lambda v, x: model.apply(v, x, train=False))(v, jnp.asarray(x)))
        np.testing.assert_allclose(fused, unfused, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("opset", [13, 17])
def test_onnx_round_trip(tmp_path, opset):
    import onnx
    import onnxruntime as ort
    from podlet import export
    rs = np.random.RandomState(11)
    s, bb = jnp.asarray(rs.normal(size=24).astype(np.float32)), jnp.asarray(rs.normal(size=24).astype(np.float32))
    s2 = jnp.asarray(rs.normal(size=(3, 24)).astype(np.float32))

    def f(x):  # x: (2, 3, 24)
        ln = nn.LayerNorm(epsilon=1e-3).apply({"params": {"scale": s, "bias": bb}}, x)
        bare = nn.LayerNorm(use_scale=False, use_bias=False).apply({}, x * 2)
        two = nn.LayerNorm(reduction_axes=(-2, -1), feature_axes=(-2, -1), use_bias=False).apply(
            {"params": {"scale": s2}}, x)
        rms = nn.RMSNorm().apply({"params": {"scale": s}}, x + 1)
        lo = nn.LayerNorm(dtype=jnp.bfloat16).apply({"params": {"scale": s, "bias": bb}}, x).astype(jnp.float32)
        return nn.softmax(ln) + nn.log_softmax(rms) + bare + two + 0.0 * lo + nn.softmax(x.astype(jnp.bfloat16))
    x = rs.normal(size=(2, 3, 24)).astype(np.float32)
    jp = _jaxpr(f, jnp.asarray(x))
    assert _has(jp, "layer_norm") and _has(jp, "softmax") and _has(jp, "log_softmax")
    path = tmp_path / "norms.onnx"
    proto = export.to_onnx(f, None, jnp.asarray(x), path, opset=opset)
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    ops = {n.op_type for n in proto.graph.node}
    assert {"Softmax", "LogSoftmax"} <= ops and (("LayerNormalization" in ops) == (opset >= 17))
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (got,) = sess.run(None, {sess.get_inputs()[0].name: x})
    np.testing.assert_allclose(got, np.asarray(f(jnp.asarray(x))), rtol=1e-4, atol=1e-3)
    # the bf16 softmax's rounding aside, the float32 parts agree to 1e-5
    def g(x):
        return f(x) - nn.softmax(x.astype(jnp.bfloat16))
    export.to_onnx(g, None, jnp.asarray(x), tmp_path / "g.onnx", opset=opset)
    sess = ort.InferenceSession(str(tmp_path / "g.onnx"), providers=["CPUExecutionProvider"])
    (got,) = sess.run(None, {sess.get_inputs()[0].name: x})
    np.testing.assert_allclose(got, np.asarray(g(jnp.asarray(x))), rtol=1e-5, atol=1e-5)


def test_hessian_matches_jax():
    x = _x((2, 5))
    w = np.sin(np.arange(10)).reshape(2, 5).astype(np.float32)
    fm, pm = fnn.LayerNorm(), nn.LayerNorm()
    v = _randomised(fm.init(jax.random.PRNGKey(0), jjnp.asarray(x)))
    pv = _to_podlet(v)
    jh = jax.hessian(lambda x: (fm.apply(v, x) ** 2 * w).sum() + (jax.nn.log_softmax(x) * w).sum())(jjnp.asarray(x))
    ph = podlet.hessian(lambda x: (pm.apply(pv, x) ** 2 * w).sum() + (nn.log_softmax(x) * w).sum())(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(ph), np.asarray(jh), rtol=2e-3, atol=2e-3 * np.abs(np.asarray(jh)).max())
