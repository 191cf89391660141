"""podlet.training.{common_utils, dynamic_scale, early_stopping} against flax.training's
modules of the same names (flax 0.12.8) on the same inputs.

common_utils: shard / shard_prng_key / onehot / stack_forest / get_metrics give Flax's
values and shapes (shard_prng_key: jax.random.split's keys, one per local device).
DynamicScale: several steps in which some produce a NaN or inf gradient: the finite
flags, the scale (growth after growth_interval finite steps, backoff, the minimum), the
fin_steps count, the unscaled loss, aux and float32 gradients equal Flax's, eagerly,
under podlet.jit, and under pmap with axis_name (one replica's NaN makes every replica
non-finite) against Flax's under jax.vmap(axis_name). EarlyStopping: Flax's states over
a metric sequence.
"""
import numpy as np
import pytest

import jax
import jax.numpy as jnp
from flax.training import common_utils as fcu
from flax.training import dynamic_scale as fds
from flax.training import early_stopping as fes

import podlet
import podlet.numpy as pjnp
from podlet import jax_utils
from podlet.training import common_utils as pcu
from podlet.training import dynamic_scale as pds
from podlet.training import early_stopping as pes

N = podlet.local_device_count()


# ----------------------------------------------------------------------------- common_utils
def test_shard_and_shard_prng_key(monkeypatch):
    x = np.arange(N * 3 * 2, dtype=np.float32).reshape(N * 3, 2)
    tree = {"image": x, "label": np.arange(N * 3)}
    # flax shards by jax's local device count (1 here): give it podlet's
    monkeypatch.setattr(jax, "local_device_count", lambda *a, **k: N)
    got, want = pcu.shard(tree), fcu.shard(tree)
    for k in tree:
        assert isinstance(got[k], np.ndarray) and got[k].shape == (N, 3) + tree[k].shape[1:]
        np.testing.assert_array_equal(got[k], np.asarray(want[k]))
    assert pcu.shard(pjnp.asarray(x)).shape == (N, 3, 2)          # podlet arrays stay podlet arrays
    keys = np.asarray(pcu.shard_prng_key(podlet.random.PRNGKey(7)))
    np.testing.assert_array_equal(keys, np.asarray(fcu.shard_prng_key(jax.random.PRNGKey(7))))
    assert keys.shape == (N, 2) and len({tuple(k) for k in keys}) == N    # a different key per device


def test_onehot_and_stack_forest():
    labels = np.array([[0, 3, 1], [2, 2, 4]])
    for kw in ({}, dict(on_value=0.9, off_value=0.025)):
        got, want = pcu.onehot(pjnp.asarray(labels), 5, **kw), fcu.onehot(jnp.asarray(labels), 5, **kw)
        assert np.asarray(got).dtype == np.float32 and np.asarray(got).shape == (2, 3, 5)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    np.testing.assert_array_equal(np.asarray(pcu.onehot(pjnp.asarray(np.array([7, -1])), 5)),
                                  np.asarray(fcu.onehot(jnp.asarray(np.array([7, -1])), 5)))   # out of range: zeros
    forest = [{"a": np.full((2,), i, np.float32), "b": (np.int32(i),)} for i in range(3)]
    got, want = pcu.stack_forest(forest), fcu.stack_forest(forest)
    assert podlet.tree_util.tree_structure(got) == podlet.tree_util.tree_structure(
        podlet.tree_util.tree_map(np.asarray, want))
    np.testing.assert_array_equal(np.asarray(got["a"]), np.asarray(want["a"]))
    np.testing.assert_array_equal(np.asarray(got["b"][0]), np.asarray(want["b"][0]))


def test_get_metrics_of_pmapped_steps():
    step = podlet.pmap(lambda x: {"loss": podlet.lax.pmean(x.sum(), "d"), "n": x.shape[0] + 0 * x.sum()},
                       axis_name="d")
    batches = [np.arange(N * 2, dtype=np.float32).reshape(N, 2) * (i + 1) for i in range(3)]
    metrics = [step(b) for b in batches]
    got = pcu.get_metrics(metrics)
    # flax's reads device 0 of each replicated leaf (jax arrays over one device here)
    want = fcu.get_metrics([{k: jnp.asarray(np.asarray(v)[:1]) for k, v in m.items()} for m in metrics])
    assert sorted(got) == sorted(want)
    for k in got:
        assert np.asarray(got[k]).shape == (3,)
        np.testing.assert_array_equal(np.asarray(got[k]), np.asarray(want[k]))
    np.testing.assert_allclose(np.asarray(got["loss"]), [b.sum() / N for b in batches], rtol=1e-6)


# ----------------------------------------------------------------------------- DynamicScale
X_STEPS = [np.array(v, np.float32) for v in (
    [1.0, 1.0], [2.0, 0.5], [1.0, 3.0],           # the third finite step in a row grows the scale
    [0.5, np.nan],                                # NaN input: NaN gradient
    [1.5, 1.0], [np.inf, 1.0],                    # inf input: non-finite gradient
    [1.0, 2.0], [0.25, 1.0], [1.0, 1.0], [3.0, 0.5])]
PARAMS = {"w": np.array([1.0, -2.0], np.float32), "b": np.array(0.5, np.float32)}


def loss_fn(np_):
    def loss(params, x):
        # a bf16 forward, as a mixed-precision model's
        y = np_.asarray(params["w"], np_.bfloat16) * np_.asarray(x, np_.bfloat16)
        out = np_.sum(np_.asarray(y, np_.float32) ** 2) + params["b"] ** 2
        return out, {"y0": np_.asarray(y[0], np_.float32)}
    return loss


def assert_result_equal(pres, fres, has_aux=True):
    pd, pfin, pval, pg = pres
    fd, ffin, fval, fg = fres
    assert bool(np.asarray(pfin)) == bool(np.asarray(ffin))
    assert np.asarray(pd.scale).dtype == np.asarray(fd.scale).dtype
    np.testing.assert_array_equal(np.asarray(pd.scale), np.asarray(fd.scale))
    np.testing.assert_array_equal(np.asarray(pd.fin_steps), np.asarray(fd.fin_steps))
    if has_aux:
        np.testing.assert_allclose(np.asarray(pval[0]), np.asarray(fval[0]), rtol=1e-6)
        np.testing.assert_array_equal(np.asarray(pval[1]["y0"]), np.asarray(fval[1]["y0"]))
    for k in ("w", "b"):
        assert np.asarray(pg[k]).dtype == np.float32
        np.testing.assert_allclose(np.asarray(pg[k]), np.asarray(fg[k]), rtol=1e-6)


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_dynamic_scale_over_steps_with_non_finite_gradients(mode):
    kw = dict(growth_interval=2, growth_factor=4.0, backoff_factor=0.25, minimum_scale=64.0)
    pd, fd = pds.DynamicScale(scale=512.0, **kw), fds.DynamicScale(scale=512.0, **kw)
    pstep = lambda d, p, x: d.value_and_grad(loss_fn(pjnp), has_aux=True)(p, x)  # noqa: E731
    fstep = lambda d, p, x: d.value_and_grad(loss_fn(jnp), has_aux=True)(p, x)  # noqa: E731
    if mode == "jit":
        pstep, fstep = podlet.jit(pstep), jax.jit(fstep)
    pp, fp = podlet.tree_util.tree_map(pjnp.asarray, PARAMS), PARAMS
    seen = []
    for x in X_STEPS + X_STEPS[3:4] * 4:          # repeated NaNs drive the scale to its minimum
        pres, fres = pstep(pd, pp, pjnp.asarray(x)), fstep(fd, fp, jnp.asarray(x))
        assert_result_equal(pres, fres)
        pd, fd = pres.dynamic_scale, fres.dynamic_scale
        seen.append((bool(np.asarray(pres.finite)), float(np.asarray(pd.scale))))
    assert pd.growth_interval == 2 and pd.minimum_scale == 64.0        # static fields survive jit
    scales = [s for _, s in seen]
    assert max(scales) > 512.0 and min(scales) == 64.0 and not all(f for f, _ in seen)


def test_dynamic_scale_defaults_and_argnums():
    # Flax's defaults (scale 2**16, growth every 2000 steps) and argnums / no aux
    assert (pds.DynamicScale().scale, pds.DynamicScale().growth_interval) == (65536.0, 2000)
    assert pds.DynamicScale().minimum_scale == fds.DynamicScale().minimum_scale
    f = lambda np_: lambda w, x: np_.sum((w * x) ** 2)  # noqa: E731
    w, x = np.array([1.0, 2.0], np.float32), np.array([0.5, -1.0], np.float32)
    pres = pds.DynamicScale().value_and_grad(f(pjnp), argnums=(0, 1))(pjnp.asarray(w), pjnp.asarray(x))
    fres = fds.DynamicScale().value_and_grad(f(jnp), argnums=(0, 1))(jnp.asarray(w), jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(pres.aux), np.asarray(fres.aux), rtol=1e-6)
    for a, b in zip(pres.grad, fres.grad):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)
    assert int(np.asarray(pres.dynamic_scale.fin_steps)) == 1 and bool(np.asarray(pres.finite))
    # a pytree: fin_steps and scale are its leaves, the rest is static
    assert len(podlet.tree_util.tree_leaves(pds.DynamicScale())) == 2


def test_dynamic_scale_under_pmap_axis_name():
    """Gradients are pmean'd before the finiteness check: one replica's NaN makes every
    replica skip the step. Oracle: Flax's DynamicScale under jax.vmap(axis_name=...)."""
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((3, N, 2)).astype(np.float32)
    xs[1, 3, 0] = np.nan                           # step 1: replica 3 only
    pd = jax_utils.replicate(pds.DynamicScale(growth_interval=1, scale=8.0))
    fd = fds.DynamicScale(growth_interval=1, scale=8.0)
    pp = jax_utils.replicate(podlet.tree_util.tree_map(pjnp.asarray, PARAMS))

    def pstep(d, p, x):
        return d.value_and_grad(loss_fn(pjnp), has_aux=True, axis_name="batch")(p, x)

    def fstep(d, p, x):
        return d.value_and_grad(loss_fn(jnp), has_aux=True, axis_name="batch")(p, x)

    pstep = podlet.pmap(pstep, axis_name="batch")
    fstep = jax.vmap(fstep, in_axes=(None, None, 0), axis_name="batch")
    for t in range(3):
        pres = pstep(pd, pp, xs[t])
        fres = fstep(fd, PARAMS, jnp.asarray(xs[t]))
        fin = np.asarray(pres.finite)
        assert fin.shape == (N,) and (fin == (t != 1)).all()
        np.testing.assert_array_equal(fin, np.asarray(fres.finite))
        for r in (0, 3, N - 1):
            np.testing.assert_array_equal(np.asarray(pres.dynamic_scale.scale)[r], np.asarray(fres.dynamic_scale.scale)[r])
            np.testing.assert_array_equal(np.asarray(pres.dynamic_scale.fin_steps)[r],
                                          np.asarray(fres.dynamic_scale.fin_steps)[r])
            for k in ("w", "b"):
                np.testing.assert_allclose(np.asarray(pres.grad[k])[r], np.asarray(fres.grad[k])[r], rtol=1e-5)
        pd = pres.dynamic_scale
        fd = jax.tree_util.tree_map(lambda v: v[0], fres.dynamic_scale)


# ----------------------------------------------------------------------------- EarlyStopping
def test_early_stopping_matches_flax():
    metrics = [4, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1.0005, 0.5]
    for kw in (dict(min_delta=1e-3, patience=2), dict(), dict(min_delta=0.5, patience=0)):
        p, f = pes.EarlyStopping(**kw), fes.EarlyStopping(**kw)
        for m in metrics:
            p, f = p.update(m), f.update(m)
            assert (p.best_metric, p.patience_count, p.should_stop, p.has_improved) == \
                   (f.best_metric, f.patience_count, f.should_stop, f.has_improved), (kw, m)
        p, f = p.reset(), f.reset()
        assert (p.best_metric, p.patience_count, p.should_stop, p.has_improved) == \
               (f.best_metric, f.patience_count, f.should_stop, f.has_improved)
    # the docstring example stops at epoch 7
    es = pes.EarlyStopping(min_delta=1e-3, patience=2)
    stopped = next(i for i, m in enumerate([4, 3, 3, 3, 2, 2, 2, 2, 1, 1]) if (es := es.update(m)).should_stop)
    assert stopped == 7
