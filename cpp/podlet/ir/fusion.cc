// The elementwise fusion pass (see fusion.h).
//
// Grouping, in trace (topological) order: a fusible node joins the open groups of its
// operands that have its element count, merging them; a group is sealed as soon as a
// node outside it reads one of its values. The fused node is placed where the group's
// last member was. That is always legal: every external operand of a member exists
// before that member, and no outside node reads a group value before the group is
// sealed, so nothing that runs earlier needs a value the fused node computes.
#include "podlet/ir/fusion.h"
#include "podlet/ir/fusion_order.h"
#include "podlet/ir/sibling_fusion.h"
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <numeric>
#include <unordered_map>

namespace podlet {
namespace {

using namespace fused;

bool float_dtype(DType d) { return d == DType::f32 || d == DType::bf16 || d == DType::f64; }

// The fused opcode of a node, or -1 when it does not fuse (wrong primitive or dtype).
int64_t fused_op(const Node& n, const Graph& g) {
  static const std::unordered_map<std::string, int64_t> unary_float = {
      {"neg", kNeg}, {"abs", kAbs}, {"sign", kSign}, {"exp", kExp}, {"log", kLog}, {"log1p", kLog1p},
      {"expm1", kExpm1}, {"tanh", kTanh}, {"logistic", kLogistic}, {"sqrt", kSqrt}, {"rsqrt", kRsqrt},
      {"erf", kErf}, {"floor", kFloor}, {"ceil", kCeil}, {"integer_pow", kIntPow}, {"is_finite", kIsFinite}};
  static const std::unordered_map<std::string, int64_t> binary_float = {
      {"add", kAdd}, {"sub", kSub}, {"mul", kMul}, {"div", kDiv}, {"max", kMax}, {"min", kMin}, {"pow", kPow}};
  static const std::unordered_map<std::string, int64_t> logical = {{"and", kAnd}, {"or", kOr}, {"xor", kXor},
                                                                   {"not", kNot}};
  static const std::unordered_map<std::string, int64_t> compare = {{"eq", kEq}, {"ne", kNe}, {"lt", kLt},
                                                                   {"le", kLe}, {"gt", kGt}, {"ge", kGe}};
  const std::string& p = n.prim->name;
  if (n.out.size() != 1) return -1;
  const DType d0 = n.in.empty() ? DType::f32 : g.aval(n.in[0]).dtype;
  if (auto it = unary_float.find(p); it != unary_float.end()) return float_dtype(d0) ? it->second : -1;
  if (auto it = binary_float.find(p); it != binary_float.end()) return float_dtype(d0) ? it->second : -1;
  if (auto it = logical.find(p); it != logical.end()) return d0 == DType::boolean ? it->second : -1;
  if (auto it = compare.find(p); it != compare.end()) return it->second;
  if (p == "select") return kSelect;
  if (p == "clamp") return float_dtype(d0) ? kClamp : -1;
  if (p == "convert_element_type") return kConvert;
  return -1;
}

// Strides (in elements of u) with which an operand of shape `os`, broadcast NumPy-style
// to `target`, reads u, where operand[i] = u[sum_d i_d * ust[d]] (ust over os's dims).
Shape compose_broadcast(const Shape& os, const Shape& ust, const Shape& target) {
  Shape st(target.size(), 0);
  const int lead = int(target.size()) - int(os.size());
  for (int d = 0; d < int(os.size()); ++d)
    if (os[d] != 1) st[lead + d] = ust[d];
  return st;
}

bool uniform_const(const Array& a) {
  const size_t isz = itemsize(a.dtype());
  const char* p = static_cast<const char*>(a.raw());
  for (int64_t i = 1; i < a.size(); ++i)
    if (std::memcmp(p, p + i * isz, isz) != 0) return false;
  return true;
}

// div(x, c) by a constant c that is one power of two in every element becomes
// mul(x, 1 / c): the exact quotient x / c is x * (1 / c), so both round to the same value
// (NaN, infinities and subnormals included), and a multiply replaces a division (vdivps:
// ~5x a multiply's throughput). Flax's exact GELU halves its value and its gradient, one
// division per element in each pass.
Graph exact_reciprocals(Graph g) {
  std::unordered_map<int, size_t> consts;  // value id -> index in g.consts (which grows below)
  for (size_t k = 0; k < g.consts.size(); ++k) consts[g.consts[k].first] = k;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.prim->name != "div" || n.in.size() != 2 || !float_dtype(g.aval(n.out[0]).dtype)) continue;
    auto it = consts.find(n.in[1]);
    if (it == consts.end()) continue;
    const Array c = g.consts[it->second].second;
    if (c.size() == 0 || !float_dtype(c.dtype()) || !uniform_const(c)) continue;
    const double v = get_as_double(c, 0);
    int e = 0;
    // 2^-100 .. 2^100: 1 / c is a normal number in every float dtype (bf16 shares f32's range).
    if (!(std::isfinite(v) && std::fabs(std::frexp(v, &e)) == 0.5 && e > -100 && e < 100)) continue;
    Array r(c.dtype(), c.shape());
    for (int64_t k = 0; k < r.size(); ++k) set_from_double(r, k, 1.0 / v);
    const int id = g.add_const(r);
    consts[id] = g.consts.size() - 1;
    g.nodes[i].prim = &lookup_prim("mul");
    g.nodes[i].in[1] = id;
  }
  return g;
}

// The column count K when reduce_sum over `axes` of a value of shape `s` is a column
// reduction [R, K] (the reduced dims are the leading non-unit dims, R > 1, K > 1) of a
// float32/bfloat16 value, which the fused kernel can sum in reduce_sum's order; else 0.
int64_t column_reduction_inner(const AVal& v, const std::vector<int64_t>& axes) {
  if (v.dtype != DType::f32 && v.dtype != DType::bf16) return 0;
  const int r = int(v.shape.size());
  std::vector<char> red(r, 0);
  for (int64_t a : axes) red[a < 0 ? a + r : a] = 1;
  int64_t R = 1, K = 1;
  bool kept_seen = false;
  for (int d = 0; d < r; ++d) {
    if (v.shape[d] == 1) continue;
    if (red[d]) {
      if (kept_seen) return 0;  // a reduced dim after a kept one: not [R, K]
      R *= v.shape[d];
    } else {
      kept_seen = true;
      K *= v.shape[d];
    }
  }
  return R > 1 && K > 1 ? K : 0;
}

struct Group {
  std::vector<int> members;  // node indices, in order
  int64_t numel = 0;
  bool sealed = false;
  int merged_into = -1;
};

}  // namespace

bool fusible_elementwise(const Node& n, const Graph& g) { return fused_op(n, g) >= 0; }

Graph fuse_elementwise(const Graph& g_in, FusionStats* stats, bool excess_precision) {
  const Graph g = exact_reciprocals(sink_small_nodes(g_in));
  const int N = int(g.nodes.size());
  std::vector<int64_t> op(N, -1);
  for (int i = 0; i < N; ++i) op[i] = fused_op(g.nodes[i], g);

  std::unordered_map<int, const Array*> consts;
  for (auto& [id, arr] : g.consts) consts[id] = &arr;

  // ---- grouping ----
  std::vector<Group> groups;
  std::vector<int> group_of(N, -1);  // node -> group (before merges are resolved)
  auto find = [&](int gi) { while (groups[gi].merged_into >= 0) gi = groups[gi].merged_into; return gi; };
  auto group_of_value = [&](int v) -> int {
    const int p = g.producer[v];
    return p < 0 || group_of[p] < 0 ? -1 : find(group_of[p]);
  };
  // A reduce_sum that reads a group value as a column reduction is computed by the
  // fused node itself (BatchNorm statistics: sum(x) and sum(x*x) in the pass that
  // converts x), so the value it reads need not be written to memory, and reading it
  // does not seal the group. Instead every value computed from the sum depends on the
  // group: a node reading such a value seals the group (it needs the sum, so it cannot
  // join, and nothing may join after it). One column count per group.
  std::vector<int> sum_group(N, -1);       // reduce node -> group it is summed in
  std::vector<int64_t> group_inner;        // per group: the column count of its sums
  std::vector<std::vector<int>> deps(g.num_values());  // groups whose sums a value needs
  for (int i = 0; i < N; ++i) {
    const Node& n = g.nodes[i];
    std::vector<int> dep;
    for (int v : n.in)
      for (int d : deps[v]) {
        const int gi = find(d);
        if (!groups[gi].sealed && std::find(dep.begin(), dep.end(), gi) == dep.end()) dep.push_back(gi);
      }
    for (int gi : dep) groups[gi].sealed = true;
    if (n.prim->name == "reduce_sum" && n.in.size() == 1) {
      const int gi = group_of_value(n.in[0]);
      // A sealed group still computes sums of its members: the fused node sits at its
      // last member, before this reduce, and needs nothing a later node computes (Flax's
      // sum(x*x) comes after mean = sum(x)/n has sealed the group).
      const int64_t K = gi >= 0 ? column_reduction_inner(g.aval(n.in[0]), n.attrs.ints("axes")) : 0;
      if (K > 0 && (group_inner[gi] == 0 || group_inner[gi] == K)) {
        group_inner[gi] = K;
        sum_group[i] = gi;
        deps[n.out[0]] = {gi};
        continue;
      }
    }
    for (int v : n.out) deps[v] = dep;  // sealed groups: nothing more to track
    const bool is_reshape = n.prim->name == "reshape";
    int64_t numel_i = n.out.size() == 1 ? g.aval(n.out[0]).size() : -1;
    bool fusible = op[i] >= 0 && numel_i > 0;
    std::vector<int> cands;
    if (is_reshape) {  // a reshape fuses (for free) only inside a group
      const int gi = group_of_value(n.in[0]);
      fusible = gi >= 0 && !groups[gi].sealed && numel_i > 0;
      op[i] = -2;  // alias
    }
    if (fusible) {
      for (int v : n.in) {
        const int gi = group_of_value(v);
        if (gi < 0 || groups[gi].sealed) continue;
        if (groups[gi].numel == numel_i) {
          if (std::find(cands.begin(), cands.end(), gi) == cands.end()) cands.push_back(gi);
        } else {
          groups[gi].sealed = true;  // read from outside (a different iteration space)
        }
      }
      int gi;
      if (cands.empty()) {
        gi = int(groups.size());
        groups.push_back(Group{});
        group_inner.push_back(0);
        groups.back().numel = numel_i;
      } else {
        gi = cands[0];
        for (size_t k = 1; k < cands.size(); ++k) {  // merge: both open, so still legal
          if (group_inner[cands[k]] && group_inner[gi] && group_inner[cands[k]] != group_inner[gi]) {
            groups[cands[k]].sealed = true;  // sums of two column counts: keep apart
            continue;
          }
          if (group_inner[cands[k]]) group_inner[gi] = group_inner[cands[k]];
          Group& o = groups[cands[k]];
          groups[gi].members.insert(groups[gi].members.end(), o.members.begin(), o.members.end());
          o.members.clear();
          o.merged_into = gi;
        }
      }
      groups[gi].members.push_back(i);
      group_of[i] = gi;
    } else {
      op[i] = -1;
      for (int v : n.in) {
        const int gi = group_of_value(v);
        if (gi >= 0) groups[gi].sealed = true;
      }
    }
  }

  // ---- consumers (to find each group's outputs) ----
  const auto users = g.readers();
  const auto is_graph_out = g.output_mask();

  // Groups that will surely become fused nodes: the emission test below, less its
  // broadcast case, which is known only while building a program.
  std::vector<char> will_emit(groups.size(), 0), has_sum(groups.size(), 0);
  for (int i = 0; i < N; ++i)
    if (sum_group[i] >= 0) has_sum[find(sum_group[i])] = 1;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const Group& G = groups[gi];
    if (G.merged_into >= 0 || G.members.empty()) continue;
    int nc = 0, only = -1;
    for (int i : G.members) if (op[i] != -2) { ++nc; only = i; }
    // A lone transcendental is a program too: the one-op kernels are baseline (SSE2)
    // code, the fused interpreter has AVX2 and AVX-512 builds and the JIT (tanh on
    // 128K floats: 414 us one-op, 240 us fused, AMD EPYC AVX2 host).
    const bool math = nc == 1 && (op[only] == kExp || op[only] == kLog || op[only] == kTanh ||
                                  op[only] == kLogistic || op[only] == kErf);
    will_emit[gi] = nc >= 2 || (nc == 1 && has_sum[gi]) || math;
  }
  // A widening convert of a value no group computes (BatchNorm's f32 copy of a bf16 conv
  // output) is recomputed by the other groups that read it instead of written out by its
  // own: the statistics pass that converts x is sealed by the mean it sums, so the apply
  // pass read x's f32 copy (4 bytes an element, written for it) instead of x (2 bytes).
  // Returns the convert's input, or -1.
  auto recomputable = [&](int v) -> int {
    const int p = g.producer[v];
    if (p < 0 || op[p] != kConvert || group_of[p] < 0) return -1;
    const int u = g.nodes[p].in[0];
    const int pu = g.producer[u];
    if (pu >= 0 && group_of[pu] >= 0) return -1;
    return itemsize(g.aval(v).dtype) >= itemsize(g.aval(u).dtype) ? u : -1;
  };
  // Whether member-or-not node `user` of v is a fused node of another group that recomputes v.
  auto recomputes = [&](int user, int v, int gi) {
    if (recomputable(v) < 0 || group_of[user] < 0 || op[user] < 0) return false;
    const int ug = find(group_of[user]);
    return ug != gi && will_emit[ug];
  };

  FusionStats st;
  std::vector<char> drop(N, 0);
  std::map<int, Node> emit_at;  // node index -> fused node placed there
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    Group& G = groups[gi];
    if (G.merged_into >= 0 || G.members.empty()) continue;
    std::sort(G.members.begin(), G.members.end());
    std::vector<char> member(N, 0);
    for (int i : G.members) member[i] = 1;

    // Program construction.
    std::vector<int64_t> code, loads, outs;
    std::vector<DType> slot_dtype;
    std::unordered_map<int, int> slot_of;  // value id -> slot
    std::map<std::pair<int, Shape>, int> load_slot;  // (source value, dims+strides) -> slot
    std::vector<int> ext;  // external input value ids
    int absorbed = 0, n_compute = 0;
    int64_t n_loads = 0;
    bool broadcast_load = false;
    double flops = 0;
    std::string names;
    auto emit = [&](int64_t o, DType d, DType rd, int64_t a, int64_t b, int64_t c, int64_t imm) {
      append_instr(code, Instr{o, d, rd, a, b, c, imm});
      slot_dtype.push_back(rd);
      return int(slot_dtype.size()) - 1;
    };
    std::map<std::pair<int, Shape>, int> recomputed;  // (value, member shape) -> slot
    // The slot of operand v of a member whose output has shape `ms`.
    std::function<int(int, const Shape&)> operand = [&](int v, const Shape& ms) -> int {
      if (auto it = slot_of.find(v); it != slot_of.end() && g.producer[v] >= 0 && member[g.producer[v]])
        return it->second;
      if (const int u = recomputable(v); u >= 0 && !member[g.producer[v]] && will_emit[gi]) {
        const auto key = std::make_pair(v, ms);
        if (auto it = recomputed.find(key); it != recomputed.end()) return it->second;
        const int a = operand(u, ms);
        return recomputed[key] = emit(kConvert, g.aval(u).dtype, g.aval(v).dtype, a, 0, 0, 0);
      }
      int u = v;
      Shape ust = strides_of(g.aval(v).shape);
      const int p = g.producer[v];
      if (p >= 0 && g.nodes[p].prim->name == "broadcast_in_dim") {
        // Read the broadcast's operand directly: its dims map to broadcast_dimensions.
        const Node& b = g.nodes[p];
        u = b.in[0];
        const Shape& us = g.aval(u).shape;
        const Shape ist = strides_of(us);
        auto dims = b.attrs.ints("broadcast_dimensions");
        ust.assign(g.aval(v).shape.size(), 0);
        for (size_t k = 0; k < dims.size(); ++k) ust[dims[k]] = us[k] == 1 ? 0 : ist[k];
        ++absorbed;
        broadcast_load = true;
      }
      Shape s = compose_broadcast(g.aval(v).shape, ust, ms);
      if (auto c = consts.find(u); c != consts.end() && c->second->size() > 1 && uniform_const(*c->second))
        std::fill(s.begin(), s.end(), 0);
      if (g.aval(u).size() != numel(ms)) broadcast_load = true;
      Shape key = ms;
      key.insert(key.end(), s.begin(), s.end());
      auto lk = std::make_pair(u, key);
      if (auto it = load_slot.find(lk); it != load_slot.end()) return it->second;
      int idx = int(std::find(ext.begin(), ext.end(), u) - ext.begin());
      if (idx == int(ext.size())) ext.push_back(u);
      const int64_t load_index = n_loads++;
      append_load(loads, idx, ms, s);
      const DType d = g.aval(u).dtype;
      const int slot = emit(kLoad, d, d, load_index, 0, 0, 0);
      load_slot[lk] = slot;
      return slot;
    };
    for (int i : G.members) {
      const Node& n = g.nodes[i];
      const Shape& ms = g.aval(n.out[0]).shape;
      if (op[i] == -2) {  // reshape: same elements, same slot
        slot_of[n.out[0]] = operand(n.in[0], g.aval(n.in[0]).shape);
        continue;
      }
      ++n_compute;
      names += (names.empty() ? "" : ",") + n.prim->name;
      if (n.prim->flops) {
        std::vector<AVal> ia, oa;
        for (int v : n.in) ia.push_back(g.aval(v));
        for (int v : n.out) oa.push_back(g.aval(v));
        flops += n.prim->flops(ia, oa, n.attrs);
      }
      int s[3] = {0, 0, 0};
      for (size_t k = 0; k < n.in.size() && k < 3; ++k) s[k] = operand(n.in[k], ms);
      const DType d = g.aval(n.in[op[i] == kSelect ? 1 : 0]).dtype;
      const DType rd = g.aval(n.out[0]).dtype;
      const int64_t imm = op[i] == kIntPow ? n.attrs.i("y") : 0;
      slot_of[n.out[0]] = emit(op[i], d, rd, s[0], s[1], s[2], imm);
    }
    std::vector<int> sums;  // reduce_sum nodes this group computes
    for (int i = 0; i < N; ++i)
      if (sum_group[i] >= 0 && find(sum_group[i]) == int(gi)) sums.push_back(i);
    // Worth it when it saves a pass: two or more computing members, one that sums (both
    // will_emit), or one that reads a broadcast operand without materialising it.
    if (!will_emit[gi] && !(n_compute == 1 && broadcast_load)) continue;

    Node fn;
    fn.prim = &lookup_prim("fused_elementwise");
    fn.in = ext;
    auto add_out = [&](int slot, int v) {
      fn.out.push_back(v);
      append_out(outs, slot, g.aval(v).shape);
    };
    for (int i : G.members) {
      const int v = g.nodes[i].out[0];
      bool external = is_graph_out[v];
      for (int u : users[v])
        external |= !member[u] && !(sum_group[u] >= 0 && find(sum_group[u]) == int(gi)) && !recomputes(u, v, int(gi));
      if (external) add_out(slot_of.at(v), v);
    }
    std::vector<int64_t> reduced;
    for (int r : sums) {
      const Node& rn = g.nodes[r];
      reduced.push_back(int64_t(fn.out.size()));
      add_out(slot_of.at(rn.in[0]), rn.out[0]);
      names += ",reduce_sum";
      std::vector<AVal> ia{g.aval(rn.in[0])}, oa{g.aval(rn.out[0])};
      if (rn.prim->flops) flops += rn.prim->flops(ia, oa, rn.attrs);
      drop[r] = 1;
    }
    fn.attrs = Attrs{{"n", G.numel}, {"code", code}, {"loads", loads}, {"outs", outs}, {"flops", flops},
                     {"prims", names}};
    if (!sums.empty()) {
      fn.attrs.set("reduce_inner", group_inner[gi]);
      fn.attrs.set("reduced", reduced);
    }
    fn.where = g.nodes[G.members.front()].where;
    for (int i : G.members) drop[i] = 1;
    emit_at[G.members.back()] = std::move(fn);
    st.groups += 1;
    st.nodes_fused += n_compute;
    st.broadcasts_absorbed += absorbed;
  }

  Graph out;
  out.avals = g.avals;
  out.inputs = g.inputs;
  out.outputs = g.outputs;
  out.consts = g.consts;
  out.producer.assign(g.num_values(), -1);
  for (int i = 0; i < N; ++i) {
    if (auto it = emit_at.find(i); it != emit_at.end()) out.nodes.push_back(std::move(it->second));
    else if (!drop[i]) out.nodes.push_back(g.nodes[i]);
  }
  for (size_t i = 0; i < out.nodes.size(); ++i) for (int v : out.nodes[i].out) out.producer[v] = int(i);
  out.dce();  // broadcasts and constants nobody reads any more
  out = merge_sibling_sums(out, &st.siblings_merged);
  if (excess_precision)  // after the sibling merge, which builds its nodes' attrs anew
    for (Node& n : out.nodes)
      if (n.prim->name == "fused_elementwise") n.attrs.set("excess_precision", int64_t(1));
  if (stats) *stats = st;
  return out;
}

}  // namespace podlet
