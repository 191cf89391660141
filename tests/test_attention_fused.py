"""The fused attention primitive (cpp/podlet/prims/attention.cc, kernels/attention_impl.h)
against jax.nn.dot_product_attention (values and gradients), float64 finite differences,
and itself: eager == jit, vmap == a loop, the same bits for any thread count and on
every ISA build; Flax's attention and MultiHeadDotProductAttention on it against Flax."""
import jax
import jax.numpy as jjnp
import ml_dtypes
import numpy as np
import pytest

import flax.linen as fnn

import podlet
import podlet.numpy as jnp
from podlet import _core, nn
from podlet._src.core import bind

BF16 = ml_dtypes.bfloat16
FAST_ISAS = [i for i in _core.cpu_info()["available_isas"] if i in ("avx2", "avx512")]


@pytest.fixture(autouse=True)
def restore_isa_and_threads():
    isa, n = _core.active_isa(), podlet.config.num_threads
    yield
    _core.set_isa(isa)
    podlet.config.update("num_threads", n)


def _data(B=2, T=37, S=70, N=4, K=2, H=16, seed=0, dtype=np.float32):
    rs = np.random.RandomState(seed)
    q, k, v = (rs.normal(size=s).astype(dtype) for s in ((B, T, N, H), (B, S, K, H), (B, S, K, H)))
    return rs, q, k, v


# Each case: keyword arguments of jax.nn.dot_product_attention built from (rs, B, T, S, N).
CASES = {
    "plain": lambda rs, B, T, S, N: {},
    "causal": lambda rs, B, T, S, N: {"is_causal": True},
    "scale": lambda rs, B, T, S, N: {"scale": 0.7},
    "bias_heads": lambda rs, B, T, S, N: {"bias": rs.normal(size=(1, N, T, S)).astype(np.float32)},
    "bias_batch_keys": lambda rs, B, T, S, N: {"bias": rs.normal(size=(B, 1, 1, S)).astype(np.float32)},
    "mask": lambda rs, B, T, S, N: {"mask": rs.rand(B, 1, T, S) > 0.3},
    "seq_lengths": lambda rs, B, T, S, N: {"query_seq_lengths": np.array([T - 5, T][:B], np.int32),
                                           "key_value_seq_lengths": np.array([S, 9][:B], np.int32)},
    "window": lambda rs, B, T, S, N: {"local_window_size": (3, 5)},
    "everything": lambda rs, B, T, S, N: {"is_causal": True, "bias": rs.normal(size=(B, N, T, S)).astype(np.float32),
                                          "mask": rs.rand(1, N, T, S) > 0.2,
                                          "query_seq_lengths": np.array([T, 3][:B], np.int32),
                                          "key_value_seq_lengths": np.array([S - 1, S][:B], np.int32)},
}
SHAPES = {"gqa": dict(B=2, T=37, S=70, N=4, K=2, H=16), "mqa_long": dict(B=1, T=130, S=130, N=2, K=1, H=8),
          "one_query": dict(B=2, T=1, S=65, N=2, K=2, H=32),
          "odd_head": dict(B=2, T=21, S=19, N=2, K=1, H=7)}  # odd H: the kernels' padded last pair / lane


def _cos(h):
    return np.cos(np.arange(h)).astype(np.float32)


@pytest.mark.parametrize("shape", SHAPES, ids=list(SHAPES))
@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_matches_jax_values_and_gradients(case, shape):
    sh = SHAPES[shape]
    rs, q, k, v = _data(**sh)
    kw = CASES[case](rs, sh["B"], sh["T"], sh["S"], sh["N"])
    want = jax.nn.dot_product_attention(q, k, v, **kw)
    got = nn.dot_product_attention(q, k, v, **kw)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=2e-6)
    w = _cos(sh["H"])
    names = ["q", "k", "v"] + (["bias"] if "bias" in kw else [])

    def loss(mod, nn_fn):
        def f(q, k, v, *bias):
            kk = dict(kw, bias=bias[0]) if bias else kw
            return (nn_fn(q, k, v, **kk) * w).sum()
        return f
    args = (q, k, v) + ((kw["bias"],) if "bias" in kw else ())
    argn = tuple(range(len(args)))
    jg = jax.grad(loss(jjnp, jax.nn.dot_product_attention), argnums=argn)(*args)
    pg = podlet.grad(loss(jnp, nn.dot_product_attention), argnums=argn)(*args)
    for name, a, b in zip(names, pg, jg):
        b = np.asarray(b)
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-5, atol=1e-5 * np.abs(b).max(), err_msg=name)


def test_fused_node_is_the_graph():
    rs, q, k, v = _data()
    jaxpr = str(podlet.make_jaxpr(lambda q, k, v: nn.dot_product_attention(q, k, v, is_causal=True))(q, k, v))
    assert "dot_product_attention[" in jaxpr and "dot_general" not in jaxpr and "exp" not in jaxpr
    g = str(podlet.make_jaxpr(podlet.grad(lambda q: nn.dot_product_attention(q, k, v).sum()))(q))
    assert "dot_product_attention_bwd" in g


def test_bf16_close_to_float64_and_jax():
    rs, q, k, v = _data(dtype=np.float32)
    kw = CASES["everything"](rs, 2, 37, 70, 4)
    q16, k16, v16 = (x.astype(BF16) for x in (q, k, v))
    got = np.asarray(nn.dot_product_attention(q16, k16, v16, **kw)).astype(np.float64)
    exact = np.asarray(nn.dot_product_attention(*(x.astype(np.float64) for x in (q16, k16, v16)),
                                                **{a: (b.astype(np.float64) if a == "bias" else b)
                                                   for a, b in kw.items()}))
    want = np.asarray(jax.nn.dot_product_attention(q16, k16, v16, **kw)).astype(np.float64)
    assert np.asarray(nn.dot_product_attention(q16, k16, v16, **kw)).dtype == BF16
    # the fused kernel keeps f32 probabilities (jax rounds them to bf16): at least as close
    err, jerr = np.abs(got - exact).max(), np.abs(want - exact).max()
    assert err <= 1.05 * jerr + 1e-3, (err, jerr)
    gq = podlet.grad(lambda q: (nn.dot_product_attention(q, k16, v16, **kw).astype(jnp.float32) ** 2).sum())(q16)
    jq = jax.grad(lambda q: (jax.nn.dot_product_attention(q, k16, v16, **kw).astype(jjnp.float32) ** 2).sum())(q16)
    gq, jq = np.asarray(gq).astype(np.float64), np.asarray(jq).astype(np.float64)
    assert np.abs(gq - jq).max() <= 0.05 * np.abs(jq).max()


@pytest.mark.parametrize("case", ["plain", "everything", "window"])
def test_float64_vjp_against_finite_differences(case):
    rs, q, k, v = _data(B=2, T=7, S=9, N=2, K=1, H=4, dtype=np.float64)
    kw = CASES[case](rs, 2, 7, 9, 2)
    if "bias" in kw:
        kw["bias"] = kw["bias"].astype(np.float64)
    ct = rs.normal(size=q.shape)
    args = [q, k, v] + ([kw.pop("bias")] if "bias" in kw else [])
    podlet.config.update("enable_x64", True)  # float64 arrays stay float64
    try:
        _check_fd(args, kw, ct, rs)
    finally:
        podlet.config.update("enable_x64", False)


def _check_fd(args, kw, ct, rs):

    def f(*xs):
        extra = {"bias": xs[3]} if len(xs) > 3 else {}
        out = nn.dot_product_attention(*xs[:3], **kw, **extra)
        assert out.dtype == np.float64
        return (out * ct).sum()
    grads = podlet.grad(f, argnums=tuple(range(len(args))))(*args)
    eps = 1e-6
    for i, (a, g) in enumerate(zip(args, grads)):
        d = rs.normal(size=a.shape)
        plus = [x if j != i else x + eps * d for j, x in enumerate(args)]
        minus = [x if j != i else x - eps * d for j, x in enumerate(args)]
        fd = (float(f(*plus)) - float(f(*minus))) / (2 * eps)
        np.testing.assert_allclose(float((np.asarray(g) * d).sum()), fd, rtol=1e-6, atol=1e-9, err_msg=str(i))


def test_eager_equals_jit_and_vmap_equals_a_loop():
    rs, q, k, v = _data(B=3, T=20, S=33)
    kw = CASES["everything"](rs, 3, 20, 33, 4)
    kw["query_seq_lengths"] = np.array([20, 3, 11], np.int32)
    kw["key_value_seq_lengths"] = np.array([32, 33, 2], np.int32)
    f = lambda q, k, v: nn.dot_product_attention(q, k, v, **kw)  # noqa: E731
    e = np.asarray(f(q, k, v))
    assert e.tobytes() == np.asarray(podlet.jit(f)(q, k, v)).tobytes()
    # vmap over a leading axis: each element is its own 3-D [T, N, H] call (jax.nn's rank-3 form)
    g = lambda q, k, v: nn.dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    qs, ks, vs = q, k, v
    batched = np.asarray(podlet.vmap(g)(qs, ks, vs))
    loop = np.stack([np.asarray(g(qs[i], ks[i], vs[i])) for i in range(3)])
    assert batched.tobytes() == loop.tobytes()
    np.testing.assert_allclose(batched, np.asarray(jax.vmap(lambda a, b, c: jax.nn.dot_product_attention(
        a, b, c, is_causal=True))(qs, ks, vs)), rtol=1e-5, atol=2e-6)


def _fwd_bwd(q, k, v, kw):
    out, vjp = podlet.vjp(lambda q, k, v: nn.dot_product_attention(q, k, v, **kw), q, k, v)
    grads = vjp(jnp.asarray(np.cos(np.arange(out.size)).reshape(out.shape).astype(out.dtype)))
    return [np.asarray(x).tobytes() for x in (out, *grads)]


# H = 24: the register blocks' 16- and 8-column paths; H = 20 also the plain loop of the
# last 4 columns; S = 197: a last key tile of 5.
@pytest.mark.parametrize("shape", [dict(B=2, T=45, S=140, N=4, K=2, H=24), dict(B=1, T=70, S=197, N=2, K=1, H=20)],
                         ids=["h24", "h20"])
@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_same_bits_for_any_thread_count_and_every_isa(dtype, shape):
    rs, q, k, v = _data(**shape)
    q, k, v = (x.astype(dtype) for x in (q, k, v))
    kw = CASES["everything"](rs, shape["B"], shape["T"], shape["S"], shape["N"])
    _core.set_isa("ref")
    podlet.config.update("num_threads", 1)
    ref = _fwd_bwd(q, k, v, kw)
    assert _core.attention_last_isa() == "ref"
    for isa in ["ref"] + FAST_ISAS:
        for threads in (1, 2):
            _core.set_isa(isa)
            podlet.config.update("num_threads", threads)
            assert _fwd_bwd(q, k, v, kw) == ref, (isa, threads)
            assert _core.attention_last_isa() == isa


def test_fully_masked_rows_average_the_values_like_jax():
    rs, q, k, v = _data(B=1, T=6, S=8, N=2, K=2, H=4)
    mask = np.ones((1, 1, 6, 8), bool)
    mask[..., 2, :] = False  # row 2 sees nothing
    kw = {"mask": mask, "key_value_seq_lengths": np.array([8], np.int32)}
    got, want = nn.dot_product_attention(q, k, v, **kw), jax.nn.dot_product_attention(q, k, v, **kw)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(got)[0, 2], v[0].mean(0), rtol=1e-5)
    f = lambda fn: lambda k, v: (fn(q, k, v, **kw) ** 2).sum()  # noqa: E731
    for a, b in zip(podlet.grad(f(nn.dot_product_attention), (0, 1))(k, v),
                    jax.grad(f(jax.nn.dot_product_attention), (0, 1))(k, v)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)


def test_return_residual_and_rank3_like_jax():
    rs, q, k, v = _data(B=1, T=9, S=11, N=2, K=2, H=8)
    got = nn.dot_product_attention(q[0], k[0], v[0], return_residual=True, is_causal=True)
    want = jax.nn.dot_product_attention(q[0], k[0], v[0], return_residual=True, is_causal=True)
    for a, b in zip(got, want):
        assert a.shape == b.shape
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)  # a row's bias: ~0


def test_errors_match_jax():
    rs, q, k, v = _data(B=2, T=5, S=6, N=4, K=2, H=8)
    bad = [
        (dict(), (q, k, v[:, :5])),
        (dict(), (q, k[:, :, :, :4], v[:, :, :, :4])),
        (dict(), (q[:, :, :3], k, v)),
        (dict(mask=np.ones((2, 1, 5, 6), np.float32)), (q, k, v)),
        (dict(query_seq_lengths=np.array([5, 5], np.uint32)), (q, k, v)),
        (dict(key_value_seq_lengths=np.array([5], np.int32)), (q, k, v)),
        (dict(), (q.astype(BF16), k, v)),
    ]
    for kw, args in bad:
        with pytest.raises(ValueError) as jerr:
            jax.nn.dot_product_attention(*args, **kw)
        with pytest.raises(ValueError) as perr:
            nn.dot_product_attention(*args, **kw)
        assert str(perr.value) == str(jerr.value)
    with pytest.raises(RuntimeError, match="cuDNN"):
        nn.dot_product_attention(q, k, v, implementation="cudnn")
    with pytest.raises(TypeError, match="cannot be combined"):
        nn.dot_product_attention(q, k, v, dropout_rate=0.1, is_causal=True)
    with pytest.raises(podlet.ShapeError, match="must broadcast to"):
        bind("dot_product_attention", jnp.asarray(q), jnp.asarray(k), jnp.asarray(v),
             jnp.ones((2, 3, 5, 6)), scale=1.0, has_bias=1)


# ---- Flax's form and MultiHeadDotProductAttention -----------------------------------------
def test_flax_form_matches_flax_and_is_fused():
    rs, q, k, v = _data(B=2, T=9, S=11, N=4, K=4, H=8)
    mask = rs.rand(2, 1, 9, 11) > 0.4
    bias = rs.normal(size=(1, 4, 9, 11)).astype(np.float32)
    got = nn.dot_product_attention(q, k, v, bias=bias, mask=mask)
    want = fnn.dot_product_attention(q, k, v, bias=bias, mask=mask)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=2e-6)
    jaxpr = str(podlet.make_jaxpr(lambda q: nn.dot_product_attention(q, k, v, mask=mask))(q))
    assert "dot_product_attention[" in jaxpr
    before = podlet.config.fused_attention
    try:
        podlet.config.update("fused_attention", False)
        jaxpr = str(podlet.make_jaxpr(lambda q: nn.dot_product_attention(q, k, v, mask=mask))(q))
        assert "dot_product_attention[" not in jaxpr
    finally:
        podlet.config.update("fused_attention", before)


def test_auto_fuses_small_heads_only_and_true_fuses_all():
    """'auto' (the default) fuses where the fused kernel measured faster: Swin's 49-token
    windows and float32 heads of any size, not ViT's 197 tokens in bf16; True fuses every
    Flax-form call; jax.nn's form is always fused."""
    before = podlet.config.fused_attention
    rs = np.random.RandomState(1)

    def fused(T, dtype=BF16):
        q = rs.normal(size=(1, T, 2, 8)).astype(dtype)
        return "dot_product_attention[" in str(podlet.make_jaxpr(lambda q: nn.dot_product_attention(q, q, q))(q))
    try:
        podlet.config.update("fused_attention", "auto")
        assert fused(49) and not fused(197) and fused(197, np.float32) and fused(49, np.float32)
        podlet.config.update("fused_attention", True)
        assert fused(49) and fused(197)
        podlet.config.update("fused_attention", False)
        assert not fused(49) and not fused(197, np.float32)
        q = rs.normal(size=(1, 197, 2, 8)).astype(np.float32)
        assert "dot_product_attention[" in str(podlet.make_jaxpr(
            lambda q: nn.dot_product_attention(q, q, q, is_causal=True))(q))
        with pytest.raises(ValueError, match="fused_attention must be"):
            podlet.config.update("fused_attention", "sometimes")
    finally:
        podlet.config.update("fused_attention", before)


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_multi_head_attention_matches_flax(dropout):
    rs = np.random.RandomState(4)
    x = rs.normal(size=(2, 10, 24)).astype(np.float32)
    mask = fnn.make_causal_mask(np.ones((2, 10)))
    fm = fnn.MultiHeadDotProductAttention(num_heads=4, qkv_features=32, dropout_rate=dropout, deterministic=False)
    pm = nn.MultiHeadDotProductAttention(num_heads=4, qkv_features=32, dropout_rate=dropout, deterministic=False)
    keys = {"params": jax.random.PRNGKey(0), "dropout": jax.random.PRNGKey(1)}
    fv = fm.init(keys, x, mask=mask)
    pkeys = {"params": podlet.random.PRNGKey(0), "dropout": podlet.random.PRNGKey(1)}
    pv = pm.init(pkeys, x, mask=np.asarray(mask))
    for a, b in zip(podlet.tree_util.tree_leaves(pv), jax.tree_util.tree_leaves(fv)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    rngs_p, rngs_f = {"dropout": podlet.random.PRNGKey(2)}, {"dropout": jax.random.PRNGKey(2)}
    got = pm.apply(pv, x, mask=np.asarray(mask), rngs=rngs_p)
    want = fm.apply(fv, x, mask=mask, rngs=rngs_f)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=2e-6)
    jaxpr = str(podlet.make_jaxpr(lambda x: pm.apply(pv, x, mask=np.asarray(mask), rngs=rngs_p))(x))
    # attention-weight dropout needs the weights: then the op-by-op path
    assert ("dot_product_attention[" in jaxpr) == (dropout == 0.0)


def test_sharded_jit_splits_the_fused_attention():
    from podlet.sharding import Mesh, NamedSharding, PartitionSpec as P
    rs, q, k, v = _data(B=4, T=12, S=12, N=2, K=2, H=8)
    mesh = Mesh(np.array(podlet.devices()[:2]), ("data",))
    data = NamedSharding(mesh, P("data"))
    f = lambda q, k, v: (nn.dot_product_attention(q, k, v, is_causal=True) ** 2).mean()  # noqa: E731
    g = podlet.jit(podlet.grad(f, argnums=(0, 1, 2)), in_shardings=(data, data, data))
    assert g.partition_report(q, k, v)["unsplit"] == {}
    for a, b in zip(g(q, k, v), podlet.jit(podlet.grad(f, argnums=(0, 1, 2)))(q, k, v)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("case", ["plain", "everything", "window"])
def test_forward_mode_and_second_order_match_jax(case):
    """jvp and grad-of-grad reach the backward node's own derivative (the attention as
    plain primitives, differentiated twice)."""
    rs, q, k, v = _data(B=2, T=7, S=9, N=4, K=2, H=8)
    kw = CASES[case](rs, 2, 7, 9, 4)
    tq, tk, tv = (rs.normal(size=x.shape).astype(np.float32) for x in (q, k, v))
    f = lambda fn: (lambda q, k, v: fn(q, k, v, **kw))  # noqa: E731
    _, pt = podlet.jvp(f(nn.dot_product_attention), (q, k, v), (tq, tk, tv))
    _, jt = jax.jvp(f(jax.nn.dot_product_attention), (q, k, v), (tq, tk, tv))
    np.testing.assert_allclose(np.asarray(pt), np.asarray(jt), rtol=1e-5, atol=1e-5 * np.abs(np.asarray(jt)).max())

    def gg(fn, grad, np_):
        inner = grad(lambda q, k: (fn(q, k, v, **kw) ** 2).sum(), argnums=(0, 1))
        return lambda q, k: sum((g * np_.cos(x)).sum() for g, x in zip(inner(q, k), (q, k)))
    a = podlet.grad(gg(nn.dot_product_attention, podlet.grad, jnp), argnums=(0, 1))(q, k)
    b = jax.grad(gg(jax.nn.dot_product_attention, jax.grad, jjnp), argnums=(0, 1))(q, k)
    for x, y in zip(a, b):
        y = np.asarray(y)
        np.testing.assert_allclose(np.asarray(x), y, rtol=1e-4, atol=1e-5 * np.abs(y).max())


@pytest.mark.parametrize("bias_shape", [(3, 1, 2, 1, 6), (3, 1, 2, 5, 1)], ids=["keys", "rows"])
def test_grad_of_vmap_with_a_broadcast_bias_matches_jax(bias_shape):
    """The VJP sums the logits' gradient down to the bias's broadcast dims (per element
    (1, N, 1, S) or (1, N, T, 1)), also when the node carries vmap's leading axis."""
    rs = np.random.RandomState(5)
    q = rs.normal(size=(3, 2, 5, 2, 4)).astype(np.float32)
    k = rs.normal(size=(2, 6, 2, 4)).astype(np.float32)
    bias = rs.normal(size=bias_shape).astype(np.float32)

    def f(fn, vmap, grad):
        return grad(lambda q, b: (vmap(lambda q, b: fn(q, k, k, bias=b, is_causal=True))(q, b) ** 2).sum(),
                    argnums=(0, 1))
    for a, b in zip(f(nn.dot_product_attention, podlet.vmap, podlet.grad)(q, bias),
                    f(jax.nn.dot_product_attention, jax.vmap, jax.grad)(q, bias)):
        assert a.shape == b.shape
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)  # a row's bias: ~0


# ---- bf16 on pair products (kernels/attention_pairs_impl.h) ----------------------------
HAS_BF16_PAIRS = "avx512bf16" in _core.cpu_info()["available_isas"]
PAIR_SHAPES = {"gqa_odd_h": dict(B=2, T=37, S=70, N=4, K=2, H=20), "swin_window": dict(B=2, T=49, S=49, N=3, K=3, H=32),
               "vit": dict(B=1, T=197, S=197, N=2, K=2, H=64), "long_keys": dict(B=2, T=67, S=131, N=2, K=1, H=16),
               # an odd head size: every row operand padded with a zero partner, K and V packed by
               # the plain loops on the instruction too
               "odd_head": dict(B=2, T=20, S=33, N=2, K=2, H=15)}


@pytest.fixture
def pairs_emulation():
    """Fused whatever the shape (Flax's form leaves ViT's 197 tokens unfused by default);
    the emulation switched off after."""
    before = podlet.config.fused_attention
    podlet.config.update("fused_attention", True)
    yield
    _core.set_attention_pairs_emulation(False)
    podlet.config.update("fused_attention", before)


def _pair_run(q, k, v, kw):
    """(out, dq, dk, dv[, dbias]) as float64, from one VJP."""
    names = ("bias",) if "bias" in kw else ()
    rest = {a: b for a, b in kw.items() if a not in names}

    def f(q, k, v, *bias):
        return nn.dot_product_attention(q, k, v, **rest, **dict(zip(names, bias)))
    out, vjp = podlet.vjp(f, q, k, v, *(kw[n] for n in names))
    ct = np.cos(np.arange(out.size)).reshape(out.shape).astype(out.dtype)
    return [np.asarray(x).astype(np.float64) for x in (out, *vjp(jnp.asarray(ct)))]


@pytest.mark.parametrize("shape", PAIR_SHAPES, ids=list(PAIR_SHAPES))
@pytest.mark.parametrize("case", ["plain", "causal", "bias_heads", "mask", "seq_lengths", "window", "everything"])
def test_bf16_pair_kernel_against_float64(case, shape, pairs_emulation):
    """The pair kernel (emulated on every host; on the instruction where the host has it)
    against float64 attention of the same bf16 inputs: bf16-sized errors (it rounds the
    probabilities and the score gradient to bf16, as jax does), and the same bits on the
    instruction as in the emulation."""
    sh = PAIR_SHAPES[shape]
    rs, q, k, v = _data(**sh)
    kw = CASES[case](rs, sh["B"], sh["T"], sh["S"], sh["N"])
    q, k, v = (x.astype(BF16) for x in (q, k, v))
    podlet.config.update("enable_x64", True)
    try:
        exact = _pair_run(*(x.astype(np.float64) for x in (q, k, v)),
                          {a: (b.astype(np.float64) if a == "bias" else b) for a, b in kw.items()})
    finally:
        podlet.config.update("enable_x64", False)
    _core.set_attention_pairs_emulation(True)
    emu = _pair_run(q, k, v, kw)
    assert _core.attention_last_isa() == "pairs_ref"
    for name, got, want in zip(["out", "dq", "dk", "dv", "dbias"], emu, exact):
        scale = np.abs(want).max()
        assert np.abs(got - want).max() <= 2e-2 * scale + 1e-6, (name, np.abs(got - want).max(), scale)
    if HAS_BF16_PAIRS:
        _core.set_attention_pairs_emulation(False)
        _core.set_isa("avx512bf16")
        hw = _pair_run(q, k, v, kw)
        assert _core.attention_last_isa() == "avx512bf16"
        assert all(a.tobytes() == b.tobytes() for a, b in zip(hw, emu))


def test_bf16_pair_kernel_same_bits_for_any_thread_count(pairs_emulation):
    sh = PAIR_SHAPES["long_keys"]
    rs, q, k, v = _data(**sh)
    q, k, v = (x.astype(BF16) for x in (q, k, v))
    kw = CASES["everything"](rs, sh["B"], sh["T"], sh["S"], sh["N"])
    for emulated in (True, False) if HAS_BF16_PAIRS else (True,):
        _core.set_attention_pairs_emulation(emulated)
        if not emulated:
            _core.set_isa("avx512bf16")
        podlet.config.update("num_threads", 1)
        one = _pair_run(q, k, v, kw)
        podlet.config.update("num_threads", 2)
        two = _pair_run(q, k, v, kw)
        assert _core.attention_last_isa() == ("pairs_ref" if emulated else "avx512bf16")
        assert all(a.tobytes() == b.tobytes() for a, b in zip(one, two)), emulated


@pytest.mark.parametrize("S", [17, 49, 64, 70])
def test_bf16_pair_tile_softmax_edges_same_bits(S, pairs_emulation):
    """The key tile's logits-to-pairs pass (softmax_tile: one pass in registers on the
    instruction, plain loops emulated) on its edges: a bias with -inf entries and a large
    spread (probabilities below f32's normal range: the exact bf16 rounding), a query row
    of zeros (a zero max: taken again in order), a fully masked row (uniform weights),
    key counts of one partial vector, whole vectors and two key tiles (the running max
    rescales the first tile's sums). Emulated and on the instruction: the same bits."""
    B, T, N, H = 2, 49, 3, 32
    rs, q, k, v = _data(B=B, T=T, S=S, N=N, K=N, H=H, seed=11)
    q = q * np.float32(3.0)
    q[0, 5] = 0.0
    bias = (rs.normal(size=(1, N, T, S)) * 40).astype(np.float32)
    bias[0, 1, 3, :: 7] = -np.inf
    bias[0, :, 5] = 0.0
    mask = rs.rand(B, 1, T, S) > 0.3
    mask[1, 0, 7] = False
    kw = {"bias": bias, "mask": mask}
    args = tuple(x.astype(BF16) for x in (q, k, v))
    _core.set_attention_pairs_emulation(True)
    emu = _pair_run(*args, kw)
    assert _core.attention_last_isa() == "pairs_ref"
    assert all(np.isfinite(x).all() for x in emu)
    out = emu[0]
    np.testing.assert_allclose(out[1, 7], args[2].astype(np.float64)[1].mean(axis=0), rtol=2e-2, atol=2e-2)
    if HAS_BF16_PAIRS:
        _core.set_attention_pairs_emulation(False)
        _core.set_isa("avx512bf16")
        hw = _pair_run(*args, kw)
        assert _core.attention_last_isa() == "avx512bf16"
        for name, a, b in zip(["out", "dq", "dk", "dv", "dbias"], hw, emu):
            assert a.tobytes() == b.tobytes(), (name, np.abs(a - b).max())


@pytest.mark.parametrize("kernel", ["widening", "pairs"])
def test_many_heads_same_bits_for_any_thread_count(kernel, pairs_emulation):
    # Swin's windows: thousands of (batch, head) tasks, run in chunks of many tasks (as many
    # as leave ~16 chunks per thread: attention_impl.h task_grain), so 1 and 2 threads cut
    # them differently; every ISA (and the pair kernel, on the instruction and emulated)
    # gives the bits of the reference on one thread.
    B, T, N, H = 48, 49, 2, 32
    rs, q, k, v = _data(B=B, T=T, S=T, N=N, K=N, H=H, seed=5)
    kw = {"bias": rs.normal(size=(1, N, T, T)).astype(np.float32), "mask": rs.rand(B, 1, T, T) > 0.3}
    if kernel == "widening":
        runs = [(isa, None) for isa in ["ref"] + FAST_ISAS]
        args = (q, k, v)
    else:
        runs = [("avx512bf16", False)] if HAS_BF16_PAIRS else []
        runs = [(None, True)] + runs
        args = tuple(x.astype(BF16) for x in (q, k, v))
    ref = None
    for isa, emulated in runs:
        if emulated is not None:
            _core.set_attention_pairs_emulation(emulated)
        for threads in (1, 2):
            if isa:
                _core.set_isa(isa)
            podlet.config.update("num_threads", threads)
            got = _pair_run(*args, kw)
            ref = got if ref is None else ref
            assert all(a.tobytes() == b.tobytes() for a, b in zip(got, ref)), (isa, emulated, threads)


def test_bf16_below_avx512bf16_widens_and_f32_never_pairs(pairs_emulation):
    rs, q, k, v = _data(B=1, T=9, S=11, N=2, K=2, H=8)
    for isa in FAST_ISAS + ["ref"]:
        _core.set_isa(isa)
        nn.dot_product_attention(q.astype(BF16), k.astype(BF16), v.astype(BF16))
        assert _core.attention_last_isa() == isa
    _core.set_attention_pairs_emulation(True)
    nn.dot_product_attention(q, k, v)  # f32 keeps the f32 kernels
    assert _core.attention_last_isa() == "ref"
