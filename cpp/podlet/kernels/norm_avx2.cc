// The AVX2 build of the fused row kernels (norm_impl.h; the reference's bits:
// -ffp-contract=off, lane-wise loops only).
#include "podlet/kernels/norm_impl.h"

PODLET_NORM_DEFINE(avx2)
