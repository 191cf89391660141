"""flax.linen lifted transforms (nn.vmap, nn.scan, nn.remat, nn.jit, nn.cond, nn.switch,
nn.while_loop, nn.map_variables) against flax on the same models, inputs and keys.

Every model is written once as a function of the framework (``make(nn, jnp)``) so the
podlet and flax definitions are the same text."""
import numpy as np
import pytest

import podlet
import podlet.numpy as pnp
from podlet import nn as pnn

import jax  # noqa: E402
import jax.numpy as jjnp  # noqa: E402
import flax  # noqa: E402
from flax import linen as fnn  # noqa: E402


def tree_np(t):
    return jax.tree_util.tree_map(lambda x: np.asarray(x), podlet.tree_util.tree_map(np.asarray, t)) \
        if not isinstance(t, dict) else {k: tree_np(v) for k, v in t.items()}


def to_np(t):
    if isinstance(t, dict) or hasattr(t, "items"):
        return {k: to_np(v) for k, v in t.items()}
    if isinstance(t, (tuple, list)):
        return type(t)(to_np(v) for v in t)
    return np.asarray(t)


def assert_trees(a, b, rtol=1e-5, atol=1e-6, path=""):
    """Leaf by leaf allclose; atol scales with the leaf's largest |value| when that is
    above 1: an element that is a cancelling f32 sum (a bias gradient over tokens) differs
    between two summation orders by ulps of its terms, not of itself (jax on an Intel
    Xeon: 0.1246773 vs 0.1246749 in a leaf reaching 7.7)."""
    a, b = to_np(a), to_np(b)
    if isinstance(a, dict):
        assert isinstance(b, dict) and sorted(a) == sorted(b), f"{path}: keys {sorted(a)} vs {sorted(b) if isinstance(b, dict) else b}"
        for k in a:
            assert_trees(a[k], b[k], rtol, atol, f"{path}/{k}")
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_trees(x, y, rtol, atol, f"{path}[{i}]")
    else:
        assert a.shape == b.shape, f"{path}: shape {a.shape} vs {b.shape}"
        finite = np.abs(b[np.isfinite(b)].astype(np.float64)) if b.dtype.kind == "f" else np.zeros(0)
        scale = max(1.0, float(finite.max())) if finite.size else 1.0
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol * scale, err_msg=path)


def shapes(t):
    t = to_np(t)
    if isinstance(t, dict):
        return {k: shapes(v) for k, v in t.items()}
    return t.shape


FW = {"podlet": (pnn, pnp, podlet), "flax": (fnn, jjnp, jax)}


# ----------------------------------------------------------------------------------
# model definitions, written once
# ----------------------------------------------------------------------------------
def make_transformer(nn, jnp):
    class Block(nn.Module):
        d: int
        heads: int

        @nn.compact
        def __call__(self, x, _):
            h = nn.LayerNorm()(x)
            h = nn.MultiHeadDotProductAttention(num_heads=self.heads)(h, h)
            x = x + h
            h = nn.LayerNorm()(x)
            h = nn.Dense(2 * self.d)(h)
            h = nn.gelu(h)
            x = x + nn.Dense(self.d)(h)
            return x, None

    class Model(nn.Module):
        d: int = 16
        heads: int = 2
        layers: int = 3

        @nn.compact
        def __call__(self, x):
            x = nn.Dense(self.d)(x)
            Stack = nn.scan(Block, variable_axes={"params": 0}, split_rngs={"params": True}, length=self.layers)
            x, _ = Stack(self.d, self.heads, name="layers")(x, None)
            return nn.Dense(3)(jnp.mean(x, axis=1))

    return Block, Model


def make_lstm(nn, jnp, decorator=False):
    H = 8

    class Cell(nn.Module):
        hidden: int

        @nn.compact
        def __call__(self, carry, x):
            h, c = carry
            z = nn.Dense(4 * self.hidden)(x) + nn.Dense(4 * self.hidden, use_bias=False)(h)
            i, f, g, o = jnp.split(z, 4, axis=-1)
            c = nn.sigmoid(f) * c + nn.sigmoid(i) * jnp.tanh(g)
            h = nn.sigmoid(o) * jnp.tanh(c)
            return (h, c), h

    class RNN(nn.Module):
        @nn.compact
        def __call__(self, xs):
            b = xs.shape[0]
            carry = (jnp.zeros((b, H)), jnp.zeros((b, H)))
            if decorator:
                cell = Cell(H)
                scan = nn.scan(lambda mdl, c, x: mdl(c, x), variable_broadcast="params",
                               split_rngs={"params": False}, in_axes=1, out_axes=1)
                carry, ys = scan(cell, carry, xs)
            else:
                scan = nn.scan(Cell, variable_broadcast="params", split_rngs={"params": False}, in_axes=1,
                               out_axes=1)
                carry, ys = scan(H)(carry, xs)
            return nn.Dense(2)(ys[:, -1]) + carry[0].sum()

    return RNN


def make_mlp(nn, jnp):
    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(3)(nn.relu(nn.Dense(8)(x)))
    return MLP


def run_both(make, args, *, rngs=None, method_kwargs=None, mutable=False, init_kwargs=None):
    """init both with PRNGKey(0); returns (podlet vars, flax vars) and apply outputs."""
    out = {}
    for name, (nn, jnp, jx) in FW.items():
        Model = make(nn, jnp)
        m = Model()
        a = tuple(jnp.asarray(x) for x in args)
        v = m.init(jx.random.PRNGKey(0), *a, **(init_kwargs or {}))
        out[name] = (m, v, a)
    return out


# ----------------------------------------------------------------------------------
# nn.scan over transformer blocks
# ----------------------------------------------------------------------------------
def test_scan_transformer_layout_init_values_and_grads():
    x = np.random.default_rng(0).standard_normal((2, 5, 4)).astype(np.float32)
    res = {}
    for name, (nn, jnp, jx) in FW.items():
        _, Model = make_transformer(nn, jnp)
        m = Model()
        v = m.init(jx.random.PRNGKey(0), jnp.asarray(x))
        res[name] = (m, v)
    pv, fv = res["podlet"][1], res["flax"][1]
    assert shapes(pv) == shapes(fv)
    layers = to_np(pv)["params"]["layers"]
    assert layers["Dense_0"]["kernel"].shape == (3, 16, 32)
    assert layers["MultiHeadDotProductAttention_0"]["query"]["kernel"].shape == (3, 16, 2, 8)
    # same key -> same parameters (podlet.random is jax.random bit for bit)
    assert_trees(pv, fv, rtol=1e-6, atol=1e-7)

    # outputs and gradients with flax's params in both
    params = to_np(fv)
    y = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)

    def make_loss(m, jnp):
        def loss(p, x, y):
            return jnp.mean((m.apply(p, x) - y) ** 2)
        return loss

    pm, fm = res["podlet"][0], res["flax"][0]
    pl = podlet.jit(podlet.value_and_grad(make_loss(pm, pnp)))
    fl = jax.jit(jax.value_and_grad(make_loss(fm, jjnp)))
    pval, pgrad = pl(params, pnp.asarray(x), pnp.asarray(y))
    fval, fgrad = fl(params, jjnp.asarray(x), jjnp.asarray(y))
    np.testing.assert_allclose(np.asarray(pval), np.asarray(fval), rtol=1e-5)
    assert_trees(pgrad, fgrad, rtol=1e-5, atol=1e-6)
    # eager forward equals flax too
    assert_trees(pm.apply(params, pnp.asarray(x)), fm.apply(params, jjnp.asarray(x)), rtol=1e-5, atol=1e-6)


def test_scan_equals_unrolled_loop():
    """nn.scan with stacked params computes the same as calling the block L times."""
    x = np.random.default_rng(0).standard_normal((2, 5, 16)).astype(np.float32)
    Block, _ = make_transformer(pnn, pnp)

    class Scanned(pnn.Module):
        @pnn.compact
        def __call__(self, x):
            return pnn.scan(Block, variable_axes={"params": 0}, split_rngs={"params": True}, length=3)(
                16, 2, name="layers")(x, None)[0]

    class Unrolled(pnn.Module):
        @pnn.compact
        def __call__(self, x):
            for i in range(3):
                x, _ = Block(16, 2, name=f"l{i}")(x, None)
            return x

    v = Scanned().init(podlet.random.PRNGKey(1), pnp.asarray(x))
    stacked = to_np(v)["params"]["layers"]
    unrolled = {"params": {f"l{i}": podlet.tree_util.tree_map(lambda a: a[i], stacked) for i in range(3)}}
    assert_trees(Scanned().apply(v, pnp.asarray(x)), Unrolled().apply(unrolled, pnp.asarray(x)),
                 rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------------
# nn.scan RNN with broadcast params
# ----------------------------------------------------------------------------------
@pytest.mark.parametrize("decorator", [False, True])
def test_scan_lstm_broadcast_params(decorator):
    xs = np.random.default_rng(0).standard_normal((2, 6, 3)).astype(np.float32)
    res = {}
    for name, (nn, jnp, jx) in FW.items():
        m = make_lstm(nn, jnp, decorator)()
        res[name] = (m, m.init(jx.random.PRNGKey(0), jnp.asarray(xs)))
    pv, fv = res["podlet"][1], res["flax"][1]
    assert shapes(pv) == shapes(fv)
    cell = "Cell_0" if decorator else "ScanCell_0"
    assert to_np(pv)["params"][cell]["Dense_0"]["kernel"].shape == (3, 32)  # not stacked
    assert_trees(pv, fv, rtol=1e-6, atol=1e-7)
    params = to_np(fv)

    def loss(m, jnp):
        return lambda p, x: jnp.sum(m.apply(p, x) ** 2)

    pval, pg = podlet.jit(podlet.value_and_grad(loss(res["podlet"][0], pnp)))(params, pnp.asarray(xs))
    fval, fg = jax.value_and_grad(loss(res["flax"][0], jjnp))(params, jjnp.asarray(xs))
    np.testing.assert_allclose(np.asarray(pval), np.asarray(fval), rtol=1e-5)
    assert_trees(pg, fg, rtol=1e-5, atol=1e-6)


def test_scan_variable_carry_and_broadcast_in_axes():
    def make(nn, jnp):
        class Body(nn.Module):
            @nn.compact
            def __call__(self, c, x, scale):
                # carried variables must exist before the loop (given to apply below)
                if self.has_variable("counter", "n"):
                    count = self.variable("counter", "n")
                    count.value = count.value + 1.0
                c = c + nn.Dense(2)(x) * scale
                return c, c * 2.0

        class M(nn.Module):
            @nn.compact
            def __call__(self, x):
                S = nn.scan(Body, variable_broadcast="params", variable_carry="counter",
                            split_rngs={"params": False}, in_axes=(0, nn.broadcast))
                return S(name="body")(jnp.zeros((2,)), x, 3.0)
        return M

    x = np.random.default_rng(0).standard_normal((4, 2)).astype(np.float32)
    outs = {}
    for name, (nn, jnp, jx) in FW.items():
        m = make(nn, jnp)()
        v = m.init(jx.random.PRNGKey(0), jnp.asarray(x))
        state = dict(to_np(v), counter={"body": {"n": np.zeros((), np.float32)}})
        y, st = m.apply(state, jnp.asarray(x), mutable=["counter"])
        outs[name] = (v, y, st)
    assert_trees(outs["podlet"][0], outs["flax"][0])
    assert_trees(outs["podlet"][1], outs["flax"][1])
    assert_trees(outs["podlet"][2], outs["flax"][2])
    assert float(to_np(outs["podlet"][2])["counter"]["body"]["n"]) == 4.0


# ----------------------------------------------------------------------------------
# nn.vmap
# ----------------------------------------------------------------------------------
def test_vmap_ensemble_stacked_params():
    def make(nn, jnp):
        MLP = make_mlp(nn, jnp)

        class Ensemble(nn.Module):
            @nn.compact
            def __call__(self, x):
                E = nn.vmap(MLP, variable_axes={"params": 0}, split_rngs={"params": True}, in_axes=None,
                            out_axes=0, axis_size=4)
                return E(name="ens")(x)
        return Ensemble

    x = np.random.default_rng(0).standard_normal((5, 6)).astype(np.float32)
    res = {}
    for name, (nn, jnp, jx) in FW.items():
        m = make(nn, jnp)()
        v = m.init(jx.random.PRNGKey(0), jnp.asarray(x))
        res[name] = (m, v)
    pv, fv = res["podlet"][1], res["flax"][1]
    assert to_np(pv)["params"]["ens"]["Dense_1"]["kernel"].shape == (4, 6, 8)
    assert_trees(pv, fv, rtol=1e-6, atol=1e-7)
    k = to_np(pv)["params"]["ens"]["Dense_0"]["kernel"]
    assert not np.allclose(k[0], k[1])  # split rngs: members differ
    params = to_np(fv)

    def loss(m, jnp):
        return lambda p, x: jnp.sum(m.apply(p, x) ** 2)

    py = res["podlet"][0].apply(params, pnp.asarray(x))
    assert py.shape == (4, 5, 3)
    assert_trees(py, res["flax"][0].apply(params, jjnp.asarray(x)))
    pg = podlet.jit(podlet.grad(loss(res["podlet"][0], pnp)))(params, pnp.asarray(x))
    fg = jax.grad(loss(res["flax"][0], jjnp))(params, jjnp.asarray(x))
    assert_trees(pg, fg, rtol=1e-5, atol=1e-6)


def test_vmap_shared_params():
    def make(nn, jnp):
        MLP = make_mlp(nn, jnp)

        class Shared(nn.Module):
            @nn.compact
            def __call__(self, x):
                return nn.vmap(MLP, variable_axes={"params": None}, split_rngs={"params": False}, in_axes=0)()(x)
        return Shared

    x = np.random.default_rng(0).standard_normal((3, 5, 6)).astype(np.float32)
    res = {}
    for name, (nn, jnp, jx) in FW.items():
        m = make(nn, jnp)()
        res[name] = (m, m.init(jx.random.PRNGKey(0), jnp.asarray(x)))
    pv, fv = res["podlet"][1], res["flax"][1]
    assert to_np(pv)["params"]["VmapMLP_0"]["Dense_1"]["kernel"].shape == (6, 8)
    assert_trees(pv, fv, rtol=1e-6, atol=1e-7)
    params = to_np(fv)
    assert_trees(res["podlet"][0].apply(params, pnp.asarray(x)), res["flax"][0].apply(params, jjnp.asarray(x)))
    loss = lambda m, jnp: (lambda p, x: jnp.sum(m.apply(p, x) ** 2))  # noqa: E731
    assert_trees(podlet.grad(loss(res["podlet"][0], pnp))(params, pnp.asarray(x)),
                 jax.grad(loss(res["flax"][0], jjnp))(params, jjnp.asarray(x)), rtol=1e-5, atol=1e-6)


def test_vmap_batch_stats_axis_and_decorator_form():
    def make(nn, jnp):
        class BNDense(nn.Module):
            @nn.compact
            def __call__(self, x, train=True):
                x = nn.Dense(4)(x)
                return nn.BatchNorm(use_running_average=not train)(x)

        class M(nn.Module):
            @nn.compact
            def __call__(self, x):
                f = nn.vmap(lambda mdl, x: mdl(x), variable_axes={"params": 0, "batch_stats": 0},
                            split_rngs={"params": True})
                return f(BNDense(name="inner"), x)
        return M

    x = np.random.default_rng(0).standard_normal((2, 5, 3)).astype(np.float32)
    res = {}
    for name, (nn, jnp, jx) in FW.items():
        m = make(nn, jnp)()
        v = m.init(jx.random.PRNGKey(0), jnp.asarray(x))
        y, st = m.apply(to_np(v), jnp.asarray(x), mutable=["batch_stats"])
        res[name] = (v, y, st)
    for i in range(3):
        assert_trees(res["podlet"][i], res["flax"][i], rtol=1e-5, atol=1e-6)
    assert to_np(res["podlet"][2])["batch_stats"]["inner"]["BatchNorm_0"]["mean"].shape == (2, 4)


# ----------------------------------------------------------------------------------
# nn.remat / nn.checkpoint
# ----------------------------------------------------------------------------------
def test_remat_block_same_values_and_grads():
    x = np.random.default_rng(0).standard_normal((2, 5, 16)).astype(np.float32)
    res = {}
    def make(nn, jnp):
        Block, _ = make_transformer(nn, jnp)

        class M(nn.Module):
            remat: bool

            @nn.compact
            def __call__(self, x):
                B = nn.remat(Block) if self.remat else Block
                for i in range(2):
                    x, _ = B(16, 2, name=f"b{i}")(x, None)
                return x
        return M

    for name, (nn, jnp, jx) in FW.items():
        M = make(nn, jnp)
        res[name] = (M(True), M(False))
        if name == "podlet":
            v = M(True).init(jx.random.PRNGKey(0), jnp.asarray(x))
            v2 = M(False).init(jx.random.PRNGKey(0), jnp.asarray(x))
            assert_trees(v, v2, rtol=0, atol=0)
        else:
            fv = M(True).init(jx.random.PRNGKey(0), jnp.asarray(x))
    assert_trees(v, fv, rtol=1e-6, atol=1e-7)
    params = to_np(fv)
    loss = lambda m, jnp: (lambda p, x: jnp.mean(m.apply(p, x) ** 2))  # noqa: E731
    g_remat = podlet.jit(podlet.grad(loss(res["podlet"][0], pnp)))(params, pnp.asarray(x))
    g_plain = podlet.jit(podlet.grad(loss(res["podlet"][1], pnp)))(params, pnp.asarray(x))
    g_flax = jax.grad(loss(res["flax"][0], jjnp))(params, jjnp.asarray(x))
    assert_trees(g_remat, g_plain, rtol=1e-5, atol=1e-6)
    assert_trees(g_remat, g_flax, rtol=1e-5, atol=1e-6)


def test_remat_static_argnums_and_policy_method_decorator():
    import functools

    def make(nn, jnp, jx):
        class M(nn.Module):
            @functools.partial(nn.remat, static_argnums=(2,), policy=jx.checkpoint_policies.dots_saveable)
            @nn.compact
            def __call__(self, x, train):
                x = nn.Dense(4)(x)
                return nn.relu(x) if train else x
        return M

    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    outs = {}
    for name, (nn, jnp, jx) in FW.items():
        m = make(nn, jnp, jx)()
        v = m.init(jx.random.PRNGKey(0), jnp.asarray(x), True)
        g = jx.grad(lambda p: jnp.sum(m.apply(p, jnp.asarray(x), True) ** 2))(to_np(v))
        outs[name] = (v, m.apply(to_np(v), jnp.asarray(x), False), g)
    for i in range(3):
        assert_trees(outs["podlet"][i], outs["flax"][i], rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------------
# nn.jit
# ----------------------------------------------------------------------------------
def test_jit_class_and_method():
    import functools

    def make(nn, jnp):
        MLP = make_mlp(nn, jnp)

        class M(nn.Module):
            @nn.compact
            def __call__(self, x):
                return nn.jit(MLP)()(x) + nn.jit(MLP)(name="second")(x)

        class D(nn.Module):
            @nn.jit
            @nn.compact
            def __call__(self, x):
                return nn.Dense(3)(x)
        return M, D

    x = np.random.default_rng(0).standard_normal((2, 6)).astype(np.float32)
    outs = {}
    for name, (nn, jnp, jx) in FW.items():
        M, D = make(nn, jnp)
        v = M().init(jx.random.PRNGKey(0), jnp.asarray(x))
        y = M().apply(to_np(v), jnp.asarray(x))
        vd = D().init(jx.random.PRNGKey(0), jnp.asarray(x))
        yd = D().apply(to_np(vd), jnp.asarray(x))
        outs[name] = (v, y, vd, yd)
    assert shapes(outs["podlet"][0]) == shapes(outs["flax"][0])
    for i in range(4):
        assert_trees(outs["podlet"][i], outs["flax"][i], rtol=1e-5, atol=1e-6)
    # the jitted method is traced once and reused by a second apply
    M, D = make(pnn, pnp)
    v = to_np(outs["podlet"][0])
    y2 = M().apply(v, pnp.asarray(x * 2))
    assert_trees(y2, make(fnn, jjnp)[0]().apply(v, jjnp.asarray(x * 2)), rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------------
# nn.cond / nn.switch / nn.while_loop / nn.map_variables
# ----------------------------------------------------------------------------------
def make_cond(nn, jnp):
    class Foo(nn.Module):
        @nn.compact
        def __call__(self, x, pred):
            self.variable("state", "true_count", lambda: jnp.zeros((), jnp.int32))
            self.variable("state", "false_count", lambda: jnp.zeros((), jnp.int32))

            def true_fn(mdl, x):
                mdl.variable("state", "true_count").value += 1
                return nn.Dense(2, name="dense")(x)

            def false_fn(mdl, x):
                mdl.variable("state", "false_count").value += 1
                return -nn.Dense(2, name="dense")(x)

            return nn.cond(pred, true_fn, false_fn, self, x)
    return Foo


@pytest.mark.parametrize("pred", [True, False])
def test_cond(pred):
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    outs = {}
    for name, (nn, jnp, jx) in FW.items():
        m = make_cond(nn, jnp)()
        v = m.init(jx.random.PRNGKey(0), jnp.asarray(x), jnp.asarray(True))
        f = jx.jit(lambda v, x, p: m.apply(v, x, p, mutable=["state"]))
        y, st = f(to_np(v), jnp.asarray(x), jnp.asarray(pred))
        state = {k: jnp.asarray(a) for k, a in to_np(v)["state"].items()}
        g = jx.grad(lambda p: jnp.sum(m.apply({"params": p, "state": state}, jnp.asarray(x), jnp.asarray(pred),
                                              mutable=["state"])[0] ** 2))(to_np(v)["params"])
        outs[name] = (v, y, st, g)
    for i in range(4):
        assert_trees(outs["podlet"][i], outs["flax"][i], rtol=1e-5, atol=1e-6)
    st = to_np(outs["podlet"][2])["state"]
    # init ran the true branch once (pred=True at init), apply runs the `pred` branch
    assert int(st["true_count"]) == (2 if pred else 1) and int(st["false_count"]) == (0 if pred else 1)


def test_switch():
    def make(nn, jnp):
        class Sw(nn.Module):
            @nn.compact
            def __call__(self, x, index):
                def a(mdl, x):
                    return nn.Dense(2, name="dense")(x)

                def b(mdl, x):
                    return -nn.Dense(2, name="dense")(x)

                def c(mdl, x):
                    return 2.0 * nn.Dense(2, name="dense")(x)
                return nn.switch(index, [a, b, c], self, x)
        return Sw

    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    outs = {}
    for name, (nn, jnp, jx) in FW.items():
        m = make(nn, jnp)()
        v = m.init(jx.random.PRNGKey(0), jnp.asarray(x), jnp.asarray(0))
        outs[name] = (v,) + tuple(m.apply(to_np(v), jnp.asarray(x), jnp.asarray(i)) for i in range(3))
    for i in range(4):
        assert_trees(outs["podlet"][i], outs["flax"][i], rtol=1e-5, atol=1e-6)


def test_while_loop():
    def make(nn, jnp):
        class W(nn.Module):
            @nn.compact
            def __call__(self, x):
                def cond_fn(mdl, c):
                    return mdl.variables["state"]["acc"] < 10

                def body_fn(mdl, c):
                    acc = mdl.variable("state", "acc", lambda: jnp.array(0, jnp.int32))
                    acc.value += 1
                    return nn.tanh(nn.Dense(c.shape[-1])(c))

                if self.is_mutable_collection("params"):
                    return body_fn(self, x)
                return nn.while_loop(cond_fn, body_fn, self, x, carry_variables="state")
        return W

    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    outs = {}
    for name, (nn, jnp, jx) in FW.items():
        m = make(nn, jnp)()
        v = m.init(jx.random.PRNGKey(0), jnp.asarray(x))
        v = to_np(v)
        v["state"]["acc"] = np.asarray(0, np.int32)
        y, st = jx.jit(lambda v, x: m.apply(v, x, mutable=["state"]))(v, jnp.asarray(x))
        outs[name] = (v, y, st)
    for i in range(3):
        assert_trees(outs["podlet"][i], outs["flax"][i], rtol=1e-5, atol=1e-6)
    assert int(to_np(outs["podlet"][2])["state"]["acc"]) == 10


def test_map_variables():
    def make(nn, jnp, jx):
        def mask(v):
            return jx.tree_util.tree_map(lambda a: a * jnp.asarray(np.triu(np.ones((4, 4), np.float32)))
                                         if a.ndim == 2 else a, v)

        class Masked(nn.Module):
            @nn.compact
            def __call__(self, x):
                MD = nn.map_variables(nn.Dense, "params", mask, init=self.is_initializing())
                return MD(4, name="dense")(x)
        return Masked

    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    outs = {}
    for name, (nn, jnp, jx) in FW.items():
        m = make(nn, jnp, jx)()
        v = m.init(jx.random.PRNGKey(0), jnp.asarray(x))
        params = to_np(v)
        y = m.apply(params, jnp.asarray(x))
        g = jx.grad(lambda p: jnp.sum(m.apply(p, jnp.asarray(x)) ** 2))(params)
        outs[name] = (v, y, g)
    for i in range(3):
        assert_trees(outs["podlet"][i], outs["flax"][i], rtol=1e-5, atol=1e-6)
    g = to_np(outs["podlet"][2])["params"]["dense"]["kernel"]
    assert np.all(np.tril(g, -1) == 0)  # masked entries get no gradient


def test_scan_under_vmap_and_dropout_rngs():
    """split_rngs={'dropout': True} gives each iteration its own dropout key, as flax."""
    def make(nn, jnp):
        class Body(nn.Module):
            @nn.compact
            def __call__(self, c, _):
                c = nn.Dense(8)(c)
                c = nn.Dropout(0.5, deterministic=False)(c)
                return c, None

        class M(nn.Module):
            @nn.compact
            def __call__(self, x):
                return nn.scan(Body, variable_axes={"params": 0}, split_rngs={"params": True, "dropout": True},
                               length=3)(name="s")(x, None)[0]
        return M

    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    outs = {}
    for name, (nn, jnp, jx) in FW.items():
        m = make(nn, jnp)()
        v = m.init({"params": jx.random.PRNGKey(0), "dropout": jx.random.PRNGKey(1)}, jnp.asarray(x))
        y = m.apply(to_np(v), jnp.asarray(x), rngs={"dropout": jx.random.PRNGKey(2)})
        outs[name] = (v, y)
    assert_trees(outs["podlet"][0], outs["flax"][0], rtol=1e-6, atol=1e-7)
    assert_trees(outs["podlet"][1], outs["flax"][1], rtol=1e-5, atol=1e-6)


def test_scan_in_setup_and_jit_under_grad():
    """Transforms built in setup() and nn.jit inside a differentiated apply."""
    def make(nn, jnp):
        Block, _ = make_transformer(nn, jnp)
        MLP = make_mlp(nn, jnp)

        class M(nn.Module):
            def setup(self):
                self.stack = nn.scan(Block, variable_axes={"params": 0}, split_rngs={"params": True},
                                     length=2)(16, 2)
                self.head = nn.jit(MLP)()

            def __call__(self, x):
                x, _ = self.stack(x, None)
                return self.head(x)
        return M

    x = np.random.default_rng(0).standard_normal((2, 5, 16)).astype(np.float32)
    outs = {}
    for name, (nn, jnp, jx) in FW.items():
        m = make(nn, jnp)()
        v = m.init(jx.random.PRNGKey(0), jnp.asarray(x))
        g = jx.grad(lambda p: jnp.mean(m.apply(p, jnp.asarray(x)) ** 2))(to_np(v))
        outs[name] = (v, g)
    assert to_np(outs["podlet"][0])["params"]["stack"]["Dense_0"]["kernel"].shape == (2, 16, 32)
    assert_trees(outs["podlet"][0], outs["flax"][0], rtol=1e-6, atol=1e-7)
    assert_trees(outs["podlet"][1], outs["flax"][1], rtol=1e-5, atol=1e-6)


def test_vmap_axis_name_collective():
    def make(nn, jnp, jx):
        class Norm(nn.Module):
            @nn.compact
            def __call__(self, x):
                x = nn.Dense(3)(x)
                return x - jx.lax.pmean(x, "batch")

        class M(nn.Module):
            @nn.compact
            def __call__(self, x):
                return nn.vmap(Norm, variable_axes={"params": None}, split_rngs={"params": False},
                               axis_name="batch")()(x)
        return M

    x = np.random.default_rng(0).standard_normal((4, 2)).astype(np.float32)
    outs = {}
    for name, (nn, jnp, jx) in FW.items():
        m = make(nn, jnp, jx)()
        v = m.init(jx.random.PRNGKey(0), jnp.asarray(x))
        outs[name] = (v, m.apply(to_np(v), jnp.asarray(x)))
    for i in range(2):
        assert_trees(outs["podlet"][i], outs["flax"][i], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(outs["podlet"][1]).mean(0), 0, atol=1e-6)


def test_scan_reverse_and_out_axes():
    def make(nn, jnp):
        class Body(nn.Module):
            @nn.compact
            def __call__(self, c, x):
                c = jnp.tanh(nn.Dense(3)(x) + c)
                return c, c

        class M(nn.Module):
            @nn.compact
            def __call__(self, xs):
                S = nn.scan(Body, variable_broadcast="params", split_rngs={"params": False}, in_axes=1,
                            out_axes=1, reverse=True)
                return S()(jnp.zeros((xs.shape[0], 3)), xs)
        return M

    xs = np.random.default_rng(0).standard_normal((2, 5, 4)).astype(np.float32)
    outs = {}
    for name, (nn, jnp, jx) in FW.items():
        m = make(nn, jnp)()
        v = m.init(jx.random.PRNGKey(0), jnp.asarray(xs))
        outs[name] = (v, m.apply(to_np(v), jnp.asarray(xs)))
    for i in range(2):
        assert_trees(outs["podlet"][i], outs["flax"][i], rtol=1e-5, atol=1e-6)


def test_remat_scan_nested_layout():
    def make(nn, jnp):
        class Body(nn.Module):
            @nn.compact
            def __call__(self, x):
                return jnp.tanh(nn.Dense(4)(x))

        class M(nn.Module):
            @nn.compact
            def __call__(self, x):
                return nn.remat_scan(Body, lengths=(2, 3))()(x)
        return M

    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    outs = {}
    for name, (nn, jnp, jx) in FW.items():
        m = make(nn, jnp)()
        v = m.init(jx.random.PRNGKey(0), jnp.asarray(x))
        g = jx.grad(lambda p: jnp.mean(m.apply(p, jnp.asarray(x)) ** 2))(to_np(v))
        outs[name] = (v, g)
    assert to_np(outs["podlet"][0])["params"]["Remat_scanBody_0"]["Dense_0"]["kernel"].shape == (2, 3, 4, 4)
    for i in range(2):
        assert_trees(outs["podlet"][i], outs["flax"][i], rtol=1e-5, atol=1e-6)


def test_while_loop_split_rngs_dropout():
    """split_rngs={'dropout': True}: each iteration folds its index into the key, as flax."""
    def make(nn, jnp):
        class W(nn.Module):
            @nn.compact
            def __call__(self, x):
                def cond_fn(mdl, c):
                    return mdl.variables["state"]["acc"] < 3

                def body_fn(mdl, c):
                    acc = mdl.variable("state", "acc", lambda: jnp.array(0, jnp.int32))
                    acc.value += 1
                    return nn.Dropout(0.5, deterministic=False)(nn.Dense(c.shape[-1])(c))

                if self.is_mutable_collection("params"):
                    return body_fn(self, x)
                return nn.while_loop(cond_fn, body_fn, self, x, carry_variables="state",
                                     split_rngs={"dropout": True})
        return W

    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    outs = {}
    for name, (nn, jnp, jx) in FW.items():
        m = make(nn, jnp)()
        v = to_np(m.init({"params": jx.random.PRNGKey(0), "dropout": jx.random.PRNGKey(1)}, jnp.asarray(x)))
        v["state"]["acc"] = np.asarray(0, np.int32)
        y, st = m.apply(v, jnp.asarray(x), mutable=["state"], rngs={"dropout": jx.random.PRNGKey(5)})
        outs[name] = (v, y, st)
    for i in range(3):
        assert_trees(outs["podlet"][i], outs["flax"][i], rtol=1e-5, atol=1e-6)
