// The bf16 dot algorithms of dot_general and the convolution primitives (their
// `algorithm` attr): a TPU's numerics for f32 operands, on the CPU's bf16 kernels.
//
//   ""        the operands as they are (f32 products exact, f32 sums): podlet's default
//   "bf16"    f32 operands rounded to bf16 (round to nearest even), exact products, f32
//             sums: one pass (jax's Precision 'bfloat16', DotAlgorithmPreset.BF16_BF16_F32;
//             a TPU's DEFAULT)
//   "bf16_3x" hi = bf16(x), lo = bf16(x - hi) per f32 operand; three bf16 passes
//             (jax's 'bfloat16_3x', BF16_BF16_F32_X3; a TPU's HIGH)
//   "bf16_6x" hi, mid = bf16(x - hi), lo = bf16(x - hi - mid); six passes (BF16_BF16_F32_X6)
//
// Each pass is the primitive's own kernel (kernels::gemm, kernels::conv_*) with bf16
// operands and an f32 result, so the bf16 dispatch (AVX512_BF16, AMX) runs it; the passes
// are combined elementwise in the order of XLA's DotAlgorithmRewriter
// (xla/service/gpu/transforms/dot_algorithm_rewriter.cc, RewriteF32ToBF16X3 / X6): the
// small terms first, a NaN of their sum replaced by 0 (x = 1.0 splits into hi = 1, lo = 0,
// and lo * inf would poison an infinite result), the hi*hi term last. XLA takes hi by
// truncating the mantissa; podlet rounds to nearest even (as Triton's BF16x3 lowering
// does), so the one-pass "bf16" product is the hi*hi term of "bf16_3x".
//
// The algorithm applies when no operand or result is f64 (those stay exact, f64 sums)
// and not both operands are already bf16 (they need no rounding); otherwise the kernel
// runs once on the operands as they are.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include "podlet/dtype.h"

namespace podlet {

enum class DotAlgorithm { none, bf16, bf16_3x, bf16_6x };

// "" / "bf16" / "bf16_3x" / "bf16_6x"; anything else: ValueError naming it.
DotAlgorithm dot_algorithm_from_name(const std::string& s);

// Whether `alg` changes the arithmetic of operands (a, b) and result `out` (see above).
bool dot_algorithm_applies(DotAlgorithm alg, DType a, DType b, DType out);

// One operand of a bilinear kernel: dtype, contiguous data, element count.
struct DotOperand {
  DType dtype;
  const void* data;
  int64_t size;
};

// pass(a_dtype, a, b_dtype, b, out_dtype, out): the kernel, run on operands of the
// original layout (only the dtype changes).
using DotPass = std::function<void(DType, const void*, DType, const void*, DType, void*)>;

// out[0:out_size] (dtype out_dtype) = the algorithm's product of a and b, through `pass`.
void run_dot_algorithm(DotAlgorithm alg, const DotOperand& a, const DotOperand& b, DType out_dtype, void* out,
                       int64_t out_size, const DotPass& pass);

}  // namespace podlet
