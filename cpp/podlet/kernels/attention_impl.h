// The fused attention kernels' one source (see attention.h), included by each ISA's
// translation unit with its own flags. Internal linkage (anonymous namespace), so no
// ISA's copy can stand in for another's.
//
// Every product element is one fma chain over its reduction index in order (h for the
// scores, the key or query position for the value and gradient products), computed in
// register blocks of 6 rows x 16 columns (f32) or plain loops (f64); row sums run in
// order too. No loop reduces into one scalar across lanes, so vectorised and scalar builds
// add in the same order and give the same bits.
#pragma once
#include "podlet/kernels/local_vec.h"
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include "podlet/kernels/attention.h"
#include "podlet/kernels/fastmath.h"
#include "podlet/parallel.h"
#if defined(__FMA__) || defined(__AVX2__)
#include <immintrin.h>
#endif

// Vectors of GCC's extension pass between inline functions of this header only (internal
// linkage), so the ABI note about 32-byte vectors without AVX does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace podlet::kernels {
namespace {

constexpr int64_t kTq = 16;  // query rows per tile (the backward's)
// The forward's query tiles: ceil(T / kFwdTq) of them, their rows as even as can be (Swin's
// 49-token windows: 17, 16, 16 rows, register blocks of 6, 6, 5 / 6, 6, 4 / 6, 6, 4, where
// tiles of kTq rows made 16, 16, 16, 1: a tile, a one-row block and an 8-row block of row
// sums for one row). A multiple of 8: row_sums reads whole 8-row blocks.
constexpr int64_t kFwdTq = 24;
inline int64_t fwd_tiles(int64_t T) { return (T + kFwdTq - 1) / kFwdTq; }
// Tile i of nt over T rows: its first row and its row count.
inline void fwd_tile(int64_t T, int64_t nt, int64_t i, int64_t& t0, int64_t& tq) {
  const int64_t base = T / nt, extra = T % nt;
  t0 = i * base + std::min(i, extra);
  tq = base + (i < extra);
}
constexpr int64_t kSk = 64;  // key rows per tile

template <class A> inline A exp_a(A x) { return std::exp(x); }
// fm::exp, with the lanes below its clamp (e^-104 rounds to +0; masked logits sit at
// -0.7 FLT_MAX) given +0 from a benign input: computed, their last product underflows, ~20
// cycles a lane on AMD Zen 3 (a Swin window forward with 30% of its logits masked ran 1.5x
// the unmasked time; 1.05x now). The same bits: fm::exp is +0 there.
template <> inline float exp_a<float>(float x) {
  const bool zero = x < -104.0f;
  const float e = fm::exp(zero ? 0.0f : x);
  return zero ? 0.0f : e;
}
template <class A> inline A log_a(A x) { return std::log(x); }
template <> inline float log_a<float>(float x) { return fm::log(x); }

// a * b + c with one rounding: an instruction in the AVX2 / AVX-512 builds, libm's exact
// fma in the baseline one, so every build gives the same bits.
template <class A> inline A fmadd(A a, A b, A c) { return std::fma(a, b, c); }

template <class A> inline A to_a(float x) { return A(x); }
template <class T> inline float widen(T x) { return float(x); }
inline double widen(double x) { return x; }

template <class T, class A> inline T narrow(A x) { return T(x); }
template <> inline bf16 narrow<bf16, float>(float x) { return bf16(x); }

// The masked logit: jax's _get_large_negative for an f32 (or f64, capped at f32's
// range) logits dtype.
template <class A> constexpr A kMasked = A(-0.7) * A(FLT_MAX);

// ---- register-blocked products (f32) ------------------------------------------------------
// The tile products as blocks of R rows x 16 columns held in registers over the whole
// reduction, where the plain loops streamed a row through memory once per reduction step.
// Each element is still one fma chain in the reduction's order, so the bits are the plain
// loops' (and the same in every build: vfma is the FMA instruction with AVX2, libm's exact
// fma per lane in the baseline build).
typedef float f32x8 __attribute__((vector_size(32)));
inline f32x8 vld(const float* p) {
  f32x8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void vst(float* p, const f32x8& v) { std::memcpy(p, &v, sizeof v); }
inline f32x8 vsplat(float c) { return c - f32x8{}; }
inline f32x8 vfma(const f32x8& a, const f32x8& b, const f32x8& c) {
#if defined(__FMA__)
  return reinterpret_cast<f32x8>(_mm256_fmadd_ps(reinterpret_cast<__m256>(a), reinterpret_cast<__m256>(b),
                                                 reinterpret_cast<__m256>(c)));
#else
  f32x8 r;
  for (int l = 0; l < 8; ++l) r[l] = std::fma(a[l], b[l], c[l]);
  return r;
#endif
}
constexpr int kMr = 6;  // rows per register block (6 x 2 accumulators + 3 operands: 15 ymm)

// blk(std::integral_constant<int, n>{}) for a run-time n in [1, kMax): the rows a loop of
// kMax-row register blocks leaves, as one block of their own compile-time size.
template <int kMax, class F>
inline void remainder_block(int64_t n, F&& blk) {
  if constexpr (kMax > 1) {
    if (n == kMax - 1) return blk(std::integral_constant<int, kMax - 1>{});
    remainder_block<kMax - 1>(n, blk);
  }
}

// O[r][h0 + c] (times alpha[r] first, with kAlpha) += P(r, x) * V[x][h0 + c] for x = 0, 1,
// ..., nx - 1 in order (the plain loops' order), for R rows and W vectors of 8 columns:
// P(r, x) = P[r * ld + x] (P . V), or with kTrans P[x * ld + r] (P^T . V: the backward's
// dV and dK).
template <int R, int W, bool kTrans, bool kAlpha>
__attribute__((noinline)) void block_acc(const float* P, int64_t ld, int64_t nx, const float* V, int64_t ldv, int64_t h0,
                      const float* alpha, float* O, int64_t ldo) {
  static_assert(W == 1 || W == 2);
  // Two arrays of R vectors, not one [R][W]: GCC kept a 2-D array on the stack.
  f32x8 o0[R], o1[R];
  for (int r = 0; r < R; ++r) {
    o0[r] = vld(O + r * ldo + h0);
    if constexpr (W == 2) o1[r] = vld(O + r * ldo + h0 + 8);
    if constexpr (kAlpha) {
      const f32x8 al = vsplat(alpha[r]);
      o0[r] = o0[r] * al;
      if constexpr (W == 2) o1[r] = o1[r] * al;
    }
  }
  for (int64_t x = 0; x < nx; ++x) {
    const f32x8 v0 = vld(V + x * ldv + h0);
    f32x8 v1;
    if constexpr (W == 2) v1 = vld(V + x * ldv + h0 + 8);
    for (int r = 0; r < R; ++r) {
      const f32x8 px = vsplat(kTrans ? P[x * ld + r] : P[r * ld + x]);
      o0[r] = vfma(px, v0, o0[r]);
      if constexpr (W == 2) o1[r] = vfma(px, v1, o1[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    vst(O + r * ldo + h0, o0[r]);
    if constexpr (W == 2) vst(O + r * ldo + h0 + 8, o1[r]);
  }
}
// block_acc over `rows` rows and the columns [0, H) that whole vectors cover; returns
// the first column left (H % 8 of them) for the caller's plain loop.
template <bool kTrans, bool kAlpha>
inline int64_t rows_acc(const float* P, int64_t ld, int64_t rows, int64_t nx, const float* V, int64_t ldv, int64_t H,
                        const float* alpha, float* O, int64_t ldo) {
  int64_t h0 = 0;
  auto run = [&](auto w_const) {
    constexpr int W = decltype(w_const)::value;
    int64_t i = 0;
    auto blk = [&](auto r_const) {
      constexpr int R = decltype(r_const)::value;
      block_acc<R, W, kTrans, kAlpha>(P + (kTrans ? i : i * ld), ld, nx, V, ldv, h0, kAlpha ? alpha + i : nullptr,
                                      O + i * ldo, ldo);
    };
    for (; i + kMr <= rows; i += kMr) blk(std::integral_constant<int, kMr>{});
    remainder_block<kMr>(rows - i, blk);
    h0 += 8 * W;
  };
  while (h0 + 16 <= H) run(std::integral_constant<int, 2>{});
  if (h0 + 8 <= H) run(std::integral_constant<int, 1>{});
  return h0;
}

// A score-like tile C[rows][0, sk) (row stride kSk) = A . Bt over h < H, Bt [H][kSk]: the
// accumulating blocks on a zeroed C, on whole 8-column vectors (the columns past sk are
// computed and never read). Whole 16-column blocks computed 64 columns of Swin's 49-key
// tiles: 31% more than the 56 of whole vectors.
inline void tile_abt(const float* A_, int64_t lda, int64_t rows, const float* Bt, int64_t H, int64_t sk, float* C) {
  const int64_t n8 = (sk + 7) / 8 * 8;
  for (int64_t i = 0; i < rows; ++i) std::fill(C + i * kSk, C + i * kSk + n8, 0.0f);
  rows_acc<false, false>(A_, lda, rows, H, Bt, kSk, n8, nullptr, C, kSk);
}

// std::max(init, row[0], row[1], ...) in that order. The max of the lanes is the same
// value; only its zero's sign can depend on the order (std::max keeps the first of +0 and
// -0), so a zero maximum is taken again in order.
template <class A>
inline A row_max(A init, const A* row, int64_t n) {
  A mx = init;
  if constexpr (std::is_same_v<A, float>) {
    if (n >= 16) {
      f32x8 v0 = vsplat(init), v1 = v0;
      int64_t j = 0;
      for (; j + 16 <= n; j += 16) {
        const f32x8 x0 = vld(row + j), x1 = vld(row + j + 8);
        v0 = v0 < x0 ? x0 : v0;
        v1 = v1 < x1 ? x1 : v1;
      }
      v0 = v0 < v1 ? v1 : v0;
      for (int l = 0; l < 8; ++l) mx = std::max(mx, v0[l]);
      for (; j < n; ++j) mx = std::max(mx, row[j]);
      if (mx != A(0)) return mx;
      mx = init;
    }
  }
  for (int64_t j = 0; j < n; ++j) mx = std::max(mx, row[j]);
  return mx;
}

// sums[i] = row i's sum over j < n, j = 0, 1, ... in order; eight rows' chains interleaved
// (a single chain ran at the add latency). Rows [rows, 8k) of S are read and not used.
template <class A>
inline void row_sums(const A* S, int64_t rows, int64_t n, A* sums) {
  for (int64_t i0 = 0; i0 < rows; i0 += 8) {
    A s8[8] = {};
    const A* r0 = S + i0 * kSk;
    for (int64_t j = 0; j < n; ++j)
      for (int r = 0; r < 8; ++r) s8[r] += r0[r * kSk + j];
    for (int r = 0; r < 8 && i0 + r < rows; ++r) sums[i0 + r] = s8[r];
  }
}

// row[j] = mb[j] ? row[j] : fill for j < n (mb: a boolean mask's bytes), on whole vectors
// a blend: branch-free whatever the mask (a few percent of a masked window's forward).
template <class A>
inline void mask_select(A* row, const uint8_t* mb, int64_t n, A fill) {
  int64_t j = 0;
#if defined(__AVX2__)
  if constexpr (std::is_same_v<A, float>) {
    const __m256 f = _mm256_set1_ps(fill);
    for (; j + 8 <= n; j += 8) {
      uint64_t m8;
      std::memcpy(&m8, mb + j, sizeof m8);
      const __m256i m = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(m8)));
      const __m256 off = _mm256_castsi256_ps(_mm256_cmpeq_epi32(m, _mm256_setzero_si256()));
      _mm256_storeu_ps(row + j, _mm256_blendv_ps(_mm256_loadu_ps(row + j), f, off));
    }
  }
#endif
  for (; j < n; ++j) row[j] = mb[j] ? row[j] : fill;
}

// The lines of n rows of `bytes` bytes each, `ld` bytes apart, from p: prefetched (into
// L2) for the next task. At Swin's windows each head's q, k and v row is one line of a
// wide projection, strides apart, whose first touch is in the packing loops: they waited
// on memory there, not the hardware prefetchers, which the strides and the jumps from one
// window to the next defeat. A task ahead is microseconds ahead: far enough.
inline void prefetch_rows(const void* p, int64_t n, int64_t ld, int64_t bytes) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  for (int64_t i = 0; i < n; ++i) {
    const uintptr_t r = a + uintptr_t(i * ld);
    for (uintptr_t l = r & ~uintptr_t(63); l < r + uintptr_t(bytes); l += 64)
      __builtin_prefetch(reinterpret_cast<const void*>(l), 0, 2);
  }
}

template <class T, class A>
struct Ctx {
  const Attn& p;
  const T *q, *k, *v;
  int64_t G;
  A scale;
  bool skip_causal;  // causal is the only row-emptying mask: tiles above the diagonal are skipped
  bool masked;       // any mask at all (else no per-element test)
  bool mask_rows;    // the boolean mask is the only one, contiguous along the keys (mask_row)

  explicit Ctx(const Attn& p_, const T* q_, const T* k_, const T* v_)
      : p(p_), q(q_), k(k_), v(v_), G(p_.N / p_.K), scale(A(p_.scale)),
        skip_causal(p_.causal && !p_.mask && !p_.qlen && !p_.kvlen && p_.win_left < 0 && p_.win_right < 0),
        masked(p_.causal || p_.mask || p_.qlen || p_.kvlen || p_.win_left >= 0 || p_.win_right >= 0),
        mask_rows(p_.mask && p_.mask_st[3] == 1 && !p_.causal && !p_.qlen && !p_.kvlen && p_.win_left < 0 &&
                  p_.win_right < 0) {}

  bool allowed(int64_t b, int64_t n, int64_t t, int64_t s) const {
    if (p.causal && s > t) return false;
    if (p.win_left >= 0 && s < t - p.win_left) return false;
    if (p.win_right >= 0 && s > t + p.win_right) return false;
    if (p.qlen && t >= p.qlen[b]) return false;
    if (p.kvlen && s >= p.kvlen[b]) return false;
    if (p.mask && !p.mask[b * p.mask_st[0] + n * p.mask_st[1] + t * p.mask_st[2] + s * p.mask_st[3]]) return false;
    return true;
  }

  bool row_live(int64_t b, int64_t t) const { return !p.qlen || t < p.qlen[b]; }

  // The boolean mask's row from key s0 on when it is the only mask and contiguous along
  // the keys (Swin's shifted windows), else nullptr (the per-element allowed() test):
  // a select loop over it vectorises.
  const bool* mask_row(int64_t b, int64_t n, int64_t t, int64_t s0) const {
    return mask_rows ? p.mask + b * p.mask_st[0] + n * p.mask_st[1] + t * p.mask_st[2] + s0 : nullptr;
  }

  // One key tile of the forward's online softmax over the logit rows [0, tq) of Sc (kSk
  // apart, whole blocks of 8 rows): each row's running max m and sum l updated, the row
  // replaced by exp(logit - max), alpha[i] the factor its accumulator is rescaled by.
  // sums: scratch of tq values.
  static void online_softmax(A* Sc, int64_t tq, int64_t sk, A* m, A* l, A* alpha, A* sums) {
    for (int64_t i = 0; i < tq; ++i) {
      A* row = Sc + i * kSk;
      const A mx = row_max(m[i], row, sk);
      alpha[i] = m[i] == -std::numeric_limits<A>::infinity() ? A(0) : exp_a<A>(m[i] - mx);
      for (int64_t j = 0; j < sk; ++j) row[j] = exp_a<A>(row[j] - mx);
      m[i] = mx;
    }
    row_sums(Sc, tq, sk, sums);
    for (int64_t i = 0; i < tq; ++i) l[i] = l[i] * alpha[i] + sums[i];
  }

  // The backward's row t of key tile s0: prow (its logits) becomes the probabilities,
  // recomputed from the row's lse Lt; drow (dO . V^T) becomes the score gradient
  // P * (dP - D), zero where masked, also stored as the bias gradient when dbias is set.
  void score_grad_row(int64_t b, int64_t n, int64_t t, int64_t s0, int64_t sk, A Lt, A d, A* prow, A* drow,
                      A* dbias) const {
    // A row with every position masked has lse = masked + log(S), which rounds to the
    // masked value itself: its probabilities are the uniform 1/S the forward used.
    if (Lt <= kMasked<A> * A(0.5)) {
      for (int64_t j = 0; j < sk; ++j) prow[j] = A(1) / A(p.S);
    } else {
      for (int64_t j = 0; j < sk; ++j) prow[j] = exp_a<A>(prow[j] - Lt);
    }
    if (const bool* mr = mask_row(b, n, t, s0)) {
      // The product on every lane, then the select, the mask read as bytes: the same
      // values, in loops that vectorise (it did not: Swin's shifted windows).
      for (int64_t j = 0; j < sk; ++j) drow[j] = prow[j] * (drow[j] - d);
      mask_select(drow, reinterpret_cast<const uint8_t*>(mr), sk, A(0));  // GCC has no vector type for bool
    } else if (masked) {
      for (int64_t j = 0; j < sk; ++j) drow[j] = allowed(b, n, t, s0 + j) ? prow[j] * (drow[j] - d) : A(0);
    } else {
      for (int64_t j = 0; j < sk; ++j) drow[j] = prow[j] * (drow[j] - d);
    }
    if (dbias) {
      A* row = dbias + p.dbias_off(b, n, t) + s0;
      if (p.dbias_chunk)
        for (int64_t j = 0; j < sk; ++j) row[j] += drow[j];
      else
        for (int64_t j = 0; j < sk; ++j) row[j] = drow[j];
    }
  }

  // rows [t0, t0+tq) of head n as A, [tq][H]
  void load_q(int64_t b, int64_t n, int64_t t0, int64_t tq, A* Q) const {
    const int64_t H = p.H;
    for (int64_t i = 0; i < tq; ++i) {
      const T* src = q + (b * p.T + t0 + i) * p.ldq() + n * H;
      for (int64_t h = 0; h < H; ++h) Q[i * H + h] = A(widen(src[h]));
    }
  }

  // key rows [s0, s0+sk) of kv head kh: transposed Kt [H][kSk], and row-major Kr [sk][H]
  void load_kv(const T* x, int64_t ld, int64_t b, int64_t kh, int64_t s0, int64_t sk, A* rows) const {
    const int64_t H = p.H;
    for (int64_t j = 0; j < sk; ++j) {
      const T* src = x + (b * p.S + s0 + j) * ld + kh * H;
      for (int64_t h = 0; h < H; ++h) rows[j * H + h] = A(widen(src[h]));
    }
  }
  static void transpose(const A* rows, int64_t sk, int64_t H, A* cols) {
    for (int64_t j = 0; j < sk; ++j)
      for (int64_t h = 0; h < H; ++h) cols[h * kSk + j] = rows[j * H + h];
  }

  // The tile's logits [tq][kSk]: (Q . K^T) * scale + bias, masked.
  // Q rows are ldq apart (H for a widened copy, N * H for f32 rows read in place).
  void logits(int64_t b, int64_t n, int64_t t0, int64_t tq, int64_t s0, int64_t sk, const A* Q, const A* Kt,
              A* Sc, int64_t ldq = -1) const {
    const int64_t H = p.H;
    if (ldq < 0) ldq = H;
    if constexpr (std::is_same_v<A, float>) tile_abt(Q, ldq, tq, Kt, H, sk, Sc);
    for (int64_t i = 0; i < tq; ++i) {
      A* row = Sc + i * kSk;
      if constexpr (!std::is_same_v<A, float>) {
        for (int64_t j = 0; j < sk; ++j) row[j] = A(0);
        for (int64_t h = 0; h < H; ++h) {
          const A qv = Q[i * ldq + h];
          const A* kc = Kt + h * kSk;
          for (int64_t j = 0; j < sk; ++j) row[j] = fmadd(qv, kc[j], row[j]);
        }
      }
    }
    post_logits(b, n, t0, tq, s0, sk, Sc);
  }
  // The products' tile [tq][kSk] times the scale, plus the bias, masked: the logits.
  void post_logits(int64_t b, int64_t n, int64_t t0, int64_t tq, int64_t s0, int64_t sk, A* Sc,
                   int64_t ld = kSk) const {
    for (int64_t i = 0; i < tq; ++i) {
      A* row = Sc + i * ld;
      for (int64_t j = 0; j < sk; ++j) row[j] *= scale;
      if (p.bias) {
        const A* bb = static_cast<const A*>(p.bias) + b * p.bias_st[0] + n * p.bias_st[1] + (t0 + i) * p.bias_st[2] +
                      s0 * p.bias_st[3];
        if (p.bias_st[3] == 1)  // the same sums, in a loop that vectorises
          for (int64_t j = 0; j < sk; ++j) row[j] += bb[j];
        else
          for (int64_t j = 0; j < sk; ++j) row[j] += bb[j * p.bias_st[3]];
      }
      if (const bool* mr = mask_row(b, n, t0 + i, s0)) {
        mask_select(row, reinterpret_cast<const uint8_t*>(mr), sk, kMasked<A>);  // as bytes
      } else if (masked) {
        for (int64_t j = 0; j < sk; ++j)
          if (!allowed(b, n, t0 + i, s0 + j)) row[j] = kMasked<A>;
      }
    }
  }

  // prefetch_rows of what the forward's task (b, head n, query rows [t0, t0 + tq)) reads:
  // its q rows, and its k and v rows unless its kv head's are the current task's.
  void prefetch_fwd(int64_t b, int64_t n, int64_t t0, int64_t tq, bool same_kv) const {
    const int64_t H = p.H, kh = n / G, e = int64_t(sizeof(T));
    prefetch_rows(q + (b * p.T + t0) * p.ldq() + n * H, tq, p.ldq() * e, H * e);
    if (same_kv) return;
    prefetch_rows(k + b * p.S * p.ldk() + kh * H, p.S, p.ldk() * e, H * e);
    prefetch_rows(v + b * p.S * p.ldv() + kh * H, p.S, p.ldv() * e, H * e);
  }
  // ... and of what the backward's task (b, kv head kh) reads: its G heads' q, dO and out
  // rows, its k and v rows.
  void prefetch_bwd(int64_t b, int64_t kh, const T* out, const T* dout) const {
    const int64_t H = p.H, T_ = p.T, e = int64_t(sizeof(T));
    for (int64_t g = 0; g < G; ++g) {
      const int64_t n = kh * G + g;
      prefetch_rows(q + b * T_ * p.ldq() + n * H, T_, p.ldq() * e, H * e);
      prefetch_rows(dout + (b * T_ * p.N + n) * H, T_, p.N * H * e, H * e);
      prefetch_rows(out + (b * T_ * p.N + n) * H, T_, p.N * H * e, H * e);
    }
    prefetch_rows(k + b * p.S * p.ldk() + kh * H, p.S, p.ldk() * e, H * e);
    prefetch_rows(v + b * p.S * p.ldv() + kh * H, p.S, p.ldv() * e, H * e);
  }

  int64_t key_end(int64_t t0, int64_t tq) const {
    return skip_causal ? std::min(p.S, t0 + tq) : p.S;  // last row t0+tq-1 sees s <= t0+tq-1
  }
};

// Tasks per parallel_for chunk: whole groups (a head's query tiles, or one task), as many
// as leave ~16 chunks per thread. Each chunk allocates and fills its buffers once: one
// chunk per task cost ~10% of the time at Swin's 49-token windows (B x N in the
// thousands). A task's arithmetic does not depend on its chunk.
inline int64_t task_grain(int64_t groups, int64_t per_group) {
  return per_group * std::max<int64_t>(1, groups / (16 * int64_t(num_threads())));
}

template <class T, class A>
void fwd_impl(const Attn& p, const T* q, const T* k, const T* v, T* out, A* lse) {
  Ctx<T, A> c(p, q, k, v);
  const int64_t H = p.H, nt = fwd_tiles(p.T), nst = (p.S + kSk - 1) / kSk;
  constexpr bool kInPlace = std::is_same_v<T, float> && std::is_same_v<A, float>;
  // Chunks of whole heads' query tiles where there are enough heads, else of single tiles
  // (ViT at batch 1: 3 heads of 4 tiles); only the loads below depend on the chunks.
  const int64_t grain = p.B * p.N >= 16 * num_threads() ? task_grain(p.B * p.N, nt) : 1;
  parallel_for(p.B * p.N * nt, grain, [&](int64_t lo, int64_t hi) {
    // The key tiles (transposed) and value tiles of one (batch, kv head), widened once for
    // every query tile of this chunk that reads them (they were reloaded per query tile).
    LocalVec<A> Q(kInPlace ? 0 : kFwdTq * H), Kr(kSk * H), Kt(nst * H * kSk), V(kInPlace ? 0 : nst * kSk * H),
        Sc(kFwdTq * kSk), acc(kFwdTq * H), m(kFwdTq), l(kFwdTq), alpha(kFwdTq);
    int64_t cached = -1;
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t b = task / (p.N * nt), n = task / nt % p.N, kh = n / c.G;
      int64_t t0, tq;
      fwd_tile(p.T, nt, task % nt, t0, tq);
      if (task + 1 < hi) {  // the next task's rows (prefetch_rows)
        const int64_t b2 = (task + 1) / (p.N * nt), n2 = (task + 1) / nt % p.N;
        int64_t t2, tq2;
        fwd_tile(p.T, nt, (task + 1) % nt, t2, tq2);
        c.prefetch_fwd(b2, n2, t2, tq2, b2 * p.K + n2 / c.G == b * p.K + kh);
      }
      if (b * p.K + kh != cached) {
        for (int64_t st = 0; st < nst; ++st) {
          const int64_t s0 = st * kSk, sk = std::min(kSk, p.S - s0);
          c.load_kv(k, p.ldk(), b, kh, s0, sk, Kr.data());
          Ctx<T, A>::transpose(Kr.data(), sk, H, Kt.data() + st * H * kSk);
          if (!kInPlace) c.load_kv(v, p.ldv(), b, kh, s0, sk, V.data() + st * kSk * H);
        }
        cached = b * p.K + kh;
      }
      // f32 query and value rows are read in place (rows ldq() and ldv() apart).
      const A* Qp = Q.data();
      int64_t ldq = H;
      if constexpr (kInPlace) {
        Qp = reinterpret_cast<const A*>(q) + (b * p.T + t0) * p.ldq() + n * H;
        ldq = p.ldq();
      } else {
        c.load_q(b, n, t0, tq, Q.data());
      }
      std::fill(acc.begin(), acc.end(), A(0));
      std::fill(m.begin(), m.end(), -std::numeric_limits<A>::infinity());
      std::fill(l.begin(), l.end(), A(0));
      const int64_t send = c.key_end(t0, tq);
      for (int64_t s0 = 0; s0 < send; s0 += kSk) {
        const int64_t sk = std::min(kSk, send - s0);
        const A* Ktile = Kt.data() + s0 / kSk * H * kSk;
        const A* Vtile = kInPlace ? reinterpret_cast<const A*>(v) + (b * p.S + s0) * p.ldv() + kh * H
                                  : V.data() + s0 / kSk * kSk * H;
        const int64_t ldv = kInPlace ? p.ldv() : H;
        c.logits(b, n, t0, tq, s0, sk, Qp, Ktile, Sc.data(), ldq);
        A sums[kFwdTq];
        Ctx<T, A>::online_softmax(Sc.data(), tq, sk, m.data(), l.data(), alpha.data(), sums);
        // acc = acc * alpha + P . V, row by row in the plain loops' order.
        int64_t h0 = 0;
        if constexpr (std::is_same_v<A, float>)
          h0 = rows_acc<false, true>(Sc.data(), kSk, tq, sk, Vtile, ldv, H, alpha.data(), acc.data(), H);
        if (h0 < H)
          for (int64_t i = 0; i < tq; ++i) {
            const A* row = Sc.data() + i * kSk;
            A* ai = acc.data() + i * H;
            for (int64_t h = h0; h < H; ++h) ai[h] *= alpha[i];
            for (int64_t j = 0; j < sk; ++j) {
              const A pj = row[j];
              const A* vr = Vtile + j * ldv;
              for (int64_t h = h0; h < H; ++h) ai[h] = fmadd(pj, vr[h], ai[h]);
            }
          }
      }
      for (int64_t i = 0; i < tq; ++i) {
        const int64_t t = t0 + i;
        T* dst = out + ((b * p.T + t) * p.N + n) * H;
        const bool live = c.row_live(b, t);
        const A inv = A(1) / l[i];
        for (int64_t h = 0; h < H; ++h) dst[h] = narrow<T, A>(live ? acc[i * H + h] * inv : A(0));
        lse[(b * p.N + n) * p.T + t] = m[i] + log_a<A>(l[i]);
      }
    }
  });
}

template <class T, class A>
void bwd_impl(const Attn& p, const T* q, const T* k, const T* v, const T* out, const A* lse, const T* dout, T* dq,
              T* dk, T* dv, A* dbias) {
  Ctx<T, A> c(p, q, k, v);
  const int64_t H = p.H, G = c.G, T_ = p.T;
  // One task per (batch, kv head): key tiles outer, the G heads' query tiles inner; the
  // probabilities are recomputed once (FlashAttention-2's backward). dK and dV of a key
  // tile, and dQ of every row, are summed by this task alone in a fixed order.
  parallel_for(p.B * p.K, dbias_grain(p, task_grain(p.B * p.K, 1)), [&](int64_t lo, int64_t hi) {
    LocalVec<A> Q(G * T_ * H), dO(G * T_ * H), dQ(G * T_ * H), D(G * T_), L(G * T_);
    LocalVec<A> Kr(kSk * H), Kt(H * kSk), Vr(kSk * H), Vt(H * kSk), Sc(kTq * kSk), dS(kTq * kSk), dSs(kTq * kSk),
        dK(kSk * H), dV(kSk * H);
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t b = task / p.K, kh = task % p.K;
      if (task + 1 < hi) c.prefetch_bwd((task + 1) / p.K, (task + 1) % p.K, out, dout);  // the next task's rows
      for (int64_t g = 0; g < G; ++g) {
        const int64_t n = kh * G + g;
        c.load_q(b, n, 0, T_, Q.data() + g * T_ * H);
        for (int64_t t = 0; t < T_; ++t) {
          const T* go = dout + ((b * T_ + t) * p.N + n) * H;
          const T* o = out + ((b * T_ + t) * p.N + n) * H;
          A* dst = dO.data() + (g * T_ + t) * H;
          A d = A(0);
          for (int64_t h = 0; h < H; ++h) {
            dst[h] = c.row_live(b, t) ? A(widen(go[h])) : A(0);  // zero output rows: nothing flows back
            d = fmadd(dst[h], A(widen(o[h])), d);
          }
          D[g * T_ + t] = d;
          L[g * T_ + t] = lse[(b * p.N + n) * T_ + t];
        }
      }
      std::fill(dQ.begin(), dQ.end(), A(0));
      for (int64_t s0 = 0; s0 < p.S; s0 += kSk) {
        const int64_t sk = std::min(kSk, p.S - s0);
        c.load_kv(k, p.ldk(), b, kh, s0, sk, Kr.data());
        Ctx<T, A>::transpose(Kr.data(), sk, H, Kt.data());
        c.load_kv(v, p.ldv(), b, kh, s0, sk, Vr.data());
        Ctx<T, A>::transpose(Vr.data(), sk, H, Vt.data());
        std::fill(dK.begin(), dK.end(), A(0));
        std::fill(dV.begin(), dV.end(), A(0));
        const int64_t tstart = c.skip_causal ? s0 / kTq * kTq : 0;  // rows t < s0 see none of this tile
        for (int64_t g = 0; g < G; ++g) {
          const int64_t n = kh * G + g;
          for (int64_t t0 = tstart; t0 < T_; t0 += kTq) {
            const int64_t tq = std::min(kTq, T_ - t0);
            const A* Qt = Q.data() + (g * T_ + t0) * H;
            const A* dOt = dO.data() + (g * T_ + t0) * H;
            c.logits(b, n, t0, tq, s0, sk, Qt, Kt.data(), Sc.data());
            constexpr bool kF32 = std::is_same_v<A, float>;
            if constexpr (kF32) tile_abt(dOt, H, tq, Vt.data(), H, sk, dS.data());
            for (int64_t i = 0; i < tq; ++i) {
              const int64_t t = t0 + i;
              A* prow = Sc.data() + i * kSk;
              A* drow = dS.data() + i * kSk;
              if constexpr (!kF32) {  // dP = dO . V^T (the f32 path has it from tile_abt)
                const A* gi = dOt + i * H;
                for (int64_t j = 0; j < sk; ++j) drow[j] = A(0);
                for (int64_t h = 0; h < H; ++h) {
                  const A gv = gi[h];
                  const A* vc = Vt.data() + h * kSk;
                  for (int64_t j = 0; j < sk; ++j) drow[j] = fmadd(gv, vc[j], drow[j]);
                }
              }
              c.score_grad_row(b, n, t, s0, sk, L[g * T_ + t], D[g * T_ + t], prow, drow, dbias);
              A* dsr = dSs.data() + i * kSk;
              for (int64_t j = 0; j < sk; ++j) dsr[j] = drow[j] * c.scale;
            }
            // dV[j] += P[i][j] dO[i], dK[j] += dSs[i][j] Q[i] (over the rows i in order) and
            // dQ[i] += dSs[i][j] K[j] (over j in order): the plain loops' sums, blocked; the
            // plain loops below take the columns [h0, H) the vectors leave.
            int64_t h0 = 0;
            if constexpr (kF32) {
              h0 = rows_acc<true, false>(Sc.data(), kSk, sk, tq, dOt, H, H, nullptr, dV.data(), H);
              rows_acc<true, false>(dSs.data(), kSk, sk, tq, Qt, H, H, nullptr, dK.data(), H);
              rows_acc<false, false>(dSs.data(), kSk, tq, sk, Kr.data(), H, H, nullptr, dQ.data() + (g * T_ + t0) * H,
                                     H);
            }
            if (h0 < H)
              for (int64_t i = 0; i < tq; ++i) {
                const int64_t t = t0 + i;
                const A* prow = Sc.data() + i * kSk;
                const A* dsr = dSs.data() + i * kSk;
                const A* gi = dOt + i * H;
                const A* qi = Qt + i * H;
                A* dqi = dQ.data() + (g * T_ + t) * H;
                for (int64_t j = 0; j < sk; ++j) {
                  const A pj = prow[j], dj = dsr[j];
                  A* dv_ = dV.data() + j * H;
                  A* dk_ = dK.data() + j * H;
                  const A* kr = Kr.data() + j * H;
                  for (int64_t h = h0; h < H; ++h) dv_[h] = fmadd(pj, gi[h], dv_[h]);
                  for (int64_t h = h0; h < H; ++h) dk_[h] = fmadd(dj, qi[h], dk_[h]);
                  for (int64_t h = h0; h < H; ++h) dqi[h] = fmadd(dj, kr[h], dqi[h]);
                }
              }
          }
          if (dbias && !p.dbias_chunk && tstart > 0)  // rows the causal skip never visits: zero gradient
            for (int64_t t = 0; t < std::min(tstart, T_); ++t) {
              A* row = dbias + p.dbias_off(b, n, t) + s0;
              for (int64_t j = 0; j < sk; ++j) row[j] = A(0);
            }
        }
        for (int64_t j = 0; j < sk; ++j) {
          T* dks = dk + (b * p.S + s0 + j) * p.lddk() + kh * H;
          T* dvs = dv + (b * p.S + s0 + j) * p.lddv() + kh * H;
          for (int64_t h = 0; h < H; ++h) { dks[h] = narrow<T, A>(dK[j * H + h]); dvs[h] = narrow<T, A>(dV[j * H + h]); }
        }
      }
      for (int64_t g = 0; g < G; ++g) {
        const int64_t n = kh * G + g;
        for (int64_t t = 0; t < T_; ++t) {
          T* dst = dq + (b * T_ + t) * p.lddq() + n * H;
          const A* src = dQ.data() + (g * T_ + t) * H;
          for (int64_t h = 0; h < H; ++h) dst[h] = narrow<T, A>(src[h]);
        }
      }
    }
  });
}

}  // namespace
}  // namespace podlet::kernels

// Defines the suffixed entry points of one ISA build.
#define PODLET_ATTN_DEFINE(SUFFIX)                                                                                 \
  namespace podlet::kernels {                                                                                      \
  void attention_fwd_##SUFFIX(const Attn& p, const float* q, const float* k, const float* v, float* out,          \
                              float* lse) { fwd_impl<float, float>(p, q, k, v, out, lse); }                        \
  void attention_fwd_##SUFFIX(const Attn& p, const bf16* q, const bf16* k, const bf16* v, bf16* out, float* lse) { \
    fwd_impl<bf16, float>(p, q, k, v, out, lse);                                                                   \
  }                                                                                                                \
  void attention_bwd_##SUFFIX(const Attn& p, const float* q, const float* k, const float* v, const float* out,    \
                              const float* lse, const float* dout, float* dq, float* dk, float* dv,               \
                              float* dbias) {                                                                      \
    bwd_impl<float, float>(p, q, k, v, out, lse, dout, dq, dk, dv, dbias);                                         \
  }                                                                                                                \
  void attention_bwd_##SUFFIX(const Attn& p, const bf16* q, const bf16* k, const bf16* v, const bf16* out,       \
                              const float* lse, const bf16* dout, bf16* dq, bf16* dk, bf16* dv, float* dbias) {   \
    bwd_impl<bf16, float>(p, q, k, v, out, lse, dout, dq, dk, dv, dbias);                                          \
  }                                                                                                                \
  }
