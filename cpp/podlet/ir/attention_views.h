// Attention views: the fused attention reads q, k and v where a projection left them and
// writes its gradient where the projection's backward pass reads it.
//
// Swin (and timm-style ViT) attention computes one qkv projection, reshapes it to
// [B, T, 3, N, H] and slices q, k and v out of it; the backward pass concatenates dq, dk
// and dv back into one [B, T, 3, N, H] gradient. The slices copy the projection once and
// the concatenation copies the gradient once: ~2% of a Swin-T bf16 step. In graphs about
// to run this pass rewrites
//   q = reshape(slice(X)) (likewise k, v)      -> the attention nodes read X through
//                                                 qkv_views (prims/attention.cc)
//   concatenate(reshape(dq), reshape(dk), reshape(dv))
//                                              -> the backward node writes that array
//                                                 (dqkv), dq, dk, dv side by side per row
// A slice qualifies when the elements it keeps are, token row after token row, one run
// of N * H (K * H) elements at a fixed stride in X (any X layout: [B, T, 3, N, H],
// [B, T, 3 * N * H], [B * T, 3 * N * H]); a concatenation when its operands are the
// backward node's three gradients, each read by nothing else, and fill its rows. The
// kernels do the same arithmetic on the same elements: results are identical.
//
// Runs on executable graphs before elementwise fusion; value ids keep their meaning (the
// concatenation's output is now the backward node's), nodes left without readers go.
#pragma once
#include "podlet/ir/graph.h"

namespace podlet {

struct AttentionViewStats {
  int views = 0;   // q, k, v inputs now read as views (forward and backward nodes)
  int packed = 0;  // backward nodes writing their gradient into the concatenation's array
};

// A copy of g with the rewrite above; g is unchanged.
Graph fuse_attention_views(const Graph& g, AttentionViewStats* stats = nullptr);

// The bias gradient summed over the batch in the backward kernel: a backward node whose
// dlogits [B, N, T, S] is read only by a reduce_sum over axes that include the batch
// (the VJP's sum down to a bias broadcast over it: Swin's relative-position bias, shared
// by every window) gets dbias_batch_sum (prims/attention.cc) and puts out [1, N, T, S];
// the reduce_sum stays for the other axes (over a batch of one now). The sums are the
// kernel's (fixed batch chunks, in order), not reduce_sum's: close, not the same bits.
// `summed`, if given, counts the nodes rewritten.
Graph sum_attention_dbias(const Graph& g, int* summed = nullptr);

}  // namespace podlet
