// The AVX-512 f32 FMA peak loop: as peak_avx2.cc with 16-lane zmm FMAs. 12 independent
// chains cover the FMA latency (4 cycles) x 2 pipes with room to spare.
#include <immintrin.h>
#include <omp.h>
#include "podlet/kernels/peak.h"
#include "podlet/parallel.h"

namespace podlet::kernels {

double fma_loop_avx512(int threads, int64_t iters) {
  const double t0 = omp_get_wtime();
  float sink = 0;
  on_threads(threads, [&](int) {
    const __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    __m512 a0 = _mm512_set1_ps(0.f), a1 = _mm512_set1_ps(1.f), a2 = _mm512_set1_ps(2.f), a3 = _mm512_set1_ps(3.f);
    __m512 a4 = _mm512_set1_ps(4.f), a5 = _mm512_set1_ps(5.f), a6 = _mm512_set1_ps(6.f), a7 = _mm512_set1_ps(7.f);
    __m512 a8 = _mm512_set1_ps(8.f), a9 = _mm512_set1_ps(9.f), a10 = _mm512_set1_ps(10.f), a11 = _mm512_set1_ps(11.f);
    for (int64_t it = 0; it < iters; ++it) {
#define F(x) x = _mm512_fmadd_ps(x, b, c)
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
  return 2.0 * 16 * 12 * double(iters) * threads / dt / 1e9;
}

}  // namespace podlet::kernels
