// Reverse-mode autodiff as a graph transformation: walk the traced nodes backwards and
// let each primitive's VJP rule append the nodes of its backward pass.
#include "podlet/ir/graph.h"
#include "podlet/ir/ops.h"
#include "podlet/ir/partial_eval.h"
#include <algorithm>
#include <map>

namespace podlet {

namespace {

// The zero-padding a slice's VJP appends: pad(x, 0) growing exactly one axis, no interior.
struct PadOnAxis { int x = -1, axis = -1; int64_t lo = 0, hi = 0; };
PadOnAxis pad_on_axis(const Graph& G, int v) {
  PadOnAxis r;
  const int p = v < int(G.producer.size()) ? G.producer[v] : -1;
  if (p < 0 || G.nodes[p].prim->name != "pad") return r;
  const Node& n = G.nodes[p];
  const int z = n.in[1];
  const Array* zero = nullptr;
  for (auto& c : G.consts) if (c.first == z) { zero = &c.second; break; }
  if (!zero || zero->size() != 1 || get_as_double(*zero, 0) != 0.0) return r;
  const auto lo = n.attrs.ints("low"), hi = n.attrs.ints("high"), in = n.attrs.ints("interior");
  for (size_t d = 0; d < lo.size(); ++d) {
    if (in[d] != 0 || lo[d] < 0 || hi[d] < 0) return PadOnAxis{};
    if (lo[d] || hi[d]) {
      if (r.axis >= 0) return PadOnAxis{};
      r.axis = int(d); r.lo = lo[d]; r.hi = hi[d];
    }
  }
  if (r.axis >= 0) r.x = n.in[0];
  return r;
}

// The sum of a value's cotangent contributions, in the order they arrived. Zero-padded
// pieces of disjoint ranges of one axis (the VJPs of jnp.split's slices, of the gates of
// an LSTM) are laid side by side by one concatenate, as JAX transposes a split, instead
// of a pad and an add each.
int sum_cotangents(Graph& G, const std::vector<int>& parts) {
  std::vector<PadOnAxis> pads(parts.size());
  std::map<int, std::vector<size_t>> by_axis;
  for (size_t i = 0; i < parts.size(); ++i) {
    pads[i] = pad_on_axis(G, parts[i]);
    if (pads[i].axis >= 0) by_axis[pads[i].axis].push_back(i);
  }
  std::vector<char> used(parts.size(), 0);
  std::vector<std::pair<size_t, int>> joined;  // (position of the first piece, concatenate)
  for (auto& [axis, idx] : by_axis) {
    if (idx.size() < 2) continue;
    std::vector<size_t> order = idx;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return pads[a].lo < pads[b].lo; });
    const Shape full_shape = G.aval(parts[order[0]]).shape;
    int64_t at = 0;
    bool disjoint = true;
    for (size_t i : order) {
      if (pads[i].lo < at) { disjoint = false; break; }
      at = full_shape[axis] - pads[i].hi;
    }
    if (!disjoint) continue;
    std::vector<int> pieces;
    at = 0;
    for (size_t i : order) {
      if (pads[i].lo > at) {  // a gap no piece covers: zeros
        Shape s = full_shape;
        s[axis] = pads[i].lo - at;
        const int z = G.add_const(full(G.aval(parts[i]).dtype, {}, 0.0));
        pieces.push_back(ops::broadcast_in_dim(G, z, s, {}));
      }
      pieces.push_back(pads[i].x);
      at = full_shape[axis] - pads[i].hi;
      used[i] = 1;
    }
    if (at < full_shape[axis]) {
      Shape s = full_shape;
      s[axis] = full_shape[axis] - at;
      const int z = G.add_const(full(G.aval(parts[order[0]]).dtype, {}, 0.0));
      pieces.push_back(ops::broadcast_in_dim(G, z, s, {}));
    }
    joined.emplace_back(idx.front(), G.add1("concatenate", pieces, {{"dimension", int64_t(axis)}}));
  }
  int acc = -1;
  auto add = [&](int c) { acc = acc < 0 ? c : ops::add(G, acc, c); };
  for (size_t i = 0; i < parts.size(); ++i) {
    for (auto& [first, c] : joined) if (first == i) add(c);
    if (!used[i]) add(parts[i]);
  }
  return acc;
}

}  // namespace

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
  // Each value's cotangent contributions, summed when its producer's VJP reads them.
  std::vector<std::vector<int>> parts(nv);
  auto accumulate = [&](int v, int c) {
    c = ops::cast_if_needed(G, c, g.avals[v].dtype);
    if (!(G.aval(c).shape == g.avals[v].shape))
      throw ShapeError(fmt("vjp: cotangent of value %", v, " has shape ", shape_str(G.aval(c).shape),
                           ", expected ", shape_str(g.avals[v].shape)));
    parts[v].push_back(c);
  };
  std::vector<int> ct(nv, -1);
  auto total = [&](int v) {
    if (ct[v] < 0 && !parts[v].empty()) ct[v] = sum_cotangents(G, parts[v]);
    return ct[v];
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
    for (int v : n.out) has_ct |= !parts[v].empty();
    if (!has_ct) continue;
    bool any_active_in = false;
    for (int v : n.in) any_active_in |= bool(active[v]);
    if (!any_active_in) continue;
    if (!n.prim->vjp)
      throw ValueError(fmt("reverse-mode differentiation of '", n.prim->name, "' is not implemented",
                           n.where.empty() ? "" : " (" + n.where + ")"));
    std::vector<int> cts;
    for (int v : n.out) cts.push_back(total(v));
    std::vector<int> res = n.prim->vjp(G, n, cts);
    for (size_t k = 0; k < res.size() && k < n.in.size(); ++k)
      if (res[k] >= 0 && active[n.in[k]]) accumulate(n.in[k], res[k]);
  }
  for (int k : wrt) {
    int v = g.inputs[k];
    G.outputs.push_back(total(v) >= 0 ? ct[v] : ops::zeros_like(G, v));
  }
  merge_forward_replacements(G);  // a scan's forward pass that also stacks residuals replaces it
  G.dce();
  return G;
}

}  // namespace podlet
