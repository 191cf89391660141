// Winograd F(2x2, 3x3) on AVX512_BF16 (conv_winograd.h): per task, a block of kTiles
// output tiles goes through input transform -> 16 GEMMs -> output transform while its
// transformed tiles (U, [16][tiles][C/2] bf16 pairs) and products (M, f32, one 64-column
// panel at a time) stay in L2.
//
// Transforms (F(2, 3), applied to rows then columns):
//   B^T d: (d0 - d2, d1 + d2, d2 - d1, d1 - d3)
//   G g:   (g0, (g0 + g1 + g2) / 2, (g0 - g1 + g2) / 2, g2)
//   A^T m: (m0 + m1 + m2, m1 - m2 - m3)
// All in f32 with -ffp-contract=off, in the order written, so the bits depend on the
// inputs only (not on threads or task sizes).
#include "podlet/kernels/conv_winograd.h"
#include "podlet/kernels/avx512_engine.h"

namespace podlet::kernels {
namespace {

using avx512::WBuf;
using engine::cdiv;
using engine::imin;

constexpr int64_t kRows = 6;     // microkernel rows (tiles): 6 x 64 columns = 24 zmm accumulators
constexpr int64_t kPanel = 64;   // output channels per B panel
constexpr int64_t kTiles = 48;   // tiles per task (a multiple of kRows)

// The layer as the tile loop sees it: in [N, Hi, Wi, Ci] bf16, out [N, Ho, Wo, Co] with
// out(oh, ow) = sum over kh, kw of in(oh - ph + kh, ow - pw + kw) . tap(kh, kw).
struct Layer {
  int64_t N, Hi, Wi, Ci, Ho, Wo, Co, ph, pw;
};

// The operands' rounding: vcvtneps2bf16 (RNE) is enough here, as vdpbf16ps treats bf16
// subnormals as zero anyway; outputs go through bf16_round16 (round_bf16's exact rule).
inline void store_pairs(bf16* p, __m512 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)));
}

// The 1-D transforms of the header, 16 lanes at a time; each 2-D transform applies one
// to the columns, then to the rows of the result.
struct Four { __m512 v[4]; };
inline Four bt(__m512 d0, __m512 d1, __m512 d2, __m512 d3) {
  return {{_mm512_sub_ps(d0, d2), _mm512_add_ps(d1, d2), _mm512_sub_ps(d2, d1), _mm512_sub_ps(d1, d3)}};
}
inline Four gt(__m512 g0, __m512 g1, __m512 g2) {
  const __m512 half = _mm512_set1_ps(0.5f);
  return {{g0, _mm512_mul_ps(half, _mm512_add_ps(_mm512_add_ps(g0, g1), g2)),
           _mm512_mul_ps(half, _mm512_add_ps(_mm512_sub_ps(g0, g1), g2)), g2}};
}
struct Two { __m512 v[2]; };
inline Two at(__m512 m0, __m512 m1, __m512 m2, __m512 m3) {
  return {{_mm512_add_ps(_mm512_add_ps(m0, m1), m2), _mm512_sub_ps(_mm512_sub_ps(m1, m2), m3)}};
}

// v16[pos][c][o] = (G w[:, :, c, o] G^T)[pos] rounded to bf16, w [3, 3, C, O] bf16.
void transform_filter(const bf16* w, int64_t C, int64_t O, bf16* v16) {
  avx512::run_units(C, 16.0 * C * O, [&](int64_t c) {
    for (int64_t o = 0; o < O; o += 16) {
      __m512 g[3][3];
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j) g[i][j] = avx512::load16(w + ((i * 3 + j) * C + c) * O + o);
      Four t[3];
      for (int j = 0; j < 3; ++j) t[j] = gt(g[0][j], g[1][j], g[2][j]);
      for (int i = 0; i < 4; ++i) {
        const Four v = gt(t[0].v[i], t[1].v[i], t[2].v[i]);
        for (int j = 0; j < 4; ++j) store_pairs(v16 + ((i * 4 + j) * C + c) * O + o, v.v[j]);
      }
    }
  });
}

// B panels for the forward GEMMs, [16][O / 64][C / 2][64] words: the word (k, j) of a
// panel holds the pair (v16[pos][2k][o], v16[pos][2k + 1][o]), o = 64 * panel + j, zero
// past O.
void pack_forward(const bf16* v16, int64_t C, int64_t O, uint32_t* b) {
  const int64_t kq = C / 2, np = cdiv(O, kPanel);
  avx512::run_units(16 * np, 16.0 * C * O / np, [&](int64_t u) {
    const int64_t pos = u / np, o0 = u % np * kPanel, n = imin(kPanel, O - o0);
    uint32_t* d = b + u * kq * kPanel;
    for (int64_t k = 0; k < kq; ++k, d += kPanel) {
      const bf16* r = v16 + (pos * C + 2 * k) * O + o0;
      avx512::interleave_rows(r, r + O, n, d);
      avx512::zero_words(d + n, kPanel - n);
    }
  });
}

// B panels for backward-data (K = O, N = C) from the same v16: flipping the filter in
// both spatial dims maps G g to P G g with P = (3, 1, 2, 0), so position (a, b) of the
// flipped filter is v16 at (P a, P b), transposed in (c, o). A K pair is two consecutive
// o of a v16 row: one 32-bit word, gathered across rows c.
void pack_backward_data(const bf16* v16, int64_t C, int64_t O, uint32_t* b) {
  const int64_t kq = O / 2, np = cdiv(C, kPanel);
  static constexpr int kFlip[4] = {3, 1, 2, 0};
  const __m512i rows = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                          _mm512_set1_epi32(int(O / 2)));
  avx512::run_units(16 * np, 16.0 * C * O / np, [&](int64_t u) {
    const int64_t pos = u / np, pn = u % np;
    const int64_t src = kFlip[pos / 4] * 4 + kFlip[pos % 4];
    const uint32_t* v = reinterpret_cast<const uint32_t*>(v16 + src * C * O);
    uint32_t* d = b + u * kq * kPanel;
    for (int64_t k = 0; k < kq; ++k, d += kPanel)
      for (int64_t j = 0; j < kPanel; j += 16) {
        const int64_t c = pn * kPanel + j;
        const __m512i wv = c < C ? _mm512_i32gather_epi32(rows, v + c * (O / 2) + k, 4) : _mm512_setzero_si512();
        _mm512_storeu_si512(d + j, wv);
      }
  });
}

// m[r][0, 16 NV) = sum over k of the pair products of a[r][k] and b[k][.], rows [0, rows).
template <int NV>
inline void ukernel(int64_t kq, const uint32_t* a, const uint32_t* b, float* m, int64_t rows) {
  __m512 acc[kRows][NV];
  for (int r = 0; r < kRows; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kq; ++k, b += kPanel) {
    __m512bh bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b + 16 * v));
    for (int r = 0; r < kRows; ++r) {
      const __m512bh av = reinterpret_cast<__m512bh>(_mm512_set1_epi32(int(a[r * kq + k])));
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
    }
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(m + r * kPanel + 16 * v, acc[r][v]);
}

struct Scratch {
  WBuf u, m;
  Scratch() : u(1), m(1) {}
};

void run(const Layer& L, const bf16* in, const uint32_t* b, DType od, void* out) {
  const int64_t kq = L.Ci / 2, np = cdiv(L.Co, kPanel);
  const int64_t th = cdiv(L.Ho, 2), tw = cdiv(L.Wo, 2), ntiles = L.N * th * tw;
  const double flops = 2.0 * L.N * L.Ho * L.Wo * L.Co * L.Ci * 9;
  engine::run_tasks<Scratch>(cdiv(ntiles, kTiles), flops >= 4e6, [&](int64_t task, Scratch& s) {
    s.u.reserve(16 * kTiles * kq);
    s.m.reserve(16 * kTiles * kPanel);
    uint32_t* U = s.u.p;
    float* M = s.m.f();
    const int64_t t0 = task * kTiles, nt = imin(kTiles, ntiles - t0);
    // Input transform: U[pos][t] = (B^T d B)[pos] of tile t, 16 channels at a time.
    for (int64_t t = 0; t < nt; ++t) {
      const int64_t tt = t0 + t, n = tt / (th * tw), ti = tt % (th * tw) / tw, tj = tt % tw;
      const int64_t ih0 = 2 * ti - L.ph, iw0 = 2 * tj - L.pw;
      const bf16* src[4][4];
      for (int a = 0; a < 4; ++a)
        for (int c = 0; c < 4; ++c) {
          const int64_t ih = ih0 + a, iw = iw0 + c;
          src[a][c] = ih >= 0 && ih < L.Hi && iw >= 0 && iw < L.Wi ? in + ((n * L.Hi + ih) * L.Wi + iw) * L.Ci : nullptr;
        }
      bf16* dst = reinterpret_cast<bf16*>(U + t * kq);
      for (int64_t ch = 0; ch < L.Ci; ch += 16) {
        __m512 d[4][4];
        for (int a = 0; a < 4; ++a)
          for (int c = 0; c < 4; ++c) d[a][c] = src[a][c] ? avx512::load16(src[a][c] + ch) : _mm512_setzero_ps();
        Four r[4];
        for (int c = 0; c < 4; ++c) r[c] = bt(d[0][c], d[1][c], d[2][c], d[3][c]);
        for (int a = 0; a < 4; ++a) {
          const Four u = bt(r[0].v[a], r[1].v[a], r[2].v[a], r[3].v[a]);
          for (int c = 0; c < 4; ++c) store_pairs(dst + (a * 4 + c) * kTiles * L.Ci + ch, u.v[c]);
        }
      }
    }
    // The microkernel's rows past nt read these: zeros, not stale words.
    const int64_t ntr = cdiv(nt, kRows) * kRows;
    if (ntr > nt)
      for (int pos = 0; pos < 16; ++pos) avx512::zero_words(U + (pos * kTiles + nt) * kq, (ntr - nt) * kq);
    for (int64_t pn = 0; pn < np; ++pn) {
      const int64_t o0 = pn * kPanel, nv = imin(kPanel, L.Co - o0) / 16;
      for (int pos = 0; pos < 16; ++pos) {
        const uint32_t* bp = b + (pos * np + pn) * kq * kPanel;
        for (int64_t r0 = 0; r0 < nt; r0 += kRows) {
          const uint32_t* a = U + (pos * kTiles + r0) * kq;
          float* m = M + (pos * kTiles + r0) * kPanel;
          const int64_t rows = imin(kRows, nt - r0);
          switch (nv) {
            case 4: ukernel<4>(kq, a, bp, m, rows); break;
            case 3: ukernel<3>(kq, a, bp, m, rows); break;
            case 2: ukernel<2>(kq, a, bp, m, rows); break;
            default: ukernel<1>(kq, a, bp, m, rows); break;
          }
        }
      }
      // Output transform: Y = A^T M A for this panel's channels.
      for (int64_t t = 0; t < nt; ++t) {
        const int64_t tt = t0 + t, n = tt / (th * tw), ti = tt % (th * tw) / tw, tj = tt % tw;
        for (int64_t v = 0; v < nv; ++v) {
          __m512 m[4][4];
          for (int a = 0; a < 4; ++a)
            for (int c = 0; c < 4; ++c) m[a][c] = _mm512_loadu_ps(M + ((a * 4 + c) * kTiles + t) * kPanel + 16 * v);
          Two s[4];
          for (int c = 0; c < 4; ++c) s[c] = at(m[0][c], m[1][c], m[2][c], m[3][c]);
          for (int i = 0; i < 2; ++i) {
            const int64_t oh = 2 * ti + i;
            if (oh >= L.Ho) break;
            const Two y = at(s[0].v[i], s[1].v[i], s[2].v[i], s[3].v[i]);
            for (int j = 0; j < 2; ++j) {
              const int64_t ow = 2 * tj + j;
              if (ow >= L.Wo) break;
              const int64_t off = ((n * L.Ho + oh) * L.Wo + ow) * L.Co + o0 + 16 * v;
              if (od == DType::bf16)
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint16_t*>(out) + off), avx512::bf16_round16(y.v[j]));
              else
                _mm512_storeu_ps(static_cast<float*>(out) + off, y.v[j]);
            }
          }
        }
      }
    }
  });
}

}  // namespace

void conv_fwd_winograd_avx512bf16(const ConvGeom& q, const void* x, const void* w, DType yd, void* y) {
  WBuf v16(8 * q.C * q.O), b(16 * cdiv(q.O, kPanel) * kPanel * q.C / 2);
  bf16* v16h = reinterpret_cast<bf16*>(v16.p);
  transform_filter(static_cast<const bf16*>(w), q.C, q.O, v16h);
  pack_forward(v16h, q.C, q.O, b.p);
  run({q.N, q.H, q.W, q.C, q.Ho, q.Wo, q.O, q.ph, q.pw}, static_cast<const bf16*>(x), b.p, yd, y);
}

// dx(ih, iw) = sum over kh, kw of g(ih + ph - kh, iw + pw - kw) . w[kh, kw]^T: the same
// tile loop on g with the flipped, transposed filter and padding 2 - ph.
void conv_bwd_data_winograd_avx512bf16(const ConvGeom& q, const void* g, const void* w, DType dxd, void* dx) {
  WBuf v16(8 * q.C * q.O), b(16 * cdiv(q.C, kPanel) * kPanel * q.O / 2);
  bf16* v16h = reinterpret_cast<bf16*>(v16.p);
  transform_filter(static_cast<const bf16*>(w), q.C, q.O, v16h);
  pack_backward_data(v16h, q.C, q.O, b.p);
  run({q.N, q.Ho, q.Wo, q.O, q.H, q.W, q.C, 2 - q.ph, 2 - q.pw}, static_cast<const bf16*>(g), b.p, dxd, dx);
}

}  // namespace podlet::kernels
