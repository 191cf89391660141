"""podlet.optim schedules against optax 0.2.8: every schedule at many steps, called
with Python ints, with concrete int32 podlet arrays, and with a traced int32 step
inside podlet.jit (the way scale_by_schedule calls it from the optimizer state)."""
import numpy as np
import pytest

import podlet
import podlet.numpy as pnp
import podlet.optim as poptax

import jax
import jax.numpy as jnp
import optax

STEPS = list(range(0, 12)) + [19, 20, 21, 25, 29, 30, 31, 34, 35, 36, 40, 41, 50, 59, 60, 61, 63, 64, 65, 99, 100,
                              101, 150, 199, 200, 201, 250, 299, 300, 301, 1000, 10 ** 6]

CASES = {
    "constant": lambda o: o.constant_schedule(0.3),
    "linear": lambda o: o.linear_schedule(1.0, 0.01, 100),
    "linear_begin": lambda o: o.linear_schedule(0.0, 7e-4, 30, transition_begin=10),
    "linear_zero_steps": lambda o: o.linear_schedule(0.5, 0.01, 0),
    "polynomial": lambda o: o.polynomial_schedule(1.0, 0.1, 2, 100, transition_begin=5),
    "polynomial_frac_power": lambda o: o.polynomial_schedule(1.0, 0.0, 0.5, 64),
    "cosine": lambda o: o.cosine_decay_schedule(1e-3, 100),
    "cosine_alpha_exp": lambda o: o.cosine_decay_schedule(2.0, 150, alpha=0.1, exponent=2.0),
    "warmup_cosine_seed": lambda o: o.warmup_cosine_decay_schedule(init_value=0.0, peak_value=7e-4, warmup_steps=30,
                                                                   decay_steps=300 - 30, end_value=0.0),
    "warmup_cosine_end": lambda o: o.warmup_cosine_decay_schedule(1e-4, 1e-2, 10, 200, end_value=1e-5, exponent=1.5),
    "warmup_cosine_no_warmup": lambda o: o.warmup_cosine_decay_schedule(0.0, 1.0, 0, 100),
    "piecewise_constant": lambda o: o.piecewise_constant_schedule(0.1, {10: 0.5, 30: 0.1, 100: 2.0}),
    "piecewise_constant_none": lambda o: o.piecewise_constant_schedule(0.1),
    "exponential": lambda o: o.exponential_decay(1.0, 10, 0.5),
    "exponential_staircase": lambda o: o.exponential_decay(1.0, 7, 0.9, transition_begin=5, staircase=True),
    "exponential_end": lambda o: o.exponential_decay(1.0, 10, 0.5, end_value=0.05),
    "exponential_growth_end": lambda o: o.exponential_decay(0.01, 10, 1.5, end_value=0.5),
    "join": lambda o: o.join_schedules([o.constant_schedule(1.0), o.linear_schedule(1.0, 0.0, 20),
                                        o.cosine_decay_schedule(0.5, 40)], [10, 35]),
    "warmup_constant": lambda o: o.warmup_constant_schedule(0.0, 1.0, 25),
    "warmup_exponential": lambda o: o.warmup_exponential_decay_schedule(0.0, 1.0, 10, 20, 0.5, end_value=0.01),
    "sgdr": lambda o: o.sgdr_schedule([dict(init_value=0.0, peak_value=1.0, warmup_steps=5, decay_steps=50),
                                      dict(init_value=0.0, peak_value=0.5, warmup_steps=5, decay_steps=100)]),
    "piecewise_interpolate_linear": lambda o: o.piecewise_interpolate_schedule("linear", 1.0,
                                                                               {10: 0.5, 40: 0.1, 41: 3.0}),
    "piecewise_interpolate_cosine": lambda o: o.piecewise_interpolate_schedule("cosine", 2.0, {20: 0.25, 60: 0.1}),
    "linear_onecycle": lambda o: o.linear_onecycle_schedule(200, 1e-2),
    "cosine_onecycle": lambda o: o.cosine_onecycle_schedule(200, 1e-2, pct_start=0.25),
}


_ORACLE = {}


def _oracle(name):
    """optax at int32 array steps, op by op (eager; vmap or jit would let XLA reorder
    the arithmetic and move the last bit), computed once per schedule."""
    if name not in _ORACLE:
        f = CASES[name](optax)
        _ORACLE[name] = np.array([np.asarray(f(jnp.asarray(s, jnp.int32))) for s in STEPS], np.float64)
    return _ORACLE[name]


def _close(got, want, name):
    # cos and pow kernels may differ from XLA's in the last bit.
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("name", sorted(CASES))
def test_python_int_steps(name):
    f = CASES[name](poptax)
    got = np.array([np.asarray(f(s), np.float64) for s in STEPS])
    want = np.array([np.asarray(CASES[name](optax)(s), np.float64) for s in STEPS])
    _close(got, want, name)


@pytest.mark.parametrize("name", sorted(CASES))
def test_int32_array_steps(name):
    f = CASES[name](poptax)
    got = np.array([np.asarray(f(pnp.asarray(np.int32(s))), np.float64) for s in STEPS])
    _close(got, _oracle(name), name)


@pytest.mark.parametrize("name", sorted(CASES))
def test_traced_steps_under_jit(name):
    f = CASES[name](poptax)
    jf = podlet.jit(lambda c: pnp.asarray(f(c), pnp.float32))
    got = np.array([np.asarray(jf(pnp.asarray(np.int32(s)))) for s in STEPS], np.float64)
    assert jf.trace_count == 1
    _close(got, _oracle(name), name)


def test_seed_schedule_shape():
    """The seed's warmup-cosine: 0 at step 0, peak at the end of warmup, 0 at the end."""
    steps_per_epoch, epochs, warmup_epochs, lr = 10, 35, 3, 7e-4
    f = poptax.warmup_cosine_decay_schedule(0.0, lr, warmup_epochs * steps_per_epoch,
                                            max(epochs * steps_per_epoch - warmup_epochs * steps_per_epoch, 1), 0.0)
    assert float(f(0)) == 0.0
    np.testing.assert_allclose(float(f(30)), lr, rtol=1e-7)
    np.testing.assert_allclose(float(f(15)), lr / 2, rtol=1e-6)
    assert float(f(350)) == pytest.approx(0.0, abs=1e-12)
    vals = [float(f(s)) for s in range(30, 351, 10)]
    assert all(a >= b for a, b in zip(vals, vals[1:]))


def test_schedule_drives_scale_by_schedule_count():
    sched = poptax.linear_schedule(1.0, 0.0, 4)
    tx = poptax.scale_by_schedule(sched)
    s = tx.init(None)
    seen = []
    for _ in range(6):
        u, s = tx.update({"g": pnp.ones((2,))}, s)
        seen.append(float(np.asarray(u["g"])[0]))
    np.testing.assert_allclose(seen, [1.0, 0.75, 0.5, 0.25, 0.0, 0.0])
    assert int(s.count) == 6 and s.count.shape == ()


def test_validation_errors():
    with pytest.raises(ValueError, match="positive decay_steps"):
        poptax.cosine_decay_schedule(1.0, 0)
    with pytest.raises(ValueError, match="non-negative"):
        poptax.piecewise_constant_schedule(1.0, {5: -1.0})
    with pytest.raises(ValueError, match="interpolate_type"):
        poptax.piecewise_interpolate_schedule("cubic", 1.0)
    with pytest.raises(ValueError, match="positive decay_steps"):
        poptax.warmup_cosine_decay_schedule(0.0, 1.0, 10, 10)
