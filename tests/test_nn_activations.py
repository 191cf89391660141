"""podlet.nn activations against jax.nn (the oracle), eagerly, under jit and in grad."""
import jax
import jax.numpy as jnp_ref
import numpy as np
import pytest

import podlet
import podlet.numpy as jnp
from podlet import nn

X = np.array([[-30.0, -3.0, -0.5, 0.0, 0.25, 2.0, 20.0],
              [1.0, -1.0, 5.0, -5.0, 0.0, 1e-3, -1e-3]], np.float32)

CASES = {
    "relu": (nn.relu, jax.nn.relu),
    "relu6": (nn.relu6, jax.nn.relu6),
    "gelu_tanh": (nn.gelu, jax.nn.gelu),
    "gelu_exact": (lambda x: nn.gelu(x, approximate=False), lambda x: jax.nn.gelu(x, approximate=False)),
    "silu": (nn.silu, jax.nn.silu),
    "sigmoid": (nn.sigmoid, jax.nn.sigmoid),
    "softplus": (nn.softplus, jax.nn.softplus),
    "log_sigmoid": (nn.log_sigmoid, jax.nn.log_sigmoid),
    "elu": (nn.elu, jax.nn.elu),
    "leaky_relu": (nn.leaky_relu, jax.nn.leaky_relu),
    "softmax": (nn.softmax, jax.nn.softmax),
    "log_softmax": (nn.log_softmax, jax.nn.log_softmax),
    "softmax_axis0": (lambda x: nn.softmax(x, axis=0), lambda x: jax.nn.softmax(x, axis=0)),
    "logsumexp": (lambda x: nn.logsumexp(x, axis=-1), lambda x: jax.nn.logsumexp(x, axis=-1)),
    "logsumexp_all": (nn.logsumexp, jax.nn.logsumexp),
    "standardize": (nn.standardize, jax.nn.standardize),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_and_grad_match_jax(name):
    ours, ref = CASES[name]
    want = np.asarray(ref(X))
    # atol covers f32 cancellation in far tails (e.g. gelu(-30) = -1.8e-6 vs jax's -0.0)
    np.testing.assert_allclose(np.asarray(ours(jnp.asarray(X))), want, rtol=2e-6, atol=3e-6)
    np.testing.assert_allclose(np.asarray(podlet.jit(ours)(jnp.asarray(X))), want, rtol=2e-6, atol=3e-6)
    w = np.arange(want.size, dtype=np.float32).reshape(want.shape)  # a generic cotangent
    g = podlet.grad(lambda x: jnp.sum(ours(x) * jnp.asarray(w)))(jnp.asarray(X))
    gw = jax.grad(lambda x: jnp_ref.sum(ref(x) * w))(X)
    np.testing.assert_allclose(np.asarray(g), np.asarray(gw), rtol=1e-5, atol=5e-5)


@pytest.mark.parametrize("axis", [-1, 0])
def test_one_hot_matches_jax(axis):
    labels = np.array([0, 3, 1, 4, 2], np.int32)
    np.testing.assert_array_equal(np.asarray(nn.one_hot(jnp.asarray(labels), 5, axis=axis)),
                                  np.asarray(jax.nn.one_hot(labels, 5, axis=axis)))
    oh = nn.one_hot(jnp.asarray(labels), 5, dtype=jnp.bfloat16)
    assert oh.dtype == jnp.bfloat16


def test_bf16_activations_stay_bf16():
    x = jnp.asarray(X).astype(jnp.bfloat16)
    for name in ("relu", "gelu_tanh", "silu", "softmax", "log_softmax"):
        out = CASES[name][0](x)
        assert out.dtype == jnp.bfloat16, name
        np.testing.assert_allclose(np.asarray(out).astype(np.float32),
                                   np.asarray(CASES[name][1](jnp_ref.asarray(X, jnp_ref.bfloat16))).astype(np.float32),
                                   rtol=2e-2, atol=2e-2)
