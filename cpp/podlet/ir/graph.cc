#include <cstdlib>
#include "podlet/ir/graph.h"
#include "podlet/ir/memory_plan.h"
#include "podlet/sanitize.h"
#include "podlet/ir/ops.h"
#include <map>
#include <sstream>
#include <algorithm>
#include <chrono>
#include <mutex>

namespace podlet {

// ---- registry -------------------------------------------------------------------
static std::map<std::string, PrimDef>& registry() {
  static std::map<std::string, PrimDef> r;
  return r;
}
Register::Register(const std::string& name, PrimDef def) {
  def.name = name;
  registry()[name] = std::move(def);
}
const PrimDef& lookup_prim(const std::string& name) {
  auto it = registry().find(name);
  if (it == registry().end()) throw ValueError(fmt("unknown primitive '", name, "'"));
  return it->second;
}
std::vector<std::string> prim_names() {
  std::vector<std::string> v;
  for (auto& kv : registry()) v.push_back(kv.first);
  return v;
}

std::vector<AVal> infer_shapes(const PrimDef& p, const std::vector<AVal>& in, const Attrs& attrs) {
  try { return p.shape(in, attrs); }
  catch (const Error&) {
    std::string s = p.name + "(";
    for (size_t i = 0; i < in.size(); ++i)
      s += (i ? ", " : "") + std::string(dtype_name(in[i].dtype)) + shape_str(in[i].shape);
    rethrow_prefixed(s + "): ");
  }
}

static bool g_profiling = false;
static bool g_profile_shapes = false;  // key rows by the inputs' dtypes and shapes too
static void record_profile(const PrimDef& p, const Attrs& attrs, const std::vector<Array>& in,
                           const std::vector<AVal>& oa, double seconds);

static std::vector<Array> alloc_outputs(const PrimDef& p, const std::vector<AVal>& avals) {
  std::vector<Array> out;
  out.reserve(avals.size());
  for (auto& a : avals) out.emplace_back(p.kernel_allocates ? Array() : Array(a));
  return out;
}

std::vector<Array> apply_prim(const PrimDef& p, const std::vector<Array>& in, const Attrs& attrs) {
  std::vector<AVal> ia; ia.reserve(in.size());
  for (auto& a : in) ia.push_back(a.aval());
  auto oa = infer_shapes(p, ia, attrs);
  auto out = alloc_outputs(p, oa);
  const bool prof = g_profiling;
  std::chrono::steady_clock::time_point t0;
  if (prof) t0 = std::chrono::steady_clock::now();
  try { p.kernel(in, out, attrs); }
  catch (const Error&) { rethrow_prefixed(p.name + ": "); }
  if (prof) record_profile(p, attrs, in, oa, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return out;
}

// ---- graph ----------------------------------------------------------------------
int Graph::add_input(const AVal& a) {
  avals.push_back(a); producer.push_back(-1);
  int id = int(avals.size()) - 1;
  inputs.push_back(id);
  return id;
}
int Graph::add_const(const Array& a) {
  avals.push_back(a.aval()); producer.push_back(-1);
  int id = int(avals.size()) - 1;
  consts.emplace_back(id, a);
  return id;
}
std::vector<int> Graph::add(const std::string& prim, const std::vector<int>& in, const Attrs& attrs,
                            const std::string& where) {
  return add(lookup_prim(prim), in, attrs, where);
}
std::vector<int> Graph::add(const PrimDef& p, const std::vector<int>& in, const Attrs& attrs,
                            const std::string& where) {
  std::vector<AVal> ia; ia.reserve(in.size());
  for (int v : in) {
    if (v < 0 || v >= num_values()) throw ValueError(fmt(p.name, ": invalid value id ", v));
    ia.push_back(avals[v]);
  }
  auto oa = infer_shapes(p, ia, attrs);
  if (p.identity && oa.size() == 1 && !in.empty() && oa[0] == ia[0] && p.identity(ia, oa, attrs)) return {in[0]};
  Node n; n.prim = &p; n.attrs = attrs; n.in = in; n.where = where;
  for (auto& a : oa) { avals.push_back(a); producer.push_back(int(nodes.size())); n.out.push_back(num_values() - 1); }
  nodes.push_back(std::move(n));
  return nodes.back().out;
}

std::vector<int> Graph::inline_graph(const Graph& sub, const std::vector<int>& args, const std::string& where) {
  if (args.size() != sub.inputs.size())
    throw ValueError(fmt("inline: graph takes ", sub.inputs.size(), " inputs, got ", args.size()));
  std::vector<int> m(sub.num_values(), -1);
  for (size_t i = 0; i < args.size(); ++i) {
    if (!(avals.at(args[i]) == sub.avals[sub.inputs[i]]))
      throw ShapeError(fmt("inline: input ", i, " is ", dtype_name(avals[args[i]].dtype), shape_str(avals[args[i]].shape),
                           ", expected ", dtype_name(sub.avals[sub.inputs[i]].dtype), shape_str(sub.avals[sub.inputs[i]].shape)));
    m[sub.inputs[i]] = args[i];
  }
  for (auto& [id, arr] : sub.consts) m[id] = add_const(arr);
  for (auto& n : sub.nodes) {
    std::vector<int> in; in.reserve(n.in.size());
    for (int v : n.in) in.push_back(m[v]);
    auto out = add(*n.prim, in, n.attrs, n.where.empty() ? where : n.where);
    for (size_t k = 0; k < out.size(); ++k) m[n.out[k]] = out[k];
  }
  std::vector<int> res;
  for (int v : sub.outputs) res.push_back(m[v]);
  return res;
}

std::vector<std::vector<int>> Graph::readers() const {
  std::vector<std::vector<int>> r(num_values());
  for (int i = 0; i < int(nodes.size()); ++i)
    for (int v : nodes[i].in) r[v].push_back(i);
  return r;
}
std::vector<char> Graph::output_mask() const {
  std::vector<char> m(num_values(), 0);
  for (int v : outputs) m[v] = 1;
  return m;
}

void Graph::dce() {
  std::vector<char> live(num_values(), 0);
  for (int v : outputs) live[v] = 1;
  std::vector<char> keep(nodes.size(), 0);
  for (int i = int(nodes.size()) - 1; i >= 0; --i) {
    bool any = false;
    for (int v : nodes[i].out) any |= bool(live[v]);
    if (!any) continue;
    keep[i] = 1;
    if (nodes[i].prim->prune) {
      std::vector<char> ol;
      for (int v : nodes[i].out) ol.push_back(live[v]);
      if (std::find(ol.begin(), ol.end(), 0) != ol.end()) nodes[i].prim->prune(nodes[i], ol);
    }
    for (int v : nodes[i].in) live[v] = 1;
  }
  std::vector<Node> kept;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (keep[i]) kept.push_back(std::move(nodes[i]));
  nodes = std::move(kept);
  std::vector<std::pair<int, Array>> kc;
  for (auto& c : consts) if (live[c.first]) kc.push_back(std::move(c));
  consts = std::move(kc);
  std::fill(producer.begin(), producer.end(), -1);
  for (size_t i = 0; i < nodes.size(); ++i) for (int v : nodes[i].out) producer[v] = int(i);
}

double Graph::flops() const {
  double f = 0;
  for (auto& n : nodes) {
    if (!n.prim->flops) continue;
    std::vector<AVal> ia, oa;
    for (int v : n.in) ia.push_back(avals[v]);
    for (int v : n.out) oa.push_back(avals[v]);
    f += n.prim->flops(ia, oa, n.attrs);
  }
  return f;
}

std::string Graph::dump() const {
  std::ostringstream o;
  auto val = [&](int v) { return fmt("%", v, ":", dtype_name(avals[v].dtype), shape_str(avals[v].shape)); };
  o << "inputs:"; for (int v : inputs) o << " " << val(v); o << "\n";
  for (auto& c : consts) o << "const " << val(c.first) << "\n";
  for (auto& n : nodes) {
    for (size_t k = 0; k < n.out.size(); ++k) o << (k ? ", " : "") << val(n.out[k]);
    o << " = " << n.prim->name << "(";
    for (size_t k = 0; k < n.in.size(); ++k) o << (k ? ", " : "") << "%" << n.in[k];
    o << ")" << (n.attrs.items().empty() ? "" : " " + n.attrs.repr()) << "\n";
  }
  o << "outputs:"; for (int v : outputs) o << " %" << v; o << "\n";
  return o.str();
}

// ---- attrs ----------------------------------------------------------------------
size_t Attrs::hash() const {
  size_t h = 1469598103934665603ull;
  auto mix = [&](size_t x) { h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
  for (auto& [k, v] : m_) {
    mix(std::hash<std::string>()(k));
    std::visit([&](auto&& x) {
      using T = std::decay_t<decltype(x)>;
      if constexpr (std::is_same_v<T, std::vector<int64_t>> || std::is_same_v<T, std::vector<double>>)
        for (auto e : x) mix(std::hash<std::decay_t<decltype(e)>>()(e));
      else if constexpr (std::is_same_v<T, std::vector<GraphRef>>)
        for (auto& e : x) mix(std::hash<const void*>()(e.get()));
      else if constexpr (std::is_same_v<T, GraphRef>) mix(std::hash<const void*>()(x.get()));
      else mix(std::hash<T>()(x));
    }, v);
  }
  return h;
}
std::string Attrs::repr() const {
  std::ostringstream o; o << "{";
  bool first = true;
  for (auto& [k, v] : m_) {
    o << (first ? "" : ", ") << k << "=";
    first = false;
    std::visit([&](auto&& x) {
      using T = std::decay_t<decltype(x)>;
      if constexpr (std::is_same_v<T, std::vector<int64_t>> || std::is_same_v<T, std::vector<double>>) {
        o << "["; for (size_t i = 0; i < x.size(); ++i) o << (i ? "," : "") << x[i]; o << "]";
      } else if constexpr (std::is_same_v<T, GraphRef>) {
        o << "<graph: " << x->nodes.size() << " nodes>";
      } else if constexpr (std::is_same_v<T, std::vector<GraphRef>>) {
        o << "["; for (size_t i = 0; i < x.size(); ++i) o << (i ? "," : "") << "<graph: " << x[i]->nodes.size() << " nodes>"; o << "]";
      } else o << x;
    }, v);
  }
  o << "}"; return o.str();
}

// ---- executor -------------------------------------------------------------------
// Per-(primitive, dtype) wall time, FLOPs and bytes, collected while profiling is on
// (the profiler's raw data; podlet.profile formats it). Graphs run one at a time per
// process in practice; the mutex only keeps a concurrent run from corrupting the map.
static std::mutex g_profile_mu;
static std::map<std::pair<std::string, std::string>, ProfileEntry> g_profile;
void set_profiling(bool on, bool by_shape) {
  g_profiling = on;
  g_profile_shapes = on && by_shape;
}
bool profiling() { return g_profiling; }
bool profiling_by_shape() { return g_profile_shapes; }
std::map<std::pair<std::string, std::string>, ProfileEntry> take_profile_detailed() {
  std::lock_guard<std::mutex> lk(g_profile_mu);
  auto r = std::move(g_profile);
  g_profile.clear();
  return r;
}
std::map<std::string, ProfileEntry> take_profile() {
  std::map<std::string, ProfileEntry> r;
  for (auto& [k, e] : take_profile_detailed()) {
    auto& t = r[k.first];
    t.calls += e.calls; t.seconds += e.seconds; t.flops += e.flops; t.bytes += e.bytes;
  }
  return r;
}

static void record_profile(const PrimDef& p, const Attrs& attrs, const std::vector<Array>& in,
                           const std::vector<AVal>& oa, double seconds) {
  double flops = 0, bytes = 0;
  std::vector<AVal> ia;
  ia.reserve(in.size());
  for (auto& a : in) { ia.push_back(a.aval()); bytes += double(a.nbytes()); }
  for (auto& a : oa) bytes += double(a.nbytes());
  if (p.flops) flops = p.flops(ia, oa, attrs);
  std::lock_guard<std::mutex> lk(g_profile_mu);
  std::string key = p.name;
  if (g_profile_shapes) {  // "conv_bwd_filter bfloat16[32,56,56,64] bfloat16[32,56,56,64]"
    for (auto& a : ia) {
      key += std::string(" ") + dtype_name(a.dtype) + "[";
      for (size_t d = 0; d < a.shape.size(); ++d) key += (d ? "," : "") + std::to_string(a.shape[d]);
      key += "]";
    }
  }
  auto& e = g_profile[{key, oa.empty() ? "" : dtype_name(oa[0].dtype)}];
  e.calls += 1; e.seconds += seconds; e.flops += flops; e.bytes += bytes;
}

static bool g_memory_plan = [] { const char* e = std::getenv("PODLET_MEMORY_PLAN"); return !(e && e[0] == '0'); }();
void set_memory_plan(bool on) { g_memory_plan = on; }
bool memory_plan_enabled() { return g_memory_plan; }

std::vector<Array> run_graph(const Graph& g, const std::vector<Array>& args) {
  if (args.size() != g.inputs.size())
    throw ValueError(fmt("graph takes ", g.inputs.size(), " inputs, got ", args.size()));
  std::vector<Array> slot(g.num_values());
  for (size_t i = 0; i < args.size(); ++i) {
    const AVal& want = g.avals[g.inputs[i]];
    if (!(args[i].aval() == want))
      throw ShapeError(fmt("input ", i, " is ", dtype_name(args[i].dtype()), shape_str(args[i].shape()),
                           ", the traced graph expects ", dtype_name(want.dtype), shape_str(want.shape)));
    slot[g.inputs[i]] = args[i];
  }
  for (auto& [id, arr] : g.consts) slot[id] = arr;
  // Intermediates live at planned offsets in one arena (memory_plan.h).
  const MemoryPlan plan = g_memory_plan ? plan_memory(g) : MemoryPlan{std::vector<int64_t>(g.num_values(), -1)};
  const std::shared_ptr<void> arena = plan.arena_bytes > 0 ? alloc_buffer(size_t(plan.arena_bytes)) : nullptr;
#if defined(PODLET_SANITIZE_ADDRESS)
  // Under ASan a slot is addressable only while its value lives (sanitize.h): a kernel
  // that writes past its output or reads a value the plan already reused is reported.
  std::vector<std::vector<int>> slot_dies(g.nodes.size());
  for (int v = 0; v < g.num_values(); ++v)
    if (plan.offset[v] >= 0 && plan.end[v] >= 0 && plan.end[v] < int(g.nodes.size())) slot_dies[plan.end[v]].push_back(v);
  auto slot_of = [&](int v) { return static_cast<char*>(arena.get()) + plan.offset[v]; };
  if (arena) PODLET_POISON(arena.get(), size_t(plan.arena_bytes));
  struct Unpoison {  // the arena goes back to the allocator whole, also after an exception
    void* p; size_t n;
    ~Unpoison() { if (p) PODLET_UNPOISON(p, n); }
  } unpoison_arena{arena.get(), size_t(plan.arena_bytes)};
#endif
  // Last use of each value: free it right after, unless it is an output.
  std::vector<int> last(g.num_values(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i) for (int v : g.nodes[i].in) last[v] = int(i);
  for (int v : g.outputs) last[v] = int(g.nodes.size());
  std::vector<Array> in, out;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    in.clear();
    for (int v : n.in) {
      // A graph pass that misordered nodes must not crash the interpreter.
      if (!slot[v].defined() && g.avals[v].size() > 0)
        throw ValueError(fmt("graph node ", i, " (", n.prim->name, ") reads value ", v, " before it is computed"));
      in.push_back(slot[v]);
    }
    std::vector<AVal> oa; oa.reserve(n.out.size());
    for (int v : n.out) oa.push_back(g.avals[v]);
    out.clear();
    for (size_t k = 0; k < oa.size(); ++k) {
      const int64_t off = plan.offset[n.out[k]];
      if (n.prim->kernel_allocates) out.emplace_back();
      else if (off >= 0) out.emplace_back(oa[k].dtype, oa[k].shape, static_cast<char*>(arena.get()) + off, arena);
      else out.emplace_back(oa[k]);
    }
#if defined(PODLET_SANITIZE_ADDRESS)
    for (int v : n.out)
      if (plan.offset[v] >= 0 && !n.prim->kernel_allocates) PODLET_UNPOISON(slot_of(v), g.avals[v].nbytes());
#endif
    const bool prof = g_profiling;
    std::chrono::steady_clock::time_point t0;
    if (prof) t0 = std::chrono::steady_clock::now();
    try { n.prim->kernel(in, out, n.attrs); }
    catch (const Error&) { rethrow_prefixed(n.prim->name + (n.where.empty() ? "" : " (" + n.where + ")") + ": "); }
    if (prof) record_profile(*n.prim, n.attrs, in, oa, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    for (size_t k = 0; k < n.out.size(); ++k) slot[n.out[k]] = std::move(out[k]);
    for (int v : n.in) if (last[v] == int(i)) slot[v] = Array();
#if defined(PODLET_SANITIZE_ADDRESS)
    for (int v : slot_dies[i]) PODLET_POISON(slot_of(v), g.avals[v].nbytes());
#endif
  }
  std::vector<Array> res;
  for (int v : g.outputs) res.push_back(slot[v]);
  return res;
}

// ---- ops helpers ----------------------------------------------------------------
namespace ops {
int scalar_like(Graph& g, int x, double v) { return g.add_const(full(g.aval(x).dtype, {}, v)); }
int full_like(Graph& g, int x, double v) {
  const AVal a = g.aval(x);
  int s = g.add_const(full(a.dtype, {}, v));
  return a.shape.empty() ? s : broadcast_in_dim(g, s, a.shape, {});
}
int zeros_like(Graph& g, int x) { return full_like(g, x, 0.0); }
int convert(Graph& g, int x, DType d) {
  return g.add1("convert_element_type", {x}, {{"new_dtype", std::string(dtype_name(d))}});
}
int cast_if_needed(Graph& g, int x, DType d) { return g.aval(x).dtype == d ? x : convert(g, x, d); }
int select(Graph& g, int p, int a, int b) { return g.add1("select", {p, a, b}); }
int reshape(Graph& g, int x, const Shape& s) {
  if (g.aval(x).shape == s) return x;
  return g.add1("reshape", {x}, {{"new_sizes", s}});
}
int transpose(Graph& g, int x, const std::vector<int64_t>& perm) {
  return g.add1("transpose", {x}, {{"permutation", perm}});
}
int reduce_sum(Graph& g, int x, const std::vector<int64_t>& axes) {
  if (axes.empty()) return x;
  return g.add1("reduce_sum", {x}, {{"axes", axes}});
}
int broadcast_in_dim(Graph& g, int x, const Shape& shape, const std::vector<int64_t>& dims) {
  if (g.aval(x).shape == shape) return x;
  return g.add1("broadcast_in_dim", {x}, {{"shape", shape}, {"broadcast_dimensions", dims}});
}
int sum_to_shape(Graph& g, int x, Shape shape) {
  const Shape xs = g.aval(x).shape;
  if (xs == shape) return x;
  int lead = int(xs.size()) - int(shape.size());
  std::vector<int64_t> axes;
  for (int i = 0; i < int(xs.size()); ++i)
    if (i < lead || (shape[i - lead] == 1 && xs[i] != 1)) axes.push_back(i);
  int r = reduce_sum(g, x, axes);
  return reshape(g, r, shape);
}
}  // namespace ops
}  // namespace podlet
