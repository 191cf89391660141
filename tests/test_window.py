"""reduce_window (max / sum) and its transposes reduce_window_sum_transpose,
select_and_scatter_add, select_and_gather_add: forward vs NumPy float64 references and
jax.lax.reduce_window, eager == jit, VJPs vs finite differences and JAX, NaN and ties,
errors, FLOPs, thread determinism."""
import itertools

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


# ---- NumPy references ------------------------------------------------------------------
def _init(comp, dtype):
    if comp == "sum":
        return 0
    return -np.inf if np.dtype(dtype).kind == "f" else np.iinfo(dtype).min


def _pad(x, pad, value):
    """Pads (negative entries crop) with `value`."""
    r = x.ndim
    pos = [(max(pad[2 * d], 0), max(pad[2 * d + 1], 0)) for d in range(r)]
    xp = np.pad(x, pos, constant_values=value)
    crop = tuple(slice(max(-pad[2 * d], 0), xp.shape[d] - max(-pad[2 * d + 1], 0)) for d in range(r))
    return xp[crop]


def _out_shape(shape, wd, ws, pad):
    out = []
    for d, n in enumerate(shape):
        p = n + pad[2 * d] + pad[2 * d + 1]
        out.append(0 if p < wd[d] else (p - wd[d]) // ws[d] + 1)
    return tuple(out)


def _windows(xp, wd, ws, out):
    """view[o..., k...] = xp[o * ws + k]."""
    if 0 in out:
        return np.zeros(tuple(out) + tuple(wd), xp.dtype)
    v = np.lib.stride_tricks.sliding_window_view(xp, wd)
    return v[tuple(slice(0, (o - 1) * s + 1, s) for o, s in zip(out, ws))]


def ref_reduce_window(x, comp, wd, ws, pad):
    x = np.asarray(x)
    init = _init(comp, np.float64 if x.dtype == BF16 else x.dtype)
    x = x.astype(np.float64) if x.dtype.kind == "f" or x.dtype == BF16 else x.astype(np.int64)
    out = _out_shape(x.shape, wd, ws, pad)
    win = _windows(_pad(x, pad, init), wd, ws, out)
    axes = tuple(range(x.ndim, 2 * x.ndim))
    return win.max(axis=axes) if comp == "max" else win.sum(axis=axes)


def _scatter_windows(shape, wd, ws, pad, out, contrib):
    """Adjoint of taking windows: contrib(k) (shape `out`) is added at xp[o * ws + k]."""
    r = len(shape)
    padded = [shape[d] + max(pad[2 * d], 0) + max(pad[2 * d + 1], 0) for d in range(r)]
    acc = np.zeros(padded)
    for k in itertools.product(*[range(w) for w in wd]):
        sl = tuple(slice(max(-pad[2 * d], 0) + k[d], max(-pad[2 * d], 0) + k[d] + (out[d] - 1) * ws[d] + 1, ws[d])
                   for d in range(r))
        acc[sl] += contrib(k)
    return acc[tuple(slice(max(pad[2 * d], 0), max(pad[2 * d], 0) + shape[d]) for d in range(r))]


def ref_sum_transpose(ct, shape, wd, ws, pad):
    ct = np.asarray(ct, np.float64)
    if ct.size == 0:
        return np.zeros(shape)
    return _scatter_windows(shape, wd, ws, pad, ct.shape, lambda k: ct)


def _first_max(operand, wd, ws, pad, out):
    """Flat window index of the first maximum (NaN counts as maximum), -1 if all padding."""
    x = np.asarray(operand, np.float64)
    valid = _windows(_pad(np.ones(x.shape), pad, 0.0), wd, ws, out).reshape(out + (-1,)) > 0
    win = _windows(_pad(x, pad, -np.inf), wd, ws, out).reshape(out + (-1,))
    win = np.where(valid, win, -np.inf)
    isnan = np.isnan(win)
    idx = np.where(isnan.any(axis=-1), np.argmax(isnan, axis=-1), np.argmax(win, axis=-1))
    return np.where(valid.any(axis=-1), idx, -1)


def ref_select_and_scatter_add(source, operand, wd, ws, pad):
    src = np.asarray(source, np.float64)
    out = src.shape
    if src.size == 0:
        return np.zeros(np.shape(operand))
    sel = _first_max(operand, wd, ws, pad, out)
    flat = {k: i for i, k in enumerate(itertools.product(*[range(w) for w in wd]))}
    return _scatter_windows(np.shape(operand), wd, ws, pad, out, lambda k: np.where(sel == flat[k], src, 0.0))


def ref_select_and_gather_add(tangents, operand, wd, ws, pad):
    t = np.asarray(tangents, np.float64)
    out = _out_shape(t.shape, wd, ws, pad)
    if 0 in out:
        return np.zeros(out)
    sel = _first_max(operand, wd, ws, pad, out)
    tw = _windows(_pad(t, pad, 0.0), wd, ws, out).reshape(out + (-1,))
    return np.where(sel >= 0, np.take_along_axis(tw, np.maximum(sel, 0)[..., None], -1)[..., 0], 0.0)


# ---- cases ------------------------------------------------------------------------------
def same(shape, wd, ws):
    return [int(v) for p in jax.lax.padtype_to_pads(shape, wd, ws, "SAME") for v in p]


# name -> (shape, window_dimensions, window_strides, padding)
CASES = {
    "maxpool_3x3_s2_p1": ((2, 9, 10, 3), (1, 3, 3, 1), (1, 2, 2, 1), [0, 0, 1, 1, 1, 1, 0, 0]),
    "pool_2x2_s2_valid_odd": ((2, 8, 7, 4), (1, 2, 2, 1), (1, 2, 2, 1), [0] * 8),
    "3x3_s1_same": ((1, 6, 5, 2), (1, 3, 3, 1), (1, 1, 1, 1), same((1, 6, 5, 2), (1, 3, 3, 1), (1, 1, 1, 1))),
    "window_over_every_dim": ((3, 5, 4), (2, 3, 2), (1, 2, 1), [1, 0, 0, 1, 1, 1]),
    "rank1": ((10,), (3,), (2,), [1, 2]),
    "negative_padding": ((1, 7, 6, 2), (1, 2, 3, 1), (1, 1, 2, 1), [0, 0, -1, 1, 1, -2, 0, 0]),
    "global_pool": ((2, 4, 5, 3), (1, 4, 5, 1), (1, 1, 1, 1), [0] * 8),
    "padding_wider_than_window": ((1, 3, 3, 1), (1, 2, 2, 1), (1, 1, 1, 1), [0, 0, 2, 2, 0, 3, 0, 0]),
    "window_larger_than_input": ((1, 2, 2, 1), (1, 3, 3, 1), (1, 1, 1, 1), [0] * 8),
}


def wattrs(case, **kw):
    _, wd, ws, pad = case
    return dict(window_dimensions=list(wd), window_strides=list(ws), padding=list(pad), **kw)


def rand(case, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        lo = 0 if np.dtype(dtype).kind == "u" else -50
        return rng.integers(lo, 50, case[0]).astype(dtype)
    return rng.standard_normal(case[0]).astype(dtype)


def ref_of(case, comp):
    _, wd, ws, pad = case
    return lambda x: ref_reduce_window(x, comp, wd, ws, pad)


# ---- reduce_window forward --------------------------------------------------------------------
@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("comp", ["max", "sum"])
@pytest.mark.parametrize("dtype", [np.float32, BF16, np.float64, np.int32])
def test_reduce_window(name, comp, dtype):
    case = CASES[name]
    x = rand(case, dtype)
    y = check_prim("reduce_window", [x], wattrs(case, computation=comp), ref=ref_of(case, comp))
    assert y.dtype == np.dtype(dtype) and y.shape == _out_shape(*case[:2], case[2], case[3])


def test_uint8_max_and_wrapping_sum():
    case = CASES["maxpool_3x3_s2_p1"]
    x = np.random.default_rng(1).integers(0, 256, case[0]).astype(np.uint8)
    check_prim("reduce_window", [x], wattrs(case, computation="max"), ref=ref_of(case, "max"))
    check_prim("reduce_window", [x], wattrs(case, computation="sum"),
               ref=lambda a: ref_of(case, "sum")(a) % 256)


@pytest.mark.parametrize("name", ["maxpool_3x3_s2_p1", "window_over_every_dim", "negative_padding"])
@pytest.mark.parametrize("comp", ["max", "sum"])
def test_matches_jax(name, comp):
    shape, wd, ws, pad = CASES[name]
    x = rand(CASES[name], np.float32)
    pairs = [(pad[2 * i], pad[2 * i + 1]) for i in range(len(shape))]
    jfn, init = (jax.lax.max, -np.inf) if comp == "max" else (jax.lax.add, 0.0)
    want = jax.lax.reduce_window(x, np.float32(init), jfn, wd, ws, pairs)
    got = lax.reduce_window(as_podlet(x), init, lax.max if comp == "max" else lax.add, wd, ws, pairs)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6)


def test_max_propagates_nan():
    x = np.arange(16, dtype=np.float32).reshape(1, 4, 4, 1)
    x[0, 1, 1, 0] = np.nan
    x[0, 3, 3, 0] = -np.inf
    y = np.asarray(bind("reduce_window", as_podlet(x), computation="max", window_dimensions=[1, 2, 2, 1],
                        window_strides=[1, 2, 2, 1], padding=[0] * 8))
    np.testing.assert_array_equal(y[0, :, :, 0], [[np.nan, 7], [13, 14]])
    # ...wherever the NaN sits in the window (first, last, or after a larger value).
    for pos in range(4):
        v = np.array([1.0, 5.0, 2.0, 3.0], np.float32)
        v[pos] = np.nan
        r = np.asarray(bind("reduce_window", as_podlet(v), computation="max", window_dimensions=[4],
                            window_strides=[1], padding=[0, 0]))
        assert np.isnan(r).all()


# ---- VJPs ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", [n for n in CASES if n != "window_larger_than_input"])
@pytest.mark.parametrize("comp", ["max", "sum"])
def test_reduce_window_vjp_finite_differences(name, comp):
    case = CASES[name]
    if comp == "max" and name == "padding_wider_than_window":
        case = (case[0], case[1], case[2], [0, 0, 1, 1, 0, 1, 0, 0])  # no all-padding window (-inf - -inf = nan)
    check_vjp("reduce_window", [rand(case)], wattrs(case, computation=comp), grad_argnums=(0,))


@pytest.fixture
def x64():
    """podlet.numpy ops keep float64 only with x64 enabled (like JAX)."""
    podlet.config.update("jax_enable_x64", True)
    yield
    podlet.config.update("jax_enable_x64", False)


# (JAX's reduce_window gradient rejects negative padding; the finite-difference test covers it.)
@pytest.mark.parametrize("name", ["maxpool_3x3_s2_p1", "window_over_every_dim", "padding_wider_than_window",
                                  "global_pool"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, BF16])
def test_grads_match_jax(name, dtype, x64):
    """grad of sum(pool(x)**2) through podlet.lax vs JAX in float64 on the same values."""
    shape, wd, ws, pad = CASES[name]
    x = rand(CASES[name], dtype)
    pairs = [(pad[2 * i], pad[2 * i + 1]) for i in range(len(shape))]
    for jfn, pfn, init in ((jax.lax.max, lax.max, -np.inf), (jax.lax.add, lax.add, 0.0)):
        def f(m, fn):
            def loss(a):
                y = m.reduce_window(a, np.float64(init) if m is jax.lax else init, fn, wd, ws, pairs)
                y = m.select(m.is_finite(y), y, m.full_like(y, 0)) if m is jax.lax else y
                return (y ** 2).sum()
            return loss
        want = np.asarray(jax.grad(f(jax.lax, jfn))(x.astype(np.float64)))
        got = np.asarray(podlet.grad(f(lax, pfn))(as_podlet(x)))
        assert got.dtype == np.dtype(dtype)
        t = {np.dtype(np.float64): (1e-12, 1e-12), np.dtype(np.float32): (1e-5, 1e-5)}.get(np.dtype(dtype), (3e-2, 0.1))
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=t[0], atol=t[1])


def test_max_gradient_goes_to_the_first_maximum():
    """Ties: XLA's select_and_scatter (select = ge) picks the first max of each window."""
    x = np.array([[1, 3, 3, 0, 2, 2, 2, 1]], np.float32).reshape(1, 8)
    attrs = dict(computation="max", window_dimensions=[1, 3], window_strides=[1, 1], padding=[0, 0, 1, 1])
    g = np.asarray(podlet.grad(lambda a: bind("reduce_window", a, **attrs).sum())(as_podlet(x)))
    want = jax.grad(lambda a: jax.lax.reduce_window(a, -np.inf, jax.lax.max, (1, 3), (1, 1), [(0, 0), (1, 1)]).sum())(x)
    np.testing.assert_array_equal(g, want)
    np.testing.assert_array_equal(g, [[0, 3, 1, 0, 2, 1, 1, 0]])
    # All-equal windows (e.g. a ReLU output of zeros) route the gradient to the first element.
    z = np.zeros((1, 4, 4, 1), np.float32)
    gz = np.asarray(podlet.grad(lambda a: bind("reduce_window", a, computation="max", window_dimensions=[1, 2, 2, 1],
                                               window_strides=[1, 2, 2, 1], padding=[0] * 8).sum())(as_podlet(z)))
    np.testing.assert_array_equal(gz[0, :, :, 0], [[1, 0, 1, 0], [0, 0, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0]])


def test_max_gradient_follows_nan():
    x = np.array([1.0, np.nan, 5.0, np.nan], np.float64)
    attrs = dict(computation="max", window_dimensions=[4], window_strides=[1], padding=[0, 0])
    g = np.asarray(podlet.grad(lambda a: bind("reduce_window", a, **attrs).sum())(as_podlet(x.astype(np.float32))))
    np.testing.assert_array_equal(g, [0, 1, 0, 0])


# ---- the transposes as primitives of their own ------------------------------------------------------
@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("dtype", [np.float32, BF16, np.float64])
def test_sum_transpose(name, dtype):
    case = CASES[name]
    shape, wd, ws, pad = case
    ct = np.random.default_rng(2).standard_normal(_out_shape(shape, wd, ws, pad)).astype(dtype)
    attrs = wattrs(case, operand_shape=list(shape))
    y = check_prim("reduce_window_sum_transpose", [ct], attrs, ref=lambda c: ref_sum_transpose(c, shape, wd, ws, pad),
                   grad_argnums=(0,) if dtype == np.float64 else ())
    assert y.shape == shape and y.dtype == np.dtype(dtype)


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("dtype", [np.float32, BF16, np.float64])
def test_select_and_scatter_add(name, dtype):
    case = CASES[name]
    shape, wd, ws, pad = case
    x = rand(case, dtype)
    src = np.random.default_rng(3).standard_normal(_out_shape(shape, wd, ws, pad)).astype(dtype)
    y = check_prim("select_and_scatter_add", [src, x], wattrs(case),
                   ref=lambda s, o: ref_select_and_scatter_add(s, o, wd, ws, pad),
                   grad_argnums=(0,) if dtype == np.float64 else ())
    assert y.shape == shape and y.dtype == np.dtype(dtype)


# f32 image pools with channels in multiples of 16 take the AVX-512 kernel (kernels/pool.h)
# on AVX-512 hosts: the same bits as window.cc's loops (the ref ISA), the reference values.
FAST_POOLS = {
    "stem_3x3_s2_p1": ((2, 13, 12, 64), (1, 3, 3, 1), (1, 2, 2, 1), [0, 0, 1, 1, 1, 1, 0, 0]),
    "2x2_s2_valid_odd": ((1, 9, 7, 16), (1, 2, 2, 1), (1, 2, 2, 1), [0] * 8),
    "3x2_s1x2_asymmetric": ((2, 7, 8, 48), (1, 3, 2, 1), (1, 1, 2, 1), [0, 0, 1, 2, 0, 1, 0, 0]),
    "negative_padding": ((1, 10, 9, 16), (1, 3, 3, 1), (1, 2, 2, 1), [0, 0, -1, 1, 1, -2, 0, 0]),
    "5x5_s3_p2": ((3, 6, 6, 32), (1, 5, 5, 1), (1, 3, 3, 1), [0, 0, 2, 2, 2, 2, 0, 0]),
    "window_larger_than_input": ((1, 2, 2, 16), (1, 3, 3, 1), (1, 1, 1, 1), [0] * 8),
}


@pytest.mark.parametrize("name", list(FAST_POOLS))
def test_max_pool_gradient_fast_kernel(name):
    from podlet import _core
    case = FAST_POOLS[name]
    shape, wd, ws, pad = case
    rng = np.random.default_rng(7)
    x = rng.integers(-3, 3, shape).astype(np.float32)  # many ties: the first maximum wins
    x.reshape(-1)[rng.choice(x.size, 5, replace=False)] = np.nan
    x.reshape(-1)[rng.choice(x.size, 5, replace=False)] = -0.0
    src = rng.standard_normal(_out_shape(shape, wd, ws, pad)).astype(np.float32)
    src.reshape(-1)[:3] = -0.0
    before = _core.maxpool_grad_fast_calls()
    fast = np.asarray(bind("select_and_scatter_add", as_podlet(src), as_podlet(x), **wattrs(case))).copy()
    fast_ran = _core.maxpool_grad_fast_calls() - before
    assert fast_ran == (1 if "avx512" in _core.cpu_info()["available_isas"] else 0)
    isa = _core.active_isa()
    _core.set_isa("ref")
    try:
        slow = np.asarray(bind("select_and_scatter_add", as_podlet(src), as_podlet(x), **wattrs(case))).copy()
    finally:
        _core.set_isa(isa)
    assert fast.tobytes() == slow.tobytes()
    np.testing.assert_allclose(fast, ref_select_and_scatter_add(src.astype(np.float64), x.astype(np.float64),
                                                                wd, ws, pad), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", list(FAST_POOLS))
def test_max_pool_fast_kernel(name):
    """reduce_window max on f32 images with channels in multiples of 16: the AVX-512
    kernel, the same bits as window.cc's loops (ref ISA) - NaN payloads (the last NaN of
    a window wins), -0 / +0 ties, infinities, empty windows (-inf) - and the reference
    values."""
    from podlet import _core
    case = FAST_POOLS[name]
    shape, wd, ws, pad = case
    rng = np.random.default_rng(8)
    x = rng.integers(-3, 3, shape).astype(np.float32)
    flat = x.reshape(-1)
    idx = rng.choice(x.size, 12, replace=False)
    # NaNs with distinct payloads (quiet and signalling), zeros of both signs, infinities
    flat[idx[:4]] = np.array([0x7fc00001, 0xffc00002, 0x7f800003, 0x7fc00004], np.uint32).view(np.float32)
    flat[idx[4:8]] = -0.0
    flat[idx[8:10]] = np.inf
    flat[idx[10:]] = -np.inf
    x[x == 0] = np.where(rng.random((x == 0).sum()) < 0.5, -0.0, 0.0).astype(np.float32)
    attrs = dict(wattrs(case), computation="max")
    before = _core.maxpool_fwd_fast_calls()
    fast = np.asarray(bind("reduce_window", as_podlet(x), **attrs)).copy()
    runs = 1 if "avx512" in _core.cpu_info()["available_isas"] and fast.size else 0  # an empty y computes nothing
    assert _core.maxpool_fwd_fast_calls() - before == runs
    isa = _core.active_isa()
    _core.set_isa("ref")
    try:
        slow = np.asarray(bind("reduce_window", as_podlet(x), **attrs)).copy()
    finally:
        _core.set_isa(isa)
    assert fast.tobytes() == slow.tobytes()
    np.testing.assert_array_equal(fast, ref_reduce_window(x.astype(np.float64), "max", wd, ws, pad))


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("dtype", [np.float32, BF16, np.float64])
def test_select_and_gather_add(name, dtype):
    case = CASES[name]
    shape, wd, ws, pad = case
    x = rand(case, dtype)
    t = np.random.default_rng(4).standard_normal(shape).astype(dtype)
    y = check_prim("select_and_gather_add", [t, x], wattrs(case),
                   ref=lambda a, o: ref_select_and_gather_add(a, o, wd, ws, pad),
                   grad_argnums=(0,) if dtype == np.float64 else ())
    assert y.shape == _out_shape(shape, wd, ws, pad) and y.dtype == np.dtype(dtype)


def test_max_pool_second_derivative_matches_jax():
    """grad(grad(.)) through select_and_scatter_add -> select_and_gather_add."""
    shape, wd, ws, pad = CASES["maxpool_3x3_s2_p1"]
    x = rand(CASES["maxpool_3x3_s2_p1"], np.float32)
    v = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    pairs = [(pad[2 * i], pad[2 * i + 1]) for i in range(len(shape))]

    def make(m, fn, grad, arr):
        inner = lambda a: (m.reduce_window(a * a, -np.inf if m is lax else np.float32(-np.inf), fn, wd, ws, pairs) ** 3).sum()
        return lambda a: (grad(inner)(a) * arr(v)).sum()

    want = jax.grad(make(jax.lax, jax.lax.max, jax.grad, lambda a: a))(x)
    got = podlet.grad(make(lax, lax.max, podlet.grad, as_podlet))(as_podlet(x))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


# ---- errors, FLOPs, determinism ------------------------------------------------------------------
def test_errors():
    x = as_podlet(np.zeros((2, 4, 4, 3), np.float32))
    with pytest.raises(podlet.ShapeError, match=r"window_dimensions \(1, 2, 2\) must have one entry per operand dim \(rank 4\)"):
        bind("reduce_window", x, computation="max", window_dimensions=[1, 2, 2], window_strides=[1, 2, 2, 1])
    with pytest.raises(podlet.ShapeError, match="padding"):
        bind("reduce_window", x, computation="max", window_dimensions=[1, 2, 2, 1], padding=[0, 0, 1, 1])
    with pytest.raises(podlet.PodletError, match="computation must be 'max' or 'sum', got 'min'"):
        bind("reduce_window", x, computation="min", window_dimensions=[1, 2, 2, 1])
    with pytest.raises(podlet.DTypeError, match="bool"):
        bind("reduce_window", as_podlet(np.zeros((4,), bool)), computation="max", window_dimensions=[2])
    with pytest.raises(podlet.ShapeError, match=r"source has shape \(2, 3, 3, 3\), expected \(2, 2, 2, 3\)"):
        bind("select_and_scatter_add", as_podlet(np.zeros((2, 3, 3, 3), np.float32)), x,
             window_dimensions=[1, 2, 2, 1], window_strides=[1, 2, 2, 1])


def test_flops():
    case = CASES["maxpool_3x3_s2_p1"]
    x = rand(case, np.float32)
    g = podlet.make_graph(lambda a: bind("reduce_window", a, **wattrs(case, computation="max")), as_podlet(x))
    assert g.flops() == np.prod(_out_shape(*case[:2], case[2], case[3])) * 9


def test_bits_do_not_depend_on_thread_count():
    case = ((4, 40, 36, 16), (1, 3, 3, 1), (1, 2, 2, 1), [0, 0, 1, 1, 1, 1, 0, 0])
    odd = ((6, 30, 17), (3, 4, 2), (2, 1, 1), [1, 1, 0, 2, 1, 0])
    n0 = podlet.config.num_threads
    runs = []
    try:
        for n in (1, 2):
            podlet.config.update("num_threads", n)
            outs = []
            for c in (case, odd):
                for dtype in (np.float32, BF16):
                    x = rand(c, dtype)
                    for comp in ("max", "sum"):
                        outs.append(np.asarray(bind("reduce_window", as_podlet(x), **wattrs(c, computation=comp))).copy())
                    ct = rand((outs[-1].shape,), dtype, seed=9)
                    outs.append(np.asarray(bind("reduce_window_sum_transpose", as_podlet(ct),
                                                **wattrs(c, operand_shape=list(c[0])))).copy())
                    outs.append(np.asarray(bind("select_and_scatter_add", as_podlet(ct), as_podlet(x), **wattrs(c))).copy())
                    y, sel = bind("reduce_window_argmax", as_podlet(x), **wattrs(c))
                    outs += [np.asarray(y).copy(), np.asarray(sel).copy(),
                             np.asarray(bind("scatter_add_at_argmax", as_podlet(ct), sel,
                                             **wattrs(c, operand_shape=list(c[0])))).copy()]
            runs.append(outs)
    finally:
        podlet.config.update("num_threads", n0)
    for a, b in zip(*runs):
        assert a.tobytes() == b.tobytes()


# ---- reduce_window_argmax / scatter_add_at_argmax and the pass that makes them ----------
def _tricky_pool_input(shape, seed, nan_frac=0.0):
    """Ties (small integers), NaNs with distinct payloads, zeros of both signs, infinities;
    with nan_frac, that share of NaNs more (windows with several: the forward keeps the
    last one's payload, the gradient goes to the first)."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 3, shape).astype(np.float32)
    flat = x.reshape(-1)
    many = rng.random(x.size) < nan_frac
    flat[many] = (np.uint32(0x7fc00000) + rng.integers(1, 1000, many.sum()).astype(np.uint32)).view(np.float32)
    idx = rng.choice(x.size, min(x.size, 12), replace=False)
    flat[idx[:4]] = np.array([0x7fc00001, 0xffc00002, 0x7f800003, 0x7fc00004], np.uint32).view(np.float32)[:len(idx[:4])]
    flat[idx[4:8]] = -0.0
    flat[idx[8:10]] = np.inf
    flat[idx[10:]] = -np.inf
    x[x == 0] = np.where(rng.random((x == 0).sum()) < 0.5, -0.0, 0.0).astype(np.float32)
    return x


ARGMAX_CASES = {**{f"fast_{k}": v for k, v in FAST_POOLS.items()},
                **{k: CASES[k] for k in ("maxpool_3x3_s2_p1", "window_over_every_dim", "rank1", "global_pool",
                                         "padding_wider_than_window")}}


@pytest.mark.parametrize("nan_frac", [0.0, 0.3])
@pytest.mark.parametrize("isa", ["active", "ref"])
@pytest.mark.parametrize("name", list(ARGMAX_CASES))
def test_argmax_pool_matches_reduce_window_and_select_and_scatter_add(name, isa, nan_frac):
    """The forward's y is reduce_window max's, bit for bit (the last NaN's payload), and
    the gradient from the kept selection is select_and_scatter_add's (the first maximum,
    the first NaN), on the AVX-512 kernels and on the reference loops."""
    from podlet import _core
    case = ARGMAX_CASES[name]
    shape, wd, ws, pad = case
    x = _tricky_pool_input(shape, seed=11, nan_frac=nan_frac)
    src = np.random.default_rng(12).standard_normal(_out_shape(shape, wd, ws, pad)).astype(np.float32)
    src.reshape(-1)[:3] = -0.0
    was = _core.active_isa()
    if isa == "ref":
        _core.set_isa("ref")
    try:
        before = _core.maxpool_select_fast_calls()
        y, sel = bind("reduce_window_argmax", as_podlet(x), **wattrs(case))
        dx = bind("scatter_add_at_argmax", as_podlet(src), sel, **wattrs(case, operand_shape=list(shape)))
        fast = _core.maxpool_select_fast_calls() - before
        want_y = bind("reduce_window", as_podlet(x), **wattrs(case, computation="max"))
        want_dx = bind("select_and_scatter_add", as_podlet(src), as_podlet(x), **wattrs(case))
    finally:
        _core.set_isa(was)
    assert np.asarray(sel).dtype == np.uint8 and np.asarray(sel).shape == np.asarray(y).shape
    assert np.asarray(y).tobytes() == np.asarray(want_y).tobytes()
    assert np.asarray(dx).tobytes() == np.asarray(want_dx).tobytes()
    takes_fast = isa == "active" and name.startswith("fast_") and "avx512" in _core.cpu_info()["available_isas"] \
        and np.asarray(y).size > 0
    assert fast == (2 if takes_fast else 0)


def test_argmax_pool_errors():
    x = as_podlet(np.zeros((1, 16, 16, 2), np.float32))
    with pytest.raises(podlet.PodletError, match="window of 144 elements; the selection holds window positions up to 127"):
        bind("reduce_window_argmax", x, window_dimensions=[1, 12, 12, 1])
    _, sel = bind("reduce_window_argmax", x, window_dimensions=[1, 2, 2, 1], window_strides=[1, 2, 2, 1])
    with pytest.raises(podlet.DTypeError, match="sel must be uint8"):
        bind("scatter_add_at_argmax", as_podlet(np.zeros((1, 8, 8, 2), np.float32)),
             as_podlet(np.zeros((1, 8, 8, 2), np.float32)), window_dimensions=[1, 2, 2, 1],
             window_strides=[1, 2, 2, 1], operand_shape=[1, 16, 16, 2])
    with pytest.raises(podlet.ShapeError, match=r"expected \(1, 8, 8, 2\)"):
        bind("scatter_add_at_argmax", as_podlet(np.zeros((1, 7, 8, 2), np.float32)), sel,
             window_dimensions=[1, 2, 2, 1], window_strides=[1, 2, 2, 1], operand_shape=[1, 16, 16, 2])


def _pool_step():
    """A stem-like step: max-pool of a ReLU, its gradient, and a second max-pool of the
    same x with another window (its own selection)."""
    def loss(x):
        h = podlet.nn.relu(x)
        a = podlet.nn.max_pool(h, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
        b = podlet.nn.max_pool(h, (2, 2), strides=(2, 2))
        return (a * a).sum() + (b * 3.0).sum()
    return podlet.jit(podlet.value_and_grad(loss))


def test_pool_selection_pass_keeps_the_forward_selection(monkeypatch):
    from podlet import _core
    from podlet._src import fusion
    x = _tricky_pool_input((2, 14, 12, 16), seed=5)
    x[np.isnan(x)] = 1.0  # a NaN in the loss makes every gradient NaN: nothing left to compare
    step = _pool_step()
    lowered = step.lower(as_podlet(x))
    g = fusion.executable_graph(lowered)
    prims = [l.split("=")[-1].strip().split("[")[0].split("(")[0] for l in g.dump().splitlines()]
    text = g.dump()
    assert _core.pool_selection_stats(lowered.graph) == 2
    assert text.count("reduce_window_argmax") == 2 and text.count("scatter_add_at_argmax") == 2, prims
    assert "select_and_scatter_add" not in text and "reduce_window(" not in text
    before = _core.maxpool_select_fast_calls()
    l1, g1 = step(as_podlet(x))
    if "avx512" in _core.cpu_info()["available_isas"]:
        assert _core.maxpool_select_fast_calls() - before == 4
    monkeypatch.setenv("PODLET_FUSION", "0")
    l0, g0 = _pool_step()(as_podlet(x))
    assert np.asarray(l1).tobytes() == np.asarray(l0).tobytes()
    assert np.asarray(g1).tobytes() == np.asarray(g0).tobytes()
