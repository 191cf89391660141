// Transposed products written in place: a dot_general whose result is read only by a
// transpose becomes one dot_general that writes the transposed layout itself (its
// out_perm attr, prims/dot.cc), when the GEMM can store it row by row: the rhs free dims
// stay last, in order, and the lhs free dims keep one row stride. Flax's attention
// without the fused kernel ends in einsum('...hqk,...khd->...qhd'), a product over
// (batch, head) whose [b, h, q, d] result is transposed to [b, q, h, d]; its backward
// pass transposes dq and dk the same way. Each was a full copy (ViT-Tiny: 72 of them per
// two steps); XLA's layout assignment folds them into the product the same way.
// The same pass lets a product read a transpose's input in place when every reader of
// the transpose is a product and the transpose keeps the last dim last and the free dims
// in order (the GEMM reads any operand through offset tables): the backward pass's
// dout, [b, q, h, d] read as [b, h, q, d].
// The GEMM sums every element as before: results are identical.
//
// Runs on executable graphs (after autodiff, vmap and partitioning, before elementwise
// fusion); value ids keep their meaning (the transpose's output is now the product's).
#pragma once
#include "podlet/ir/graph.h"

namespace podlet {

// A copy of g with the rewrites above (`folded`, if given, counts the transposes removed);
// g is unchanged.
Graph fold_dot_transposes(const Graph& g, int* folded = nullptr);

}  // namespace podlet
