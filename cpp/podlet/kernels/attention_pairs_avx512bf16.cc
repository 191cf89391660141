// The bf16 fused attention on vdpbf16ps (attention_pairs_impl.h); its plain C++ twin is
// attention_pairs_ref.cc.
#include <immintrin.h>
#include "podlet/kernels/attention_pairs_impl.h"
#include "podlet/kernels/bf16_lanes_avx512.h"
#include "podlet/kernels/fastmath_avx512.h"
#include "podlet/kernels/transpose_avx512.h"

namespace podlet::kernels {
namespace {
struct HwPairs {
  using V = __m512;
  using P = __m512bh;
  static V zero() { return _mm512_setzero_ps(); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V scale(V v, float a) { return _mm512_mul_ps(v, _mm512_set1_ps(a)); }
  static P loadp(const uint32_t* p) { return (__m512bh)_mm512_loadu_si512(p); }
  static P bcast(uint32_t a) { return (__m512bh)_mm512_set1_epi32(int(a)); }
  static V dp(V acc, P a, P b) { return _mm512_dpbf16_ps(acc, a, b); }

  // pack_pairs_across for an even head size: K's (or V's) rows are [sk][H/2] 32-bit
  // words, the operand is their transpose [H/2][cols]; 16 x 16 blocks transposed in
  // registers (the plain loop moved one word per several scalar instructions, ~10% of the
  // kernel at Swin's 49-token windows). Rows past sk are zero; loads read only the head's
  // own words (masked only where fewer than 16 of them remain).
  static bool pack_across(const bf16* X, int64_t ldx, int64_t sk, int64_t H, int64_t cols, uint32_t* out) {
    if (H % 2 || cols % 16) return false;
    const int64_t HP = H / 2;
    const uint16_t* x = &X->bits;
    for (int64_t hb = 0; hb < HP; hb += 16) {
      const int nh = int(std::min<int64_t>(16, HP - hb));
      const __mmask16 hm = __mmask16((1u << nh) - 1u);
      for (int64_t sb = 0; sb < cols; sb += 16) {
        __m512i r[16];
        for (int i = 0; i < 16; ++i)
          r[i] = sb + i >= sk ? _mm512_setzero_si512()
                 : nh == 16 ? _mm512_loadu_si512(x + (sb + i) * ldx + 2 * hb)
                            : _mm512_maskz_loadu_epi32(hm, x + (sb + i) * ldx + 2 * hb);
        transpose16(r);
        for (int j = 0; j < nh; ++j) _mm512_storeu_si512(out + (hb + j) * cols + sb, r[j]);
      }
    }
    return true;
  }
  // pack_cols_f32: pairs of f32 rows rounded as f32_to_bf16_bits (to nearest even; NaN
  // to the quiet NaN with its sign), 16 pairs x 16 columns a block, transposed in
  // registers and stored as 16 pair words per column (the plain loop stored one word per
  // strided scalar store: ~10% of the backward at Swin's windows). Writes the words the
  // plain loop writes, no others.
  static bool pack_cols(const float* X, int64_t ldx, int64_t rows, int64_t cols, uint32_t* out, int64_t ldo) {
    const int64_t np = (rows + 1) / 2;
    for (int64_t pb = 0; pb < np; pb += 16) {
      const int npb = int(std::min<int64_t>(16, np - pb));
      const __mmask16 pm = __mmask16((1u << npb) - 1u);
      for (int64_t jb = 0; jb < cols; jb += 16) {
        const int nj = int(std::min<int64_t>(16, cols - jb));
        const __mmask16 jm = __mmask16((1u << nj) - 1u);
        __m512i r[16];
        for (int p = 0; p < 16; ++p) {
          const int64_t i = 2 * (pb + p);
          if (p >= npb) { r[p] = _mm512_setzero_si512(); continue; }
          const __m512i lo = bf16_bits_epi32(_mm512_maskz_loadu_ps(jm, X + i * ldx + jb));
          const __m512i hi = i + 1 < rows ? bf16_bits_epi32(_mm512_maskz_loadu_ps(jm, X + (i + 1) * ldx + jb))
                                          : _mm512_setzero_si512();
          r[p] = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
        }
        transpose16(r);
        for (int j = 0; j < nj; ++j) _mm512_mask_storeu_epi32(out + (jb + j) * ldo + pb, pm, r[j]);
      }
    }
    return true;
  }
  // pack_rows_plain with a load and store of 32 elements, masked only for a row's last
  // partial chunk (an odd n's pad from the load's zero lane): GCC's loop of 16-bit copies
  // took ~5% of the forward at Swin's windows, and masked moves of the whole chunks over
  // a third of the packing's time on Zen 4 (rdtsc by phase, cached windows).
  static bool pack_rows(const bf16* X, int64_t ldx, int64_t rows, int64_t n, uint32_t* out, int64_t ldo) {
    for (int64_t i = 0; i < rows; ++i) {
      const uint16_t* x = &X[i * ldx].bits;
      uint16_t* o = reinterpret_cast<uint16_t*>(out + i * ldo);
      int64_t j = 0;
      for (; j + 32 <= n; j += 32) _mm512_storeu_si512(o + j, _mm512_loadu_si512(x + j));
      for (; j < n; j += 32) {
        const int64_t w = std::min<int64_t>(32, n - j);
        const __mmask32 ld = __mmask32((uint64_t(1) << w) - 1), st = __mmask32((uint64_t(1) << (w + (w & 1))) - 1);
        _mm512_mask_storeu_epi16(o + j, st, _mm512_maskz_loadu_epi16(ld, x + j));
      }
    }
    return true;
  }
  // The lanes of a tile's key vectors (mk[w] for w < 4: the first sk keys); returns how
  // many vectors hold keys.
  static int key_masks(int64_t sk, __mmask16 mk[4]) {
    const int nv = int((sk + 15) / 16);
    for (int w = 0; w < 4; ++w) mk[w] = w < nv ? tail16(std::min<int64_t>(16, sk - 16 * w)) : __mmask16(0);
    return nv;
  }
  // The logits of row i's key vector w (lanes m) from its products in row (TileLogits:
  // times the scale, plus the bias, kMasked where the mask is 0); ok: the lanes of m the
  // mask allows.
  static __m512 logits16(const float* row, int64_t i, int w, __mmask16 m, const TileLogits& g, __mmask16& ok) {
    __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, row + 16 * w), _mm512_set1_ps(g.scale));
    if (g.bias) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, g.bias + i * g.bias_ld + 16 * w));
    ok = m;
    if (g.mask) {
      const __m128i mb = _mm_maskz_loadu_epi8(m, g.mask + i * g.mask_ld + 16 * w);
      ok = _mm_test_epi8_mask(mb, mb);
      x = _mm512_mask_mov_ps(_mm512_set1_ps(kMasked<float>), ok, x);
    }
    return x;
  }
  // softmax_tile with a row's (at most 4) vectors in registers from the products to the
  // pair words: one pass where the plain form made six over the row (scale and bias, mask,
  // max, exp, sums, rounding), each with a scalar tail at Swin's 49 keys. The same
  // operations per element, the max as vmaxps with the element first (a NaN logit is
  // skipped, as std::max skips it), the sums in lane_tree16's order: the same bits.
  static bool softmax_tile(float* Sc, int64_t tq, int64_t sk, const TileLogits& g, float* m, float* l, float* alpha,
                           uint32_t* Pb) {
    __mmask16 mk[4];
    const int nv = key_masks(sk, mk);
    for (int64_t i = 0; i < tq; ++i) {
      float* row = Sc + i * kPk;
      __m512 x[4], mxv = _mm512_set1_ps(m[i]);
#pragma GCC unroll 4
      for (int w = 0; w < 4; ++w) {
        if (w >= nv) break;
        __mmask16 ok;
        x[w] = logits16(row, i, w, mk[w], g, ok);
        mxv = _mm512_mask_max_ps(mxv, mk[w], x[w], mxv);
      }
      float mx = _mm512_reduce_max_ps(mxv);
      if (mx == 0.0f) {  // +0 or -0: which one depends on the order; take it in row_max's
        for (int w = 0; w < nv; ++w) _mm512_mask_storeu_ps(row + 16 * w, mk[w], x[w]);
        mx = row_max(m[i], row, sk);
      }
      alpha[i] = m[i] == -std::numeric_limits<float>::infinity() ? 0.0f : exp_a<float>(m[i] - mx);
      m[i] = mx;
      const __m512 mv = _mm512_set1_ps(mx);
      __m512 e[4], acc = _mm512_setzero_ps();
#pragma GCC unroll 4
      for (int w = 0; w < 4; ++w) {
        if (w >= nv) break;
        e[w] = _mm512_maskz_mov_ps(mk[w], vexp<true>(_mm512_sub_ps(x[w], mv)));
        acc = w ? _mm512_add_ps(acc, e[w]) : e[w];
      }
      l[i] = l[i] * alpha[i] + lane_tree(acc);
      uint32_t* pr = Pb + i * (kPk / 2);
#pragma GCC unroll 4
      for (int w = 0; w < 4; ++w) {
        if (w >= nv) break;
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(pr + 8 * w), round16(e[w]));
      }
    }
    return true;
  }
  // row_dots_plain's lanes as one register per row (masked loads widen bf16: the lanes
  // past n add fma(0, 0, acc) = acc, acc never -0 from its +0 start).
  static bool row_dots(const bf16* X, int64_t ldx, const bf16* Y, int64_t ldy, int64_t rows, int64_t n, float* D) {
    for (int64_t t = 0; t < rows; ++t) {
      __m512 acc = _mm512_setzero_ps();
      for (int64_t h = 0; h < n; h += 16) {
        const __mmask16 m = tail16(std::min<int64_t>(16, n - h));
        acc = _mm512_fmadd_ps(maskload16(X + t * ldx + h, m), maskload16(Y + t * ldy + h, m), acc);
      }
      D[t] = lane_tree(acc);
    }
    return true;
  }
  // The backward's tile from the products to the score gradient's pair rows, a row's
  // vectors in registers: the logits as softmax_tile forms them, P = exp(logit - L[i])
  // (1/S on a fully masked row, as Ctx::score_grad_row) into Sc, dS = P (dP - D[i]) (0
  // where masked) into dbias's row if set, dS * scale into dS and rounded into dSb. The
  // same operations per element as post_logits + score_grad_row + pack_rows_f32: the same
  // bits.
  static bool grad_tile(float* Sc, float* dS, int64_t tq, int64_t sk, const TileLogits& g, const float* L,
                        const float* D, float uniform, float* dbias, int64_t dbias_ld, bool dbias_add, float scale,
                        uint32_t* dSb) {
    __mmask16 mk[4];
    const int nv = key_masks(sk, mk);
    const __m512 dscale = _mm512_set1_ps(scale);
    for (int64_t i = 0; i < tq; ++i) {
      float* prow = Sc + i * kPk;
      float* drow = dS + i * kPk;
      const bool flat = L[i] <= kMasked<float> * 0.5f;
      const __m512 lv = _mm512_set1_ps(L[i]), dv = _mm512_set1_ps(D[i]);
      uint32_t* pr = dSb + i * (kPk / 2);
#pragma GCC unroll 4
      for (int w = 0; w < 4; ++w) {
        if (w >= nv) break;
        const __mmask16 m = mk[w];
        __mmask16 ok;
        const __m512 x = logits16(prow, i, w, m, g, ok);
        const __m512 pv = flat ? _mm512_set1_ps(uniform) : vexp(_mm512_sub_ps(x, lv));
        _mm512_mask_storeu_ps(prow + 16 * w, m, pv);
        const __m512 gr = _mm512_maskz_mov_ps(ok, _mm512_mul_ps(pv, _mm512_sub_ps(_mm512_loadu_ps(drow + 16 * w), dv)));
        if (dbias) {  // stored, or added into the batch chunk's slab
          float* db = dbias + i * dbias_ld + 16 * w;
          _mm512_mask_storeu_ps(db, m, dbias_add ? _mm512_add_ps(_mm512_maskz_loadu_ps(m, db), gr) : gr);
        }
        const __m512 ds = _mm512_mul_ps(gr, dscale);
        _mm512_mask_storeu_ps(drow + 16 * w, m, ds);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(pr + 8 * w), round16(_mm512_maskz_mov_ps(m, ds)));
      }
    }
    return true;
  }
  // 16 x 16 transpose of 32-bit words (rows r[0..15] become columns).
  static void transpose16(__m512i r[16]) { transpose16x16_epi32(r); }
};
}  // namespace
}  // namespace podlet::kernels

PODLET_ATTN_PAIRS_DEFINE(avx512bf16, HwPairs)
