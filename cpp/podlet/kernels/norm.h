// Fused row kernels over the last axis (prims/norm.cc): LayerNorm / RMSNorm forward and
// backward, softmax and log-softmax forward and backward. Each row is read once from
// memory (and written once); its second pass runs from cache.
//
// The arithmetic is Flax's and jax.nn's, in the accumulation type A (f32 for f32 and bf16
// data, f64 for f64):
//   layer_norm:  mean = sum(x) / C, var = max(0, sum(x*x) / C - mean*mean) (Flax's fast
//                variance; RMSNorm: mean = 0, var = sum(x*x) / C), rstd = 1 / sqrt(var + eps),
//                y = (x - mean) * (rstd * scale) + bias.
//   layer_norm_bwd: xhat = (x - mean) * rstd, g = dy * scale,
//                dx = ((g - sum(g) / C) - xhat * (sum(g * xhat) / C)) * rstd (RMSNorm: no
//                sum(g) term), dscale = sum over rows of dy * xhat, dbias = sum of dy.
//   softmax:     m = max(x), e = exp(x - m), y = e / sum(e)
//   log_softmax: s = x - m, y = s - log(sum(exp(s)))
//   softmax_bwd: dx = y * (dy - sum(dy * y));  log_softmax_bwd: dx = dy - exp(y) * sum(dy).
// Every row sum runs in 16 lanes (element j into lane j % 16, lanes combined by a fixed
// halving tree), so the vector builds give the reference's bits. dscale / dbias are summed
// per fixed block of rows and the blocks combined in order: no dependence on the thread
// count. bf16 data is widened to f32 on load and rounded to nearest even on store.
//
// One template (norm_impl.h) compiled for _ref on the baseline and _avx2; the same
// arithmetic on whole zmm registers (norm_avx512_impl.h) for _avx512 and _avx512bf16
// (vcvtneps2bf16 for bf16 stores); all with -ffp-contract=off. The dispatcher
// (norm_dispatch_common.cc) picks.
#pragma once
#include <cstdint>
#include "podlet/dtype.h"

namespace podlet::kernels {

struct NormRows {
  int64_t rows = 0, C = 0;  // rows of C features
  double eps = 0.0;
  bool use_mean = true;     // false: RMSNorm
};

// y [rows, C] (O); mean, rstd [rows] (A); scale, bias [C] (A) or nullptr.
template <class T, class O, class A>
void layer_norm_fwd(const NormRows& p, const T* x, const A* scale, const A* bias, O* y, A* mean, A* rstd);
// dx [rows, C] (T); dscale, dbias [C] (A), always written; scale may be nullptr.
template <class T, class O, class A>
void layer_norm_bwd(const NormRows& p, const O* dy, const T* x, const A* mean, const A* rstd, const A* scale,
                    T* dx, A* dscale, A* dbias);
// y = softmax(x) or log_softmax(x) over rows of C.
template <class T>
void softmax_fwd(int64_t rows, int64_t C, bool log, const T* x, T* y);
// dx from the forward's output y and the cotangent dy.
template <class T>
void softmax_bwd(int64_t rows, int64_t C, bool log, const T* y, const T* dy, T* dx);

// The per-ISA builds the dispatcher picks from (norm_{ref,avx2,avx512}.cc).
#define PODLET_NORM_DECLARE_TO(SUFFIX, T, O)                                                                    \
  void layer_norm_fwd_##SUFFIX(const NormRows& p, const T* x, const float* scale, const float* bias, O* y,      \
                               float* mean, float* rstd);                                                     \
  void layer_norm_bwd_##SUFFIX(const NormRows& p, const O* dy, const T* x, const float* mean, const float* rstd, \
                               const float* scale, T* dx, float* dscale, float* dbias);
#define PODLET_NORM_DECLARE(SUFFIX)                                                                          \
  PODLET_NORM_DECLARE_TO(SUFFIX, float, float)                                                               \
  PODLET_NORM_DECLARE_TO(SUFFIX, float, bf16)                                                                \
  PODLET_NORM_DECLARE_TO(SUFFIX, bf16, float)                                                                \
  PODLET_NORM_DECLARE_TO(SUFFIX, bf16, bf16)                                                                 \
  void softmax_fwd_##SUFFIX(int64_t rows, int64_t C, bool log, const float* x, float* y);                    \
  void softmax_fwd_##SUFFIX(int64_t rows, int64_t C, bool log, const bf16* x, bf16* y);                      \
  void softmax_bwd_##SUFFIX(int64_t rows, int64_t C, bool log, const float* y, const float* dy, float* dx);   \
  void softmax_bwd_##SUFFIX(int64_t rows, int64_t C, bool log, const bf16* y, const bf16* dy, bf16* dx);
PODLET_NORM_DECLARE(ref)
PODLET_NORM_DECLARE(avx2)
PODLET_NORM_DECLARE(avx512)
PODLET_NORM_DECLARE(avx512bf16)
#undef PODLET_NORM_DECLARE
#undef PODLET_NORM_DECLARE_TO

// f64 always runs the reference.
void layer_norm_fwd_ref(const NormRows& p, const double* x, const double* scale, const double* bias, double* y,
                        double* mean, double* rstd);
void layer_norm_bwd_ref(const NormRows& p, const double* dy, const double* x, const double* mean,
                        const double* rstd, const double* scale, double* dx, double* dscale, double* dbias);
void softmax_fwd_ref(int64_t rows, int64_t C, bool log, const double* x, double* y);
void softmax_bwd_ref(int64_t rows, int64_t C, bool log, const double* y, const double* dy, double* dx);

// Which build ran last ("ref", "avx2", "avx512", "avx512bf16"), for the ISA tests.
const char* norm_last_isa();

}  // namespace podlet::kernels
