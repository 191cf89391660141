// Deterministic parallel loops. Work is cut into fixed-size chunks that do not depend
// on the thread count, and anything reduced across chunks is combined in chunk order,
// so results are bit-identical for 1, 2 or N threads.
#pragma once
#include <cstdint>
#include <vector>
#include <algorithm>
#include <omp.h>

namespace podlet {

void set_num_threads(int n);
int num_threads();  // 1 on a thread inside a SerialScope

// While alive, num_threads() is 1 on this thread: for a caller that already runs
// independent kernel calls in parallel (pmap runs replicas side by side). Results do not
// change: no kernel's bits depend on its thread count.
class SerialScope {
 public:
  SerialScope();
  ~SerialScope();
  SerialScope(const SerialScope&) = delete;
  SerialScope& operator=(const SerialScope&) = delete;

 private:
  bool prev_;
};

// fn(begin, end) over [0, n) in chunks of `grain`; parallel only when worth it.
template <class F>
inline void parallel_for(int64_t n, int64_t grain, F&& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  int64_t nchunks = (n + grain - 1) / grain;
  if (nchunks == 1 || num_threads() == 1) { fn(int64_t(0), n); return; }
// Dynamic: a thread preempted on a shared machine does not hold back the chunks the
  // others could take. Chunk boundaries stay fixed, so results do not change.
#pragma omp parallel for schedule(dynamic, 1) num_threads(num_threads())
  for (int64_t c = 0; c < nchunks; ++c) fn(c * grain, std::min(n, (c + 1) * grain));
}

// Sums partial(begin, end) -> Acc over fixed chunks, combined in chunk order.
template <class Acc, class F>
inline Acc parallel_reduce_ordered(int64_t n, int64_t grain, Acc init, F&& partial) {
  grain = std::max<int64_t>(grain, 1);
  int64_t nchunks = std::max<int64_t>(1, (n + grain - 1) / grain);
  std::vector<Acc> parts(nchunks, Acc{});
  parallel_for(nchunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) parts[c] = partial(c * grain, std::min(n, (c + 1) * grain));
  });
  Acc acc = init;
  for (auto& p : parts) acc += p;
  return acc;
}

}  // namespace podlet
