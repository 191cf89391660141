"""The fused row kernels (prims/norm.cc: layer_norm, RMSNorm, softmax, log_softmax, forward
and backward) and the MLP's GELU (a fused elementwise program) as GB/s against the
machine's copy bandwidth, measured in the same run.

    .venv/bin/python bench/norms.py [--reps 7] [--batch 32] [--only vit|swin|gelu]

Each kernel runs as one primitive on concrete arrays (``_core.apply``, outputs from the
buffer pool as in a graph); its bytes are what it must move: every input row read once
and every output row written once. Two copies give the reference, both podlet's ``copy``
primitive (a memcpy split over the same threads): a large one (256 MB read, 256 MB
written: the machine's memory copy bandwidth, the issue's yardstick) and one moving the
kernel's own bytes, timed in turn with the kernel (the same cache regime: ViT-sized
tensors partly fit the L3). Beside it: the jitted fused
layer / function, forward and forward + backward, and the same with
``config.fused_norms`` False (Flax's op-by-op graph). Shapes: ViT-Small (batch x 197
tokens x 384; attention scores batch x 6 heads x 197 x 197) and Swin-T (the four stages'
tokens x 96..768 channels; window scores batch*64 windows x 3 heads x 49 x 49).
GELU rows: the MLP's bias + GELU forward and its VJP (tanh and exact), jitted: each one
fused elementwise program compiled by the JIT (prims/fused_jit.cc), its bytes x (+ dy) read
and the result written; beside it, the same program without tables (values of one bf16
value computed instead of read: ``_core.set_fused_tables(False)``, prims/fused.cc),
compiled one vector per iteration (``_core.set_fused_jit_ways(1)``) and interpreted
(``set_fused_jit(False)``).
Best of --reps; ratios are only meaningful within one run on a shared machine. On a loaded
machine, ``--clock thread`` (one thread, each call's CPU time) keeps other jobs'
preemptions out of both the kernel's and the copy's times.
"""
import argparse
import time

import ml_dtypes
import numpy as np

import podlet
import podlet.numpy as jnp
from podlet import _core, nn

BF16 = np.dtype(ml_dtypes.bfloat16)
CLOCK = [time.perf_counter]  # --clock thread: time.thread_time (1 thread: the kernel's own CPU time)


def best(fn, reps):
    fn()
    ts = []
    for _ in range(reps):
        t0 = CLOCK[0]()
        podlet.block_until_ready(fn())
        ts.append(CLOCK[0]() - t0)
    return min(ts)


def interleaved(fns, reps):
    """Best times of several functions run in turn (a shared machine's load hits all alike)."""
    for f in fns:
        f()
    ts = [[] for _ in fns]
    for _ in range(reps):
        for f, t in zip(fns, ts):
            t0 = CLOCK[0]()
            f()
            t.append(CLOCK[0]() - t0)
    return [min(t) for t in ts]


def arr(x):
    return _core.Array.from_numpy(np.ascontiguousarray(x))


def copier(nbytes):
    """The copy primitive moving nbytes (nbytes / 2 read, nbytes / 2 written)."""
    a = arr(np.ones(max(1, nbytes // 8), np.float32))
    return lambda: _core.apply("copy", [a], {})


LARGE = 512 << 20  # the machine's copy bandwidth: 256 MB read + 256 MB written
_large_gbs = []


def kernel_vs_copy(fn, nbytes, reps):
    """(kernel time, same-bytes copy time); also samples the large copy's bandwidth."""
    t, tc = interleaved([fn, copier(nbytes)], reps)
    _large_gbs.append(LARGE / best(copier(LARGE), 3) / 1e9)
    return t, tc


def row(label, what, dtype, nbytes, t, tc, t_fused=None, t_unfused=None):
    gbs, cgbs, lgbs = nbytes / t / 1e9, nbytes / tc / 1e9, max(_large_gbs)
    extra = ""
    if t_fused is not None:
        extra = f"  | jit fused {t_fused * 1e3:7.2f} ms  unfused {t_unfused * 1e3:7.2f} ms ({t_unfused / t_fused:4.1f}x)"
    print(f"{label:28s} {what:15s} {dtype:8s} {t * 1e3:7.2f} ms {gbs:6.1f} GB/s  {100 * gbs / lgbs:5.0f}% of large copy  "
          f"{100 * gbs / cgbs:5.0f}% of same-bytes copy ({cgbs:5.1f} GB/s){extra}", flush=True)
    return gbs / lgbs, gbs / cgbs


def jit_pair(make, args, reps):
    """(fused, unfused) times of the jitted fn make() returns."""
    out = []
    before = podlet.config.fused_norms
    for fused in (True, False):
        podlet.config.update("fused_norms", fused)
        f = podlet.jit(make())
        out.append(best(lambda: f(*args), reps))
    podlet.config.update("fused_norms", before)
    return out


def bench_norm(label, rows, C, dtype, rms, reps, ratios):
    rs = np.random.RandomState(0)
    x = rs.normal(size=(rows, C)).astype(np.float32).astype(dtype)
    sc, bi = rs.normal(size=C).astype(np.float32), rs.normal(size=C).astype(np.float32)
    dname = np.dtype(dtype).name
    attrs = {"epsilon": 1e-6, "use_mean": int(not rms), "feature_ndim": 1, "dtype": dname, "has_scale": 1}
    ins = [arr(x), arr(sc)]
    if not rms:
        attrs["has_bias"] = 1
        ins.append(arr(bi))
    isz = np.dtype(dtype).itemsize
    y, mean, rstd = _core.apply("layer_norm", ins, attrs)
    fwd_bytes = 2 * rows * C * isz + 8 * rows
    t, tc = kernel_vs_copy(lambda: _core.apply("layer_norm", ins, attrs), fwd_bytes, reps)
    mod = nn.RMSNorm() if rms else nn.LayerNorm()
    xv = jnp.asarray(x)
    params = mod.init(podlet.random.PRNGKey(0), xv)
    w = jnp.asarray(rs.normal(size=(rows, C)).astype(np.float32))
    tf, tu = jit_pair(lambda: (lambda p, x: mod.apply(p, x)), (params, xv), reps)
    name = "RMSNorm" if rms else "LayerNorm"
    ratios.append(row(f"{label} [{rows}, {C}]", f"{name} fwd", dname, fwd_bytes, t, tc, tf, tu))
    dy = arr(rs.normal(size=(rows, C)).astype(np.float32).astype(dtype))
    bins = [dy, ins[0], mean, rstd, ins[1]]
    bwd_bytes = 3 * rows * C * isz + 8 * rows
    t, tc = kernel_vs_copy(lambda: _core.apply("layer_norm_bwd", bins, attrs), bwd_bytes, reps)

    def make_grad():
        return podlet.grad(lambda p, x: (mod.apply(p, x).astype(jnp.float32) * w).sum(), argnums=(0, 1))
    tf, tu = jit_pair(make_grad, (params, xv), reps)
    ratios.append(row(f"{label} [{rows}, {C}]", f"{name} bwd", dname, bwd_bytes, t, tc, tf, tu))


def bench_softmax(label, shape, dtype, log, reps, ratios):
    rs = np.random.RandomState(0)
    x = (rs.normal(size=shape) * 3).astype(np.float32).astype(dtype)
    n = x.size
    isz = np.dtype(dtype).itemsize
    dname = np.dtype(dtype).name
    prim = "log_softmax" if log else "softmax"
    xa = arr(x)
    (y,) = _core.apply(prim, [xa], {})
    t, tc = kernel_vs_copy(lambda: _core.apply(prim, [xa], {}), 2 * n * isz, reps)
    fn = nn.log_softmax if log else nn.softmax
    xv = jnp.asarray(x)
    w = jnp.asarray(rs.normal(size=shape).astype(np.float32))
    tf, tu = jit_pair(lambda: (lambda x: fn(x)), (xv,), reps)
    ratios.append(row(f"{label} {list(shape)}", f"{prim} fwd", dname, 2 * n * isz, t, tc, tf, tu))
    dy = arr(rs.normal(size=shape).astype(np.float32).astype(dtype))
    t, tc = kernel_vs_copy(lambda: _core.apply(prim + "_bwd", [y, dy], {}), 3 * n * isz, reps)
    tf, tu = jit_pair(lambda: podlet.grad(lambda x: (fn(x).astype(jnp.float32) * w).sum()), (xv,), reps)
    ratios.append(row(f"{label} {list(shape)}", f"{prim} bwd", dname, 3 * n * isz, t, tc, tf, tu))


def bench_gelu(label, shape, dtype, approximate, reps, ratios):
    rs = np.random.RandomState(0)
    x = jnp.asarray(rs.normal(size=shape).astype(np.float32).astype(dtype))
    b = jnp.asarray(rs.normal(size=shape[-1:]).astype(np.float32).astype(dtype))
    dy = jnp.asarray(rs.normal(size=shape).astype(np.float32).astype(dtype))
    n, isz, dname = int(np.prod(shape)), np.dtype(dtype).itemsize, np.dtype(dtype).name
    gelu = lambda x, b: nn.gelu(x + b, approximate=approximate)  # noqa: E731
    fwd = podlet.jit(gelu)
    bwd = podlet.jit(lambda x, b, dy: podlet.vjp(lambda x: gelu(x, b), x)[1](dy)[0])
    what = "tanh" if approximate else "exact"
    for name, f, args, nbytes in (("fwd", fwd, (x, b), 2 * n * isz), ("bwd", bwd, (x, b, dy), 3 * n * isz)):
        t, tc = kernel_vs_copy(lambda: f(*args), nbytes, reps)
        try:  # the same program without tables, one vector per iteration, and interpreted
            _core.set_fused_tables(False)
            tn = best(lambda: f(*args), reps)
            _core.set_fused_tables(True)
            _core.set_fused_jit_ways(1)
            t1 = best(lambda: f(*args), reps)
            _core.set_fused_jit_ways(8)
            _core.set_fused_jit(False)
            ti = best(lambda: f(*args), reps)
        finally:
            _core.set_fused_tables(True)
            _core.set_fused_jit_ways(8)
            _core.set_fused_jit(True)
        ratios.append(row(f"{label} {list(shape)}", f"GELU {what} {name}", dname, nbytes, t, tc))
        print(f"{'':28s} {'':15s} {'':8s} without tables {tn * 1e3:7.2f} ms ({tn / t:3.1f}x), "
              f"one vector per iteration {t1 * 1e3:7.2f} ms ({t1 / t:3.1f}x), "
              f"interpreted {ti * 1e3:7.2f} ms ({ti / t:3.1f}x)", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--clock", choices=("wall", "thread"), default="wall",
                    help="thread: CPU time of the calling thread, with 1 thread (robust to a loaded machine)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--only", choices=("vit", "swin", "gelu"), default=None)
    a = ap.parse_args()
    B = a.batch
    if a.clock == "thread":
        CLOCK[0] = time.thread_time
        a.threads = 1
    if a.threads:
        podlet.config.update("num_threads", a.threads)
    info = podlet.cpu_info()
    _large_gbs.append(LARGE / best(copier(LARGE), 5) / 1e9)
    print(f"active ISA: {info['active_isa']}, {_core.num_threads()} threads, {a.clock} clock; large copy (256 MB -> 256 MB, the "
          f"copy primitive): {_large_gbs[0]:.1f} GB/s; kernel = one primitive, GB/s = its rows read + written")
    ratios = []
    norms = []
    if a.only in (None, "vit"):
        norms.append(("ViT-Small tokens", B * 197, 384))
    if a.only in (None, "swin"):
        norms += [(f"Swin-T stage {i + 1}", B * (56 // 2 ** i) ** 2, 96 * 2 ** i) for i in range(4)]
    gelus = []
    if a.only in (None, "vit", "gelu"):
        gelus.append(("ViT-Tiny MLP", (B * 197, 768)))
    if a.only in (None, "swin", "gelu"):
        gelus.append(("Swin-T stage 1 MLP", (B * 56 * 56, 384)))
    if a.only == "gelu":
        norms = []
    for dtype in (np.float32, BF16):
        for label, shape in gelus:
            for approximate in (True, False):
                bench_gelu(label, shape, dtype, approximate, a.reps, ratios)
        if a.only == "gelu":
            continue
        for label, rows, C in norms:
            bench_norm(label, rows, C, dtype, False, a.reps, ratios)
            if label.startswith("ViT") or label.endswith("stage 1"):
                bench_norm(label, rows, C, dtype, True, a.reps, ratios)
        if a.only in (None, "vit"):
            for log in (False, True):
                bench_softmax("ViT-Small scores", (B, 6, 197, 197), dtype, log, a.reps, ratios)
        if a.only in (None, "swin"):
            bench_softmax("Swin-T window scores", (B * 64, 3, 49, 49), dtype, False, a.reps, ratios)
    lg, sb = np.array([r[0] for r in ratios]), np.array([r[1] for r in ratios])
    print(f"large copy: best {max(_large_gbs):.1f} GB/s over {len(_large_gbs)} samples")
    print(f"of the large copy's bandwidth: min {100 * lg.min():.0f}%  median {100 * np.median(lg):.0f}%;  of the "
          f"same-bytes copy's: min {100 * sb.min():.0f}%  median {100 * np.median(sb):.0f}%  ({len(ratios)} kernels)")


if __name__ == "__main__":
    main()
