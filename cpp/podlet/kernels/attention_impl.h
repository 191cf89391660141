// The fused attention kernels' one source (see attention.h), included by each ISA's
// translation unit with its own flags. Internal linkage (anonymous namespace), so no
// ISA's copy can stand in for another's.
//
// Inner loops run over independent lanes: the score tile is built as h-outer, s-inner
// axpys against a transposed key tile, the value and gradient products as axpys over h.
// No loop reduces into one scalar across lanes, so vectorised and scalar builds add in
// the same order and give the same bits.
#pragma once
#include "podlet/kernels/local_vec.h"
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include "podlet/kernels/attention.h"
#include "podlet/kernels/fastmath.h"
#include "podlet/parallel.h"

namespace podlet::kernels {
namespace {

constexpr int64_t kTq = 16;  // query rows per tile
constexpr int64_t kSk = 64;  // key rows per tile

template <class A> inline A exp_a(A x) { return std::exp(x); }
template <> inline float exp_a<float>(float x) { return fm::exp(x); }
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

template <class T, class A>
struct Ctx {
  const Attn& p;
  const T *q, *k, *v;
  int64_t G;
  A scale;
  bool skip_causal;  // causal is the only row-emptying mask: tiles above the diagonal are skipped
  bool masked;       // any mask at all (else no per-element test)

  explicit Ctx(const Attn& p_, const T* q_, const T* k_, const T* v_)
      : p(p_), q(q_), k(k_), v(v_), G(p_.N / p_.K), scale(A(p_.scale)),
        skip_causal(p_.causal && !p_.mask && !p_.qlen && !p_.kvlen && p_.win_left < 0 && p_.win_right < 0),
        masked(p_.causal || p_.mask || p_.qlen || p_.kvlen || p_.win_left >= 0 || p_.win_right >= 0) {}

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

  // rows [t0, t0+tq) of head n as A, [tq][H]
  void load_q(int64_t b, int64_t n, int64_t t0, int64_t tq, A* Q) const {
    const int64_t H = p.H;
    for (int64_t i = 0; i < tq; ++i) {
      const T* src = q + ((b * p.T + t0 + i) * p.N + n) * H;
      for (int64_t h = 0; h < H; ++h) Q[i * H + h] = A(widen(src[h]));
    }
  }

  // key rows [s0, s0+sk) of kv head kh: transposed Kt [H][kSk], and row-major Kr [sk][H]
  void load_kv(const T* x, int64_t b, int64_t kh, int64_t s0, int64_t sk, A* rows) const {
    const int64_t H = p.H;
    for (int64_t j = 0; j < sk; ++j) {
      const T* src = x + ((b * p.S + s0 + j) * p.K + kh) * H;
      for (int64_t h = 0; h < H; ++h) rows[j * H + h] = A(widen(src[h]));
    }
  }
  static void transpose(const A* rows, int64_t sk, int64_t H, A* cols) {
    for (int64_t j = 0; j < sk; ++j)
      for (int64_t h = 0; h < H; ++h) cols[h * kSk + j] = rows[j * H + h];
  }

  // The tile's logits [tq][kSk]: (Q . K^T) * scale + bias, masked.
  void logits(int64_t b, int64_t n, int64_t t0, int64_t tq, int64_t s0, int64_t sk, const A* Q, const A* Kt,
              A* Sc) const {
    const int64_t H = p.H;
    for (int64_t i = 0; i < tq; ++i) {
      A* row = Sc + i * kSk;
      for (int64_t j = 0; j < sk; ++j) row[j] = A(0);
      for (int64_t h = 0; h < H; ++h) {
        const A qv = Q[i * H + h];
        const A* kc = Kt + h * kSk;
        for (int64_t j = 0; j < sk; ++j) row[j] = fmadd(qv, kc[j], row[j]);
      }
      for (int64_t j = 0; j < sk; ++j) row[j] *= scale;
      if (p.bias) {
        const A* bb = static_cast<const A*>(p.bias) + b * p.bias_st[0] + n * p.bias_st[1] + (t0 + i) * p.bias_st[2];
        for (int64_t j = 0; j < sk; ++j) row[j] += bb[(s0 + j) * p.bias_st[3]];
      }
      if (masked)
        for (int64_t j = 0; j < sk; ++j)
          if (!allowed(b, n, t0 + i, s0 + j)) row[j] = kMasked<A>;
    }
  }

  int64_t key_end(int64_t t0, int64_t tq) const {
    return skip_causal ? std::min(p.S, t0 + tq) : p.S;  // last row t0+tq-1 sees s <= t0+tq-1
  }
};

template <class T, class A>
void fwd_impl(const Attn& p, const T* q, const T* k, const T* v, T* out, A* lse) {
  Ctx<T, A> c(p, q, k, v);
  const int64_t H = p.H, nt = (p.T + kTq - 1) / kTq;
  parallel_for(p.B * p.N * nt, 1, [&](int64_t lo, int64_t hi) {
    LocalVec<A> Q(kTq * H), Kr(kSk * H), Kt(H * kSk), V(kSk * H), Sc(kTq * kSk), acc(kTq * H), m(kTq), l(kTq);
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t b = task / (p.N * nt), n = task / nt % p.N, t0 = task % nt * kTq;
      const int64_t tq = std::min(kTq, p.T - t0), kh = n / c.G;
      c.load_q(b, n, t0, tq, Q.data());
      std::fill(acc.begin(), acc.end(), A(0));
      std::fill(m.begin(), m.end(), -std::numeric_limits<A>::infinity());
      std::fill(l.begin(), l.end(), A(0));
      const int64_t send = c.key_end(t0, tq);
      for (int64_t s0 = 0; s0 < send; s0 += kSk) {
        const int64_t sk = std::min(kSk, send - s0);
        c.load_kv(k, b, kh, s0, sk, Kr.data());
        Ctx<T, A>::transpose(Kr.data(), sk, H, Kt.data());
        c.load_kv(v, b, kh, s0, sk, V.data());
        c.logits(b, n, t0, tq, s0, sk, Q.data(), Kt.data(), Sc.data());
        for (int64_t i = 0; i < tq; ++i) {
          A* row = Sc.data() + i * kSk;
          A mx = m[i];
          for (int64_t j = 0; j < sk; ++j) mx = std::max(mx, row[j]);
          const A alpha = m[i] == -std::numeric_limits<A>::infinity() ? A(0) : exp_a<A>(m[i] - mx);
          for (int64_t j = 0; j < sk; ++j) row[j] = exp_a<A>(row[j] - mx);
          A sum = A(0);
          for (int64_t j = 0; j < sk; ++j) sum += row[j];
          l[i] = l[i] * alpha + sum;
          m[i] = mx;
          A* ai = acc.data() + i * H;
          for (int64_t h = 0; h < H; ++h) ai[h] *= alpha;
          for (int64_t j = 0; j < sk; ++j) {
            const A pj = row[j];
            const A* vr = V.data() + j * H;
            for (int64_t h = 0; h < H; ++h) ai[h] = fmadd(pj, vr[h], ai[h]);
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
  parallel_for(p.B * p.K, 1, [&](int64_t lo, int64_t hi) {
    LocalVec<A> Q(G * T_ * H), dO(G * T_ * H), dQ(G * T_ * H), D(G * T_), L(G * T_);
    LocalVec<A> Kr(kSk * H), Kt(H * kSk), Vr(kSk * H), Vt(H * kSk), Sc(kTq * kSk), dS(kTq * kSk), dK(kSk * H),
        dV(kSk * H);
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t b = task / p.K, kh = task % p.K;
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
        c.load_kv(k, b, kh, s0, sk, Kr.data());
        Ctx<T, A>::transpose(Kr.data(), sk, H, Kt.data());
        c.load_kv(v, b, kh, s0, sk, Vr.data());
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
            for (int64_t i = 0; i < tq; ++i) {
              const int64_t t = t0 + i;
              A* prow = Sc.data() + i * kSk;
              A* drow = dS.data() + i * kSk;
              const A Lt = L[g * T_ + t];
              // A row with every position masked has lse = masked + log(S), which rounds to
              // the masked value itself: its probabilities are the uniform 1/S the forward used.
              if (Lt <= kMasked<A> * A(0.5)) {
                for (int64_t j = 0; j < sk; ++j) prow[j] = A(1) / A(p.S);
              } else {
                for (int64_t j = 0; j < sk; ++j) prow[j] = exp_a<A>(prow[j] - Lt);
              }
              for (int64_t j = 0; j < sk; ++j) drow[j] = A(0);
              const A* gi = dOt + i * H;
              for (int64_t h = 0; h < H; ++h) {
                const A gv = gi[h];
                const A* vc = Vt.data() + h * kSk;
                for (int64_t j = 0; j < sk; ++j) drow[j] = fmadd(gv, vc[j], drow[j]);
              }
              const A d = D[g * T_ + t];
              if (c.masked) {
                for (int64_t j = 0; j < sk; ++j)
                  drow[j] = c.allowed(b, n, t, s0 + j) ? prow[j] * (drow[j] - d) : A(0);
              } else {
                for (int64_t j = 0; j < sk; ++j) drow[j] = prow[j] * (drow[j] - d);
              }
              if (dbias) {
                A* row = dbias + ((b * p.N + n) * T_ + t) * p.S + s0;
                for (int64_t j = 0; j < sk; ++j) row[j] = drow[j];
              }
              const A* qi = Qt + i * H;
              A* dqi = dQ.data() + (g * T_ + t) * H;
              for (int64_t j = 0; j < sk; ++j) {
                const A pj = prow[j], dj = drow[j] * c.scale;
                A* dv_ = dV.data() + j * H;
                A* dk_ = dK.data() + j * H;
                const A* kr = Kr.data() + j * H;
                for (int64_t h = 0; h < H; ++h) dv_[h] = fmadd(pj, gi[h], dv_[h]);
                for (int64_t h = 0; h < H; ++h) dk_[h] = fmadd(dj, qi[h], dk_[h]);
                for (int64_t h = 0; h < H; ++h) dqi[h] = fmadd(dj, kr[h], dqi[h]);
              }
            }
          }
          if (dbias && tstart > 0)  // rows the causal skip never visits hold masked logits: zero gradient
            for (int64_t t = 0; t < std::min(tstart, T_); ++t) {
              A* row = dbias + ((b * p.N + n) * T_ + t) * p.S + s0;
              for (int64_t j = 0; j < sk; ++j) row[j] = A(0);
            }
        }
        for (int64_t j = 0; j < sk; ++j) {
          T* dks = dk + ((b * p.S + s0 + j) * p.K + kh) * H;
          T* dvs = dv + ((b * p.S + s0 + j) * p.K + kh) * H;
          for (int64_t h = 0; h < H; ++h) { dks[h] = narrow<T, A>(dK[j * H + h]); dvs[h] = narrow<T, A>(dV[j * H + h]); }
        }
      }
      for (int64_t g = 0; g < G; ++g) {
        const int64_t n = kh * G + g;
        for (int64_t t = 0; t < T_; ++t) {
          T* dst = dq + ((b * T_ + t) * p.N + n) * H;
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
