// The pmap executor: runs one traced Graph for every replica in lockstep. A value is
// either replicated (one buffer, provably equal on every replica: graph inputs marked
// so, constants, and anything computed only from replicated values or by a reducing
// collective) or per-replica (n buffers, usually views into one [n, ...] array). A
// node whose inputs are all replicated runs once, so the optimizer update after a
// pmean costs what it costs on one device. Collectives combine the replicas' buffers
// in global replica order, so results do not depend on threads or on how replicas are
// split over processes.
#pragma once
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>
#include "podlet/ir/graph.h"

namespace podlet {

// Exchange between processes (MPI), one participant per process. Implemented in
// exec/mpi_comm.cc when podlet is built against MPI.
class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Every process contributes `bytes` bytes; recv receives size() * bytes, in rank order.
  virtual void allgather(const void* send, size_t bytes, void* recv) = 0;
  virtual void barrier() = 0;
};
void set_comm(std::shared_ptr<Comm> c);  // nullptr: single process
Comm* comm();

// Host-side exchange for the training loop (podlet.distributed): every process's bytes,
// of any lengths, in process order ({mine} in a single process).
std::vector<std::string> process_allgather_bytes(const std::string& mine);

struct PmapOutputs {
  std::vector<Array> values;      // replicated: the one buffer; else [n_local, ...]
  std::vector<bool> replicated;
};

// args[i] is the single buffer when replicated[i], else an array [n_local, ...] of the
// graph input's shape. Collectives span n_local * comm()->size() replicas; this
// process holds replicas rank * n_local ... rank * n_local + n_local - 1.
PmapOutputs run_graph_pmap(const Graph& g, const std::vector<Array>& args,
                           const std::vector<bool>& replicated, int n_local);

// The pmap executor's profiling counters (while ir/graph.h's profiling() is on), by
// (primitive, dtype of its first output, how it ran: "once" for replicated values,
// "deferred" for a bf16 -> f32 conversion folded into the psum/pmean that uses it,
// "merged" over the replicas' buffers, "per-replica", or "collective"); clears them.
std::map<std::tuple<std::string, std::string, std::string>, ProfileEntry> take_pmap_profile();

// Running batch-separable nodes once over all replicas' buffers (on by default;
// PODLET_PMAP_MERGE=0 turns it off). Results are bit-identical either way.
void set_pmap_merge(bool on);
bool pmap_merge();
// Running the replicas of a node that is neither merged nor replicated side by side,
// each kernel call on one thread (on by default; PODLET_PMAP_PARALLEL=0 turns it off):
// many small per-replica calls (BatchNorm statistics, weight gradients of 8 small
// shards) parallelise better across replicas than inside each call. Bit-identical.
void set_pmap_replica_parallel(bool on);
bool pmap_replica_parallel();

}  // namespace podlet
