// sgd_momentum_update and lion_update for AVX2 hosts (kernels/optim_sgd_lion.h): the
// baseline loops, vectorised 8 lanes wide. bf16 is bound by its roundings (one per op,
// ~8 instructions each), so it gains most: 11M elements on one Zen 3 core, SGD (Nesterov,
// clip, apply) 90 -> 43 ms and Lion 122 -> 52 ms; f32, bound by memory, 22 -> 18 and
// 30 -> 22 ms. tests/test_optim_fused_sgd_lion.py checks every ISA the host runs against
// `ref` bit for bit.
#include "podlet/kernels/optim_sgd_lion_loops.h"

namespace podlet::kernels {

void sgd_momentum_avx2(const SgdStep& s, int64_t b, int64_t e) { sgd_momentum_loop(s, b, e); }

void lion_avx2(const LionStep& s, int64_t b, int64_t e) { lion_loop(s, b, e); }

}  // namespace podlet::kernels
