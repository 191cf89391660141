// Backward-data for narrow input channels (C < 8, one group: a 1-channel mammogram stem,
// an RGB stem). The implicit GEMM of conv_avx512_impl.h has N = C there and would use
// 1 or 3 of each 32-column panel (the dispatcher kept such shapes on the reference:
// ~2 s for the 224x224x1 7x7/2 stem at batch 32). Here the wide dimension is the taps:
//   V[(n, oh, ow), (kh, kw, ci)] = sum_o g[n, oh, ow, o] w[kh, kw, ci, o]   (gemm())
//   dx[n, ih, iw, ci] = sum over the taps (kh, kw) that reach (ih, iw), in (kh, kw)
//                       order, of V at the output pixel they come from      (col2im)
// so the products go through the active ISA's GEMM and only the gather is plain C++.
// V is f32 and holds a few images at a time (~4 MB, or one image). Every dx element is one
// fixed sum (the GEMM's o order, then taps in order): the bits do not depend on the
// thread count. The order differs from the reference's single (kh, kw, o) chain, so the
// two agree to rounding.
#include <algorithm>
#include <memory>
#include <vector>
#include "podlet/kernels/conv.h"
#include "podlet/kernels/gemm.h"
#include "podlet/parallel.h"

namespace podlet::kernels {

void conv_bwd_data_col2im(const ConvGeom& q, DType gd, const void* g, DType wd, const void* w, DType dxd, void* dx) {
  const int64_t C = q.C, O = q.O, T = q.KH * q.KW * C, rows = q.Ho * q.Wo;
  const int64_t per = std::clamp<int64_t>((int64_t(1) << 20) / std::max<int64_t>(1, rows * T), 1, q.N);
  // Not a std::vector: no zero fill, every element is written by the GEMM.
  std::unique_ptr<float[]> V(new float[size_t(per * rows * T)]);
  GemmArgs ga;
  ga.K = O;
  ga.N = T;
  ga.a_dtype = gd;
  ga.b_dtype = wd;
  ga.c_dtype = DType::f32;
  ga.b = w;
  ga.c = V.get();
  ga.a_batch = {0};
  ga.b_batch = {0};
  ga.a_k.resize(O);
  ga.b_k.resize(O);
  for (int64_t o = 0; o < O; ++o) ga.a_k[o] = ga.b_k[o] = o;  // g rows and w rows are contiguous in o
  ga.b_col.resize(T);
  for (int64_t t = 0; t < T; ++t) ga.b_col[t] = t * O;  // w[(kh, kw, ci), o]
  const size_t gsz = itemsize(gd), dsz = itemsize(dxd);
  const int64_t WC = q.W * C;
  for (int64_t n0 = 0; n0 < q.N; n0 += per) {
    const int64_t nn = std::min(per, q.N - n0);
    ga.M = nn * rows;
    ga.a_row.resize(ga.M);
    for (int64_t m = 0; m < ga.M; ++m) ga.a_row[m] = m * O;
    ga.a = static_cast<const char*>(g) + size_t(n0 * rows * O) * gsz;
    gemm(ga);
    // One task per dx row (n, ih): its taps' output rows, then each pixel's sums.
    parallel_for(nn * q.H, 4, [&](int64_t b, int64_t e) {
      std::vector<float> acc(static_cast<size_t>(WC), 0.f);
      for (int64_t r = b; r < e; ++r) {
        const int64_t n = r / q.H, ih = r % q.H;
        std::fill(acc.begin(), acc.end(), 0.f);
        for (int64_t kh = 0; kh < q.KH; ++kh) {
          const int64_t th = ih + q.ph - kh * q.rdh;  // = oh * sh when tap kh reaches ih
          if (th < 0 || th % q.sh) continue;
          const int64_t oh = th / q.sh;
          if (oh >= q.Ho) continue;
          for (int64_t kw = 0; kw < q.KW; ++kw) {
            // ow reaches iw = ow * sw + kw * rdw - pw; those inside [0, W) in one sweep.
            const int64_t base = kw * q.rdw - q.pw;
            const int64_t ow0 = std::max<int64_t>(0, (-base + q.sw - 1) / q.sw);  // -base may be <= 0: clamp
            const int64_t ow1 = q.W - 1 - base < 0 ? 0 : std::min<int64_t>(q.Wo, (q.W - 1 - base) / q.sw + 1);
            const float* vt = V.get() + (n * rows + oh * q.Wo) * T + (kh * q.KW + kw) * C;
            if (ow0 >= ow1) continue;
            float* a = acc.data() + (ow0 * q.sw + base) * C;
            const float* v = vt + ow0 * T;
            const int64_t cnt = ow1 - ow0, as = q.sw * C;
            if (C == 1) {  // the 1-channel stem: a strided sweep
              for (int64_t j = 0; j < cnt; ++j) a[j * as] += v[j * T];
            } else {
              for (int64_t j = 0; j < cnt; ++j)
                for (int64_t ci = 0; ci < C; ++ci) a[j * as + ci] += v[j * T + ci];
            }
          }
        }
        store_row(dxd, static_cast<char*>(dx) + size_t(((n0 + n) * q.H + ih) * WC) * dsz, 0, WC, acc.data());
      }
    });
  }
}

}  // namespace podlet::kernels
