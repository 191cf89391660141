// AVX2+FMA batched GEMM behind dot_general (see gemm.h for the operand layout and
// avx2_engine.h for the blocking and the determinism argument). f32 / bf16 operands in
// any mix, f32 accumulation, f32 / bf16 output; gemm() sends everything else to gemm_ref.
#include "podlet/kernels/avx2_engine.h"

namespace podlet::kernels {
namespace {
using namespace avx2;

using engine::unit_stride;

struct Operands {
  const GemmArgs& g;
  bool a_k_unit, a_row_unit, b_col_unit, b_k_unit;
};

// Rows [k0, k0 + K) of panel j of B[b] into dst = [K][NR]: B[b, k0 + k, j*NR + c], zero
// past N.
template <class T> void pack_b_panel(const Operands& o, int64_t b, int64_t j, int64_t k0, int64_t K, float* dst) {
  const GemmArgs& g = o.g;
  const T* base = static_cast<const T*>(g.b) + g.b_batch[b];
  const int64_t n0 = j * NR, nb = imin(NR, g.N - n0);
  const int64_t* bk = g.b_k.data() + k0;
  const int64_t* bc = g.b_col.data() + n0;
  if (nb < NR)
    for (int64_t k = 0; k < K; ++k) zero_row(dst + k * NR + nb, NR - nb);
  if (o.b_col_unit) {  // rows of B are contiguous: copy 16 at a time
    for (int64_t k = 0; k < K; ++k) copy_row(base + bk[k] + bc[0], nb, dst + k * NR);
  } else if (o.b_k_unit) {  // B is stored transposed (x @ W^T): columns are contiguous
    const T* src[NR];
    for (int64_t c = 0; c < nb; ++c) src[c] = base + bc[c] + bk[0];
    transpose_rows(src, nb, K, dst, NR);
  } else {
    for (int64_t k = 0; k < K; ++k)
      for (int64_t c = 0; c < nb; ++c) dst[k * NR + c] = load1(base + bk[k] + bc[c]);
  }
}

// A[b, m0:m0+mb, k0:k0+kb] row-major into dst (row stride lda).
template <class T>
void pack_a_block(const Operands& o, int64_t b, int64_t m0, int64_t mb, int64_t k0, int64_t kb, float* dst, int64_t lda) {
  const GemmArgs& g = o.g;
  const T* base = static_cast<const T*>(g.a) + g.a_batch[b];
  const int64_t* ar = g.a_row.data() + m0;
  const int64_t* ak = g.a_k.data() + k0;
  if (o.a_k_unit) {
    for (int64_t i = 0; i < mb; ++i) copy_row(base + ar[i] + ak[0], kb, dst + i * lda);
  } else if (o.a_row_unit) {  // A stored transposed (x^T @ g): rows of A^T are contiguous
    const T* src[KC];
    for (int64_t k = 0; k < kb; ++k) src[k] = base + ak[k] + ar[0];
    transpose_rows(src, kb, mb, dst, lda);
  } else {
    for (int64_t i = 0; i < mb; ++i)
      for (int64_t k = 0; k < kb; ++k) dst[i * lda + k] = load1(base + ar[i] + ak[k]);
  }
}

// The same block k-major (A stored with M contiguous: x^T @ g, an attention's P^T @ dO):
// step k's mb elements at dst + k * lda, one contiguous copy per K row.
template <class T>
void pack_a_kmajor(const Operands& o, int64_t b, int64_t m0, int64_t mb, int64_t k0, int64_t kb, float* dst, int64_t lda) {
  const GemmArgs& g = o.g;
  const T* col = static_cast<const T*>(g.a) + g.a_batch[b] + g.a_row[m0];
  const int64_t* ak = g.a_k.data() + k0;
  for (int64_t k = 0; k < kb; ++k) copy_row(col + ak[k], mb, dst + k * lda);
}

// A batch entry's packed B up to this size is packed by the task that needs it, into its
// scratch, and kept for the thread's next task of the same entry (avx512's kPerTaskBWords).
constexpr int64_t kPerTaskBFloats = int64_t(64) << 10;  // 256 KB

// K chunks of a product whose output is too small to keep both threads busy with
// full-size tiles and whose K is long (weight gradients: x^T g over batch x tokens,
// Swin-T's first stage [96, 384] summed over 50,176 or 100,352 positions). Whole-K tiles
// cut small enough for the threads re-pack the long operands once per tile of the other
// side (B four times there, widened to f32 each time: the product ran at half the peak);
// chunks keep full-size tiles, pack each operand once per tile of the other side, and
// give every chunk's tiles to the threads. Each element is then summed in K blocks in
// order within a chunk (chunks are whole blocks) and chunk partials in chunk order: a
// function of the shape only, never of the thread count (engine::k_chunks, the AVX-512
// engine's rule).
constexpr int64_t kKChunk = 4 * KC;  // k steps per chunk (at least)

template <class TA, class TB> void run(const GemmArgs& g) {
  const Operands o{g, unit_stride(g.a_k.data(), g.K), unit_stride(g.a_row.data(), g.M),
                   unit_stride(g.b_col.data(), g.N), unit_stride(g.b_k.data(), g.K)};
  const int64_t panels = cdiv(g.N, NR);
  const int64_t bsize = g.K * panels * NR;  // one batch entry of packed B
  const Tiling t = choose_tiling(g.B, g.M, g.N);
  const double flops = 2.0 * double(g.B) * double(g.M) * double(g.N) * double(g.K);
  const int64_t nch = engine::k_chunks(g.B, g.M, g.N, g.K, kMaxMC, kNC, kKChunk);
  // A long sum (a weight gradient over every token: K 6,304 for ViT-Tiny, 25,088 and up
  // for Swin-T) packs B one K block at a time into the task's scratch, where the
  // microkernels read it while it is in L2, instead of the whole of B as f32 up front (19
  // MB for ViT-Tiny's [6304, 768]) written to and read back from memory: 9-13% faster on
  // such products, one thread or two (AMD Zen 3). Each task packs its own columns, so B
  // is packed once per tile row: only where there are few (t.mt), and in K chunks.
  const bool per_block = nch > 1 || (g.K > 2 * KC && t.mt <= 4);
  // Batched (attention's 96 heads of 197 x 64): each task packs its entry's columns into
  // its scratch, kept for the thread's next task of the same entry (a thread's tasks are
  // consecutive); the whole batch packed up front went through memory, 4.8 MB of f32
  // written and read back for a [197, 64] x 96 operand.
  const bool per_task_b = !per_block && g.B > 1 && bsize <= kPerTaskBFloats;
  FBuf bp(per_block || per_task_b ? 1 : g.B * bsize);
  if (!per_block && !per_task_b)
    run_units(g.B * panels, double(g.B) * double(g.K) * double(g.N),
              [&](int64_t u) { pack_b_panel<TB>(o, u / panels, u % panels, 0, g.K, bp.p + u * g.K * NR); });
  // A stored with M contiguous is packed k-major in the batched products (attention's
  // P^T dO, dS^T Q: 1.04x, the copy per K row cheaper than 8 x 8 transposes); the weight
  // gradients over long K keep row-major blocks, whose six contiguous rows the
  // microkernel streams better than a k-major block's strided steps (0.95-0.99x k-major).
  const bool kmajor = !o.a_k_unit && o.a_row_unit && g.B > 1;
  const int64_t esize = g.c_dtype == DType::f32 ? 4 : 2;

  // Tile [m0, m0 + mb) x [n0, n0 + nb) of entry b over K [kbeg, kend) into ct (row stride
  // ldc), or with `out` its last block into the output (tile_product).
  auto product = [&](int64_t b, int64_t m0, int64_t mb, int64_t n0, int64_t nb, int64_t kbeg, int64_t kend,
                     Scratch& s, float* ct, int64_t ldc, const OutTile* out) {
    auto get_b = [&](int64_t n0b, int64_t nbb, int64_t k0, int64_t kb, Scratch& sc) -> BView {
      const int64_t np = cdiv(nbb, NR);
      if (per_block) {
        sc.b.reserve(KC * kNC);
        for (int64_t j = 0; j < np; ++j) pack_b_panel<TB>(o, b, n0b / NR + j, k0, kb, sc.b.p + j * kb * NR);
        return BView{sc.b.p, kb * NR};
      }
      if (per_task_b) {  // the entry's panels [n0b, n0b + nbb) over all of K, packed once
        const int64_t key = b * panels + n0b / NR;
        if (sc.b_key != key) {
          sc.b.reserve(np * g.K * NR);
          for (int64_t j = 0; j < np; ++j) pack_b_panel<TB>(o, b, n0b / NR + j, 0, g.K, sc.b.p + j * g.K * NR);
          sc.b_key = key;
        }
        return BView{sc.b.p + k0 * NR, g.K * NR};
      }
      return PrepackedB{bp.p + b * bsize, g.K}(n0b, nbb, k0, kb, sc);
    };
    if (kmajor)
      tile_product<true>(m0, mb, n0, nb, kbeg, kend, get_b,
                         [&](int64_t m, int64_t rows, int64_t k0, int64_t kb, float* dst, int64_t lda) {
                           pack_a_kmajor<TA>(o, b, m, rows, k0, kb, dst, lda);
                         }, s, ct, ldc, out, /*partial=*/true);
    else
      tile_product<false>(m0, mb, n0, nb, kbeg, kend, get_b,
                          [&](int64_t m, int64_t rows, int64_t k0, int64_t kb, float* dst, int64_t lda) {
                            pack_a_block<TA>(o, b, m, rows, k0, kb, dst, lda);
                          }, s, ct, ldc, out, /*partial=*/true);
  };

  if (nch == 1) {
    run_tasks(g.B * t.mt * t.nt, flops, [&](int64_t task, Scratch& s) {
      const int64_t b = task / (t.mt * t.nt), r = task % (t.mt * t.nt);
      const int64_t m0 = (r / t.nt) * t.mc, n0 = (r % t.nt) * t.nc;
      const int64_t mb = imin(t.mc, g.M - m0), nb = imin(t.nc, g.N - n0);
      // The last K block's microkernels write the output (no pass over a C tile).
      const OutTile out{g.c_dtype, static_cast<char*>(g.c) + (g.c_off(b, m0) + n0) * esize,
                        g.c_batch.empty() ? g.N : g.c_ld};
      product(b, m0, mb, n0, nb, 0, g.K, s, s.c.p, round_up(nb, NR), &out);
    });
    return;
  }
  // Chunked: full-size tiles (the chunks are the parallelism), equal ones (192 rows: 2 x
  // 96, not 120 + 72), each chunk's tile into its own slot of `part`, then per tile the
  // chunks added in order and stored.
  const int64_t mc = round_up(cdiv(g.M, cdiv(g.M, kMaxMC)), MR), nc = round_up(cdiv(g.N, cdiv(g.N, kNC)), NR);
  const int64_t mt = cdiv(g.M, mc), nt = cdiv(g.N, nc), ntiles = g.B * mt * nt, tile_size = mc * nc;
  const int64_t blocks = cdiv(g.K, KC);
  FBuf part(nch * ntiles * tile_size);
  struct TileAt {
    int64_t b, m0, mb, n0, nb;
  };
  auto tile_at = [&](int64_t tile) {
    const int64_t b = tile / (mt * nt), r = tile % (mt * nt);
    const int64_t m0 = (r / nt) * mc, n0 = (r % nt) * nc;
    return TileAt{b, m0, imin(mc, g.M - m0), n0, imin(nc, g.N - n0)};
  };
  run_tasks(nch * ntiles, flops, [&](int64_t task, Scratch& s) {
    const int64_t c = task / ntiles;
    const TileAt x = tile_at(task % ntiles);
    const int64_t kbeg = c * blocks / nch * KC, kend = imin(g.K, (c + 1) * blocks / nch * KC);
    product(x.b, x.m0, x.mb, x.n0, x.nb, kbeg, kend, s, part.p + task * tile_size, nc, nullptr);
  });
  run_units(ntiles, double(nch) * double(tile_size), [&](int64_t tile) {
    const TileAt x = tile_at(tile);
    float* tp = part.p + tile * tile_size;  // chunk 0's slot
    for (int64_t c = 1; c < nch; ++c) {
      const float* pc = part.p + (c * ntiles + tile) * tile_size;
      for (int64_t i = 0; i < x.mb * nc; i += 8)  // nc is a multiple of NR
        _mm256_storeu_ps(tp + i, _mm256_add_ps(_mm256_loadu_ps(tp + i), _mm256_loadu_ps(pc + i)));
    }
    for (int64_t i = 0; i < x.mb; ++i) store_out(g.c_dtype, g.c, g.c_off(x.b, x.m0 + i) + x.n0, tp + i * nc, x.nb);
  });
}

}  // namespace

// Preconditions (checked by gemm()): a, b in {f32, bf16}, c in {f32, bf16}, B*M*N > 0.
void gemm_avx2(const GemmArgs& g) {
  const bool a16 = g.a_dtype == DType::bf16, b16 = g.b_dtype == DType::bf16;
  if (a16 && b16) run<bf16, bf16>(g);
  else if (a16) run<bf16, float>(g);
  else if (b16) run<float, bf16>(g);
  else run<float, float>(g);
}

}  // namespace podlet::kernels
