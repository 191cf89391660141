// Fused scaled dot-product attention (prims/attention.cc): flash-style tiles, the
// [T, S] score matrix of a head never materialised. Layouts are jax.nn's: q [B, T, N, H],
// k and v [B, S, K, H] with N = K * G (grouped-query attention: query head n reads
// key/value head n / G). Everything runs in the accumulation type A (f32 for f32 and
// bf16 inputs, f64 for f64), converting the inputs as they are loaded.
//
// The arithmetic is jax.nn.dot_product_attention's (implementation='xla'):
//   logits = (q . k) * scale [+ bias]; masked logits become -0.7 * FLT_MAX (so a row with
//   every position masked averages all values, as jax's softmax of equal logits does);
//   softmax over s; out = probs . v; rows t >= query_seq_lengths[b] are zero.
// The masks combine: mask[b, n, t, s] (broadcast), causal (s <= t), a local window
// (t - left <= s <= t + right), and the sequence lengths (t < qlen[b], s < kvlen[b]).
// Forward: an online softmax per query row (running max and sum, the accumulator rescaled
// when the max grows) over key tiles; also returns lse = max + log(sum) per row, which
// the backward pass uses to recompute probabilities tile by tile (FlashAttention-2).
// Backward: one task per (batch, kv head) walks the key tiles and, inside, the query tiles
// of the G heads that read them, recomputing each probability once: dV and dK of the key
// tile and dQ of the rows accumulate in the task (the score gradient too, for a bias).
// Each output element is summed by one task in a fixed order, so the bits do not depend
// on the thread count. Products are fused multiply-adds (an instruction in the ISA
// builds, libm's fma in the baseline one: the same bits).
//
// The kernel is one template (attention_impl.h) compiled per ISA: _ref on the baseline,
// _avx2 and _avx512 with their flags and -ffp-contract=off. Its loops are written so the
// compiler vectorises them across independent lanes only (never a reordered sum), so
// every ISA gives the reference's bits. bf16 on AVX512_BF16 hosts is the exception: it runs
// on vdpbf16ps pair products (attention_pairs_impl.h, declared below), with bits of its
// own that its plain C++ emulation reproduces on any host.
#pragma once
#include <cstdint>
#include "podlet/dtype.h"

namespace podlet::kernels {

struct Attn {
  int64_t B = 0, T = 0, S = 0, N = 0, K = 0, H = 0;
  double scale = 1.0;
  bool causal = false;
  int64_t win_left = -1, win_right = -1;  // -1: unbounded on that side
  // Optional inputs (nullptr: absent). bias is in the accumulation type; bias_st / mask_st
  // are element strides over (b, n, t, s), 0 on broadcast dims.
  const void* bias = nullptr;
  int64_t bias_st[4] = {0, 0, 0, 0};
  const bool* mask = nullptr;
  int64_t mask_st[4] = {0, 0, 0, 0};
  const int32_t* qlen = nullptr;
  const int32_t* kvlen = nullptr;
  // Elements between consecutive tokens' rows of q, k, v and of dq, dk, dv (0: packed,
  // N * H or K * H). Larger when they are views of one [B, T, 3, N, H] projection and
  // parts of its gradient (ir/attention_views.h); batch b's rows start at b * T * ld
  // (b * S * ld). out and dout are always packed.
  int64_t q_ld = 0, k_ld = 0, v_ld = 0, dq_ld = 0, dk_ld = 0, dv_ld = 0;
  // The backward pass's dbias summed over the batch in the kernel (0: one [N, T, S] slab
  // per batch entry, stored). Else batch entries b are added, in order, into slab
  // b / dbias_chunk (zeroed by the caller, which adds the slabs in order): the tasks run
  // each chunk's entries on one thread, one after another, so the sums do not depend on
  // the thread count.
  int64_t dbias_chunk = 0;
  int64_t dbias_off(int64_t b, int64_t n, int64_t t) const {
    return (((dbias_chunk ? b / dbias_chunk : b) * N + n) * T + t) * S;
  }
  int64_t ldq() const { return q_ld ? q_ld : N * H; }
  int64_t ldk() const { return k_ld ? k_ld : K * H; }
  int64_t ldv() const { return v_ld ? v_ld : K * H; }
  int64_t lddq() const { return dq_ld ? dq_ld : N * H; }
  int64_t lddk() const { return dk_ld ? dk_ld : K * H; }
  int64_t lddv() const { return dv_ld ? dv_ld : K * H; }
};

// out [B, T, N, H] (T), lse [B, N, T] (A).
template <class T, class A>
void attention_fwd(const Attn& p, const T* q, const T* k, const T* v, T* out, A* lse);

// dq [B, T, N, H], dk, dv [B, S, K, H] (T); dbias [B, N, T, S] (A) when not nullptr: the
// logits' gradient (zero where masked), which the VJP sums down to the bias's shape
// (with p.dbias_chunk: [ceil(B / dbias_chunk), N, T, S] slabs, added into).
// The tasks' batch grain for that: a multiple of the chunk's tasks.
inline int64_t dbias_grain(const Attn& p, int64_t grain) {
  if (!p.dbias_chunk) return grain;
  const int64_t unit = p.dbias_chunk * p.K;
  return (grain + unit - 1) / unit * unit;
}
template <class T, class A>
void attention_bwd(const Attn& p, const T* q, const T* k, const T* v, const T* out, const A* lse, const T* dout,
                   T* dq, T* dk, T* dv, A* dbias);

// The per-ISA builds the dispatcher picks from (attention_{ref,avx2,avx512}.cc).
#define PODLET_ATTN_DECLARE(SUFFIX)                                                                              \
  void attention_fwd_##SUFFIX(const Attn& p, const float* q, const float* k, const float* v, float* out,        \
                              float* lse);                                                                      \
  void attention_fwd_##SUFFIX(const Attn& p, const bf16* q, const bf16* k, const bf16* v, bf16* out, float* lse); \
  void attention_bwd_##SUFFIX(const Attn& p, const float* q, const float* k, const float* v, const float* out,  \
                              const float* lse, const float* dout, float* dq, float* dk, float* dv,             \
                              float* dbias);                                                                    \
  void attention_bwd_##SUFFIX(const Attn& p, const bf16* q, const bf16* k, const bf16* v, const bf16* out,     \
                              const float* lse, const bf16* dout, bf16* dq, bf16* dk, bf16* dv, float* dbias);
PODLET_ATTN_DECLARE(ref)
PODLET_ATTN_DECLARE(avx2)
PODLET_ATTN_DECLARE(avx512)
#undef PODLET_ATTN_DECLARE

// f64 always runs the reference.
void attention_fwd_ref(const Attn& p, const double* q, const double* k, const double* v, double* out, double* lse);
void attention_bwd_ref(const Attn& p, const double* q, const double* k, const double* v, const double* out,
                       const double* lse, const double* dout, double* dq, double* dk, double* dv, double* dbias);

// bf16 on bf16 pair products with f32 accumulation (attention_pairs_impl.h): every
// product's operands rounded to bf16, as jax's bf16 attention; _avx512bf16 on vdpbf16ps,
// _pairs_ref on its plain C++ emulation (the same bits, any host).
#define PODLET_ATTN_PAIRS_DECLARE(SUFFIX)                                                                        \
  void attention_fwd_##SUFFIX(const Attn& p, const bf16* q, const bf16* k, const bf16* v, bf16* out, float* lse); \
  void attention_bwd_##SUFFIX(const Attn& p, const bf16* q, const bf16* k, const bf16* v, const bf16* out,     \
                              const float* lse, const bf16* dout, bf16* dq, bf16* dk, bf16* dv, float* dbias);
PODLET_ATTN_PAIRS_DECLARE(avx512bf16)
PODLET_ATTN_PAIRS_DECLARE(pairs_ref)
#undef PODLET_ATTN_PAIRS_DECLARE

// The pair emulation switch: when on, bf16 attention runs attention_*_pairs_ref whatever
// the ISA (the tests' check of the pair kernel on hosts without AVX512_BF16, and of the
// instruction against the emulation on hosts with it). Off by default.
bool attention_pairs_emulation();
void set_attention_pairs_emulation(bool on);

// Which build ran last ("ref", "avx2", "avx512", "avx512bf16", "pairs_ref"), for the ISA tests.
const char* attention_last_isa();

}  // namespace podlet::kernels
