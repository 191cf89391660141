"""What pmap costs: the seed's pmap'd train step (pmean of grads, loss and batch stats;
the dropout key folded with axis_index; AdamW after clipping; EMA after the update) of
ResNet-18 (``podlet.models.ResNet(stage_sizes=[2, 2, 2, 2], num_classes=5)``) at one
global batch, on 8 devices (8 x batch/8) and on 1 device (1 x batch), in podlet (8
virtual devices) and in JAX + Flax + Optax (8 forced host devices,
``XLA_FLAGS=--xla_force_host_platform_device_count=8``), all in one run. Each
framework/device count runs in its own subprocess, nice'd, on --threads threads. Prints
images/s and the overhead of 8 devices over 1 (time8 / time1 - 1, same framework);
writes bench/results/pmap_overhead.json.

    .venv/bin/python bench/pmap_overhead.py --rounds 3 --steps 5 --profile   # all four, 3 times (~8 min)
    .venv/bin/python bench/pmap_overhead.py --frameworks podlet --size 112 --rounds 1

``--profile`` adds podlet.profile's per-primitive table of one step of each podlet run
(the pmap executor's nodes, by how they ran: once for replicated values, merged over the
replicas, per replica, or as a collective) and the difference 8 - 1 by primitive.

Timed steps follow one untimed step (trace / compile / warm-up); the figure is the best
timed step (a shared machine: the best is the least disturbed). The step is one code
text for both frameworks (``seed_train_step``), the model the same ResNet-18 (Flax's
copy is bench/train_step.py's ``flax_resnet``), compute in --dtype (bf16: the seed's
``use_bfloat16``; params, optimizer state and BatchNorm statistics float32).
"""
import argparse
import json
import os
import resource
import sys
import time

import numpy as np

from train_step import run_worker, timed_steps  # bench/ is the script's directory

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STAGES = [2, 2, 2, 2]
NUM_CLASSES = 5
EMA_DECAY = 0.999


def seed_train_step(jax, optax, ema_decay):
    """The seed's train step (the write-up's, with a plain cross-entropy loss: the loss
    is not what is timed here); `jax`/`optax` are the framework's modules."""

    def train_step(state, batch):
        dropout_rng, next_rng = jax.random.split(state.rng)
        dropout_rng = jax.random.fold_in(dropout_rng, jax.lax.axis_index("batch"))

        def loss_fn(params):
            variables = {"batch_stats": state.batch_stats, "params": params}
            logits, updates = state.apply_fn(
                variables, batch["image"], train=True,
                rngs={"dropout": dropout_rng},
                mutable=["batch_stats"],
            )
            loss = optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"]).mean()
            return loss, (logits, updates["batch_stats"])

        (loss, (logits, new_bs)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
        grads = jax.lax.pmean(grads, axis_name="batch")
        loss = jax.lax.pmean(loss, axis_name="batch")
        new_state = state.apply_gradients(grads=grads).replace(
            batch_stats=jax.lax.pmean(new_bs, axis_name="batch"),
            rng=next_rng,
        )
        ema = jax.tree_util.tree_map(
            lambda o, n: ema_decay * o + (1.0 - ema_decay) * n,
            state.ema_params, new_state.params,
        )
        new_state = new_state.replace(ema_params=ema)
        return new_state, {"loss": loss}

    return train_step


def global_batch(batch, size, n):
    """The same global batch for every run, as (n, batch // n, size, size, 1)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, size, size, 1)).astype(np.float32)
    y = rng.integers(0, NUM_CLASSES, batch).astype(np.int32)
    return {"image": x.reshape((n, batch // n) + x.shape[1:]), "label": y.reshape(n, batch // n)}


def optimizer(optax):
    return optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3, weight_decay=1e-4))


# ---------------------------------------------------------------------------------
def run_podlet(n, dtype, batch, size, steps, profile):
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import podlet as jax
    import podlet.numpy as jnp
    import podlet.optim as optax
    from podlet import jax_utils, models, profiler
    from podlet.training.steps import TrainState

    assert jax.local_device_count() == n, (jax.local_device_count(), n)
    model = models.ResNet(stage_sizes=STAGES, num_classes=NUM_CLASSES,
                          dtype=jnp.bfloat16 if dtype == "bf16" else jnp.float32)
    init_rng, state_rng = jax.random.split(jax.random.PRNGKey(0))
    v = model.init(init_rng, jnp.zeros((1, size, size, 1), jnp.float32), train=False)
    state = TrainState.create(apply_fn=model.apply, params=v["params"], tx=optimizer(optax),
                              batch_stats=v["batch_stats"], ema_params=v["params"], rng=state_rng)
    p_step = jax.pmap(seed_train_step(jax, optax, EMA_DECAY), axis_name="batch", donate_argnums=(0,))
    b = global_batch(batch, size, n)
    box = {"s": jax_utils.replicate(state)}

    def step():
        box["s"], m = p_step(box["s"], b)
        float(m["loss"][0])

    first, ts = timed_steps(step, steps)
    out = {"first_step_s": first, "step_s": ts}
    if profile:  # the least disturbed of 3 profiled steps
        stats = min((profiler.run(step, quiet=True, warmup=0) for _ in range(3)), key=lambda s: s["wall_seconds"])
        out["profile"] = {"ops": stats["ops"], "wall_seconds": stats["wall_seconds"],
                          "op_seconds": stats["op_seconds"], "peak_memory_bytes": stats["peak_memory_bytes"]}
        out["profile_table"] = profiler.format_table(stats)
    return out


def run_jax(n, dtype, batch, size, steps):
    import jax
    import jax.numpy as jnp
    import optax
    from flax import jax_utils, struct
    from flax.training import train_state
    sys.path.insert(0, HERE)
    from train_step import flax_resnet

    assert jax.local_device_count() == n, (jax.local_device_count(), n)

    class TrainState(train_state.TrainState):
        batch_stats: dict = None
        ema_params: dict = None
        rng: jax.Array = struct.field(pytree_node=True, default=None)

    model = flax_resnet(STAGES, jnp.bfloat16 if dtype == "bf16" else jnp.float32)
    init_rng, state_rng = jax.random.split(jax.random.PRNGKey(0))
    v = model.init(init_rng, jnp.zeros((1, size, size, 1), jnp.float32), train=False)
    state = TrainState.create(apply_fn=model.apply, params=v["params"], tx=optimizer(optax),
                              batch_stats=v["batch_stats"], ema_params=v["params"], rng=state_rng)
    p_step = jax.pmap(seed_train_step(jax, optax, EMA_DECAY), axis_name="batch", donate_argnums=(0,))
    b = global_batch(batch, size, n)  # host arrays: pmap moves each device's slice (~1 ms here)
    box = {"s": jax_utils.replicate(state)}

    def step():
        box["s"], m = p_step(box["s"], b)
        jax.block_until_ready(box["s"])
        float(m["loss"][0])

    first, ts = timed_steps(step, steps)
    return {"first_step_s": first, "step_s": ts}


# ---------------------------------------------------------------------------------
def worker(a):
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    if a.framework == "podlet":
        r = run_podlet(a.devices, a.dtype, a.batch, a.size, a.steps, a.profile)
    else:
        r = run_jax(a.devices, a.dtype, a.batch, a.size, a.steps)
    r["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print("RESULT " + json.dumps(r), flush=True)


def _env(framework, n, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    if framework == "podlet":
        env.update(PODLET_NUM_DEVICES=str(n), PODLET_NUM_THREADS=str(threads))
    else:
        flags = [f for f in env.get("XLA_FLAGS", "").split() if "force_host_platform_device_count" not in f]
        env["XLA_FLAGS"] = " ".join(flags + [f"--xla_force_host_platform_device_count={n}"])
        env.update(JAX_PLATFORMS="cpu")
    return env


def profile_diff(r1, r8):
    """Seconds by primitive (all ways it ran) in the 8-device step minus the 1-device step."""
    def by_prim(r):
        d = {}
        for o in r["profile"]["ops"]:
            prim = o["prim"].split(" [")[0]
            d[prim] = d.get(prim, 0.0) + o["seconds"]
        return d
    a, b = by_prim(r1), by_prim(r8)
    rows = sorted(((b.get(k, 0.0) - a.get(k, 0.0), k, a.get(k, 0.0), b.get(k, 0.0)) for k in set(a) | set(b)),
                  reverse=True)
    return [{"prim": k, "seconds_1": s1, "seconds_8": s8, "delta_seconds": d} for d, k, s1, s8 in rows]


def trim(results, keep=25):
    """Keeps the result file small: the profiled ops of the runs the figures come from (the
    best per framework and device count), their `keep` costliest primitives, and the
    profile deltas above 0.5 ms."""
    best = {}
    for r in results["runs"]:
        k = (r["framework"], r["devices"])
        if "best_step_s" in r and (k not in best or r["best_step_s"] < best[k]["best_step_s"]):
            best[k] = r
    for r in results["runs"]:
        prof = r.get("profile")
        if not prof:
            continue
        if r is best.get((r["framework"], r["devices"])) and "ops" in prof:
            prof["ops"] = [{k: o[k] for k in ("prim", "dtype", "calls", "seconds", "gflops_per_s")}
                           for o in sorted(prof["ops"], key=lambda o: -o["seconds"])[:keep]]
        else:
            prof.pop("ops", None)
    for ov in results["overhead"].values():
        if "profile_delta" in ov:
            ov["profile_delta"] = [d for d in ov["profile_delta"] if abs(d["delta_seconds"]) > 5e-4]
    return results


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--frameworks", default="podlet,jax")
    p.add_argument("--devices", default="1,8", help="device counts to run (the overhead is the last vs the first)")
    p.add_argument("--dtype", default="bf16", choices=["f32", "bf16"])
    p.add_argument("--batch", type=int, default=32, help="the global batch")
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=5, help="timed steps after one untimed step")
    p.add_argument("--rounds", type=int, default=3,
                   help="run every framework/device count this many times, interleaved (best of all rounds)")
    p.add_argument("--profile", action="store_true", help="podlet.profile one more step of each podlet run")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    p.add_argument("--out", default=os.path.join(HERE, "results", "pmap_overhead.json"))
    p.add_argument("--worker", nargs=2, metavar=("FRAMEWORK", "DEVICES"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        a.framework, a.devices = a.worker[0], int(a.worker[1])
        return worker(a)

    devices = [int(d) for d in a.devices.split(",")]
    print(f"ResNet-18, global batch {a.batch}, {a.size}x{a.size}x1, {NUM_CLASSES} classes, {a.dtype} compute, "
          f"{a.threads} threads, best of {a.steps} steps after one untimed; shared machine.", flush=True)
    results = {"model": "ResNet-18 (podlet.models.ResNet(stage_sizes=[2,2,2,2], num_classes=5))",
               "batch": a.batch, "size": a.size, "dtype": a.dtype, "threads": a.threads, "steps": a.steps,
               "command": " ".join([os.path.relpath(sys.executable, ROOT) if sys.executable.startswith(ROOT)
                                    else "python", "bench/pmap_overhead.py"] + sys.argv[1:]),
               "host": os.uname().nodename, "load_average_before": os.getloadavg(), "runs": [], "overhead": {}}
    for rnd, fw, n in [(r, fw, n) for r in range(a.rounds) for fw in a.frameworks.split(",") for n in devices]:
        cmd = ["nice", "-n", "10", sys.executable, os.path.abspath(__file__), "--worker", fw, str(n),
               "--dtype", a.dtype, "--batch", str(a.batch), "--size", str(a.size), "--threads", str(a.threads),
               "--steps", str(a.steps)] + (["--profile"] if a.profile and fw == "podlet" else [])
        t0 = time.perf_counter()
        r = run_worker(cmd, a.timeout, env=_env(fw, n, a.threads))
        r.update(framework=fw, devices=n, round=rnd, wall_s=time.perf_counter() - t0,
                 load_average=os.getloadavg())
        if "step_s" in r:
            r["best_step_s"] = min(r["step_s"])
            r["images_per_s"] = a.batch / r["best_step_s"]
        results["runs"].append(r)
        print(_row(r), flush=True)
        if "profile_table" in r:
            print(r.pop("profile_table"), flush=True)
    for fw in a.frameworks.split(","):
        done = {}
        for r in results["runs"]:  # per device count: the best step over rounds (and its run's profile)
            if r["framework"] == fw and "best_step_s" in r:
                if r["devices"] not in done or r["best_step_s"] < done[r["devices"]]["best_step_s"]:
                    done[r["devices"]] = r
        for n, r in sorted(done.items()):
            results["overhead"].setdefault(fw, {})[f"images_per_s_{n}"] = r["images_per_s"]
            results["overhead"][fw][f"best_step_s_{n}"] = r["best_step_s"]
        if devices[0] in done and devices[-1] in done and len(devices) > 1:
            lo, hi = done[devices[0]], done[devices[-1]]
            ov = hi["best_step_s"] / lo["best_step_s"] - 1
            results["overhead"][fw].update(devices=[devices[0], devices[-1]], overhead_pct=100 * ov)
            print(f"{fw}: {lo['images_per_s']:.2f} img/s on {devices[0]}, {hi['images_per_s']:.2f} on {devices[-1]}: "
                  f"{devices[-1]} devices cost {100 * ov:+.1f}% step time (best of {a.rounds} x {a.steps} steps)",
                  flush=True)
            if "profile" in lo and "profile" in hi:
                diff = profile_diff(lo, hi)
                results["overhead"][fw]["profile_delta"] = diff
                print(f"profiled step, by primitive: {'1 dev ms':>9s} {'8 dev ms':>9s} {'delta ms':>9s}")
                for d in diff[:8] + [None] + diff[-4:]:  # the largest costs and savings
                    print("..." if d is None else f"{d['prim'][:34]:34s} {1e3 * d['seconds_1']:9.1f} "
                          f"{1e3 * d['seconds_8']:9.1f} {1e3 * d['delta_seconds']:+9.1f}")
    results["load_average_after"] = os.getloadavg()
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(trim(results), f, indent=1)
    print(f"wrote {a.out}")


def _row(r):
    if "error" in r:
        return f"{r['framework']:7s} {r['devices']} device(s) ERROR {r['error']}"
    return (f"{r['framework']:7s} {r['devices']} device(s): {r['images_per_s']:7.2f} img/s  best step "
            f"{r['best_step_s']:6.3f} s  (steps {', '.join(f'{t:.3f}' for t in r['step_s'])}; first "
            f"{r['first_step_s']:.1f} s)  RSS {r['peak_rss_bytes'] / 2**20:6.0f} MB")


if __name__ == "__main__":
    main()
