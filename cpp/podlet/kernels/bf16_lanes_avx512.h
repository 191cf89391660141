// 16 lanes of bf16 or f32 as f32 and back (AVX-512 translation units only): loads that
// widen (bf16 -> f32 is a 16-bit left shift), the mask of a tail, and fastmath.h's
// f32_to_bf16_bits on 16 lanes: round to nearest even, a NaN to the canonical quiet NaN
// with its sign. Not vcvtneps2bf16, which keeps a NaN's payload and flushes subnormals.
// Internal linkage, as fastmath.h.
#pragma once
#include <immintrin.h>
#include <cstdint>
#include "podlet/dtype.h"

namespace podlet::kernels {
namespace {

inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const bf16* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)), 16));
}
// The lanes of m (the others zero); never touches memory past them.
inline __m512 maskload16(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
inline __m512 maskload16(const bf16* p, __mmask16 m) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}
inline __mmask16 tail16(int64_t n) { return __mmask16((1u << n) - 1u); }  // the first n lanes, n <= 16

// Each lane's bf16 bits in the low half of its 32-bit word.
inline __m512i bf16_bits_epi32(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  const __m512i q = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x8000)),
                                    _mm512_set1_epi32(0x7fc0));
  return _mm512_mask_blend_epi32(nan, r, q);
}
// The 16 bf16 words packed.
inline __m256i bf16_words(__m512 v) { return _mm512_cvtepi32_epi16(bf16_bits_epi32(v)); }

// f32_to_bf16_bits on the lanes of m (the others are not stored, so not checked).
inline __m256i round16(__m512 v, __mmask16 m = 0xffff) {
#if defined(__AVX512BF16__)
  // vcvtneps2bf16 rounds to nearest even like f32_to_bf16_bits for every f32 but NaNs (it
  // keeps their payload) and subnormals (it flushes them): those vectors take the integer
  // sequence.
  if (__builtin_expect(_mm512_mask_fpclass_ps_mask(m, v, 0xa1) == 0, 1))  // QNaN | SNaN | subnormal
    return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
#else
  (void)m;
#endif
  return bf16_words(v);
}

}  // namespace
}  // namespace podlet::kernels
