// A heap array for the ISA kernels' temporaries in place of std::vector: the ODR note of
// kernels/avx2_engine.h. std::vector<float> instantiated in an AVX2 / AVX-512 object can
// leave weak symbols (its destructor, _M_default_append) when the compiler does not
// inline them - the sanitizer builds do not - and the linker may then keep that copy for
// every host. A class template in an anonymous namespace has internal linkage, so each
// object keeps its own. tests/test_isa_objects.py checks the objects with nm.
#pragma once
#include <cstddef>
#include <cstdlib>
#include <new>

namespace podlet::kernels {
namespace {

template <class T> class LocalVec {
 public:
  LocalVec() = default;
  explicit LocalVec(size_t n, T v = T()) { resize(n, v); }
  ~LocalVec() { std::free(p_); }
  LocalVec(const LocalVec&) = delete;
  LocalVec& operator=(const LocalVec&) = delete;
  // n elements, each v (the old contents are not kept).
  void resize(size_t n, T v = T()) {
    std::free(p_);
    p_ = nullptr;
    n_ = n;
    if (n) {
      p_ = static_cast<T*>(std::malloc(n * sizeof(T)));
      if (!p_) throw std::bad_alloc();
    }
    for (size_t i = 0; i < n; ++i) p_[i] = v;
  }
  T* data() { return p_; }
  const T* data() const { return p_; }
  T& operator[](size_t i) { return p_[i]; }
  const T& operator[](size_t i) const { return p_[i]; }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  T* begin() { return p_; }
  T* end() { return p_ + n_; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace
}  // namespace podlet::kernels
