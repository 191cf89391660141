// AVX-512 convolutions, F32Kind: f32 / bf16 operands in any mix, widened to f32 when
// packed, 16-lane FMAs (conv_avx512_impl.h).
#include "podlet/kernels/conv_avx512_impl.h"

namespace podlet::kernels {

using avx512::F32Kind;
using engine::two_types;

void conv_fwd_avx512(const ConvGeom& q, DType xd, const void* x, DType wd, const void* w, DType yd, void* y) {
  two_types(xd, wd, [&](auto a, auto b) { avx512::conv_fwd_run<F32Kind, decltype(a), decltype(b)>(q, x, w, yd, y); });
}
void conv_bwd_data_avx512(const ConvGeom& q, DType gd, const void* g, DType wd, const void* w, DType dxd, void* dx) {
  two_types(gd, wd, [&](auto a, auto b) { avx512::conv_bwd_data_run<F32Kind, decltype(a), decltype(b)>(q, g, w, dxd, dx); });
}
void conv_bwd_filter_avx512(const ConvGeom& q, DType xd, const void* x, DType gd, const void* g, DType dwd, void* dw) {
  two_types(xd, gd, [&](auto a, auto b) { avx512::conv_bwd_filter_run<F32Kind, decltype(a), decltype(b)>(q, x, g, dwd, dw); });
}

}  // namespace podlet::kernels
