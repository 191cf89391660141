// The loop of kernels/unary_math.h, included once per ISA build (unary_math_ref.cc,
// _avx2.cc, _avx512.cc): fastmath.h has internal linkage, so each build inlines its own
// copy of the fm functions with that build's FMA.
#pragma once
#include "podlet/kernels/fastmath.h"
#include "podlet/kernels/unary_math.h"

namespace podlet::kernels {
namespace {

template <class Fn>
void unary_math_with(const UnaryMathArgs& a, int64_t b, int64_t e, Fn fn) {
  if (a.bf16) {
    const uint16_t* x = static_cast<const uint16_t*>(a.x);
    uint16_t* y = static_cast<uint16_t*>(a.y);
    for (int64_t i = b; i < e; ++i) y[i] = f32_to_bf16_bits(fn(bf16_bits_to_f32(x[i])));
  } else {
    const float* x = static_cast<const float*>(a.x);
    float* y = static_cast<float*>(a.y);
    for (int64_t i = b; i < e; ++i) y[i] = fn(x[i]);
  }
}

inline void unary_math_loop(const UnaryMathArgs& a, int64_t b, int64_t e) {
  switch (a.f) {
    case UnaryMath::exp: return unary_math_with(a, b, e, [](float x) { return fm::exp(x); });
    case UnaryMath::logistic: return unary_math_with(a, b, e, [](float x) { return fm::logistic(x); });
    case UnaryMath::tanh: return unary_math_with(a, b, e, [](float x) { return fm::tanh(x); });
    case UnaryMath::erf: return unary_math_with(a, b, e, [](float x) { return fm::erf(x); });
  }
}

}  // namespace
}  // namespace podlet::kernels
