// The AMX peak loop: TDPBF16PS into 4 independent accumulator tiles from 2 A and 2 B
// tiles loaded once (the 2 x 2 block of the GEMM micro-kernel without its loads), each
// instruction 16 x 16 outputs x 32 products = 16384 FLOPs.
#include <omp.h>
#include "podlet/kernels/amx_tiles.h"
#include "podlet/kernels/peak.h"
#include "podlet/parallel.h"

namespace podlet::kernels {

double amx_dot_loop_amx(int threads, int64_t iters) {
  using T = amx::Hw;
  // Operand tiles of bf16 1.0 (A) and about 6e-8 (B): the accumulators stay finite.
  alignas(64) static uint16_t a[amx::kTileElems], b[amx::kTileElems];
  for (int i = 0; i < amx::kTileElems; ++i) a[i] = 0x3f80, b[i] = 0x3380;
  iters /= 8;  // one TDPBF16PS is worth ~16 zmm FMAs of issue time: keep runs short
  const double t0 = omp_get_wtime();
  on_threads(threads, [&](int) {
    T::configure();
    T::template load<4>(a, amx::kRowBytes);
    T::template load<5>(a, amx::kRowBytes);
    T::template load<6>(b, amx::kRowBytes);
    T::template load<7>(b, amx::kRowBytes);
    T::template zero<0>();
    T::template zero<1>();
    T::template zero<2>();
    T::template zero<3>();
    for (int64_t it = 0; it < iters; ++it) {
      T::template dp<0, 4, 6>();
      T::template dp<1, 4, 7>();
      T::template dp<2, 5, 6>();
      T::template dp<3, 5, 7>();
    }
    alignas(64) float sink[16 * 16];
    T::template store<0>(sink, 64);
    T::release();
    volatile float keep = sink[0];
    (void)keep;
  });
  const double dt = omp_get_wtime() - t0;
  return 4.0 * 16384.0 * double(iters) * threads / dt / 1e9;
}

}  // namespace podlet::kernels
