// Node order for elementwise fusion: small computations sink to just before their first
// consumer. fusion.cc seals a group as soon as a node reads one of its sums, so in
// BatchNorm's backward the per-channel arithmetic on sum(g) (computed right after the
// pass that makes g) closed that pass before g * k, (x - mean) * g and their sums - all
// full-size, all reading g - could join it: g was written in f32 and read back by a
// second pass. Sunk below them, the per-channel nodes no longer seal the group early.
//
// Only cheap nodes move: fusible elementwise primitives and reshapes whose inputs and
// outputs are all small (at most kSmallElements). Moving a node later to just before
// its earliest consumer keeps the order topological; nothing else moves.
#pragma once
#include <cstdint>
#include "podlet/ir/graph.h"

namespace podlet {
constexpr int64_t kSmallElements = 1 << 16;
// A copy of g with its small elementwise nodes moved down to their first consumer.
Graph sink_small_nodes(const Graph& g);
}  // namespace podlet
