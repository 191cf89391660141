// The rematerialisation pass (see remat.h).
#include "podlet/ir/remat.h"
#include <algorithm>
#include <map>
#include <set>
#include "podlet/ir/fusion.h"

namespace podlet {
namespace {

constexpr int kMaxCone = 24;

struct Decision {
  int value, at;            // the value, and the node its clone is placed before
  std::vector<int> cone;    // its elementwise ancestors (node indices, trace order), itself last
  std::vector<int> far;     // the nodes that read the clone instead
};

}  // namespace

Graph rematerialize(const Graph& g, RematStats* stats, int64_t min_elements) {
  const int N = int(g.nodes.size());
  const int V = g.num_values();
  std::vector<char> cheap(N, 0), heavy_kind(N, 0);
  std::vector<int64_t> out_elems(N, 0);
  for (int i = 0; i < N; ++i) {
    const Node& n = g.nodes[i];
    cheap[i] = fusible_elementwise(n, g);
    const std::string& p = n.prim->name;
    heavy_kind[i] = !cheap[i] && p != "broadcast_in_dim" && p != "reshape";
    for (int v : n.out) out_elems[i] = std::max(out_elems[i], g.aval(v).size());
  }
  std::vector<std::vector<int>> users(V);
  std::vector<int> last(V, -1);
  for (int i = 0; i < N; ++i)
    for (int v : g.nodes[i].in) {
      if (users[v].empty() || users[v].back() != i) users[v].push_back(i);
      last[v] = i;
    }
  std::vector<char> pinned(V, 0);  // alive for the whole run: inputs, constants, outputs
  for (int v : g.inputs) pinned[v] = 1;
  for (auto& c : g.consts) pinned[c.first] = 1;
  for (int v : g.outputs) { pinned[v] = 1; last[v] = N; }
  auto bytes = [&](int v) { return double(g.aval(v).size()) * double(itemsize(g.aval(v).dtype)); };

  // Whether u is kept past the heavy node h anyway: read at or after `at`, or by a node
  // after h from which no heavy node separates `at` (the same fused pass). Keeping it
  // until the clone's readers then costs nothing: Flax's exact GELU keeps x for its VJP,
  // so x * c (the erf's argument) is recomputed there instead of written and read back.
  auto alive_past = [&](int u, int h, int at) {
    if (last[u] >= at) return true;
    if (last[u] <= h) return false;
    for (int k = last[u]; k < at; ++k)
      if (heavy_kind[k]) return false;
    return true;
  };

  RematStats st;
  std::vector<Decision> decisions;
  for (int i = 0; i < N; ++i) {
    if (!cheap[i]) continue;
    const int v = g.nodes[i].out[0];
    const int64_t E = g.aval(v).size();
    if (E < min_elements || pinned[v] || users[v].empty()) continue;
    // The first heavy node after v: readers past it are far.
    int h = -1;
    for (int k = i + 1; k <= users[v].back() && h < 0; ++k)
      if (heavy_kind[k] && out_elems[k] * 16 >= E) h = k;
    if (h < 0) continue;
    std::vector<int> near, far;
    for (int u : users[v]) (u > h ? far : near).push_back(u);
    if (far.empty() || !std::all_of(far.begin(), far.end(), [&](int u) { return bool(cheap[u]); })) continue;
    const int at = far.front();

    // The cone: elementwise ancestors down to values that exist at `at` anyway (or
    // cost less to keep than v).
    std::set<int> cone_nodes, leaves;
    bool ok = true;
    std::vector<int> stack{i};
    while (!stack.empty() && ok) {
      const int k = stack.back();
      stack.pop_back();
      if (!cone_nodes.insert(k).second) continue;
      if (int(cone_nodes.size()) > kMaxCone) { ok = false; break; }
      for (int u : g.nodes[k].in) {
        const int p = g.producer[u];
        if (pinned[u] || p < 0 || !cheap[p] || alive_past(u, h, at)) leaves.insert(u);
        else stack.push_back(p);
      }
    }
    if (!ok) continue;
    double extra = 0;
    for (int u : leaves) {
      if (pinned[u] || alive_past(u, h, at)) continue;
      const int p = g.producer[u];
      if (p >= 0 && g.nodes[p].prim->name == "broadcast_in_dim") {  // fusion reads its operand
        const int w = g.nodes[p].in[0];
        if (!pinned[w] && last[w] < at) extra += bytes(w);
      } else {
        extra += bytes(u);
      }
    }
    if (extra >= bytes(v)) continue;

    const int until = far.back();
    for (int u : leaves) {
      last[u] = std::max(last[u], until);
      const int p = g.producer[u];
      if (p >= 0 && g.nodes[p].prim->name == "broadcast_in_dim")
        last[g.nodes[p].in[0]] = std::max(last[g.nodes[p].in[0]], until);
    }
    last[v] = near.empty() ? i : near.back();
    decisions.push_back(Decision{v, at, std::vector<int>(cone_nodes.begin(), cone_nodes.end()), far});
    st.values += 1;
    st.bytes += bytes(v);
  }

  // ---- rebuild: clones are placed before their first far reader ----
  Graph out;
  out.avals = g.avals;
  out.inputs = g.inputs;
  out.outputs = g.outputs;
  out.consts = g.consts;
  std::vector<Node> nodes = g.nodes;
  std::map<int, std::vector<Node>> before;  // node index -> clones placed before it
  // The latest clone of each value, and where: reusable by a later placement when no
  // heavy node runs between the two (they end up in the same fused pass).
  std::map<int, std::pair<int, int>> clone_of;
  auto reusable = [&](int v, int at) -> int {
    auto it = clone_of.find(v);
    if (it == clone_of.end() || it->second.second > at) return -1;
    for (int k = it->second.second; k < at; ++k)
      if (heavy_kind[k]) return -1;
    return it->second.first;
  };
  // Placements in program order: a clone is reusable only at or after its own place, so
  // a value whose far reader comes first must be cloned first. In the decisions' order
  // (that of the forward values) the tanh-GELU's VJP got its tanh cloned twice, once
  // for the tanh's own readers and once inside the cone of the cdf that is read earlier:
  // 39 instructions with two tanh in the fused VJP instead of 32 with one (7.7 -> 5.1 ms
  // at ViT-Tiny's [32, 197, 768]).
  std::stable_sort(decisions.begin(), decisions.end(), [](const Decision& a, const Decision& b) { return a.at < b.at; });
  for (const Decision& d : decisions) {
    for (int k : d.cone) {
      const int ov = g.nodes[k].out[0];
      if (reusable(ov, d.at) >= 0) continue;
      Node c = g.nodes[k];
      for (int& u : c.in)
        if (int r = reusable(u, d.at); r >= 0) u = r;
      out.avals.push_back(g.aval(ov));
      c.out = {int(out.avals.size()) - 1};
      clone_of[ov] = {c.out[0], d.at};
      before[d.at].push_back(std::move(c));
      st.nodes_cloned += 1;
    }
    const int cv = clone_of.at(d.value).first;
    for (int j : d.far)
      for (int& u : nodes[j].in)
        if (u == d.value) u = cv;
  }
  for (int i = 0; i < N; ++i) {
    if (auto it = before.find(i); it != before.end())
      for (Node& c : it->second) out.nodes.push_back(std::move(c));
    out.nodes.push_back(std::move(nodes[i]));
  }
  out.producer.assign(out.avals.size(), -1);
  out.dce();  // forward values read only by far readers
  if (stats) *stats = st;
  return out;
}

}  // namespace podlet
