// Winograd F(2x2, 3x3) convolutions for bf16 3x3 stride-1 layers (the default there).
//
// y = A^T [ (G w G^T) . (B^T d B) ] A per 2x2 output tile (Lavin & Gray 2015): 16
// products per tile and channel pair instead of 36, so a 3x3 layer does 4/9 of the direct
// convolution's multiplications as 16 GEMMs (one per tile position, vdpbf16ps into f32)
// between transformed input tiles and transformed filters. Backward-data is the same
// computation on g with the filter flipped and transposed. Backward-filter is the
// forward's adjoint in the transformed filter: dV = sum over tiles of U^T (A g A^T) per
// position (GEMMs whose K is the tiles), dw = G^T dV G.
//
// Numerics differ from the direct kernels: the transformed tiles and filters are rounded
// to bf16 before the products (the GEMM's operands), so the error is about 2.5x that of
// the direct convolution's bf16 output rounding (rms ~4e-3 relative vs ~1.7e-3, measured
// in tests/test_conv_winograd.py; backward-filter's g tiles are rounded the same way),
// and an infinite input gives NaN where the direct kernel gives +-inf. That is bf16's own
// order of error (rounding an input to bf16 costs up to 2^-9), and training converges
// the same (bench/winograd_training.py), so it is the default at lax.Precision.DEFAULT,
// as cuDNN picks Winograd for fp16 convolutions and a TPU's DEFAULT rounds f32 operands
// to bf16. Exact products remain a request away: precision HIGH / HIGHEST on the layer
// (ConvGeom::exact; nn.Conv(precision=...)), or everywhere with
// podlet.config.update("conv_winograd", False) / PODLET_CONV_WINOGRAD=0.
// Bits do not depend on the thread count: every output tile is computed by one task in
// a fixed order, and backward-filter's sums over tiles run in splits and blocks fixed by
// the shape, added in order.
#pragma once
#include <cstdint>
#include "podlet/dtype.h"
#include "podlet/kernels/conv.h"

namespace podlet::kernels {

// Whether conv_fwd / conv_bwd_data / conv_bwd_filter take the Winograd path for the layers it covers.
bool conv_winograd_enabled();
void set_conv_winograd(bool on);
struct WinogradStats { int64_t fwd = 0, bwd_data = 0, bwd_filter = 0; };
WinogradStats conv_winograd_stats();  // calls taken since start (tests)

// The layers it covers: 3x3, stride 1, no dilation, one group, C and O multiples of 16.
bool conv_winograd_geometry(const ConvGeom& q);

// AVX512_BF16 kernels (conv_winograd_avx512bf16.cc): bf16 operands, f32 / bf16 output.
// Their temporaries come from the array buffer pool (engine::PoolBuf).
void conv_fwd_winograd_avx512bf16(const ConvGeom& q, const void* x, const void* w, DType yd, void* y);
void conv_bwd_data_winograd_avx512bf16(const ConvGeom& q, const void* g, const void* w, DType dxd, void* dx);
void conv_bwd_filter_winograd_avx512bf16(const ConvGeom& q, const void* x, const void* g, DType dwd, void* dw);

}  // namespace podlet::kernels
