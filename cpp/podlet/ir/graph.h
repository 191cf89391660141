// Graph: values (shape + dtype) and nodes (primitive + attrs), in trace order, which is
// a topological order. jit traces into a Graph; autodiff appends the backward pass to
// one; the executor runs one.
#pragma once
#include <string>
#include <vector>
#include <utility>
#include <map>
#include "podlet/prim.h"

namespace podlet {

struct Node {
  const PrimDef* prim = nullptr;
  Attrs attrs;
  std::vector<int> in, out;
  std::string where;  // user source line that created it, for error messages
};

class Graph {
 public:
  std::vector<AVal> avals;                  // by value id
  std::vector<int> inputs, outputs;
  std::vector<std::pair<int, Array>> consts;
  std::vector<Node> nodes;
  std::vector<int> producer;                // value id -> node index (-1: input/const)

  int add_input(const AVal& a);
  int add_const(const Array& a);
  // Appends prim(in) and returns its output value ids; runs the shape rule, so shape
  // errors surface here, at trace time.
  std::vector<int> add(const std::string& prim, const std::vector<int>& in, const Attrs& attrs = {},
                       const std::string& where = "");
  std::vector<int> add(const PrimDef& prim, const std::vector<int>& in, const Attrs& attrs,
                       const std::string& where = "");
  int add1(const std::string& prim, const std::vector<int>& in, const Attrs& attrs = {}) {
    return add(prim, in, attrs)[0];
  }
  const AVal& aval(int v) const { return avals.at(v); }
  int num_values() const { return int(avals.size()); }
  // By value id: the nodes reading it, in node order (a node reading it twice, twice),
  // and whether it is a graph output (read from outside). The rewriting passes' view of
  // who reads what.
  std::vector<std::vector<int>> readers() const;
  std::vector<char> output_mask() const;
  // Replays `sub` here with its inputs bound to `args`; returns sub's outputs mapped.
  std::vector<int> inline_graph(const Graph& sub, const std::vector<int>& args, const std::string& where = "");
  // Drops nodes and constants no output depends on; renumbers nothing.
  void dce();
  std::string dump() const;
  double flops() const;
};

// Profiling counters of run_graph (the profiler's raw data): per primitive, or per
// (primitive, dtype of its first output) in the detailed form. bytes = bytes of the
// node's inputs + outputs (what it must move at least once).
struct ProfileEntry { int64_t calls = 0; double seconds = 0, flops = 0, bytes = 0; };
// by_shape: rows per (primitive + its inputs' dtypes and shapes, dtype) instead, so that
// e.g. each convolution layer of a network gets its own row.
void set_profiling(bool on, bool by_shape = false);
bool profiling();
bool profiling_by_shape();
std::map<std::string, ProfileEntry> take_profile();  // by primitive; clears the counters
std::map<std::pair<std::string, std::string>, ProfileEntry> take_profile_detailed();  // by (prim, dtype); clears

// Runs g on concrete inputs. Buffers are released after their last use.
std::vector<Array> run_graph(const Graph& g, const std::vector<Array>& args);
// Whether run_graph places intermediates by plan_memory (memory_plan.h) in one arena per
// run (default; PODLET_MEMORY_PLAN=0 in the environment or set_memory_plan(false): one
// pooled buffer per value instead).
void set_memory_plan(bool on);
bool memory_plan_enabled();

// Reverse-mode autodiff as a graph transformation. Returns a graph with inputs
// g.inputs + one cotangent input per entry of `ct_outputs` (indices into g.outputs),
// and outputs g.outputs + the cotangent of each input listed in `wrt` (indices into
// g.inputs; zeros where no gradient flows).
Graph vjp_graph(const Graph& g, const std::vector<int>& wrt, const std::vector<int>& ct_outputs);

// vmap as a graph transformation (batching.cc). in_bdim[i] is 0 when input i carries a
// mapped axis of `size` elements in front, -1 when it does not. Returns the batched
// graph (its inputs are g's, with the mapped axis added where in_bdim says) and sets
// out_bdim for g's outputs the same way. Collectives naming `axis_name` reduce over the
// mapped axis.
Graph batch_graph(const Graph& g, const std::vector<int>& in_bdim, int64_t size, const std::string& axis_name,
                  std::vector<int>& out_bdim);
// The same with every output carrying the mapped axis (sub-graphs of control-flow and
// custom-rule nodes, whose outputs must have one layout whatever the body computes).
Graph batch_graph_materialized(const Graph& g, const std::vector<int>& in_bdim, int64_t size,
                               const std::string& axis_name);

// Data-parallel partitioning (partition.cc): `g` is the global computation; in_dim[i]
// is the dimension input i is split along over n replicas (-1: replicated). Returns the
// per-replica graph (inputs are the local blocks), to run on the pmap executor with
// collectives over `axis_name`; out_dim gives each output's split dimension (-1:
// replicated; with gather_outputs every output is gathered whole). `fallbacks` counts,
// per primitive, the nodes that had to gather their inputs and run unsplit.
Graph partition_graph(const Graph& g, const std::vector<int>& in_dim, int64_t n, const std::string& axis_name,
                      bool gather_outputs, std::vector<int>& out_dim, std::map<std::string, int>& fallbacks);

}  // namespace podlet
