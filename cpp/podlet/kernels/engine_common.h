// Pieces shared by the ISA GEMM engines (avx2_engine.h, avx512_engine.h) and their
// kernels: index arithmetic, the two task runners, operand-layout and dtype helpers.
// Plain C++ without intrinsics, all with internal linkage, so each ISA translation unit
// keeps its own copy (see the ODR note in avx2_engine.h).
#pragma once
#include <algorithm>
#include <omp.h>
#include <cstddef>
#include <cstdint>
#include "podlet/dtype.h"
#include "podlet/parallel.h"

namespace podlet::kernels::engine {

// Large kernel temporaries (transformed filters, partial sums: megabytes) from the array
// buffer pool (array.cc alloc_buffer): their pages stay mapped from call to call instead
// of being faulted in and zeroed each time (a fresh 16 MB buffer made the 512-channel
// Winograd backward-filter 1.4x slower in a training step than alone), and they count
// in the peak memory the profiler reports. Plain functions, defined in baseline code
// (scratch_common.cc); PoolBuf below owns one.
void* pool_acquire(size_t nbytes, void** handle);
void pool_release(void* handle);

namespace {

// n 32-bit words, 64-byte aligned, from the pool; reserve() grows it (contents not kept).
struct PoolBuf {
  uint32_t* p = nullptr;
  int64_t cap = 0;
  PoolBuf() = default;
  explicit PoolBuf(int64_t n) { reserve(n); }
  ~PoolBuf() { pool_release(h); }
  PoolBuf(const PoolBuf&) = delete;
  PoolBuf& operator=(const PoolBuf&) = delete;
  void reserve(int64_t n) {
    if (n <= cap && p) return;
    pool_release(h);
    h = nullptr;
    p = nullptr;
    cap = n > 1 ? n : 1;
    p = static_cast<uint32_t*>(pool_acquire(size_t(cap) * 4, &h));
  }
  float* f() const { return reinterpret_cast<float*>(p); }

 private:
  void* h = nullptr;
};

inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }
inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t round_up(int64_t a, int64_t b) { return cdiv(a, b) * b; }

// How many K chunks a product is summed in (1: whole K), the GEMM engines' rule: more
// than one when its output, cut into full-size tiles (max_mc x nc), makes fewer than 8
// of them and K has at least two chunks of `chunk` steps, with the partials at most 64
// MB. A function of the shape alone: each element is summed in order within a chunk and
// the chunk partials in chunk order, so the bits never depend on the thread count.
inline int64_t k_chunks(int64_t B, int64_t M, int64_t N, int64_t K, int64_t max_mc, int64_t nc, int64_t chunk) {
  const int64_t tiles = B * cdiv(M, max_mc) * cdiv(N, nc);
  if (tiles >= 8 || K < 2 * chunk) return 1;
  if (double(B) * double(M) * double(N) * double(K / chunk) > double(int64_t(1) << 24)) return 1;
  return K / chunk;
}

// f(t, scratch) for every task t in [0, n), each thread with its own Scratch; the tasks
// are independent, so any schedule gives the same bits. Serial unless `parallel` (work
// large enough) and there are threads and tasks to share.
template <class Scratch, class F> void run_tasks(int64_t n, bool parallel, F&& f) {
  const int nt = num_threads();
  if (n <= 0) return;
  if (nt <= 1 || n == 1 || !parallel) {
    Scratch s;
    for (int64_t t = 0; t < n; ++t) f(t, s);
    return;
  }
#if defined(PODLET_SANITIZE_THREAD)
  std::atomic<int64_t> next{0};
  on_threads(nt, [&](int) {
    Scratch s;
    for (int64_t t; (t = next.fetch_add(1)) < n;) f(t, s);
  });
#else
  // Tasks handed out a few at a time when there are many (a batched product of 3,072
  // 49 x 49 x 32 windows: one dispatch per task was a fifth of the call); at least 8
  // hand-outs per thread keep the threads balanced. Which thread runs a task never
  // changes its bits.
  const int64_t chunk = std::max<int64_t>(1, n / (8 * int64_t(nt)));
#pragma omp parallel num_threads(nt)
  {
    Scratch s;
#pragma omp for schedule(dynamic, chunk)
    for (int64_t t = 0; t < n; ++t) f(t, s);
  }
#endif
}
// Same for cheap independent units (packing): no scratch.
template <class F> void run_units(int64_t n, bool parallel, F&& f) {
  const int nt = num_threads();
  if (n <= 0) return;
  if (nt <= 1 || n == 1 || !parallel) {
    for (int64_t t = 0; t < n; ++t) f(t);
    return;
  }
#if defined(PODLET_SANITIZE_THREAD)
  dynamic_on_threads(nt, n, f);
#else
  const int64_t chunk = std::max<int64_t>(1, n / (8 * int64_t(nt)));  // as run_tasks
#pragma omp parallel for schedule(dynamic, chunk) num_threads(nt)
  for (int64_t t = 0; t < n; ++t) f(t);
#endif
}

// Whether offsets v[0:n] step evenly (v[i] = v[0] + i * step; step 0 when n < 2).
inline bool even_step(const int64_t* v, int64_t n, int64_t& step) {
  step = n > 1 ? v[1] - v[0] : 0;
  for (int64_t i = 2; i < n; ++i)
    if (v[i] - v[i - 1] != step) return false;
  return true;
}
// Whether n offsets found even (even_step) with that step are consecutive: the dim is
// contiguous.
inline bool unit_step(bool even, int64_t step, int64_t n) { return even && (n < 2 || step == 1); }
inline bool unit_stride(const int64_t* v, int64_t n) {
  int64_t step;
  const bool even = even_step(v, n, step);
  return unit_step(even, step, n);
}

// Calls f(TA(), TB()) with the storage types of two f32/bf16 dtypes.
template <class F> void two_types(DType a, DType b, F&& f) {
  const bool a16 = a == DType::bf16, b16 = b == DType::bf16;
  if (a16 && b16) f(bf16(), bf16());
  else if (a16) f(bf16(), float());
  else if (b16) f(float(), bf16());
  else f(float(), float());
}

}  // namespace
}  // namespace podlet::kernels::engine
