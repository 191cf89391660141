"""podlet.nn's module system against flax.linen 0.12.8 as the oracle.

Every model is written once as a function of the library (``nn``, ``jnp``) and built for
both. Checked: identical variable trees (paths, shapes, dtypes) for compact and setup
models (nested modules, lists/dicts of submodules, explicit names, reused and shared
submodules, Sequential); bit-identical parameters from ``init`` with the same key (the
rng derivation is Flax's: fold_in of a SHA-1 of path and counter) and identical
``make_rng`` keys; equal ``apply`` outputs with parameters copied across; mutable
collections; Flax's error types and messages; ``jit`` / ``value_and_grad`` of apply.
"""
import re

import ml_dtypes
import numpy as np
import pytest

import jax
import jax.numpy as jnp
import flax.linen as fnn
from flax import errors as ferrors

import podlet
import podlet.numpy as pjnp
from podlet import nn as pnn

BF16 = ml_dtypes.bfloat16
X = np.random.RandomState(0).randn(3, 5).astype(np.float32)


# ----------------------------------------------------------------------------- helpers
def both(factory):
    """(podlet class, flax class) from factory(nn, jnp)."""
    return factory(pnn, pjnp), factory(fnn, jnp)


def pkey(seed=0):
    return podlet.random.PRNGKey(seed)


def jkey(seed=0):
    return jax.random.PRNGKey(seed)


def spec(tree, tu):
    """Nested dict of (shape, dtype) from a variables dict."""
    return tu.tree_map(lambda a: (tuple(np.shape(a)), np.asarray(a).dtype.name), tree)


def assert_same_tree(pv, fv):
    assert type(pv) is dict and type(fv) is dict
    assert spec(pv, podlet.tree_util) == spec(fv, jax.tree_util)


def assert_same_bits_tree(pv, fv):
    assert_same_tree(pv, fv)
    pl = podlet.tree_util.tree_flatten_with_path(pv)[0]
    fl = jax.tree_util.tree_flatten_with_path(fv)[0]
    for (pp, a), (fp, b) in zip(pl, fl):
        a, b = np.asarray(a), np.asarray(b)
        assert a.tobytes() == b.tobytes(), f"{podlet.tree_util.keystr(pp)} differs"


def to_podlet(tree):
    return jax.tree_util.tree_map(lambda a: pjnp.asarray(np.asarray(a)), tree)


def to_jax(tree):
    return podlet.tree_util.tree_map(lambda a: jnp.asarray(np.asarray(a)), tree)


def close(a, b, tol=1e-6):
    np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32), rtol=tol, atol=tol)


# ----------------------------------------------------------------------------- models
def mlp(nn, jnp):
    class MLP(nn.Module):
        features: tuple = (6, 4)

        @nn.compact
        def __call__(self, x):
            for f in self.features[:-1]:
                x = nn.relu(nn.Dense(f)(x))
            return nn.Dense(self.features[-1])(x)
    return MLP


def setup_model(nn, jnp):
    class Block(nn.Module):
        features: int

        @nn.compact
        def __call__(self, x):
            h = nn.Dense(self.features, name="proj")(x)
            return nn.relu(h) + nn.Dense(self.features, use_bias=False)(x)

    class Model(nn.Module):
        def setup(self):
            self.inp = nn.Dense(6)
            self.layers = [Block(6), Block(6)]
            self.heads = {"a": nn.Dense(2), "b": nn.Dense(3)}
            self.shared = nn.Dense(6)
            self.scale = self.param("scale", nn.initializers.ones, (6,))

        def __call__(self, x):
            x = self.inp(x)
            for layer in self.layers:
                x = layer(x)
            x = self.shared(self.shared(x)) * self.scale   # reused: one set of params
            return self.heads["a"](x), self.heads["b"](x)

        def encode(self, x):
            return self.inp(x)
    return Model


def compact_nested(nn, jnp):
    class Inner(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(4)(x) + nn.Dense(4)(x)

    class Outer(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.Dense(4)(x)
            x = Inner()(x)
            x = Inner(name="named_inner")(x)
            d = nn.Dense(4)
            x = d(d(x))                                   # reused inline
            x = nn.Sequential([nn.Dense(4), nn.relu, nn.Dense(2)])(x)
            bias = self.param("b", nn.initializers.zeros_init(), (2,))
            return x + bias
    return Outer


def attr_shared(nn, jnp):
    class Head(nn.Module):
        dense: nn.Module

        @nn.compact
        def __call__(self, x):
            return self.dense(x) + nn.Dense(3)(x)

    class Model(nn.Module):
        def setup(self):
            self.shared = nn.Dense(3)
            self.h1 = Head(self.shared)          # shared by reference: params live at "shared"
            self.h2 = Head(nn.Dense(3))          # owned: params live at h2/dense

        def __call__(self, x):
            return self.h1(x) + self.h2(x)
    return Model


def counter_model(nn, jnp):
    class Counter(nn.Module):
        @nn.compact
        def __call__(self, x):
            count = self.variable("batch_stats", "count", lambda: jnp.zeros((), jnp.int32))
            mean = self.variable("batch_stats", "mean", lambda s: jnp.zeros(s, jnp.float32), x.shape[-1:])
            if not self.is_initializing():
                count.value += 1
                mean.value = 0.9 * mean.value + 0.1 * jnp.mean(x, axis=0)
            return nn.Dense(2)(x - mean.value)

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            return Counter()(Counter()(x) + 1.0)
    return Net


def sequential(nn, jnp):
    return lambda: nn.Sequential([nn.Dense(4), nn.relu, nn.Dense(2)])


# ----------------------------------------------------------------------------- trees
@pytest.mark.parametrize("factory", [mlp, setup_model, compact_nested, attr_shared, counter_model, sequential],
                         ids=["mlp", "setup", "compact_nested", "attr_shared", "counter", "sequential"])
def test_init_same_tree_and_bits(factory):
    P, F = both(factory)
    pv = P().init(pkey(1), X)
    fv = F().init(jkey(1), X)
    assert_same_bits_tree(pv, fv)


def test_expected_names():
    P, _ = both(setup_model)
    pv = P().init(pkey(0), X)["params"]
    assert sorted(pv) == ["heads_a", "heads_b", "inp", "layers_0", "layers_1", "scale", "shared"]
    assert sorted(pv["layers_0"]) == ["Dense_0", "proj"]
    P, _ = both(compact_nested)
    pv = P().init(pkey(0), X)["params"]
    # the Dense layers handed to the inline Sequential were built in Outer's compact
    # method, so (as in Flax) they belong to Outer: Dense_2, Dense_3, no Sequential_0
    assert sorted(pv) == ["Dense_0", "Dense_1", "Dense_2", "Dense_3", "Inner_0", "b", "named_inner"]
    assert sorted(pv["Inner_0"]) == ["Dense_0", "Dense_1"]
    pv = sequential(pnn, pjnp)().init(pkey(0), X)["params"]
    assert sorted(pv) == ["layers_0", "layers_2"]


@pytest.mark.parametrize("factory", [mlp, setup_model, compact_nested, attr_shared, sequential],
                         ids=["mlp", "setup", "compact_nested", "attr_shared", "sequential"])
def test_apply_with_params_copied_across(factory):
    P, F = both(factory)
    fv = F().init(jkey(2), X)
    want = F().apply(fv, X)
    got = P().apply(to_podlet(fv), X)
    jax.tree_util.tree_map(close, to_jax(got), want)
    # and the other direction
    pv = P().init(pkey(3), X)
    jax.tree_util.tree_map(close, to_jax(P().apply(pv, X)), F().apply(to_jax(pv), X))


def test_apply_method_and_init_with_output():
    P, F = both(setup_model)
    fv = F().init(jkey(0), X)
    pv = to_podlet(fv)
    close(P().apply(pv, X, method="encode"), F().apply(fv, X, method="encode"))
    close(P().apply(pv, X, method=P.encode), F().apply(fv, X, method=F.encode))
    close(P().apply(pv, X, method=lambda m, x: m.encode(x) * 2), F().apply(fv, X, method=lambda m, x: m.encode(x) * 2))
    (pa, pb), pv2 = P().init_with_output(pkey(0), X)
    (fa, fb), fv2 = F().init_with_output(jkey(0), X)
    assert_same_bits_tree(pv2, fv2)
    close(pa, fa)
    close(pb, fb)
    # init with method: only the variables that method touches
    pv3 = P().init(pkey(0), X, method="encode")
    fv3 = F().init(jkey(0), X, method="encode")
    assert_same_bits_tree(pv3, fv3)


# ----------------------------------------------------------------------------- rngs
def rng_model(nn, jnp):
    class Sub(nn.Module):
        @nn.compact
        def __call__(self):
            return self.make_rng("dropout")

    class M(nn.Module):
        @nn.compact
        def __call__(self):
            s = Sub()
            return (self.make_rng("dropout"), self.make_rng("dropout"), s(), s(), Sub()(),
                    self.make_rng("other"), self.has_rng("dropout"), self.has_rng("other"))
    return M


def test_make_rng_matches_flax():
    P, F = both(rng_model)
    pout = P().apply({}, rngs={"dropout": pkey(7), "params": pkey(1)})
    fout = F().apply({}, rngs={"dropout": jkey(7), "params": jkey(1)})
    for a, b in zip(pout[:6], fout[:6]):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    assert pout[6:] == (True, False) and fout[6:] == (True, False)
    # successive keys differ; a reused submodule draws fresh keys
    assert len({tuple(np.asarray(k)) for k in pout[:6]}) == 6
    with pytest.raises(pnn.errors.InvalidRngError) as e:
        P().apply({}, rngs={"other": pkey(0)})
    with pytest.raises(ferrors.InvalidRngError) as fe:
        F().apply({}, rngs={"other": jkey(0)})
    assert str(e.value) == str(fe.value)


def test_make_rng_under_jit_is_deterministic():
    P, _ = both(rng_model)
    f = podlet.jit(lambda k: P().apply({}, rngs={"dropout": k, "params": k})[:6])
    a, b = f(pkey(7)), f(pkey(7))
    eager = P().apply({}, rngs={"dropout": pkey(7), "params": pkey(7)})[:6]
    for x, y, z in zip(a, b, eager):
        assert np.array_equal(np.asarray(x), np.asarray(y)) and np.array_equal(np.asarray(x), np.asarray(z))


# ----------------------------------------------------------------------------- mutable collections
def test_mutable_batch_stats_like_flax():
    P, F = both(counter_model)
    pv, fv = P().init(pkey(0), X), F().init(jkey(0), X)
    assert_same_bits_tree(pv, fv)
    assert sorted(pv) == ["batch_stats", "params"]
    pout, pupd = P().apply(pv, X, mutable=["batch_stats"])
    fout, fupd = F().apply(fv, X, mutable=["batch_stats"])
    assert sorted(pupd) == sorted(fupd) == ["batch_stats"]
    assert spec(pupd, podlet.tree_util) == spec(fupd, jax.tree_util)
    jax.tree_util.tree_map(close, to_jax(pupd), fupd)
    close(pout, fout)
    assert int(np.asarray(pupd["batch_stats"]["Counter_0"]["count"])) == 1
    # the input variables are not modified
    assert int(np.asarray(pv["batch_stats"]["Counter_0"]["count"])) == 0
    # a second step from the updated stats
    pv2 = {**pv, **pupd}
    fv2 = {**fv, **fupd}
    _, pupd2 = P().apply(pv2, X, mutable="batch_stats")
    _, fupd2 = F().apply(fv2, X, mutable="batch_stats")
    jax.tree_util.tree_map(close, to_jax(pupd2), fupd2)
    # mutable=True returns every collection
    _, allp = P().apply(pv, X, mutable=True)
    _, allf = F().apply(fv, X, mutable=True)
    assert sorted(allp) == sorted(allf) == ["batch_stats", "params"]


def test_mutating_immutable_collection_errors_like_flax():
    P, F = both(counter_model)
    pv, fv = P().init(pkey(0), X), F().init(jkey(0), X)
    with pytest.raises(pnn.errors.ModifyScopeVariableError) as e:
        P().apply(pv, X)
    with pytest.raises(ferrors.ModifyScopeVariableError) as fe:
        F().apply(fv, X)
    assert str(e.value) == str(fe.value)
    assert '"/Counter_1"' in str(e.value) and 'collection "batch_stats" is immutable' in str(e.value)
    assert isinstance(e.value, podlet.PodletError)


def test_variable_api():
    def factory(nn, jnp):
        class V(nn.Module):
            @nn.compact
            def __call__(self):
                v = self.variable("state", "v", jnp.zeros, (2,))
                out = (v.is_mutable(), self.is_mutable_collection("state"), self.is_mutable_collection("params"),
                       self.is_initializing(), self.has_variable("state", "v"), self.has_variable("state", "w"))
                if v.is_mutable():
                    v.value = v.value + 1.0
                return out
        return V
    P, F = both(factory)
    for kw in [dict(), dict(mutable=["state"]), dict(mutable=False)]:
        pv = P().init(pkey(0))
        fv = F().init(jkey(0))
        assert_same_tree(pv, fv)
        pr = P().apply(pv, **kw)
        fr = F().apply(fv, **kw)
        if kw.get("mutable"):
            assert pr[0] == fr[0]
            jax.tree_util.tree_map(close, to_jax(pr[1]), fr[1])
        else:
            assert pr == fr
    assert P().init_with_output(pkey(0))[0] == F().init_with_output(jkey(0))[0]


def test_sow_and_capture_intermediates():
    def factory(nn, jnp):
        class S(nn.Module):
            @nn.compact
            def __call__(self, x):
                h = nn.Dense(3)(x)
                self.sow("intermediates", "h", h)
                return nn.Dense(2)(h)
        return S
    P, F = both(factory)
    fv = F().init(jkey(0), X)
    assert sorted(P().init(pkey(0), X)) == sorted(fv) == ["params"]
    pv = to_podlet(fv)
    _, pst = P().apply(pv, X, mutable=["intermediates"])
    _, fst = F().apply(fv, X, mutable=["intermediates"])
    assert spec(pst, podlet.tree_util) == spec(fst, jax.tree_util)
    jax.tree_util.tree_map(close, to_jax(pst), fst)
    _, pst = P().apply(pv, X, capture_intermediates=True)
    _, fst = F().apply(fv, X, capture_intermediates=True)
    assert spec(pst, podlet.tree_util) == spec(fst, jax.tree_util)
    jax.tree_util.tree_map(close, to_jax(pst), fst)


# ----------------------------------------------------------------------------- errors
def test_param_shape_mismatch_error():
    P, F = both(mlp)
    pv = P().init(pkey(0), X)
    fv = F().init(jkey(0), X)
    x7 = np.ones((3, 7), np.float32)
    with pytest.raises(pnn.errors.ScopeParamShapeError) as e:
        P().apply(pv, x7)
    with pytest.raises(ferrors.ScopeParamShapeError) as fe:
        F().apply(fv, x7)
    assert str(e.value) == str(fe.value)
    assert '"kernel" in "/Dense_0"' in str(e.value) and "(7, 6)" in str(e.value) and "(5, 6)" in str(e.value)


def test_missing_params_errors():
    P, F = both(mlp)
    pv = P().init(pkey(0), X)
    fv = F().init(jkey(0), X)
    for pin, fin, err in [({}, {}, "ScopeCollectionNotFound"),
                          ({"params": {"Dense_0": pv["params"]["Dense_0"]}},
                           {"params": {"Dense_0": fv["params"]["Dense_0"]}}, "ScopeParamNotFoundError")]:
        with pytest.raises(getattr(pnn.errors, err)) as e:
            P().apply(pin, X)
        with pytest.raises(getattr(ferrors, err)) as fe:
            F().apply(fin, X)
        assert str(e.value) == str(fe.value)
    with pytest.raises(pnn.errors.ApplyScopeInvalidVariablesStructureError) as e:
        P().apply({"params": pv}, X)
    with pytest.raises(ferrors.ApplyScopeInvalidVariablesStructureError) as fe:
        F().apply({"params": fv}, X)
    assert str(e.value) == str(fe.value)


def misuse_models(nn, jnp):
    class DupName(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(2, name="d")(x) + nn.Dense(2, name="d")(x)

    class DupParam(nn.Module):
        @nn.compact
        def __call__(self, x):
            return self.param("w", nn.initializers.zeros, (1,)) + self.param("w", nn.initializers.zeros, (1,))

    class SubmoduleOutsideCompact(nn.Module):
        def __call__(self, x):
            return nn.Dense(2)(x)

    class SetAttr(nn.Module):
        @nn.compact
        def __call__(self, x):
            self.foo = 1
            return x

    class SetFieldInSetup(nn.Module):
        features: int = 2

        def setup(self):
            self.features = 3

        def __call__(self, x):
            return x

    return dict(DupName=DupName, DupParam=DupParam, SubmoduleOutsideCompact=SubmoduleOutsideCompact,
                SetAttr=SetAttr, SetFieldInSetup=SetFieldInSetup)


@pytest.mark.parametrize("name,err", [("DupName", "NameInUseError"), ("DupParam", "NameInUseError"),
                                      ("SubmoduleOutsideCompact", "AssignSubModuleError"),
                                      ("SetAttr", "SetAttributeFrozenModuleError"),
                                      ("SetFieldInSetup", "SetAttributeInModuleSetupError")])
def test_misuse_errors_like_flax(name, err):
    P, F = both(misuse_models)
    with pytest.raises(getattr(pnn.errors, err)) as e:
        P[name]().init(pkey(0), X)
    with pytest.raises(getattr(ferrors, err)) as fe:
        F[name]().init(jkey(0), X)
    assert str(e.value) == str(fe.value)


def test_unbound_module_errors():
    P, F = both(mlp)
    with pytest.raises(pnn.errors.CallCompactUnboundModuleError) as e:
        P()(X)
    with pytest.raises(ferrors.CallCompactUnboundModuleError) as fe:
        F()(X)
    assert str(e.value) == str(fe.value)
    P, F = both(setup_model)
    with pytest.raises(AttributeError) as e:
        P().inp
    with pytest.raises(AttributeError) as fe:
        F().inp
    assert str(e.value) == str(fe.value)
    with pytest.raises(ValueError, match="unbound"):
        P().make_rng("params")


# ----------------------------------------------------------------------------- dataclass behaviour
def test_module_dataclass_fields_and_clone():
    fields = [f.name for f in __import__("dataclasses").fields(pnn.Dense)]
    ffields = [f.name for f in __import__("dataclasses").fields(fnn.Dense)]
    assert fields == ffields
    d = pnn.Dense(3)
    assert d.features == 3 and d.use_bias and d.dtype is None and d.param_dtype == np.float32
    assert d.name is None and d.parent is None
    d2 = d.clone(features=5, name="x")
    assert d2.features == 5 and d2.name == "x" and d.features == 3
    assert pnn.Dense(3) == pnn.Dense(3) and hash(pnn.Dense(3)) == hash(pnn.Dense(3))
    P, F = both(mlp)
    assert [f.name for f in __import__("dataclasses").fields(P)] == [f.name for f in __import__("dataclasses").fields(F)]
    d.features = 4          # top-level modules are not frozen (as in Flax) ...
    assert d.features == 4
    P, F = both(setup_model)
    pm = P().bind(P().init(pkey(0), X))
    with pytest.raises(pnn.errors.SetAttributeFrozenModuleError):
        pm.inp.features = 4  # ... bound ones are

    # subclass of a subclass: own fields before parent/name; positional construction
    class Base(pnn.Module):
        a: int

    class Sub(Base):
        b: int = 2

    s = Sub(1, 3)
    assert (s.a, s.b) == (1, 3)
    assert [f.name for f in __import__("dataclasses").fields(Sub)] == ["a", "b", "parent", "name"]
    assert "Dense(" in repr(pnn.Dense(3)) and "features = 3" in repr(pnn.Dense(3))


def test_bind_and_unbind():
    P, F = both(setup_model)
    fv = F().init(jkey(0), X)
    pv = to_podlet(fv)
    pm, fm = P().bind(pv), F().bind(fv)
    close(pm.encode(X), fm.encode(X))
    close(pm.inp(X), fm.inp(X))
    assert pm.inp.path == ("inp",) and pm.layers[1].path == ("layers_1",)
    assert isinstance(pm.layers, tuple)
    m, v = pm.unbind()
    assert m.scope is None and spec(v, podlet.tree_util) == spec(pv, podlet.tree_util)


# ----------------------------------------------------------------------------- dtypes
def test_dense_dtype_promotion():
    def factory(nn, jnp):
        class M(nn.Module):
            @nn.compact
            def __call__(self, x):
                a = nn.Dense(4, dtype=jnp.bfloat16)(x)                       # f32 params, bf16 compute
                b = nn.Dense(4, param_dtype=jnp.bfloat16)(x)                 # bf16 params, promoted to f32
                c = nn.Dense(4, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16, use_bias=False)(x)
                return a, b, c
        return M
    P, F = both(factory)
    pv, fv = P().init(pkey(4), X), F().init(jkey(4), X)
    assert_same_bits_tree(pv, fv)
    pout, fout = P().apply(pv, X), F().apply(fv, X)
    for p, f in zip(pout, fout):
        assert np.asarray(p).dtype == np.asarray(f).dtype
    close(pout[0], fout[0], 1e-2)
    close(pout[1], fout[1], 1e-6)
    close(pout[2], fout[2], 1e-2)
    # bf16 input: the promoted dtype of input and params (f32 for f32 params)
    xb = X.astype(BF16)
    pout, fout = P().apply(pv, xb), F().apply(fv, xb)
    assert [np.asarray(p).dtype for p in pout] == [np.asarray(f).dtype for f in fout] == [BF16, BF16, BF16]
    m = pnn.Dense(4)
    assert np.asarray(m.apply(m.init(pkey(0), xb), xb)).dtype == np.float32


def test_bf16_compute_value_and_grad():
    """DESIGN's precision policy: f32 params, bf16 compute, f32 grads; compared with Flax."""
    def factory(nn, jnp):
        class M(nn.Module):
            @nn.compact
            def __call__(self, x):
                x = nn.relu(nn.Dense(16, dtype=jnp.bfloat16)(x))
                return nn.Dense(3, dtype=jnp.bfloat16)(x).astype(jnp.float32)
        return M
    P, F = both(factory)
    fv = F().init(jkey(0), X)
    pv = to_podlet(fv)
    pl, pg = podlet.jit(podlet.value_and_grad(lambda p: pjnp.mean(P().apply({"params": p}, X) ** 2)))(pv["params"])
    fl, fg = jax.value_and_grad(lambda p: jnp.mean(F().apply({"params": p}, X) ** 2))(fv["params"])
    close(pl, fl, 1e-3)
    assert spec(pg, podlet.tree_util) == spec(fg, jax.tree_util)   # f32 grads
    jax.tree_util.tree_map(lambda a, b: close(a, b, 2e-3), to_jax(pg), fg)


def test_dense_general():
    def factory(nn, jnp):
        class M(nn.Module):
            @nn.compact
            def __call__(self, x):
                y = nn.DenseGeneral((2, 3), axis=-1)(x)           # (3, 2, 3)
                return nn.DenseGeneral(4, axis=(-2, -1))(y)        # (3, 4)
        return M
    P, F = both(factory)
    pv, fv = P().init(pkey(4), X), F().init(jkey(4), X)
    assert_same_bits_tree(pv, fv)
    close(P().apply(pv, X), F().apply(fv, X))


# ----------------------------------------------------------------------------- transformations
def test_apply_under_jit_and_value_and_grad():
    P, F = both(mlp)
    fv = F().init(jkey(5), X)
    pv = to_podlet(fv)
    y = np.arange(12, dtype=np.float32).reshape(3, 4) / 10

    jitted = podlet.jit(P().apply)
    close(jitted(pv, X), F().apply(fv, X))
    close(jitted(pv, X * 2), F().apply(fv, X * 2))
    assert jitted.trace_count == 1

    def loss(nnp, model):
        return lambda params, x, y: nnp.mean((model.apply({"params": params}, x) - y) ** 2)

    pl, pg = podlet.jit(podlet.value_and_grad(loss(pjnp, P())))(pv["params"], X, y)
    fl, fg = jax.value_and_grad(loss(jnp, F()))(fv["params"], X, y)
    close(pl, fl, 1e-6)
    assert spec(pg, podlet.tree_util) == spec(fg, jax.tree_util)
    jax.tree_util.tree_map(lambda a, b: close(a, b, 1e-5), to_jax(pg), fg)
    # eager value_and_grad too
    pl2, pg2 = podlet.value_and_grad(loss(pjnp, P()))(pv["params"], X, y)
    close(pl2, pl)


def test_init_and_mutable_apply_under_jit():
    P, F = both(counter_model)
    init = podlet.jit(lambda k, x: P().init(k, x))
    pv = init(pkey(0), X)
    assert_same_bits_tree(pv, F().init(jkey(0), X))
    step = podlet.jit(lambda v, x: P().apply(v, x, mutable=["batch_stats"]))
    out, upd = step(pv, X)
    fout, fupd = F().apply(F().init(jkey(0), X), X, mutable=["batch_stats"])
    close(out, fout)
    jax.tree_util.tree_map(close, to_jax(upd), fupd)


# ----------------------------------------------------------------------------- tabulate
def _strip_ansi(s):
    return re.sub(r"\x1b\[[0-9;]*m", "", s)


def test_tabulate():
    P, F = both(setup_model)
    ptab = P().tabulate(pkey(0), X)
    ftab = _strip_ansi(F().tabulate(jkey(0), X))
    ptotal = re.search(r"Total Parameters: ([\d,]+ \([^)]*\))", ptab).group(1)
    ftotal = re.search(r"Total Parameters: ([\d,]+ \([^)]*\))", ftab).group(1)
    assert ptotal == ftotal
    for path in ["inp", "layers_0/proj", "heads_b", "shared"]:
        assert path in ptab
    assert "float32[3,6]" in ptab
    text = pnn.tabulate(P(), pkey(0), depth=1)(X)
    assert "layers_0/proj" not in text and "Total Parameters: " + ptotal in text
