"""The lifted-transform examples, on tiny configurations."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))


def test_transformer_scan_trains_and_stacks_layers(capsys):
    import transformer_scan
    params, losses, acc = transformer_scan.main(["--steps", "60", "--batch-size", "16", "--layers", "2",
                                                 "--d-model", "16", "--seq-len", "8", "--lr", "3e-3"])
    assert np.mean(losses[-10:]) < np.mean(losses[:10]) - 0.05, losses
    layers = params["layers"]
    assert tuple(layers["Dense_0"]["kernel"].shape) == (2, 16, 64)
    assert tuple(layers["MultiHeadDotProductAttention_0"]["query"]["kernel"].shape) == (2, 16, 2, 8)
    assert tuple(layers["LayerNorm_0"]["scale"].shape) == (2, 16)
    assert "layer-stacked kernel (2, 16, 64)" in capsys.readouterr().out


def test_dp_sgd_clips_per_example_and_loss_decreases():
    import dp_sgd_mnist
    import podlet as jax
    import podlet.numpy as jnp
    from mlp_fashion_mnist import init_mlp

    # clipping bounds every example's norm, and leaves small gradients alone
    params = init_mlp(jax.random.PRNGKey(0), [784, 32, 10])
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 784)).astype(np.float32)
    y = rng.integers(0, 10, 8).astype(np.int32)
    grads = dp_sgd_mnist.per_example_grads(params, x, y)
    norms = np.asarray(dp_sgd_mnist.global_norms(grads))
    clipped, _ = dp_sgd_mnist.clip_per_example(grads, 0.5)
    cnorms = np.asarray(dp_sgd_mnist.global_norms(clipped))
    assert np.all(cnorms <= 0.5 * (1 + 1e-5))
    np.testing.assert_allclose(cnorms, np.minimum(norms, 0.5), rtol=1e-5)
    # per-example gradients equal one grad call per example
    g0 = jax.grad(dp_sgd_mnist.example_loss)(params, x[3], y[3])
    np.testing.assert_allclose(np.asarray(grads[0]["w"][3]), np.asarray(g0[0]["w"]), rtol=1e-5, atol=1e-6)

    out = dp_sgd_mnist.main(["--steps", "40", "--batch-size", "32", "--train-size", "2000", "--hidden", "64",
                             "--lr", "0.2", "--noise-multiplier", "0.5"])
    losses = out["losses"]
    assert np.mean(losses[-8:]) < np.mean(losses[:8]), losses
    assert out["max_clipped_norm"] <= 1.0 * (1 + 1e-5)
