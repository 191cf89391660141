// 2-D convolution kernels: forward, backward-data and backward-filter, NHWC activations
// and HWIO filters, with strides, explicit (possibly negative) padding, lhs (input)
// dilation, rhs (filter) dilation and feature groups: XLA's conv_general_dilated.
//
// Geometry: input row ih sits at position ih*ldh of the dilated input; output row oh,
// filter row kh read dilated position oh*sh + kh*rdh - ph (ph = low padding), which
// hits an input row when it is a multiple of ldh inside [0, (H-1)*ldh]. Same for W.
// Filter [KH, KW, C/G, O]: output channel o belongs to group o / (O/G) and sees input
// channels (o / (O/G)) * (C/G) + [0, C/G).
//
// Operands may be bf16 / f32 / f64 (each its own); accumulation is f32, or f64 when any
// operand or the output is f64. Every output element is summed in a fixed order
// (forward: kh, kw, ci; backward-data: kh, kw, o; backward-filter: n, oh, ow), so the
// bits do not depend on the thread count (for a given ISA).
#pragma once
#include <cstdint>
#include "podlet/dtype.h"

namespace podlet::kernels {

struct ConvGeom {
  int64_t N = 0, H = 0, W = 0, C = 0;  // lhs NHWC
  int64_t KH = 0, KW = 0, O = 0;       // rhs HWIO = [KH, KW, C / G, O]
  int64_t G = 1;                       // feature_group_count
  int64_t Ho = 0, Wo = 0;              // output NHWC = [N, Ho, Wo, O]
  int64_t sh = 1, sw = 1;              // window_strides
  int64_t ph = 0, pw = 0;              // low padding (the high padding only shapes Ho, Wo)
  int64_t ldh = 1, ldw = 1;            // lhs_dilation
  int64_t rdh = 1, rdw = 1;            // rhs_dilation
  // precision HIGH / HIGHEST: exact products (the direct kernels); at DEFAULT, bf16 3x3
  // stride-1 layers may take Winograd (conv_winograd.h).
  bool exact = false;
  int64_t Cg() const { return C / G; }
  int64_t Og() const { return O / G; }
};

// The dispatchers (dispatch_common.cc): the fastest variant for the active ISA (cpu/isa.h)
// that takes the dtypes and geometry, else the reference. Same arguments as the _ref.
void conv_fwd(const ConvGeom& q, DType xd, const void* x, DType wd, const void* w, DType yd, void* y);
void conv_bwd_data(const ConvGeom& q, DType gd, const void* g, DType wd, const void* w, DType dxd, void* dx);
void conv_bwd_filter(const ConvGeom& q, DType xd, const void* x, DType gd, const void* g, DType dwd, void* dw);

// Reference kernels: plain C++, every dtype and geometry; the oracle of the fast paths.
// y[N, Ho, Wo, O] = conv(x[N, H, W, C], w[KH, KW, C/G, O]).
void conv_fwd_ref(const ConvGeom& q, DType xd, const void* x, DType wd, const void* w, DType yd, void* y);
// dx[N, H, W, C] = transpose of conv in x, applied to g[N, Ho, Wo, O].
void conv_bwd_data_ref(const ConvGeom& q, DType gd, const void* g, DType wd, const void* w, DType dxd, void* dx);
// dw[KH, KW, C/G, O] = transpose of conv in w, applied to g[N, Ho, Wo, O].
void conv_bwd_filter_ref(const ConvGeom& q, DType xd, const void* x, DType gd, const void* g, DType dwd, void* dw);

// Backward-data for narrow input channels (C < 8, G == 1, lhs_dilation 1, f32 / bf16):
// V = g w^T per output pixel and tap through gemm(), then a gather over the taps
// (conv_col2im.cc). Agrees with the _ref to rounding; bits independent of threads.
void conv_bwd_data_col2im(const ConvGeom& q, DType gd, const void* g, DType wd, const void* w, DType dxd, void* dx);

// AVX2+FMA implicit GEMMs (conv_avx2.cc): f32 / bf16 operands and output, lhs_dilation 1,
// non-empty output; f32 accumulation in fixed K blocks (a different order than the _ref,
// so results agree to rounding, and are bit-identical for any thread count).
void conv_fwd_avx2(const ConvGeom& q, DType xd, const void* x, DType wd, const void* w, DType yd, void* y);
void conv_bwd_data_avx2(const ConvGeom& q, DType gd, const void* g, DType wd, const void* w, DType dxd, void* dx);
void conv_bwd_filter_avx2(const ConvGeom& q, DType xd, const void* x, DType gd, const void* g, DType dwd, void* dw);

// AVX-512 (conv_avx512.cc): the same contract with 16-lane FMAs; backward-filter is
// computed as dw^T = g^T patches (M = output channels) and stored transposed.
void conv_fwd_avx512(const ConvGeom& q, DType xd, const void* x, DType wd, const void* w, DType yd, void* y);
void conv_bwd_data_avx512(const ConvGeom& q, DType gd, const void* g, DType wd, const void* w, DType dxd, void* dx);
void conv_bwd_filter_avx512(const ConvGeom& q, DType xd, const void* x, DType gd, const void* g, DType dwd, void* dw);
// AVX512_BF16 (conv_avx512bf16.cc): bf16 operands only, K pairs through vdpbf16ps.
void conv_fwd_avx512bf16(const ConvGeom& q, DType xd, const void* x, DType wd, const void* w, DType yd, void* y);
void conv_bwd_data_avx512bf16(const ConvGeom& q, DType gd, const void* g, DType wd, const void* w, DType dxd, void* dx);
void conv_bwd_filter_avx512bf16(const ConvGeom& q, DType xd, const void* x, DType gd, const void* g, DType dwd, void* dw);

// AMX tiles (conv_amx.cc; conv_amx_emu.cc on emulated tiles, any host): implicit GEMMs
// with the patches gathered straight into tiles (conv_amx_impl.h). bf16 operands, f32 /
// bf16 output, the layers conv_amx_geometry takes; exact products, each output summed in
// conv.h's K order in one f32 accumulator: agrees with the _ref to rounding, bits
// independent of threads.
bool conv_amx_geometry(const ConvGeom& q, int64_t n_dim);
int64_t conv_amx_calls();  // convolutions run on (real or emulated) tiles so far (tests)
void conv_fwd_amx(const ConvGeom& q, const void* x, const void* w, DType yd, void* y);
void conv_bwd_data_amx(const ConvGeom& q, const void* g, const void* w, DType dxd, void* dx);
void conv_bwd_filter_amx(const ConvGeom& q, const void* x, const void* g, DType dwd, void* dw);
void conv_fwd_amx_emu(const ConvGeom& q, const void* x, const void* w, DType yd, void* y);
void conv_bwd_data_amx_emu(const ConvGeom& q, const void* g, const void* w, DType dxd, void* dx);
void conv_bwd_filter_amx_emu(const ConvGeom& q, const void* x, const void* g, DType dwd, void* dw);

// 1-channel layers (conv_stem_avx512bf16.cc): forward and backward-filter with the
// output channels as the vector dim and the input's bf16 pairs broadcast from padded row
// copies (nothing packed per pixel). Exact products, f32 sums in a fixed order: agrees
// with the _ref to rounding; bits independent of threads. Both operands bf16, output f32
// or bf16; the layers conv_stem_geometry takes.
bool conv_stem_geometry(const ConvGeom& q);
void conv_fwd_stem_avx512bf16(const ConvGeom& q, const void* x, const void* w, DType yd, void* y);
void conv_bwd_filter_stem_avx512bf16(const ConvGeom& q, const void* x, const void* g, DType dwd, void* dw);

}  // namespace podlet::kernels
