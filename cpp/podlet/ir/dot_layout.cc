// The transposed-product pass (see dot_layout.h).
#include "podlet/ir/dot_layout.h"
#include <optional>
#include "podlet/prim.h"

namespace podlet {

namespace {

std::vector<int64_t> norm_axes(const std::vector<int64_t>& v, int64_t rank) {
  std::vector<int64_t> r;
  for (auto x : v) r.push_back(x < 0 ? x + rank : x);
  return r;
}

// The attrs of product n reading transpose(x, perm) as operand `side` (0 lhs, 1 rhs)
// rewritten to read x itself: its dims mapped through perm. Empty when that would change
// the order of the operand's free dims (and so of the output), or when the group of dims
// holding the operand's last dim (the one the GEMM's packers copy contiguously: K for
// x @ W, N for a weight gradient's rhs) would not be x's last dims in order: read through
// strides there, the packers gather element by element (an attention output read as
// [b, h, q, d] by a Dense layer over (h, d) ran at 70% of the peak instead of 88%).
std::optional<Attrs> read_through(const Attrs& a, int side, const std::vector<int64_t>& perm) {
  const int64_t r = int64_t(perm.size());
  if (r == 0 || perm.back() != r - 1) return std::nullopt;
  const char* ck = side ? "rhs_contracting" : "lhs_contracting";
  const char* bk = side ? "rhs_batch" : "lhs_batch";
  const auto c = norm_axes(a.ints(ck, {}), r), b = norm_axes(a.ints(bk, {}), r);
  std::vector<int> group(r, 0);  // 0 free, 1 contracting, 2 batch
  for (auto x : c) group[x] = 1;
  for (auto x : b) group[x] = 2;
  int64_t last = -1;
  for (int64_t x = 0; x < r; ++x)
    if (group[x] == 0) {
      if (perm[x] < last) return std::nullopt;
      last = perm[x];
    }
  // The last dim's group, in the order the GEMM enumerates it (contracting: as listed;
  // free and batch: increasing), must map onto x's trailing dims.
  std::vector<int64_t> inner;
  if (group[r - 1] == 1) inner = c;
  else if (group[r - 1] == 2) inner = b;
  else
    for (int64_t x = 0; x < r; ++x)
      if (group[x] == 0) inner.push_back(x);
  for (size_t k = 0; k < inner.size(); ++k)
    if (perm[inner[k]] != r - int64_t(inner.size()) + int64_t(k)) return std::nullopt;
  auto map = [&](const std::vector<int64_t>& v) {
    std::vector<int64_t> m;
    for (auto x : v) m.push_back(perm[x]);
    return m;
  };
  Attrs n = a;
  n.set(ck, map(c));
  n.set(bk, map(b));
  return n;
}

}  // namespace

Graph fold_dot_transposes(const Graph& g, int* folded) {
  const auto readers = g.readers();
  const auto is_out = g.output_mask();  // read outside as well
  Graph out = g;
  // Write side: the transpose (node i) is its product's only reader. The product moves
  // to the transpose's place (its inputs exist there) and writes the transpose's output
  // value; the old node is left without readers.
  auto write_side = [&](int i) {
    const Node& t = g.nodes[i];
    const int v = t.in[0], p = g.producer[v];
    if (p < 0 || readers[v].size() != 1 || is_out[v]) return false;
    const Node& d = out.nodes[p];  // (out: a product may read in place already, below)
    if (d.prim->name != "dot_general" || !d.attrs.ints("out_perm", {}).empty() || d.out.size() != 1) return false;
    Attrs a = d.attrs;
    a.set("out_perm", t.attrs.ints("permutation"));
    std::vector<AVal> in;
    for (int u : d.in) in.push_back(g.aval(u));
    try {
      if (d.prim->shape(in, a)[0] != g.aval(t.out[0])) return false;
    } catch (const ShapeError&) {
      return false;  // a layout the GEMM cannot store row by row
    }
    Node& m = out.nodes[i];
    m.prim = d.prim;
    m.in = d.in;
    m.attrs = a;
    m.where = d.where;
    return true;
  };
  // Read side: every reader of the transpose a product that can read its input in place.
  auto read_side = [&](int i) {
    const Node& t = g.nodes[i];
    const int u = t.out[0];
    if (readers[u].empty() || is_out[u]) return false;
    const auto perm = t.attrs.ints("permutation");
    std::vector<std::pair<int, Attrs>> rw;
    for (int j : readers[u]) {
      if (!rw.empty() && rw.back().first == j) continue;  // read twice (x^T x): both sides below
      const Node& d = out.nodes[j];
      if (d.prim->name != "dot_general" || d.in.size() != 2) return false;
      std::optional<Attrs> a = d.attrs;
      std::vector<int> in = d.in;
      for (int side = 0; side < 2 && a; ++side)
        if (d.in[side] == u) a = read_through(*a, side, perm), in[side] = t.in[0];
      if (!a) return false;
      std::vector<AVal> av;
      for (int x : in) av.push_back(g.aval(x));
      try {
        if (d.prim->shape(av, *a)[0] != g.aval(d.out[0])) return false;
      } catch (const ShapeError&) {
        return false;
      }
      rw.emplace_back(j, *a);
    }
    for (auto& [j, a] : rw) {
      Node& d = out.nodes[j];
      for (int& x : d.in)
        if (x == u) x = t.in[0];
      d.attrs = a;
    }
    return true;
  };
  int count = 0;
  for (int i = 0; i < int(g.nodes.size()); ++i) {
    const Node& t = g.nodes[i];
    if (t.prim->name == "transpose" && t.in.size() == 1 && (write_side(i) || read_side(i))) ++count;
  }
  if (count) out.dce();
  if (folded) *folded = count;
  return out;
}

}  // namespace podlet
