"""The MLP of a typical JAX tutorial, trained on Fashion-MNIST with podlet.

784-1024-512-10, ReLU, softmax cross-entropy, Adam written by hand with podlet.numpy,
one jit(value_and_grad(...)) step. Run: .venv/bin/python examples/mlp_fashion_mnist.py
"""
import argparse
import functools
import time

import numpy as np

import podlet as jax
import podlet.numpy as jnp
from podlet import nn
from podlet.data import load_fashion_mnist


def init_mlp(key, sizes):
    params = []
    keys = jax.random.split(key, len(sizes) - 1)
    for k, (m, n) in zip(keys, zip(sizes[:-1], sizes[1:])):
        w = jax.random.normal(k, (m, n)) * np.sqrt(2.0 / m)   # He init for ReLU
        params.append({"w": w, "b": jnp.zeros((n,))})
    return params


def mlp(params, x):
    for layer in params[:-1]:
        x = nn.relu(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def loss_fn(params, x, y):
    logits = mlp(params, x)
    return -jnp.mean(jnp.sum(nn.log_softmax(logits) * nn.one_hot(y, 10), axis=-1))


def adam_init(params):
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    return {"m": zeros, "v": zeros, "t": jnp.zeros((), jnp.float32)}


def adam_update(params, grads, state, lr, b1=0.9, b2=0.999, eps=1e-8):
    t = state["t"] + 1.0
    m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, state["m"], grads)
    v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, state["v"], grads)
    mhat_scale = 1.0 / (1.0 - b1 ** t)
    vhat_scale = 1.0 / (1.0 - b2 ** t)
    params = jax.tree_util.tree_map(
        lambda p, m, v: p - lr * (m * mhat_scale) / (jnp.sqrt(v * vhat_scale) + eps), params, m, v)
    return params, {"m": m, "v": v, "t": t}


def cosine_lr(step, total_steps, peak=1e-3):
    """Cosine decay from `peak` to 0 over the run (step is a traced scalar)."""
    return peak * 0.5 * (1.0 + jnp.cos(np.pi * jnp.minimum(step / total_steps, 1.0)))


@functools.partial(jax.jit, static_argnames="total_steps")
def train_step(params, opt_state, x, y, total_steps):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    params, opt_state = adam_update(params, grads, opt_state, cosine_lr(opt_state["t"], total_steps))
    return params, opt_state, loss


@jax.jit
def predict(params, x):
    return jnp.argmax(mlp(params, x), axis=-1)


def preprocess(images):
    return (images.reshape(len(images), -1).astype(np.float32) / 255.0 - 0.2860) / 0.3530


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    xtr, ytr = load_fashion_mnist("train")
    xte, yte = load_fashion_mnist("test")
    xtr, xte = preprocess(xtr), preprocess(xte)
    params = init_mlp(jax.random.PRNGKey(args.seed), [784, 1024, 512, 10])
    opt_state = adam_init(params)
    rng = np.random.default_rng(args.seed)
    steps = len(xtr) // args.batch_size
    acc = 0.0
    for epoch in range(1, args.epochs + 1):
        perm = rng.permutation(len(xtr))
        t0 = time.perf_counter()
        losses = []
        for i in range(steps):
            idx = perm[i * args.batch_size:(i + 1) * args.batch_size]
            params, opt_state, loss = train_step(params, opt_state, xtr[idx], ytr[idx],
                                                 total_steps=steps * args.epochs)
            losses.append(loss)
        dt = time.perf_counter() - t0
        preds = np.concatenate([np.asarray(predict(params, xte[i:i + 1000])) for i in range(0, len(xte), 1000)])
        acc = float(np.mean(preds == yte))
        print(f"epoch {epoch}: loss {float(np.mean([float(l) for l in losses])):.4f}  "
              f"test accuracy {acc:.4f}  {steps * args.batch_size / dt:,.0f} images/s", flush=True)
    return acc


if __name__ == "__main__":
    main()
