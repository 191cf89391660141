// Small nodes sink to their first consumer (see fusion_order.h).
#include "podlet/ir/fusion_order.h"
#include <algorithm>
#include <tuple>
#include <vector>
#include "podlet/ir/fusion.h"
#include "podlet/prim.h"

namespace podlet {

Graph sink_small_nodes(const Graph& g) {
  const int N = int(g.nodes.size());
  auto small = [&](const Node& n) {
    if (n.out.empty() || !(n.prim->name == "reshape" || fusible_elementwise(n, g))) return false;
    for (int v : n.in) if (g.aval(v).size() > kSmallElements) return false;
    for (int v : n.out) if (g.aval(v).size() > kSmallElements) return false;
    return true;
  };
  const auto users = g.readers();
  // Sort key: (the position it runs before, 0 = sunk / 1 = in place, original index).
  // A sunk node runs just before its earliest consumer; sunk nodes bound for the same
  // consumer keep their original (topological) order.
  std::vector<std::tuple<int, int, int>> key(N);
  bool moved = false;
  for (int i = N - 1; i >= 0; --i) {
    key[i] = {i, 1, i};
    if (!small(g.nodes[i])) continue;
    int target = N;  // a graph output nobody reads runs last
    for (int v : g.nodes[i].out)
      for (int u : users[v]) target = std::min(target, std::get<0>(key[u]));
    if (target > i + 1) { key[i] = {target, 0, i}; moved = true; }
  }
  if (!moved) return g;
  std::vector<int> order(N);
  for (int i = 0; i < N; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](int a, int b) { return key[a] < key[b]; });
  Graph out = g;
  for (int k = 0; k < N; ++k) out.nodes[k] = g.nodes[order[k]];
  for (int k = 0; k < N; ++k) for (int v : out.nodes[k].out) out.producer[v] = k;
  return out;
}

}  // namespace podlet
