// fastmath.h's functions on 16 f32 lanes (AVX-512 translation units only), the same
// operations in the same order, so the same bits as the scalar forms; and the halving tree
// over 16 lanes that the row kernels' sums use. Internal linkage, as fastmath.h.
#pragma once
#include <immintrin.h>

namespace podlet::kernels {
namespace {

// fm::exp (nk::vexp) on 16 lanes, the same operations (so the same bits; 2^n by
// vscalefps, one rounding as the two exact halves give it), with the clamps as vmaxps /
// vminps and the NaN lanes put back by one masked move: GCC wrote the reference's
// selects as compare-and-blend pairs, and on Zen 4 (zmm ops double-pumped) the softmax of
// short rows is bound by the exp's instruction count. NONPOS: x is known <= 0 or NaN (a
// softmax's x - max), so the upper clamp is moot.
template <bool NONPOS = false>
inline __m512 vexp(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-104.0f);
  __m512 xc = _mm512_max_ps(x, lo);  // x > lo ? x : lo: a NaN becomes lo
  if constexpr (!NONPOS) xc = _mm512_min_ps(xc, _mm512_set1_ps(89.0f));
  const __m512 fn = _mm512_sub_ps(_mm512_fmadd_ps(xc, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(12582912.0f)),
                                  _mm512_set1_ps(12582912.0f));
  __m512 r = _mm512_fmadd_ps(fn, _mm512_set1_ps(-0.693359375f), xc);
  r = _mm512_fmadd_ps(fn, _mm512_set1_ps(2.12194440e-4f), r);
  const __m512 z = _mm512_mul_ps(r, r);
  __m512 q = _mm512_fmadd_ps(_mm512_set1_ps(1.9875691500E-4f), r, _mm512_set1_ps(1.3981999507E-3f));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(8.3334519073E-3f));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(4.1665795894E-2f));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.6666665459E-1f));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(5.0000001201E-1f));
  q = _mm512_add_ps(_mm512_fmadd_ps(q, z, r), _mm512_set1_ps(1.0f));
  // Lanes at or below the lower clamp are +0 (exp(-104) rounds to it) and stay out of
  // vscalefps: 2^-150 underflows there, which Intel cores finish in a microcode assist,
  // one per masked score or -inf pad (28% of a [32, 6, 197, 197] bf16 softmax's samples on
  // an Emerald Rapids, its rows' tails). Masked-off lanes raise nothing.
  const __m512 y = _mm512_maskz_scalef_ps(_mm512_cmp_ps_mask(x, lo, _CMP_GT_OQ), q, fn);
  return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

// The 16 lanes summed by nk::tree's halving tree (norm_impl.h): lane l with lane l + w for
// w = 8, 4, 2, 1, the lower lane as the first operand.
inline float lane_tree(__m512 v) {
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  const __m256 a = _mm256_add_ps(h, _mm256_permute2f128_ps(h, h, 1));
  const __m256 b = _mm256_add_ps(a, _mm256_permute_ps(a, 0x4e));
  return _mm256_cvtss_f32(b) + _mm256_cvtss_f32(_mm256_permute_ps(b, 1));
}

}  // namespace
}  // namespace podlet::kernels
