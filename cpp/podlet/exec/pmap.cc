// pmap executor: see pmap.h. Per-replica values are views into one [n, ...] buffer
// whenever the kernel writes its own output, so graph outputs need no gathering copy.
#include "podlet/exec/pmap.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <exception>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include "podlet/parallel.h"
#include "podlet/prims/common.h"
#include "podlet/ir/subgraph.h"

namespace podlet {

static std::shared_ptr<Comm> g_comm;
static bool g_merge = [] { const char* e = std::getenv("PODLET_PMAP_MERGE"); return !(e && e[0] == '0'); }();
void set_pmap_merge(bool on) { g_merge = on; }
bool pmap_merge() { return g_merge; }
static bool g_replica_parallel = [] { const char* e = std::getenv("PODLET_PMAP_PARALLEL"); return !(e && e[0] == '0'); }();
void set_pmap_replica_parallel(bool on) { g_replica_parallel = on; }
bool pmap_replica_parallel() { return g_replica_parallel; }
void set_comm(std::shared_ptr<Comm> c) { g_comm = std::move(c); }
Comm* comm() { return g_comm.get(); }

std::vector<std::string> process_allgather_bytes(const std::string& mine) {
  Comm* c = comm();
  if (!c || c->size() == 1) return {mine};
  const int P = c->size();
  std::vector<int64_t> lens(P);
  int64_t n = int64_t(mine.size());
  c->allgather(&n, sizeof n, lens.data());  // lengths first, then the padded payloads
  const int64_t m = *std::max_element(lens.begin(), lens.end());
  std::vector<std::string> out(P);
  if (m == 0) return out;
  std::string padded = mine;
  padded.resize(size_t(m));
  std::string all(size_t(m) * P, '\0');
  c->allgather(padded.data(), size_t(m), all.data());
  for (int p = 0; p < P; ++p) out[p] = all.substr(size_t(p) * size_t(m), size_t(lens[p]));
  return out;
}

// Per-(primitive, dtype, how) counters of the pmap executor while profiling is on
// (podlet.profile merges them with run_graph's). FLOPs and bytes count every replica
// the node ran for.
static std::mutex g_pprof_mu;
static std::map<std::tuple<std::string, std::string, std::string>, ProfileEntry> g_pprof;

std::map<std::tuple<std::string, std::string, std::string>, ProfileEntry> take_pmap_profile() {
  std::lock_guard<std::mutex> lk(g_pprof_mu);
  auto r = std::move(g_pprof);
  g_pprof.clear();
  return r;
}

namespace {

void record_pmap_profile(const Graph& g, const Node& n, const char* how, int reps, double seconds) {
  double flops = 0, bytes = 0;
  std::vector<AVal> ia, oa;
  for (int v : n.in) { ia.push_back(g.avals[v]); bytes += double(g.avals[v].nbytes()); }
  for (int v : n.out) { oa.push_back(g.avals[v]); bytes += double(g.avals[v].nbytes()); }
  if (n.prim->flops) flops = n.prim->flops(ia, oa, n.attrs);
  std::lock_guard<std::mutex> lk(g_pprof_mu);
  auto& e = g_pprof[{n.prim->name, oa.empty() ? "" : dtype_name(oa[0].dtype), how}];
  e.calls += 1;
  e.seconds += seconds;
  e.flops += flops * reps;
  e.bytes += bytes * reps;
}

struct Value {
  std::vector<Array> per;  // size 1 when replicated, else n_local
  bool replicated = false;
  bool live() const { return !per.empty(); }
  const Array& at(int r) const { return replicated ? per[0] : per[r]; }
};

Array view(const Array& base, const AVal& a, size_t offset_bytes) {
  return Array(a.dtype, a.shape, static_cast<char*>(base.raw()) + offset_bytes, base.storage());
}

Shape with_lead(int64_t n, const Shape& s) {
  Shape r{n};
  r.insert(r.end(), s.begin(), s.end());
  return r;
}

// The replicas' buffers as one [n, ...] array: the existing one when they are views
// into it in order, else a copy.
Array stacked(const Value& v, const AVal& a, int n) {
  size_t nb = a.nbytes();
  if (!v.replicated) {
    bool contiguous = true;
    for (int r = 0; r < n && contiguous; ++r)
      contiguous = v.per[r].storage() == v.per[0].storage() &&
                   static_cast<char*>(v.per[r].raw()) == static_cast<char*>(v.per[0].raw()) + r * nb;
    if (contiguous && nb > 0) return Array(a.dtype, with_lead(n, a.shape), v.per[0].raw(), v.per[0].storage());
  }
  Array out(a.dtype, with_lead(n, a.shape));
  for (int r = 0; r < n; ++r) std::memcpy(static_cast<char*>(out.raw()) + r * nb, v.at(r).raw(), nb);
  return out;
}

// Every replica's buffer of `v`, all processes included, in global replica order.
Array gather_global(const Value& v, const AVal& a, int n_local) {
  Array local = stacked(v, a, n_local);
  Comm* c = comm();
  if (!c || c->size() == 1) return local;
  Array all(a.dtype, with_lead(int64_t(n_local) * c->size(), a.shape));
  c->allgather(local.raw(), local.nbytes(), all.raw());
  return all;
}

template <class T> T add_wrap(T a, T b) {
  if constexpr (std::is_same_v<T, int32_t>) return int32_t(uint32_t(a) + uint32_t(b));
  else return a + b;
}

enum class Red { sum, mean, max, min };

// out = reduce over the N buffers of g (shape [N, ...]), replica 0 first.
void reduce_replicas(Red op, const Array& g, Array& out, int64_t N) {
  int64_t m = out.size();
  PODLET_DTYPE_SWITCH(out.dtype(), T, {
    if constexpr (std::is_same_v<T, bool>) {
      throw DTypeError("collective reduction of bool");
    } else {
      const T* src = static_cast<const T*>(g.raw());
      T* dst = static_cast<T*>(out.raw());
      using A = acc_t<T>;
      parallel_for(m, 4096, [&](int64_t b, int64_t e) {
        if (op == Red::sum || op == Red::mean) {
          for (int64_t i = b; i < e; ++i) {
            A acc = A(src[i]);
            for (int64_t r = 1; r < N; ++r) acc = add_wrap<A>(acc, A(src[r * m + i]));
            // pmean is psum(x) / n, as in JAX (a true division, not a multiply by 1/n).
            if constexpr (std::is_floating_point_v<A>) { if (op == Red::mean) acc = acc / A(N); }
            dst[i] = from_acc<T>(acc);
          }
        } else {
          for (int64_t i = b; i < e; ++i) {
            A best = A(src[i]);
            for (int64_t r = 1; r < N; ++r) {
              A x = A(src[r * m + i]);
              if constexpr (std::is_floating_point_v<A>) {
                if (best != best) break;               // NaN wins, as in lax.max / lax.min
                if (x != x) { best = x; break; }
              }
              if (op == Red::max ? x > best : x < best) best = x;
            }
            dst[i] = from_acc<T>(best);
          }
        }
      });
    }
  });
}

// The same, reading bf16 buffers that stand for the f32 values convert_element_type would
// have made of them (widening is exact, so the bits are those of converting first).
void reduce_replicas_widening(Red op, const Array& g, Array& out, int64_t N) {
  const int64_t m = out.size();
  const bf16* src = static_cast<const bf16*>(g.raw());
  float* dst = static_cast<float*>(out.raw());
  parallel_for(m, 4096, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      float acc = float(src[i]);
      for (int64_t r = 1; r < N; ++r) acc = acc + float(src[r * m + i]);
      if (op == Red::mean) acc = acc / float(N);
      dst[i] = acc;
    }
  });
}

// The replicas' buffers of v as one [n, ...] array, if they already are one (no copy).
bool as_stack(const Value& v, const AVal& a, int n, Array* out) {
  size_t nb = a.nbytes();
  if (v.replicated || nb == 0) return false;
  for (int r = 0; r < n; ++r)
    if (v.per[r].storage() != v.per[0].storage() ||
        static_cast<char*>(v.per[r].raw()) != static_cast<char*>(v.per[0].raw()) + r * nb)
      return false;
  *out = Array(a.dtype, with_lead(n, a.shape), v.per[0].raw(), v.per[0].storage());
  return true;
}

Array reshaped(const Array& x, Shape s) { return Array(x.dtype(), std::move(s), x.raw(), x.storage()); }
Shape fold_lead(int64_t n, const Shape& s) { Shape r = s; r[0] *= n; return r; }

const std::set<std::string>& elementwise_prims() {
  static const std::set<std::string> s{
      "exp", "log", "log1p", "expm1", "tanh", "logistic", "sqrt", "rsqrt", "erf", "erf_inv", "sin", "cos",
      "floor", "ceil", "round", "neg", "abs", "sign", "not", "is_finite", "integer_pow", "add", "sub", "mul",
      "div", "pow", "max", "min", "rem", "atan2", "and", "or", "xor", "shift_left", "shift_right_logical",
      "shift_right_arithmetic", "eq", "ne", "lt", "le", "gt", "ge", "select", "clamp", "convert_element_type",
      "bitcast_convert_type", "stop_gradient"};
  return s;
}

// Runs node n once over every replica's buffer when the per-replica results are, by
// construction, slices of the merged result: elementwise ops (replica axis in front,
// replicated operands broadcast over it) and ops batched over dimension 0 of a
// per-replica operand with replicated weights (conv, conv_bwd_data, dense dot_general),
// whose kernels compute every output row with the same arithmetic whatever the batch.
// One kernel call instead of n keeps 8 virtual devices close to the cost of one.
bool run_merged(const Graph& g, const Node& n, std::vector<Value>& vals, int nrep, std::vector<Array>& bufs) {
  if (n.prim->kernel_allocates || n.out.empty()) return false;
  const std::string& name = n.prim->name;
  std::vector<Array> in(n.in.size());
  std::vector<Array> out(n.out.size());
  Attrs attrs = n.attrs;
  auto stack_in = [&](size_t k, bool fold) {
    const AVal& a = g.avals[n.in[k]];
    if (a.shape.empty() && fold) return false;
    if (!as_stack(vals[n.in[k]], a, nrep, &in[k])) return false;
    if (fold) in[k] = reshaped(in[k], fold_lead(nrep, a.shape));
    return true;
  };
  bool fold = true;
  if (elementwise_prims().count(name)) {
    fold = false;
    const Shape& os = g.avals[n.out[0]].shape;
    for (size_t k = 0; k < n.in.size(); ++k) {
      if (vals[n.in[k]].replicated) { in[k] = vals[n.in[k]].per[0]; continue; }
      if (g.avals[n.in[k]].shape != os || !stack_in(k, false)) return false;
    }
  } else if (name == "fused_elementwise") {
    // Elementwise over a leading replica dim too: each load gets that dim with the
    // stride of its operand's replica (0 for a replicated operand). Column sums are per
    // replica, so a node that has them runs per replica.
    if (!n.attrs.ints("reduced", {}).empty()) return false;
    fold = false;
    std::vector<int64_t> lead(n.in.size(), 0);
    for (size_t k = 0; k < n.in.size(); ++k) {
      if (vals[n.in[k]].replicated) { in[k] = vals[n.in[k]].per[0]; continue; }
      // A smaller per-replica operand (a per-replica vector read with broadcast strides)
      // would turn its load into the slow general walk: run per replica instead.
      if (g.avals[n.in[k]].size() != n.attrs.i("n") || !stack_in(k, false)) return false;
      lead[k] = g.avals[n.in[k]].size();
    }
    std::vector<int64_t> loads = n.attrs.ints("loads"), l2, outs = n.attrs.ints("outs"), o2;
    for (size_t k = 0; k < loads.size();) {
      const int64_t input = loads[k], r = loads[k + 1];
      l2.insert(l2.end(), {input, r + 1, int64_t(nrep)});
      l2.insert(l2.end(), loads.begin() + k + 2, loads.begin() + k + 2 + r);
      l2.push_back(lead.at(input));
      l2.insert(l2.end(), loads.begin() + k + 2 + r, loads.begin() + k + 2 + 2 * r);
      k += 2 + 2 * r;
    }
    for (size_t k = 0; k < outs.size();) {
      const int64_t r = outs[k + 1];
      o2.insert(o2.end(), {outs[k], r + 1, int64_t(nrep)});
      o2.insert(o2.end(), outs.begin() + k + 2, outs.begin() + k + 2 + r);
      k += 2 + r;
    }
    attrs.set("n", n.attrs.i("n") * nrep);
    attrs.set("loads", l2);
    attrs.set("outs", o2);
  } else if (name == "conv_general_dilated" || name == "conv_bwd_data") {
    if (vals[n.in[0]].replicated || !vals[n.in[1]].replicated || !stack_in(0, true)) return false;
    in[1] = vals[n.in[1]].per[0];
    if (name == "conv_bwd_data") attrs.set("lhs_shape", fold_lead(nrep, attrs.ints("lhs_shape")));
  } else if (name == "dot_general") {
    if (!n.attrs.ints("out_perm", {}).empty()) return false;  // its output does not lead with the batch
    auto lc = n.attrs.ints("lhs_contracting"), lb = n.attrs.ints("lhs_batch"), rb = n.attrs.ints("rhs_batch");
    bool l_rep = vals[n.in[0]].replicated, r_rep = vals[n.in[1]].replicated;
    if (lb.empty() && !l_rep && r_rep) {
      for (auto d : lc) if (d == 0) return false;
      if (!stack_in(0, true)) return false;
      in[1] = vals[n.in[1]].per[0];
    } else if (!lb.empty() && lb[0] == 0 && rb[0] == 0 && !l_rep && !r_rep) {
      if (!stack_in(0, true) || !stack_in(1, true)) return false;
    } else {
      return false;
    }
  } else {
    return false;
  }
  for (size_t k = 0; k < n.out.size(); ++k) {
    const AVal& a = g.avals[n.out[k]];
    if (fold && a.shape.empty()) return false;
    out[k] = reshaped(bufs[k], fold ? fold_lead(nrep, a.shape) : with_lead(nrep, a.shape));
  }
  n.prim->kernel(in, out, attrs);
  for (size_t k = 0; k < n.out.size(); ++k) {
    const AVal& a = g.avals[n.out[k]];
    for (int r = 0; r < nrep; ++r) vals[n.out[k]].per.push_back(view(bufs[k], a, size_t(r) * a.nbytes()));
  }
  return true;
}

// Runs node n for replicas 0..reps-1 side by side (replicas spread over the threads,
// each kernel call serial); outputs go to bufs as in the sequential loop. An error names
// the lowest failing replica, as the sequential loop would.
void run_replicas_parallel(const Graph& g, const Node& n, std::vector<Value>& vals, int reps,
                           std::vector<Array>& bufs) {
  std::vector<std::vector<Array>> outs(reps);
  std::vector<std::exception_ptr> err(reps);
  const int nt = std::min(num_threads(), reps);
  auto one = [&](int r) {
    SerialScope serial;
    try {
      std::vector<Array> in;
      for (int v : n.in) in.push_back(vals[v].at(r));
      auto& out = outs[r];
      for (size_t k = 0; k < n.out.size(); ++k) {
        const AVal& a = g.avals[n.out[k]];
        out.push_back(view(bufs[k], a, size_t(r) * a.nbytes()));
      }
      n.prim->kernel(in, out, n.attrs);
    } catch (...) {
      err[r] = std::current_exception();
    }
  };
#if defined(PODLET_SANITIZE_THREAD)
  dynamic_on_threads(nt, reps, one);
#else
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
  for (int r = 0; r < reps; ++r) one(r);
#endif
  for (int r = 0; r < reps; ++r) {
    if (!err[r]) continue;
    try {
      std::rethrow_exception(err[r]);
    } catch (const Error&) {
      rethrow_prefixed(fmt("(replica ", r, ") "));
    }
  }
  for (size_t k = 0; k < n.out.size(); ++k)
    for (int r = 0; r < reps; ++r) vals[n.out[k]].per.push_back(std::move(outs[r][k]));
}

bool is_collective(const std::string& name) {
  return name == "psum" || name == "pmean" || name == "pmax" || name == "pmin" || name == "all_gather" ||
         name == "ppermute" || name == "axis_index";
}

// Runs collective node `n`; sets vals[n.out[0]]. `widen`: its (psum/pmean) operand holds
// the bf16 buffers of a deferred bf16 -> f32 conversion.
void run_collective(const Graph& g, const Node& n, std::vector<Value>& vals, int n_local, bool widen) {
  const std::string& name = n.prim->name;
  const AVal& oa = g.avals[n.out[0]];
  Comm* c = comm();
  int nproc = c ? c->size() : 1, rank = c ? c->rank() : 0;
  int64_t N = int64_t(n_local) * nproc;
  if (n.attrs.i("axis_size") != N)
    throw ValueError(fmt(name, " over axis '", n.attrs.s("axis_name"), "' was traced for ", n.attrs.i("axis_size"),
                         " replicas but runs on ", N));
  Value& out = vals[n.out[0]];
  if (name == "axis_index") {
    Array all(DType::i32, {n_local});
    for (int r = 0; r < n_local; ++r) static_cast<int32_t*>(all.raw())[r] = rank * n_local + r;
    out.replicated = false;
    for (int r = 0; r < n_local; ++r) out.per.push_back(view(all, oa, size_t(r) * 4));
    return;
  }
  const AVal& ia = g.avals[n.in[0]];
  // A widened operand crosses processes as bf16: half the bytes.
  Array G = gather_global(vals[n.in[0]], widen ? AVal{DType::bf16, ia.shape} : ia, n_local);
  if (name == "ppermute") {
    auto perm = n.attrs.ints("perm");
    Array all(oa.dtype, with_lead(n_local, oa.shape));
    size_t nb = oa.nbytes();
    std::memset(all.raw(), 0, all.nbytes());  // replicas nobody sends to receive zeros, as in JAX
    for (size_t k = 0; k < perm.size(); k += 2) {
      int64_t src = perm[k], dst = perm[k + 1] - int64_t(rank) * n_local;
      if (dst >= 0 && dst < n_local)
        std::memcpy(static_cast<char*>(all.raw()) + dst * nb, static_cast<char*>(G.raw()) + src * nb, nb);
    }
    out.replicated = false;
    for (int r = 0; r < n_local; ++r) out.per.push_back(view(all, oa, size_t(r) * nb));
    return;
  }
  Array res(oa);
  if (name == "all_gather") {
    // G is [N, S]; the result puts the replica axis at `axis`: [A, N, B] with
    // A = prod(S[:axis]) and B the rest (for tiled, the replica blocks sit inside
    // dimension `axis`, which is the same memory order).
    const Shape& xs = ia.shape;
    int64_t rank_x = int64_t(xs.size());
    bool tiled = n.attrs.i("tiled", 0) != 0;
    int64_t ax = n.attrs.i("axis", 0);
    if (ax < 0) ax += tiled ? rank_x : rank_x + 1;
    int64_t A = 1, B = 1;
    for (int64_t d = 0; d < rank_x; ++d) (d < ax ? A : B) *= xs[d];
    size_t isz = itemsize(oa.dtype), row = size_t(B) * isz;
    const char* src = static_cast<const char*>(G.raw());
    char* dst = static_cast<char*>(res.raw());
    for (int64_t a = 0; a < A; ++a)
      for (int64_t r = 0; r < N; ++r)
        std::memcpy(dst + (a * N + r) * row, src + (r * A + a) * row, row);
  } else {
    Red op = name == "psum" ? Red::sum : name == "pmean" ? Red::mean : name == "pmax" ? Red::max : Red::min;
    if (widen) reduce_replicas_widening(op, G, res, N);
    else reduce_replicas(op, G, res, N);
  }
  out.replicated = true;
  out.per = {res};
}

// ---- nodes whose sub-graphs hold collectives ------------------------------------------
// Their kernels would run each replica's sub-graph alone, where a collective has no
// replicas to combine; instead the executor runs the sub-graph itself, over every replica
// at once (a scan: one such run per iteration, the replicas in lockstep, as on devices).
bool has_collective(const Graph& g) {
  for (const Node& n : g.nodes) {
    if (is_collective(n.prim->name)) return true;
    for (auto& r : subgraphs_of(n.attrs)) if (has_collective(*r)) return true;
  }
  return false;
}

bool holds_collectives(const Node& n) {
  static std::mutex mu;
  static std::map<const Graph*, std::pair<std::weak_ptr<const Graph>, bool>> memo;
  for (auto& gr : subgraphs_of(n.attrs)) {
    std::lock_guard<std::mutex> lk(mu);
    auto it = memo.find(gr.get());
    bool h;
    if (it != memo.end() && it->second.first.lock() == gr) {
      h = it->second.second;
    } else {
      h = has_collective(*gr);
      memo[gr.get()] = {gr, h};
    }
    if (h) return true;
  }
  return false;
}

std::vector<Value> run_sub_pmap(const GraphRef& body, const std::vector<Value>& args, int n_local) {
  const Graph& b = *body;
  std::vector<Array> arrs;
  std::vector<bool> rep;
  for (size_t k = 0; k < args.size(); ++k) {
    rep.push_back(args[k].replicated);
    arrs.push_back(args[k].replicated ? args[k].per[0] : stacked(args[k], b.avals[b.inputs[k]], n_local));
  }
  PmapOutputs o = run_graph_pmap(*executable_subgraph(body), arrs, rep, n_local);
  std::vector<Value> out(o.values.size());
  for (size_t k = 0; k < out.size(); ++k) {
    out[k].replicated = o.replicated[k];
    if (o.replicated[k]) {
      out[k].per = {o.values[k]};
      continue;
    }
    const AVal& a = b.avals[b.outputs[k]];
    for (int r = 0; r < n_local; ++r) out[k].per.push_back(view(o.values[k], a, size_t(r) * a.nbytes()));
  }
  return out;
}

void set_outputs(const Node& n, std::vector<Value>& vals, std::vector<Value>&& outs) {
  for (size_t k = 0; k < n.out.size(); ++k) vals[n.out[k]] = std::move(outs[k]);
}

// scan: each iteration's body over every replica; ys stacked per replica.
void run_scan_pmap(const Graph& g, const Node& n, std::vector<Value>& vals, int n_local) {
  const Attrs& a = n.attrs;
  const GraphRef& body = a.graph("body");
  const int64_t nc = a.i("num_consts"), nh = a.i("num_carry"), T = a.i("length");
  const bool reverse = a.i("reverse", 0) != 0;
  const int64_t nx = int64_t(n.in.size()) - nc - nh, ny = int64_t(body->outputs.size()) - nh;
  std::vector<Value> args(n.in.size());
  for (int64_t k = 0; k < nc + nh; ++k) args[k] = vals[n.in[k]];
  std::vector<Array> ys;
  for (int64_t k = 0; k < ny; ++k) {
    const AVal& y = g.avals[n.out[nh + k]];  // [T, ...]
    ys.push_back(Array(y.dtype, with_lead(n_local, y.shape)));
  }
  for (int64_t t = 0; t < T; ++t) {
    const int64_t i = reverse ? T - 1 - t : t;
    for (int64_t k = 0; k < nx; ++k) {
      const Value& x = vals[n.in[nc + nh + k]];
      const AVal& row = body->avals[body->inputs[nc + nh + k]];
      Value v;
      v.replicated = x.replicated;
      for (const Array& p : x.per) v.per.push_back(view(p, row, size_t(i) * row.nbytes()));
      args[nc + nh + k] = std::move(v);
    }
    std::vector<Value> r = run_sub_pmap(body, args, n_local);
    for (int64_t k = 0; k < nh; ++k) args[nc + k] = std::move(r[k]);
    for (int64_t k = 0; k < ny; ++k) {
      const size_t rb = body->avals[body->outputs[nh + k]].nbytes();
      for (int q = 0; q < n_local; ++q)
        if (rb) std::memcpy(static_cast<char*>(ys[k].raw()) + (size_t(q) * size_t(T) + size_t(i)) * rb, r[nh + k].at(q).raw(), rb);
    }
  }
  std::vector<Value> outs;
  for (int64_t k = 0; k < nh; ++k) outs.push_back(std::move(args[nc + k]));
  for (int64_t k = 0; k < ny; ++k) {
    const AVal& y = g.avals[n.out[nh + k]];
    Value v;
    for (int q = 0; q < n_local; ++q) v.per.push_back(view(ys[k], y, size_t(q) * y.nbytes()));
    outs.push_back(std::move(v));
  }
  set_outputs(n, vals, std::move(outs));
}

// The other sub-graph nodes: checkpoint and the custom rules run their body once; cond
// runs the branch its (replicated) index picks; while_loop runs while its predicate,
// equal on every replica, holds. Returns false for a node it does not handle.
bool run_subgraph_node_pmap(const Graph& g, const Node& n, std::vector<Value>& vals, int n_local) {
  const std::string& name = n.prim->name;
  auto ins = [&](size_t from, size_t to) {
    std::vector<Value> r;
    for (size_t k = from; k < to; ++k) r.push_back(vals[n.in[k]]);
    return r;
  };
  if (name == "scan") {
    run_scan_pmap(g, n, vals, n_local);
  } else if (name == "checkpoint") {
    set_outputs(n, vals, run_sub_pmap(n.attrs.graph("body"), ins(0, n.in.size()), n_local));
  } else if (name == "custom_vjp_call" || name == "custom_jvp_call") {
    const size_t nf = size_t(n.attrs.i("n_args") + n.attrs.i("n_fcap"));
    set_outputs(n, vals, run_sub_pmap(n.attrs.graph("f"), ins(0, nf), n_local));
  } else if (name == "cond") {
    const Value& idx = vals[n.in[0]];
    if (!idx.replicated)
      throw ValueError("cond: under pmap, a branch index that differs between replicas cannot pick branches "
                       "that hold collectives (each replica would wait for the others in another branch)");
    const auto& br = n.attrs.graphs("branches");
    const int64_t b = std::clamp<int64_t>(*static_cast<const int32_t*>(idx.per[0].raw()), 0, int64_t(br.size()) - 1);
    set_outputs(n, vals, run_sub_pmap(br[size_t(b)], ins(1, n.in.size()), n_local));
  } else if (name == "while_loop") {
    const size_t ncc = size_t(n.attrs.i("num_cond_consts")), nbc = size_t(n.attrs.i("num_body_consts"));
    const std::vector<Value> cc = ins(0, ncc), bc = ins(ncc, ncc + nbc);
    std::vector<Value> carry = ins(ncc + nbc, n.in.size());
    for (;;) {
      std::vector<Value> ca = cc;
      ca.insert(ca.end(), carry.begin(), carry.end());
      const Value p = run_sub_pmap(n.attrs.graph("cond"), ca, n_local)[0];
      const bool go = *static_cast<const uint8_t*>(p.at(0).raw()) != 0;
      for (int r = 1; r < n_local && !p.replicated; ++r)
        if ((*static_cast<const uint8_t*>(p.at(r).raw()) != 0) != go)
          throw ValueError("while_loop: under pmap, the replicas disagree on the predicate of a loop whose body "
                           "holds collectives; make it the same on every replica (e.g. with pmax)");
      if (!go) break;
      std::vector<Value> ba = bc;
      ba.insert(ba.end(), carry.begin(), carry.end());
      carry = run_sub_pmap(n.attrs.graph("body"), ba, n_local);
    }
    set_outputs(n, vals, std::move(carry));
  } else {
    return false;
  }
  return true;
}

}  // namespace

PmapOutputs run_graph_pmap(const Graph& g, const std::vector<Array>& args, const std::vector<bool>& replicated,
                           int n_local) {
  if (n_local < 1) throw ValueError(fmt("pmap needs at least one local device, got ", n_local));
  if (args.size() != g.inputs.size() || replicated.size() != args.size())
    throw ValueError(fmt("pmap graph takes ", g.inputs.size(), " inputs, got ", args.size()));
  std::vector<Value> vals(g.num_values());
  for (size_t i = 0; i < args.size(); ++i) {
    const AVal& want = g.avals[g.inputs[i]];
    Value& v = vals[g.inputs[i]];
    if (replicated[i]) {
      if (!(args[i].aval() == want))
        throw ShapeError(fmt("pmap input ", i, " (replicated) is ", dtype_name(args[i].dtype()),
                             shape_str(args[i].shape()), ", the traced function expects ", dtype_name(want.dtype),
                             shape_str(want.shape)));
      v.replicated = true;
      v.per = {args[i]};
    } else {
      AVal full{want.dtype, with_lead(n_local, want.shape)};
      if (!(args[i].aval() == full))
        throw ShapeError(fmt("pmap input ", i, " is ", dtype_name(args[i].dtype()), shape_str(args[i].shape()),
                             ", expected ", dtype_name(full.dtype), shape_str(full.shape),
                             " (a leading axis of one entry per local device)"));
      for (int r = 0; r < n_local; ++r) v.per.push_back(view(args[i], want, size_t(r) * want.nbytes()));
    }
  }
  for (auto& [id, arr] : g.consts) { vals[id].replicated = true; vals[id].per = {arr}; }
  std::vector<int> last(g.num_values(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i) for (int v : g.nodes[i].in) last[v] = int(i);
  for (int v : g.outputs) last[v] = int(g.nodes.size());
  // convert_element_type(bf16 -> f32) whose only use is a psum/pmean (every gradient of a
  // bf16 model before its pmean): the collective widens while reducing instead, so the
  // replicas' f32 copies of the gradients are never written.
  std::vector<char> defer(g.nodes.size(), 0), narrow(g.num_values(), 0);
  {
    std::vector<int> uses(g.num_values(), 0), producer(g.num_values(), -1);
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      for (int v : g.nodes[i].in) ++uses[v];
      for (int v : g.nodes[i].out) producer[v] = int(i);
    }
    for (int v : g.outputs) ++uses[v];
    for (const Node& n : g.nodes) {
      if (n.prim->name != "psum" && n.prim->name != "pmean") continue;
      int y = n.in[0], p = producer[y];
      if (p < 0 || uses[y] != 1) continue;
      const Node& c = g.nodes[p];
      if (c.prim->name == "convert_element_type" && g.avals[c.in[0]].dtype == DType::bf16 &&
          g.avals[y].dtype == DType::f32)
        defer[p] = 1;
    }
  }

  std::vector<Array> in, out;
  const bool prof = profiling();
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    const std::string& name = n.prim->name;
    bool continue_node = false;
    const char* how = "collective";
    int how_reps = 1;
    auto t0 = prof ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
    try {
      if (defer[i]) {  // see above: the value stands for its bf16 operand until its collective
        vals[n.out[0]] = vals[n.in[0]];
        narrow[n.out[0]] = 1;
        how = "deferred";
      } else if (is_collective(name)) {
        run_collective(g, n, vals, n_local, !n.in.empty() && narrow[n.in[0]]);
      } else if (holds_collectives(n) && run_subgraph_node_pmap(g, n, vals, n_local)) {
        how = "sub-graph";
      } else {
        bool all_rep = true;
        for (int v : n.in) all_rep = all_rep && vals[v].replicated;
        int reps = all_rep ? 1 : n_local;
        // Outputs the kernel writes itself go into one [reps, ...] buffer per output.
        std::vector<Array> bufs;
        for (int v : n.out)
          bufs.push_back(n.prim->kernel_allocates ? Array() : Array(g.avals[v].dtype, with_lead(reps, g.avals[v].shape)));
        for (int v : n.out) { vals[v].replicated = all_rep; vals[v].per.clear(); }
        how = all_rep ? "once" : "per-replica";
        how_reps = reps;
        if (!all_rep && g_merge && run_merged(g, n, vals, n_local, bufs)) { continue_node = true; how = "merged"; }
        if (!continue_node && reps > 1 && g_replica_parallel && !n.prim->kernel_allocates && num_threads() > 1) {
          run_replicas_parallel(g, n, vals, reps, bufs);
          continue_node = true;
        }
        for (int r = 0; r < reps && !continue_node; ++r) {
          in.clear();
          for (int v : n.in) in.push_back(vals[v].at(r));
          out.clear();
          for (size_t k = 0; k < n.out.size(); ++k) {
            const AVal& a = g.avals[n.out[k]];
            out.push_back(n.prim->kernel_allocates ? Array() : view(bufs[k], a, size_t(r) * a.nbytes()));
          }
          try { n.prim->kernel(in, out, n.attrs); }
          catch (const Error&) {
            if (reps > 1) rethrow_prefixed(fmt("(replica ", r, ") "));
            throw;
          }
          for (size_t k = 0; k < n.out.size(); ++k) vals[n.out[k]].per.push_back(std::move(out[k]));
        }
      }
    } catch (const Error&) {
      rethrow_prefixed(name + (n.where.empty() ? "" : " (" + n.where + ")") + ": ");
    }
    for (int v : n.in) if (last[v] == int(i)) vals[v] = Value();
    if (prof)
      record_pmap_profile(g, n, how, how_reps,
                          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  PmapOutputs res;
  for (int v : g.outputs) {
    const Value& x = vals[v];
    res.replicated.push_back(x.replicated);
    res.values.push_back(x.replicated ? x.per[0] : stacked(x, g.avals[v], n_local));
  }
  return res;
}

}  // namespace podlet
