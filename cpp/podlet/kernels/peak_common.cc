// Peak measurement dispatch (see peak.h). Compiled for baseline x86-64: an ISA loop is
// only called after cpuid says the host has it (and the active ISA allows it).
#include <algorithm>
#include "podlet/cpu/isa.h"
#include "podlet/kernels/peak.h"

namespace podlet::kernels {
namespace {

template <class Loop> double best_of(Loop loop, int threads, int reps) {
  threads = std::max(threads, 1);
  loop(threads, 10'000'000);  // warm-up: let the clock ramp up
  double best = 0;
  for (int r = 0; r < std::max(reps, 1); ++r) best = std::max(best, loop(threads, 2'000'000));
  return best;
}

}  // namespace

double measure_f32_fma_peak(int threads, int reps) {
  const cpu::Isa isa = cpu::active_isa();
  if (int(isa) >= int(cpu::Isa::avx512)) return best_of(fma_loop_avx512, threads, reps);
  if (int(isa) >= int(cpu::Isa::avx2)) return best_of(fma_loop_avx2, threads, reps);
  return 0.0;
}

double measure_bf16_peak(int threads, int reps) {
  if (int(cpu::active_isa()) >= int(cpu::Isa::avx512bf16)) return best_of(bf16_dot_loop_avx512bf16, threads, reps);
  return measure_f32_fma_peak(threads, reps);
}

bool have_bf16_dot() { return cpu::host_supports(cpu::Isa::avx512bf16); }

double measure_amx_peak(int threads, int reps) {
  if (cpu::active_isa() != cpu::Isa::amx) return 0.0;
  return best_of(amx_dot_loop_amx, threads, reps);
}

}  // namespace podlet::kernels
