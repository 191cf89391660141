#include "podlet/data/pipeline.h"

#include <algorithm>
#include <cstring>
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include "podlet/data/counter_rng.h"
#include "podlet/data/shuffle.h"
#include "podlet/error.h"
#include "podlet/parallel.h"

namespace podlet::data {

StreamPlan::StreamPlan(const PipelineSpec& spec, uint64_t first_epoch)
    : spec_(spec), first_epoch_(first_epoch), n_(spec.source->size()) {
  const int64_t B = std::max<int64_t>(spec.batch_size, 1);
  const bool drop = spec.batch_size > 0 && spec.drop_remainder;
  const bool forever = spec.repeat < 0;
  if (spec.repeat_before_batch || spec.batch_size == 0) {
    if (forever) {
      if (n_ == 0) throw ValueError(fmt("repeat() of an empty dataset (", spec.source->describe(), ") never yields"));
      items_ = -1;
    } else {
      int64_t total = spec.repeat * n_;
      items_ = drop ? total / B : (total + B - 1) / B;
    }
  } else {
    per_epoch_ = drop ? n_ / B : (n_ + B - 1) / B;
    if (forever) {
      if (per_epoch_ == 0)
        throw ValueError(fmt("batch(", B, ", drop_remainder=True).repeat() of ", spec.source->describe(),
                             " never yields: the dataset has fewer than ", B, " examples"));
      items_ = -1;
    } else {
      items_ = spec.repeat * per_epoch_;
    }
  }
  if (spec.take >= 0) items_ = items_ < 0 ? spec.take : std::min(items_, spec.take);
}

uint64_t StreamPlan::shuffle_key(uint64_t epoch) const {
  return fold(fold(spec_.shuffle_seed, 0x73687566ull /*"shuf"*/), spec_.reshuffle_each_iteration ? epoch : 0);
}

const std::vector<int64_t>& StreamPlan::order(uint64_t epoch) {
  auto it = orders_.find(epoch);
  if (it != orders_.end()) return it->second;
  // Batches touch at most two epochs at a time; keep the cache that small.
  while (orders_.size() >= 2) orders_.erase(orders_.begin());
  return orders_[epoch] = buffer_shuffle_order(n_, spec_.shuffle_buffer, shuffle_key(epoch));
}

std::vector<StreamPlan::Elem> StreamPlan::item(int64_t k) {
  const int64_t B = std::max<int64_t>(spec_.batch_size, 1);
  int64_t begin_r, begin_p, count;  // repetition, position, number of elements
  if (spec_.repeat_before_batch || spec_.batch_size == 0) {
    int64_t s = k * B, e = s + B;
    if (spec_.repeat >= 0) e = std::min(e, spec_.repeat * n_);
    begin_r = s / n_; begin_p = s % n_; count = e - s;
  } else {
    begin_r = k / per_epoch_;
    int64_t j = k % per_epoch_;
    begin_p = j * B; count = std::min(n_, begin_p + B) - begin_p;
  }
  std::vector<Elem> out;
  out.reserve(size_t(count));
  int64_t r = begin_r, p = begin_p;
  for (int64_t i = 0; i < count; ++i) {
    uint64_t epoch = first_epoch_ + uint64_t(r);
    int64_t index = spec_.shuffle ? order(epoch)[p] : p;
    out.push_back({epoch, p, index});
    if (++p == n_) { p = 0; ++r; }
  }
  return out;
}

void process_element(const PipelineSpec& spec, const Record& rec, uint64_t epoch, int64_t position,
                     float* out) {
  const int64_t P = int64_t(rec.height) * rec.width;
  const size_t len = size_t(P) * rec.channels;
  // Per-thread scratch: no allocation per element once a worker has warmed up.
  thread_local std::vector<float> cur, tmp;
  cur.resize(len);
  const uint8_t* px = rec.image.data();
  for (size_t i = 0; i < len; ++i) cur[i] = float(px[i]) / 255.0f;
  int aug_index = 0;
  for (const auto& op : spec.ops) {
    if (op.kind == ElementOp::kNormalize) {
      apply_normalize(op.normalize, cur.data(), P, rec.channels);
    } else {
      const AugmentSpec& a = op.augment;
      AugmentDraw d = draw_augment(a, augment_key(a, aug_index++, epoch, uint64_t(position)));
      tmp.resize(len);
      apply_augment(a, d, cur.data(), tmp.data(), rec.height, rec.width, rec.channels);
      cur.swap(tmp);
    }
  }
  std::memcpy(out, cur.data(), len * sizeof(float));
}

BatchIterator::BatchIterator(PipelineSpec spec, uint64_t first_epoch, int64_t start_item)
    : spec_(std::move(spec)), plan_(spec_, first_epoch), next_item_(start_item) {
  if (start_item < 0) throw ValueError(fmt("start step must be >= 0, got ", start_item));
  if (spec_.shard_count < 1 || spec_.shard_index < 0 || spec_.shard_index >= spec_.shard_count)
    throw ValueError(fmt("batch shard ", spec_.shard_index, " of ", spec_.shard_count, " does not exist"));
  if (spec_.shard_count > 1 && (spec_.batch_size == 0 || spec_.batch_size % spec_.shard_count))
    throw ValueError(fmt("sharding batches of ", spec_.batch_size, " into ", spec_.shard_count,
                         " equal parts: the batch size must be a multiple of the part count"));
  if (spec_.source->size() > 0) {
    // The first record fixes the element shape every other record must have.
    Record r0 = spec_.source->get(0);
    h_ = r0.height; w_ = r0.width; c_ = r0.channels;
    if (int64_t(r0.image.size()) != int64_t(h_) * w_ * c_)
      throw ValueError(fmt(spec_.source->describe(), ": record 0 (id '", r0.id, "') has ", r0.image.size(),
                           " bytes for shape (", h_, ", ", w_, ", ", c_, ")"));
    for (auto& op : spec_.ops)
      if (op.kind == ElementOp::kNormalize) check_normalize(op.normalize, c_);
  }
  int threads = spec_.threads > 0 ? spec_.threads : num_threads();
  arena_ = std::make_unique<tbb::task_arena>(std::max(threads, 1));
  if (spec_.prefetch > 0) producer_ = std::thread([this] { run_producer(); });
}

BatchIterator::~BatchIterator() { close(); }

void BatchIterator::close() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  has_space_.notify_all();
  has_data_.notify_all();
  if (producer_.joinable()) producer_.join();
}

Batch BatchIterator::produce(int64_t k) {
  std::vector<StreamPlan::Elem> elems = plan_.item(k);
  if (spec_.shard_count > 1) {
    const int64_t part = spec_.batch_size / spec_.shard_count, n = int64_t(elems.size());
    const int64_t lo = std::min(n, spec_.shard_index * part), hi = std::min(n, lo + part);
    elems = std::vector<StreamPlan::Elem>(elems.begin() + lo, elems.begin() + hi);
  }
  Batch b;
  b.n = int64_t(elems.size());
  b.height = h_; b.width = w_; b.channels = c_;
  const size_t per = size_t(h_) * w_ * c_;
  b.image.reset(new float[std::max<size_t>(per * b.n, 1)]);
  b.label.resize(b.n);
  b.id.resize(b.n);
  b.epoch.resize(b.n);
  b.position.resize(b.n);
  b.index.resize(b.n);
  auto one = [&](int64_t i) {
    const auto& e = elems[i];
    Record rec = spec_.source->get(e.index);
    if (rec.height != h_ || rec.width != w_ || rec.channels != c_ ||
        rec.image.size() != per)
      throw ValueError(fmt(spec_.source->describe(), ": record ", e.index, " (id '", rec.id, "') has shape (",
                           rec.height, ", ", rec.width, ", ", rec.channels, "), expected (", h_, ", ", w_,
                           ", ", c_, ") like record 0; batching needs one shape"));
    process_element(spec_, rec, e.epoch, e.position, b.image.get() + per * i);
    b.label[i] = rec.label;
    b.id[i] = std::move(rec.id);
    b.epoch[i] = e.epoch;
    b.position[i] = e.position;
    b.index[i] = e.index;
  };
#if defined(PODLET_SANITIZE_THREAD)
  // TBB's task hand-offs are invisible to TSan (sanitize.h): plain threads in that build.
  dynamic_on_threads(arena_->max_concurrency(), b.n, one);
#else
  arena_->execute([&] {
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, b.n, 1), [&](const tbb::blocked_range<int64_t>& rg) {
      for (int64_t i = rg.begin(); i < rg.end(); ++i) one(i);
    });
  });
#endif
  return b;
}

void BatchIterator::run_producer() {
  const int64_t total = plan_.num_items();
  for (int64_t k = next_item_; total < 0 || k < total; ++k) {
    Slot slot;
    try {
      slot.batch = produce(k);
    } catch (...) {
      slot.error = std::current_exception();
    }
    std::unique_lock<std::mutex> lk(mu_);
    has_space_.wait(lk, [&] { return stop_ || int64_t(queue_.size()) < spec_.prefetch; });
    if (stop_) break;
    bool failed = bool(slot.error);
    queue_.push_back(std::move(slot));
    lk.unlock();
    has_data_.notify_one();
    if (failed) break;
  }
  std::lock_guard<std::mutex> lk(mu_);
  producer_done_ = true;
  has_data_.notify_all();
}

std::optional<Batch> BatchIterator::next() {
  if (spec_.prefetch <= 0) {
    if (stop_ || failed_) return std::nullopt;
    const int64_t total = plan_.num_items();
    if (total >= 0 && next_item_ >= total) return std::nullopt;
    try {
      return produce(next_item_++);
    } catch (...) {
      failed_ = true;
      throw;
    }
  }
  std::unique_lock<std::mutex> lk(mu_);
  has_data_.wait(lk, [&] { return stop_ || !queue_.empty() || producer_done_; });
  if (queue_.empty()) return std::nullopt;
  Slot slot = std::move(queue_.front());
  queue_.pop_front();
  lk.unlock();
  has_space_.notify_one();
  if (slot.error) std::rethrow_exception(slot.error);
  return std::move(slot.batch);
}

}  // namespace podlet::data
