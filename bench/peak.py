"""The machine's arithmetic peak, measured: f32 FMA (the widest FMA the active ISA has:
zmm on AVX-512, ymm on AVX2) on 1 thread and on all threads, and the bf16 dot peak where
the CPU has a bf16 dot instruction (AVX512_BF16 vdpbf16ps; whether bf16 GEMMs use it or the
f32 FMAs, podlet's choice per vendor, is printed beside it), and the AMX tile peak
(TDPBF16PS into 4 accumulator tiles) where the active ISA is amx; elsewhere bf16 kernels
widen to f32 and their peak is the f32 peak. The same C++ loops (cpp/podlet/kernels/peak_*.cc)
are the denominators of podlet.profile's %peak and MFU and of bench/kernels.py.

    .venv/bin/python bench/peak.py [--reps 20]

On a shared machine the all-threads loop is the most disturbed; every figure is the
best of --reps short runs, and the %peak denominators elsewhere use
max(all-threads measured, threads x 1-thread).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))

from podlet import _core  # noqa: E402


def measure(reps=20, threads=None):
    threads = threads or os.cpu_count()
    one = _core.measure_peak(1, reps)
    alln = _core.measure_peak(threads, reps) if threads > 1 else one
    info = _core.cpu_info()
    r = {"isa": info["active_isa"], "threads": threads, "f32_fma_gflops_1thread": one,
         "f32_fma_gflops_all_measured": alln, "f32_fma_gflops_all": max(alln, threads * one),
         "bf16_dot": "available" if _core.have_bf16_dot() else "not available on this CPU (no AVX512_BF16)",
         "bf16_dot_gflops_1thread": None, "bf16_dot_gflops_all_measured": None, "bf16_dot_gflops_all": None}
    if _core.have_bf16_dot() and info["active_isa"] in ("avx512bf16", "amx"):
        b1 = _core.measure_bf16_peak(1, reps)
        bn = _core.measure_bf16_peak(threads, reps) if threads > 1 else b1
        r.update(bf16_dot_gflops_1thread=b1, bf16_dot_gflops_all_measured=bn, bf16_dot_gflops_all=max(bn, threads * b1))
    # What bf16 GEMMs and direct convolutions run on: vdpbf16ps, or f32 FMAs where the bf16
    # dot is set aside (_core.set_bf16_dot: Intel without AMX in use, where vdpbf16ps
    # measures at half the FMAs' FLOP rate).
    r["bf16_gemm_on"] = ("vdpbf16ps" if r["bf16_dot_gflops_all"] and _core.bf16_dot() else "f32 FMA")
    r.update(amx="available" if info["active_isa"] == "amx" else info.get("amx_note", "not available on this CPU"),
             amx_gflops_1thread=None, amx_gflops_all_measured=None, amx_gflops_all=None)
    if info["active_isa"] == "amx":
        t1 = _core.measure_amx_peak(1, reps)
        tn = _core.measure_amx_peak(threads, reps) if threads > 1 else t1
        r.update(amx_gflops_1thread=t1, amx_gflops_all_measured=tn, amx_gflops_all=max(tn, threads * t1))
    return r


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=20)
    a = p.parse_args()
    r = measure(a.reps)
    print(f"ISA {r['isa']}: f32 FMA peak {r['f32_fma_gflops_1thread']:.1f} GFLOP/s on 1 thread, "
          f"{r['f32_fma_gflops_all_measured']:.1f} measured on {r['threads']} "
          f"(used as peak: {r['f32_fma_gflops_all']:.1f}); bf16 dot: {r['bf16_dot']}")
    if r["bf16_dot_gflops_all"]:
        print(f"bf16 dot (vdpbf16ps) peak {r['bf16_dot_gflops_1thread']:.1f} GFLOP/s on 1 thread, "
              f"{r['bf16_dot_gflops_all_measured']:.1f} measured on {r['threads']} "
              f"(used as peak: {r['bf16_dot_gflops_all']:.1f})")
    print(f"bf16 GEMMs and direct convolutions run on: {r['bf16_gemm_on']}"
          + (" (the AMX tiles where they cover the shape)" if r["isa"] == "amx" else ""))
    if r["amx_gflops_all"]:
        print(f"AMX tiles (TDPBF16PS) peak {r['amx_gflops_1thread']:.1f} GFLOP/s on 1 thread, "
              f"{r['amx_gflops_all_measured']:.1f} measured on {r['threads']} "
              f"(used as the bf16 peak: {r['amx_gflops_all']:.1f})")
    else:
        print(f"AMX tiles: {r['amx']}")
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    from _host import host  # bench/_host.py: the CPU the figures come from
    with open(os.path.join(os.path.dirname(__file__), "results", "peak.json"), "w") as f:
        json.dump({"host": host(), **r}, f, indent=2)


if __name__ == "__main__":
    main()
