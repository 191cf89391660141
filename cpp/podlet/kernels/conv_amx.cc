// Convolutions on the AMX tiles (conv_amx_impl.h on the hardware backend).
#include "podlet/kernels/conv_amx_impl.h"

namespace podlet::kernels {

// Preconditions (checked by the dispatchers): bf16 operands, f32 / bf16 output,
// conv_amx_geometry, and the active ISA is amx.
void conv_fwd_amx(const ConvGeom& q, const void* x, const void* w, DType yd, void* y) {
  amx::conv_fwd_tiles<amx::Hw>(q, static_cast<const bf16*>(x), static_cast<const bf16*>(w), yd, y);
}
void conv_bwd_data_amx(const ConvGeom& q, const void* g, const void* w, DType dxd, void* dx) {
  amx::conv_bwd_data_tiles<amx::Hw>(q, static_cast<const bf16*>(g), static_cast<const bf16*>(w), dxd, dx);
}
void conv_bwd_filter_amx(const ConvGeom& q, const void* x, const void* g, DType dwd, void* dw) {
  amx::conv_bwd_filter_tiles<amx::Hw>(q, static_cast<const bf16*>(x), static_cast<const bf16*>(g), dwd, dw);
}

}  // namespace podlet::kernels
