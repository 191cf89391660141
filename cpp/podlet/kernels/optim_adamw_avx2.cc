// adamw_update's element loop for AVX2 hosts (kernels/optim_adamw_loops.h): the baseline
// loop vectorised 8 lanes wide, the same bits. tests/test_optim_fused.py checks every ISA
// the host runs against `ref` bit for bit.
#include "podlet/kernels/optim_adamw_loops.h"

namespace podlet::kernels {

void adamw_avx2(const AdamWStep& s, int64_t b, int64_t e) { adamw_loop(s, b, e); }

}  // namespace podlet::kernels
