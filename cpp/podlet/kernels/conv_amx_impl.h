// Convolutions on AMX tiles as implicit GEMMs over tile_gemm (gemm_amx_impl.h), written
// once over a tile backend: conv_amx.cc on the hardware, conv_amx_emu.cc emulated.
// bf16 operands, f32 / bf16 output, one feature group, no lhs dilation (conv.h geometry).
//
//   forward          y[(n,ho,wo)][o]  = sum over k = (kh,kw,c)    patch[(n,ho,wo)][k] w[k][o]
//   backward-data    dx[(n,h,w)][c]   = sum over k = (kh,kw,o)    g at the taps that read
//                                       (h,w) [k] w[kh,kw,c,o]
//   backward-filter  dw[(kh,kw,c)][o] = sum over k = (n,ho,wo)    x at the tap [k] g[k][o]
//
// The A operand (patches, taps of g, shifted x) is gathered straight into tiles with the
// padding as zeros; B (the filter, its transpose, g) is a plain matrix. The K order of
// each sum is conv.h's contract (forward kh, kw, ci; backward-data kh, kw, o;
// backward-filter n, oh, ow), summed one by one in an accumulator tile: bits independent
// of threads.
#pragma once
#include "podlet/kernels/conv.h"
#include "podlet/kernels/gemm_amx_impl.h"

namespace podlet::kernels::amx {
namespace {

#if defined(__AVX512F__) && defined(__AVX512BW__)
constexpr bool kVectorPack = true;  // this object builds tiles with AVX-512 moves
#else
constexpr bool kVectorPack = false;
#endif

// Copies n bf16 (or zeros when src is null) to K positions [k, k+n) of a row whose K
// chunks are kTileElems apart (a row of an A tile group, chunks from q0).
inline void put_run(uint16_t* row, int64_t q0, int64_t k, const bf16* src, int64_t n) {
  while (n > 0) {
    const int64_t q = k / kK - q0, off = k % kK, len = imin(n, kK - off);
    if (src) {
      uint16_t* d = row + q * kTileElems + off;
#if defined(__AVX512F__) && defined(__AVX512BW__)
      // one masked move (len <= 32): GCC's inlined variable-length memcpy was 2x slower
      const __mmask32 m = len >= 32 ? ~__mmask32(0) : __mmask32((1u << len) - 1);
      _mm512_mask_storeu_epi16(d, m, _mm512_maskz_loadu_epi16(m, src));
#else
      std::memcpy(d, src, sizeof(uint16_t) * size_t(len));
#endif
      src += len;
    }
    k += len;
    n -= len;
  }
}

// The K positions [q0 * 32, (q0 + nq) * 32) of a row made of runs of `run` elements
// (one per tap): f(tap, dst_k, first, len) for each piece of a tap inside the range.
template <class F> void for_runs(int64_t run, int64_t taps, int64_t q0, int64_t nq, F&& f) {
  const int64_t k_lo = q0 * kK, k_hi = (q0 + nq) * kK;
  for (int64_t t = k_lo / run; t < taps && t * run < k_hi; ++t) {
    const int64_t b = imax(t * run, k_lo), e = imin((t + 1) * run, k_hi);
    if (b < e) f(t, b, b - t * run, e - b);
  }
}

// K chunks [q0, q0 + nq) of B panel j of a row-major [K][N] bf16 matrix (row stride ld)
// as VNNI tiles, every element written.
void pack_b_rows(const bf16* m, int64_t K, int64_t N, int64_t ld, int64_t j, int64_t q0, int64_t nq, uint16_t* dst) {
  const int64_t n0 = j * 16, nb = imin(16, N - n0);
  const int64_t k_lo = q0 * kK, k_hi = imin(K, (q0 + nq) * kK);
#if defined(__AVX512F__) && defined(__AVX512BW__)
  const uint16_t* m16 = reinterpret_cast<const uint16_t*>(m) + n0;
  for (int64_t k = k_lo; k < k_hi; k += 2)
    b_row_pair_from_rows(m16 + k * ld, k + 1 < K ? m16 + (k + 1) * ld : nullptr, nb,
                         dst + (k / kK - q0) * kTileElems + ((k % kK) / 2) * kK);
  zero_rows_past_k(K, q0, nq, dst);
  return;
#endif
  std::memset(dst, 0, sizeof(uint16_t) * size_t(nq * kTileElems));
  for (int64_t k = k_lo; k < k_hi; ++k) {
    uint16_t* row = dst + (k / kK - q0) * kTileElems + ((k % kK) / 2) * kK + (k % 2);
    const bf16* src = m + k * ld + n0;
    for (int64_t n = 0; n < nb; ++n) row[2 * n] = src[n].bits;
  }
}

template <class T> void conv_fwd_tiles(const ConvGeom& q, const bf16* x, const bf16* w, DType yd, void* y) {
  const int64_t C = q.C, O = q.O, taps = q.KH * q.KW, K = taps * C, M = q.N * q.Ho * q.Wo;
  tile_gemm<T>(
      1, M, O, K,
      [&](int64_t, int64_t j, int64_t q0, int64_t nq, uint16_t* dst) { pack_b_rows(w, K, O, O, j, q0, nq, dst); },
      [&](int64_t, int64_t m0, int64_t mb, int64_t q0, int64_t nq, uint16_t* dst) {
        for (int64_t i = 0; i < mb; ++i) {
          const int64_t m = m0 + i, n = m / (q.Ho * q.Wo), ho = (m / q.Wo) % q.Ho, wo = m % q.Wo;
          uint16_t* row = dst + (i / kRows) * nq * kTileElems + (i % kRows) * kK;
          for_runs(C, taps, q0, nq, [&](int64_t t, int64_t k, int64_t c0, int64_t len) {
            const int64_t h = ho * q.sh + (t / q.KW) * q.rdh - q.ph, ww = wo * q.sw + (t % q.KW) * q.rdw - q.pw;
            if (h < 0 || h >= q.H || ww < 0 || ww >= q.W) return;  // padding: the zeros already there
            put_run(row, q0, k, x + ((n * q.H + h) * q.W + ww) * C + c0, len);
          });
        }
      },
      [&](int64_t, int64_t m, int64_t n0, int64_t nb, const float* r) { store_out(yd, y, m * O + n0, nb, r); },
      /*a_fills=*/false, /*b_fills=*/true);
}

template <class T> void conv_bwd_data_tiles(const ConvGeom& q, const bf16* g, const bf16* w, DType dxd, void* dx) {
  const int64_t C = q.C, O = q.O, taps = q.KH * q.KW, K = taps * O, M = q.N * q.H * q.W;
  tile_gemm<T>(
      1, M, C, K,
      [&](int64_t, int64_t j, int64_t q0, int64_t nq, uint16_t* dst) {
        // B[(t, o)][c] = w[t][c][o]: column c of B is row c of tap t's [C][O] block.
        const int64_t c0 = j * 16, cb = imin(16, C - c0);
        for (int64_t k = q0 * kK; k < imin(K, (q0 + nq) * kK); ++k) {
          uint16_t* row = dst + (k / kK - q0) * kTileElems + ((k % kK) / 2) * kK + (k % 2);
          const bf16* src = w + (k / O) * C * O + c0 * O + k % O;
          for (int64_t c = 0; c < cb; ++c) row[2 * c] = src[c * O].bits;
        }
      },
      [&](int64_t, int64_t m0, int64_t mb, int64_t q0, int64_t nq, uint16_t* dst) {
        for (int64_t i = 0; i < mb; ++i) {
          const int64_t m = m0 + i, n = m / (q.H * q.W), h = (m / q.W) % q.H, ww = m % q.W;
          uint16_t* row = dst + (i / kRows) * nq * kTileElems + (i % kRows) * kK;
          for_runs(O, taps, q0, nq, [&](int64_t t, int64_t k, int64_t o0, int64_t len) {
            // The output pixel whose tap t reads (h, w): ho * sh = h + ph - kh * rdh.
            const int64_t hs = h + q.ph - (t / q.KW) * q.rdh, ws = ww + q.pw - (t % q.KW) * q.rdw;
            if (hs < 0 || ws < 0 || hs % q.sh || ws % q.sw) return;
            const int64_t ho = hs / q.sh, wo = ws / q.sw;
            if (ho >= q.Ho || wo >= q.Wo) return;
            put_run(row, q0, k, g + ((n * q.Ho + ho) * q.Wo + wo) * O + o0, len);
          });
        }
      },
      [&](int64_t, int64_t m, int64_t n0, int64_t nb, const float* r) { store_out(dxd, dx, m * C + n0, nb, r); });
}

template <class T> void conv_bwd_filter_tiles(const ConvGeom& q, const bf16* x, const bf16* g, DType dwd, void* dw) {
  const int64_t C = q.C, O = q.O, M = q.KH * q.KW * C, K = q.N * q.Ho * q.Wo;
  tile_gemm<T>(
      1, M, O, K,
      [&](int64_t, int64_t j, int64_t q0, int64_t nq, uint16_t* dst) { pack_b_rows(g, K, O, O, j, q0, nq, dst); },
      [&](int64_t, int64_t m0, int64_t mb, int64_t q0, int64_t nq, uint16_t* dst) {
#if defined(__AVX512F__) && defined(__AVX512BW__)
        if (C % kRows == 0) {  // a 16-row group is 16 channels of one tap: transpose them in
          const uint16_t* xs = reinterpret_cast<const uint16_t*>(x);
          const uint16_t* rows[kK];
          int64_t pix_n[kK], pix_h[kK], pix_w[kK];  // the chunk's pixels: image, top row, left column
          for (int64_t qq = 0; qq < nq; ++qq) {
            const int64_t k0 = (q0 + qq) * kK, nk = imin(kK, K - k0);
            for (int64_t e = 0; e < nk; ++e) {
              const int64_t p = k0 + e;
              pix_n[e] = p / (q.Ho * q.Wo);
              pix_h[e] = ((p / q.Wo) % q.Ho) * q.sh - q.ph;
              pix_w[e] = (p % q.Wo) * q.sw - q.pw;
            }
            for (int64_t i = 0, tap = -1; i < mb; i += kRows) {
              const int64_t r = m0 + i, t = r / C, c = r % C;
              if (t == tap) {  // the next 16 channels of the same tap: the same pixels
                for (int64_t e = 0; e < nk; ++e) rows[e] = rows[e] ? rows[e] + kRows : nullptr;
              } else {
                tap = t;
                const int64_t dh = (t / q.KW) * q.rdh, dw = (t % q.KW) * q.rdw;
                for (int64_t e = 0; e < kK; ++e) {
                  rows[e] = nullptr;
                  if (e >= nk) continue;
                  const int64_t h = pix_h[e] + dh, ww = pix_w[e] + dw;
                  if (h >= 0 && h < q.H && ww >= 0 && ww < q.W) rows[e] = xs + ((pix_n[e] * q.H + h) * q.W + ww) * C + c;
                }
              }
              a_tile_from_k_rows(rows, imin(kRows, mb - i), dst + (i / kRows) * nq * kTileElems + qq * kTileElems);
            }
          }
          return;
        }
#endif
        // Row (kh, kw, c) at K = pixel p holds x at p's tap (kh, kw): walk the pixels and
        // copy each tap's run of channels down a tile column.
        const int64_t k_end = imin((q0 + nq) * kK, K);
        for (int64_t p = q0 * kK; p < k_end; ++p) {
          const int64_t n = p / (q.Ho * q.Wo), ho = (p / q.Wo) % q.Ho, wo = p % q.Wo;
          uint16_t* col = dst + (p / kK - q0) * kTileElems + p % kK;
          for (int64_t i = 0; i < mb;) {
            const int64_t r = m0 + i, t = r / C, c = r % C, len = imin(C - c, mb - i);
            const int64_t h = ho * q.sh + (t / q.KW) * q.rdh - q.ph, ww = wo * q.sw + (t % q.KW) * q.rdw - q.pw;
            if (h >= 0 && h < q.H && ww >= 0 && ww < q.W) {
              const bf16* src = x + ((n * q.H + h) * q.W + ww) * C + c;
              for (int64_t e = 0; e < len; ++e)
                col[((i + e) / kRows) * nq * kTileElems + ((i + e) % kRows) * kK] = src[e].bits;
            }
            i += len;
          }
        }
      },
      [&](int64_t, int64_t m, int64_t n0, int64_t nb, const float* r) { store_out(dwd, dw, m * O + n0, nb, r); },
      /*a_fills=*/kVectorPack && C % kRows == 0, /*b_fills=*/true);
}

}  // namespace
}  // namespace podlet::kernels::amx
