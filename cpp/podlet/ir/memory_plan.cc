// The memory planner (see memory_plan.h).
#include "podlet/ir/memory_plan.h"
#include <algorithm>
#include "podlet/array.h"

namespace podlet {

MemoryPlan plan_memory(const Graph& g, int64_t min_bytes) {
  const int N = int(g.nodes.size());
  const int V = g.num_values();
  MemoryPlan plan;
  plan.offset.assign(V, -1);
  plan.end.assign(V, -1);
  std::vector<int> last(V, -1);
  std::vector<char> escapes(V, 0);
  for (int i = 0; i < N; ++i) for (int v : g.nodes[i].in) last[v] = i;
  for (int v : g.outputs) { last[v] = N; escapes[v] = 1; }
  // Views: what a kernel_allocates node reads lives as long as what it returns.
  for (int i = N - 1; i >= 0; --i) {
    const Node& n = g.nodes[i];
    if (!n.prim->kernel_allocates) continue;
    for (int o : n.out)
      for (int v : n.in) {
        last[v] = std::max(last[v], last[o]);
        escapes[v] |= escapes[o];
      }
  }
  struct Item { int64_t bytes; int begin, end, value; };
  std::vector<Item> items;
  for (int i = 0; i < N; ++i) {
    const Node& n = g.nodes[i];
    if (n.prim->kernel_allocates) continue;
    for (int v : n.out) {
      const int64_t b = int64_t(g.aval(v).size()) * int64_t(itemsize(g.aval(v).dtype));
      if (escapes[v] || b < min_bytes) continue;
      items.push_back(Item{(b + int64_t(kAlign) - 1) / int64_t(kAlign) * int64_t(kAlign), i, std::max(i, last[v]), v});
    }
  }
  // Largest first (ties: earliest first, so the plan does not depend on sort stability).
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.begin != b.begin ? a.begin < b.begin : a.value < b.value;
  });
  std::vector<const Item*> placed;
  std::vector<int64_t> off_of(V, -1);
  std::vector<std::pair<int64_t, int64_t>> busy;  // [offset, end) of placed items alive at the same time
  for (const Item& it : items) {
    busy.clear();
    for (const Item* p : placed)
      if (p->begin <= it.end && it.begin <= p->end) busy.emplace_back(off_of[p->value], off_of[p->value] + p->bytes);
    std::sort(busy.begin(), busy.end());
    int64_t at = 0;
    for (auto [b, e] : busy) {
      if (b - at >= it.bytes) break;
      at = std::max(at, e);
    }
    off_of[it.value] = at;
    plan.offset[it.value] = at;
    plan.end[it.value] = it.end;
    plan.arena_bytes = std::max(plan.arena_bytes, at + it.bytes);
    plan.values += 1;
    plan.sum_bytes += it.bytes;
    placed.push_back(&it);
  }
  return plan;
}

}  // namespace podlet
