// The transposed-product pass (see dot_layout.h).
#include "podlet/ir/dot_layout.h"
#include "podlet/prim.h"

namespace podlet {

Graph fold_dot_transposes(const Graph& g, int* folded) {
  const int V = g.num_values();
  std::vector<int> nreaders(V, 0);
  for (const Node& n : g.nodes)
    for (int v : n.in) ++nreaders[v];
  for (int v : g.outputs) ++nreaders[v];  // a graph output is read outside
  Graph out = g;
  int count = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& t = g.nodes[i];
    if (t.prim->name != "transpose" || t.in.size() != 1) continue;
    const int v = t.in[0], p = g.producer[v];
    if (p < 0 || nreaders[v] != 1) continue;
    const Node& d = out.nodes[p];  // (out: a product already moved reads nothing from here)
    if (d.prim->name != "dot_general" || !d.attrs.ints("out_perm", {}).empty() || d.out.size() != 1) continue;
    Attrs a = d.attrs;
    a.set("out_perm", t.attrs.ints("permutation"));
    std::vector<AVal> in;
    for (int u : d.in) in.push_back(g.aval(u));
    try {
      if (d.prim->shape(in, a)[0] != g.aval(t.out[0])) continue;
    } catch (const ShapeError&) {
      continue;  // a layout the GEMM cannot store row by row
    }
    // The product moves to the transpose's place (its inputs exist there) and writes its
    // output value; the old node is left without readers.
    Node& m = out.nodes[i];
    m.prim = d.prim;
    m.in = d.in;
    m.attrs = a;
    m.where = d.where;
    ++count;
  }
  if (count) out.dce();
  if (folded) *folded = count;
  return out;
}

}  // namespace podlet
