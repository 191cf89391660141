"""Optimizer fusion (cpp/podlet/ir/optim_fusion.cc): the seed's train step

    new_state = state.apply_gradients(grads=grads)
    ema = tree_map(lambda o, n: decay * o + (1.0 - decay) * n, state.ema_params, new_state.params)

runs, per parameter leaf, as one adamw_update node (clip, AdamW, apply_updates and the
EMA in one pass) when jit or pmap executes it, with exactly the bits of the unfused
graph (PODLET_FUSION=0); anything that is not that pattern is left alone; and the
result tracks optax + a NumPy EMA.
"""
import os
import re
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

import podlet
import podlet.numpy as pnp
import podlet.optim as poptax
from podlet import _core, models
from podlet import tree_util as ptu
from podlet._src import fusion
from podlet.optim import _fused
from podlet.training import train_state

from test_optim import grad_stream, make_params, optax, to_jax, to_podlet

import jax

import pmap_seed_step


class TrainState(train_state.TrainState):
    batch_stats: Any = None
    ema_params: Any = None


@contextmanager
def fusion_env(on):
    old = os.environ.get("PODLET_FUSION")
    os.environ["PODLET_FUSION"] = "1" if on else "0"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("PODLET_FUSION", None)
        else:
            os.environ["PODLET_FUSION"] = old


def bits(x):
    a = np.asarray(x)
    if a.dtype.kind in "biu":
        return a
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])  # floats, bfloat16 included


def assert_trees_bitwise(a, b):
    la, lb = ptu.tree_leaves(a), ptu.tree_leaves(b)
    assert repr(ptu.tree_structure(a)) == repr(ptu.tree_structure(b)) and len(la) == len(lb)
    for i, (x, y) in enumerate(zip(la, lb)):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape, (i, x.dtype, y.dtype)
        np.testing.assert_array_equal(bits(x), bits(y), err_msg=f"leaf {i}")


_NODE = re.compile(r"^(?P<outs>%.*?) = (?P<prim>\w+)\((?P<ins>[^)]*)\)(?: \{(?P<attrs>.*)\})?$")


def nodes_of(graph):
    """[(prim, input ids, output ids, attrs text)] from the graph's dump."""
    out = []
    for line in graph.dump().splitlines():
        m = _NODE.match(line)
        if m:
            out.append((m["prim"], [int(v) for v in re.findall(r"%(\d+)", m["ins"])],
                        [int(v) for v in re.findall(r"%(\d+)", m["outs"])], m["attrs"] or ""))
    return out


def readers(graph, vid):
    return [prim for prim, ins, _, _ in nodes_of(graph) if vid in ins]


def seed_tx(total=10):
    sched = poptax.warmup_cosine_decay_schedule(0.0, 1e-2, 2, total)
    return poptax.chain(poptax.clip_by_global_norm(1.0), poptax.adamw(sched, weight_decay=1e-4))


# ---------------------------------------------------------------------------------
# the primitive's EMA output
# ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float64"])
@pytest.mark.parametrize("decay", [0.99, 0.999, 0.9])
def test_primitive_ema_equals_mul_mul_add(dtype, decay):
    x64 = dtype == "float64"
    if x64:
        podlet.config.update("jax_enable_x64", True)
    try:
        rng = np.random.default_rng(0)
        shape = (3, 20000)  # > 1 parallel chunk
        p, g, e = (pnp.asarray(rng.normal(size=shape)).astype(dtype) for _ in range(3))
        m = pnp.asarray(rng.normal(size=shape) * 0.1).astype(dtype)
        v = pnp.asarray(rng.random(size=shape) * 0.01).astype(dtype)
        sc = [pnp.asarray(np.float32(x)) for x in (1e-2, 3.0, 0.5, 0.01)]
        kw = dict(b1=0.9, b2=0.999, eps=1e-8, weight_decay=1e-2, max_norm=2.0)
        newp, m1, v1 = _fused.adamw_update(p, g, m, v, *sc, apply=True, **kw)
        # The unfused EMA, as the seed writes it (Python floats: weakly typed constants).
        want = decay * e + (1.0 - decay) * newp
        c_old = float(np.asarray(pnp.asarray(decay, dtype)).astype(np.float64))
        c_new = float(np.asarray(pnp.asarray(1.0 - decay, dtype)).astype(np.float64))
        outs = podlet._src.core.bind("adamw_update", p, g, m, v, *sc, e, b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0,
                                     weight_decay=1e-2, max_norm=2.0, apply=1, ema_c_old=c_old, ema_c_new=c_new)
        assert len(outs) == 4
        for got, ref in zip(outs, (newp, m1, v1, want)):
            assert got.dtype == ref.dtype
            np.testing.assert_array_equal(bits(got), bits(ref))
    finally:
        if x64:
            podlet.config.update("jax_enable_x64", False)


@pytest.mark.parametrize("new_first", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_special_values_match_the_unfused_chain(dtype, new_first):
    """NaN (both signs), +-inf, +-0, denormals and huge values in params, moments and the
    EMA: the fused kernel (vectorised, branch-free bf16 rounding) gives the unfused
    chain's bits, NaN signs included, on 1 and 2 threads (adds and muls return their
    first operand's NaN everywhere, as XLA:CPU does)."""
    from test_optim_fused import unfused_tx, random_state
    rng = np.random.default_rng(7)
    shape = (3, 40000)
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 3e38, -3e38, 1e-30],
                        np.float32)

    def sprinkle(x):
        flat = x.reshape(-1)
        idx = rng.choice(flat.size, 4000, replace=False)
        flat[idx] = specials[np.arange(4000) % len(specials)]
        return x

    params = {"w": pnp.asarray(sprinkle(rng.normal(size=shape).astype(np.float32))).astype(dtype)}
    ema = {"w": pnp.asarray(sprinkle(rng.normal(size=shape).astype(np.float32))).astype(dtype)}
    grads = {"w": pnp.asarray((rng.normal(size=shape) * 1e-3).astype(np.float32)).astype(dtype)}
    sched = poptax.warmup_cosine_decay_schedule(0.0, 3e-3, 5, 100)
    kw = dict(b1=0.9, b2=0.999, eps=1e-8, weight_decay=1e-2)
    ref = unfused_tx(sched, clip_norm=1.0, eps_root=0.0, **kw)
    state = random_state(ref, params, rng, count=4)
    mu = state[1][0].mu["w"]
    state[1][0].mu["w"] = pnp.asarray(sprinkle(np.asarray(mu).astype(np.float32))).astype(dtype)
    tx = poptax.chain(poptax.clip_by_global_norm(1.0), poptax.adamw(sched, **kw))

    def ema_fn(o, n):
        return (1.0 - 0.999) * n + 0.999 * o if new_first else 0.999 * o + (1.0 - 0.999) * n

    @podlet.jit
    def step(params, opt_state, ema, grads):
        updates, opt_state = tx.update(grads, opt_state, params)
        params = poptax.apply_updates(params, updates)
        return params, opt_state, ptu.tree_map(ema_fn, ema, params)

    g = step.lower(params, state, ema, grads).graph
    assert _core.optimizer_fusion_stats(g) == {"applies_folded": 1, "emas_folded": 1, "grads_widened": 0}
    assert ("ema_new_first=1" in _core.fuse_optimizer(g).dump()) == new_first
    old = podlet.config.num_threads
    try:
        podlet.config.update("num_threads", 1)
        u, new_state = ref.update(grads, state, params)
        newp = poptax.apply_updates(params, u)
        want_ema = ptu.tree_map(ema_fn, ema, newp)
        n_nan = np.isnan(np.asarray(want_ema["w"], np.float32))
        assert n_nan.sum() > 500  # the specials reached the outputs
        podlet.config.update("num_threads", 2)  # the unfused chain itself: same bits on 2 threads
        u2, state2 = ref.update(grads, state, params)
        assert_trees_bitwise(u2, u)
        assert_trees_bitwise(state2, new_state)
        for threads in (1, 2):
            podlet.config.update("num_threads", threads)
            with fusion_env(True):
                got_p, got_s, got_e = step(params, state, ema, grads)
            assert_trees_bitwise(got_p, newp)
            assert_trees_bitwise(got_s, new_state)
            assert_trees_bitwise(got_e, want_ema)
    finally:
        podlet.config.update("num_threads", old)


def test_primitive_ema_checks():
    a = pnp.ones((3, 2))
    s = pnp.asarray(np.float32(1.0))
    base = dict(b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0, weight_decay=0.0, max_norm=0.0)
    bind = podlet._src.core.bind
    with pytest.raises(Exception, match="needs apply=1"):
        bind("adamw_update", a, a, a, a, s, s, s, s, a, apply=0, ema_c_old=0.9, ema_c_new=0.1, **base)
    with pytest.raises(Exception, match="needs both attrs"):
        bind("adamw_update", a, a, a, a, s, s, s, s, a, apply=1, ema_c_old=0.9, **base)
    with pytest.raises(Exception, match="ema must have the param shape"):
        bind("adamw_update", a, a, a, a, s, s, s, s, pnp.ones((2, 3)), apply=1, ema_c_old=0.9, ema_c_new=0.1, **base)
    with pytest.raises(Exception, match="ema must have the param dtype"):
        bind("adamw_update", a, a, a, a, s, s, s, s, a.astype("bfloat16"), apply=1, ema_c_old=0.9, ema_c_new=0.1,
             **base)
    with pytest.raises(Exception, match="9"):  # ema attrs without the ema operand
        bind("adamw_update", a, a, a, a, s, s, s, s, apply=1, ema_c_old=0.9, ema_c_new=0.1, **base)


# ---------------------------------------------------------------------------------
# the seed's jit'd train step: fused on == off, bit for bit, and really fused
# ---------------------------------------------------------------------------------
def _seed_setup(dtype, param_dtype=None):
    """param_dtype: the params' dtype (default: dtype; float32 with a bfloat16 dtype is
    the seed's mixed precision)."""
    model = models.ResNet(stage_sizes=[1, 1], num_filters=8, num_classes=5, dtype=dtype)
    rng = np.random.default_rng(1)
    x = pnp.asarray(rng.standard_normal((4, 24, 24, 1)).astype(np.float32))
    y = pnp.asarray(rng.integers(0, 5, 4).astype(np.int32))
    v = model.init(podlet.random.PRNGKey(0), x, train=False)
    params = ptu.tree_map(lambda p: p.astype(param_dtype or dtype), v["params"])
    st = TrainState.create(apply_fn=model.apply, params=params, tx=seed_tx(), batch_stats=v["batch_stats"],
                           ema_params=params)
    ema_decay = 0.99

    def train_step(state, x, y):
        def loss_fn(params):
            logits, upd = state.apply_fn({"params": params, "batch_stats": state.batch_stats}, x, train=True,
                                         mutable=["batch_stats"])
            return poptax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), upd

        (loss, upd), grads = podlet.value_and_grad(loss_fn, has_aux=True)(state.params)
        new_state = state.apply_gradients(grads=grads).replace(batch_stats=upd["batch_stats"])
        ema = podlet.tree_util.tree_map(lambda o, n: ema_decay * o + (1.0 - ema_decay) * n,
                                        state.ema_params, new_state.params)
        return new_state.replace(ema_params=ema), loss

    return train_step, st, x, y


def _run(train_step, st, x, y, steps, on):
    step = podlet.jit(train_step)
    with fusion_env(on):
        for _ in range(steps):
            st, loss = step(st, x, y)
    return st, loss


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_seed_jit_step_bitwise_fusion_on_off(dtype):
    train_step, st, x, y = _seed_setup(getattr(pnp, dtype))
    off = _run(train_step, st, x, y, 3, False)
    on = _run(train_step, st, x, y, 3, True)
    assert_trees_bitwise(on, off)
    leaves = ptu.tree_leaves(on[0].params)
    assert all(p.dtype == getattr(pnp, dtype) for p in leaves)
    # The EMA moved away from both the initial params and the new params.
    e0, e1, p1 = (np.asarray(t).astype(np.float64) for t in (ptu.tree_leaves(st.ema_params)[0],
                                                               ptu.tree_leaves(on[0].ema_params)[0], leaves[0]))
    assert not np.array_equal(e0, e1) and not np.array_equal(e1, p1)


def test_mixed_precision_weight_grads_are_read_widened():
    """float32 params, bfloat16 compute: each kernel's (and the dense bias's) grad comes
    out of its bf16 conv / dense through a convert to float32; adamw_update reads the bf16 grad instead (one pass
    less per kernel), with the seed's clip (whose global norm still reads the converts) and
    EMA, bit for bit the unfused steps."""
    train_step, st, x, y = _seed_setup(pnp.bfloat16, param_dtype=pnp.float32)
    entry = podlet.jit(train_step).lower(st, x, y)
    # the convolution and dense kernels and the dense bias: the leaves cast to bf16
    kernels = [k for k, _ in ptu.tree_flatten_with_path(st.params)[0] if "kernel" in str(k[-1]) or "Dense" in str(k[0])]
    stats = _core.optimizer_fusion_stats(entry.graph)
    assert stats["grads_widened"] == len(kernels) > 0, stats
    with fusion_env(True):
        eg = fusion.executable_graph(entry)
    dtype_of = {int(v): d for v, d in re.findall(r"%(\d+):(\w+)\(", eg.dump())}
    ad = [n for n in nodes_of(eg) if n[0] == "adamw_update"]
    assert sum(1 for _, ins, _, _ in ad if dtype_of.get(ins[1]) == "bfloat16") == len(kernels), ad[:2]
    off = _run(train_step, st, x, y, 3, False)
    on = _run(train_step, st, x, y, 3, True)
    assert_trees_bitwise(on, off)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_seed_jit_step_graph_has_one_node_per_leaf(dtype):
    train_step, st, x, y = _seed_setup(getattr(pnp, dtype))
    step = podlet.jit(train_step)
    entry = step.lower(st, x, y)
    g = entry.graph
    n_leaves = len(ptu.tree_leaves(st.params))
    assert _core.optimizer_fusion_stats(g) == {"applies_folded": n_leaves, "emas_folded": n_leaves, "grads_widened": 0}
    with fusion_env(True):
        eg = fusion.executable_graph(entry)
    # One adamw_update per leaf, each with the EMA attached.
    ad = [n for n in nodes_of(eg) if n[0] == "adamw_update"]
    assert len(ad) == n_leaves and all("ema_c_old=" in a and "apply=1" in a for *_, a in ad)
    assert all(len(outs) == 4 for _, _, outs, _ in ad)
    # The old EMA leaves are read by their adamw_update node and by nothing else: no
    # separate elementwise EMA pass is left.
    args_leaves = ptu.tree_leaves(((st, x, y), {}))
    assert len(g.inputs) == len(args_leaves)
    n_before = len(ptu.tree_leaves(st)) - n_leaves  # ema_params is the last field of the state
    assert [id(a) for a in args_leaves[n_before:n_before + n_leaves]] == [id(a) for a in
                                                                           ptu.tree_leaves(st.ema_params)]
    for vid in g.inputs[n_before:n_before + n_leaves]:
        assert readers(eg, vid) == ["adamw_update"], (vid, readers(eg, vid))
    # Without the pass, the EMA is a fused_elementwise node per leaf (the second pass).
    plain = _core.fuse_elementwise(g)
    for vid in g.inputs[n_before:n_before + n_leaves]:
        assert readers(plain, vid) == ["fused_elementwise"]
    # FLOPs survive the pass; fusion off runs the traced graph itself.
    assert _core.fuse_optimizer(g).flops() == g.flops()
    with fusion_env(False):
        assert fusion.executable_graph(entry) is g


def test_jit_runs_the_ema_inside_adamw_update():
    # The profile of a fused run: adamw_update runs once per leaf and no mul/add does.
    train_step, st, x, y = _seed_setup(pnp.float32)
    step = podlet.jit(train_step)
    n_leaves = len(ptu.tree_leaves(st.params))
    with fusion_env(True):
        step(st, x, y)
        _core.take_profile_detailed()
        _core.set_profiling(True)
        try:
            step(st, x, y)
        finally:
            _core.set_profiling(False)
    prof = _core.take_profile_detailed()
    calls, _, flops, _ = prof[("adamw_update", "float32")]
    size = sum(int(np.size(p)) for p in ptu.tree_leaves(st.params))
    # 18 AdamW + 1 apply + 3 EMA FLOPs per element: apply_updates and the EMA ran inside.
    assert calls == n_leaves and flops == 22 * size, (calls, flops, size)


# ---------------------------------------------------------------------------------
# the seed's pmap'd step (tests/pmap_seed_step.py, verbatim seed code)
# ---------------------------------------------------------------------------------
def test_pmap_seed_step_bitwise_fusion_on_off_and_fused():
    from podlet.data import load_fashion_mnist
    xs, ys = load_fashion_mnist("train")
    n, per = podlet.local_device_count(), 2
    x = ((xs[:n * per].astype(np.float32) / 255.0 - 0.286) / 0.353).reshape(1, n, per, 28, 28, 1)
    y = ys[:n * per].astype(np.int32).reshape(1, n, per)
    with fusion_env(False):
        off = pmap_seed_step.run("podlet", x, y, 1)
    with fusion_env(True):
        on = pmap_seed_step.run("podlet", x, y, 1)
    assert sorted(on) == sorted(off)
    for k in on:
        np.testing.assert_array_equal(bits(on[k]), bits(off[k]), err_msg=k)
    # The graph pmap executes has the EMA folded in for every param leaf.
    m = pmap_seed_step.cnn_fashion_mnist.build("podlet")
    model, state = pmap_seed_step.build_state(m)
    p_step = pmap_seed_step.make_step(m, model, 0.99)
    from podlet import jax_utils
    p_step(jax_utils.replicate(state), {"image": x[0], "label": y[0]})
    (entry,) = p_step._cache.values()
    n_leaves = len(ptu.tree_leaves(state.params))
    assert _core.optimizer_fusion_stats(entry.graph) == {"applies_folded": n_leaves, "emas_folded": n_leaves, "grads_widened": 0}
    with fusion_env(True):
        assert fusion.pmap_graph(entry).prim_counts()["adamw_update"] == n_leaves
        assert "ema_c_old" in fusion.pmap_graph(entry).dump()
    with fusion_env(False):
        assert fusion.pmap_graph(entry) is entry.graph


# ---------------------------------------------------------------------------------
# what must not be folded
# ---------------------------------------------------------------------------------
def _simple(tx=None):
    rng = np.random.default_rng(3)
    params = to_podlet(make_params(rng))
    grads = [to_podlet(g) for g in grad_stream(rng, make_params(rng), 3)]
    tx = tx or seed_tx()
    st = TrainState.create(apply_fn=None, params=params, tx=tx, ema_params=ptu.tree_map(lambda p: p * 0.5, params))
    return st, grads


def _check_left_alone(step_fn, st, grads, extra=(), want_applies=None, want_emas=0):
    step = podlet.jit(step_fn)
    g = step.lower(st, grads[0], *extra).graph
    n = len(ptu.tree_leaves(st.params))
    stats = _core.optimizer_fusion_stats(g)
    assert stats["emas_folded"] == want_emas, stats
    if want_applies is not None:
        assert stats["applies_folded"] == want_applies, stats
    res = []
    for on in (False, True):
        s, outs = st, None
        with fusion_env(on):
            for gr in grads:
                s, outs = step(s, gr, *extra)
        res.append((s, outs))
    assert_trees_bitwise(res[1], res[0])
    return n, res[1]


def test_ema_of_the_old_params_is_not_folded():
    st, grads = _simple()

    def step(st, grads):
        new = st.apply_gradients(grads=grads)
        ema = ptu.tree_map(lambda o, p: 0.99 * o + (1.0 - 0.99) * p, st.ema_params, st.params)  # old params
        return new.replace(ema_params=ema), ema

    n, _ = _check_left_alone(step, st, grads, want_applies=len(ptu.tree_leaves(st.params)))


def test_traced_decay_is_not_folded():
    st, grads = _simple()

    def step(st, grads, decay):
        new = st.apply_gradients(grads=grads)
        ema = ptu.tree_map(lambda o, n: decay * o + (1.0 - decay) * n, st.ema_params, new.params)
        return new.replace(ema_params=ema), ema

    _check_left_alone(step, st, grads, extra=(pnp.asarray(np.float32(0.99)),))


def test_product_read_elsewhere_is_not_folded():
    st, grads = _simple()

    def step(st, grads):
        new = st.apply_gradients(grads=grads)
        kept = ptu.tree_map(lambda o: 0.99 * o, st.ema_params)
        ema = ptu.tree_map(lambda k, n: k + 0.01 * n, kept, new.params)
        return new.replace(ema_params=ema), kept  # 0.99 * o is an output too

    _check_left_alone(step, st, grads)


def test_ema_operand_computed_after_the_update_is_not_folded():
    st, grads = _simple()

    def step(st, grads):
        new = st.apply_gradients(grads=grads)
        o2 = ptu.tree_map(lambda o: pnp.sin(o), st.ema_params)  # traced after adamw_update
        ema = ptu.tree_map(lambda o, n: 0.99 * o + 0.01 * n, o2, new.params)
        return new.replace(ema_params=ema), ema

    _check_left_alone(step, st, grads)


def test_update_read_elsewhere_keeps_apply_and_ema_unfused():
    st, grads = _simple()

    def step(st, grads):
        updates, opt_state = st.tx.update(grads, st.opt_state, st.params)
        params = poptax.apply_updates(st.params, updates)
        ema = ptu.tree_map(lambda o, n: 0.99 * o + 0.01 * n, st.ema_params, params)
        return st.replace(params=params, opt_state=opt_state, ema_params=ema), updates

    _check_left_alone(step, st, grads, want_applies=0)


def test_operand_orders_and_uniform_constants_are_folded():
    st, grads = _simple()
    shapes = ptu.tree_map(lambda p: p.shape, st.params)

    def step(st, grads):
        new = st.apply_gradients(grads=grads)
        # n * c_new + o * c_old, with c_old a full-shape constant of one value.
        ema = ptu.tree_map(lambda o, n, s: n * (1.0 - 0.9) + o * pnp.full(s, 0.9, pnp.float32),
                           st.ema_params, new.params, shapes)
        return new.replace(ema_params=ema), ema

    n, (s, ema) = _check_left_alone(step, st, grads, want_emas=len(ptu.tree_leaves(st.params)))


@pytest.mark.parametrize("update_first", [False, True])
def test_broadcast_scalar_constant_is_folded(update_first):
    # A broadcast_in_dim of a 0-d constant (as autodiff or graph builders emit): built by
    # hand. add(u, param) is not apply_updates' order: the apply (and so the EMA) stays.
    shape = (7, 5)
    g = _core.Graph()
    p, gr, mu, nu, ema = (g.add_input("float32", shape) for _ in range(5))
    lr, gn, bc1, bc2 = (g.add_input("float32", ()) for _ in range(4))
    (u, m1, v1) = [vid for vid, _, _ in g.add("adamw_update", [p, gr, mu, nu, lr, gn, bc1, bc2],
                                              dict(b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0, weight_decay=1e-4,
                                                   max_norm=1.0, apply=0))]
    (newp,) = [vid for vid, _, _ in g.add("add", [u, p] if update_first else [p, u])]
    c_old = g.add_const(podlet._src.core.to_array(np.float32(0.75)))
    c_new = g.add_const(podlet._src.core.to_array(np.float32(0.25)))
    (bc,) = [vid for vid, _, _ in g.add("broadcast_in_dim", [c_old],
                                        dict(shape=list(shape), broadcast_dimensions=[]))]
    (a,) = [vid for vid, _, _ in g.add("mul", [ema, bc])]
    (b,) = [vid for vid, _, _ in g.add("mul", [c_new, newp])]
    (e,) = [vid for vid, _, _ in g.add("add", [b, a])]
    g.outputs = [newp, m1, v1, e]
    fg = _core.fuse_optimizer(g)
    folded = 0 if update_first else 1
    assert _core.optimizer_fusion_stats(g) == {"applies_folded": folded, "emas_folded": folded, "grads_widened": 0}
    if not update_first:
        assert fg.prim_counts() == {"adamw_update": 1}, fg.dump()
    assert fg.flops() == g.flops()
    rng = np.random.default_rng(5)
    arrs = [podlet._src.core.to_array(rng.normal(size=shape).astype(np.float32)) for _ in range(5)]
    arrs[3] = podlet._src.core.to_array(np.abs(np.asarray(arrs[3])) * 0.01)
    arrs += [podlet._src.core.to_array(np.float32(x)) for x in (1e-2, 0.5, 0.3, 0.2)]
    for x, y in zip(fg.run(arrs), g.run(arrs)):
        np.testing.assert_array_equal(bits(x), bits(y))


# ---------------------------------------------------------------------------------
# against optax + a NumPy EMA
# ---------------------------------------------------------------------------------
def test_fused_jit_step_matches_optax_and_numpy_ema():
    rng = np.random.default_rng(11)
    params = make_params(rng)
    grads = grad_stream(rng, params, 8)
    decay = 0.9  # a fast EMA so the few steps move it visibly

    def sched(lib):
        return lib.warmup_cosine_decay_schedule(0.0, 1e-2, 2, 8)

    ptx = poptax.chain(poptax.clip_by_global_norm(1.0), poptax.adamw(sched(poptax), weight_decay=1e-4))
    jtx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(sched(optax), weight_decay=1e-4))
    st = TrainState.create(apply_fn=None, params=to_podlet(params), tx=ptx, ema_params=to_podlet(params))

    @podlet.jit
    def step(state, grads):
        new_state = state.apply_gradients(grads=grads)
        ema = podlet.tree_util.tree_map(lambda o, n: decay * o + (1.0 - decay) * n, state.ema_params,
                                        new_state.params)
        return new_state.replace(ema_params=ema)

    assert _core.optimizer_fusion_stats(step.lower(st, to_podlet(grads[0])).graph)["emas_folded"] == 4
    pj, sj = to_jax(params), jtx.init(to_jax(params))
    ema_np = jax.tree.map(np.asarray, params)
    with fusion_env(True):
        for g in grads:
            st = step(st, to_podlet(g))
            uj, sj = jtx.update(to_jax(g), sj, pj)
            pj = optax.apply_updates(pj, uj)
            ema_np = jax.tree.map(lambda o, n: np.float32(decay) * o + np.float32(1.0 - decay) * np.asarray(n),
                                  ema_np, pj)
    for a, b in zip(ptu.tree_leaves(st.params), jax.tree.leaves(pj)):
        np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=1e-6, atol=1e-7)
    for a, b in zip(ptu.tree_leaves(st.ema_params), jax.tree.leaves(ema_np)):
        np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=1e-6, atol=1e-7)
    moved = max(np.abs(np.asarray(a) - b).max() for a, b in zip(ptu.tree_leaves(st.ema_params),
                                                                 jax.tree.leaves(params)))
    assert moved > 1e-3
