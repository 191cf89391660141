#include "podlet/array.h"
#include <atomic>
#include <cstdlib>
#include <algorithm>

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

std::shared_ptr<void> alloc_buffer(size_t nbytes) {
  size_t n = std::max<size_t>(kAlign, (nbytes + kAlign - 1) / kAlign * kAlign);
  void* p = std::aligned_alloc(kAlign, n);
  if (!p) throw Error(fmt("out of memory allocating ", nbytes, " bytes"));
  int64_t live = g_live.fetch_add(int64_t(n)) + int64_t(n);
  int64_t pk = g_peak.load();
  while (live > pk && !g_peak.compare_exchange_weak(pk, live)) {}
  return std::shared_ptr<void>(p, [n](void* q) { g_live.fetch_sub(int64_t(n)); std::free(q); });
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
