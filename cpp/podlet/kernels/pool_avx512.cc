// Max-pool gradient, AVX-512 (kernels/pool.h): window.cc's two image-pool passes, 16
// channels a vector. Pass 1 picks each window's first maximum per channel (as an int8
// window position, -1 for a window with no input element); pass 2 walks input rows and
// sums the source values of the covering windows that picked the element, in row-major
// window order. A masked add skips the others where window.cc adds +0: the sum starts
// at +0 and so is never -0, and x + 0 == x for every other x: the same bits. dx goes out
// with streaming stores: it is written whole (no read for ownership) and is too large to
// stay in cache for the next op anyway.
#include "podlet/kernels/pool.h"
#include <immintrin.h>
#include <cstdint>
#include "podlet/kernels/engine_common.h"

namespace podlet::kernels {
namespace {

using engine::imax;
using engine::imin;

inline int64_t floor_div(int64_t a, int64_t b) {
  const int64_t d = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? d - 1 : d;
}

// Per output row (n, oh): each output pixel's window in registers, 16 channels a vector
// (window.cc's loops kept a per-pixel accumulator array in memory): the stem's 3x3/2
// pool at batch 32 7.4 -> 4.7-5.1 ms. Plain stores: streaming them was 3-7% faster alone
// but neutral in a ResNet-18 step, whose next op reads y.
// kSelect: pass 1 as well, in the same read of x. y keeps the forward's rule (from -inf,
// take v when v > y or v is NaN: the last NaN; the first element is always taken). The
// selection takes the first element, then v when v > y or v is NaN and y is not: until a
// NaN, y is pass 1's running maximum, and from the first NaN on neither test passes, as
// in pass 1 (whose maximum stays that NaN).
template <bool kSelect>
void fwd_rows(const Pool2d& q, const float* x, float* y, int8_t* sel) {
  const int64_t C = q.C;
  const double work = double(q.N * q.Ho * q.Wo) * double(C * q.KH * q.KW);
  engine::run_units(q.N * q.Ho, work >= 2e5, [&](int64_t r) {
    const int64_t n = r / q.Ho, oh = r % q.Ho;
    const int64_t kh0 = imax(0, q.ph - oh * q.sh), kh1 = imin(q.KH, q.H + q.ph - oh * q.sh);
    for (int64_t ow = 0; ow < q.Wo; ++ow) {
      const int64_t kw0 = imax(0, q.pw - ow * q.sw), kw1 = imin(q.KW, q.W + q.pw - ow * q.sw);
      float* out = y + (r * q.Wo + ow) * C;
      for (int64_t c = 0; c < C; c += 16) {
        __m512 m = _mm512_set1_ps(-__builtin_inff());
        __m512i pick = _mm512_set1_epi32(-1);
        bool first = true;
        for (int64_t kh = kh0; kh < kh1; ++kh)
          for (int64_t kw = kw0; kw < kw1; ++kw) {
            const int64_t ih = oh * q.sh + kh - q.ph, iw = ow * q.sw + kw - q.pw;
            const __m512 v = _mm512_loadu_ps(x + ((n * q.H + ih) * q.W + iw) * C + c);
            const __m512i w = _mm512_set1_epi32(int(kh * q.KW + kw));
            if (first) {  // max(-inf, v) is v (or -inf, which v then is)
              m = v;
              if constexpr (kSelect) pick = w;
              first = false;
              continue;
            }
            const __mmask16 gt = _mm512_cmp_ps_mask(v, m, _CMP_GT_OQ), nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
            if constexpr (kSelect) pick = _mm512_mask_mov_epi32(pick, gt | (nan & _mm512_cmp_ps_mask(m, m, _CMP_ORD_Q)), w);
            m = _mm512_mask_mov_ps(m, gt | nan, v);
          }
        _mm512_storeu_ps(out + c, m);
        if constexpr (kSelect)
          _mm_storeu_si128(reinterpret_cast<__m128i*>(sel + (r * q.Wo + ow) * C + c), _mm512_cvtepi32_epi8(pick));
      }
    }
  });
}

}  // namespace

void maxpool_fwd_avx512(const Pool2d& q, const float* x, float* y) { fwd_rows<false>(q, x, y, nullptr); }
void maxpool_fwd_select_avx512(const Pool2d& q, const float* x, float* y, int8_t* sel) { fwd_rows<true>(q, x, y, sel); }

// Pass 1, per output row (n, oh): each window's first maximum per channel (int8 window
// positions, -1 for a window with no input element).
void maxpool_select_avx512(const Pool2d& q, const float* x, int8_t* sel) {
  const int64_t C = q.C;
  const double work = double(q.N * q.Ho * q.Wo) * double(C * q.KH * q.KW);
  engine::run_units(q.N * q.Ho, work >= 2e5, [&](int64_t r) {
    const int64_t n = r / q.Ho, oh = r % q.Ho;
    for (int64_t ow = 0; ow < q.Wo; ++ow) {
      int8_t* s = sel + (r * q.Wo + ow) * C;
      for (int64_t c = 0; c < C; c += 16) {
        __m512 best = _mm512_setzero_ps();
        __m512i pick = _mm512_set1_epi32(-1);
        for (int64_t kh = 0; kh < q.KH; ++kh) {
          const int64_t ih = oh * q.sh + kh - q.ph;
          if (ih < 0 || ih >= q.H) continue;
          for (int64_t kw = 0; kw < q.KW; ++kw) {
            const int64_t iw = ow * q.sw + kw - q.pw;
            if (iw < 0 || iw >= q.W) continue;
            const __m512 v = _mm512_loadu_ps(x + ((n * q.H + ih) * q.W + iw) * C + c);
            // take = nothing picked yet | v > best | (v is NaN and best is not)
            const __mmask16 take = _mm512_cmplt_epi32_mask(pick, _mm512_setzero_si512()) |
                                   _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) |
                                   (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) & _mm512_cmp_ps_mask(best, best, _CMP_ORD_Q));
            best = _mm512_mask_mov_ps(best, take, v);
            pick = _mm512_mask_mov_epi32(pick, take, _mm512_set1_epi32(int(kh * q.KW + kw)));
          }
        }
        _mm_storeu_si128(reinterpret_cast<__m128i*>(s + c), _mm512_cvtepi32_epi8(pick));
      }
    }
  });
}

// Pass 2, per input row (n, ih): the covering windows' rows [oh0, oh1] and columns.
// Rows are 4 C bytes, a multiple of 64: an aligned dx keeps every store aligned.
void maxpool_scatter_avx512(const Pool2d& q, const int8_t* sel, const float* src, float* dx) {
  const int64_t C = q.C;
  const double work = double(q.N * q.Ho * q.Wo) * double(C * q.KH * q.KW);
  const bool aligned = (reinterpret_cast<uintptr_t>(dx) & 63) == 0;
  engine::run_units(q.N * q.H, work >= 2e5, [&](int64_t r) {
    const int64_t n = r / q.H, ih = r % q.H;
    const int64_t oh0 = imax(0, floor_div(ih + q.ph - q.KH, q.sh) + 1), oh1 = imin(q.Ho - 1, floor_div(ih + q.ph, q.sh));
    for (int64_t iw = 0; iw < q.W; ++iw) {
      const int64_t ow0 = imax(0, floor_div(iw + q.pw - q.KW, q.sw) + 1), ow1 = imin(q.Wo - 1, floor_div(iw + q.pw, q.sw));
      float* y = dx + (r * q.W + iw) * C;
      for (int64_t c = 0; c < C; c += 16) {
        __m512 acc = _mm512_setzero_ps();
        for (int64_t oh = oh0; oh <= oh1; ++oh)
          for (int64_t ow = ow0; ow <= ow1; ++ow) {
            const int64_t o = ((n * q.Ho + oh) * q.Wo + ow) * C + c;
            const __m512i w = _mm512_set1_epi32(int((ih + q.ph - oh * q.sh) * q.KW + (iw + q.pw - ow * q.sw)));
            const __m512i s = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sel + o)));
            acc = _mm512_mask_add_ps(acc, _mm512_cmpeq_epi32_mask(s, w), acc, _mm512_loadu_ps(src + o));
          }
        if (aligned) _mm512_stream_ps(y + c, acc);
        else _mm512_storeu_ps(y + c, acc);
      }
    }
    _mm_sfence();
  });
}

void maxpool_grad_avx512(const Pool2d& q, const float* x, const float* src, float* dx) {
  engine::PoolBuf selb(engine::cdiv(q.N * q.Ho * q.Wo * q.C, 4));
  int8_t* sel = reinterpret_cast<int8_t*>(selb.p);
  maxpool_select_avx512(q, x, sel);
  maxpool_scatter_avx512(q, sel, src, dx);
}

}  // namespace podlet::kernels
