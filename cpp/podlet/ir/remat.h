// Rematerialisation: a graph pass that recomputes cheap elementwise values where the
// backward pass reads them, instead of keeping them in memory from the forward pass.
//
// After autodiff a train step keeps, per BatchNorm, the f32 copy of its input, the
// centred input and the ReLU mask alive from the forward pass to the backward pass, each
// computed elementwise from the bf16 conv output and per-channel vectors. XLA re-derives
// such values inside the consumer's fusion; this pass does the same on the graph before
// elementwise fusion: a clone of the value's elementwise cone is placed just before its
// far readers, where fusion folds it into their pass. The forward value then dies at
// its last near reader, and the backward pass reads the 2-byte conv output (which it
// often needs anyway) instead of 4-byte intermediates: less memory and fewer bytes moved.
//
// A reader is far when a heavy node (one that is not elementwise and writes at least a
// sixteenth of the value's elements: a conv, a dot, a pool) runs between the value and
// it. A value is recomputed only when every far reader is itself elementwise (it fuses
// with the clone), the cone has at most kMaxCone nodes, and the inputs the clone needs
// that would otherwise be dead by then are smaller than the value. Clones compute the
// same operations on the same operands, so results are bit-identical.
#pragma once
#include <cstdint>
#include "podlet/ir/graph.h"

namespace podlet {

struct RematStats {
  int values = 0;        // values recomputed at their far readers
  int nodes_cloned = 0;  // elementwise nodes added
  double bytes = 0;      // bytes of the values no longer kept
};

// A copy of g with values recomputed as described above; g is unchanged. Values smaller
// than min_elements are left alone (their memory is not worth a recomputation).
Graph rematerialize(const Graph& g, RematStats* stats = nullptr, int64_t min_elements = 4096);

}  // namespace podlet
