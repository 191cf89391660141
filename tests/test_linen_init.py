"""podlet.nn.initializers against jax.nn.initializers (jax 0.10.2) as the oracle: for the
same key, shape and dtype every initializer must give the same bits, in float32 and
bfloat16, eagerly and with the key traced under podlet.jit; fan computation
(in_axis/out_axis/batch_axis) and error messages as in jax.
"""
import ml_dtypes
import numpy as np
import pytest

import jax
import jax.numpy as jnp
import flax.linen as fnn

import podlet
from podlet import nn as pnn
from podlet.nn import initializers as pinit

BF16 = ml_dtypes.bfloat16


def assert_same_bits(got, want, what=""):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    view = {2: np.uint16, 4: np.uint32, 8: np.uint64}[got.dtype.itemsize]
    g, w = got.view(view).reshape(-1), want.view(view).reshape(-1)
    bad = np.flatnonzero(g != w)
    assert bad.size == 0, f"{what}: {bad.size}/{g.size} differ, first {bad[:4]}: {got.reshape(-1)[bad[:4]]} " \
                          f"vs {want.reshape(-1)[bad[:4]]}"


def keys(seed):
    return podlet.random.PRNGKey(seed), jax.random.PRNGKey(seed)


# (name, podlet builder, jax builder) with the same arguments.
BUILDERS = [
    ("lecun_normal", pinit.lecun_normal(), jax.nn.initializers.lecun_normal()),
    ("lecun_uniform", pinit.lecun_uniform(), jax.nn.initializers.lecun_uniform()),
    ("he_normal", pinit.he_normal(), jax.nn.initializers.he_normal()),
    ("he_uniform", pinit.he_uniform(), jax.nn.initializers.he_uniform()),
    ("glorot_normal", pinit.glorot_normal(), jax.nn.initializers.glorot_normal()),
    ("glorot_uniform", pinit.glorot_uniform(), jax.nn.initializers.glorot_uniform()),
    ("xavier_normal", pinit.xavier_normal(), jax.nn.initializers.xavier_normal()),
    ("xavier_uniform", pinit.xavier_uniform(), jax.nn.initializers.xavier_uniform()),
    ("kaiming_normal", pinit.kaiming_normal(), jax.nn.initializers.kaiming_normal()),
    ("kaiming_uniform", pinit.kaiming_uniform(), jax.nn.initializers.kaiming_uniform()),
    ("normal", pinit.normal(), jax.nn.initializers.normal()),
    ("normal_0.5", pinit.normal(0.5), jax.nn.initializers.normal(0.5)),
    ("uniform", pinit.uniform(), jax.nn.initializers.uniform()),
    ("uniform_3", pinit.uniform(3.0), jax.nn.initializers.uniform(3.0)),
    ("truncated_normal", pinit.truncated_normal(), jax.nn.initializers.truncated_normal()),
    ("truncated_normal_args", pinit.truncated_normal(0.3, lower=-1.0, upper=1.5),
     jax.nn.initializers.truncated_normal(0.3, lower=-1.0, upper=1.5)),
    ("vs_fan_out_normal", pinit.variance_scaling(0.7, "fan_out", "normal"),
     jax.nn.initializers.variance_scaling(0.7, "fan_out", "normal")),
    ("vs_fan_avg_trunc", pinit.variance_scaling(1.3, "fan_avg", "truncated_normal"),
     jax.nn.initializers.variance_scaling(1.3, "fan_avg", "truncated_normal")),
    ("vs_fan_geo_avg_uniform", pinit.variance_scaling(2.0, "fan_geo_avg", "uniform"),
     jax.nn.initializers.variance_scaling(2.0, "fan_geo_avg", "uniform")),
]
# jax compiles every (sampler, shape, dtype) eagerly, ~1 s each on a loaded 2-core box
# (rank-3/4 shapes 3-7 s): one 2-D shape serves all builders. Conv-like shapes and
# in/out/batch axes are checked through a 2-D jax oracle with the same fans and element
# count: threefry bits depend only on the flat index (partitionable scheme), so a
# (3, 3, 4, 8) draw reshaped to (36, 8) is the (36, 8) draw.
SHAPE = (20, 7)


@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["f32", "bf16"])
@pytest.mark.parametrize("name,pi,ji", BUILDERS, ids=[b[0] for b in BUILDERS])
def test_initializer_bits(name, pi, ji, dtype):
    for seed in (3, 11):
        pk, jk = keys(seed)
        assert_same_bits(pi(pk, SHAPE, dtype), ji(jk, SHAPE, dtype), f"{name}{SHAPE} seed {seed}")


FAN_CASES = [
    # podlet initializer on a conv / batched shape, jax initializer on the equivalent 2-D shape
    ("conv_he_normal", pinit.he_normal(), (3, 3, 4, 8), jax.nn.initializers.he_normal(), (36, 8)),
    ("conv_lecun_uniform", pinit.lecun_uniform(), (3, 3, 4, 8), jax.nn.initializers.lecun_uniform(), (36, 8)),
    ("in_axis_tuple", pinit.variance_scaling(1.0, "fan_in", "truncated_normal", in_axis=(0, 1), out_axis=-1),
     (5, 4, 7), jax.nn.initializers.lecun_normal(), (20, 7)),
    ("batch_axis", pinit.variance_scaling(1.0, "fan_in", "uniform", in_axis=1, out_axis=2, batch_axis=0),
     (5, 4, 7), jax.nn.initializers.lecun_uniform(), (4, 35)),
]


@pytest.mark.parametrize("name,pi,pshape,ji,jshape", FAN_CASES, ids=[c[0] for c in FAN_CASES])
def test_initializer_fan_conventions(name, pi, pshape, ji, jshape):
    pk, jk = keys(5)
    got = np.asarray(pi(pk, pshape, np.float32))
    assert got.shape == pshape
    assert_same_bits(got.reshape(jshape), ji(jk, jshape, np.float32), name)


@pytest.mark.parametrize("name,pi,ji", BUILDERS[:4] + BUILDERS[10:12], ids=[b[0] for b in BUILDERS[:4] + BUILDERS[10:12]])
def test_initializer_default_dtype_and_flax_aliases(name, pi, ji):
    pk, jk = keys(1)
    got = pi(pk, SHAPE)
    assert np.asarray(got).dtype == np.float32
    assert_same_bits(got, ji(jk, SHAPE), name)


def test_initializer_under_jit_traced_key():
    init = pinit.lecun_normal()
    f = podlet.jit(lambda k: init(k, SHAPE, jnp.float32))
    f2 = podlet.jit(lambda k: pinit.he_uniform()(k, SHAPE, BF16))
    for seed in (3, 11):
        pk, jk = keys(seed)
        assert_same_bits(f(pk), jax.nn.initializers.lecun_normal()(jk, SHAPE, jnp.float32), "jit")
        assert_same_bits(f2(pk), jax.nn.initializers.he_uniform()(jk, SHAPE, BF16), "jit bf16")


@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["f32", "bf16"])
def test_constant_zeros_ones(dtype):
    pk, jk = keys(0)
    for p, j in [(pinit.zeros, jax.nn.initializers.zeros), (pinit.ones, jax.nn.initializers.ones),
                 (pinit.zeros_init(), fnn.initializers.zeros_init()), (pinit.ones_init(), fnn.initializers.ones_init()),
                 (pinit.constant(0.1), jax.nn.initializers.constant(0.1)),
                 (pinit.constant(-3), jax.nn.initializers.constant(-3))]:
        assert_same_bits(p(pk, (3, 4), dtype), j(jk, (3, 4), dtype))
    assert np.asarray(pinit.zeros(pk, 5)).shape == (5,)
    assert np.asarray(pinit.constant(2.0)(pk, (2,))).dtype == np.float32


def test_nn_namespace_matches_flax_linen_initializers():
    for name in ["zeros_init", "ones_init", "zeros", "ones", "constant", "normal", "truncated_normal", "uniform",
                 "variance_scaling", "lecun_normal", "lecun_uniform", "he_normal", "he_uniform", "glorot_normal",
                 "glorot_uniform", "xavier_normal", "xavier_uniform", "kaiming_normal", "kaiming_uniform"]:
        assert hasattr(fnn.initializers, name)
        assert callable(getattr(pnn.initializers, name)), name
    assert pnn.initializers.xavier_uniform is pnn.initializers.glorot_uniform
    assert pnn.initializers.kaiming_normal is pnn.initializers.he_normal


def test_fans_and_errors():
    from podlet.nn.initializers import _compute_fans
    from jax._src.nn.initializers import _compute_fans as jax_fans
    for shape, kw in [((3, 3, 4, 8), {}), ((5, 7), {}), ((2, 16, 3), dict(batch_axis=0)),
                      ((4, 5, 6), dict(in_axis=(0, 1), out_axis=2))]:
        assert _compute_fans(shape, **kw) == jax_fans(shape, **kw)
    pk, _ = keys(0)
    with pytest.raises(ValueError, match="Must be at least 2D"):
        pinit.lecun_normal()(pk, (5,))
    with pytest.raises(ValueError, match="invalid mode"):
        pinit.variance_scaling(1.0, "fan_bad", "normal")(pk, (2, 2))
    with pytest.raises(ValueError, match="invalid distribution"):
        pinit.variance_scaling(1.0, "fan_in", "cauchy")(pk, (2, 2))
    # 1-D with an explicit in_axis is fine (as in jax)
    got = pinit.variance_scaling(1.0, "fan_in", "normal", in_axis=0, out_axis=0)(pk, (6,))
    want = jax.nn.initializers.variance_scaling(1.0, "fan_in", "normal", in_axis=0, out_axis=0)(keys(0)[1], (6,))
    assert_same_bits(got, want)
