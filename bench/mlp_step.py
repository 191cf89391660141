"""Times one MLP training step (784-1024-512-10, batch 128, Adam) in podlet (with and
without elementwise fusion) and in JAX on the same batch, in one run, and prints the
ratios. A figure for notes, not a test.

    .venv/bin/python bench/mlp_step.py
"""
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))


def bench(fn, n_warmup=3, n_iter=30):
    for _ in range(n_warmup):
        fn()
    ts = []
    for _ in range(n_iter):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def main():
    rng = np.random.default_rng(0)
    B = 128
    x = rng.standard_normal((B, 784)).astype(np.float32)
    y = rng.integers(0, 10, B).astype(np.int32)

    import podlet
    import mlp_fashion_mnist as ex
    params = ex.init_mlp(podlet.random.PRNGKey(0), [784, 1024, 512, 10])
    state = {"p": params, "o": ex.adam_init(params)}
    xp, yp = podlet.numpy.asarray(x), podlet.numpy.asarray(y)

    def podlet_step():
        p, o, loss = ex.train_step(state["p"], state["o"], xp, yp, total_steps=1000)
        state["p"], state["o"] = p, o
        float(loss)

    t0 = time.perf_counter()
    podlet_step()
    podlet_first = time.perf_counter() - t0
    # Fusion off and on, interleaved in rounds so machine load hits both alike.
    t_off, t_on = [], []
    for _ in range(3):
        os.environ["PODLET_FUSION"] = "0"
        t_off.append(bench(podlet_step, n_warmup=1, n_iter=10))
        os.environ["PODLET_FUSION"] = "1"
        t_on.append(bench(podlet_step, n_warmup=1, n_iter=10))
    t_podlet, t_unfused = min(t_on), min(t_off)

    import jax
    import jax.numpy as jnp

    def init(key, sizes):
        keys = jax.random.split(key, len(sizes) - 1)
        return [{"w": jax.random.normal(k, (m, n)) * np.sqrt(2.0 / m), "b": jnp.zeros((n,))}
                for k, (m, n) in zip(keys, zip(sizes[:-1], sizes[1:]))]

    def loss_fn(params, x, y):
        h = x
        for l in params[:-1]:
            h = jax.nn.relu(h @ l["w"] + l["b"])
        logits = h @ params[-1]["w"] + params[-1]["b"]
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * jax.nn.one_hot(y, 10), -1))

    @jax.jit
    def jstep(params, st, x, y):
        loss, g = jax.value_and_grad(loss_fn)(params, x, y)
        t = st["t"] + 1.0
        m = jax.tree_util.tree_map(lambda m, g: 0.9 * m + 0.1 * g, st["m"], g)
        v = jax.tree_util.tree_map(lambda v, g: 0.999 * v + 0.001 * g * g, st["v"], g)
        lr = 1e-3 * 0.5 * (1.0 + jnp.cos(np.pi * jnp.minimum(st["t"] / 1000, 1.0)))
        params = jax.tree_util.tree_map(
            lambda p, m, v: p - lr * (m / (1 - 0.9 ** t)) / (jnp.sqrt(v / (1 - 0.999 ** t)) + 1e-8), params, m, v)
        return params, {"m": m, "v": v, "t": t}, loss

    jp = init(jax.random.PRNGKey(0), [784, 1024, 512, 10])
    zeros = jax.tree_util.tree_map(jnp.zeros_like, jp)
    jstate = {"p": jp, "o": {"m": zeros, "v": zeros, "t": jnp.zeros(())}}
    xj, yj = jnp.asarray(x), jnp.asarray(y)

    def jax_step():
        p, o, loss = jstep(jstate["p"], jstate["o"], xj, yj)
        jstate["p"], jstate["o"] = p, o
        float(loss)

    t0 = time.perf_counter()
    jax_step()
    jax_first = time.perf_counter() - t0
    t_jax = min(bench(jax_step, n_warmup=1, n_iter=10) for _ in range(3))

    res = {"batch": B, "podlet_ms": t_podlet * 1e3, "podlet_unfused_ms": t_unfused * 1e3, "jax_ms": t_jax * 1e3,
           "podlet_images_per_s": B / t_podlet, "jax_images_per_s": B / t_jax,
           "speedup_vs_jax": t_jax / t_podlet, "podlet_first_call_s": podlet_first, "jax_first_call_s": jax_first,
           "threads": podlet.config.num_threads}
    print(f"MLP step, batch {B}: podlet {t_podlet * 1e3:.2f} ms ({B / t_podlet:,.0f} img/s), "
          f"(unfused {t_unfused * 1e3:.2f} ms: fusion {t_unfused / t_podlet:.2f}x), JAX {t_jax * 1e3:.2f} ms ({B / t_jax:,.0f} img/s) -> podlet/JAX speed ratio {t_jax / t_podlet:.2f}x; "
          f"first call (trace+compile) podlet {podlet_first:.2f}s, JAX {jax_first:.2f}s")
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    with open(os.path.join(os.path.dirname(__file__), "results", "mlp_step.json"), "w") as f:
        json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
