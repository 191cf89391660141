// The optimizer fusion pass (see optim_fusion.h).
//
// Both rewrites move a computation to the adamw_update node's place in the (topological)
// node order. That is legal because every value the moved ops read exists there already
// (the param, an output of the node itself, constants, and an `ema` operand that is
// checked to be defined before the node), and the values they define are only read after
// the last folded node, which comes after the adamw_update node.
#include "podlet/ir/optim_fusion.h"
#include <cmath>
#include <cstring>
#include <unordered_map>

namespace podlet {
namespace {

struct Uses {
  std::vector<std::vector<int>> users;  // value id -> reading node indices (one per operand slot)
  std::vector<char> is_out;             // value id -> is a graph output
  explicit Uses(const Graph& g) : users(g.readers()), is_out(g.output_mask()) {}
  // The only node reading v (once), or -1.
  int sole_user(int v) const { return !is_out[v] && users[v].size() == 1 ? users[v][0] : -1; }
};

bool is_prim(const Node& n, const char* name) { return n.prim->name == name; }

bool is_adamw(const Node& n) { return is_prim(n, "adamw_update") && !n.attrs.has("ema_c_old"); }

bool applies(const Node& n) { return n.attrs.i("apply", 1) != 0; }

// The fused updates whose kernels also apply the update (param + u, apply=1): AdamW (before
// an EMA is attached), SGD with momentum and Lion (prims/optim_sgd_lion.cc).
bool takes_apply(const Node& n) {
  return is_adamw(n) || is_prim(n, "sgd_momentum_update") || is_prim(n, "lion_update");
}

// The other operand of a binary node reading v (nullopt-like -1 if v is not an operand).
int other_operand(const Node& n, int v) {
  if (n.in.size() != 2) return -1;
  if (n.in[0] == v) return n.in[1];
  if (n.in[1] == v) return n.in[0];
  return -1;
}

bool uniform(const Array& a) {
  const size_t isz = itemsize(a.dtype());
  const char* p = static_cast<const char*>(a.raw());
  for (int64_t i = 1; i < a.size(); ++i)
    if (std::memcmp(p, p + i * isz, isz) != 0) return false;
  return true;
}

// Whether v is a scalar constant of dtype d: a constant whose elements all hold one value
// (a 0-d constant, as a Python float becomes), or a broadcast_in_dim of one; not NaN.
// Sets *x.
bool scalar_const(const Graph& g, const std::unordered_map<int, const Array*>& consts, int v, DType d,
                  double* x) {
  if (g.aval(v).dtype != d) return false;
  const int p = g.producer[v];
  if (p >= 0) {
    const Node& b = g.nodes[p];
    return is_prim(b, "broadcast_in_dim") && b.in.size() == 1 && scalar_const(g, consts, b.in[0], d, x);
  }
  auto it = consts.find(v);
  if (it == consts.end() || it->second->size() < 1 || !uniform(*it->second)) return false;
  *x = get_as_double(*it->second, 0);
  return !std::isnan(*x);  // a NaN coefficient: which NaN a product returns would depend on operand order
}

// Drops the flagged nodes and recomputes producers (value ids unchanged), then removes
// constants nobody reads any more.
void compact(Graph& g, const std::vector<char>& drop) {
  std::vector<Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!drop[i]) kept.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(kept);
  std::fill(g.producer.begin(), g.producer.end(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i) for (int v : g.nodes[i].out) g.producer[v] = int(i);
  g.dce();
}

// Rewrite 1: adamw_update / sgd_momentum_update / lion_update (apply=0) followed by
// add(param, update) -> apply=1.
int fold_apply(Graph& g) {
  const Uses uses(g);
  std::vector<char> drop(g.nodes.size(), 0);
  int folded = 0;
  for (Node& n : g.nodes) {
    if (!takes_apply(n) || applies(n)) continue;
    const int u = n.out[0];
    const int j = uses.sole_user(u);
    if (j < 0 || drop[j]) continue;
    const Node& a = g.nodes[j];
    // add(param, u) only, the operand order of apply_updates and of the fused kernel (it
    // decides which NaN comes out when both are NaN).
    if (!is_prim(a, "add") || a.in[0] != n.in[0] || a.in[1] != u || !(g.aval(a.out[0]) == g.aval(n.in[0]))) continue;
    n.attrs.set("apply", int64_t(1));
    n.out[0] = a.out[0];
    drop[j] = 1;
    ++folded;
  }
  if (folded) compact(g, drop);
  return folded;
}

// Rewrite 2: add(mul(C1, ema), mul(C2, p_new)) after adamw_update(apply=1) -> its EMA output.
int fold_ema(Graph& g) {
  std::unordered_map<int, const Array*> consts;
  for (auto& [id, arr] : g.consts) consts[id] = &arr;
  const Uses uses(g);
  std::vector<char> drop(g.nodes.size(), 0);
  int folded = 0;
  for (int i = 0; i < int(g.nodes.size()); ++i) {
    Node& n = g.nodes[i];
    if (!is_adamw(n) || !applies(n)) continue;
    const int pn = n.out[0];
    const AVal& pa = g.aval(pn);
    for (int j : uses.users[pn]) {  // j: mul(C2, p_new)
      const Node& mn = g.nodes[j];
      double c_new = 0, c_old = 0;
      if (drop[j] || !is_prim(mn, "mul") || !(g.aval(mn.out[0]) == pa)) continue;
      const int c2 = other_operand(mn, pn);
      if (c2 < 0 || c2 == pn || !scalar_const(g, consts, c2, pa.dtype, &c_new)) continue;
      const int k = uses.sole_user(mn.out[0]);  // k: the add
      if (k < 0 || drop[k] || !is_prim(g.nodes[k], "add")) continue;
      const Node& ad = g.nodes[k];
      const int m1 = other_operand(ad, mn.out[0]);
      if (m1 < 0 || m1 == mn.out[0] || !(g.aval(ad.out[0]) == pa)) continue;
      const int l = g.producer[m1];  // l: mul(C1, ema)
      if (l < 0 || drop[l] || uses.sole_user(m1) != k || !is_prim(g.nodes[l], "mul")) continue;
      const Node& mo = g.nodes[l];
      if (!(g.aval(mo.out[0]) == pa)) continue;
      int ema = -1;
      for (int s = 0; s < 2 && ema < 0; ++s) {
        const int e = mo.in[s], c1 = mo.in[1 - s];
        if (g.aval(e) == pa && scalar_const(g, consts, c1, pa.dtype, &c_old)) ema = e;
      }
      // The EMA operand must exist where the adamw_update node runs (and must not be
      // its own output: p_new * C1 + p_new * C2 is not an EMA of anything).
      if (ema < 0 || ema == pn || g.producer[ema] >= i) continue;
      n.in.push_back(ema);
      n.out.push_back(ad.out[0]);
      n.attrs.set("ema_c_old", c_old);
      n.attrs.set("ema_c_new", c_new);
      if (ad.in[0] == mn.out[0]) n.attrs.set("ema_new_first", int64_t(1));
      drop[j] = drop[k] = drop[l] = 1;
      ++folded;
      break;
    }
  }
  if (folded) compact(g, drop);
  return folded;
}

// Rewrite 3: adamw_update reading convert_element_type(bf16 grad -> param dtype) reads
// the bf16 grad (the kernel widens it exactly). The convert goes when nothing else reads
// it; when something does (a global norm), elementwise fusion folds it into that pass.
int fold_grad_convert(Graph& g) {
  int folded = 0;
  for (Node& n : g.nodes) {
    if (!is_prim(n, "adamw_update")) continue;
    const int p = g.producer[n.in[1]];
    if (p < 0 || !is_prim(g.nodes[p], "convert_element_type")) continue;
    const int u = g.nodes[p].in[0];
    const DType pd = g.aval(n.in[0]).dtype;
    if (g.aval(u).dtype != DType::bf16 || pd == DType::bf16 || g.aval(n.in[1]).dtype != pd) continue;
    n.in[1] = u;
    ++folded;
  }
  if (folded) g.dce();
  return folded;
}

}  // namespace

Graph fuse_optimizer(const Graph& g, OptimFusionStats* stats) {
  Graph out = g;
  OptimFusionStats st;
  st.grads_widened = fold_grad_convert(out);
  st.applies_folded = fold_apply(out);
  st.emas_folded = fold_ema(out);
  if (stats) *stats = st;
  return out;
}

}  // namespace podlet
