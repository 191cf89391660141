// Helpers for batching rules (prim.h BatchRule): the mapped axis is always in front
// (bdim 0) or absent (-1), so a rule only ever shifts its axes by one and broadcasts
// unbatched operands when it needs every operand batched.
#pragma once
#include <string>
#include <vector>
#include "podlet/ir/graph.h"
#include "podlet/ir/ops.h"

namespace podlet::batching {

inline bool any_batched(const std::vector<int>& bd) {
  for (int b : bd) if (b >= 0) return true;
  return false;
}
// Shape with the mapped axis in front.
inline Shape with_batch(const Shape& s, int64_t size) {
  Shape r = s;
  r.insert(r.begin(), size);
  return r;
}
// x broadcast to carry the mapped axis (no-op when it already does).
int materialize(Graph& g, int x, int bdim, int64_t size);
// Per-element axes (possibly negative, against `rank`) shifted past the mapped axis.
std::vector<int64_t> shift_axes(const std::vector<int64_t>& axes, int64_t rank);
// All inputs materialized.
std::vector<int> materialize_all(Graph& g, const std::vector<int>& in, const std::vector<int>& bd, int64_t size);
// The node re-applied to `in` with new attrs; every output batched.
std::vector<int> reapply(Graph& g, const BatchCtx& c, const std::vector<int>& in, const Attrs& attrs,
                         std::vector<int>& out_bdim, int out_batched = 0);

// NumPy-broadcasting n-ary elementwise primitives: batched operands get singleton dims
// after the mapped axis up to the widest operand's rank; unbatched ones broadcast as
// they are. One rule for every arithmetic, comparison and select primitive.
std::vector<int> elementwise(Graph& g, const BatchCtx& c, const std::vector<int>& in, const std::vector<int>& bd,
                             std::vector<int>& out_bdim);
// Elementwise primitives whose operands must have equal shapes: unbatched operands are
// broadcast to carry the mapped axis.
std::vector<int> elementwise_same_shape(Graph& g, const BatchCtx& c, const std::vector<int>& in,
                                        const std::vector<int>& bd, std::vector<int>& out_bdim);
// A primitive of one operand whose integer-list attrs `keys` name axes of that operand
// (reduce_* "axes", rev "dimensions", cumsum "axis"): the axes move past the mapped one.
BatchRule axes_attr(std::vector<std::string> keys);
// The batched form of a primitive whose kernel works on one element at a time (random
// samplers with per-element keys, adamw_update with per-element scalars, ...): with attr
// "vmap_size" = B > 0 every input and output carries B elements in front; the shape rule
// strips them and checks the element shapes, the kernel runs the element kernel on each
// element's slice of the buffers in element order (one node, one batched kernel; the
// element kernel keeps its own parallelism, so the bits are the element's bits for any
// thread count). Sets .batch to loop_rule when the def has no rule of its own.
PrimDef looped(PrimDef d);
// Every input broadcast to carry the mapped axis, the node re-applied with vmap_size.
std::vector<int> loop_rule(Graph& g, const BatchCtx& c, const std::vector<int>& in, const std::vector<int>& bd,
                           std::vector<int>& out_bdim);
// Runs the per-element computation as a loop is never done: a primitive without a
// rule reports this.
[[noreturn]] void no_rule(const BatchCtx& c, const std::string& why);

}  // namespace podlet::batching
