"""A data-parallel sharded jit against the whole jit and pmap, in one run.

    .venv/bin/python bench/sharded_jit.py [--batch 64] [--devices 2,8] [--reps 5]

The same BatchNorm CNN training step (two strided 3x3 convs, BatchNorm, ReLU, global
mean, Dense, softmax cross-entropy, AdamW) at 64x64x1 runs as ``jit(step)`` (whole
arrays), as ``jit(step, in_shardings=...)`` with the batch split over n devices
(cpp/podlet/ir/partition.cc), and as the equivalent ``pmap`` with a pmean of the
gradients. Prints the best of --reps wall times and each one's ratio to the whole jit,
plus the partition report (primitives left unsplit, FLOPs per device vs global).
"""
import argparse

import numpy as np

import podlet
import podlet.optim as optax
from podlet import lax, nn
from podlet.sharding import Mesh, NamedSharding, PartitionSpec as P

from _timing import best  # bench/_timing.py: the shared best-of-n


class CNN(nn.Module):
    @nn.compact
    def __call__(self, x):
        for c in (32, 64):
            x = nn.relu(nn.BatchNorm(use_running_average=False)(nn.Conv(c, (3, 3), strides=2)(x)))
        return nn.Dense(5)(x.mean((1, 2)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--devices", default="2,8")
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    m, tx = CNN(), optax.adamw(1e-3)
    rs = np.random.RandomState(0)
    x = rs.normal(size=(a.batch, 64, 64, 1)).astype(np.float32)
    y = rs.randint(0, 5, size=(a.batch,)).astype(np.int32)
    v = m.init(podlet.random.PRNGKey(0), x)

    def step(params, bs, opt, x, y, axis=None):
        def loss(p):
            logits, upd = m.apply({"params": p, "batch_stats": bs}, x, mutable=["batch_stats"])
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), upd
        (l, upd), g = podlet.value_and_grad(loss, has_aux=True)(params)
        if axis:
            g = lax.pmean(g, axis)
        u, opt = tx.update(g, opt, params)
        return l, optax.apply_updates(params, u), upd["batch_stats"], opt

    args = (v["params"], v["batch_stats"], tx.init(v["params"]), x, y)
    whole = best(podlet.jit(step), args, a.reps)
    print(f"active ISA: {podlet.cpu_info()['active_isa']}, {podlet._core.num_threads()} threads, batch {a.batch}")
    print(f"{'jit (whole arrays)':34s} {whole * 1e3:8.1f} ms  1.00x")
    for n in [int(s) for s in a.devices.split(",")]:
        podlet.config.update("num_devices", max(n, 8))
        mesh = Mesh(np.array(podlet.devices()[:n]), ("data",))
        rep, data = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
        f = podlet.jit(step, in_shardings=(rep, rep, rep, data, data))
        t = best(f, args, a.reps)
        r = f.partition_report(*args)
        print(f"{f'jit, batch split over {n} devices':34s} {t * 1e3:8.1f} ms  {whole / t:.2f}x   unsplit "
              f"{r['unsplit'] or 'none'}, FLOPs/device {r['flops'][0] / r['flops'][1]:.3f} of global")
        podlet.config.update("num_devices", n)
        pf = podlet.pmap(lambda *s: step(*s, axis="b"), axis_name="b", in_axes=(None, None, None, 0, 0))
        pargs = args[:3] + (x.reshape((n, -1) + x.shape[1:]), y.reshape(n, -1))
        t = best(pf, pargs, a.reps)
        print(f"{f'pmap over {n} devices':34s} {t * 1e3:8.1f} ms  {whole / t:.2f}x")
    podlet.config.update("num_devices", 8)


if __name__ == "__main__":
    main()
