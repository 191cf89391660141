// The copy-fusion pass (see copy_fusion.h).
#include "podlet/ir/copy_fusion.h"
#include <algorithm>
#include <cstring>
#include <limits>
#include <unordered_map>

namespace podlet {
namespace {

enum class Move { none, free, copy };

int64_t axis_of(int64_t d, size_t rank) { return d < 0 ? d + int64_t(rank) : d; }

// How node n moves whole rows of the last dimension: `copy` for a slice, concatenation,
// transpose or rev that leaves the last dimension in place and whole, `free` for a
// reshape that keeps it, `none` otherwise.
Move row_move(const Node& n, const Graph& g) {
  if (n.out.size() != 1 || n.in.empty()) return Move::none;
  const AVal& o = g.aval(n.out[0]);
  if (o.shape.empty()) return Move::none;
  const int64_t C = o.shape.back();
  for (int v : n.in) {
    const AVal& a = g.aval(v);
    if (a.shape.empty() || a.shape.back() != C || a.dtype != o.dtype) return Move::none;
  }
  const std::string& p = n.prim->name;
  const size_t r = o.shape.size();
  if (p == "concatenate") return axis_of(n.attrs.i("dimension"), r) != int64_t(r - 1) ? Move::copy : Move::none;
  if (n.in.size() != 1) return Move::none;
  if (p == "reshape") return Move::free;
  if (p == "transpose") {
    const auto perm = n.attrs.ints("permutation");
    return perm.size() == r && perm.back() == int64_t(r - 1) ? Move::copy : Move::none;
  }
  if (p == "slice") {
    const auto st = n.attrs.ints("start_indices"), li = n.attrs.ints("limit_indices"),
               sd = n.attrs.ints("strides", {});
    return st.size() == r && st.back() == 0 && li.back() == C && (sd.empty() || sd.back() == 1) ? Move::copy
                                                                                                 : Move::none;
  }
  if (p == "rev") {
    for (auto d : n.attrs.ints("dimensions"))
      if (axis_of(d, r) == int64_t(r - 1)) return Move::none;
    return Move::copy;
  }
  return Move::none;
}

// n's attrs for the chain run on row numbers, where the last dimension has size 1.
Attrs row_attrs(const Node& n) {
  Attrs a = n.attrs;
  const std::string& p = n.prim->name;
  const char* key = p == "slice" ? "limit_indices" : p == "reshape" ? "new_sizes" : nullptr;
  if (key) {
    auto v = a.ints(key);
    v.back() = 1;
    a.set(key, v);
  }
  return a;
}

// Whether a transpose leaves every element where it was: its permutation, with the
// axes of size 1 dropped, is the identity (Swin's window partition of a 7 x 7 map into
// one window swaps an axis of 7 with one of 1). Such a transpose is a reshape.
bool keeps_layout(const Node& n, const Graph& g) {
  if (n.prim->name != "transpose" || n.in.size() != 1 || n.out.size() != 1) return false;
  const Shape& s = g.aval(n.in[0]).shape;
  int64_t last = -1;
  for (int64_t p : n.attrs.ints("permutation")) {
    if (s[size_t(p)] == 1) continue;
    if (p < last) return false;
    last = p;
  }
  return true;
}

}  // namespace

Graph fuse_copies(const Graph& in_graph, CopyFusionStats* stats) {
  // Layout-keeping transposes first become reshapes (no copy, the input's buffer shared;
  // a copy of 2.4 MB per call at Swin-T's last stage), and as reshapes join the chains.
  std::vector<int> relaid;
  for (int i = 0; i < int(in_graph.nodes.size()); ++i)
    if (keeps_layout(in_graph.nodes[i], in_graph)) relaid.push_back(i);
  Graph canon;
  if (!relaid.empty()) {
    canon = in_graph;
    for (int i : relaid) {
      Node& n = canon.nodes[i];
      n.prim = &lookup_prim("reshape");
      n.attrs = Attrs{{"new_sizes", canon.aval(n.out[0]).shape}};
    }
  }
  const Graph& g = relaid.empty() ? in_graph : canon;
  const int N = int(g.nodes.size()), V = g.num_values();
  std::vector<Move> move(N, Move::none);
  std::vector<int> root(V);
  for (int v = 0; v < V; ++v) root[v] = v;
  const auto readers = g.readers();
  // root[v]: the array a chain of row moves computes v from (v itself when none does).
  for (int i = 0; i < N; ++i) {
    const Node& n = g.nodes[i];
    Move m = row_move(n, g);
    if (m == Move::none) continue;
    const int r = root[n.in[0]];
    for (int v : n.in) if (root[v] != r) m = Move::none;
    if (m == Move::none) continue;
    move[i] = m;
    root[n.out[0]] = r;
  }
  const auto is_out = g.output_mask();

  Graph out = g;
  CopyFusionStats st;
  for (int i = 0; i < N; ++i) {
    if (move[i] == Move::none) continue;
    const int v = g.nodes[i].out[0], r = root[v];
    bool end = is_out[v];
    for (int c : readers[v]) end |= move[c] == Move::none || root[g.nodes[c].out[0]] != r;
    if (!end) continue;
    const AVal& va = g.aval(v);
    if (va.shape.back() * int64_t(itemsize(va.dtype)) < kMinRowBytes) continue;
    Shape rs = g.aval(r).shape;
    rs.back() = 1;
    if (numel(rs) > std::numeric_limits<int32_t>::max()) continue;
    // The chain: v's ancestors back to r through row moves, in graph order.
    std::vector<int> chain, todo{i};
    std::vector<char> seen(N, 0);
    while (!todo.empty()) {
      const int j = todo.back();
      todo.pop_back();
      if (seen[j]) continue;
      seen[j] = 1;
      chain.push_back(j);
      for (int u : g.nodes[j].in)
        if (u != r) todo.push_back(g.producer[u]);
    }
    const int copies = int(std::count_if(chain.begin(), chain.end(), [&](int j) { return move[j] == Move::copy; }));
    if (copies < 2) continue;
    std::sort(chain.begin(), chain.end());
    // Run the chain on the source's row numbers.
    std::unordered_map<int, Array> val;
    Array rows0(DType::i32, rs);
    int32_t* p0 = rows0.data<int32_t>();
    for (int64_t k = 0; k < rows0.size(); ++k) p0[k] = int32_t(k);
    val[r] = rows0;
    for (int j : chain) {
      const Node& n = g.nodes[j];
      std::vector<Array> in;
      for (int u : n.in) in.push_back(val.at(u));
      val[n.out[0]] = apply_prim(*n.prim, in, row_attrs(n))[0];
    }
    const Array& got = val.at(v);
    Array rows(DType::i32, Shape{got.size()});
    std::memcpy(rows.raw(), got.raw(), size_t(got.size()) * sizeof(int32_t));
    const int t = out.add_const(rows);
    Node& m = out.nodes[i];
    m.prim = &lookup_prim("gather_rows");
    m.in = {r, t};
    m.attrs = Attrs{{"shape", va.shape}};
    ++st.chains;
  }
  if (st.chains) out.dce();  // the chains' nodes nothing else reads
  if (stats && (st.chains || !relaid.empty())) {  // a count for the stats only: not on jit's path
    auto copies = [](const Graph& x) {
      int c = 0;
      for (auto& n : x.nodes) c += row_move(n, x) == Move::copy;
      return c;
    };
    st.copies_removed = copies(in_graph) - copies(out);
  }
  if (stats) *stats = st;
  return out;
}

}  // namespace podlet
