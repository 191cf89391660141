"""podlet.struct and podlet.training.train_state against flax.struct / flax.training
(flax 0.12.8, optax 0.2.8) as the oracle: pytree layout (leaves, key paths, static
fields in the treedef), replace, immutability, jit; TrainState.create /
apply_gradients / replace and a subclass with batch_stats / ema_params / rng running
the seed's train step, state for state against Flax + Optax.
"""
import dataclasses
from typing import Any, Callable, NamedTuple

import numpy as np
import pytest

import jax
import jax.numpy as jnp
import optax
import flax.linen as fnn
from flax import struct as fstruct
from flax.training import train_state as ftrain_state

import podlet
import podlet.numpy as pjnp
import podlet.optim as poptax
from podlet import nn as pnn
from podlet import struct as pstruct
from podlet.training import train_state as ptrain_state

X = np.random.RandomState(0).randn(4, 5).astype(np.float32)
Y = np.random.RandomState(1).randn(4, 3).astype(np.float32)


def close(a, b, tol=1e-6):
    np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32), rtol=tol, atol=tol)


def to_podlet(tree):
    return jax.tree_util.tree_map(lambda a: pjnp.asarray(np.asarray(a)), tree)


def to_jax(tree):
    return podlet.tree_util.tree_map(lambda a: jnp.asarray(np.asarray(a)), tree)


def assert_trees_close(ptree, ftree, tol=1e-5):
    """Same key paths and values (namedtuple types of the two optimizers differ by module)."""
    pl = podlet.tree_util.tree_flatten_with_path(ptree)[0]
    fl = jax.tree_util.tree_flatten_with_path(ftree)[0]
    assert [podlet.tree_util.keystr(p) for p, _ in pl] == [jax.tree_util.keystr(p) for p, _ in fl]
    for (_, a), (_, b) in zip(pl, fl):
        assert np.shape(a) == np.shape(b)
        close(a, b, tol)


def paths(tree, tu):
    return [(tu.keystr(p), np.asarray(v).tolist()) for p, v in tu.tree_flatten_with_path(tree)[0]]


# ----------------------------------------------------------------------------- struct
def point_classes(struct):
    @struct.dataclass
    class Point:
        x: Any
        y: Any
        name: str = struct.field(pytree_node=False, default="p")
        fn: Callable = struct.field(pytree_node=False, default=None)

    class Node(struct.PyTreeNode):
        a: Any
        b: Any = None
        meta: int = struct.field(pytree_node=False, default=0)

    return Point, Node


def test_struct_dataclass_pytree_like_flax():
    PP, PN = point_classes(pstruct)
    FP, FN = point_classes(fstruct)
    p = PP(np.float32(1), [np.float32(2), np.float32(3)], name="q")
    f = FP(np.float32(1), [np.float32(2), np.float32(3)], name="q")
    assert paths(p, podlet.tree_util) == paths(f, jax.tree_util)
    assert len(podlet.tree_util.tree_leaves(p)) == 3
    # static fields are treedef data: equal only for equal values
    s1 = podlet.tree_util.tree_structure(p)
    assert s1 == podlet.tree_util.tree_structure(PP(0, [0, 0], name="q"))
    assert s1 != podlet.tree_util.tree_structure(PP(0, [0, 0], name="r"))
    assert (jax.tree_util.tree_structure(f) == jax.tree_util.tree_structure(FP(0, [0, 0], name="r"))) is False
    # tree_map keeps static fields and the class
    p2 = podlet.tree_util.tree_map(lambda v: v * 2, p)
    assert type(p2) is PP and p2.name == "q" and p2.y[1] == 6
    # unflatten builds through the constructor
    leaves, tdef = podlet.tree_util.tree_flatten(p)
    assert podlet.tree_util.tree_unflatten(tdef, leaves) == p
    # PyTreeNode subclass
    n, fn_ = PN(a=np.float32(1), b={"c": np.float32(2)}, meta=3), FN(a=np.float32(1), b={"c": np.float32(2)}, meta=3)
    assert paths(n, podlet.tree_util) == paths(fn_, jax.tree_util)
    assert paths(PN(a=1), podlet.tree_util) == paths(FN(a=1), jax.tree_util)  # None child: no leaves


def test_struct_replace_frozen_fields():
    PP, PN = point_classes(pstruct)
    FP, FN = point_classes(fstruct)
    p = PP(1, 2)
    q = p.replace(y=5, name="z")
    assert (p.y, p.name, q.y, q.name, q.x) == (2, "p", 5, "z", 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 3
    with pytest.raises(TypeError):
        p.replace(nope=1)
    assert [(f.name, f.metadata.get("pytree_node", True)) for f in dataclasses.fields(PP)] == \
           [(f.name, f.metadata.get("pytree_node", True)) for f in dataclasses.fields(FP)]
    assert pstruct.dataclass(PP) is PP  # idempotent
    with pytest.raises(NotImplementedError):
        pstruct.PyTreeNode()

    @pstruct.dataclass(frozen=False)
    class Mutable:
        a: int
    m = Mutable(1)
    m.a = 2
    assert m.a == 2


def test_struct_through_jit_and_grad():
    PP, _ = point_classes(pstruct)

    @podlet.jit
    def f(p):
        s = p.x * 2 if p.name == "double" else p.x
        return p.replace(x=s + p.y[0])

    out = f(PP(pjnp.ones(3), [pjnp.ones(3)], name="double"))
    assert type(out) is PP and out.name == "double"
    close(out.x, np.full(3, 3.0))
    out2 = f(PP(pjnp.ones(3), [pjnp.ones(3)], name="single"))  # different static field: new trace
    close(out2.x, np.full(3, 2.0))
    g = podlet.grad(lambda p: pjnp.sum(p.x * p.y[0]))(PP(pjnp.ones(3) * 2, [pjnp.ones(3) * 3]))
    assert type(g) is PP
    close(g.x, np.full(3, 3.0))
    close(g.y[0], np.full(3, 2.0))


# ----------------------------------------------------------------------------- TrainState
def model_factory(nn, jnp):
    class Net(nn.Module):
        @nn.compact
        def __call__(self, x, *, train: bool):
            count = self.variable("batch_stats", "mean", lambda: jnp.zeros((x.shape[-1],), jnp.float32))
            if train and not self.is_initializing():
                count.value = 0.9 * count.value + 0.1 * jnp.mean(x, axis=0)
            x = nn.relu(nn.Dense(8)(x - count.value))
            return nn.Dense(3)(x)
    return Net


class TinySGD(NamedTuple):
    """A GradientTransformation-like (init, update) pair: plain SGD."""
    init: Callable
    update: Callable


def tiny_sgd(lr, tu):
    return TinySGD(init=lambda params: (),
                   update=lambda grads, state, params=None: (tu.tree_map(lambda g: -lr * g, grads), state))


@pytest.mark.parametrize("opt", ["tiny_sgd", "adamw"])
def test_train_state_create_apply_gradients_like_flax(opt):
    PNet, FNet = model_factory(pnn, pjnp), model_factory(fnn, jnp)
    fv = FNet().init(jax.random.PRNGKey(0), X, train=False)
    pv = to_podlet(fv)
    if opt == "tiny_sgd":
        ptx, ftx = tiny_sgd(0.1, podlet.tree_util), optax.sgd(0.1)
    else:
        ptx, ftx = poptax.adamw(1e-2, weight_decay=1e-3), optax.adamw(1e-2, weight_decay=1e-3)
    ps = ptrain_state.TrainState.create(apply_fn=PNet().apply, params=pv["params"], tx=ptx)
    fs = ftrain_state.TrainState.create(apply_fn=FNet().apply, params=fv["params"], tx=ftx)
    assert ps.step == fs.step == 0
    assert [f.name for f in dataclasses.fields(ps)] == [f.name for f in dataclasses.fields(fs)]
    # pytree children: step, params, opt_state; apply_fn and tx are static
    pleaves = podlet.tree_util.tree_leaves(ps)
    assert len(pleaves) == 1 + 4 + len(podlet.tree_util.tree_leaves(ps.opt_state))
    if opt == "adamw":
        assert len(podlet.tree_util.tree_leaves(ps)) == len(jax.tree_util.tree_leaves(fs))

    def loss(nnp, state):
        def f(params):
            out = state.apply_fn({"params": params, "batch_stats": pv["batch_stats"]}, X, train=False)
            return nnp.mean((out - Y) ** 2)
        return f

    for _ in range(3):
        pl, pg = podlet.value_and_grad(loss(pjnp, ps))(ps.params)
        fl, fg = jax.value_and_grad(loss(jnp, fs))(fs.params)
        close(pl, fl, 1e-5)
        ps = ps.apply_gradients(grads=pg)
        fs = fs.apply_gradients(grads=fg)
    assert int(ps.step) == int(fs.step) == 3
    assert_trees_close(ps.params, fs.params)
    if opt == "adamw":
        assert_trees_close(ps, fs)
    ps2 = ps.replace(step=10)
    assert ps2.step == 10 and ps.step == 3 and ps2.tx is ps.tx


class _Seed:
    """The seed's TrainState subclass, for both libraries."""

    @staticmethod
    def make(train_state, struct):
        class TrainState(train_state.TrainState):
            batch_stats: Any = None
            ema_params: Any = None
            rng: Any = struct.field(pytree_node=True, default=None)
        return TrainState


def test_seed_train_step_like_flax():
    PNet, FNet = model_factory(pnn, pjnp), model_factory(fnn, jnp)
    PState, FState = _Seed.make(ptrain_state, pstruct), _Seed.make(ftrain_state, fstruct)
    fv = FNet().init(jax.random.PRNGKey(0), X, train=False)
    pv = to_podlet(fv)
    pmodel, fmodel = PNet(), FNet()
    ps = PState.create(apply_fn=pmodel.apply, params=pv["params"], tx=poptax.adamw(1e-2, weight_decay=1e-4),
                       batch_stats=pv["batch_stats"], ema_params=pv["params"], rng=podlet.random.PRNGKey(21))
    fs = FState.create(apply_fn=fmodel.apply, params=fv["params"], tx=optax.adamw(1e-2, weight_decay=1e-4),
                       batch_stats=fv["batch_stats"], ema_params=fv["params"], rng=jax.random.PRNGKey(21))
    assert [f.name for f in dataclasses.fields(ps)] == [f.name for f in dataclasses.fields(fs)]
    assert len(podlet.tree_util.tree_leaves(ps)) == len(jax.tree_util.tree_leaves(fs))

    def make_step(lib, jnp_, model):
        def train_step(state, x, y):
            dropout_rng, next_rng = lib.random.split(state.rng)

            def loss_fn(params):
                variables = {"batch_stats": state.batch_stats} | {"params": params}
                logits, updates = model.apply(variables, x, train=True, rngs={"dropout": dropout_rng},
                                              mutable=["batch_stats"])
                return jnp_.mean((logits - y) ** 2), (logits, updates["batch_stats"])

            (loss, (_, new_bs)), grads = lib.value_and_grad(loss_fn, has_aux=True)(state.params)
            new_state = state.apply_gradients(grads=grads).replace(batch_stats=new_bs, rng=next_rng)
            ema = lib.tree_util.tree_map(lambda o, n: 0.9 * o + (1.0 - 0.9) * n, state.ema_params, new_state.params)
            return new_state.replace(ema_params=ema), {"loss": loss}
        return train_step

    pstep = podlet.jit(make_step(podlet, pjnp, pmodel))
    fstep = make_step(jax, jnp, fmodel)
    for _ in range(3):
        ps, pm = pstep(ps, X, Y)
        fs, fm = fstep(fs, X, Y)
        close(pm["loss"], fm["loss"], 1e-5)
    # step starts as the Python int 0 (weak int32) and comes back as a weakly typed int32
    # array (jit keeps weak types, as jax does): the signature never changes, one trace
    assert pstep.trace_count == 1
    assert type(ps) is PState and int(ps.step) == 3
    assert np.array_equal(np.asarray(ps.rng), np.asarray(fs.rng))
    for name in ["params", "ema_params", "batch_stats", "opt_state"]:
        assert_trees_close(getattr(ps, name), getattr(fs, name))
    assert_trees_close(ps, fs)
