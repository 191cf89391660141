// The bf16 fused attention on vdpbf16ps (attention_pairs_impl.h); its plain C++ twin is
// attention_pairs_ref.cc.
#include <immintrin.h>
#include "podlet/kernels/attention_pairs_impl.h"

namespace podlet::kernels {
namespace {
struct HwPairs {
  using V = __m512;
  using P = __m512bh;
  static V zero() { return _mm512_setzero_ps(); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V scale(V v, float a) { return _mm512_mul_ps(v, _mm512_set1_ps(a)); }
  static P loadp(const uint32_t* p) { return (__m512bh)_mm512_loadu_si512(p); }
  static P bcast(uint32_t a) { return (__m512bh)_mm512_set1_epi32(int(a)); }
  static V dp(V acc, P a, P b) { return _mm512_dpbf16_ps(acc, a, b); }
};
}  // namespace
}  // namespace podlet::kernels

PODLET_ATTN_PAIRS_DEFINE(avx512bf16, HwPairs)
