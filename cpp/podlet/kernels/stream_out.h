// When a kernel writes its output with non-temporal stores. One constant for the fused
// elementwise passes (prims/fused.cc), the AVX-512 GEMM / convolution output stores
// (avx512_engine.h) and the row kernels (norm_avx512_impl.h).
#pragma once
#include <cstdint>

namespace podlet::kernels {

// Outputs of at least this many bytes, written once and not read back by the kernel,
// bypass the caches: they leave the cache before anyone reads them anyway, and skipping
// the write-allocate read saved ~1-2% of a ResNet-34 bf16 step (fused outputs; 1 and
// 16 MB thresholds measured no better) and ~5% of a stride-2 backward-data (its dx rows).
constexpr int64_t kStreamOutBytes = int64_t(4) << 20;

}  // namespace podlet::kernels
