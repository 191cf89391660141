"""podlet.optim transformations and optimizers against optax 0.2.8 as the oracle.

Identical inputs go through both: the seed recipe (clip_by_global_norm(1.0) + adamw
with warmup-cosine, 200 steps, occasionally huge gradients so the clip triggers) must
land on the same parameters within 1e-6 relative, and so must adam, sgd (plain,
momentum, Nesterov) and masked weight decay. Optimizer states must have optax's pytree
structure (treedef repr, leaf shapes and dtypes). The whole step works under
podlet.jit (traced once, same numbers as eager), and every optimizer minimises a
parabola and the Rosenbrock function (optax's alias_test targets).
"""
import inspect

import numpy as np
import pytest

import podlet
import podlet.numpy as pnp
import podlet.optim as poptax
from podlet import tree_util as ptu

import jax
import jax.numpy as jnp
import optax


# ---------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------
def to_podlet(tree):
    return ptu.tree_map(lambda x: pnp.asarray(np.asarray(x)), tree)


def to_jax(tree):
    return jax.tree.map(lambda x: jnp.asarray(np.asarray(x)), tree)


def np_leaves(tree, lib):
    return [np.asarray(x) for x in (ptu.tree_leaves(tree) if lib == "podlet" else jax.tree.leaves(tree))]


def assert_trees_close(p_tree, j_tree, rtol=1e-6, atol=0.0):
    assert repr(ptu.tree_structure(p_tree)) == repr(jax.tree.structure(j_tree))
    for a, b in zip(np_leaves(p_tree, "podlet"), np_leaves(j_tree, "jax")):
        assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
        np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=rtol, atol=atol)


def assert_same_structure(p_tree, j_tree):
    """treedef repr (namedtuple names, dict keys, nesting), leaf shapes and dtypes."""
    assert repr(ptu.tree_structure(p_tree)) == repr(jax.tree.structure(j_tree))
    pl, jl = np_leaves(p_tree, "podlet"), np_leaves(j_tree, "jax")
    assert [(x.shape, x.dtype) for x in pl] == [(x.shape, x.dtype) for x in jl]


def make_params(rng):
    p = {"dense": {"kernel": rng.normal(size=(5, 3)).astype(np.float32),
                   "bias": rng.normal(size=(3,)).astype(np.float32) * 0.1},
         "bn": {"scale": (1.0 + 0.1 * rng.normal(size=(3,))).astype(np.float32)},
         "conv": [rng.normal(size=(2, 2, 1, 4)).astype(np.float32)]}
    return p


def grad_stream(rng, params, n, big_every=7, big=50.0):
    """n gradient pytrees; every `big_every`-th is scaled up so the global norm clip
    triggers, the others are small so it does not."""
    out = []
    for i in range(n):
        s = big if i % big_every == 3 else 0.05
        out.append(jax.tree.map(lambda p: (rng.normal(size=p.shape) * s).astype(np.float32), params))
    return out


def run_both(p_tx, j_tx, params, grads, jit_jax=False):
    pp, pj = to_podlet(params), to_jax(params)
    sp, sj = p_tx.init(pp), j_tx.init(pj)
    assert_same_structure(sp, sj)
    j_update = jax.jit(j_tx.update) if jit_jax else j_tx.update
    for g in grads:
        up, sp = p_tx.update(to_podlet(g), sp, pp)
        pp = poptax.apply_updates(pp, up)
        uj, sj = j_update(to_jax(g), sj, pj)
        pj = optax.apply_updates(pj, uj)
    return (pp, sp), (pj, sj)


def seed_tx(lib, total=200, warmup=20, peak=7e-4):
    sched = lib.warmup_cosine_decay_schedule(init_value=0.0, peak_value=peak, warmup_steps=warmup,
                                             decay_steps=max(total - warmup, 1), end_value=0.0)
    return lib.chain(lib.clip_by_global_norm(1.0), lib.adamw(learning_rate=sched, weight_decay=2e-4))


# ---------------------------------------------------------------------------------
# the seed recipe, 200 steps
# ---------------------------------------------------------------------------------
def test_seed_recipe_200_steps_matches_optax():
    rng = np.random.default_rng(0)
    # Two leaves keep the op-by-op (eager) optax oracle fast; eager, because jitted
    # optax lets XLA fuse and reassociate and itself moves ~2e-6 away from eager optax.
    params = {"kernel": rng.normal(size=(6, 4)).astype(np.float32), "bias": rng.normal(size=(4,)).astype(np.float32)}
    grads = grad_stream(rng, params, 200)
    norms = [float(np.sqrt(sum((g ** 2).sum() for g in jax.tree.leaves(gr)))) for gr in grads]
    assert sum(n > 1.0 for n in norms) >= 20 and sum(n < 1.0 for n in norms) >= 100  # both clip branches run
    # Larger lr than the seed's 7e-4 so 200 steps move the params visibly.
    (pp, sp), (pj, sj) = run_both(seed_tx(poptax, peak=1e-2), seed_tx(optax, peak=1e-2), params, grads)
    moved = max(np.abs(np.asarray(a) - b).max() for a, b in zip(jax.tree.leaves(pj), jax.tree.leaves(params)))
    assert moved > 0.1
    assert_trees_close(pp, pj, rtol=1e-6, atol=1e-7)
    assert_trees_close(sp, sj, rtol=1e-5, atol=1e-9)
    assert int(sp[1][0].count) == 200 and int(sp[1][2].count) == 200


def test_seed_state_structure():
    params = make_params(np.random.default_rng(1))
    sp = seed_tx(poptax).init(to_podlet(params))
    sj = seed_tx(optax).init(to_jax(params))
    assert_same_structure(sp, sj)
    # (EmptyState(), (ScaleByAdamState(count, mu, nu), EmptyState(), ScaleByScheduleState(count)))
    assert isinstance(sp[0], poptax.EmptyState)
    adam_state, wd_state, lr_state = sp[1]
    assert isinstance(adam_state, poptax.ScaleByAdamState) and adam_state._fields == ("count", "mu", "nu")
    assert isinstance(wd_state, poptax.EmptyState) and isinstance(lr_state, poptax.ScaleByScheduleState)
    assert adam_state.count.shape == () and adam_state.count.dtype == np.int32
    assert poptax.ClipByGlobalNormState is poptax.EmptyState  # optax 0.2.8: no clip state


# ---------------------------------------------------------------------------------
# state structures of every optimizer
# ---------------------------------------------------------------------------------
def _decay_mask(p):
    return jax.tree.map(lambda x: np.ndim(x) > 1, p)


def _decay_mask_podlet(p):
    return ptu.tree_map(lambda x: x.ndim > 1, p)


STRUCTURE_CASES = {
    "adam": lambda o: o.adam(1e-3),
    "adam_sched": lambda o: o.adam(o.linear_schedule(0.0, 1e-3, 10)),
    "adamw": lambda o: o.adamw(1e-3),
    "adamw_sched_wd": lambda o: o.adamw(1e-3, weight_decay=o.constant_schedule(1e-4)),
    "adamw_mask_tree": lambda o: o.adamw(1e-3, mask={"dense": {"kernel": True, "bias": False},
                                                     "bn": False, "conv": [True]}),
    "adamw_mask_prefix": lambda o: o.adamw(1e-3, mask={"dense": True, "bn": False, "conv": True}),
    "adam_mu_bf16": lambda o: o.adam(1e-3, mu_dtype="bfloat16"),
    "sgd": lambda o: o.sgd(1e-2),
    "sgd_momentum": lambda o: o.sgd(1e-2, momentum=0.9),
    "sgd_nesterov": lambda o: o.sgd(1e-2, momentum=0.9, nesterov=True),
    "seed": lambda o: seed_tx(o),
    "ema": lambda o: o.ema(0.99),
    "identity": lambda o: o.identity(),
    "masked_trace": lambda o: o.masked(o.trace(0.9), {"dense": {"kernel": True, "bias": False},
                                                      "bn": True, "conv": [False]}),
    "named_chain": lambda o: o.named_chain(("clip", o.clip_by_global_norm(1.0)), ("adam", o.adam(1e-3))),
}


@pytest.mark.parametrize("name", sorted(STRUCTURE_CASES))
def test_state_structure_matches_optax(name):
    params = make_params(np.random.default_rng(2))
    sp = STRUCTURE_CASES[name](poptax).init(to_podlet(params))
    sj = STRUCTURE_CASES[name](optax).init(to_jax(params))
    assert_same_structure(sp, sj)


def test_state_structure_callable_mask():
    params = make_params(np.random.default_rng(3))
    sp = poptax.adamw(1e-3, mask=_decay_mask_podlet).init(to_podlet(params))
    sj = optax.adamw(1e-3, mask=_decay_mask).init(to_jax(params))
    assert_same_structure(sp, sj)


# ---------------------------------------------------------------------------------
# trajectories against optax
# ---------------------------------------------------------------------------------
TRAJECTORY_CASES = {
    "adam": lambda o: o.adam(1e-2),
    "adam_eps_root": lambda o: o.adam(1e-2, b1=0.8, b2=0.99, eps=1e-6, eps_root=1e-8),
    "nadam": lambda o: o.adam(1e-2, nesterov=True),
    "adamw_nesterov": lambda o: o.adamw(1e-2, weight_decay=1e-2, nesterov=True),
    "adamw_mask_tree": lambda o: o.adamw(1e-2, weight_decay=0.1,
                                         mask={"dense": {"kernel": True, "bias": False}, "bn": False,
                                               "conv": [True]}),
    "adamw_sched_wd": lambda o: o.adamw(1e-2, weight_decay=o.linear_schedule(0.1, 0.0, 30)),
    "sgd": lambda o: o.sgd(0.1),
    "sgd_momentum": lambda o: o.sgd(0.1, momentum=0.9),
    "sgd_nesterov": lambda o: o.sgd(o.exponential_decay(0.1, 10, 0.5), momentum=0.9, nesterov=True),
    "clip_sgd": lambda o: o.chain(o.clip_by_global_norm(0.5), o.sgd(0.1, momentum=0.5)),
    "clip_elementwise": lambda o: o.chain(o.clip(0.02), o.scale(-0.5)),
    "ema": lambda o: o.chain(o.ema(0.9), o.scale(-0.1)),
    "masked_trace": lambda o: o.chain(o.masked(o.trace(0.9), {"dense": {"kernel": True, "bias": False},
                                                              "bn": True, "conv": [False]}), o.scale(-0.1)),
}


@pytest.mark.parametrize("name", sorted(TRAJECTORY_CASES))
def test_trajectory_matches_optax(name):
    rng = np.random.default_rng(4)
    params = make_params(rng)
    grads = grad_stream(rng, params, 40, big=5.0)
    (pp, sp), (pj, sj) = run_both(TRAJECTORY_CASES[name](poptax), TRAJECTORY_CASES[name](optax), params, grads)
    assert_trees_close(pp, pj, rtol=1e-6, atol=1e-7)
    assert_trees_close(sp, sj, rtol=1e-5, atol=1e-8)


def test_masked_weight_decay_callable_mask_matches_optax():
    rng = np.random.default_rng(5)
    params = make_params(rng)
    grads = grad_stream(rng, params, 30)
    (pp, _), (pj, _) = run_both(poptax.adamw(1e-2, weight_decay=0.5, mask=_decay_mask_podlet),
                                optax.adamw(1e-2, weight_decay=0.5, mask=_decay_mask), params, grads)
    assert_trees_close(pp, pj, rtol=1e-6, atol=1e-7)
    # The mask matters: unmasked decay gives different biases.
    (pu, _), _ = run_both(poptax.adamw(1e-2, weight_decay=0.5), optax.adamw(1e-2, weight_decay=0.5), params, grads)
    assert not np.allclose(np.asarray(pu["dense"]["bias"]), np.asarray(pp["dense"]["bias"]))
    np.testing.assert_array_equal(np.asarray(pu["dense"]["kernel"]), np.asarray(pp["dense"]["kernel"]))


def test_masked_passes_masked_leaves_through():
    params = {"a": pnp.ones((3,)), "b": pnp.ones((2,))}
    tx = poptax.masked(poptax.scale(-2.0), {"a": True, "b": False})
    g = {"a": pnp.full((3,), 0.5), "b": pnp.full((2,), 0.5)}
    u, s = tx.update(g, tx.init(params), params)
    np.testing.assert_array_equal(np.asarray(u["a"]), [-1.0] * 3)
    np.testing.assert_array_equal(np.asarray(u["b"]), [0.5] * 2)
    assert isinstance(s, poptax.MaskedState)


def test_add_decayed_weights_needs_params():
    tx = poptax.add_decayed_weights(1e-4)
    with pytest.raises(ValueError, match="params"):
        tx.update({"a": pnp.ones((2,))}, tx.init({"a": pnp.ones((2,))}), None)


def test_chain_checks_state_length():
    tx = poptax.chain(poptax.scale(1.0), poptax.scale(2.0))
    with pytest.raises(ValueError, match="same in chain"):
        tx.update({"a": pnp.ones((2,))}, (poptax.EmptyState(),))


def test_chain_passes_extra_args():
    seen = {}

    def upd(updates, state, params=None, **extra):
        seen.update(extra)
        return updates, state

    tx = poptax.chain(poptax.GradientTransformationExtraArgs(poptax.init_empty_state, upd), poptax.scale(2.0))
    u, _ = tx.update({"a": pnp.ones((2,))}, tx.init(None), None, loss=3.0)
    assert seen == {"loss": 3.0}
    np.testing.assert_array_equal(np.asarray(u["a"]), [2.0, 2.0])


# ---------------------------------------------------------------------------------
# pieces
# ---------------------------------------------------------------------------------
def test_global_norm_and_clip():
    rng = np.random.default_rng(6)
    tree = make_params(rng)
    want = np.asarray(optax.tree.norm(to_jax(tree)))
    np.testing.assert_allclose(np.asarray(poptax.global_norm(to_podlet(tree))), want, rtol=1e-6)
    for max_norm in (0.5 * float(want), 2.0 * float(want)):
        u, _ = poptax.clip_by_global_norm(max_norm).update(to_podlet(tree), poptax.EmptyState())
        uj, _ = optax.clip_by_global_norm(max_norm).update(to_jax(tree), optax.EmptyState())
        assert_trees_close(u, uj, rtol=1e-6)
        np.testing.assert_allclose(np.asarray(poptax.global_norm(u)), min(max_norm, float(want)), rtol=1e-5)


def test_apply_updates_keeps_param_dtype():
    p = {"w": pnp.ones((4,), pnp.bfloat16), "b": pnp.zeros((2,))}
    u = {"w": pnp.full((4,), 0.25), "b": pnp.full((2,), -1.0)}
    out = poptax.apply_updates(p, u)
    assert out["w"].dtype == pnp.bfloat16 and out["b"].dtype == np.float32
    np.testing.assert_array_equal(np.asarray(out["w"]).astype(np.float32), [1.25] * 4)


def test_apply_updates_none_leaves():
    out = poptax.apply_updates({"a": None, "b": pnp.ones((2,))}, {"a": None, "b": pnp.ones((2,))})
    assert out["a"] is None
    np.testing.assert_array_equal(np.asarray(out["b"]), [2.0, 2.0])


def test_adam_mu_dtype_bf16_matches_optax():
    rng = np.random.default_rng(7)
    params = make_params(rng)
    grads = grad_stream(rng, params, 10)
    (pp, sp), (pj, sj) = run_both(poptax.adam(1e-2, mu_dtype=pnp.bfloat16), optax.adam(1e-2, mu_dtype=jnp.bfloat16),
                                  params, grads)
    assert ptu.tree_leaves(sp[0].mu)[0].dtype == pnp.bfloat16
    assert_trees_close(pp, pj, rtol=1e-6, atol=1e-7)
    assert_trees_close(sp, sj, rtol=1e-5, atol=1e-8)


def test_scalar_python_params():
    # optax's docstring example: params = {'a': 1.0}.
    tx, txj = poptax.adam(0.1), optax.adam(0.1)
    sp, sj = tx.init({"a": 1.0}), txj.init({"a": 1.0})
    assert_same_structure(sp, sj)
    up, sp = tx.update({"a": -0.5}, sp, {"a": 1.0})
    uj, sj = txj.update({"a": -0.5}, sj, {"a": 1.0})
    np.testing.assert_allclose(float(up["a"]), float(uj["a"]), rtol=1e-6)


def test_safe_increment_saturates():
    c = pnp.asarray(np.int32(2 ** 31 - 1))
    assert int(poptax.safe_increment(c)) == 2 ** 31 - 1
    assert int(poptax.safe_increment(pnp.asarray(np.int32(5)))) == 6
    assert poptax.safe_increment(pnp.asarray(np.int32(5))).shape == ()


def test_incremental_update_is_ema():
    old = {"w": pnp.full((3,), 1.0)}
    new = {"w": pnp.full((3,), 3.0)}
    out = poptax.incremental_update(new, old, 1.0 - 0.999)
    np.testing.assert_allclose(np.asarray(out["w"]), 0.999 * 1.0 + 0.001 * 3.0, rtol=1e-6)


def test_bf16_params_keep_dtype_and_match_optax():
    rng = np.random.default_rng(10)
    bf16 = jnp.bfloat16
    params = {"w": rng.normal(size=(4, 3)).astype(bf16), "b": np.zeros(3, bf16)}
    grads = [{k: (rng.normal(size=v.shape) * 3).astype(bf16) for k, v in params.items()} for _ in range(10)]
    (pp, sp), (pj, sj) = run_both(seed_tx(poptax, 20, 3, 1e-2), seed_tx(optax, 20, 3, 1e-2), params, grads)
    assert all(np.asarray(x).dtype == bf16 for x in ptu.tree_leaves(pp))
    assert_trees_close(pp, pj, rtol=1e-2, atol=1e-3)  # bf16 rounding; bit-equal in practice
    assert_trees_close(sp, sj, rtol=1e-2, atol=1e-3)


def test_namespace_is_optax():
    """`import podlet.optim as optax` finds optax's names (and its losses/schedules
    submodules); the only extras are podlet's focal/classification losses."""
    extras = {"classification_loss", "softmax_focal_loss", "WeightDecaySchedule"}
    for name in poptax.__all__:
        assert hasattr(poptax, name), name
        if name not in extras:
            assert hasattr(optax, name), name
    assert poptax.losses.softmax_cross_entropy is poptax.softmax_cross_entropy
    assert poptax.schedules.warmup_cosine_decay_schedule is poptax.warmup_cosine_decay_schedule
    for name in ("adam", "adamw", "sgd", "scale_by_adam", "add_decayed_weights", "clip_by_global_norm", "trace",
                 "masked", "scale_by_learning_rate", "warmup_cosine_decay_schedule", "cosine_decay_schedule",
                 "linear_schedule", "exponential_decay", "piecewise_constant_schedule", "join_schedules",
                 "softmax_cross_entropy", "softmax_cross_entropy_with_integer_labels", "smooth_labels",
                 "sigmoid_focal_loss", "sigmoid_binary_cross_entropy", "l2_loss", "squared_error"):
        ps, js = inspect.signature(getattr(poptax, name)), inspect.signature(getattr(optax, name))
        # argument names, kinds (positional / keyword-only) and defaults
        assert [(p.name, p.kind, p.default) for p in ps.parameters.values()] == \
            [(p.name, p.kind, p.default) for p in js.parameters.values()], name


# ---------------------------------------------------------------------------------
# podlet.jit
# ---------------------------------------------------------------------------------
def test_jitted_seed_step_matches_eager_and_traces_once():
    rng = np.random.default_rng(8)
    params = make_params(rng)
    grads = grad_stream(rng, params, 30)
    tx = poptax.chain(poptax.clip_by_global_norm(1.0),
                      poptax.adamw(poptax.warmup_cosine_decay_schedule(0.0, 1e-2, 5, 30), weight_decay=2e-4,
                                   mask=_decay_mask_podlet))

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
    assert step.trace_count == 1  # state shapes and dtypes are stable across steps
    assert repr(ptu.tree_structure(sj_)) == repr(ptu.tree_structure(se))
    for a, b in zip(ptu.tree_leaves((pj_, sj_)), ptu.tree_leaves((pe, se))):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-8)
    # ... and with optax.
    txj = optax.chain(optax.clip_by_global_norm(1.0),
                      optax.adamw(optax.warmup_cosine_decay_schedule(0.0, 1e-2, 5, 30), weight_decay=2e-4,
                                  mask=_decay_mask))
    pjx, sjx = to_jax(params), txj.init(to_jax(params))
    for g in grads:
        u, sjx = txj.update(to_jax(g), sjx, pjx)
        pjx = optax.apply_updates(pjx, u)
    assert_trees_close(pj_, pjx, rtol=1e-6, atol=1e-7)


def test_jit_value_and_grad_train_step():
    """A whole train step (loss, grads, clip + adamw, apply) in one jit."""
    rng = np.random.default_rng(9)
    x = rng.normal(size=(16, 5)).astype(np.float32)
    y = rng.integers(0, 3, size=(16,)).astype(np.int32)
    params = {"kernel": (rng.normal(size=(5, 3)) * 0.1).astype(np.float32), "bias": np.zeros((3,), np.float32)}

    def make(lib):
        tx = seed_tx(lib, total=20, warmup=2, peak=1e-2)

        def loss_fn(p, x, y):
            logits = x @ p["kernel"] + p["bias"]
            return lib.softmax_cross_entropy_with_integer_labels(logits, y).mean()

        def step(p, s, x, y):
            loss, g = (podlet if lib is poptax else jax).value_and_grad(loss_fn)(p, x, y)
            u, s = tx.update(g, s, p)
            return lib.apply_updates(p, u), s, loss
        return tx, step

    ptx, pstep = make(poptax)
    jtx, jstep = make(optax)
    pstep, jstep = podlet.jit(pstep), jax.jit(jstep)
    pp, pj = to_podlet(params), to_jax(params)
    sp, sj = ptx.init(pp), jtx.init(pj)
    losses = []
    for _ in range(20):
        pp, sp, lp = pstep(pp, sp, pnp.asarray(x), pnp.asarray(y))
        pj, sj, lj = jstep(pj, sj, jnp.asarray(x), jnp.asarray(y))
        np.testing.assert_allclose(float(lp), float(lj), rtol=1e-5)
        losses.append(float(lp))
    assert losses[-1] < losses[0]
    assert pstep.trace_count == 1
    assert_trees_close(pp, pj, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------
# minimisation sanity (optax alias_test targets)
# ---------------------------------------------------------------------------------
def parabola():
    final = pnp.asarray(np.array([1.0, -1.0, 1.0], np.float32))
    return np.array([-1.0, 10.0, 1.0], np.float32), np.array([1.0, -1.0, 1.0], np.float32), \
        lambda p: pnp.sum((p - final) ** 2)


def rosenbrock():
    return np.zeros(2, np.float32), np.array([1.0, 1.0], np.float32), \
        lambda p: (1.0 - p[0]) ** 2 + 100.0 * (p[1] - p[0] ** 2) ** 2


MINIMISE_CASES = {  # optax alias_test's learning rates and its 10000 steps
    "adam": lambda: poptax.adam(1e-1),
    "adamw": lambda: poptax.adamw(1e-1),
    "nadam": lambda: poptax.nadam(1e-2),
    "sgd_momentum": lambda: poptax.sgd(1e-3, momentum=0.9),
    "sgd_nesterov": lambda: poptax.sgd(1e-3, momentum=0.9, nesterov=True),
    "seed_recipe": lambda: poptax.chain(poptax.clip_by_global_norm(1.0),
                                        poptax.adamw(poptax.warmup_cosine_decay_schedule(0.0, 1e-1, 100, 10000),
                                                     weight_decay=1e-5)),
}


@pytest.mark.parametrize("target", [parabola, rosenbrock], ids=["parabola", "rosenbrock"])
@pytest.mark.parametrize("name", sorted(MINIMISE_CASES))
def test_minimises(name, target):
    tx = MINIMISE_CASES[name]()
    init, final, objective = target()
    steps = 10000

    @podlet.jit
    def step(p, s):
        g = podlet.grad(objective)(p)
        u, s = tx.update(g, s, p)
        return poptax.apply_updates(p, u), s

    p = pnp.asarray(init)
    s = tx.init(p)
    for _ in range(steps):
        p, s = step(p, s)
    assert step.trace_count == 1
    np.testing.assert_allclose(np.asarray(p), final, rtol=3e-2, atol=3e-2)


def test_plain_sgd_minimises_parabola():
    init, final, objective = parabola()
    tx = poptax.sgd(0.1)
    p, s = pnp.asarray(init), tx.init(pnp.asarray(init))
    g = podlet.jit(podlet.grad(objective))
    for _ in range(100):
        u, s = tx.update(g(p), s, p)
        p = poptax.apply_updates(p, u)
    np.testing.assert_allclose(np.asarray(p), final, atol=1e-4)


# ---------------------------------------------------------------------------------
# regressions for engine bugs met while building podlet.optim
# ---------------------------------------------------------------------------------
def test_engine_jnp_array_of_scalar_is_0d():
    assert pnp.array(1.0).shape == ()
    assert pnp.array(3, pnp.int32).shape == ()
