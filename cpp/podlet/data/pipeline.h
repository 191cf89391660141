// The input pipeline: source -> [shuffle] -> element ops (normalize / augment, in the
// order given) -> repeat and batch (either order, as tf.data) -> [take] -> [prefetch].
//
// Determinism. The stream is planned on indices first: repetition r of iterator k is the
// global epoch first_epoch + r; its order is the buffer shuffle keyed by (seed, epoch)
// (epoch 0 for every repetition when reshuffle_each_iteration is false). An element's
// augmentation is keyed by (augment seed, op, epoch, position in the epoch). Workers only
// fill slots of a batch that is already fully determined, so output bits do not depend on
// the number of threads or on scheduling, and any output item can be produced directly
// (start_item): a resumed run sees exactly the batches the uninterrupted one would have.
//
// Threads. Elements of a batch are processed by tbb::parallel_for inside a task_arena of
// `threads` slots. With prefetch > 0 a producer thread runs ahead, holding at most
// `prefetch` finished items; closing (or destroying) the iterator stops and joins it.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>
#include <oneapi/tbb/task_arena.h>
#include "podlet/data/augment.h"
#include "podlet/data/normalize.h"
#include "podlet/data/source.h"


namespace podlet::data {

struct ElementOp {
  enum Kind { kNormalize, kAugment } kind = kNormalize;
  NormalizeSpec normalize;
  AugmentSpec augment;
};

struct PipelineSpec {
  SourcePtr source;
  bool shuffle = false;
  int64_t shuffle_buffer = 1;
  uint64_t shuffle_seed = 0;
  bool reshuffle_each_iteration = true;
  std::vector<ElementOp> ops;
  int64_t batch_size = 0;          // 0: unbatched, each item is one element
  bool drop_remainder = false;
  int64_t repeat = 1;              // -1: forever
  bool repeat_before_batch = true; // ds.repeat().batch() (batches span epochs) vs batch().repeat()
  int64_t take = -1;               // at most this many items; -1: all
  // Batches only: keep part shard_index of shard_count equal contiguous parts of every
  // batch (the part one process of a multi-process run feeds to its devices). The plan,
  // hence which elements a batch holds and how each is augmented, is the unsharded one;
  // elements of other parts are never read. A short last batch (no drop_remainder) keeps
  // what falls into the part, possibly nothing.
  int64_t shard_count = 1;
  int64_t shard_index = 0;
  int64_t prefetch = 0;            // items computed ahead on a background thread
  int threads = 0;                 // 0: podlet::num_threads()
};

struct Batch {
  int64_t n = 0;
  int height = 0, width = 0, channels = 0;
  std::unique_ptr<float[]> image;  // n x H x W x C
  std::vector<int32_t> label;
  std::vector<std::string> id;
  std::vector<uint64_t> epoch;     // where each element came from (debug / resume checks)
  std::vector<int64_t> position;   // position in its epoch's (shuffled) order
  std::vector<int64_t> index;      // index in the source
};

// Index-level plan of the output stream.
class StreamPlan {
 public:
  StreamPlan(const PipelineSpec& spec, uint64_t first_epoch);
  int64_t num_items() const { return items_; }  // -1: infinite
  struct Elem { uint64_t epoch; int64_t position; int64_t index; };
  std::vector<Elem> item(int64_t k);  // not thread-safe (caches epoch orders)
  uint64_t shuffle_key(uint64_t epoch) const;

 private:
  const std::vector<int64_t>& order(uint64_t epoch);
  const PipelineSpec& spec_;
  uint64_t first_epoch_;
  int64_t n_, per_epoch_ = 0, items_ = 0;
  std::map<uint64_t, std::vector<int64_t>> orders_;
};

// Applies the element ops to one decoded record, writing H*W*C float32 values to out.
void process_element(const PipelineSpec& spec, const Record& rec, uint64_t epoch,
                     int64_t position, float* out);

class BatchIterator {
 public:
  BatchIterator(PipelineSpec spec, uint64_t first_epoch, int64_t start_item);
  ~BatchIterator();
  BatchIterator(const BatchIterator&) = delete;
  BatchIterator& operator=(const BatchIterator&) = delete;

  std::optional<Batch> next();  // nullopt at the end; rethrows a producer's error
  void close();                 // stops the producer; next() then returns nullopt
  int64_t num_items() const { return plan_.num_items(); }

 private:
  Batch produce(int64_t k);
  void run_producer();

  PipelineSpec spec_;
  StreamPlan plan_;
  int64_t next_item_;
  int h_ = 0, w_ = 0, c_ = 0;
  std::unique_ptr<tbb::task_arena> arena_;

  struct Slot { std::optional<Batch> batch; std::exception_ptr error; };
  std::mutex mu_;
  std::condition_variable has_data_, has_space_;
  std::deque<Slot> queue_;
  bool stop_ = false, producer_done_ = false, failed_ = false;
  std::thread producer_;
};

}  // namespace podlet::data
