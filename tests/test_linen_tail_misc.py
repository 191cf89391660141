"""The smaller flax.linen / jax.nn names podlet.nn gained with the recurrent layers, each
against its oracle: the remaining jax.nn activations (values and gradients vs jax.nn),
PReLU, BatchApply, FrozenDict (vs flax.core.FrozenDict), the initializer aliases and
``normalize``, the named-call switches, ``intercept_methods``, and the lifted ``nn.vjp``,
``nn.jvp``, ``nn.grad``, ``nn.value_and_grad`` (vs flax.linen's on the same module).
"""
import numpy as np
import pytest

import jax
import jax.numpy as jnp
import flax.linen as fnn

import podlet
import podlet.numpy as pjnp
from podlet import nn as pnn

X = np.array([-3.5, -1.0, -0.7, 0.0, 0.3, 1.0, 2.5, 6.0, 7.0], np.float32)
XPOS = np.array([0.1, 0.5, 0.69, 0.7, 2.0, 30.0], np.float32)


def to_podlet(tree):
    return jax.tree_util.tree_map(lambda a: pjnp.asarray(np.asarray(a)), tree)


def close_tree(got, want, rtol=1e-6, atol=1e-6):
    gl, wl = podlet.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
    assert len(gl) == len(wl)
    for a, b in zip(gl, wl):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


# ----------------------------------------------------------------------------- activations
# (name, input, exact): exact = bit-identical values and gradients; otherwise the
# transcendental functions (tanh, log1p, expm1) are podlet's own, a few ulps from XLA's.
ACTIVATIONS = [
    ("identity", X, True), ("celu", X, True), ("selu", X, True), ("hard_sigmoid", X, True),
    ("hard_silu", X, True), ("hard_swish", X, True), ("hard_tanh", X, True), ("soft_sign", X, True),
    ("sparse_plus", X, True), ("sparse_sigmoid", X, True), ("squareplus", X, False), ("mish", X, False),
    ("log1mexp", XPOS, False),
]


@pytest.mark.parametrize("name,x,exact", ACTIVATIONS, ids=[a[0] for a in ACTIVATIONS])
def test_activation_values_and_gradients(name, x, exact):
    pf, jf = getattr(pnn, name), getattr(jax.nn, name)
    got, want = np.asarray(pf(pjnp.asarray(x))), np.asarray(jf(x))
    gp = np.asarray(podlet.grad(lambda v: pf(v).sum())(pjnp.asarray(x)))
    gj = np.asarray(jax.grad(lambda v: jf(v).sum())(x))
    assert got.dtype == want.dtype and gp.dtype == gj.dtype
    if exact:
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(gp, gj)
    else:
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)
        np.testing.assert_allclose(gp, gj, rtol=4e-6, atol=1e-7)


def test_glu_logmeanexp_and_normalize():
    y = np.random.RandomState(0).randn(3, 4).astype(np.float32)
    np.testing.assert_allclose(np.asarray(pnn.glu(pjnp.asarray(y))), np.asarray(jax.nn.glu(y)), rtol=1e-6)
    y4 = np.random.RandomState(1).randn(4, 3).astype(np.float32)
    np.testing.assert_allclose(np.asarray(pnn.glu(pjnp.asarray(y4), axis=0)), np.asarray(jax.nn.glu(y4, axis=0)),
                               rtol=1e-6)
    for kw in (dict(), dict(axis=1), dict(axis=0, keepdims=True), dict(axis=1, where=y > 0)):
        pkw = {k: (pjnp.asarray(v) if k == "where" else v) for k, v in kw.items()}
        np.testing.assert_allclose(np.asarray(pnn.logmeanexp(pjnp.asarray(y), **pkw)),
                                   np.asarray(jax.nn.logmeanexp(y, **kw)), rtol=1e-6)
    assert pnn.normalize is pnn.standardize and fnn.normalize is fnn.standardize
    with pytest.raises(AssertionError):
        pnn.glu(pjnp.asarray(np.ones((3, 3), np.float32)))


def test_prelu():
    x = X.reshape(3, 3)
    for kw in ({}, dict(negative_slope_init=0.2)):
        pv = pnn.PReLU(**kw).init(podlet.random.PRNGKey(0), pjnp.asarray(x))
        fv = fnn.PReLU(**kw).init(jax.random.PRNGKey(0), jnp.asarray(x))
        close_tree(pv, fv, rtol=0, atol=0)
        fv = {"params": {"negative_slope": jnp.asarray(-0.3)}}
        close_tree(pnn.PReLU(**kw).apply(to_podlet(fv), pjnp.asarray(x)), fnn.PReLU(**kw).apply(fv, jnp.asarray(x)),
                   rtol=0, atol=0)
    g = podlet.grad(lambda p: pnn.PReLU().apply(p, pjnp.asarray(x)).sum())(to_podlet(fv))
    gj = jax.grad(lambda p: fnn.PReLU().apply(p, jnp.asarray(x)).sum())(fv)
    close_tree(g, gj)


def test_batch_apply():
    x = np.random.RandomState(1).randn(4, 3, 5).astype(np.float32)
    fv = fnn.Dense(2).init(jax.random.PRNGKey(0), jnp.asarray(x[0]))

    def f(nn):
        return lambda a, b: (nn.Dense(2).apply(to_podlet(fv) if nn is pnn else fv, a), b * 2)

    got = pnn.BatchApply(f(pnn))(pjnp.asarray(x), b=pjnp.asarray(x[..., 0]))
    want = fnn.BatchApply(f(fnn))(jnp.asarray(x), b=jnp.asarray(x[..., 0]))
    close_tree(got, want, rtol=1e-5)
    assert np.asarray(got[0]).shape == (4, 3, 2)
    with pytest.raises(ValueError, match="ndim >= 3"):
        pnn.BatchApply(lambda a: a, num_dims=3)(pjnp.asarray(x[0]))


# ----------------------------------------------------------------------------- FrozenDict & aliases
def test_frozen_dict_matches_flax():
    from flax.core import frozen_dict as ffd
    from podlet.nn import frozen_dict as pfd
    d = {"b": {"x": 1, "y": np.float32(2)}, "a": 3}
    p, f = pfd.FrozenDict(d), ffd.FrozenDict(d)
    assert repr(p) == repr(f) and p.pretty_repr(2) == f.pretty_repr(2)
    assert hash(p) == hash(pfd.FrozenDict(d)) and p == pfd.FrozenDict(d)
    assert isinstance(p["b"], pfd.FrozenDict) and p.unfreeze() == f.unfreeze() == d
    with pytest.raises(ValueError, match="immutable"):
        p["a"] = 1
    (p2, v), (f2, w) = p.pop("a"), f.pop("a")
    assert v == w and p2.unfreeze() == f2.unfreeze()
    assert p.copy({"c": 4}).unfreeze() == f.copy({"c": 4}).unfreeze()
    assert repr(p.keys()) == repr(f.keys())
    # a pytree flattened with sorted keys, like Flax's
    assert [str(k) for k, _ in podlet.tree_util.tree_flatten_with_path(p)[0]] == \
           [str(k) for k, _ in jax.tree_util.tree_flatten_with_path(f)[0]]
    assert podlet.tree_util.tree_leaves(p) == jax.tree_util.tree_leaves(f)
    doubled = podlet.tree_util.tree_map(lambda v: v * 2, p)
    assert isinstance(doubled, pfd.FrozenDict) and doubled["b"]["x"] == 2
    assert pfd.unfreeze(pfd.freeze(d)) == d and pfd.copy(d, {"a": 0})["a"] == 0 and pfd.pop(d, "a")[1] == 3
    assert pfd.pretty_repr(d) == ffd.pretty_repr(d)
    assert pnn.FrozenDict is pfd.FrozenDict


def test_initializer_aliases_and_named_call():
    for name in ("ones", "zeros", "ones_init", "zeros_init"):
        assert getattr(pnn, name) is getattr(pnn.initializers, name)
    k = podlet.random.PRNGKey(0)
    np.testing.assert_array_equal(np.asarray(pnn.ones(k, (2, 3))), np.asarray(fnn.ones(jax.random.PRNGKey(0), (2, 3))))
    np.testing.assert_array_equal(np.asarray(pnn.zeros_init()(k, (2,))),
                                  np.asarray(fnn.zeros_init()(jax.random.PRNGKey(0), (2,))))
    # named calls only label profiles: the switches and the wrapper leave results alone
    from podlet.nn import module as pmod

    class Foo(pnn.Module):
        @pnn.compact
        def __call__(self, x):
            return pnn.Dense(2)(x)
    Foo.__call__ = pnn.named_call(Foo.__call__)
    x = pjnp.ones((1, 3))
    v = Foo().init(k, x)
    pnn.enable_named_call()
    assert pmod._use_named_call
    with pnn.override_named_call(False):
        assert not pmod._use_named_call
        y = Foo().apply(v, x)
    assert pmod._use_named_call
    pnn.disable_named_call()
    assert not pmod._use_named_call
    np.testing.assert_array_equal(np.asarray(y), np.asarray(Foo().apply(v, x)))


def test_intercept_methods_is_exported():
    calls = []

    def interceptor(next_fun, args, kwargs, context):
        calls.append((type(context.module).__name__, context.method_name))
        return next_fun(*args, **kwargs)

    x = pjnp.ones((1, 3))
    v = pnn.Dense(2).init(podlet.random.PRNGKey(0), x)
    with pnn.intercept_methods(interceptor):
        pnn.Dense(2).apply(v, x)
    assert calls == [("Dense", "__call__")]


# ----------------------------------------------------------------------------- lifted autodiff
def lifted_model(nn, np_, mode):
    class Scale(nn.Module):
        @nn.compact
        def __call__(self, x, y):
            p = self.param("scale", nn.initializers.normal(1.0), (3,))
            return np_.sum(p * np_.sin(x) * y), p

    class Model(nn.Module):
        @nn.compact
        def __call__(self, x, y):
            if mode == "vjp":
                (z, aux), bwd = nn.vjp(lambda mdl, x, y: mdl(x, y), Scale(), x, y)
                return (z, aux) + tuple(bwd((np_.ones(()), np_.ones((3,)))))
            if mode == "vjp_aux":
                z, bwd, aux = nn.vjp(lambda mdl, x, y: mdl(x, y), Scale(), x, y, has_aux=True)
                return (z, aux) + tuple(bwd(np_.ones(())))
            if mode == "grad":
                return nn.grad(lambda mdl, x, y: mdl(x, y)[0], Scale(), x, y)
            if mode == "grad_aux":
                return nn.grad(lambda mdl, x, y: mdl(x, y), Scale(), x, y, has_aux=True)
            if mode == "value_and_grad":
                return nn.value_and_grad(lambda mdl, x, y: mdl(x, y)[0], Scale(), x, y)
            if mode == "jvp":
                scale = Scale()
                if self.is_initializing():
                    scale(x, y)
                tangent = {"params": {"scale": np_.array([1.0, 0.0, 2.0], np_.float32)}}
                return nn.jvp(lambda mdl, x, y: mdl(x, y)[0], scale, (x, y), (np_.ones_like(x), np_.zeros_like(y)),
                              tangent)
    return Model()


@pytest.mark.parametrize("mode", ["vjp", "vjp_aux", "grad", "grad_aux", "value_and_grad", "jvp"])
def test_lifted_autodiff_matches_flax(mode):
    x, y = np.array([0.5, 1.0, -2.0], np.float32), np.array([4.0, 5.0, 6.0], np.float32)
    fv = lifted_model(fnn, jnp, mode).init(jax.random.PRNGKey(0), jnp.asarray(x), jnp.asarray(y))
    pv = lifted_model(pnn, pjnp, mode).init(podlet.random.PRNGKey(0), pjnp.asarray(x), pjnp.asarray(y))
    close_tree(pv, fv, rtol=0, atol=0)
    got = lifted_model(pnn, pjnp, mode).apply(to_podlet(fv), pjnp.asarray(x), pjnp.asarray(y))
    want = lifted_model(fnn, jnp, mode).apply(fv, jnp.asarray(x), jnp.asarray(y))
    assert podlet.tree_util.tree_structure(podlet.tree_util.tree_map(np.asarray, got)) == \
        podlet.tree_util.tree_structure(jax.tree_util.tree_map(np.asarray, want))
    close_tree(got, want, rtol=1e-6)
    if mode == "vjp":
        assert sorted(got[2]) == ["params"]   # the vjp_variables' gradients, as a variables dict


def test_lifted_value_and_grad_needs_a_scalar():
    class Vec(pnn.Module):
        @pnn.compact
        def __call__(self, x):
            return pnn.value_and_grad(lambda mdl, x: x * 2, self, x)

    with pytest.raises(ValueError, match="scalar-valued"):
        Vec().init(podlet.random.PRNGKey(0), pjnp.ones((3,)))
