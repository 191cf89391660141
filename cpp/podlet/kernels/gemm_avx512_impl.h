// The batched GEMM behind dot_general on the AVX-512 engine (avx512_engine.h), written
// once for both kinds and instantiated by gemm_avx512.cc (F32Kind: f32/bf16 operands
// widened, FMA) and gemm_avx512bf16.cc (Bf16Kind: bf16 operands, vdpbf16ps). See gemm.h
// for the operand layout (offset tables) and the engine for blocking and determinism.
//
// Packing follows the operand's memory order so that every copy is contiguous:
//   A with K contiguous (x @ W)       -> row-major A block, rows copied;
//   A with M contiguous (x^T @ g)     -> k-major A block, K rows copied (F32) or
//                                        interleaved in pairs (Bf16);
//   B with N contiguous (rows)        -> panels copied (F32) / row pairs interleaved (Bf16);
//   B with K contiguous (x @ W^T)     -> panels transposed (Bf16: 32-bit words = K pairs).
// Any other layout gathers element by element.
#pragma once
#include "podlet/kernels/avx512_engine.h"

namespace podlet::kernels::avx512 {
namespace {

using engine::even_step, engine::unit_step;

struct Operands {
  const GemmArgs& g;
  bool a_k_unit, a_row_unit, b_col_unit, b_k_unit;
};

inline uint32_t pair_word(const bf16* p, int64_t o0, bool has1, int64_t o1) {
  return uint32_t(p[o0].bits) | (has1 ? uint32_t(p[o1].bits) << 16 : 0u);
}

// Steps [q0, q0 + nq) of panel j of B[b] into dst = [nq][NR] words, zero past N (and
// past K).
template <class Kind, class T>
void pack_b_panel(const Operands& o, int64_t b, int64_t j, int64_t q0, int64_t nq, uint32_t* dst) {
  const GemmArgs& g = o.g;
  const T* base = static_cast<const T*>(g.b) + g.b_batch[b];
  const int64_t n0 = j * NR, nb = imin(NR, g.N - n0), K = g.K;
  const int64_t* bk = g.b_k.data();
  const int64_t* bc = g.b_col.data() + n0;
  if (nb < NR)
    for (int64_t q = 0; q < nq; ++q) zero_words(dst + q * NR + nb, NR - nb);
  if constexpr (std::is_same_v<Kind, F32Kind>) {
    float* d = reinterpret_cast<float*>(dst) - q0 * NR;  // indexed by absolute k
    if (o.b_col_unit) {
      for (int64_t k = q0; k < q0 + nq; ++k) copy_row(base + bk[k] + bc[0], nb, d + k * NR);
    } else if (o.b_k_unit) {
      const T* src[NR];
      for (int64_t c = 0; c < nb; ++c) src[c] = base + bc[c] + bk[q0];
      transpose_rows(src, nb, nq, dst, NR);
    } else {
      for (int64_t k = q0; k < q0 + nq; ++k)
        for (int64_t c = 0; c < nb; ++c) d[k * NR + c] = widen1(base[bk[k] + bc[c]]);
    }
  } else {
    uint32_t* d = dst - q0 * NR;  // indexed by absolute step
    if (o.b_col_unit) {
      for (int64_t q = q0; q < q0 + nq; ++q)
        interleave_rows(base + bk[2 * q] + bc[0], 2 * q + 1 < K ? base + bk[2 * q + 1] + bc[0] : nullptr, nb,
                        d + q * NR);
    } else if (o.b_k_unit) {  // column c of B is contiguous in K: its words are K pairs
      const int64_t pairs = imin(q0 + nq, K / 2) - q0;  // whole pairs in the range
      const Word* src[NR];
      for (int64_t c = 0; c < nb; ++c) src[c] = reinterpret_cast<const Word*>(base + bc[c] + bk[2 * q0]);
      if (pairs > 0) transpose_rows(src, nb, pairs, dst, NR);
      if (K % 2 && q0 + nq == cdiv(K, 2))
        for (int64_t c = 0; c < nb; ++c) d[(K / 2) * NR + c] = base[bc[c] + bk[K - 1]].bits;
    } else {
      for (int64_t q = q0; q < q0 + nq; ++q)
        for (int64_t c = 0; c < nb; ++c) d[q * NR + c] = pair_word(base, bk[2 * q] + bc[c], 2 * q + 1 < K, 2 * q + 1 < K ? bk[2 * q + 1] + bc[c] : 0);
    }
  }
}

// A[b, m0:m0+mb, steps q0:q0+nq] into dst, row-major (rows of nq words).
template <class Kind, class T>
void pack_a_rows(const Operands& o, int64_t b, int64_t m0, int64_t mb, int64_t q0, int64_t nq, uint32_t* dst) {
  const GemmArgs& g = o.g;
  const T* base = static_cast<const T*>(g.a) + g.a_batch[b];
  const int64_t* ar = g.a_row.data() + m0;
  const int64_t k0 = q0 * Kind::kstep, kb = imin(nq * Kind::kstep, g.K - k0);
  const int64_t* ak = g.a_k.data() + k0;
  if constexpr (std::is_same_v<Kind, F32Kind>) {
    float* d = reinterpret_cast<float*>(dst);
    if (o.a_k_unit) {
      for (int64_t i = 0; i < mb; ++i) copy_row(base + ar[i] + ak[0], kb, d + i * nq);
    } else {
      for (int64_t i = 0; i < mb; ++i)
        for (int64_t k = 0; k < kb; ++k) d[i * nq + k] = widen1(base[ar[i] + ak[k]]);
    }
  } else {
    uint16_t* d = reinterpret_cast<uint16_t*>(dst);
    const int64_t ld = 2 * nq;
    for (int64_t i = 0; i < mb; ++i) {
      if (o.a_k_unit) {
        copy_halves(base + ar[i] + ak[0], kb, d + i * ld);
      } else {
        for (int64_t k = 0; k < kb; ++k) d[i * ld + k] = base[ar[i] + ak[k]].bits;
      }
      if (kb < ld) d[i * ld + kb] = 0;  // odd K: the last pair's second element
    }
  }
}

// The same block k-major, [nq][round_up(mb, kmajor_rows(mb))] words: at each step the
// block's rows whole (A stored with M contiguous, so a step is one contiguous copy, or
// one interleave of two K rows, however many rows: 12-row groups made each pair of K
// rows eleven 12-element interleaves, 10% of a [768, 6304] x [6304, 192] weight gradient).
template <class Kind, class T>
void pack_a_kmajor(const Operands& o, int64_t b, int64_t m0, int64_t mb, int64_t q0, int64_t nq, uint32_t* dst) {
  const GemmArgs& g = o.g;
  const T* col = static_cast<const T*>(g.a) + g.a_batch[b] + g.a_row[m0];
  const int64_t k0 = q0 * Kind::kstep, kb = imin(nq * Kind::kstep, g.K - k0), mp = round_up(mb, kmajor_rows(mb));
  const int64_t* ak = g.a_k.data() + k0;
  if constexpr (std::is_same_v<Kind, F32Kind>) {
    for (int64_t k = 0; k < kb; ++k) copy_row(col + ak[k], mb, reinterpret_cast<float*>(dst + k * mp));
  } else {
    for (int64_t q = 0; 2 * q < kb; ++q)
      interleave_rows(col + ak[2 * q], 2 * q + 1 < kb ? col + ak[2 * q + 1] : nullptr, mb, dst + q * mp);
  }
}

// K chunks of a product whose output is too small to keep both threads busy and whose K
// is long (weight gradients: x^T g over batch x tokens, e.g. [96, 384] summed over 50,176
// positions in Swin-T's first stage). Whole-K tiles read the long operands once per tile
// of the other side (4 x 38 MB there, at half the speed of the transposed product);
// chunks give each operand one pass and every chunk's tiles to the threads. Each element
// is then summed in blocks in order within a chunk and chunk partials in chunk order: a
// function of the shape only (never of the thread count), like conv backward-filter's.
constexpr int64_t kKChunk = 1024;   // k steps per chunk (at least)
constexpr int64_t kPerTaskBWords = int64_t(64) << 10;  // a batch entry's packed B up to 256 KB
constexpr int64_t kStreamBWords = int64_t(512) << 10;  // a weight gradient's B above 2 MB (past L2): per block

template <class Kind, class TA, class TB> void gemm_run(const GemmArgs& g) {
  // How each offset table steps: unit steps pick the packers' contiguous copies; even
  // steps make an operand's rows one prefetch stream (next_rows below).
  int64_t a_ks, a_rs, b_ks, b_cs;
  const bool a_ke = even_step(g.a_k.data(), g.K, a_ks), a_re = even_step(g.a_row.data(), g.M, a_rs);
  const bool b_ke = even_step(g.b_k.data(), g.K, b_ks), b_ce = even_step(g.b_col.data(), g.N, b_cs);
  const Operands o{g, unit_step(a_ke, a_ks, g.K), unit_step(a_re, a_rs, g.M), unit_step(b_ce, b_cs, g.N),
                   unit_step(b_ke, b_ks, g.K)};
  const int64_t Kq = cdiv(g.K, Kind::kstep);
  const int64_t panels = cdiv(g.N, NR);
  const int64_t bsize = Kq * panels * NR;  // one batch entry of packed B
  const int64_t nch = engine::k_chunks(g.B, g.M, g.N, Kq, kMaxMC, kNC, kKChunk);
  // Whole K: B packed once up front, shared by the tiles of every row range. K chunks:
  // each task packs the B blocks it uses into its scratch, L2-sized (with full-height
  // tiles B is still packed once, and no packed copy of a long B goes through memory).
  // Batched (attention's 96 heads of 197 x 64): each task packs its entry's column
  // range into its scratch, kept for the next task of the same entry and range (a
  // thread's tasks are consecutive): the whole batch packed up front went through
  // memory, 2.75 MB written and read back (11% of a QK^T).
  const bool per_task_b = nch == 1 && g.B > 1 && bsize <= kPerTaskBWords;
  // A weight gradient's long, wide B (x^T[384, 6272] @ g[6272, 1536]: 19 MB packed) packed
  // block by block inside the tasks, as the K chunks do: packed up front it went to memory
  // and came back once per row tile (3-5% of the product on Zen 4; no change where the
  // packed B fits in L2, so the threshold is L2's size).
  const bool kmajor = !o.a_k_unit && o.a_row_unit;
  const bool stream_b = nch == 1 && g.B == 1 && kmajor && o.b_col_unit && bsize > kStreamBWords;
  const bool blocked_b = nch > 1 || stream_b;  // B packed per K block, per task
  const bool prepacked_b = !per_task_b && !blocked_b;  // B packed once, up front, for every task
  WBuf bp(prepacked_b ? g.B * bsize : 1);
  if (prepacked_b)
    run_units(g.B * panels, double(g.B) * double(g.K) * double(g.N),
              [&](int64_t u) { pack_b_panel<Kind, TB>(o, u / panels, u % panels, 0, Kq, bp.p + u * Kq * NR); });

  // The rows the packers read for steps [q0, q0 + nq) of a tile, when they step evenly:
  // A's (K rows of the block's columns when k-major, else its rows' K range) if a_rows,
  // and B's if b_rows (B packed per block, or a batched task's B packed per task).
  auto next_rows = [&](int64_t b, int64_t m0, int64_t mb, int64_t n0, int64_t nb, int64_t q0, int64_t nq,
                       PfStreams& ps, bool a_rows, bool b_rows) {
    if (q0 >= Kq || mb <= 0 || nb <= 0) return;  // (an empty operand has no offsets to read)
    const int64_t k0 = q0 * Kind::kstep, kb = imin(nq * Kind::kstep, g.K - k0);
    const TA* a = static_cast<const TA*>(g.a) + g.a_batch[b] + g.a_row[m0] + g.a_k[k0];
    const int64_t ea = sizeof(TA), eb = sizeof(TB);
    if (a_rows) {
      if (kmajor && a_ke) ps.s[0] = pf_stream(a, a_ks * ea, kb, mb * ea);
      else if (o.a_k_unit && a_re) ps.s[0] = pf_stream(a, a_rs * ea, mb, kb * ea);
    }
    if (!b_rows) return;  // B packed up front, or per task and already there
    const TB* bp_ = static_cast<const TB*>(g.b) + g.b_batch[b] + g.b_k[k0] + g.b_col[n0];
    if (o.b_col_unit && b_ke) ps.s[1] = pf_stream(bp_, b_ks * eb, kb, nb * eb);
    else if (o.b_k_unit && b_ce) ps.s[1] = pf_stream(bp_, b_cs * eb, nb, kb * eb);
  };
  // C tile [m0, m0 + mb) x [n0, n0 + nb) of batch entry b over k steps [qb, qe) into ct;
  // `following` (or null) is the task this thread will most likely do next, whose first
  // block the last block's microkernels prefetch (its A rows, unless they are this tile's).
  struct TileAt {
    int64_t b, m0, mb, n0, nb, qb = 0;
  };
  // A's rows read in place (rows_in_place) when K is contiguous and the rows evenly spaced.
  const bool rows_even = o.a_k_unit && a_re && g.M > 0 && g.K > 0;
  auto a_in_place = [&](int64_t b, int64_t m0) {
    return rows_even ? rows_in_place<Kind>(static_cast<const TA*>(g.a) + g.a_batch[b] + g.a_row[m0] + g.a_k[0], g.K, a_rs)
                     : ARows();
  };
  auto product = [&](int64_t b, int64_t m0, int64_t mb, int64_t n0, int64_t nb, int64_t qb, int64_t qe, Scratch& s,
                     float* ct, int64_t ldc, const OutTile* out, const TileAt* following) {
    auto next = [&](int64_t q0, int64_t nq, PfStreams& ps) {
      if (q0 < qe) return next_rows(b, m0, mb, n0, nb, q0, nq, ps, true, blocked_b);
      // The next task's first block: its A rows, unless they are these, and its B rows
      // when it packs a B this task did not (a batched product's next entry: its rows
      // came from DRAM inside pack_b_panel, 1.02-1.23x on attention's heads; a K chunk's
      // next tile: its B rows, and its A rows, read a whole chunk ago).
      const TileAt* f = following;
      if (!f) return;
      const bool a_again = f->b == b && f->m0 == m0 && f->qb == qb && nq >= qe - qb;
      const bool b_new = (per_task_b || blocked_b) && (f->b != b || f->n0 != n0 || f->qb != qb);
      if (!a_again || b_new)
        next_rows(f->b, f->m0, f->mb, f->n0, f->nb, f->qb, nq, ps, !a_again, blocked_b || b_new);
    };
    auto pb = [&](int64_t n0_, int64_t nb_, int64_t q0, int64_t nq, Scratch& sc) -> BView {
      if (per_task_b) {  // the entry's panels [n0_, n0_ + nb_) over all of K, packed once
        const int64_t np = cdiv(nb_, NR), key = b * panels + n0_ / NR;
        if (sc.b_key != key) {
          sc.b.reserve(np * Kq * NR);
          for (int64_t j = 0; j < np; ++j) pack_b_panel<Kind, TB>(o, b, n0_ / NR + j, 0, Kq, sc.b.p + j * Kq * NR);
          sc.b_key = key;
        }
        return {sc.b.p + q0 * NR, Kq * NR};
      }
      if (prepacked_b) return PrepackedB{bp.p + b * bsize, Kq}(n0_, nb_, q0, nq, sc);
      const int64_t np = cdiv(nb_, NR);
      sc.b.reserve(np * nq * NR);
      for (int64_t j = 0; j < np; ++j) pack_b_panel<Kind, TB>(o, b, n0_ / NR + j, q0, nq, sc.b.p + j * nq * NR);
      return {sc.b.p, nq * NR};
    };
    if (kmajor)
      tile_product<Kind, true>(m0, mb, n0, nb, qb, qe, pb,
                               [&](int64_t m, int64_t rows, int64_t q0, int64_t nq, uint32_t* dst) {
                                 pack_a_kmajor<Kind, TA>(o, b, m, rows, q0, nq, dst);
                               }, s, ct, ldc, out, next);
    else
      tile_product<Kind, false>(m0, mb, n0, nb, qb, qe, pb,
                                [&](int64_t m, int64_t rows, int64_t q0, int64_t nq, uint32_t* dst) {
                                  pack_a_rows<Kind, TA>(o, b, m, rows, q0, nq, dst);
                                }, s, ct, ldc, out, next, a_in_place(b, m0));
  };
  const double flops = 2.0 * double(g.B) * double(g.M) * double(g.N) * double(g.K);
  const int64_t esize = g.c_dtype == DType::f32 ? 4 : 2;
  if (nch == 1) {
    const Tiling t = choose_tiling(g.B, g.M, g.N);
    const int64_t ntasks = g.B * t.mt * t.nt;
    auto tile_at = [&](int64_t task) {
      const int64_t b = task / (t.mt * t.nt), r = task % (t.mt * t.nt);
      const int64_t m0 = (r / t.nt) * t.mc, n0 = (r % t.nt) * t.nc;
      return TileAt{b, m0, imin(t.mc, g.M - m0), n0, imin(t.nc, g.N - n0)};
    };
    run_tasks(ntasks, flops, [&](int64_t task, Scratch& s) {
      const TileAt x = tile_at(task), f = tile_at(imin(task + 1, ntasks - 1));
      // The last K block's microkernels write the output (no pass over a C tile).
      const OutTile out{g.c_dtype, static_cast<char*>(g.c) + (g.c_off(x.b, x.m0) + x.n0) * esize,
                          g.c_batch.empty() ? g.N : g.c_ld};
      product(x.b, x.m0, x.mb, x.n0, x.nb, 0, Kq, s, s.c.f(), round_up(x.nb, NR), &out,
              task + 1 < ntasks ? &f : nullptr);
    });
    return;
  }
  // Chunked: full-size tiles (the chunks are the parallelism), each chunk's tile into
  // its own slot of `part`, then per tile the chunks added in order and stored.
  // Equal tiles (192 rows: 2 x 96, not 144 + 48): the tasks are few and the threads wait
  // for the largest.
  const int64_t mc = round_up(cdiv(g.M, cdiv(g.M, kMaxMC)), MR), nc = round_up(cdiv(g.N, cdiv(g.N, kNC)), NR);
  const int64_t mt = cdiv(g.M, mc), nt = cdiv(g.N, nc), ntiles = g.B * mt * nt, tile_size = mc * nc;
  WBuf part(nch * ntiles * tile_size);
  auto chunk_at = [&](int64_t task) {
    const int64_t c = task / ntiles, tile = task % ntiles;
    const int64_t b = tile / (mt * nt), r = tile % (mt * nt);
    const int64_t m0 = (r / nt) * mc, n0 = (r % nt) * nc;
    return TileAt{b, m0, imin(mc, g.M - m0), n0, imin(nc, g.N - n0), c * Kq / nch};
  };
  const int64_t ntasks = nch * ntiles;
  run_tasks(ntasks, flops, [&](int64_t task, Scratch& s) {
    // The next task's first block is prefetched: without it each chunk's first block
    // (a fifth of its rows) was read from DRAM inside the packers.
    const TileAt x = chunk_at(task), f = chunk_at(imin(task + 1, ntasks - 1));
    const int64_t c = task / ntiles;
    product(x.b, x.m0, x.mb, x.n0, x.nb, x.qb, (c + 1) * Kq / nch, s, part.f() + task * tile_size, nc, nullptr,
            task + 1 < ntasks ? &f : nullptr);
  });
  run_units(ntiles, double(nch) * double(tile_size), [&](int64_t tile) {
    const TileAt x = chunk_at(tile);  // chunk 0's task is the tile's number
    float* t = part.f() + tile * tile_size;
    for (int64_t c = 1; c < nch; ++c) {
      const float* pt = part.f() + (c * ntiles + tile) * tile_size;
      for (int64_t i = 0; i < x.mb * nc; ++i) t[i] += pt[i];
    }
    for (int64_t i = 0; i < x.mb; ++i) store_out(g.c_dtype, g.c, g.c_off(x.b, x.m0 + i) + x.n0, t + i * nc, x.nb);
  });
}

}  // namespace
}  // namespace podlet::kernels::avx512
