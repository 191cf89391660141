// Reference convolution kernels (see conv.h): implicit GEMM without im2col. Each task
// owns whole output rows; the innermost loop runs over output channels (contiguous in
// HWIO and NHWC), or over groups when groups are many and narrow (depthwise). The two
// inner-loop orders give the same per-element summation order, hence the same bits.
#include "podlet/kernels/conv.h"
#include "podlet/kernels/gemm.h"
#include "podlet/parallel.h"
#include <algorithm>
#include <vector>

namespace podlet::kernels {
namespace {

// Inner loops prefer channels when a group has at least this many of them.
constexpr int64_t kWideGroup = 8;

template <class Acc> constexpr DType acc_dtype() { return std::is_same_v<Acc, double> ? DType::f64 : DType::f32; }

// Input row (or column) hit by output position o and filter tap k, or -1.
inline int64_t in_pos(int64_t o, int64_t k, int64_t s, int64_t rd, int64_t p, int64_t ld, int64_t n) {
  int64_t t = o * s + k * rd - p;
  if (t < 0 || t % ld) return -1;
  t /= ld;
  return t < n ? t : -1;
}
// Output position fed by input position i through filter tap k, or -1 (the inverse).
inline int64_t out_pos(int64_t i, int64_t k, int64_t s, int64_t rd, int64_t p, int64_t ld, int64_t n) {
  int64_t t = i * ld + p - k * rd;
  if (t < 0 || t % s) return -1;
  t /= s;
  return t < n ? t : -1;
}

// A whole buffer as Acc: the buffer itself when it already is, else a converted copy.
template <class Acc>
const Acc* as_acc(DType d, const void* p, int64_t n, std::vector<Acc>& tmp) {
  if (d == acc_dtype<Acc>()) return static_cast<const Acc*>(p);
  tmp.resize(n);
  load_row<Acc>(d, p, 0, n, tmp.data());
  return tmp.data();
}

template <class Acc>
void fwd(const ConvGeom& q, DType xd, const void* x, DType wd, const void* w, DType yd, void* y) {
  const int64_t C = q.C, O = q.O, G = q.G, Cg = q.Cg(), Og = q.Og(), W = q.W, Wo = q.Wo;
  std::vector<Acc> wtmp;
  const Acc* wA = as_acc<Acc>(wd, w, q.KH * q.KW * Cg * O, wtmp);
  const bool direct_x = xd == acc_dtype<Acc>();
  parallel_for(q.N * q.Ho, 1, [&](int64_t r0, int64_t r1) {
    std::vector<Acc> acc(Wo * O), xrow(direct_x ? 0 : W * C);
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / q.Ho, oh = r % q.Ho;
      std::fill(acc.begin(), acc.end(), Acc(0));
      for (int64_t kh = 0; kh < q.KH; ++kh) {
        const int64_t ih = in_pos(oh, kh, q.sh, q.rdh, q.ph, q.ldh, q.H);
        if (ih < 0) continue;
        const int64_t xoff = (n * q.H + ih) * W * C;
        const Acc* xr;
        if (direct_x) xr = static_cast<const Acc*>(x) + xoff;
        else { load_row<Acc>(xd, x, xoff, W * C, xrow.data()); xr = xrow.data(); }
        for (int64_t ow = 0; ow < Wo; ++ow) {
          Acc* __restrict a = acc.data() + ow * O;
          for (int64_t kw = 0; kw < q.KW; ++kw) {
            const int64_t iw = in_pos(ow, kw, q.sw, q.rdw, q.pw, q.ldw, W);
            if (iw < 0) continue;
            const Acc* __restrict xv = xr + iw * C;
            const Acc* __restrict wk = wA + (kh * q.KW + kw) * Cg * O;
            if (Og >= kWideGroup || G == 1) {
              for (int64_t gi = 0; gi < G; ++gi)
                for (int64_t ci = 0; ci < Cg; ++ci) {
                  const Acc v = xv[gi * Cg + ci];
                  const Acc* __restrict wr = wk + ci * O + gi * Og;
                  Acc* __restrict ar = a + gi * Og;
                  for (int64_t co = 0; co < Og; ++co) ar[co] += v * wr[co];
                }
            } else {
              for (int64_t ci = 0; ci < Cg; ++ci)
                for (int64_t co = 0; co < Og; ++co)
                  for (int64_t gi = 0; gi < G; ++gi) a[gi * Og + co] += xv[gi * Cg + ci] * wk[ci * O + gi * Og + co];
            }
          }
        }
      }
      store_row<Acc>(yd, y, r * Wo * O, Wo * O, acc.data());
    }
  });
}

template <class Acc>
void bwd_data(const ConvGeom& q, DType gd, const void* g, DType wd, const void* w, DType dxd, void* dx) {
  const int64_t C = q.C, O = q.O, G = q.G, Cg = q.Cg(), Og = q.Og(), W = q.W, Wo = q.Wo;
  const int64_t taps = q.KH * q.KW;
  // wT[kh, kw, o, ci] = w[kh, kw, ci, o]: the inner loop then runs over input channels.
  std::vector<Acc> wtmp;
  const Acc* wA = as_acc<Acc>(wd, w, taps * Cg * O, wtmp);
  std::vector<Acc> wT(taps * O * Cg);
  for (int64_t t = 0; t < taps; ++t)
    for (int64_t ci = 0; ci < Cg; ++ci)
      for (int64_t o = 0; o < O; ++o) wT[(t * O + o) * Cg + ci] = wA[(t * Cg + ci) * O + o];
  const bool direct_g = gd == acc_dtype<Acc>();
  parallel_for(q.N * q.H, 1, [&](int64_t r0, int64_t r1) {
    std::vector<Acc> acc(W * C), grow(direct_g ? 0 : Wo * O);
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / q.H, ih = r % q.H;
      std::fill(acc.begin(), acc.end(), Acc(0));
      for (int64_t kh = 0; kh < q.KH; ++kh) {
        const int64_t oh = out_pos(ih, kh, q.sh, q.rdh, q.ph, q.ldh, q.Ho);
        if (oh < 0) continue;
        const int64_t goff = (n * q.Ho + oh) * Wo * O;
        const Acc* gr;
        if (direct_g) gr = static_cast<const Acc*>(g) + goff;
        else { load_row<Acc>(gd, g, goff, Wo * O, grow.data()); gr = grow.data(); }
        for (int64_t iw = 0; iw < W; ++iw) {
          Acc* __restrict a = acc.data() + iw * C;
          for (int64_t kw = 0; kw < q.KW; ++kw) {
            const int64_t ow = out_pos(iw, kw, q.sw, q.rdw, q.pw, q.ldw, Wo);
            if (ow < 0) continue;
            const Acc* __restrict gv = gr + ow * O;
            const Acc* __restrict wk = wT.data() + (kh * q.KW + kw) * O * Cg;
            if (Cg >= kWideGroup || G == 1) {
              for (int64_t gi = 0; gi < G; ++gi)
                for (int64_t co = 0; co < Og; ++co) {
                  const Acc v = gv[gi * Og + co];
                  const Acc* __restrict wr = wk + (gi * Og + co) * Cg;
                  Acc* __restrict ar = a + gi * Cg;
                  for (int64_t ci = 0; ci < Cg; ++ci) ar[ci] += v * wr[ci];
                }
            } else {
              for (int64_t co = 0; co < Og; ++co)
                for (int64_t ci = 0; ci < Cg; ++ci)
                  for (int64_t gi = 0; gi < G; ++gi)
                    a[gi * Cg + ci] += gv[gi * Og + co] * wk[(gi * Og + co) * Cg + ci];
            }
          }
        }
      }
      store_row<Acc>(dxd, dx, r * W * C, W * C, acc.data());
    }
  });
}

// dw rows (kh, kw, ci) are independent tasks; each sums over output pixels in (n, oh, ow)
// order. Each thread takes a contiguous range of tasks (any split gives the same bits:
// a task's summation order does not depend on it) and walks the pixels in blocks of
// output rows, so a block of g stays in cache while all its tasks read it. One fork.
template <class Acc, class TX>
void bwd_filter(const ConvGeom& q, const TX* x, DType gd, const void* g, DType dwd, void* dw) {
  const int64_t C = q.C, O = q.O, G = q.G, Cg = q.Cg(), Og = q.Og(), W = q.W, Wo = q.Wo;
  const int64_t R = q.KH * q.KW * Cg;
  std::vector<Acc> dwA(R * O, Acc(0));
  const int64_t rows = q.N * q.Ho;
  const int64_t RB = std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(1, Wo * O));
  const bool direct_g = gd == acc_dtype<Acc>();
  const int64_t nt = num_threads();
  parallel_for(R, (R + nt - 1) / nt, [&](int64_t t0, int64_t t1) {
    std::vector<Acc> gbuf(direct_g ? 0 : std::min(rows, RB) * Wo * O);
    for (int64_t b0 = 0; b0 < rows; b0 += RB) {
      const int64_t b1 = std::min(rows, b0 + RB);
      const Acc* gB;
      if (direct_g) gB = static_cast<const Acc*>(g) + b0 * Wo * O;
      else { load_row<Acc>(gd, g, b0 * Wo * O, (b1 - b0) * Wo * O, gbuf.data()); gB = gbuf.data(); }
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t kh = t / (q.KW * Cg), kw = (t / Cg) % q.KW, ci = t % Cg;
        Acc* __restrict a = dwA.data() + t * O;
        for (int64_t r = b0; r < b1; ++r) {
          const int64_t n = r / q.Ho, oh = r % q.Ho;
          const int64_t ih = in_pos(oh, kh, q.sh, q.rdh, q.ph, q.ldh, q.H);
          if (ih < 0) continue;
          const TX* xr = x + (n * q.H + ih) * W * C + ci;
          for (int64_t ow = 0; ow < Wo; ++ow) {
            const int64_t iw = in_pos(ow, kw, q.sw, q.rdw, q.pw, q.ldw, W);
            if (iw < 0) continue;
            const TX* xv = xr + iw * C;
            const Acc* __restrict gv = gB + ((r - b0) * Wo + ow) * O;
            if (Og >= kWideGroup || G == 1) {
              for (int64_t gi = 0; gi < G; ++gi) {
                const Acc v = load_one<Acc>(xv, gi * Cg);
                Acc* __restrict ar = a + gi * Og;
                const Acc* __restrict gr = gv + gi * Og;
                for (int64_t co = 0; co < Og; ++co) ar[co] += v * gr[co];
              }
            } else {
              for (int64_t co = 0; co < Og; ++co)
                for (int64_t gi = 0; gi < G; ++gi) a[gi * Og + co] += load_one<Acc>(xv, gi * Cg) * gv[gi * Og + co];
            }
          }
        }
      }
    }
  });
  store_row<Acc>(dwd, dw, 0, R * O, dwA.data());
}

void check_float(DType d, const char* what) {
  if (!is_float(d)) throw DTypeError(fmt("conv: ", what, " must be floating point, got ", dtype_name(d)));
}

}  // namespace

void conv_fwd_ref(const ConvGeom& q, DType xd, const void* x, DType wd, const void* w, DType yd, void* y) {
  check_float(xd, "lhs"); check_float(wd, "rhs"); check_float(yd, "output");
  if (q.N * q.Ho * q.Wo * q.O == 0) return;
  if (accumulate_in_f64(xd, wd, yd)) fwd<double>(q, xd, x, wd, w, yd, y);
  else fwd<float>(q, xd, x, wd, w, yd, y);
}

void conv_bwd_data_ref(const ConvGeom& q, DType gd, const void* g, DType wd, const void* w, DType dxd, void* dx) {
  check_float(gd, "g"); check_float(wd, "rhs"); check_float(dxd, "output");
  if (q.N * q.H * q.W * q.C == 0) return;
  if (accumulate_in_f64(gd, wd, dxd)) bwd_data<double>(q, gd, g, wd, w, dxd, dx);
  else bwd_data<float>(q, gd, g, wd, w, dxd, dx);
}

void conv_bwd_filter_ref(const ConvGeom& q, DType xd, const void* x, DType gd, const void* g, DType dwd, void* dw) {
  check_float(xd, "lhs"); check_float(gd, "g"); check_float(dwd, "output");
  if (q.KH * q.KW * q.Cg() * q.O == 0) return;
  auto run = [&](auto acc_tag) {
    using Acc = decltype(acc_tag);
    switch (xd) {
      case DType::f32: bwd_filter<Acc>(q, static_cast<const float*>(x), gd, g, dwd, dw); break;
      case DType::bf16: bwd_filter<Acc>(q, static_cast<const bf16*>(x), gd, g, dwd, dw); break;
      default: bwd_filter<Acc>(q, static_cast<const double*>(x), gd, g, dwd, dw); break;
    }
  };
  if (accumulate_in_f64(xd, gd, dwd)) run(double());
  else run(float());
}

}  // namespace podlet::kernels
