// Reverse-mode autodiff as a graph transformation: walk the traced nodes backwards and
// let each primitive's VJP rule append the nodes of its backward pass.
#include "podlet/ir/graph.h"
#include "podlet/ir/ops.h"
#include "podlet/ir/partial_eval.h"

namespace podlet {

Graph vjp_graph(const Graph& g, const std::vector<int>& wrt, const std::vector<int>& ct_outputs) {
  Graph G = g;
  const int nv = g.num_values();
  // Forward pass: which values depend on a differentiated input.
  std::vector<char> active(nv, 0);
  for (int k : wrt) {
    if (k < 0 || k >= int(g.inputs.size())) throw ValueError(fmt("vjp: no input ", k));
    int v = g.inputs[k];
    if (!is_float(g.avals[v].dtype))
      throw DTypeError(fmt("grad requires real-valued inputs, input ", k, " has dtype ",
                           dtype_name(g.avals[v].dtype), "; use float32/bfloat16 or stop_gradient"));
    active[v] = 1;
  }
  for (auto& n : g.nodes) {
    if (n.prim->zero_grad) continue;
    bool a = false;
    for (int v : n.in) a |= bool(active[v]);
    if (a) for (int v : n.out) active[v] = is_float(g.avals[v].dtype);
  }
  std::vector<int> ct(nv, -1);
  auto accumulate = [&](int v, int c) {
    c = ops::cast_if_needed(G, c, g.avals[v].dtype);
    if (!(G.aval(c).shape == g.avals[v].shape))
      throw ShapeError(fmt("vjp: cotangent of value %", v, " has shape ", shape_str(G.aval(c).shape),
                           ", expected ", shape_str(g.avals[v].shape)));
    ct[v] = ct[v] < 0 ? c : ops::add(G, ct[v], c);
  };
  for (int k : ct_outputs) {
    if (k < 0 || k >= int(g.outputs.size())) throw ValueError(fmt("vjp: no output ", k));
    int v = g.outputs[k];
    int c = G.add_input(g.avals[v]);
    if (active[v]) accumulate(v, c);
  }
  for (int i = int(g.nodes.size()) - 1; i >= 0; --i) {
    const Node n = g.nodes[i];  // copy: G.nodes grows below
    bool has_ct = false;
    for (int v : n.out) has_ct |= ct[v] >= 0;
    if (!has_ct) continue;
    bool any_active_in = false;
    for (int v : n.in) any_active_in |= bool(active[v]);
    if (!any_active_in) continue;
    if (!n.prim->vjp)
      throw ValueError(fmt("reverse-mode differentiation of '", n.prim->name, "' is not implemented",
                           n.where.empty() ? "" : " (" + n.where + ")"));
    std::vector<int> cts;
    for (int v : n.out) cts.push_back(ct[v]);
    std::vector<int> res = n.prim->vjp(G, n, cts);
    for (size_t k = 0; k < res.size() && k < n.in.size(); ++k)
      if (res[k] >= 0 && active[n.in[k]]) accumulate(n.in[k], res[k]);
  }
  for (int k : wrt) {
    int v = g.inputs[k];
    G.outputs.push_back(ct[v] >= 0 ? ct[v] : ops::zeros_like(G, v));
  }
  merge_forward_replacements(G);  // a scan's forward pass that also stacks residuals replaces it
  G.dce();
  return G;
}

}  // namespace podlet
