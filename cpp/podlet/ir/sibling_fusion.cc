// Sibling fusion of sum passes (see sibling_fusion.h).
#include "podlet/ir/sibling_fusion.h"
#include <algorithm>
#include <map>
#include <vector>
#include "podlet/ir/fusion.h"
#include "podlet/prim.h"

namespace podlet {
namespace {

using namespace fused;

// A fused_elementwise node's program, decoded from its attrs (format in fusion.h).
struct Prog {
  std::vector<Instr> code;
  std::vector<LoadSpec> loads;
  std::vector<OutSpec> outs;
  std::vector<int64_t> reduced;
};

Prog decode(const Attrs& a) {
  return Prog{decode_code(a.ints("code")), decode_loads(a.ints("loads")), decode_outs(a.ints("outs")),
              a.ints("reduced", {})};
}

void encode(const Prog& p, Attrs& a) {
  std::vector<int64_t> code, loads, outs;
  for (const Instr& i : p.code) append_instr(code, i);
  for (const auto& l : p.loads) append_load(loads, l.input, l.dims, l.st);
  for (const auto& o : p.outs) append_out(outs, o.slot, o.shape);
  a.set("code", code);
  a.set("loads", loads);
  a.set("outs", outs);
  a.set("reduced", p.reduced);
}

bool sum_pass(const Node& n) { return n.prim->name == "fused_elementwise" && !n.attrs.ints("reduced", {}).empty(); }

// Whether the two passes can run as one: same iteration space and column count, and a
// load of the same full-size array with the same strides.
bool siblings(const Graph& g, const Node& a, const Node& b) {
  if (a.attrs.i("n") != b.attrs.i("n") || a.attrs.i("reduce_inner", 0) != b.attrs.i("reduce_inner", 0)) return false;
  const Prog pa = decode(a.attrs), pb = decode(b.attrs);
  for (const auto& la : pa.loads)
    for (const auto& lb : pb.loads)
      if (a.in[la.input] == b.in[lb.input] && la.dims == lb.dims && la.st == lb.st &&
          g.aval(a.in[la.input]).size() == a.attrs.i("n"))
        return true;
  return false;
}

// a's program followed by b's, b's loads of what a already loads sharing a's slots.
Node merge(const Node& a, const Node& b) {
  Prog p = decode(a.attrs);
  const Prog pb = decode(b.attrs);
  Node m = a;
  std::vector<int64_t> in_of(b.in.size());  // b's input index -> merged input index
  for (size_t k = 0; k < b.in.size(); ++k) {
    auto it = std::find(m.in.begin(), m.in.end(), b.in[k]);
    in_of[k] = it - m.in.begin();
    if (it == m.in.end()) m.in.push_back(b.in[k]);
  }
  auto key_of = [](const LoadSpec& l) {  // (input, dims + strides)
    Shape k = l.dims;
    k.insert(k.end(), l.st.begin(), l.st.end());
    return std::make_pair(l.input, k);
  };
  std::map<std::pair<int64_t, Shape>, int64_t> load_slot;  // load -> slot
  for (size_t k = 0; k < p.code.size(); ++k)
    if (p.code[k].op == kLoad) load_slot[key_of(p.loads[p.code[k].a])] = int64_t(k);
  std::vector<int64_t> slot_of(pb.code.size());  // b's slot -> merged slot
  for (size_t k = 0; k < pb.code.size(); ++k) {
    Instr ins = pb.code[k];
    if (ins.op == kLoad) {
      auto l = pb.loads[ins.a];
      l.input = in_of[l.input];
      if (auto it = load_slot.find(key_of(l)); it != load_slot.end()) {
        slot_of[k] = it->second;
        continue;
      }
      ins.a = int64_t(p.loads.size());
      p.loads.push_back(l);
      load_slot[key_of(l)] = int64_t(p.code.size());
    } else {
      int64_t* ops[3] = {&ins.a, &ins.b, &ins.c};
      for (int q = 0; q < nops_of(ins); ++q) *ops[q] = slot_of[*ops[q]];
    }
    slot_of[k] = int64_t(p.code.size());
    p.code.push_back(ins);
  }
  const int64_t nouts = int64_t(p.outs.size());
  for (const auto& o : pb.outs) p.outs.push_back({slot_of[o.slot], o.shape});
  for (int64_t r : pb.reduced) p.reduced.push_back(nouts + r);
  m.out.insert(m.out.end(), b.out.begin(), b.out.end());
  encode(p, m.attrs);
  m.attrs.set("flops", a.attrs.f("flops", 0) + b.attrs.f("flops", 0));
  m.attrs.set("prims", a.attrs.s("prims", "") + "," + b.attrs.s("prims", ""));
  return m;
}

// Whether node j depends on node i < j (a path of values from i's outputs to j).
bool depends(const Graph& g, int i, int j) {
  std::vector<char> seen(g.nodes.size(), 0);
  std::vector<int> stack{j};
  while (!stack.empty()) {
    const int k = stack.back();
    stack.pop_back();
    for (int v : g.nodes[k].in) {
      const int p = g.producer[v];
      if (p == i) return true;
      if (p > i && !seen[p]) { seen[p] = 1; stack.push_back(p); }
    }
  }
  return false;
}

// The first mergeable pair (i < j, nearest i for the first j), or {-1, -1}.
std::pair<int, int> find_pair(const Graph& g) {
  std::map<int, std::vector<int>> readers;  // value -> earlier sum passes reading it
  for (int j = 0; j < int(g.nodes.size()); ++j) {
    const Node& nj = g.nodes[j];
    if (!sum_pass(nj)) continue;
    std::vector<int> cands;
    for (int v : nj.in)
      if (auto it = readers.find(v); it != readers.end()) cands.insert(cands.end(), it->second.begin(), it->second.end());
    std::sort(cands.rbegin(), cands.rend());
    cands.erase(std::unique(cands.begin(), cands.end()), cands.end());
    for (int i : cands)
      if (siblings(g, g.nodes[i], nj) && !depends(g, i, j)) return {i, j};
    for (int v : nj.in) readers[v].push_back(j);
  }
  return {-1, -1};
}

}  // namespace

Graph merge_sibling_sums(const Graph& g0, int* merged) {
  Graph g = g0;
  int count = 0;
  while (true) {
    const auto [i, j] = find_pair(g);
    if (i < 0) break;
    ++count;
    // Nodes between i and j that read i's results (directly or not) go after the merged
    // node; the others stay before it (j may read them).
    std::vector<char> after_i(g.nodes.size(), 0);
    after_i[i] = 1;
    for (int k = i + 1; k < j; ++k)
      for (int v : g.nodes[k].in)
        if (g.producer[v] >= 0 && after_i[g.producer[v]]) after_i[k] = 1;
    std::vector<Node> nodes;
    nodes.reserve(g.nodes.size() - 1);
    for (int k = 0; k < i; ++k) nodes.push_back(std::move(g.nodes[k]));
    for (int k = i + 1; k < j; ++k)
      if (!after_i[k]) nodes.push_back(std::move(g.nodes[k]));
    nodes.push_back(merge(g.nodes[i], g.nodes[j]));
    for (int k = i + 1; k < j; ++k)
      if (after_i[k]) nodes.push_back(std::move(g.nodes[k]));
    for (int k = j + 1; k < int(g.nodes.size()); ++k) nodes.push_back(std::move(g.nodes[k]));
    g.nodes = std::move(nodes);
    std::fill(g.producer.begin(), g.producer.end(), -1);
    for (size_t k = 0; k < g.nodes.size(); ++k)
      for (int v : g.nodes[k].out) g.producer[v] = int(k);
  }
  if (merged) *merged = count;
  return g;
}

}  // namespace podlet
