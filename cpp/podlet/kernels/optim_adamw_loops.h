// The element loop of adamw_update (prims/optim.cc holds the op sequence and why): one
// chunk [b, e) per call, every dtype and flag. Plain C++ compiled twice: for baseline
// x86-64 in prims/optim.cc (the `ref` path) and with AVX2 in kernels/optim_adamw_avx2.cc
// (-ffp-contract=off), where GCC vectorises it 8 lanes wide; every op is one IEEE
// operation per element, so both give the same bits. Internal linkage (optim_lanes.h).
#pragma once
#include <cmath>
#include "podlet/kernels/optim.h"
#include "podlet/kernels/optim_lanes.h"

namespace podlet::kernels {
namespace {

// A chunk is a function of its own so that every pointer is a restrict argument and every
// constant a local: read through a lambda's closure, the compiler must assume each store
// may change them, and the loop does not vectorise.
template <class T, class G, bool kClip, bool kDecay, AdamWOut kOut>
void adamw_chunk(const T* __restrict p, const G* __restrict gr, const T* __restrict m, const T* __restrict v,
                 const T* __restrict ema, T* __restrict o, T* __restrict mo, T* __restrict vo, T* __restrict eo,
                 const AdamWStep& c, int64_t b, int64_t e) {
  using L = Lane<T>;
  using A = typename L::A;
  const A one_m_b1 = A(c.one_m_b1), b1 = A(c.b1), one_m_b2 = A(c.one_m_b2), b2 = A(c.b2);
  const A eps = A(c.eps), eps_root = A(c.eps_root), wd = A(c.wd), neg_lr = A(c.neg_lr);
  const A bc1 = A(c.bc1), bc2 = A(c.bc2), gnorm = A(c.gnorm), max_norm = A(c.max_norm);
  const A ema_c_old = A(c.ema_c_old), ema_c_new = A(c.ema_c_new);
  auto R = [](A x) { return L::round(x); };  // an intermediate rounded to T (no-op for f32/f64)
  for (int64_t i = b; i < e; ++i) {
    const A pi = L::load(p, i);
    A g = A(Lane<G>::load(gr, i));  // a bf16 grad of an f32 param: widened, exactly
    if constexpr (kClip) g = R(R(g / gnorm) * max_norm);
    // The adds of two values that may both be NaN keep the first one's, as the unfused
    // chain's add does (a compiler may commute a plain a + b).
    const A mu = R(add_first(R(one_m_b1 * g), R(b1 * L::load(m, i))));
    const A nu = R(add_first(R(one_m_b2 * R(g * g)), R(b2 * L::load(v, i))));
    const A mu_hat = R(mu / bc1);
    const A nu_hat = R(nu / bc2);
    A u = R(mu_hat / R(R(std::sqrt(R(nu_hat + eps_root))) + eps));
    if constexpr (kDecay) u = R(add_first(u, R(wd * pi)));
    u = R(neg_lr * u);
    if constexpr (kOut == AdamWOut::kUpdate) {
      L::store(o, i, u);
    } else {
      const A np = R(add_first(pi, u));
      L::store(o, i, np);
      if constexpr (kOut == AdamWOut::kApplyEma)
        L::store(eo, i, add_first(R(ema_c_old * L::load(ema, i)), R(ema_c_new * np)));
      if constexpr (kOut == AdamWOut::kApplyEmaNewFirst)
        L::store(eo, i, add_first(R(ema_c_new * np), R(ema_c_old * L::load(ema, i))));
    }
    L::store(mo, i, mu);
    L::store(vo, i, nu);
  }
}

template <class T, class G, bool kClip, bool kDecay, AdamWOut kOut>
void adamw_typed(const AdamWStep& s, int64_t b, int64_t e) {
  adamw_chunk<T, G, kClip, kDecay, kOut>(static_cast<const T*>(s.p), static_cast<const G*>(s.g),
                                         static_cast<const T*>(s.m), static_cast<const T*>(s.v),
                                         static_cast<const T*>(s.ema), static_cast<T*>(s.o), static_cast<T*>(s.mo),
                                         static_cast<T*>(s.vo), static_cast<T*>(s.eo), s, b, e);
}

template <class T, class G, bool kClip, bool kDecay>
void adamw_out(const AdamWStep& s, int64_t b, int64_t e) {
  switch (s.out) {
    case AdamWOut::kUpdate: return adamw_typed<T, G, kClip, kDecay, AdamWOut::kUpdate>(s, b, e);
    case AdamWOut::kApply: return adamw_typed<T, G, kClip, kDecay, AdamWOut::kApply>(s, b, e);
    case AdamWOut::kApplyEma: return adamw_typed<T, G, kClip, kDecay, AdamWOut::kApplyEma>(s, b, e);
    case AdamWOut::kApplyEmaNewFirst: return adamw_typed<T, G, kClip, kDecay, AdamWOut::kApplyEmaNewFirst>(s, b, e);
  }
}

template <class T, class G> void adamw_flags(const AdamWStep& s, int64_t b, int64_t e) {
  if (s.clip) {
    if (s.decay) adamw_out<T, G, true, true>(s, b, e); else adamw_out<T, G, true, false>(s, b, e);
  } else {
    if (s.decay) adamw_out<T, G, false, true>(s, b, e); else adamw_out<T, G, false, false>(s, b, e);
  }
}

// false for a dtype it has no loop for.
inline bool adamw_loop(const AdamWStep& s, int64_t b, int64_t e) {
  switch (s.dtype) {
    case DType::f32: s.g16 ? adamw_flags<float, bf16>(s, b, e) : adamw_flags<float, float>(s, b, e); return true;
    case DType::bf16: adamw_flags<bf16, bf16>(s, b, e); return true;
    case DType::f64: s.g16 ? adamw_flags<double, bf16>(s, b, e) : adamw_flags<double, double>(s, b, e); return true;
    default: return false;
  }
}

}  // namespace
}  // namespace podlet::kernels
