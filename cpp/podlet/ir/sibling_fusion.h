// Sibling fusion of sums: two fused_elementwise passes that compute column sums over
// the same iteration space and read the same full-size array become one pass that
// reads it once. BatchNorm's backward computes sum(g * xhat) and sum(g * c) from the
// same gradient g in two passes that neither the producer-consumer grouping of
// fusion.cc can join (they are siblings, not a chain) nor should (joining during the
// grouping sealed the group early and split a third pass off).
//
// Runs last in fuse_elementwise, on the fused graph. A pair merges when both nodes have
// reductions with the same column count, share a load of the same array with the same
// strides, and the later one does not depend on the earlier. The merged node takes the
// later one's place; nodes between the two that depend on the earlier one move after
// it. Each output is computed by the same instructions as before: same bits.
#pragma once
#include "podlet/ir/graph.h"

namespace podlet {
// A copy of g with sibling sum passes merged; `merged` (if given) gets the number of
// pairs merged.
Graph merge_sibling_sums(const Graph& g, int* merged = nullptr);
}  // namespace podlet
