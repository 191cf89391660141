// The reference build of the fused attention kernels (baseline ISA), and the f64 forms.
#include "podlet/kernels/attention_impl.h"

PODLET_ATTN_DEFINE(ref)

namespace podlet::kernels {
void attention_fwd_ref(const Attn& p, const double* q, const double* k, const double* v, double* out, double* lse) {
  fwd_impl<double, double>(p, q, k, v, out, lse);
}
void attention_bwd_ref(const Attn& p, const double* q, const double* k, const double* v, const double* out,
                       const double* lse, const double* dout, double* dq, double* dk, double* dv, double* dbias) {
  bwd_impl<double, double>(p, q, k, v, out, lse, dout, dq, dk, dv, dbias);
}
}  // namespace podlet::kernels
