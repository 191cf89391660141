// The building blocks of podlet's deterministic reductions, shared by the reduce
// primitives (reduce.cc) and the fused elementwise kernel (fused.cc), which sums its
// outputs into reductions with exactly reduce_sum's order so that fusing a reduction
// does not change a bit:
//   * reduction ops (identity, combine, load/store) with their accumulator types: bf16
//     and f32 accumulate in f32, f64 in f64; integers wrap (unsigned arithmetic);
//   * pairwise (a contiguous row, NumPy's tree) and pairwise_rows (many columns at once,
//     a tree over rows), and the fixed chunking of a column reduction.
// Internal linkage: each including file keeps its own copies.
#pragma once
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>
#include "podlet/prims/common.h"
#include "podlet/kernels/first_nan_add.h"

namespace podlet {
namespace {

// ---- reduction ops: identity, combine, load/store ------------------------------------
// Integer sums and products run in unsigned arithmetic so overflow wraps (no UB).
template <class T> using wrap_t = std::conditional_t<std::is_same_v<T, int32_t> || std::is_same_v<T, uint8_t>, uint32_t, T>;
template <class T> using arith_t = std::conditional_t<std::is_floating_point_v<acc_t<T>>, acc_t<T>, wrap_t<T>>;

// Float sums and products keep the first operand's NaN (the rule of elementwise add),
// so a reduction summed in another file (fused.cc) gives the same NaN.
template <class T> struct SumOp {
  using Acc = arith_t<T>;
  static Acc init() { return Acc(0); }
  static Acc comb(Acc a, Acc b) {
    if constexpr (std::is_floating_point_v<Acc>) return a != a ? Acc(a + Acc(0)) : Acc(a + b);
    else return Acc(a + b);
  }
};
template <class T> struct ProdOp {
  using Acc = arith_t<T>;
  static Acc init() { return Acc(1); }
  static Acc comb(Acc a, Acc b) {
    if constexpr (std::is_floating_point_v<Acc>) return a != a ? Acc(a + Acc(0)) : Acc(a * b);
    else return Acc(a * b);
  }
};
// MaxOp / MinOp's comb on 4 lanes, bit for bit: a if a is NaN, else b if b is NaN, else
// b where it is strictly larger (smaller), a on ties (so the scalar rule's -0 / +0).
template <bool kMax>
inline __m128 max_min_keep_first_nan(__m128 a, __m128 b) {
  const __m128 wins = kMax ? _mm_cmpgt_ps(b, a) : _mm_cmplt_ps(b, a);  // false where either is NaN
  const __m128 take_b = _mm_or_ps(wins, _mm_and_ps(_mm_cmpunord_ps(b, b), _mm_cmpord_ps(a, a)));
  return _mm_or_ps(_mm_and_ps(take_b, b), _mm_andnot_ps(take_b, a));
}
// max/min propagate NaN (any NaN in the input gives NaN), like jax.lax.max.
template <class T> struct MaxOp {
  using Acc = acc_t<T>;
  static Acc init() {
    if constexpr (std::is_floating_point_v<Acc>) return -std::numeric_limits<Acc>::infinity();
    else return std::numeric_limits<Acc>::lowest();
  }
  static Acc comb(Acc a, Acc b) {
    // f32 without branches (on random data a branch per element mispredicted: a row max
    // of 49 elements took longer than its 8-lane body)
    if constexpr (std::is_same_v<Acc, float>) return _mm_cvtss_f32(max_min_keep_first_nan<true>(_mm_set_ss(a), _mm_set_ss(b)));
    if constexpr (std::is_floating_point_v<Acc>) { if (a != a) return a; if (b != b) return b; }
    return b > a ? b : a;
  }
};
template <class T> struct MinOp {
  using Acc = acc_t<T>;
  static Acc init() {
    if constexpr (std::is_floating_point_v<Acc>) return std::numeric_limits<Acc>::infinity();
    else return std::numeric_limits<Acc>::max();
  }
  static Acc comb(Acc a, Acc b) {
    if constexpr (std::is_same_v<Acc, float>) return _mm_cvtss_f32(max_min_keep_first_nan<false>(_mm_set_ss(a), _mm_set_ss(b)));
    if constexpr (std::is_floating_point_v<Acc>) { if (a != a) return a; if (b != b) return b; }
    return b < a ? b : a;
  }
};

template <class Op, class T> inline typename Op::Acc load(T v) {
  using Acc = typename Op::Acc;
  if constexpr (std::is_same_v<T, bf16>) return Acc(float(v)); else return Acc(v);
}
template <class Op, class T> inline T store(typename Op::Acc v) {
  if constexpr (std::is_same_v<T, bf16>) return bf16(float(v)); else return T(v);
}

// Scratch storage that also works for bool accumulators (std::vector<bool> has no data()).
template <class T> struct Buf {
  std::unique_ptr<T[]> p;
  explicit Buf(int64_t n) : p(new T[size_t(std::max<int64_t>(n, 1))]) {}
  T* data() { return p.get(); }
  T& operator[](int64_t i) { return p[i]; }
};


constexpr int64_t kRedChunk = 1 << 14;   // elements per chunk of a contiguous row
constexpr int64_t kColTile = 256;        // columns that size a column reduction's row chunks (and arg / cumulative ops' tasks)
constexpr int64_t kColTask = 1024;       // output columns per task of a column reduction (reduce_cols)
constexpr int64_t kBase = 128;           // pairwise recursion stops here

// A column reduction [n rows, inner columns] sums each column's rows in fixed chunks of
// this many rows (pairwise_rows per chunk, then pairwise over the chunk partials).
inline int64_t col_rows_per_chunk(int64_t inner) {
  return std::max<int64_t>(16, kRedChunk / std::min(inner, kColTile));
}

// SSE2 (the baseline): 4 f32 lanes of f32 or bf16 elements, added with
// kernels::add_keep_first_nan, whose NaN rule is SumOp's comb.
inline __m128 load4(const float* p) { return _mm_loadu_ps(p); }
inline __m128 load4(const bf16* p) {
  return _mm_castsi128_ps(_mm_unpacklo_epi16(_mm_setzero_si128(), _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// Op::comb on 4 lanes of f32 accumulators, for the ops that have one.
template <class Op, class T>
constexpr bool kVecComb = (std::is_same_v<T, float> || std::is_same_v<T, bf16>) &&
                          (std::is_same_v<Op, SumOp<T>> || std::is_same_v<Op, MaxOp<T>> || std::is_same_v<Op, MinOp<T>>);
template <class Op, class T>
inline __m128 vcomb(__m128 a, __m128 b) {
  if constexpr (std::is_same_v<Op, SumOp<T>>) return kernels::add_keep_first_nan(a, b);
  else return max_min_keep_first_nan<std::is_same_v<Op, MaxOp<T>>>(a, b);
}

// Pairwise reduction of p[0..n): 8 interleaved accumulators over blocks of <= kBase,
// halves (at a multiple of 8) above that. Same tree as NumPy's pairwise sum.
template <class Op, class T>
typename Op::Acc pairwise(const T* p, int64_t n) {
  using Acc = typename Op::Acc;
  if (n < 8) {
    Acc a = Op::init();
    for (int64_t i = 0; i < n; ++i) a = Op::comb(a, load<Op>(p[i]));
    return a;
  }
  if (n <= kBase) {
    Acc r[8];
    int64_t i = 8;
    if constexpr (kVecComb<Op, T>) {
      // The 8 accumulators as two vectors: the same combines lane by lane (full sums and
      // row sums ran at ~5 GB/s as scalar compares and selects; clip_by_global_norm's
      // sum of 21M squares was ~17 ms of a ResNet-34 step; maxima of Swin's rows of 49,
      // softmax's reduce_max in an unfused graph, at 1 GB/s).
      __m128 lo = load4(p), hi = load4(p + 4);
      for (; i + 8 <= n; i += 8) {
        lo = vcomb<Op, T>(lo, load4(p + i));
        hi = vcomb<Op, T>(hi, load4(p + i + 4));
      }
      _mm_storeu_ps(r, lo);
      _mm_storeu_ps(r + 4, hi);
    } else {
      for (int k = 0; k < 8; ++k) r[k] = load<Op>(p[k]);
      for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; ++k) r[k] = Op::comb(r[k], load<Op>(p[i + k]));
    }
    Acc a = Op::comb(Op::comb(Op::comb(r[0], r[1]), Op::comb(r[2], r[3])), Op::comb(Op::comb(r[4], r[5]), Op::comb(r[6], r[7])));
    for (; i < n; ++i) a = Op::comb(a, load<Op>(p[i]));
    return a;
  }
  int64_t h = n / 2; h -= h % 8;
  return Op::comb(pairwise<Op>(p, h), pairwise<Op>(p + h, n - h));
}

// acc[j] = Op::comb(acc[j], q[j]) for j < w (q: T or the f32 accumulators), 4 columns at a
// time for max / min: the same combine per column. Column maxima ran at ~3 GB/s in scalar
// code, column sums at 50-60 (col_sums_avx512; sums stay as they were here).
template <class Op, class T, class Q>
inline void comb_columns(typename Op::Acc* acc, const Q* q, int64_t w) {
  int64_t j = 0;
  if constexpr (kVecComb<Op, T> && !std::is_same_v<Op, SumOp<T>>)
    for (; j + 4 <= w; j += 4) _mm_storeu_ps(acc + j, vcomb<Op, T>(_mm_loadu_ps(acc + j), load4(q + j)));
  for (; j < w; ++j) acc[j] = Op::comb(acc[j], load<Op>(q[j]));
}
// acc[0..w) = reduce over rows r < nrows of p[r*rs + j], pairwise over rows. `scratch`
// holds w accumulators per recursion level.
template <class Op, class T>
void pairwise_rows(const T* p, int64_t nrows, int64_t rs, int64_t w, typename Op::Acc* acc, typename Op::Acc* scratch) {
  if (nrows <= 16) {
    for (int64_t j = 0; j < w; ++j) acc[j] = load<Op>(p[j]);
    for (int64_t r = 1; r < nrows; ++r) comb_columns<Op, T>(acc, p + r * rs, w);
    return;
  }
  const int64_t h = nrows / 2;
  pairwise_rows<Op>(p, h, rs, w, acc, scratch + w);
  pairwise_rows<Op>(p + h * rs, nrows - h, rs, w, scratch, scratch + w);
  comb_columns<Op, T>(acc, scratch, w);
}

// Recursion levels of pairwise_rows over n rows (each needs w scratch accumulators).
int64_t scratch_levels(int64_t n) { int64_t l = 1; while (n > 16) { n = (n + 1) / 2; ++l; } return l; }

}  // namespace
}  // namespace podlet
