#include "podlet/ir/subgraph.h"
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include "podlet/ir/fusion.h"

namespace podlet {

static bool fusion_on() {
  const char* e = std::getenv("PODLET_FUSION");
  if (!e) return true;
  const std::string v(e);
  return !(v == "0" || v == "false" || v == "off" || v == "no");
}

static std::mutex g_mu;
static std::map<const Graph*, std::pair<std::weak_ptr<const Graph>, std::shared_ptr<const Graph>>> g_cache;

std::vector<GraphRef> subgraphs_of(const Attrs& a) {
  std::vector<GraphRef> r;
  for (auto& [k, v] : a.items()) {
    (void)k;
    if (auto* g = std::get_if<GraphRef>(&v)) r.push_back(*g);
    if (auto* gs = std::get_if<std::vector<GraphRef>>(&v)) r.insert(r.end(), gs->begin(), gs->end());
  }
  return r;
}

void clear_subgraph_cache() {
  std::lock_guard<std::mutex> lk(g_mu);
  g_cache.clear();
}

// Keyed by the sub-graph's address and checked against its owner, so a freed graph's
// entry is never reused for another; expired entries go as new ones arrive.
std::shared_ptr<const Graph> executable_subgraph(const GraphRef& g) {
  auto& cache = g_cache;
  if (!fusion_on()) return g;
  std::lock_guard<std::mutex> lk(g_mu);
  auto it = cache.find(g.get());
  if (it != cache.end()) {
    auto alive = it->second.first.lock();
    if (alive && alive == g) return it->second.second;
  }
  for (auto i = cache.begin(); i != cache.end();) i = i->second.first.expired() ? cache.erase(i) : std::next(i);
  auto ex = std::make_shared<const Graph>(fuse_elementwise(*g));
  cache[g.get()] = {g, ex};
  return ex;
}

}  // namespace podlet
