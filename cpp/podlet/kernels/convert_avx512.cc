// float32 <-> bfloat16 conversion, AVX-512 (kernels/convert.h).
#include "podlet/kernels/convert.h"
#include <immintrin.h>
#include <cstdint>
#include "podlet/kernels/bf16_lanes_avx512.h"

namespace podlet::kernels {

void convert_f32_bf16_avx512(const float* x, uint16_t* y, int64_t b, int64_t e) {
  int64_t i = b;
  for (; i + 32 <= e; i += 32) {
    const __m256i lo = bf16_words(_mm512_loadu_ps(x + i)), hi = bf16_words(_mm512_loadu_ps(x + i + 16));
    _mm512_storeu_si512(y + i, _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
  }
  for (; i < e; i += 16) {
    const __mmask16 k = e - i >= 16 ? __mmask16(0xffff) : tail16(e - i);
    _mm256_mask_storeu_epi16(y + i, k, bf16_words(_mm512_maskz_loadu_ps(k, x + i)));
  }
}

void convert_bf16_f32_avx512(const uint16_t* x, float* y, int64_t b, int64_t e) {
  const bf16* h = reinterpret_cast<const bf16*>(x);
  int64_t i = b;
  for (; i + 16 <= e; i += 16) _mm512_storeu_ps(y + i, load16(h + i));
  if (i < e) _mm512_mask_storeu_ps(y + i, tail16(e - i), maskload16(h + i, tail16(e - i)));
}

}  // namespace podlet::kernels
