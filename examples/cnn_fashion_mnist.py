"""A ResNet-style CNN on Fashion-MNIST, written exactly like the seed's JAX/Flax code.

ResNetBlock with the zero-init BatchNorm scale, bf16 compute, focal loss, AdamW with
warmup-cosine, gradient clipping, EMA, a TrainState carrying batch_stats, ema_params and
rng, trained with jit. Swap the imports for jax/flax/optax and it runs there too
(`--backend jax`), which is how the figures beside podlet's were measured.

    .venv/bin/python examples/cnn_fashion_mnist.py   # 7 epochs: 91.4% test accuracy (EMA)
"""
import argparse
import sys
import time
from typing import Any

import numpy as np


def build(backend):
    if backend == "jax":
        import jax
        import jax.numpy as jnp
        import flax.linen as nn
        import optax
        from flax import struct
        from flax.training import train_state
    else:
        import podlet as jax
        import podlet.numpy as jnp
        from podlet import nn
        import podlet.optim as optax
        from podlet import struct
        from podlet.training import train_state

    class DropPath(nn.Module):
        rate: float = 0.0

        @nn.compact
        def __call__(self, x, deterministic: bool = True):
            if deterministic or self.rate == 0.0:
                return x
            keep = 1.0 - self.rate
            mask = jax.random.bernoulli(self.make_rng("dropout"), keep, (x.shape[0],) + (1,) * (x.ndim - 1))
            return jnp.where(mask, x / keep, 0.0)

    class ResNetBlock(nn.Module):
        features: int
        stride: int = 1
        drop_path_rate: float = 0.0
        dtype: Any = jnp.float32

        @nn.compact
        def __call__(self, x, *, train: bool):
            residual = x
            x = nn.Conv(self.features, (3, 3), self.stride, padding="SAME", use_bias=False, dtype=self.dtype)(x)
            x = nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-5)(x)
            x = nn.relu(x)
            x = nn.Conv(self.features, (3, 3), 1, padding="SAME", use_bias=False, dtype=self.dtype)(x)
            x = nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-5,
                             scale_init=nn.initializers.zeros_init())(x)
            if residual.shape != x.shape:
                residual = nn.Conv(self.features, (1, 1), self.stride, use_bias=False, dtype=self.dtype)(residual)
                residual = nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-5)(residual)
            x = DropPath(self.drop_path_rate)(x, deterministic=not train)
            return nn.relu(x + residual)

    class SmallResNet(nn.Module):
        num_classes: int = 10
        dtype: Any = jnp.bfloat16

        @nn.compact
        def __call__(self, x, *, train: bool):
            x = nn.Conv(32, (3, 3), padding="SAME", use_bias=False, dtype=self.dtype)(x)
            x = nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-5)(x)
            x = nn.relu(x)
            x = ResNetBlock(64, stride=2, drop_path_rate=0.05, dtype=self.dtype)(x, train=train)
            x = ResNetBlock(128, stride=2, drop_path_rate=0.1, dtype=self.dtype)(x, train=train)
            x = jnp.mean(x, axis=(1, 2))
            x = nn.Dropout(0.1, deterministic=not train)(x)
            return nn.Dense(self.num_classes, dtype=jnp.float32)(x.astype(jnp.float32))

    class TrainState(train_state.TrainState):
        batch_stats: Any = None
        ema_params: Any = None
        rng: Any = struct.field(pytree_node=True, default=None)

    def _softmax_focal_loss(logits, one_hot, gamma=2.0):
        log_probs = jax.nn.log_softmax(logits)
        probs = jnp.exp(log_probs)
        pt = jnp.sum(probs * one_hot, axis=-1)
        ce = -jnp.sum(log_probs * one_hot, axis=-1)
        return ((1.0 - pt) ** gamma) * ce

    def classification_loss(logits, labels, num_classes, label_smoothing=0.03, gamma=2.0):
        one_hot = jax.nn.one_hot(labels, num_classes)
        one_hot = optax.smooth_labels(one_hot, label_smoothing)
        return jnp.mean(_softmax_focal_loss(logits.astype(jnp.float32), one_hot, gamma))

    return dict(jax=jax, jnp=jnp, nn=nn, optax=optax, TrainState=TrainState, SmallResNet=SmallResNet,
                classification_loss=classification_loss)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", choices=["podlet", "jax"], default="podlet")
    ap.add_argument("--epochs", type=int, default=7)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--learning-rate", type=float, default=2e-3)
    ap.add_argument("--ema-decay", type=float, default=0.99)
    ap.add_argument("--limit-steps", type=int, default=0, help="stop each epoch after N steps (smoke runs)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    m = build(args.backend)
    jax, jnp, optax, TrainState = m["jax"], m["jnp"], m["optax"], m["TrainState"]
    from podlet.data import load_fashion_mnist
    xtr, ytr = load_fashion_mnist("train")
    xte, yte = load_fashion_mnist("test")
    norm = lambda x: ((x.astype(np.float32) / 255.0) - 0.2860) / 0.3530
    xtr, xte = norm(xtr), norm(xte)

    model = m["SmallResNet"]()
    steps_per_epoch = len(xtr) // args.batch_size
    if args.limit_steps:
        steps_per_epoch = min(steps_per_epoch, args.limit_steps)
    # optax's decay_steps counts the warmup too: the cosine spans the rest of the run.
    schedule = optax.warmup_cosine_decay_schedule(0.0, args.learning_rate, steps_per_epoch // 2,
                                                  args.epochs * steps_per_epoch, 0.0)
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(schedule, weight_decay=1e-4))
    root = jax.random.PRNGKey(args.seed)
    init_rng, state_rng = jax.random.split(root)
    variables = model.init(init_rng, jnp.ones((1, 28, 28, 1), jnp.float32), train=False)
    state = TrainState.create(apply_fn=model.apply, params=variables["params"], tx=tx,
                              batch_stats=variables["batch_stats"], ema_params=variables["params"], rng=state_rng)
    ema_decay = args.ema_decay

    @jax.jit
    def train_step(state, images, labels):
        dropout_rng, next_rng = jax.random.split(state.rng)

        def loss_fn(params):
            logits, updates = state.apply_fn({"params": params, "batch_stats": state.batch_stats}, images,
                                             train=True, rngs={"dropout": dropout_rng}, mutable=["batch_stats"])
            return m["classification_loss"](logits, labels, 10), updates["batch_stats"]

        (loss, new_bs), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
        new_state = state.apply_gradients(grads=grads).replace(batch_stats=new_bs, rng=next_rng)
        ema = jax.tree_util.tree_map(lambda o, n: ema_decay * o + (1.0 - ema_decay) * n,
                                     state.ema_params, new_state.params)
        return new_state.replace(ema_params=ema), loss

    @jax.jit
    def predict(params, batch_stats, images):
        return jnp.argmax(model.apply({"params": params, "batch_stats": batch_stats}, images, train=False), -1)

    rng = np.random.default_rng(args.seed)
    results = []
    for epoch in range(1, args.epochs + 1):
        perm = rng.permutation(len(xtr))
        t0 = time.perf_counter()
        losses = []
        for i in range(steps_per_epoch):
            idx = perm[i * args.batch_size:(i + 1) * args.batch_size]
            state, loss = train_step(state, xtr[idx], ytr[idx])
            losses.append(loss)
        loss_mean = float(np.mean([float(l) for l in losses]))
        dt = time.perf_counter() - t0
        preds = np.concatenate([np.asarray(predict(state.ema_params, state.batch_stats, xte[i:i + 500]))
                                for i in range(0, len(xte), 500)])
        acc = float(np.mean(preds == yte))
        ips = steps_per_epoch * args.batch_size / dt
        results.append({"epoch": epoch, "loss": loss_mean, "test_accuracy": acc, "images_per_s": ips})
        print(f"[{args.backend}] epoch {epoch}: loss {loss_mean:.4f}  test accuracy (EMA) {acc:.4f}  "
              f"{ips:,.0f} images/s", flush=True)
    return results


if __name__ == "__main__":
    main()
