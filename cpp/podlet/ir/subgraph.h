// Sub-graphs held by nodes (control flow, checkpoint, custom rules), as their kernels run
// them: elementwise chains fused once per sub-graph by the pass jit uses
// (PODLET_FUSION=0: the graph itself).
#pragma once
#include <memory>
#include "podlet/ir/graph.h"

namespace podlet {

std::shared_ptr<const Graph> executable_subgraph(const GraphRef& g);
// Every sub-graph a node's attributes hold (single ones and lists), in attribute order.
std::vector<GraphRef> subgraphs_of(const Attrs& a);
// Drops every cached sub-graph (the bindings call it at interpreter exit, while the
// constants the graphs hold may still release Python objects).
void clear_subgraph_cache();

}  // namespace podlet
