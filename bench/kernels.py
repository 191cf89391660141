"""GFLOP/s of the contraction kernels on every ISA this host has (ref vs avx2 ...), beside
the measured f32 FMA peak of the machine (an AVX2 FMA loop on 1 and on all threads).

    .venv/bin/python bench/kernels.py                 # everything, best of 3 runs
    .venv/bin/python bench/kernels.py --only dot --reps 5 --threads 1

Shapes: dot 1024^3, the MLP layer 128x784 @ 784x1024 and its two backward products
(x^T g and g W^T, which read an operand transposed), and the ResNet-34 3x3 convolutions
at batch 8 (224x224 input) in forward, backward-data and backward-filter. The machine is
shared: each figure is the best of --reps runs. A figure for notes, not a test.
"""
import argparse
import ctypes
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))

from podlet import _core  # noqa: E402

PEAK_SRC = r"""
#include <immintrin.h>
#include <omp.h>
/* 12 independent FMA chains per thread in named registers (an array would live in
   memory at -O2); 12 > FMA latency x pipes. Returns GFLOP/s. */
double fma_peak(int threads, long iters) {
  double t0 = omp_get_wtime();
  float sink = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
  {
    const __m256 b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    __m256 a0 = _mm256_set1_ps(0.f), a1 = _mm256_set1_ps(1.f), a2 = _mm256_set1_ps(2.f), a3 = _mm256_set1_ps(3.f);
    __m256 a4 = _mm256_set1_ps(4.f), a5 = _mm256_set1_ps(5.f), a6 = _mm256_set1_ps(6.f), a7 = _mm256_set1_ps(7.f);
    __m256 a8 = _mm256_set1_ps(8.f), a9 = _mm256_set1_ps(9.f), a10 = _mm256_set1_ps(10.f), a11 = _mm256_set1_ps(11.f);
    for (long it = 0; it < iters; ++it) {
#define F(x) x = _mm256_fmadd_ps(x, b, c)
      F(a0); F(a1); F(a2); F(a3); F(a4); F(a5); F(a6); F(a7); F(a8); F(a9); F(a10); F(a11);
#undef F
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
    float out[8];
    _mm256_storeu_ps(out, s);
    sink += out[0];
  }
  double dt = omp_get_wtime() - t0;
  if (sink == 12345.f) return -1; /* keeps the loop */
  return 2.0 * 8 * 12 * (double)iters * threads / dt / 1e9;
}
"""


def fma_peak(threads, reps):
    """Best GFLOP/s of an AVX2 FMA loop on `threads` threads (compiled here with cc)."""
    d = tempfile.mkdtemp()
    src, lib = os.path.join(d, "peak.c"), os.path.join(d, "peak.so")
    with open(src, "w") as f:
        f.write(PEAK_SRC)
    subprocess.run(["cc", "-O2", "-mavx2", "-mfma", "-fopenmp", "-shared", "-fPIC", src, "-o", lib], check=True)
    fn = ctypes.CDLL(lib).fma_peak
    fn.restype, fn.argtypes = ctypes.c_double, [ctypes.c_int, ctypes.c_long]
    fn(threads, 20_000_000)  # warm up, let the clock settle
    # Many short runs (~10 ms): on a loaded machine the best one is the least disturbed.
    return max(fn(threads, 3_000_000) for _ in range(10 * reps))


def arr(x):
    return _core.Array.from_numpy(np.ascontiguousarray(x))


def best_time(f, reps):
    f()  # warm-up (and first-touch of the output)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def dot_cases(rng):
    def dot(m, k, n, lc=1, rc=0, name=None):
        a = rng.standard_normal((m, k) if lc == 1 else (k, m)).astype(np.float32)
        b = rng.standard_normal((k, n) if rc == 0 else (n, k)).astype(np.float32)
        attrs = dict(lhs_contracting=[lc], rhs_contracting=[rc], lhs_batch=[], rhs_batch=[])
        return name or f"dot {m}x{k} @ {k}x{n}", ("dot_general", [arr(a), arr(b)], attrs), 2.0 * m * n * k
    return [dot(1024, 1024, 1024),
            dot(128, 784, 1024, name="mlp fwd  x[128,784] @ W[784,1024]"),
            dot(784, 128, 1024, lc=0, name="mlp dW   x^T[784,128] @ g[128,1024]"),
            dot(128, 1024, 784, rc=1, name="mlp dX   g[128,1024] @ W^T[1024,784]")]


# ResNet-34 3x3 convolutions (input H, Cin, Cout, stride) at 224x224 input.
RESNET34_3X3 = [(56, 64, 64, 1), (56, 64, 128, 2), (28, 128, 128, 1), (28, 128, 256, 2), (14, 256, 256, 1),
                (14, 256, 512, 2), (7, 512, 512, 1)]


def conv_cases(rng, batch):
    out = []
    for h, ci, co, s in RESNET34_3X3:
        ho = h // s
        pad = [1, 1, 1, 1] if s == 1 else [0, 1, 0, 1]  # SAME
        x = arr(rng.standard_normal((batch, h, h, ci)).astype(np.float32))
        w = arr((rng.standard_normal((3, 3, ci, co)) * 0.05).astype(np.float32))
        g = arr(rng.standard_normal((batch, ho, ho, co)).astype(np.float32))
        a = dict(window_strides=[s, s], padding=pad, lhs_dilation=[1, 1], rhs_dilation=[1, 1], feature_group_count=1)
        fl = 2.0 * batch * ho * ho * co * 9 * ci
        tag = f"{h}x{h}x{ci}->{co} s{s}"
        out += [(f"conv fwd   {tag}", ("conv_general_dilated", [x, w], a), fl),
                (f"conv bwd_d {tag}", ("conv_bwd_data", [g, w], dict(a, lhs_shape=[batch, h, h, ci])), fl),
                (f"conv bwd_f {tag}", ("conv_bwd_filter", [x, g], dict(a, rhs_shape=[3, 3, ci, co])), fl)]
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="kernel threads (default: all)")
    p.add_argument("--only", choices=["dot", "conv"], default=None)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--isas", default=None, help="comma list (default: every ISA the host has)")
    args = p.parse_args()

    info = _core.cpu_info()
    isas = args.isas.split(",") if args.isas else info["available_isas"]
    threads = args.threads or os.cpu_count()
    _core.set_num_threads(threads)
    feats = ",".join(k for k, v in info["features"].items() if v)
    print(f"cpu features: {feats}; kernel threads: {threads}; isas: {isas}")
    peak1 = fma_peak(1, args.reps)
    peakn = fma_peak(threads, args.reps) if threads > 1 else peak1
    # On a loaded machine the all-threads loop is disturbed most: the %peak column uses
    # threads x the 1-thread figure (the cores are alike), never less than measured.
    peak = max(peakn, threads * peak1)
    print(f"f32 FMA peak (AVX2 loop): {peak1:.1f} GFLOP/s on 1 thread, {peakn:.1f} measured on {threads}; "
          f"%peak is of {peak:.1f}")

    rng = np.random.default_rng(0)
    cases = []
    if args.only in (None, "dot"):
        cases += dot_cases(rng)
    if args.only in (None, "conv"):
        cases += conv_cases(rng, args.batch)
    hdr = f"{'case':44s}" + "".join(f"{i + ' GF/s':>12s}{'%peak':>7s}" for i in isas)
    print(hdr)
    totals = {i: [0.0, 0.0] for i in isas}
    for name, (prim, ins, attrs), flops in cases:
        row = f"{name:44s}"
        for isa in isas:
            _core.set_isa(isa)
            t = best_time(lambda: _core.apply(prim, ins, attrs), args.reps)
            totals[isa][0] += flops
            totals[isa][1] += t
            row += f"{flops / t / 1e9:12.1f}{100 * flops / t / 1e9 / peak:6.0f}%"
        print(row, flush=True)
    print(f"{'all cases (total flops / total time)':44s}" +
          "".join(f"{f / t / 1e9:12.1f}{100 * f / t / 1e9 / peak:6.0f}%" for f, t in totals.values()))
    _core.set_isa(info["best_isa"])


if __name__ == "__main__":
    main()
