// Batched GEMM behind dot_general: C[b, m, n] = sum_k A[b, m, k] * B[b, k, n].
//
// A and B are read through offset tables, so any dot_general dimension order (batch,
// free and contracting dims anywhere, several of each) runs without a transpose copy:
//   A[b, m, k] = a[a_batch[b] + a_row[m] + a_k[k]]
//   B[b, k, n] = b[b_batch[b] + b_k[k] + b_col[n]]
// C is contiguous [B, M, N], which is dot_general's output order (batch, lhs free,
// rhs free). Float operands may have different dtypes (bf16 / f32 / f64); they are
// converted tile by tile to the accumulation type: f64 if any operand or the output is
// f64, else f32. Integer operands (same dtype) accumulate in 64 bits and wrap on store.
//
// Determinism: the output is cut into fixed tiles (kGemmTileM x kGemmTileN) and the K
// sum into fixed blocks of kGemmTileK summed in order; tiles are independent, so the
// bits do not depend on the thread count.
#pragma once
#include <vector>
#include <cstdint>
#include <type_traits>
#include "podlet/dtype.h"
#include "podlet/error.h"

namespace podlet::kernels {

constexpr int64_t kGemmTileM = 128, kGemmTileN = 256, kGemmTileK = 256;

struct GemmArgs {
  int64_t B = 1, M = 0, N = 0, K = 0;
  DType a_dtype = DType::f32, b_dtype = DType::f32, c_dtype = DType::f32;
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  std::vector<int64_t> a_batch, a_row, a_k;  // sizes B, M, K
  std::vector<int64_t> b_batch, b_k, b_col;  // sizes B, K, N
  // Where C's rows go: row m of batch entry b starts at c_batch[b] + m * c_ld, its N
  // elements contiguous. Empty c_batch: C is contiguous [B, M, N]. Other layouts write a
  // transposed result in place (dot_general's out_perm: [b, h, q, d] stored as the
  // [b, q, h, d] an attention's heads merge from) with the same sums, so the same bits.
  std::vector<int64_t> c_batch;  // size B, or empty
  int64_t c_ld = 0;
  int64_t c_off(int64_t b, int64_t m) const { return c_batch.empty() ? (b * M + m) * N : c_batch[b] + m * c_ld; }
};

// The GEMM of dot_general: the fastest variant for the active ISA (cpu/isa.h) that
// takes these dtypes, else gemm_ref (dispatch_common.cc walks the list best-first).
void gemm(const GemmArgs& args);
// Plain C++ / Eigen reference GEMM (the oracle for faster ISA paths). All dtypes.
void gemm_ref(const GemmArgs& args);
// AVX2+FMA (gemm_avx2.cc): operands and output f32 / bf16 in any mix, B*M*N > 0.
// Accumulates in f32 with K summed in blocks of kGemmTileK (see avx2_engine.h).
void gemm_avx2(const GemmArgs& args);
// AVX-512 (gemm_avx512.cc): as gemm_avx2 with 16-lane FMAs (avx512_engine.h, F32Kind).
void gemm_avx512(const GemmArgs& args);
// AVX512_BF16 (gemm_avx512bf16.cc): bf16 operands only, K taken in pairs by vdpbf16ps
// (avx512_engine.h, Bf16Kind); f32 / bf16 output.
void gemm_avx512bf16(const GemmArgs& args);
// AMX-BF16 (gemm_amx.cc): bf16 operands on the matrix tiles (TDPBF16PS), f32 / bf16
// output; each output summed over K in one accumulator tile (gemm_amx_impl.h).
void gemm_amx(const GemmArgs& args);
// The same kernel on emulated tiles (gemm_amx_emu.cc, plain C++, any host).
void gemm_amx_emu(const GemmArgs& args);

// The AMX emulation switch: when on, every kernel with an AMX variant runs it on emulated
// tiles (amx_tiles.h), whatever the host; the tests use it to check the AMX kernels'
// logic without AMX, and on AMX hosts to compare the hardware with the emulation. Off by
// default; PODLET_AMX_EMULATE=1 turns it on at start-up.
bool amx_emulation();
void set_amx_emulation(bool on);
// The GEMM variant that ran last: "ref", "avx2", "avx512", "avx512bf16", "amx" or
// "amx_emu" (tests, benchmarks).
const char* gemm_last_path();

// Offsets of every index of a group of dims, enumerated row-major over the group:
// dims (d0, d1) with sizes (s0, s1) and strides (t0, t1) give [i0*t0 + i1*t1 ...].
std::vector<int64_t> group_offsets(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides);

// ---- dtype conversion helpers shared by the contraction kernels ----

// Reads element i of a buffer of dtype d as Acc (float or double).
template <class Acc, class T> inline Acc load_one(const T* p, int64_t i) {
  if constexpr (std::is_same_v<T, bf16>) return Acc(float(p[i])); else return Acc(p[i]);
}
template <class Acc, class T> inline void store_one(T* p, int64_t i, Acc v) {
  if constexpr (std::is_same_v<T, bf16>) p[i] = bf16(float(v)); else p[i] = T(v);
}
// dst[0:n] = src[off:off+n] converted to Acc (float dtypes only).
template <class Acc> inline void load_row(DType d, const void* src, int64_t off, int64_t n, Acc* dst) {
  switch (d) {
    case DType::f32: { const float* s = static_cast<const float*>(src) + off; for (int64_t i = 0; i < n; ++i) dst[i] = Acc(s[i]); break; }
    case DType::bf16: { const bf16* s = static_cast<const bf16*>(src) + off; for (int64_t i = 0; i < n; ++i) dst[i] = Acc(float(s[i])); break; }
    case DType::f64: { const double* s = static_cast<const double*>(src) + off; for (int64_t i = 0; i < n; ++i) dst[i] = Acc(s[i]); break; }
    default: throw DTypeError(fmt("expected a floating-point operand, got ", dtype_name(d)));
  }
}
// dst[off:off+n] = src[0:n] converted from Acc to dtype d (bf16: round to nearest even).
template <class Acc> inline void store_row(DType d, void* dst, int64_t off, int64_t n, const Acc* src) {
  switch (d) {
    case DType::f32: { float* p = static_cast<float*>(dst) + off; for (int64_t i = 0; i < n; ++i) p[i] = float(src[i]); break; }
    case DType::bf16: { bf16* p = static_cast<bf16*>(dst) + off; for (int64_t i = 0; i < n; ++i) p[i] = bf16(float(src[i])); break; }
    case DType::f64: { double* p = static_cast<double*>(dst) + off; for (int64_t i = 0; i < n; ++i) p[i] = double(src[i]); break; }
    default: throw DTypeError(fmt("expected a floating-point output, got ", dtype_name(d)));
  }
}
// The accumulation type rule of the contraction kernels: f64 if any dtype is f64.
inline bool accumulate_in_f64(DType a, DType b, DType c) {
  return a == DType::f64 || b == DType::f64 || c == DType::f64;
}

}  // namespace podlet::kernels
