// AVX2+FMA convolutions (see conv.h for the geometry): forward, backward-data and
// backward-filter as implicit GEMMs on the engine of avx2_engine.h. Nothing like a full
// im2col is materialised: each task packs the patch block of its K block (at most
// 120 x 256 floats) just before the microkernels use it. Groups are separate GEMMs.
//
//   forward      y[(n,oh,ow), o]        = sum_{(kh,kw,ci)} x[n, ih, iw, ci] w[kh, kw, ci, o]
//   bwd-filter   dw[(kh,kw,ci), o]      = sum_{(n,oh,ow)}  x[n, ih, iw, ci] g[n, oh, ow, o]
//   bwd-data     dx[(n,ih,iw), ci]      = sum_{(kh,kw,o)}  g[n, oh, ow, o]  w[kh, kw, ci, o]
// bwd-data is the transposed convolution written as a direct one: dx pixel ih receives
// tap kh from oh = (ih + ph - kh*rdh) / sh only when that divides exactly, so dx pixels
// are split into sh x sw phases by (ih + ph) mod sh; within a phase every pixel has the
// same taps, and each phase is a dense GEMM over just those taps (no multiplications by
// the zeros of a dilated g, no col2im scatter, every dx element written once).
//
// Summation order per output element: K = (kh, kw, ci) / (n, oh, ow) / (kh, kw, o) in
// that order, in fixed blocks of KC: independent of the thread count.
// Preconditions (checked by the dispatchers in dispatch_common.cc): f32/bf16 operands and
// output, lhs_dilation 1.
#include "podlet/kernels/avx2_engine.h"
#include "podlet/kernels/conv.h"
#include <vector>

namespace podlet::kernels {
namespace {
using namespace avx2;

// ---------------------------------------------------------------- forward
template <class TX, class TW> void fwd(const ConvGeom& q, const void* xv, const void* wv, DType yd, void* y) {
  const TX* x = static_cast<const TX*>(xv);
  const TW* w = static_cast<const TW*>(wv);
  const int64_t G = q.G, Cg = q.Cg(), Og = q.Og(), C = q.C, O = q.O;
  const int64_t M = q.N * q.Ho * q.Wo, K = q.KH * q.KW * Cg;
  const int64_t panels = cdiv(Og, NR), gsize = panels * K * NR;
  // B[g][(kh, kw, ci), o] = w[kh, kw, ci, g*Og + o]: rows contiguous in o.
  FBuf bp(G * gsize);
  run_units(G * panels, double(G) * double(K) * double(Og), [&](int64_t u) {
    const int64_t gi = u / panels, n0 = (u % panels) * NR, nb = imin(NR, Og - n0);
    float* dst = bp.p + u * K * NR;
    for (int64_t k = 0; k < K; ++k) {
      copy_row(w + k * O + gi * Og + n0, nb, dst + k * NR);
      zero_row(dst + k * NR + nb, NR - nb);
    }
  });
  // One kh row of taps (kw, ci) is contiguous in x when G == 1 and rdw == 1.
  const bool row_contig = G == 1 && q.rdw == 1;
  const int64_t seg = q.KW * Cg;  // k per kh
  const Tiling t = choose_tiling(G, M, Og);
  run_tasks(G * t.mt * t.nt, 2.0 * double(M) * double(K) * double(O), [&](int64_t task, Scratch& s) {
    const int64_t gi = task / (t.mt * t.nt), r = task % (t.mt * t.nt);
    const int64_t m0 = (r / t.nt) * t.mc, n0 = (r % t.nt) * t.nc;
    const int64_t mb = imin(t.mc, M - m0), nb = imin(t.nc, Og - n0), ldc = round_up(nb, NR);
    auto pack = [&](int64_t mm, int64_t rows, int64_t k0, int64_t kb, float* dst, int64_t lda) {
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t m = mm + i, n = m / (q.Ho * q.Wo), oh = (m / q.Wo) % q.Ho, ow = m % q.Wo;
        float* d = dst + i * lda - k0;  // d[k] for k in [k0, k0 + kb)
        for (int64_t kh = k0 / seg; kh * seg < k0 + kb; ++kh) {
          const int64_t lo = imax(k0, kh * seg), hi = imin(k0 + kb, (kh + 1) * seg);
          const int64_t ih = oh * q.sh + kh * q.rdh - q.ph;
          if (ih < 0 || ih >= q.H) { zero_row(d + lo, hi - lo); continue; }
          const TX* xr = x + (n * q.H + ih) * q.W * C + gi * Cg;
          if (row_contig) {
            // k = kh*seg + kw*C + ci reads x[.., iw0 + kw, ci] = xr[iw0*C + (k - kh*seg)].
            const int64_t iw0 = ow * q.sw - q.pw, base = kh * seg;
            const int64_t v_lo = imax(lo, base + imax(0, -iw0) * C), v_hi = imin(hi, base + (q.W - iw0) * C);
            if (v_lo >= v_hi) { zero_row(d + lo, hi - lo); continue; }
            zero_row(d + lo, v_lo - lo);
            copy_row(xr + iw0 * C + (v_lo - base), v_hi - v_lo, d + v_lo);
            zero_row(d + v_hi, hi - v_hi);
          } else {
            for (int64_t kw = (lo - kh * seg) / Cg; kh * seg + kw * Cg < hi; ++kw) {
              const int64_t a = imax(lo, kh * seg + kw * Cg), b = imin(hi, kh * seg + (kw + 1) * Cg);
              const int64_t iw = ow * q.sw + kw * q.rdw - q.pw;
              if (iw < 0 || iw >= q.W) zero_row(d + a, b - a);
              else copy_row(xr + iw * C + (a - kh * seg - kw * Cg), b - a, d + a);
            }
          }
        }
      }
    };
    tile_product(m0, mb, n0, nb, K, PrepackedB{bp.p + gi * gsize, K}, pack, s, ldc);
    for (int64_t i = 0; i < mb; ++i) store_out(yd, y, (m0 + i) * O + gi * Og + n0, s.c.p + i * ldc, nb);
  });
}

// ---------------------------------------------------------------- backward-filter
struct PixelBase { int64_t nh, ih, iw; };  // n*H, oh*sh - ph, ow*sw - pw

template <class TX, class TG> void bwd_filter(const ConvGeom& q, const void* xv, const void* gv, DType dwd, void* dw) {
  const TX* x = static_cast<const TX*>(xv);
  const TG* gr = static_cast<const TG*>(gv);
  const int64_t G = q.G, Cg = q.Cg(), Og = q.Og(), C = q.C, O = q.O;
  const int64_t M = q.KH * q.KW * Cg, K = q.N * q.Ho * q.Wo;  // K: output pixels
  // K (pixels) is walked in chunks: B[p, o] = g[p, g*Og + o] of a chunk is packed once,
  // shared by every task, and each task adds the chunk's K blocks to its f32 accumulator
  // tile. Chunks are whole K blocks, so this is the same block order as one pass, and the
  // packed B stays at most ~8 MB (packing all of g would be activation-sized).
  const int64_t panels = cdiv(Og, NR);
  const int64_t chunk = imax(KC, (int64_t(1) << 21) / (G * panels * NR) / KC * KC);
  FBuf bp(G * panels * imin(chunk, K) * NR);
  FBuf zeros(Cg);  // the patch of a padding pixel
  zeros.zero(Cg);
  const TX* zp = reinterpret_cast<const TX*>(zeros.p);  // all-zero bits: 0.0 as f32 and bf16
  const Tiling t = choose_tiling(G, M, Og);
  const int64_t tile_size = round_up(t.mc, MR) * round_up(t.nc, NR), ntasks = G * t.mt * t.nt;
  FBuf acc(ntasks * tile_size);  // task tiles, row stride round_up(nb, NR)
  for (int64_t c0 = 0; c0 < K; c0 += chunk) {
    const int64_t c1 = imin(K, c0 + chunk), ck = c1 - c0;
    run_units(G * panels, double(ck) * double(Og) * double(G), [&](int64_t u) {
      const int64_t gi = u / panels, n0 = (u % panels) * NR, nb = imin(NR, Og - n0);
      float* dst = bp.p + u * ck * NR;
      const TG* src = gr + c0 * O + gi * Og + n0;
      for (int64_t p = 0; p < ck; ++p) {
        copy_row(src + p * O, nb, dst + p * NR);
        zero_row(dst + p * NR + nb, NR - nb);
      }
    });
    // dw rows are (kh, kw, ci): the pack transposes each tap's pixel block into rows.
    run_tasks(ntasks, 2.0 * double(M) * double(ck) * double(O), [&](int64_t task, Scratch& s) {
      const int64_t gi = task / (t.mt * t.nt), r = task % (t.mt * t.nt);
      const int64_t m0 = (r / t.nt) * t.mc, n0 = (r % t.nt) * t.nc;
      const int64_t mb = imin(t.mc, M - m0), nb = imin(t.nc, Og - n0), ldc = round_up(nb, NR);
      auto pack = [&](int64_t mm, int64_t rows, int64_t k0, int64_t kb, float* dst, int64_t lda) {
        // Output pixel p = (n, oh, ow) reads input row ih0 + kh*rdh, column iw0 + kw*rdw.
        PixelBase pix[KC];
        for (int64_t j = 0, n = k0 / (q.Ho * q.Wo), oh = (k0 / q.Wo) % q.Ho, ow = k0 % q.Wo; j < kb; ++j) {
          pix[j] = {n * q.H, oh * q.sh - q.ph, ow * q.sw - q.pw};
          if (++ow == q.Wo) { ow = 0; if (++oh == q.Ho) { oh = 0; ++n; } }
        }
        const TX* src[KC];
        for (int64_t tap = mm / Cg; tap * Cg < mm + rows; ++tap) {
          const int64_t kh = tap / q.KW, kw = tap % q.KW;
          const int64_t c_lo = imax(mm, tap * Cg) - tap * Cg, c_hi = imin(mm + rows, (tap + 1) * Cg) - tap * Cg;
          const TX* xg = x + gi * Cg + c_lo;
          for (int64_t j = 0; j < kb; ++j) {
            const PixelBase& b = pix[j];
            const int64_t ih = b.ih + kh * q.rdh, iw = b.iw + kw * q.rdw;
            src[j] = (ih < 0 || ih >= q.H || iw < 0 || iw >= q.W) ? zp + c_lo : xg + ((b.nh + ih) * q.W + iw) * C;
          }
          transpose_rows(src, kb, c_hi - c_lo, dst + (tap * Cg + c_lo - mm) * lda, lda);
        }
      };
      const float* bg = bp.p + gi * panels * ck * NR;
      auto b_block = [&](int64_t n, int64_t, int64_t k0, int64_t, Scratch&) {
        return BView{bg + (n / NR) * ck * NR + (k0 - c0) * NR, ck * NR};
      };
      tile_product(m0, mb, n0, nb, c0, c1, b_block, pack, s, acc.p + task * tile_size, ldc);
    });
  }
  run_units(ntasks, double(M) * double(O), [&](int64_t task) {
    const int64_t gi = task / (t.mt * t.nt), r = task % (t.mt * t.nt);
    const int64_t m0 = (r / t.nt) * t.mc, n0 = (r % t.nt) * t.nc;
    const int64_t mb = imin(t.mc, M - m0), nb = imin(t.nc, Og - n0), ldc = round_up(nb, NR);
    const float* tile = acc.p + task * tile_size;
    if (K == 0)
      for (int64_t i = 0; i < mb; ++i) zero_row(acc.p + task * tile_size + i * ldc, nb);
    for (int64_t i = 0; i < mb; ++i) store_out(dwd, dw, (m0 + i) * O + gi * Og + n0, tile + i * ldc, nb);
  });
}

// ---------------------------------------------------------------- backward-data
struct Tap { int64_t k; };  // a local type: std::vector<Tap> has internal linkage

struct Phase {
  int64_t gi;                 // group
  int64_t ih0, nh, iw0, nw;   // dx pixels ih = ih0 + sh*j (j < nh), iw = iw0 + sw*j (j < nw)
  std::vector<Tap> th, tw;    // the taps kh / kw that reach them
  int64_t M, K;               // GEMM sizes: N * nh * nw rows, |th| * |tw| * Og
  int64_t mt, bofs;           // M tiles; offset of the packed B
};

template <class TG, class TW> void bwd_data(const ConvGeom& q, const void* gv, const void* wv, DType dxd, void* dx) {
  const TG* gr = static_cast<const TG*>(gv);
  const TW* w = static_cast<const TW*>(wv);
  const int64_t G = q.G, Cg = q.Cg(), Og = q.Og(), C = q.C, O = q.O;
  const int64_t panels = cdiv(Cg, NR);
  auto mod = [](int64_t a, int64_t m) { return ((a % m) + m) % m; };
  std::vector<Phase> phases;
  int64_t btotal = 0, mtotal = 0;
  for (int64_t gi = 0; gi < G; ++gi)
    for (int64_t ch = 0; ch < q.sh; ++ch)
      for (int64_t cw = 0; cw < q.sw; ++cw) {
        Phase f;
        f.gi = gi;
        f.ih0 = mod(ch - q.ph, q.sh);
        f.iw0 = mod(cw - q.pw, q.sw);
        f.nh = f.ih0 < q.H ? cdiv(q.H - f.ih0, q.sh) : 0;
        f.nw = f.iw0 < q.W ? cdiv(q.W - f.iw0, q.sw) : 0;
        for (int64_t kh = 0; kh < q.KH; ++kh) if (mod(kh * q.rdh, q.sh) == ch) f.th.push_back({kh});
        for (int64_t kw = 0; kw < q.KW; ++kw) if (mod(kw * q.rdw, q.sw) == cw) f.tw.push_back({kw});
        f.M = q.N * f.nh * f.nw;
        f.K = int64_t(f.th.size() * f.tw.size()) * Og;
        if (f.M == 0) continue;
        f.bofs = btotal;
        btotal += panels * f.K * NR;
        mtotal += f.M;
        phases.push_back(std::move(f));
      }
  // B[phase][(th, tw, o), ci] = w[kh, kw, ci, g*Og + o]: each panel gathers 16 ci rows
  // of w, contiguous in o, into columns.
  FBuf bp(btotal);
  const int64_t nph = int64_t(phases.size());
  run_units(nph * panels, double(G) * double(q.KH * q.KW) * double(Og) * double(Cg), [&](int64_t u) {
    const Phase& f = phases[u / panels];
    const int64_t n0 = (u % panels) * NR, nb = imin(NR, Cg - n0);
    float* dst = bp.p + f.bofs + (u % panels) * f.K * NR;
    if (nb < NR)
      for (int64_t k = 0; k < f.K; ++k) zero_row(dst + k * NR + nb, NR - nb);
    int64_t k = 0;
    for (Tap kh_ : f.th)
      for (Tap kw_ : f.tw) {
        const int64_t kh = kh_.k, kw = kw_.k;
        const TW* src[NR];
        for (int64_t c = 0; c < nb; ++c) src[c] = w + ((kh * q.KW + kw) * Cg + n0 + c) * O + f.gi * Og;
        transpose_rows(src, nb, Og, dst + k * NR, NR);
        k += Og;
      }
  });
  // Tasks: (phase, M tile, N tile), tile sizes chosen on the total rows.
  const Tiling t = choose_tiling(1, mtotal, Cg);
  int64_t ntasks = 0;
  for (auto& f : phases) { f.mt = cdiv(f.M, t.mc); ntasks += f.mt * t.nt; }
  FBuf zeros(Og);
  zeros.zero(Og);
  const TG* zp = reinterpret_cast<const TG*>(zeros.p);
  const double flops = 2.0 * double(q.N * q.H * q.W) * double(C) * double(q.KH * q.KW) * double(Og) / double(q.sh * q.sw);
  run_tasks(ntasks, flops, [&](int64_t task, Scratch& s) {
    int64_t pi = 0;
    while (task >= phases[pi].mt * t.nt) task -= phases[pi++].mt * t.nt;
    const Phase& f = phases[pi];
    const int64_t m0 = (task / t.nt) * t.mc, n0 = (task % t.nt) * t.nc;
    const int64_t mb = imin(t.mc, f.M - m0), nb = imin(t.nc, Cg - n0), ldc = round_up(nb, NR);
    const int64_t ntw = int64_t(f.tw.size());
    // Row m of the phase is dx pixel (n, ih0 + sh*jh, iw0 + sw*jw), m = (n*nh + jh)*nw + jw.
    auto pixel = [&](int64_t m, int64_t& n, int64_t& ih, int64_t& iw) {
      n = m / (f.nh * f.nw);
      ih = f.ih0 + q.sh * ((m / f.nw) % f.nh);
      iw = f.iw0 + q.sw * (m % f.nw);
    };
    auto pack = [&](int64_t mm, int64_t rows, int64_t k0, int64_t kb, float* dst, int64_t lda) {
      for (int64_t i = 0; i < rows; ++i) {
        int64_t n, ih, iw;
        pixel(mm + i, n, ih, iw);
        float* d = dst + i * lda - k0;
        for (int64_t tap = k0 / Og; tap * Og < k0 + kb; ++tap) {
          const int64_t lo = imax(k0, tap * Og), hi = imin(k0 + kb, (tap + 1) * Og);
          const int64_t kh = f.th[tap / ntw].k, kw = f.tw[tap % ntw].k;
          const int64_t oh = (ih + q.ph - kh * q.rdh) / q.sh, ow = (iw + q.pw - kw * q.rdw) / q.sw;  // exact
          const bool in = ih + q.ph - kh * q.rdh >= 0 && oh < q.Ho && iw + q.pw - kw * q.rdw >= 0 && ow < q.Wo;
          const TG* src = in ? gr + ((n * q.Ho + oh) * q.Wo + ow) * O + f.gi * Og : zp;
          copy_row(src + (lo - tap * Og), hi - lo, d + lo);
        }
      }
    };
    tile_product(m0, mb, n0, nb, f.K, PrepackedB{bp.p + f.bofs, f.K}, pack, s, ldc);
    for (int64_t i = 0; i < mb; ++i) {
      int64_t n, ih, iw;
      pixel(m0 + i, n, ih, iw);
      store_out(dxd, dx, ((n * q.H + ih) * q.W + iw) * C + f.gi * Cg + n0, s.c.p + i * ldc, nb);
    }
  });
}

using engine::two_types;

}  // namespace

void conv_fwd_avx2(const ConvGeom& q, DType xd, const void* x, DType wd, const void* w, DType yd, void* y) {
  two_types(xd, wd, [&](auto a, auto b) { fwd<decltype(a), decltype(b)>(q, x, w, yd, y); });
}
void conv_bwd_data_avx2(const ConvGeom& q, DType gd, const void* g, DType wd, const void* w, DType dxd, void* dx) {
  two_types(gd, wd, [&](auto a, auto b) { bwd_data<decltype(a), decltype(b)>(q, g, w, dxd, dx); });
}
void conv_bwd_filter_avx2(const ConvGeom& q, DType xd, const void* x, DType gd, const void* g, DType dwd, void* dw) {
  two_types(xd, gd, [&](auto a, auto b) { bwd_filter<decltype(a), decltype(b)>(q, x, g, dwd, dw); });
}

}  // namespace podlet::kernels
