// The eager exp / logistic / tanh / erf loop (kernels/unary_math_loops.h) for the baseline build (SSE2; libm's fmaf for each FMA).
#include "podlet/kernels/unary_math_loops.h"

namespace podlet::kernels {

void unary_math_ref(const UnaryMathArgs& a, int64_t b, int64_t e) { unary_math_loop(a, b, e); }

}  // namespace podlet::kernels
