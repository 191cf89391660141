"""The seed's pmap'd train step, verbatim apart from imports, on the Fashion-MNIST CNN of
examples/cnn_fashion_mnist.py. Imported by tests/test_pmap_train.py for podlet, and run
as a script in a subprocess for JAX (whose forced host device count must be set before
jax starts):

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python tests/pmap_seed_step.py jax IN.npz OUT.npz
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import cnn_fashion_mnist  # noqa: E402


def make_step(m, model, ema_decay, num_classes=10):
    jax, jnp = m["jax"], m["jnp"]

    def classification_loss(logits, labels):
        return m["classification_loss"](logits, labels, num_classes)

    def _state_variables(state):
        return {"batch_stats": state.batch_stats}

    # --- the seed's train step (write-up, "With those five pieces in hand") ---
    def train_step(state, batch):
        dropout_rng, next_rng = jax.random.split(state.rng)
        dropout_rng = jax.random.fold_in(dropout_rng, jax.lax.axis_index("batch"))

        def loss_fn(params):
            variables = _state_variables(state) | {"params": params}
            logits, updates = model.apply(
                variables, batch["image"], train=True,
                rngs={"dropout": dropout_rng},
                mutable=["batch_stats"],
            )
            loss = classification_loss(logits, batch["label"])
            return loss, (logits, updates["batch_stats"])

        (loss, (logits, new_bs)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
        grads = jax.lax.pmean(grads, axis_name="batch")
        loss = jax.lax.pmean(loss, axis_name="batch")
        new_state = state.apply_gradients(grads=grads).replace(
            batch_stats=jax.lax.pmean(new_bs, axis_name="batch"),
            rng=next_rng,
        )
        if ema_decay is not None:
            ema = jax.tree_util.tree_map(
                lambda o, n: ema_decay * o + (1.0 - ema_decay) * n,
                state.ema_params, new_state.params,
            )
            new_state = new_state.replace(ema_params=ema)
        return new_state, {"loss": loss}

    return jax.pmap(train_step, axis_name="batch")


def build_state(m, dtype_name="float32", seed=0, lr=1e-3):
    jax, jnp, optax = m["jax"], m["jnp"], m["optax"]
    model = m["SmallResNet"](dtype=getattr(jnp, dtype_name))
    init_rng, state_rng = jax.random.split(jax.random.PRNGKey(seed))
    variables = model.init(init_rng, jnp.ones((1, 28, 28, 1), jnp.float32), train=False)
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(lr, weight_decay=1e-4))
    state = m["TrainState"].create(apply_fn=model.apply, params=variables["params"], tx=tx,
                                   batch_stats=variables["batch_stats"], ema_params=variables["params"],
                                   rng=state_rng)
    return model, state


def flat(tree, jax):
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {jax.tree_util.keystr(p): np.asarray(v) for p, v in leaves}


def run(backend, images, labels, steps, dtype_name="float32", ema_decay=0.99):
    """Trains `steps` steps on (steps, devices, per_device, 28, 28, 1) batches; returns the
    flattened unreplicated params, batch_stats, ema_params and the per-step losses."""
    m = cnn_fashion_mnist.build(backend)
    jax = m["jax"]
    if backend == "jax":
        from flax import jax_utils
    else:
        from podlet import jax_utils
    model, state = build_state(m, dtype_name)
    p_step = make_step(m, model, ema_decay)
    state = jax_utils.replicate(state)
    losses = []
    for s in range(steps):
        state, metrics = p_step(state, {"image": images[s], "label": labels[s]})
        losses.append(np.asarray(metrics["loss"]))
    state = jax_utils.unreplicate(state)
    out = {}
    for name in ("params", "batch_stats", "ema_params"):
        for k, v in flat(getattr(state, name), jax).items():
            out[f"{name}{k}"] = v
    out["losses"] = np.stack(losses)
    return out


if __name__ == "__main__":
    backend, src, dst = sys.argv[1:4]
    d = np.load(src)
    res = run(backend, d["images"], d["labels"], int(d["steps"]), str(d["dtype"]))
    np.savez(dst, **res)
