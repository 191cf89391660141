"""Three steps of a sharded-jit training step on a mesh of every device podlet has;
saves the losses and final parameters (process 0). Run by
tests/test_sharding_partition.py as one process with 4 devices and under
`mpirun -np 2` with 2 devices each.

    python tests/mpi_sharded_worker.py OUT.npz [--mpi]
"""
import sys

import numpy as np

import podlet
import podlet.numpy as jnp
import podlet.optim as optax
from podlet.sharding import Mesh, NamedSharding, PartitionSpec as P


def main():
    out = sys.argv[1]
    if "--mpi" in sys.argv:
        podlet.distributed.initialize()
    mesh = Mesh(np.array(podlet.devices()), ("data",))
    rep, data = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    rs = np.random.RandomState(0)
    params = {"w": rs.normal(size=(5, 16)).astype(np.float32), "v": rs.normal(size=(16, 3)).astype(np.float32)}
    x, y = rs.normal(size=(16, 5)).astype(np.float32), rs.normal(size=(16, 3)).astype(np.float32)
    tx = optax.adam(1e-2)

    def step(params, opt, x, y):
        def loss(p):
            return jnp.mean((jnp.tanh(x @ p["w"]) @ p["v"] - y) ** 2)
        l, g = podlet.value_and_grad(loss)(params)
        u, opt = tx.update(g, opt, params)
        return l, optax.apply_updates(params, u), opt

    f = podlet.jit(step, in_shardings=(rep, rep, data, data))
    assert f.partition_report(params, tx.init(params), x, y)["devices"] == len(podlet.devices())
    opt, losses = tx.init(params), []
    for _ in range(3):
        l, params, opt = f(params, opt, x, y)
        losses.append(np.asarray(l))
    if podlet.process_index() == 0:
        np.savez(out, loss=np.array(losses), **{k: np.asarray(v) for k, v in params.items()})


if __name__ == "__main__":
    main()
