// The bf16 fused attention's pair kernel (attention_pairs_impl.h) on the plain C++
// emulation of vdpbf16ps: the same tiling, packing and bits as the AVX512_BF16 build, on
// any host (the tests' check of that kernel's logic where the instruction is missing).
#include "podlet/kernels/attention_pairs_impl.h"

PODLET_ATTN_PAIRS_DEFINE(pairs_ref, EmuPairs)
