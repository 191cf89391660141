// The AVX2+FMA f32 GEMM engine shared by the *_avx2.cc kernels (dot_general and the
// three convolutions). Include it only from files compiled with -mavx2 -mfma.
//
// C[M, N] = A[M, K] B[K, N], f32 accumulation:
//   * B is prepacked once per call into panels of NR = 16 columns, each panel [K][16]
//     (zero-padded past N), so the microkernel reads it with aligned contiguous loads;
//     a long sum packs it per task and K block instead (gemm_avx2.cc, Scratch::b);
//   * A is packed per task and K block by a caller-supplied packer, row-major [mb][kb]
//     (an im2col block for convolutions, a plain row copy for matmuls, bf16 widened),
//     or k-major [kb][mb] when A is stored with M contiguous (one copy per K row);
//   * the 6x16 microkernel keeps a 6x16 C block in 12 ymm registers, broadcasting A
//     (6x8 for a tile's last panel when at most 8 of its columns are real).
// Determinism: K is cut into fixed blocks of KC = kGemmTileK, each summed in order by
// one FMA chain per output element and added to C block after block; output tiles are
// independent tasks. A reduction is split across threads only at K chunk boundaries that
// depend on the shape alone (engine::k_chunks; its partials are added in chunk
// order), so the bits depend on neither the thread count nor the tile sizes (which may
// follow the thread count).
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
  // At least n floats (contents not kept when it grows).
  void reserve(int64_t n) {
    if (!p || size_t(imax(n, 1)) * 4 > got) reset(n);
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

// bf16 bits of 8 floats, rounded as bf16_round (nearest even, NaN kept quiet), each in
// the low half of its 32-bit lane.
inline __m256i bf16_bits8(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  const __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x0040));
  return _mm256_blendv_epi8(r, q, nan);
}
// 8 floats as 8 bf16, in order.
inline __m128i bf16_round8(__m256 v) {
  const __m256i w = bf16_bits8(v);
  return _mm_packus_epi32(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
}
// 16 floats (two vectors) as 16 bf16, in order (packus works per 128-bit lane).
inline __m256i bf16_round16(__m256 lo, __m256 hi) {
  return _mm256_permute4x64_epi64(_mm256_packus_epi32(bf16_bits8(lo), bf16_bits8(hi)), 0xD8);
}

// Where a tile's last K block goes when it bypasses the C tile: the output itself, row
// stride ld elements, rows x cols valid from p (the block's first element), rounded to
// bf16 or stored as f32 from the registers that summed it (avx512_engine.h's OutBlock).
struct OutBlock {
  DType dtype;
  void* p;
  int64_t ld;
  int rows, cols;
};

// Both stores are always inlined into the microkernel: called out of line they take the
// accumulators by address, and GCC then kept all twelve on the stack, stored at every
// step (the whole GEMM at a third of its speed).
template <int NV>
__attribute__((always_inline)) inline void store_block(const __m256 (&acc)[MR][NV], float* c, int64_t ldc, bool add) {
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r) {
    float* p = c + r * ldc;
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      __m256 x = acc[r][v];
      if (add) x = _mm256_add_ps(_mm256_loadu_ps(p + 8 * v), x);
      _mm256_storeu_ps(p + 8 * v, x);
    }
  }
}
// The block's valid rows and columns into the output: the same sums as store_block then
// store_out (C + block, then rounded), without the pass over the C tile. Partial rows go
// through a stack row (AVX2 has no masked 16-bit stores).
template <int NV>
__attribute__((always_inline)) inline void store_block_out(const __m256 (&acc)[MR][NV], const float* c, int64_t ldc,
                                                           bool add, const OutBlock& o) {
  const bool full = o.cols >= 8 * NV;
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r) {
    if (r >= o.rows) break;
    __m256 x[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      x[v] = acc[r][v];
      if (add) x[v] = _mm256_add_ps(_mm256_loadu_ps(c + r * ldc + 8 * v), x[v]);
    }
    if (o.dtype == DType::f32) {
      float* p = static_cast<float*>(o.p) + r * o.ld;
      if (full) {
        for (int v = 0; v < NV; ++v) _mm256_storeu_ps(p + 8 * v, x[v]);
      } else {
        alignas(32) float t[8 * NV];
        for (int v = 0; v < NV; ++v) _mm256_store_ps(t + 8 * v, x[v]);
        std::memcpy(p, t, size_t(o.cols) * 4);
      }
    } else {
      uint16_t* p = static_cast<uint16_t*>(o.p) + r * o.ld;
      alignas(32) uint16_t t[8 * NV];
      uint16_t* d = full ? p : t;
      if constexpr (NV == 2) _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), bf16_round16(x[0], x[1]));
      else _mm_storeu_si128(reinterpret_cast<__m128i*>(d), bf16_round8(x[0]));
      if (!full) std::memcpy(p, t, size_t(o.cols) * 2);
    }
  }
}

// ---- the microkernel: C[6, 8 NV] (+)= A[6, kc] B[kc, 8 NV] ----
// a: 6 rows of a row-major block (row stride lda), or k-major (KMajor: the 6 rows'
// elements of step k at a + k * lda); b: a panel slice [kc][16], 32-byte aligned, of
// which NV vectors are read (NV = 1: a tile's last panel with at most 8 real columns);
// c: row stride ldc. add=false stores the block sum, add=true adds it to C. Each element
// is one FMA chain over k = 0..kc-1, then at most one addition to C. With `out` the
// result goes to the output instead of c (store_block_out), the bits unchanged.
// Never inlined: on its own the register allocator keeps the 12 accumulators, 2 B
// vectors and 6 row pointers in registers (inlined into a big caller it spilled them).
template <bool KMajor, int NV = 2>
__attribute__((noinline)) void ukernel_6x16(int64_t kc, const float* a, int64_t lda, const float* b, float* c,
                                            int64_t ldc, bool add, const OutBlock* out = nullptr) {
  static_assert(NV == 1 || NV == 2, "a panel is two vectors wide");
  __m256 acc[MR][NV];
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_setzero_ps();
  if constexpr (KMajor) {
    for (int64_t k = 0; k < kc; ++k) {
      __m256 bv[NV];
      for (int v = 0; v < NV; ++v) bv[v] = _mm256_load_ps(b + 8 * v);
      b += NR;
#pragma GCC unroll 6
      for (int r = 0; r < MR; ++r) {
        const __m256 t = _mm256_broadcast_ss(a + r);
        for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(t, bv[v], acc[r][v]);
      }
      a += lda;
    }
  } else {
    const float *a0 = a, *a1 = a + lda, *a2 = a + 2 * lda, *a3 = a + 3 * lda, *a4 = a + 4 * lda, *a5 = a + 5 * lda;
    for (int64_t k = 0; k < kc; ++k) {
      __m256 bv[NV];
      for (int v = 0; v < NV; ++v) bv[v] = _mm256_load_ps(b + 8 * v);
      b += NR;
      const float* ar[MR] = {a0 + k, a1 + k, a2 + k, a3 + k, a4 + k, a5 + k};
#pragma GCC unroll 6
      for (int r = 0; r < MR; ++r) {
        const __m256 t = _mm256_broadcast_ss(ar[r]);
        for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(t, bv[v], acc[r][v]);
      }
    }
  }
  if (out) store_block_out<NV>(acc, c, ldc, add, *out);
  else store_block<NV>(acc, c, ldc, add);
}

// ---- tiling and tasks ----
constexpr int64_t kMaxMC = 120, kNC = 256;  // an output tile: at most 120 x 256

struct Tiling {
  int64_t mc, nc, mt, nt;  // tile sizes and tile counts along M and N
};
// Tile sizes for `groups` independent M x N products: large tiles, made smaller (down to
// 24 rows) until there are a few tasks per thread. When the tasks are few, the threads
// wait for the one with most rows, so the tiles are then evened out: as many row tiles
// as make the task count a multiple of the threads (768 rows: 8 x 96, not 6 x 120 + 48
// nor 7 x 114, with 2 threads), all the same height (192 rows: 2 x 96, not 120 + 72),
// and equal column tiles (384 columns: 2 x 192). Only the speed depends on this.
inline Tiling choose_tiling(int64_t groups, int64_t M, int64_t N) {
  M = imax(M, 1);
  N = imax(N, 1);
  Tiling t;
  t.nt = cdiv(N, kNC);
  t.nc = round_up(cdiv(N, t.nt), NR);
  t.mc = imin(kMaxMC, round_up(M, MR));
  const int64_t threads = num_threads(), want = 3 * threads;
  while (t.mc > 24 && groups * cdiv(M, t.mc) * t.nt < want) t.mc -= 24;
  t.mt = cdiv(M, t.mc);
  if (groups * t.mt * t.nt < 8 * threads)
    while ((groups * t.mt * t.nt) % threads && cdiv(M, t.mt + 1) >= 4 * MR) ++t.mt;
  t.mc = round_up(cdiv(M, t.mt), MR);
  t.mt = cdiv(M, t.mc);
  return t;
}

// Per-thread scratch: the packed A block and the C tile.
struct Scratch {
  FBuf a, c;
  FBuf b;  // B's panels, for kernels that pack B per block or per task (allocated there)
  int64_t b_key = -1;  // which panels `b` holds, for kernels that keep them across tasks
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
//   pack_a(m0, mb, k0, kb, dst, lda) writes A[m0:m0+mb, k0:k0+kb] into dst, row-major
//   (row stride lda = kb) or, KMajor, k-major (step k's mb elements at dst + k * lda,
//   lda = round_up(mb, MR): A stored with M contiguous, one contiguous copy per step).
// With `partial`, ct is the sum of [kbeg, kend) alone (a K chunk's partial sum): its
// first block stores instead of adding.
// The A block's padding rows (up to round_up(mb, MR)) are zeroed here. With `out` (the
// output at the tile's first element, row stride out->ld) the last block stores the
// finished sums there, rounded to its dtype, instead of in ct: the C tile is then only
// the running sum of the earlier blocks (with one block, never touched).
struct OutTile {
  DType dtype;
  void* p;
  int64_t ld;
};
template <bool KMajor = false, class GetB, class PackA>
void tile_product(int64_t m0, int64_t mb, int64_t n0, int64_t nb, int64_t kbeg, int64_t kend, GetB&& get_b,
                  PackA&& pack_a, Scratch& s, float* ct, int64_t ldc, const OutTile* out = nullptr,
                  bool partial = false) {
  const int64_t mp = round_up(mb, MR), np = round_up(nb, NR);
  if (kend == 0) {  // empty sum
    for (int64_t i = 0; i < mp; ++i) zero_row(ct + i * ldc, np);
    if (out)
      for (int64_t i = 0; i < mb; ++i) store_out(out->dtype, out->p, i * out->ld, ct + i * ldc, nb);
    return;
  }
  const int64_t esize = out && out->dtype == DType::f32 ? 4 : 2;
  const int64_t k_store = partial ? kbeg : 0;  // the block that stores in ct; the later ones add
  for (int64_t k0 = kbeg; k0 < kend; k0 += KC) {
    const int64_t kb = imin(KC, kend - k0);
    float* ab = s.a.p;
    if constexpr (KMajor) {
      pack_a(m0, mb, k0, kb, ab, mp);
      if (mb < mp)
        for (int64_t k = 0; k < kb; ++k) zero_row(ab + k * mp + mb, mp - mb);
    } else {
      pack_a(m0, mb, k0, kb, ab, kb);
      zero_row(ab + mb * kb, (mp - mb) * kb);
    }
    const BView bv = get_b(n0, nb, k0, kb, s);
    const bool last = out && k0 + kb == kend;
    for (int64_t j = 0; j < np; j += NR) {
      const float* bpan = bv.p + (j / NR) * bv.stride;
      auto kernel = nb - j <= 8 ? ukernel_6x16<KMajor, 1> : ukernel_6x16<KMajor, 2>;
      for (int64_t i = 0; i < mp; i += MR) {
        const float* a = KMajor ? ab + i : ab + i * kb;
        const int64_t lda = KMajor ? mp : kb;
        if (last) {
          const OutBlock ob{out->dtype, static_cast<char*>(out->p) + (i * out->ld + j) * esize, out->ld,
                            int(imin(MR, mb - i)), int(imin(NR, nb - j))};
          kernel(kb, a, lda, bpan, ct + i * ldc + j, ldc, k0 > k_store, &ob);
        } else {
          kernel(kb, a, lda, bpan, ct + i * ldc + j, ldc, k0 > k_store, nullptr);
        }
      }
    }
  }
}
// The whole K range into the scratch C tile (s.c, row stride ldc), or with `out` into
// the output.
template <bool KMajor = false, class GetB, class PackA>
void tile_product(int64_t m0, int64_t mb, int64_t n0, int64_t nb, int64_t K, GetB&& get_b, PackA&& pack_a, Scratch& s,
                  int64_t ldc, const OutTile* out = nullptr) {
  tile_product<KMajor>(m0, mb, n0, nb, 0, K, get_b, pack_a, s, s.c.p, ldc, out);
}

}  // namespace
}  // namespace podlet::kernels::avx2
