// Kernel temporaries from the array buffer pool (engine_common.h pool_acquire): baseline
// code, so the ISA files only call it.
#include <memory>
#include "podlet/array.h"
#include "podlet/kernels/engine_common.h"

namespace podlet::kernels::engine {

void* pool_acquire(size_t nbytes, void** handle) {
  auto owner = std::make_unique<std::shared_ptr<void>>(alloc_buffer(nbytes));  // 64-byte aligned
  void* p = owner->get();
  *handle = owner.release();
  return p;
}

void pool_release(void* handle) { delete static_cast<std::shared_ptr<void>*>(handle); }

}  // namespace podlet::kernels::engine
