// The fused row kernels on whole zmm registers (AVX-512 translation units only): the same
// arithmetic as norm_impl.h's templates, in the same lanes and order, so the same bits.
//
// Why a second form: norm_impl.h is written on pairs of 8-lane vectors so that one source
// serves the baseline, AVX2 and AVX-512 builds. On AVX-512 that left each row's 16 lanes in
// two ymm halves, widened bf16 rows into scratch 8 elements at a time and rounded them back
// with a 12-instruction integer sequence per 8 lanes: Swin's LayerNorm rows of 96 bf16 ran
// slower than f32 ones (2.7 vs 1.9 ms for [100352, 96]) and its softmax rows of 49 at 10% of
// the copy bandwidth. Here a chunk of 16 elements is one register: bf16 widens in the load
// (vpmovzxwd + shift), a row's tail is a masked load and a masked store, and the AVX512_BF16
// build rounds with vcvtneps2bf16 where that instruction is exact.
//
// Element j of a row sits in lane j % 16 of the chunk registers, as in norm_impl.h; lane
// sums combine by nk::tree on the two halves. A lane past the row's end leaves an
// accumulator as it is (a masked add, or a pad that adds nothing), as the reference's pads
// do. -ffp-contract=off: every product and sum rounds where the reference's does.
#pragma once
#include <immintrin.h>
#include "podlet/kernels/bf16_lanes_avx512.h"
#include "podlet/kernels/fastmath_avx512.h"
#include "podlet/kernels/norm_impl.h"
#include "podlet/kernels/stream_out.h"

// GCC 12 reports the `__Y = __Y` idiom of the intrinsics' undefined vectors (the widening,
// shift and shuffle intrinsics, inlined into these lambdas) as maybe-uninitialized or
// uninitialized: no value of ours is read uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace podlet::kernels {
namespace {
namespace nz {

using nk::kBwdBlock;
using nk::kBwdTaskElems;
using nk::kChunkElems;
using nk::kLanes;
using nk::kSmBlockElems;

// 16 elements of a T row as f32: load16 (bf16_lanes_avx512.h). The lanes of m from p, the
// others pad; never touches memory past them.
template <class T>
inline __m512 load_tail(const T* p, __mmask16 m, float pad) {
  return _mm512_mask_blend_ps(m, _mm512_set1_ps(pad), maskload16(p, m));
}

template <class O>
inline void store(O* p, __m512 v) {
  if constexpr (std::is_same_v<O, float>) _mm512_storeu_ps(p, v);
  else _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), round16(v));
}
// store() bypassing the caches (p aligned to the vector: 64 bytes f32, 32 bf16). The task
// fences (_mm_sfence) before it ends.
template <class O>
inline void store_stream(O* p, __m512 v) {
  if constexpr (std::is_same_v<O, float>) _mm512_stream_ps(p, v);
  else _mm256_stream_si256(reinterpret_cast<__m256i*>(p), round16(v));
}
template <class O>
inline void store_tail(O* p, __mmask16 m, __m512 v) {
  if constexpr (std::is_same_v<O, float>) _mm512_mask_storeu_ps(p, m, v);
  else _mm256_mask_storeu_epi16(p, m, round16(v, m));
}

// out[j : j + 16] of a group of n (only its lanes below n): non-temporal when `stream`.
template <class T>
inline void group_store(T* p, int64_t j, int64_t n, __m512 v, bool stream) {
  if (j + 16 > n) store_tail(p + j, tail16(n - j), v);
  else if (stream) store_stream(p + j, v);
  else store(p + j, v);
}
// A large output goes out with non-temporal stores, as the fused elementwise outputs do
// (kStreamOutBytes, stream_out.h): written once, not read here, so not read for
// ownership first. A group starts at 16 C elements (32 C bytes, 64 C for f32), so every
// whole vector of it is aligned when the output is.
template <class T>
inline bool stream_groups(int64_t rows, int64_t C, const T* out) {
  return rows * C * int64_t(sizeof(T)) >= kStreamOutBytes && !(reinterpret_cast<uintptr_t>(out) & (16 * sizeof(T) - 1));
}
// LayerNorm's output rows (y forward, dx backward) stream from kStreamRowsBytes, and only
// when C is a multiple of 16, so that every row's whole vectors are aligned as well: at
// Swin-T's stage 1 and 2 sizes (9.6-38.5 MB) streaming measured 1.1-1.27x faster in both
// directions; at 4.8 MB (stage 3 bf16, stage 4 f32: kStreamOutBytes' reach) it measured
// 0.7-1.3x across runs, so the rows start streaming at twice that.
constexpr int64_t kStreamRowsBytes = 2 * kStreamOutBytes;
template <class T>
inline bool stream_rows(int64_t rows, int64_t C, const T* out) {
  return C % kLanes == 0 && rows * C * int64_t(sizeof(T)) >= kStreamRowsBytes && stream_groups(rows, C, out);
}

inline nk::f32x8 half(__m512 v, int h) {
  return reinterpret_cast<nk::f32x8>(h ? _mm512_extractf32x8_ps(v, 1) : _mm512_castps512_ps256(v));
}
inline float tree(__m512 v) { return lane_tree(v); }  // nk::tree on a zmm (fastmath_avx512.h)
inline float tree_max(__m512 v) { return nk::tree_max(half(v, 0), half(v, 1)); }
// max(x, m) as the reference writes it, x > m ? x : m (vmaxps returns its second operand
// for a NaN or two zeros: the same).
inline __m512 vmax(__m512 x, __m512 m) { return _mm512_max_ps(x, m); }
// The lane vectors of 16 rows (lanes[r * 16 + l]: row r's lane l) each combined by
// nk::tree's pairs in its order (lane l with l + w for w = 8, 4, 2, 1, the lower lane
// first; MAX: nk::tree_max's "hi > lo ? hi : lo", vmaxps(hi, lo)), all 16 at once: each
// step shuffles two registers' lower and upper partners into two registers and combines
// them in one instruction, 31 shuffles and 15 operations where a row at a time took ~9
// dependent instructions per row. Row r's result lands in lane 4 (r % 4) + r / 4; one
// permute puts it in lane r.
template <bool MAX>
inline __m512 tree16(const float* lanes) {
  const auto op = [](__m512 lo, __m512 hi) { return MAX ? _mm512_max_ps(hi, lo) : _mm512_add_ps(lo, hi); };
  __m512 a[8], b[4], c[2];
  for (int i = 0; i < 8; ++i) {  // w = 8: a[i] holds rows 2i, 2i + 1 (lanes 0-7, 8-15)
    const __m512 u = _mm512_load_ps(lanes + 32 * i), v = _mm512_load_ps(lanes + 32 * i + 16);
    a[i] = op(_mm512_shuffle_f32x4(u, v, 0x44), _mm512_shuffle_f32x4(u, v, 0xee));
  }
  for (int k = 0; k < 4; ++k)  // w = 4: b[k]'s 128-bit chunk q holds row 4k + q
    b[k] = op(_mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0x88), _mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0xdd));
  for (int m = 0; m < 2; ++m)  // w = 2: chunk q of c[m]: rows 8m + q, 8m + 4 + q, two lanes each
    c[m] = op(_mm512_shuffle_ps(b[2 * m], b[2 * m + 1], 0x44), _mm512_shuffle_ps(b[2 * m], b[2 * m + 1], 0xee));
  const __m512 s = op(_mm512_shuffle_ps(c[0], c[1], 0x88), _mm512_shuffle_ps(c[0], c[1], 0xdd));  // w = 1
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), s);
}

// Rows in groups of 16: each row's two lane sums as before, then 16 rows' trees at once
// (tree16) and their statistics as vectors (the same IEEE operations as the scalar
// formulas, so the same bits), then the outputs row by row. One row at a time, each row
// waited on a chain of ~100 cycles (its sums, two trees, a divide, a square root and
// another divide) before its outputs could start, with the next row's ~150 instructions
// too many for the out-of-order window to hide it.
template <class T, class O, class A>
void ln_fwd(const NormRows& p, const T* x, const float* scale, const float* bias, O* y, float* mean, float* rstd) {
  static_assert(std::is_same_v<A, float>);  // f32 statistics (f64 runs the reference)
  const int64_t C = p.C, Cf = C / kLanes * kLanes;
  const __mmask16 mt = tail16(C - Cf);
  // Without scale, rs * 1 is rs; without bias, + (-0) changes nothing (the reference's
  // separate loops give the same bits).
  const __m512 one = _mm512_set1_ps(1.0f), nzero = _mm512_set1_ps(-0.0f);
  const int64_t grain = (std::max<int64_t>(1, kChunkElems / std::max<int64_t>(C, 1)) + 15) / 16 * 16;
  const bool stream = stream_rows(p.rows, C, y);
  parallel_for(p.rows, grain, [&](int64_t r0, int64_t r1) {
    alignas(64) float l1[16 * 16], l2[16 * 16], mus[16], rss[16];
    for (int64_t g0 = r0; g0 < r1; g0 += 16) {
      const int64_t nr = std::min<int64_t>(16, r1 - g0);
      for (int64_t i = 0; i < 16; ++i) {
        __m512 s1 = _mm512_setzero_ps(), s2 = _mm512_setzero_ps();
        if (i < nr) {
          const T* xr = x + (g0 + i) * C;
          for (int64_t j = 0; j < Cf; j += kLanes) {
            const __m512 v = load16(xr + j);
            s1 = _mm512_add_ps(s1, v);
            s2 = _mm512_add_ps(s2, _mm512_mul_ps(v, v));
          }
          if (Cf < C) {  // pad -0: adds nothing to the sum, +0 to the sum of squares
            const __m512 v = load_tail(xr + Cf, mt, -0.0f);
            s1 = _mm512_add_ps(s1, v);
            s2 = _mm512_add_ps(s2, _mm512_mul_ps(v, v));
          }
        }
        _mm512_store_ps(l1 + 16 * i, s1);
        _mm512_store_ps(l2 + 16 * i, s2);
      }
      // mu = sum1 / n, var = max0(sum2 / n - mu mu) (LayerNorm); mu = 0, var = sum2 / n
      // (RMSNorm); rs = 1 / sqrt(var + eps). max0 keeps a NaN, as the reference's
      // `var < 0 ? 0 : var`.
      const __m512 n = _mm512_set1_ps(float(C)), sum2 = tree16<false>(l2);
      __m512 mu = _mm512_setzero_ps(), var;
      if (p.use_mean) {
        mu = _mm512_div_ps(tree16<false>(l1), n);
        var = _mm512_sub_ps(_mm512_div_ps(sum2, n), _mm512_mul_ps(mu, mu));
        var = _mm512_mask_mov_ps(var, _mm512_cmp_ps_mask(var, _mm512_setzero_ps(), _CMP_LT_OQ), _mm512_setzero_ps());
      } else {
        var = _mm512_div_ps(sum2, n);
      }
      const __m512 rs = _mm512_div_ps(one, _mm512_sqrt_ps(_mm512_add_ps(var, _mm512_set1_ps(float(p.eps)))));
      _mm512_store_ps(mus, mu);
      _mm512_store_ps(rss, rs);
      _mm512_mask_storeu_ps(mean + g0, tail16(nr), mu);
      _mm512_mask_storeu_ps(rstd + g0, tail16(nr), rs);
      for (int64_t i = 0; i < nr; ++i) {
        const T* xr = x + (g0 + i) * C;
        const __m512 muv = _mm512_set1_ps(mus[i]), rsv = _mm512_set1_ps(rss[i]);  // x - (+0) is x: RMSNorm too
        O* yr = y + (g0 + i) * C;
        auto out = [&](__m512 v, __m512 s, __m512 b) {
          return _mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(v, muv), _mm512_mul_ps(rsv, s)), b);
        };
        for (int64_t j = 0; j < Cf; j += kLanes)
          group_store(yr, j, C, out(load16(xr + j), scale ? _mm512_loadu_ps(scale + j) : one,
                                    bias ? _mm512_loadu_ps(bias + j) : nzero), stream);
        if (Cf < C)
          store_tail(yr + Cf, mt, out(load_tail(xr + Cf, mt, 0.0f), scale ? _mm512_maskz_loadu_ps(mt, scale + Cf) : one,
                                      bias ? _mm512_maskz_loadu_ps(mt, bias + Cf) : nzero));
      }
    }
    if (stream) _mm_sfence();
  });
}

// nk::add_columns on zmm: ps[j] += sum_i dy[i][j] * xh[i][j], pb[j] += sum_i dy[i][j],
// each column's running sum in row order; the last C % 16 columns masked.
inline void add_columns(const float* const* dy, const float* xh, int64_t n, int64_t C, float* ps, float* pb) {
  for (int64_t j = 0; j < C; j += kLanes) {
    const __mmask16 m = C - j >= kLanes ? __mmask16(0xffff) : tail16(C - j);
    __m512 s = _mm512_maskz_loadu_ps(m, ps + j), b = _mm512_maskz_loadu_ps(m, pb + j);
    for (int64_t i = 0; i < n; ++i) {
      const __m512 d = _mm512_maskz_loadu_ps(m, dy[i] + j);
      s = _mm512_add_ps(s, _mm512_mul_ps(d, _mm512_maskz_loadu_ps(m, xh + i * C + j)));
      b = _mm512_add_ps(b, d);
    }
    _mm512_mask_storeu_ps(ps + j, m, s);
    _mm512_mask_storeu_ps(pb + j, m, b);
  }
}

template <class T, class O, class A>
void ln_bwd(const NormRows& p, const O* dy, const T* x, const float* mean, const float* rstd, const float* scale,
            T* dx, float* dscale, float* dbias) {
  static_assert(std::is_same_v<A, float>);
  const int64_t C = p.C, rows = p.rows, Cf = C / kLanes * kLanes;
  const __mmask16 mt = tail16(C - Cf);
  const float n = float(C);
  const int64_t nblocks = std::max<int64_t>(1, (rows + kBwdBlock - 1) / kBwdBlock);
  LocalVec<float> part(size_t(nblocks) * size_t(C) * 2, 0.0f);
  const int64_t per_task = std::max<int64_t>(1, kBwdTaskElems / (kBwdBlock * std::max<int64_t>(C, 1)));
  constexpr bool wide_dy = std::is_same_v<O, float>;
  const bool stream = stream_rows(rows, C, dx);
  parallel_for(nblocks, per_task, [&](int64_t k0, int64_t k1) {
    // A block's xh rows (and its dy rows as f32) stay here for add_columns; g = dy * scale
    // for the second pass over the row.
    LocalVec<float> xhb(kBwdBlock * C), db(wide_dy ? 0 : kBwdBlock * C), gb(scale ? C : 0);
    LocalVec<const float*> dyp(kBwdBlock);
    for (int64_t kb = k0; kb < k1; ++kb) {
      const int64_t r0 = kb * kBwdBlock, r1 = std::min(rows, r0 + kBwdBlock);
      for (int64_t r = r0; r < r1; ++r) {
        const T* xr = x + r * C;
        const O* dyr = dy + r * C;
        float* xh = xhb.data() + (r - r0) * C;
        float* dw = wide_dy ? nullptr : db.data() + (r - r0) * C;
        const __m512 muv = _mm512_set1_ps(mean[r]), rsv = _mm512_set1_ps(rstd[r]);
        __m512 sd = _mm512_setzero_ps(), sg = _mm512_setzero_ps();
        // xh and g, and the lanes' sums of g * xh and g (past the row: nothing added, as
        // the reference's pads add -0).
        auto first = [&](int64_t j, __mmask16 m) {
          const bool full = m == __mmask16(0xffff);
          const __m512 h = _mm512_mul_ps(_mm512_sub_ps(full ? load16(xr + j) : load_tail(xr + j, m, 0.0f), muv), rsv);
          const __m512 d = full ? load16(dyr + j) : load_tail(dyr + j, m, 0.0f);
          _mm512_mask_storeu_ps(xh + j, m, h);
          if constexpr (!wide_dy) _mm512_mask_storeu_ps(dw + j, m, d);
          __m512 g = d;
          if (scale) {
            g = _mm512_mul_ps(d, _mm512_maskz_loadu_ps(m, scale + j));
            _mm512_mask_storeu_ps(gb.data() + j, m, g);
          }
          sd = _mm512_mask_add_ps(sd, m, sd, _mm512_mul_ps(g, h));
          sg = _mm512_mask_add_ps(sg, m, sg, g);
        };
        for (int64_t j = 0; j < Cf; j += kLanes) first(j, 0xffff);
        if (Cf < C) first(Cf, mt);
        const float mb = tree(sd) / n;
        const __m512 mbv = _mm512_set1_ps(mb);
        const __m512 mav = _mm512_set1_ps(p.use_mean ? tree(sg) / n : 0.0f);
        const float* g = scale ? gb.data() : wide_dy ? reinterpret_cast<const float*>(dyr) : dw;
        T* dxr = dx + r * C;
        auto second = [&](int64_t j, __mmask16 m) {
          const __m512 gv = _mm512_maskz_loadu_ps(m, g + j), h = _mm512_maskz_loadu_ps(m, xh + j);
          const __m512 a = p.use_mean ? _mm512_sub_ps(gv, mav) : gv;
          return _mm512_mul_ps(_mm512_sub_ps(a, _mm512_mul_ps(h, mbv)), rsv);
        };
        for (int64_t j = 0; j < Cf; j += kLanes) group_store(dxr, j, C, second(j, 0xffff), stream);
        if (Cf < C) store_tail(dxr + Cf, mt, second(Cf, mt));
        dyp[r - r0] = wide_dy ? reinterpret_cast<const float*>(dyr) : dw;
      }
      float* ps = part.data() + size_t(kb) * size_t(C) * 2;
      add_columns(dyp.data(), xhb.data(), r1 - r0, C, ps, ps + C);
    }
    if (stream) _mm_sfence();
  });
  nk::sum_partials(part.data(), nblocks, C, dscale, dbias);
}

// The lane maxima of a row of C (element j in lane j % 16; lanes past the row -inf), the
// reference's vmax order: its max is tree_max of them.
template <class T>
inline __m512 max_lanes(const T* xr, int64_t C) {
  const int64_t Cf = C / kLanes * kLanes;
  const float ninf = -std::numeric_limits<float>::infinity();
  __m512 m = _mm512_set1_ps(ninf);
  for (int64_t j = 0; j < Cf; j += kLanes) m = vmax(load16(xr + j), m);
  if (Cf < C) m = vmax(load_tail(xr + Cf, tail16(C - Cf), ninf), m);
  return m;
}

// Blocks of rows in three passes (maxima; exps and sums; outputs), as nk::sm_fwd.
template <class T, bool log>
void sm_fwd_rows(int64_t rows, int64_t C, const T* x, T* y) {
  const int64_t Cf = C / kLanes * kLanes, Cp = Cf + (C > Cf ? kLanes : 0);
  const __mmask16 mt = tail16(C - Cf);
  const float ninf = -std::numeric_limits<float>::infinity();
  const int64_t block = std::max<int64_t>(1, kSmBlockElems / std::max<int64_t>(Cp, 1));
  const int64_t grain = std::max<int64_t>(1, kChunkElems / std::max<int64_t>(C, 1));
  parallel_for(rows, (grain + block - 1) / block * block, [&](int64_t r0, int64_t r1) {
    const int64_t nb = std::min(block, r1 - r0);
    LocalVec<float> db(nb * Cp), mx(nb), sm(nb);
    for (int64_t b0 = r0; b0 < r1; b0 += block) {
      const int64_t nr = std::min(block, r1 - b0);
      for (int64_t i = 0; i < nr; ++i) {
        mx[i] = tree_max(max_lanes(x + (b0 + i) * C, C));
      }
      for (int64_t i = 0; i < nr; ++i) {
        const T* xr = x + (b0 + i) * C;
        const __m512 mv = _mm512_set1_ps(mx[i]);
        float* dr = db.data() + i * Cp;
        __m512 acc = _mm512_setzero_ps();
        for (int64_t j = 0; j < Cf; j += kLanes) {
          const __m512 d = _mm512_sub_ps(load16(xr + j), mv), e = vexp<true>(d);
          acc = _mm512_add_ps(acc, e);
          _mm512_storeu_ps(dr + j, log ? d : e);
        }
        if (Cf < C) {  // past the row: d = -inf, e = +0 (adds nothing)
          const __m512 d = _mm512_mask_sub_ps(_mm512_set1_ps(ninf), mt, load_tail(xr + Cf, mt, 0.0f), mv);
          const __m512 e = _mm512_maskz_mov_ps(mt, vexp<true>(d));
          acc = _mm512_add_ps(acc, e);
          _mm512_storeu_ps(dr + Cf, log ? d : e);
        }
        sm[i] = tree(acc);
      }
      for (int64_t i = 0; i < nr; ++i) {
        T* yr = y + (b0 + i) * C;
        const float* dr = db.data() + i * Cp;
        if constexpr (log) {
          const __m512 l = _mm512_set1_ps(nk::log_a(sm[i]));
          for (int64_t j = 0; j < Cf; j += kLanes) store(yr + j, _mm512_sub_ps(_mm512_loadu_ps(dr + j), l));
          if (Cf < C) store_tail(yr + Cf, mt, _mm512_sub_ps(_mm512_loadu_ps(dr + Cf), l));
        } else {
          const __m512 s = _mm512_set1_ps(sm[i]);
          for (int64_t j = 0; j < Cf; j += kLanes) store(yr + j, _mm512_div_ps(_mm512_loadu_ps(dr + j), s));
          if (Cf < C) store_tail(yr + Cf, mt, _mm512_div_ps(_mm512_loadu_ps(dr + Cf), s));
        }
      }
    }
  });
}
// A walk over a group of rows' elements (rows of C >= 16, one after another) 16 at a time:
// the vector at the walk's position has its first min(left, 16) lanes in row r, the rest
// in row r + 1.
struct RowWalk {
  int64_t C, r = 0, left;
  explicit RowWalk(int64_t c) : C(c), left(c) {}
  // v[r] in the lanes of row r, v[r + 1] in the others.
  __m512 lanes(const float* v) const {
    return _mm512_mask_blend_ps(tail16(std::min<int64_t>(left, 16)), _mm512_set1_ps(v[r + 1]), _mm512_set1_ps(v[r]));
  }
  void next() {
    left -= 16;
    const bool wrap = left <= 0;
    r += wrap;
    left += wrap ? C : 0;
  }
};
// 16 elements of a group of n from j; the lanes past n are 0 and read nothing.
template <class T>
inline __m512 group_at(const T* p, int64_t j, int64_t n) {
  return j + 16 <= n ? load16(p + j) : maskload16(p + j, tail16(std::clamp<int64_t>(n - j, 0, 16)));
}
// Parallel over groups of 16 rows: fn(first row, rows in the group) for each, in tasks of
// about kChunkElems elements; the task fences its non-temporal stores.
template <class F>
inline void for_groups(int64_t rows, int64_t C, bool stream, F&& fn) {
  const int64_t grain = (std::max<int64_t>(1, kChunkElems / C) + 15) / 16 * 16;
  parallel_for(rows, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t g0 = r0; g0 < r1; g0 += 16) fn(g0, std::min<int64_t>(16, r1 - g0));
    if (stream) _mm_sfence();
  });
}

// Softmax rows of 16 to 128 elements, 16 rows at a time: the maxima and the sums keep
// each row's lanes (element j in lane j % 16, so nk's sums and bits), but the exps and the
// outputs run over the 16 rows' elements as one contiguous stream, each vector's lanes
// taking the max (sum) of the row they fall in. A row of 49 takes 49 / 16 vectors of exps
// and divides there instead of 4: the fourth chunk's 15 empty lanes were a quarter of the
// work. The two reductions run 16 rows at once (tree16). Longer rows gain less than a
// sixteenth, and 16 rows of 256 (16 KB of exps) ran 1.15x slower than the row blocks.
constexpr int64_t kSmGroupMaxC = 128;
template <class T, bool log>
void sm_fwd_groups(int64_t rows, int64_t C, const T* x, T* y) {
  const int64_t Cf = C / kLanes * kLanes;
  const __mmask16 mt = tail16(C - Cf);
  const float ninf = -std::numeric_limits<float>::infinity();
  const bool stream = stream_groups(rows, C, y);
  // Per group: its exps, row-major as x, in whole cache lines (on malloc's 16-byte alignment
  // every vector of them split a line, and rows of 64 ran 1.5x slower than before); row r's
  // max and sum (log: the log of the sum), pads from [16] for the vectors past the group.
  struct Scratch {
    alignas(64) float e[16 * kSmGroupMaxC + kLanes];
    alignas(64) float lanes[16 * 16];
    alignas(64) float mx[32];
    alignas(64) float sm[32];
  };
  for_groups(rows, C, stream, [&](int64_t g0, int64_t nr) {
    Scratch sc;
    float *e = sc.e, *lanes = sc.lanes, *mx = sc.mx, *sm = sc.sm;
    std::fill(mx + 16, mx + 32, 0.0f);
    std::fill(sm + 16, sm + 32, 1.0f);
    const int64_t n = nr * C;
    const T* xg = x + g0 * C;
    for (int64_t i = 0; i < 16; ++i)
      _mm512_store_ps(lanes + 16 * i, i < nr ? max_lanes(xg + i * C, C) : _mm512_set1_ps(ninf));
    _mm512_store_ps(mx, tree16<true>(lanes));
    RowWalk w(C);
    for (int64_t j = 0; j < n; j += 16, w.next())
      _mm512_store_ps(e + j, vexp<true>(_mm512_sub_ps(group_at(xg, j, n), w.lanes(mx))));
    for (int64_t i = 0; i < 16; ++i) {  // lane sums in the reference's order: acc = +0 + e_0 + e_16 ...
      __m512 acc = _mm512_setzero_ps();
      if (i < nr) {
        const float* er = e + i * C;
        for (int64_t j = 0; j < Cf; j += kLanes) acc = _mm512_add_ps(acc, _mm512_loadu_ps(er + j));
        if (Cf < C) acc = _mm512_mask_add_ps(acc, mt, acc, _mm512_maskz_loadu_ps(mt, er + Cf));
      }
      _mm512_store_ps(lanes + 16 * i, acc);
    }
    _mm512_store_ps(sm, tree16<false>(lanes));
    if constexpr (log)
      for (int64_t i = 0; i < nr; ++i) sm[i] = nk::log_a(sm[i]);
    T* yg = y + g0 * C;
    w = RowWalk(C);
    for (int64_t j = 0; j < n; j += 16, w.next()) {
      __m512 out;
      if constexpr (log) out = _mm512_sub_ps(_mm512_sub_ps(group_at(xg, j, n), w.lanes(mx)), w.lanes(sm));
      else out = _mm512_div_ps(_mm512_load_ps(e + j), w.lanes(sm));
      group_store(yg, j, n, out, stream);
    }
  });
}

// The backward of rows of 16 to 128 elements in groups of 16 rows, as sm_fwd_groups: each
// row's lane sums (of dy, or dy y) in its lanes and 16 rows' trees at once (tree16), the
// outputs over the group's elements as one stream.
template <class T, bool log>
void sm_bwd_groups(int64_t rows, int64_t C, const T* y, const T* dy, T* dx) {
  const int64_t Cf = C / kLanes * kLanes;
  const __mmask16 mt = tail16(C - Cf);
  const bool stream = stream_groups(rows, C, dx);
  struct Scratch {
    alignas(64) float lanes[16 * 16];
    alignas(64) float sm[32];
  };
  for_groups(rows, C, stream, [&](int64_t g0, int64_t nr) {
    Scratch sc;
    float *lanes = sc.lanes, *sm = sc.sm;
    std::fill(sm + 16, sm + 32, 0.0f);
    const int64_t n = nr * C;
    const T *yg = y + g0 * C, *dyg = dy + g0 * C;
    for (int64_t i = 0; i < 16; ++i) {  // log: s = sum(dy); else s = sum(dy * y)
      __m512 acc = _mm512_setzero_ps();
      if (i < nr) {
        const T *yr = yg + i * C, *dyr = dyg + i * C;
        for (int64_t j = 0; j < Cf; j += kLanes)
          acc = _mm512_add_ps(acc, log ? load16(dyr + j) : _mm512_mul_ps(load16(dyr + j), load16(yr + j)));
        if (Cf < C)
          acc = _mm512_mask_add_ps(acc, mt, acc,
                                   log ? load_tail(dyr + Cf, mt, 0.0f)
                                       : _mm512_mul_ps(load_tail(dyr + Cf, mt, 0.0f), load_tail(yr + Cf, mt, 0.0f)));
      }
      _mm512_store_ps(lanes + 16 * i, acc);
    }
    _mm512_store_ps(sm, tree16<false>(lanes));
    T* dxg = dx + g0 * C;
    RowWalk w(C);
    for (int64_t j = 0; j < n; j += 16, w.next()) {
      const __m512 yv = group_at(yg, j, n), dyv = group_at(dyg, j, n), s = w.lanes(sm);
      // log: dx = dy - exp(y) s; else dx = y (dy - s)
      const __m512 out = log ? _mm512_sub_ps(dyv, _mm512_mul_ps(vexp(yv), s)) : _mm512_mul_ps(yv, _mm512_sub_ps(dyv, s));
      group_store(dxg, j, n, out, stream);
    }
  });
}

// log as a template argument: a run-time flag's test sat in the exp loop. A (the
// accumulation type, f32) as in nk's signatures, for PODLET_NORM_DEFINE_IN.
template <class T, class A>
void sm_fwd(int64_t rows, int64_t C, bool log, const T* x, T* y) {
  static_assert(std::is_same_v<A, float>);
  if (C >= kLanes && C <= kSmGroupMaxC) {
    if (log) sm_fwd_groups<T, true>(rows, C, x, y);
    else sm_fwd_groups<T, false>(rows, C, x, y);
  } else if (log) {
    sm_fwd_rows<T, true>(rows, C, x, y);
  } else {
    sm_fwd_rows<T, false>(rows, C, x, y);
  }
}

template <class T, class A>
void sm_bwd(int64_t rows, int64_t C, bool log, const T* y, const T* dy, T* dx) {
  static_assert(std::is_same_v<A, float>);
  if (C >= kLanes && C <= kSmGroupMaxC) {
    if (log) sm_bwd_groups<T, true>(rows, C, y, dy, dx);
    else sm_bwd_groups<T, false>(rows, C, y, dy, dx);
    return;
  }
  const int64_t Cf = C / kLanes * kLanes;
  const __mmask16 mt = tail16(C - Cf);
  parallel_for(rows, std::max<int64_t>(1, kChunkElems / std::max<int64_t>(C, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T *yr = y + r * C, *dyr = dy + r * C;
      T* dxr = dx + r * C;
      __m512 acc = _mm512_setzero_ps();
      if (log) {  // s = sum(dy); dx = dy - exp(y) * s
        for (int64_t j = 0; j < Cf; j += kLanes) acc = _mm512_add_ps(acc, load16(dyr + j));
        if (Cf < C) acc = _mm512_mask_add_ps(acc, mt, acc, load_tail(dyr + Cf, mt, 0.0f));
        const __m512 s = _mm512_set1_ps(tree(acc));
        for (int64_t j = 0; j < Cf; j += kLanes)
          store(dxr + j, _mm512_sub_ps(load16(dyr + j), _mm512_mul_ps(vexp(load16(yr + j)), s)));
        if (Cf < C)
          store_tail(dxr + Cf, mt,
                     _mm512_sub_ps(load_tail(dyr + Cf, mt, 0.0f), _mm512_mul_ps(vexp(load_tail(yr + Cf, mt, 0.0f)), s)));
      } else {  // s = sum(dy * y); dx = y * (dy - s)
        for (int64_t j = 0; j < Cf; j += kLanes) acc = _mm512_add_ps(acc, _mm512_mul_ps(load16(dyr + j), load16(yr + j)));
        if (Cf < C)
          acc = _mm512_mask_add_ps(acc, mt, acc,
                                   _mm512_mul_ps(load_tail(dyr + Cf, mt, 0.0f), load_tail(yr + Cf, mt, 0.0f)));
        const __m512 s = _mm512_set1_ps(tree(acc));
        for (int64_t j = 0; j < Cf; j += kLanes)
          store(dxr + j, _mm512_mul_ps(load16(yr + j), _mm512_sub_ps(load16(dyr + j), s)));
        if (Cf < C)
          store_tail(dxr + Cf, mt,
                     _mm512_mul_ps(load_tail(yr + Cf, mt, 0.0f), _mm512_sub_ps(load_tail(dyr + Cf, mt, 0.0f), s)));
      }
    }
  });
}

}  // namespace nz
}  // namespace
}  // namespace podlet::kernels
