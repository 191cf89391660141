// The eager exp / logistic / tanh / erf loop (kernels/unary_math_loops.h) for AVX2 + FMA hosts, 8 lanes.
#include "podlet/kernels/unary_math_loops.h"

namespace podlet::kernels {

void unary_math_avx2(const UnaryMathArgs& a, int64_t b, int64_t e) { unary_math_loop(a, b, e); }

}  // namespace podlet::kernels
