// AVX512_BF16 batched GEMM behind dot_general, Bf16Kind: bf16 operands taken in K pairs
// by vdpbf16ps into f32 accumulators, f32 / bf16 output (gemm_avx512_impl.h).
#include "podlet/kernels/gemm_avx512_impl.h"

namespace podlet::kernels {

// Preconditions (checked by gemm()): a, b bf16, c in {f32, bf16}, B*M*N > 0.
void gemm_avx512bf16(const GemmArgs& g) { avx512::gemm_run<avx512::Bf16Kind, bf16, bf16>(g); }

}  // namespace podlet::kernels
