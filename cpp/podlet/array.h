// Array: dtype + shape + a shared, 64-byte-aligned buffer. Immutable once a kernel
// has written it; copies share the buffer. Row-major (C order), no strides: views are
// primitives (slice, transpose) that produce new arrays.
#pragma once
#include <memory>
#include <vector>
#include <cstdint>
#include <type_traits>
#include "podlet/dtype.h"
#include "podlet/error.h"

namespace podlet {

using Shape = std::vector<int64_t>;

inline int64_t numel(const Shape& s) { int64_t n = 1; for (auto d : s) n *= d; return n; }

// Strides in elements for a row-major shape.
inline Shape strides_of(const Shape& s) {
  Shape st(s.size()); int64_t acc = 1;
  for (int i = int(s.size()) - 1; i >= 0; --i) { st[i] = acc; acc *= s[i]; }
  return st;
}

constexpr size_t kAlign = 64;

// Live bytes in buffers podlet allocated (for the profiler's peak-memory figure).
struct MemStats { int64_t live = 0, peak = 0, pooled = 0; };  // pooled: freed, kept for reuse
MemStats& mem_stats();
void reset_peak_memory();

std::shared_ptr<void> alloc_buffer(size_t nbytes);
// The same recycled buffers for kernels' scratch (64-byte aligned, counted as live):
// free_raw_buffer(p, *got) gives it back. Plain functions, so ISA-specific translation
// units can call them without instantiating templates of their own (the ODR note in
// kernels/avx512_engine.h).
void* alloc_raw_buffer(size_t nbytes, size_t* got);
void free_raw_buffer(void* p, size_t got);

struct AVal {  // abstract value: what the shape rules compute
  DType dtype = DType::f32;
  Shape shape;
  int64_t size() const { return numel(shape); }
  size_t nbytes() const { return size_t(size()) * itemsize(dtype); }
  bool operator==(const AVal& o) const { return dtype == o.dtype && shape == o.shape; }
};

class Array {
 public:
  Array() = default;
  Array(DType d, Shape s) : dtype_(d), shape_(std::move(s)) {
    storage_ = alloc_buffer(nbytes());
    data_ = storage_.get();
  }
  explicit Array(const AVal& a) : Array(a.dtype, a.shape) {}
  // Wraps memory owned elsewhere (a NumPy array); `owner` keeps it alive.
  Array(DType d, Shape s, void* data, std::shared_ptr<void> owner)
      : dtype_(d), shape_(std::move(s)), storage_(std::move(owner)), data_(data) {}

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return int(shape_.size()); }
  int64_t size() const { return numel(shape_); }
  size_t nbytes() const { return size_t(size()) * itemsize(dtype_); }
  AVal aval() const { return AVal{dtype_, shape_}; }
  bool valid() const { return data_ != nullptr || size() == 0; }
  bool defined() const { return storage_ != nullptr; }

  void* raw() const { return data_; }
  template <class T> T* data() const { return static_cast<T*>(data_); }
  const std::shared_ptr<void>& storage() const { return storage_; }

  // Same buffer, new shape (reshape is free when sizes agree).
  Array reshaped(Shape s) const { Array a = *this; a.shape_ = std::move(s); return a; }

 private:
  DType dtype_ = DType::f32;
  Shape shape_;
  std::shared_ptr<void> storage_;
  void* data_ = nullptr;
};

// Scalar read/write through doubles, for generic (slow) paths and tests.
double get_as_double(const Array& a, int64_t i);
void set_from_double(Array& a, int64_t i, double v);
Array full(DType d, const Shape& s, double v);

}  // namespace podlet
