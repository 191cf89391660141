// What the fused optimizer updates (prims/optim.cc: adamw_update; prims/optim_sgd_lion.cc:
// sgd_momentum_update, lion_update) share: the rounding of constants and intermediates to
// the parameter dtype (and, from kernels/optim_lanes.h, the element loads / rounds / stores
// and the NaN rule of the unfused chain's add), and the batching rule of an elementwise
// update whose step scalars are inputs.
#pragma once
#include <cstdint>
#include <vector>
#include "podlet/prims/common.h"
#include "podlet/ir/batch_ops.h"
#include "podlet/kernels/optim_lanes.h"

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

using kernels::add_first;
using kernels::Lane;

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
