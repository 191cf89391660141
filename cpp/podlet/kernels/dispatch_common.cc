// Kernel selection: the one place each op lists its variants, best ISA first, down to
// the reference. A variant is taken when the active ISA (cpu/isa.h: the host's best, or
// PODLET_ISA / set_isa) reaches it and it supports the dtypes and geometry. Compiled for
// baseline x86-64: it only calls an ISA file after that check.
#include "podlet/cpu/isa.h"
#include "podlet/kernels/conv.h"
#include "podlet/kernels/gemm.h"

namespace podlet::kernels {
namespace {

using cpu::Isa;

bool f32_or_bf16(DType d) { return d == DType::f32 || d == DType::bf16; }
bool use_avx2() { return int(cpu::active_isa()) >= int(Isa::avx2); }

}  // namespace

void gemm(const GemmArgs& g) {
  if (use_avx2() && f32_or_bf16(g.a_dtype) && f32_or_bf16(g.b_dtype) && f32_or_bf16(g.c_dtype) && g.B * g.M * g.N > 0)
    return gemm_avx2(g);
  gemm_ref(g);
}

// The conv fast paths are GEMMs whose N dim is O/G (forward, backward-filter) or C/G
// (backward-data): narrow groups (depthwise) would waste most of each 16-wide panel, so
// they stay on the reference, which has a loop order for them. lhs dilation (transposed
// convolutions) also stays there.
namespace {
bool conv_avx2_ok(const ConvGeom& q, DType a, DType b, DType out, int64_t n_dim) {
  return use_avx2() && f32_or_bf16(a) && f32_or_bf16(b) && f32_or_bf16(out) && q.ldh == 1 && q.ldw == 1 && n_dim >= 8;
}
}  // namespace

void conv_fwd(const ConvGeom& q, DType xd, const void* x, DType wd, const void* w, DType yd, void* y) {
  if (q.N * q.Ho * q.Wo * q.O > 0 && conv_avx2_ok(q, xd, wd, yd, q.Og())) return conv_fwd_avx2(q, xd, x, wd, w, yd, y);
  conv_fwd_ref(q, xd, x, wd, w, yd, y);
}

void conv_bwd_data(const ConvGeom& q, DType gd, const void* g, DType wd, const void* w, DType dxd, void* dx) {
  if (q.N * q.H * q.W * q.C > 0 && conv_avx2_ok(q, gd, wd, dxd, q.Cg()))
    return conv_bwd_data_avx2(q, gd, g, wd, w, dxd, dx);
  conv_bwd_data_ref(q, gd, g, wd, w, dxd, dx);
}

void conv_bwd_filter(const ConvGeom& q, DType xd, const void* x, DType gd, const void* g, DType dwd, void* dw) {
  if (q.KH * q.KW * q.Cg() * q.O > 0 && conv_avx2_ok(q, xd, gd, dwd, q.Og()))
    return conv_bwd_filter_avx2(q, xd, x, gd, g, dwd, dw);
  conv_bwd_filter_ref(q, xd, x, gd, g, dwd, dw);
}

}  // namespace podlet::kernels
