// Peak measurement dispatch (see peak.h). Compiled for baseline x86-64: the AVX2 loop
// is only called after cpuid says the host has it.
#include <algorithm>
#include "podlet/cpu/isa.h"
#include "podlet/kernels/peak.h"

namespace podlet::kernels {

double measure_f32_fma_peak(int threads, int reps) {
  if (int(cpu::active_isa()) < int(cpu::Isa::avx2)) return 0.0;
  threads = std::max(threads, 1);
  fma_loop_avx2(threads, 10'000'000);  // warm-up: let the clock ramp up
  double best = 0;
  for (int r = 0; r < std::max(reps, 1); ++r) best = std::max(best, fma_loop_avx2(threads, 2'000'000));
  return best;
}

bool have_bf16_dot() { return cpu::host_supports(cpu::Isa::avx512bf16); }

}  // namespace podlet::kernels
