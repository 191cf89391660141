// The fused elementwise interpreter's instruction loops built for AVX-512 (see
// prims/fused_ops.h): the same source as the baseline build, vectorised 16 lanes wide,
// with the same bits (compiled with -ffp-contract=off like every ISA file).
#include "podlet/prims/fused_ops.h"

namespace podlet::kernels {

void fused_exec_avx512(const fused::Instr& ins, const void* a, const void* b, const void* c, void* d, int64_t m) {
  fused_ops::exec_instr(ins, a, b, c, d, m);
}

}  // namespace podlet::kernels
