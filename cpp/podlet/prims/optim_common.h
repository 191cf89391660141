// What the fused optimizer updates (prims/optim.cc: adamw_update; prims/optim_sgd_lion.cc:
// sgd_momentum_update, lion_update) share: the rounding of constants and intermediates to
// the parameter dtype, the NaN rule of the unfused chain's add, and the batching rule of
// an elementwise update whose step scalars are inputs.
#pragma once
#include <cstdint>
#include <vector>
#include "podlet/prims/common.h"
#include "podlet/ir/batch_ops.h"

namespace podlet::optim {

// Rounds a double to dtype D the way a weakly typed Python float becomes a D array
// (NumPy/ml_dtypes: f64 -> f32 -> bf16), returned as a double. `prim` names the caller
// in the error.
inline double round_to(DType d, double x, const char* prim) {
  switch (d) {
    case DType::f32: return double(float(x));
    case DType::bf16: return double(float(bf16(float(x))));
    case DType::f64: return x;
    default: throw DTypeError(fmt(prim, ": expected a float dtype, got ", dtype_name(d)));
  }
}

inline double scalar_value(const Array& a) { return get_as_double(a, 0); }

// Loads, rounds and stores of T in its arithmetic type A (float for bf16). The bf16 ones
// are bf16::from_f32 / to_f32 written branch-free (a select for NaN instead of an early
// return: same bits), so that the loops vectorise.
template <class T> struct Lane {
  using A = acc_t<T>;
  static A load(const T* x, int64_t i) { return A(x[i]); }
  static A round(A v) { return v; }
  static void store(T* x, int64_t i, A v) { x[i] = v; }
};
template <> struct Lane<bf16> {
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

// vmap of an update that is elementwise over its arrays and reads the 0-d step scalars
// in[first_scalar, first_scalar + n_scalars): with the same scalars for every element the
// node runs once on the batched arrays; per-element scalars make it the batched loop
// (batching::looped): each element's update with its own scalars, the bits of the
// unbatched kernel.
inline std::vector<int> update_batch(Graph& g, const BatchCtx& c, const std::vector<int>& in,
                                     const std::vector<int>& bd, std::vector<int>& ob, size_t first_scalar,
                                     size_t n_scalars) {
  bool scalars = c.n.attrs.has("vmap_size");
  for (size_t k = first_scalar; k < first_scalar + n_scalars; ++k) scalars |= bd[k] >= 0;
  if (scalars) return batching::loop_rule(g, c, in, bd, ob);
  std::vector<int> x(in);
  for (size_t k = 0; k < in.size(); ++k)
    if (k < first_scalar || k >= first_scalar + n_scalars) x[k] = batching::materialize(g, in[k], bd[k], c.size);
  return batching::reapply(g, c, x, c.n.attrs, ob);
}

}  // namespace podlet::optim
