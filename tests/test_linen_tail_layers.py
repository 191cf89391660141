"""podlet.nn's Embed, Einsum and ConvLocal against flax.linen 0.12.8 as the oracle.

Same key: the same variable tree (paths, shapes, dtypes) with bit-identical values.
Flax's variables copied across: the same outputs (float32 to 1e-5 relative) and, for
Embed (lookup and ``attend``) and ConvLocal, the same gradients (``podlet.grad`` vs
``jax.grad``). Inputs are tiny; kernel shapes are shared between cases where possible
(jax compiles a sampler per shape, ~1.5 s each on a loaded 2-core box), and jax's
gradients run under ``jax.jit`` (one compile instead of one per eager op).
"""
import numpy as np
import pytest

import jax
import jax.numpy as jnp
import flax.linen as fnn

import podlet
import podlet.numpy as pjnp
from podlet import nn as pnn

RS = np.random.RandomState(0)
IDS = np.array([[0, 1, 4], [-1, -2, 3]], np.int32)


def pkey(seed=0):
    return podlet.random.PRNGKey(seed)


def jkey(seed=0):
    return jax.random.PRNGKey(seed)


def to_podlet(tree):
    return jax.tree_util.tree_map(lambda a: pjnp.asarray(np.asarray(a)), tree)


def assert_same_bits_tree(pv, fv):
    pl = podlet.tree_util.tree_flatten_with_path(pv)[0]
    fl = jax.tree_util.tree_flatten_with_path(fv)[0]
    assert [podlet.tree_util.keystr(p) for p, _ in pl] == [jax.tree_util.keystr(p) for p, _ in fl]
    for (path, a), (_, b) in zip(pl, fl):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype, (podlet.tree_util.keystr(path), a.shape, b.shape)
        assert a.tobytes() == b.tobytes(), f"{podlet.tree_util.keystr(path)} differs"


def close(got, want, rtol=1e-5):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    g, w = got.astype(np.float32), want.astype(np.float32)
    if want.dtype == jnp.bfloat16:
        np.testing.assert_allclose(g, w, rtol=2 ** -7, atol=2 ** -7)
    else:
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * max(1.0, float(np.nanmax(np.abs(w), initial=0))))


def close_tree(got, want, rtol=1e-5):
    gl, wl = podlet.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
    assert len(gl) == len(wl)
    for a, b in zip(gl, wl):
        close(a, b, rtol)


def check_layer(make, x, *, method=None, seed=0):
    """Same-key init bits and same apply outputs (with Flax's variables) for make(nn)."""
    pv = make(pnn).init(pkey(seed), pjnp.asarray(x))
    fv = make(fnn).init(jkey(seed), jnp.asarray(x))
    assert_same_bits_tree(pv, fv)
    got = make(pnn).apply(to_podlet(fv), pjnp.asarray(x), method=method)
    want = make(fnn).apply(fv, jnp.asarray(x), method=method)
    close_tree(got, want)
    return fv, got, want


def _flat_lecun_normal(key, shape, dtype=jnp.float32):
    """jax's lecun_normal of a kernel of rank > 2 drawn as its 2-D (prod(shape[:-1]), O)
    equivalent: the same fans (for ConvLocal the output positions count in fan_in, as in Flax) and,
    threefry bits depending only on the flat index, the same bits; jax compiles a rank-4
    sampler in 5-7 s here, a 2-D one in ~1.5 s."""
    flat = (int(np.prod(shape[:-1])), shape[-1])
    return jnp.reshape(jax.nn.initializers.lecun_normal()(key, flat, dtype), shape)


# ----------------------------------------------------------------------------- Embed
def test_embed_lookup_attend_and_out_of_range():
    fv, got, want = check_layer(lambda nn: nn.Embed(5, 4), IDS)
    assert np.asarray(got).shape == (2, 3, 4)
    # negative indices count from the end; past the end is a NaN row, as jnp.take's fill mode
    ids = np.array([[0, 7], [-6, -5]], np.int32)
    got = np.asarray(pnn.Embed(5, 4).apply(to_podlet(fv), pjnp.asarray(ids)))
    want = np.asarray(fnn.Embed(5, 4).apply(fv, jnp.asarray(ids)))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got[0, 1]).all() and not np.isnan(got[1, 1]).any()
    q = RS.randn(2, 3, 4).astype(np.float32)
    close(pnn.Embed(5, 4).apply(to_podlet(fv), pjnp.asarray(q), method="attend"),
          fnn.Embed(5, 4).apply(fv, jnp.asarray(q), method="attend"))
    with pytest.raises(ValueError, match="integer"):
        pnn.Embed(5, 4).apply(to_podlet(fv), pjnp.asarray(q))


def test_embed_options():
    # dtype / param_dtype / a custom initializer / the single-row broadcast
    make = lambda nn: nn.Embed(5, 4, dtype=jnp.bfloat16, embedding_init=nn.initializers.normal(0.3))  # noqa: E731
    fv, got, _ = check_layer(make, IDS, seed=3)
    assert np.asarray(got).dtype == jnp.bfloat16
    make = lambda nn: nn.Embed(5, 4, param_dtype=jnp.bfloat16)  # noqa: E731
    fv, got, _ = check_layer(make, IDS, seed=4)
    assert np.asarray(fv["params"]["embedding"]).dtype == jnp.bfloat16
    q = RS.randn(3, 4).astype(np.float32)
    close(make(pnn).apply(to_podlet(fv), pjnp.asarray(q), method="attend"),
          make(fnn).apply(fv, jnp.asarray(q), method="attend"))
    check_layer(lambda nn: nn.Embed(1, 4), IDS * 0)


def test_embed_gradients_match_jax():
    # tied embeddings: look up, then attend; ids repeat so the scatter-add of the lookup's
    # gradient is exercised
    ids = np.array([[0, 1, 1], [3, 0, 4]], np.int32)
    w = RS.randn(2, 3, 5).astype(np.float32)
    fv = fnn.Embed(5, 4).init(jkey(1), jnp.asarray(ids))

    def make_loss(nn, np_, ids, w):
        emb = nn.Embed(5, 4)

        def loss(params):
            h = emb.apply({"params": params}, ids)
            logits = emb.apply({"params": params}, np_.tanh(h), method="attend")
            return np_.sum(nn.log_softmax(logits) * w)
        return loss

    fval, fg = jax.jit(jax.value_and_grad(make_loss(fnn, jnp, jnp.asarray(ids), jnp.asarray(w))))(fv["params"])
    pval, pg = podlet.value_and_grad(make_loss(pnn, pjnp, pjnp.asarray(ids), pjnp.asarray(w)))(
        to_podlet(fv["params"]))
    close(pval, fval)
    close_tree(pg, fg, rtol=1e-5)


# ----------------------------------------------------------------------------- Einsum
EINSUM_CASES = [
    ((5, 6, 7), "abc,cde->abde", (3, 4, 5), {}),
    ((4, 6), "...d,df->...f", (2, 3, 4), {}),
    ((3, 4, 6), "...a,...ab->...b", (2, 3, 4), {}),     # ellipses on both operands, broadcast
    ((4, 6), "bd,dh->hb", (3, 4), dict(use_bias=True)),   # bias on a transposed result
    ((4, 6), "b d , d h -> b h", (3, 4), dict(use_bias=False)),
    ((4, 6), "bd,dh->bh", (3, 4), dict(dtype="bf16")),
]


@pytest.mark.parametrize("shape,eq,xshape,kw", EINSUM_CASES, ids=[c[1] + str(c[3]) for c in EINSUM_CASES])
def test_einsum(shape, eq, xshape, kw):
    x = RS.randn(*xshape).astype(np.float32)

    def make(nn):
        k = dict(kw)
        if k.get("dtype") == "bf16":
            k["dtype"] = jnp.bfloat16
        if nn is fnn and len(shape) > 2:
            k["kernel_init"] = _flat_lecun_normal   # the same bits, a 2-D sampler for jax to compile
        return nn.Einsum(shape, eq, **k)
    fv, got, _ = check_layer(make, x, seed=1)
    if kw.get("use_bias", True):
        # the bias covers the kernel axes kept in the result, in the result's order
        assert "bias" in fv["params"]


def test_einsum_equation_at_call_time_and_errors():
    x = pjnp.asarray(RS.randn(3, 4).astype(np.float32))
    v = pnn.Einsum((4, 6)).init(pkey(0), x, "bd,dh->bh")
    assert np.asarray(pnn.Einsum((4, 6)).apply(v, x, "bd,dh->bh")).shape == (3, 6)
    with pytest.raises(ValueError, match="passed to the constructor and at call time"):
        pnn.Einsum((4, 6), "bd,dh->bh").init(pkey(0), x, "bd,dh->bh")
    with pytest.raises(ValueError, match="explicit"):
        pnn.Einsum((4, 6), "bd,dh").init(pkey(0), x)
    with pytest.raises(ValueError, match="exactly one comma"):
        pnn.Einsum((4, 6), "bd,dh,hk->bk").init(pkey(0), x)


# ----------------------------------------------------------------------------- ConvLocal
CONV_LOCAL_CASES = [
    ((2, 6, 6, 3), (3, 3), {}),
    ((2, 6, 6, 3), (3, 3), dict(padding="VALID", strides=2)),
    ((2, 6, 6, 3), (3, 3), dict(kernel_dilation=(2, 1), padding=[(1, 0), (2, 1)])),
    ((2, 5, 5, 3), (3, 3), dict(input_dilation=2, padding=1)),
    ((1, 2, 6, 6, 3), (3, 3), dict(padding="CIRCULAR", strides=2, use_bias=False)),   # two batch dims
    ((2, 8, 3), (3,), dict(padding="CAUSAL")),            # 1-D
]


def conv_local(nn, *args, **kw):
    """nn.ConvLocal: podlet's with its default kernel_init, Flax's with the 2-D-drawn equal."""
    if nn is fnn:
        kw.setdefault("kernel_init", _flat_lecun_normal)
    return nn.ConvLocal(*args, **kw)


@pytest.mark.parametrize("shape,ks,kw", CONV_LOCAL_CASES, ids=[str(c[2]) + str(len(c[0])) for c in CONV_LOCAL_CASES])
def test_conv_local(shape, ks, kw):
    x = RS.randn(*shape).astype(np.float32)
    fv, got, want = check_layer(lambda nn: conv_local(nn, 4, ks, **kw), x)


def test_conv_local_mask_dtype_gradients_and_errors():
    x = RS.randn(2, 6, 6, 3).astype(np.float32)
    mask = np.tril(np.ones((6, 6, 27, 4), np.float32))
    check_layer(lambda nn: conv_local(nn, 4, (3, 3), mask=jnp.asarray(mask)), x)
    fv, got, _ = check_layer(lambda nn: conv_local(nn, 4, (3, 3), dtype=jnp.bfloat16), x)
    assert np.asarray(got).dtype == jnp.bfloat16
    w = RS.randn(2, 6, 6, 4).astype(np.float32)

    def make_loss(nn, np_, w):
        def loss(params, x):
            return np_.sum(nn.ConvLocal(4, (3, 3), strides=1).apply({"params": params}, x) ** 2 * w)
        return loss

    fv = conv_local(fnn, 4, (3, 3)).init(jkey(0), jnp.asarray(x))
    fg = jax.jit(jax.grad(make_loss(fnn, jnp, jnp.asarray(w)), argnums=(0, 1)))(fv["params"], jnp.asarray(x))
    pg = podlet.grad(make_loss(pnn, pjnp, pjnp.asarray(w)), argnums=(0, 1))(to_podlet(fv["params"]), pjnp.asarray(x))
    close_tree(pg, fg, rtol=1e-4)
    with pytest.raises(NotImplementedError, match="feature_group_count"):
        pnn.ConvLocal(4, (3, 3), feature_group_count=3).init(pkey(0), pjnp.asarray(x))
    with pytest.raises(ValueError, match="String padding"):
        pnn.ConvLocal(4, (3, 3), input_dilation=2).init(pkey(0), pjnp.asarray(x))


# ----------------------------------------------------------------------------- InstanceNorm
@pytest.mark.parametrize("kw", [dict(), dict(feature_axes=(1, -1), epsilon=1e-3), dict(use_bias=False, dtype="bf16")],
                         ids=["default", "feature_axes", "no_bias_bf16"])
def test_instance_norm(kw):
    x = (RS.randn(2, 4, 4, 3) * 2 + 0.5).astype(np.float32)

    def make(nn):
        k = dict(kw)
        if k.get("dtype") == "bf16":
            k["dtype"] = jnp.bfloat16
        return nn.InstanceNorm(**k)
    check_layer(make, x)
    with pytest.raises(ValueError, match="leading dimension"):
        pnn.InstanceNorm(feature_axes=0).init(pkey(0), pjnp.asarray(x))


# ----------------------------------------------------------------------------- SpectralNorm / WeightNorm
def wrapped_model(nn, which):
    # every kernel (4, 4) (the conv's (1, 4, 4) drawn flat on Flax's side): jax compiles
    # one sampler for all of them
    class Model(nn.Module):
        @nn.compact
        def __call__(self, x, train=False):
            x = nn.Dense(4)(x)
            if which == "spectral":
                x = nn.SpectralNorm(nn.Dense(4))(x, update_stats=train)
                conv = nn.Conv(4, (1,), kernel_init=_flat_lecun_normal if nn is fnn else nn.initializers.lecun_normal())
                x = nn.SpectralNorm(conv, n_steps=3)(x[:, None, :], update_stats=train)[:, 0]   # 3-D kernel
            else:
                x = nn.WeightNorm(nn.Dense(4), variable_filter=None)(x)
                x = nn.WeightNorm(nn.Dense(4), feature_axes=None)(x)
            return nn.Dense(4)(x)
    return Model()


# the leaves map_variables writes back transformed at init (see _close_init)
TRANSFORMED = {"spectral": ("['Dense_1']['kernel']", "['Conv_0']['kernel']", "sigma"),
               "weight": ("['Dense_1']", "['Dense_2']['kernel']")}


def _close_init(pv, fv, which):
    """The wrapped layers' stored parameters are Flax's *transformed* init values (what
    map_variables writes back at init), computed with rsqrt and products: float32 rounding
    apart; every other leaf is bit-identical."""
    pl = podlet.tree_util.tree_flatten_with_path(pv)[0]
    fl = jax.tree_util.tree_flatten_with_path(fv)[0]
    assert [podlet.tree_util.keystr(p) for p, _ in pl] == [jax.tree_util.keystr(p) for p, _ in fl]
    for (path, a), (_, b) in zip(pl, fl):
        where = podlet.tree_util.keystr(path)
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype, where
        if any(t in where for t in TRANSFORMED[which]):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, err_msg=where)
        else:
            assert a.tobytes() == b.tobytes(), where


@pytest.mark.parametrize("which", ["spectral", "weight"])
def test_weight_wrappers(which):
    x = RS.randn(3, 4).astype(np.float32)
    pv = wrapped_model(pnn, which).init(pkey(0), pjnp.asarray(x))
    fv = wrapped_model(fnn, which).init(jkey(0), jnp.asarray(x))
    _close_init(pv, fv, which)
    if which == "spectral":
        assert sorted(fv["batch_stats"]["SpectralNorm_0"]) == ["Dense_1/kernel/sigma", "Dense_1/kernel/u"]
    else:
        assert sorted(fv["params"]["WeightNorm_0"]) == ["Dense_1/bias/scale", "Dense_1/kernel/scale"]
        assert np.shape(fv["params"]["WeightNorm_1"]["Dense_2/kernel/scale"]) == ()
    mutable = ["batch_stats"] if which == "spectral" else False
    got = wrapped_model(pnn, which).apply(to_podlet(fv), pjnp.asarray(x), True, mutable=mutable)
    want = wrapped_model(fnn, which).apply(fv, jnp.asarray(x), True, mutable=mutable)
    close_tree(got, want)

    def make_loss(nn, np_):
        def loss(params, x):
            out = wrapped_model(nn, which).apply({**fv_of(nn), "params": params}, x, True, mutable=mutable)
            y = out[0] if mutable else out
            return np_.sum(np_.sin(y))
        return loss

    fv_of = lambda nn: to_podlet(fv) if nn is pnn else fv  # noqa: E731
    fg = jax.jit(jax.grad(make_loss(fnn, jnp)))(fv["params"], jnp.asarray(x))
    pg = podlet.grad(make_loss(pnn, pjnp))(to_podlet(fv["params"]), pjnp.asarray(x))
    close_tree(pg, fg, rtol=1e-4)
    if which == "spectral":
        with pytest.raises(Exception, match="immutable"):   # update_stats needs a mutable batch_stats
            wrapped_model(pnn, which).apply(to_podlet(fv), pjnp.asarray(x), True)
