// Memory planning: where each intermediate of a graph lives, decided before it runs.
//
// The executor used to allocate every output from the buffer pool and free it after its
// last use. A training step asks for hundreds of differently sized buffers, and a pool
// that only recycles what fits keeps spare buffers of every size beside the ones in use:
// the resident size of a ResNet-34 step was 1.6x its peak of live buffers. Like XLA's
// buffer assignment (and TFLite's arena planner), the plan instead gives each value an
// offset in one arena so that values alive at the same time never overlap — greedy by
// size, largest first, each at the lowest offset free for its whole lifetime — and the
// executor takes one arena per run (a single pool hit from the second step on: no page
// faults, no per-value allocation).
//
// A value's lifetime runs from the node that writes it to its last reader; a view made by
// a kernel that returns its input's buffer (reshape, bitcast) extends the lifetime of what
// it views. Graph outputs, and anything a graph output may view, are allocated as before:
// they outlive the run.
#pragma once
#include <cstdint>
#include <vector>
#include "podlet/ir/graph.h"

namespace podlet {

struct MemoryPlan {
  std::vector<int64_t> offset;  // by value id: byte offset in the arena, or -1 (allocated alone)
  std::vector<int> end;          // by value id: the last node that needs its slot (views included)
  int64_t arena_bytes = 0;
  int64_t values = 0;           // values placed in the arena
  int64_t sum_bytes = 0;        // their total size (what separate buffers would need at most)
};

// Values smaller than min_bytes are allocated alone (not worth a slot in the plan).
MemoryPlan plan_memory(const Graph& g, int64_t min_bytes = 4096);

}  // namespace podlet
