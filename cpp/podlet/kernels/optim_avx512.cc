// AdamW on f32 parameters, AVX-512 (kernels/optim.h).
#include "podlet/kernels/optim.h"
#include "podlet/kernels/avx512_engine.h"
#include "podlet/kernels/first_nan_add.h"
#include <immintrin.h>
#include <cstdint>

namespace podlet::kernels {
namespace {

// The scalar loop's add_first (the unfused chain's add), for every add of two values
// that may both be NaN.
inline __m512 add_first(__m512 a, __m512 b) { return add_keep_first_nan(a, b); }

using Out = AdamWOut;

template <bool kClip, bool kDecay, Out kOut, bool kG16>
void run(const AdamWF32& a, int64_t b, int64_t e) {
  const __m512 one_m_b1 = _mm512_set1_ps(a.one_m_b1), b1 = _mm512_set1_ps(a.b1), one_m_b2 = _mm512_set1_ps(a.one_m_b2),
               b2 = _mm512_set1_ps(a.b2), eps = _mm512_set1_ps(a.eps), eps_root = _mm512_set1_ps(a.eps_root),
               wd = _mm512_set1_ps(a.wd), neg_lr = _mm512_set1_ps(a.neg_lr), bc1 = _mm512_set1_ps(a.bc1),
               bc2 = _mm512_set1_ps(a.bc2), gnorm = _mm512_set1_ps(a.gnorm), max_norm = _mm512_set1_ps(a.max_norm),
               c_old = _mm512_set1_ps(a.ema_c_old), c_new = _mm512_set1_ps(a.ema_c_new);
  constexpr bool kEma = kOut == Out::kApplyEma || kOut == Out::kApplyEmaNewFirst;
  // Elements [i, i + 16) under mask k; streamed when `nt` (whole aligned vectors).
  auto step = [&](int64_t i, __mmask16 k, bool nt) {
    const __m512 pi = _mm512_maskz_loadu_ps(k, a.p + i);
    __m512 g;
    if constexpr (kG16) g = maskload16(reinterpret_cast<const bf16*>(a.g16 + i), k);
    else g = _mm512_maskz_loadu_ps(k, a.g + i);
    if constexpr (kClip) g = _mm512_mul_ps(_mm512_div_ps(g, gnorm), max_norm);
    const __m512 mu = add_first(_mm512_mul_ps(one_m_b1, g), _mm512_mul_ps(b1, _mm512_maskz_loadu_ps(k, a.m + i)));
    const __m512 nu = add_first(_mm512_mul_ps(one_m_b2, _mm512_mul_ps(g, g)),
                                _mm512_mul_ps(b2, _mm512_maskz_loadu_ps(k, a.v + i)));
    const __m512 mu_hat = _mm512_div_ps(mu, bc1), nu_hat = _mm512_div_ps(nu, bc2);
    __m512 u = _mm512_div_ps(mu_hat, _mm512_add_ps(_mm512_sqrt_ps(_mm512_add_ps(nu_hat, eps_root)), eps));
    if constexpr (kDecay) u = add_first(u, _mm512_mul_ps(wd, pi));
    u = _mm512_mul_ps(neg_lr, u);
    auto put = [&](float* d, __m512 x) {
      if (nt) _mm512_stream_ps(d + i, x);
      else _mm512_mask_storeu_ps(d + i, k, x);
    };
    if constexpr (kOut == Out::kUpdate) {
      put(a.o, u);
    } else {
      const __m512 np = add_first(pi, u);
      put(a.o, np);
      if constexpr (kEma) {
        const __m512 old = _mm512_mul_ps(c_old, _mm512_maskz_loadu_ps(k, a.ema + i)), nw = _mm512_mul_ps(c_new, np);
        put(a.eo, kOut == Out::kApplyEma ? add_first(old, nw) : add_first(nw, old));
      }
    }
    put(a.mo, mu);
    put(a.vo, nu);
  };
  // Streams need 64-byte aligned rows: peel up to the first aligned o, and stream only
  // when every output is aligned there (pool buffers all are).
  int64_t i = b;
  if (a.stream) {
    const int64_t head = int64_t((64 - (reinterpret_cast<uintptr_t>(a.o + b) & 63)) & 63) / 4;
    if (head && i + head <= e) {
      step(i, __mmask16((1u << head) - 1u), false);
      i += head;
    }
  }
  auto aligned = [&](const float* d) { return !d || !(reinterpret_cast<uintptr_t>(d + i) & 63); };
  const bool nt = a.stream && aligned(a.o) && aligned(a.mo) && aligned(a.vo) && (!kEma || aligned(a.eo));
  for (; i + 16 <= e; i += 16) step(i, __mmask16(0xffff), nt);
  if (i < e) step(i, __mmask16((1u << (e - i)) - 1u), false);
  if (nt) _mm_sfence();
}

template <bool kClip, bool kDecay, bool kG16>
void run_out(const AdamWF32& a, int64_t b, int64_t e) {
  switch (a.out) {
    case Out::kUpdate: return run<kClip, kDecay, Out::kUpdate, kG16>(a, b, e);
    case Out::kApply: return run<kClip, kDecay, Out::kApply, kG16>(a, b, e);
    case Out::kApplyEma: return run<kClip, kDecay, Out::kApplyEma, kG16>(a, b, e);
    case Out::kApplyEmaNewFirst: return run<kClip, kDecay, Out::kApplyEmaNewFirst, kG16>(a, b, e);
  }
}

template <bool kClip, bool kDecay>
void run_grads(const AdamWF32& a, int64_t b, int64_t e) {
  if (a.g16) run_out<kClip, kDecay, true>(a, b, e); else run_out<kClip, kDecay, false>(a, b, e);
}

}  // namespace

void adamw_f32_avx512(const AdamWF32& a, int64_t b, int64_t e) {
  if (a.clip) {
    if (a.decay) run_grads<true, true>(a, b, e); else run_grads<true, false>(a, b, e);
  } else {
    if (a.decay) run_grads<false, true>(a, b, e); else run_grads<false, false>(a, b, e);
  }
}

}  // namespace podlet::kernels
