// reduce_cols.h on AVX-512: the fused interpreter's column sums (prims/fused_ops.h
// col_sums, pairwise_rows<SumOp<T>>'s tree) built 16 lanes wide, for f32 and bf16 elements.
#include "podlet/prims/fused_ops.h"
#include "podlet/kernels/reduce_cols.h"

namespace podlet::kernels {

void col_sums_avx512(const float* p, int64_t nrows, int64_t rs, int64_t w, float* acc, float* scratch) {
  fused_ops::col_sums(p, nrows, rs, w, acc, scratch);
}
void col_sums_avx512(const bf16* p, int64_t nrows, int64_t rs, int64_t w, float* acc, float* scratch) {
  fused_ops::col_sums(p, nrows, rs, w, acc, scratch);
}

}  // namespace podlet::kernels
