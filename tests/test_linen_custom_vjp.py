"""nn.custom_vjp and nn.fold_rngs (flax.linen's lifted transforms, issue 26) against
flax 0.12.8 on the same inputs: the same variables, outputs, gradients with respect to
params and inputs, and rng streams."""
import numpy as np
import pytest

import jax
import jax.numpy as jnp
import flax.linen as fnn

import podlet
import podlet.numpy as pnp
import podlet.nn as pnn

LIBS = {"flax": (fnn, jnp, jax), "podlet": (pnn, pnp, podlet)}


def _assert_trees_close(got, want, rtol=1e-6, atol=1e-6):
    got_l, got_t = jax.tree_util.tree_flatten(jax.tree_util.tree_map(np.asarray, got))
    want_l, want_t = jax.tree_util.tree_flatten(jax.tree_util.tree_map(np.asarray, want))
    assert got_t == want_t
    for g, w in zip(got_l, want_l):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def sign_grad_model(nn, np_, lib):
    """flax.linen.custom_vjp's docstring example: Dense with sign()ed parameter gradients."""
    class Foo(nn.Module):
        @nn.compact
        def __call__(self, x):
            def f(mdl, x):
                return mdl(x)

            def fwd(mdl, x):
                return nn.vjp(f, mdl, x)

            def bwd(vjp_fn, y_t):
                params_t, *inputs_t = vjp_fn(y_t)
                params_t = lib.tree_util.tree_map(np_.sign, params_t)
                return (params_t, *inputs_t)

            sign_grad = nn.custom_vjp(f, forward_fn=fwd, backward_fn=bwd)
            return sign_grad(nn.Dense(1), x).reshape(())
    return Foo


def scaled_grad_model(nn, np_, lib):
    """A hand-written backward from a residual snapshot of the kernel, a non-differentiated
    scale argument, and a 'stats' counter the forward pass updates."""
    class Counted(nn.Module):
        @nn.compact
        def __call__(self, x):
            count = self.variable("stats", "count", lambda: np_.zeros((), np_.int32))
            count.value = count.value + 1
            return nn.Dense(3, name="dense")(x)

    class Scaled(nn.Module):
        @nn.compact
        def __call__(self, x, scale):
            def f(mdl, x, scale):
                return mdl(x)

            def fwd(mdl, x, scale):
                y = f(mdl, x, scale)
                return y, (x, mdl.variables["params"]["dense"]["kernel"])

            def bwd(scale, res, g):
                x, kernel = res
                params_t = {"params": {"dense": {"kernel": scale * np_.einsum("bi,bo->io", x, g),
                                                 "bias": scale * np_.sum(g, axis=0)}}}
                return params_t, scale * (g @ kernel.T)

            return nn.custom_vjp(f, fwd, bwd, nondiff_argnums=(2,))(Counted(name="counted"), x, scale)
    return Scaled


@pytest.fixture(scope="module")
def x2():
    return np.array([1.0, -2.0], np.float32)


def test_flax_docstring_example_sign_grad(x2):
    got, want = {}, {}
    for name, (nn, np_, lib) in LIBS.items():
        model = sign_grad_model(nn, np_, lib)()
        variables = model.init(lib.random.key(0), x2)
        grads = lib.grad(model.apply, argnums=(0, 1))(variables, x2)
        jitted = lib.jit(lib.grad(model.apply, argnums=(0, 1)))(variables, x2)
        (want if name == "flax" else got)[name] = (variables, model.apply(variables, x2), grads, jitted)
    (pv, py, pg, pj), (fv, fy, fg, fj) = got["podlet"], want["flax"]
    _assert_trees_close(dict(pv), fv)
    _assert_trees_close(py, fy)
    _assert_trees_close((dict(pg[0]), pg[1]), (fg[0], fg[1]))
    _assert_trees_close((dict(pj[0]), pj[1]), (fg[0], fg[1]))
    kernel_grad = np.asarray(pg[0]["params"]["Dense_0"]["kernel"])
    assert set(np.unique(kernel_grad)) <= {-1.0, 1.0}  # the sign()ed gradient, not x itself


def test_custom_backward_with_residuals_nondiff_args_and_state():
    x = np.random.default_rng(1).standard_normal((4, 5)).astype(np.float32)
    out = {}
    for name, (nn, np_, lib) in LIBS.items():
        model = scaled_grad_model(nn, np_, lib)()
        variables = model.init(lib.random.key(3), x, 0.5)
        params, stats = {"params": variables["params"]}, {"stats": variables["stats"]}

        def loss(params, x):
            y, new_state = model.apply({**params, **stats}, x, 0.5, mutable=["stats"])
            return np_.sum(y ** 2), new_state

        (value, state), grads = lib.value_and_grad(loss, argnums=(0, 1), has_aux=True)(params, x)
        plain = lib.grad(lambda p, x: np_.sum(model.apply({**p, **stats}, x, 1.0, mutable=["stats"])[0] ** 2),
                         argnums=(0, 1))(params, x)
        out[name] = (dict(variables), value, dict(state), grads, plain)
    (pv, pval, pstate, pgrads, pplain), (fv, fval, fstate, fgrads, fplain) = out["podlet"], out["flax"]
    _assert_trees_close(pv, fv)
    _assert_trees_close(pval, fval, rtol=1e-5)
    count = lambda s: int(np.asarray(s["stats"]["counted"]["count"]))  # noqa: E731
    assert count(pstate) == count(fstate) == 2
    for g, w in ((pgrads, fgrads), (pplain, fplain)):
        _assert_trees_close((dict(g[0]), g[1]), w, rtol=1e-5, atol=1e-5)
    # scale 0.5 halves the custom gradient: the backward rule really ran
    np.testing.assert_allclose(np.asarray(pgrads[1]), 0.5 * np.asarray(pplain[1]), rtol=1e-6)


def test_custom_vjp_without_gradient_runs_fn(x2):
    for name, (nn, np_, lib) in LIBS.items():
        model = sign_grad_model(nn, np_, lib)()
        variables = model.init(lib.random.key(0), x2)
        dense = variables["params"]["Dense_0"]
        want = float(np.asarray(x2 @ np.asarray(dense["kernel"]) + np.asarray(dense["bias"]))[0])
        assert float(model.apply(variables, x2)) == pytest.approx(want, rel=1e-6)


def rng_models(nn, random):
    class Noisy(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(3)(x) + random.normal(self.make_rng("noise"), (3,))

    class Outer(nn.Module):
        @nn.compact
        def __call__(self, x):
            Folded = nn.fold_rngs(Noisy)
            a, b, c = Folded()(x), Folded()(x), Noisy()(x)
            return a + 2 * b + 3 * c + random.normal(self.make_rng("noise"), (3,))

    class Method(nn.Module):
        @nn.fold_rngs
        @nn.compact
        def __call__(self, x):
            return nn.Dense(2)(x) * random.uniform(self.make_rng("noise"), (2,))

    return Outer, Method


@pytest.mark.parametrize("which", [0, 1], ids=["module_class", "method"])
def test_fold_rngs_matches_flax(which):
    x = np.arange(4, dtype=np.float32)
    res = {}
    for name, (nn, np_, lib) in LIBS.items():
        model = rng_models(nn, lib.random)[which]()
        variables = model.init({"params": lib.random.key(0), "noise": lib.random.key(1)}, x)
        y = model.apply(variables, x, rngs={"noise": lib.random.key(5)})
        res[name] = (dict(variables), y)
    _assert_trees_close(res["podlet"][0], res["flax"][0])
    _assert_trees_close(res["podlet"][1], res["flax"][1], rtol=1e-6)
    if which == 0:
        assert "Fold_rngsNoisy_0" in res["podlet"][0]["params"]
