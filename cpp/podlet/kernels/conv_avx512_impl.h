// Convolutions on the AVX-512 engine (avx512_engine.h; see conv.h for the geometry),
// written once for both kinds and instantiated by conv_avx512.cc (F32Kind) and
// conv_avx512bf16.cc (Bf16Kind: bf16 operands, K pairs through vdpbf16ps). Implicit
// GEMMs: nothing like a full im2col is materialised.
//
//   forward      y[(n,oh,ow), o]   = sum_{(kh,kw,ci)} x[n, ih, iw, ci] w[kh, kw, ci, o]
//                A = patch rows (row-major, packed per task), B = w (prepacked).
//   bwd-data     dx[(n,ih,iw), ci] = sum_{(kh,kw,o)}  g[n, oh, ow, o]  w[kh, kw, ci, o]
//                per stride phase (see conv_avx2.cc: a dense GEMM over just the taps that
//                reach a phase's pixels); A = g rows, B = w transposed per tap.
//   bwd-filter   dw^T[o, (kh,kw,ci)] = sum_{(n,oh,ow)} g[n, oh, ow, o] x[n, ih, iw, ci]
//                A = g^T (k-major: each K step is one or two g rows, contiguous in o),
//                packed once and shared by all tasks; B = patch rows restricted to a
//                task's columns, packed by the task per K block; a task is (pixel chunk,
//                column range); chunk partials are added in order and the tiles stored
//                transposed into dw.
// In the Bf16Kind a K step is a pair of consecutive K indices. Pairs never need the two
// indices to be neighbours in memory except where noted (bwd-data's w transpose takes
// 32-bit words when Og is even, and gathers pairs otherwise).
//
// Summation order per output element: K in blocks fixed by the shape (block_len), in K order:
// independent of the thread count.
#pragma once
#include <vector>
#include "podlet/kernels/avx512_engine.h"
#include "podlet/kernels/conv.h"

namespace podlet::kernels::avx512 {
namespace {

// The element type of packed rows: f32 (widened) or raw bf16 bits.
template <class Kind> using Elem = std::conditional_t<std::is_same_v<Kind, F32Kind>, float, uint16_t>;

inline void copy_elems(const float* s, int64_t n, float* d) { copy_row(s, n, d); }
inline void copy_elems(const bf16* s, int64_t n, float* d) { copy_row(s, n, d); }
inline void copy_elems(const bf16* s, int64_t n, uint16_t* d) { copy_halves(s, n, d); }
inline void copy_elems(const float*, int64_t, uint16_t*) {}  // never called: Bf16Kind takes bf16 only
inline void zero_elems(float* d, int64_t n) { zero_floats(d, n); }
inline void zero_elems(uint16_t* d, int64_t n) { zero_halves(d, n); }

// d[k - k0] for k in [k0, k1) = the patch row of output pixel (n, oh, ow) in group gi:
// K index k = (kh * KW + kw) * Cg + ci reads x[n, oh*sh + kh*rdh - ph, ow*sw + kw*rdw - pw,
// gi*Cg + ci], zero where that falls in the padding.
template <class TX, class E>
void patch_row(const ConvGeom& q, const TX* x, int64_t gi, int64_t n, int64_t oh, int64_t ow, int64_t k0, int64_t k1,
               E* d) {
  const int64_t Cg = q.Cg(), C = q.C, seg = q.KW * Cg;  // seg: K indices per kh
  d -= k0;
  // One kh row of taps (kw, ci) is contiguous in x when G == 1 and rdw == 1.
  const bool row_contig = q.G == 1 && q.rdw == 1;
  for (int64_t kh = k0 / seg; kh * seg < k1; ++kh) {
    const int64_t lo = imax(k0, kh * seg), hi = imin(k1, (kh + 1) * seg);
    const int64_t ih = oh * q.sh + kh * q.rdh - q.ph;
    if (ih < 0 || ih >= q.H) { zero_elems(d + lo, hi - lo); continue; }
    const TX* xr = x + (n * q.H + ih) * q.W * C + gi * Cg;
    if (row_contig) {
      // k = kh*seg + kw*C + ci reads xr[iw0*C + (k - kh*seg)].
      const int64_t iw0 = ow * q.sw - q.pw, base = kh * seg;
      const int64_t v_lo = imax(lo, base + imax(0, -iw0) * C), v_hi = imin(hi, base + (q.W - iw0) * C);
      if (v_lo >= v_hi) { zero_elems(d + lo, hi - lo); continue; }
      zero_elems(d + lo, v_lo - lo);
      copy_elems(xr + iw0 * C + (v_lo - base), v_hi - v_lo, d + v_lo);
      zero_elems(d + v_hi, hi - v_hi);
    } else {
      for (int64_t kw = (lo - kh * seg) / Cg; kh * seg + kw * Cg < hi; ++kw) {
        const int64_t a = imax(lo, kh * seg + kw * Cg), b = imin(hi, kh * seg + (kw + 1) * Cg);
        const int64_t iw = ow * q.sw + kw * q.rdw - q.pw;
        if (iw < 0 || iw >= q.W) zero_elems(d + a, b - a);
        else copy_elems(xr + iw * C + (a - kh * seg - kw * Cg), b - a, d + a);
      }
    }
  }
}

// The pieces of a packed row for K indices [k0, k1) that are contiguous in the source
// (x or g) when the pixel is interior: piece j goes to d + dst[j] from the pixel's
// corner + off[j]; [lo_h, hi_h] x [lo_w, hi_w] bound the row / column offsets the
// pieces read, so one test per pixel replaces the per-piece bounds of patch_row (whose
// bookkeeping, with divisions, cost more than its copies at 64 channels).
struct Pieces {
  static constexpr int kMax = 16;
  int n = 0;
  int64_t lo_h = 0, hi_h = 0, lo_w = 0, hi_w = 0;
  int64_t dst[kMax], len[kMax], off[kMax];
  bool add(int64_t d, int64_t l, int64_t o) {
    if (n == kMax) return false;
    dst[n] = d; len[n] = l; off[n] = o; ++n;
    return true;
  }
  // Whether every piece of the pixel whose corner is (h, w) lies inside an H x W image.
  bool inside(int64_t h, int64_t w, int64_t H, int64_t W) const {
    return h + lo_h >= 0 && h + hi_h < H && w + lo_w >= 0 && w + hi_w < W;
  }
};
// Forward, G == 1 and rdw == 1: one piece per kh (a row of taps is contiguous in x);
// offsets from x[n, oh*sh - ph, ow*sw - pw, 0]. False when it does not apply.
inline bool fwd_pieces(const ConvGeom& q, int64_t k0, int64_t k1, Pieces& pc) {
  if (q.G != 1 || q.rdw != 1 || k1 <= k0) return false;
  const int64_t seg = q.KW * q.C;
  pc.lo_h = (k0 / seg) * q.rdh;
  pc.hi_h = ((k1 - 1) / seg) * q.rdh;
  pc.lo_w = 0;
  pc.hi_w = q.KW - 1;
  for (int64_t kh = k0 / seg; kh * seg < k1; ++kh) {
    const int64_t lo = imax(k0, kh * seg), hi = imin(k1, (kh + 1) * seg);
    if (!pc.add(lo - k0, hi - lo, kh * q.rdh * q.W * q.C + (lo - kh * seg))) return false;
  }
  return true;
}
// The corner is an element offset, not a pointer: it may lie before the array (a forward
// K block starting at kh = 1 of a pixel in the first row) while every piece is inside.
template <class TX, class E> inline void copy_pieces(const Pieces& pc, const TX* src, int64_t corner, E* d) {
  for (int j = 0; j < pc.n; ++j) copy_elems(src + (corner + pc.off[j]), pc.len[j], d + pc.dst[j]);
}

// The whole patch row (K = KH * KW * C, G == 1, rdw == 1) of a bf16 pixel whose kh
// pieces are short (KW * C <= 16: the 1-channel 7x7 stem's 7; an RGB stem's 21 stays on
// patch_row): one 16-element load and store per kh, each store running over the start
// of the next piece, which overwrites it; stores are masked at K, so nothing lands past
// the row. Only for pixels whose taps are all inside their x row (iw0 >= 0,
// iw0 + KW <= W); false for the others, which take patch_row. patch_row's masked copies
// of 7 elements were the stem's main cost.
inline bool patch_row_short(const ConvGeom& q, const bf16* x, int64_t n, int64_t oh, int64_t ow, uint16_t* d) {
  const int64_t C = q.C, seg = q.KW * C, K = q.KH * seg, iw0 = ow * q.sw - q.pw;
  if (iw0 < 0 || iw0 + q.KW > q.W) return false;
  const bf16* xr = x + (n * q.H * q.W + iw0) * C;
  const __mmask16 m = tail16(seg);
  for (int64_t kh = 0; kh < q.KH; ++kh) {
    const int64_t ih = oh * q.sh + kh * q.rdh - q.ph;
    const __m256i v = ih < 0 || ih >= q.H ? _mm256_setzero_si256() : _mm256_maskz_loadu_epi16(m, xr + ih * q.W * C);
    _mm256_mask_storeu_epi16(d + kh * seg, tail16(imin(16, K - kh * seg)), v);
  }
  return true;
}

// An output pixel (n, oh, ow), stepped in row-major order without divisions.
struct Pixel {
  int64_t n, oh, ow;
  Pixel(const ConvGeom& q, int64_t p) : n(p / (q.Ho * q.Wo)), oh((p / q.Wo) % q.Ho), ow(p % q.Wo) {}
  void next(const ConvGeom& q) {
    if (++ow == q.Wo) { ow = 0; if (++oh == q.Ho) { oh = 0; ++n; } }
  }
};

// Short kh pieces (KW * C <= 16, G == 1, rdw == 1) of a bf16 pixel pair whose taps are
// all inside their x rows: per kh one masked load per pixel, one vpermt2w into 16
// words, and masked stores into the (at most two) panels the piece falls in. False
// when a pixel is missing or near the edge (patch_step's general path).
inline bool patch_step_short(const ConvGeom& q, const bf16* x, const Pixel* px, int npx, int64_t n0, int64_t nb,
                             uint32_t* dst, int64_t pstride) {
  const int64_t C = q.C, seg = q.KW * C, n1 = n0 + nb;
  if (npx != 2) return false;
  const bf16* xr[2];
  for (int j = 0; j < 2; ++j) {
    const int64_t iw0 = px[j].ow * q.sw - q.pw;
    if (iw0 < 0 || iw0 + q.KW > q.W) return false;
    xr[j] = x + (px[j].n * q.H * q.W + iw0) * C;
  }
  const __m512i lo16 = interleave_index(0);
  for (int64_t kh = n0 / seg; kh * seg < n1; ++kh) {
    const int64_t lo = imax(n0, kh * seg), hi = imin(n1, (kh + 1) * seg), o = lo - kh * seg;
    const __mmask16 m = tail16(hi - lo);
    __m256i v[2];
    for (int j = 0; j < 2; ++j) {
      const int64_t ih = px[j].oh * q.sh + kh * q.rdh - q.ph;
      v[j] = ih < 0 || ih >= q.H ? _mm256_setzero_si256() : _mm256_maskz_loadu_epi16(m, xr[j] + ih * q.W * C + o);
    }
    const __m512i w = _mm512_permutex2var_epi16(_mm512_castsi256_si512(v[0]), lo16, _mm512_castsi256_si512(v[1]));
    const int64_t c = lo - n0, first = imin(hi - lo, NR - c % NR);  // words before the panel ends
    _mm512_mask_storeu_epi32(dst + (c / NR) * pstride + c % NR, tail16(first), w);
    if (first < hi - lo) {  // the rest starts the next panel
      const __m512i sh = _mm512_permutexvar_epi32(_mm512_add_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                                                   _mm512_set1_epi32(int(first))), w);
      _mm512_mask_storeu_epi32(dst + (c / NR + 1) * pstride, tail16(hi - lo - first), sh);
    }
  }
  return true;
}

// Columns of dw^T per backward-filter task (a multiple of NR, at most kNC; or all Kx
// columns when `whole`): the one whose tasks, handed out in order to whichever thread is
// free (the dynamic schedule), are done soonest, counting a task's fixed cost as NR / 2
// columns; the widest of equals. Equal tiles that do not share out evenly idle a thread
// at the end: 9 tiles of 14x14x256 on 2 threads left one idle for a ninth of the call.
// Packing A (Mp words a step) counts as 2/3 of a column per word (measured at 64
// channels): with several column tiles it is a pass over the window before its tasks,
// shared by the threads; with one, each task packs its own A into L2 (a_in_task), which
// also spares the pass its trip through memory. 56x56x64: 13 whole-width tasks beat 39
// of 192 columns plus the pass (+6% paired); 28x28x128 (4 chunks) keeps its split.
// Only the speed depends on this: every sum runs over the pixels, whatever the split.
inline int64_t bwd_filter_columns(int64_t Kx, int64_t G, int64_t Pq, int64_t CQ, int64_t win, int64_t Mp, bool whole) {
  const int64_t T = imin(num_threads(), 256), nch = imax(cdiv(Pq, CQ), 1);
  const double pack = double(Mp) * 2.0 / 3.0;  // per step
  double load[256];
  auto finish = [&](int64_t nc) {
    const int64_t nt = cdiv(Kx, nc);
    double total = 0;
    for (int64_t w0 = 0; w0 < nch; w0 += win) {
      double wsteps = 0;
      for (int64_t t = 0; t < T; ++t) load[t] = 0;
      for (int64_t c = w0; c < imin(nch, w0 + win); ++c) {
        const double steps = double(imax(imin(CQ, Pq - c * CQ), 1));
        wsteps += steps;
        for (int64_t tile = 0; tile < G * nt; ++tile) {
          const int64_t n0 = (tile % nt) * nc;
          int64_t free = 0;
          for (int64_t t = 1; t < T; ++t) if (load[t] < load[free]) free = t;
          load[free] += steps * (double(imin(nc, Kx - n0) + NR / 2) + (nt == 1 ? pack : 0.0));
        }
      }
      double end = 0;
      for (int64_t t = 0; t < T; ++t) end = end > load[t] ? end : load[t];
      total += end + (nt == 1 ? 0.0 : wsteps * double(G) * pack / double(T));
    }
    return total;
  };
  int64_t best = 0;
  double best_t = 0;
  const int64_t widest = whole ? round_up(Kx, NR) : imin(kNC, round_up(Kx, NR));
  for (int64_t nc = widest; nc >= NR; nc = nc > kNC ? imin(kNC, round_up(Kx, NR)) : nc - NR) {
    const double t = finish(nc);
    if (best == 0 || t < best_t * (1 - 1e-9)) { best = nc; best_t = t; }
  }
  return best;
}

#ifdef __AVX512BF16__
// Backward-filter with whole 32-channel panels (Bf16Kind, C % 32 == 0, one group): the
// microkernel of a panel's first row group builds the panel itself. Step q's words are
// the pair (x row src[q * sstride][ci0..], x row src[q * sstride + 1][ci0..]) (a row of
// zeros for padding or a missing pixel) through two vpermt2w; they go to b (for the
// panel's other row groups, from L1) and straight into the dot products. On this core
// a vdpbf16ps zmm issues once a cycle and the loads and permutes of a step fit beside
// its 16-24 of them (measured: 16 dp with 2 permutes and 2 loads run in the time of 16
// dp alone), so the pack that was 20-30% of the call hides under the arithmetic.
template <int R>
__attribute__((noinline)) void ukernel_x32_xpack(int64_t kq, const uint32_t* a, const bf16* const* src, int64_t sstride,
                                                 int64_t ci0, uint32_t* b, float* c, int64_t ldc, bool add) {
  __m512 acc[R][2];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  const __m512i lo = interleave_index(0), hi = interleave_index(1);
  for (int64_t q = 0; q < kq; ++q, src += sstride, b += NR, a += R) {
    const __m512i x0 = _mm512_loadu_si512(src[0] + ci0), x1 = _mm512_loadu_si512(src[1] + ci0);
    const __m512i w0 = _mm512_permutex2var_epi16(x0, lo, x1), w1 = _mm512_permutex2var_epi16(x0, hi, x1);
    _mm512_store_si512(b, w0);
    _mm512_store_si512(b + 16, w1);
    const __m512 b0 = _mm512_castsi512_ps(w0), b1 = _mm512_castsi512_ps(w1);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      acc[r][0] = madd<Bf16Kind>(acc[r][0], a[r], b0);
      acc[r][1] = madd<Bf16Kind>(acc[r][1], a[r], b1);
    }
  }
  store_block<R>(acc, c, ldc, add);
}
#endif

// Where a K block of backward-filter's A is: row group i at p + i * stride (a local type,
// not std::pair: see the ODR note in avx512_engine.h).
struct ABlock {
  const uint32_t* p;
  int64_t stride;
};

// src[(st * ntap + t) * 2 + j] for steps [0, nq) from pixel px (stepped), taps
// [t0, t0 + ntap) (t = kh * KW + kw) and the step's pixels j = 0, 1: the x row that pixel
// reads through the tap, or `zeros` (C elements) in the padding or for a missing pixel.
inline void tap_rows(const ConvGeom& q, const bf16* x, const bf16* zeros, Pixel& px, int64_t p, int64_t P, int64_t nq,
                     int64_t t0, int64_t ntap, const bf16** src) {
  // Per tap: its row and column offsets and its offset in x (no divisions per pixel).
  int64_t dh[64], dw[64], off[64];
  for (int64_t t = 0; t < ntap; ++t) {
    const int64_t kh = (t0 + t) / q.KW, kw = (t0 + t) % q.KW;
    dh[t] = kh * q.rdh;
    dw[t] = kw * q.rdw;
    off[t] = (dh[t] * q.W + dw[t]) * q.C;
  }
  for (int64_t st = 0; st < nq; ++st) {
    for (int j = 0; j < 2; ++j, ++p) {
      const bf16** d = src + st * ntap * 2 + j;
      if (p >= P) {
        for (int64_t t = 0; t < ntap; ++t) d[t * 2] = zeros;
        continue;
      }
      const int64_t ih0 = px.oh * q.sh - q.ph, iw0 = px.ow * q.sw - q.pw;
      const bf16* base = x + ((px.n * q.H + ih0) * q.W + iw0) * q.C;  // only offset by valid taps
      for (int64_t t = 0; t < ntap; ++t) {
        const int64_t ih = ih0 + dh[t], iw = iw0 + dw[t];
        d[t * 2] = uint64_t(ih) < uint64_t(q.H) && uint64_t(iw) < uint64_t(q.W) ? base + off[t] : zeros;
      }
      px.next(q);
    }
  }
}

// The B words of one K step of backward-filter: the patch rows of the step's pixel
// (F32Kind, widened) or pixel pair (Bf16Kind, interleaved into words; npx = 1 pairs the
// last pixel with zeros) over columns [n0, n0 + nb), into panels: column c goes to
// dst[((c - n0) / NR) * pstride + (c - n0) % NR]. Columns past nb are not written.
// When G == 1 and rdw == 1 each kh row of taps is a contiguous slice of x, and the
// words are formed straight from x (no temporary rows); otherwise through patch_row.
template <class Kind, class TX>
void patch_step(const ConvGeom& q, const TX* x, int64_t gi, const Pixel* px, int npx, int64_t n0, int64_t nb,
                uint32_t* dst, int64_t pstride, Elem<Kind>* tmp) {
  using E = Elem<Kind>;
  if constexpr (std::is_same_v<Kind, Bf16Kind> && std::is_same_v<TX, bf16>)
    if (q.G == 1 && q.rdw == 1 && q.KW * q.C <= 16 && patch_step_short(q, x, px, npx, n0, nb, dst, pstride)) return;
  auto put = [&](int64_t k, int64_t e, const TX* s0, const TX* s1) {  // columns [k, e) in one panel
    uint32_t* d = dst + ((k - n0) / NR) * pstride + (k - n0) % NR;
    if constexpr (std::is_same_v<Kind, F32Kind>) {
      if (s0) copy_row(s0, e - k, reinterpret_cast<float*>(d));
      else zero_words(d, e - k);
    } else {
      interleave_rows(s0, s1, e - k, d);
    }
  };
  const int64_t n1 = n0 + nb;
  if (!(q.G == 1 && q.rdw == 1)) {  // through temporary rows
    E* rows[2] = {tmp, tmp + round_up(nb, NR)};
    for (int j = 0; j < 2; ++j) {
      if (j < npx) patch_row(q, x, gi, px[j].n, px[j].oh, px[j].ow, n0, n1, rows[j]);
      else zero_elems(rows[j], nb);
    }
    for (int64_t k = n0; k < n1; k = imin(n1, k + NR)) {
      const int64_t e = imin(n1, k + NR);
      if constexpr (std::is_same_v<Kind, F32Kind>) {
        std::memcpy(dst + ((k - n0) / NR) * pstride, rows[0] + (k - n0), size_t(e - k) * 4);
      } else {
        interleave_rows(reinterpret_cast<const bf16*>(rows[0] + (k - n0)), reinterpret_cast<const bf16*>(rows[1] + (k - n0)),
                        e - k, dst + ((k - n0) / NR) * pstride);
      }
    }
    return;
  }
  const int64_t C = q.C, seg = q.KW * C;
  for (int64_t kh = n0 / seg; kh * seg < n1; ++kh) {
    const int64_t lo = imax(n0, kh * seg), hi = imin(n1, (kh + 1) * seg);
    int64_t vlo[2] = {lo, lo}, vhi[2] = {lo, lo};  // valid column range per pixel
    const TX* src[2] = {nullptr, nullptr};         // src[j] + k: column k's element
    for (int j = 0; j < npx; ++j) {
      const int64_t ih = px[j].oh * q.sh + kh * q.rdh - q.ph;
      if (ih < 0 || ih >= q.H) continue;
      const int64_t iw0 = px[j].ow * q.sw - q.pw, base = kh * seg;
      vlo[j] = imax(lo, base + imax(0, -iw0) * C);
      vhi[j] = imin(hi, base + (q.W - iw0) * C);
      if (vlo[j] >= vhi[j]) { vlo[j] = vhi[j] = lo; continue; }
      src[j] = x + ((px[j].n * q.H + ih) * q.W + iw0) * C - base;  // only offset by valid k below
    }
    for (int64_t k = lo; k < hi;) {
      int64_t e = imin(hi, n0 + ((k - n0) / NR + 1) * NR);  // the panel's end
      for (int j = 0; j < 2; ++j) {
        if (vlo[j] > k) e = imin(e, vlo[j]);
        if (vhi[j] > k) e = imin(e, vhi[j]);
      }
      const bool in0 = k >= vlo[0] && k < vhi[0], in1 = k >= vlo[1] && k < vhi[1];
      put(k, e, in0 ? src[0] + k : nullptr, in1 ? src[1] + k : nullptr);
      k = e;
    }
  }
}

// Row r of a row-major K block of nq steps: K indices [k0, k0 + kb) as elements, then
// zero up to the end of the last step (an odd K in the Bf16Kind).
template <class Kind> inline Elem<Kind>* row_of(uint32_t* dst, int64_t r, int64_t nq) {
  return reinterpret_cast<Elem<Kind>*>(dst + r * nq);
}

// B rows: panel [Kq][NR] words of a matrix whose K row k starts at row(k) (contiguous
// in N, nb <= NR columns). Zero past nb and past K.
template <class Kind, class T, class RowFn>
void pack_panel_rows(int64_t K, int64_t nb, RowFn&& row, uint32_t* dst) {
  const int64_t Kq = cdiv(K, Kind::kstep);
  if constexpr (std::is_same_v<Kind, F32Kind>) {
    for (int64_t k = 0; k < K; ++k) {
      copy_row(row(k), nb, reinterpret_cast<float*>(dst + k * NR));
      zero_words(dst + k * NR + nb, NR - nb);
    }
  } else {
    for (int64_t s = 0; s < Kq; ++s) {
      interleave_rows(row(2 * s), 2 * s + 1 < K ? row(2 * s + 1) : nullptr, nb, dst + s * NR);
      zero_words(dst + s * NR + nb, NR - nb);
    }
  }
}

// ---------------------------------------------------------------- forward
template <class Kind, class TX, class TW>
void conv_fwd_run(const ConvGeom& q, const void* xv, const void* wv, DType yd, void* y) {
  const TX* x = static_cast<const TX*>(xv);
  const TW* w = static_cast<const TW*>(wv);
  const int64_t G = q.G, Cg = q.Cg(), Og = q.Og(), O = q.O, C = q.C;
  const int64_t M = q.N * q.Ho * q.Wo, K = q.KH * q.KW * Cg, Kq = cdiv(K, Kind::kstep);
  const int64_t panels = cdiv(Og, NR), gsize = panels * Kq * NR;
  // A large y is written with non-temporal stores: the 1-channel stem (K = 49, 51 MB of
  // bf16 output at batch 32) is store-bound, 13.5 -> 12.0 ms paired; neutral elsewhere.
  const bool stream = M * O * (yd == DType::f32 ? 4 : 2) >= kStreamOutBytes;
  // B[g][(kh, kw, ci), o] = w[kh, kw, ci, g*Og + o]: rows contiguous in o.
  WBuf bp(G * gsize);
  run_units(G * panels, double(G) * double(K) * double(Og), [&](int64_t u) {
    const int64_t gi = u / panels, n0 = (u % panels) * NR;
    pack_panel_rows<Kind, TW>(K, imin(NR, Og - n0), [&](int64_t k) { return w + k * O + gi * Og + n0; },
                              bp.p + u * Kq * NR);
  });
  // A 1x1 layer of stride 1 without padding or groups (ResNet-50's bottlenecks): its patch
  // rows are x's pixels, C contiguous, so the microkernels read them in place
  // (rows_in_place), as the GEMM does, and the rows of the next block (or the next task's
  // first) are prefetched as the GEMM's are (without the prefetch, in place ran 0.89x at
  // 256 -> 64 channels).
  const bool pixels = G == 1 && q.KH == 1 && q.KW == 1 && q.sh == 1 && q.sw == 1 && q.ph == 0 && q.pw == 0 &&
                      q.ldh == 1 && q.ldw == 1 && q.Ho == q.H && q.Wo == q.W;
  const Tiling t = choose_tiling(G, M, Og);
  const int64_t ntasks = G * t.mt * t.nt;
  run_tasks(ntasks, 2.0 * double(M) * double(K) * double(O), [&](int64_t task, Scratch& s) {
    const int64_t gi = task / (t.mt * t.nt), r = task % (t.mt * t.nt);
    const int64_t m0 = (r / t.nt) * t.mc, n0 = (r % t.nt) * t.nc;
    const int64_t mb = imin(t.mc, M - m0), nb = imin(t.nc, Og - n0), ldc = round_up(nb, NR);
    const ARows in_place = pixels ? rows_in_place<Kind>(x + m0 * C, C, C) : ARows();
    auto next_pixels = [&](int64_t q0, int64_t nq, PfStreams& ps) {
      if (!in_place.p) return;
      int64_t mm = m0, rows = mb;
      if (q0 >= Kq) {  // the next task's first block, unless it is these rows' only block again
        if (task + 1 >= ntasks) return;
        const int64_t r2 = (task + 1) % (t.mt * t.nt);
        mm = (r2 / t.nt) * t.mc;
        rows = imin(t.mc, M - mm);
        if (mm == m0 && nq >= Kq) return;
        q0 = 0;
      }
      const int64_t k0 = q0 * Kind::kstep, kb = imin(nq * Kind::kstep, K - k0);
      ps.s[0] = pf_stream(x + mm * C + k0, C * int64_t(sizeof(TX)), rows, kb * int64_t(sizeof(TX)));
    };
    auto pack = [&](int64_t mm, int64_t rows, int64_t q0, int64_t nq, uint32_t* dst) {
      const int64_t k0 = q0 * Kind::kstep, k1 = imin(K, k0 + nq * Kind::kstep);
      Pixel px(q, mm);
      const bool short_rows = std::is_same_v<Kind, Bf16Kind> && std::is_same_v<TX, bf16> && G == 1 && q.rdw == 1 &&
                              q.KW * Cg <= 16 && k0 == 0 && k1 == K;
      Pieces pc;
      const bool pieces = !short_rows && fwd_pieces(q, k0, k1, pc);
      for (int64_t i = 0; i < rows; ++i, px.next(q)) {
        Elem<Kind>* d = row_of<Kind>(dst, i, nq);
        if (pieces) {
          const int64_t ih0 = px.oh * q.sh - q.ph, iw0 = px.ow * q.sw - q.pw;
          if (pc.inside(ih0, iw0, q.H, q.W)) {
            copy_pieces(pc, x, ((px.n * q.H + ih0) * q.W + iw0) * C, d);
            zero_elems(d + (k1 - k0), nq * Kind::kstep - (k1 - k0));
            continue;
          }
        }
        if constexpr (std::is_same_v<Kind, Bf16Kind> && std::is_same_v<TX, bf16>) {
          if (short_rows && patch_row_short(q, x, px.n, px.oh, px.ow, d)) {
            zero_elems(d + K, nq * Kind::kstep - K);
            continue;
          }
        }
        patch_row(q, x, gi, px.n, px.oh, px.ow, k0, k1, d);
        zero_elems(d + (k1 - k0), nq * Kind::kstep - (k1 - k0));
      }
    };
    tile_product<Kind, false>(m0, mb, n0, nb, 0, Kq, PrepackedB{bp.p + gi * gsize, Kq}, pack, s, s.c.f(), ldc,
                              nullptr, next_pixels, in_place);
    for (int64_t i = 0; i < mb; ++i)
      (stream ? store_out_stream : store_out)(yd, y, (m0 + i) * O + gi * Og + n0, s.c.f() + i * ldc, nb);
    if (stream) _mm_sfence();
  });
}

// ---------------------------------------------------------------- backward-data
// A tap kh (kw) reaching a phase, and off = (ih0 + ph - kh*rdh) / sh (exact): the phase's
// pixel row jh reads g row oh = off + jh through it. Local type: std::vector<Tap> has
// internal linkage.
struct Tap { int64_t k, off; };

struct Phase {
  int64_t gi;                 // group
  int64_t ih0, nh, iw0, nw;   // dx pixels ih = ih0 + sh*j (j < nh), iw = iw0 + sw*j (j < nw)
  std::vector<Tap> th, tw;    // the taps kh / kw that reach them
  int64_t M, K, Kq;           // GEMM sizes: N * nh * nw rows, |th| * |tw| * Og
  int64_t mt, bofs;           // M tiles; offset of the packed B
};

template <class Kind, class TG, class TW>
void conv_bwd_data_run(const ConvGeom& q, const void* gv, const void* wv, DType dxd, void* dx) {
  const TG* gr = static_cast<const TG*>(gv);
  const TW* w = static_cast<const TW*>(wv);
  const int64_t G = q.G, Cg = q.Cg(), Og = q.Og(), C = q.C, O = q.O;
  const int64_t panels = cdiv(Cg, NR);
  auto mod = [](int64_t a, int64_t m) { return ((a % m) + m) % m; };
  std::vector<Phase> phases;
  int64_t btotal = 0, mtotal = 0;
  for (int64_t gi = 0; gi < G; ++gi)
    for (int64_t ch = 0; ch < q.sh; ++ch)
      for (int64_t cw = 0; cw < q.sw; ++cw) {
        Phase f;
        f.gi = gi;
        f.ih0 = mod(ch - q.ph, q.sh);
        f.iw0 = mod(cw - q.pw, q.sw);
        f.nh = f.ih0 < q.H ? cdiv(q.H - f.ih0, q.sh) : 0;
        f.nw = f.iw0 < q.W ? cdiv(q.W - f.iw0, q.sw) : 0;
        for (int64_t kh = 0; kh < q.KH; ++kh)
          if (mod(kh * q.rdh, q.sh) == ch) f.th.push_back({kh, (f.ih0 + q.ph - kh * q.rdh) / q.sh});
        for (int64_t kw = 0; kw < q.KW; ++kw)
          if (mod(kw * q.rdw, q.sw) == cw) f.tw.push_back({kw, (f.iw0 + q.pw - kw * q.rdw) / q.sw});
        f.M = q.N * f.nh * f.nw;
        f.K = int64_t(f.th.size() * f.tw.size()) * Og;
        f.Kq = cdiv(f.K, Kind::kstep);
        if (f.M == 0) continue;
        f.bofs = btotal;
        btotal += panels * f.Kq * NR;
        mtotal += f.M;
        phases.push_back(std::move(f));
      }
  // B[phase][(tap, o), ci] = w[kh, kw, ci, g*Og + o]: column ci of a tap is the w row of
  // (kh, kw, ci), contiguous in o, so a panel is a transpose of 32 such rows.
  WBuf bp(btotal);
  const int64_t nph = int64_t(phases.size());
  run_units(nph * panels, double(G) * double(q.KH * q.KW) * double(Og) * double(Cg), [&](int64_t u) {
    const Phase& f = phases[u / panels];
    const int64_t n0 = (u % panels) * NR, nb = imin(NR, Cg - n0), ntw = int64_t(f.tw.size());
    uint32_t* dst = bp.p + f.bofs + (u % panels) * f.Kq * NR;
    for (int64_t s = 0; s < f.Kq; ++s) zero_words(dst + s * NR + nb, NR - nb);
    auto wrow = [&](int64_t tap, int64_t c) {  // the w row of a tap and column (ci = n0 + c)
      const int64_t kh = f.th[tap / ntw].k, kw = f.tw[tap % ntw].k;
      return w + ((kh * q.KW + kw) * Cg + n0 + c) * O + f.gi * Og;
    };
    const int64_t ntaps = int64_t(f.th.size()) * ntw;
    if constexpr (std::is_same_v<Kind, F32Kind>) {
      for (int64_t tap = 0; tap < ntaps; ++tap) {
        const TW* src[NR];
        for (int64_t c = 0; c < nb; ++c) src[c] = wrow(tap, c);
        transpose_rows(src, nb, Og, dst + tap * Og * NR, NR);
      }
    } else if (Og % 2 == 0) {  // a tap's K pairs are 32-bit words of its w rows
      for (int64_t tap = 0; tap < ntaps; ++tap) {
        const Word* src[NR];
        for (int64_t c = 0; c < nb; ++c) src[c] = reinterpret_cast<const Word*>(wrow(tap, c));
        transpose_rows(src, nb, Og / 2, dst + tap * (Og / 2) * NR, NR);
      }
    } else {  // pairs straddle taps: gather them
      for (int64_t s = 0; s < f.Kq; ++s)
        for (int64_t c = 0; c < nb; ++c) {
          const int64_t k = 2 * s;
          uint32_t v = wrow(k / Og, c)[k % Og].bits;
          if (k + 1 < f.K) v |= uint32_t(wrow((k + 1) / Og, c)[(k + 1) % Og].bits) << 16;
          dst[s * NR + c] = v;
        }
    }
  });
  // Tasks: (phase, M tile, N tile), tile sizes chosen on the total rows.
  const Tiling t = choose_tiling(1, mtotal, Cg);
  int64_t ntasks = 0;
  for (auto& f : phases) { f.mt = cdiv(f.M, t.mc); ntasks += f.mt * t.nt; }
  const double flops = 2.0 * double(q.N * q.H * q.W) * double(C) * double(q.KH * q.KW) * double(Og) / double(q.sh * q.sw);
  // A large dx is written with non-temporal stores (store_out_stream): +3-4% at stride-2
  // 56->128 and 28->256, paired.
  const bool stream = q.N * q.H * q.W * C * (dxd == DType::f32 ? 4 : 2) >= kStreamOutBytes;
  auto tile_task = [&](int64_t pi, int64_t task, Scratch& s) {
    const Phase& f = phases[pi];
    const int64_t m0 = (task / t.nt) * t.mc, n0 = (task % t.nt) * t.nc;
    const int64_t mb = imin(t.mc, f.M - m0), nb = imin(t.nc, Cg - n0), ldc = round_up(nb, NR);
    const int64_t ntw = int64_t(f.tw.size());
    // Row m of the phase is dx pixel (n, ih0 + sh*jh, iw0 + sw*jw), m = (n*nh + jh)*nw + jw,
    // stepped without divisions.
    struct Row {
      int64_t n, jh, jw;
      void next(const Phase& f) { if (++jw == f.nw) { jw = 0; if (++jh == f.nh) { jh = 0; ++n; } } }
    };
    auto row_of_m = [&](int64_t m) { return Row{m / (f.nh * f.nw), (m / f.nw) % f.nh, m % f.nw}; };
    auto pack = [&](int64_t mm, int64_t rows, int64_t q0, int64_t nq, uint32_t* dst) {
      const int64_t k0 = q0 * Kind::kstep, k1 = imin(f.K, k0 + nq * Kind::kstep);
      Row r = row_of_m(mm);
      // One piece per tap; offsets from g[n, jh, jw, gi*Og] (lo_h.. are the taps' off).
      Pieces pc;
      bool pieces = true;
      pc.lo_h = pc.lo_w = INT64_MAX;
      pc.hi_h = pc.hi_w = INT64_MIN;
      for (int64_t tap = k0 / Og; pieces && tap * Og < k1; ++tap) {
        const int64_t lo = imax(k0, tap * Og), hi = imin(k1, (tap + 1) * Og);
        const int64_t dh = f.th[tap / ntw].off, dw = f.tw[tap % ntw].off;
        pc.lo_h = imin(pc.lo_h, dh); pc.hi_h = imax(pc.hi_h, dh);
        pc.lo_w = imin(pc.lo_w, dw); pc.hi_w = imax(pc.hi_w, dw);
        pieces = pc.add(lo - k0, hi - lo, (dh * q.Wo + dw) * O + (lo - tap * Og));
      }
      pieces = pieces && pc.n > 0;
      for (int64_t i = 0; i < rows; ++i, r.next(f)) {
        if (pieces && pc.inside(r.jh, r.jw, q.Ho, q.Wo)) {
          Elem<Kind>* d = row_of<Kind>(dst, i, nq);
          copy_pieces(pc, gr, ((r.n * q.Ho + r.jh) * q.Wo + r.jw) * O + f.gi * Og, d);
          zero_elems(d + (k1 - k0), nq * Kind::kstep - (k1 - k0));
          continue;
        }
        Elem<Kind>* d = row_of<Kind>(dst, i, nq) - k0;
        for (int64_t tap = k0 / Og; tap * Og < k1; ++tap) {
          const int64_t lo = imax(k0, tap * Og), hi = imin(k1, (tap + 1) * Og);
          const int64_t oh = f.th[tap / ntw].off + r.jh, ow = f.tw[tap % ntw].off + r.jw;
          if (oh >= 0 && oh < q.Ho && ow >= 0 && ow < q.Wo)
            copy_elems(gr + ((r.n * q.Ho + oh) * q.Wo + ow) * O + f.gi * Og + (lo - tap * Og), hi - lo, d + lo);
          else
            zero_elems(d + lo, hi - lo);
        }
        zero_elems(d + k1, k0 + nq * Kind::kstep - k1);
      }
    };
    tile_product<Kind, false>(m0, mb, n0, nb, 0, f.Kq, PrepackedB{bp.p + f.bofs, f.Kq}, pack, s, s.c.f(), ldc);
    Row r = row_of_m(m0);
    for (int64_t i = 0; i < mb; ++i, r.next(f)) {
      const int64_t ih = f.ih0 + q.sh * r.jh, iw = f.iw0 + q.sw * r.jw;
      (stream ? store_out_stream : store_out)(dxd, dx, ((r.n * q.H + ih) * q.W + iw) * C + f.gi * Cg + n0,
                                              s.c.f() + i * ldc, nb);
    }
    if (stream) _mm_sfence();
  };
  // Phases of one group and equal size: a task runs the same tile of every phase, so
  // the g rows the first phase brought into L1 / L2 serve the others (tasks of one phase
  // each read all of g from L3 per phase: stride-2 56->128 +7-10% paired).
  bool same = !phases.empty();
  for (const auto& f : phases) same = same && f.mt == phases[0].mt && f.gi == phases[0].gi;
  if (same) {
    run_tasks(phases[0].mt * t.nt, flops, [&](int64_t task, Scratch& s) {
      for (int64_t pi = 0; pi < nph; ++pi) tile_task(pi, task, s);
    });
    return;
  }
  run_tasks(ntasks, flops, [&](int64_t task, Scratch& s) {
    int64_t pi = 0;
    while (task >= phases[pi].mt * t.nt) task -= phases[pi++].mt * t.nt;
    tile_task(pi, task, s);
  });
}

// ---------------------------------------------------------------- backward-filter
template <class Kind, class TX, class TG>
void conv_bwd_filter_run(const ConvGeom& q, const void* xv, const void* gv, DType dwd, void* dw) {
  using E = Elem<Kind>;
  const TX* x = static_cast<const TX*>(xv);
  const TG* gr = static_cast<const TG*>(gv);
  const int64_t G = q.G, Cg = q.Cg(), Og = q.Og(), O = q.O;
  const int64_t Kx = q.KH * q.KW * Cg;          // the N dim: (kh, kw, ci)
  const int64_t P = q.N * q.Ho * q.Wo;           // the K dim: output pixels
  const int64_t Pq = cdiv(P, Kind::kstep);
  // Row groups of mr output channels: 8 unless 12 pads fewer rows. With the B panels
  // built in the microkernel (ukernel_x32_xpack) the 8-row kernel is as fast per row as
  // the 12-row one (paired: Og = 128 and 512 +1-2% with 8 rows, Og = 256 equal), and 8
  // divides every ResNet width.
  const int64_t mr = round_up(Og, MR) < round_up(Og, 8) ? MR : 8;
  const int64_t Mp = round_up(Og, mr);
  // The pixels (K) are cut into chunks of CQ steps, fixed by the shape. A task is one
  // chunk times one column range of dw^T (nc columns of (kh, kw, ci), all output
  // channels of its group), summed into its own partial tile; partial tiles are then
  // added in chunk order. So the sum of an element is: blocks in order within a chunk,
  // chunks in order - a function of the shape only, whatever the thread count - and the
  // many independent tasks keep both threads busy even for 64-channel layers.
  // A = g^T (k-major groups of mr output channels) is shared by the column tasks of a
  // chunk, so it is packed once per window of chunks (A at most ~8 MB). Each task packs
  // its own B blocks (patch rows restricted to its columns, KQ x nc words, L2-resident)
  // straight from x right before its microkernels use them.
  constexpr int64_t CQ = 4096;
  const int64_t nch = cdiv(Pq, CQ);
  const int64_t win = imax(1, (int64_t(1) << 21) / (G * Mp * CQ));  // chunks per window
  // Whole 32-channel panels straight from x rows (see ukernel_x32_xpack) allow a task of
  // all Kx columns (tap_rows' tables hold KH * KW + 1 taps at most 64).
  const bool panels32 = std::is_same_v<Kind, Bf16Kind> && std::is_same_v<TX, bf16> && G == 1 && Cg % NR == 0;
  const int64_t nc = bwd_filter_columns(Kx, G, Pq, CQ, win, Mp, panels32 && q.KH * q.KW + 1 <= 64);
  const int64_t nt = cdiv(Kx, nc), ntiles = G * nt, tile_size = Mp * nc;
  const int64_t npan = nc / NR;
  // One column tile per group (the stems: Kx <= nc): A is used by one task per chunk, so
  // the task packs it per K block into L2-sized scratch; a shared window of A would be a
  // write and re-read of all of g through memory (51 MB for the 224x224 stem at batch 32).
  const bool a_in_task = nt == 1;
  // Whole 32-channel panels straight from x rows (see ukernel_x32_xpack); `zeros` stands
  // for x rows in the padding.
  const bool xpack = panels32 && cdiv(nc, Cg) + 1 <= 64;  // tap_rows' tables
  WBuf zeros(xpack ? Cg / 2 : 0);
  if (xpack) zeros.zero(Cg / 2);
  WBuf ap(a_in_task ? 1 : G * Mp * imin(win * CQ, imax(Pq, 1)));
  // A window's partial tiles; chunk 0's tasks sum straight into acc (with one chunk,
  // nothing is copied).
  WBuf part(nch > 1 ? imin(win, nch) * ntiles * tile_size : 1);
  WBuf acc(ntiles * tile_size);  // tiles [o][(kh, kw, ci)], row stride nc
  // A for steps [s0, s1) of group gi: step st's mr words of row group i at
  // dst + i * stride + (st - s0) * mr. `row` holds Mp words (Bf16Kind): a whole step's
  // words at once, then mr-word pieces to the groups (per-group interleaves of 8 or 12
  // columns were mostly masks and call overhead).
  auto pack_a = [&](int64_t gi, int64_t s0, int64_t s1, uint32_t* dst, int64_t stride, uint32_t* row) {
    for (int64_t st = s0; st < s1; ++st) {
      const int64_t p = st * Kind::kstep;
      const TG* g0 = gr + p * O + gi * Og;
      uint32_t* d = dst + (st - s0) * mr;
      if constexpr (std::is_same_v<Kind, Bf16Kind>) {
        interleave_rows(reinterpret_cast<const bf16*>(g0), p + 1 < P ? reinterpret_cast<const bf16*>(g0 + O) : nullptr,
                        Og, row);
        zero_words(row + Og, Mp - Og);
        if (mr == 8) {
          for (int64_t i = 0; i < Mp; i += 8)
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i * stride), _mm256_load_si256(reinterpret_cast<const __m256i*>(row + i)));
        } else {
          for (int64_t i = 0; i < Mp; i += mr)
            _mm512_mask_storeu_epi32(d + i * stride, 0x0fff, _mm512_maskz_loadu_epi32(0x0fff, row + i));
        }
      } else {
        for (int64_t i = 0; i < Mp; i += mr) {
          const int64_t rr = imin(mr, Og - i);
          copy_row(g0 + i, rr, reinterpret_cast<float*>(d + i * stride));
          zero_words(d + i * stride + rr, mr - rr);
        }
      }
    }
  };
  for (int64_t w0 = 0; w0 < nch; w0 += win) {
    const int64_t w1 = imin(nch, w0 + win), qa = w0 * CQ, qb = imin(Pq, w1 * CQ), wq = qb - qa;
    // A[g][row group][step][mr o] for the window: one unit per (group, range of steps).
    // With one column tile per group each task packs its own A instead (pack_a below).
    const int64_t unit_q = 64, units = a_in_task ? 0 : cdiv(wq, unit_q);
    run_units(G * units, double(wq) * double(Og) * double(G), [&](int64_t u) {
      const int64_t gi = u / units, s0 = qa + (u % units) * unit_q, s1 = imin(qb, s0 + unit_q);
      WBuf row(Kind::kstep == 2 ? Mp : 1);
      pack_a(gi, s0, s1, ap.p + gi * Mp * wq + (s0 - qa) * mr, wq, row.p);
    });
    const double flops = 2.0 * double(Og * G) * double(wq * Kind::kstep) * double(Kx);
    run_tasks((w1 - w0) * ntiles, flops, [&](int64_t task, Scratch& s) {
      const int64_t c = w0 + task / ntiles, tile = task % ntiles;
      const int64_t gi = tile / nt, n0 = (tile % nt) * nc, nb = imin(nc, Kx - n0);
      const int64_t c0 = c * CQ, c1 = imin(Pq, c0 + CQ);
      const uint32_t* ag = ap.p + gi * Mp * wq;
      float* ct = c == 0 ? acc.f() + tile * tile_size : part.f() + task * tile_size;
      // The task's B block: panels [npan][KQ][NR] in s.b (two temporary patch rows in
      // s.a when patch_step needs them).
      s.b.reserve(npan * KQ * NR);
      s.a.reserve(2 * nc);
      if (a_in_task) s.c.reserve(Mp * KQ + round_up(Mp, 16));  // A block, then one step's row
      Pixel px[2] = {Pixel(q, c0 * Kind::kstep), Pixel(q, 0)};
      const int64_t bl = block_len(c0, c1);
      // A of K block [q0, q0 + nq): (first word, row group stride); group i at first + i * stride.
      auto a_block = [&](int64_t q0, int64_t nq) -> ABlock {
        if (!a_in_task) return {ag + (q0 - qa) * mr, wq};
        pack_a(gi, q0, q0 + nq, s.c.p, nq, s.c.p + Mp * nq);
        return {s.c.p, nq};
      };
#ifdef __AVX512BF16__
      if constexpr (std::is_same_v<Kind, Bf16Kind> && std::is_same_v<TX, bf16>) {
        if (xpack) {
          // Whole panels from x (ukernel_x32_xpack): the task's taps [t0, t0 + ntap).
          const int64_t t0 = n0 / Cg, ntap = cdiv(n0 + nb, Cg) - t0;
          s.a.reserve(bl * ntap * 2 * 2);  // pointers
          s.b.reserve(KQ * NR);            // one panel
          const bf16** src = reinterpret_cast<const bf16**>(s.a.p);
          Pixel pxs = px[0];
          for (int64_t q0 = c0; q0 < c1; q0 += bl) {
            const int64_t nq = imin(bl, c1 - q0);
            tap_rows(q, x, reinterpret_cast<const bf16*>(zeros.p), pxs, q0 * 2, P, nq, t0, ntap, src);
            const auto [ab, astride] = a_block(q0, nq);
            for (int64_t j = 0; j < nb; j += NR) {
              const int64_t col = n0 + j, tap = col / Cg, ci0 = col % Cg;
              const bf16* const* ps = src + (tap - t0) * 2;
              if (mr == 8) ukernel_x32_xpack<8>(nq, ab, ps, ntap * 2, ci0, s.b.p, ct + j, nc, q0 > c0);
              else ukernel_x32_xpack<12>(nq, ab, ps, ntap * 2, ci0, s.b.p, ct + j, nc, q0 > c0);
              for (int64_t i = mr; i < Mp; i += mr) {
                const uint32_t* a = ab + i * astride;
                if (mr == 8) ukernel_x32<Kind, true, 8>(nq, a, 0, s.b.p, ct + i * nc + j, nc, q0 > c0);
                else ukernel_x32<Kind, true>(nq, a, 0, s.b.p, ct + i * nc + j, nc, q0 > c0);
              }
            }
          }
          return;
        }
      }
#endif
      for (int64_t q0 = c0; q0 < c1; q0 += bl) {
        const int64_t nq = imin(bl, c1 - q0);
        for (int64_t st = 0; st < nq; ++st) {
          const int64_t p = (q0 + st) * Kind::kstep;
          int npx = 1;
          if (Kind::kstep == 2 && p + 1 < P) { px[1] = px[0]; px[1].next(q); npx = 2; }
          uint32_t* d = s.b.p + st * NR;
          patch_step<Kind>(q, x, gi, px, npx, n0, nb, d, nq * NR, reinterpret_cast<E*>(s.a.p));
          if (nb % NR)  // the last used panel's columns past Kx
            zero_words(d + (nb / NR) * nq * NR + nb % NR, NR - nb % NR);
          px[0] = px[npx - 1];
          px[0].next(q);
        }
        const auto [ab, astride] = a_block(q0, nq);
        for (int64_t j = 0; j < nb; j += NR)
          for (int64_t i = 0; i < Mp; i += mr) {
            const uint32_t* a = ab + i * astride;
            const uint32_t* b = s.b.p + (j / NR) * nq * NR;
            if (mr == 8) ukernel_x32<Kind, true, 8>(nq, a, 0, b, ct + i * nc + j, nc, q0 > c0);
            else ukernel_x32<Kind, true>(nq, a, 0, b, ct + i * nc + j, nc, q0 > c0);
          }
      }
    });
    // acc += the window's partial tiles, in chunk order.
    if (w1 > imax(w0, 1))
      run_units(ntiles, double(w1 - w0) * double(tile_size), [&](int64_t tile) {
        float* t = acc.f() + tile * tile_size;
        for (int64_t c = imax(w0, 1); c < w1; ++c) {
          const float* pt = part.f() + ((c - w0) * ntiles + tile) * tile_size;
          for (int64_t i = 0; i < tile_size; ++i) t[i] += pt[i];
        }
      });
  }
  // dw[(kh, kw, ci), g*Og + o] = tile[o][(kh, kw, ci)]: each tile column is a dw row piece.
  // 16 columns at a time through 8x8 register transposes (a column gathered element by
  // element at a stride of nc floats was ~6% of a 7x7x512 call).
  run_units(ntiles, double(Kx) * double(O), [&](int64_t tile_i) {
    const int64_t gi = tile_i / nt, n0 = (tile_i % nt) * nc, nb = imin(nc, Kx - n0);
    const float* tile = acc.f() + tile_i * tile_size;
    constexpr int64_t JB = 16;
    WBuf cols(JB * Og), rows(2 * Og);  // cols[j][o]; rows: Og pointers
    const float** src = reinterpret_cast<const float**>(rows.p);
    if (!P) cols.zero(JB * Og);
    for (int64_t j0 = 0; j0 < nb; j0 += JB) {
      const int64_t jb = imin(JB, nb - j0);
      if (P) {
        for (int64_t i = 0; i < Og; ++i) src[i] = tile + i * nc + j0;
        transpose_rows(src, Og, jb, cols.p, Og);
      }
      for (int64_t j = 0; j < jb; ++j) store_out(dwd, dw, (n0 + j0 + j) * O + gi * Og, cols.f() + j * Og, Og);
    }
  });
}

}  // namespace
}  // namespace podlet::kernels::avx512
