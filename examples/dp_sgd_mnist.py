"""DP-SGD on Fashion-MNIST: per-example gradients with vmap(grad), clipping, noise.

Each step computes one gradient per example with
``podlet.vmap(podlet.grad(loss), in_axes=(None, 0, 0))``, clips every example's
gradient to L2 norm ``--l2-clip`` (over all parameters), averages them and adds
Gaussian noise of standard deviation ``noise_multiplier * l2_clip / batch_size`` (the
DP-SGD recipe of Abadi et al. 2016; no privacy accounting here). The model is the
Fashion-MNIST MLP of examples/mlp_fashion_mnist.py, with the same data loader.

    .venv/bin/python examples/dp_sgd_mnist.py --steps 500
"""
import argparse
import functools
import time

import numpy as np

import podlet as jax
import podlet.numpy as jnp
from podlet.data import load_fashion_mnist

from mlp_fashion_mnist import init_mlp, mlp, loss_fn, preprocess


def example_loss(params, x, y):
    """The loss of one example (x: (784,), y: ())."""
    return loss_fn(params, x[None], y[None])


per_example_grads = jax.vmap(jax.grad(example_loss), in_axes=(None, 0, 0))


def global_norms(grads):
    """The L2 norm over all parameters of every example's gradient: shape (batch,)."""
    leaves = jax.tree_util.tree_leaves(grads)
    return jnp.sqrt(sum(jnp.sum(g.reshape(g.shape[0], -1) ** 2, axis=1) for g in leaves))


def clip_per_example(grads, l2_clip):
    norms = global_norms(grads)
    scale = jnp.minimum(1.0, l2_clip / (norms + 1e-12))
    return jax.tree_util.tree_map(lambda g: g * scale.reshape((-1,) + (1,) * (g.ndim - 1)), grads), norms


@functools.partial(jax.jit, static_argnames=("l2_clip", "noise_multiplier", "lr"))
def dp_step(params, x, y, key, l2_clip, noise_multiplier, lr):
    grads = per_example_grads(params, x, y)
    clipped, norms = clip_per_example(grads, l2_clip)
    batch = x.shape[0]
    mean = jax.tree_util.tree_map(lambda g: jnp.sum(g, axis=0) / batch, clipped)
    leaves, tree = jax.tree_util.tree_flatten(mean)
    keys = jax.random.split(key, len(leaves))
    noisy = [g + noise_multiplier * l2_clip / batch * jax.random.normal(k, g.shape) for g, k in zip(leaves, keys)]
    noisy = jax.tree_util.tree_unflatten(tree, noisy)
    params = jax.tree_util.tree_map(lambda p, g: p - lr * g, params, noisy)
    return params, loss_fn(params, x, y), norms, global_norms(clipped)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--train-size", type=int, default=0, help="use the first N training images (0: all)")
    ap.add_argument("--l2-clip", type=float, default=1.0)
    ap.add_argument("--noise-multiplier", type=float, default=1.1)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--hidden", type=int, nargs="+", default=[1024, 512])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    xtr, ytr = load_fashion_mnist("train")
    xte, yte = load_fashion_mnist("test")
    if args.train_size:
        xtr, ytr = xtr[:args.train_size], ytr[:args.train_size]
    xtr, xte = preprocess(xtr), preprocess(xte)
    params = init_mlp(jax.random.PRNGKey(args.seed), [784] + list(args.hidden) + [10])
    rng = np.random.default_rng(args.seed)
    key = jax.random.PRNGKey(args.seed + 1)
    losses, max_clipped = [], 0.0
    t0 = time.perf_counter()
    for step in range(1, args.steps + 1):
        idx = rng.choice(len(xtr), args.batch_size, replace=False)
        key, sub = jax.random.split(key)
        params, loss, norms, clipped_norms = dp_step(params, xtr[idx], ytr[idx], sub, l2_clip=args.l2_clip,
                                                     noise_multiplier=args.noise_multiplier, lr=args.lr)
        losses.append(float(loss))
        max_clipped = max(max_clipped, float(np.max(np.asarray(clipped_norms))))
        if step % max(1, args.steps // 10) == 0 or step == args.steps:
            print(f"step {step}: loss {np.mean(losses[-10:]):.4f}  median per-example grad norm "
                  f"{float(np.median(np.asarray(norms))):.3f}  max clipped norm {max_clipped:.4f}", flush=True)
    dt = time.perf_counter() - t0
    preds = np.concatenate([np.asarray(jnp.argmax(mlp(params, xte[i:i + 1000]), -1))
                            for i in range(0, len(xte), 1000)])
    acc = float(np.mean(preds == yte))
    print(f"{args.steps} DP-SGD steps in {dt:.1f}s ({args.steps * args.batch_size / dt:,.0f} examples/s); "
          f"test accuracy {acc:.4f}")
    return {"losses": losses, "max_clipped_norm": max_clipped, "accuracy": acc}


if __name__ == "__main__":
    main()
