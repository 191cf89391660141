// The max-pool selection pass (see pool_fusion.h).
//
// The rewritten forward node keeps its place and output id and gains the output sel; a
// gradient node keeps its place and output id and reads sel instead of x. Legal in the
// (topological) node order: a gradient node reads x, so it comes after x's producer, and
// it is matched only to a max-pool node before it.
#include "podlet/ir/pool_fusion.h"
#include "podlet/kernels/pool.h"

namespace podlet {
namespace {

bool is_prim(const Node& n, const char* name) { return n.prim->name == name; }

// The window attrs as the primitives normalise them (absent strides and padding are the
// defaults), so that a forward and a gradient node built by different code compare equal.
struct Window {
  Shape win, str, pad;
  bool operator==(const Window& o) const { return win == o.win && str == o.str && pad == o.pad; }
};
Window window_of(const Node& n, size_t rank) {
  return {n.attrs.ints("window_dimensions"), n.attrs.ints("window_strides", Shape(rank, 1)),
          n.attrs.ints("padding", Shape(2 * rank, 0))};
}

}  // namespace

Graph fuse_pool_selection(const Graph& g, int* pools) {
  Graph out = g;
  int rewritten = 0;
  for (int i = 0; i < int(out.nodes.size()); ++i) {
    if (!is_prim(out.nodes[i], "reduce_window") || out.nodes[i].attrs.s("computation") != "max") continue;
    const int x = out.nodes[i].in[0];
    const AVal xa = out.aval(x);
    const Window w = window_of(out.nodes[i], xa.shape.size());
    if (w.win.size() != xa.shape.size() || numel(w.win) > kernels::kMaxSelectWindow || xa.dtype == DType::boolean) continue;
    std::vector<int> grads;
    for (int j = i + 1; j < int(out.nodes.size()); ++j) {
      const Node& s = out.nodes[j];
      if (is_prim(s, "select_and_scatter_add") && s.in[1] == x && window_of(s, xa.shape.size()) == w) grads.push_back(j);
    }
    if (grads.empty()) continue;
    Attrs wa{{"window_dimensions", w.win}, {"window_strides", w.str}, {"padding", w.pad}};
    const int sel = out.num_values();
    out.avals.push_back(AVal{DType::u8, out.aval(out.nodes[i].out[0]).shape});
    out.producer.push_back(i);
    Node& f = out.nodes[i];
    f.prim = &lookup_prim("reduce_window_argmax");
    f.attrs = wa;
    f.out.push_back(sel);
    for (int j : grads) {
      Node& s = out.nodes[j];
      s.prim = &lookup_prim("scatter_add_at_argmax");
      s.in[1] = sel;
      s.attrs = wa;
      s.attrs.set("operand_shape", xa.shape);
    }
    ++rewritten;
  }
  if (pools) *pools = rewritten;
  return out;
}

}  // namespace podlet
