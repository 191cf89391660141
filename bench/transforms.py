"""JAX transformations at speed: podlet vs JAX on CPU, same machine, same run.

  per_example_grads  per-example gradients of the Fashion-MNIST MLP (784-512-256-10,
                     batch 128) with jit(vmap(grad(loss), in_axes=(None, 0, 0)))
  lstm_scan          a 1-layer LSTM (input 64, hidden 256, batch 32) over 128 steps
                     with lax.scan, jit(value_and_grad) (forward + backward)
  vit_scan_trace     trace + autodiff + graph passes (fusion, remat) of a 12-layer
                     ViT-Tiny/16 (224x224x1) training step written with nn.scan over the
                     layers vs the same model unrolled (podlet only)

Each timed call follows an untimed one (compile / warm-up); the figure is the best of
--steps timed calls per round, best round of --rounds (shared machine). Prints the
ratio podlet/JAX (> 1: podlet faster) and writes bench/results/transforms.json.

    nice -n 10 .venv/bin/python bench/transforms.py
    .venv/bin/python bench/transforms.py --cases lstm_scan --steps 5 --rounds 2
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def best_time(fn, steps):
    fn()
    ts = []
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts)


# ---- per-example gradients -------------------------------------------------------------
def mlp_params(rng):
    sizes = [784, 512, 256, 10]
    return [(rng.standard_normal((a, b)).astype(np.float32) * np.float32(1 / np.sqrt(a)), np.zeros(b, np.float32))
            for a, b in zip(sizes[:-1], sizes[1:])]


def per_example_grads(fw, steps):
    rng = np.random.default_rng(0)
    params = mlp_params(rng)
    x = rng.standard_normal((128, 784)).astype(np.float32)
    y = rng.integers(0, 10, 128).astype(np.int32)
    if fw == "podlet":
        import podlet as jx
        import podlet.numpy as np_
        from podlet import nn
    else:
        import jax as jx
        import jax.numpy as np_
        from flax import linen as nn

    def loss(p, xi, yi):
        h = xi
        for i, (w, b) in enumerate(p):
            h = h @ w + b
            if i < len(p) - 1:
                h = nn.relu(h)
        logp = nn.log_softmax(h)
        return -(logp * nn.one_hot(yi, 10)).sum()
    f = jx.jit(jx.vmap(jx.grad(loss), in_axes=(None, 0, 0)))
    if fw == "podlet":
        run = lambda: f(params, x, y)
    else:
        run = lambda: jx.block_until_ready(f(params, x, y))
    return best_time(run, steps)


# ---- LSTM with scan ----------------------------------------------------------------------
def lstm_scan(fw, steps, T=128, B=32, D=64, H=256):
    rng = np.random.default_rng(0)
    Wx = rng.standard_normal((D, 4 * H)).astype(np.float32) * np.float32(0.1)
    Wh = rng.standard_normal((H, 4 * H)).astype(np.float32) * np.float32(0.1)
    b = np.zeros(4 * H, np.float32)
    xs = rng.standard_normal((T, B, D)).astype(np.float32)
    if fw == "podlet":
        import podlet as jx
        import podlet.numpy as np_
        from podlet import lax
        from podlet import nn
    else:
        import jax as jx
        import jax.numpy as np_
        from jax import lax
        from flax import linen as nn

    def loss(p, xs):
        Wx, Wh, b = p

        def cell(carry, x):
            h, c = carry
            z = x @ Wx + h @ Wh + b
            i, f, g, o = np_.split(z, 4, axis=-1)
            c = nn.sigmoid(f) * c + nn.sigmoid(i) * np_.tanh(g)
            h = nn.sigmoid(o) * np_.tanh(c)
            return (h, c), h
        h0 = np_.zeros((B, H), np_.float32)
        _, hs = lax.scan(cell, (h0, h0), xs)
        return (hs ** 2).mean()
    f = jx.jit(jx.value_and_grad(loss))
    if fw == "podlet":
        run = lambda: f((Wx, Wh, b), xs)
    else:
        run = lambda: jx.block_until_ready(f((Wx, Wh, b), xs))
    return best_time(run, steps)


# ---- ViT with nn.scan: trace + plan ----------------------------------------------------------
def vit_scan_trace(fw, steps):
    if fw != "podlet":
        return None
    import podlet as jx
    import podlet.numpy as np_
    from podlet import nn
    if not hasattr(nn, "scan"):
        raise RuntimeError("podlet.nn.scan is missing")

    class Block(nn.Module):
        dim: int = 192
        heads: int = 3

        @nn.compact
        def __call__(self, x, _):
            y = nn.LayerNorm()(x)
            y = nn.MultiHeadDotProductAttention(num_heads=self.heads)(y, y)
            x = x + y
            y = nn.LayerNorm()(x)
            y = nn.Dense(4 * self.dim)(y)
            y = nn.gelu(y)
            y = nn.Dense(self.dim)(y)
            return x + y, None

    class ViT(nn.Module):
        scan_layers: bool
        depth: int = 12

        @nn.compact
        def __call__(self, img):
            x = nn.Conv(192, (16, 16), strides=(16, 16))(img)
            x = x.reshape(x.shape[0], -1, 192)
            if self.scan_layers:
                x, _ = nn.scan(Block, variable_axes={"params": 0}, split_rngs={"params": True},
                               length=self.depth)()(x, None)
            else:
                for _ in range(self.depth):
                    x, _ = Block()(x, None)
            return nn.Dense(5)(x.mean(axis=1))

    from podlet._src import fusion
    from podlet import _core

    def plan(g):  # what jit does before the first run: the graph passes and the memory plan
        _core.memory_plan(fusion._passes(g))

    img = np.zeros((8, 224, 224, 1), np.float32)
    out = {}
    for scan_layers in (True, False):
        m = ViT(scan_layers=scan_layers)
        params = m.init(jx.random.PRNGKey(0), img)
        loss = lambda p: (m.apply(p, img) ** 2).mean()
        ts = []
        for _ in range(steps):
            t0 = time.perf_counter()
            g = jx.make_graph(jx.value_and_grad(loss), params)  # trace + autodiff
            plan(g)
            ts.append(time.perf_counter() - t0)
        out["scan" if scan_layers else "unrolled"] = min(ts)
    return out


CASES = {"per_example_grads": per_example_grads, "lstm_scan": lstm_scan, "vit_scan_trace": vit_scan_trace}


def child(case, fw, steps):
    r = CASES[case](fw, steps)
    print(json.dumps({"case": case, "fw": fw, "seconds": r}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--child", nargs=2)
    a = ap.parse_args()
    if a.child:
        child(a.child[0], a.child[1], a.steps)
        return
    results = {}
    for case in a.cases.split(","):
        fws = ["podlet"] if case == "vit_scan_trace" else ["podlet", "jax"]
        best = {}
        for _ in range(a.rounds):
            for fw in fws:
                p = subprocess.run([sys.executable, __file__, "--child", case, fw, "--steps", str(a.steps)],
                                   capture_output=True, text=True, cwd=ROOT)
                if p.returncode != 0:
                    print(p.stderr[-3000:], file=sys.stderr)
                    raise SystemExit(f"{case}/{fw} failed")
                r = json.loads(p.stdout.strip().splitlines()[-1])["seconds"]
                if isinstance(r, dict):
                    best[fw] = {k: min(v, best.get(fw, {}).get(k, v)) for k, v in r.items()}
                else:
                    best[fw] = min(r, best.get(fw, r))
        if case == "vit_scan_trace":
            s, u = best["podlet"]["scan"], best["podlet"]["unrolled"]
            results[case] = {"scan_s": s, "unrolled_s": u, "speedup": u / s}
            print(f"{case:18s} trace+plan: nn.scan {s * 1e3:8.1f} ms, unrolled {u * 1e3:8.1f} ms -> {u / s:.2f}x")
        else:
            pt, jt = best["podlet"], best["jax"]
            results[case] = {"podlet_s": pt, "jax_s": jt, "podlet_vs_jax": jt / pt}
            print(f"{case:18s} podlet {pt * 1e3:8.2f} ms  jax {jt * 1e3:8.2f} ms  -> podlet {jt / pt:.2f}x JAX")
    import platform
    results["host"] = {"cpu": platform.processor() or platform.machine(), "threads": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    results["host"]["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    out = os.path.join(HERE, "results", "transforms.json")
    with open(out + ".tmp", "w") as f:
        json.dump(results, f, indent=1)
    os.replace(out + ".tmp", out)


if __name__ == "__main__":
    main()
