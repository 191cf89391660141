// The bf16 dot peak loop: vdpbf16ps, 16 f32 lanes each adding a product of two bf16
// pairs (4 FLOPs a lane, 64 an instruction). 12 independent accumulator chains: more
// than latency x pipes, so throughput-bound like the FMA loops.
#include <immintrin.h>
#include <omp.h>
#include "podlet/kernels/peak.h"
#include "podlet/parallel.h"

namespace podlet::kernels {

double bf16_dot_loop_avx512bf16(int threads, int64_t iters) {
  const double t0 = omp_get_wtime();
  float sink = 0;
  on_threads(threads, [&](int) {
    // 0x3f80 is bf16 1.0, 0x3380 about 6e-8: accumulators grow slowly and stay finite.
    const __m512bh b = (__m512bh)_mm512_set1_epi32(0x3f803f80), c = (__m512bh)_mm512_set1_epi32(0x33803380);
    __m512 a0 = _mm512_set1_ps(0.f), a1 = _mm512_set1_ps(1.f), a2 = _mm512_set1_ps(2.f), a3 = _mm512_set1_ps(3.f);
    __m512 a4 = _mm512_set1_ps(4.f), a5 = _mm512_set1_ps(5.f), a6 = _mm512_set1_ps(6.f), a7 = _mm512_set1_ps(7.f);
    __m512 a8 = _mm512_set1_ps(8.f), a9 = _mm512_set1_ps(9.f), a10 = _mm512_set1_ps(10.f), a11 = _mm512_set1_ps(11.f);
    for (int64_t it = 0; it < iters; ++it) {
#define F(x) x = _mm512_dpbf16_ps(x, b, c)
      F(a0); F(a1); F(a2); F(a3); F(a4); F(a5); F(a6); F(a7); F(a8); F(a9); F(a10); F(a11);
#undef F
      __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5));
      __asm__ volatile("" : "+v"(a6), "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));
    }
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                             _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
#pragma omp atomic
    sink += _mm512_reduce_add_ps(s);
  });
  const double dt = omp_get_wtime() - t0;
  volatile float keep = sink;
  (void)keep;
  return 4.0 * 16 * 12 * double(iters) * threads / dt / 1e9;
}

}  // namespace podlet::kernels
