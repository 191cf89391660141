// Kernel selection for the fused row kernels (norm.h): avx512bf16 > avx512 > avx2 > ref, the same
// bits on each; f64 always on the reference. Baseline code: it calls an ISA build only
// after checking the active ISA (cpu/isa.h: the host's best, or PODLET_ISA / set_isa).
#include <atomic>
#include <type_traits>
#include "podlet/cpu/isa.h"
#include "podlet/kernels/norm.h"

namespace podlet::kernels {
namespace {
std::atomic<const char*> g_norm_isa{"none"};
bool at_least(cpu::Isa i) { return int(cpu::active_isa()) >= int(i); }
}  // namespace

const char* norm_last_isa() { return g_norm_isa.load(); }

// Calls NAME_<isa>(args...) for the best build the active ISA reaches.
#define PODLET_NORM_PICK(NAME, ...)             \
  if (at_least(cpu::Isa::avx512bf16)) {         \
    g_norm_isa = "avx512bf16";                  \
    NAME##_avx512bf16(__VA_ARGS__);             \
  } else if (at_least(cpu::Isa::avx512)) {      \
    g_norm_isa = "avx512";                      \
    NAME##_avx512(__VA_ARGS__);                 \
  } else if (at_least(cpu::Isa::avx2)) {        \
    g_norm_isa = "avx2";                        \
    NAME##_avx2(__VA_ARGS__);                   \
  } else {                                      \
    g_norm_isa = "ref";                         \
    NAME##_ref(__VA_ARGS__);                    \
  }

template <class T, class O, class A>
void layer_norm_fwd(const NormRows& p, const T* x, const A* scale, const A* bias, O* y, A* mean, A* rstd) {
  if constexpr (std::is_same_v<A, double>) {
    static_assert(std::is_same_v<T, double> && std::is_same_v<O, double>);
    g_norm_isa = "ref";
    layer_norm_fwd_ref(p, x, scale, bias, y, mean, rstd);
  } else {
    PODLET_NORM_PICK(layer_norm_fwd, p, x, scale, bias, y, mean, rstd)
  }
}

template <class T, class O, class A>
void layer_norm_bwd(const NormRows& p, const O* dy, const T* x, const A* mean, const A* rstd, const A* scale,
                    T* dx, A* dscale, A* dbias) {
  if constexpr (std::is_same_v<A, double>) {
    static_assert(std::is_same_v<T, double> && std::is_same_v<O, double>);
    g_norm_isa = "ref";
    layer_norm_bwd_ref(p, dy, x, mean, rstd, scale, dx, dscale, dbias);
  } else {
    PODLET_NORM_PICK(layer_norm_bwd, p, dy, x, mean, rstd, scale, dx, dscale, dbias)
  }
}

template <class T>
void softmax_fwd(int64_t rows, int64_t C, bool log, const T* x, T* y) {
  if constexpr (std::is_same_v<T, double>) {
    g_norm_isa = "ref";
    softmax_fwd_ref(rows, C, log, x, y);
  } else {
    PODLET_NORM_PICK(softmax_fwd, rows, C, log, x, y)
  }
}

template <class T>
void softmax_bwd(int64_t rows, int64_t C, bool log, const T* y, const T* dy, T* dx) {
  if constexpr (std::is_same_v<T, double>) {
    g_norm_isa = "ref";
    softmax_bwd_ref(rows, C, log, y, dy, dx);
  } else {
    PODLET_NORM_PICK(softmax_bwd, rows, C, log, y, dy, dx)
  }
}
#undef PODLET_NORM_PICK

#define PODLET_NORM_INST(T, O, A)                                                                            \
  template void layer_norm_fwd<T, O, A>(const NormRows&, const T*, const A*, const A*, O*, A*, A*);           \
  template void layer_norm_bwd<T, O, A>(const NormRows&, const O*, const T*, const A*, const A*, const A*, T*, \
                                        A*, A*);
PODLET_NORM_INST(float, float, float)
PODLET_NORM_INST(float, bf16, float)
PODLET_NORM_INST(bf16, float, float)
PODLET_NORM_INST(bf16, bf16, float)
PODLET_NORM_INST(double, double, double)
#undef PODLET_NORM_INST
template void softmax_fwd<float>(int64_t, int64_t, bool, const float*, float*);
template void softmax_fwd<bf16>(int64_t, int64_t, bool, const bf16*, bf16*);
template void softmax_fwd<double>(int64_t, int64_t, bool, const double*, double*);
template void softmax_bwd<float>(int64_t, int64_t, bool, const float*, const float*, float*);
template void softmax_bwd<bf16>(int64_t, int64_t, bool, const bf16*, const bf16*, bf16*);
template void softmax_bwd<double>(int64_t, int64_t, bool, const double*, const double*, double*);

}  // namespace podlet::kernels
