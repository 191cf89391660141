// When a kernel writes its output with non-temporal stores. One constant for the fused
// elementwise passes (prims/fused.cc), the AVX-512 GEMM / convolution output stores
// (avx512_engine.h) and the row kernels (norm_avx512_impl.h); and stream_bytes, the byte
// copy the fused passes' stores and the strided copies (prims/common.cc) share.
#pragma once
#include <immintrin.h>
#include <cstdint>
#include <algorithm>
#include <cstring>

namespace podlet::kernels {

// Outputs of at least this many bytes, written once and not read back by the kernel,
// bypass the caches: they leave the cache before anyone reads them anyway, and skipping
// the write-allocate read saved ~1-2% of a ResNet-34 bf16 step (fused outputs; 1 and
// 16 MB thresholds measured no better) and ~5% of a stride-2 backward-data (its dx rows).
constexpr int64_t kStreamOutBytes = int64_t(4) << 20;

// bytes from src to dst, every whole aligned chunk of dst (64 bytes in AVX-512 builds, 16
// in the baseline's SSE2) with a non-temporal store, the unaligned head and tail by
// memcpy. The caller fences (_mm_sfence) before anyone else reads dst. Internal linkage:
// each translation unit keeps the form its own ISA flags give.
namespace {
inline void stream_bytes(void* dst, const void* src, size_t bytes) {
#ifdef __AVX512F__
  constexpr size_t kW = 64;
#else
  constexpr size_t kW = 16;
#endif
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  const size_t head = std::min(bytes, (kW - (reinterpret_cast<uintptr_t>(d) & (kW - 1))) & (kW - 1));
  std::memcpy(d, s, head);
  size_t q = head;
  for (; q + kW <= bytes; q += kW) {
#ifdef __AVX512F__
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d + q), _mm512_loadu_si512(s + q));
#else
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + q), _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + q)));
#endif
  }
  std::memcpy(d + q, s + q, bytes - q);
}
}  // namespace

}  // namespace podlet::kernels
