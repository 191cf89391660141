// Kernel selection: the one place each op lists its variants, best ISA first, down to
// the reference. A variant is taken when the active ISA (cpu/isa.h: the host's best, or
// PODLET_ISA / set_isa) reaches it and it supports the dtypes and geometry. Compiled for
// baseline x86-64: it only calls an ISA file after that check.
#include "podlet/cpu/isa.h"
#include "podlet/env.h"
#include <atomic>
#include <type_traits>
#include "podlet/kernels/attention.h"
#include "podlet/kernels/conv.h"
#include "podlet/kernels/conv_winograd.h"
#include "podlet/kernels/gemm.h"
#include "podlet/kernels/convert.h"
#include "podlet/kernels/optim.h"
#include "podlet/kernels/pool.h"

namespace podlet::kernels {
namespace {

using cpu::Isa;

bool f32_or_bf16(DType d) { return d == DType::f32 || d == DType::bf16; }
bool isa_at_least(Isa i) { return int(cpu::active_isa()) >= int(i); }
bool use_avx2() { return isa_at_least(Isa::avx2); }

}  // namespace

namespace {
std::atomic<bool> g_amx_emulation{env_flag("PODLET_AMX_EMULATE", false)};
std::atomic<const char*> g_gemm_path{"none"};
// The AMX variant of a kernel runs: emulated when the switch is on, else on the tiles
// when the active ISA is amx.
enum class Amx { off, hw, emu };
Amx amx_mode() {
  if (g_amx_emulation.load(std::memory_order_relaxed)) return Amx::emu;
  return isa_at_least(Isa::amx) ? Amx::hw : Amx::off;
}
}  // namespace

bool amx_emulation() { return g_amx_emulation.load(); }
void set_amx_emulation(bool on) { g_amx_emulation.store(on); }
const char* gemm_last_path() { return g_gemm_path.load(); }

void gemm(const GemmArgs& g) {
  const bool bf16_operands = g.a_dtype == DType::bf16 && g.b_dtype == DType::bf16;
  if (bf16_operands && f32_or_bf16(g.c_dtype) && g.B * g.M * g.N > 0) {
    switch (amx_mode()) {
      case Amx::emu: g_gemm_path = "amx_emu"; return gemm_amx_emu(g);
      case Amx::hw: g_gemm_path = "amx"; return gemm_amx(g);
      case Amx::off: break;
    }
  }
  if (use_avx2() && f32_or_bf16(g.a_dtype) && f32_or_bf16(g.b_dtype) && f32_or_bf16(g.c_dtype) && g.B * g.M * g.N > 0) {
    // bf16 x bf16 takes the bf16 dot where it is the faster (cpu::use_bf16_dot); anything
    // with an f32 operand keeps f32 products.
    if (cpu::use_bf16_dot() && bf16_operands) {
      g_gemm_path = "avx512bf16";
      return gemm_avx512bf16(g);
    }
    if (isa_at_least(Isa::avx512)) {
      g_gemm_path = "avx512";
      return gemm_avx512(g);
    }
    g_gemm_path = "avx2";
    return gemm_avx2(g);
  }
  g_gemm_path = "ref";
  gemm_ref(g);
}

// The conv fast paths are GEMMs whose N dim is O/G (forward), C/G (backward-data) or
// KH*KW*C/G (backward-filter, M = O/G): narrow groups (depthwise) would waste most of
// each panel, so they stay on the reference, which has a loop order for them. lhs
// dilation (transposed convolutions) also stays there.
namespace {
enum class ConvPath { ref, avx2, avx512, avx512bf16 };
ConvPath conv_path(const ConvGeom& q, DType a, DType b, DType out, int64_t n_dim) {
  if (!(use_avx2() && f32_or_bf16(a) && f32_or_bf16(b) && f32_or_bf16(out) && q.ldh == 1 && q.ldw == 1 && n_dim >= 8))
    return ConvPath::ref;
  if (cpu::use_bf16_dot() && a == DType::bf16 && b == DType::bf16) return ConvPath::avx512bf16;
  return isa_at_least(Isa::avx512) ? ConvPath::avx512 : ConvPath::avx2;
}
}  // namespace

namespace {
// On unless PODLET_CONV_WINOGRAD is 0 / false / off / no.
std::atomic<bool> g_winograd{env_flag("PODLET_CONV_WINOGRAD", true)};
std::atomic<int64_t> g_winograd_fwd{0}, g_winograd_bwd_data{0}, g_winograd_bwd_filter{0};
// The Winograd path (conv_winograd.h) when it is on, the layer did not ask for exact
// products (precision HIGH / HIGHEST) and it covers the layer: bf16 operands on
// AVX512_BF16, output f32 or bf16.
bool winograd(const ConvGeom& q, DType a, DType b, DType out) {
  return g_winograd.load(std::memory_order_relaxed) && !q.exact && isa_at_least(Isa::avx512bf16) && a == DType::bf16 &&
         b == DType::bf16 && f32_or_bf16(out) && conv_winograd_geometry(q);
}
}  // namespace

bool conv_winograd_enabled() { return g_winograd.load(); }
void set_conv_winograd(bool on) { g_winograd.store(on); }
WinogradStats conv_winograd_stats() {
  return {g_winograd_fwd.load(), g_winograd_bwd_data.load(), g_winograd_bwd_filter.load()};
}
bool conv_winograd_geometry(const ConvGeom& q) {
  return q.KH == 3 && q.KW == 3 && q.sh == 1 && q.sw == 1 && q.ldh == 1 && q.ldw == 1 && q.rdh == 1 && q.rdw == 1 &&
         q.G == 1 && q.C % 16 == 0 && q.O % 16 == 0 && q.N * q.H * q.W * q.C > 0 && q.Ho * q.Wo * q.O > 0;
}

// One input channel, one group, no dilation, output channels in multiples of 16, a
// non-empty input and output: the grayscale stems.
bool conv_stem_geometry(const ConvGeom& q) {
  return q.C == 1 && q.G == 1 && q.ldh == 1 && q.ldw == 1 && q.rdh == 1 && q.rdw == 1 && q.O % 16 == 0 &&
         q.N * q.H * q.W * q.KH * q.KW * q.O > 0 && q.Ho * q.Wo > 0;
}
namespace {
bool stem(const ConvGeom& q, DType a, DType b, DType out) {
  return isa_at_least(Isa::avx512bf16) && a == DType::bf16 && b == DType::bf16 && f32_or_bf16(out) &&
         conv_stem_geometry(q);
}
}  // namespace

// One feature group, no lhs dilation, a GEMM N dim (output channels; input channels in
// backward-data) of at least 8 to fill the 16-column tiles, a non-empty problem.
bool conv_amx_geometry(const ConvGeom& q, int64_t n_dim) {
  return q.G == 1 && q.ldh == 1 && q.ldw == 1 && n_dim >= 8 && q.N * q.H * q.W * q.C > 0 &&
         q.Ho * q.Wo * q.O * q.KH * q.KW > 0;
}
namespace {
std::atomic<int64_t> g_conv_amx_calls{0};
// The AMX conv variant for these operands: off, on the tiles or emulated.
Amx conv_amx(const ConvGeom& q, DType a, DType b, DType out, int64_t n_dim) {
  if (!(a == DType::bf16 && b == DType::bf16 && f32_or_bf16(out) && conv_amx_geometry(q, n_dim))) return Amx::off;
  const Amx m = amx_mode();
  if (m != Amx::off) g_conv_amx_calls.fetch_add(1, std::memory_order_relaxed);
  return m;
}
}  // namespace
int64_t conv_amx_calls() { return g_conv_amx_calls.load(); }

// The grayscale stem keeps its own kernel ahead of the tiles: a 1-channel input gives the
// tiles' K (forward) or M (backward-filter) one element per tap to gather, and the stem
// kernel ran ResNet-34's 7x7/2 stem 5-13x faster than AMX (Xeon, 2026-12-02: forward 27.6
// vs 147 ms, backward-filter 27.6 vs 363 ms per two steps).
void conv_fwd(const ConvGeom& q, DType xd, const void* x, DType wd, const void* w, DType yd, void* y) {
  if (stem(q, xd, wd, yd) && !amx_emulation()) return conv_fwd_stem_avx512bf16(q, x, w, yd, y);
  switch (conv_amx(q, xd, wd, yd, q.O)) {
    case Amx::emu: return conv_fwd_amx_emu(q, x, w, yd, y);
    case Amx::hw: return conv_fwd_amx(q, x, w, yd, y);
    case Amx::off: break;
  }
  if (winograd(q, xd, wd, yd)) {
    g_winograd_fwd.fetch_add(1, std::memory_order_relaxed);
    return conv_fwd_winograd_avx512bf16(q, x, w, yd, y);
  }
  if (stem(q, xd, wd, yd)) return conv_fwd_stem_avx512bf16(q, x, w, yd, y);
  switch (q.N * q.Ho * q.Wo * q.O > 0 ? conv_path(q, xd, wd, yd, q.Og()) : ConvPath::ref) {
    case ConvPath::avx512bf16: return conv_fwd_avx512bf16(q, xd, x, wd, w, yd, y);
    case ConvPath::avx512: return conv_fwd_avx512(q, xd, x, wd, w, yd, y);
    case ConvPath::avx2: return conv_fwd_avx2(q, xd, x, wd, w, yd, y);
    case ConvPath::ref: return conv_fwd_ref(q, xd, x, wd, w, yd, y);
  }
}

void conv_bwd_data(const ConvGeom& q, DType gd, const void* g, DType wd, const void* w, DType dxd, void* dx) {
  switch (conv_amx(q, gd, wd, dxd, q.C)) {
    case Amx::emu: return conv_bwd_data_amx_emu(q, g, w, dxd, dx);
    case Amx::hw: return conv_bwd_data_amx(q, g, w, dxd, dx);
    case Amx::off: break;
  }
  if (winograd(q, gd, wd, dxd)) {
    g_winograd_bwd_data.fetch_add(1, std::memory_order_relaxed);
    return conv_bwd_data_winograd_avx512bf16(q, g, w, dxd, dx);
  }
  switch (q.N * q.H * q.W * q.C > 0 ? conv_path(q, gd, wd, dxd, q.Cg()) : ConvPath::ref) {
    case ConvPath::avx512bf16: return conv_bwd_data_avx512bf16(q, gd, g, wd, w, dxd, dx);
    case ConvPath::avx512: return conv_bwd_data_avx512(q, gd, g, wd, w, dxd, dx);
    case ConvPath::avx2: return conv_bwd_data_avx2(q, gd, g, wd, w, dxd, dx);
    case ConvPath::ref:
      // Too few input channels for the implicit GEMM's panels: the taps are the wide dim.
      if (q.N * q.H * q.W * q.C > 0 && q.G == 1 && q.C < 8 &&
          conv_path(q, gd, wd, dxd, 8) != ConvPath::ref && q.Ho * q.Wo * q.O > 0)
        return conv_bwd_data_col2im(q, gd, g, wd, w, dxd, dx);
      return conv_bwd_data_ref(q, gd, g, wd, w, dxd, dx);
  }
}

void conv_bwd_filter(const ConvGeom& q, DType xd, const void* x, DType gd, const void* g, DType dwd, void* dw) {
  if (stem(q, xd, gd, dwd) && !amx_emulation()) return conv_bwd_filter_stem_avx512bf16(q, x, g, dwd, dw);
  switch (conv_amx(q, xd, gd, dwd, q.O)) {
    case Amx::emu: return conv_bwd_filter_amx_emu(q, x, g, dwd, dw);
    case Amx::hw: return conv_bwd_filter_amx(q, x, g, dwd, dw);
    case Amx::off: break;
  }
  if (winograd(q, xd, gd, dwd)) {
    g_winograd_bwd_filter.fetch_add(1, std::memory_order_relaxed);
    return conv_bwd_filter_winograd_avx512bf16(q, x, g, dwd, dw);
  }
  if (stem(q, xd, gd, dwd)) return conv_bwd_filter_stem_avx512bf16(q, x, g, dwd, dw);
  switch (q.KH * q.KW * q.Cg() * q.O > 0 ? conv_path(q, xd, gd, dwd, q.Og()) : ConvPath::ref) {
    case ConvPath::avx512bf16: return conv_bwd_filter_avx512bf16(q, xd, x, gd, g, dwd, dw);
    case ConvPath::avx512: return conv_bwd_filter_avx512(q, xd, x, gd, g, dwd, dw);
    case ConvPath::avx2: return conv_bwd_filter_avx2(q, xd, x, gd, g, dwd, dw);
    case ConvPath::ref: return conv_bwd_filter_ref(q, xd, x, gd, g, dwd, dw);
  }
}

bool adamw_f32(const AdamWF32& a, int64_t b, int64_t e) {
  if (!isa_at_least(Isa::avx512)) return false;
  adamw_f32_avx512(a, b, e);
  return true;
}

namespace {
std::atomic<int64_t> g_convert_fast{0};
}  // namespace

bool convert_f32_bf16(const float* x, uint16_t* y, int64_t b, int64_t e) {
  if (!isa_at_least(Isa::avx512)) return false;
  g_convert_fast.fetch_add(1, std::memory_order_relaxed);
  convert_f32_bf16_avx512(x, y, b, e);
  return true;
}
bool convert_bf16_f32(const uint16_t* x, float* y, int64_t b, int64_t e) {
  if (!isa_at_least(Isa::avx512)) return false;
  g_convert_fast.fetch_add(1, std::memory_order_relaxed);
  convert_bf16_f32_avx512(x, y, b, e);
  return true;
}
int64_t convert_fast_calls() { return g_convert_fast.load(); }

namespace {
std::atomic<int64_t> g_maxpool_fast{0}, g_maxpool_fwd_fast{0};
}  // namespace

bool maxpool_fwd(const Pool2d& q, const float* x, float* y) {
  if (!isa_at_least(Isa::avx512) || q.C % 16 != 0 || q.N * q.Ho * q.Wo * q.C == 0) return false;
  g_maxpool_fwd_fast.fetch_add(1, std::memory_order_relaxed);
  maxpool_fwd_avx512(q, x, y);
  return true;
}
int64_t maxpool_fwd_fast_calls() { return g_maxpool_fwd_fast.load(); }

bool maxpool_grad(const Pool2d& q, const float* x, const float* src, float* dx) {
  if (!isa_at_least(Isa::avx512) || q.C % 16 != 0 || q.KH * q.KW > kMaxSelectWindow || q.N * q.H * q.W * q.C == 0) return false;
  g_maxpool_fast.fetch_add(1, std::memory_order_relaxed);
  maxpool_grad_avx512(q, x, src, dx);
  return true;
}
int64_t maxpool_grad_fast_calls() { return g_maxpool_fast.load(); }

namespace {
std::atomic<int64_t> g_maxpool_select_fast{0};
bool maxpool_select_ok(const Pool2d& q) {
  return isa_at_least(Isa::avx512) && q.C % 16 == 0 && q.KH * q.KW <= kMaxSelectWindow && q.N * q.Ho * q.Wo * q.C > 0;
}
}  // namespace

bool maxpool_fwd_select(const Pool2d& q, const float* x, float* y, int8_t* sel) {
  if (!maxpool_select_ok(q)) return false;
  g_maxpool_select_fast.fetch_add(1, std::memory_order_relaxed);
  maxpool_fwd_select_avx512(q, x, y, sel);
  return true;
}
bool maxpool_scatter(const Pool2d& q, const int8_t* sel, const float* src, float* dx) {
  if (!maxpool_select_ok(q) || q.H * q.W == 0) return false;
  g_maxpool_select_fast.fetch_add(1, std::memory_order_relaxed);
  maxpool_scatter_avx512(q, sel, src, dx);
  return true;
}
int64_t maxpool_select_fast_calls() { return g_maxpool_select_fast.load(); }


// ---- fused attention -----------------------------------------------------------------
// bf16: avx512bf16 (pair products) or, below it, the widening kernels; f32: avx512 > avx2
// > ref (the same bits on each); f64: ref.
namespace {
std::atomic<const char*> g_attention_isa{"none"};
std::atomic<bool> g_attention_pairs_emu{false};
}  // namespace

const char* attention_last_isa() { return g_attention_isa.load(); }
bool attention_pairs_emulation() { return g_attention_pairs_emu.load(); }
void set_attention_pairs_emulation(bool on) { g_attention_pairs_emu.store(on); }

template <class T, class A>
void attention_fwd(const Attn& p, const T* q, const T* k, const T* v, T* out, A* lse) {
  if constexpr (std::is_same_v<T, bf16>) {
    if (g_attention_pairs_emu.load(std::memory_order_relaxed)) {
      g_attention_isa = "pairs_ref";
      return attention_fwd_pairs_ref(p, q, k, v, out, lse);
    }
    if (isa_at_least(Isa::avx512bf16)) {
      g_attention_isa = "avx512bf16";
      return attention_fwd_avx512bf16(p, q, k, v, out, lse);
    }
  }
  if constexpr (std::is_same_v<T, double>) {
    g_attention_isa = "ref";
    attention_fwd_ref(p, q, k, v, out, lse);
  } else if (isa_at_least(Isa::avx512)) {
    g_attention_isa = "avx512";
    attention_fwd_avx512(p, q, k, v, out, lse);
  } else if (use_avx2()) {
    g_attention_isa = "avx2";
    attention_fwd_avx2(p, q, k, v, out, lse);
  } else {
    g_attention_isa = "ref";
    attention_fwd_ref(p, q, k, v, out, lse);
  }
}

template <class T, class A>
void attention_bwd(const Attn& p, const T* q, const T* k, const T* v, const T* out, const A* lse, const T* dout,
                   T* dq, T* dk, T* dv, A* dbias) {
  if constexpr (std::is_same_v<T, bf16>) {
    if (g_attention_pairs_emu.load(std::memory_order_relaxed)) {
      g_attention_isa = "pairs_ref";
      return attention_bwd_pairs_ref(p, q, k, v, out, lse, dout, dq, dk, dv, dbias);
    }
    if (isa_at_least(Isa::avx512bf16)) {
      g_attention_isa = "avx512bf16";
      return attention_bwd_avx512bf16(p, q, k, v, out, lse, dout, dq, dk, dv, dbias);
    }
  }
  if constexpr (std::is_same_v<T, double>) {
    g_attention_isa = "ref";
    attention_bwd_ref(p, q, k, v, out, lse, dout, dq, dk, dv, dbias);
  } else if (isa_at_least(Isa::avx512)) {
    g_attention_isa = "avx512";
    attention_bwd_avx512(p, q, k, v, out, lse, dout, dq, dk, dv, dbias);
  } else if (use_avx2()) {
    g_attention_isa = "avx2";
    attention_bwd_avx2(p, q, k, v, out, lse, dout, dq, dk, dv, dbias);
  } else {
    g_attention_isa = "ref";
    attention_bwd_ref(p, q, k, v, out, lse, dout, dq, dk, dv, dbias);
  }
}

template void attention_fwd<float, float>(const Attn&, const float*, const float*, const float*, float*, float*);
template void attention_fwd<bf16, float>(const Attn&, const bf16*, const bf16*, const bf16*, bf16*, float*);
template void attention_fwd<double, double>(const Attn&, const double*, const double*, const double*, double*,
                                            double*);
template void attention_bwd<float, float>(const Attn&, const float*, const float*, const float*, const float*,
                                          const float*, const float*, float*, float*, float*, float*);
template void attention_bwd<bf16, float>(const Attn&, const bf16*, const bf16*, const bf16*, const bf16*,
                                         const float*, const bf16*, bf16*, bf16*, bf16*, float*);
template void attention_bwd<double, double>(const Attn&, const double*, const double*, const double*,
                                            const double*, const double*, const double*, double*, double*,
                                            double*, double*);

}  // namespace podlet::kernels
