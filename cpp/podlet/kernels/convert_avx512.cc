// float32 <-> bfloat16 conversion, AVX-512 (kernels/convert.h).
#include "podlet/kernels/convert.h"
#include <immintrin.h>
#include <cstdint>
#include "podlet/kernels/avx512_engine.h"

namespace podlet::kernels {
namespace {

// f32_to_bf16_bits on 16 lanes: (u + 0x7fff + lsb) >> 16, or sign | 0x7fc0 for a NaN.
// Not vcvtneps2bf16: it keeps a NaN's payload and flushes subnormals.
inline __m256i to_bf16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  const __m512i q = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x8000)),
                                    _mm512_set1_epi32(0x7fc0));
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, r, q));
}

using avx512::load16;
using avx512::maskload16;
using avx512::tail16;

}  // namespace

void convert_f32_bf16_avx512(const float* x, uint16_t* y, int64_t b, int64_t e) {
  int64_t i = b;
  for (; i + 32 <= e; i += 32) {
    const __m256i lo = to_bf16(_mm512_loadu_ps(x + i)), hi = to_bf16(_mm512_loadu_ps(x + i + 16));
    _mm512_storeu_si512(y + i, _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
  }
  for (; i < e; i += 16) {
    const __mmask16 k = e - i >= 16 ? __mmask16(0xffff) : tail16(e - i);
    _mm256_mask_storeu_epi16(y + i, k, to_bf16(_mm512_maskz_loadu_ps(k, x + i)));
  }
}

void convert_bf16_f32_avx512(const uint16_t* x, float* y, int64_t b, int64_t e) {
  const bf16* h = reinterpret_cast<const bf16*>(x);
  int64_t i = b;
  for (; i + 16 <= e; i += 16) _mm512_storeu_ps(y + i, load16(h + i));
  if (i < e) _mm512_mask_storeu_ps(y + i, tail16(e - i), maskload16(h + i, tail16(e - i)));
}

}  // namespace podlet::kernels
