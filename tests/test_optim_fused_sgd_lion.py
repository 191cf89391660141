"""The fused SGD-with-momentum and Lion steps (sgd_momentum_update / lion_update
primitives, podlet.optim.fused_sgd / fused_lion).

Each primitive must be bit-identical to the unfused podlet.optim chain it replaces
([clip_by_global_norm ->] trace -> scale_by_learning_rate, and [clip_by_global_norm ->]
scale_by_lion -> add_decayed_weights -> scale_by_learning_rate) for f32, bf16 and f64,
one step and 100+ steps, with and without Nesterov, weight decay, masks, schedules and
the clip, eagerly and under podlet.jit; sgd(..., momentum=m), lion(...) and those after
clip_by_global_norm in a chain must pick the fused path by themselves (and not when
they cannot), keep optax's state pytree and match optax 0.2.8 over 100 steps.
"""
import numpy as np
import pytest

import podlet
import podlet.numpy as pnp
import podlet.optim as poptax
from podlet import _core
from podlet import tree_util as ptu
from podlet.optim import _base as pbase
from podlet.optim import _fused
from podlet.optim import alias as palias

from prim_check import as_podlet, check_batching, check_prim
from test_optim_fused import assert_trees_bitwise, bits
from test_optim import (_decay_mask, _decay_mask_podlet, assert_same_structure, assert_trees_close, grad_stream,
                        make_params, optax, run_both, to_jax, to_podlet)

import jax.numpy as jnp

SGD_ATTR, LION_ATTR = "_podlet_fused_sgd", "_podlet_fused_lion"


def fused_kind(tx):
    for attr in (SGD_ATTR, LION_ATTR, "_podlet_fused_adamw"):
        if getattr(tx.update, attr, None) is not None:
            return attr
    return None


def sched_a():
    return poptax.warmup_cosine_decay_schedule(0.0, 5e-2, 5, 100)


# name -> (fused constructor, unfused twin); both take the learning rate.
def _clip(c, tx):
    return pbase._chain(poptax.clip_by_global_norm(c), tx)


CONFIGS = {
    "sgd": (lambda lr: poptax.sgd(lr, momentum=0.9), lambda lr: palias._sgd_unfused(lr, 0.9)),
    "sgd_nesterov": (lambda lr: poptax.sgd(lr, momentum=0.8, nesterov=True),
                     lambda lr: palias._sgd_unfused(lr, 0.8, nesterov=True)),
    "clip_sgd_nesterov": (lambda lr: poptax.chain(poptax.clip_by_global_norm(1.0),
                                                  poptax.sgd(lr, momentum=0.9, nesterov=True)),
                          lambda lr: _clip(1.0, palias._sgd_unfused(lr, 0.9, nesterov=True))),
    "lion": (lambda lr: poptax.lion(lr, b1=0.85, b2=0.98, weight_decay=0.1),
             lambda lr: palias._lion_unfused(lr, b1=0.85, b2=0.98, weight_decay=0.1)),
    "lion_no_decay": (lambda lr: poptax.lion(lr, weight_decay=0.0),
                      lambda lr: palias._lion_unfused(lr, weight_decay=0.0)),
    "lion_mask_tree": (lambda lr: poptax.lion(lr, weight_decay=0.5, mask={"w": True, "b": False, "s": True}),
                       lambda lr: palias._lion_unfused(lr, weight_decay=0.5, mask={"w": True, "b": False, "s": True})),
    "clip_lion_mask_fn": (lambda lr: poptax.chain(poptax.clip_by_global_norm(2.0),
                                                  poptax.lion(lr, weight_decay=0.3, mask=_decay_mask_podlet)),
                          lambda lr: _clip(2.0, palias._lion_unfused(lr, weight_decay=0.3, mask=_decay_mask_podlet))),
}


def small_params(rng, dtype):
    shapes = {"w": (9, 5), "b": (5,), "s": ()}
    return {k: pnp.asarray(rng.normal(size=s)).astype(dtype) for k, s in shapes.items()}


def grads_for(rng, params, i):
    scale = 8.0 if i % 5 == 2 else 0.2  # every 5th step the clip triggers
    return {k: pnp.asarray(rng.normal(size=v.shape) * scale).astype(v.dtype) for k, v in params.items()}


class x64_if:
    def __init__(self, on):
        self.on = on

    def __enter__(self):
        if self.on:
            podlet.config.update("jax_enable_x64", True)

    def __exit__(self, *exc):
        if self.on:
            podlet.config.update("jax_enable_x64", False)


# ---------------------------------------------------------------------------------
# trajectories: the fused transform vs the unfused chain, bit for bit
# ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float64"])
@pytest.mark.parametrize("sched", [False, True])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_120_steps_fused_equal_unfused_bitwise(name, sched, dtype):
    with x64_if(dtype == "float64"):
        rng = np.random.default_rng(hash((name, sched, dtype)) % 2**32)
        lr = sched_a() if sched else 3e-2
        mk_fused, mk_ref = CONFIGS[name]
        fus, ref = mk_fused(lr), mk_ref(lr)
        assert fused_kind(fus) == (SGD_ATTR if "sgd" in name else LION_ATTR)
        assert fused_kind(ref) is None
        pf = pr = small_params(rng, dtype)
        sf, sr = fus.init(pf), ref.init(pr)
        assert_trees_bitwise(sf, sr)
        for i in range(120):
            g = grads_for(rng, pf, i)
            uf, sf = fus.update(g, sf, pf)
            ur, sr = ref.update(g, sr, pr)
            assert_trees_bitwise(uf, ur)
            pf, pr = poptax.apply_updates(pf, uf), poptax.apply_updates(pr, ur)
        assert_trees_bitwise((pf, sf), (pr, sr))
        assert all(x.dtype == dtype for x in ptu.tree_leaves(pf))
        assert not np.array_equal(np.asarray(pf["w"]), np.asarray(small_params(np.random.default_rng(0), dtype)["w"]))


# ---------------------------------------------------------------------------------
# one step on awkward arrays: > 1 parallel chunk, 0-d, empty, NaN / inf / +-0
# ---------------------------------------------------------------------------------
def special_params(rng, dtype):
    shapes = {"big": (3, 40000), "mat": (7, 5), "scalar": (), "empty": (0, 4)}
    p = {k: rng.normal(size=s) for k, s in shapes.items()}
    g = {k: rng.normal(size=s) for k, s in shapes.items()}
    m = {k: rng.normal(size=s) * 0.1 for k, s in shapes.items()}
    # Values the sign and the adds must treat as the chain does: NaN (the grad's and the
    # state's, with different payloads, meet in the adds), inf, +-0 (sign keeps -0).
    p["mat"][0, :3] = [np.nan, -0.0, np.inf]
    p["mat"][1, 0] = -np.nan  # meets the update's NaN (the grad's, +) in the apply add
    g["mat"][1, :4] = [np.nan, 0.0, -0.0, -np.inf]
    m["mat"][1, :4] = [-np.nan, 0.0, -0.0, 1.0]
    m["mat"][2, :2] = [-0.0, 0.0]
    g["mat"][2, :2] = [0.0, -0.0]
    cast = lambda t: {k: pnp.asarray(v).astype(dtype) for k, v in t.items()}  # noqa: E731
    return cast(p), cast(g), cast(m)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float64"])
@pytest.mark.parametrize("gscale", [1e-3, 30.0])  # clip off / clip triggers (with NaN grads: the NaN norm)
@pytest.mark.parametrize("name", sorted(set(CONFIGS) - {"lion_mask_tree"}))  # its mask is small_params' tree
def test_one_step_on_special_values_bitwise(name, gscale, dtype):
    with x64_if(dtype == "float64"):
        rng = np.random.default_rng(7)
        params, grads, mom = special_params(rng, dtype)
        grads = {k: v * gscale for k, v in grads.items()}
        if gscale < 1:  # finite grads, so the norm is finite and compared with max_norm
            grads["mat"] = pnp.where(pnp.isfinite(grads["mat"]), grads["mat"], 0.0).astype(dtype)
        mk_fused, mk_ref = CONFIGS[name]
        fus, ref = mk_fused(1e-2), mk_ref(1e-2)
        st = ref.init(params)
        # The state with random momentum (and, for Lion, a nonzero count).
        clip = isinstance(st[0], poptax.EmptyState)
        inner = st[1] if clip else st
        first = inner[0]
        if isinstance(first, poptax.TraceState):
            first = first._replace(trace=mom)
        else:
            first = first._replace(mu=mom, count=pnp.asarray(np.int32(6)))
        inner = (first,) + tuple(inner[1:])
        st = (st[0], inner) if clip else inner
        ur, sr = ref.update(grads, st, params)
        uf, sf = fus.update(grads, st, params)
        assert_trees_bitwise(uf, ur)
        assert_trees_bitwise(sf, sr)
        # Under jit apply_updates' add runs inside the fused node (apply=1): the NaN it
        # keeps is still the add's.
        def step(p, s, g):
            u, s = fus.update(g, s, p)
            return poptax.apply_updates(p, u), s

        jstep = podlet.jit(step)
        assert _core.optimizer_fusion_stats(jstep.lower(params, st, grads).graph)["applies_folded"] == len(params)
        assert_trees_bitwise(jstep(params, st, grads), (poptax.apply_updates(params, ur), sr))


# ---------------------------------------------------------------------------------
# podlet.jit: the fused nodes are in the graph, and the bits are eager's
# ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", ["sgd_nesterov", "clip_sgd_nesterov", "lion_mask_tree", "clip_lion_mask_fn"])
def test_jit_takes_the_fused_path_and_equals_eager_and_unfused(name, dtype):
    rng = np.random.default_rng(11)
    mk_fused, mk_ref = CONFIGS[name]
    prim = "sgd_momentum_update" if "sgd" in name else "lion_update"
    params = small_params(rng, dtype)
    results = {}
    for which, tx in (("fused", mk_fused(sched_a())), ("unfused", mk_ref(sched_a()))):

        def step(p, s, g, tx=tx):
            u, s = tx.update(g, s, p)
            return poptax.apply_updates(p, u), s

        st0 = tx.init(params)
        counts = podlet.make_graph(step, params, st0, grads_for(rng, params, 0)).prim_counts()
        assert counts.get(prim, 0) == (len(params) if which == "fused" else 0), counts
        jstep = podlet.jit(step)
        # jit's optimizer pass folds apply_updates' add into each fused node (apply=1).
        stats = _core.optimizer_fusion_stats(jstep.lower(params, st0, grads_for(rng, params, 0)).graph)
        assert stats["applies_folded"] == (len(params) if which == "fused" else 0), stats
        pj_, sj_, pe, se = params, st0, params, st0
        r = np.random.default_rng(12)
        for i in range(25):
            g = grads_for(r, params, i)
            pj_, sj_ = jstep(pj_, sj_, g)
            pe, se = step(pe, se, g)
        assert jstep.trace_count == 1
        assert_trees_bitwise((pj_, sj_), (pe, se))
        results[which] = (pj_, sj_)
    assert_trees_bitwise(results["fused"], results["unfused"])


def test_sgd_without_params_is_fused_and_lion_without_params_raises_optax_error():
    rng = np.random.default_rng(3)
    params = small_params(rng, "float32")
    g = grads_for(rng, params, 0)
    tx, ref = CONFIGS["sgd_nesterov"][0](1e-2), CONFIGS["sgd_nesterov"][1](1e-2)
    counts = podlet.make_graph(lambda s, g: tx.update(g, s), tx.init(params), g).prim_counts()
    assert counts.get("sgd_momentum_update") == len(params)
    uf, sf = tx.update(g, tx.init(params))
    ur, sr = ref.update(g, ref.init(params))
    assert_trees_bitwise((uf, sf), (ur, sr))
    lion = poptax.lion(1e-2)
    with pytest.raises(ValueError, match="requires the current value of parameters"):
        lion.update(g, lion.init(params))


# ---------------------------------------------------------------------------------
# against optax 0.2.8, 100 steps
# ---------------------------------------------------------------------------------
OPTAX_CASES = {
    "sgd": lambda o: o.sgd(0.05, momentum=0.9),
    "sgd_nesterov_sched": lambda o: o.sgd(o.exponential_decay(0.1, 10, 0.5), momentum=0.9, nesterov=True),
    "clip_sgd": lambda o: o.chain(o.clip_by_global_norm(0.5), o.sgd(0.1, momentum=0.5)),
    "lion": lambda o: o.lion(1e-3),
    "lion_no_decay_sched": lambda o: o.lion(o.cosine_decay_schedule(3e-3, 100), b1=0.95, weight_decay=0.0),
    "clip_lion_mask": lambda o: o.chain(o.clip_by_global_norm(1.0),
                                        o.lion(1e-3, weight_decay=0.5,
                                               mask=_decay_mask_podlet if o is poptax else _decay_mask)),
    "lion_mask_prefix": lambda o: o.lion(1e-3, weight_decay=0.2, mask={"dense": True, "bn": False, "conv": True}),
}


@pytest.mark.parametrize("name", sorted(OPTAX_CASES))
def test_100_steps_match_optax(name):
    rng = np.random.default_rng(5)
    params = make_params(rng)
    grads = grad_stream(rng, params, 100)
    ptx = OPTAX_CASES[name](poptax)
    assert fused_kind(ptx) in (SGD_ATTR, LION_ATTR)
    (pp, sp), (pj, sj) = run_both(ptx, OPTAX_CASES[name](optax), params, grads)
    assert_trees_close(pp, pj, rtol=1e-6, atol=1e-7)
    assert_trees_close(sp, sj, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", sorted(OPTAX_CASES))
def test_state_structure_matches_optax(name):
    params = make_params(np.random.default_rng(2))
    sp = OPTAX_CASES[name](poptax).init(to_podlet(params))
    sj = OPTAX_CASES[name](optax).init(to_jax(params))
    assert_same_structure(sp, sj)


# ---------------------------------------------------------------------------------
# selection: fused when it computes the same thing, the chain otherwise
# ---------------------------------------------------------------------------------
def test_aliases_pick_the_fused_path_only_when_exact():
    sched = poptax.linear_schedule(0.0, 1e-3, 10)
    assert fused_kind(poptax.sgd(1e-2, momentum=0.9)) == SGD_ATTR
    assert fused_kind(poptax.sgd(sched, momentum=0, nesterov=True)) == SGD_ATTR
    assert fused_kind(poptax.lion(1e-3)) == LION_ATTR
    assert fused_kind(poptax.lion(sched, mask=_decay_mask_podlet)) == LION_ATTR
    tx = poptax.chain(poptax.clip_by_global_norm(1.0), poptax.sgd(1e-2, momentum=0.9))
    assert fused_kind(tx) == SGD_ATTR and tx.update._podlet_fused_sgd["clip_norm"] == 1.0
    tx = poptax.chain(poptax.clip_by_global_norm(3), poptax.lion(1e-3))
    assert fused_kind(tx) == LION_ATTR and tx.update._podlet_fused_lion["clip_norm"] == 3
    # ... and keep the chain where fusing would change the numbers or is not supported.
    assert fused_kind(poptax.sgd(1e-2)) is None  # plain SGD: one scale, nothing to fuse
    assert fused_kind(poptax.sgd(1e-2, momentum=0.9, accumulator_dtype=pnp.bfloat16)) is None
    assert fused_kind(poptax.sgd(1e-2, momentum=pnp.asarray(np.float32(0.9)))) is None
    assert fused_kind(poptax.sgd(pnp.asarray(np.float32(1e-2)), momentum=0.9)) is None
    assert fused_kind(poptax.lion(1e-3, mu_dtype=pnp.bfloat16)) is None
    assert fused_kind(poptax.lion(1e-3, weight_decay=sched)) is None
    assert fused_kind(poptax.lion(1e-3, b1=pnp.asarray(np.float32(0.9)))) is None
    assert fused_kind(poptax.chain(poptax.clip_by_global_norm(0.0), poptax.lion(1e-3))) is None
    assert fused_kind(poptax.chain(poptax.clip_by_global_norm(1.0), poptax.sgd(1e-2))) is None
    assert fused_kind(poptax.chain(poptax.clip_by_global_norm(1.0), poptax.lion(1e-3), poptax.scale(1.0))) is None
    assert fused_kind(poptax.chain(poptax.clip_by_global_norm(1.0),
                                   poptax.chain(poptax.clip_by_global_norm(1.0), poptax.lion(1e-3)))) is None
    # inject_hyperparams makes the hyperparameters arrays: the chain.
    tx = poptax.inject_hyperparams(poptax.sgd)(learning_rate=0.1, momentum=0.9)
    params = {"w": pnp.ones((3,))}
    u, _ = tx.update({"w": pnp.ones((3,))}, tx.init(params), params)
    np.testing.assert_allclose(np.asarray(u["w"]), -0.1 * np.ones(3), rtol=1e-6)
    with pytest.raises(ValueError, match="fused_sgd needs"):
        poptax.fused_sgd(1e-2, momentum=None)
    with pytest.raises(ValueError, match="fused_lion needs"):
        poptax.fused_lion(1e-2, weight_decay=sched)


@pytest.mark.parametrize("make", [lambda o: o.sgd(0.1, momentum=0.9, nesterov=True), lambda o: o.lion(0.1)])
def test_leaves_the_primitives_do_not_take_fall_back_to_the_chain(make):
    tx = make(poptax)
    assert fused_kind(tx) is not None
    # Python scalars as params.
    s = tx.init({"a": 1.0})
    u, s = tx.update({"a": -0.5}, s, {"a": 1.0})
    jtx = make(optax)
    uj, _ = jtx.update({"a": -0.5}, jtx.init({"a": 1.0}), {"a": 1.0})
    np.testing.assert_allclose(float(u["a"]), float(uj["a"]), rtol=1e-6)
    # Grads of another dtype than the params and the state: the chain's promotion.
    p = {"w": pnp.ones((4,), "float32")}
    g = {"w": pnp.full((4,), 0.5, "bfloat16")}
    st = tx.init(p)
    counts = podlet.make_graph(lambda s, g, p: tx.update(g, s, p), st, g, p).prim_counts()
    assert not {"sgd_momentum_update", "lion_update"} & set(counts), counts
    u, _ = tx.update(g, st, p)
    uj, _ = jtx.update({"w": np.full(4, 0.5, np.float32)}, jtx.init({"w": np.ones(4, np.float32)}),
                       {"w": np.ones(4, np.float32)})
    np.testing.assert_allclose(np.asarray(u["w"]), np.asarray(uj["w"]), rtol=1e-6)


# ---------------------------------------------------------------------------------
# the primitives
# ---------------------------------------------------------------------------------
def _sgd_ref(nesterov, clip_scale, apply):
    def ref(p, g, t, lr, gnorm):
        g = g * clip_scale
        t2 = g + 0.9 * t
        u = -lr * ((g + 0.9 * t2) if nesterov else t2)
        return (p + u if apply else u), t2
    return ref


def _lion_ref(wd, clip_scale, apply):
    def ref(p, g, m, lr, gnorm):
        g = g * clip_scale
        u = -lr * (np.sign(0.1 * g + 0.9 * m) + wd * p)
        return (p + u if apply else u), 0.01 * g + 0.99 * m
    return ref


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float64"])
@pytest.mark.parametrize("clip", [False, True])
@pytest.mark.parametrize("apply", [0, 1])
@pytest.mark.parametrize("variant", [0, 1])  # sgd: Nesterov off / on; lion: decay off / on
@pytest.mark.parametrize("prim", ["sgd_momentum_update", "lion_update"])
def test_primitive_forward_jit_and_vmap(prim, variant, apply, clip, dtype):
    import ml_dtypes
    np_dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    rng = np.random.default_rng(31)
    p, g, s = (rng.normal(size=(6, 7)).astype(np_dt) for _ in range(3))
    # Keep lion's sign argument away from 0 so the f64 reference's sign is the kernel's.
    if prim == "lion_update":
        g = (np.sign(g.astype(np.float64)) * (np.abs(g.astype(np.float64)) + 0.5)).astype(np_dt)
        s = (np.sign(g.astype(np.float64)) * np.abs(s.astype(np.float64))).astype(np_dt)
    lr, gnorm = np.float32(1e-2), np.float32(4.0)
    max_norm = 2.0 if clip else 0.0
    scale = 0.5 if clip else 1.0
    if prim == "sgd_momentum_update":
        attrs = dict(momentum=0.9, nesterov=variant, max_norm=max_norm, apply=apply)
        ref = _sgd_ref(variant, scale, apply)
    else:
        wd = 0.1 if variant else 0.0
        attrs = dict(b1=0.9, b2=0.99, weight_decay=wd, max_norm=max_norm, apply=apply)
        ref = _lion_ref(wd, scale, apply)
    rtol, atol = ((1.6e-2, 1e-2) if dtype == "bfloat16" else (2e-6, 1e-6) if dtype == "float32" else (1e-12, 1e-12))
    out = check_prim(prim, [p, g, s, lr, gnorm], attrs, ref=ref, rtol=rtol, atol=atol)
    if apply:  # the new parameter is param + the update, one add rounded to the dtype (NumPy's here)
        u = np.asarray(_core_bind(prim, [p, g, s, lr, gnorm], {**attrs, "apply": 0})[0])
        np.testing.assert_array_equal(bits(out[0]), bits(p + u))
    # vmap with per-element lr / gnorm (the batched loop) as well as shared ones.
    check_batching(prim, [p, g, s, lr, gnorm], attrs)
    stk = lambda a: np.stack([a, a * np.asarray(2, a.dtype), a], 0)  # noqa: E731
    got = podlet.vmap(lambda *xs: _core_bind(prim, xs, attrs), in_axes=(0, 0, 0, None, None))(
        *[as_podlet(stk(a)) for a in (p, g, s)], as_podlet(lr), as_podlet(gnorm))
    for b in range(3):
        want = _core_bind(prim, [as_podlet(stk(a)[b]) for a in (p, g, s)] + [as_podlet(lr), as_podlet(gnorm)], attrs)
        for o, w in zip(got, want):
            np.testing.assert_array_equal(bits(np.asarray(o)[b]), bits(w))


def _core_bind(prim, args, attrs):
    from podlet._src.core import bind
    return bind(prim, *[as_podlet(a) if isinstance(a, (np.ndarray, np.generic)) else a for a in args], **attrs)


def test_primitive_bits_do_not_depend_on_the_thread_count():
    rng = np.random.default_rng(40)
    n = 5 * (1 << 14) + 3  # several parallel chunks and a ragged tail
    p, g, s = (as_podlet(rng.normal(size=n).astype(np.float32)) for _ in range(3))
    lr, gn = as_podlet(np.float32(1e-2)), as_podlet(np.float32(3.0))
    before = _core.num_threads()
    outs = []
    try:
        for nt in (1, 2):
            podlet.config.update("num_threads", nt)
            outs.append([bits(o).copy() for o in _fused.sgd_momentum_update(p, g, s, lr, gn, momentum=0.9,
                                                                             nesterov=True, max_norm=1.0)]
                        + [bits(o).copy() for o in _fused.lion_update(p, g, s, lr, gn, b1=0.9, b2=0.99,
                                                                      weight_decay=0.1, max_norm=1.0)])
    finally:
        podlet.config.update("num_threads", before)
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("fn,state_name", [(lambda *a: _fused.sgd_momentum_update(*a, momentum=0.9), "trace"),
                                           (lambda *a: _fused.lion_update(*a, b1=0.9, b2=0.99), "mu")])
def test_primitives_check_operands(fn, state_name):
    a = pnp.ones((3, 2))
    s = pnp.asarray(np.float32(1.0))
    prim = "sgd_momentum_update" if state_name == "trace" else "lion_update"
    with pytest.raises(Exception, match=f"{prim}: {state_name} must have the param shape \\(3, ?2\\), got \\(2, ?3\\)"):
        fn(a, a, pnp.ones((2, 3)), s, s)
    with pytest.raises(Exception, match=f"{prim}: grad must have the param shape"):
        fn(a, pnp.ones((3,)), a, s, s)
    with pytest.raises(Exception, match=f"{prim}: grad must have the param dtype float32, got int32"):
        fn(a, a.astype("int32"), a, s, s)
    b = a.astype("bfloat16")
    with pytest.raises(Exception, match=f"{prim}: {state_name} must have the param dtype bfloat16, got float32"):
        fn(b, b, a, s, s)
    with pytest.raises(Exception, match=f"{prim}: lr must be a 0-d scalar, got shape"):
        fn(a, a, a, pnp.ones((1,)), s)
    with pytest.raises(Exception, match=f"{prim}: gnorm must be a float scalar, got int32"):
        fn(a, a, a, s, pnp.asarray(np.int32(1)))
    i = pnp.ones((3,), dtype="int32")
    with pytest.raises(Exception, match=f"{prim}: param must be a float array, got int32"):
        fn(i, i, i, s, s)
    # ... at trace time too, under jit.
    with pytest.raises(Exception, match=f"{prim}: {state_name} must have the param shape"):
        podlet.jit(lambda x, y: fn(x, x, y, s, s))(a, pnp.ones((2, 3)))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float64"])
@pytest.mark.parametrize("n", [5, 37, 70001])  # vector tails; several parallel chunks
def test_every_isa_gives_the_ref_loops_bits(n, dtype):
    """The loops run vectorised for AVX2 (kernels/optim_sgd_lion_avx2.cc) where the host
    has it: on every ISA the host runs, the same bits as `ref` (baseline x86-64) for
    every flag combination, NaN, inf and +-0 in the operands included."""
    import ml_dtypes
    from podlet._src.core import bind
    np_dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    rng = np.random.default_rng(41)
    p, g, s = (rng.normal(size=n) for _ in range(3))
    p[1], g[2], s[3], g[4 % n] = np.nan, np.inf, -np.inf, -0.0
    s[0], g[0] = -np.nan, np.nan
    ops = [as_podlet(a.astype(np_dt)) for a in (p, g, s)]
    isas = _core.cpu_info()["available_isas"]
    isa = _core.active_isa()
    try:
        for gnorm in (3.0, 0.5):  # clip triggers / not
            sc = [as_podlet(np.float32(x)) for x in (1e-2, gnorm)]
            for prim, variant in (("sgd_momentum_update", "nesterov"), ("lion_update", "weight_decay")):
                base = dict(momentum=0.9) if prim == "sgd_momentum_update" else dict(b1=0.9, b2=0.99)
                for v in (0, 1):
                    for apply in (0, 1):
                        attrs = dict(base, max_norm=2.0, apply=apply,
                                     **{variant: v if variant == "nesterov" else 0.1 * v})
                        outs = {}
                        for i in isas:
                            _core.set_isa(i)
                            outs[i] = [bits(o).copy() for o in bind(prim, *ops, *sc, **attrs)]
                        for i in isas:
                            for a, b in zip(outs[i], outs["ref"]):
                                np.testing.assert_array_equal(a, b, err_msg=f"{i} {prim} {attrs}")
    finally:
        _core.set_isa(isa)
