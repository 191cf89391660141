// AVX512_BF16 convolutions, Bf16Kind: bf16 operands taken in K pairs by vdpbf16ps into
// f32 accumulators, f32 / bf16 output (conv_avx512_impl.h).
#include "podlet/kernels/conv_avx512_impl.h"

namespace podlet::kernels {

using avx512::Bf16Kind;

// Preconditions (checked by the dispatchers): both operands bf16, output f32 or bf16.
void conv_fwd_avx512bf16(const ConvGeom& q, DType, const void* x, DType, const void* w, DType yd, void* y) {
  avx512::conv_fwd_run<Bf16Kind, bf16, bf16>(q, x, w, yd, y);
}
void conv_bwd_data_avx512bf16(const ConvGeom& q, DType, const void* g, DType, const void* w, DType dxd, void* dx) {
  avx512::conv_bwd_data_run<Bf16Kind, bf16, bf16>(q, g, w, dxd, dx);
}
void conv_bwd_filter_avx512bf16(const ConvGeom& q, DType, const void* x, DType, const void* g, DType dwd, void* dw) {
  avx512::conv_bwd_filter_run<Bf16Kind, bf16, bf16>(q, x, g, dwd, dw);
}

}  // namespace podlet::kernels
