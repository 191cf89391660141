"""GFLOP/s of the contraction kernels on every ISA this host has (ref vs avx2 ...), beside
the f32 FMA peak measured in the same run (bench/peak.py's C++ loop, 1 and all threads).

    .venv/bin/python bench/kernels.py                 # everything in f32, best of 2 runs, batch 32
    .venv/bin/python bench/kernels.py --dtype bfloat16 --isas avx512bf16   # the bf16 path
    .venv/bin/python bench/kernels.py --dtype bfloat16 --isas avx512bf16,amx  # AMX hosts: amx %peak is of the tile peak
    .venv/bin/python bench/kernels.py --only conv --isas avx2 --dtype bfloat16
    .venv/bin/python bench/kernels.py --only dot --reps 5 --threads 1
    .venv/bin/python bench/kernels.py --only attention --dtype bfloat16
    .venv/bin/python bench/kernels.py --only conv --dtype bfloat16 --isas avx512bf16 --winograd

Shapes: dot 1024^3, the MLP layer 128x784 @ 784x1024 and its two backward products
(x^T g and g W^T, which read an operand transposed), a long-K weight gradient (Swin-T's
first-stage MLP, [96, 384] summed over 50,176 positions), and every distinct convolution of
ResNet-34 at 224x224x1 input (stem 7x7/2 1->64, the 3x3 layers at 56/28/14/7 including
the stride-2 ones, the 1x1/2 projections) at --batch (default 32), in forward,
backward-data and backward-filter; the fused attention primitive forward and backward at
ViT's L = 197 and Swin's window L = 49, head dims 32 and 64, and Swin's shifted windows
(L = 49, H = 32, with the relative position bias and the shift's mask). The machine is
shared: each figure is the best of at least --reps runs and --min-seconds of runs.
Results also go to --out (default bench/results/kernels.json; give a partial run, --only
or one dtype, a file of its own so it does not replace the committed full run). A figure
for notes, not a test.
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))

from podlet import _core  # noqa: E402

def fma_peak(threads, reps):
    """Best GFLOP/s of the C++ f32 FMA loop (bench/peak.py) on `threads` threads."""
    return _core.measure_peak(threads, 10 * reps)


def bf16_peak(threads, reps):
    """Best GFLOP/s of the C++ vdpbf16ps loop (the f32 FMA loop without AVX512_BF16)."""
    return _core.measure_bf16_peak(threads, 10 * reps)


def arr(x):
    return _core.Array.from_numpy(np.ascontiguousarray(x))


def best_time(f, reps, min_seconds=0.0):
    """The best of at least `reps` calls, repeated until `min_seconds` of calls have run:
    on a host whose speed drifts, two calls can both land in a slow minute (ViT's P V
    product read 65% of peak as the best of 2 and 82% as the best of a 5-second loop)."""
    f()  # warm-up (and first-touch of the output)
    ts = []
    start = time.perf_counter()
    while len(ts) < reps or time.perf_counter() - start < min_seconds:
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def dot_cases(rng, dtype):
    def dot(m, k, n, lc=1, rc=0, name=None):
        a = rng.standard_normal((m, k) if lc == 1 else (k, m)).astype(dtype)
        b = rng.standard_normal((k, n) if rc == 0 else (n, k)).astype(dtype)
        attrs = dict(lhs_contracting=[lc], rhs_contracting=[rc], lhs_batch=[], rhs_batch=[])
        return name or f"dot {m}x{k} @ {k}x{n}", ("dot_general", [arr(a), arr(b)], attrs), 2.0 * m * n * k

    def batched(nb, m, k, n, lc, rc, name):
        """nb products [m, k] x [k, n]: operand dims (batch, free, contracting) in the order
        lc / rc say (2: contracting last, 1: contracting before the free dim)."""
        a = rng.standard_normal((nb, m, k) if lc == 2 else (nb, k, m)).astype(dtype)
        b = rng.standard_normal((nb, n, k) if rc == 2 else (nb, k, n)).astype(dtype)
        attrs = dict(lhs_contracting=[lc], rhs_contracting=[rc], lhs_batch=[0], rhs_batch=[0])
        return name, ("dot_general", [arr(a), arr(b)], attrs), 2.0 * nb * m * n * k

    def heads(name, ls, rs, lc, rc, lb, rb, k):
        """A product over batch x heads as an attention layer does it (k: contraction length)."""
        a, b = rng.standard_normal(ls).astype(dtype), rng.standard_normal(rs).astype(dtype)
        attrs = dict(lhs_contracting=[lc], rhs_contracting=[rc], lhs_batch=lb, rhs_batch=rb)
        out = np.prod(ls) // ls[lc] * (np.prod(rs) // rs[rc]) // np.prod([rs[i] for i in rb])
        return name, ("dot_general", [arr(a), arr(b)], attrs), 2.0 * out * k
    return [dot(1024, 1024, 1024),
            dot(128, 784, 1024, name="mlp fwd  x[128,784] @ W[784,1024]"),
            dot(784, 128, 1024, lc=0, name="mlp dW   x^T[784,128] @ g[128,1024]"),
            dot(128, 1024, 784, rc=1, name="mlp dX   g[128,1024] @ W^T[1024,784]"),
            # a transformer's weight gradient: a small output summed over batch x tokens
            # (Swin-T's first-stage MLP at batch 16; K chunks in gemm_avx512_impl.h)
            dot(96, 50176, 384, lc=0, name="swin dW  x^T[96,50176] @ g[50176,384]"),
            # ViT-Tiny / Swin-T at batch 32: short K, 197-token rows, 96 heads of attention
            dot(6304, 192, 768, name="vit fc1  x[6304,192] @ W[192,768]"),
            dot(192, 6304, 768, lc=0, name="vit dW   x^T[192,6304] @ g[6304,768]"),
            dot(6304, 768, 192, name="vit fc2  x[6304,768] @ W[768,192]"),
            dot(100352, 96, 384, name="swin fc1 x[100352,96] @ W[96,384]"),
            batched(96, 197, 64, 197, 2, 2, name="vit QK^T 96 x q[197,64] @ k^T[64,197]"),
            batched(96, 64, 197, 197, 1, 1, name="vit dK^T 96 x q^T[64,197] @ dS[197,197]"),
            # the same heads in the step's layout (Flax's einsums on [B, T, N, H] and
            # [B, N, T, S]): each of these patterns is two of a layer's six products
            heads("vit attn S = Q K^T (and dP = dO V^T)", (32, 197, 3, 64), (32, 197, 3, 64), 3, 3, [0, 2], [0, 2], 64),
            heads("vit attn O = P V (and dQ = dS K)", (32, 3, 197, 197), (32, 197, 3, 64), 3, 1, [0, 1], [0, 2], 197),
            heads("vit attn dV = P^T dO (and dK = dS^T Q)", (32, 3, 197, 197), (32, 197, 3, 64), 2, 1, [0, 1], [0, 2],
                  197)]


# Every distinct ResNet-34 convolution at 224x224x1 input: (input H, Cin, Cout, kernel,
# stride, count in the network). 'SAME' padding, as podlet.models.ResNet34.
RESNET34_CONVS = [(224, 1, 64, 7, 2, 1),                                   # stem
                  (56, 64, 64, 3, 1, 6),
                  (56, 64, 128, 3, 2, 1), (56, 64, 128, 1, 2, 1), (28, 128, 128, 3, 1, 7),
                  (28, 128, 256, 3, 2, 1), (28, 128, 256, 1, 2, 1), (14, 256, 256, 3, 1, 11),
                  (14, 256, 512, 3, 2, 1), (14, 256, 512, 1, 2, 1), (7, 512, 512, 3, 1, 5)]


def same_pad(h, k, s):
    ho = -(-h // s)
    total = max((ho - 1) * s + k - h, 0)
    return ho, [total // 2, total - total // 2]


def conv_cases(rng, batch, dtype):
    out = []
    for h, ci, co, k, s, count in RESNET34_CONVS:
        ho, (lo, hi) = same_pad(h, k, s)
        pad = [lo, hi, lo, hi]
        x = arr(rng.standard_normal((batch, h, h, ci)).astype(dtype))
        w = arr((rng.standard_normal((k, k, ci, co)) * 0.05).astype(dtype))
        g = arr(rng.standard_normal((batch, ho, ho, co)).astype(dtype))
        a = dict(window_strides=[s, s], padding=pad, lhs_dilation=[1, 1], rhs_dilation=[1, 1], feature_group_count=1)
        fl = 2.0 * batch * ho * ho * co * k * k * ci
        tag = f"{k}x{k} {h}x{h}x{ci}->{co} s{s} (x{count})"
        out += [(f"conv fwd   {tag}", ("conv_general_dilated", [x, w], a), fl),
                (f"conv bwd_d {tag}", ("conv_bwd_data", [g, w], dict(a, lhs_shape=[batch, h, h, ci])), fl),
                (f"conv bwd_f {tag}", ("conv_bwd_filter", [x, g], dict(a, rhs_shape=[k, k, ci, co])), fl)]
    return out


def attention_cases(rng, batch, dtype):
    """The fused attention primitive forward and backward (prims/attention.cc): ViT's
    global attention (L = 197) and Swin's 7x7 windows (L = 49, batch x 64 windows), head
    dims 32 and 64, 3 heads; and Swin's shifted windows with their bias and mask. FLOPs are the four (forward) and ten (backward) T x S x H
    products a plain attention does, whatever the kernel recomputes."""
    out = []
    for label, B, L in (("ViT L=197", batch, 197), ("Swin win L=49", batch * 64 // 8, 49)):
        for H in (32, 64):
            q, k, v = (arr(rng.standard_normal((B, L, 3, H)).astype(dtype)) for _ in range(3))
            attrs = {"scale": 1.0 / np.sqrt(H), "causal": 0}
            o, lse = _core.apply("dot_product_attention", [q, k, v], attrs)
            g = arr(rng.standard_normal((B, L, 3, H)).astype(dtype))
            f = 4.0 * B * 3 * L * L * H
            out.append((f"attention fwd {label} H={H} B={B}", ("dot_product_attention", [q, k, v], attrs), f))
            out.append((f"attention bwd {label} H={H} B={B}",
                        ("dot_product_attention_bwd", [q, k, v, o, lse, g], attrs), 2.5 * f))
    # Swin's shifted windows as models/swin.py calls them: the relative position bias
    # [1, heads, 49, 49] and the shift's boolean mask per window (the backward also
    # writes the bias gradient [B, heads, 49, 49]).
    B, L, H = batch * 64 // 8, 49, 32
    q, k, v, g = (arr(rng.standard_normal((B, L, 3, H)).astype(dtype)) for _ in range(4))
    bias = arr(rng.standard_normal((1, 3, L, L)).astype(np.float32))
    mask = arr(rng.random((B, 1, L, L)) > 0.3)
    attrs = {"scale": 1.0 / np.sqrt(H), "causal": 0, "has_bias": 1, "has_mask": 1}
    o, lse = _core.apply("dot_product_attention", [q, k, v, bias, mask], attrs)
    f = 4.0 * B * 3 * L * L * H
    label = f"Swin shifted L=49 H={H} B={B}"
    out.append((f"attention fwd {label}", ("dot_product_attention", [q, k, v, bias, mask], attrs), f))
    out.append((f"attention bwd {label}",
                ("dot_product_attention_bwd", [q, k, v, bias, mask, o, lse, g], attrs), 2.5 * f))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--min-seconds", type=float, default=1.0,
                   help="time each case for at least this long (best call counts; default 1.0)")
    p.add_argument("--threads", type=int, default=0, help="kernel threads (default: all)")
    p.add_argument("--only", choices=["dot", "conv", "attention"], default=None)
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "kernels.json"),
                   help="where the results go as JSON")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                   help="operand/output dtype of every case (accumulation is f32 either way)")
    p.add_argument("--isas", default=None, help="comma list (default: every ISA the host has)")
    p.add_argument("--winograd", action="store_true",
                   help="add a column 'wino': avx512bf16 with conv_winograd on (bf16 3x3 stride-1 convs as "
                        "Winograd F(2x2, 3x3); GFLOP/s and %%peak count the direct convolution's FLOPs)")
    args = p.parse_args()

    info = _core.cpu_info()
    isas = args.isas.split(",") if args.isas else info["available_isas"]
    if args.winograd:
        isas = isas + ["wino"]
    threads = args.threads or os.cpu_count()
    _core.set_num_threads(threads)
    feats = ",".join(k for k, v in info["features"].items() if v)
    print(f"cpu features: {feats}; kernel threads: {threads}; isas: {isas}")
    peak1 = fma_peak(1, args.reps)
    peakn = fma_peak(threads, args.reps) if threads > 1 else peak1
    # On a loaded machine the all-threads loop is disturbed most: the %peak column uses
    # threads x the 1-thread figure (the cores are alike), never less than measured.
    peak = max(peakn, threads * peak1)
    print(f"f32 FMA peak (widest FMA of {info['best_isa']}): {peak1:.1f} GFLOP/s on 1 thread, {peakn:.1f} measured on "
          f"{threads}; f32 %peak is of {peak:.1f}")
    bpeak1 = bf16_peak(1, args.reps)
    bpeakn = bf16_peak(threads, args.reps) if threads > 1 else bpeak1
    bpeak = max(bpeakn, threads * bpeak1)
    print(f"bf16 peak ({'vdpbf16ps' if _core.have_bf16_dot() else 'f32 FMA: no bf16 dot'}): {bpeak1:.1f} GFLOP/s "
          f"on 1 thread, {bpeakn:.1f} measured on {threads}; bf16 %peak is of {bpeak:.1f} (all ISA columns: "
          f"the best the machine can do)")
    apeak = None
    if "amx" in isas:  # the amx column's bf16 cases run on the tiles: their own peak
        _core.set_isa("amx")
        apeak1 = _core.measure_amx_peak(1, 10 * args.reps)
        apeakn = _core.measure_amx_peak(threads, 10 * args.reps) if threads > 1 else apeak1
        apeak = max(apeakn, threads * apeak1)
        print(f"AMX tile peak (TDPBF16PS): {apeak1:.1f} GFLOP/s on 1 thread, {apeakn:.1f} measured on {threads}; "
              f"the amx column's bf16 %peak is of {apeak:.1f}")

    rng = np.random.default_rng(0)
    from podlet._src import dtypes
    dt = dtypes.bfloat16 if args.dtype == "bfloat16" else np.float32
    cases = []
    if args.only in (None, "dot"):
        cases += dot_cases(rng, dt)
    if args.only in (None, "conv"):
        cases += conv_cases(rng, args.batch, dt)
    if args.only in (None, "attention"):
        cases += attention_cases(rng, args.batch, dt)
    hdr = f"{'case':44s}" + "".join(f"{i + ' GF/s':>12s}{'%peak':>7s}" for i in isas)
    print(hdr)
    totals = {i: [0.0, 0.0] for i in isas}
    # The convolutions of one ResNet-34 training step: each case weighted by its count in
    # the network; the stem's backward-data is left out (nothing needs the image gradient).
    step_totals = {i: [0.0, 0.0] for i in isas}
    from _host import host  # bench/_host.py: the CPU the figures come from
    results = {"host": host(), "peak_gflops_1thread": peak1, "peak_gflops_all_measured": peakn, "peak_gflops": peak,
               "bf16_peak_gflops_1thread": bpeak1, "bf16_peak_gflops_all_measured": bpeakn,
               "bf16_peak_gflops": bpeak, "amx_peak_gflops": apeak, "threads": threads, "batch": args.batch, "dtype": args.dtype,
               "cases": []}
    for name, (prim, ins, attrs), flops in cases:
        row = f"{name:44s}"
        # A case's peak is the one of its operand dtype: bf16 operands can use the bf16 dot.
        pk = bpeak if str(ins[0].dtype) == "bfloat16" else peak
        for isa in isas:
            pk_isa = apeak if isa == "amx" and str(ins[0].dtype) == "bfloat16" else pk
            _core.set_isa("avx512bf16" if isa == "wino" else isa)
            _core.set_conv_winograd(isa == "wino")
            t = best_time(lambda: _core.apply(prim, ins, attrs), args.reps, args.min_seconds)
            totals[isa][0] += flops
            totals[isa][1] += t
            if name.startswith("conv") and "bwd_d 7x7 224x224x1" not in name:
                count = int(name.rsplit("(x", 1)[1].rstrip(")"))
                step_totals[isa][0] += count * flops
                step_totals[isa][1] += count * t
            row += f"{flops / t / 1e9:12.1f}{100 * flops / t / 1e9 / pk_isa:6.0f}%"
            results["cases"].append({"case": name, "isa": isa, "seconds": t, "gflops": flops / t / 1e9,
                                     "pct_peak": 100 * flops / t / 1e9 / pk_isa})
        print(row, flush=True)
    pk = bpeak if args.dtype == "bfloat16" else peak

    def col_peak(isa):  # the amx column's bf16 totals: of the tile peak
        return apeak if isa == "amx" and args.dtype == "bfloat16" else pk
    print(f"{'all cases (total flops / total time)':44s}" +
          "".join(f"{f / t / 1e9:12.1f}{100 * f / t / 1e9 / col_peak(i):6.0f}%" for i, (f, t) in totals.items()))
    if any(t for _, t in step_totals.values()):
        print(f"{'ResNet-34 step convs (weighted by count)':44s}" +
              "".join(f"{f / t / 1e9:12.1f}{100 * f / t / 1e9 / col_peak(i):6.0f}%"
                      for i, (f, t) in step_totals.items() if t))
        results["resnet34_step_convs"] = {i: {"gflops": f / t / 1e9, "pct_peak": 100 * f / t / 1e9 / col_peak(i)}
                                          for i, (f, t) in step_totals.items() if t}
    _core.set_isa(info["best_isa"])
    _core.set_conv_winograd(False)
    import json
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
