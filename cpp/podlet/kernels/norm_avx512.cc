// The AVX-512 build of the fused row kernels: norm_avx512_impl.h's zmm forms (the
// reference's bits: -ffp-contract=off, the same lanes and order).
#include "podlet/kernels/norm_avx512_impl.h"

PODLET_NORM_DEFINE_IN(avx512, nz)
