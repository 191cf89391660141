"""Trains a small BatchNorm + dropout network for a few pmap steps and saves the final
parameters. Run by tests/test_mpi.py both as one process with 8 devices and under
`mpirun -np 2` with 4 devices each (each process feeds only its own devices' shard).

    python tests/mpi_worker.py OUT.npz STEPS [--mpi] [--die-at STEP | --hang-at STEP]
"""
import os
import sys
import time

import numpy as np

import podlet as jax
import podlet.numpy as jnp
import podlet.optim as optax
from podlet import jax_utils, lax, nn
from podlet.training import train_state


class Net(nn.Module):
    @nn.compact
    def __call__(self, x, train):
        x = nn.Conv(8, (3, 3), strides=2)(x)
        x = nn.BatchNorm(use_running_average=not train, momentum=0.9)(x)
        x = nn.relu(x)
        x = x.mean(axis=(1, 2))
        x = nn.Dropout(0.2, deterministic=not train)(x)
        return nn.Dense(4)(x)


class State(train_state.TrainState):
    batch_stats: dict = None
    rng: jax.Array = None


def main():
    out, steps = sys.argv[1], int(sys.argv[2])
    die_at = int(sys.argv[sys.argv.index("--die-at") + 1]) if "--die-at" in sys.argv else -1
    hang_at = int(sys.argv[sys.argv.index("--hang-at") + 1]) if "--hang-at" in sys.argv else -1
    if "--mpi" in sys.argv:
        jax.distributed.initialize()
    n_global, n_local, pi = jax.device_count(), jax.local_device_count(), jax.process_index()
    assert n_global == 8, n_global
    model = Net()
    v = model.init(jax.random.PRNGKey(0), jnp.ones((1, 8, 8, 1)), train=False)
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(3e-3, weight_decay=1e-4))
    state = State.create(apply_fn=model.apply, params=v["params"], tx=tx, batch_stats=v["batch_stats"],
                         rng=jax.random.PRNGKey(1))

    def step(state, batch):
        drop, nxt = jax.random.split(state.rng)
        drop = jax.random.fold_in(drop, lax.axis_index("batch"))

        def loss_fn(p):
            logits, upd = model.apply({"params": p, "batch_stats": state.batch_stats}, batch["x"], train=True,
                                      rngs={"dropout": drop}, mutable=["batch_stats"])
            return optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"]).mean(), upd["batch_stats"]

        (loss, bs), g = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
        g = lax.pmean(g, "batch")
        state = state.apply_gradients(grads=g).replace(batch_stats=lax.pmean(bs, "batch"), rng=nxt)
        return state, lax.pmean(loss, "batch")

    p_step = jax.pmap(step, axis_name="batch")
    state = jax_utils.replicate(state)
    data = np.random.default_rng(7)
    for s in range(steps):
        gx = data.standard_normal((n_global, 4, 8, 8, 1)).astype(np.float32)  # the global batch
        gy = data.integers(0, 4, (n_global, 4)).astype(np.int32)
        mine = slice(pi * n_local, (pi + 1) * n_local)  # this process's devices
        if s == die_at and pi == 1:
            os._exit(3)
        if s == hang_at and pi == 1:
            time.sleep(3600)
        state, loss = p_step(state, {"x": gx[mine], "y": gy[mine]})
    state = jax_utils.unreplicate(state)
    if pi == 0:  # only process 0 writes
        leaves = jax.tree_util.tree_leaves((state.params, state.batch_stats))
        np.savez(out, *[np.asarray(l) for l in leaves], loss=np.asarray(loss))


if __name__ == "__main__":
    main()
