// Convolutions on emulated AMX tiles (conv_amx_impl.h, Emu): the blocking and packing of
// conv_amx.cc with TDPBF16PS arithmetic in plain C++, on any host. Baseline x86-64.
#include "podlet/kernels/conv_amx_impl.h"

namespace podlet::kernels {

// Preconditions (checked by the dispatchers): bf16 operands, f32 / bf16 output,
// conv_amx_geometry.
void conv_fwd_amx_emu(const ConvGeom& q, const void* x, const void* w, DType yd, void* y) {
  amx::conv_fwd_tiles<amx::Emu>(q, static_cast<const bf16*>(x), static_cast<const bf16*>(w), yd, y);
}
void conv_bwd_data_amx_emu(const ConvGeom& q, const void* g, const void* w, DType dxd, void* dx) {
  amx::conv_bwd_data_tiles<amx::Emu>(q, static_cast<const bf16*>(g), static_cast<const bf16*>(w), dxd, dx);
}
void conv_bwd_filter_amx_emu(const ConvGeom& q, const void* x, const void* g, DType dwd, void* dw) {
  amx::conv_bwd_filter_tiles<amx::Emu>(q, static_cast<const bf16*>(x), static_cast<const bf16*>(g), dwd, dw);
}

}  // namespace podlet::kernels
