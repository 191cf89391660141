// The AVX2+FMA f32 GEMM engine shared by the *_avx2.cc kernels (dot_general and the
// three convolutions). Include it only from files compiled with -mavx2 -mfma.
//
// C[M, N] = A[M, K] B[K, N], f32 accumulation:
//   * B is prepacked once per call into panels of NR = 16 columns, each panel [K][16]
//     (zero-padded past N), so the microkernel reads it with aligned contiguous loads;
//     a long sum packs it per task and K block instead (gemm_avx2.cc, Scratch::b);
//   * A is packed per task and K block by a caller-supplied packer, row-major [mb][kb]
//     (an im2col block for convolutions, a plain row copy for matmuls, bf16 widened);
//   * the 6x16 microkernel keeps a 6x16 C block in 12 ymm registers, broadcasting A.
// Determinism: K is cut into fixed blocks of KC = kGemmTileK, each summed in order by
// one FMA chain per output element and added to C block after block; output tiles are
// independent tasks. No reduction is ever split across threads, so the bits depend on
// neither the thread count nor the tile sizes (which may follow the thread count).
//
// ODR / ISA safety: everything here has internal linkage (anonymous namespace), and the
// AVX2 files must not instantiate a template or inline function with external linkage
// (std::vector<float>, load_row<float>, bf16::operator float ...): the linker could keep
// that AVX2 copy for the whole library and crash hosts without AVX2. Templates over
// local types (std::vector<LocalStruct>) are fine: they get internal linkage too. The
// check: `nm -C --defined-only CMakeFiles/_core.dir/cpp/podlet/kernels/*_avx2.cc.o`
// shows no weak (W/V/u) symbol.
#pragma once
#if !defined(__AVX2__) || !defined(__FMA__)
#error "avx2_engine.h is only for *_avx2.cc files (compiled with -mavx2 -mfma)"
#endif
#include <immintrin.h>
#include <omp.h>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include "podlet/dtype.h"
#include "podlet/kernels/engine_common.h"
#include "podlet/kernels/gemm.h"
#include "podlet/parallel.h"

namespace podlet {  // array.h's pooled raw buffers, declared here so no template of array.h is instantiated
void* alloc_raw_buffer(size_t nbytes, size_t* got);
void free_raw_buffer(void* p, size_t got);
}  // namespace podlet

namespace podlet::kernels::avx2 {
namespace {

constexpr int64_t MR = 6, NR = 16;
constexpr int64_t KC = kGemmTileK;  // the K block: fixes the summation order

using engine::imin, engine::imax, engine::cdiv, engine::round_up;

// A 64-byte aligned float buffer (not std::vector<float>: see the ODR note above), from
// podlet's pool of recycled buffers, as avx512_engine.h's WBuf.
struct FBuf {
  float* p = nullptr;
  size_t got = 0;
  FBuf() = default;
  explicit FBuf(int64_t n) { reset(n); }
  ~FBuf() { free_raw_buffer(p, got); }
  FBuf(const FBuf&) = delete;
  FBuf& operator=(const FBuf&) = delete;
  void reset(int64_t n) {
    free_raw_buffer(p, got);
    p = nullptr;
    p = static_cast<float*>(alloc_raw_buffer(size_t(round_up(imax(n, 1) * 4, 64)), &got));
  }
  void zero(int64_t n) { std::memset(p, 0, size_t(n) * 4); }
};

// ---- loads with bf16 widening (bf16 -> f32 is a 16-bit left shift) ----
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const bf16* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline float load1(const float* p) { return *p; }
inline float load1(const bf16* p) {
  const uint32_t u = uint32_t(p->bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// d[0:n] = s[0:n] as f32.
template <class T> inline void copy_row(const T* s, int64_t n, float* d) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, load8(s + i));
  for (; i < n; ++i) d[i] = load1(s + i);
}
inline void zero_row(float* d, int64_t n) { if (n > 0) std::memset(d, 0, size_t(n) * 4); }

// In-register transpose of an 8x8 block: r[j] becomes column j.
inline void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    u[4 * i + 0] = _mm256_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0xEE);
    u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x20);
    r[4 + i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x31);
  }
}

// dst[c * ld + r] = src[r][c] for r < nrows, c < len: gathers rows that are each
// contiguous into columns of dst, 8x8 blocks at a time.
template <class T>
void transpose_rows(const T* const* src, int64_t nrows, int64_t len, float* dst, int64_t ld) {
  int64_t r0 = 0;
  for (; r0 + 8 <= nrows; r0 += 8) {
    int64_t c = 0;
    for (; c + 8 <= len; c += 8) {
      __m256 v[8];
      for (int j = 0; j < 8; ++j) v[j] = load8(src[r0 + j] + c);
      transpose8(v);
      for (int j = 0; j < 8; ++j) _mm256_storeu_ps(dst + (c + j) * ld + r0, v[j]);
    }
    for (; c < len; ++c)
      for (int j = 0; j < 8; ++j) dst[c * ld + r0 + j] = load1(src[r0 + j] + c);
  }
  for (; r0 < nrows; ++r0)
    for (int64_t c = 0; c < len; ++c) dst[c * ld + r0] = load1(src[r0] + c);
}

// ---- stores of f32 results to the output dtype ----
inline uint16_t bf16_round(float f) {  // same rounding as bf16::from_f32 (RNE, quiet NaN)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
// out[off : off + n] (dtype f32 or bf16) = s[0:n].
inline void store_out(DType d, void* out, int64_t off, const float* s, int64_t n) {
  if (d == DType::f32) {
    std::memcpy(static_cast<float*>(out) + off, s, size_t(n) * 4);
  } else {
    uint16_t* p = static_cast<uint16_t*>(out) + off;
    for (int64_t i = 0; i < n; ++i) p[i] = bf16_round(s[i]);
  }
}

// ---- the microkernel: C[6, 16] (+)= A[6, kc] B[kc, 16] ----
// a: 6 rows of a row-major block (stride lda); b: a panel slice [kc][16], 32-byte
// aligned; c: row stride ldc. add=false stores the block sum, add=true adds it to C.
// Each element is one FMA chain over k = 0..kc-1, then at most one addition to C.
// Never inlined: on its own the register allocator keeps the 12 accumulators, 2 B
// vectors and 6 row pointers in registers (inlined into a big caller it spilled them).
__attribute__((noinline)) void f32_gemm_ukernel_6x16(int64_t kc, const float* a, int64_t lda, const float* b, float* c, int64_t ldc,
                                  bool add) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  const float *a0 = a, *a1 = a + lda, *a2 = a + 2 * lda, *a3 = a + 3 * lda, *a4 = a + 4 * lda, *a5 = a + 5 * lda;
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
    b += NR;
    __m256 t;
    t = _mm256_broadcast_ss(a0 + k); c00 = _mm256_fmadd_ps(t, b0, c00); c01 = _mm256_fmadd_ps(t, b1, c01);
    t = _mm256_broadcast_ss(a1 + k); c10 = _mm256_fmadd_ps(t, b0, c10); c11 = _mm256_fmadd_ps(t, b1, c11);
    t = _mm256_broadcast_ss(a2 + k); c20 = _mm256_fmadd_ps(t, b0, c20); c21 = _mm256_fmadd_ps(t, b1, c21);
    t = _mm256_broadcast_ss(a3 + k); c30 = _mm256_fmadd_ps(t, b0, c30); c31 = _mm256_fmadd_ps(t, b1, c31);
    t = _mm256_broadcast_ss(a4 + k); c40 = _mm256_fmadd_ps(t, b0, c40); c41 = _mm256_fmadd_ps(t, b1, c41);
    t = _mm256_broadcast_ss(a5 + k); c50 = _mm256_fmadd_ps(t, b0, c50); c51 = _mm256_fmadd_ps(t, b1, c51);
  }
  auto put = [&](float* p, __m256 v0, __m256 v1) {
    if (add) {
      v0 = _mm256_add_ps(_mm256_loadu_ps(p), v0);
      v1 = _mm256_add_ps(_mm256_loadu_ps(p + 8), v1);
    }
    _mm256_storeu_ps(p, v0);
    _mm256_storeu_ps(p + 8, v1);
  };
  put(c, c00, c01);
  put(c + ldc, c10, c11);
  put(c + 2 * ldc, c20, c21);
  put(c + 3 * ldc, c30, c31);
  put(c + 4 * ldc, c40, c41);
  put(c + 5 * ldc, c50, c51);
}

// ---- tiling and tasks ----
constexpr int64_t kMaxMC = 120, kNC = 256;  // an output tile: at most 120 x 256

struct Tiling {
  int64_t mc, nc, mt, nt;  // tile sizes and tile counts along M and N
};
// Tile sizes for `groups` independent M x N products: large tiles, made smaller (down to
// 24 rows) until there are a few tasks per thread. Only the speed depends on this.
inline Tiling choose_tiling(int64_t groups, int64_t M, int64_t N) {
  Tiling t;
  t.nc = imin(round_up(imax(N, 1), NR), kNC);
  t.nt = cdiv(imax(N, 1), t.nc);
  t.mc = imin(kMaxMC, round_up(imax(M, 1), MR));
  const int64_t want = 3 * int64_t(num_threads());
  while (t.mc > 24 && groups * cdiv(M, t.mc) * t.nt < want) t.mc -= 24;
  t.mt = cdiv(imax(M, 1), t.mc);
  return t;
}

// Per-thread scratch: the packed A block and the C tile.
struct Scratch {
  FBuf a, c;
  FBuf b;  // a K block of B's panels, for kernels that pack B per block (allocated there)
  Scratch() : a(kMaxMC * KC), c(kMaxMC * kNC) {}
};

// The task runners of engine_common.h with this engine's Scratch and thresholds.
template <class F> void run_tasks(int64_t n, double flops, F&& f) {
  engine::run_tasks<Scratch>(n, flops >= 2e6, f);
}
template <class F> void run_units(int64_t n, double work, F&& f) { engine::run_units(n, work >= 1e5, f); }

// The B operand of one K block of a tile: panel j (j = 0, 1, .. from the tile's first
// column) is at p + j * stride, [kb][NR] floats, 32-byte aligned.
struct BView {
  const float* p;
  int64_t stride;
};
// B prepacked whole (panels [K][NR], panel j at bp + j * K * NR).
struct PrepackedB {
  const float* bp;
  int64_t K;
  BView operator()(int64_t n0, int64_t, int64_t k0, int64_t, Scratch&) const {
    return {bp + (n0 / NR) * K * NR + k0 * NR, K * NR};
  }
};

// Adds to (or, from K index 0, stores in) the C tile ct [mb x nb] (row stride ldc >=
// round_up(nb, NR), rows up to round_up(mb, MR) written) the part k in [kbeg, kend) of
// C = A B, summed in blocks of KC (kbeg, and kend unless it is K, multiples of KC):
//   get_b(n0, nb, k0, kb, scratch) -> BView of B[k0:k0+kb, n0:n0+nb] (n0 a multiple of NR);
//   pack_a(m0, mb, k0, kb, dst, lda) writes A[m0:m0+mb, k0:k0+kb] row-major into dst.
template <class GetB, class PackA>
void tile_product(int64_t m0, int64_t mb, int64_t n0, int64_t nb, int64_t kbeg, int64_t kend, GetB&& get_b,
                  PackA&& pack_a, Scratch& s, float* ct, int64_t ldc) {
  const int64_t mp = round_up(mb, MR), np = round_up(nb, NR);
  if (kend == 0) {  // empty sum
    for (int64_t i = 0; i < mp; ++i) zero_row(ct + i * ldc, np);
    return;
  }
  for (int64_t k0 = kbeg; k0 < kend; k0 += KC) {
    const int64_t kb = imin(KC, kend - k0);
    float* ab = s.a.p;
    pack_a(m0, mb, k0, kb, ab, kb);
    zero_row(ab + mb * kb, (mp - mb) * kb);
    const BView bv = get_b(n0, nb, k0, kb, s);
    for (int64_t j = 0; j < np; j += NR) {
      const float* bpan = bv.p + (j / NR) * bv.stride;
      for (int64_t i = 0; i < mp; i += MR) f32_gemm_ukernel_6x16(kb, ab + i * kb, kb, bpan, ct + i * ldc + j, ldc, k0 > 0);
    }
  }
}
// The whole K range into the scratch C tile (s.c, row stride ldc).
template <class GetB, class PackA>
void tile_product(int64_t m0, int64_t mb, int64_t n0, int64_t nb, int64_t K, GetB&& get_b, PackA&& pack_a, Scratch& s,
                  int64_t ldc) {
  tile_product(m0, mb, n0, nb, 0, K, get_b, pack_a, s, s.c.p, ldc);
}

}  // namespace
}  // namespace podlet::kernels::avx2
