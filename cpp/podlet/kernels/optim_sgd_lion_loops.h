// The element loops of the fused SGD-with-momentum and Lion updates (see
// kernels/optim_sgd_lion.h; the op sequence is explained in prims/optim_sgd_lion.cc).
// Internal linkage throughout (see kernels/optim_lanes.h): each translation unit that
// includes this compiles its own copy for its own ISA.
#pragma once
#include "podlet/kernels/optim_lanes.h"
#include "podlet/kernels/optim_sgd_lion.h"

namespace podlet::kernels {
namespace {

// A chunk is a function of its own so that every pointer is a restrict argument and
// every constant a local: read through a lambda's closure, the compiler must assume each
// store may change them, and the loop does not vectorise.
template <class T, bool kClip, bool kNesterov, bool kApply>
void sgd_chunk(const T* __restrict p, const T* __restrict gr, const T* __restrict tr, T* __restrict o,
               T* __restrict to, const SgdStep& s, int64_t b, int64_t e) {
  using L = Lane<T>;
  using A = typename L::A;
  const A momentum = A(s.momentum), neg_lr = A(s.neg_lr), gnorm = A(s.gnorm), max_norm = A(s.max_norm);
  auto R = [](A x) { return L::round(x); };  // an intermediate rounded to T (no-op for f32/f64)
  for (int64_t i = b; i < e; ++i) {
    A g = L::load(gr, i);
    if constexpr (kClip) g = R(R(g / gnorm) * max_norm);
    const A t = R(add_first(g, R(momentum * L::load(tr, i))));
    A u = t;
    if constexpr (kNesterov) u = R(add_first(g, R(momentum * t)));
    u = R(neg_lr * u);
    if constexpr (kApply) L::store(o, i, add_first(L::load(p, i), u));
    else L::store(o, i, u);
    L::store(to, i, t);
  }
}

template <class T, bool kClip, bool kDecay, bool kApply>
void lion_chunk(const T* __restrict p, const T* __restrict gr, const T* __restrict m, T* __restrict o,
                T* __restrict mo, const LionStep& s, int64_t b, int64_t e) {
  using L = Lane<T>;
  using A = typename L::A;
  const A one_m_b1 = A(s.one_m_b1), b1 = A(s.b1), one_m_b2 = A(s.one_m_b2), b2 = A(s.b2), wd = A(s.wd);
  const A neg_lr = A(s.neg_lr), gnorm = A(s.gnorm), max_norm = A(s.max_norm);
  auto R = [](A x) { return L::round(x); };
  for (int64_t i = b; i < e; ++i) {
    A g = L::load(gr, i);
    if constexpr (kClip) g = R(R(g / gnorm) * max_norm);
    const A mi = L::load(m, i);
    const A x = R(add_first(R(one_m_b1 * g), R(b1 * mi)));
    // podlet's sign: +-1, or x itself for +-0 and NaN (exact in T, no rounding needed).
    A u = x > A(0) ? A(1) : (x < A(0) ? A(-1) : x);
    if constexpr (kDecay) u = R(add_first(u, R(wd * L::load(p, i))));
    u = R(neg_lr * u);
    if constexpr (kApply) L::store(o, i, add_first(L::load(p, i), u));
    else L::store(o, i, u);
    L::store(mo, i, add_first(R(one_m_b2 * g), R(b2 * mi)));
  }
}

// The flags as template parameters (no branch in the element loop): index
// clip * 4 + (nesterov | decay) * 2 + apply.
template <class T, int kFlags>
void sgd_flags(const SgdStep& s, int64_t b, int64_t e) {
  const UpdateBuffers& u = s.buf;
  sgd_chunk<T, (kFlags & 4) != 0, (kFlags & 2) != 0, (kFlags & 1) != 0>(
      static_cast<const T*>(u.p), static_cast<const T*>(u.g), static_cast<const T*>(u.s), static_cast<T*>(u.o),
      static_cast<T*>(u.so), s, b, e);
}

template <class T, int kFlags>
void lion_flags(const LionStep& s, int64_t b, int64_t e) {
  const UpdateBuffers& u = s.buf;
  lion_chunk<T, (kFlags & 4) != 0, (kFlags & 2) != 0, (kFlags & 1) != 0>(
      static_cast<const T*>(u.p), static_cast<const T*>(u.g), static_cast<const T*>(u.s), static_cast<T*>(u.o),
      static_cast<T*>(u.so), s, b, e);
}

// F<T, flags>(step, b, e) for the step's dtype and flags; false for a dtype it has no loop for.
template <template <class, int> class Run, class Step>
bool dispatch_update(const Step& s, int flags, int64_t b, int64_t e) {
  auto typed = [&](auto tag) {
    using T = decltype(tag);
    switch (flags) {
      case 0: Run<T, 0>::go(s, b, e); break;
      case 1: Run<T, 1>::go(s, b, e); break;
      case 2: Run<T, 2>::go(s, b, e); break;
      case 3: Run<T, 3>::go(s, b, e); break;
      case 4: Run<T, 4>::go(s, b, e); break;
      case 5: Run<T, 5>::go(s, b, e); break;
      case 6: Run<T, 6>::go(s, b, e); break;
      default: Run<T, 7>::go(s, b, e); break;
    }
  };
  switch (s.buf.dtype) {
    case DType::f32: typed(float()); return true;
    case DType::bf16: typed(bf16()); return true;
    case DType::f64: typed(double()); return true;
    default: return false;
  }
}

template <class T, int kFlags> struct SgdRun {
  static void go(const SgdStep& s, int64_t b, int64_t e) { sgd_flags<T, kFlags>(s, b, e); }
};
template <class T, int kFlags> struct LionRun {
  static void go(const LionStep& s, int64_t b, int64_t e) { lion_flags<T, kFlags>(s, b, e); }
};

inline bool sgd_momentum_loop(const SgdStep& s, int64_t b, int64_t e) {
  return dispatch_update<SgdRun>(s, (s.clip ? 4 : 0) | (s.nesterov ? 2 : 0) | (s.apply ? 1 : 0), b, e);
}

inline bool lion_loop(const LionStep& s, int64_t b, int64_t e) {
  return dispatch_update<LionRun>(s, (s.clip ? 4 : 0) | (s.decay ? 2 : 0) | (s.apply ? 1 : 0), b, e);
}

}  // namespace
}  // namespace podlet::kernels
