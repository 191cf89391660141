// The AVX-512 GEMM engine shared by the *_avx512.cc and *_avx512bf16.cc kernels
// (dot_general and the three convolutions). Include it only from files compiled with
// -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma (and -mavx512bf16 for the bf16 kind).
//
// C[M, N] = A[M, K] B[K, N] with f32 accumulation, in one of two kinds:
//   * F32Kind: operands widened to f32 when packed; the microkernel broadcasts an A
//     element and FMAs it into 16-lane zmm accumulators (vfmadd231ps).
//   * Bf16Kind (AVX512_BF16 hosts, bf16 operands): a "k step" is a pair of consecutive
//     K elements held in one 32-bit word; the microkernel broadcasts an A pair and
//     vdpbf16ps adds both products to each f32 lane. bf16 x bf16 products are exact in
//     f32; the pair's two additions round as vdpbf16ps defines (RNE, denormals as 0).
// Either way both operands are packed as 32-bit words per k step, so the engine below
// is the same for both and only the microkernel's instruction differs:
//   * B panels of NR = 32 columns: [kq][NR] words (2 zmm a step), zero-padded past N;
//   * A blocks in one of two layouts, chosen by the caller's packer for what is cheap
//     to produce: row-major [rows][kq] (im2col rows, x @ W) or k-major, MR rows a step
//     (x^T @ g, where A is stored transposed): [kq][MR] per group of MR rows, or the
//     block's steps whole, [kq][rows] (the GEMM's packer);
//   * the 12x32 microkernel keeps C[12, 32] in 24 zmm accumulators.
// Determinism: K is cut into fixed blocks of KQ steps, each summed in order by one chain
// per output element and added to the C tile block after block; output tiles are
// independent tasks. No reduction is split across threads, so the bits depend on
// neither the thread count nor the tile sizes.
//
// ODR / ISA safety: as avx2_engine.h, everything here has internal linkage and the
// including files must not instantiate templates with external linkage.
#pragma once
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__FMA__)
#error "avx512_engine.h is only for *_avx512*.cc files (compiled with -mavx512f -mavx512bw -mavx512vl -mfma)"
#endif
#include <immintrin.h>
#include <omp.h>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include "podlet/dtype.h"
#include "podlet/kernels/bf16_lanes_avx512.h"
#include "podlet/kernels/engine_common.h"
#include "podlet/kernels/gemm.h"
#include "podlet/kernels/stream_out.h"
#include "podlet/parallel.h"

namespace podlet {  // array.h's pooled raw buffers, declared here so no template of array.h is instantiated
void* alloc_raw_buffer(size_t nbytes, size_t* got);
void free_raw_buffer(void* p, size_t got);
}  // namespace podlet

namespace podlet::kernels::avx512 {
namespace {

constexpr int64_t MR = 12, NR = 32;
constexpr int64_t KQ = 256;  // k steps per K block: fixes the summation order

using engine::imin, engine::imax, engine::cdiv, engine::round_up;

struct F32Kind {
  static constexpr int64_t kstep = 1;  // K elements per 32-bit word
};
struct Bf16Kind {
  static constexpr int64_t kstep = 2;
};

// A 64-byte aligned buffer of 32-bit words (not std::vector: see the ODR note), from
// podlet's pool of recycled buffers (array.h): a packed operand of tens of MB from
// aligned_alloc was mapped, faulted in and unmapped on every call (Swin-T f32 at batch
// 32: ~0.9 GB of page faults a step).
struct WBuf {
  uint32_t* p = nullptr;
  WBuf() = default;
  explicit WBuf(int64_t n) { reset(n); }
  ~WBuf() { free_raw_buffer(p, got); }
  WBuf(const WBuf&) = delete;
  WBuf& operator=(const WBuf&) = delete;
  void reset(int64_t n) {
    free_raw_buffer(p, got);
    p = nullptr;
    cap = imax(n, 1);
    p = static_cast<uint32_t*>(alloc_raw_buffer(size_t(round_up(cap * 4, 64)), &got));
  }
  int64_t cap = 0;
  size_t got = 0;  // bytes held (the pool's size class)
  // Grows to at least n words (contents not kept).
  void reserve(int64_t n) {
    if (n > cap) { reset(n); }
  }
  float* f() const { return reinterpret_cast<float*>(p); }
  uint16_t* h() const { return reinterpret_cast<uint16_t*>(p); }
  void zero(int64_t n) { std::memset(p, 0, size_t(n) * 4); }
};

// ---- element access (bf16 -> f32 is a 16-bit left shift) ----
inline float widen1(float v) { return v; }
inline float widen1(bf16 v) {
  const uint32_t u = uint32_t(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// load16 / maskload16 / tail16: bf16_lanes_avx512.h.
inline __mmask32 tail32(int64_t n) { return n >= 32 ? __mmask32(0xffffffffu) : __mmask32((1u << n) - 1u); }

// d[0:n] = s[0:n] as f32 (F32Kind rows).
template <class T> inline void copy_row(const T* s, int64_t n, float* d) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(d + i, load16(s + i));
  if (i < n) _mm512_mask_storeu_ps(d + i, tail16(n - i), maskload16(s + i, tail16(n - i)));
}
// Small copies and fills are the packers' common case (a 7-tap row of a 1-channel
// stem, a 12-row group): masked vector moves, not library calls.
inline void zero_words(uint32_t* d, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_si512(d + i, _mm512_setzero_si512());
  if (i < n) _mm512_mask_storeu_epi32(d + i, tail16(n - i), _mm512_setzero_si512());
}
inline void zero_halves(uint16_t* d, int64_t n) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) _mm512_storeu_si512(d + i, _mm512_setzero_si512());
  if (i < n) _mm512_mask_storeu_epi16(d + i, tail32(n - i), _mm512_setzero_si512());
}
inline void zero_floats(float* d, int64_t n) { zero_words(reinterpret_cast<uint32_t*>(d), n); }
// d[0:n] = s[0:n], raw 16-bit elements (Bf16Kind rows: consecutive elements are pairs).
inline void copy_halves(const bf16* s, int64_t n, uint16_t* d) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) _mm512_storeu_si512(d + i, _mm512_loadu_si512(s + i));
  if (i < n) {
    const __mmask32 m = tail32(n - i);
    _mm512_mask_storeu_epi16(d + i, m, _mm512_maskz_loadu_epi16(m, s + i));
  }
}

// The vpermt2w index giving words 16h .. 16h + 15 of two interleaved 32-element rows
// a, b (halves of words): element 2j = a[16h + j], element 2j + 1 = b[16h + j].
inline __m512i interleave_index(int h) {
  const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6, 37,
                                      5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  return h ? _mm512_add_epi16(lo, _mm512_set1_epi16(16)) : lo;
}

// d[i] = (r1[i] << 16) | r0[i] for i < n: the k-step words of two consecutive K rows
// (Bf16Kind B panels, k-major A). A null row is a row of zeros (odd K tail, padding).
// Full 32-column pieces of two real rows take one vpermt2w per 16 words (2 loads, 2
// permutes, 2 stores) instead of widening each half: the packers' inner loop.
inline void interleave_rows(const bf16* r0, const bf16* r1, int64_t n, uint32_t* d) {
  int64_t i = 0;
  if (r0 && r1) {
    const __m512i lo = interleave_index(0), hi = interleave_index(1);
    for (; i + 32 <= n; i += 32) {
      const __m512i a = _mm512_loadu_si512(r0 + i), b = _mm512_loadu_si512(r1 + i);
      _mm512_storeu_si512(d + i, _mm512_permutex2var_epi16(a, lo, b));
      _mm512_storeu_si512(d + i + 16, _mm512_permutex2var_epi16(a, hi, b));
    }
  }
  for (; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : tail16(n - i);
    const __m512i a = r0 ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, r0 + i)) : _mm512_setzero_si512();
    const __m512i b = r1 ? _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, r1 + i)), 16)
                         : _mm512_setzero_si512();
    _mm512_mask_storeu_epi32(d + i, m, _mm512_or_si512(a, b));
  }
}

// ---- transposes: dst[c * ld + r] = word c of source row r ----
// Source rows are float (F32Kind), bf16 (F32Kind, widened) or Word (raw 32-bit words:
// bf16 pairs for Bf16Kind). 8x8 blocks in ymm registers.
// Alignment 1: a bf16 pair starts at any even bf16 offset, so a Word is read with
// unaligned loads / memcpy, never as an aligned uint32_t (UBSan: misaligned access).
struct Word { unsigned char bytes[4]; };
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const bf16* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16));
}
inline __m256 load8(const Word* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
inline uint32_t bits1(float v) { uint32_t u; std::memcpy(&u, &v, 4); return u; }
inline uint32_t word1(const float* p) { return bits1(*p); }
inline uint32_t word1(const bf16* p) { return uint32_t(p->bits) << 16; }
inline uint32_t word1(const Word* p) { uint32_t u; std::memcpy(&u, p->bytes, 4); return u; }

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

template <class T>
void transpose_rows(const T* const* src, int64_t nrows, int64_t len, uint32_t* dst, int64_t ld) {
  float* d = reinterpret_cast<float*>(dst);
  int64_t r0 = 0;
  for (; r0 + 8 <= nrows; r0 += 8) {
    int64_t c = 0;
    for (; c + 8 <= len; c += 8) {
      __m256 v[8];
      for (int j = 0; j < 8; ++j) v[j] = load8(src[r0 + j] + c);
      transpose8(v);
      for (int j = 0; j < 8; ++j) _mm256_storeu_ps(d + (c + j) * ld + r0, v[j]);
    }
    for (; c < len; ++c)
      for (int j = 0; j < 8; ++j) dst[c * ld + r0 + j] = word1(src[r0 + j] + c);
  }
  for (; r0 < nrows; ++r0)
    for (int64_t c = 0; c < len; ++c) dst[c * ld + r0] = word1(src[r0] + c);
}

// ---- stores of f32 results to the output dtype ----
// bf16: round to nearest even, NaN kept quiet (bf16::from_f32's rule), 16 at a time.
inline __m256i bf16_round16(__m512 v) {
#ifdef __AVX512BF16__
  // vcvtneps2bf16 is this rounding (RNE, NaN quieted with its payload's top bits) for
  // every f32 but the subnormals, which it flushes to zero (checked exhaustively over
  // the top 16 bits and 3.2e8 random words): 2 instructions and a rarely taken branch
  // instead of 12 on the epilogues' critical path.
  if (__builtin_expect(_mm512_fpclass_ps_mask(v, 0x20) == 0, 1)) return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
#endif
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  const __m512i q = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, r, q));
}
// 32 bf16 (lo's 16, then hi's) = bf16_round16(lo), bf16_round16(hi): on AVX512_BF16 one
// vcvtne2ps2bf16 for both unless either holds a subnormal (the same rounding, one
// conversion and one 64-byte store per pair: the epilogue of a K = 64 product rounds 24
// vectors per 768 dot products).
inline __m512i bf16_round32(__m512 lo, __m512 hi) {
#ifdef __AVX512BF16__
  if (__builtin_expect((_mm512_fpclass_ps_mask(lo, 0x20) | _mm512_fpclass_ps_mask(hi, 0x20)) == 0, 1))
    return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
#endif
  return _mm512_inserti64x4(_mm512_castsi256_si512(bf16_round16(lo)), bf16_round16(hi), 1);
}
// out[off : off + n] (dtype f32 or bf16) = s[0:n].
inline void store_out(DType d, void* out, int64_t off, const float* s, int64_t n) {
  if (d == DType::f32) {
    std::memcpy(static_cast<float*>(out) + off, s, size_t(n) * 4);
    return;
  }
  uint16_t* p = static_cast<uint16_t*>(out) + off;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm256_storeu_si256((__m256i*)(p + i), bf16_round16(_mm512_loadu_ps(s + i)));
  if (i < n) _mm256_mask_storeu_epi16(p + i, tail16(n - i), bf16_round16(_mm512_maskz_loadu_ps(tail16(n - i), s + i)));
}
// out[off : off + 16] (f32 or bf16) = the register v; non-temporal when `stream` and the
// destination is aligned (a large output written once, as below).
inline void store_out16(DType d, void* out, int64_t off, __m512 v, bool stream) {
  if (d == DType::f32) {
    float* p = static_cast<float*>(out) + off;
    if (stream && !(reinterpret_cast<uintptr_t>(p) & 63)) _mm512_stream_ps(p, v);
    else _mm512_storeu_ps(p, v);
  } else {
    __m256i* p = reinterpret_cast<__m256i*>(static_cast<uint16_t*>(out) + off);
    if (stream && !(reinterpret_cast<uintptr_t>(p) & 31)) _mm256_stream_si256(p, bf16_round16(v));
    else _mm256_storeu_si256(p, bf16_round16(v));
  }
}
// store_out for large outputs written once (at least kStreamOutBytes, stream_out.h):
// non-temporal stores for the whole 16-element groups of an aligned row (32 bytes for bf16, 64 for
// f32), so the lines are not read for ownership first (stride-2 56->128 backward-data:
// dx rows were ~5% of its time; the 1-channel stem's forward is store-bound) and do not
// evict the operands; plain stores elsewhere.
// Same values. The caller fences (_mm_sfence) before its task ends.
inline void store_out_stream(DType d, void* out, int64_t off, const float* s, int64_t n) {
  const int64_t full = n & ~int64_t(15);
  if (d == DType::f32) {
    float* p = static_cast<float*>(out) + off;
    if (full == 0 || (reinterpret_cast<uintptr_t>(p) & 63)) return store_out(d, out, off, s, n);
    for (int64_t i = 0; i < full; i += 16) _mm512_stream_ps(p + i, _mm512_loadu_ps(s + i));
  } else {
    uint16_t* p = static_cast<uint16_t*>(out) + off;
    if (full == 0 || (reinterpret_cast<uintptr_t>(p) & 31)) return store_out(d, out, off, s, n);
    for (int64_t i = 0; i < full; i += 16) _mm256_stream_si256((__m256i*)(p + i), bf16_round16(_mm512_loadu_ps(s + i)));
  }
  if (full < n) store_out(d, out, off + full, s + full, n - full);
}
// out[off + i * ld] = s[i] for i < n: a column of the output (transposed stores).
inline void store_out_strided(DType d, void* out, int64_t off, int64_t ld, const float* s, int64_t n) {
  if (d == DType::f32) {
    float* p = static_cast<float*>(out) + off;
    for (int64_t i = 0; i < n; ++i) p[i * ld] = s[i];
    return;
  }
  bf16* p = static_cast<bf16*>(out) + off;
  for (int64_t i = 0; i < n; ++i) p[i * ld] = bf16(s[i]);
}

// ---- the microkernels: C[R, 32] (+)= A[R, kq steps] B[kq steps, 32] ----
// A word (q, r) is a[q * lda + r] (KMajor; lda = 0 means R, groups packed apart) or
// a[r * lda + q] (row-major); b is a panel
// slice [kq][NR] words, 64-byte aligned; c has row stride ldc. add=false stores the block
// sum, add=true adds it to C. Each element is one chain over q = 0..kq-1, then at most
// one addition to C. Never inlined, so the accumulators stay in registers.
template <class Kind> inline __m512 madd(__m512 acc, uint32_t aw, __m512 b);
template <> inline __m512 madd<F32Kind>(__m512 acc, uint32_t aw, __m512 b) {
  return _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_set1_epi32(int(aw))), b, acc);
}
#ifdef __AVX512BF16__
template <> inline __m512 madd<Bf16Kind>(__m512 acc, uint32_t aw, __m512 b) {
  return _mm512_dpbf16_ps(acc, (__m512bh)_mm512_set1_epi32(int(aw)), (__m512bh)b);
}
#endif

// C[R, 16 NV] = (add ? C + : ) the accumulators: the one addition to C a block makes.
template <int R, int NV = 2> inline void store_block(const __m512 (&acc)[R][NV], float* c, int64_t ldc, bool add) {
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    float* p = c + r * ldc;
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      __m512 x = acc[r][v];
      if (add) x = _mm512_add_ps(_mm512_loadu_ps(p + 16 * v), x);
      _mm512_storeu_ps(p + 16 * v, x);
    }
  }
}

// Where a tile's last K block goes when it bypasses the C tile: the output itself, row
// stride ld elements, rows x cols valid from p (the block's first element), rounded to
// bf16 or stored as f32 from the registers that summed it. (Non-temporal stores here
// measured no faster, even for a 77 MB output: 100352 x 96 x 384.)
struct OutBlock {
  DType dtype;
  void* p;
  int64_t ld;
  int rows, cols;
};
// The block's output lines requested for writing (prefetchw: every AVX-512 CPU has it)
// before a short block's microkernel runs, so that their reads for ownership overlap its
// products instead of stalling its stores: with at most 64 k steps (K <= 128 in bf16) a
// call's products are too few to hide them (ViT's QK^T writes 7.4 MB of bf16 logits per
// call from 32 k steps; Swin's K = 96 products). Longer blocks measured no gain, and
// P V (99 steps) 3-5% slower with it.
constexpr int64_t kPrefetchStoreSteps = 64;
inline void prefetch_for_store(const OutBlock& ob, int64_t esize) {
  const char* p = static_cast<const char*>(ob.p);
  const int64_t last = ob.cols * esize - 1;
  for (int r = 0; r < ob.rows; ++r) {
    const char* row = p + r * ob.ld * esize;
    asm volatile("prefetchw %0" ::"m"(*row));
    asm volatile("prefetchw %0" ::"m"(*(row + last)));
  }
}

// ---- software prefetch of the next K block's operand rows ----
// A K block's operands are packed from memory just before its microkernels run, so the
// packing waits for every line of a long operand that is not cached: a weight
// gradient's x and g (Swin-T's first stage: 19 + 77 MB per product) come from DRAM in
// rows of a few lines each, which the hardware prefetchers follow poorly (pack_b_panel
// spent 16-19% of a [96, 384]-over-100,352 product stalled on its loads, with one
// thread as with two). The microkernels of a block therefore prefetch, into L2, the
// rows the next block will pack, a few lines per call spread over its steps, where the
// loads overlap the dot products.
// A stream: `rows` rows of `lpr` lines each, the first line at p, rows `stride` bytes apart.
struct PfStream {
  const char* p = nullptr;
  int64_t stride = 0, rows = 0, lpr = 0;
  int64_t lines() const { return rows * lpr; }
};
// Rows [0, rows) of `bytes` bytes each, from `first`, `stride` bytes apart.
inline PfStream pf_stream(const void* first, int64_t stride, int64_t rows, int64_t bytes) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(first);
  if (rows <= 0 || bytes <= 0) return {};
  return {reinterpret_cast<const char*>(a & ~uintptr_t(63)), stride, rows, cdiv(int64_t(a & 63) + bytes, 64)};
}
// The next block's A and B rows (either may be empty).
struct PfStreams {
  PfStream s[2];
};
// A position in a stream (line `line` of the row at `row`) and one microkernel call's
// share of it: `left` lines, one every `every` steps. The call advances the position, and
// the next call continues from there.
struct PfCursor {
  const char* row = nullptr;
  int64_t stride = 0, line = 0, lpr = 1, left = 0, every = 1;
};
// A block's calls [0, calls) share the next block's streams: the first `ca` stream 0
// (A), the rest stream 1 (B), each call an equal share of its stream's lines
// (no divisions per call: a call of 48 steps is ~1,200 cycles).
struct PfPlan {
  PfCursor cur[2];
  int64_t quota[2] = {0, 0}, ca = 0;
  PfPlan(const PfStreams& ps, int64_t calls, int64_t kq) {
    if (calls <= 0) return;
    const int64_t la = ps.s[0].lines(), lb = ps.s[1].lines();
    ca = la == 0 ? 0 : lb == 0 ? calls : imin(calls - 1, imax(1, calls * la / (la + lb)));
    const int64_t n[2] = {ca, calls - ca};
    for (int i = 0; i < 2; ++i) {
      const PfStream& st = ps.s[i];
      if (n[i] == 0 || st.lines() == 0) continue;
      quota[i] = cdiv(st.lines(), n[i]);
      cur[i] = PfCursor{st.p, st.stride, 0, st.lpr, 0, imax(1, kq / quota[i])};
      total[i] = st.lines();
    }
  }
  // The cursor of call `call` (in order), its share set.
  PfCursor* at(int64_t call) {
    const int i = call < ca ? 0 : 1;
    cur[i].left = imin(quota[i], total[i]);
    total[i] -= cur[i].left;
    return &cur[i];
  }

 private:
  int64_t total[2] = {0, 0};
};
// Issues c's next prefetch at step q; returns the step of the one after it (kq: none).
// The cursor stays in memory: the microkernel's loop keeps only that step in a register
// (the whole cursor in registers spilled the row-major kernel's pointers: a K = 96
// forward product ran 7-10% slower).
inline int64_t pf_issue(PfCursor& c, int64_t q, int64_t kq) {
  _mm_prefetch(c.row + 64 * c.line, _MM_HINT_T1);
  if (++c.line == c.lpr) {
    c.line = 0;
    c.row += c.stride;
  }
  return --c.left > 0 ? q + c.every : kq;
}

// out rows [0, o.rows) x cols [0, o.cols) = (add ? C + : ) the accumulators: the same
// additions as store_block and then store_out, without the C tile's round trip.
template <int R, int NV = 2>
inline void store_block_out(const __m512 (&acc)[R][NV], const float* c, int64_t ldc, bool add, const OutBlock& o) {
  __mmask16 m[NV];  // the valid columns of each vector
  for (int v = 0; v < NV; ++v)
    m[v] = o.cols >= 16 * (v + 1) ? __mmask16(0xffff) : o.cols > 16 * v ? tail16(o.cols - 16 * v) : __mmask16(0);
  const bool full = o.cols >= 16 * NV;
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    if (r >= o.rows) break;
    if constexpr (NV == 2) {
      if (full && o.dtype == DType::bf16) {  // the row's 32 columns rounded and stored at once
        __m512 x0 = acc[r][0], x1 = acc[r][1];
        if (add) {
          x0 = _mm512_add_ps(_mm512_loadu_ps(c + r * ldc), x0);
          x1 = _mm512_add_ps(_mm512_loadu_ps(c + r * ldc + 16), x1);
        }
        _mm512_storeu_si512(static_cast<uint16_t*>(o.p) + r * o.ld, bf16_round32(x0, x1));
        continue;
      }
    }
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      __m512 x = acc[r][v];
      if (add) x = _mm512_add_ps(_mm512_loadu_ps(c + r * ldc + 16 * v), x);
      if (o.dtype == DType::f32) {
        float* p = static_cast<float*>(o.p) + r * o.ld + 16 * v;
        if (full) _mm512_storeu_ps(p, x);
        else _mm512_mask_storeu_ps(p, m[v], x);
      } else {
        uint16_t* p = static_cast<uint16_t*>(o.p) + r * o.ld + 16 * v;
        if (full) _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), bf16_round16(x));
        else _mm256_mask_storeu_epi16(p, m[v], bf16_round16(x));
      }
    }
  }
}

// R rows: 12 (24 accumulators) everywhere; 8 (16 accumulators, still more chains than
// the dot's latency x 2 pipes) for k-major A when the rows are a multiple of 8 but not
// of 12 (64 output channels in backward-filter: 8 groups instead of 6 with 8 rows idle).
// NV = 1: the first 16 columns of the panel only (12 accumulators), for a tile's last
// panel when at most 16 of its columns are real (197 = 6 x 32 + 5: an eighth of the
// products were padding).
template <class Kind, bool KMajor, int R = int(MR), int NV = 2>
__attribute__((noinline)) void ukernel_x32(int64_t kq, const uint32_t* a, int64_t lda, const uint32_t* b, float* c,
                                           int64_t ldc, bool add, const OutBlock* out = nullptr,
                                           PfCursor* pf = nullptr) {
  static_assert(R == 12 || (KMajor && R == 8), "row-major A takes 12 rows");
  static_assert(NV == 1 || NV == 2, "a panel is two vectors wide");
  __m512 acc[R][NV];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  int64_t pf_q = pf && pf->left > 0 ? 0 : kq;  // the step of the next prefetch
  if constexpr (KMajor) {
    const int64_t astep = lda ? lda : R;
    for (int64_t q = 0; q < kq; ++q) {
      if (__builtin_expect(q == pf_q, 0)) pf_q = pf_issue(*pf, q, kq);
      __m512 bv[NV];
      for (int v = 0; v < NV; ++v) bv[v] = _mm512_load_ps(reinterpret_cast<const float*>(b) + 16 * v);
      b += NR;
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r)
        for (int v = 0; v < NV; ++v) acc[r][v] = madd<Kind>(acc[r][v], a[r], bv[v]);
      a += astep;
    }
  } else {
    const uint32_t *a0 = a, *a3 = a + 3 * lda, *a6 = a + 6 * lda, *a9 = a + 9 * lda;
    for (int64_t q = 0; q < kq; ++q) {
      if (__builtin_expect(q == pf_q, 0)) pf_q = pf_issue(*pf, q, kq);
      __m512 bv[NV];
      for (int v = 0; v < NV; ++v) bv[v] = _mm512_load_ps(reinterpret_cast<const float*>(b) + 16 * v);
      b += NR;
#pragma GCC unroll 3
      for (int r = 0; r < 3; ++r) {
        const uint32_t w0 = a0[r * lda + q], w3 = a3[r * lda + q], w6 = a6[r * lda + q], w9 = a9[r * lda + q];
        for (int v = 0; v < NV; ++v) {
          acc[r][v] = madd<Kind>(acc[r][v], w0, bv[v]);
          acc[r + 3][v] = madd<Kind>(acc[r + 3][v], w3, bv[v]);
          acc[r + 6][v] = madd<Kind>(acc[r + 6][v], w6, bv[v]);
          acc[r + 9][v] = madd<Kind>(acc[r + 9][v], w9, bv[v]);
        }
      }
    }
  }
  if (out) store_block_out<R, NV>(acc, c, ldc, add, *out);
  else store_block<R, NV>(acc, c, ldc, add);
}

// ---- tiling and tasks ----
constexpr int64_t kMaxMC = 144, kNC = 256;  // an output tile: at most 144 x 256

struct Tiling {
  int64_t mc, nc, mt, nt;  // tile sizes and tile counts along M and N
};
// Tile sizes for `groups` independent M x N products: large tiles, made smaller (rows
// down to 2 MR, then columns down to NR) until there are a few tasks per thread. Only
// the speed depends on this.
inline Tiling choose_tiling(int64_t groups, int64_t M, int64_t N) {
  Tiling t;
  t.nc = imin(round_up(imax(N, 1), NR), kNC);
  t.mc = imin(kMaxMC, round_up(imax(M, 1), MR));
  const int64_t want = 4 * int64_t(num_threads());
  auto tasks = [&] { return groups * cdiv(imax(M, 1), t.mc) * cdiv(imax(N, 1), t.nc); };
  while (t.mc > 2 * MR && tasks() < want) t.mc -= MR;
  while (t.nc > NR && tasks() < want) t.nc -= NR;
  t.mt = cdiv(imax(M, 1), t.mc);
  t.nt = cdiv(imax(N, 1), t.nc);
  return t;
}

// Per-thread scratch: the packed A block and the C tile, and a B block for kernels
// that pack B per task (grown on first use).
struct Scratch {
  WBuf a, c, b;
  int64_t b_key = -1;  // which block `b` holds, for kernels that reuse it across tasks
  Scratch() : a(kMaxMC * KQ), c(kMaxMC * kNC) {}
};

// The task runners of engine_common.h with this engine's Scratch and thresholds.
template <class F> void run_tasks(int64_t n, double flops, F&& f) {
  engine::run_tasks<Scratch>(n, flops >= 4e6, f);
}
template <class F> void run_units(int64_t n, double work, F&& f) { engine::run_units(n, work >= 2e5, f); }

// The K block length for steps [qbeg, qend): the range cut into equal blocks of at
// most KQ steps (288 steps are two blocks of 144, not 256 + 32: a short block pays the
// microkernel's C load/store for little work). A function of the range only, so the
// summation order does not depend on threads or tiles.
inline int64_t block_len(int64_t qbeg, int64_t qend) {
  const int64_t n = qend - qbeg;
  return n <= 0 ? KQ : cdiv(n, cdiv(n, KQ));
}

// The B operand of one K block of a tile: panel j (j = 0, 1, .. from the tile's first
// column) is at p + j * stride, [kq][NR] words, 64-byte aligned.
struct BView {
  const uint32_t* p;
  int64_t stride;
};
// B prepacked whole: panels [Kq][NR] (Kq = K steps), panel j at bp + j * Kq * NR.
struct PrepackedB {
  const uint32_t* bp;
  int64_t Kq;
  BView operator()(int64_t n0, int64_t, int64_t q0, int64_t, Scratch&) const {
    return {bp + (n0 / NR) * Kq * NR + q0 * NR, Kq * NR};
  }
};

// Rows per microkernel call for a k-major A block of mb rows: 8 when that leaves no
// padding and 12 would (a head dim of 64 as the rows of dK^T: 8 x 8, not 6 x 12 with 8
// rows of zeros).
inline int64_t kmajor_rows(int64_t mb) { return mb % MR && mb % 8 == 0 ? 8 : MR; }

// Adds to (or, from step 0, stores in) the C tile ct [mb x nb] (row stride ldc >=
// round_up(nb, NR), rows up to round_up(mb, MR) written) the part q in [qbeg, qend) of
// C = A B (in k steps), summed in blocks of block_len(qbeg, qend) steps:
//   get_b(n0, nb, q0, nq, scratch) -> BView of B[steps q0:q0+nq, n0:n0+nb];
//   pack_a(m0, mb, q0, nq, dst) writes A[m0:m0+mb, steps q0:q0+nq] into dst in the
//   layout KMajor says: row-major rows of nq words, or k-major [nq][round_up(mb, mr)],
//   mr = kmajor_rows(mb) (the block's rows whole at each step: one contiguous interleave
//   per pair of K rows).
// The A block's padding rows (up to round_up(mb, MR), or mr when k-major) are zeroed here.
// With `out` (the output at the tile's first element, row stride out->ld) the last block
// stores the finished sums there, rounded to its dtype, instead of in ct: the C tile is
// then only the running sum of the earlier blocks (with one block, never touched).
// With `next`, next(q0, nq, streams) names the rows that packing steps [q0, q0 + nq) of
// this tile will read (past the operands' K it leaves the streams empty), and each
// block's microkernels prefetch those of the block after it (see PfStream).
struct OutTile {
  DType dtype;
  void* p;
  int64_t ld;
};
struct NoNext {
  void operator()(int64_t, int64_t, PfStreams&) const {}
};
// A row-major A whose rows already are the packed rows (K contiguous, in the kernel's
// words, rows `ld` words apart): row m0 + i at step q is p[i * ld + q]. The microkernels
// then read the tile's whole 12-row groups where they are, and only a last partial group
// is packed (with its zero rows): packing copied every A block once per column tile,
// stalled on its loads (~70% of tile_product's own samples in a Swin-T bf16 step).
// p null: every row is packed.
struct ARows {
  const uint32_t* p = nullptr;
  int64_t ld = 0;
};
// Rows of K elements of T from `first`, `stride` elements apart (K contiguous), as ARows
// when they are the kernel's words in place: f32 for F32Kind, bf16 pairs for Bf16Kind (K
// and the stride even, `first` on a word); else none. Not when the stride is a multiple
// of 4 KB either: a group's 12 rows would share one L1 set (8 ways) and evict each other
// at every step (K = 2048 / 4096 bf16: 0.93-0.94x against packing; 2048-byte strides,
// two sets, measured 1.02x).
template <class Kind, class T>
inline ARows rows_in_place(const T* first, int64_t K, int64_t stride) {
  constexpr bool words = std::is_same_v<Kind, F32Kind> ? std::is_same_v<T, float> : std::is_same_v<T, bf16>;
  if (!words || K <= 0 || stride < 0 || stride * int64_t(sizeof(T)) % 4096 == 0) return {};
  if (Kind::kstep == 2 && (K % 2 || stride % 2 || reinterpret_cast<uintptr_t>(first) % 4)) return {};
  return {reinterpret_cast<const uint32_t*>(first), stride / Kind::kstep};
}
template <class Kind, bool KMajor, class GetB, class PackA, class Next = NoNext>
void tile_product(int64_t m0, int64_t mb, int64_t n0, int64_t nb, int64_t qbeg, int64_t qend, GetB&& get_b,
                  PackA&& pack_a, Scratch& s, float* ct, int64_t ldc, const OutTile* out = nullptr,
                  const Next& next = Next(), const ARows& in_place = ARows()) {
  const int64_t mr = KMajor ? kmajor_rows(mb) : MR, mp = round_up(mb, mr), np = round_up(nb, NR);
  const int64_t direct = !KMajor && in_place.p ? mb / MR * MR : 0;  // rows read in place
  if (qend == qbeg) {  // empty sum
    for (int64_t i = 0; i < mp; ++i) std::memset(ct + i * ldc, 0, size_t(np) * 4);
    if (out)
      for (int64_t i = 0; i < mb; ++i)
        store_out(out->dtype, out->p, i * out->ld, ct + i * ldc, nb);
    return;
  }
  const int64_t bl = block_len(qbeg, qend);
  for (int64_t q0 = qbeg; q0 < qend; q0 += bl) {
    const int64_t nq = imin(bl, qend - q0);
    uint32_t* ab = s.a.p;
    if constexpr (KMajor) {
      pack_a(m0, mb, q0, nq, ab);
      if (mb < mp)  // the last group's missing rows
        for (int64_t q = 0; q < nq; ++q) zero_words(ab + q * mp + mb, mp - mb);
    } else if (direct < mb) {  // the rows not read in place, from row `direct` of the tile
      pack_a(m0 + direct, mb - direct, q0, nq, ab);
      zero_words(ab + (mb - direct) * nq, (mp - mb) * nq);
    }
    const BView bv = get_b(n0, nb, q0, nq, s);
    const bool last = out && q0 + nq == qend;
    const int64_t esize = out && out->dtype == DType::f32 ? 4 : 2;
    // The next block's rows, each stream over its share of the block's calls.
    PfStreams ps;
    next(q0 + nq, bl, ps);
    PfPlan plan(ps, (np / NR) * (mp / mr), nq);
    int64_t call = 0;
    for (int64_t j = 0; j < np; j += NR) {
      const uint32_t* bpan = bv.p + (j / NR) * bv.stride;
      const bool narrow = nb - j <= 16;
      auto kernel = narrow ? ukernel_x32<Kind, KMajor, int(MR), 1> : ukernel_x32<Kind, KMajor>;
      if constexpr (KMajor)
        if (mr == 8) kernel = narrow ? ukernel_x32<Kind, true, 8, 1> : ukernel_x32<Kind, true, 8>;
      for (int64_t i = 0; i < mp; i += mr, ++call) {
        const bool here = i < direct;
        const uint32_t* a = KMajor ? ab + i : here ? in_place.p + i * in_place.ld + q0 : ab + (i - direct) * nq;
        const int64_t lda = KMajor ? mp : here ? in_place.ld : nq;
        PfCursor* pc = plan.at(call);
        if (last) {
          const OutBlock ob{out->dtype, static_cast<char*>(out->p) + (i * out->ld + j) * esize, out->ld,
                            int(imin(mr, mb - i)), int(imin(NR, nb - j))};
          if (nq <= kPrefetchStoreSteps) prefetch_for_store(ob, esize);
          kernel(nq, a, lda, bpan, ct + i * ldc + j, ldc, q0 > qbeg, &ob, pc);
        } else {
          kernel(nq, a, lda, bpan, ct + i * ldc + j, ldc, q0 > qbeg, nullptr, pc);
        }
      }
    }
  }
}

}  // namespace
}  // namespace podlet::kernels::avx512
