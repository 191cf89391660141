// The machine's arithmetic peak, measured (not looked up): the denominator of every
// "% of peak" and MFU figure podlet prints (profiler, bench/).
#pragma once
#include <cstdint>

namespace podlet::kernels {

// GFLOP/s of an f32 FMA loop on `threads` threads (each FMA = 2 FLOPs): the best of
// `reps` short runs (~5 ms each), so on a shared machine the least-disturbed run
// counts. Uses the widest FMA the active ISA has (AVX2: 8 lanes); 0 on `ref`.
double measure_f32_fma_peak(int threads, int reps = 20);

// Whether the host has a bf16 dot instruction (AVX512_BF16 vdpbf16ps). Without one,
// bf16 kernels widen to f32 and their peak is the f32 FMA peak.
bool have_bf16_dot();

// One timed run of the AVX2 loop: GFLOP/s (peak_avx2.cc; call only on AVX2+FMA hosts).
double fma_loop_avx2(int threads, int64_t iters);

}  // namespace podlet::kernels
