#include "podlet/array.h"
#include <atomic>
#include <cstdlib>
#include <algorithm>
#include <list>
#include <map>
#include <mutex>

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
MemStats& mem_stats() {
  static thread_local MemStats s;
  s.live = g_live.load(); s.peak = g_peak.load();
  return s;
}
void reset_peak_memory() { g_peak.store(g_live.load()); }

// Large buffers are recycled. A training step allocates and frees the same few
// hundred activation-sized buffers every step; returning them to the OS (glibc unmaps
// anything above its mmap threshold) makes every step fault in and zero gigabytes of
// fresh pages, which cost more than the elementwise kernels that write them. Freed
// buffers of at least kPoolMin bytes wait in a pool keyed by size class (sizes rounded
// up to 1/8 of their power of two) and are handed out again; the pool holds at most
// pool_cap() bytes (PODLET_BUFFER_POOL_MB, default 4096), dropping the least recently
// freed first. Pooled bytes are not "live": the peak-memory figure counts buffers in use.
namespace {
constexpr size_t kPoolMin = size_t(1) << 18;

size_t size_class(size_t n) {
  if (n < kPoolMin) return (n + kAlign - 1) / kAlign * kAlign;
  size_t p = size_t(1) << (63 - __builtin_clzll(n));  // the power of two <= n
  const size_t step = p / 8;
  return (n + step - 1) / step * step;
}

size_t pool_cap() {
  static const size_t cap = [] {
    const char* e = std::getenv("PODLET_BUFFER_POOL_MB");
    return size_t(e && *e ? std::max(0.0, std::atof(e)) : 4096.0) << 20;
  }();
  return cap;
}

struct Pool {
  std::mutex mu;
  std::list<std::pair<size_t, void*>> lru;  // most recently freed at the front
  std::multimap<size_t, std::list<std::pair<size_t, void*>>::iterator> by_size;
  size_t bytes = 0;

  void* take(size_t n) {
    std::lock_guard<std::mutex> lk(mu);
    auto it = by_size.find(n);
    if (it == by_size.end()) return nullptr;
    void* p = it->second->second;
    lru.erase(it->second);
    by_size.erase(it);
    bytes -= n;
    return p;
  }
  void give(size_t n, void* p) {
    std::vector<void*> drop;
    {
      std::lock_guard<std::mutex> lk(mu);
      if (n > pool_cap()) { drop.push_back(p); }
      else {
        lru.emplace_front(n, p);
        by_size.emplace(n, lru.begin());
        bytes += n;
        while (bytes > pool_cap()) {
          auto& [m, q] = lru.back();
          auto r = by_size.equal_range(m);
          for (auto i = r.first; i != r.second; ++i)
            if (i->second->second == q) { by_size.erase(i); break; }
          bytes -= m;
          drop.push_back(q);
          lru.pop_back();
        }
      }
    }
    for (void* q : drop) std::free(q);
  }
};

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: buffers may be freed during interpreter exit
  return *p;
}
}  // namespace

std::shared_ptr<void> alloc_buffer(size_t nbytes) {
  const size_t n = size_class(std::max<size_t>(kAlign, nbytes));
  void* p = n >= kPoolMin ? pool().take(n) : nullptr;
  if (!p) p = std::aligned_alloc(kAlign, n);
  if (!p) throw Error(fmt("out of memory allocating ", nbytes, " bytes"));
  int64_t live = g_live.fetch_add(int64_t(n)) + int64_t(n);
  int64_t pk = g_peak.load();
  while (live > pk && !g_peak.compare_exchange_weak(pk, live)) {}
  return std::shared_ptr<void>(p, [n](void* q) {
    g_live.fetch_sub(int64_t(n));
    if (n >= kPoolMin) pool().give(n, q);
    else std::free(q);
  });
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
