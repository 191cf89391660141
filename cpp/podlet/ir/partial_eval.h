// Reverse mode of a sub-graph split in two, as JAX's partial evaluation does for scan and
// checkpoint: a forward graph that also outputs the residuals the backward pass reads,
// and a backward graph that reads only residuals and cotangents. `saveable` decides per
// forward node whether its outputs may be stored; the backward graph recomputes the
// others from saved values and inputs (jax.checkpoint's policies). With a policy that
// saves everything, the backward graph holds backward nodes only (scan's residuals).
#pragma once
#include <functional>
#include "podlet/ir/graph.h"

namespace podlet {

struct SplitVjp {
  Graph fwd;  // inputs: body's; outputs: body's outputs, then the residuals
  Graph bwd;  // inputs: residuals, then one cotangent per ct_outputs entry; outputs: cotangents of wrt
  int num_residuals = 0;
  int num_recomputed = 0;  // forward nodes the backward graph recomputes
};

SplitVjp split_vjp(const Graph& body, const std::vector<int>& wrt, const std::vector<int>& ct_outputs,
                   const std::function<bool(const Node&)>& saveable);

// After autodiff: a node carrying attr "forward_of" = v (the first output of an earlier
// node N with the same inputs whose outputs it extends, e.g. a scan that also stacks its
// residuals) takes N's place, so the forward pass runs once.
void merge_forward_replacements(Graph& g);

}  // namespace podlet
