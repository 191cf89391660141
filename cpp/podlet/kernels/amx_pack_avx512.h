// AVX-512 moves that build AMX tiles from strided operands, for the *_amx.cc objects
// (compiled for AVX-512 + AMX; the emulated kernels' objects are not, and pack element by
// element: the same bytes, so the hardware-vs-emulation tests also check these moves).
//
// Two shapes of tile come out of operands that do not already hold them row by row:
//   A tile (16 rows x 32 K) from an operand whose K is its slow dim (x^T in a weight
//   gradient, P^T in attention's dV): seen as 32-bit pairs of K, the tile is the
//   transpose of the 16 (K pair) x 16 (row) matrix that two interleaved K rows make;
//   B tile (16 K pairs x 16 columns, VNNI) from an operand whose K is its fast dim (W^T,
//   K^T): the transpose of the 16 (column) x 16 (K pair) matrix its columns' K runs make.
// One 16 x 16 transpose of 32-bit elements (transpose_avx512.h) serves both.
#pragma once
#if defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>
#include <cstdint>
#include "podlet/kernels/transpose_avx512.h"

namespace podlet::kernels::amx {
namespace {

// The first n (<= 16) bf16 of p, zeros after (nothing read past them).
inline __m256i load16_bf16(const uint16_t* p, int64_t n) {
  if (n >= 16) return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm256_maskz_loadu_epi16(__mmask16((1u << n) - 1), p);
}
// The first n (<= 32) bf16 of p, zeros after.
inline __m512i load32_bf16(const uint16_t* p, int64_t n) {
  if (n >= 32) return _mm512_loadu_si512(p);
  return _mm512_maskz_loadu_epi16(__mmask32(n <= 0 ? 0u : (1u << n) - 1), p);
}
// Element i of `even` and of `odd` side by side: [e0, o0, e1, o1, ... e15, o15].
inline __m512i interleave16_bf16(__m256i even, __m256i odd) {
  static const uint16_t idx_v[32] = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                     8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  const __m512i idx = _mm512_loadu_si512(idx_v);
  return _mm512_permutex2var_epi16(_mm512_castsi256_si512(even), idx, _mm512_castsi256_si512(odd));
}

// One A tile (rows 16, K 32, row stride 64 bytes) when each K has a pointer of its own to
// its 16 rows' values (the shifted input a backward-filter convolution reads at a tap:
// null where the tap falls in the padding, read as zeros): rows[k][r] for r < nr, k < 32;
// pairs of K interleaved, then transposed. Rows past nr are zeros.
inline void a_tile_from_k_rows(const uint16_t* const* rows, int64_t nr, uint16_t* dst) {
  __m512i r[16];
  for (int p = 0; p < 16; ++p) {
    const __m256i e = rows[2 * p] ? load16_bf16(rows[2 * p], nr) : _mm256_setzero_si256();
    const __m256i o = rows[2 * p + 1] ? load16_bf16(rows[2 * p + 1], nr) : _mm256_setzero_si256();
    r[p] = interleave16_bf16(e, o);
  }
  transpose16x16_epi32(r);
  for (int i = 0; i < 16; ++i) _mm512_storeu_si512(dst + i * 32, r[i]);
}

// The same tile when its rows r < nr start at row0 + r (consecutive in memory) and K
// k < nk is at offset k_off[k] from them; K past nk are zeros.
inline void a_tile_from_k_major(const uint16_t* row0, const int64_t* k_off, int64_t nr, int64_t nk, uint16_t* dst) {
  const uint16_t* rows[32];
  for (int k = 0; k < 32; ++k) rows[k] = k < nk ? row0 + k_off[k] : nullptr;
  a_tile_from_k_rows(rows, nr, dst);
}

// One B tile (VNNI: 16 K pairs x 16 columns x 2) whose columns c < nc start at
// col_off[c] from base, their K k < nk consecutive from there (k0 already added).
inline void b_tile_from_k_minor(const uint16_t* base, const int64_t* col_off, int64_t nc, int64_t nk, uint16_t* dst) {
  __m512i r[16];
  for (int c = 0; c < 16; ++c) r[c] = c < nc ? load32_bf16(base + col_off[c], nk) : _mm512_setzero_si512();
  transpose16x16_epi32(r);
  for (int p = 0; p < 16; ++p) _mm512_storeu_si512(dst + p * 32, r[p]);
}

// Rows 2p and 2p+1 of a B tile whose columns are consecutive: nc (<= 16) columns of the
// two K rows at even / odd (odd null past K), interleaved into VNNI row p.
inline void b_row_pair_from_rows(const uint16_t* even, const uint16_t* odd, int64_t nc, uint16_t* dst_row) {
  const __m256i e = load16_bf16(even, nc);
  const __m256i o = odd ? load16_bf16(odd, nc) : _mm256_setzero_si256();
  _mm512_storeu_si512(dst_row, interleave16_bf16(e, o));
}

}  // namespace
}  // namespace podlet::kernels::amx
#endif
