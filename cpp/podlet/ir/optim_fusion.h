// Optimizer fusion: a graph pass that folds what a train step does with the output of
// the fused AdamW primitive (prims/optim.cc) into that primitive, so that the whole
// parameter update (clip scale, moments, decay, learning rate, apply, EMA) is one pass
// over memory per parameter leaf, behind the unchanged optax / Flax API.
//
// Per adamw_update node it rewrites, in this order:
//   1. apply:  add(param, u), in this order (optax.apply_updates, as
//              TrainState.apply_gradients calls it), where u = adamw_update(param, ...,
//              apply=0)[0] has no other reader
//              -> adamw_update(..., apply=1), whose output 0 is that add's value.
//              The same for sgd_momentum_update and lion_update (prims/optim_sgd_lion.cc),
//              the only rewrite that applies to them.
//   2. EMA:    add(mul(C1, ema), mul(C2, p_new)) (any operand order) where
//              p_new = adamw_update(..., apply=1)[0], C1 and C2 are scalar constants of
//              the param dtype (a 0-d constant as a weakly typed Python float becomes, a
//              constant whose elements are all equal, or a broadcast_in_dim of either),
//              `ema` has the param's shape and dtype and exists before the adamw_update
//              node, and neither product has another reader
//              -> adamw_update(..., ema; ema_c_old=C1, ema_c_new=C2), output 3 = the add's
//              value (the seed's `decay * o + (1 - decay) * n` tree_map).
//   3. grads:  adamw_update(param, convert_element_type(g16), ...) where g16 is bfloat16
//              and the param is not -> adamw_update(param, g16, ...), which widens g16 as
//              it reads it (mixed precision's weight grads: ResNet-34's 21M of them made a
//              pass of their own, reading 2 and writing 4 bytes each). The convert stays
//              for its other readers (a global norm), if any.
// The EMA add's operand order is recorded (attr ema_new_first): it decides which NaN
// comes out when both operands are NaN.
// Anything else (a traced decay, an EMA of something other than the new param, a product
// read elsewhere) is left as it is. The result is bit-identical to the input graph: the
// extended primitive rounds each folded op to the dtype exactly as the one-op kernels do.
// Value ids keep their meaning (the folded nodes' output ids become the adamw_update
// node's outputs); FLOP totals are unchanged.
//
// Like elementwise fusion (fusion.h), it runs only on graphs about to be executed, and
// before elementwise fusion (which would otherwise take the EMA's mul/mul/add).
#pragma once
#include "podlet/ir/graph.h"

namespace podlet {

struct OptimFusionStats {
  int applies_folded = 0;  // apply_updates adds folded into a fused update (apply=1)
  int emas_folded = 0;     // EMA mul/mul/add triples folded into adamw_update
  int grads_widened = 0;   // bf16 -> param dtype grad converts folded into adamw_update
};

// A copy of g with the rewrites above; g is unchanged.
Graph fuse_optimizer(const Graph& g, OptimFusionStats* stats = nullptr);

}  // namespace podlet
