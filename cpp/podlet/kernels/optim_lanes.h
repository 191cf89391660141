// The element operations of the fused optimizer loops (prims/optim.cc,
// kernels/optim_sgd_lion_loops.h): loads, rounds and stores of a parameter dtype T in its
// arithmetic type, and the unfused chain's add. Internal linkage (anonymous namespace):
// ISA files (kernels/*_avx2.cc) include this too, and an inline function with external
// linkage compiled there could be lent to baseline callers by the linker.
#pragma once
#include <cstdint>
#include <type_traits>
#include "podlet/dtype.h"

namespace podlet::kernels {
namespace {

// T's arithmetic type A is float for bf16, T otherwise. The bf16 operations are
// bf16::from_f32 / to_f32 written branch-free (a select for NaN instead of an early
// return: same bits), so that the loops vectorise.
template <class T> struct Lane {
  using A = std::conditional_t<std::is_same_v<T, bf16>, float, T>;
  static A load(const T* x, int64_t i) { return A(x[i]); }
  static A round(A v) { return v; }
  static void store(T* x, int64_t i, A v) { x[i] = v; }
};
template <> struct Lane<bf16> {
  using A = float;
  static uint16_t bits_of(float f) {
    const uint32_t u = __builtin_bit_cast(uint32_t, f);
    const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t nan = ((u >> 16) & 0x8000u) | 0x7fc0u;  // canonical quiet NaN, sign kept
    return uint16_t((u & 0x7fffffffu) > 0x7f800000u ? nan : r);
  }
  static float from_bits(uint16_t b) { return __builtin_bit_cast(float, uint32_t(b) << 16); }
  static float load(const bf16* x, int64_t i) { return from_bits(reinterpret_cast<const uint16_t*>(x)[i]); }
  static float round(float v) { return from_bits(bits_of(v)); }
  static void store(bf16* x, int64_t i, float v) { reinterpret_cast<uint16_t*>(x)[i] = bits_of(v); }
};

// a + b, returning a (quieted: a + a) when both are NaN, as the unfused chain's add does
// (x86's addps); a select, so it vectorises, and explicit, since a compiler may commute
// a plain a + b.
template <class A> inline A add_first(A a, A b) { return a != a ? a + a : a + b; }

}  // namespace
}  // namespace podlet::kernels
