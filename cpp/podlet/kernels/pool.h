// Max-pool on NHWC images (reduce_window max and select_and_scatter_add with a
// (1, KH, KW, 1) window, f32): the AVX-512 form of prims/window.cc's image-pool loops.
// The forward takes v over the running maximum when v > it or v is NaN, in row-major
// window order from -inf (so the last NaN of a window, payload and all); the gradient
// makes the same selection (the first maximum, NaN counting as the maximum) and the same
// additions in the same order: the same bits as the loops. window.cc calls maxpool_fwd /
// maxpool_grad and keeps its own loops when they return false (lower ISA, channels not a
// multiple of 16, other dtypes).
#pragma once
#include <cstdint>

namespace podlet::kernels {

// The most window positions a selection holds: they are int8 (-1: a window with no input
// element).
constexpr int64_t kMaxSelectWindow = 127;

struct Pool2d {
  int64_t N, H, W, C, Ho, Wo, KH, KW, sh, sw, ph, pw;  // ph / pw: low padding (may be < 0)
};

// y [N, Ho, Wo, C] = max-pool(x [N, H, W, C]).
bool maxpool_fwd(const Pool2d& q, const float* x, float* y);
int64_t maxpool_fwd_fast_calls();  // calls taken by the AVX-512 kernel since start (tests)
void maxpool_fwd_avx512(const Pool2d& q, const float* x, float* y);

// dx = the gradient of y = max-pool(x) for dy = src ([N, Ho, Wo, C]); x, dx [N, H, W, C].
bool maxpool_grad(const Pool2d& q, const float* x, const float* src, float* dx);
int64_t maxpool_grad_fast_calls();  // calls taken by the AVX-512 kernel since start (tests)

void maxpool_grad_avx512(const Pool2d& q, const float* x, const float* src, float* dx);

// The gradient split at its selection, for a graph that keeps it from the forward pass
// (ir/pool_fusion.h): y and sel [N, Ho, Wo, C] (each window's first maximum per channel
// as an int8 window position, -1 for a window with no input element) in one read of x;
// then dx from src and sel alone. Same conditions as maxpool_grad.
bool maxpool_fwd_select(const Pool2d& q, const float* x, float* y, int8_t* sel);
bool maxpool_scatter(const Pool2d& q, const int8_t* sel, const float* src, float* dx);
int64_t maxpool_select_fast_calls();  // calls of either taken by the AVX-512 kernels since start (tests)

void maxpool_select_avx512(const Pool2d& q, const float* x, int8_t* sel);
void maxpool_fwd_select_avx512(const Pool2d& q, const float* x, float* y, int8_t* sel);
void maxpool_scatter_avx512(const Pool2d& q, const int8_t* sel, const float* src, float* dx);

}  // namespace podlet::kernels
