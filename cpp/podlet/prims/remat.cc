// Rematerialisation the user asks for (jax.checkpoint / jax.remat) and checkpoint_name:
// shape rule, kernel, VJP, batching rule and FLOP count side by side.
//
//   checkpoint(args...; body, policy, names)   outputs: the body's
//   checkpoint_name(x; name)                   identity that names x for a policy
//
// The VJP rule splits the body's reverse mode by the policy (ir/partial_eval.h): the
// forward checkpoint node is replaced by one that also outputs the values the policy
// saves, and the backward pass recomputes everything else from those and the inputs.
// Policies (jax.checkpoint_policies), '|'-joined when combined:
//   nothing          nothing_saveable (the default): only the inputs are kept
//   everything       everything_saveable
//   dots             dots_saveable / checkpoint_dots: dot_general and convolution outputs
//   dots_no_batch    dots_with_no_batch_dims_saveable: dot_general without batch dims
//   names_except     save_anything_except_these_names(names): all but those names
//   names_only       save_only_these_names(names)
//   names_but        save_any_names_but_these(names): named values other than those
// names: '\n'-separated.
#include "podlet/prims/common.h"
#include "podlet/ir/batch_ops.h"
#include "podlet/ir/subgraph.h"
#include "podlet/ir/partial_eval.h"
#include <cstdlib>
#include <mutex>
#include <set>
#include <sstream>

namespace podlet {
namespace {
using Ids = std::vector<int>;

std::set<std::string> split_names(const std::string& s) {
  std::set<std::string> r;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) if (!line.empty()) r.insert(line);
  return r;
}

std::function<bool(const Node&)> policy_of(const Attrs& a) {
  const std::string pol = a.s("policy", "nothing");
  const std::set<std::string> names = split_names(a.s("names", ""));
  std::vector<std::string> parts;
  std::istringstream in(pol);
  for (std::string p; std::getline(in, p, '|');) parts.push_back(p);
  for (auto& p : parts)
    if (p != "nothing" && p != "everything" && p != "dots" && p != "dots_no_batch" && p != "names_except" &&
        p != "names_only" && p != "names_but")
      throw ValueError(fmt("checkpoint: unknown policy '", p, "'"));
  return [parts, names](const Node& n) {
    const std::string& prim = n.prim->name;
    const bool named = prim == "checkpoint_name";
    const bool listed = named && names.count(n.attrs.s("name", ""));
    for (auto& p : parts) {
      if (p == "everything") return true;
      if (p == "dots" && (prim == "dot_general" || prim == "conv_general_dilated")) return true;
      if (p == "dots_no_batch" && prim == "dot_general" && n.attrs.ints("lhs_batch", {}).empty()) return true;
      if (p == "names_except" && !listed) return true;
      if (p == "names_only" && listed) return true;
      if (p == "names_but" && named && !listed) return true;
    }
    return false;
  };
}

std::vector<AVal> checkpoint_shape(const std::vector<AVal>& in, const Attrs& a) {
  const Graph& b = *a.graph("body");
  if (b.inputs.size() != in.size())
    throw ValueError(fmt("checkpoint: the body takes ", b.inputs.size(), " inputs, got ", in.size()));
  for (size_t k = 0; k < in.size(); ++k)
    if (!(b.aval(b.inputs[k]) == in[k]))
      throw ShapeError(fmt("checkpoint: operand ", k, " is ", dtype_name(in[k].dtype), shape_str(in[k].shape),
                           ", the body expects ", dtype_name(b.aval(b.inputs[k]).dtype), shape_str(b.aval(b.inputs[k]).shape)));
  policy_of(a);
  std::vector<AVal> out;
  for (int v : b.outputs) out.push_back(b.aval(v));
  return out;
}

void checkpoint_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
  auto r = run_graph(*executable_subgraph(a.graph("body")), in);
  for (size_t k = 0; k < out.size(); ++k) out[k] = std::move(r[k]);
}

Ids checkpoint_vjp(Graph& g, const Node& n, const Ids& ct) {
  const Graph& body = *n.attrs.graph("body");
  Ids wrt, cto;
  for (size_t k = 0; k < body.inputs.size(); ++k) if (is_float(body.aval(body.inputs[k]).dtype)) wrt.push_back(int(k));
  const size_t n_out = body.outputs.size();
  for (size_t k = 0; k < n_out; ++k) if (is_float(body.aval(body.outputs[k]).dtype)) cto.push_back(int(k));
  SplitVjp S = split_vjp(body, wrt, cto, policy_of(n.attrs));
  Attrs fa = n.attrs;
  fa.set("body", GraphRef(std::make_shared<const Graph>(std::move(S.fwd))));
  fa.set("forward_of", int64_t(n.out[0]));
  const Ids F = g.add("checkpoint", n.in, fa, n.where);  // outputs, then the saved residuals
  Ids args(F.begin() + n_out, F.end());
  for (int k : cto) args.push_back(ct[k] >= 0 ? ct[k] : ops::zeros_like(g, n.out[k]));
  const Ids cts = g.inline_graph(S.bwd, args, n.where);
  Ids r(n.in.size(), -1);
  for (size_t j = 0; j < wrt.size(); ++j) r[wrt[j]] = cts[j];
  return r;
}

Ids checkpoint_batch(Graph& g, const BatchCtx& c, const Ids& in, const Ids& bd, Ids& ob) {
  Attrs a = c.n.attrs;
  a.set("body", GraphRef(std::make_shared<const Graph>(
                    batch_graph_materialized(*c.n.attrs.graph("body"), bd, c.size, c.axis_name))));
  return batching::reapply(g, c, in, a, ob);
}

static Register reg_checkpoint("checkpoint", PrimDef{
    .shape = checkpoint_shape,
    .kernel = checkpoint_kernel,
    .vjp = checkpoint_vjp,
    .flops = [](const std::vector<AVal>&, const std::vector<AVal>&, const Attrs& a) { return a.graph("body")->flops(); },
    .batch = checkpoint_batch,
    .kernel_allocates = true});

static Register reg_checkpoint_name("checkpoint_name", PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) -> std::vector<AVal> {
      check_arity(in, 1);
      a.s("name");
      return {in[0]};
    },
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs&) { out[0] = in[0]; },
    .vjp = [](Graph&, const Node&, const Ids& ct) -> Ids { return {ct[0]}; },
    .flops = nullptr,
    .batch = batching::elementwise,
    .kernel_allocates = true});

}  // namespace
}  // namespace podlet
