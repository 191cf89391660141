// Deterministic parallel loops. Work is cut into fixed-size chunks that do not depend
// on the thread count, and anything reduced across chunks is combined in chunk order,
// so results are bit-identical for 1, 2 or N threads.
#pragma once
#include <cstdint>
#include <vector>
#include <algorithm>
#include <atomic>
#include <exception>
#include <thread>
#include <type_traits>
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

#if defined(PODLET_SANITIZE_THREAD)
// The std::thread loop, out of line in parallel.cc (a baseline object): instantiated in an
// ISA object, std::thread's and exception_ptr's inline members would be weak symbols
// compiled with that object's ISA flags, which the linker may keep for every host
// (tests/test_isa_objects.py).
void on_std_threads(int nt, void (*call)(const void* body, int worker), const void* body);
#endif

// body(worker) on nt threads (worker 0 is the caller), each inside a SerialScope (a nested
// region runs on one thread, as OpenMP's is by default); returns when all are done.
// OpenMP in normal builds, where body must not throw (an exception cannot leave an
// OpenMP region); std::threads in the TSan build (sanitize.h), where libgomp's hand-offs
// would be invisible, rethrowing the first exception after the join.
template <class F>
void on_threads(int nt, F&& body) {
#if defined(PODLET_SANITIZE_THREAD)
  using Body = std::remove_reference_t<F>;
  on_std_threads(nt, [](const void* b, int w) { (*static_cast<Body*>(const_cast<void*>(b)))(w); },
                 static_cast<const void*>(&body));
#else
#pragma omp parallel num_threads(nt)
  {
    SerialScope serial;
    body(omp_get_thread_num());
  }
#endif
}

// The TSan build's stand-in for `#pragma omp parallel for schedule(dynamic, 1)`:
// f(i) for i in [0, n), each thread taking the next index.
template <class F>
void dynamic_on_threads(int nt, int64_t n, F&& f) {
  std::atomic<int64_t> next{0};
  on_threads(nt, [&](int) {
    for (int64_t i; (i = next.fetch_add(1)) < n;) f(i);
  });
}

// Runs one chunk. Every path of parallel_for calls fn through this one non-inlined
// function, so fn's loop is compiled once: inlined separately into a serial and an
// OpenMP call site, GCC may order a commutative op's operands differently in each, which
// shows in the NaN that NaN + NaN returns (a thread-count dependence, measured).
template <class F>
__attribute__((noinline)) void parallel_chunk(F& fn, int64_t b, int64_t e) { fn(b, e); }

// fn(begin, end) over [0, n) in chunks of `grain`; parallel only when worth it. One
// thread walks the same chunks, so an element's code path (vector body or remainder
// iteration) depends on the chunk boundaries only, never on the thread count.
template <class F>
inline void parallel_for(int64_t n, int64_t grain, F&& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  int64_t nchunks = (n + grain - 1) / grain;
  if (nchunks == 1 || num_threads() == 1) {
    for (int64_t c = 0; c < nchunks; ++c) parallel_chunk(fn, c * grain, std::min(n, (c + 1) * grain));
    return;
  }
// Dynamic: a thread preempted on a shared machine does not hold back the chunks the
  // others could take. Chunk boundaries stay fixed, so results do not change.
#if defined(PODLET_SANITIZE_THREAD)
  dynamic_on_threads(num_threads(), nchunks, [&](int64_t c) { parallel_chunk(fn, c * grain, std::min(n, (c + 1) * grain)); });
#else
#pragma omp parallel for schedule(dynamic, 1) num_threads(num_threads())
  for (int64_t c = 0; c < nchunks; ++c) parallel_chunk(fn, c * grain, std::min(n, (c + 1) * grain));
#endif
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
