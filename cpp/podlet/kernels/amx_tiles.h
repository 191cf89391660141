// The AMX tile operations the AMX kernels are written in, twice over one interface:
//   Hw  -- the hardware (intrinsics), only in *_amx.cc files, compiled with -mamx-tile
//          -mamx-bf16 and called after cpuid and Linux said the tiles are usable;
//   Emu -- the same eight tile registers in plain C++ memory with TDPBF16PS's exact
//          arithmetic (tdpbf16ps below), so the kernels' blocking and packing run, and
//          are tested, on every host.
// A kernel is a template over the backend (gemm_amx_impl.h); both instantiations see the
// same loops, so the emulation checks the logic that runs on the tiles.
//
// Every tile here is configured as 16 rows x 64 bytes (palette 1): 16 x 16 f32 for an
// accumulator, 16 rows x 32 bf16 for A (a row of K), 16 K pairs x 16 columns x 2 bf16
// for B (the VNNI layout: element (k, n) at row k / 2, column 2n + k % 2).
#pragma once
#include <immintrin.h>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include "podlet/dtype.h"

namespace podlet::kernels::amx {
namespace {

constexpr int kRows = 16;      // rows of a tile
constexpr int kRowBytes = 64;  // bytes of a row: 16 f32 or 32 bf16
constexpr int kK = 32;         // K elements one TDPBF16PS consumes
constexpr int kTileElems = kRows * kK;  // bf16 elements of an A or B tile (1 KiB)

// LDTILECFG's 64-byte operand.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

inline TileConfig eight_full_tiles() {
  TileConfig c;
  for (int t = 0; t < 8; ++t) {
    c.colsb[t] = kRowBytes;
    c.rows[t] = kRows;
  }
  return c;
}

// ODR / ISA safety as in avx2_engine.h: the *_amx.cc files are compiled for AVX-512 and
// AMX, so nothing here or in the AMX kernels' headers may instantiate a template or an
// inline function with external linkage (bf16::operator float, store_row, fmt ...) - the
// linker could keep that copy for the whole library. Conversions are local copies.
inline float widen_bf16(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// f32 -> bf16, round to nearest even, NaN kept quiet with its sign (as dtype.h's bf16).
inline uint16_t round_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t(((u >> 16) & 0x8000u) | 0x7fc0u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// TDPBF16PS reads bf16 denormals as zero (DAZ) ...
inline float daz_bf16(uint16_t b) { return widen_bf16((b & 0x7f80u) == 0 ? uint16_t(b & 0x8000u) : b); }
// ... and flushes each f32 result below the normal range to a zero of its sign (FTZ).
inline float ftz(float x) { return std::fabs(x) < FLT_MIN ? std::copysign(0.f, x) : x; }

// One TDPBF16PS on plain memory, as the hardware computes it (the Intel SDM's operation
// since 2023, checked bit for bit on a Xeon with AMX, 768,000 sums with denormals, Inf
// and huge values; only NaN payloads differ): per output (m, n) two f32 partial sums
// from zero, one over the even K of the 32 and one over the odd K, each product of bf16
// values (exact in f32) added with one rounding to nearest even (an f32 FMA); then the
// two partials added, and that added to c. Denormal inputs (bf16 and c) read as zero,
// denormal results flushed. Not the older SDM's loop (c += even, c += odd, pair after
// pair): that one differs from the tiles in about 60% of the sums.
inline void tdpbf16ps(float* c, const uint16_t* a, const uint16_t* b) {
  for (int m = 0; m < kRows; ++m) {
    float* cr = c + m * 16;
    for (int n = 0; n < 16; ++n) {
      float even = 0.f, odd = 0.f;
      for (int p = 0; p < kK / 2; ++p) {
        const uint16_t* bp = b + p * kK + 2 * n;
        even = ftz(std::fmaf(daz_bf16(a[m * kK + 2 * p]), daz_bf16(bp[0]), even));
        odd = ftz(std::fmaf(daz_bf16(a[m * kK + 2 * p + 1]), daz_bf16(bp[1]), odd));
      }
      cr[n] = ftz(ftz(cr[n]) + ftz(even + odd));
    }
  }
}

// The emulated backend: eight 1 KiB registers per thread, as the hardware has.
struct Emu {
  static constexpr const char* name = "amx_emu";
  struct Regs {
    alignas(64) unsigned char t[8][kRows * kRowBytes];
  };
  static Regs& regs() {
    static thread_local Regs r;
    return r;
  }
  static void configure() {}
  static void release() {}
  template <int T> static void zero() { std::memset(regs().t[T], 0, sizeof regs().t[T]); }
  template <int T> static void load(const void* p, int64_t stride) {
    for (int r = 0; r < kRows; ++r)
      std::memcpy(regs().t[T] + r * kRowBytes, static_cast<const unsigned char*>(p) + r * stride, kRowBytes);
  }
  template <int T> static void store(void* p, int64_t stride) {
    for (int r = 0; r < kRows; ++r)
      std::memcpy(static_cast<unsigned char*>(p) + r * stride, regs().t[T] + r * kRowBytes, kRowBytes);
  }
  template <int C, int A, int B> static void dp() {
    Regs& R = regs();
    tdpbf16ps(reinterpret_cast<float*>(R.t[C]), reinterpret_cast<const uint16_t*>(R.t[A]),
              reinterpret_cast<const uint16_t*>(R.t[B]));
  }
};

#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
// GCC's tile intrinsics paste the register number into the instruction text, so the
// number must be a literal: each template picks its instruction from a fixed list.
#define PODLET_TILE_CASES(T, OP) \
  if constexpr (T == 0) OP(0);   \
  else if constexpr (T == 1) OP(1); \
  else if constexpr (T == 2) OP(2); \
  else if constexpr (T == 3) OP(3); \
  else if constexpr (T == 4) OP(4); \
  else if constexpr (T == 5) OP(5); \
  else if constexpr (T == 6) OP(6); \
  else OP(7)

// The hardware backend. The tile configuration is per thread: configure() at the start
// of a thread's work, release() at its end (released, the large tile state costs
// nothing on context switches).
struct Hw {
  static constexpr const char* name = "amx";
  static void configure() {
    static const TileConfig c = eight_full_tiles();
    _tile_loadconfig(&c);
  }
  static void release() { _tile_release(); }
  template <int T> static void zero() {
#define PODLET_OP(t) _tile_zero(t)
    PODLET_TILE_CASES(T, PODLET_OP);
#undef PODLET_OP
  }
  template <int T> static void load(const void* p, int64_t stride) {
#define PODLET_OP(t) _tile_loadd(t, p, stride)
    PODLET_TILE_CASES(T, PODLET_OP);
#undef PODLET_OP
  }
  template <int T> static void store(void* p, int64_t stride) {
#define PODLET_OP(t) _tile_stored(t, p, stride)
    PODLET_TILE_CASES(T, PODLET_OP);
#undef PODLET_OP
  }
  // The four products of the 2 x 2 micro-kernel: C 0-3 from A 4-5 and B 6-7.
  template <int C, int A, int B> static void dp() {
    static_assert(C == 2 * (A - 4) + (B - 6), "accumulator C = 2 x (A - 4) + (B - 6)");
    if constexpr (C == 0) _tile_dpbf16ps(0, 4, 6);
    else if constexpr (C == 1) _tile_dpbf16ps(1, 4, 7);
    else if constexpr (C == 2) _tile_dpbf16ps(2, 5, 6);
    else _tile_dpbf16ps(3, 5, 7);
  }
};
#undef PODLET_TILE_CASES
#endif

}  // namespace
}  // namespace podlet::kernels::amx
