// The element loops of sgd_momentum_update and lion_update (prims/optim_sgd_lion.cc,
// which holds the op sequence and why): one chunk [b, e) of the arrays per call. The
// plain C++ loops (kernels/optim_sgd_lion_loops.h) are compiled twice: for baseline
// x86-64 (SSE2, the `ref` path) in the prims file, and with AVX2 in
// kernels/optim_sgd_lion_avx2.cc (-ffp-contract=off: no fused multiply-adds), where GCC
// vectorises them 8 lanes wide; both give the same bits, since every op is one IEEE
// operation per element.
#pragma once
#include <cstdint>
#include "podlet/dtype.h"

namespace podlet::kernels {

// param, grad and the optimizer state in; the update (or the new param) and the new state
// out; all of `dtype` (f32, bf16 or f64) and one length.
struct UpdateBuffers {
  DType dtype;
  const void* p;
  const void* g;
  const void* s;
  void* o;
  void* so;
};

// Constants already rounded to the dtype (as doubles).
struct SgdStep {
  UpdateBuffers buf;
  double momentum, neg_lr, gnorm, max_norm;
  bool clip, nesterov, apply;
};

struct LionStep {
  UpdateBuffers buf;
  double one_m_b1, b1, one_m_b2, b2, wd, neg_lr, gnorm, max_norm;
  bool clip, decay, apply;
};

void sgd_momentum_avx2(const SgdStep& s, int64_t b, int64_t e);
void lion_avx2(const LionStep& s, int64_t b, int64_t e);

}  // namespace podlet::kernels
