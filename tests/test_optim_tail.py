"""optax's wrappers in podlet.optim (issue 26) against optax 0.2.8: multi_transform /
partition, MultiSteps, inject_hyperparams, apply_if_finite, the conditional wrappers,
flatten, lookahead, freeze, monitoring, optax.contrib's schedule-free and
reduce_on_plateau, and optax.tree.

Identical inputs go through both (float32 pytrees, random gradients from a fixed seed,
NaN/inf planted where a wrapper must react). States are compared step by step where the
wrapper's point is its state (MultiSteps' counters and ``has_updated``,
apply_if_finite's counts, inject_hyperparams' ``hyperparams``), and params within 1e-6
relative at the end. Each wrapper also runs under ``podlet.jit`` (traced once) and
must give the eager numbers. Errors (labels without a transformation, labels that do
not match the params, bad skip functions) must say what is wrong.
"""
import functools
import warnings

import numpy as np
import pytest

import podlet
import podlet.numpy as pnp
import podlet.optim as poptax
from podlet import tree_util as ptu

import jax
import jax.numpy as jnp
import optax

from tree_oracle import assert_trees_close as assert_close, to_jax, to_podlet

PARAMS = {"dense": {"kernel": np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32),
                    "bias": np.random.default_rng(1).normal(size=(4,)).astype(np.float32)},
          "head": np.random.default_rng(2).normal(size=(4,)).astype(np.float32)}


def make_grads(n, seed=3, nan_at=(), inf_at=()):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        g = jax.tree.map(lambda p: (rng.normal(size=p.shape) * 0.3).astype(np.float32), PARAMS)
        if i in nan_at:
            g["dense"]["bias"][1] = np.nan
        if i in inf_at:
            g["head"][0] = np.inf
        out.append(g)
    return out


def run_both(p_tx, j_tx, grads, per_step=None, extra=None, jit_oracle=False):
    """Both transformations over the same gradients; per_step(i, sp, sj, up, uj) checks
    each step. Returns the final (params, state) of each.

    jit_oracle: run optax's update under jax.jit. For wrappers built on lax.cond: eager
    jax re-traces and re-compiles a cond whose branches are fresh closures at every
    call (~1 s a step on this machine), and XLA compiles the branches either way, so
    the numbers are those of eager optax's cond."""
    pp, pj = to_podlet(PARAMS), to_jax(PARAMS)
    sp, sj = p_tx.init(pp), j_tx.init(pj)
    j_update = jax.jit(j_tx.update) if jit_oracle else j_tx.update
    for i, g in enumerate(grads):
        kw = extra(i) if extra else {}
        up, sp = p_tx.update(to_podlet(g), sp, pp, **kw)
        uj, sj = j_update(to_jax(g), sj, pj, **kw)
        if per_step:
            per_step(i, sp, sj, up, uj)
        pp, pj = poptax.apply_updates(pp, up), optax.apply_updates(pj, uj)
    return (pp, sp), (pj, sj)


def run_jit(tx, grads, extra=None):
    """podlet eagerly and under podlet.jit over the same gradients; asserts they agree
    and that the jitted step traced once. Returns the jitted (params, state)."""
    def step(p, s, g, kw):
        u, s = tx.update(g, s, p, **kw)
        return poptax.apply_updates(p, u), s

    jstep = podlet.jit(step)
    p = to_podlet(PARAMS)
    s = tx.init(p)
    pe, se = p, s
    for i, g in enumerate(grads):
        kw = {k: pnp.asarray(np.asarray(v)) for k, v in (extra(i) if extra else {}).items()}
        p, s = jstep(p, s, to_podlet(g), kw)
        pe, se = step(pe, se, to_podlet(g), kw)
    assert jstep.trace_count == 1
    assert repr(ptu.tree_structure(s)) == repr(ptu.tree_structure(se))
    for a, b in zip(ptu.tree_leaves((p, s)), ptu.tree_leaves((pe, se))):
        np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=1e-6, atol=1e-8)
    return p, s


# ---------------------------------------------------------------------------------
# multi_transform / partition
# ---------------------------------------------------------------------------------
LABELS = {"dense": {"kernel": "adam", "bias": "sgd"}, "head": "frozen"}


def partition_tx(o, labels=LABELS):
    return o.multi_transform({"adam": o.adam(1e-2), "sgd": o.sgd(1e-1, momentum=0.9), "frozen": o.set_to_zero()},
                             labels)


def test_multi_transform_matches_optax_and_freezes():
    grads = make_grads(40)
    (pp, sp), (pj, sj) = run_both(partition_tx(poptax), partition_tx(optax), grads)
    assert isinstance(sp, poptax.MultiTransformState) and poptax.MultiTransformState is poptax.PartitionState
    assert_close(pp, pj, what="params")
    assert_close(sp, sj, rtol=1e-5, what="state")
    np.testing.assert_array_equal(np.asarray(pp["head"]), PARAMS["head"])  # frozen, bit for bit
    assert not np.allclose(np.asarray(pp["dense"]["kernel"]), PARAMS["dense"]["kernel"])
    # Each label's inner state only holds its own leaves (MaskedNode elsewhere).
    adam_state = sp.inner_states["adam"].inner_state[0]
    assert isinstance(adam_state.mu["head"], poptax.MaskedNode)
    run_jit(partition_tx(poptax), grads[:10])


def test_multi_transform_label_fn_and_prefix_labels():
    grads = make_grads(20)
    label_fn = lambda o: (lambda p: {"dense": jax.tree.map(lambda x: "adam" if np.ndim(x) > 1 else "sgd",  # noqa
                                                             p["dense"]) if o is optax else
                                     ptu.tree_map(lambda x: "adam" if x.ndim > 1 else "sgd", p["dense"]),
                                     "head": "frozen"})
    (pp, sp), (pj, sj) = run_both(partition_tx(poptax, label_fn(poptax)), partition_tx(optax, label_fn(optax)), grads)
    assert_close(pp, pj, what="label_fn params")
    prefix = {"dense": "adam", "head": "frozen"}  # a prefix of the params' tree
    (pp, sp), (pj, sj) = run_both(partition_tx(poptax, prefix), partition_tx(optax, prefix), grads)
    assert_close(pp, pj, what="prefix params")
    assert_close(sp, sj, rtol=1e-5, what="prefix state")


def test_multi_transform_errors_name_the_problem():
    p = to_podlet(PARAMS)
    tx = partition_tx(poptax, {"dense": {"kernel": "adam", "bias": "sgd"}, "head": "frozn"})
    with pytest.raises(ValueError, match=r"no corresponding transformation[\s\S]*frozn"):
        tx.init(p)
    tx = partition_tx(poptax, {"dense": "adam", "tail": "frozen"})  # wrong keys
    with pytest.raises(ValueError, match=r"param_labels.*structure of the params"):
        tx.init(p)
    tx = partition_tx(poptax, ["adam", "sgd", "frozen"])  # a list for a dict
    with pytest.raises(ValueError, match=r"param_labels"):
        tx.init(p)
    # labels checked against the updates too (a callable may change its answer)
    good = partition_tx(poptax)
    state = good.init(p)
    with pytest.raises(ValueError, match=r"param_labels.*updates"):
        good.update({"dense": to_podlet(PARAMS)["dense"]}, state, p)


def test_freeze_and_selective_transform_match_optax():
    grads = make_grads(20)
    mask = {"dense": {"kernel": False, "bias": True}, "head": False}
    mk = lambda o: o.chain(o.freeze(mask), o.adam(1e-2))  # noqa: E731
    (pp, sp), (pj, sj) = run_both(mk(poptax), mk(optax), grads)
    assert_close(pp, pj, what="freeze")
    np.testing.assert_array_equal(np.asarray(pp["dense"]["bias"]), PARAMS["dense"]["bias"])
    mk = lambda o: o.selective_transform(o.adam(1e-2), freeze_mask=mask)  # noqa: E731
    (pp, sp), (pj, sj) = run_both(mk(poptax), mk(optax), grads)
    assert_close(pp, pj, what="selective")
    assert_close(sp, sj, rtol=1e-5, what="selective state")
    np.testing.assert_array_equal(np.asarray(pp["dense"]["bias"]), PARAMS["dense"]["bias"])


# ---------------------------------------------------------------------------------
# MultiSteps
# ---------------------------------------------------------------------------------
def _check_multisteps_step(p_ms, j_ms):
    def check(i, sp, sj, up, uj):
        assert int(sp.mini_step) == int(sj.mini_step), i
        assert int(sp.gradient_step) == int(sj.gradient_step), i
        assert bool(p_ms.has_updated(sp)) == bool(j_ms.has_updated(sj)), i
        if not bool(j_ms.has_updated(sj)):
            assert all(not np.any(np.asarray(x)) for x in ptu.tree_leaves(up)), f"step {i}: non-zero updates"
        assert_close(sp, sj, rtol=1e-5, what=f"state at step {i}")
        assert_close(up, uj, rtol=1e-5, atol=1e-8, what=f"updates at step {i}")
    return check


def test_multisteps_accumulates_and_counts_like_optax():
    grads = make_grads(30)
    p_ms, j_ms = poptax.MultiSteps(poptax.adam(1e-2), 3), optax.MultiSteps(optax.adam(1e-2), 3)
    (pp, sp), (pj, sj) = run_both(p_ms.gradient_transformation(), j_ms.gradient_transformation(), grads,
                                  per_step=_check_multisteps_step(p_ms, j_ms), jit_oracle=True)
    assert int(sp.gradient_step) == 10 and int(sp.mini_step) == 0 and bool(p_ms.has_updated(sp))
    assert_close(pp, pj, what="params")
    # mean of 3 mini-steps then adam == adam on the mean gradient, 10 times
    ref_tx, p = poptax.adam(1e-2), to_podlet(PARAMS)
    s = ref_tx.init(p)
    for k in range(10):
        mean = ptu.tree_map(lambda *g: (g[0] + g[1] + g[2]) / 3, *[to_podlet(g) for g in grads[3 * k:3 * k + 3]])
        u, s = ref_tx.update(mean, s, p)
        p = poptax.apply_updates(p, u)
    assert_close(p, pj, rtol=1e-5, atol=1e-6, what="mean-of-3 adam")  # Welford mean vs plain mean
    _, sjit = run_jit(p_ms.gradient_transformation(), grads[:7])
    assert int(sjit.gradient_step) == 2 and int(sjit.mini_step) == 1


def test_multisteps_schedule_sum_and_skip_not_finite():
    grads = make_grads(24, nan_at=(4, 5), inf_at=(11,))
    mk = lambda o: o.MultiSteps(o.sgd(1e-2, momentum=0.9), lambda step: 2 + step % 2,  # noqa: E731
                                use_grad_mean=False, should_skip_update_fn=o.skip_not_finite)
    p_ms, j_ms = mk(poptax), mk(optax)
    seen = []

    def check(i, sp, sj, up, uj):
        _check_multisteps_step(p_ms, j_ms)(i, sp, sj, up, uj)
        seen.append((int(sp.skip_state["num_not_finite"]), bool(sp.skip_state["should_skip"])))

    (pp, sp), (pj, sj) = run_both(p_ms.gradient_transformation(), j_ms.gradient_transformation(), grads,
                                  per_step=check, jit_oracle=True)
    assert [s for s in seen if s[1]] == [(1, True), (1, True), (1, True)]  # the three planted steps skipped
    assert np.all(np.isfinite(np.asarray(pp["dense"]["bias"])))
    assert_close(pp, pj, what="params")
    run_jit(p_ms.gradient_transformation(), grads[:8])


def test_multisteps_skip_large_updates():
    grads = make_grads(12)
    grads[3] = jax.tree.map(lambda g: g * 100, grads[3])
    mk = lambda o: o.MultiSteps(o.sgd(1e-1), 2, should_skip_update_fn=functools.partial(  # noqa: E731
        o.skip_large_updates, max_squared_norm=10.0))
    p_ms, j_ms = mk(poptax), mk(optax)
    (pp, sp), (pj, sj) = run_both(p_ms.gradient_transformation(), j_ms.gradient_transformation(), grads,
                                  per_step=_check_multisteps_step(p_ms, j_ms), jit_oracle=True)
    assert int(sp.gradient_step) == 5  # 11 accepted mini-steps, 2 per update
    assert_close(pp, pj, what="params")


def test_multisteps_rejects_a_non_boolean_skip():
    ms = poptax.MultiSteps(poptax.sgd(1.0), 2, should_skip_update_fn=lambda u, s, p: (pnp.zeros(()), ()))
    p = to_podlet(PARAMS)
    with pytest.raises(ValueError, match="boolean scalar"):
        ms.update(to_podlet(make_grads(1)[0]), ms.init(p), p)
    with pytest.raises(ValueError, match="every_k_schedule"):
        poptax.MultiSteps(poptax.sgd(1.0), 0)


# ---------------------------------------------------------------------------------
# inject_hyperparams
# ---------------------------------------------------------------------------------
def test_inject_hyperparams_schedule_and_overwrite_mid_run():
    grads = make_grads(30)
    mk = lambda o: o.inject_hyperparams(o.adamw)(learning_rate=o.linear_schedule(1e-2, 1e-3, 20),  # noqa: E731
                                                 weight_decay=1e-3, b1=0.9)

    def extra(i):
        return {}

    pp, pj = to_podlet(PARAMS), to_jax(PARAMS)
    tp, tj = mk(poptax), mk(optax)
    sp, sj = tp.init(pp), tj.init(pj)
    assert_close(sp, sj, what="init state")  # InjectStatefulHyperparamsState, as optax 0.2.8
    lrs = []
    for i, g in enumerate(grads):
        if i == 10:  # a user overwrites two hyperparameters mid-run, as optax documents
            for s in (sp, sj):
                s.hyperparams["weight_decay"] = 0.5
                s.hyperparams["b1"] = 0.5
        up, sp = tp.update(to_podlet(g), sp, pp)
        uj, sj = tj.update(to_jax(g), sj, pj)
        assert_close(sp.hyperparams, sj.hyperparams, what=f"hyperparams at step {i}")
        lrs.append(float(sp.hyperparams["learning_rate"]))
        pp, pj = poptax.apply_updates(pp, up), optax.apply_updates(pj, uj)
    assert float(sp.hyperparams["weight_decay"]) == 0.5 and int(sp.count) == 30
    np.testing.assert_allclose(lrs[:3], [1e-2, 1e-2 - 9e-4 / 2, 1e-2 - 9e-4], rtol=1e-5)
    assert_close(pp, pj, what="params")
    assert_close(sp, sj, rtol=1e-5, what="state")
    # The overwrite matters: without it the params end elsewhere.
    (pn, _), _ = run_both(mk(poptax), mk(optax), grads[:12])
    assert not np.allclose(np.asarray(pn["head"]), np.asarray(pp["head"]))


def test_inject_hyperparams_under_jit_reads_overwrites_without_retracing():
    tx = poptax.inject_hyperparams(poptax.sgd)(learning_rate=0.1, momentum=0.9)

    @podlet.jit
    def step(p, s, g):
        u, s = tx.update(g, s, p)
        return poptax.apply_updates(p, u), s

    p = to_podlet(PARAMS)
    s = tx.init(p)
    g = to_podlet(make_grads(1)[0])
    p1, s = step(p, s, g)
    s.hyperparams["learning_rate"] = pnp.asarray(np.float32(0.0))  # freeze by hand
    p2, s = step(p1, s, g)
    assert step.trace_count == 1
    # lr 0 (momentum still accumulates, but the update is lr * trace = 0)
    for a, b in zip(ptu.tree_leaves(p1), ptu.tree_leaves(p2)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert float(s.hyperparams["momentum"]) == pytest.approx(0.9)


def test_inject_hyperparams_static_args_and_errors():
    with pytest.raises(ValueError, match="static_args"):
        poptax.inject_hyperparams(poptax.adam, static_args=("nonexistent",))
    # a callable that is not a schedule goes through static_args
    tx = poptax.inject_hyperparams(poptax.masked, static_args="mask")(inner=poptax.sgd(0.1),
                                                                     mask=lambda p: ptu.tree_map(lambda _: True, p))
    s = tx.init(to_podlet(PARAMS))
    assert s.hyperparams == {} and s.hyperparams_states == {}
    tx = poptax.inject_hyperparams(poptax.sgd)(learning_rate=0.1)
    s = tx.init(to_podlet(PARAMS))
    del s.hyperparams["learning_rate"]
    with pytest.raises(KeyError, match="learning_rate"):
        tx.update(to_podlet(make_grads(1)[0]), s, to_podlet(PARAMS))
    with pytest.warns(DeprecationWarning):
        poptax.inject_stateful_hyperparams(poptax.sgd)


def test_inject_hyperparams_dtype_and_structure():
    for kw in ({}, {"hyperparam_dtype": "bfloat16"}):
        sp = poptax.inject_hyperparams(poptax.adam, **kw)(learning_rate=1e-3, b1=0.9).init(to_podlet(PARAMS))
        kj = {"hyperparam_dtype": jnp.bfloat16} if kw else {}
        sj = optax.inject_hyperparams(optax.adam, **kj)(learning_rate=1e-3, b1=0.9).init(to_jax(PARAMS))
        assert_close(sp, sj, what=str(kw))


# ---------------------------------------------------------------------------------
# apply_if_finite and the conditional wrappers
# ---------------------------------------------------------------------------------
def test_apply_if_finite_skips_and_counts_like_optax():
    # NaN at 3; inf at 7, 8, 9, 10 (the 4th consecutive one is let through with
    # max_consecutive_errors=3); finite again from 11.
    grads = make_grads(20, nan_at=(3,), inf_at=(7, 8, 9, 10))
    counts = []

    def check(i, sp, sj, up, uj):
        assert_close(sp, sj, rtol=1e-5, what=f"state at step {i}")
        counts.append((int(sp.notfinite_count), bool(sp.last_finite), int(sp.total_notfinite)))
        if i == 3:  # skipped: zero updates
            assert all(not np.any(np.asarray(x)) for x in ptu.tree_leaves(up))

    mk = lambda o: o.apply_if_finite(o.adam(1e-2), max_consecutive_errors=3)  # noqa: E731
    (pp, sp), (pj, sj) = run_both(mk(poptax), mk(optax), grads[:7], per_step=check, jit_oracle=True)
    assert counts[3] == (1, False, 1) and counts[4] == (0, True, 1)
    assert int(sp.inner_state[0].count) == 6  # the NaN step did not reach adam
    assert np.all(np.isfinite(np.asarray(pp["dense"]["bias"])))
    assert_close(pp, pj, what="params after a skipped NaN")
    (pp, sp), (pj, sj) = run_both(mk(poptax), mk(optax), grads, jit_oracle=True)
    assert (int(sp.notfinite_count), bool(sp.last_finite), int(sp.total_notfinite)) == (0, True, 5)
    assert int(sp.inner_state[0].count) == 20 - 4  # the 4th inf step was applied
    assert not np.all(np.isfinite(np.asarray(pp["head"])))  # ... and it poisoned the params, as in optax
    run_jit(mk(poptax), grads[:6])


def test_conditionally_transform_and_mask_match_optax():
    grads = make_grads(12)
    for mk in (lambda o: o.conditionally_transform(o.sgd(1e-1, momentum=0.5), lambda step: step % 3 == 0),
               lambda o: o.conditionally_mask(o.sgd(1e-1, momentum=0.5), lambda step: step % 2 == 0),
               lambda o: o.conditionally_mask(o.polyak_sgd(), lambda step, value: value < 0.5,
                                              forward_extra_args=True)):
        extra = lambda i: {"value": np.float32(0.25 + 0.1 * i)}  # noqa: E731
        (pp, sp), (pj, sj) = run_both(mk(poptax), mk(optax), grads, extra=extra, jit_oracle=True)
        assert_close(pp, pj)
        assert_close(sp, sj, rtol=1e-5)
        run_jit(mk(poptax), grads[:4], extra=extra)


def test_zero_nans_and_flatten_match_optax():
    grads = make_grads(10, nan_at=(2, 6))
    mk = lambda o: o.chain(o.zero_nans(), o.flatten(o.adam(1e-2)))  # noqa: E731
    found = []
    record = lambda i, sp, sj, up, uj: found.append(bool(sp[0].found_nan["dense"]["bias"]))  # noqa: E731
    (pp, sp), (pj, sj) = run_both(mk(poptax), mk(optax), grads, per_step=record)
    assert found == [i in (2, 6) for i in range(10)]
    assert_close(pp, pj)
    assert_close(sp, sj, rtol=1e-5)
    assert sp[1][0].mu.shape == (6 * 4 + 4 + 4,)  # adam on one flat vector
    run_jit(mk(poptax), grads[:4])


def test_lookahead_matches_optax():
    grads = make_grads(14)
    for reset in (False, True):
        tp = poptax.lookahead(poptax.adam(1e-2), sync_period=3, slow_step_size=0.5, reset_state=reset)
        tj = optax.lookahead(optax.adam(1e-2), sync_period=3, slow_step_size=0.5, reset_state=reset)
        pp = poptax.LookaheadParams.init_synced(to_podlet(PARAMS))
        pj = optax.LookaheadParams.init_synced(to_jax(PARAMS))
        sp, sj = tp.init(pp), tj.init(pj)
        for g in grads:
            up, sp = tp.update(to_podlet(g), sp, pp)
            uj, sj = tj.update(to_jax(g), sj, pj)
            pp, pj = poptax.apply_updates(pp, up), optax.apply_updates(pj, uj)
        assert_close(pp, pj, what=f"lookahead reset={reset}")
        assert_close(sp, sj, rtol=1e-5, what=f"lookahead state reset={reset}")
    with pytest.raises(ValueError, match="Synchronization period"):
        poptax.lookahead(poptax.sgd(1.0), 0, 0.5)
    with pytest.raises(ValueError, match="LookaheadParams"):
        tp.update(to_podlet(grads[0]), sp, to_podlet(PARAMS))


def test_monitor_snapshot_measure_with_ema_match_optax():
    grads = make_grads(8)
    mk = lambda o: o.chain(  # noqa: E731
        o.sgd(1e-1, momentum=0.9),
        o.monitor({"norm": o.tree.norm, "ema": o.measure_with_ema(lambda u: o.tree.norm(u) > 0.5, 0.9)}),
        o.snapshot("before_clip", o.tree.norm), o.clip_by_global_norm(0.5))
    (pp, sp), (pj, sj) = run_both(mk(poptax), mk(optax), grads)
    assert_close(pp, pj)
    assert_close(sp, sj, rtol=1e-5)
    np.testing.assert_allclose(float(poptax.tree.get(sp, "before_clip")), float(optax.tree.get(sj, "before_clip")),
                               rtol=1e-6)


# ---------------------------------------------------------------------------------
# optax.contrib
# ---------------------------------------------------------------------------------
def test_schedule_free_adamw_and_sgd_match_optax():
    grads = make_grads(20)
    for mk in (lambda o: o.contrib.schedule_free_adamw(1e-2, warmup_steps=5, weight_decay=1e-3),
               lambda o: o.contrib.schedule_free_sgd(1e-1, weight_decay=1e-3),
               lambda o: o.contrib.schedule_free(o.adam(o.linear_schedule(1e-2, 1e-3, 30)),
                                                 o.linear_schedule(1e-2, 1e-3, 30), b1=0.8)):
        (pp, sp), (pj, sj) = run_both(mk(poptax), mk(optax), grads)
        assert_close(pp, pj, rtol=2e-6, atol=1e-7)  # y and x are interpolations of z: ~2 ulp apart after 20 steps
        assert_close(sp, sj, rtol=1e-5)
        assert_close(poptax.contrib.schedule_free_eval_params(sp, pp),
                     optax.contrib.schedule_free_eval_params(sj, pj), rtol=2e-6, atol=1e-6)
        run_jit(mk(poptax), grads[:4])
    with pytest.raises(ValueError, match="ScheduleFreeState"):
        poptax.contrib.schedule_free_eval_params(poptax.EmptyState(), pp)


def test_reduce_on_plateau_matches_optax():
    grads = make_grads(40)
    # a loss that falls, then stalls (plateaus trigger drops), then falls again
    values = [1.0 - 0.05 * i if i < 10 else (0.55 if i < 30 else 0.5 - 0.01 * i) for i in range(40)]
    mk = lambda o: o.chain(o.sgd(1e-1), o.contrib.reduce_on_plateau(factor=0.5, patience=2, cooldown=1,  # noqa
                                                                      accumulation_size=2, min_scale=0.1))
    scales = []
    (pp, sp), (pj, sj) = run_both(mk(poptax), mk(optax), grads, extra=lambda i: {"value": np.float32(values[i])},
                                  per_step=lambda i, sp, sj, up, uj: (assert_close(sp, sj, rtol=1e-6),
                                                                      scales.append(float(sp[1].scale))),
                                  jit_oracle=True)
    assert min(scales) < 1.0 and scales[0] == 1.0  # the plateau did reduce the scale
    assert_close(pp, pj)
    run_jit(mk(poptax), grads[:6], extra=lambda i: {"value": np.float32(values[i])})
    for bad in ({"factor": 1.5}, {"rtol": -1.0}, {"rtol": 0.0, "atol": 0.0}, {"rtol": 2.0}):
        with pytest.raises(ValueError):
            poptax.contrib.reduce_on_plateau(**bad)


# ---------------------------------------------------------------------------------
# optax.tree
# ---------------------------------------------------------------------------------
def test_tree_functions_match_optax_tree():
    a, b = to_podlet(PARAMS), to_podlet(make_grads(1)[0])
    ja, jb = to_jax(PARAMS), to_jax(make_grads(1)[0])
    pt, jt = poptax.tree, optax.tree
    for name, args in (("add", 2), ("sub", 2), ("mul", 2), ("div", 2), ("where", None), ("vdot", 2), ("sum", 1),
                       ("max", 1), ("min", 1), ("norm", 1), ("zeros_like", 1), ("ones_like", 1), ("real", 1),
                       ("conj", 1)):
        if name == "where":
            got, want = pt.where(True, a, b), jt.where(True, ja, jb)
        elif args == 2:
            got, want = getattr(pt, name)(a, b), getattr(jt, name)(ja, jb)
        else:
            got, want = getattr(pt, name)(a), getattr(jt, name)(ja)
        assert_close(got, want, rtol=1e-6, what=name)
    assert_close(pt.add_scale(a, 0.5, b), jt.add_scale(ja, 0.5, jb))
    assert_close(pt.scale(0.5, a), jt.scale(0.5, ja))
    assert_close(pt.clip(a, -0.1, 0.2), jt.clip(ja, -0.1, 0.2))
    assert_close(pt.full_like(a, 3.0), jt.full_like(ja, 3.0))
    assert_close(pt.norm(a, ord=1), jt.norm(ja, ord=1), rtol=1e-6)
    assert_close(pt.norm(a, ord="inf"), jt.norm(ja, ord="inf"))
    assert pt.size(a) == jt.size(ja) == 32
    assert bool(pt.allclose(a, a)) and not bool(pt.allclose(a, b))
    assert pt.dtype(a) == np.float32
    mixed = {"a": pnp.zeros((2,), pnp.bfloat16), "b": pnp.zeros((2,))}
    assert pt.dtype(mixed, "highest") == np.float32 and pt.dtype(mixed, "lowest") == pnp.bfloat16
    with pytest.raises(ValueError, match="Expected dtype"):
        pt.dtype(mixed)
    key = podlet.random.PRNGKey(4)
    assert_close(pt.random_like(key, a), jt.random_like(jax.random.PRNGKey(4), ja))


def test_tree_get_set_map_params_on_optimizer_states():
    p, pj = to_podlet(PARAMS), to_jax(PARAMS)
    tx = poptax.inject_hyperparams(poptax.adam)(learning_rate=0.1)
    txj = optax.inject_hyperparams(optax.adam)(learning_rate=0.1)
    s, sj = tx.init(p), txj.init(pj)
    assert float(poptax.tree.get(s, "learning_rate")) == pytest.approx(0.1)
    s2 = poptax.tree.set(s, learning_rate=pnp.asarray(np.float32(0.5)))
    assert float(s2.hyperparams["learning_rate"]) == 0.5 and float(s.hyperparams["learning_rate"]) != 0.5
    assert_close(s2, optax.tree.set(sj, learning_rate=jnp.asarray(np.float32(0.5))))
    with pytest.raises(KeyError, match="multiple"):
        poptax.tree.get(poptax.chain(poptax.adam(1.0), poptax.adam(1.0)).init(p), "count")
    with pytest.raises(KeyError, match="no values"):
        poptax.tree.set(s, nonexistent=1)
    paths = [str(k) for k, _ in poptax.tree.get_all_with_path(s, "count")]
    assert paths == [str(k) for k, _ in optax.tree.get_all_with_path(sj, "count")]
    assert len(paths) == 2 and "ScaleByAdamState" in paths[1]
    adam, adamj = poptax.adam(0.1), optax.adam(0.1)
    st = poptax.tree.map_params(adam, lambda x: x + 1.0, adam.init(p))
    stj = optax.tree.map_params(adamj, lambda x: x + 1.0, adamj.init(pj))
    assert_close(st, stj)
    assert_close(poptax.tree_map_params(adam, lambda x: x * 0, st, transform_non_params=lambda c: c + 3),
                 optax.tree_map_params(adamj, lambda x: x * 0, stj, transform_non_params=lambda c: c + 3))


def test_namespace_covers_optax_names_it_claims():
    for name in poptax.__all__:
        assert hasattr(poptax, name), name
    for sub in ("contrib", "tree", "schedules"):
        for name in getattr(poptax, sub).__all__ if hasattr(getattr(poptax, sub), "__all__") else ():
            assert hasattr(getattr(optax, sub), name), f"{sub}.{name}"
    assert poptax.schedules.inject_hyperparams is poptax.inject_hyperparams
    assert poptax.multi_transform is poptax.partition
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert isinstance(poptax.WrappedSchedule(lambda c: c), poptax.schedules.StatefulSchedule)


# ---------------------------------------------------------------------------------
# optax.projections, second_order, perturbations, transforms, tree_utils
# ---------------------------------------------------------------------------------
def test_projections_match_optax():
    t = make_grads(1, seed=9)[0]
    a = jax.tree.map(np.ones_like, t)
    P, J = poptax.projections, optax.projections
    cases = [("projection_non_negative", (t,)), ("projection_simplex", (t,)), ("projection_simplex", (t, 2.0)),
             ("projection_l1_sphere", (t,)), ("projection_l1_ball", (t, 100.0)), ("projection_l1_ball", (t, 1.0)),
             ("projection_l2_sphere", (t,)), ("projection_l2_ball", (t, 0.5)), ("projection_l2_ball", (t, 100.0)),
             ("projection_linf_ball", (t, 0.2)), ("projection_vector", (t, a)), ("projection_hyperplane", (t, a, 0.3)),
             ("projection_halfspace", (t, a, -0.3)), ("projection_box", (t, jax.tree.map(lambda x: x * 0 - 0.1, t),
                                                                           jax.tree.map(lambda x: x * 0 + 0.2, t))),
             ("projection_hypercube", (t["head"],))]
    # One jax.jit for all the oracles: eager jax would compile each op (sort, cumsum, ...)
    # for its shapes; projections are exact-order elementwise work either way.
    wants = jax.jit(lambda arrays: [getattr(J, name)(*args) for (name, _), args in zip(cases, arrays)])(
        [[x if isinstance(x, float) else to_jax(x) for x in args] for _, args in cases])
    for (name, args), want in zip(cases, wants):
        got = getattr(P, name)(*[x if isinstance(x, float) else to_podlet(x) for x in args])
        assert_close(got, want, rtol=1e-6, atol=1e-7, what=name)
    s = P.projection_simplex(to_podlet(t))
    assert abs(float(poptax.tree.sum(s)) - 1.0) < 1e-6 and all(np.all(np.asarray(x) >= 0) for x in ptu.tree_leaves(s))
    # the custom JVP (optax's): the gradient through the projection
    x = np.array([0.3, -0.1, 0.6, 0.2], np.float32)
    gp = podlet.grad(lambda v: pnp.sum(P.projection_simplex(v) * pnp.arange(4.0)))(pnp.asarray(x))
    gj = jax.jit(jax.grad(lambda v: jnp.sum(J.projection_simplex(v) * jnp.arange(4.0))))(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(gp), np.asarray(gj), rtol=1e-6, atol=1e-7)
    jitted = podlet.jit(lambda tr: P.projection_l1_ball(tr, 1.0))(to_podlet(t))
    assert_close(jitted, J.projection_l1_ball(to_jax(t), 1.0), rtol=1e-6, atol=1e-7)


def test_second_order_matches_optax():
    rng = np.random.default_rng(17)
    w = {"w": rng.normal(size=(3, 2)).astype(np.float32), "b": rng.normal(size=(2,)).astype(np.float32)}
    x, y = rng.normal(size=(5, 3)).astype(np.float32), rng.normal(size=(5, 2)).astype(np.float32)
    v = rng.normal(size=(8,)).astype(np.float32)
    lp = lambda p, x, y: pnp.sum(pnp.tanh(x @ p["w"] + p["b"]) - y) ** 2  # noqa: E731
    lj = lambda p, x, y: jnp.sum(jnp.tanh(x @ p["w"] + p["b"]) - y) ** 2  # noqa: E731
    S, T = poptax.second_order, optax.second_order
    # podlet's and XLA's tanh kernels differ in the last bit, and the second derivative
    # sums products of (1 - tanh^2) terms that cancel in some entries: the HVP agrees to
    # 1e-6 of its largest entry (~4), not entry by entry.
    # (the oracle under jax.jit: eager jax would compile every op of vmap(jvp(grad)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        wants = jax.jit(lambda w, x, y, v: (T.hvp(lj, v, w, x, y), T.hessian_diag(lj, w, x, y),
                                            T.fisher_diag(lj, w, x, y)))(to_jax(w), x, y, v)
        assert_close(S.hvp(lp, pnp.asarray(v), to_podlet(w), pnp.asarray(x), pnp.asarray(y)), wants[0],
                     rtol=1e-5, atol=1e-5)
        for f, want in zip(("hessian_diag", "fisher_diag"), wants[1:]):
            got = getattr(S, f)(lp, to_podlet(w), pnp.asarray(x), pnp.asarray(y))
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5, err_msg=f)
    with pytest.warns(DeprecationWarning, match="0.2.9"):
        S.fisher_diag(lp, to_podlet(w), pnp.asarray(x), pnp.asarray(y))


def test_perturbed_fun_matches_optax():
    x = np.array([0.1, 0.5, -0.2], np.float32)
    for noise in ("Gumbel", "Normal"):
        fp = poptax.perturbations.make_perturbed_fun(lambda v: pnp.max(v) * pnp.sum(v), 64, 0.5,
                                                     getattr(poptax.perturbations, noise)())
        fj = optax.perturbations.make_perturbed_fun(lambda v: jnp.max(v) * jnp.sum(v), 64, 0.5,
                                                    getattr(optax.perturbations, noise)())
        # the same keys give the same noise, so the Monte-Carlo estimates agree (the
        # oracle jitted: eager jax would compile every op of the vmapped estimator)
        vj, gj = jax.jit(jax.value_and_grad(lambda v: fj(jax.random.PRNGKey(2), v)))(jnp.asarray(x))
        np.testing.assert_allclose(float(fp(podlet.random.PRNGKey(2), pnp.asarray(x))), float(vj), rtol=1e-5)
        gp = podlet.grad(lambda v: fp(podlet.random.PRNGKey(2), v))(pnp.asarray(x))
        np.testing.assert_allclose(np.asarray(gp), np.asarray(gj), rtol=1e-5, atol=1e-6, err_msg=noise)


def test_transforms_and_tree_utils_modules_are_optax_names():
    for mod in ("transforms", "tree_utils", "projections", "second_order", "perturbations", "microbatching",
                "contrib", "tree"):
        mine, theirs = getattr(poptax, mod), getattr(optax, mod)
        for name in mine.__all__:
            assert hasattr(theirs, name), f"{mod}.{name} is not optax's"
    names = {n for n in dir(optax.transforms) if not n.startswith("_") and not isinstance(
        getattr(optax.transforms, n), type(optax))}
    assert names <= set(poptax.transforms.__all__), sorted(names - set(poptax.transforms.__all__))
    assert poptax.transforms.partition is poptax.multi_transform
    assert poptax.tree_utils.tree_norm is poptax.tree.norm


def test_adopt_and_muon_match_optax():
    # ADOPT, 100 steps (params within 1e-6)
    grads = make_grads(100, seed=21)
    mk = lambda o: o.contrib.adopt(1e-2)  # noqa: E731
    (pp, sp), (pj, sj) = run_both(mk(poptax), mk(optax), grads)
    assert_close(pp, pj)
    assert_close(sp, sj, rtol=1e-5)
    run_jit(mk(poptax), grads[:3])
    # Muon: 2-D "dense/kernel" by Newton-Schulz, the vectors by AdamW. Its updates are
    # matrix products (x x^T, A x): XLA's dot and podlet's GEMM add the 4-6 terms in
    # different orders, ~1e-7 per product, hence 1e-5 on the params after 20 steps.
    # The oracle is jitted: eager optax re-traces the vmap and the Newton-Schulz loop at
    # every call (~1 s a step).
    grads = grads[:20]
    for mk in (lambda o: o.contrib.muon(2e-2),
               lambda o: o.contrib.muon(2e-2, ns_coeffs="dion", preconditioning="schatten", consistent_rms=0.2),
               lambda o: o.contrib.muon(2e-2, preconditioning="aol", adaptive=True, muon_weight_dimension_numbers={
                   "dense": {"kernel": o.contrib.MuonDimensionNumbers(1, 0), "bias": None}, "head": None})):
        (pp, sp), (pj, sj) = run_both(mk(poptax), mk(optax), grads, jit_oracle=True)
        assert_close(pp, pj, rtol=1e-5, atol=1e-6, what="muon params")
        assert_close(sp, sj, rtol=1e-4, atol=1e-6, what="muon state")
        assert isinstance(sp.inner_states["muon"].inner_state[0], poptax.contrib.MuonState)
    run_jit(mk(poptax), grads[:3])
    with pytest.raises(NotImplementedError, match="SVD"):
        poptax.contrib.muon(1e-2, preconditioning="spectral").update(
            to_podlet(grads[0]), poptax.contrib.muon(1e-2).init(to_podlet(PARAMS)), to_podlet(PARAMS))
    with pytest.raises(ValueError, match="preset"):
        poptax.contrib.muon(1e-2, ns_coeffs="fast")
