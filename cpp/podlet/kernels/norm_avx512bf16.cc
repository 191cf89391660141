// The AVX512_BF16 build of the fused row kernels: the AVX-512 build's source, whose bf16
// stores round with vcvtneps2bf16 here (exact but for NaNs and subnormals, which take the
// integer sequence).
#include "podlet/kernels/norm_avx512_impl.h"

PODLET_NORM_DEFINE_IN(avx512bf16, nz)
