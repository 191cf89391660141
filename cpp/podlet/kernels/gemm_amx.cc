// AMX-BF16 batched GEMM behind dot_general: bf16 operands on the matrix tiles, f32
// accumulation, f32 / bf16 output (gemm_amx_impl.h on the hardware backend).
#include "podlet/kernels/gemm_amx_impl.h"

namespace podlet::kernels {

// Preconditions (checked by gemm()): a, b bf16, c in {f32, bf16}, B*M*N > 0, and the
// active ISA is amx (cpuid + the Linux tile permission).
void gemm_amx(const GemmArgs& g) { amx::gemm_run<amx::Hw>(g); }

}  // namespace podlet::kernels
