// AVX-512 batched GEMM behind dot_general, F32Kind: f32 / bf16 operands in any mix,
// widened to f32 when packed, 16-lane FMAs, f32 / bf16 output (gemm_avx512_impl.h).
#include "podlet/kernels/gemm_avx512_impl.h"

namespace podlet::kernels {

// Preconditions (checked by gemm()): a, b in {f32, bf16}, c in {f32, bf16}, B*M*N > 0.
void gemm_avx512(const GemmArgs& g) {
  using namespace avx512;
  const bool a16 = g.a_dtype == DType::bf16, b16 = g.b_dtype == DType::bf16;
  if (a16 && b16) gemm_run<F32Kind, bf16, bf16>(g);
  else if (a16) gemm_run<F32Kind, bf16, float>(g);
  else if (b16) gemm_run<F32Kind, float, bf16>(g);
  else gemm_run<F32Kind, float, float>(g);
}

}  // namespace podlet::kernels
