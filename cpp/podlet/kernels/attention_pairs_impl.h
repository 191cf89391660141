// The bf16 fused attention on bf16 pair products (vdpbf16ps), one source compiled twice:
// attention_pairs_avx512bf16.cc runs it on the instruction, attention_pairs_ref.cc on a
// plain C++ emulation of it (any host; the tests compare the two bit for bit).
//
// The widening kernel (attention_impl.h) converts bf16 operands to f32 and runs f32 FMAs,
// half the rate of vdpbf16ps on AVX512_BF16 hosts, so bf16 attention was faster op by op
// on the GEMM's pair kernel. Here every product of the forward and backward pass takes
// bf16 operands two at a time along its reduction axis, with f32 accumulation:
//   logits  = Q . K^T       pairs along h   (Q rows read as pairs, K packed [h/2][s][2])
//   out    += P . V         pairs along s   (P rounded to bf16, V packed [s/2][h][2])
//   dP      = dO . V^T      pairs along h
//   dV     += P^T . dO      pairs along t   (dO packed [t/2][h][2])
//   dK     += dS^T . Q      pairs along t
//   dQ     += dS . K        pairs along s
// As in jax.nn.dot_product_attention on bf16 inputs, the operands of every product are
// bf16 (the probabilities and the score gradient are rounded to bf16 before their
// products), the logits, the softmax and all accumulation are f32. The tiling (a row's
// key tiles, the order of the pair steps) depends on the shape only, and each output
// element is summed by one task, so the bits do not depend on the thread count.
#pragma once
#include "podlet/kernels/attention_impl.h"

namespace podlet::kernels {
namespace {

constexpr int64_t kPk = 64;  // keys per tile: 4 vectors of 16 columns
constexpr int64_t kPq = 64;  // query rows per tile, at most (an even number: pairs along t)

// The logits of a key tile's rows: product * scale, + bias row i (bias + i * bias_ld,
// unit stride along the keys), -> kMasked where mask row i (bytes) is 0. No bias or mask:
// nullptr. (Other masks go through Ctx::post_logits first, then scale 1.)
struct TileLogits {
  float scale;
  const float* bias;
  int64_t bias_ld;
  const uint8_t* mask;
  int64_t mask_ld;
};

inline uint32_t pair_bits(uint16_t even, uint16_t odd) { return uint32_t(even) | (uint32_t(odd) << 16); }
inline int64_t up16(int64_t n) { return (n + 15) / 16 * 16; }
// dst[h] = bf16(src[h] * f), h < n (a loop GCC vectorises: the rounding without a branch).
inline void narrow_row(const float* __restrict src, int64_t n, float f, bf16* dst) {
  uint16_t* __restrict d = &dst->bits;
  for (int64_t h = 0; h < n; ++h) d[h] = f32_to_bf16_bits(src[h] * f);
}

// The pair product's arithmetic in plain C++: Intel's definition of vdpbf16ps (the odd
// element's product added first, each addition rounded to nearest even, inputs and
// results below the normal range flushed to zero; a bf16 product is exact in f32).
// AMD's Zen 4 gives the same bits (checked on 3.2M random lanes).
struct EmuPairs {
  struct V { float x[16]; };
  struct P { uint16_t x[32]; };
  static float ftz(float f) { return std::fabs(f) < FLT_MIN ? std::copysign(0.0f, f) : f; }
  static float wide(uint16_t h) { return bf16::to_f32(h); }
  static V zero() { return V{}; }
  static V load(const float* p) { V v; std::memcpy(v.x, p, sizeof v.x); return v; }
  static void store(float* p, const V& v) { std::memcpy(p, v.x, sizeof v.x); }
  static V scale(V v, float a) { for (float& f : v.x) f *= a; return v; }
  static P loadp(const uint32_t* p) { P v; std::memcpy(v.x, p, sizeof v.x); return v; }
  // No vector forms: the plain loops of pack_across, pack_rows, row_dots, grad_tile,
  // pack_cols and softmax_tile run, and define the words and bits the vector forms give.
  static bool pack_across(const bf16*, int64_t, int64_t, int64_t, int64_t, uint32_t*) { return false; }
  static bool pack_rows(const bf16*, int64_t, int64_t, int64_t, uint32_t*, int64_t) { return false; }
  static bool row_dots(const bf16*, int64_t, const bf16*, int64_t, int64_t, int64_t, float*) { return false; }
  static bool grad_tile(float*, float*, int64_t, int64_t, const TileLogits&, const float*, const float*, float, float*,
                        int64_t, bool, float, uint32_t*) {
    return false;
  }
  static bool pack_cols(const float*, int64_t, int64_t, int64_t, uint32_t*, int64_t) { return false; }
  static bool softmax_tile(float*, int64_t, int64_t, const TileLogits&, float*, float*, float*, uint32_t*) {
    return false;
  }
  static P bcast(uint32_t a) {
    P v;
    for (int l = 0; l < 16; ++l) { v.x[2 * l] = uint16_t(a & 0xffffu); v.x[2 * l + 1] = uint16_t(a >> 16); }
    return v;
  }
  static V dp(V acc, const P& a, const P& b) {
    for (int l = 0; l < 16; ++l) {
      float t = ftz(ftz(acc.x[l]) + ftz(wide(a.x[2 * l + 1])) * ftz(wide(b.x[2 * l + 1])));
      acc.x[l] = ftz(t + ftz(wide(a.x[2 * l])) * ftz(wide(b.x[2 * l])));
    }
    return acc;
  }
};

// C[r][16w + l] (r < R rows ldc apart, w < W vectors) = (Mode 0: 0; 1: C; 2: C * alpha[r])
// + the pair products of A's row r (kp pairs, lda apart in rows) with B's pair rows
// (kp of them, ldb words apart; vector w at 16w), the pairs in order.
template <class D, int R, int W, int Mode>
__attribute__((noinline)) void pair_block(const uint32_t* A, int64_t lda, int64_t kp, const uint32_t* B, int64_t ldb,
                                          float* C, int64_t ldc, const float* alpha) {
  typename D::V acc[R][W];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int w = 0; w < W; ++w) {
      if constexpr (Mode == 0) acc[r][w] = D::zero();
      else acc[r][w] = D::load(C + r * ldc + 16 * w);
      if constexpr (Mode == 2) acc[r][w] = D::scale(acc[r][w], alpha[r]);
    }
  for (int64_t i = 0; i < kp; ++i) {
    typename D::P b[W];
#pragma GCC unroll 4
    for (int w = 0; w < W; ++w) b[w] = D::loadp(B + i * ldb + 16 * w);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const typename D::P a = D::bcast(A[r * lda + i]);
#pragma GCC unroll 4
      for (int w = 0; w < W; ++w) acc[r][w] = D::dp(acc[r][w], a, b[w]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int w = 0; w < W; ++w) D::store(C + r * ldc + 16 * w, acc[r][w]);
}

// pair_block over `rows` rows and ncol columns (a multiple of 16), in column groups of
// up to 64 and row blocks as large as the registers hold.
template <class D, int Mode>
void pair_rows(int64_t rows, int64_t ncol, const uint32_t* A, int64_t lda, int64_t kp, const uint32_t* B, int64_t ldb,
               float* C, int64_t ldc, const float* alpha = nullptr) {
  for (int64_t c0 = 0; c0 < ncol; c0 += 64) {
    const uint32_t* Bc = B + c0;
    float* Cc = C + c0;
    auto run = [&](auto w_const) {
      constexpr int W = decltype(w_const)::value;
      constexpr int RB = W <= 2 ? 8 : 6;  // RB x W accumulators + W operands + 1 broadcast <= 32 registers
      int64_t r = 0;
      auto blk = [&](auto r_const) {
        constexpr int R = decltype(r_const)::value;
        pair_block<D, R, W, Mode>(A + r * lda, lda, kp, Bc, ldb, Cc + r * ldc, ldc, alpha ? alpha + r : nullptr);
      };
      for (; r + RB <= rows; r += RB) blk(std::integral_constant<int, RB>{});
      remainder_block<RB>(rows - r, blk);
    };
    switch (std::min<int64_t>(4, (ncol - c0) / 16)) {
      case 4: run(std::integral_constant<int, 4>{}); break;
      case 3: run(std::integral_constant<int, 3>{}); break;
      case 2: run(std::integral_constant<int, 2>{}); break;
      default: run(std::integral_constant<int, 1>{}); break;
    }
  }
}

// Packing. A row operand (broadcast) is pairs along the reduction: row i of a bf16
// matrix [rows][n] as ceil(n/2) words, an odd n's last word paired with zero. A column
// operand is [pairs][cols][2]: pair row i holds (X[2i][c], X[2i+1][c]) per column c.
// The loops are plain stores of words (or GCC-vectorised ones): scalar element-by-element
// packing cost more than the products at Swin's 49-token windows.
inline void pack_rows_plain(const bf16* X, int64_t ldx, int64_t rows, int64_t n, uint32_t* out, int64_t ldo) {
  for (int64_t i = 0; i < rows; ++i) {
    const uint16_t* __restrict x = &X[i * ldx].bits;
    uint16_t* __restrict o = reinterpret_cast<uint16_t*>(out + i * ldo);  // a word's low half is the even element
    for (int64_t j = 0; j < n; ++j) o[j] = x[j];
    if (n % 2) o[n] = 0;
  }
}
// pack_rows_plain through the backend's vector form when it has one (the same words).
template <class Be>
inline void pack_rows(const bf16* X, int64_t ldx, int64_t rows, int64_t n, uint32_t* out, int64_t ldo) {
  if (!Be::pack_rows(X, ldx, rows, n, out, ldo)) pack_rows_plain(X, ldx, rows, n, out, ldo);
}
// f32 rows rounded to bf16 pairs.
inline void pack_rows_f32(const float* X, int64_t ldx, int64_t rows, int64_t n, uint32_t* out, int64_t ldo) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* __restrict x = X + i * ldx;
    uint16_t* __restrict o = reinterpret_cast<uint16_t*>(out + i * ldo);
    for (int64_t j = 0; j < n; ++j) o[j] = f32_to_bf16_bits(x[j]);
    if (n % 2) o[n] = 0;
  }
}
// out[j][i/2] = the pair (X[i][j], X[i+1][j]) rounded, i < rows (pairs along the rows of
// an f32 tile: the transposed operand of dV and dK), for j < cols.
inline void pack_cols_f32(const float* X, int64_t ldx, int64_t rows, int64_t cols, uint32_t* out, int64_t ldo) {
  for (int64_t i = 0; i < rows; i += 2) {
    const float* __restrict x0 = X + i * ldx;
    const float* __restrict x1 = i + 1 < rows ? x0 + ldx : x0;
    const uint32_t keep = i + 1 < rows ? 0xffffu : 0u;  // an odd last row pairs with zero
    uint32_t* __restrict o = out + i / 2;
    for (int64_t j = 0; j < cols; ++j)
      o[j * ldo] = pair_bits(f32_to_bf16_bits(x0[j]), uint16_t(f32_to_bf16_bits(x1[j]) & keep));
  }
}
// The column operand [ceil(n/2)][cols][2] of n bf16 rows ldx apart, `width` columns each
// (zero from width to cols, and in the missing partner of an odd n): pairs along rows.
inline void pack_pairs_down(const bf16* X, int64_t ldx, int64_t n, int64_t width, int64_t cols, uint32_t* out) {
  for (int64_t i = 0; i < (n + 1) / 2; ++i) {
    const uint16_t* __restrict r0 = &X[2 * i * ldx].bits;
    const uint16_t* __restrict r1 = 2 * i + 1 < n ? r0 + ldx : nullptr;
    uint32_t* __restrict o = out + i * cols;
    if (r1)
      for (int64_t c = 0; c < width; ++c) o[c] = pair_bits(r0[c], r1[c]);
    else
      for (int64_t c = 0; c < width; ++c) o[c] = r0[c];
    std::fill(o + width, o + cols, 0u);
  }
}
// The column operand [ceil(H/2)][cols][2] of X^T for sk bf16 rows of H (ldx apart): pairs
// along each row, the rows as columns (K for the logits: pair row hp holds
// (K[s][2hp], K[s][2hp+1]) for each key s). Columns sk..cols are zero.
inline void pack_pairs_across(const bf16* X, int64_t ldx, int64_t sk, int64_t H, int64_t cols, uint32_t* out) {
  const int64_t HP = (H + 1) / 2;
  for (int64_t hp = 0; hp < HP; ++hp) {  // contiguous stores, strided loads (a transpose)
    uint32_t* __restrict o = out + hp * cols;
    const uint16_t* x = &X[2 * hp].bits;
    if (2 * hp + 1 < H)
      for (int64_t s = 0; s < sk; ++s) o[s] = pair_bits(x[s * ldx], x[s * ldx + 1]);
    else
      for (int64_t s = 0; s < sk; ++s) o[s] = x[s * ldx];
    std::fill(o + sk, o + cols, 0u);
  }
}
// pack_pairs_across through the backend's vector form when it has one (a transpose of
// 32-bit words: data movement, so every backend gives the same words).
template <class Be>
inline void pack_across(const bf16* X, int64_t ldx, int64_t sk, int64_t H, int64_t cols, uint32_t* out) {
  if (!Be::pack_across(X, ldx, sk, H, cols, out)) pack_pairs_across(X, ldx, sk, H, cols, out);
}

// pack_cols_f32 through the backend's vector form when it has one.
template <class Be>
inline void pack_cols(const float* X, int64_t ldx, int64_t rows, int64_t cols, uint32_t* out, int64_t ldo) {
  if (!Be::pack_cols(X, ldx, rows, cols, out, ldo)) pack_cols_f32(X, ldx, rows, cols, out, ldo);
}

// x[0..16) summed by nk::tree's halving tree (lane l with l + w for w = 8, 4, 2, 1, the
// lower lane first): a vector build's lane_tree.
inline float lane_tree16(const float* x) {
  float v[8], a[4];
  for (int i = 0; i < 8; ++i) v[i] = x[i] + x[i + 8];
  for (int i = 0; i < 4; ++i) a[i] = v[i] + v[i + 4];
  return (a[0] + a[2]) + (a[1] + a[3]);
}

// Whether a tile's logits are a TileLogits (the scale, a bias contiguous along the keys,
// Swin's rows of booleans; no other mask), and that of rows t0.. of head n from key s0.
inline bool simple_logits(const Ctx<bf16, float>& c) {
  return (!c.masked || c.mask_rows) && (!c.p.bias || c.p.bias_st[3] == 1);
}
inline TileLogits tile_logits(const Ctx<bf16, float>& c, int64_t b, int64_t n, int64_t t0, int64_t s0) {
  const Attn& p = c.p;
  TileLogits g{float(c.scale), nullptr, 0, nullptr, 0};
  if (p.bias) {
    g.bias = static_cast<const float*>(p.bias) + b * p.bias_st[0] + n * p.bias_st[1] + t0 * p.bias_st[2] + s0;
    g.bias_ld = p.bias_st[2];
  }
  if (p.mask) {
    g.mask = reinterpret_cast<const uint8_t*>(c.mask_row(b, n, t0, s0));
    g.mask_ld = p.mask_st[2];
  }
  return g;
}

// D[t] = sum_h X[t][h] Y[t][h] for t < rows (bf16 rows ldx / ldy apart, n elements):
// fused multiply-adds into 16 lanes (element h in lane h % 16, in order of h, from +0)
// combined by lane_tree16, the order a 16-lane build keeps in registers (one chain per
// row in order of h ran scalar, ~5% of the backward at Swin's windows).
inline void row_dots_plain(const bf16* X, int64_t ldx, const bf16* Y, int64_t ldy, int64_t rows, int64_t n, float* D) {
  for (int64_t t = 0; t < rows; ++t) {
    float lanes[16] = {};
    for (int64_t h = 0; h < n; ++h)
      lanes[h % 16] = fmadd(float(X[t * ldx + h]), float(Y[t * ldy + h]), lanes[h % 16]);
    D[t] = lane_tree16(lanes);
  }
}
template <class Be>
inline void row_dots(const bf16* X, int64_t ldx, const bf16* Y, int64_t ldy, int64_t rows, int64_t n, float* D) {
  if (!Be::row_dots(X, ldx, Y, ldy, rows, n, D)) row_dots_plain(X, ldx, Y, ldy, rows, n, D);
}

// One key tile of the forward's online softmax, rows [0, tq) of Sc (the products Q . K^T
// over sk <= kPk keys, kPk apart): each row's logits (TileLogits), its running max m and
// sum l updated, alpha[i] the factor its accumulator is rescaled by, and its
// probabilities exp(logit - max) rounded to bf16 pair rows in Pb (kPk / 2 words apart, an
// odd sk's last word paired with zero). A row's exps are summed in 16 lanes (element j in
// lane j % 16, in order of j) combined by lane_tree16: the order a 16-lane build keeps in
// registers, where one sum per row in order of j ran at the add latency.
template <class Be>
void softmax_tile(float* Sc, int64_t tq, int64_t sk, const TileLogits& g, float* m, float* l, float* alpha,
                  uint32_t* Pb) {
  if (Be::softmax_tile(Sc, tq, sk, g, m, l, alpha, Pb)) return;
  for (int64_t i = 0; i < tq; ++i) {
    float* row = Sc + i * kPk;
    for (int64_t j = 0; j < sk; ++j) {
      float x = row[j] * g.scale;
      if (g.bias) x += g.bias[i * g.bias_ld + j];
      if (g.mask && !g.mask[i * g.mask_ld + j]) x = kMasked<float>;
      row[j] = x;
    }
    const float mx = row_max(m[i], row, sk);
    alpha[i] = m[i] == -std::numeric_limits<float>::infinity() ? 0.0f : exp_a<float>(m[i] - mx);
    m[i] = mx;
    float lanes[16] = {};
    for (int64_t j = 0; j < sk; ++j) {
      const float e = exp_a<float>(row[j] - mx);
      lanes[j % 16] = j < 16 ? e : lanes[j % 16] + e;
      row[j] = e;
    }
    l[i] = l[i] * alpha[i] + lane_tree16(lanes);
  }
  pack_rows_f32(Sc, kPk, tq, sk, Pb, kPk / 2);
}

template <class Be>
void fwd_pairs(const Attn& p, const bf16* q, const bf16* k, const bf16* v, bf16* out, float* lse) {
  Ctx<bf16, float> c(p, q, k, v);
  const int64_t H = p.H, HP = (H + 1) / 2, HC = up16(H), nst = (p.S + kPk - 1) / kPk;
  // Query tiles of equal size (49 rows: one tile; 197: four of 50, 50, 50, 47): a row's
  // arithmetic depends on the key tiles only.
  const int64_t nt = (p.T + kPq - 1) / kPq, tqn = (p.T + nt - 1) / nt;
  const int64_t grain = p.B * p.N >= 16 * num_threads() ? task_grain(p.B * p.N, nt) : 1;
  const bool simple = simple_logits(c);
  parallel_for(p.B * p.N * nt, grain, [&](int64_t lo, int64_t hi) {
    LocalVec<uint32_t> Kp(nst * HP * kPk), Vp(nst * (kPk / 2) * HC);
    LocalVec<uint32_t> Qb(tqn * HP), Pb(tqn * kPk / 2);
    LocalVec<float> Sc(tqn * kPk), O(tqn * HC), m(tqn), l(tqn), alpha(tqn);
    int64_t cached = -1;
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t b = task / (p.N * nt), n = task / nt % p.N, t0 = task % nt * tqn;
      const int64_t tq = std::min(tqn, p.T - t0), kh = n / c.G;
      if (task + 1 < hi) {  // the next task's rows (prefetch_rows)
        const int64_t b2 = (task + 1) / (p.N * nt), n2 = (task + 1) / nt % p.N, t2 = (task + 1) % nt * tqn;
        c.prefetch_fwd(b2, n2, t2, std::min(tqn, p.T - t2), b2 * p.K + n2 / c.G == b * p.K + kh);
      }
      if (b * p.K + kh != cached) {  // K and V of this (batch, kv head), packed once per chunk
        for (int64_t st = 0; st < nst; ++st) {
          const int64_t s0 = st * kPk, sk = std::min(kPk, p.S - s0);
          const bf16* kr = k + (b * p.S + s0) * p.ldk() + kh * H;
          const bf16* vr = v + (b * p.S + s0) * p.ldv() + kh * H;
          pack_across<Be>(kr, p.ldk(), sk, H, kPk, Kp.data() + st * HP * kPk);
          pack_pairs_down(vr, p.ldv(), sk, H, HC, Vp.data() + st * (kPk / 2) * HC);
        }
        cached = b * p.K + kh;
      }
      pack_rows<Be>(q + (b * p.T + t0) * p.ldq() + n * H, p.ldq(), tq, H, Qb.data(), HP);
      std::fill(m.begin(), m.end(), -std::numeric_limits<float>::infinity());
      std::fill(l.begin(), l.end(), 0.0f);
      const int64_t send = c.key_end(t0, tq);
      if (send <= 0) std::fill(O.begin(), O.end(), 0.0f);  // no key tile to start the sums
      for (int64_t s0 = 0; s0 < send; s0 += kPk) {
        const int64_t sk = std::min(kPk, send - s0), st = s0 / kPk;
        pair_rows<Be, 0>(tq, up16(sk), Qb.data(), HP, HP, Kp.data() + st * HP * kPk, kPk, Sc.data(), kPk);
        TileLogits g{1.0f, nullptr, 0, nullptr, 0};
        if (simple) g = tile_logits(c, b, n, t0, s0);
        else c.post_logits(b, n, t0, tq, s0, sk, Sc.data(), kPk);
        softmax_tile<Be>(Sc.data(), tq, sk, g, m.data(), l.data(), alpha.data(), Pb.data());
        if (s0 == 0)  // the first tile starts the sums (the rescaled zeros they replace)
          pair_rows<Be, 0>(tq, HC, Pb.data(), kPk / 2, (sk + 1) / 2, Vp.data(), HC, O.data(), HC);
        else
          pair_rows<Be, 2>(tq, HC, Pb.data(), kPk / 2, (sk + 1) / 2, Vp.data() + st * (kPk / 2) * HC, HC, O.data(),
                           HC, alpha.data());
      }
      for (int64_t i = 0; i < tq; ++i) {
        const int64_t t = t0 + i;
        bf16* dst = out + ((b * p.T + t) * p.N + n) * H;
        const bool live = c.row_live(b, t);
        if (live)
          narrow_row(O.data() + i * HC, H, 1.0f / l[i], dst);
        else
          std::fill(dst, dst + H, bf16(0.0f));
      }
      float* lr = lse + (b * p.N + n) * p.T + t0;  // a loop of its own: GCC vectorises fm::log
      for (int64_t i = 0; i < tq; ++i) lr[i] = m[i] + log_a<float>(l[i]);
    }
  });
}

template <class Be>
void bwd_pairs(const Attn& p, const bf16* q, const bf16* k, const bf16* v, const bf16* out, const float* lse,
               const bf16* dout, bf16* dq, bf16* dk, bf16* dv, float* dbias) {
  Ctx<bf16, float> c(p, q, k, v);
  const int64_t H = p.H, HP = (H + 1) / 2, HC = up16(H), G = c.G, T_ = p.T, TP = (T_ + 1) / 2;
  const bool simple = simple_logits(c);
  // One task per (batch, kv head), as the widening kernel: key tiles outer, the G heads'
  // query tiles inner, each probability recomputed once.
  parallel_for(p.B * p.K, dbias_grain(p, task_grain(p.B * p.K, 1)), [&](int64_t lo, int64_t hi) {
    LocalVec<uint32_t> Qr(G * T_ * HP), dOr(G * T_ * HP), PT(kPk * kPq / 2), dST(kPk * kPq / 2), dSb(kPq * kPk / 2);
    LocalVec<uint32_t> Qv(G * TP * HC), dOv(G * TP * HC), Kp(HP * kPk), Vh(HP * kPk), Kv(kPk / 2 * HC);
    LocalVec<float> dQ(G * T_ * HC), D(G * T_), L(G * T_), Sc(kPq * kPk), dS(kPq * kPk), dK(kPk * HC), dV(kPk * HC);
    LocalVec<bf16> dOz(T_ * H);
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t b = task / p.K, kh = task % p.K;
      if (task + 1 < hi) c.prefetch_bwd((task + 1) / p.K, (task + 1) % p.K, out, dout);  // the next task's rows
      for (int64_t g = 0; g < G; ++g) {
        const int64_t n = kh * G + g;
        const bf16* qh = q + b * T_ * p.ldq() + n * H;
        // dO's rows read in place, or copied with the rows past the query length zeroed
        // (zero output rows: nothing flows back).
        const bf16* dOh = dout + (b * T_ * p.N + n) * H;
        int64_t ldd = p.N * H;
        if (!c.row_live(b, T_ - 1)) {
          for (int64_t t = 0; t < T_; ++t) {
            const bf16* go = dout + ((b * T_ + t) * p.N + n) * H;
            const bool live = c.row_live(b, t);
            for (int64_t h = 0; h < H; ++h) dOz[t * H + h] = live ? go[h] : bf16(0.0f);
          }
          dOh = dOz.data();
          ldd = H;
        }
        for (int64_t t = 0; t < T_; ++t) L[g * T_ + t] = lse[(b * p.N + n) * T_ + t];
        row_dots<Be>(dOh, ldd, out + (b * T_ * p.N + n) * H, p.N * H, T_, H, D.data() + g * T_);
        pack_rows<Be>(qh, p.ldq(), T_, H, Qr.data() + g * T_ * HP, HP);
        pack_rows<Be>(dOh, ldd, T_, H, dOr.data() + g * T_ * HP, HP);
        pack_pairs_down(qh, p.ldq(), T_, H, HC, Qv.data() + g * TP * HC);
        pack_pairs_down(dOh, ldd, T_, H, HC, dOv.data() + g * TP * HC);
      }
      // The first key tile's products start dQ (every row is visited there: no causal skip
      // at s0 = 0) and each tile's first query tile starts dK and dV (pair_block's mode 0:
      // the sums from +0.0, as from a zero fill, without the fill's writes).
      if (p.S == 0) std::fill(dQ.begin(), dQ.end(), 0.0f);
      for (int64_t s0 = 0; s0 < p.S; s0 += kPk) {
        const int64_t sk = std::min(kPk, p.S - s0), nc = up16(sk), skp = (sk + 1) / 2;
        const bf16* kr = k + (b * p.S + s0) * p.ldk() + kh * H;
        const bf16* vr = v + (b * p.S + s0) * p.ldv() + kh * H;
        pack_across<Be>(kr, p.ldk(), sk, H, kPk, Kp.data());
        pack_across<Be>(vr, p.ldv(), sk, H, kPk, Vh.data());
        pack_pairs_down(kr, p.ldk(), sk, H, HC, Kv.data());
        bool kv_started = false;
        const int64_t tstart = c.skip_causal ? s0 / kPq * kPq : 0;  // rows t < s0 see none of this tile
        for (int64_t g = 0; g < G; ++g) {
          const int64_t n = kh * G + g;
          for (int64_t t0 = tstart; t0 < T_; t0 += kPq) {
            const int64_t tq = std::min(kPq, T_ - t0), tqp = (tq + 1) / 2;
            pair_rows<Be, 0>(tq, nc, Qr.data() + (g * T_ + t0) * HP, HP, HP, Kp.data(), kPk, Sc.data(), kPk);
            pair_rows<Be, 0>(tq, nc, dOr.data() + (g * T_ + t0) * HP, HP, HP, Vh.data(), kPk, dS.data(), kPk);
            // Sc: the probabilities, dS: the score gradient times the scale, dSb: dS's pair rows.
            float* dbias_rows = dbias ? dbias + p.dbias_off(b, n, t0) + s0 : nullptr;
            if (!simple || !Be::grad_tile(Sc.data(), dS.data(), tq, sk, tile_logits(c, b, n, t0, s0),
                                          L.data() + g * T_ + t0, D.data() + g * T_ + t0, 1.0f / float(p.S),
                                          dbias_rows, p.S, p.dbias_chunk != 0, c.scale, dSb.data())) {
              c.post_logits(b, n, t0, tq, s0, sk, Sc.data(), kPk);
              for (int64_t i = 0; i < tq; ++i) {
                const int64_t t = t0 + i;
                float* prow = Sc.data() + i * kPk;
                float* drow = dS.data() + i * kPk;
                c.score_grad_row(b, n, t, s0, sk, L[g * T_ + t], D[g * T_ + t], prow, drow, dbias);
                for (int64_t j = 0; j < sk; ++j) drow[j] *= c.scale;
              }
              pack_rows_f32(dS.data(), kPk, tq, sk, dSb.data(), kPk / 2);
            }
            // dV += P^T . dO and dK += dS^T . Q (pairs along t), dQ += dS . K (pairs along s).
            pack_cols<Be>(Sc.data(), kPk, tq, sk, PT.data(), kPq / 2);
            pack_cols<Be>(dS.data(), kPk, tq, sk, dST.data(), kPq / 2);
            const uint32_t* dOt = dOv.data() + (g * TP + t0 / 2) * HC;
            const uint32_t* Qt = Qv.data() + (g * TP + t0 / 2) * HC;
            if (kv_started) {
              pair_rows<Be, 1>(sk, HC, PT.data(), kPq / 2, tqp, dOt, HC, dV.data(), HC);
              pair_rows<Be, 1>(sk, HC, dST.data(), kPq / 2, tqp, Qt, HC, dK.data(), HC);
            } else {
              pair_rows<Be, 0>(sk, HC, PT.data(), kPq / 2, tqp, dOt, HC, dV.data(), HC);
              pair_rows<Be, 0>(sk, HC, dST.data(), kPq / 2, tqp, Qt, HC, dK.data(), HC);
              kv_started = true;
            }
            float* dQt = dQ.data() + (g * T_ + t0) * HC;
            if (s0 > 0) pair_rows<Be, 1>(tq, HC, dSb.data(), kPk / 2, skp, Kv.data(), HC, dQt, HC);
            else pair_rows<Be, 0>(tq, HC, dSb.data(), kPk / 2, skp, Kv.data(), HC, dQt, HC);
          }
          if (dbias && !p.dbias_chunk && tstart > 0)  // rows the causal skip never visits: zero gradient
            for (int64_t t = 0; t < std::min(tstart, T_); ++t) {
              float* row = dbias + p.dbias_off(b, n, t) + s0;
              for (int64_t j = 0; j < sk; ++j) row[j] = 0.0f;
            }
        }
        if (!kv_started) {  // no query row sees these keys (causal): zero gradients
          std::fill(dK.begin(), dK.end(), 0.0f);
          std::fill(dV.begin(), dV.end(), 0.0f);
        }
        for (int64_t j = 0; j < sk; ++j) {
          bf16* dks = dk + (b * p.S + s0 + j) * p.lddk() + kh * H;
          bf16* dvs = dv + (b * p.S + s0 + j) * p.lddv() + kh * H;
          narrow_row(dK.data() + j * HC, H, 1.0f, dks);
          narrow_row(dV.data() + j * HC, H, 1.0f, dvs);
        }
      }
      for (int64_t g = 0; g < G; ++g) {
        const int64_t n = kh * G + g;
        for (int64_t t = 0; t < T_; ++t) {
          bf16* dst = dq + (b * T_ + t) * p.lddq() + n * H;
          const float* src = dQ.data() + (g * T_ + t) * HC;
          narrow_row(src, H, 1.0f, dst);
        }
      }
    }
  });
}

}  // namespace
}  // namespace podlet::kernels

// Defines the bf16 entry points of one build over a pair backend D (HwPairs, EmuPairs).
#define PODLET_ATTN_PAIRS_DEFINE(SUFFIX, D)                                                                       \
  namespace podlet::kernels {                                                                                     \
  void attention_fwd_##SUFFIX(const Attn& p, const bf16* q, const bf16* k, const bf16* v, bf16* out, float* lse) { \
    fwd_pairs<D>(p, q, k, v, out, lse);                                                                           \
  }                                                                                                               \
  void attention_bwd_##SUFFIX(const Attn& p, const bf16* q, const bf16* k, const bf16* v, const bf16* out,      \
                              const float* lse, const bf16* dout, bf16* dq, bf16* dk, bf16* dv, float* dbias) {  \
    bwd_pairs<D>(p, q, k, v, out, lse, dout, dq, dk, dv, dbias);                                                  \
  }                                                                                                               \
  }
