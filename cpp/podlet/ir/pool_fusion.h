// Max-pool selection pass: a graph about to run that holds a max-pool (reduce_window
// max) and its gradient (select_and_scatter_add reading the same operand x with the same
// window) makes the gradient's selection once, in the forward pass:
//   y = reduce_window(x; max, w)              ->  (y, sel) = reduce_window_argmax(x; w)
//   dx = select_and_scatter_add(ct, x; w)     ->  dx = scatter_add_at_argmax(ct, sel; w)
// (prims/window.cc). The gradient no longer reads x: at the ResNet stem it read x
// (f32 [32, 112, 112, 64], 102 MB) back from memory to find each window's maximum again,
// and x had to live from the forward pass to the backward pass; sel is 1 byte an output
// element. Bit-identical results: the same selection, the same additions in the same
// order. Windows of more than 127 elements are left alone (sel holds int8 positions).
// Like optimizer fusion (optim_fusion.h), it runs on executable graphs only, before
// rematerialisation and elementwise fusion; value ids keep their meaning (sel is a new
// value).
#pragma once
#include "podlet/ir/graph.h"

namespace podlet {

// A copy of g with the rewrite above; g is unchanged. *pools: max-pools rewritten.
Graph fuse_pool_selection(const Graph& g, int* pools = nullptr);

}  // namespace podlet
