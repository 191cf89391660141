// 1-channel convolutions on AVX512_BF16 (conv.h: conv_stem_geometry): the stem of a
// grayscale model (the mammography patches' 224x224x1 7x7/2 ResNet stem) - forward and
// backward-filter, bf16 operands, f32 accumulation, exact products.
//
// The implicit GEMMs of conv_avx512_impl.h take a 1-channel layer with the taps as their
// K (forward) or N (backward-filter) dim and pack each pixel's 49 taps into panels; for
// the stem that packing cost more than the products (backward-filter 28-33% of the bf16
// peak, forward 41-45%). Here the output channels are the vector dim (16 per zmm) and
// the bf16 pairs that vdpbf16ps broadcasts are read straight from zero-padded copies of
// the task's input rows, so nothing is packed per pixel:
//   forward         y[p][o]      = sum over kh and even kw of (x[kw], x[kw + 1]) . (w[kh][kw][o], w[kh][kw + 1][o])
//                                  (an odd KW's last pair is (x[KW - 1], 0): the word's other half, a real
//                                  pixel no tap of this output reads, is masked, so an inf there cannot
//                                  make 0 * inf = NaN);
//   backward-filter dw[kh][kw][o] = sum over pixel pairs (ow, ow + 1) of
//                                  (x at ow, x at ow + 1) . (g[ow][o], g[ow + 1][o]),
//                                  the x pairs from a per-row table xs[c] = (x[c], x[c + sw]).
// Bits do not depend on the thread count: a forward output element is one chain over
// (kh, kw pair); backward-filter sums fixed blocks of output rows (fixed by the shape)
// into their own partials, added in block order.
#include <cstring>

#include "podlet/kernels/avx512_engine.h"
#include "podlet/kernels/conv.h"

namespace podlet::kernels {
namespace {

using avx512::WBuf;
using engine::cdiv;
using engine::imax;
using engine::imin;
using engine::PoolBuf;

inline uint32_t load_u32(const uint16_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// d[0, width) = x[n, ih, c - pw] for c in [0, width) (bf16 bits), zero outside the image.
inline void padded_row(const uint16_t* x, const ConvGeom& q, int64_t n, int64_t ih, int64_t width, uint16_t* d) {
  if (ih < 0 || ih >= q.H) {
    std::memset(d, 0, size_t(width) * 2);
    return;
  }
  const int64_t c0 = imax(0, q.pw), c1 = imin(width, q.W + q.pw);  // the columns inside the image
  if (c1 <= c0) {
    std::memset(d, 0, size_t(width) * 2);
    return;
  }
  std::memset(d, 0, size_t(c0) * 2);
  std::memcpy(d + c0, x + (n * q.H + ih) * q.W + (c0 - q.pw), size_t(c1 - c0) * 2);
  std::memset(d + c1, 0, size_t(width - c1) * 2);
}

// ---------------------------------------------------------------- forward
// Output pixels [0, R) of a row (pixel r's taps start at xr + r * sw in padded
// coordinates; row kh is xr + kh * wp) x channels [0, 16 NV) of a weight panel
// wk[step][ldw] (step = kh * kwp + j: the pair (w[kh][2j], w[kh][2j + 1]), zero past KW).
template <int R, int NV>
void fwd_ukernel(const uint16_t* xr, int64_t wp, int64_t sw, int64_t KH, int64_t kwp, bool odd_kw,
                 const uint32_t* wk, int64_t ldw, DType od, void* out, int64_t off, int64_t O, bool stream) {
  __m512 acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  // One step: pair j of row p; `mask` keeps the pair's first element only (odd KW's last).
  auto step = [&](const uint16_t* p, int64_t j, const uint32_t* b, uint32_t mask) {
    __m512bh bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b + 16 * v));
    for (int r = 0; r < R; ++r) {
      const __m512bh av = reinterpret_cast<__m512bh>(_mm512_set1_epi32(int(load_u32(p + r * sw + 2 * j) & mask)));
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
    }
  };
  const int64_t full = odd_kw ? kwp - 1 : kwp;
  for (int64_t kh = 0; kh < KH; ++kh) {
    const uint16_t* p = xr + kh * wp;
    const uint32_t* b = wk + kh * kwp * ldw;
    for (int64_t j = 0; j < full; ++j) step(p, j, b + j * ldw, 0xffffffffu);
    if (odd_kw) step(p, full, b + full * ldw, 0xffffu);
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) avx512::store_out16(od, out, off + r * O + 16 * v, acc[r][v], stream);
}

template <int NV>
void fwd_pixels(int rows, const uint16_t* xr, int64_t wp, int64_t sw, int64_t KH, int64_t kwp, bool odd_kw,
                const uint32_t* wk, int64_t ldw, DType od, void* out, int64_t off, int64_t O, bool stream) {
  switch (rows) {
    case 6: return fwd_ukernel<6, NV>(xr, wp, sw, KH, kwp, odd_kw, wk, ldw, od, out, off, O, stream);
    case 5: return fwd_ukernel<5, NV>(xr, wp, sw, KH, kwp, odd_kw, wk, ldw, od, out, off, O, stream);
    case 4: return fwd_ukernel<4, NV>(xr, wp, sw, KH, kwp, odd_kw, wk, ldw, od, out, off, O, stream);
    case 3: return fwd_ukernel<3, NV>(xr, wp, sw, KH, kwp, odd_kw, wk, ldw, od, out, off, O, stream);
    case 2: return fwd_ukernel<2, NV>(xr, wp, sw, KH, kwp, odd_kw, wk, ldw, od, out, off, O, stream);
    default: return fwd_ukernel<1, NV>(xr, wp, sw, KH, kwp, odd_kw, wk, ldw, od, out, off, O, stream);
  }
}

struct FwdScratch {
  PoolBuf rows;
};

// Output rows per task (896 tasks for the 224x224 stem at batch 32).
constexpr int64_t kFwdRows = 4;
constexpr int kPix = 6;  // pixels per microkernel call: 6 x 64 channels = 24 accumulators

void fwd(const ConvGeom& q, const uint16_t* x, const uint16_t* w, DType yd, void* y) {
  const int64_t O = q.O, KH = q.KH, KW = q.KW, kwp = cdiv(KW, 2), steps = KH * kwp;
  const bool odd_kw = KW & 1;
  // Weight panels of 64 channels: wk[panel][step][64] words, zero past KW.
  const int64_t np = cdiv(O, 64);
  WBuf wk(np * steps * 64);
  for (int64_t pn = 0; pn < np; ++pn)
    for (int64_t kh = 0; kh < KH; ++kh)
      for (int64_t j = 0; j < kwp; ++j)
        for (int64_t o = 0; o < 64; ++o) {
          const int64_t oc = pn * 64 + o, k0 = 2 * j, k1 = 2 * j + 1;
          const uint32_t lo = oc < O ? w[(kh * KW + k0) * O + oc] : 0;
          const uint32_t hi = oc < O && k1 < KW ? w[(kh * KW + k1) * O + oc] : 0;
          wk.p[(pn * steps + kh * kwp + j) * 64 + o] = lo | hi << 16;
        }
  // Padded input row r of a task = x row oh0 * sh - ph + r, columns c - pw for c in
  // [0, wp): pixel ow's pair j reads columns ow * sw + 2j, + 1.
  const int64_t wp = (q.Wo - 1) * q.sw + 2 * kwp;
  const int64_t rows_out = q.N * q.Ho, ntask = cdiv(rows_out, kFwdRows);
  const bool stream = q.N * q.Ho * q.Wo * O * (yd == DType::f32 ? 4 : 2) >= kStreamOutBytes;
  const double flops = 2.0 * double(rows_out) * double(q.Wo) * double(O) * double(KH * KW);
  engine::run_tasks<FwdScratch>(ntask, flops >= 4e6, [&](int64_t task, FwdScratch& s) {
    const int64_t r0 = task * kFwdRows, r1 = imin(rows_out, r0 + kFwdRows);
    for (int64_t ro = r0; ro < r1; ++ro) {
      const int64_t n = ro / q.Ho, oh = ro % q.Ho;
      s.rows.reserve(cdiv(KH * wp + 2, 2));
      uint16_t* xr = reinterpret_cast<uint16_t*>(s.rows.p);
      for (int64_t kh = 0; kh < KH; ++kh) padded_row(x, q, n, oh * q.sh + kh - q.ph, wp, xr + kh * wp);
      for (int64_t pn = 0; pn < np; ++pn) {
        const int64_t o0 = pn * 64, nv = imin(64, O - o0) / 16;
        const uint32_t* wkp = wk.p + pn * steps * 64;
        for (int64_t ow = 0; ow < q.Wo; ow += kPix) {
          const int rows = int(imin(kPix, q.Wo - ow));
          const int64_t off = (ro * q.Wo + ow) * O + o0;
          const uint16_t* xp = xr + ow * q.sw;
          switch (nv) {
            case 4: fwd_pixels<4>(rows, xp, wp, q.sw, KH, kwp, odd_kw, wkp, 64, yd, y, off, O, stream); break;
            case 3: fwd_pixels<3>(rows, xp, wp, q.sw, KH, kwp, odd_kw, wkp, 64, yd, y, off, O, stream); break;
            case 2: fwd_pixels<2>(rows, xp, wp, q.sw, KH, kwp, odd_kw, wkp, 64, yd, y, off, O, stream); break;
            default: fwd_pixels<1>(rows, xp, wp, q.sw, KH, kwp, odd_kw, wkp, 64, yd, y, off, O, stream); break;
          }
        }
      }
    }
    if (stream) _mm_sfence();
  });
}

// ---------------------------------------------------------------- backward-filter
// dw rows kw0 + [0, R) of one kh x channels [0, 16 NV): the sum over nrows output rows i
// (x pairs xs_i = xrows[i], g pairs gq + i * gstride) of their Wq pixel-pair steps;
// xs_i[s * step + r] is tap kw0 + r's pair at step s. With an odd Wo the last step's
// second pixel is missing: its g words are zero and its x partner is masked.
template <int R, int NV>
void bf_ukernel(int64_t nrows, const uint32_t* const* xrows, int64_t step, const uint32_t* gq, int64_t gstride,
                int64_t O, int64_t Wq, bool odd_wo, float* d, bool add) {
  __m512 acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  // One pixel-pair step; `mask` keeps the x pair's first element only (odd Wo's last).
  auto one = [&](const uint32_t* xs, const uint32_t* g, uint32_t mask) {
    __m512bh bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(g + 16 * v));
    for (int r = 0; r < R; ++r) {
      const __m512bh av = reinterpret_cast<__m512bh>(_mm512_set1_epi32(int(xs[r] & mask)));
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
    }
  };
  const int64_t full = odd_wo ? Wq - 1 : Wq;
  for (int64_t i = 0; i < nrows; ++i) {
    const uint32_t* xs = xrows[i];
    const uint32_t* g = gq + i * gstride;
    for (int64_t s = 0; s < full; ++s, xs += step, g += O) one(xs, g, 0xffffffffu);
    if (odd_wo) one(xs, g, 0xffffu);
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) {
      float* p = d + r * O + 16 * v;
      _mm512_storeu_ps(p, add ? _mm512_add_ps(_mm512_loadu_ps(p), acc[r][v]) : acc[r][v]);
    }
}

template <int NV>
void bf_taps(int taps, int64_t nrows, const uint32_t* const* xrows, int64_t step, const uint32_t* gq, int64_t gstride,
             int64_t O, int64_t Wq, bool odd_wo, float* d, bool add) {
  switch (taps) {
    case 7: return bf_ukernel<7, NV>(nrows, xrows, step, gq, gstride, O, Wq, odd_wo, d, add);
    case 6: return bf_ukernel<6, NV>(nrows, xrows, step, gq, gstride, O, Wq, odd_wo, d, add);
    case 5: return bf_ukernel<5, NV>(nrows, xrows, step, gq, gstride, O, Wq, odd_wo, d, add);
    case 4: return bf_ukernel<4, NV>(nrows, xrows, step, gq, gstride, O, Wq, odd_wo, d, add);
    case 3: return bf_ukernel<3, NV>(nrows, xrows, step, gq, gstride, O, Wq, odd_wo, d, add);
    case 2: return bf_ukernel<2, NV>(nrows, xrows, step, gq, gstride, O, Wq, odd_wo, d, add);
    default: return bf_ukernel<1, NV>(nrows, xrows, step, gq, gstride, O, Wq, odd_wo, d, add);
  }
}

struct BfScratch {
  PoolBuf xs, tmp, gq;
};

constexpr int64_t kBfSub = 16;      // output rows whose g pairs are in L2 at once (16 x 56 x 64 words: 229 KB)
constexpr int64_t kBfParts = 256;   // at most this many partials (blocks of output rows)
constexpr int kBfTaps = 7;          // taps per microkernel call: 7 x 32 channels = 14 accumulators

void bwd_filter(const ConvGeom& q, const uint16_t* x, const uint16_t* g, DType dwd, void* dw) {
  const int64_t O = q.O, KH = q.KH, KW = q.KW, Wo = q.Wo, Wq = cdiv(Wo, 2), sw = q.sw;
  const bool odd_wo = Wo & 1;
  const int64_t taps = KH * KW, part_n = taps * O;
  // xs row: words c in [0, wx) = (x[c - pw], x[c + sw - pw]) of one input row; pixel pair
  // s, tap kw reads word 2 s sw + kw.
  const int64_t wx = 2 * (Wq - 1) * sw + KW;
  // Blocks of output rows (over all images, n-major): a multiple of kBfSub rows, at most
  // kBfParts of them.
  const int64_t rows_out = q.N * q.Ho;
  const int64_t blk = engine::round_up(imax(kBfSub, cdiv(rows_out, kBfParts)), kBfSub), nblk = cdiv(rows_out, blk);
  PoolBuf part(nblk * part_n);
  const double flops = 2.0 * double(rows_out) * double(Wo) * double(O) * double(taps);
  engine::run_tasks<BfScratch>(nblk, flops >= 4e6, [&](int64_t b, BfScratch& s) {
    float* d = part.f() + b * part_n;
    const int64_t rb0 = b * blk, rb1 = imin(rows_out, rb0 + blk);
    s.xs.reserve(kBfSub * KH * wx);
    s.tmp.reserve(cdiv(wx + sw, 2) + 1);
    s.gq.reserve(kBfSub * Wq * O);
    uint16_t* tmp = reinterpret_cast<uint16_t*>(s.tmp.p);
    const uint32_t* xrows[kBfSub];
    for (int64_t ra = rb0; ra < rb1; ra += kBfSub) {
      const int64_t nr = imin(kBfSub, rb1 - ra);
      // xs rows (row i, kh at s.xs + (i * KH + kh) * wx) and g pairs (row i at s.gq + i * Wq * O).
      for (int64_t i = 0; i < nr; ++i) {
        const int64_t n = (ra + i) / q.Ho, oh = (ra + i) % q.Ho;
        for (int64_t kh = 0; kh < KH; ++kh) {
          padded_row(x, q, n, oh * q.sh + kh - q.ph, wx + sw, tmp);
          uint32_t* xs = s.xs.p + (i * KH + kh) * wx;
          for (int64_t c = 0; c < wx; ++c) xs[c] = uint32_t(tmp[c]) | uint32_t(tmp[c + sw]) << 16;
        }
        const bf16* gr = reinterpret_cast<const bf16*>(g) + (ra + i) * Wo * O;
        uint32_t* gqr = s.gq.p + i * Wq * O;
        for (int64_t st = 0; st < Wq; ++st)
          avx512::interleave_rows(gr + 2 * st * O, 2 * st + 1 < Wo ? gr + (2 * st + 1) * O : nullptr, O, gqr + st * O);
      }
      const bool add = ra > rb0;
      for (int64_t kh = 0; kh < KH; ++kh)
        for (int64_t kw0 = 0; kw0 < KW; kw0 += kBfTaps) {
          const int nt = int(imin(kBfTaps, KW - kw0));
          for (int64_t i = 0; i < nr; ++i) xrows[i] = s.xs.p + (i * KH + kh) * wx + kw0;
          for (int64_t o0 = 0; o0 < O; o0 += 32) {
            float* dd = d + (kh * KW + kw0) * O + o0;
            if (O - o0 >= 32) bf_taps<2>(nt, nr, xrows, 2 * sw, s.gq.p + o0, Wq * O, O, Wq, odd_wo, dd, add);
            else bf_taps<1>(nt, nr, xrows, 2 * sw, s.gq.p + o0, Wq * O, O, Wq, odd_wo, dd, add);
          }
        }
    }
  });
  // dw = block 0 + block 1 + ..., in order.
  engine::run_units(taps, double(nblk) * double(part_n) >= 2e5, [&](int64_t t) {
    WBuf row(O);
    float* a = row.f();
    std::memcpy(a, part.f() + t * O, size_t(O) * 4);
    for (int64_t b = 1; b < nblk; ++b) {
      const float* p = part.f() + b * part_n + t * O;
      for (int64_t o = 0; o < O; o += 16) _mm512_storeu_ps(a + o, _mm512_add_ps(_mm512_loadu_ps(a + o), _mm512_loadu_ps(p + o)));
    }
    avx512::store_out(dwd, dw, t * O, a, O);
  });
}

}  // namespace

void conv_fwd_stem_avx512bf16(const ConvGeom& q, const void* x, const void* w, DType yd, void* y) {
  fwd(q, static_cast<const uint16_t*>(x), static_cast<const uint16_t*>(w), yd, y);
}

void conv_bwd_filter_stem_avx512bf16(const ConvGeom& q, const void* x, const void* g, DType dwd, void* dw) {
  bwd_filter(q, static_cast<const uint16_t*>(x), static_cast<const uint16_t*>(g), dwd, dw);
}

}  // namespace podlet::kernels
