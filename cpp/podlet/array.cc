#ifndef _GNU_SOURCE
#define _GNU_SOURCE  // mremap
#endif
#include "podlet/array.h"
#include "podlet/sanitize.h"
#include <atomic>
#include <cstdlib>
#include <algorithm>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <sys/mman.h>

namespace podlet {

DType dtype_from_name(const std::string& s) {
  if (s == "float32") return DType::f32;
  if (s == "bfloat16") return DType::bf16;
  if (s == "float64") return DType::f64;
  if (s == "int32") return DType::i32;
  if (s == "uint32") return DType::u32;
  if (s == "uint8") return DType::u8;
  if (s == "bool") return DType::boolean;
  throw DTypeError(fmt("unsupported dtype '", s,
                       "'; expected one of float32, bfloat16, float64, int32, uint32, uint8, bool"));
}

static std::atomic<int64_t> g_live{0}, g_peak{0};
static std::atomic<int64_t> g_high{0};  // the peak since start (reset_peak_memory leaves it)
static std::atomic<int64_t> g_pooled{0};  // bytes waiting in the pool
MemStats& mem_stats() {
  static thread_local MemStats s;
  s.live = g_live.load(); s.peak = g_peak.load(); s.pooled = g_pooled.load();
  return s;
}
void reset_peak_memory() { g_peak.store(g_live.load()); }

// Large buffers are recycled. A training step allocates and frees the same few
// hundred activation-sized buffers every step; returning them to the OS (glibc unmaps
// anything above its mmap threshold) makes every step fault in and zero gigabytes of
// fresh pages, which cost more than the elementwise kernels that write them. Freed
// buffers of at least kPoolMin bytes wait in a pool keyed by size class (sizes rounded
// up to 1/8 of their power of two) and are handed out again; the pool holds at most
// pool_cap() bytes (PODLET_BUFFER_POOL_MB; by default 4 GB or the process's high-water
// mark of buffers in use), dropping the least recently freed first. A request takes the
// smallest pooled buffer up to 1/4 larger than its class; when none fits and a fresh
// buffer would take the pool and the buffers in use past the process's high-water mark
// of buffers in use (+1/16), a pooled buffer is resized instead (take_resized): without
// that, differently sized requests each kept their own spare buffers and the resident
// size of a ResNet-34 step was 1.6x its peak of live buffers. (run_graph's memory plan,
// ir/memory_plan.h, now asks for one arena per run instead of a buffer per value.)
// Pooled bytes are not "live": the peak-memory figure counts buffers in use, kernels'
// scratch (alloc_raw_buffer) included.
namespace {
constexpr size_t kPoolMin = size_t(1) << 18;

size_t size_class(size_t n) {
  if (n < kPoolMin) return (n + kAlign - 1) / kAlign * kAlign;
  size_t p = size_t(1) << (63 - __builtin_clzll(n));  // the power of two <= n
  const size_t step = p / 8;
  return (n + step - 1) / step * step;
}

// PODLET_BUFFER_POOL_MB when set; else 4 GB or the most the process has had in use,
// whichever is larger. A fixed 4 GB dropped any one buffer above it on every free: Swin-T
// f32 at batch 32 has a 4.5 GB step arena, so each step faulted in and zeroed 4.5 GB
// again, and its memory-bound kernels ran 2-5x slower per byte than at batch 16. Holding
// up to the high-water mark adds nothing to the process's peak resident size (a pooled
// buffer is reused before a fresh one is mapped, or resized, take_resized).
size_t pool_cap() {
  static const double env_mb = [] {
    const char* e = std::getenv("PODLET_BUFFER_POOL_MB");
    return e && *e ? std::max(0.0, std::atof(e)) : -1.0;
  }();
  if (env_mb >= 0) return size_t(env_mb) << 20;
  return std::max(size_t(4096) << 20, size_t(g_high.load()));
}

// Pool-sized buffers are mapped and unmapped directly: a buffer the pool drops goes back
// to the OS at once (from glibc's heap it could stay resident, fragmenting the arenas).
//
// Buffers of 2 MB and more are mapped at a 2 MB boundary and advised as transparent huge
// pages (PODLET_HUGE_PAGES=0: not). Linux's default THP mode here is "madvise", so they
// were 4 KB pages: a step's activations from DRAM missed the TLB on every page, and a
// tanh-GELU VJP over [32, 197, 768] with its inputs evicted ran 9.0 ms instead of the
// 5.1 it takes from the L3; with huge pages, 5.3.
constexpr size_t kHugePage = size_t(2) << 20;
bool huge_pages() {
  static const bool on = [] {
    const char* e = std::getenv("PODLET_HUGE_PAGES");
    return !(e && std::string(e) == "0");
  }();
  return on;
}
void* map_pages(size_t n) {
  const bool huge = n >= kHugePage && huge_pages();
  const size_t m = huge ? n + kHugePage : n;  // room to move the start to a 2 MB boundary
  void* p = mmap(nullptr, m, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  if (!huge) return p;
  char* c = static_cast<char*>(p);
  char* a = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(c) + kHugePage - 1) & ~uintptr_t(kHugePage - 1));
  if (a > c) munmap(c, size_t(a - c));             // the mapping is exactly [a, a + n) from here on
  if (c + m > a + n) munmap(a + n, size_t(c + m - (a + n)));
  madvise(a, n, MADV_HUGEPAGE);
  return a;
}
void unmap_pages(void* p, size_t n) {
  PODLET_UNPOISON(p, n);  // the shadow outlives the mapping: a later mmap may land here
  munmap(p, n);
}

struct Pool {
  std::mutex mu;
  std::list<std::pair<size_t, void*>> lru;  // most recently freed at the front
  std::multimap<size_t, std::list<std::pair<size_t, void*>>::iterator> by_size;
  size_t bytes = 0;

  // The smallest pooled buffer of at least n bytes and at most n + n/4 (a slightly
  // larger class serves as well as a fresh allocation); its size in *got.
  void* take(size_t n, size_t* got) {
    std::lock_guard<std::mutex> lk(mu);
    auto it = by_size.lower_bound(n);
    if (it == by_size.end() || it->first > n + n / 4) return nullptr;
    void* p = it->second->second;
    *got = it->first;
    lru.erase(it->second);
    by_size.erase(it);
    bytes -= *got;
    g_pooled.store(int64_t(bytes));
    return p;
  }
  // On a miss, when n fresh bytes would take the pool and the buffers in use together
  // past the most the process has had in use (plus 1/16): the pooled buffer closest in
  // size, resized to n with mremap (its pages stay; only the difference is freed or
  // faulted in), or nullptr when n fresh bytes fit. Dropping whole buffers instead made
  // a ResNet-34 step fault in ~1 GB of pages again every step.
  void* take_resized(size_t n, size_t live, size_t high) {
    size_t m = 0;
    void* q = nullptr;
    std::vector<std::pair<size_t, void*>> drop;
    {
      std::lock_guard<std::mutex> lk(mu);
      const size_t limit = std::max(high, live + n) + high / 16;
      if (lru.empty() || bytes + live + n <= limit) return nullptr;
      auto it = by_size.lower_bound(n);
      if (it == by_size.end() || (it != by_size.begin() && n - std::prev(it)->first < it->first - n)) --it;
      m = it->first;
      q = it->second->second;
      lru.erase(it->second);
      by_size.erase(it);
      bytes -= m;
      while (!lru.empty() && bytes + live + n > limit) drop.push_back(pop_oldest());  // it grew
      g_pooled.store(int64_t(bytes));
    }
    for (auto [dm, dq] : drop) unmap_pages(dq, dm);
    PODLET_UNPOISON(q, m);
    void* p = mremap(q, m, n, MREMAP_MAYMOVE);
    if (p != MAP_FAILED) return p;
    unmap_pages(q, m);
    return nullptr;
  }
  void give(size_t n, void* p) {
    std::vector<std::pair<size_t, void*>> drop;
    {
      std::lock_guard<std::mutex> lk(mu);
      if (n > pool_cap()) { drop.emplace_back(n, p); }
      else {
        PODLET_POISON(p, n);  // a use after free of a pooled buffer is reported
        lru.emplace_front(n, p);
        by_size.emplace(n, lru.begin());
        bytes += n;
        g_pooled.store(int64_t(bytes));
        while (bytes > pool_cap()) drop.push_back(pop_oldest());
      }
    }
    for (auto [m, q] : drop) unmap_pages(q, m);
  }

 private:
  std::pair<size_t, void*> pop_oldest() {  // with mu held
    auto [m, q] = lru.back();
    auto r = by_size.equal_range(m);
    for (auto i = r.first; i != r.second; ++i)
      if (i->second->second == q) { by_size.erase(i); break; }
    bytes -= m;
    g_pooled.store(int64_t(bytes));
    lru.pop_back();
    return {m, q};
  }
};

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: buffers may be freed during interpreter exit
  return *p;
}
}  // namespace

void* alloc_raw_buffer(size_t nbytes, size_t* got) {
  size_t n = size_class(std::max<size_t>(kAlign, nbytes));
  void* p = nullptr;
  if (n >= kPoolMin) {
    size_t g = n;
    p = pool().take(n, &g);
    if (p) n = g;
    else p = pool().take_resized(n, size_t(g_live.load()), size_t(g_high.load()));
  }
  if (!p) p = n >= kPoolMin ? map_pages(n) : std::aligned_alloc(kAlign, n);
  if (!p) throw Error(fmt("out of memory allocating ", nbytes, " bytes"));
  // Only the requested bytes are addressable: an overrun into the rounding slack (or a
  // pooled buffer's surplus) is reported. In normal builds these are no-ops.
  PODLET_UNPOISON(p, nbytes);
  PODLET_POISON(static_cast<char*>(p) + nbytes, n - nbytes);
  int64_t live = g_live.fetch_add(int64_t(n)) + int64_t(n);
  int64_t pk = g_peak.load();
  while (live > pk && !g_peak.compare_exchange_weak(pk, live)) {}
  int64_t hi = g_high.load();
  while (live > hi && !g_high.compare_exchange_weak(hi, live)) {}
  *got = n;
  return p;
}

void free_raw_buffer(void* q, size_t n) {
  if (!q) return;
  g_live.fetch_sub(int64_t(n));
  if (n >= kPoolMin) pool().give(n, q);
  else {
    PODLET_UNPOISON(q, n);
    std::free(q);
  }
}

std::shared_ptr<void> alloc_buffer(size_t nbytes) {
  size_t n = 0;
  void* p = alloc_raw_buffer(nbytes, &n);
  return std::shared_ptr<void>(p, [n](void* q) { free_raw_buffer(q, n); });
}

double get_as_double(const Array& a, int64_t i) {
  PODLET_DTYPE_SWITCH(a.dtype(), T, return double(static_cast<T*>(a.raw())[i]));
  return 0;
}
void set_from_double(Array& a, int64_t i, double v) {
  switch (a.dtype()) {
    case DType::bf16: a.data<bf16>()[i] = bf16(float(v)); break;
    default: PODLET_DTYPE_SWITCH(a.dtype(), T, static_cast<T*>(a.raw())[i] = T(v));
  }
}
Array full(DType d, const Shape& s, double v) {
  Array a(d, s);
  int64_t n = a.size();
  PODLET_DTYPE_SWITCH(d, T, {
    T x; if constexpr (std::is_same_v<T, bf16>) x = bf16(float(v)); else x = T(v);
    T* p = a.data<T>(); std::fill(p, p + n, x);
  });
  return a;
}
}  // namespace podlet
