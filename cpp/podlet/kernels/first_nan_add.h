// a + b with the NaN rule of x86's addps / vaddps, which is podlet's rule for an add (the
// elementwise add, SumOp's comb, the optimizer's add_first): a NaN first operand comes
// back quieted whatever b is (a + 0), else a NaN b quieted. Written as asm because a
// compiler may commute the operands of an add intrinsic. Internal linkage: each ISA's
// translation unit keeps its own copy.
#pragma once
#include <immintrin.h>

namespace podlet::kernels {
namespace {

inline __m128 add_keep_first_nan(__m128 a, __m128 b) {  // SSE: the baseline
  asm("addps %1, %0" : "+x"(a) : "x"(b));
  return a;
}
#ifdef __AVX512F__
inline __m512 add_keep_first_nan(__m512 a, __m512 b) {
  __m512 r;
  asm("vaddps %2, %1, %0" : "=v"(r) : "v"(a), "v"(b));
  return r;
}
#endif

}  // namespace
}  // namespace podlet::kernels
