"""Is the synthetic DDSM set learnable but not trivial? A small podlet CNN trained from
scratch at 64 px for a few hundred steps on the seed's pipeline (shuffle, mean_std,
conservative augmentation, batch, drop_remainder), then macro-F1 on the validation split.

    nice -n 10 .venv/bin/python bench/data_learnability.py --steps 400
    nice -n 10 .venv/bin/python bench/data_learnability.py --steps 400 --no-augment
    # does augmentation matter? a small train set, many epochs, with and without
    nice -n 10 .venv/bin/python bench/data_learnability.py --steps 600 --scale 0.02 [--no-augment]

Appends a record to bench/results/data_learnability.json.
"""
import argparse
import json
import os
import time

import numpy as np


def macro_f1(y, p, k):
    f1 = []
    for c in range(k):
        tp = np.sum((p == c) & (y == c))
        fp = np.sum((p == c) & (y != c))
        fn = np.sum((p != c) & (y == c))
        f1.append(0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn))
    return float(np.mean(f1)), [round(float(v), 3) for v in f1]


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--scale", type=float, default=0.2)
    ap.add_argument("--val-scale", type=float, default=0.2, help="validation split scale (1,116 examples)")
    ap.add_argument("--learning-rate", type=float, default=3e-3)
    ap.add_argument("--no-augment", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    import podlet as jax
    import podlet.numpy as jnp
    import podlet.optim as optax
    from podlet import nn, data
    from podlet.training import train_state
    from typing import Any

    class SmallCNN(nn.Module):
        @nn.compact
        def __call__(self, x, *, train: bool):
            for i, f in enumerate((16, 32, 64, 96)):
                x = nn.Conv(f, (3, 3), padding="SAME", use_bias=False)(x)
                x = nn.BatchNorm(use_running_average=not train, momentum=0.9)(x)
                x = nn.relu(x)
                if i < 3:
                    x = nn.max_pool(x, (2, 2), (2, 2))
            return nn.Dense(5)(jnp.mean(x, axis=(1, 2)))

    class TrainState(train_state.TrainState):
        batch_stats: Any = None

    S = args.image_size
    train_src = data.synthetic_ddsm("train", S, args.scale, seed=args.seed)
    val_src = data.synthetic_ddsm("validation", S, args.val_scale, seed=args.seed)
    ds = data.Dataset(train_src).shuffle(4096, seed=args.seed).normalize("mean_std", mean=0.5, std=0.25)
    if not args.no_augment:
        ds = ds.augment(**data.CONSERVATIVE_AUGMENTATION, seed=args.seed)
    ds = ds.repeat().batch(args.batch_size, drop_remainder=True).prefetch(2)

    model = SmallCNN()
    variables = model.init(jax.random.PRNGKey(args.seed), jnp.ones((1, S, S, 1)), train=False)
    sched = optax.warmup_cosine_decay_schedule(0.0, args.learning_rate, args.steps // 10, args.steps, 0.0)
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(sched, weight_decay=1e-4))
    state = TrainState.create(apply_fn=model.apply, params=variables["params"], tx=tx,
                              batch_stats=variables["batch_stats"])
    class_weights = jnp.array([0.5, 1.0, 1.0, 1.3, 1.3])

    @jax.jit
    def step(state, images, labels):
        def loss_fn(params):
            logits, upd = state.apply_fn({"params": params, "batch_stats": state.batch_stats}, images,
                                         train=True, mutable=["batch_stats"])
            ce = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
            return jnp.mean(ce * class_weights[labels]), upd["batch_stats"]
        (loss, bs), g = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
        return state.apply_gradients(grads=g).replace(batch_stats=bs), loss

    @jax.jit
    def predict(state, images):
        return jnp.argmax(model.apply({"params": state.params, "batch_stats": state.batch_stats}, images,
                                      train=False), -1)

    t0 = time.perf_counter()
    it = iter(ds)
    for i in range(args.steps):
        b = next(it)
        state, loss = step(state, b["image"], b["label"])
        if (i + 1) % 50 == 0:
            print(f"step {i + 1}: loss {float(loss):.4f}  {time.perf_counter() - t0:.0f} s", flush=True)
    it.close()
    train_s = time.perf_counter() - t0

    preds, labels = [], []
    for b in data.Dataset(val_src).normalize("mean_std", mean=0.5, std=0.25).batch(256):
        preds.append(np.asarray(predict(state, b["image"])))
        labels.append(b["label"])
    p, y = np.concatenate(preds), np.concatenate(labels)
    f1, per_class = macro_f1(y, p, 5)
    rec = dict(steps=args.steps, batch_size=args.batch_size, image_size=S, scale=args.scale,
               augment=not args.no_augment, learning_rate=args.learning_rate, train_seconds=round(train_s, 1),
               val_examples=int(len(y)), val_accuracy=round(float(np.mean(p == y)), 4),
               val_macro_f1=round(f1, 4), val_f1_per_class=per_class, model="SmallCNN(16-32-64-96)")
    print(json.dumps(rec))
    path = os.path.join(os.path.dirname(__file__), "results", "data_learnability.json")
    old = json.load(open(path)) if os.path.exists(path) else []
    json.dump(old + [rec], open(path, "w"), indent=1)


if __name__ == "__main__":
    main()
