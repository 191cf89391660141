"""The fused AdamW step (adamw_update primitive, podlet.optim.fused_adamw).

The primitive must be bit-identical to the unfused podlet.optim chain
(clip_by_global_norm -> scale_by_adam -> add_decayed_weights -> scale_by_learning_rate)
for f32, bf16 and f64, with and without the clip triggering, with and without weight
decay; adamw(...) and chain(clip_by_global_norm(c), adamw(...)) must pick the fused
path by themselves (and not when they cannot), keep optax's state pytree, match optax
over 200 steps, and work under podlet.jit.
"""
import numpy as np
import pytest

import podlet
import podlet.numpy as pnp
import podlet.optim as poptax
from podlet import tree_util as ptu
from podlet.optim import _base as pbase
from podlet.optim import _fused
from podlet.optim import alias as palias

from test_optim import (_decay_mask, _decay_mask_podlet, assert_same_structure, assert_trees_close, grad_stream,
                        make_params, optax, run_both, seed_tx, to_jax, to_podlet)

import jax
import jax.numpy as jnp
BF16 = jnp.bfloat16


def is_fused(tx):
    return getattr(tx.update, "_podlet_fused_adamw", None) is not None


def unfused_tx(lr, clip_norm=None, **kw):
    ref = palias._adamw_unfused(lr, **kw)
    return ref if clip_norm is None else pbase._chain(poptax.clip_by_global_norm(clip_norm), ref)


def fused_tx(lr, clip_norm=None, **kw):
    return poptax.fused_adamw(lr, clip_norm=clip_norm, **kw)


def bits(x):
    a = np.asarray(x)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def assert_trees_bitwise(a, b):
    assert repr(ptu.tree_structure(a)) == repr(ptu.tree_structure(b))
    for x, y in zip(ptu.tree_leaves(a), ptu.tree_leaves(b)):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(bits(x), bits(y))


def random_state(tx, params, rng, count):
    """tx.init(params) with random moments (nu >= 0) and a given step count."""
    st = tx.init(params)
    inner = st[1] if isinstance(st[0], poptax.EmptyState) else st
    adam = inner[0]
    mu = ptu.tree_map(lambda m: pnp.asarray(rng.normal(size=m.shape).astype(np.float32) * 0.1).astype(m.dtype), adam.mu)
    nu = ptu.tree_map(lambda v: pnp.asarray(rng.random(size=v.shape).astype(np.float32) * 0.01).astype(v.dtype), adam.nu)
    adam = adam._replace(count=pnp.asarray(np.int32(count)), mu=mu, nu=nu)
    inner = (adam,) + tuple(inner[1:])
    return (st[0], inner) if isinstance(st[0], poptax.EmptyState) else inner


# ---------------------------------------------------------------------------------
# the primitive vs the unfused chain, bit for bit
# ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float64"])
@pytest.mark.parametrize("gscale", [1e-3, 30.0])  # clip off / clip triggers
@pytest.mark.parametrize("wd,eps_root,sched", [(0.0, 0.0, False), (0.05, 1e-8, True)])
def test_step_bitwise_equal_to_unfused_chain(dtype, gscale, wd, eps_root, sched):
    x64 = dtype == "float64"
    if x64:
        podlet.config.update("jax_enable_x64", True)
    try:
        rng = np.random.default_rng(0)
        shapes = {"big": (3, 40000), "mat": (7, 5), "vec": (3,), "scalar": (), "empty": (0, 4)}  # big: > 1 chunk
        params = {k: pnp.asarray(rng.normal(size=s)).astype(dtype) for k, s in shapes.items()}
        grads = {k: pnp.asarray(rng.normal(size=s) * gscale).astype(dtype) for k, s in shapes.items()}
        lr = poptax.warmup_cosine_decay_schedule(0.0, 3e-3, 5, 100) if sched else 3e-3
        kw = dict(b1=0.85, b2=0.995, eps=1e-7, eps_root=eps_root, weight_decay=wd)
        ref, fus = unfused_tx(lr, clip_norm=1.0, **kw), fused_tx(lr, clip_norm=1.0, **kw)
        state = random_state(ref, params, rng, count=6)
        gn = float(np.asarray(poptax.global_norm(grads)).astype(np.float64))
        assert (gn > 1.0) == (gscale > 1.0)
        ur, sr = ref.update(grads, state, params)
        uf, sf = fus.update(grads, state, params)
        assert_trees_bitwise(uf, ur)
        assert_trees_bitwise(sf, sr)
        assert_trees_bitwise(poptax.apply_updates(params, uf), poptax.apply_updates(params, ur))
    finally:
        if x64:
            podlet.config.update("jax_enable_x64", False)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_primitive_apply_returns_new_param(dtype):
    rng = np.random.default_rng(1)
    p, g = (pnp.asarray(rng.normal(size=(5, 6))).astype(dtype) for _ in range(2))
    m = pnp.asarray(rng.normal(size=(5, 6)) * 0.1).astype(dtype)
    v = pnp.asarray(rng.random(size=(5, 6)) * 0.01).astype(dtype)
    sc = [pnp.asarray(np.float32(x)) for x in (1e-2, 3.0, 0.5, 0.01)]  # lr, gnorm (clip: 3 >= 2), bc1, bc2
    kw = dict(b1=0.9, b2=0.999, eps=1e-8, weight_decay=1e-2, max_norm=2.0)
    u, m1, v1 = _fused.adamw_update(p, g, m, v, *sc, apply=False, **kw)
    newp, m2, v2 = _fused.adamw_update(p, g, m, v, *sc, apply=True, **kw)
    np.testing.assert_array_equal(bits(newp), bits(poptax.apply_updates(p, u)))
    np.testing.assert_array_equal(bits(m1), bits(m2))
    np.testing.assert_array_equal(bits(v1), bits(v2))
    # Float64 NumPy reference of the (f32) formula: close, and the clip was applied.
    f = lambda a: np.asarray(a).astype(np.float64)  # noqa: E731
    gg = f(g) / 3.0 * 2.0
    mu = 0.1 * gg + 0.9 * f(m)
    nu = 0.001 * gg * gg + 0.999 * f(v)
    uu = -1e-2 * ((mu / 0.5) / (np.sqrt(nu / 0.01) + 1e-8) + 1e-2 * f(p))
    tol = 2e-2 if dtype == "bfloat16" else 1e-5
    for got, want in ((m1, mu), (v1, nu), (u, uu)):  # errors relative to the array's scale (cancellation)
        np.testing.assert_allclose(f(got), want, rtol=0, atol=tol * np.abs(want).max())


def test_primitive_checks_operands():
    a = pnp.ones((3, 2))
    s = pnp.asarray(np.float32(1.0))
    kw = dict(b1=0.9, b2=0.999, eps=1e-8)
    with pytest.raises(Exception, match="mu must have the param shape"):
        _fused.adamw_update(a, a, pnp.ones((2, 3)), a, s, s, s, s, **kw)
    with pytest.raises(Exception, match=r"grad must have the param dtype float32 \(or bfloat16\), got int32"):
        _fused.adamw_update(a, a.astype("int32"), a, a, s, s, s, s, **kw)
    b = a.astype("bfloat16")
    with pytest.raises(Exception, match="grad must have the param dtype bfloat16, got float32"):
        _fused.adamw_update(b, a, b, b, s, s, s, s, **kw)
    with pytest.raises(Exception, match="mu must have the param dtype float32, got bfloat16"):
        _fused.adamw_update(a, a, b, a, s, s, s, s, **kw)
    with pytest.raises(Exception, match="must be a 0-d scalar"):
        _fused.adamw_update(a, a, a, a, pnp.ones((1,)), s, s, s, **kw)
    with pytest.raises(Exception, match="param must be a float array"):
        i = pnp.ones((3,), dtype="int32")
        _fused.adamw_update(i, i, i, i, s, s, s, s, **kw)


# ---------------------------------------------------------------------------------
# automatic selection, and the state pytree
# ---------------------------------------------------------------------------------
def test_adamw_and_seed_chain_pick_the_fused_path():
    sched = poptax.linear_schedule(0.0, 1e-3, 10)
    assert is_fused(poptax.adamw(1e-3))
    assert is_fused(poptax.adamw(sched, mask={"a": True}))
    assert is_fused(poptax.adamw(1e-3, mask=_decay_mask_podlet))
    tx = seed_tx(poptax)
    assert is_fused(tx) and tx.update._podlet_fused_adamw["clip_norm"] == 1.0
    # ... and keep the chain when fusing would change the numbers or is not supported.
    assert not is_fused(poptax.adamw(1e-3, nesterov=True))
    assert not is_fused(poptax.nadamw(1e-3))
    assert not is_fused(poptax.adamw(1e-3, mu_dtype=pnp.bfloat16))
    assert not is_fused(poptax.adamw(1e-3, weight_decay=sched))
    assert not is_fused(poptax.adamw(pnp.asarray(np.float32(1e-3))))
    assert not is_fused(poptax.chain(poptax.clip_by_global_norm(1.0), poptax.adamw(1e-3, nesterov=True)))
    assert not is_fused(poptax.chain(poptax.clip_by_global_norm(0.0), poptax.adamw(1e-3)))
    assert not is_fused(poptax.chain(poptax.clip_by_global_norm(1.0), poptax.adam(1e-3)))
    assert not is_fused(poptax.chain(poptax.clip_by_global_norm(1.0), poptax.adamw(1e-3), poptax.scale(1.0)))
    with pytest.raises(ValueError, match="fused_adamw needs"):
        poptax.fused_adamw(1e-3, weight_decay=sched)


STATE_CASES = {
    "seed": lambda o: seed_tx(o),
    "adamw": lambda o: o.adamw(1e-3),
    "adamw_sched": lambda o: o.adamw(o.cosine_decay_schedule(1e-3, 100)),
    "adamw_mask_tree": lambda o: o.adamw(1e-3, mask={"dense": {"kernel": True, "bias": False}, "bn": False,
                                                     "conv": [True]}),
    "clip_adamw_mask_prefix": lambda o: o.chain(o.clip_by_global_norm(2.0),
                                                o.adamw(1e-3, mask={"dense": True, "bn": False, "conv": True})),
}


@pytest.mark.parametrize("name", sorted(STATE_CASES))
def test_fused_state_structure_matches_optax(name):
    params = make_params(np.random.default_rng(2))
    ptx = STATE_CASES[name](poptax)
    assert is_fused(ptx)
    pp, pj = to_podlet(params), to_jax(params)
    sp, sj = ptx.init(pp), STATE_CASES[name](optax).init(pj)
    assert_same_structure(sp, sj)
    # ... after an update too (same leaves, count incremented).
    g = grad_stream(np.random.default_rng(3), params, 1)[0]
    _, sp = ptx.update(to_podlet(g), sp, pp)
    _, sj = STATE_CASES[name](optax).update(to_jax(g), sj, pj)
    assert_same_structure(sp, sj)
    assert_trees_close(sp, sj, rtol=1e-6, atol=1e-9)


# ---------------------------------------------------------------------------------
# trajectories: 200 steps vs optax and vs the unfused chain
# ---------------------------------------------------------------------------------
def test_seed_recipe_200_steps_fused_matches_optax_and_unfused():
    rng = np.random.default_rng(0)
    params = {"kernel": rng.normal(size=(6, 4)).astype(np.float32), "bias": rng.normal(size=(4,)).astype(np.float32)}
    grads = grad_stream(rng, params, 200)
    ptx = seed_tx(poptax, peak=1e-2)
    assert is_fused(ptx)
    (pp, sp), (pj, sj) = run_both(ptx, seed_tx(optax, peak=1e-2), params, grads)
    assert_trees_close(pp, pj, rtol=1e-6, atol=1e-7)
    assert_trees_close(sp, sj, rtol=1e-5, atol=1e-9)
    # The unfused podlet chain lands on the same bits.
    sched = poptax.warmup_cosine_decay_schedule(0.0, 1e-2, 20, 180, 0.0)
    ref = unfused_tx(sched, clip_norm=1.0, weight_decay=2e-4)
    pr, sr = to_podlet(params), ref.init(to_podlet(params))
    for g in grads:
        u, sr = ref.update(to_podlet(g), sr, pr)
        pr = poptax.apply_updates(pr, u)
    assert_trees_bitwise(pp, pr)
    assert_trees_bitwise(sp, sr)


def test_masked_fused_matches_optax():
    rng = np.random.default_rng(5)
    params = make_params(rng)
    grads = grad_stream(rng, params, 30, big=5.0)
    mk = lambda o, m: o.chain(o.clip_by_global_norm(0.5), o.adamw(1e-2, weight_decay=0.5, mask=m))  # noqa: E731
    ptx = mk(poptax, _decay_mask_podlet)
    assert is_fused(ptx)
    (pp, sp), (pj, sj) = run_both(ptx, mk(optax, _decay_mask), params, grads)
    assert_trees_close(pp, pj, rtol=1e-6, atol=1e-7)
    assert_trees_close(sp, sj, rtol=1e-5, atol=1e-8)


def test_bf16_params_fused_matches_unfused_bitwise_and_optax():
    rng = np.random.default_rng(10)
    params = {"w": rng.normal(size=(4, 3)).astype(BF16), "b": np.zeros(3, BF16)}
    grads = [{k: (rng.normal(size=v.shape) * 3).astype(BF16) for k, v in params.items()} for _ in range(10)]
    ptx = seed_tx(poptax, 20, 3, 1e-2)
    assert is_fused(ptx)
    (pp, sp), (pj, sj) = run_both(ptx, seed_tx(optax, 20, 3, 1e-2), params, grads)
    assert all(np.asarray(x).dtype == BF16 for x in ptu.tree_leaves((pp, sp[1][0].mu, sp[1][0].nu)))
    assert_trees_close(pp, pj, rtol=1e-2, atol=1e-3)
    ref = unfused_tx(poptax.warmup_cosine_decay_schedule(0.0, 1e-2, 3, 17, 0.0), clip_norm=1.0, weight_decay=2e-4)
    pr, sr = to_podlet(params), ref.init(to_podlet(params))
    for g in grads:
        u, sr = ref.update(to_podlet(g), sr, pr)
        pr = poptax.apply_updates(pr, u)
    assert_trees_bitwise(pp, pr)
    assert_trees_bitwise(sp, sr)


def test_python_scalar_params_fall_back_to_the_chain():
    tx = poptax.adamw(0.1)
    assert is_fused(tx)
    s = tx.init({"a": 1.0})
    u, s = tx.update({"a": -0.5}, s, {"a": 1.0})
    uj, _ = optax.adamw(0.1).update({"a": -0.5}, optax.adamw(0.1).init({"a": 1.0}), {"a": 1.0})
    np.testing.assert_allclose(float(u["a"]), float(uj["a"]), rtol=1e-6)
    with pytest.raises(ValueError, match="requires the current value of parameters"):
        tx.update({"a": -0.5}, s)


# ---------------------------------------------------------------------------------
# podlet.jit
# ---------------------------------------------------------------------------------
def test_fused_step_under_jit_equals_eager_bitwise():
    rng = np.random.default_rng(8)
    params = make_params(rng)
    grads = grad_stream(rng, params, 12)
    tx = poptax.chain(poptax.clip_by_global_norm(1.0),
                      poptax.adamw(poptax.warmup_cosine_decay_schedule(0.0, 1e-2, 3, 12), weight_decay=2e-4,
                                   mask=_decay_mask_podlet))
    assert is_fused(tx)

    @podlet.jit
    def step(params, state, grads):
        updates, state = tx.update(grads, state, params)
        return poptax.apply_updates(params, updates), state

    pj_, sj_ = to_podlet(params), tx.init(to_podlet(params))
    pe, se = pj_, sj_
    for g in grads:
        gp = to_podlet(g)
        pj_, sj_ = step(pj_, sj_, gp)
        u, se = tx.update(gp, se, pe)
        pe = poptax.apply_updates(pe, u)
    assert step.trace_count == 1
    assert_trees_bitwise((pj_, sj_), (pe, se))


@pytest.mark.parametrize("n", [5, 16, 37, 70001])  # 70001 floats: streamed stores, a masked tail
def test_f32_update_has_the_scalar_loops_bits_on_every_isa(n):
    """The f32 update runs as an AVX-512 loop (kernels/optim_avx512.cc) where the host has
    it: on every ISA the host runs, the same bits as the scalar loop (which `ref` keeps)
    for every output form - update, apply, the EMA in either add order - with and without
    clip and decay, NaN and inf in the operands included (the apply / EMA adds keep their
    first operand's NaN)."""
    from podlet import _core
    from podlet._src.core import bind
    isas = _core.cpu_info()["available_isas"]
    rng = np.random.default_rng(21)
    p, g, m, e = (rng.normal(size=n).astype(np.float32) for _ in range(4))
    v = (rng.random(n) * 0.01).astype(np.float32)
    p[1], g[2], m[3], e[4 % n] = np.nan, np.inf, -np.inf, np.float32(np.nan)
    if n > 16:
        p.view(np.uint32)[17] = 0x7FC00123  # two NaNs meeting in the apply add
        g[17] = np.nan
    ops = [pnp.asarray(a) for a in (p, g, m, v)]
    isa = _core.active_isa()
    try:
        for gnorm, wd in ((3.0, 1e-2), (0.5, 0.0)):  # clip triggers / not, decay / not
            sc = [pnp.asarray(np.float32(x)) for x in (1e-2, gnorm, 0.5, 0.01)]
            base = dict(b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0, weight_decay=wd, max_norm=2.0)
            for extra in (dict(apply=0), dict(apply=1), dict(apply=1, ema_c_old=0.9, ema_c_new=0.1),
                          dict(apply=1, ema_c_old=0.9, ema_c_new=0.1, ema_new_first=1)):
                args = ops + sc + ([pnp.asarray(e)] if "ema_c_old" in extra else [])
                outs = {}
                for i in isas:
                    _core.set_isa(i)
                    outs[i] = [bits(o).copy() for o in bind("adamw_update", *args, **base, **extra)]
                for i in isas:
                    for a, b in zip(outs[i], outs["ref"]):
                        np.testing.assert_array_equal(a, b, err_msg=i)
    finally:
        _core.set_isa(isa)


@pytest.mark.parametrize("n", [5, 37, 70001])
@pytest.mark.parametrize("dtype", ["bfloat16", "float64"])
def test_bf16_and_f64_updates_have_the_scalar_loops_bits_on_every_isa(n, dtype):
    """bf16 and f64 params run the element loop of kernels/optim_adamw_loops.h, compiled
    for baseline x86-64 (`ref`) and for AVX2 (vectorised, every intermediate still rounded
    to bf16 op by op): the same bits on every ISA the host runs, every output form, with
    and without clip and decay, NaN and inf included."""
    import ml_dtypes
    from podlet import _core
    from podlet._src.core import bind
    from prim_check import as_podlet
    dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float64
    rng = np.random.default_rng(23)
    p, g, m, e = (rng.normal(size=n).astype(dt) for _ in range(4))
    v = (rng.random(n) * 0.01).astype(dt)
    p[1], g[2], m[3 % n], e[4 % n] = np.nan, np.inf, -np.inf, np.nan
    isa = _core.active_isa()
    try:
        for gnorm, wd in ((3.0, 1e-2), (0.5, 0.0)):
            sc = [pnp.asarray(np.float32(x)) for x in (1e-2, gnorm, 0.5, 0.01)]
            base = dict(b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0, weight_decay=wd, max_norm=2.0)
            for extra in (dict(apply=0), dict(apply=1), dict(apply=1, ema_c_old=0.9, ema_c_new=0.1),
                          dict(apply=1, ema_c_old=0.9, ema_c_new=0.1, ema_new_first=1)):
                args = [as_podlet(a) for a in (p, g, m, v)] + sc + ([as_podlet(e)] if "ema_c_old" in extra else [])
                outs = {}
                for i in _core.cpu_info()["available_isas"]:
                    _core.set_isa(i)
                    outs[i] = [bits(o).copy() for o in bind("adamw_update", *args, **base, **extra)]
                    assert np.asarray(outs[i][0]).dtype.itemsize == np.dtype(dt).itemsize
                for i, got in outs.items():
                    for a, b in zip(got, outs["ref"]):
                        np.testing.assert_array_equal(a, b, err_msg=f"{i} {extra}")
    finally:
        _core.set_isa(isa)


@pytest.mark.parametrize("n", [5, 37, 70001])
@pytest.mark.parametrize("pdtype", [np.float32, np.float64])
def test_bf16_grads_read_widened_match_the_converted_grads(n, pdtype):
    """adamw_update of a float32 / float64 param takes bfloat16 grads (what the graph pass
    ir/optim_fusion.cc folds a grad convert into): on every ISA the host runs, the same
    bits as the float grads convert_element_type makes from them, for every output form,
    with and without clip and decay, NaN and inf grads included."""
    import ml_dtypes
    from podlet import _core
    from podlet._src.core import bind
    from prim_check import as_podlet
    rng = np.random.default_rng(22)
    p, m, e = (rng.normal(size=n).astype(pdtype) for _ in range(3))
    v = (rng.random(n) * 0.01).astype(pdtype)
    g16 = rng.normal(size=n).astype(ml_dtypes.bfloat16)
    g16[1], g16[3 % n] = np.nan, -np.inf
    g16.view(np.uint16)[4 % n] = 0x0001  # a subnormal: exact when widened
    isa = _core.active_isa()
    try:
        for i in _core.cpu_info()["available_isas"]:
            _core.set_isa(i)
            for gnorm, wd in ((3.0, 1e-2), (0.5, 0.0)):
                sc = [pnp.asarray(np.float32(x)) for x in (1e-2, gnorm, 0.5, 0.01)]
                base = dict(b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0, weight_decay=wd, max_norm=2.0)
                for extra in (dict(apply=0), dict(apply=1), dict(apply=1, ema_c_old=0.9, ema_c_new=0.1)):
                    tail = [as_podlet(e)] if "ema_c_old" in extra else []
                    got = bind("adamw_update", as_podlet(p), as_podlet(g16), as_podlet(m), as_podlet(v),
                               *sc, *tail, **base, **extra)
                    want = bind("adamw_update", as_podlet(p), as_podlet(g16.astype(pdtype)), as_podlet(m),
                                as_podlet(v), *sc, *tail, **base, **extra)
                    assert np.asarray(got[0]).dtype == pdtype  # float64 stays float64 (no x64 canonicalising)
                    for a, b in zip(got, want):
                        np.testing.assert_array_equal(bits(a), bits(b), err_msg=f"{i} {extra}")
    finally:
        _core.set_isa(isa)


@pytest.mark.parametrize("clip", [None, 1.0])
def test_nan_payloads_match_the_unfused_chain(clip):
    """Where a param and its grad are NaNs with different payloads, the update carries
    the NaN the unfused chain's adds pick (each add keeps its first operand's NaN). The
    fused loop wrote the decay add as u + wd * p, which a compiler may commute: with the
    clip on it returned the param's NaN instead of the update's."""
    rng = np.random.default_rng(0)
    p = rng.normal(size=40).astype(np.float32)
    g = rng.normal(size=40).astype(np.float32)
    p.view(np.uint32)[17], g[17] = 0x7FC00123, np.nan
    p.view(np.uint32)[5], g.view(np.uint32)[5] = 0x7FC00777, 0xFFC00555
    params, grads = {"w": pnp.asarray(p)}, {"w": pnp.asarray(g)}
    outs = []
    for make in (unfused_tx, fused_tx):
        tx = make(1e-2, clip_norm=clip, weight_decay=1e-2)
        st = tx.init(params)
        for _ in range(2):
            u, st = tx.update(grads, st, params)
        outs.append(bits(u["w"]).copy())
    np.testing.assert_array_equal(outs[1], outs[0])
