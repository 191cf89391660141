"""Forward mode (podlet.jvp / linearize / jacfwd / jacrev / hessian / linear_transpose):
against jax (the oracle, with identical definitions) and float64 central finite
differences; eager, under jit, under pmap, and composed with grad."""
import jax
import jax.numpy as jnp_jax
import numpy as np
import pytest

import podlet
import podlet.numpy as pnp
from podlet import lax as plax


@pytest.fixture(autouse=True, scope="module")
def _x64():
    jax.config.update("jax_enable_x64", True)
    podlet.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", False)
    podlet.config.update("jax_enable_x64", False)


def _P(x):
    return podlet._core.Array.from_numpy(np.array(x, order="C", copy=True), copy=True)


def _np(x):
    return np.asarray(x)


# Each function is written once against a module pair (numpy-like, lax-like).
def _fns(m, lax):
    def conv(x, w):
        return lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def maxpool(x):
        return lax.reduce_window(x, -m.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")

    def softmax(x):
        e = m.exp(x - m.max(x, axis=-1, keepdims=True))
        return e / m.sum(e, axis=-1, keepdims=True)

    return {
        "tanh": (lambda x: m.tanh(x) * 2.0, [(3, 4)]),
        "exp_log": (lambda x: m.log(m.exp(x) + 1.0) * x, [(5,)]),
        "dot": (lambda a, b: m.dot(a, b), [(3, 4), (4, 2)]),
        "dot_nonlinear": (lambda a, b: m.sin(m.dot(a, m.tanh(b))), [(2, 3), (3, 3)]),
        "conv": (lambda x, w: m.tanh(conv(x, w)), [(1, 5, 5, 2), (3, 3, 2, 3)]),
        "reductions": (lambda x: m.stack([m.sum(x ** 2, axis=0), m.max(x, axis=0), m.mean(m.sin(x), axis=0)]),
                       [(4, 3)]),
        "prod": (lambda x: m.prod(x, axis=1), [(3, 4)]),
        "max_pool": (lambda x: maxpool(x * x), [(1, 4, 4, 2)]),
        "softmax": (softmax, [(2, 5)]),
        "indexing": (lambda x: x[1:, ::2] * x[0, 1] + m.take(x, m.array([2, 0, 2]), axis=1).sum(), [(3, 4)]),
        "sqrt_div": (lambda x, y: m.sqrt(x * x + 1.0) / (y * y + 2.0), [(4,), (4,)]),
        "logistic_where": (lambda x: m.where(x > 0, x ** 3, 1.0 / (1.0 + m.exp(-x))), [(6,)]),
        "cumsum": (lambda x: m.cumsum(m.sin(x), axis=0), [(5, 2)]),
        "broadcast_transpose": (lambda x, b: (x.T + b) ** 2, [(3, 2), (3,)]),
    }


PFNS = _fns(pnp, plax)
JFNS = _fns(jnp_jax, jax.lax)
NAMES = sorted(PFNS)


def _args(name, seed=0):
    rng = np.random.default_rng(seed)
    args = [rng.standard_normal(s) for s in PFNS[name][1]]
    if name == "max_pool":  # distinct window values: max is differentiable there
        args = [rng.permutation(np.arange(np.prod(s), dtype=np.float64)).reshape(s) / 7.0 + 0.1
                for s in PFNS[name][1]]
    return args


def _tangents(args, seed=1):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(a.shape) for a in args]


@pytest.mark.parametrize("name", NAMES)
def test_jvp_matches_jax_and_finite_differences(name):
    args, ts = _args(name), _tangents(_args(name))
    y, t = podlet.jvp(PFNS[name][0], tuple(_P(a) for a in args), tuple(_P(v) for v in ts))
    jy, jt = jax.jvp(JFNS[name][0], tuple(args), tuple(ts))
    np.testing.assert_allclose(_np(y), jy, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(_np(t), jt, rtol=1e-9, atol=1e-10)
    eps = 1e-6
    f = JFNS[name][0]
    fd = (np.asarray(f(*[a + eps * v for a, v in zip(args, ts)])) -
          np.asarray(f(*[a - eps * v for a, v in zip(args, ts)]))) / (2 * eps)
    np.testing.assert_allclose(_np(t), fd, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["tanh", "conv", "max_pool", "softmax", "indexing", "prod"])
def test_jvp_under_jit(name):
    args, ts = _args(name), _tangents(_args(name))
    f = PFNS[name][0]
    n = len(args)

    @podlet.jit
    def g(*xs):
        return podlet.jvp(f, xs[:n], xs[n:])

    y, t = g(*[_P(a) for a in args + ts])
    jy, jt = jax.jvp(JFNS[name][0], tuple(args), tuple(ts))
    np.testing.assert_allclose(_np(y), jy, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(_np(t), jt, rtol=1e-9, atol=1e-10)


def test_jvp_inside_pmap():
    n = podlet.local_device_count()
    rng = np.random.default_rng(3)
    x, v = rng.standard_normal((n, 3)), rng.standard_normal((n, 3))

    def f(x):
        return pnp.tanh(x) * pnp.sum(x ** 2)

    def jf(x):
        return jnp_jax.tanh(x) * jnp_jax.sum(x ** 2)

    y, t = podlet.pmap(lambda a, b: podlet.jvp(f, (a,), (b,)))(x, v)
    jy, jt = jax.vmap(lambda a, b: jax.jvp(jf, (a,), (b,)))(x, v)
    np.testing.assert_allclose(_np(y), jy, rtol=1e-12)
    np.testing.assert_allclose(_np(t), jt, rtol=1e-10)


def test_jvp_pytrees_has_aux_and_python_scalars():
    def make(m):
        def f(p, s):
            out = {"a": m.sin(p["w"]) * s, "b": (p["w"] @ p["v"], p["v"] ** 2)}
            return out, {"aux": m.sum(p["v"])}
        return f

    rng = np.random.default_rng(0)
    p = {"w": rng.standard_normal((2, 3)), "v": rng.standard_normal(3)}
    tp = {"w": rng.standard_normal((2, 3)), "v": rng.standard_normal(3)}
    y, t, aux = podlet.jvp(make(pnp), (podlet.tree_util.tree_map(_P, p), 2.0),
                           (podlet.tree_util.tree_map(_P, tp), 0.5), has_aux=True)
    jy, jt, jaux = jax.jvp(make(jnp_jax), (p, 2.0), (tp, 0.5), has_aux=True)
    for a, b in zip(jax.tree_util.tree_leaves((y, t, aux)), jax.tree_util.tree_leaves((jy, jt, jaux))):
        np.testing.assert_allclose(_np(a), b, rtol=1e-12, atol=1e-12)
    assert podlet.tree_util.tree_structure(t) == podlet.tree_util.tree_structure(
        podlet.tree_util.tree_map(lambda x: 0, jt))


def test_jvp_integer_inputs_and_outputs():
    f = lambda x, i: (x * i, i * 2)
    x, i = np.arange(3.0), np.arange(3, dtype=np.int32)
    f0 = np.zeros(3, dtype=podlet._src.forward.float0)
    y, t = podlet.jvp(f, (_P(x), _P(i)), (_P(np.ones(3)), f0))
    jy, jt = jax.jvp(f, (x, i), (np.ones(3), np.zeros(3, jax.dtypes.float0)))
    np.testing.assert_allclose(_np(t[0]), jt[0])
    assert t[1].dtype == jt[1].dtype and t[1].shape == jt[1].shape
    with pytest.raises(TypeError, match="float0"):
        podlet.jvp(f, (_P(x), _P(i)), (_P(np.ones(3)), _P(np.ones(3))))
    with pytest.raises(TypeError, match="float0"):
        podlet.jvp(f, (_P(x), _P(i)), (_P(np.ones(3)), _P(np.ones(3, np.int32))))


def test_jvp_argument_errors_like_jax():
    f = lambda x: x * 2
    with pytest.raises(TypeError, match="must be tuples or lists"):
        podlet.jvp(f, _P(np.ones(3)), _P(np.ones(3)))
    with pytest.raises(TypeError, match="same tree structure"):
        podlet.jvp(f, [_P(np.ones(3))], [_P(np.ones(3)), 1.0])
    with pytest.raises(ValueError, match="different primal and tangent shapes"):
        podlet.jvp(f, (_P(np.ones(3)),), (_P(np.ones(2)),))
    with pytest.raises(TypeError, match="dtypes must be equal"):
        podlet.jvp(f, (_P(np.ones(3)),), (_P(np.ones(3, np.float32)),))


def test_linearize():
    def make(m):
        return lambda x, y: m.sin(x) * m.exp(y)
    x, y = np.linspace(-1, 1, 4), np.linspace(0, 2, 4)
    out, f_jvp = podlet.linearize(make(pnp), _P(x), _P(y))
    jout, jf = jax.linearize(make(jnp_jax), x, y)
    np.testing.assert_allclose(_np(out), jout, rtol=1e-12)
    for seed in range(2):
        a, b = _tangents([x, y], seed)
        np.testing.assert_allclose(_np(f_jvp(_P(a), _P(b))), jf(a, b), rtol=1e-10)


def _tree_close(got, want, rtol=1e-9, atol=1e-10):
    gl, gt = jax.tree_util.tree_flatten(got)
    wl, wt = jax.tree_util.tree_flatten(want)
    assert len(gl) == len(wl), (gt, wt)
    for a, b in zip(gl, wl):
        assert np.shape(a) == np.shape(b)
        np.testing.assert_allclose(_np(a), np.asarray(b), rtol=rtol, atol=atol)
    assert podlet.tree_util.tree_structure(podlet.tree_util.tree_map(lambda x: 0, got)) == \
        podlet.tree_util.tree_structure(jax.tree_util.tree_map(lambda x: 0, want))


def _tree_fn(m):
    def f(p, x):
        h = m.tanh(x @ p["w"] + p["b"])
        return {"out": h.sum(axis=0), "sq": (p["b"] ** 2, m.sin(x))}
    return f


def _tree_args(seed=0):
    rng = np.random.default_rng(seed)
    return {"w": rng.standard_normal((3, 2)), "b": rng.standard_normal(2)}, rng.standard_normal((4, 3))


@pytest.mark.parametrize("jac", ["jacfwd", "jacrev"])
@pytest.mark.parametrize("argnums", [0, 1, (0, 1)])
def test_jacobians_pytrees(jac, argnums):
    p, x = _tree_args()
    got = getattr(podlet, jac)(_tree_fn(pnp), argnums=argnums)(podlet.tree_util.tree_map(_P, p), _P(x))
    want = getattr(jax, jac)(_tree_fn(jnp_jax), argnums=argnums)(p, x)
    _tree_close(got, want)


@pytest.mark.parametrize("jac", ["jacfwd", "jacrev"])
def test_jacobians_under_jit_and_has_aux(jac):
    def make(m):
        return lambda x: (m.sin(x) * x[0], {"n": m.sum(x)})
    x = np.linspace(0.1, 1.0, 5)
    got = podlet.jit(getattr(podlet, jac)(make(pnp), has_aux=True))(_P(x))
    want = getattr(jax, jac)(make(jnp_jax), has_aux=True)(x)
    _tree_close(got, want)


def test_jacobian_input_dtype_errors():
    with pytest.raises(TypeError, match="jacfwd requires real-valued inputs"):
        podlet.jacfwd(lambda x: x * 2)(_P(np.arange(3, dtype=np.int32)))
    with pytest.raises(TypeError, match="jacrev requires real- or complex-valued inputs"):
        podlet.jacrev(lambda x: x * 2)(_P(np.arange(3, dtype=np.int32)))
    with pytest.raises(TypeError, match="jacrev requires real-valued outputs"):
        podlet.jacrev(lambda x: x.astype(np.int32))(_P(np.ones(3)))


@pytest.mark.parametrize("name", ["tanh_quartic", "softmax_ce", "two_args", "prod", "max_pool"])
def test_hessian_matches_jax(name):
    def make(m, lax):
        def ce(x):
            e = m.exp(x - m.max(x))
            return -m.log(e[1] / m.sum(e))
        return {
            "tanh_quartic": (lambda x: m.sum(m.tanh(x) * x ** 4), 0, [(4,)]),
            "softmax_ce": (ce, 0, [(5,)]),
            "two_args": (lambda x, y: m.sum(m.sin(x)[:, None] * m.exp(y)[None, :]), (0, 1), [(3,), (2,)]),
            "prod": (lambda x: m.prod(x), 0, [(4,)]),
            "max_pool": (lambda x: m.sum(lax.reduce_window(x * x * x, -m.inf, lax.max, (2, 2), (2, 2), "VALID")),
                         0, [(4, 4)]),
        }[name]
    fp, argnums, shapes = make(pnp, plax)
    fj, _, _ = make(jnp_jax, jax.lax)
    rng = np.random.default_rng(4)
    args = [rng.standard_normal(s) for s in shapes]
    got = podlet.hessian(fp, argnums=argnums)(*[_P(a) for a in args])
    want = jax.hessian(fj, argnums=argnums)(*args)
    _tree_close(got, want, rtol=1e-8, atol=1e-9)


def test_linear_transpose():
    def make(m):
        return lambda x, y: {"a": 2.0 * x + y[:3], "b": m.cumsum(y) * 3.0}
    x, y = np.ones(3), np.ones(5)
    tp = podlet.linear_transpose(make(pnp), _P(x), podlet.ShapeDtypeStruct((5,), np.float64))
    tj = jax.linear_transpose(make(jnp_jax), x, y)
    rng = np.random.default_rng(0)
    ct = {"a": rng.standard_normal(3), "b": rng.standard_normal(5)}
    _tree_close(tp({"a": _P(ct["a"]), "b": _P(ct["b"])}), tj(ct), rtol=1e-12)
    with pytest.raises(TypeError, match="cotangent tree does not match"):
        tp((_P(ct["a"]),))
    with pytest.raises(TypeError, match="cotangent type does not match"):
        tp({"a": _P(np.ones(2)), "b": _P(ct["b"])})


def test_jvp_of_grad_and_grad_of_jvp():
    def make(m, grad, jvp):
        def loss(x):
            return m.sum(m.tanh(x) ** 2 * m.exp(x[0]))

        def hvp(x, v):  # forward-over-reverse
            return jvp(grad(loss), (x,), (v,))[1]

        def g_of_jvp(x, v):  # reverse-over-forward
            return grad(lambda x: m.sum(jvp(loss, (x,), (v,))[1] ** 2))(x)
        return hvp, g_of_jvp

    ph, pg = make(pnp, podlet.grad, podlet.jvp)
    jh, jg = make(jnp_jax, jax.grad, jax.jvp)
    rng = np.random.default_rng(2)
    x, v = rng.standard_normal(4), rng.standard_normal(4)
    np.testing.assert_allclose(_np(ph(_P(x), _P(v))), jh(x, v), rtol=1e-10)
    np.testing.assert_allclose(_np(pg(_P(x), _P(v))), jg(x, v), rtol=1e-10)
    np.testing.assert_allclose(_np(podlet.jit(ph)(_P(x), _P(v))), jh(x, v), rtol=1e-10)


def test_vmap_of_jvp_and_jvp_of_vmap():
    f = lambda x: pnp.sin(x) * x
    jf = lambda x: jnp_jax.sin(x) * x
    rng = np.random.default_rng(7)
    x, v = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    got = podlet.vmap(lambda a, b: podlet.jvp(f, (a,), (b,))[1])(_P(x), _P(v))
    np.testing.assert_allclose(_np(got), jax.vmap(lambda a, b: jax.jvp(jf, (a,), (b,))[1])(x, v), rtol=1e-12)
    got = podlet.jvp(podlet.vmap(f), (_P(x),), (_P(v),))[1]
    np.testing.assert_allclose(_np(got), jax.jvp(jax.vmap(jf), (x,), (v,))[1], rtol=1e-12)


def test_float32_jvp():
    x = np.linspace(-1, 1, 6).astype(np.float32)
    y, t = podlet.jvp(lambda a: pnp.tanh(a) * 3.0, (_P(x),), (_P(np.ones(6, np.float32)),))
    jy, jt = jax.jvp(lambda a: jnp_jax.tanh(a) * 3.0, (x,), (np.ones(6, np.float32),))
    assert t.dtype == np.float32
    np.testing.assert_allclose(_np(t), jt, rtol=1e-5)


def test_cumprod_second_order():
    """cumprod's VJP rule (reduce_prod's VJP uses cumprod, so its hessian needs it)."""
    from podlet._src.core import bind
    x = np.array([0.3, -0.7, 1.1, 0.45, -1.9])
    for rev in (0, 1):
        f = lambda v: pnp.sum(bind("cumprod", v, axis=0, reverse=rev) * pnp.arange(5.0))
        fj = lambda v: jnp_jax.sum(jax.lax.cumprod(v, 0, reverse=bool(rev)) * jnp_jax.arange(5.0))
        np.testing.assert_allclose(_np(podlet.grad(f)(_P(x))), jax.grad(fj)(x), rtol=1e-12)
        np.testing.assert_allclose(_np(podlet.hessian(f)(_P(x))), jax.hessian(fj)(x), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(_np(podlet.jvp(f, (_P(x),), (_P(np.ones(5)),))[1]),
                                   jax.jvp(fj, (x,), (np.ones(5),))[1], rtol=1e-12)


def _cf_fns(m, lax):
    return {
        "scan": lambda x: lax.scan(lambda c, a: (m.sin(c) * a, c * a), x[0], x)[1],
        "cond": lambda x: lax.cond(x[0] > 0, lambda v: m.sin(v), lambda v: v ** 2, x),
        "fori_loop": lambda x: lax.fori_loop(0, 3, lambda i, v: m.tanh(v) * 1.5, x),
    }


@pytest.mark.parametrize("name", ["scan", "cond", "fori_loop"])
def test_forward_mode_through_control_flow(name):
    fp, fj = _cf_fns(pnp, plax)[name], _cf_fns(jnp_jax, jax.lax)[name]
    x, v = np.array([0.3, -0.7, 1.1]), np.array([1.0, 0.5, -2.0])
    np.testing.assert_allclose(_np(podlet.jvp(fp, (_P(x),), (_P(v),))[1]), jax.jvp(fj, (x,), (v,))[1], rtol=1e-12)
    np.testing.assert_allclose(_np(podlet.jacfwd(fp)(_P(x))), jax.jacfwd(fj)(x), rtol=1e-12, atol=1e-15)
