// The reference build of the fused row kernels (baseline ISA), and the f64 forms.
#include "podlet/kernels/norm_impl.h"

PODLET_NORM_DEFINE(ref)

namespace podlet::kernels {
void layer_norm_fwd_ref(const NormRows& p, const double* x, const double* scale, const double* bias, double* y,
                        double* mean, double* rstd) {
  nk::ln_fwd<double, double, double>(p, x, scale, bias, y, mean, rstd);
}
void layer_norm_bwd_ref(const NormRows& p, const double* dy, const double* x, const double* mean,
                        const double* rstd, const double* scale, double* dx, double* dscale, double* dbias) {
  nk::ln_bwd<double, double, double>(p, dy, x, mean, rstd, scale, dx, dscale, dbias);
}
void softmax_fwd_ref(int64_t rows, int64_t C, bool log, const double* x, double* y) {
  nk::sm_fwd<double, double>(rows, C, log, x, y);
}
void softmax_bwd_ref(int64_t rows, int64_t C, bool log, const double* y, const double* dy, double* dx) {
  nk::sm_bwd<double, double>(rows, C, log, y, dy, dx);
}
}  // namespace podlet::kernels
