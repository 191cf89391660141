"""podlet.nn's layers against flax.linen 0.12.8 as the oracle.

For every layer (Conv, ConvTranspose, BatchNorm, LayerNorm, GroupNorm, RMSNorm,
Dropout, DropPath, pooling, MultiHeadDotProductAttention) and a spread of its
options: ``init`` with the same key gives the same variable tree (paths, shapes,
dtypes) with bit-identical values; ``apply`` with Flax's variables copied across gives
the same outputs (float32 within 1e-5 relative; bfloat16 within two bf16 ulps) and the
same updated collections (BatchNorm running statistics); dropout masks are the same
bits as Flax's for the same rng; gradients of a small model match ``jax.grad``.
Inputs are tiny: the convolutions here run on shared CPUs.
"""
import ml_dtypes
import numpy as np
import pytest

import jax
import jax.numpy as jnp
import flax.linen as fnn

import podlet
import podlet.numpy as pjnp
from podlet import nn as pnn

BF16 = ml_dtypes.bfloat16
RS = np.random.RandomState(0)
X4 = (RS.randn(2, 6, 6, 4) * 2 + 0.5).astype(np.float32)      # NHWC
X3 = RS.randn(2, 5, 12).astype(np.float32)                      # (batch, length, features)


# ----------------------------------------------------------------------------- helpers
def pkey(seed=0):
    return podlet.random.PRNGKey(seed)


def jkey(seed=0):
    return jax.random.PRNGKey(seed)


def to_podlet(tree):
    return jax.tree_util.tree_map(lambda a: pjnp.asarray(np.asarray(a)), tree)


def to_jax(tree):
    return podlet.tree_util.tree_map(lambda a: jnp.asarray(np.asarray(a)), tree)


def spec(tree, tu):
    return tu.tree_map(lambda a: (tuple(np.shape(a)), np.asarray(a).dtype.name), tree)


def assert_same_bits_tree(pv, fv):
    assert spec(pv, podlet.tree_util) == spec(fv, jax.tree_util)
    pl = podlet.tree_util.tree_flatten_with_path(pv)[0]
    fl = jax.tree_util.tree_flatten_with_path(fv)[0]
    for (pp, a), (_, b) in zip(pl, fl):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), f"{podlet.tree_util.keystr(pp)} differs"


def close(got, want, rtol=1e-5):
    """float32: |got - want| <= rtol * max(1, max|want|); bfloat16: two ulps of the value."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    g, w = got.astype(np.float32), want.astype(np.float32)
    if want.dtype == BF16:
        np.testing.assert_allclose(g, w, rtol=2 ** -7, atol=2 ** -7)
    else:
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * max(1.0, float(np.abs(w).max(initial=0))))


def close_tree(got, want, rtol=1e-5):
    jax.tree_util.tree_map(lambda a, b: close(a, b, rtol), to_jax(got), want)


def check_layer(make, x, *, init_kw=None, call_kw=None, mutable=False, rngs=None, seed=0):
    """Same-key init bits and same apply outputs (with Flax's variables) for make(nn, **kw)."""
    init_kw = dict(init_kw or {})
    call_kw = dict(call_kw or {})
    pv = make(pnn, pjnp).init(pkey(seed), pjnp.asarray(x), **init_kw)
    fv = make(fnn, jnp).init(jkey(seed), jnp.asarray(x), **init_kw)
    assert_same_bits_tree(pv, fv)
    prngs = None if rngs is None else {k: pkey(s) for k, s in rngs.items()}
    frngs = None if rngs is None else {k: jkey(s) for k, s in rngs.items()}
    got = make(pnn, pjnp).apply(to_podlet(fv), pjnp.asarray(x), rngs=prngs, mutable=mutable, **call_kw)
    want = make(fnn, jnp).apply(fv, jnp.asarray(x), rngs=frngs, mutable=mutable, **call_kw)
    close_tree(got, want)
    return got, want


# ----------------------------------------------------------------------------- Conv
CONV_CASES = [
    dict(),
    dict(strides=2),
    dict(strides=(2, 1), padding="VALID"),
    dict(padding=1),
    dict(padding=[(1, 0), (0, 2)]),
    dict(padding=((2, 1), 0)),
    dict(padding="CIRCULAR"),
    dict(padding="REFLECT"),
    dict(kernel_dilation=2),
    dict(input_dilation=2, padding=1),
    dict(feature_group_count=2),
    dict(use_bias=False),
    dict(dtype="bf16"),
    dict(dtype="bf16", x_dtype="bf16"),
    dict(kernel_init="he_normal", bias_init="normal"),
]


def _conv_kw(nn, jnp, kw):
    kw = dict(kw)
    kw.pop("x_dtype", None)
    if kw.get("dtype") == "bf16":
        kw["dtype"] = jnp.bfloat16
    if kw.get("kernel_init") == "he_normal":
        kw["kernel_init"] = nn.initializers.he_normal()
    if kw.get("bias_init") == "normal":
        kw["bias_init"] = nn.initializers.normal(0.1)
    return kw


@pytest.mark.parametrize("kw", CONV_CASES, ids=[str(c) for c in CONV_CASES])
def test_conv(kw):
    x = X4.astype(BF16) if kw.get("x_dtype") == "bf16" else X4
    (got, want) = check_layer(lambda nn, jnp: nn.Conv(6, (3, 3), **_conv_kw(nn, jnp, kw)), x)
    if kw.get("dtype") == "bf16":
        assert np.asarray(got).dtype == BF16


def test_conv_default_dtype_follows_input():
    # dtype=None: the promoted dtype of input and params (bf16 input, f32 params -> f32)
    got, want = check_layer(lambda nn, jnp: nn.Conv(3, (3, 3)), X4.astype(BF16))
    assert np.asarray(got).dtype == np.float32


@pytest.mark.parametrize("shape,kernel,kw", [
    ((2, 9, 4), (3,), {}),                       # 1-D
    ((2, 9, 4), (3,), dict(padding="CAUSAL")),
    ((2, 9, 4), 3, dict(strides=2, padding="VALID")),
    ((6, 6, 4), (3, 3), {}),                     # no batch dim
    ((1, 2, 6, 6, 4), (3, 3), dict(strides=2)),  # two batch dims
], ids=["1d", "1d_causal", "1d_int_kernel", "unbatched", "two_batch_dims"])
def test_conv_shapes(shape, kernel, kw):
    x = RS.randn(*shape).astype(np.float32)
    check_layer(lambda nn, jnp: nn.Conv(5, kernel, **kw), x)


def test_conv_mask():
    mask = np.tril(np.ones((3, 3, 4, 5), np.float32))
    check_layer(lambda nn, jnp: nn.Conv(5, (3, 3), mask=jnp.asarray(mask)), X4)


CONVT_CASES = [
    dict(),
    dict(strides=2),
    dict(strides=2, padding="VALID"),
    dict(strides=(2, 1), padding=[(1, 2), (0, 1)]),
    dict(strides=2, transpose_kernel=True),
    dict(strides=2, padding="CIRCULAR"),
    dict(kernel_dilation=2, use_bias=False),
    dict(strides=2, dtype="bf16"),
]


@pytest.mark.parametrize("kw", CONVT_CASES, ids=[str(c) for c in CONVT_CASES])
def test_conv_transpose(kw):
    check_layer(lambda nn, jnp: nn.ConvTranspose(5, (3, 3), **_conv_kw(nn, jnp, kw)), X4)


def test_conv_transpose_1d():
    check_layer(lambda nn, jnp: nn.ConvTranspose(5, (3,), strides=2), RS.randn(2, 7, 3).astype(np.float32))


# ----------------------------------------------------------------------------- BatchNorm
BN_CASES = [
    dict(),
    dict(momentum=0.9, epsilon=1e-5),
    dict(axis=1),
    dict(axis=(1, 3)),
    dict(use_bias=False, scale_init="zeros"),
    dict(use_scale=False, bias_init="ones"),
    dict(use_fast_variance=False),
    dict(dtype="bf16"),
    dict(dtype="bf16", x_dtype="bf16", momentum=0.9),
    dict(x_dtype="bf16"),                      # dtype None: bf16 input, f32 params -> f32 output
    dict(param_dtype="bf16", x_dtype="bf16"),
]


def _bn_kw(nn, jnp, kw):
    kw = dict(kw)
    kw.pop("x_dtype", None)
    for k in ("dtype", "param_dtype"):
        if kw.get(k) == "bf16":
            kw[k] = jnp.bfloat16
    if kw.get("scale_init") == "zeros":
        kw["scale_init"] = nn.initializers.zeros_init()
    if kw.get("bias_init") == "ones":
        kw["bias_init"] = nn.initializers.ones
    return kw


@pytest.mark.parametrize("kw", BN_CASES, ids=[str(c) for c in BN_CASES])
def test_batch_norm_train_and_eval(kw):
    x = X4.astype(BF16) if kw.get("x_dtype") == "bf16" else X4
    make = lambda nn, jnp: nn.BatchNorm(**_bn_kw(nn, jnp, kw))  # noqa: E731
    # init returns the initial statistics (mean 0, var 1), unchanged by the batch
    pv = make(pnn, pjnp).init(pkey(0), pjnp.asarray(x), use_running_average=False)
    np.testing.assert_array_equal(np.asarray(pv["batch_stats"]["mean"]), 0)
    np.testing.assert_array_equal(np.asarray(pv["batch_stats"]["var"]), 1)
    # training: batch statistics, running averages updated
    (y, upd), (fy, fupd) = check_layer(make, x, init_kw=dict(use_running_average=False),
                                       call_kw=dict(use_running_average=False), mutable=["batch_stats"])
    assert np.asarray(upd["batch_stats"]["mean"]).dtype == np.float32
    # a second step from the updated statistics, then evaluation with them
    fv = make(fnn, jnp).init(jkey(0), jnp.asarray(x), use_running_average=False)
    fv = {**fv, "batch_stats": fupd["batch_stats"]}
    x2 = (x.astype(np.float32) * 0.5 - 1.0).astype(x.dtype)
    got = make(pnn, pjnp).apply(to_podlet(fv), pjnp.asarray(x2), use_running_average=False, mutable=["batch_stats"])
    want = make(fnn, jnp).apply(fv, jnp.asarray(x2), use_running_average=False, mutable=["batch_stats"])
    close_tree(got, want)
    got = make(pnn, pjnp).apply(to_podlet(fv), pjnp.asarray(x2), use_running_average=True)
    want = make(fnn, jnp).apply(fv, jnp.asarray(x2), use_running_average=True)
    close(got, want)


def test_batch_norm_running_stat_formula():
    # ra = momentum * ra + (1 - momentum) * batch_stat, with the biased variance
    x = X4
    bn = pnn.BatchNorm(momentum=0.9, use_running_average=False)
    v = bn.init(pkey(0), pjnp.asarray(x))
    _, upd = bn.apply(v, pjnp.asarray(x), mutable=["batch_stats"])
    mean, var = x.mean((0, 1, 2)), x.var((0, 1, 2))
    np.testing.assert_allclose(np.asarray(upd["batch_stats"]["mean"]), 0.1 * mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(upd["batch_stats"]["var"]), 0.9 + 0.1 * var, rtol=1e-5, atol=1e-6)


def test_batch_norm_flags_and_errors():
    x = pjnp.asarray(X4)
    v = pnn.BatchNorm().init(pkey(0), x, use_running_average=True)
    with pytest.raises(ValueError, match="use_running_average"):
        pnn.BatchNorm().apply(v, x)
    with pytest.raises(ValueError, match="just once"):
        pnn.BatchNorm(use_running_average=True).apply(v, x, use_running_average=True)
    # training without a mutable batch_stats collection: Flax's error
    with pytest.raises(pnn.errors.ModifyScopeVariableError):
        pnn.BatchNorm(use_running_average=False).apply(v, x)
    # axis_name: cross-replica mean via lax.pmean (only valid inside pmap)
    bn = pnn.BatchNorm(use_running_average=False, axis_name="batch")
    v = bn.init(pkey(0), x)                     # init never reduces across replicas
    with pytest.raises(NameError, match="batch"):
        bn.apply(v, x, mutable=["batch_stats"])


# ----------------------------------------------------------------------------- Layer/Group/RMS norm
NORM_CASES = [
    ("LayerNorm", dict()),
    ("LayerNorm", dict(epsilon=1e-3, use_bias=False)),
    ("LayerNorm", dict(reduction_axes=(1, 2, 3), feature_axes=-1)),
    ("LayerNorm", dict(reduction_axes=(2, 3), feature_axes=(2, 3))),
    ("LayerNorm", dict(dtype="bf16", x_dtype="bf16")),
    ("LayerNorm", dict(x_dtype="bf16")),
    ("LayerNorm", dict(use_fast_variance=False, use_scale=False)),
    ("GroupNorm", dict(num_groups=2)),
    ("GroupNorm", dict(num_groups=None, group_size=1)),
    ("GroupNorm", dict(num_groups=4, dtype="bf16")),
    ("RMSNorm", dict()),
    ("RMSNorm", dict(dtype="bf16", x_dtype="bf16")),
]


@pytest.mark.parametrize("cls,kw", NORM_CASES, ids=[f"{c}-{k}" for c, k in NORM_CASES])
def test_norms(cls, kw):
    x = X4.astype(BF16) if kw.get("x_dtype") == "bf16" else X4
    check_layer(lambda nn, jnp: getattr(nn, cls)(**_bn_kw(nn, jnp, kw)), x)


def test_layer_norm_on_tokens_and_group_norm_errors():
    check_layer(lambda nn, jnp: nn.LayerNorm(), X3)
    with pytest.raises(ValueError, match="does not divide"):
        pnn.GroupNorm(num_groups=3).init(pkey(0), pjnp.asarray(X4))
    with pytest.raises(ValueError, match="Either `num_groups` or `group_size`"):
        pnn.GroupNorm(group_size=2).init(pkey(0), pjnp.asarray(X4))


# ----------------------------------------------------------------------------- Dropout / DropPath
@pytest.mark.parametrize("rate,bdims,xdt", [(0.3, (), np.float32), (0.5, (1, 2), np.float32),
                                            (0.1, (0,), np.float32), (0.3, (), BF16)],
                         ids=["p0.3", "p0.5_bcast12", "p0.1_bcast0", "p0.3_bf16"])
def test_dropout_masks_match_flax(rate, bdims, xdt):
    x = X4.astype(xdt)
    got, want = check_layer(lambda nn, jnp: nn.Dropout(rate, broadcast_dims=bdims), x,
                            init_kw=dict(deterministic=True), call_kw=dict(deterministic=False),
                            rngs={"dropout": 7})
    # bit-identical masks (and the kept values equal x / keep_prob)
    np.testing.assert_array_equal(np.asarray(got) == 0, np.asarray(want) == 0)
    assert np.asarray(got).dtype == xdt


def test_dropout_deterministic_and_edge_rates():
    x = pjnp.asarray(X4)
    for d in (pnn.Dropout(0.5, deterministic=True), pnn.Dropout(0.0)):
        np.testing.assert_array_equal(np.asarray(d.apply({}, x, deterministic=None if d.deterministic else False)), X4)
    y = pnn.Dropout(1.0).apply({}, x, deterministic=False, rngs={"dropout": pkey(0)})
    np.testing.assert_array_equal(np.asarray(y), 0)
    with pytest.raises(ValueError, match="deterministic"):
        pnn.Dropout(0.5).apply({}, x)
    # an explicit rng argument overrides the stream
    y1 = pnn.Dropout(0.5).apply({}, x, deterministic=False, rng=pkey(3))
    y2 = fnn.Dropout(0.5).apply({}, jnp.asarray(X4), deterministic=False, rng=jkey(3))
    np.testing.assert_array_equal(np.asarray(y1), np.asarray(y2))


def drop_path_twin(nn, jnp):
    """Flax has no DropPath: the same computation written with flax's Dropout."""
    class DropPath(nn.Module):
        rate: float = 0.0

        @nn.compact
        def __call__(self, x, deterministic):
            if self.rate == 0.0 or deterministic:
                return x
            keep = 1.0 - self.rate
            mask = jax.random.bernoulli(self.make_rng("dropout"), keep, (x.shape[0],) + (1,) * (x.ndim - 1))
            return jax.lax.select(jnp.broadcast_to(mask, x.shape), x / keep, jnp.zeros_like(x))
    return DropPath


@pytest.mark.parametrize("xdt", [np.float32, BF16], ids=["f32", "bf16"])
def test_drop_path(xdt):
    x = RS.randn(16, 3, 3, 2).astype(xdt)
    F = drop_path_twin(fnn, jnp)
    # (x / keep_prob: XLA rewrites division by a constant as multiplication by its
    # reciprocal, podlet divides, so kept values may differ by an ulp; masks are equal)
    got = pnn.DropPath(0.4).apply({}, pjnp.asarray(x), deterministic=False, rngs={"dropout": pkey(5)})
    want = F(0.4).apply({}, jnp.asarray(x), False, rngs={"dropout": jkey(5)})
    np.testing.assert_array_equal(np.asarray(got) == 0, np.asarray(want) == 0)
    close(got, want)
    g = np.asarray(got).astype(np.float32)
    kept = [not np.all(g[b] == 0) for b in range(x.shape[0])]
    assert 0 < sum(kept) < len(kept)              # per-example: whole examples dropped
    for b in np.flatnonzero(kept):
        np.testing.assert_allclose(g[b], x[b].astype(np.float32) / 0.6, rtol=1e-2)
    # it is flax's Dropout broadcast over the non-batch dims (same raw key: the module
    # names differ, so make_rng would derive different keys)
    got = pnn.DropPath(0.4).apply({}, pjnp.asarray(x), deterministic=False, rng=pkey(9))
    want = fnn.Dropout(0.4, broadcast_dims=(1, 2, 3)).apply({}, jnp.asarray(x), False, rng=jkey(9))
    np.testing.assert_array_equal(np.asarray(got) == 0, np.asarray(want) == 0)
    close(got, want)
    # identity when deterministic or rate == 0 (no rng needed)
    np.testing.assert_array_equal(np.asarray(pnn.DropPath(0.4).apply({}, pjnp.asarray(x), deterministic=True)), x)
    np.testing.assert_array_equal(np.asarray(pnn.DropPath(0.0).apply({}, pjnp.asarray(x))), x)


# ----------------------------------------------------------------------------- pooling
POOL_CASES = [
    ("max_pool", (3, 3), (2, 2), "SAME", {}),
    ("max_pool", (2, 2), None, "VALID", {}),
    ("max_pool", (3, 3), (1, 2), ((1, 1), (0, 2)), {}),
    ("avg_pool", (2, 2), (2, 2), "VALID", {}),
    ("avg_pool", (3, 3), (2, 2), "SAME", {}),
    ("avg_pool", (3, 3), (2, 2), "SAME", dict(count_include_pad=False)),
    ("avg_pool", (3, 2), (1, 1), ((1, 1), (1, 0)), dict(count_include_pad=False)),
    ("min_pool", (2, 3), (1, 1), "SAME", {}),
]


@pytest.mark.parametrize("fn,window,strides,padding,kw", POOL_CASES,
                         ids=[f"{c[0]}-{c[1]}-{c[3]}-{c[4]}" for c in POOL_CASES])
@pytest.mark.parametrize("xdt", [np.float32, BF16], ids=["f32", "bf16"])
def test_pooling(fn, window, strides, padding, kw, xdt):
    x = X4.astype(xdt)
    got = getattr(pnn, fn)(pjnp.asarray(x), window, strides=strides, padding=padding, **kw)
    want = getattr(fnn.pooling, fn)(jnp.asarray(x), window, strides=strides, padding=padding, **kw)
    # bf16 window sums: podlet accumulates in f32 and rounds once, XLA:CPU rounds every
    # add to bf16, so allow bf16 rounding even where the result is promoted to f32
    close(got, want, rtol=1e-5 if xdt == np.float32 else 2 ** -7)


def test_pooling_unbatched_and_1d():
    close(pnn.max_pool(pjnp.asarray(X4[0]), (2, 2), (2, 2)), fnn.max_pool(jnp.asarray(X4[0]), (2, 2), (2, 2)))
    close(pnn.avg_pool(pjnp.asarray(X3), (2,), (1,), "SAME"), fnn.avg_pool(jnp.asarray(X3), (2,), (1,), "SAME"))


# ----------------------------------------------------------------------------- attention
MHA_CASES = [
    dict(num_heads=3),
    dict(num_heads=2, qkv_features=8, out_features=6),
    dict(num_heads=3, use_bias=False, kernel_init="xavier"),
    dict(num_heads=2, normalize_qk=True),
    dict(num_heads=3, dtype="bf16"),
    dict(num_heads=3, dtype="bf16", force_fp32_for_softmax=True),
    dict(num_heads=4, dropout_rate=0.2, deterministic=False),
    dict(num_heads=4, dropout_rate=0.2, deterministic=False, broadcast_dropout=False),
    dict(num_heads=4, dropout_rate=0.2, deterministic=True),
]


def _mha_kw(nn, jnp, kw):
    kw = dict(kw)
    if kw.get("dtype") == "bf16":
        kw["dtype"] = jnp.bfloat16
    if kw.get("kernel_init") == "xavier":
        kw["kernel_init"] = nn.initializers.xavier_uniform()
    return kw


@pytest.mark.parametrize("kw", MHA_CASES, ids=[str(c) for c in MHA_CASES])
def test_multi_head_attention(kw):
    rngs = {"dropout": 3} if kw.get("dropout_rate") else None
    got, want = check_layer(lambda nn, jnp: nn.MultiHeadDotProductAttention(**_mha_kw(nn, jnp, kw)), X3, rngs=rngs)
    if kw.get("dtype") == "bf16":
        assert np.asarray(got).dtype == BF16


def test_attention_param_paths():
    v = pnn.MultiHeadDotProductAttention(num_heads=3, out_features=4).init(pkey(0), pjnp.asarray(X3))["params"]
    assert sorted(v) == ["key", "out", "query", "value"]
    assert v["query"]["kernel"].shape == (12, 3, 4) and v["query"]["bias"].shape == (3, 4)
    assert v["out"]["kernel"].shape == (3, 4, 4) and v["out"]["bias"].shape == (4,)


def test_attention_cross_and_mask():
    kv = RS.randn(2, 7, 12).astype(np.float32)
    mask = np.tril(np.ones((5, 7), bool))[None, None]
    make = lambda nn, jnp: nn.MultiHeadDotProductAttention(num_heads=3)  # noqa: E731
    fv = make(fnn, jnp).init(jkey(0), jnp.asarray(X3), jnp.asarray(kv))
    got = make(pnn, pjnp).apply(to_podlet(fv), pjnp.asarray(X3), pjnp.asarray(kv), mask=pjnp.asarray(mask))
    want = make(fnn, jnp).apply(fv, jnp.asarray(X3), jnp.asarray(kv), mask=jnp.asarray(mask))
    close(got, want)
    # the mask helpers
    tok = np.array([[1, 1, 0], [1, 0, 0]], np.float32)
    close(pnn.make_attention_mask(pjnp.asarray(tok), pjnp.asarray(tok)),
          fnn.make_attention_mask(jnp.asarray(tok), jnp.asarray(tok)))
    close(pnn.make_causal_mask(pjnp.asarray(tok)), fnn.make_causal_mask(jnp.asarray(tok)))
    pt, jt = pjnp.asarray(tok), jnp.asarray(tok)
    close(pnn.combine_masks(pnn.make_causal_mask(pt), pnn.make_attention_mask(pt, pt)),
          fnn.combine_masks(fnn.make_causal_mask(jt), fnn.make_attention_mask(jt, jt)))


def test_dot_product_attention_function():
    q, k, v = (RS.randn(2, 5, 3, 4).astype(np.float32) for _ in range(3))
    bias = RS.randn(1, 3, 5, 5).astype(np.float32)
    got = pnn.dot_product_attention(*map(pjnp.asarray, (q, k, v)), bias=pjnp.asarray(bias))
    want = fnn.dot_product_attention(*map(jnp.asarray, (q, k, v)), bias=jnp.asarray(bias))
    close(got, want)
    got = pnn.dot_product_attention(*map(pjnp.asarray, (q, k, v)), dropout_rng=pkey(1), dropout_rate=0.3)
    want = fnn.dot_product_attention(*map(jnp.asarray, (q, k, v)), dropout_rng=jkey(1), dropout_rate=0.3)
    close(got, want)


# ----------------------------------------------------------------------------- gradients
def small_cnn(nn, jnp):
    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x, *, train):
            x = nn.Conv(4, (3, 3), strides=2, use_bias=False)(x)
            x = nn.BatchNorm(use_running_average=not train, momentum=0.9)(x)
            x = nn.relu(x)
            x = nn.max_pool(x, (2, 2), (1, 1), "SAME")
            x = nn.Conv(6, (3, 3), padding="VALID", feature_group_count=2)(x)
            x = nn.LayerNorm()(x)
            x = nn.avg_pool(x, (1, 1)).mean(axis=(1, 2))
            x = nn.Dropout(0.25)(x, deterministic=not train)
            return nn.Dense(3)(x)
    return CNN


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_gradients_match_jax(train):
    x = RS.randn(4, 8, 8, 3).astype(np.float32)
    labels = np.array([0, 2, 1, 2])
    fv = small_cnn(fnn, jnp)().init(jkey(1), jnp.asarray(x), train=False)

    def make_loss(nn, jnp, mod, variables, xin, rngs):
        def loss_fn(params):
            out = mod.apply({**variables, "params": params}, xin, train=train, rngs=rngs,
                            mutable=["batch_stats"] if train else False)
            logits, upd = out if train else (out, {})
            logp = nn.log_softmax(logits)
            oh = nn.one_hot(jnp.asarray(labels), 3)
            return -jnp.mean(jnp.sum(logp * oh, axis=-1)), upd
        return loss_fn

    fl = make_loss(fnn, jnp, small_cnn(fnn, jnp)(), fv, jnp.asarray(x), {"dropout": jkey(2)})
    pl = make_loss(pnn, pjnp, small_cnn(pnn, pjnp)(), to_podlet(fv), pjnp.asarray(x), {"dropout": pkey(2)})
    (floss, fupd), fg = jax.jit(jax.value_and_grad(fl, has_aux=True))(fv["params"])  # one compile, not one per op
    (ploss, pupd), pg = podlet.value_and_grad(pl, has_aux=True)(to_podlet(fv["params"]))
    close(ploss, floss)
    close_tree(pupd, fupd)
    assert spec(pg, podlet.tree_util) == spec(fg, jax.tree_util)
    jax.tree_util.tree_map(lambda a, b: close(a, b, rtol=1e-4), to_jax(pg), fg)
    # and under jit
    (jloss, _), jg = podlet.jit(podlet.value_and_grad(pl, has_aux=True))(to_podlet(fv["params"]))
    close(jloss, floss)
    jax.tree_util.tree_map(lambda a, b: close(a, b, rtol=1e-4), to_jax(jg), fg)


def test_attention_aliases():
    make = lambda nn, jnp: nn.MultiHeadAttention(num_heads=3)  # noqa: E731
    check_layer(make, X3)
    assert list(make(pnn, pjnp).init(pkey(0), pjnp.asarray(X3))["params"]) == ["query", "key", "value", "out"]
    with pytest.warns(DeprecationWarning):
        check_layer(lambda nn, jnp: nn.SelfAttention(num_heads=2, dropout_rate=0.5), X3,
                    init_kw=dict(deterministic=True), call_kw=dict(deterministic=False), rngs={"dropout": 1})
    # decode=True: Flax's autoregressive cache variables (cached decoding itself is checked
    # against Flax in tests/test_flax_examples_api.py's lm1b pattern)
    pc = pnn.MultiHeadDotProductAttention(num_heads=3, decode=True).init(pkey(0), pjnp.asarray(X3))["cache"]
    fc = fnn.MultiHeadDotProductAttention(num_heads=3, decode=True).init(jkey(0), jnp.asarray(X3))["cache"]
    assert {k: (tuple(v.shape), str(v.dtype)) for k, v in pc.items()} == \
        {k: (tuple(v.shape), str(v.dtype)) for k, v in fc.items()}


# ----------------------------------------------------------------------------- numpy helpers the layers need
@pytest.mark.parametrize("mode", ["wrap", "reflect", "symmetric", "edge"])
def test_jnp_pad_modes_and_their_gradients(mode):
    # Conv(padding='CIRCULAR' / 'REFLECT') pads with jnp.pad(mode='wrap' / 'reflect')
    x = X4[:, :5, :5, :3]
    w = np.arange(2 * 8 * 8 * 3, dtype=np.float32).reshape(2, 8, 8, 3)
    pads = [(0, 0), (1, 2), (2, 1), (0, 0)]
    close(pjnp.pad(pjnp.asarray(x), pads, mode=mode), jnp.pad(x, pads, mode=mode))
    gp = podlet.grad(lambda a: (pjnp.pad(a, pads, mode=mode) ** 2 * w).sum())(pjnp.asarray(x))
    gj = jax.grad(lambda a: (jnp.pad(a, pads, mode=mode) ** 2 * w).sum())(x)
    close(gp, gj)


def test_jnp_logical_ops_take_truth_values():
    # flax's combine_masks applies logical_and to float masks
    a, b = np.array([0., 1., 2., -0.5], np.float32), np.array([1, 0, 3, 0], np.int32)
    for f in ("logical_and", "logical_or", "logical_xor"):
        np.testing.assert_array_equal(np.asarray(getattr(pjnp, f)(pjnp.asarray(a), pjnp.asarray(b))),
                                      np.asarray(getattr(jnp, f)(a, b)))
    np.testing.assert_array_equal(np.asarray(pjnp.logical_not(pjnp.asarray(a))), np.asarray(jnp.logical_not(a)))
    np.testing.assert_array_equal(np.asarray(~pjnp.asarray(b)), ~b)          # ~ stays bitwise
