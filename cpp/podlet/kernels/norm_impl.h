// The fused row kernels' one source (see norm.h), included by each ISA's translation unit
// with its own flags. Internal linkage (anonymous namespace), so no ISA's copy can stand
// in for another's.
//
// Every loop is lane-wise: elementwise loops over a row, and row sums into 16 lane
// accumulators combined by a fixed tree. No loop reduces into one scalar, so the
// vectorised builds add in the reference's order and give its bits.
#pragma once
#include "podlet/kernels/local_vec.h"
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include "podlet/kernels/fastmath.h"
#include "podlet/kernels/norm.h"
#include "podlet/parallel.h"

// Vectors of GCC's extension pass between inline functions of this header only (internal
// linkage), so the ABI note about 32-byte vectors without AVX does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace podlet::kernels {
namespace {
namespace nk {

constexpr int kLanes = 16;
constexpr int64_t kBwdBlock = 32;        // rows per dscale / dbias partial (fixed: thread-count free)
constexpr int64_t kChunkElems = 16384;   // elements per parallel chunk of the forward passes

typedef uint32_t u32x8 __attribute__((vector_size(32)));
typedef uint16_t u16x8 __attribute__((vector_size(16)));

template <class A> inline A exp_a(A x) { return std::exp(x); }
template <> inline float exp_a<float>(float x) { return fm::exp(x); }
template <class A> inline A log_a(A x) { return std::log(x); }
template <> inline float log_a<float>(float x) { return fm::log(x); }

// A row of T as A: the row itself when T is A, else widened into buf.
template <class T, class A>
inline const A* widen_row(const T* src, int64_t C, A* buf) {
  if constexpr (std::is_same_v<T, A>) {
    return src;
  } else if constexpr (std::is_same_v<T, bf16>) {
    const uint16_t* u = reinterpret_cast<const uint16_t*>(src);
    int64_t j = 0;
    for (; j + 8 <= C; j += 8) {  // 8 at a time (GCC vectorised the plain loop 4 wide)
      u16x8 h;
      std::memcpy(&h, u + j, sizeof h);
      const u32x8 w = __builtin_convertvector(h, u32x8) << 16;
      std::memcpy(buf + j, &w, sizeof w);
    }
    for (; j < C; ++j) buf[j] = fm::from_bits(uint32_t(u[j]) << 16);
    return buf;
  } else {
    for (int64_t j = 0; j < C; ++j) buf[j] = A(src[j]);
    return buf;
  }
}

// Where a result row of O is computed: in place when O is A, else in buf (then narrow_row).
template <class O, class A>
inline A* out_row(O* dst, A* buf) {
  if constexpr (std::is_same_v<O, A>) return dst;
  else return buf;
}
template <class O, class A>
inline void narrow_row(const A* src, int64_t C, O* dst) {
  if constexpr (std::is_same_v<O, A>) {
    return;
  } else if constexpr (std::is_same_v<O, bf16>) {
    uint16_t* u = reinterpret_cast<uint16_t*>(dst);
    int64_t j = 0;
    for (; j + 8 <= C; j += 8) {  // f32_to_bf16_bits on 8 lanes
      u32x8 b;
      std::memcpy(&b, src + j, sizeof b);
      const u32x8 r = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
      const u32x8 nan = ((b >> 16) & 0x8000u) | 0x7fc0u;
      const u16x8 h = __builtin_convertvector((b & 0x7fffffffu) > 0x7f800000u ? nan : r, u16x8);
      std::memcpy(u + j, &h, sizeof h);
    }
    for (; j < C; ++j) u[j] = f32_to_bf16_bits(src[j]);
  } else {
    for (int64_t j = 0; j < C; ++j) dst[j] = O(src[j]);
  }
}

template <class A>
inline A tree(A* acc) {
  for (int w = kLanes / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] = acc[l] + acc[l + w];
  return acc[0];
}

// Lanes 0-7 and 8-15 as two vectors of GCC's vector extension: one ymm each in the AVX2
// build, split into SSE2 halves in the baseline one, the same IEEE operation per lane
// either way. (Written as plain loops over 16 lanes, GCC vectorised the row loop instead,
// with permutes and spills: 3x slower.)
template <class A> struct Vec;
template <> struct Vec<float> { typedef float type __attribute__((vector_size(32))); };
template <> struct Vec<double> { typedef double type __attribute__((vector_size(64))); };
template <class A> using vec = typename Vec<A>::type;
constexpr int kHalf = kLanes / 2;

template <class A>
inline vec<A> vload(const A* p) {
  vec<A> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class A>
inline void vstore(A* acc, const vec<A>& lo, const vec<A>& hi) {
  std::memcpy(acc, &lo, sizeof lo);
  std::memcpy(acc + kHalf, &hi, sizeof hi);
}

// fm::exp on 8 lanes, the same operations in the same order (so the same bits), written on
// vectors so that the softmax loop can keep four independent exp chains in flight: the
// auto-vectorised loop ran one ymm chain at a time, latency-bound on short rows.
typedef int32_t i32x8 __attribute__((vector_size(32)));
typedef float f32x8 __attribute__((vector_size(32)));
inline f32x8 splat(float c) { return f32x8{} + c; }
inline f32x8 exp2i8(i32x8 n) {
  const i32x8 b = (n + 127) << 23;
  f32x8 f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}
inline f32x8 vexp(f32x8 x) {
  f32x8 xc = x < splat(-104.0f) ? splat(-104.0f) : x;
  xc = xc > splat(89.0f) ? splat(89.0f) : xc;
  xc = x == x ? xc : splat(0.0f);
  const f32x8 fn = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const i32x8 n = __builtin_convertvector(fn, i32x8);
  f32x8 r = xc - fn * 0.693359375f;
  r = r - fn * -2.12194440e-4f;
  const f32x8 z = r * r;
  f32x8 p = splat(1.9875691500E-4f);
  p = p * r + 1.3981999507E-3f;
  p = p * r + 8.3334519073E-3f;
  p = p * r + 4.1665795894E-2f;
  p = p * r + 1.6666665459E-1f;
  p = p * r + 5.0000001201E-1f;
  p = p * z + r + 1.0f;
  const i32x8 n1 = n >> 1, n2 = n - n1;
  const f32x8 y = p * exp2i8(n1) * exp2i8(n2);
  return x == x ? y : x;
}

// e[j] = exp(d[j]) for j < Cp (a multiple of 8): four vectors at a time.
template <class A>
inline void exp_row(const A* d, int64_t Cp, A* e) {
  if constexpr (std::is_same_v<A, float>) {
    int64_t j = 0;
    for (; j + 32 <= Cp; j += 32) {
      f32x8 x0, x1, x2, x3;
      std::memcpy(&x0, d + j, 32);
      std::memcpy(&x1, d + j + 8, 32);
      std::memcpy(&x2, d + j + 16, 32);
      std::memcpy(&x3, d + j + 24, 32);
      const f32x8 y0 = vexp(x0), y1 = vexp(x1), y2 = vexp(x2), y3 = vexp(x3);
      std::memcpy(e + j, &y0, 32);
      std::memcpy(e + j + 8, &y1, 32);
      std::memcpy(e + j + 16, &y2, 32);
      std::memcpy(e + j + 24, &y3, 32);
    }
    for (; j < Cp; j += 8) {
      f32x8 x0;
      std::memcpy(&x0, d + j, 32);
      const f32x8 y0 = vexp(x0);
      std::memcpy(e + j, &y0, 32);
    }
  } else {
    for (int64_t j = 0; j < Cp; ++j) e[j] = exp_a(d[j]);
  }
}

// sum(v), element j in lane j % 16.
template <class A>
inline A lane_sum(const A* v, int64_t C) {
  vec<A> lo = {}, hi = {};
  int64_t j = 0;
  for (; j + kLanes <= C; j += kLanes) {
    lo = lo + vload(v + j);
    hi = hi + vload(v + j + kHalf);
  }
  A acc[kLanes];
  vstore(acc, lo, hi);
  for (int l = 0; j + l < C; ++l) acc[l] = acc[l] + v[j + l];
  return tree(acc);
}

// sum(a * b).
template <class A>
inline A lane_dot(const A* a, const A* b, int64_t C) {
  vec<A> lo = {}, hi = {};
  int64_t j = 0;
  for (; j + kLanes <= C; j += kLanes) {
    lo = lo + vload(a + j) * vload(b + j);
    hi = hi + vload(a + j + kHalf) * vload(b + j + kHalf);
  }
  A acc[kLanes];
  vstore(acc, lo, hi);
  for (int l = 0; j + l < C; ++l) acc[l] = acc[l] + a[j + l] * b[j + l];
  return tree(acc);
}

// sum(v) and sum(v * v) in one pass.
template <class A>
inline void lane_sum2(const A* v, int64_t C, A& s1, A& s2) {
  vec<A> lo1 = {}, hi1 = {}, lo2 = {}, hi2 = {};
  int64_t j = 0;
  for (; j + kLanes <= C; j += kLanes) {
    const vec<A> x0 = vload(v + j), x1 = vload(v + j + kHalf);
    lo1 = lo1 + x0;
    hi1 = hi1 + x1;
    lo2 = lo2 + x0 * x0;
    hi2 = hi2 + x1 * x1;
  }
  A a1[kLanes], a2[kLanes];
  vstore(a1, lo1, hi1);
  vstore(a2, lo2, hi2);
  for (int l = 0; j + l < C; ++l) {
    const A x = v[j + l];
    a1[l] = a1[l] + x;
    a2[l] = a2[l] + x * x;
  }
  s1 = tree(a1);
  s2 = tree(a2);
}

// max(v) (-inf for an empty row). A NaN is skipped here; it makes the row NaN later
// (exp(NaN - m) enters the sum), as jax's NaN max does.
template <class A>
inline A lane_max(const A* v, int64_t C) {
  const A ninf = -std::numeric_limits<A>::infinity();
  vec<A> lo = ninf - vec<A>{}, hi = lo;
  int64_t j = 0;
  for (; j + kLanes <= C; j += kLanes) {
    const vec<A> x0 = vload(v + j), x1 = vload(v + j + kHalf);
    lo = x0 > lo ? x0 : lo;
    hi = x1 > hi ? x1 : hi;
  }
  A acc[kLanes];
  vstore(acc, lo, hi);
  for (int l = 0; j + l < C; ++l) acc[l] = v[j + l] > acc[l] ? v[j + l] : acc[l];
  for (int w = kLanes / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] = acc[l + w] > acc[l] ? acc[l + w] : acc[l];
  return acc[0];
}

template <class T, class O, class A>
void ln_fwd(const NormRows& p, const T* x, const A* scale, const A* bias, O* y, A* mean, A* rstd) {
  const int64_t C = p.C;
  const A n = A(C), eps = A(p.eps);
  parallel_for(p.rows, std::max<int64_t>(1, kChunkElems / std::max<int64_t>(C, 1)), [&](int64_t r0, int64_t r1) {
    LocalVec<A> xb(std::is_same_v<T, A> ? 0 : C), yb(std::is_same_v<O, A> ? 0 : C);
    for (int64_t r = r0; r < r1; ++r) {
      const A* xr = widen_row(x + r * C, C, xb.data());
      A s1, s2, mu = A(0), var;
      lane_sum2(xr, C, s1, s2);
      if (p.use_mean) {
        mu = s1 / n;
        var = s2 / n - mu * mu;
        var = var < A(0) ? A(0) : var;  // jnp.maximum(0, .): NaN stays NaN
      } else {
        var = s2 / n;
      }
      const A rs = A(1) / std::sqrt(var + eps);
      mean[r] = mu;
      rstd[r] = rs;
      A* yr = out_row<O, A>(y + r * C, yb.data());
      if (p.use_mean) {
        if (scale && bias)
          for (int64_t j = 0; j < C; ++j) yr[j] = (xr[j] - mu) * (rs * scale[j]) + bias[j];
        else if (scale)
          for (int64_t j = 0; j < C; ++j) yr[j] = (xr[j] - mu) * (rs * scale[j]);
        else if (bias)
          for (int64_t j = 0; j < C; ++j) yr[j] = (xr[j] - mu) * rs + bias[j];
        else
          for (int64_t j = 0; j < C; ++j) yr[j] = (xr[j] - mu) * rs;
      } else {  // x - 0 is x
        if (scale && bias)
          for (int64_t j = 0; j < C; ++j) yr[j] = xr[j] * (rs * scale[j]) + bias[j];
        else if (scale)
          for (int64_t j = 0; j < C; ++j) yr[j] = xr[j] * (rs * scale[j]);
        else if (bias)
          for (int64_t j = 0; j < C; ++j) yr[j] = xr[j] * rs + bias[j];
        else
          for (int64_t j = 0; j < C; ++j) yr[j] = xr[j] * rs;
      }
      narrow_row(yr, C, y + r * C);
    }
  });
}

template <class T, class O, class A>
void ln_bwd(const NormRows& p, const O* dy, const T* x, const A* mean, const A* rstd, const A* scale, T* dx,
            A* dscale, A* dbias) {
  const int64_t C = p.C, rows = p.rows;
  const A n = A(C);
  const int64_t nblocks = std::max<int64_t>(1, (rows + kBwdBlock - 1) / kBwdBlock);
  LocalVec<A> part(size_t(nblocks) * size_t(C) * 2, A(0));
  parallel_for(rows, kBwdBlock, [&](int64_t r0, int64_t r1) {
    LocalVec<A> xb(std::is_same_v<T, A> ? 0 : C), db(std::is_same_v<O, A> ? 0 : C), xh(C),
        gb(scale ? C : 0), dxb(std::is_same_v<T, A> ? 0 : C);
    A* ps = part.data() + size_t(r0 / kBwdBlock) * size_t(C) * 2;
    A* pb = ps + C;
    for (int64_t r = r0; r < r1; ++r) {
      const A* xr = widen_row(x + r * C, C, xb.data());
      const A* dyr = widen_row(dy + r * C, C, db.data());
      const A mu = mean[r], rs = rstd[r];
      for (int64_t j = 0; j < C; ++j) xh[j] = (xr[j] - mu) * rs;
      const A* g = dyr;
      if (scale) {
        for (int64_t j = 0; j < C; ++j) gb[j] = dyr[j] * scale[j];
        g = gb.data();
      }
      const A mb = lane_dot(g, xh.data(), C) / n;
      A* dxr = out_row<T, A>(dx + r * C, dxb.data());
      if (p.use_mean) {
        const A ma = lane_sum(g, C) / n;
        for (int64_t j = 0; j < C; ++j) dxr[j] = ((g[j] - ma) - xh[j] * mb) * rs;
      } else {
        for (int64_t j = 0; j < C; ++j) dxr[j] = (g[j] - xh[j] * mb) * rs;
      }
      narrow_row(dxr, C, dx + r * C);
      for (int64_t j = 0; j < C; ++j) {
        ps[j] = ps[j] + dyr[j] * xh[j];
        pb[j] = pb[j] + dyr[j];
      }
    }
  });
  // The blocks' partials in block order, columns in parallel.
  parallel_for(C, 256, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      dscale[j] = A(0);
      dbias[j] = A(0);
    }
    for (int64_t k = 0; k < nblocks; ++k) {
      const A* ps = part.data() + size_t(k) * size_t(C) * 2;
      for (int64_t j = j0; j < j1; ++j) {
        dscale[j] = dscale[j] + ps[j];
        dbias[j] = dbias[j] + ps[C + j];
      }
    }
  });
}

template <class T, class A>
void sm_fwd(int64_t rows, int64_t C, bool log, const T* x, T* y) {
  parallel_for(rows, std::max<int64_t>(1, kChunkElems / std::max<int64_t>(C, 1)), [&](int64_t r0, int64_t r1) {
    // x - max, padded with -inf to a multiple of 8 lanes: the exp loop never runs its
    // scalar remainder (short rows: Swin's 49 keys), the padding's exp is never read.
    const int64_t Cp = (C + 7) / 8 * 8;
    LocalVec<A> xb(std::is_same_v<T, A> ? 0 : C), db(Cp, -std::numeric_limits<A>::infinity()), eb(Cp),
        yb(std::is_same_v<T, A> ? 0 : C);
    for (int64_t r = r0; r < r1; ++r) {
      const A* xr = widen_row(x + r * C, C, xb.data());
      const A m = lane_max(xr, C);
      for (int64_t j = 0; j < C; ++j) db[j] = xr[j] - m;
      exp_row(db.data(), Cp, eb.data());
      const A s = lane_sum(eb.data(), C);
      A* yr = out_row<T, A>(y + r * C, yb.data());
      if (log) {
        const A l = log_a(s);
        for (int64_t j = 0; j < C; ++j) yr[j] = db[j] - l;
      } else {
        for (int64_t j = 0; j < C; ++j) yr[j] = eb[j] / s;
      }
      narrow_row(yr, C, y + r * C);
    }
  });
}

template <class T, class A>
void sm_bwd(int64_t rows, int64_t C, bool log, const T* y, const T* dy, T* dx) {
  parallel_for(rows, std::max<int64_t>(1, kChunkElems / std::max<int64_t>(C, 1)), [&](int64_t r0, int64_t r1) {
    LocalVec<A> yb(std::is_same_v<T, A> ? 0 : C), db(std::is_same_v<T, A> ? 0 : C),
        xb(std::is_same_v<T, A> ? 0 : C);
    for (int64_t r = r0; r < r1; ++r) {
      const A* yr = widen_row(y + r * C, C, yb.data());
      const A* dyr = widen_row(dy + r * C, C, db.data());
      A* dxr = out_row<T, A>(dx + r * C, xb.data());
      if (log) {
        const A s = lane_sum(dyr, C);
        for (int64_t j = 0; j < C; ++j) dxr[j] = dyr[j] - exp_a(yr[j]) * s;
      } else {
        const A s = lane_dot(dyr, yr, C);
        for (int64_t j = 0; j < C; ++j) dxr[j] = yr[j] * (dyr[j] - s);
      }
      narrow_row(dxr, C, dx + r * C);
    }
  });
}

}  // namespace nk
}  // namespace
}  // namespace podlet::kernels

#define PODLET_NORM_DEFINE_TO(SUFFIX, T, O)                                                                     \
  void layer_norm_fwd_##SUFFIX(const NormRows& p, const T* x, const float* scale, const float* bias, O* y,      \
                               float* mean, float* rstd) {                                                    \
    nk::ln_fwd<T, O, float>(p, x, scale, bias, y, mean, rstd);                                                \
  }                                                                                                           \
  void layer_norm_bwd_##SUFFIX(const NormRows& p, const O* dy, const T* x, const float* mean, const float* rstd, \
                               const float* scale, T* dx, float* dscale, float* dbias) {                      \
    nk::ln_bwd<T, O, float>(p, dy, x, mean, rstd, scale, dx, dscale, dbias);                                  \
  }

#define PODLET_NORM_DEFINE(SUFFIX)                                                                            \
  namespace podlet::kernels {                                                                                 \
  PODLET_NORM_DEFINE_TO(SUFFIX, float, float)                                                                 \
  PODLET_NORM_DEFINE_TO(SUFFIX, float, bf16)                                                                  \
  PODLET_NORM_DEFINE_TO(SUFFIX, bf16, float)                                                                  \
  PODLET_NORM_DEFINE_TO(SUFFIX, bf16, bf16)                                                                   \
  void softmax_fwd_##SUFFIX(int64_t rows, int64_t C, bool log, const float* x, float* y) {                    \
    nk::sm_fwd<float, float>(rows, C, log, x, y);                                                             \
  }                                                                                                           \
  void softmax_fwd_##SUFFIX(int64_t rows, int64_t C, bool log, const bf16* x, bf16* y) {                      \
    nk::sm_fwd<bf16, float>(rows, C, log, x, y);                                                              \
  }                                                                                                           \
  void softmax_bwd_##SUFFIX(int64_t rows, int64_t C, bool log, const float* y, const float* dy, float* dx) {   \
    nk::sm_bwd<float, float>(rows, C, log, y, dy, dx);                                                        \
  }                                                                                                           \
  void softmax_bwd_##SUFFIX(int64_t rows, int64_t C, bool log, const bf16* y, const bf16* dy, bf16* dx) {     \
    nk::sm_bwd<bf16, float>(rows, C, log, y, dy, dx);                                                         \
  }                                                                                                           \
  }
