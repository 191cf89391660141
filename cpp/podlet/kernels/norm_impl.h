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
#if defined(__AVX2__)
#include <immintrin.h>
#endif
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
constexpr int64_t kBwdTaskElems = 32768; // elements per task of the backward (whole blocks)
constexpr int64_t kChunkElems = 16384;   // elements per parallel chunk of the forward passes

typedef uint32_t u32x8 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));
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
inline void vput(A* p, const vec<A>& v) {
  std::memcpy(p, &v, sizeof v);
}
template <class A>
inline vec<A> vsplat(A c) {
  return c - vec<A>{};  // c - (+0) is c for every c, -0 included
}

// The row's last n < 16 elements as the two lane vectors, the lanes past them set to pad:
// a value that leaves a lane's accumulator as it is (-0.0 for a sum, -inf for a max), so
// the tail needs no scalar loop and adds into the same lanes as the full chunks. With AVX
// a masked load, which never touches memory past the row (tests/test_page_tails.py); a
// copy through the stack stalled each row on store forwarding.
template <class A, class V>
inline void tail_load(const A* p, int64_t n, A pad, V& lo, V& hi) {
#if defined(__AVX2__)
  if constexpr (std::is_same_v<A, float>) {
    const i32x8 iota = {0, 1, 2, 3, 4, 5, 6, 7};
    const i32x8 m0 = iota < int32_t(n), m1 = iota + 8 < int32_t(n);
    const V pv = vsplat(pad);
    lo = reinterpret_cast<V>(_mm256_maskload_ps(p, reinterpret_cast<__m256i>(m0)));
    hi = n > 8 ? reinterpret_cast<V>(_mm256_maskload_ps(p + 8, reinterpret_cast<__m256i>(m1))) : pv;
    lo = m0 ? lo : pv;
    hi = m1 ? hi : pv;
    return;
  }
#endif
  A buf[kLanes];
  for (int l = 0; l < kLanes; ++l) buf[l] = pad;
  std::memcpy(buf, p, size_t(n) * sizeof(A));
  lo = vload<A>(buf);
  hi = vload<A>(buf + kHalf);
}

// The 16 lanes combined by the fixed halving tree: lane l with lane l + w for w = 8, 4, 2,
// 1, the lower lane as the first operand (the reference's pairs and order, on vectors).
template <class V>
inline auto tree(const V& lo, const V& hi) {
  const V v = lo + hi;
  const V a = v + __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3);
  const V b = a + __builtin_shufflevector(a, a, 2, 3, 0, 1, 4, 5, 6, 7);
  return b[0] + b[1];
}
// The same tree for a max: lane l takes lane l + w where that one is greater.
template <class V>
inline auto tree_max(const V& lo, const V& hi) {
  const V v = hi > lo ? hi : lo;
  const V v4 = __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3);
  const V a = v4 > v ? v4 : v;
  const V a2 = __builtin_shufflevector(a, a, 2, 3, 0, 1, 4, 5, 6, 7);
  const V b = a2 > a ? a2 : a;
  return b[1] > b[0] ? b[1] : b[0];
}

// fm::exp on 8 lanes, the same operations in the same order (so the same bits), written on
// vectors so that the softmax loop can keep four independent exp chains in flight: the
// auto-vectorised loop ran one ymm chain at a time, latency-bound on short rows. (The
// AVX-512 builds have their own 16-lane form, norm_avx512_impl.h.)
typedef float f32x8 __attribute__((vector_size(32)));
template <class F, class I>
inline F exp2i(I n) {
  const I b = (n + 127) << 23;
  F f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}
// a * b + c per lane, rounded once (fm::fma_ on vectors): the instruction where the build
// has it, else fma_ lane by lane (the baseline build's calls to libm's fmaf).
inline f32x8 vfma(f32x8 a, f32x8 b, f32x8 c) {
#if defined(__FMA__)
  return reinterpret_cast<f32x8>(_mm256_fmadd_ps(reinterpret_cast<__m256>(a), reinterpret_cast<__m256>(b),
                                                 reinterpret_cast<__m256>(c)));
#else
  f32x8 r;
  for (int l = 0; l < 8; ++l) r[l] = fm::fma_(a[l], b[l], c[l]);
  return r;
#endif
}
// Lanes below the lower clamp (e^-104 rounds to +0: -inf pads, masked logits) are +0
// from a benign input: computed, their last product underflows, a slow path on AMD Zen 3 as
// on Intel (fastmath_avx512.h's vexp keeps them out of vscalefps for the same reason).
inline f32x8 vexp(f32x8 x) {
  typedef f32x8 F;
  const F lo = F{} - 104.0f, hi = F{} + 89.0f;
  F xc = x < lo ? F{} : x;
  xc = xc > hi ? hi : xc;
  xc = x == x ? xc : F{};
  const F fn = vfma(xc, F{} + 1.44269504088896341f, F{} + 12582912.0f) - 12582912.0f;
  F r = vfma(fn, F{} - 0.693359375f, xc);
  r = vfma(fn, F{} + 2.12194440e-4f, r);
  const F z = r * r;
  F p = vfma(F{} + 1.9875691500E-4f, r, F{} + 1.3981999507E-3f);
  p = vfma(p, r, F{} + 8.3334519073E-3f);
  p = vfma(p, r, F{} + 4.1665795894E-2f);
  p = vfma(p, r, F{} + 1.6666665459E-1f);
  p = vfma(p, r, F{} + 5.0000001201E-1f);
  p = vfma(p, z, r) + 1.0f;
  const i32x8 n = __builtin_convertvector(fn, i32x8);
  const i32x8 n1 = n >> 1, n2 = n - n1;
  const F y = p * exp2i<F>(n1) * exp2i<F>(n2);
  return x == x ? (x < lo ? F{} : y) : x;
}
// exp on the lane vectors: vexp for f32 (8-lane chains: GCC split a 16-lane form's FMAs
// through memory in the AVX2 build, softmax rows [37824, 197] f32 16.0 ms that way, 3.5 ms
// as ymm chains, AMD Zen 4), the scalar exp per lane for f64.
template <class V>
inline V vexp_a(const V& v) {
  if constexpr (std::is_same_v<V, f32x8>) {
    return vexp(v);
  } else {
    V e;
    for (int l = 0; l < kHalf; ++l) e[l] = exp_a(v[l]);
    return e;
  }
}

// e[j] = exp(v[j]) for j < C: eight lanes at a time, the last C % 8 by the scalar exp
// (the same bits).
template <class A>
inline void exp_row(const A* v, int64_t C, A* e) {
  int64_t j = 0;
  if constexpr (std::is_same_v<A, float>) {
    for (; j + 8 <= C; j += 8) {
      f32x8 x;
      std::memcpy(&x, v + j, 32);
      const f32x8 y = vexp(x);
      std::memcpy(e + j, &y, 32);
    }
  }
  for (; j < C; ++j) e[j] = exp_a(v[j]);
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
  if (j < C) {
    vec<A> t0, t1;
    tail_load(v + j, C - j, A(-0.0), t0, t1);
    lo = lo + t0;
    hi = hi + t1;
  }
  return tree(lo, hi);
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
  if (j < C) {  // (-0) * (+0) = -0 in the padded lanes
    vec<A> a0, a1, b0, b1;
    tail_load(a + j, C - j, A(-0.0), a0, a1);
    tail_load(b + j, C - j, A(0), b0, b1);
    lo = lo + a0 * b0;
    hi = hi + a1 * b1;
  }
  return tree(lo, hi);
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
  if (j < C) {  // the padded lanes add -0 to the sum and (-0)^2 = +0 to the sum of squares,
                // whose lanes are never -0 (they start at +0 and add squares)
    vec<A> x0, x1;
    tail_load(v + j, C - j, A(-0.0), x0, x1);
    lo1 = lo1 + x0;
    hi1 = hi1 + x1;
    lo2 = lo2 + x0 * x0;
    hi2 = hi2 + x1 * x1;
  }
  s1 = tree(lo1, hi1);
  s2 = tree(lo2, hi2);
}

// max(v) (-inf for an empty row). A NaN is skipped here; it makes the row NaN later
// (exp(NaN - m) enters the sum), as jax's NaN max does.
template <class A>
inline A lane_max(const A* v, int64_t C) {
  const A ninf = -std::numeric_limits<A>::infinity();
  vec<A> lo = vsplat(ninf), hi = lo;
  int64_t j = 0;
  for (; j + kLanes <= C; j += kLanes) {
    const vec<A> x0 = vload(v + j), x1 = vload(v + j + kHalf);
    lo = x0 > lo ? x0 : lo;
    hi = x1 > hi ? x1 : hi;
  }
  if (j < C) {
    vec<A> x0, x1;
    tail_load(v + j, C - j, ninf, x0, x1);
    lo = x0 > lo ? x0 : lo;
    hi = x1 > hi ? x1 : hi;
  }
  return tree_max(lo, hi);
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

// ps[j] += sum_i dy[i][j] * xh[i][j] and pb[j] += sum_i dy[i][j] over n rows (xh's C
// apart), each column's running sums in row order: 16 columns at a time in registers.
template <class A>
inline void add_columns(const A* const* dy, const A* xh, int64_t n, int64_t C, A* ps, A* pb) {
  int64_t j = 0;
  for (; j + kLanes <= C; j += kLanes) {
    vec<A> s0 = vload(ps + j), s1 = vload(ps + j + kHalf), b0 = vload(pb + j), b1 = vload(pb + j + kHalf);
    for (int64_t i = 0; i < n; ++i) {
      const vec<A> d0 = vload(dy[i] + j), d1 = vload(dy[i] + j + kHalf);
      s0 = s0 + d0 * vload(xh + i * C + j);
      s1 = s1 + d1 * vload(xh + i * C + j + kHalf);
      b0 = b0 + d0;
      b1 = b1 + d1;
    }
    vput(ps + j, s0);
    vput(ps + j + kHalf, s1);
    vput(pb + j, b0);
    vput(pb + j + kHalf, b1);
  }
  for (; j < C; ++j) {
    A s = ps[j], b = pb[j];
    for (int64_t i = 0; i < n; ++i) {
      s = s + dy[i][j] * xh[i * C + j];
      b = b + dy[i][j];
    }
    ps[j] = s;
    pb[j] = b;
  }
}

// dscale / dbias from the blocks' partials (block k's dscale part at part + 2kC, its
// dbias part C on): summed in block order, columns in parallel.
template <class A>
inline void sum_partials(const A* part, int64_t nblocks, int64_t C, A* dscale, A* dbias) {
  parallel_for(C, 256, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      dscale[j] = A(0);
      dbias[j] = A(0);
    }
    for (int64_t k = 0; k < nblocks; ++k) {
      const A* ps = part + size_t(k) * size_t(C) * 2;
      for (int64_t j = j0; j < j1; ++j) {
        dscale[j] = dscale[j] + ps[j];
        dbias[j] = dbias[j] + ps[C + j];
      }
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
  // Tasks of whole blocks of kBwdBlock rows (about kBwdTaskElems elements). A block's xh
  // and dy rows stay in scratch, and its dscale / dbias partials are summed column by
  // column in registers after its rows (add_columns: row order per column, the order of
  // the running sum in memory it replaced, so the same bits). The running sum read and
  // wrote the partials for every row: a quarter of the pass at Swin's 96 channels.
  const int64_t per_task = std::max<int64_t>(1, kBwdTaskElems / (kBwdBlock * std::max<int64_t>(C, 1)));
  parallel_for(nblocks, per_task, [&](int64_t k0, int64_t k1) {
    LocalVec<A> xb(std::is_same_v<T, A> ? 0 : C), db(std::is_same_v<O, A> ? 0 : kBwdBlock * C),
        xhb(kBwdBlock * C), gb(scale ? C : 0), dxb(std::is_same_v<T, A> ? 0 : C);
    LocalVec<const A*> dyp(kBwdBlock);
    for (int64_t kb = k0; kb < k1; ++kb) {
      const int64_t r0 = kb * kBwdBlock, r1 = std::min(rows, r0 + kBwdBlock);
      for (int64_t r = r0; r < r1; ++r) {
        const A* xr = widen_row(x + r * C, C, xb.data());
        const A* dyr = widen_row(dy + r * C, C, db.data() + (std::is_same_v<O, A> ? 0 : (r - r0) * C));
        A* xh = xhb.data() + (r - r0) * C;
        dyp[r - r0] = dyr;
        const A mu = mean[r], rs = rstd[r];
        for (int64_t j = 0; j < C; ++j) xh[j] = (xr[j] - mu) * rs;
        const A* g = dyr;
        if (scale) {
          for (int64_t j = 0; j < C; ++j) gb[j] = dyr[j] * scale[j];
          g = gb.data();
        }
        const A mb = lane_dot(g, xh, C) / n;
        A* dxr = out_row<T, A>(dx + r * C, dxb.data());
        if (p.use_mean) {
          const A ma = lane_sum(g, C) / n;
          for (int64_t j = 0; j < C; ++j) dxr[j] = ((g[j] - ma) - xh[j] * mb) * rs;
        } else {
          for (int64_t j = 0; j < C; ++j) dxr[j] = (g[j] - xh[j] * mb) * rs;
        }
        narrow_row(dxr, C, dx + r * C);
      }
      A* ps = part.data() + size_t(kb) * size_t(C) * 2;
      add_columns(dyp.data(), xhb.data(), r1 - r0, C, ps, ps + C);
    }
  });
  sum_partials(part.data(), nblocks, C, dscale, dbias);
}

// Softmax rows in blocks of about kSmBlockElems elements (one row from 1024 on), each block
// in three passes over its rows (row maxima; d = x - m, e = exp(d) and the lanes' sums;
// outputs): every pass is a stream of independent rows, so the out-of-order core overlaps
// one row's exp chains with the next row's, where a row at a time stalled on each row's
// max and sum (Swin's 49-key rows: 1.4x faster so, on Zen 3). The block stays in L1;
// larger blocks (8192) made rows of 384 slower than one row at a time.
constexpr int64_t kSmBlockElems = 1024;

template <class T, class A>
void sm_fwd(int64_t rows, int64_t C, bool log, const T* x, T* y) {
  // Rows in whole chunks of 16 lanes; the last chunk's missing lanes hold x - m = -inf,
  // whose exp (+0) leaves the lanes' sums as they are.
  const int64_t Cf = C / kLanes * kLanes, Cp = Cf + (C > Cf ? kLanes : 0);
  const int64_t block = std::max<int64_t>(1, kSmBlockElems / std::max<int64_t>(Cp, 1));
  const int64_t grain = std::max<int64_t>(1, kChunkElems / std::max<int64_t>(C, 1));
  parallel_for(rows, (grain + block - 1) / block * block, [&](int64_t r0, int64_t r1) {
    const int64_t nb = std::min(block, r1 - r0);
    LocalVec<A> xb(std::is_same_v<T, A> ? 0 : nb * C), db(nb * Cp), yb(std::is_same_v<T, A> ? 0 : C),
        mx(nb), sm(nb);
    for (int64_t b0 = r0; b0 < r1; b0 += block) {
      const int64_t n = std::min(block, r1 - b0);
      for (int64_t i = 0; i < n; ++i) {
        const A* xr = widen_row(x + (b0 + i) * C, C, xb.data() + (std::is_same_v<T, A> ? 0 : i * C));
        mx[i] = lane_max(xr, C);
      }
      for (int64_t i = 0; i < n; ++i) {
        const A* xr = std::is_same_v<T, A> ? reinterpret_cast<const A*>(x + (b0 + i) * C) : xb.data() + i * C;
        const A m = mx[i];
        const vec<A> mv = vsplat(m);
        A* dr = db.data() + i * Cp;
        vec<A> lo = {}, hi = {};
        int64_t j0 = 0;
        for (; j0 + 2 * kLanes <= Cf; j0 += 2 * kLanes) {  // two chunks: four exp chains in flight
          const vec<A> d0 = vload(xr + j0) - mv, d1 = vload(xr + j0 + kHalf) - mv;
          const vec<A> d2 = vload(xr + j0 + kLanes) - mv, d3 = vload(xr + j0 + kLanes + kHalf) - mv;
          const vec<A> e0 = vexp_a(d0), e1 = vexp_a(d1), e2 = vexp_a(d2), e3 = vexp_a(d3);
          lo = lo + e0;
          hi = hi + e1;
          lo = lo + e2;
          hi = hi + e3;
          vput(dr + j0, log ? d0 : e0);
          vput(dr + j0 + kHalf, log ? d1 : e1);
          vput(dr + j0 + kLanes, log ? d2 : e2);
          vput(dr + j0 + kLanes + kHalf, log ? d3 : e3);
        }
        for (int64_t j = j0; j < Cp; j += kLanes) {
          vec<A> d0, d1, e0, e1;
          if (j < Cf) {
            d0 = vload(xr + j) - mv;
            d1 = vload(xr + j + kHalf) - mv;
            e0 = vexp_a(d0);
            e1 = vexp_a(d1);
          } else {  // the lanes past the row: d = -inf, e = +0 (and no exp for an empty half)
            const vec<A> iota = {0, 1, 2, 3, 4, 5, 6, 7}, ninf = vsplat(-std::numeric_limits<A>::infinity());
            const A left = A(C - j);
            vec<A> x0, x1;
            tail_load(xr + j, C - j, A(0), x0, x1);
            d0 = iota < left ? x0 - mv : ninf;
            d1 = iota + A(kHalf) < left ? x1 - mv : ninf;
            e0 = vexp_a(d0);
            e1 = C - j > kHalf ? vexp_a(d1) : vec<A>{};
          }
          lo = lo + e0;
          hi = hi + e1;
          vput(dr + j, log ? d0 : e0);
          vput(dr + j + kHalf, log ? d1 : e1);
        }
        sm[i] = tree(lo, hi);
      }
      for (int64_t i = 0; i < n; ++i) {
        A* yr = out_row<T, A>(y + (b0 + i) * C, yb.data());
        const A* dr = db.data() + i * Cp;
        const A s = sm[i];
        if (log) {
          const A l = log_a(s);
          for (int64_t j = 0; j < C; ++j) yr[j] = dr[j] - l;
        } else {
          for (int64_t j = 0; j < C; ++j) yr[j] = dr[j] / s;
        }
        narrow_row(yr, C, y + (b0 + i) * C);
      }
    }
  });
}

template <class T, class A>
void sm_bwd(int64_t rows, int64_t C, bool log, const T* y, const T* dy, T* dx) {
  parallel_for(rows, std::max<int64_t>(1, kChunkElems / std::max<int64_t>(C, 1)), [&](int64_t r0, int64_t r1) {
    LocalVec<A> yb(std::is_same_v<T, A> ? 0 : C), db(std::is_same_v<T, A> ? 0 : C),
        xb(std::is_same_v<T, A> ? 0 : C), eb(log ? C : 0);
    for (int64_t r = r0; r < r1; ++r) {
      const A* yr = widen_row(y + r * C, C, yb.data());
      const A* dyr = widen_row(dy + r * C, C, db.data());
      A* dxr = out_row<T, A>(dx + r * C, xb.data());
      if (log) {
        const A s = lane_sum(dyr, C);
        exp_row(yr, C, eb.data());
        const A* er = eb.data();
        for (int64_t j = 0; j < C; ++j) dxr[j] = dyr[j] - er[j] * s;
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

// The entry points of one build (SUFFIX) on the templates of namespace NS: nk here, nz in
// norm_avx512_impl.h (the same signatures).
#define PODLET_NORM_DEFINE_TO(SUFFIX, NS, T, O)                                                                 \
  void layer_norm_fwd_##SUFFIX(const NormRows& p, const T* x, const float* scale, const float* bias, O* y,      \
                               float* mean, float* rstd) {                                                    \
    NS::ln_fwd<T, O, float>(p, x, scale, bias, y, mean, rstd);                                                \
  }                                                                                                           \
  void layer_norm_bwd_##SUFFIX(const NormRows& p, const O* dy, const T* x, const float* mean, const float* rstd, \
                               const float* scale, T* dx, float* dscale, float* dbias) {                      \
    NS::ln_bwd<T, O, float>(p, dy, x, mean, rstd, scale, dx, dscale, dbias);                                  \
  }

#define PODLET_NORM_DEFINE_IN(SUFFIX, NS)                                                                     \
  namespace podlet::kernels {                                                                                 \
  PODLET_NORM_DEFINE_TO(SUFFIX, NS, float, float)                                                             \
  PODLET_NORM_DEFINE_TO(SUFFIX, NS, float, bf16)                                                              \
  PODLET_NORM_DEFINE_TO(SUFFIX, NS, bf16, float)                                                              \
  PODLET_NORM_DEFINE_TO(SUFFIX, NS, bf16, bf16)                                                               \
  void softmax_fwd_##SUFFIX(int64_t rows, int64_t C, bool log, const float* x, float* y) {                    \
    NS::sm_fwd<float, float>(rows, C, log, x, y);                                                             \
  }                                                                                                           \
  void softmax_fwd_##SUFFIX(int64_t rows, int64_t C, bool log, const bf16* x, bf16* y) {                      \
    NS::sm_fwd<bf16, float>(rows, C, log, x, y);                                                              \
  }                                                                                                           \
  void softmax_bwd_##SUFFIX(int64_t rows, int64_t C, bool log, const float* y, const float* dy, float* dx) {   \
    NS::sm_bwd<float, float>(rows, C, log, y, dy, dx);                                                        \
  }                                                                                                           \
  void softmax_bwd_##SUFFIX(int64_t rows, int64_t C, bool log, const bf16* y, const bf16* dy, bf16* dx) {     \
    NS::sm_bwd<bf16, float>(rows, C, log, y, dy, dx);                                                         \
  }                                                                                                           \
  }
#define PODLET_NORM_DEFINE(SUFFIX) PODLET_NORM_DEFINE_IN(SUFFIX, nk)
