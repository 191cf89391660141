// Winograd F(2x2, 3x3) on AVX512_BF16 (conv_winograd.h): per task, a block of kTiles
// output tiles goes through input transform -> 16 GEMMs -> output transform while its
// transformed tiles (U, [16][tiles][C/2] bf16 pairs) and products (M, f32, one 64-column
// panel at a time) stay in L2.
//
// Transforms (F(2, 3), applied to rows then columns):
//   B^T d: (d0 - d2, d1 + d2, d2 - d1, d1 - d3)
//   G g:   (g0, (g0 + g1 + g2) / 2, (g0 - g1 + g2) / 2, g2)
//   A^T m: (m0 + m1 + m2, m1 - m2 - m3)
// and for backward-filter their adjoints
//   A y:   (y0, y0 + y1, y0 - y1, -y1)
//   G^T v: (v0 + (v1 + v2) / 2, (v1 - v2) / 2, (v1 + v2) / 2 + v3)
// All in f32 with -ffp-contract=off, in the order written, so the bits depend on the
// inputs only (not on threads or task sizes).
#include "podlet/kernels/local_vec.h"
#include <algorithm>
#include <utility>
#include <vector>

#include "podlet/kernels/conv_winograd.h"
#include "podlet/kernels/avx512_engine.h"

namespace podlet::kernels {
namespace {

using avx512::WBuf;
using engine::PoolBuf;
using engine::cdiv;
using engine::imax;
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

// The 16 words of channels [ch, ch + 16): (lo[c], hi[c]) as bf16 pairs (RNE).
inline __m512i pair_words(__m512 lo, __m512 hi) {
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21,
                                       5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(idx, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
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
// Backward-filter's: A y (the output transform's adjoint) and G^T v (the filter's).
inline Four ay(__m512 y0, __m512 y1) {
  return {{y0, _mm512_add_ps(y0, y1), _mm512_sub_ps(y0, y1), _mm512_sub_ps(_mm512_setzero_ps(), y1)}};
}
struct Three { __m512 v[3]; };
inline Three gtv(__m512 v0, __m512 v1, __m512 v2, __m512 v3) {
  const __m512 half = _mm512_set1_ps(0.5f), h = _mm512_mul_ps(half, _mm512_add_ps(v1, v2));
  return {{_mm512_add_ps(v0, h), _mm512_mul_ps(half, _mm512_sub_ps(v1, v2)), _mm512_add_ps(h, v3)}};
}

// Software prefetch of channels [c0, c1) of a pixel row (into L1): the hardware
// prefetchers miss the tile loops' pattern of 16 short rows at once.
inline void prefetch_row(const bf16* row, int64_t c0, int64_t c1) {
  for (int64_t c = c0; c < c1; c += 32) _mm_prefetch(reinterpret_cast<const char*>(row + c), _MM_HINT_T0);
}

// The 4 x 4 input pixels of a tile with top-left (ih0, iw0) in image n of in [N, Hi, Wi,
// C]: pointers to their channel rows, `zero` (a row of C zeros) in the padding, so the
// transforms load without branches.
inline void tile_rows(const bf16* in, int64_t n, int64_t ih0, int64_t iw0, int64_t Hi, int64_t Wi, int64_t C,
                      const bf16* zero, const bf16* src[4][4]) {
  for (int a = 0; a < 4; ++a)
    for (int c = 0; c < 4; ++c) {
      const int64_t ih = ih0 + a, iw = iw0 + c;
      src[a][c] = ih >= 0 && ih < Hi && iw >= 0 && iw < Wi ? in + ((n * Hi + ih) * Wi + iw) * C : zero;
    }
}

// A tile of the N x th x tw grid (tile t = (n * th + ti) * tw + tj).
struct Tile {
  int64_t n, ti, tj;
};
inline Tile tile_of(int64_t t, int64_t th, int64_t tw) { return {t / (th * tw), t % (th * tw) / tw, t % tw}; }
// Tiles [t0, t0 + n) in order, with divisions for the first only (three per tile per
// use were ~1% of a 56x56x64 forward).
inline void walk_tiles(int64_t t0, int64_t n, int64_t th, int64_t tw, Tile* out) {
  Tile p = tile_of(t0, th, tw);
  for (int64_t i = 0; i < n; ++i) {
    out[i] = p;
    if (++p.tj == tw) {
      p.tj = 0;
      if (++p.ti == th) p.ti = 0, ++p.n;
    }
  }
}

// A tile's edge class. With an odd Ho (Wo) the last tile row (column) holds one output
// row (column): the forward stores nothing from row a = 3 (column b = 3) of its M, and
// backward-filter's dM is zero there. 0: the last column only, 1: neither, 2: the last
// row only, 3: both.
inline int edge_class(const Tile& p, int64_t th, int64_t tw, int64_t Ho, int64_t Wo) {
  const bool r = (Ho & 1) && p.ti == th - 1, c = (Wo & 1) && p.tj == tw - 1;
  return r ? (c ? 3 : 2) : (c ? 0 : 1);
}

// The indices of tiles[0, n) ordered class by class ([0][1][2][3], in order within a
// class) into order, and the class counts into cnt: each position's tiles are then one
// range.
inline void order_by_edge(const Tile* tiles, int64_t n, int64_t th, int64_t tw, int64_t Ho, int64_t Wo,
                          int64_t* order, int64_t cnt[4]) {
  for (int k = 0; k < 4; ++k) cnt[k] = 0;
  for (int64_t i = 0; i < n; ++i) ++cnt[edge_class(tiles[i], th, tw, Ho, Wo)];
  int64_t next[4] = {0, cnt[0], cnt[0] + cnt[1], cnt[0] + cnt[1] + cnt[2]};
  for (int64_t i = 0; i < n; ++i) order[next[edge_class(tiles[i], th, tw, Ho, Wo)]++] = i;
}

// The ordered tiles [lo, hi) position pos needs: a = 3 skips the last tile row (classes
// 2 and 3), b = 3 the last column (0 and 3), both: the full tiles alone.
inline std::pair<int64_t, int64_t> edge_range(int pos, const int64_t cnt[4]) {
  const bool a3 = pos / 4 == 3, b3 = pos % 4 == 3;
  const int64_t all = cnt[0] + cnt[1] + cnt[2] + cnt[3];
  return {b3 ? cnt[0] : 0, a3 ? cnt[0] + cnt[1] : b3 ? all - cnt[3] : all};
}

// u[a * 4 + c] = (B^T d B)[a][c] for channels [ch, ch + 16) of the tile at src.
inline void input_tile(const bf16* const src[4][4], int64_t ch, __m512 u[16]) {
  __m512 d[4][4];
  for (int a = 0; a < 4; ++a)
    for (int c = 0; c < 4; ++c) d[a][c] = load16(src[a][c] + ch);
  Four r[4];
  for (int c = 0; c < 4; ++c) r[c] = bt(d[0][c], d[1][c], d[2][c], d[3][c]);
  for (int a = 0; a < 4; ++a) {
    const Four v = bt(r[0].v[a], r[1].v[a], r[2].v[a], r[3].v[a]);
    for (int c = 0; c < 4; ++c) u[a * 4 + c] = v.v[c];
  }
}

// v[pos] = (G w[:, :, c, o] G^T)[pos] for outputs [o, o + 16), w [3, 3, C, O] bf16.
inline void filter_tile(const bf16* w, int64_t C, int64_t O, int64_t c, int64_t o, __m512 v[16]) {
  __m512 g[3][3];
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) g[i][j] = load16(w + ((i * 3 + j) * C + c) * O + o);
  Four t[3];
  for (int j = 0; j < 3; ++j) t[j] = gt(g[0][j], g[1][j], g[2][j]);
  for (int i = 0; i < 4; ++i) {
    const Four r = gt(t[0].v[i], t[1].v[i], t[2].v[i]);
    for (int j = 0; j < 4; ++j) v[i * 4 + j] = r.v[j];
  }
}

// B panels for the forward GEMMs, [16][O / 64][C / 2][64] words, straight from w: the
// word (k, j) of a panel holds the pair (V[pos][2k][o], V[pos][2k + 1][o]) of the
// transformed filter rounded to bf16, o = 64 * panel + j, zero past O. (Packed from a
// transformed copy of w, written whole first, the 7x7x512 forward took 16% longer.)
void pack_forward(const bf16* w, int64_t C, int64_t O, uint32_t* b) {
  const int64_t kq = C / 2, np = cdiv(O, kPanel);
  avx512::run_units(kq, 32.0 * C * O / kq, [&](int64_t k) {
    for (int64_t o = 0; o < O; o += 16) {
      __m512 v0[16], v1[16];
      filter_tile(w, C, O, 2 * k, o, v0);
      filter_tile(w, C, O, 2 * k + 1, o, v1);
      for (int pos = 0; pos < 16; ++pos)
        _mm512_storeu_si512(b + ((pos * np + o / kPanel) * kq + k) * kPanel + o % kPanel, pair_words(v0[pos], v1[pos]));
    }
    if (O % kPanel)
      for (int pos = 0; pos < 16; ++pos)
        avx512::zero_words(b + ((pos * np + np - 1) * kq + k) * kPanel + O % kPanel, kPanel - O % kPanel);
  });
}

// B panels for backward-data (K = O, N = C), [16][C / 64][O / 2][64] words: flipping the
// filter in both spatial dims maps G g to P G g with P = (3, 1, 2, 0), so position (a, b)
// of the flipped filter is V at (P a, P b), transposed in (c, o). A K pair is two
// consecutive o of a V row: one 32-bit word, gathered across rows c. Per task, 16
// channels' V rows (all positions, 16 x 16 x O bf16) are transformed into scratch and
// gathered from there (gathered from a whole transformed copy of w, written first, the
// 7x7x512 backward-data took 7.5% longer).
struct VScratch {
  PoolBuf v;
};
void pack_backward_data(const bf16* w, int64_t C, int64_t O, uint32_t* b) {
  const int64_t kq = O / 2, np = cdiv(C, kPanel);
  static constexpr int kFlip[4] = {3, 1, 2, 0};
  const __m512i rows = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                          _mm512_set1_epi32(int(kq)));
  engine::run_tasks<VScratch>(C / 16, C * O >= 4096, [&](int64_t u, VScratch& s) {
    const int64_t c0 = 16 * u;
    s.v.reserve(16 * 16 * kq);
    bf16* v16 = reinterpret_cast<bf16*>(s.v.p);  // [16 positions][16 channels][O]
    for (int64_t c = 0; c < 16; ++c)
      for (int64_t o = 0; o < O; o += 16) {
        __m512 v[16];
        filter_tile(w, C, O, c0 + c, o, v);
        for (int pos = 0; pos < 16; ++pos) store_pairs(v16 + (pos * 16 + c) * O + o, v[pos]);
      }
    for (int pos = 0; pos < 16; ++pos) {
      const int64_t src = kFlip[pos / 4] * 4 + kFlip[pos % 4];
      const uint32_t* v = s.v.p + src * 16 * kq;
      uint32_t* d = b + (pos * np + c0 / kPanel) * kq * kPanel + c0 % kPanel;
      for (int64_t k = 0; k < kq; ++k, d += kPanel) _mm512_storeu_si512(d, _mm512_i32gather_epi32(rows, v + k, 4));
    }
  });
  if (C % kPanel)  // the last panel's columns past C
    for (int pos = 0; pos < 16; ++pos) {
      uint32_t* d = b + (pos * np + np - 1) * kq * kPanel;
      for (int64_t k = 0; k < kq; ++k) avx512::zero_words(d + k * kPanel + C % kPanel, kPanel - C % kPanel);
    }
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
  // Unrolled with a test per row: a loop to `rows` made GCC keep acc on the stack (spills
  // in and out of every call: 77% of the peak at C = 64 instead of 93%).
#pragma GCC unroll 6
  for (int r = 0; r < kRows; ++r)
    if (r < rows)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) _mm512_storeu_ps(m + r * kPanel + 16 * v, acc[r][v]);
}

struct Scratch {
  PoolBuf u, m;
};

// The forward / backward-data tasks: whole row groups of kRows tiles, at most kTiles per
// task, as many tasks as that needs rounded up to a multiple of the thread count, the
// groups shared out evenly (the first `extra` tasks one group more). Fixed 48-tile tasks
// left a thread idle for most of a task at each call's end (7x7x512: 10.7 tasks on 2
// threads). Every tile is its own products, so the split is not in the bits.
struct TaskSplit {
  int64_t ntasks, base, extra;
  explicit TaskSplit(int64_t ntiles) {
    const int64_t groups = cdiv(ntiles, kRows), nt = imax(1, num_threads());
    ntasks = cdiv(cdiv(groups, kTiles / kRows), nt) * nt;
    ntasks = imin(ntasks, groups);
    base = groups / ntasks;
    extra = groups % ntasks;
  }
  // The first tile and the tile count of task t.
  std::pair<int64_t, int64_t> range(int64_t t, int64_t ntiles) const {
    const int64_t t0 = kRows * (t * base + imin(t, extra));
    return {t0, imin(kRows * (base + (t < extra)), ntiles - t0)};
  }
};

void run(const Layer& L, const bf16* in, const uint32_t* b, DType od, void* out) {
  const int64_t kq = L.Ci / 2, np = cdiv(L.Co, kPanel);
  const int64_t th = cdiv(L.Ho, 2), tw = cdiv(L.Wo, 2), ntiles = L.N * th * tw;
  const double flops = 2.0 * L.N * L.Ho * L.Wo * L.Co * L.Ci * 9;
  WBuf zeros(L.Ci / 2);
  zeros.zero(L.Ci / 2);
  const bf16* zero = reinterpret_cast<const bf16*>(zeros.p);
  // Per-position strides of U and M one cache line past a multiple of 4 KB: a transform
  // touches all 16 positions at once, which at 4 KB multiples share one L1 set.
  const int64_t us = kTiles * kq + 16, ms = kTiles * kPanel + 16;
  // A tile's 4 x 4 input pixel rows.
  auto pixel_rows = [&](const Tile& p, const bf16* src[4][4]) {
    tile_rows(in, p.n, 2 * p.ti - L.ph, 2 * p.tj - L.pw, L.Hi, L.Wi, L.Ci, zero, src);
  };
  const TaskSplit split(ntiles);
  engine::run_tasks<Scratch>(split.ntasks, flops >= 4e6, [&](int64_t task, Scratch& s) {
    s.u.reserve(16 * us + kRows * kq);  // a row group past a range's end reads <= 5 rows more
    s.m.reserve(16 * ms);
    uint32_t* U = s.u.p;
    float* M = s.m.f();
    const auto [t0, nt] = split.range(task, ntiles);
    // The task's tiles in U and M by edge class (order_by_edge), so that each position
    // multiplies only the tiles whose outputs read it (7x7 outputs: 113 of 128 row
    // groups). The bits are those of every tile computed: each M row is its own dot
    // products.
    Tile tiles[kTiles];
    walk_tiles(t0, nt, th, tw, tiles);
    int64_t order[kTiles], cnt[4];
    if ((L.Ho | L.Wo) & 1) {
      order_by_edge(tiles, nt, th, tw, L.Ho, L.Wo, order, cnt);
    } else {  // every tile full: the natural order (what order_by_edge would give)
      for (int64_t t = 0; t < nt; ++t) order[t] = t;
      cnt[0] = cnt[2] = cnt[3] = 0;
      cnt[1] = nt;
    }
    // Each tile's pixel rows once (the prefetch two tiles ahead and the transform read
    // them; computed for each, with the edge ordering that even outputs do not need, they
    // cost the 56x56x64 call 2%; paired, one process).
    const bf16* srcs[kTiles][4][4];
    for (int64_t t = 0; t < nt; ++t) pixel_rows(tiles[order[t]], srcs[t]);
    // Input transform: U[pos][t] = (B^T d B)[pos] of tile order[t], 16 channels at a time.
    for (int64_t t = 0; t < nt; ++t) {
      const bf16* const(&src)[4][4] = srcs[t];
      bf16* dst = reinterpret_cast<bf16*>(U + t * kq);
      if (t + 2 < nt)  // the pixels tile t + 2 adds (its right half): +3% at 56x56x64
        for (int a = 0; a < 4; ++a)
          for (int c = 2; c < 4; ++c) prefetch_row(srcs[t + 2][a][c], 0, L.Ci);
      for (int64_t ch = 0; ch < L.Ci; ch += 16) {
        __m512 u[16];
        input_tile(src, ch, u);
        for (int pos = 0; pos < 16; ++pos) store_pairs(dst + pos * 2 * us + ch, u[pos]);
      }
    }
    // The microkernel's rows past nt read these: zeros, not stale words (up to the next
    // position's rows; past the last position, the slack reserved above).
    for (int pos = 0; pos < 16; ++pos)
      avx512::zero_words(U + pos * us + nt * kq, (pos == 15 ? kRows : imin(kRows, kTiles - nt)) * kq);
    for (int64_t pn = 0; pn < np; ++pn) {
      const int64_t o0 = pn * kPanel, nv = imin(kPanel, L.Co - o0) / 16;
      for (int pos = 0; pos < 16; ++pos) {
        const uint32_t* bp = b + (pos * np + pn) * kq * kPanel;
        const auto [lo, hi] = edge_range(pos, cnt);
        for (int64_t r0 = lo; r0 < hi; r0 += kRows) {
          const uint32_t* a = U + pos * us + r0 * kq;
          float* m = M + pos * ms + r0 * kPanel;
          const int64_t rows = imin(kRows, hi - r0);
          switch (nv) {
            case 4: ukernel<4>(kq, a, bp, m, rows); break;
            case 3: ukernel<3>(kq, a, bp, m, rows); break;
            case 2: ukernel<2>(kq, a, bp, m, rows); break;
            default: ukernel<1>(kq, a, bp, m, rows); break;
          }
        }
      }
      // Output transform: Y = A^T M A for this panel's channels.
      // Skipped (position, tile) entries of M hold stale values that no stored output reads.
      for (int64_t t = 0; t < nt; ++t) {
        const Tile& p = tiles[order[t]];
        for (int64_t v = 0; v < nv; ++v) {
          __m512 m[4][4];
          for (int a = 0; a < 4; ++a)
            for (int c = 0; c < 4; ++c) m[a][c] = _mm512_loadu_ps(M + (a * 4 + c) * ms + t * kPanel + 16 * v);
          Two s[4];
          for (int c = 0; c < 4; ++c) s[c] = at(m[0][c], m[1][c], m[2][c], m[3][c]);
          for (int i = 0; i < 2; ++i) {
            const int64_t oh = 2 * p.ti + i;
            if (oh >= L.Ho) break;
            const Two y = at(s[0].v[i], s[1].v[i], s[2].v[i], s[3].v[i]);
            for (int j = 0; j < 2; ++j) {
              const int64_t ow = 2 * p.tj + j;
              if (ow >= L.Wo) break;
              const int64_t off = ((p.n * L.Ho + oh) * L.Wo + ow) * L.Co + o0 + 16 * v;
              avx512::store_out16(od, out, off, y.v[j], false);
            }
          }
        }
      }
    }
  });
}

// ---------------------------------------------------------------- backward-filter
// The forward is linear in the transformed filter V = G w G^T, so dV[pos] = sum over
// tiles t of U_t[pos]^T dM_t[pos] (a C x O GEMM per position whose K is the tiles),
// with U_t the forward's input transform and dM_t = A g_t A^T (g's 2 x 2 tile, zero past
// Ho / Wo), and dw = G^T dV G. Both operands are rounded to bf16 like the forward's.
// A K step is a pair of tiles (2s, 2s + 1) in one word.
// The transformed operands are 4x the size of x and g, so they are never written whole:
// a task owns one block of dV (up to 256 rows c x 256 columns o, all 16 positions) for
// one split of the steps, and per block of 64 steps transforms just its channels into
// scratch (A: [16][mc / 8][nq][8] words, k-major groups of 8 rows; B: [16][nc / 32][nq]
// [32], 32-column panels) and multiplies them with the engine's backward-filter
// microkernel into its partial dV. x's channels are transformed once per column block,
// g's once per row block. The splits' partials are added in split order: the sum of each
// element is split after split, block after block, a function of the shape only.
struct FScratch {
  PoolBuf a, b;
};
// dV blocks of 256 x 256 and transform blocks of 64 steps: of 64 / 128 / 256 and 16 to 64,
// the fastest on the ResNet-34 shapes (paired; 128-blocks transform x and g twice as often).
constexpr int64_t kFmr = 8, kFnr = avx512::NR, kFblock = 256, kFsteps = 64;

void bwd_filter(const ConvGeom& q, const bf16* x, const bf16* g, DType dwd, void* dw) {
  const int64_t C = q.C, O = q.O, Op = engine::round_up(O, kFnr);
  const int64_t th = cdiv(q.Ho, 2), tw = cdiv(q.Wo, 2), T = q.N * th * tw, Tq = cdiv(T, 2);
  const int64_t mc = imin(C, kFblock), nc = imin(Op, kFblock), mt = cdiv(C, mc), nt = cdiv(Op, nc);
  // Splits of the steps: enough tasks for the threads when the channels are few, each
  // at least ~384 steps (so none is empty), partials at most 16 MB.
  const int64_t dv = 16 * C * Op;
  const int64_t ns = imax(1, imin(imin(8, Tq / 384), (int64_t(1) << 22) / dv));
  const int64_t sq = cdiv(Tq, ns);
  PoolBuf acc(ns * dv);
  // Tile t's input rows (x's 4 x 4 pixels, g's 2 x 2): rows of zeros in the padding, past
  // Ho / Wo and past T.
  WBuf zeros(imax(C, O) / 2);
  zeros.zero(imax(C, O) / 2);
  const bf16* zero = reinterpret_cast<const bf16*>(zeros.p);
  struct Src {
    const bf16* x[4][4];
    const bf16* g[2][2];
  };
  // The tiles in K order: by edge class (order_by_edge) when Ho or Wo is odd, so that
  // the GEMMs skip the (position, tile) pairs whose dM is zero (7x7 outputs multiply 225
  // of 256); the natural order otherwise.
  LocalVec<int64_t> perm;
  int64_t cnt[4] = {0, T, 0, 0};
  if ((q.Ho | q.Wo) & 1) {
    std::vector<Tile> all(T);
    walk_tiles(0, T, th, tw, all.data());
    perm.resize(size_t(T));
    order_by_edge(all.data(), T, th, tw, q.Ho, q.Wo, perm.data(), cnt);
  }
  // Position p's steps: [lo, hi) (a step is a pair of tiles; one holding a tile of the
  // range is in it).
  auto steps_of = [&](int p) {
    const auto [lo, hi] = edge_range(p, cnt);
    return std::pair<int64_t, int64_t>{lo / 2, cdiv(hi, 2)};
  };
  // Tile t (at p in the grid) into r.
  auto tile_src = [&](int64_t t, const Tile& p, Src& r) {
    if (t >= T) {
      for (int a = 0; a < 16; ++a) r.x[a / 4][a % 4] = zero;
      for (int a = 0; a < 4; ++a) r.g[a / 2][a % 2] = zero;
      return;
    }
    tile_rows(x, p.n, 2 * p.ti - q.ph, 2 * p.tj - q.pw, q.H, q.W, C, zero, r.x);
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j) {
        const int64_t oh = 2 * p.ti + i, ow = 2 * p.tj + j;
        r.g[i][j] = oh < q.Ho && ow < q.Wo ? g + ((p.n * q.Ho + oh) * q.Wo + ow) * O : zero;
      }
  };
  // dM = A y A^T for channels [o, o + 16) of a tile (zeros past O).
  auto g_tile = [&](const Src& r, int64_t o, __m512 m[16]) {
    __m512 y[2][2];
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j) y[i][j] = o < O ? load16(r.g[i][j] + o) : _mm512_setzero_ps();
    const Four c0 = ay(y[0][0], y[1][0]), c1 = ay(y[0][1], y[1][1]);
    for (int a = 0; a < 4; ++a) {
      const Four v = ay(c0.v[a], c1.v[a]);
      for (int b = 0; b < 4; ++b) m[a * 4 + b] = v.v[b];
    }
  };
  const double flops = 2.0 * 16 * double(C) * double(Op) * double(2 * Tq);
  engine::run_tasks<FScratch>(ns * mt * nt, flops >= 4e6, [&](int64_t task, FScratch& s) {
    const int64_t sp = task / (mt * nt), c0 = task % (mt * nt) / nt * mc, o0 = task % nt * nc;
    const int64_t rows = imin(mc, C - c0), cols = imin(nc, Op - o0);
    const int64_t q0 = sp * sq, q1 = imin(Tq, q0 + sq);
    float* d = acc.f() + sp * dv;
    const int64_t bl = cdiv(q1 - q0, cdiv(q1 - q0, kFsteps));
    // Group / panel strides one cache line past a multiple of 1 KB: the transforms store
    // one step of every group and panel at a time, and at power-of-two strides those
    // lines fall in a few L1 sets (56x56x64 transforms 2x slower).
    const int64_t as = bl * kFmr + 16, bs = bl * kFnr + 16;
    s.a.reserve(16 * (rows / kFmr) * as);
    s.b.reserve(16 * (cols / kFnr) * bs);
    const int64_t rg = rows / kFmr, cp = cols / kFnr;
    // The tiles' rows, step by step in K order: each step's once, two steps ahead (its
    // rows prefetched then), kept in a ring of three steps. The grid position of the
    // next tile walks along (no divisions) in the natural order. Computing each step's
    // rows twice, with three divisions a tile, cost the 56x56x64 call 3% (28x28x128 1.4%,
    // 14x14x256 0.8%; paired, one process).
    Src ring[3][2];
    int64_t next_t = 2 * q0;
    Tile cur = tile_of(next_t, th, tw);
    auto fill = [&](Src& r) {
      tile_src(next_t, perm.empty() || next_t >= T ? cur : tile_of(perm[next_t], th, tw), r);
      ++next_t;
      if (++cur.tj == tw) {
        cur.tj = 0;
        if (++cur.ti == th) cur.ti = 0, ++cur.n;
      }
    };
    for (int k = 0; k < 2; ++k) fill(ring[(q0 + k) % 3][0]), fill(ring[(q0 + k) % 3][1]);
    for (int64_t b0 = q0; b0 < q1; b0 += bl) {
      const int64_t nq = imin(bl, q1 - b0);
      for (int64_t st = 0; st < nq; ++st) {
        const Src& r0 = ring[(b0 + st) % 3][0];
        const Src& r1 = ring[(b0 + st) % 3][1];
        {  // the rows of the step two ahead: +2-7% (56x56x64 the most)
          Src* p = ring[(b0 + st + 2) % 3];
          fill(p[0]);
          fill(p[1]);
          for (int k = 0; k < 2; ++k) {
            for (int a = 0; a < 16; ++a) prefetch_row(p[k].x[a / 4][a % 4], c0, c0 + rows);
            for (int a = 0; a < 4; ++a) prefetch_row(p[k].g[a / 2][a % 2], o0, imin(o0 + cols, O));
          }
        }
        for (int64_t ch = c0; ch < c0 + rows; ch += 16) {
          __m512 u0[16], u1[16];
          input_tile(r0.x, ch, u0);
          input_tile(r1.x, ch, u1);
          for (int p = 0; p < 16; ++p) {
            const __m512i w = pair_words(u0[p], u1[p]);
            uint32_t* a = s.a.p + (p * rg + (ch - c0) / kFmr) * as + st * kFmr;
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(a), _mm512_castsi512_si256(w));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(a + as), _mm512_extracti64x4_epi64(w, 1));
          }
        }
        for (int64_t o = o0; o < o0 + cols; o += 16) {
          __m512 m0[16], m1[16];
          g_tile(r0, o, m0);
          g_tile(r1, o, m1);
          for (int p = 0; p < 16; ++p)
            _mm512_storeu_si512(s.b.p + (p * cp + (o - o0) / kFnr) * bs + st * kFnr + (o - o0) % kFnr,
                                pair_words(m0[p], m1[p]));
        }
      }
      // Each call first prefetches the dV tile of the next call (rows of 2 lines at a
      // stride of Op floats, a pattern the hardware prefetchers miss). In a training step
      // the task's 4 MB of dV comes from L3 at every block, and waiting on those 16 lines
      // before the adds cost 13-15% of the 14x14x256 and 7x7x512 calls, 0-3% of the others
      // (in-step profiles, three paired runs; run alone from a warm L3, 0-6%).
      auto dv_tile = [&](int64_t p, int64_t j, int64_t i) { return d + (p * C + c0 + i * kFmr) * Op + o0 + j * kFnr; };
      for (int p = 0; p < 16; ++p) {
        // This block's steps of position p, [s0, s1), and whether an earlier block of the
        // split has written its dV (the first one stores, the rest add).
        const auto [lo, hi] = steps_of(p);
        const int64_t s0 = imax(b0, lo), s1 = imin(b0 + nq, hi);
        if (s0 >= s1) continue;
        const bool add = s0 > imax(q0, lo);
        for (int64_t j = 0; j < cp; ++j)
          for (int64_t i = 0; i < rg; ++i) {
            const int64_t ni = i + 1 < rg ? i + 1 : 0, nj = ni ? j : j + 1 < cp ? j + 1 : 0, npos = ni || nj ? p : p + 1;
            if (npos < 16) {
              const float* t = dv_tile(npos, nj, ni);
              for (int64_t r = 0; r < kFmr; ++r) {
                _mm_prefetch(reinterpret_cast<const char*>(t + r * Op), _MM_HINT_T0);
                _mm_prefetch(reinterpret_cast<const char*>(t + r * Op + 16), _MM_HINT_T0);
              }
            }
            avx512::ukernel_x32<avx512::Bf16Kind, true, 8>(s1 - s0, s.a.p + (p * rg + i) * as + (s0 - b0) * kFmr, 0,
                                                           s.b.p + (p * cp + j) * bs + (s0 - b0) * kFnr,
                                                           dv_tile(p, j, i), Op, add);
          }
      }
    }
    // A position with none of its steps in this split: its partial is zero.
    for (int p = 0; p < 16; ++p) {
      const auto [lo, hi] = steps_of(p);
      if (imax(q0, lo) < imin(q1, hi)) continue;
      for (int64_t r = 0; r < rows; ++r) std::fill_n(d + (p * C + c0 + r) * Op + o0, cols, 0.0f);
    }
  });
  // acc = split 0 + split 1 + ..., in order.
  if (ns > 1)
    engine::run_units(16 * C, double(ns) * double(dv) >= 2e5, [&](int64_t r) {
      float* a = acc.f() + r * Op;
      for (int64_t sp = 1; sp < ns; ++sp) {
        const float* b = acc.f() + sp * dv + r * Op;
        for (int64_t o = 0; o < Op; o += 16) _mm512_storeu_ps(a + o, _mm512_add_ps(_mm512_loadu_ps(a + o), _mm512_loadu_ps(b + o)));
      }
    });
  // dw[kh][kw][c][o] = (G^T dV[.][c][o] G)[kh][kw]
  engine::run_units(C, 16.0 * double(C) * double(O) >= 2e5, [&](int64_t c) {
    for (int64_t o = 0; o < O; o += 16) {
      Three r[4];
      for (int a = 0; a < 4; ++a) {
        __m512 v[4];
        for (int b = 0; b < 4; ++b) v[b] = _mm512_loadu_ps(acc.f() + ((a * 4 + b) * C + c) * Op + o);
        r[a] = gtv(v[0], v[1], v[2], v[3]);
      }
      for (int j = 0; j < 3; ++j) {
        const Three w = gtv(r[0].v[j], r[1].v[j], r[2].v[j], r[3].v[j]);
        for (int i = 0; i < 3; ++i) {
          const int64_t off = ((i * 3 + j) * C + c) * O + o;
          if (dwd == DType::bf16)
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint16_t*>(dw) + off), avx512::bf16_round16(w.v[i]));
          else
            _mm512_storeu_ps(static_cast<float*>(dw) + off, w.v[i]);
        }
      }
    }
  });
}

}  // namespace

void conv_fwd_winograd_avx512bf16(const ConvGeom& q, const void* x, const void* w, DType yd, void* y) {
  PoolBuf b(16 * cdiv(q.O, kPanel) * kPanel * q.C / 2);
  pack_forward(static_cast<const bf16*>(w), q.C, q.O, b.p);
  run({q.N, q.H, q.W, q.C, q.Ho, q.Wo, q.O, q.ph, q.pw}, static_cast<const bf16*>(x), b.p, yd, y);
}

// dx(ih, iw) = sum over kh, kw of g(ih + ph - kh, iw + pw - kw) . w[kh, kw]^T: the same
// tile loop on g with the flipped, transposed filter and padding 2 - ph.
void conv_bwd_data_winograd_avx512bf16(const ConvGeom& q, const void* g, const void* w, DType dxd, void* dx) {
  PoolBuf b(16 * cdiv(q.C, kPanel) * kPanel * q.O / 2);
  pack_backward_data(static_cast<const bf16*>(w), q.C, q.O, b.p);
  run({q.N, q.Ho, q.Wo, q.O, q.H, q.W, q.C, 2 - q.ph, 2 - q.pw}, static_cast<const bf16*>(g), b.p, dxd, dx);
}

void conv_bwd_filter_winograd_avx512bf16(const ConvGeom& q, const void* x, const void* g, DType dwd, void* dw) {
  bwd_filter(q, static_cast<const bf16*>(x), static_cast<const bf16*>(g), dwd, dw);
}

}  // namespace podlet::kernels
