// Loop-invariant code motion for scan, at run time: the work of a scan body that reads
// only the constants and the current x_t (the input projection x_t @ W_x of an RNN cell,
// a per-step embedding) runs for every iteration at once before the loop — the body's
// nodes batched over the scanned axis by their vmap rules — whenever it holds a
// contraction (dot_general, convolution), so the loop runs one large GEMM instead of
// `length` small ones. The body then reads the stacked results as extra xs. The scan's
// graph, its VJP and its batching rule never see the split: it is how the kernel runs.
#pragma once
#include <memory>
#include "podlet/ir/graph.h"

namespace podlet {

struct ScanPlan {
  // pre: inputs consts, xs (stacked); outputs the hoisted values, stacked. Null when
  // nothing is worth hoisting (then body is the scan's own body).
  std::shared_ptr<const Graph> pre;
  // body: inputs consts, carries, xs, hoisted values (one iteration's row); outputs the
  // scan body's. Both are executable (fused) graphs.
  std::shared_ptr<const Graph> body;
};

// Cached per body graph and length.
ScanPlan scan_plan(const GraphRef& body, int64_t num_consts, int64_t num_carry, int64_t length);
// Drops the cache (with the sub-graph cache, at interpreter exit).
void clear_scan_plans();

// The split itself (uncached, not fused), for tests: pre is null when nothing is hoisted.
ScanPlan hoist_scan_inputs(const Graph& body, int64_t num_consts, int64_t num_carry, int64_t length);

}  // namespace podlet
