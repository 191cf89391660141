// Helpers shared by the primitive families: shape checks, broadcasting, FLOP counts.
#pragma once
#include <type_traits>
#include "podlet/ir/graph.h"
#include "podlet/ir/ops.h"
#include "podlet/parallel.h"

namespace podlet {

// Arithmetic happens in f32 for bf16 storage, in T otherwise.
template <class T> using acc_t = std::conditional_t<std::is_same_v<T, bf16>, float, T>;
template <class T> inline T from_acc(acc_t<T> v) {
  if constexpr (std::is_same_v<T, bf16>) return bf16(v); else return T(v);
}

constexpr int64_t kGrain = 1 << 14;  // elements per parallel chunk for streaming kernels

void check_arity(const std::vector<AVal>& in, size_t n);
void check_same_dtype(const std::vector<AVal>& in);
// NumPy broadcasting of shapes; throws ShapeError naming both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b);
// Element strides of `in` as seen from an output of shape `out` (0 on broadcast dims).
Shape broadcast_strides(const Shape& in, const Shape& out);
// Normalises possibly-negative axes against rank; throws ShapeError if out of range.
std::vector<int64_t> normalize_axes(const std::vector<int64_t>& axes, int rank, const char* what);

inline double elementwise_flops_of(const std::vector<AVal>&, const std::vector<AVal>& out, const Attrs&) {
  return double(out.at(0).size());
}

// Calls f(out_index, a_offset, b_offset) for every output element, chunked in parallel.
// Offsets come from broadcast strides; the innermost dimension is walked linearly.
template <class F>
void for_each_broadcast2(const Shape& out, const Shape& sa, const Shape& sb, F&& f) {
  const int r = int(out.size());
  const int64_t n = numel(out);
  if (n == 0) return;
  Shape stA = broadcast_strides(sa, out), stB = broadcast_strides(sb, out);
  const int64_t inner = r ? out[r - 1] : 1;
  const int64_t ia = r ? stA[r - 1] : 0, ib = r ? stB[r - 1] : 0;
  const int64_t rows = n / inner;
  parallel_for(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(inner, 1)), [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      int64_t rem = row, oa = 0, ob = 0;
      for (int d = r - 2; d >= 0; --d) { int64_t i = rem % out[d]; rem /= out[d]; oa += i * stA[d]; ob += i * stB[d]; }
      int64_t base = row * inner;
      for (int64_t j = 0; j < inner; ++j) f(base + j, oa + j * ia, ob + j * ib);
    }
  });
}

// ---- strided copies (structural primitives) ----------------------------------------
// For every index i of `shape` (row-major): dst[dbase + i.dst_st] = src[sbase + i.src_st].
// Strides are in elements and may be 0 (broadcast) or negative (rev); the dst map must
// be injective. Parallel over rows of the innermost dimension; memcpy when both inner
// strides are 1.
void copy_strided(const void* src, int64_t sbase, const Shape& src_st, void* dst, int64_t dbase,
                  const Shape& dst_st, const Shape& shape, size_t isz);
// Sets n elements of size isz at dst to the element at value.
void fill_elements(void* dst, int64_t n, const void* value, size_t isz);
// Reads element 0 of a 0-d integer array (start indices); throws DTypeError otherwise.
int64_t read_index_scalar(const Array& a);

}  // namespace podlet
