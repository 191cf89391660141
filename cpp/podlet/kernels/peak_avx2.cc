// The AVX2+FMA peak loop. 12 independent accumulator chains in named registers (an
// array would live in memory): 12 > FMA latency (4-5 cycles) x 2 pipes, so the loop
// is bound by FMA throughput, not latency.
#include <immintrin.h>
#include <omp.h>
#include "podlet/kernels/peak.h"
#include "podlet/parallel.h"

namespace podlet::kernels {

double fma_loop_avx2(int threads, int64_t iters) {
  const double t0 = omp_get_wtime();
  float sink = 0;
  on_threads(threads, [&](int) {
    const __m256 b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    __m256 a0 = _mm256_set1_ps(0.f), a1 = _mm256_set1_ps(1.f), a2 = _mm256_set1_ps(2.f), a3 = _mm256_set1_ps(3.f);
    __m256 a4 = _mm256_set1_ps(4.f), a5 = _mm256_set1_ps(5.f), a6 = _mm256_set1_ps(6.f), a7 = _mm256_set1_ps(7.f);
    __m256 a8 = _mm256_set1_ps(8.f), a9 = _mm256_set1_ps(9.f), a10 = _mm256_set1_ps(10.f), a11 = _mm256_set1_ps(11.f);
    for (int64_t it = 0; it < iters; ++it) {
#define F(x) x = _mm256_fmadd_ps(x, b, c)
      F(a0); F(a1); F(a2); F(a3); F(a4); F(a5); F(a6); F(a7); F(a8); F(a9); F(a10); F(a11);
#undef F
      // An empty asm that "reads" the accumulators keeps GCC from collapsing the chains.
      __asm__ volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5));
      __asm__ volatile("" : "+x"(a6), "+x"(a7), "+x"(a8), "+x"(a9), "+x"(a10), "+x"(a11));
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
    float out[8];
    _mm256_storeu_ps(out, s);
#pragma omp atomic
    sink += out[0];
  });
  const double dt = omp_get_wtime() - t0;
  volatile float keep = sink;
  (void)keep;
  return 2.0 * 8 * 12 * double(iters) * threads / dt / 1e9;
}

}  // namespace podlet::kernels
