// The per-instruction loops of the fused elementwise interpreter (prims/fused.cc):
// one instruction over one tile of m elements, from registers a, b, c into d. Compiled
// three times: for baseline x86-64 inside fused.cc, with AVX2 in kernels/fused_avx2.cc
// and with AVX-512 in kernels/fused_avx512.cc (both with -ffp-contract=off), where GCC
// vectorises the same loops 8 or 16 lanes wide. All give the same bits: every op is an IEEE operation per element (or
// an integer one) written without fused multiply-adds, so the lane width cannot change
// a result.
//
// Everything here has internal linkage (anonymous namespace) and uses no template or
// inline function with external linkage (errors are thrown by fused_error, defined in
// fused.cc), so the AVX2 and AVX-512 translation units cannot lend their code to
// baseline callers through the linker: `nm --defined-only` on their objects shows no
// weak symbol.
#pragma once
#pragma GCC optimize("no-trapping-math")  // as elementwise.cc: lets GCC vectorise float selects
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#ifdef __AVX512F__
#include <immintrin.h>
#endif
#include "podlet/dtype.h"
#include "podlet/ir/fusion.h"
#include "podlet/kernels/fastmath.h"
#include "podlet/kernels/stream_out.h"
#include "podlet/kernels/first_nan_add.h"

namespace podlet::fused_ops {
// Throws the ValueError / DTypeError of a malformed program (fused.cc).
[[noreturn]] void fused_error(const char* what, int64_t code);
namespace {

using namespace fused;
namespace fm = kernels::fm;
using kernels::round_bf16;

// Register (physical) type of each dtype.
template <DType D> struct phys { using type = float; };
template <> struct phys<DType::f64> { using type = double; };
template <> struct phys<DType::i32> { using type = int32_t; };
template <> struct phys<DType::u32> { using type = uint32_t; };
template <> struct phys<DType::u8> { using type = uint8_t; };
// bool as a 32-bit 0/1: compares and selects on f32 registers then vectorise (a byte
// mask next to 4-byte data does not, on SSE2).
template <> struct phys<DType::boolean> { using type = uint32_t; };
template <DType D> using P = typename phys<D>::type;

size_t phys_size(DType d) { return d == DType::bf16 || d == DType::boolean ? 4 : itemsize(d); }
// Whether the register layout equals the storage layout (the value can be read or
// written in place).
bool same_layout(DType d) { return d != DType::bf16 && d != DType::boolean; }

template <class F>
void dtype_switch(DType d, F&& f) {
  switch (d) {
    case DType::f32: f(std::integral_constant<DType, DType::f32>{}); return;
    case DType::bf16: f(std::integral_constant<DType, DType::bf16>{}); return;
    case DType::f64: f(std::integral_constant<DType, DType::f64>{}); return;
    case DType::i32: f(std::integral_constant<DType, DType::i32>{}); return;
    case DType::u32: f(std::integral_constant<DType, DType::u32>{}); return;
    case DType::u8: f(std::integral_constant<DType, DType::u8>{}); return;
    case DType::boolean: f(std::integral_constant<DType, DType::boolean>{}); return;
    default: fused_error("unsupported dtype", int64_t(d));
  }
}

// ---- element ops (the scalar code of elementwise.cc) -----------------------------------
template <class A> inline A do_max(A x, A y) { const A r = x > y ? x : y; return x != x ? x : r; }
template <class A> inline A do_min(A x, A y) { const A r = x < y ? x : y; return x != x ? x : r; }

// A bf16 result is rounded in the op's own loop (RB): one pass over the tile, not two.
template <bool RB, class A> inline A fin(A v) {
  if constexpr (RB) return round_bf16(v); else return v;
}

template <class A, bool RB = false>
void unary_float(int64_t op, const A* a, A* d, int64_t m, int64_t imm) {
  constexpr bool F = std::is_same_v<A, float>;
#define LOOP(EXPR) for (int64_t j = 0; j < m; ++j) { const A x = a[j]; d[j] = fin<RB>(A(EXPR)); } break;
  switch (op) {
    case kNeg: LOOP(-x)
    case kAbs: if constexpr (F) { LOOP(fm::fabs_(x)) } else { LOOP(__builtin_fabs(x)) }
    case kSign: LOOP(x < 0 ? A(-1) : (x > 0 ? A(1) : x))
    case kExp: if constexpr (F) { LOOP(fm::exp(x)) } else { LOOP(std::exp(x)) }
    case kLog: if constexpr (F) { LOOP(fm::log(x)) } else { LOOP(std::log(x)) }
    case kLog1p: LOOP(std::log1p(x))
    case kExpm1: LOOP(std::expm1(x))
    case kTanh: if constexpr (F) { LOOP(fm::tanh(x)) } else { LOOP(std::tanh(x)) }
    case kLogistic: if constexpr (F) { LOOP(fm::logistic(x)) } else { LOOP(kernels::logistic_f64(x)) }
    case kSqrt: if constexpr (F) { LOOP(__builtin_sqrtf(x)) } else { LOOP(__builtin_sqrt(x)) }
    case kRsqrt: if constexpr (F) { LOOP(1.0f / __builtin_sqrtf(x)) } else { LOOP(1.0 / __builtin_sqrt(x)) }
    case kErf: if constexpr (F) { LOOP(fm::erf(x)) } else { LOOP(std::erf(x)) }
    case kFloor: LOOP(fm::floor(x))
    case kCeil: LOOP(fm::ceil(x))
    case kIntPow: {
      // x^2 and x^3, BatchNorm's variance terms, as one pass: the products below are
      // the ones the general loop forms (1 * p == p exactly: the first factor into the
      // accumulator adds no rounding).
      if (imm == 2) { LOOP(x * x) }
      if (imm == 3) { LOOP(x * (x * x)) }
      // Repeated squaring in jax's multiplication order; y < 0 gives 1 / x^|y|.
      // The exponent's bits are the outer loop, so each step is a vector loop over a
      // block of elements (the same multiplications per element, so the same bits).
      const uint64_t e = uint64_t(imm < 0 ? -imm : imm);
      constexpr int64_t kB = 64;
      for (int64_t j0 = 0; j0 < m; j0 += kB) {
        const int64_t w = m - j0 < kB ? m - j0 : kB;
        A acc[kB], b[kB];
        for (int64_t j = 0; j < w; ++j) { acc[j] = A(1); b[j] = a[j0 + j]; }
        for (uint64_t k = e; k > 0;) {
          if (k & 1) for (int64_t j = 0; j < w; ++j) acc[j] = acc[j] * b[j];
          k >>= 1;
          if (k) for (int64_t j = 0; j < w; ++j) b[j] = b[j] * b[j];
        }
        if (imm < 0) for (int64_t j = 0; j < w; ++j) d[j0 + j] = fin<RB>(A(A(1) / acc[j]));
        else for (int64_t j = 0; j < w; ++j) d[j0 + j] = fin<RB>(acc[j]);
      }
      break;
    }
    default: fused_error("bad unary opcode", op);
  }
#undef LOOP
}

template <class A, bool RB = false>
void binary_float(int64_t op, const A* a, const A* b, A* d, int64_t m) {
#define LOOP(EXPR) for (int64_t j = 0; j < m; ++j) { const A x = a[j], y = b[j]; d[j] = fin<RB>(A(EXPR)); } break;
  switch (op) {
    case kAdd: LOOP(x != x ? A(x + A(0)) : A(x + y))  // first operand's NaN, as elementwise.cc
    case kSub: LOOP(x - y)
    case kMul: LOOP(x != x ? A(x + A(0)) : A(x * y))
    case kDiv: LOOP(x / y)
    case kMax: LOOP(do_max(x, y))
    case kMin: LOOP(do_min(x, y))
    case kPow: LOOP(std::pow(x, y))
    default: fused_error("bad binary opcode", op);
  }
#undef LOOP
}

template <class A>
void compare(int64_t op, const A* a, const A* b, uint32_t* d, int64_t m) {
#define LOOP(OP) for (int64_t j = 0; j < m; ++j) d[j] = uint32_t(a[j] OP b[j]); break;
  switch (op) {
    case kEq: LOOP(==)
    case kNe: LOOP(!=)
    case kLt: LOOP(<)
    case kLe: LOOP(<=)
    case kGt: LOOP(>)
    case kGe: LOOP(>=)
    default: fused_error("bad compare opcode", op);
  }
#undef LOOP
}

template <DType SD, DType DD> inline P<DD> convert1(P<SD> x) {
  using D = P<DD>;
  if constexpr (SD == DD) return x;
  else if constexpr (DD == DType::boolean) return uint32_t(x != P<SD>(0));  // NaN -> true
  else if constexpr (DD == DType::bf16) return round_bf16(float(x));        // through f32, like ml_dtypes
  else if constexpr (DD == DType::f32 || DD == DType::f64) return D(x);
  else if constexpr (SD == DType::f32 || SD == DType::bf16 || SD == DType::f64) {
    // float -> int saturates, NaN -> 0 (XLA); the clamp is exact in double.
    double v = double(x);
    constexpr double lo = double(std::numeric_limits<D>::min()), hi = double(std::numeric_limits<D>::max());
    v = v < lo ? lo : v;
    v = v > hi ? hi : v;
    v = v == v ? v : 0.0;
    if constexpr (DD == DType::u32) return uint32_t(int32_t(v >= 2147483648.0 ? v - 4294967296.0 : v));
    else return D(int32_t(v));
  } else {
    return D(x);  // int/bool -> int wraps
  }
}

void convert(DType sd, const void* a, DType dd, void* d, int64_t m) {
  dtype_switch(sd, [&](auto s) {
    dtype_switch(dd, [&](auto t) {
      constexpr DType S = decltype(s)::value, T = decltype(t)::value;
      const P<S>* x = static_cast<const P<S>*>(a);
      P<T>* y = static_cast<P<T>*>(d);
      for (int64_t j = 0; j < m; ++j) y[j] = convert1<S, T>(x[j]);
    });
  });
}

// Storage -> register for `m` elements at element offsets `off` (or contiguous from
// `base` when off is null).
void load_elems(DType dt, const void* src, int64_t base, const int64_t* off, void* dst, int64_t m) {
  if (dt == DType::bf16) {
    const uint16_t* s = static_cast<const uint16_t*>(src);
    float* d = static_cast<float*>(dst);
    if (off) for (int64_t j = 0; j < m; ++j) d[j] = kernels::bf16_bits_to_f32(s[off[j]]);
    else for (int64_t j = 0; j < m; ++j) d[j] = kernels::bf16_bits_to_f32(s[base + j]);
    return;
  }
  if (dt == DType::boolean) {
    const uint8_t* s = static_cast<const uint8_t*>(src);
    uint32_t* d = static_cast<uint32_t*>(dst);
    if (off) for (int64_t j = 0; j < m; ++j) d[j] = s[off[j]];
    else for (int64_t j = 0; j < m; ++j) d[j] = s[base + j];
    return;
  }
  const size_t isz = itemsize(dt);
  auto gather = [&](auto tag) {
    using T = decltype(tag);
    const T* s = static_cast<const T*>(src);
    T* d = static_cast<T*>(dst);
    if (off) for (int64_t j = 0; j < m; ++j) d[j] = s[off[j]];
    else std::memcpy(d, s + base, size_t(m) * sizeof(T));
  };
  switch (isz) {
    case 1: gather(uint8_t()); break;
    case 4: gather(uint32_t()); break;
    default: gather(uint64_t()); break;
  }
}

void store_elems(DType dt, const void* reg, void* dst, int64_t base, int64_t m) {
  if (dt == DType::bf16) {
    const float* s = static_cast<const float*>(reg);
    uint16_t* d = static_cast<uint16_t*>(dst) + base;
    // The register holds an exact bf16 value: its top half is the bf16 (NaN payloads too).
    for (int64_t j = 0; j < m; ++j) d[j] = uint16_t(__builtin_bit_cast(uint32_t, s[j]) >> 16);
    return;
  }
  if (dt == DType::boolean) {
    const uint32_t* s = static_cast<const uint32_t*>(reg);
    uint8_t* d = static_cast<uint8_t*>(dst) + base;
    for (int64_t j = 0; j < m; ++j) d[j] = uint8_t(s[j]);
    return;
  }
  const size_t isz = itemsize(dt);
  std::memcpy(static_cast<char*>(dst) + base * isz, reg, size_t(m) * isz);
}

// store_elems through `stage` (a tile in storage layout), the whole 64-byte lines written
// with non-temporal stores: a large output is not read into the cache before it is
// overwritten (write-allocate is a third of a copy pass's traffic) and does not evict
// the operands. Without AVX-512 (the baseline build) a plain store.
void store_elems_stream(DType dt, const void* reg, void* dst, int64_t base, int64_t m, void* stage) {
#ifdef __AVX512F__
  const size_t isz = itemsize(dt);
  char* d = static_cast<char*>(dst) + base * isz;
  const size_t bytes = size_t(m) * isz;
  store_elems(dt, reg, stage, 0, m);
  kernels::stream_bytes(d, stage, bytes);
#else
  (void)stage;
  store_elems(dt, reg, dst, base, m);
#endif
}

// kernels::add_keep_first_nan (first_nan_add.h) has comb_f32's NaN rule: each row of the
// column sums below is one add on its accumulator's chain instead of a compare and a
// masked add.
using kernels::add_keep_first_nan;

// SumOp's comb for f32: a + b, a NaN a kept (quieted).
inline float comb_f32(float a, float b) { return a != a ? a + 0.0f : a + b; }

// acc[j] = comb_f32(acc[j], right[j]): a tree node's two halves added, 16 columns at a time
// (as scalar compares and selects this was ~half of a BatchNorm statistics pass's
// summing at 64 columns).
inline void add_halves(float* acc, const float* right, int64_t w) {
  int64_t j = 0;
#ifdef __AVX512F__
  for (; j + 16 <= w; j += 16)
    _mm512_storeu_ps(acc + j, add_keep_first_nan(_mm512_loadu_ps(acc + j), _mm512_loadu_ps(right + j)));
#endif
  for (; j < w; ++j) acc[j] = comb_f32(acc[j], right[j]);
}

// An element as f32 (a bf16 widened exactly), and 16 of them on AVX-512 (m: the lanes read).
inline float elem_f32(const float* p, int64_t j) { return p[j]; }
inline float elem_f32(const bf16* p, int64_t j) { return kernels::bf16_bits_to_f32(p[j].bits); }
#ifdef __AVX512F__
inline __m512 load16_f32(const float* p, __mmask16 m = 0xffff) { return _mm512_maskz_loadu_ps(m, p); }
inline __m512 load16_f32(const bf16* p, __mmask16 m = 0xffff) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}
#endif

// acc[0..w) = the column sums of p's nrows rows of w elements, rs apart: reduce_ops.h's
// pairwise_rows<SumOp<T>> (the tree and the NaN rule of reduce_sum's column reduction),
// repeated here because that header cannot enter an ISA-specific file. The fused
// interpreter's row sums (sum_rows_f32) and, on AVX-512, reduce_sum's column
// reductions (kernels/reduce_avx512.cc) run it.
template <class T>
void col_sums(const T* p, int64_t nrows, int64_t rs, int64_t w, float* acc, float* scratch) {
  if (nrows <= 16) {
    // Column blocks of 64 held in registers down the rows (the row-by-row form kept acc
    // in memory: each row waited for the previous row's store; 4 independent vectors
    // per block), then on AVX-512 masked vectors of the last columns. Same order per
    // column, so the same sums.
    constexpr int64_t kB = 64;
    int64_t j0 = 0;
    for (; j0 + kB <= w; j0 += kB) {
#ifdef __AVX512F__
      __m512 v[4];
      for (int l = 0; l < 4; ++l) v[l] = load16_f32(p + j0 + 16 * l);
      for (int64_t r = 1; r < nrows; ++r)
        for (int l = 0; l < 4; ++l) v[l] = add_keep_first_nan(v[l], load16_f32(p + r * rs + j0 + 16 * l));
      for (int l = 0; l < 4; ++l) _mm512_storeu_ps(acc + j0 + 16 * l, v[l]);
#else
      float v[kB];
      for (int64_t l = 0; l < kB; ++l) v[l] = elem_f32(p, j0 + l);
      for (int64_t r = 1; r < nrows; ++r)
        for (int64_t l = 0; l < kB; ++l) v[l] = comb_f32(v[l], elem_f32(p, r * rs + j0 + l));
      for (int64_t l = 0; l < kB; ++l) acc[j0 + l] = v[l];
#endif
    }
#ifdef __AVX512F__
    for (; j0 < w; j0 += 16) {
      const __mmask16 m = __mmask16(0xffffu >> (16 - std::min<int64_t>(16, w - j0)));
      __m512 v = load16_f32(p + j0, m);
      for (int64_t r = 1; r < nrows; ++r) v = add_keep_first_nan(v, load16_f32(p + r * rs + j0, m));
      _mm512_mask_storeu_ps(acc + j0, m, v);
    }
#else
    for (int64_t j = j0; j < w; ++j) acc[j] = elem_f32(p, j);
    for (int64_t r = 1; r < nrows; ++r)
      for (int64_t j = j0; j < w; ++j) acc[j] = comb_f32(acc[j], elem_f32(p, r * rs + j));
#endif
    return;
  }
  const int64_t h = nrows / 2;
  col_sums(p, h, rs, w, acc, scratch + w);
  col_sums(p + h * rs, nrows - h, rs, w, scratch, scratch + w);
  add_halves(acc, scratch, w);
}
// The column sums of nrows contiguous rows of w floats (TileKernels::sum_rows).
void sum_rows_f32(const float* p, int64_t nrows, int64_t w, float* acc, float* scratch) {
  col_sums(p, nrows, w, w, acc, scratch);
}

// acc[0..w) = the sum of n leaf sums p[n][w] (fused_jit.h kLeaves: each the column sums
// of 16 rows) in sum_rows_f32's tree above its 16-row leaves: for a chunk of 16 * n rows,
// n a power of two, the same additions in the same order.
void sum_leaves_f32(const float* p, int64_t n, int64_t w, float* acc, float* scratch) {
  if (n == 1) {
    std::memcpy(acc, p, size_t(w) * 4);
    return;
  }
  const int64_t h = n / 2;
  sum_leaves_f32(p, h, w, acc, scratch + w);
  sum_leaves_f32(p + h * w, n - h, w, scratch, scratch + w);
  add_halves(acc, scratch, w);
}

// d = instruction ins applied to a, b, c (b, c null when unused), m elements.
void exec_instr(const Instr& ins, const void* a, const void* b, const void* c, void* d, int64_t m) {
  const int64_t op = ins.op;
  if (op == kTable) {  // b: the table (fused.cc); a holds bf16 values, its top halves the index
    auto x = static_cast<const uint32_t*>(a);
    auto t = static_cast<const uint16_t*>(b);
    auto z = static_cast<uint32_t*>(d);
    if (ins.imm == 0)  // a word per entry
      for (int64_t j = 0; j < m; ++j) z[j] = uint32_t(t[x[j] >> 16]) << 16;
    else  // a pair table: two words per entry, imm 1 the first, 2 the second
      for (int64_t j = 0; j < m; ++j) z[j] = uint32_t(t[2 * (x[j] >> 16) + (ins.imm - 1)]) << 16;
  } else if (op == kConvert) {
    convert(ins.d, a, ins.rd, d, m);
  } else if (op == kSelect) {
    const uint32_t* pr = static_cast<const uint32_t*>(a);
    // Branch-free (both operands read, a mask picks): a branch on random
    // predicates mispredicts half the time, and this form vectorises.
    auto sel = [&](auto tag) {
      using W = decltype(tag);
      auto x = static_cast<const W*>(b), y = static_cast<const W*>(c);
      auto z = static_cast<W*>(d);
      for (int64_t j = 0; j < m; ++j) {
        const W mk = W(0) - W(pr[j]);
        z[j] = (x[j] & mk) | (y[j] & ~mk);
      }
    };
    if (ins.d == DType::f32 && ins.rd == DType::bf16) {  // an f32 select rounded (fused.cc's fold)
      auto x = static_cast<const uint32_t*>(b), y = static_cast<const uint32_t*>(c);
      auto z = static_cast<float*>(d);
      for (int64_t j = 0; j < m; ++j) {
        const uint32_t mk = 0u - pr[j];
        z[j] = round_bf16(__builtin_bit_cast(float, (x[j] & mk) | (y[j] & ~mk)));
      }
      return;
    }
    switch (phys_size(ins.rd)) {
      case 1: sel(uint8_t()); break;
      case 4: sel(uint32_t()); break;
      default: sel(uint64_t()); break;
    }
  } else if (op >= kEq && op <= kGe) {
    dtype_switch(ins.d, [&](auto t) {
      using A = P<decltype(t)::value>;
      compare<A>(op, static_cast<const A*>(a), static_cast<const A*>(b), static_cast<uint32_t*>(d), m);
    });
  } else if (op == kAnd || op == kOr || op == kXor || op == kNot) {
    auto x = static_cast<const uint32_t*>(a), y = static_cast<const uint32_t*>(b);
    auto z = static_cast<uint32_t*>(d);
    if (op == kAnd) for (int64_t j = 0; j < m; ++j) z[j] = x[j] & y[j];
    else if (op == kOr) for (int64_t j = 0; j < m; ++j) z[j] = x[j] | y[j];
    else if (op == kXor) for (int64_t j = 0; j < m; ++j) z[j] = x[j] ^ y[j];
    else for (int64_t j = 0; j < m; ++j) z[j] = !x[j];
  } else if (op == kIsFinite) {
    auto z = static_cast<uint32_t*>(d);
    if (ins.d == DType::f64) { auto x = static_cast<const double*>(a); for (int64_t j = 0; j < m; ++j) z[j] = (x[j] - x[j]) == (x[j] - x[j]); }
    else { auto x = static_cast<const float*>(a); for (int64_t j = 0; j < m; ++j) z[j] = (x[j] - x[j]) == (x[j] - x[j]); }
  } else if (op == kClamp) {
    // clamp(lo, x, hi) = min(max(x, lo), hi)
    auto run = [&](auto tag, auto rb) {
      using A = decltype(tag);
      auto lo = static_cast<const A*>(a), x = static_cast<const A*>(b), hi = static_cast<const A*>(c);
      auto z = static_cast<A*>(d);
      for (int64_t j = 0; j < m; ++j) z[j] = fin<decltype(rb)::value>(do_min(do_max(x[j], lo[j]), hi[j]));
    };
    if (ins.d == DType::f64) run(double(), std::false_type{});
    else if (ins.rd == DType::bf16) run(float(), std::true_type{});
    else run(float(), std::false_type{});
  } else if (op < kAdd) {
    auto x = static_cast<const float*>(a);
    auto z = static_cast<float*>(d);
    if (ins.d == DType::f64) unary_float<double>(op, static_cast<const double*>(a), static_cast<double*>(d), m, ins.imm);
    else if (ins.rd == DType::bf16) unary_float<float, true>(op, x, z, m, ins.imm);
    else unary_float<float>(op, x, z, m, ins.imm);
  } else {
    auto x = static_cast<const float*>(a), y = static_cast<const float*>(b);
    auto z = static_cast<float*>(d);
    if (ins.d == DType::f64) binary_float<double>(op, static_cast<const double*>(a), static_cast<const double*>(b), static_cast<double*>(d), m);
    else if (ins.rd == DType::bf16) binary_float<float, true>(op, x, y, z, m);
    else binary_float<float>(op, x, y, z, m);
  }
}

}  // namespace
}  // namespace podlet::fused_ops
