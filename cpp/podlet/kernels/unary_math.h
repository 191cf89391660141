// The eager exp, logistic, tanh and erf kernels (prims/elementwise.cc) over elements
// [b, e) of an f32 or bf16 array: fm::exp / logistic / tanh / erf (kernels/fastmath.h) one
// element at a time, bf16 computed in f32 and rounded once. All are FMA formulas: the
// baseline build calls libm's fmaf for each FMA, 5x slower than the SSE2 loops they
// replaced, so AVX2 and AVX-512 hosts run these ISA copies of the loop (the FMA
// instruction, 8 or 16 lanes, the same bits: tests/test_elementwise.py compares every ISA
// with jax or `ref`). The fused interpreter and the fused JIT have ISA builds already.
#pragma once
#include <cstdint>

namespace podlet::kernels {

enum class UnaryMath { exp, logistic, tanh, erf };
struct UnaryMathArgs {
  UnaryMath f;
  bool bf16;  // else f32
  const void* x;
  void* y;
};
void unary_math_ref(const UnaryMathArgs& a, int64_t b, int64_t e);
void unary_math_avx2(const UnaryMathArgs& a, int64_t b, int64_t e);
void unary_math_avx512(const UnaryMathArgs& a, int64_t b, int64_t e);

}  // namespace podlet::kernels
