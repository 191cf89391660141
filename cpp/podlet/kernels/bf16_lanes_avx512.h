// fastmath.h's f32_to_bf16_bits on 16 lanes (AVX-512 translation units only): round to
// nearest even, a NaN to the canonical quiet NaN with its sign. Not vcvtneps2bf16, which
// keeps a NaN's payload and flushes subnormals. Internal linkage, as fastmath.h.
#pragma once
#include <immintrin.h>

namespace podlet::kernels {
namespace {

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

}  // namespace
}  // namespace podlet::kernels
