// Column sums of reduce_sum's column reductions on AVX-512 (reduce_avx512.cc): the tree
// of prims/reduce_ops.h's pairwise_rows<SumOp<T>> (16-row leaves added row by row, halves
// above, every addition x86's first-NaN add), 16 columns per instruction. The baseline
// loop GCC vectorised 4 wide ran a bias gradient at ~4 GB/s.
#pragma once
#include <cstdint>
#include "podlet/dtype.h"

namespace podlet::kernels {
// acc[0..w) = the sum over rows r < nrows of p[r * rs + j]; scratch holds w floats per
// level of the tree (reduce_ops.h scratch_levels).
void col_sums_avx512(const float* p, int64_t nrows, int64_t rs, int64_t w, float* acc, float* scratch);
void col_sums_avx512(const bf16* p, int64_t nrows, int64_t rs, int64_t w, float* acc, float* scratch);
}  // namespace podlet::kernels
