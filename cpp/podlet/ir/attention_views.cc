// The attention-views pass (see attention_views.h).
#include "podlet/ir/attention_views.h"
#include <algorithm>
#include <optional>

namespace podlet {
namespace {

struct View {
  int src;
  int64_t off, ld;
};

// Follows reshapes back from value u.
int through_reshapes(const Graph& g, int u) {
  while (g.producer[u] >= 0 && g.nodes[g.producer[u]].prim->name == "reshape") u = g.nodes[g.producer[u]].in[0];
  return u;
}

// u as a view of the array a unit-stride slice (behind reshapes) cuts it from: `rows` rows
// of `len` elements, each a contiguous run, at off + r * ld.
std::optional<View> view_of(const Graph& g, int u, int64_t rows, int64_t len) {
  const int w = through_reshapes(g, u);
  const int pi = g.producer[w];
  if (pi < 0 || g.nodes[pi].prim->name != "slice") return std::nullopt;
  const Node& s = g.nodes[pi];
  const Shape& xs = g.aval(s.in[0]).shape;
  const auto a = s.attrs.ints("start_indices"), b = s.attrs.ints("limit_indices");
  const auto sd = s.attrs.ints("strides", {});
  for (auto x : sd) if (x != 1) return std::nullopt;
  const int r = int(xs.size());
  Shape st(r, 1);
  for (int d = r - 2; d >= 0; --d) st[d] = st[d + 1] * xs[d + 1];
  int j = r - 1;  // the innermost dim the slice cuts
  while (j >= 0 && a[j] == 0 && b[j] == xs[j]) --j;
  if (j < 0) return std::nullopt;
  if ((b[j] - a[j]) * st[j] != len) return std::nullopt;
  int64_t off = 0, n = 1, ld = len;
  int last = -1;  // the innermost dim (before j) with more than one index kept
  for (int d = 0; d <= j; ++d) off += a[d] * st[d];
  for (int d = j - 1; d >= 0; --d) {
    const int64_t e = b[d] - a[d];
    if (e == 1) continue;
    if (last < 0) ld = st[d];
    else if (st[d] != (b[last] - a[last]) * st[last]) return std::nullopt;  // rows not evenly spaced
    last = d;
    n *= e;
  }
  if (n != rows) return std::nullopt;
  return View{s.in[0], off, ld};
}

bool is(const Node& n, const char* name) { return n.prim->name == name; }

}  // namespace

Graph fuse_attention_views(const Graph& g, AttentionViewStats* stats) {
  Graph out = g;
  AttentionViewStats st;
  const auto readers = g.readers();
  const auto is_out = g.output_mask();
  bool changed = false;
  for (int i = 0; i < int(g.nodes.size()); ++i) {
    const Node& n = g.nodes[i];
    const bool fwd = is(n, "dot_product_attention"), bwd = is(n, "dot_product_attention_bwd");
    if ((!fwd && !bwd) || n.attrs.has("qkv_views") || n.attrs.has("vmap_size")) continue;
    const AVal &q = g.aval(n.in[0]), &k = g.aval(n.in[1]);
    if (q.shape.size() != 4 || k.shape.size() != 4) continue;
    const int64_t B = q.shape[0], T = q.shape[1], NH = q.shape[2] * q.shape[3], S = k.shape[1],
                  KH = k.shape[2] * k.shape[3];
    // The reading side.
    std::optional<View> vw[3] = {view_of(g, n.in[0], B * T, NH), view_of(g, n.in[1], B * S, KH),
                                 view_of(g, n.in[2], B * S, KH)};
    Node& m = out.nodes[i];
    if (vw[0] || vw[1] || vw[2]) {
      std::vector<int64_t> a;
      for (int k3 = 0; k3 < 3; ++k3) {
        const View v = vw[k3] ? *vw[k3] : View{n.in[k3], 0, k3 ? KH : NH};
        st.views += bool(vw[k3]);
        m.in[k3] = v.src;
        a.push_back(v.off);
        a.push_back(v.ld);
      }
      m.attrs.set("qkv_views", a);
      m.attrs.set("q_shape", q.shape);
      m.attrs.set("kv_shape", k.shape);
      changed = true;
    }
    if (!bwd || T != S) continue;
    // The writing side: concatenate(reshape*(dq), reshape*(dk), reshape*(dv)).
    int cat = -1;
    bool ok = true;
    for (int d = 0; d < 3 && ok; ++d) {
      int u = n.out[d];
      for (;;) {  // down through single-reader reshapes
        if (is_out[u] || readers[u].size() != 1) { ok = false; break; }
        const Node& r = g.nodes[readers[u][0]];
        if (is(r, "reshape")) { u = r.out[0]; continue; }
        if (!is(r, "concatenate") || (cat >= 0 && readers[u][0] != cat)) { ok = false; break; }
        cat = readers[u][0];
        break;
      }
    }
    if (!ok || cat < 0 || g.nodes[cat].in.size() != 3) continue;
    const Node& c = g.nodes[cat];
    const Shape& cs = g.aval(c.out[0]).shape;
    const int64_t dim = c.attrs.i("dimension") < 0 ? c.attrs.i("dimension") + int64_t(cs.size()) : c.attrs.i("dimension");
    int64_t rows = 1, inner = 1;
    for (int64_t d = 0; d < dim; ++d) rows *= cs[d];
    for (size_t d = dim + 1; d < cs.size(); ++d) inner *= cs[d];
    if (rows != B * T) continue;
    int64_t offs[3] = {-1, -1, -1}, at = 0;
    for (int k3 = 0; k3 < 3 && ok; ++k3) {
      const int src = through_reshapes(g, c.in[k3]);
      const int d = int(std::find(n.out.begin(), n.out.begin() + 3, src) - n.out.begin());
      if (d >= 3 || offs[d] >= 0) { ok = false; break; }
      const int64_t len = g.aval(c.in[k3]).shape[dim] * inner;
      if (len != (d ? KH : NH)) { ok = false; break; }
      offs[d] = at;
      at += len;
    }
    if (!ok) continue;
    m.attrs.set("dqkv", std::vector<int64_t>{offs[0], offs[1], offs[2], at});
    m.attrs.set("dqkv_shape", cs);
    std::vector<int> outs = {c.out[0]};
    outs.insert(outs.end(), n.out.begin() + 3, n.out.end());  // dlogits, with a bias
    for (int d = 0; d < 3; ++d) out.producer[n.out[d]] = -1;
    m.out = outs;
    out.producer[c.out[0]] = i;
    out.nodes[cat].out.clear();  // dead: dce drops it
    out.nodes[cat].in.clear();
    ++st.packed;
    changed = true;
  }
  if (changed) {
    std::vector<Node> kept;
    for (auto& nd : out.nodes)
      if (!nd.out.empty()) kept.push_back(std::move(nd));
    out.nodes = std::move(kept);
    std::fill(out.producer.begin(), out.producer.end(), -1);
    for (size_t i = 0; i < out.nodes.size(); ++i)
      for (int u : out.nodes[i].out) out.producer[u] = int(i);
    out.dce();  // the slices and reshapes nothing reads any more
  }
  if (stats) *stats = st;
  return out;
}

Graph sum_attention_dbias(const Graph& g, int* summed) {
  const auto readers = g.readers();
  const auto is_out = g.output_mask();
  Graph out = g;
  int n_summed = 0;
  for (const Node& n : g.nodes) {
    if (n.prim->name != "dot_product_attention_bwd" || !n.attrs.i("has_bias", 0) || n.attrs.has("vmap_size") ||
        n.attrs.i("dbias_batch_sum", 0))
      continue;
    const int u = n.out.back();  // dlogits (after dq, dk, dv or the packed dqkv)
    const AVal& du = g.aval(u);
    if (du.shape.size() != 4 || du.shape[0] < 2 || is_out[u] || readers[u].size() != 1) continue;
    const Node& r = g.nodes[readers[u][0]];
    if (r.prim->name != "reduce_sum") continue;
    const auto axes = r.attrs.ints("axes");
    if (std::find_if(axes.begin(), axes.end(), [](int64_t x) { return x == 0 || x == -4; }) == axes.end()) continue;
    Node& m = out.nodes[&n - g.nodes.data()];
    m.attrs.set("dbias_batch_sum", int64_t(1));
    out.avals[u].shape[0] = 1;  // the reduce_sum's result keeps its shape: axis 0 has one entry now
    ++n_summed;
  }
  if (summed) *summed = n_summed;
  return out;
}

}  // namespace podlet
