// The fused AdamW update (prims/optim.cc: adamw_update) on f32 parameters, AVX-512: the
// scalar loop's op sequence 16 lanes at a time (IEEE division and square root, no
// contraction, apply's and the EMA's adds keeping the first operand's NaN), so the same
// bits; the outputs, fresh buffers written once, go out with non-temporal stores when
// the arrays are large (no read for ownership: 3-4 of the update's 7-9 streams).
#pragma once
#include <cstdint>
#include "podlet/dtype.h"

namespace podlet::kernels {

// What output 0 is, and whether an EMA of the new parameter is written as output 3 (and
// with which operand of its add first). Shared with the scalar loops (prims/optim.cc).
enum class AdamWOut { kUpdate, kApply, kApplyEma, kApplyEmaNewFirst };

struct AdamWF32 {
  const float* p;
  const float* g;          // null when the grads are bf16 (g16)
  const uint16_t* g16;     // bf16 grads, widened exactly; null when g is set
  const float *m, *v, *ema;  // ema: null without the EMA output
  float *o, *mo, *vo, *eo;
  float one_m_b1, b1, one_m_b2, b2, eps, eps_root, wd, neg_lr, bc1, bc2, gnorm, max_norm, ema_c_old, ema_c_new;
  bool clip, decay;
  AdamWOut out;
  bool stream;
};

// Every dtype (f32, bf16, f64; bf16 grads of a wider param when g16): the op sequence of
// prims/optim.cc one element at a time (kernels/optim_adamw_loops.h), constants already
// rounded to the dtype. AVX2 build: adamw_avx2; the baseline build is the loop itself.
struct AdamWStep {
  DType dtype;
  bool g16;
  const void *p, *g, *m, *v, *ema;  // ema: null without the EMA output
  void *o, *mo, *vo, *eo;
  double one_m_b1, b1, one_m_b2, b2, eps, eps_root, wd, neg_lr, bc1, bc2, gnorm, max_norm;
  double ema_c_old, ema_c_new;
  bool clip, decay;
  AdamWOut out;
};
void adamw_avx2(const AdamWStep& s, int64_t b, int64_t e);

// Elements [b, e) of the update; false when the active ISA has no AVX-512 (the caller's
// scalar loop then runs).
bool adamw_f32(const AdamWF32& a, int64_t b, int64_t e);
void adamw_f32_avx512(const AdamWF32& a, int64_t b, int64_t e);

}  // namespace podlet::kernels
