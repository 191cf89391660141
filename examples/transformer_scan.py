"""A small transformer sequence classifier whose layer stack is ``nn.scan`` over blocks.

The blocks' parameters are stacked on a leading layer axis under ``params/layers``
(exactly Flax's layout for ``nn.scan(Block, variable_axes={'params': 0},
split_rngs={'params': True})``), so the whole stack is traced once however deep it is.
The task is synthetic: classify whether a sequence of random tokens contains more
tokens of the upper half of the vocabulary than of the lower half. Trained with
``podlet.optim.adamw`` in one ``jit(value_and_grad(...))`` step.

    .venv/bin/python examples/transformer_scan.py --steps 200
"""
import argparse
import functools
import time

import numpy as np

import podlet as jax
import podlet.numpy as jnp
import podlet.optim as optax
from podlet import nn


class Block(nn.Module):
    """Pre-LN transformer block, scanned: ``(x, _) -> (x, None)``."""
    d_model: int
    num_heads: int
    mlp_ratio: int = 4
    remat: bool = False

    @nn.compact
    def __call__(self, x, _):
        h = nn.LayerNorm()(x)
        h = nn.MultiHeadDotProductAttention(num_heads=self.num_heads)(h, h)
        x = x + h
        h = nn.LayerNorm()(x)
        h = nn.gelu(nn.Dense(self.mlp_ratio * self.d_model)(h))
        x = x + nn.Dense(self.d_model)(h)
        return x, None


class Classifier(nn.Module):
    vocab: int = 16
    seq_len: int = 16
    d_model: int = 32
    num_heads: int = 2
    num_layers: int = 4
    num_classes: int = 2
    remat: bool = False

    @nn.compact
    def __call__(self, tokens):
        x = nn.one_hot(tokens, self.vocab) @ self.param("embed", nn.initializers.normal(0.02),
                                                        (self.vocab, self.d_model))
        x = x + self.param("pos", nn.initializers.normal(0.02), (self.seq_len, self.d_model))
        block = nn.remat(Block) if self.remat else Block
        Stack = nn.scan(block, variable_axes={"params": 0}, split_rngs={"params": True}, length=self.num_layers)
        x, _ = Stack(self.d_model, self.num_heads, name="layers")(x, None)
        x = nn.LayerNorm()(jnp.mean(x, axis=1))
        return nn.Dense(self.num_classes)(x)


def make_batch(rng, batch, seq_len, vocab):
    tokens = rng.integers(0, vocab, (batch, seq_len)).astype(np.int32)
    labels = (np.sum(tokens >= vocab // 2, axis=1) > seq_len // 2).astype(np.int32)
    return tokens, labels


def loss_fn(params, *, model, tokens, labels):
    logits = model.apply({"params": params}, tokens)
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--remat", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    model = Classifier(seq_len=args.seq_len, d_model=args.d_model, num_layers=args.layers, remat=args.remat)
    rng = np.random.default_rng(args.seed)
    tokens, _ = make_batch(rng, args.batch_size, args.seq_len, model.vocab)
    params = model.init(jax.random.PRNGKey(args.seed), jnp.asarray(tokens))["params"]
    tx = optax.adamw(args.lr, weight_decay=1e-4)
    opt_state = tx.init(params)

    @jax.jit
    def train_step(params, opt_state, tokens, labels):
        loss, grads = jax.value_and_grad(functools.partial(loss_fn, model=model))(params, tokens=tokens,
                                                                                  labels=labels)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    losses = []
    t0 = time.perf_counter()
    for step in range(1, args.steps + 1):
        tokens, labels = make_batch(rng, args.batch_size, args.seq_len, model.vocab)
        params, opt_state, loss = train_step(params, opt_state, tokens, labels)
        losses.append(float(loss))
        if step % max(1, args.steps // 10) == 0 or step == args.steps:
            print(f"step {step}: loss {np.mean(losses[-10:]):.4f}", flush=True)
    dt = time.perf_counter() - t0
    tokens, labels = make_batch(np.random.default_rng(args.seed + 1), 512, args.seq_len, model.vocab)
    acc = float(np.mean(np.asarray(jnp.argmax(model.apply({"params": params}, tokens), -1)) == labels))
    print(f"{args.steps} steps in {dt:.1f}s; held-out accuracy {acc:.3f}; "
          f"layer-stacked kernel {tuple(params['layers']['Dense_0']['kernel'].shape)}")
    return params, losses, acc


if __name__ == "__main__":
    main()
