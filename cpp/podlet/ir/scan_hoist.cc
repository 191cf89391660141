#include "podlet/ir/scan_hoist.h"
#include <map>
#include <mutex>
#include <tuple>
#include "podlet/ir/subgraph.h"

namespace podlet {

namespace {

constexpr double kMaxHoistedBytes = 256.0 * 1024 * 1024;

bool is_contraction(const Node& n) {
  const auto& p = n.prim->name;
  return p == "dot_general" || p == "conv_general_dilated";
}

// A node whose batched form is the same computation for every row: a vmap rule that is
// not a collective (those talk to other devices) and no sub-graphs of its own.
bool batchable(const Node& n) {
  return n.prim->batch && !n.prim->batch_always && subgraphs_of(n.attrs).empty();
}

}  // namespace

ScanPlan hoist_scan_inputs(const Graph& b, int64_t nc, int64_t nh, int64_t length) {
  ScanPlan none;
  const int64_t nin = int64_t(b.inputs.size());
  if (length < 2 || nin == nc + nh) return none;
  // 0: reads constants only; 1: reads x_t (and constants), not the carry; 2: the rest.
  std::vector<int> cls(b.num_values(), 0);
  for (int64_t k = nc; k < nc + nh; ++k) cls[b.inputs[k]] = 2;
  for (int64_t k = nc + nh; k < nin; ++k) cls[b.inputs[k]] = 1;
  for (auto& n : b.nodes) {
    int c = 0;
    for (int v : n.in) c = std::max(c, cls[v]);
    if (!batchable(n)) c = 2;
    for (int v : n.out) cls[v] = c;
  }
  // Hoisted: contractions of class 1 and everything they read that is not of class 2.
  std::vector<char> hoist(b.nodes.size(), 0), want(b.num_values(), 0);
  bool any = false;
  for (int i = int(b.nodes.size()) - 1; i >= 0; --i) {
    const Node& n = b.nodes[i];
    if (n.out.empty()) continue;
    bool h = false;
    if (cls[n.out[0]] == 1 && is_contraction(n)) h = any = true;
    for (int v : n.out) h |= bool(want[v]);
    if (!h || cls[n.out[0]] == 2) continue;
    hoist[i] = 1;
    for (int v : n.in) want[v] = 1;
  }
  if (!any) return none;
  // Exported: class-1 values of hoisted nodes that a kept node or an output reads.
  std::vector<char> read_outside(b.num_values(), 0);
  for (size_t i = 0; i < b.nodes.size(); ++i)
    if (!hoist[i] || cls[b.nodes[i].out[0]] == 0)
      for (int v : b.nodes[i].in) read_outside[v] = 1;
  for (int v : b.outputs) read_outside[v] = 1;
  std::vector<int> exported;
  double stacked_bytes = 0;
  for (size_t i = 0; i < b.nodes.size(); ++i)
    if (hoist[i] && cls[b.nodes[i].out[0]] == 1)
      for (int v : b.nodes[i].out)
        if (read_outside[v]) {
          exported.push_back(v);
          stacked_bytes += double(b.aval(v).nbytes()) * double(length);
        }
  // The stacked results live through the whole loop: a very long scan keeps its
  // per-iteration GEMMs rather than hold them all at once.
  if (stacked_bytes > kMaxHoistedBytes) return none;

  // pre: one iteration's hoisted work, then batched over the scanned axis.
  Graph p;
  std::vector<int> m(b.num_values(), -1);
  std::vector<int> in_bd;
  for (int64_t k = 0; k < nin; ++k) {
    if (k >= nc && k < nc + nh) continue;
    m[b.inputs[k]] = p.add_input(b.aval(b.inputs[k]));
    in_bd.push_back(k < nc ? -1 : 0);
  }
  for (auto& [id, arr] : b.consts) m[id] = p.add_const(arr);
  for (size_t i = 0; i < b.nodes.size(); ++i) {
    if (!hoist[i]) continue;
    const Node& n = b.nodes[i];
    std::vector<int> in;
    for (int v : n.in) in.push_back(m[v]);
    auto out = p.add(*n.prim, in, n.attrs, n.where);
    for (size_t k = 0; k < out.size() && k < n.out.size(); ++k) m[n.out[k]] = out[k];
  }
  for (int v : exported) p.outputs.push_back(m[v]);
  p.dce();
  auto pre = std::make_shared<Graph>(batch_graph_materialized(p, in_bd, length, ""));
  pre->dce();

  // body: the rest, reading the exported values as extra xs.
  auto nb = std::make_shared<Graph>();
  std::fill(m.begin(), m.end(), -1);
  for (int v : b.inputs) m[v] = nb->add_input(b.aval(v));
  for (int v : exported) m[v] = nb->add_input(b.aval(v));
  for (auto& [id, arr] : b.consts) m[id] = nb->add_const(arr);
  for (size_t i = 0; i < b.nodes.size(); ++i) {
    const Node& n = b.nodes[i];
    if (hoist[i] && cls[n.out[0]] == 1) continue;
    std::vector<int> in;
    for (int v : n.in) in.push_back(m[v]);
    auto out = nb->add(*n.prim, in, n.attrs, n.where);
    for (size_t k = 0; k < out.size() && k < n.out.size(); ++k) m[n.out[k]] = out[k];
  }
  for (int v : b.outputs) nb->outputs.push_back(m[v]);
  nb->dce();
  return ScanPlan{pre, nb};
}

namespace {
std::mutex mu;
struct Entry { std::weak_ptr<const Graph> owner; ScanPlan plan; };
std::map<std::tuple<const Graph*, int64_t, int64_t, int64_t>, Entry> cache;
}  // namespace

void clear_scan_plans() {
  std::lock_guard<std::mutex> lk(mu);
  cache.clear();
}

// Keyed like executable_subgraph: by the body's address, checked against its owner.
ScanPlan scan_plan(const GraphRef& body, int64_t nc, int64_t nh, int64_t length) {
  const auto key = std::make_tuple(body.get(), nc, nh, length);
  {
    std::lock_guard<std::mutex> lk(mu);
    auto it = cache.find(key);
    if (it != cache.end() && it->second.owner.lock() == body) return it->second.plan;
  }
  ScanPlan s = hoist_scan_inputs(*body, nc, nh, length);
  ScanPlan plan;
  if (s.pre) plan = ScanPlan{executable_subgraph(s.pre), executable_subgraph(s.body)};
  else plan.body = executable_subgraph(body);
  std::lock_guard<std::mutex> lk(mu);
  for (auto i = cache.begin(); i != cache.end();) i = i->second.owner.expired() ? cache.erase(i) : std::next(i);
  cache[key] = Entry{body, plan};
  return plan;
}

}  // namespace podlet
