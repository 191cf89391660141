// Sub-graphs held by nodes (control flow, checkpoint, custom rules), as their kernels run
// them: elementwise chains fused once per sub-graph by the pass jit uses
// (PODLET_FUSION=0: the graph itself).
#pragma once
#include <memory>
#include "podlet/ir/graph.h"

namespace podlet {

std::shared_ptr<const Graph> executable_subgraph(const GraphRef& g);

}  // namespace podlet
