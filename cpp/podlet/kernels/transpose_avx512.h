// A 16 x 16 transpose of 32-bit elements in 16 zmm registers (unpack 32, unpack 64, two
// lane shuffles), for the AVX-512 objects that move bf16 pairs between row and column
// layouts: the pair attention's K^T / V tiles (attention_pairs_avx512bf16.cc) and the
// AMX packers (amx_pack_avx512.h). Internal linkage: each object keeps its own copy.
#pragma once
#if defined(__AVX512F__)
#include <immintrin.h>

namespace podlet::kernels {
namespace {

// r[i][j] <- r[j][i].
inline void transpose16x16_epi32(__m512i r[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    u[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i + 0], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i + 0], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) {
      t[8 * i + j] = _mm512_shuffle_i32x4(u[8 * i + j], u[8 * i + 4 + j], 0x88);
      t[8 * i + 4 + j] = _mm512_shuffle_i32x4(u[8 * i + j], u[8 * i + 4 + j], 0xdd);
    }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_i32x4(t[j], t[8 + j], 0x88);
    r[j + 8] = _mm512_shuffle_i32x4(t[j], t[8 + j], 0xdd);
  }
}

}  // namespace
}  // namespace podlet::kernels
#endif
