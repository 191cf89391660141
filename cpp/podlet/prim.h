// A primitive is one row in a table: shape rule, kernel, VJP rule and FLOP count,
// registered together in the file of its family (cpp/podlet/prims/*.cc):
//
//   static Register reg_exp("exp", {.shape = same_shape, .kernel = exp_kernel,
//                                   .vjp = exp_vjp, .flops = elementwise_flops(1),
//                                   .batch = batch_elementwise});
#pragma once
#include <functional>
#include <string>
#include <vector>
#include "podlet/array.h"
#include "podlet/attrs.h"

namespace podlet {

class Graph;
struct Node;

using ShapeRule = std::function<std::vector<AVal>(const std::vector<AVal>& in, const Attrs&)>;
// Outputs arrive allocated with the shapes the shape rule gave; the kernel fills them.
using Kernel = std::function<void(const std::vector<Array>& in, std::vector<Array>& out, const Attrs&)>;
// Given the node and the cotangent value id of each output (-1 = zero), appends the
// nodes that compute each input's cotangent to g and returns their ids (-1 = zero /
// not differentiable). `n` is a copy: appending to g may move the node list.
using VjpRule = std::function<std::vector<int>(Graph& g, const Node& n, const std::vector<int>& cts)>;
using FlopCount = std::function<double(const std::vector<AVal>& in, const std::vector<AVal>& out, const Attrs&)>;

// vmap's batching rule (batching.cc drives it). The node `n` is the per-element one:
// its attrs, and in_avals / out_avals, the shapes one element of the batch sees. `in` are
// the input ids in g, the batched graph being built; bdim[k] is 0 when input k carries the
// mapped axis (of `size` elements) in front, -1 when it is the same for every element.
// The rule appends the batched computation to g, returns the outputs' ids and sets
// out_bdim (0 or -1) for each output. Collectives naming `axis_name` reduce over it.
struct BatchCtx {
  const Node& n;
  std::vector<AVal> in_avals, out_avals;
  int64_t size;
  std::string axis_name;
};
using BatchRule = std::function<std::vector<int>(Graph& g, const BatchCtx& c, const std::vector<int>& in,
                                                 const std::vector<int>& bdim, std::vector<int>& out_bdim)>;
// Dead-code elimination inside a node (Graph::dce calls it when some of the node's
// outputs are unused): drops those outputs from n.out (and the inputs and sub-graph work
// only they needed), editing n in place so that its shape rule gives exactly the outputs
// left. Nodes whose work cannot be split leave it alone.
using PruneRule = std::function<void(Node& n, const std::vector<char>& out_live)>;
// True when the node would return its first input unchanged (a pad by nothing, a slice of
// everything). Graph::add then returns that input's id and appends no node: XLA's
// algebraic simplifier drops such ops, and podlet ran each as a copy (a zero pad as a
// fill and a copy, its VJP as another pad and a slice). Eager calls still run the kernel.
using IdentityRule = std::function<bool(const std::vector<AVal>& in, const std::vector<AVal>& out, const Attrs&)>;

struct PrimDef {
  std::string name;
  ShapeRule shape;
  Kernel kernel;
  VjpRule vjp;          // empty: not differentiable (error if a gradient must flow through it)
  FlopCount flops;      // empty: 0
  BatchRule batch;      // empty: vmap of this primitive over a batched input is an error naming it
  PruneRule prune;      // empty: the node runs whole while any output is used
  IdentityRule identity;  // empty: never an identity
  bool zero_grad = false;  // outputs carry no gradient (comparisons, argmax, iota, random bits)
  bool kernel_allocates = false;  // kernel sets its outputs itself (aliasing ops like reshape)
  bool batch_always = false;  // vmap calls the batching rule even when no input is batched (collectives)
  // Declared unbatchable, with the reason vmap reports (kept beside the other rows so that
  // tests/prim_check.py can tell an omission from a decision).
  const char* no_batch_reason = nullptr;
};

const PrimDef& lookup_prim(const std::string& name);  // throws ValueError naming the prim
std::vector<std::string> prim_names();

struct Register {
  Register(const std::string& name, PrimDef def);
};

// Runs one primitive eagerly: shape rule, allocation, kernel.
std::vector<Array> apply_prim(const PrimDef& p, const std::vector<Array>& in, const Attrs& attrs);
std::vector<AVal> infer_shapes(const PrimDef& p, const std::vector<AVal>& in, const Attrs& attrs);

}  // namespace podlet
