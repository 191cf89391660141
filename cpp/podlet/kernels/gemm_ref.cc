// Reference batched GEMM (see gemm.h): fixed output tiles, operands packed tile by tile
// into f32/f64 (so bf16 is never widened as a whole matrix), multiplied with Eigen
// (single-threaded: EIGEN_DONT_PARALLELIZE), tiles spread over threads.
#include "podlet/kernels/gemm.h"
#include "podlet/parallel.h"
#include <Eigen/Core>

namespace podlet::kernels {

std::vector<int64_t> group_offsets(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  std::vector<int64_t> off{0};
  for (size_t d = 0; d < sizes.size(); ++d) {
    std::vector<int64_t> next;
    next.reserve(off.size() * size_t(sizes[d]));
    for (int64_t o : off)
      for (int64_t i = 0; i < sizes[d]; ++i) next.push_back(o + i * strides[d]);
    off.swap(next);
  }
  return off;
}

namespace {

// Calls f(tag) with tag of the storage type of float dtype d.
template <class F> void float_switch(DType d, F&& f) {
  switch (d) {
    case DType::f32: f(float()); break;
    case DType::bf16: f(bf16()); break;
    case DType::f64: f(double()); break;
    default: throw DTypeError(fmt("gemm: unsupported operand dtype ", dtype_name(d)));
  }
}

// dst (rows x cols, row-major) = src[base + row_off[i] + col_off[j]] converted to Acc.
template <class Acc>
void pack(DType d, const void* src, int64_t base, const int64_t* row_off, int64_t rows, const int64_t* col_off,
          int64_t cols, Acc* dst) {
  float_switch(d, [&](auto tag) {
    using T = decltype(tag);
    const T* s = static_cast<const T*>(src) + base;
    for (int64_t i = 0; i < rows; ++i) {
      const T* p = s + row_off[i];
      Acc* q = dst + i * cols;
      for (int64_t j = 0; j < cols; ++j) q[j] = load_one<Acc>(p, col_off[j]);
    }
  });
}

template <class Acc>
void gemm_float(const GemmArgs& g) {
  static const bool eigen_ready = (Eigen::initParallel(), true);  // Eigen is called from many threads
  (void)eigen_ready;
  using Mat = Eigen::Matrix<Acc, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const int64_t mt = (g.M + kGemmTileM - 1) / kGemmTileM, nt = (g.N + kGemmTileN - 1) / kGemmTileN;
  const int64_t tiles = g.B * mt * nt;
  parallel_for(tiles, 1, [&](int64_t t0, int64_t t1) {
    Mat At, Bt, Ct;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / (mt * nt), r = t % (mt * nt);
      const int64_t m0 = (r / nt) * kGemmTileM, n0 = (r % nt) * kGemmTileN;
      const int64_t mb = std::min(kGemmTileM, g.M - m0), nb = std::min(kGemmTileN, g.N - n0);
      Ct.setZero(mb, nb);
      // K is summed block by block, in order: the same sequence for any thread count.
      for (int64_t k0 = 0; k0 < g.K; k0 += kGemmTileK) {
        const int64_t kb = std::min(kGemmTileK, g.K - k0);
        At.resize(mb, kb);
        Bt.resize(kb, nb);
        pack<Acc>(g.a_dtype, g.a, g.a_batch[b], g.a_row.data() + m0, mb, g.a_k.data() + k0, kb, At.data());
        pack<Acc>(g.b_dtype, g.b, g.b_batch[b], g.b_k.data() + k0, kb, g.b_col.data() + n0, nb, Bt.data());
        Ct.noalias() += At * Bt;
      }
      for (int64_t i = 0; i < mb; ++i)
        store_row<Acc>(g.c_dtype, g.c, g.c_off(b, m0 + i) + n0, nb, Ct.data() + i * nb);
    }
  });
}

// Integers: a plain loop, accumulated in 64-bit unsigned arithmetic (wraps like the
// narrow type would, and is exact for the float-output case unless it overflows 64 bits).
template <class T>
void gemm_int(const GemmArgs& g) {
  const T* A = static_cast<const T*>(g.a);
  const T* Bp = static_cast<const T*>(g.b);
  const int64_t rows = g.B * g.M;
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(1, g.N * g.K));
  parallel_for(rows, grain, [&](int64_t r0, int64_t r1) {
    std::vector<uint64_t> acc(g.N);
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / g.M, m = r % g.M;
      std::fill(acc.begin(), acc.end(), 0);
      const T* arow = A + g.a_batch[b] + g.a_row[m];
      const T* bmat = Bp + g.b_batch[b];
      for (int64_t k = 0; k < g.K; ++k) {
        const uint64_t av = uint64_t(int64_t(arow[g.a_k[k]]));
        const T* brow = bmat + g.b_k[k];
        for (int64_t n = 0; n < g.N; ++n) acc[n] += av * uint64_t(int64_t(brow[g.b_col[n]]));
      }
      PODLET_DTYPE_SWITCH(g.c_dtype, O, {
        O* out = static_cast<O*>(g.c) + g.c_off(b, m);
        for (int64_t n = 0; n < g.N; ++n) {
          if constexpr (std::is_same_v<O, bool>) out[n] = acc[n] != 0;  // excluded by gemm_ref
          else if constexpr (std::is_same_v<O, bf16>) out[n] = bf16(float(std::is_signed_v<T> ? double(int64_t(acc[n])) : double(acc[n])));
          else if constexpr (std::is_floating_point_v<O>) out[n] = O(std::is_signed_v<T> ? double(int64_t(acc[n])) : double(acc[n]));
          else out[n] = O(acc[n]);
        }
      });
    }
  });
}

}  // namespace

void gemm_ref(const GemmArgs& g) {
  if (g.B * g.M * g.N == 0) return;
  if (is_float(g.a_dtype) != is_float(g.b_dtype))
    throw DTypeError(fmt("gemm: cannot mix ", dtype_name(g.a_dtype), " and ", dtype_name(g.b_dtype)));
  if (is_float(g.a_dtype)) {
    if (!is_float(g.c_dtype)) throw DTypeError(fmt("gemm: float operands need a float output, got ", dtype_name(g.c_dtype)));
    if (accumulate_in_f64(g.a_dtype, g.b_dtype, g.c_dtype)) gemm_float<double>(g);
    else gemm_float<float>(g);
    return;
  }
  if (g.c_dtype == DType::boolean) throw DTypeError("gemm: bool output is not supported");
  if (g.a_dtype != g.b_dtype)
    throw DTypeError(fmt("gemm: integer operands must share a dtype, got ", dtype_name(g.a_dtype), " and ", dtype_name(g.b_dtype)));
  switch (g.a_dtype) {
    case DType::i32: gemm_int<int32_t>(g); break;
    case DType::u32: gemm_int<uint32_t>(g); break;
    case DType::u8: gemm_int<uint8_t>(g); break;
    default: throw DTypeError(fmt("gemm: unsupported dtype ", dtype_name(g.a_dtype)));
  }
}

}  // namespace podlet::kernels
