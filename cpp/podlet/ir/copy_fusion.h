// Copy fusion: a chain of data-movement ops that all keep the last dimension whole
// (slice, concatenate, transpose, rev, reshape) and start from one array becomes one
// gather_rows node (prims/structural.cc) reading that array, row by row of its last
// dimension. jnp.roll is two slices and a concatenation per axis, so Swin's cyclic shift
// over two axes followed by its window partition (a transpose) made five full copies of
// the map in the forward pass and five in the backward; the gather makes one each. XLA
// fuses such chains into one loop the same way.
//
// The rows each output row reads are found by running the chain itself once, on the
// row numbers of the source (int32, one per row: the chain with the last dimension
// cut to 1), so every op the chain may hold is interpreted by its own kernel. A chain
// end is a value some consumer outside the chain (or the graph's outputs) reads; it is
// rewritten when its chain holds at least two copying ops (a reshape copies nothing)
// and a row is at least kMinRowBytes long (shorter rows would make the gather an
// element-by-element one). Copies move bits: results are identical.
//
// First, a transpose that moves no element (its permutation is the identity once the
// axes of size 1 are dropped) becomes a reshape: it shares its input's buffer, as XLA
// makes such a transpose a bitcast.
//
// Runs on executable graphs, after rematerialisation and before elementwise fusion; value
// ids keep their meaning (the table is a new constant), nodes left without readers go.
#pragma once
#include "podlet/ir/graph.h"

namespace podlet {

constexpr int64_t kMinRowBytes = 64;

struct CopyFusionStats {
  int chains = 0;        // chain ends rewritten as gather_rows
  int copies_removed = 0;  // copying nodes gone from the graph (those read by others stay)
};

// A copy of g with the rewrite above; g is unchanged.
Graph fuse_copies(const Graph& g, CopyFusionStats* stats = nullptr);

}  // namespace podlet
