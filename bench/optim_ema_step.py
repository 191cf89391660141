"""The optimizer part of the seed's train step on ResNet-18's parameters (~11M f32):
clip_by_global_norm(1.0) + adamw(warmup-cosine, weight_decay) through
TrainState.apply_gradients, then the EMA tree_map, jitted; gradients are inputs.
Times the graph jit executes in three forms, interleaved (shared machine):

  unfused    PODLET_FUSION=0: the traced graph (adamw_update + add + mul, mul, add per leaf)
  elementwise  elementwise fusion only (before the optimizer pass: adamw_update, then one
             fused_elementwise node per leaf for apply_updates' add and the EMA)
  fused      what jit runs now: optimizer fusion, then elementwise fusion (one
             adamw_update per leaf computes the update, applies it and the EMA)

and prints the best and median time of each and the ratios, checking that all three
give the same bits. It also times the jitted step itself (podlet.jit call, pytree
flattening included) with PODLET_FUSION=1 vs 0, interleaved: "jit on" / "jit off".

Then, per optimizer (--optimizers adamw,sgd,lion), the jitted step
clip_by_global_norm(1.0) + <optimizer> + apply_updates on the same parameters in two
forms, interleaved, same bits checked:

  fused      what podlet.optim returns: one adamw_update / sgd_momentum_update /
             lion_update per leaf
  chain      the unfused optax chain (clip, trace or the moments, weight decay, the
             learning rate: elementwise ops, which jit's elementwise fusion then fuses)

    PODLET_NUM_THREADS=2 nice -n 10 .venv/bin/python bench/optim_ema_step.py --reps 15
"""
import argparse
import json
import os
import statistics
import time
from typing import Any

import numpy as np

import podlet
import podlet.numpy as jnp
import podlet.optim as optax
from podlet import _core, models
from podlet import tree_util
from podlet._src.core import to_array
from podlet.training import train_state


class TrainState(train_state.TrainState):
    ema_params: Any = None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    ap.add_argument("--optimizers", default="adamw,sgd,lion",
                    help="fused vs chain rows for these (comma-separated; empty: none)")
    ap.add_argument("--no-ema", action="store_true", help="skip the EMA-step forms")
    args = ap.parse_args()

    model = models.ResNet(stage_sizes=[2, 2, 2, 2], num_classes=5)
    variables = model.init(podlet.random.PRNGKey(0), jnp.ones((1, 32, 32, 1), jnp.float32), train=False)
    params = tree_util.tree_map(lambda p: p.astype(args.dtype), variables["params"])
    n_params = sum(int(np.size(p)) for p in tree_util.tree_leaves(params))
    sched = optax.warmup_cosine_decay_schedule(0.0, 7e-4, 20, 200)
    rng = np.random.default_rng(0)
    grads = tree_util.tree_map(lambda p: jnp.asarray((rng.standard_normal(p.shape) * 1e-3).astype(np.float32))
                               .astype(args.dtype), params)
    ema_decay = 0.999
    res = {"params": n_params, "dtype": args.dtype, "threads": podlet.config.num_threads, "reps": args.reps}
    print(f"ResNet-18 params: {n_params} {args.dtype}, {len(tree_util.tree_leaves(params))} leaves, "
          f"{podlet.config.num_threads} threads, {args.reps} interleaved reps")
    if not args.no_ema:
        res.update(ema_rows(args, model, params, grads, sched, ema_decay))
    names = [n for n in args.optimizers.split(",") if n]
    if names:
        res["optimizers"] = optimizer_rows(names, params, grads, sched, args.reps)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)


def ema_rows(args, model, params, grads, sched, ema_decay):
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(sched, weight_decay=2e-4))
    state = TrainState.create(apply_fn=model.apply, params=params, tx=tx, ema_params=params)

    def step(state, grads):
        new_state = state.apply_gradients(grads=grads)
        ema = tree_util.tree_map(lambda o, n: ema_decay * o + (1.0 - ema_decay) * n, state.ema_params,
                                 new_state.params)
        return new_state.replace(ema_params=ema)

    jstep = podlet.jit(step)
    entry = jstep.lower(state, grads)
    g = entry.graph
    graphs = {"unfused": g, "elementwise": _core.fuse_elementwise(g),
              "fused": _core.fuse_elementwise(_core.fuse_optimizer(g))}
    arrs = [to_array(a) for a in tree_util.tree_leaves(((state, grads), {}))]
    ref = None
    for name, gr in graphs.items():  # warm-up, and the same bits from all three
        out = [np.asarray(o) for o in gr.run(arrs)]
        if ref is None:
            ref = out
        for a, b in zip(out, ref):
            assert a.tobytes() == b.tobytes(), name
    times = {k: [] for k in list(graphs) + ["jit on", "jit off"]}
    for env in ("1", "0"):  # warm-up of both jit paths
        os.environ["PODLET_FUSION"] = env
        jstep(state, grads)
    for _ in range(args.reps):
        for name, gr in graphs.items():
            t0 = time.perf_counter()
            gr.run(arrs)
            times[name].append(time.perf_counter() - t0)
        for name, env in (("jit on", "1"), ("jit off", "0")):
            os.environ["PODLET_FUSION"] = env
            t0 = time.perf_counter()
            tree_util.tree_leaves(jstep(state, grads))
            times[name].append(time.perf_counter() - t0)
    os.environ.pop("PODLET_FUSION", None)
    res = {"prims": {k: gr.prim_counts() for k, gr in graphs.items()}}
    for name in times:
        best, med = min(times[name]), statistics.median(times[name])
        res[name] = {"best_ms": best * 1e3, "median_ms": med * 1e3}
        nodes = f"nodes {graphs[name].num_nodes}" if name in graphs else ""
        print(f"  {name:12s} best {best * 1e3:8.2f} ms  median {med * 1e3:8.2f} ms  {nodes}")
    for base, new in (("unfused", "fused"), ("elementwise", "fused"), ("jit off", "jit on")):
        rb = min(times[base]) / min(times[new])
        rm = statistics.median(times[base]) / statistics.median(times[new])
        res[f"{base} / {new}"] = {"best": rb, "median": rm}
        print(f"  {base} / {new}: {rb:.2f}x (best), {rm:.2f}x (median)")
    return res


def optimizer_rows(names, params, grads, sched, reps):
    """Fused vs chain for each optimizer: the jitted clip + update + apply_updates step."""
    from podlet.optim import alias
    from podlet.optim._base import _chain
    makers = {
        "adamw": (lambda: optax.adamw(sched, weight_decay=2e-4),
                  lambda: alias._adamw_unfused(sched, weight_decay=2e-4)),
        "sgd": (lambda: optax.sgd(sched, momentum=0.9, nesterov=True),
                lambda: alias._sgd_unfused(sched, momentum=0.9, nesterov=True)),
        "lion": (lambda: optax.lion(sched, weight_decay=1e-2), lambda: alias._lion_unfused(sched, weight_decay=1e-2)),
    }
    out = {}
    for name in names:
        fused_tx = optax.chain(optax.clip_by_global_norm(1.0), makers[name][0]())
        chain_tx = _chain(optax.clip_by_global_norm(1.0), makers[name][1]())
        steps, inputs = {}, {}
        for form, tx in (("fused", fused_tx), ("chain", chain_tx)):

            def step(p, s, g, tx=tx):
                u, s = tx.update(g, s, p)
                return optax.apply_updates(p, u), s

            steps[form] = podlet.jit(step)
            inputs[form] = (params, tx.init(params), grads)
        counts = {form: steps[form].lower(*inputs[form]).graph.prim_counts() for form in steps}
        ref = None
        for form in steps:  # warm-up, and the same bits from both
            leaves = [np.asarray(x) for x in tree_util.tree_leaves(steps[form](*inputs[form]))]
            if ref is None:
                ref = leaves
            assert all(a.tobytes() == b.tobytes() for a, b in zip(leaves, ref)), name
        times = {form: [] for form in steps}
        for _ in range(reps):
            for form in steps:
                t0 = time.perf_counter()
                tree_util.tree_leaves(steps[form](*inputs[form]))
                times[form].append(time.perf_counter() - t0)
        row = {"prims": counts}
        for form in steps:
            row[form] = {"best_ms": min(times[form]) * 1e3, "median_ms": statistics.median(times[form]) * 1e3}
        rb = min(times["chain"]) / min(times["fused"])
        rm = statistics.median(times["chain"]) / statistics.median(times["fused"])
        row["chain / fused"] = {"best": rb, "median": rm}
        out[name] = row
        print(f"  {name:6s} fused best {row['fused']['best_ms']:8.2f} ms median {row['fused']['median_ms']:8.2f} ms | "
              f"chain best {row['chain']['best_ms']:8.2f} ms median {row['chain']['median_ms']:8.2f} ms | "
              f"chain / fused {rb:.2f}x (best), {rm:.2f}x (median)")
    return out


if __name__ == "__main__":
    main()
