"""One full training step (forward, backward, AdamW) of ResNet-18 and ResNet-34 (and, with
--models, ViT-Tiny/16, ViT-Small/16 and Swin-T) on 224x224x1 images, 5 classes, batch 32,
in podlet (jit; f32 and bf16 compute; bf16 with its default Winograd 3x3 convolutions and,
as podlet-direct, with the direct kernels), JAX +
Flax + Optax on CPU (jit; the same model written in Flax below; f32 and bf16) and
PyTorch CPU (eager; f32 and bf16 autocast; the same ResNet in plain torch below), all
in one run. Each framework/model/dtype runs in its own subprocess (its own peak RSS),
nice'd, on --threads threads. Prints images/s, the ratio to podlet (same model and
dtype), MFU (model FLOPs / time / measured peak of the threads used for the dtype: the
f32 FMA loop for f32, the vdpbf16ps loop for bf16 on AVX512_BF16 hosts), trace/compile
time and peak RSS; writes bench/results/train_step.json (or --out).

    nice -n 10 .venv/bin/python bench/train_step.py                   # everything (~15 min)
    nice -n 10 .venv/bin/python bench/train_step.py --rounds 2        # twice, interleaved; best of each
    .venv/bin/python bench/train_step.py --models resnet18 --frameworks podlet --steps 3
    nice -n 10 .venv/bin/python bench/train_step.py --models vit_tiny,vit_small,swin_tiny   # the transformers

Models: resnet18, resnet34 (the default), vit_tiny, vit_small, swin_tiny. The transformers
are podlet.models.ViTTiny / ViTSmall / SwinT (dropout and stochastic depth 0, as the
ResNets' dropout; softmax cross-entropy and AdamW as for them); their Flax and plain-torch
twins live in bench/_transformer_twins.py (torchvision is not installed: its swin_t is
rebuilt there module for module; it has no ViT-Tiny/Small, so those follow its
VisionTransformer layout). Before anything is timed, a subprocess checks that every
framework's model has podlet's parameter count at --size (ViT's position embeddings
depend on it). ViT needs --size a multiple of 16 to use the whole image; Swin-T takes any
size >= 4 (maps are padded to whole windows as torchvision does). The transformers have no
3x3 convolution, so they get no podlet-direct row (it would time the same program).

Model FLOPs per step = the FLOPs of podlet's traced train-step graph (convolutions,
dots and elementwise ops; the same model in every framework). Timed steps follow one
untimed step (compile / warm-up); the figure is the best timed step (shared machine; with --rounds N, of the best round).
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Mapping

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STAGES = {"resnet18": [2, 2, 2, 2], "resnet34": [3, 4, 6, 3]}
NUM_CLASSES = 5
sys.path.insert(0, HERE)
import _transformer_twins as twins  # noqa: E402  ViT-Tiny/Small and Swin-T in Flax and plain torch
assert twins.NUM_CLASSES == NUM_CLASSES


def _count(tree):
    """Number of parameters in a pytree (podlet's or jax's: anything whose leaves have .shape)."""
    leaves, stack = [], [tree]
    while stack:
        t = stack.pop()
        if isinstance(t, Mapping):
            stack.extend(t.values())
        elif isinstance(t, (list, tuple)):
            stack.extend(t)
        elif hasattr(t, "shape"):
            leaves.append(int(np.prod(t.shape)))
    return sum(leaves)


def data(batch, size):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, size, size, 1)).astype(np.float32)
    y = rng.integers(0, NUM_CLASSES, batch).astype(np.int32)
    return x, y


def timed_steps(step, steps):
    t0 = time.perf_counter()
    step()
    first = time.perf_counter() - t0
    ts = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        ts.append(time.perf_counter() - t0)
    return first, ts


# ---------------------------------------------------------------------------------
# podlet
# ---------------------------------------------------------------------------------
def run_podlet(model_name, dtype, batch, size, steps):
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import podlet
    import podlet.numpy as jnp
    from podlet import models, optim, _core
    from podlet._src import fusion
    from podlet.training import train_state

    cdt = jnp.bfloat16 if dtype == "bf16" else jnp.float32
    if model_name in STAGES:
        model = models.ResNet(stage_sizes=STAGES[model_name], num_classes=NUM_CLASSES, dtype=cdt)
    else:
        model = twins.podlet_model(model_name, cdt)
    xn, yn = data(batch, size)
    x, y = jnp.asarray(xn), jnp.asarray(yn)
    v = model.init(podlet.random.PRNGKey(0), x[:1], train=False)
    v.setdefault("batch_stats", {})  # the transformers have none: an empty tree through the step
    st = train_state.TrainState.create(apply_fn=model.apply, params=v["params"],
                                       tx=optim.adamw(1e-3, weight_decay=1e-4))
    mutable = ["batch_stats"] if model_name in STAGES else False

    def train_step(st, bs, x, y):
        def loss_fn(p):
            out = model.apply({"params": p, "batch_stats": bs}, x, train=True, mutable=mutable)
            logits, upd = out if mutable else (out, {"batch_stats": bs})
            return optim.softmax_cross_entropy_with_integer_labels(logits, y).mean(), upd
        (loss, upd), g = podlet.value_and_grad(loss_fn, has_aux=True)(st.params)
        return st.apply_gradients(grads=g), upd["batch_stats"], loss

    j = podlet.jit(train_step)
    t0 = time.perf_counter()
    entry = j.lower(st, v["batch_stats"], x, y)
    t_trace = time.perf_counter() - t0
    t0 = time.perf_counter()
    fusion.executable_graph(entry)
    t_plan = time.perf_counter() - t0
    flops = entry.graph.flops()
    state = {"st": st, "bs": v["batch_stats"]}
    del st, v  # the step replaces the state: holding the initial one would count it twice

    def step():
        s, b, loss = j(state["st"], state["bs"], x, y)
        state["st"], state["bs"] = s, b
        float(loss)

    live0 = _core.memory_stats()[0]
    _core.reset_peak_memory()
    first, ts = timed_steps(step, steps)
    return {"first_step_s": first, "step_s": ts, "compile_s": t_trace + t_plan, "trace_s": t_trace,
            "fusion_s": t_plan, "flops_per_step": flops, "params": _count(state["st"].params),
            "podlet_peak_buffers_bytes": _core.memory_stats()[1], "podlet_live_before_bytes": live0}


# ---------------------------------------------------------------------------------
# JAX + Flax + Optax: the same ResNet as podlet.models.ResNet
# ---------------------------------------------------------------------------------
def flax_resnet(stages, cdt):
    """podlet.models.ResNet (dropout 0, no stochastic depth) written in Flax; `cdt` is the
    compute dtype (params float32)."""
    import jax.numpy as jnp
    import flax.linen as nn

    def bn(train, **kw):
        return nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-5, **kw)

    class Block(nn.Module):
        features: int
        stride: int = 1

        @nn.compact
        def __call__(self, x, train):
            r = x
            x = nn.Conv(self.features, (3, 3), self.stride, padding="SAME", use_bias=False, dtype=cdt)(x)
            x = nn.relu(bn(train)(x))
            x = nn.Conv(self.features, (3, 3), 1, padding="SAME", use_bias=False, dtype=cdt)(x)
            x = bn(train, scale_init=nn.initializers.zeros_init())(x)
            if r.shape != x.shape:
                r = nn.Conv(self.features, (1, 1), self.stride, use_bias=False, dtype=cdt)(r)
                r = bn(train)(r)
            return nn.relu(x + r)

    class ResNet(nn.Module):
        stages: tuple

        @nn.compact
        def __call__(self, x, train):
            x = nn.Conv(64, (7, 7), (2, 2), padding="SAME", use_bias=False, dtype=cdt)(x)
            x = nn.relu(bn(train)(x))
            x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
            for i, n in enumerate(self.stages):
                for j in range(n):
                    x = Block(64 * 2 ** i, 2 if i > 0 and j == 0 else 1)(x, train)
            x = jnp.mean(x, axis=(1, 2))
            return jnp.asarray(nn.Dense(NUM_CLASSES, dtype=cdt)(x), jnp.float32)

    return ResNet(tuple(stages))


def run_jax(model_name, dtype, batch, size, steps):
    import jax
    import jax.numpy as jnp
    import optax

    cdt = jnp.bfloat16 if dtype == "bf16" else jnp.float32
    model = flax_resnet(STAGES[model_name], cdt) if model_name in STAGES else twins.flax_model(model_name, cdt)
    xn, yn = data(batch, size)
    x, y = jnp.asarray(xn), jnp.asarray(yn)
    v = model.init(jax.random.PRNGKey(0), x[:1], train=False)
    tx = optax.adamw(1e-3, weight_decay=1e-4)
    params, bs, opt = v["params"], v.get("batch_stats", {}), tx.init(v["params"])
    mutable = ["batch_stats"] if model_name in STAGES else False
    n_params = _count(params)

    @jax.jit
    def train_step(params, bs, opt, x, y):
        def loss_fn(p):
            out = model.apply({"params": p, "batch_stats": bs}, x, train=True, mutable=mutable)
            logits, upd = out if mutable else (out, {"batch_stats": bs})
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), upd
        (loss, upd), g = jax.value_and_grad(loss_fn, has_aux=True)(params)
        u, opt = tx.update(g, opt, params)
        return optax.apply_updates(params, u), upd["batch_stats"], opt, loss

    t0 = time.perf_counter()
    compiled = train_step.lower(params, bs, opt, x, y).compile()
    t_compile = time.perf_counter() - t0
    state = {"p": params, "b": bs, "o": opt}
    del params, bs, opt, v  # as for podlet: only the current state stays alive

    def step():
        p, b, o, loss = compiled(state["p"], state["b"], state["o"], x, y)
        state["p"], state["b"], state["o"] = p, b, o
        float(loss)

    first, ts = timed_steps(step, steps)
    return {"first_step_s": first, "step_s": ts, "compile_s": t_compile, "params": n_params}


# ---------------------------------------------------------------------------------
# PyTorch (eager): the same ResNet in plain torch (torchvision is not installed)
# ---------------------------------------------------------------------------------
def run_torch(model_name, dtype, batch, size, steps, threads):
    import torch
    import torch.nn as tnn
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    torch.manual_seed(0)

    class Block(tnn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.c1 = tnn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.b1 = tnn.BatchNorm2d(cout, eps=1e-5, momentum=0.1)
            self.c2 = tnn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.b2 = tnn.BatchNorm2d(cout, eps=1e-5, momentum=0.1)
            tnn.init.zeros_(self.b2.weight)
            self.proj = None
            if stride != 1 or cin != cout:
                self.proj = tnn.Sequential(tnn.Conv2d(cin, cout, 1, stride, bias=False), tnn.BatchNorm2d(cout))

        def forward(self, x):
            r = x if self.proj is None else self.proj(x)
            y = F.relu(self.b1(self.c1(x)))
            return F.relu(self.b2(self.c2(y)) + r)

    class ResNet(tnn.Module):
        def __init__(self, stages):
            super().__init__()
            self.stem = tnn.Conv2d(1, 64, 7, 2, 3, bias=False)
            self.bn = tnn.BatchNorm2d(64)
            blocks, cin = [], 64
            for i, n in enumerate(stages):
                for j in range(n):
                    blocks.append(Block(cin, 64 * 2 ** i, 2 if i > 0 and j == 0 else 1))
                    cin = 64 * 2 ** i
            self.blocks = tnn.Sequential(*blocks)
            self.fc = tnn.Linear(cin, NUM_CLASSES)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.bn(self.stem(x))), 3, 2, 1)
            x = self.blocks(x)
            return self.fc(x.mean((2, 3))).float()

    model = ResNet(STAGES[model_name]) if model_name in STAGES else twins.torch_model(model_name).build(size)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
    xn, yn = data(batch, size)
    x = torch.from_numpy(xn).permute(0, 3, 1, 2).contiguous()
    y = torch.from_numpy(yn).long()

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
            logits = model(x)
        loss = F.cross_entropy(logits.float(), y)
        loss.backward()
        opt.step()
        float(loss)

    first, ts = timed_steps(step, steps)
    return {"first_step_s": first, "step_s": ts, "compile_s": 0.0,
            "params": sum(p.numel() for p in model.parameters())}


# ---------------------------------------------------------------------------------
def param_counts(model_names, size):
    """{model: {framework: parameter count}} of each model as every framework builds it for
    size x size x 1 images (abstractly where the framework can: eval_shape)."""
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import podlet
    import podlet.numpy as pjnp
    from podlet import models
    import jax
    import jax.numpy as jnp

    out = {}
    for name in model_names:
        if name in STAGES:
            pm = models.ResNet(stage_sizes=STAGES[name], num_classes=NUM_CLASSES)
            fm = flax_resnet(STAGES[name], jnp.float32)
            tm = None
        else:
            pm, fm = twins.podlet_model(name, pjnp.float32), twins.flax_model(name, jnp.float32)
            tm = twins.torch_model(name).build(size)
        shapes = jax.eval_shape(lambda k, x: fm.init(k, x, train=False), jax.random.PRNGKey(0),
                                jax.ShapeDtypeStruct((1, size, size, 1), jnp.float32))
        out[name] = {"podlet": models.param_count(pm, podlet.ShapeDtypeStruct((1, size, size, 1), pjnp.float32),
                                                  train=False),
                     "jax": _count(shapes["params"])}
        if tm is not None:  # the torch ResNet is local to run_torch; its count comes back with its row
            out[name]["torch"] = sum(p.numel() for p in tm.parameters())
    return out


def run_worker(cmd, timeout, env=None):
    """Runs a worker subprocess; its last 'RESULT {json}' line as a dict, or {"error": ...}."""
    try:
        cp = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        lines = [l for l in cp.stdout.splitlines() if l.startswith("RESULT ")]
        if cp.returncode != 0 or not lines:
            raise RuntimeError(cp.stderr.strip().splitlines()[-1] if cp.stderr.strip() else "no result")
        return json.loads(lines[-1][7:])
    except (subprocess.TimeoutExpired, RuntimeError) as e:
        return {"error": str(e)[:300]}


def worker(a):
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    if a.framework in ("podlet", "podlet-direct"):
        os.environ["PODLET_NUM_THREADS"] = str(a.threads)
        # podlet-direct: the same step with Winograd off (the direct kernels, whose bf16
        # products are exact: precision HIGHEST for every conv)
        os.environ["PODLET_CONV_WINOGRAD"] = "0" if a.framework == "podlet-direct" else "1"
        r = run_podlet(a.model, a.dtype, a.batch, a.size, a.steps)
    elif a.framework == "jax":
        r = run_jax(a.model, a.dtype, a.batch, a.size, a.steps)
    else:
        r = run_torch(a.model, a.dtype, a.batch, a.size, a.steps, a.threads)
    r["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print("RESULT " + json.dumps(r), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="resnet18,resnet34")
    p.add_argument("--frameworks", default="podlet,podlet-direct,jax,torch",
                   help="podlet-direct: podlet with conv_winograd off (bf16 only; f32 never uses it)")
    p.add_argument("--dtypes", default="f32,bf16")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=2, help="timed steps after one untimed step")
    p.add_argument("--timeout", type=float, default=900, help="seconds per framework/model/dtype")
    p.add_argument("--rounds", type=int, default=1,
                   help="run the whole grid this many times, interleaved, and keep each cell's best round: the "
                        "machine's speed drifts over minutes, and a cell timed once may land in a slow spell")
    p.add_argument("--out", default=os.path.join(HERE, "results", "train_step.json"),
                   help="results JSON (a tiny trial run may go to /tmp instead of over the committed results)")
    p.add_argument("--worker", nargs=3, metavar=("FRAMEWORK", "MODEL", "DTYPE"), help=argparse.SUPPRESS)
    p.add_argument("--param-counts", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        a.framework, a.model, a.dtype = a.worker
        return worker(a)
    if a.param_counts:
        print("RESULT " + json.dumps(param_counts(a.models.split(","), a.size)), flush=True)
        return

    unknown = [m for m in a.models.split(",") if m not in STAGES and m not in twins.TRANSFORMERS]
    if unknown:
        p.error(f"unknown model(s) {unknown}; expected some of {list(STAGES) + list(twins.TRANSFORMERS)}")
    # The same architecture in every framework: equal parameter counts, checked before anything is timed
    # (in a subprocess, so that no framework is loaded in this one).
    counts = run_worker(["nice", "-n", "10", sys.executable, os.path.abspath(__file__), "--param-counts",
                         "--models", a.models, "--size", str(a.size)], a.timeout)
    if "error" in counts:
        sys.exit(f"parameter counts: {counts['error']}")
    for model, c in counts.items():
        if len(set(c.values())) != 1:
            sys.exit(f"{model}: parameter counts differ between frameworks: {c}")
        print(f"{model}: {next(iter(c.values())):,} parameters in " + ", ".join(c), flush=True)

    sys.path.insert(0, HERE)
    import peak as peak_mod
    pk = peak_mod.measure(reps=20, threads=a.threads)
    peaks = {"f32": pk["f32_fma_gflops_all"], "bf16": pk["bf16_dot_gflops_all"] or pk["f32_fma_gflops_all"]}
    print(f"peak (measured): f32 FMA {pk['f32_fma_gflops_1thread']:.1f} GFLOP/s x 1 thread, {peaks['f32']:.1f} on "
          f"{a.threads} threads; bf16 dot: {pk['bf16_dot']}, {peaks['bf16']:.1f} GFLOP/s on {a.threads} threads. "
          f"Batch {a.batch}, {a.size}x{a.size}x1, {NUM_CLASSES} classes, {a.threads} threads, {a.steps} timed "
          f"steps; shared machine.", flush=True)
    results = {"peak": pk, "batch": a.batch, "size": a.size, "threads": a.threads, "steps": a.steps,
               "rounds": a.rounds, "param_counts": counts, "runs": []}
    flops = {}
    cells = [(model, dtype, fw) for model in a.models.split(",") for dtype in a.dtypes.split(",")
             for fw in a.frameworks.split(",")
             if not (fw == "podlet-direct" and (dtype != "bf16" or model not in STAGES))]
    # Winograd is bf16 only (f32 podlet is direct) and only the ResNets have 3x3 convolutions
    rounds_of = {c: [] for c in cells}
    for rnd in range(a.rounds):
        for model, dtype, fw in cells:
            cmd = ["nice", "-n", "10", sys.executable, os.path.abspath(__file__), "--worker", fw, model, dtype,
                   "--batch", str(a.batch), "--size", str(a.size), "--threads", str(a.threads),
                   "--steps", str(a.steps)]
            t0 = time.perf_counter()
            r = run_worker(cmd, a.timeout)
            r.update(framework=fw, model=model, dtype=dtype, wall_s=time.perf_counter() - t0, round=rnd)
            if "flops_per_step" in r:
                flops[model] = r["flops_per_step"]
            if "step_s" in r:
                t = min(r["step_s"])
                r["images_per_s"] = a.batch / t
                if model in flops:
                    r["mfu"] = flops[model] / t / 1e9 / peaks[dtype]
            want = counts.get(model, {}).get("podlet")
            if "params" in r and want is not None and r["params"] != want:  # e.g. the torch ResNet, built in its row
                r = {**{k: r[k] for k in ("framework", "model", "dtype", "wall_s", "round")},
                     "error": f"{r['params']:,} parameters, podlet's model has {want:,}"}
            rounds_of[(model, dtype, fw)].append(r)
            print(f"[round {rnd + 1}/{a.rounds}] " + _row(r), flush=True)
    for c in cells:  # each cell's fastest round (its first if every round failed)
        best = max(rounds_of[c], key=lambda r: r.get("images_per_s", 0.0))
        if a.rounds > 1:
            best["other_rounds_images_per_s"] = [r["images_per_s"] for r in rounds_of[c]
                                                 if r is not best and "images_per_s" in r]
        results["runs"].append(best)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(results, f, indent=2)
    print("\n" + table(results))


def _row(r):
    if "error" in r:
        return f"{r['framework']:13s} {r['model']:9s} {r['dtype']:5s} ERROR {r['error']}"
    return (f"{r['framework']:13s} {r['model']:9s} {r['dtype']:5s} {r['images_per_s']:7.2f} img/s  "
            f"step {min(r['step_s']):7.2f} s  compile {r['compile_s']:6.2f} s  "
            f"MFU {100 * r.get('mfu', float('nan')):5.1f}%  RSS {r['peak_rss_bytes'] / 2**20:7.0f} MB")


def table(results):
    """A Markdown table of a results dict (for the README)."""
    runs = results["runs"]
    ref = {(r["model"], r["dtype"]): r for r in runs if r["framework"] == "podlet" and "images_per_s" in r}
    out = ["| model | framework | dtype | images/s | vs podlet | MFU | trace+compile | peak RSS |",
           "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in runs:
        if "images_per_s" not in r:
            out.append(f"| {r['model']} | {r['framework']} | {r['dtype']} | error | | | | |")
            continue
        base = ref.get((r["model"], r["dtype"]))
        ratio = f"{r['images_per_s'] / base['images_per_s']:.2f}x" if base else "-"
        out.append(f"| {r['model']} | {r['framework']} | {r['dtype']} | {r['images_per_s']:.2f} | {ratio} | "
                   f"{100 * r.get('mfu', float('nan')):.1f}% | {r['compile_s']:.2f} s | "
                   f"{r['peak_rss_bytes'] / 2**20:.0f} MB |")
    # The targets: podlet against the faster PyTorch (f32 or bf16) and the faster JAX.
    for model in dict.fromkeys(r["model"] for r in runs):
        best = {}
        for r in runs:
            if r["model"] == model and "images_per_s" in r:
                fw = r["framework"]
                best[fw] = max(best.get(fw, 0.0), r["images_per_s"])
        for fw in ("podlet", "podlet-direct"):
            if fw in best and "torch" in best and "jax" in best:
                out.append(f"\n{model} {fw} (best dtype) {best[fw]:.2f} img/s = {best[fw] / best['torch']:.2f}x the "
                           f"faster PyTorch, {best[fw] / best['jax']:.2f}x the faster JAX.")
    return "\n".join(out)


if __name__ == "__main__":
    main()
