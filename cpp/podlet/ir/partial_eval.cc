#include "podlet/ir/partial_eval.h"

namespace podlet {

SplitVjp split_vjp(const Graph& body, const std::vector<int>& wrt, const std::vector<int>& ct_outputs,
                   const std::function<bool(const Node&)>& saveable) {
  const Graph V = vjp_graph(body, wrt, ct_outputs);
  // vjp_graph starts from a copy of body: ids below nv are body's values; the cotangent
  // inputs and everything the backward pass computes come after.
  const int nv = body.num_values(), NV = V.num_values();
  std::vector<int> prod(NV, -1);
  for (size_t i = 0; i < V.nodes.size(); ++i) for (int o : V.nodes[i].out) prod[o] = int(i);
  std::vector<char> is_const(NV, 0);
  for (auto& c : V.consts) is_const[c.first] = 1;
  std::vector<char> in_bwd(V.nodes.size(), 0), is_res(NV, 0);
  std::vector<int> residuals, stack;
  SplitVjp r;
  auto need = [&](int v) {
    stack.push_back(v);
    while (!stack.empty()) {
      const int u = stack.back();
      stack.pop_back();
      if (u >= nv || is_const[u] || is_res[u]) continue;
      const int p = prod[u];
      if (p < 0 || saveable(V.nodes[p])) { is_res[u] = 1; residuals.push_back(u); continue; }
      if (in_bwd[p]) continue;
      in_bwd[p] = 1;
      ++r.num_recomputed;
      for (int w : V.nodes[p].in) stack.push_back(w);
    }
  };
  for (size_t i = 0; i < V.nodes.size(); ++i)
    for (int o : V.nodes[i].out) if (o >= nv) { in_bwd[i] = 1; break; }
  for (size_t i = 0; i < V.nodes.size(); ++i) {
    bool backward = false;
    for (int o : V.nodes[i].out) backward |= o >= nv;
    if (backward) for (int u : V.nodes[i].in) need(u);
  }
  const size_t n_out = body.outputs.size();
  for (size_t k = n_out; k < V.outputs.size(); ++k) need(V.outputs[k]);

  r.fwd = body;
  for (int v : residuals) r.fwd.outputs.push_back(v);
  r.fwd.dce();
  r.num_residuals = int(residuals.size());

  Graph& B = r.bwd;
  std::vector<int> m(NV, -1);
  for (int v : residuals) m[v] = B.add_input(V.avals[v]);
  for (size_t k = body.inputs.size(); k < V.inputs.size(); ++k) m[V.inputs[k]] = B.add_input(V.avals[V.inputs[k]]);
  std::vector<const Array*> const_of(NV, nullptr);
  for (auto& c : V.consts) const_of[c.first] = &c.second;
  auto map = [&](int v) {
    if (m[v] < 0) {
      if (!const_of[v]) throw Error(fmt("split_vjp: backward value %", v, " is neither computed nor saved"));
      m[v] = B.add_const(*const_of[v]);
    }
    return m[v];
  };
  for (size_t i = 0; i < V.nodes.size(); ++i) {
    if (!in_bwd[i]) continue;
    const Node& n = V.nodes[i];
    std::vector<int> in;
    for (int u : n.in) in.push_back(map(u));
    auto out = B.add(*n.prim, in, n.attrs, n.where);
    for (size_t k = 0; k < out.size(); ++k) m[n.out[k]] = out[k];
  }
  for (size_t k = n_out; k < V.outputs.size(); ++k) B.outputs.push_back(map(V.outputs[k]));
  B.dce();
  return r;
}

void merge_forward_replacements(Graph& g) {
  for (size_t j = 0; j < g.nodes.size(); ++j) {
    if (!g.nodes[j].attrs.has("forward_of")) continue;
    Node s = g.nodes[j];
    const int v = int(s.attrs.i("forward_of"));
    int p = -1;
    for (size_t i = 0; i < j && p < 0; ++i)
      for (int o : g.nodes[i].out) if (o == v) { p = int(i); break; }
    Attrs a;
    for (auto& [k, val] : s.attrs.items()) if (k != "forward_of") a.set(k, val);
    if (p < 0 || g.nodes[p].in != s.in || g.nodes[p].prim != s.prim || g.nodes[p].out.size() > s.out.size()) {
      g.nodes[j].attrs = a;  // nothing to merge with: it stays a second forward pass
      continue;
    }
    const Node& n = g.nodes[p];
    std::vector<int> remap(g.num_values(), -1);
    std::vector<int> out = n.out;
    for (size_t k = 0; k < n.out.size(); ++k) remap[s.out[k]] = n.out[k];
    for (size_t k = n.out.size(); k < s.out.size(); ++k) out.push_back(s.out[k]);
    Node merged = s;
    merged.attrs = a;
    merged.out = out;
    merged.where = n.where;
    g.nodes[p] = merged;
    g.nodes.erase(g.nodes.begin() + j);
    for (auto& nd : g.nodes) for (int& u : nd.in) if (u < int(remap.size()) && remap[u] >= 0) u = remap[u];
    for (int& u : g.outputs) if (u < int(remap.size()) && remap[u] >= 0) u = remap[u];
    --j;
  }
  std::fill(g.producer.begin(), g.producer.end(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i) for (int o : g.nodes[i].out) g.producer[o] = int(i);
}

}  // namespace podlet
