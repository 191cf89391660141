// The AVX-512 build of the fused attention kernels (attention_impl.h; the same bits as
// the reference: -ffp-contract=off, lane-wise loops only).
#include "podlet/kernels/attention_impl.h"

PODLET_ATTN_DEFINE(avx512)
