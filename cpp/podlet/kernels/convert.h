// convert_element_type between float32 and bfloat16 (prims/elementwise.cc), AVX-512: the
// scalar loop's rules 16 lanes at a time, so the same bits. f32 -> bf16 rounds to nearest
// even with a NaN becoming the canonical quiet NaN of its sign (f32_to_bf16_bits, as
// ml_dtypes); bf16 -> f32 is exact. The scalar loop is compiled for the baseline ISA
// (SSE2), where these ran at 10-25 GB/s: a ResNet-34 step casts 21M parameters to bf16
// and 21M gradients back, and the stem's activations once.
#pragma once
#include <cstdint>

namespace podlet::kernels {

// Elements [b, e); false when the active ISA has no AVX-512 (the caller's loop then runs).
bool convert_f32_bf16(const float* x, uint16_t* y, int64_t b, int64_t e);
bool convert_bf16_f32(const uint16_t* x, float* y, int64_t b, int64_t e);
int64_t convert_fast_calls();  // chunks the AVX-512 loops took since start (tests)

void convert_f32_bf16_avx512(const float* x, uint16_t* y, int64_t b, int64_t e);
void convert_bf16_f32_avx512(const uint16_t* x, float* y, int64_t b, int64_t e);

}  // namespace podlet::kernels
