// The batched bf16 GEMM behind dot_general on AMX tiles (gemm.h: operand offset tables,
// C contiguous [B, M, N]), written once over a tile backend (amx_tiles.h): gemm_amx.cc
// runs it on the hardware, gemm_amx_emu.cc on emulated tiles.
//
// Packed operands, each (row group or column panel, K chunk) one 1 KiB tile:
//   A block of a task: [groups of 16 rows][K chunks of its K block][16 rows][32 bf16];
//   B (once per call, or per task and K block when streamed: tile_gemm):
//     [panels of 16 columns][K chunks][16 K pairs][16 columns x 2 bf16].
// Rows past M, columns past N and K past K are zeros (a zero product leaves a sum as it
// is). The micro-kernel keeps a 2 x 2 block of accumulator tiles (32 x 32 outputs) and
// per K chunk loads 2 A and 2 B tiles for 4 TDPBF16PS.
//
// Determinism: each output element is summed by one accumulator tile over all of K,
// chunk after chunk; tasks (output blocks) are independent. The bits depend on K alone,
// not on threads or task sizes.
#pragma once
#include "podlet/kernels/amx_pack_avx512.h"
#include "podlet/kernels/amx_tiles.h"
#include "podlet/kernels/convert.h"
#include "podlet/kernels/engine_common.h"
#include "podlet/kernels/gemm.h"
#include "podlet/parallel.h"

namespace podlet::kernels::amx {
namespace {

using engine::cdiv;
using engine::imax;
using engine::imin;
using engine::PoolBuf;
using engine::round_up;

// An output block: at most 128 rows, and every column while there are blocks enough for
// the threads, so the A block (a gather of patches, for convolutions) is packed once per
// row block and K block, not once per column block.
constexpr int64_t kMaxMC = 128;

template <class T> inline uint16_t bits_of(const T& x) { return x.bits; }

// n f32 sums to dst[off, off + n) of an f32 or bf16 output (the kernels' preconditions).
// bf16 where the object has AVX-512: convert_element_type's loop (convert.h: round_bf16's
// rule 16 lanes at a time, the same bits).
inline void store_out(DType d, void* dst, int64_t off, int64_t n, const float* src) {
  if (d == DType::f32) {
    std::memcpy(static_cast<float*>(dst) + off, src, sizeof(float) * size_t(n));
    return;
  }
  uint16_t* p = static_cast<uint16_t*>(dst) + off;
#if defined(__AVX512F__) && defined(__AVX512BW__)
  convert_f32_bf16_avx512(src, p, 0, n);
#else
  for (int64_t i = 0; i < n; ++i) p[i] = round_bf16(src[i]);
#endif
}

// How dot_general's operands lie (gemm.h offset tables), found once per call: which
// tiles the AVX-512 packers (amx_pack_avx512.h) can build with vector moves.
struct Layout {
  bool a_k_unit, a_row_unit, b_k_unit, b_col_unit;
  explicit Layout(const GemmArgs& g)
      : a_k_unit(engine::unit_stride(g.a_k.data(), g.K)),
        a_row_unit(engine::unit_stride(g.a_row.data(), g.M)),
        b_k_unit(engine::unit_stride(g.b_k.data(), g.K)),
        b_col_unit(engine::unit_stride(g.b_col.data(), g.N)) {}
};

// The VNNI rows past K (zeros) of K chunks [q0, q0 + nq) packed into dst, for packers
// that write the rest.
inline void zero_rows_past_k(int64_t K, int64_t q0, int64_t nq, uint16_t* dst) {
  const int64_t from = imax(0, (cdiv(K, 2) - q0 * (kK / 2)) * kK), end = nq * kTileElems;
  if (from < end) std::memset(dst + from, 0, sizeof(uint16_t) * size_t(end - from));
}

// K chunks [q0, q0 + nq) of panel j (16 columns) of B[b] as nq VNNI tiles (every element
// written: tile_gemm's b_fills).
void pack_b_panel(const GemmArgs& g, const Layout& l, int64_t b, int64_t j, int64_t q0, int64_t nq, uint16_t* dst) {
  const bf16* base = static_cast<const bf16*>(g.b) + g.b_batch[b];
  const int64_t n0 = j * 16, nb = imin(16, g.N - n0);
  const int64_t k_lo = q0 * kK, k_hi = imin(g.K, (q0 + nq) * kK);
  const int64_t* bk = g.b_k.data();
  const int64_t* bc = g.b_col.data() + n0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
  const uint16_t* base16 = reinterpret_cast<const uint16_t*>(base);
  if (l.b_col_unit) {  // rows of B hold the columns: interleave K rows in pairs
    for (int64_t k = k_lo; k < k_hi; k += 2)
      b_row_pair_from_rows(base16 + bk[k] + bc[0], k + 1 < g.K ? base16 + bk[k + 1] + bc[0] : nullptr, nb,
                           dst + (k / kK - q0) * kTileElems + ((k % kK) / 2) * kK);
    zero_rows_past_k(g.K, q0, nq, dst);
    return;
  }
  if (l.b_k_unit) {  // columns of B hold K: transpose each chunk
    for (int64_t q = 0; q < nq; ++q) {
      const int64_t k0 = (q0 + q) * kK;
      if (k0 < g.K) b_tile_from_k_minor(base16 + bk[k0], bc, nb, imin(kK, g.K - k0), dst + q * kTileElems);
      else std::memset(dst + q * kTileElems, 0, sizeof(uint16_t) * kTileElems);
    }
    return;
  }
#else
  (void)l;
#endif
  std::memset(dst, 0, sizeof(uint16_t) * size_t(nq * kTileElems));
  for (int64_t k = k_lo; k < k_hi; ++k) {
    uint16_t* row = dst + (k / kK - q0) * kTileElems + ((k % kK) / 2) * kK + (k % 2);
    const bf16* src = base + bk[k];
    for (int64_t n = 0; n < nb; ++n) row[2 * n] = bits_of(src[bc[n]]);
  }
}

// Rows [m0, m0+mb) of A[b], K chunks [q0, q0+nq), as [groups][nq][tile], zeros past M
// and K written here (tile_gemm's a_fills).
void pack_a_block(const GemmArgs& g, const Layout& l, int64_t b, int64_t m0, int64_t mb, int64_t q0, int64_t nq,
                  uint16_t* dst) {
  const bf16* base = static_cast<const bf16*>(g.a) + g.a_batch[b];
  const int64_t* ak = g.a_k.data();
#if defined(__AVX512F__) && defined(__AVX512BW__)
  if (!l.a_k_unit && l.a_row_unit) {  // K is A's slow dim (x^T, P^T): transpose 16-row groups
    const uint16_t* base16 = reinterpret_cast<const uint16_t*>(base);
    for (int64_t i = 0; i < mb; i += kRows) {
      const uint16_t* row0 = base16 + g.a_row[m0 + i];
      uint16_t* grp = dst + (i / kRows) * nq * kTileElems;
      for (int64_t q = 0; q < nq; ++q) {
        const int64_t k0 = (q0 + q) * kK;
        a_tile_from_k_major(row0, ak + k0, imin(kRows, mb - i), imin(kK, g.K - k0), grp + q * kTileElems);
      }
    }
    return;
  }
#endif
  for (int64_t i = 0; i < round_up(mb, kRows); ++i) {  // rows past mb: zeros
    uint16_t* grp = dst + (i / kRows) * nq * kTileElems + (i % kRows) * kK;
    for (int64_t q = 0; q < nq; ++q) {
      const int64_t k0 = (q0 + q) * kK, kb = i < mb ? imin(kK, g.K - k0) : 0;
      uint16_t* d = grp + q * kTileElems;
      const bf16* src = kb > 0 ? base + g.a_row[m0 + i] : nullptr;
#if defined(__AVX512F__) && defined(__AVX512BW__)
      if (l.a_k_unit) {  // one 64-byte row of the tile, zeros past K (GCC's inlined memcpy was 2x slower)
        _mm512_storeu_si512(d, load32_bf16(kb > 0 ? reinterpret_cast<const uint16_t*>(src + ak[k0]) : d, kb));
        continue;
      }
#endif
      if (l.a_k_unit) {
        if (kb > 0) std::memcpy(d, src + ak[k0], sizeof(uint16_t) * size_t(kb));
      } else {
        for (int64_t k = 0; k < kb; ++k) d[k] = bits_of(src[ak[k0 + k]]);
      }
      if (kb < kK) std::memset(d + kb, 0, sizeof(uint16_t) * size_t(kK - kb));  // K past K: zeros
    }
  }
}

// A RM x RN block of accumulator tiles (RM, RN in {1, 2}) over nq K chunks into c
// (f32, row stride ldc floats): from zero when `first`, else continuing the sums stored
// in c (stored and reloaded f32 values are exact, so a sum cut into K blocks has the
// bits of one pass). a: the first row group's chunks (the second group's follow at
// a_next), b: the first panel's (the second's at b_next). Tiles: C 0-3, A 4-5, B 6-7.
template <class T, int RM, int RN>
void micro(const uint16_t* a, int64_t a_next, const uint16_t* b, int64_t b_next, int64_t nq, bool first, float* c,
           int64_t ldc) {
  const int64_t stride = ldc * int64_t(sizeof(float));
  if (first) {
    T::template zero<0>();
    if constexpr (RN > 1) T::template zero<1>();
    if constexpr (RM > 1) T::template zero<2>();
    if constexpr (RM > 1 && RN > 1) T::template zero<3>();
  } else {
    T::template load<0>(c, stride);
    if constexpr (RN > 1) T::template load<1>(c + 16, stride);
    if constexpr (RM > 1) T::template load<2>(c + 16 * ldc, stride);
    if constexpr (RM > 1 && RN > 1) T::template load<3>(c + 16 * ldc + 16, stride);
  }
  for (int64_t q = 0; q < nq; ++q) {
    const uint16_t* aq = a + q * kTileElems;
    const uint16_t* bq = b + q * kTileElems;
    T::template load<4>(aq, kRowBytes);
    if constexpr (RM > 1) T::template load<5>(aq + a_next, kRowBytes);
    T::template load<6>(bq, kRowBytes);
    if constexpr (RN > 1) T::template load<7>(bq + b_next, kRowBytes);
    T::template dp<0, 4, 6>();
    if constexpr (RN > 1) T::template dp<1, 4, 7>();
    if constexpr (RM > 1) T::template dp<2, 5, 6>();
    if constexpr (RM > 1 && RN > 1) T::template dp<3, 5, 7>();
  }
  T::template store<0>(c, stride);
  if constexpr (RN > 1) T::template store<1>(c + 16, stride);
  if constexpr (RM > 1) T::template store<2>(c + 16 * ldc, stride);
  if constexpr (RM > 1 && RN > 1) T::template store<3>(c + 16 * ldc + 16, stride);
}

template <class T> struct Scratch {
  PoolBuf a, b, c;  // the packed A block, the task's B slice (streamed B), the f32 output block
  Scratch() { T::configure(); }
  ~Scratch() { T::release(); }
};

constexpr int64_t kMaxKChunks = 64;  // K chunks per block: A block <= 512 KiB, B slice <= 512 KiB
constexpr int64_t kStreamKChunks = 16;  // with streamed B (tile_gemm)

// Output block sizes: 128 rows (fewer when M is small) by all N, then halved - rows first,
// down to 32, then columns - until every thread has two blocks to take. With K in several
// blocks (`stream`: each task packs its own B per K block) blocks are as large as the
// threads allow, up to 256 x 512, the larger side halved first: every task reads its
// A rows and B columns over all of K, so fewer, larger blocks read less. The bits do
// not depend on them.
void choose_block(int64_t batches, int64_t M, int64_t N, bool stream, int64_t& mc, int64_t& nc) {
  auto blocks = [&] { return batches * cdiv(M, mc) * cdiv(N, nc); };
  if (stream) {
    mc = imin(2 * kMaxMC, round_up(M, 32));
    nc = imin(512, round_up(N, 32));
    const int64_t want = int64_t(num_threads());
    while (blocks() < want && (mc > 32 || nc > 32)) {
      if (nc >= mc && nc > 32) nc = round_up(nc / 2, 32);
      else mc = round_up(mc / 2, 32);
    }
    return;
  }
  mc = imin(kMaxMC, round_up(M, 32));
  nc = round_up(N, 32);
  const int64_t want = 2 * int64_t(num_threads());
  while (mc > 32 && blocks() < want) mc = round_up(mc / 2, 32);
  while (nc > 32 && blocks() < want) nc = round_up(nc / 2, 32);
}

// C[b] (M x N) = A[b] (M x K) B[b] (K x N) for b < batches, on tiles of backend T, the
// operands given by what packs them:
//   pack_b(b, j, q0, nq, dst): K chunks [q0, q0+nq) of panel j (16 columns) of B[b] (VNNI
//     tiles);
//   pack_a(b, m0, mb, q0, nq, dst): rows [m0, m0+mb) of A[b], K chunks [q0, q0+nq), as
//     [groups of 16 rows][nq][tile], zeros past M and K; dst arrives zeroed unless
//     a_fills (the packer writes those zeros itself); dst of pack_b likewise unless b_fills;
//   store(b, m, n0, nb, row): the nb f32 sums of output row m from column n0.
// With K in one block (or many rows) B is packed once per call, all panels, shared by the
// tasks; with K in several blocks and few rows (weight gradients: K = batch x pixels)
// each task packs its own columns per K block: no whole packed copy of a long B goes
// through memory.
// The block's sums go out after all its micro-kernel calls. (Converting each 32 x 32
// block right after its call, from a 4 KiB buffer, was tried on a Xeon with AMX in the
// same build as a slow inlined memcpy in the A packer, so it is not measured on its own.)
template <class T, class PackB, class PackA, class Store>
void tile_gemm(int64_t batches, int64_t M, int64_t N, int64_t K, PackB&& pack_b, PackA&& pack_a, Store&& store,
               bool a_fills = false, bool b_fills = false) {
  const int64_t Kc = cdiv(K, kK), panels = cdiv(N, 16);
  int64_t kq = imin(Kc, kMaxKChunks);
  // Streamed B re-packs a task's columns once per row block: only where there are few
  // (M <= 5 x 256 rows: weight gradients). ResNet-34's 14x14 and 7x7 forward / backward-
  // data products (K = 2,304 / 4,608, M = 6,272 / 1,568) ran 1.2-1.6x slower streamed.
  const bool stream = Kc > kq && M <= 5 * 2 * kMaxMC;
  // Streamed, K blocks of 16 chunks: a task's B slice (up to 32 panels) and A block stay
  // in L2 (64 chunks: Swin-T's stage-3 MLP weight gradient 7.0 vs 5.1 ms, ViT-Tiny's
  // 1.8 vs 1.5; the f32 sums stored and reloaded between blocks are exact).
  if (stream) kq = imin(kq, kStreamKChunks);
  const int64_t panel_elems = Kc * kTileElems, batch_elems = panels * panel_elems;
  PoolBuf bp(stream ? 1 : cdiv(batches * batch_elems, 2) + 1);  // 32-bit words
  uint16_t* packed_b = reinterpret_cast<uint16_t*>(bp.p);
  if (!stream)
    engine::run_units(batches * panels, double(batches) * double(N) * double(K) >= 2e5, [&](int64_t u) {
      uint16_t* dst = packed_b + u * panel_elems;
      if (!b_fills) std::memset(dst, 0, sizeof(uint16_t) * size_t(panel_elems));
      pack_b(u / panels, u % panels, 0, Kc, dst);
    });

  int64_t mc, nc;
  choose_block(batches, M, N, stream, mc, nc);
  const int64_t mt = cdiv(M, mc), nt = cdiv(N, nc);
  const double flops = 2.0 * double(batches) * double(M) * double(N) * double(K);
  engine::run_tasks<Scratch<T>>(batches * mt * nt, flops >= 4e6, [&](int64_t task, Scratch<T>& s) {
    const int64_t b = task / (mt * nt), r = task % (mt * nt);
    const int64_t m0 = (r / nt) * mc, n0 = (r % nt) * nc;
    const int64_t mb = imin(mc, M - m0), nb = imin(nc, N - n0);
    const int64_t gm = cdiv(mb, kRows), gn = cdiv(nb, 16), ldc = gn * 16;
    s.a.reserve(cdiv(gm * kq * kTileElems, 2) + 1);
    if (stream) s.b.reserve(cdiv(gn * kq * kTileElems, 2) + 1);
    s.c.reserve(gm * kRows * ldc);
    uint16_t* pa = reinterpret_cast<uint16_t*>(s.a.p);
    uint16_t* sb = reinterpret_cast<uint16_t*>(s.b.p);
    float* pc = s.c.f();
    for (int64_t q0 = 0; q0 < Kc || q0 == 0; q0 += kq) {
      const int64_t nq = imin(kq, Kc - q0), a_next = nq * kTileElems;
      if (!a_fills || nq == 0) std::memset(pa, 0, sizeof(uint16_t) * size_t(gm * a_next));
      if (nq > 0) pack_a(b, m0, mb, q0, nq, pa);
      // this K block's B panels: [panel][nq tiles] of the task's own, or the shared copy
      const uint16_t* pb = packed_b + b * batch_elems + (n0 / 16) * panel_elems + q0 * kTileElems;
      int64_t b_next = panel_elems;
      if (stream) {
        for (int64_t jj = 0; jj < gn; ++jj) {
          uint16_t* dst = sb + jj * a_next;
          if (!b_fills) std::memset(dst, 0, sizeof(uint16_t) * size_t(a_next));
          pack_b(b, n0 / 16 + jj, q0, nq, dst);
        }
        pb = sb;
        b_next = a_next;
      }
      for (int64_t j = 0; j < gn; j += 2) {
        const bool two_n = j + 1 < gn;
        for (int64_t i = 0; i < gm; i += 2) {
          const bool two_m = i + 1 < gm;
          const uint16_t* a = pa + i * a_next;
          const uint16_t* bb = pb + j * b_next;
          float* c = pc + i * kRows * ldc + j * 16;
          if (two_m && two_n) micro<T, 2, 2>(a, a_next, bb, b_next, nq, q0 == 0, c, ldc);
          else if (two_m) micro<T, 2, 1>(a, a_next, bb, 0, nq, q0 == 0, c, ldc);
          else if (two_n) micro<T, 1, 2>(a, 0, bb, b_next, nq, q0 == 0, c, ldc);
          else micro<T, 1, 1>(a, 0, bb, 0, nq, q0 == 0, c, ldc);
        }
      }
      if (Kc == 0) break;
    }
    for (int64_t i = 0; i < mb; ++i) store(b, m0 + i, n0, nb, pc + i * ldc);
  });
}

// dot_general's GEMM (gemm.h offset tables).
template <class T> void gemm_run(const GemmArgs& g) {
  const Layout l(g);
  tile_gemm<T>(
      g.B, g.M, g.N, g.K,
      [&](int64_t b, int64_t j, int64_t q0, int64_t nq, uint16_t* dst) { pack_b_panel(g, l, b, j, q0, nq, dst); },
      [&](int64_t b, int64_t m0, int64_t mb, int64_t q0, int64_t nq, uint16_t* dst) {
        pack_a_block(g, l, b, m0, mb, q0, nq, dst);
      },
      [&](int64_t b, int64_t m, int64_t n0, int64_t nb, const float* row) {
        store_out(g.c_dtype, g.c, g.c_off(b, m) + n0, nb, row);
      },
      /*a_fills=*/true, /*b_fills=*/true);
}

}  // namespace
}  // namespace podlet::kernels::amx
