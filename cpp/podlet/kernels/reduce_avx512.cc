// reduce_cols.h on AVX-512: pairwise_rows<SumOp<T>> (prims/reduce_ops.h) for f32 and bf16
// elements, 16 columns a vector, the same additions in the same order per column.
#include <immintrin.h>
#include "podlet/kernels/first_nan_add.h"
#include "podlet/kernels/reduce_cols.h"

namespace podlet::kernels {
namespace {

inline __m512 load16(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
inline __m512 load16(const bf16* p, __mmask16 m) {
  const __m256i h = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

template <class T>
void col_sums(const T* p, int64_t nrows, int64_t rs, int64_t w, float* acc, float* scratch) {
  if (nrows <= 16) {
    // Blocks of four vectors held in registers down the rows; the last columns masked.
    int64_t j = 0;
    for (; j + 64 <= w; j += 64) {
      __m512 v[4];
      for (int l = 0; l < 4; ++l) v[l] = load16(p + j + 16 * l, 0xffff);
      for (int64_t r = 1; r < nrows; ++r)
        for (int l = 0; l < 4; ++l) v[l] = add_keep_first_nan(v[l], load16(p + r * rs + j + 16 * l, 0xffff));
      for (int l = 0; l < 4; ++l) _mm512_storeu_ps(acc + j + 16 * l, v[l]);
    }
    for (; j < w; j += 16) {
      const __mmask16 m = __mmask16(0xffffu >> (16 - (w - j < 16 ? w - j : 16)));
      __m512 v = load16(p + j, m);
      for (int64_t r = 1; r < nrows; ++r) v = add_keep_first_nan(v, load16(p + r * rs + j, m));
      _mm512_mask_storeu_ps(acc + j, m, v);
    }
    return;
  }
  const int64_t h = nrows / 2;
  col_sums(p, h, rs, w, acc, scratch + w);
  col_sums(p + h * rs, nrows - h, rs, w, scratch, scratch + w);
  for (int64_t j = 0; j < w; j += 16) {
    const __mmask16 m = __mmask16(0xffffu >> (16 - (w - j < 16 ? w - j : 16)));
    _mm512_mask_storeu_ps(acc + j, m, add_keep_first_nan(_mm512_maskz_loadu_ps(m, acc + j), _mm512_maskz_loadu_ps(m, scratch + j)));
  }
}

}  // namespace

void col_sums_avx512(const float* p, int64_t nrows, int64_t rs, int64_t w, float* acc, float* scratch) {
  col_sums(p, nrows, rs, w, acc, scratch);
}
void col_sums_avx512(const bf16* p, int64_t nrows, int64_t rs, int64_t w, float* acc, float* scratch) {
  col_sums(p, nrows, rs, w, acc, scratch);
}

}  // namespace podlet::kernels
