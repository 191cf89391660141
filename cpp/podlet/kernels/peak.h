// The machine's arithmetic peak, measured (not looked up): the denominator of every
// "% of peak" and MFU figure podlet prints (profiler, bench/).
#pragma once
#include <cstdint>

namespace podlet::kernels {

// GFLOP/s of an f32 FMA loop on `threads` threads (each FMA = 2 FLOPs): the best of
// `reps` short runs (~5 ms each), so on a shared machine the least-disturbed run
// counts. Uses the widest FMA the active ISA has (AVX-512: 16 lanes, AVX2: 8); 0 on `ref`.
double measure_f32_fma_peak(int threads, int reps = 20);

// GFLOP/s of a bf16 dot loop (vdpbf16ps: 2 products + 2 adds per f32 lane) when the
// active ISA is avx512bf16; otherwise the f32 FMA peak, since bf16 kernels then widen
// to f32 and run on the FMAs.
double measure_bf16_peak(int threads, int reps = 20);

// Whether the host has a bf16 dot instruction (AVX512_BF16 vdpbf16ps).
bool have_bf16_dot();

// GFLOP/s of the AMX tiles: TDPBF16PS into 4 accumulator tiles (16 x 16 x 32 multiply-
// adds = 16384 FLOPs each) when the active ISA is amx; 0 otherwise. The denominator of
// %peak and MFU on AMX hosts.
double measure_amx_peak(int threads, int reps = 20);

// One timed run of each loop: GFLOP/s. Call only when the host has the ISA.
double fma_loop_avx2(int threads, int64_t iters);
double fma_loop_avx512(int threads, int64_t iters);
double bf16_dot_loop_avx512bf16(int threads, int64_t iters);
double amx_dot_loop_amx(int threads, int64_t iters);

}  // namespace podlet::kernels
