// The code generator of fused_jit.h. One generated function per program:
//
//   for (i = begin; i + 16 <= end; i += 16) body(i)      -- zmm registers, no masks
//   if (i < end) body(i) with k7 = the remaining lanes    -- masked loads and stores
//
// body(i) runs the instructions in program order. A slot's value lives in one zmm
// register from its instruction to its last use (free registers are reused); scalar
// inputs are broadcast once before the loop. bf16 values are held as f32 (already
// rounded), bools as u32 0/1: the interpreter's register types, so every operation below
// is the interpreter's per-element code (fused_ops.h) on 16 lanes at once.
//
// Eight, four or two vectors per iteration (Gen::body) when the registers allow: each
// instruction is emitted for vector i, then for i + 16, i + 32 ... in further register
// sets. One vector's values form a dependency chain (a bf16 GELU gradient: ~25 operations
// of 3-cycle arithmetic, each followed by a ~6-cycle rounding), and one vector's body is
// longer than the core's reorder window, so one vector at a time ran at the chain's
// latency with the vector units mostly idle; W chains in flight fill them. The same
// operations on the same lanes: the bits do not depend on W.
//
// This file is compiled with the baseline flags: it only writes bytes, and runs them
// only when the active ISA is AVX-512 (F, BW, VL, DQ; BMI2 comes with every such CPU).
#include "podlet/prims/fused_jit.h"

#include <xbyak/xbyak.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <mutex>
#include <string>
#include <unordered_map>

#include "podlet/cpu/isa.h"
#include "podlet/env.h"
#include "podlet/error.h"
#include "podlet/prims/fused_jit_detail.h"

namespace podlet::fused_jit {
using namespace fused;
using namespace detail;

namespace {
std::atomic<int64_t> g_compiled{0}, g_refused{0}, g_runs{0}, g_leaf_runs{0}, g_reg_leaf_runs{0};
std::atomic<int64_t> g_way_runs[kMaxWays + 1], g_spill_runs{0};  // runs of programs compiled W vectors per iteration, by W
std::atomic<int64_t> g_unchecked_runs{0}, g_fallbacks{0};
std::atomic<int64_t> g_canonical_runs{0};  // runs of ymm programs with roundings that skip the NaN check  // runs of programs with unchecked_ways_loop; its flagged blocks
std::atomic<int> g_unchecked{-1};  // -1: not read from PODLET_FUSED_JIT_UNCHECKED yet
std::atomic<int> g_max_ways{-1};     // -1: not read from PODLET_FUSED_JIT_WAYS yet
std::atomic<int> g_enabled{-1};  // -1: not read from PODLET_FUSED_JIT yet

constexpr int kFirstReg = 8;   // zmm0-7 are scratch inside one instruction
constexpr int kNumRegs = 32;
// Bytes ahead of the current vector at which each streamed input is prefetched into L2.
constexpr int kPrefetchBytes = 4096;

using Xbyak::Zmm;
using Xbyak::Reg64;

class Gen : public Xbyak::CodeGenerator {
 public:
  Gen(const Spec& s, size_t bytes, int max_ways, bool cvt_bf16, bool unchecked)
      : Xbyak::CodeGenerator(bytes, Xbyak::DontSetProtectRWE), s_(s), max_ways_(max_ways), cvt_bf16_(cvt_bf16),
        unchecked_allowed_(unchecked) {}

  void generate() {
    plan();
    plan_ways();
    if (std::getenv("PODLET_FUSED_JIT_DEBUG")) {
      std::string ps;
      for (size_t q = 0; q < periods_.size(); ++q) ps += " " + std::to_string(periods_[q]) + (split_[q] >= 0 ? "(split)" : "");
      std::fprintf(stderr, "podlet: fused program of %d instructions, %zu loads: highest register zmm%d, span %d, %d scalars in memory, %d ways%s%s%s\n",
                   S_, s_.load_kind.size(), hi_reg_, shift_, nspill_, ways_, any_leaves_ ? ", leaf sums" : "",
                   ps.empty() ? "" : ", periods", ps.c_str());
    }
    if (any_leaves_) {
      leaf_ord_.assign(s_.outs.size(), -1);
      int n = 0;
      for (size_t o = 0; o < s_.outs.size(); ++o)
        if (s_.outs[o].mode == OutMode::kLeaves) leaf_ord_[o] = n++;
      n_acc_ = n * int(s_.leaf_k / 16);
      reg_leaves_ = s_.leaf_k <= 16 * 16 && n_acc_ <= kNumRegs - 1 - hi_reg_;
    }
    const int nl = int(s_.load_kind.size());
    out_arg_ = kArgFirst + nl;
    // Prologue: i (rcx), the end of the whole vectors (rsi), the period counters.
    mov(rcx, ptr[rdi + 8 * kArgBegin]);
    mov(rsi, ptr[rdi + 8 * kArgEnd]);
    sub(rsi, rcx);
    and_(rsi, ~int64_t(15));
    add(rsi, rcx);
    // Callee-saved registers hold the row indices of row-constant inputs and, for a
    // period that is not a multiple of 16, the row of the vector's upper lanes; r15 the
    // vector's leaf slot (kLeaves outputs).
    if (any_leaves_) push(r15);
    for (size_t q = 0; q < periods_.size(); ++q) push(row(int(q)));
    for (size_t q = 0; q < periods_.size(); ++q)
      if (split_[q] >= 0) push(next_row(split_[q]));
    for (size_t q = 0; q < periods_.size(); ++q) {
      mov(rax, rcx);
      xor_(edx, edx);
      mov(r11, periods_[q]);
      div(r11);
      mov(counter(int(q)), rdx);  // i % p
      mov(row(int(q)), rax);      // i / p
    }
    // Scalars: broadcast once.
    for (int k = 0; k < S_; ++k) {
      const Instr& ins = s_.code[k];
      if (ins.op != kLoad || s_.load_kind[ins.a] != LoadKind::kScalar || root_[k] != k || last_use_[k] < 0) continue;
      mov(rax, ptr[rdi + 8 * (kArgFirst + ins.a)]);
      if (spilled(k)) {  // its f32 value in the args array, beyond the outputs
        broadcast(zmm0, ins.d, rax);
        vmovss(spill_addr(k), xmm0);
      } else {
        broadcast(Zmm(reg_[k]), ins.d, rax);
      }
    }
    Xbyak::Label loop, tail, done;
    if (reg_leaves_) leaf_loop();
    pair_round_ = cvt_bf16_ && ways_ % 2 == 0;
    if (pair_round_) {  // k6 (a split period's mask, unused with W > 1): the odd words
      mov(eax, 0xaaaaaaaa);
      kmovd(k6, eax);
      // The permutes' indices in the two top registers when no vector's value reaches
      // them: two loads fewer per rounding (the load ports are the gathers' too).
      perm_regs_ = hi_reg_ + (ways_ - 1) * shift_ < kPermLo;
      if (perm_regs_) {
        vmovdqu16(Zmm(kPermLo), ptr[rip + perm_lo_]);
        vmovdqu16(Zmm(kPermHi), ptr[rip + perm_hi_]);
      }
    }
    if (ways_ > 1) ways_loop();
    L(loop);
    cmp(rcx, rsi);
    jae(tail, T_NEAR);
    body(false);
    advance();
    jmp(loop, T_NEAR);
    L(tail);
    mov(rdx, ptr[rdi + 8 * kArgEnd]);
    cmp(rcx, rdx);
    jae(done, T_NEAR);
    sub(rdx, rcx);
    mov(eax, -1);
    bzhi(eax, eax, edx);
    kmovw(k7, eax);
    body(true);
    L(done);
    if (any_stream_) sfence();  // non-temporal stores are weakly ordered
    for (size_t q = periods_.size(); q-- > 0;)
      if (split_[q] >= 0) pop(next_row(split_[q]));
    for (size_t q = periods_.size(); q-- > 0;) pop(row(int(q)));
    if (any_leaves_) pop(r15);
    vzeroupper();
    ret();
    for (auto& sl : slow_rounds_) {  // round_bf16's lanes that vcvtneps2bf16 would get wrong
      L(sl.slow);
      round_bf16_exact(Zmm(sl.src));
      jmp(sl.back, T_NEAR);
    }
    for (auto& sl : slow_pairs_) {
      L(sl.slow);
      round_bf16_exact(Zmm(sl.x));
      vmovaps(Zmm(sl.x), zmm0);
      round_bf16_exact(Zmm(sl.y));
      vmovaps(Zmm(sl.y), zmm0);
      jmp(sl.back, T_NEAR);
    }
    align(64);
    // round_bf16_pair's word permutes: dword j of x's result takes packed word j, of y's
    // word 16 + j (in the high half; the low half is zeroed by k6).
    L(perm_lo_);
    for (uint32_t j = 0; j < 16; ++j) dd(j << 16 | j);
    L(perm_hi_);
    for (uint32_t j = 16; j < 32; ++j) dd(j << 16 | j);
    L(consts_);
    for (uint32_t v : pool_)
      for (int l = 0; l < 16; ++l) dd(v);
  }

  // i += step, and i % p and i / p of the next vector (p >= 16; step 16 W only when every
  // period is a multiple of 16 W and i % (16 W) == 0, so that i % p + 16 W <= p).
  void advance(int step = 16) {
    add(rcx, step);
    for (size_t q = 0; q < periods_.size(); ++q) {
      add(counter(int(q)), step);
      lea(rax, ptr[counter(int(q)) - int(periods_[q])]);
      lea(rdx, ptr[row(int(q)) + 1]);
      cmp(counter(int(q)), periods_[q]);
      cmovae(counter(int(q)), rax);
      cmovae(row(int(q)), rdx);
    }
  }

  // kLeaves outputs with their slots in registers, one whole leaf (16 rows of leaf_k
  // elements) per iteration while i is on a leaf boundary and a whole leaf is left: the
  // accumulators start at -0.0, take each row's vectors in order (the accumulator first,
  // as the slot was) and are written to the leaf's slots at its end, overwriting the
  // caller's -0.0 fill: the memory slots' additions in the same order, without a
  // store-to-load round trip per addition (~20 cycles on this Zen 5: a slot updated every
  // leaf_k / 16 vectors set the pace). The generic loop takes what is left.
  void leaf_loop() {
    const int64_t K = s_.leaf_k, vpr = K / 16;
    const int lk = __builtin_ctzll(uint64_t(K));
    Xbyak::Label next, rows, out;
    L(next);
    test(rcx, int(16 * K - 1));
    jnz(out, T_NEAR);
    lea(rax, ptr[rcx + 16 * K]);
    cmp(rax, rsi);
    ja(out, T_NEAR);
    mov(r15, rcx);  // the leaf's first slot: (i / (16 K)) K
    shr(r15, lk + 4);
    shl(r15, lk);
    vmovups(Zmm(acc_reg(0)), cvec(kSignBit));  // -0.0 in every lane
    for (int a = 1; a < n_acc_; ++a) vmovaps(Zmm(acc_reg(a)), Zmm(acc_reg(0)));
    mov(r11, 16);
    L(rows);
    for (int64_t j = 0; j < vpr; ++j) {
      cur_j_ = int(j);
      body(false, true);
      advance();
    }
    dec(r11);
    jnz(rows, T_NEAR);
    for (size_t o = 0; o < s_.outs.size(); ++o) {
      if (leaf_ord_[o] < 0) continue;
      mov(rax, ptr[rdi + 8 * (out_arg_ + int(o))]);
      lea(rax, ptr[rax + r15 * 4]);
      for (int64_t j = 0; j < vpr; ++j) vmovups(ptr[rax + 64 * j], Zmm(acc_reg(leaf_ord_[o] * int(vpr) + int(j))));
    }
    jmp(next, T_NEAR);
    L(out);
  }
  int acc_reg(int a) const { return kNumRegs - 1 - a; }
  bool reg_leaves() const { return reg_leaves_; }
  int ways() const { return ways_; }
  int nspill() const { return nspill_; }

  // How many vectors go per iteration, and their registers: scalars are shared (they hold
  // the first registers, kFirstReg up); every other value of vector w gets its register
  // moved up by w times the span the plan uses. W is 8, 4 or 2 (or 1), the largest up to
  // max_ways_ whose registers fit, if need be with the scalars moved to memory. Not with
  // leaf sums (their slot per vector) or a split period; every period must be a multiple
  // of 16 W (an iteration starts on a 16 W-lane boundary of every period, so its vectors
  // are in the same period and row). Powers of two only: a chunk's start, a multiple of
  // 1024 elements, is on a 32-, 64- and 128-lane boundary of such a period but not on a
  // 48-lane one, and run() would hand most chunks to the interpreter.
  void plan_ways() {
    ways_ = 1;
    if (any_leaves_) return;
    for (int q = 0; q < int(periods_.size()); ++q)
      if (split_[q] >= 0) return;
    scalar_.assign(S_, false);
    int nscalar = 0;  // registers held by scalars
    for (int k = 0; k < S_; ++k) {
      const Instr& r = s_.code[root_[k]];
      scalar_[k] = r.op == kLoad && s_.load_kind[r.a] == LoadKind::kScalar;
      nscalar += scalar_[k] && root_[k] == k && reg_[k] >= 0;
    }
    shift_ = hi_reg_ - (kFirstReg + nscalar) + 1;
    if (shift_ <= 0) return;
    // Scalars only read by operations that take them from a staging register (spillable())
    // may live in memory instead, their registers given to the vectors.
    std::vector<bool> spill(S_, false);
    int nspill = 0;
    for (int k = 0; k < S_; ++k)
      if (scalar_[k] && root_[k] == k && reg_[k] >= 0 && outs_of_[k].empty()) spill[k] = true;
    for (int k = 0; k < S_; ++k) {
      const Instr& ins = s_.code[k];
      if (ins.op == kLoad) continue;
      const int64_t ops[3] = {ins.a, ins.b, ins.c};
      for (int q = 0; q < nops_of(ins); ++q)
        if (!spillable(ins.op)) spill[root_[ops[q]]] = false;
    }
    for (int k = 0; k < S_; ++k) nspill += spill[k];
    for (int w = max_ways_; w > 1; --w) {
      if (w & (w - 1)) continue;
      bool ok = true;
      for (int64_t p : periods_) ok &= p % (16 * w) == 0;
      if (!ok) continue;
      if (hi_reg_ + (w - 1) * shift_ < kNumRegs) { ways_ = w; break; }
      if (hi_reg_ - nspill + (w - 1) * shift_ < kNumRegs) {  // with the spillable scalars in memory
        // Registers: the kept scalars from kFirstReg up, then the vectors' values moved
        // down past the spilled ones (scalars take the lowest registers: plan()).
        std::vector<int> below(kNumRegs + 1, 0);
        for (int k = 0; k < S_; ++k)
          if (spill[k]) ++below[reg_[k] + 1];
        for (int r = 1; r <= kNumRegs; ++r) below[r] += below[r - 1];
        std::vector<int> old = reg_;
        for (int k = 0; k < S_; ++k) {
          const int r = old[root_[k]];
          if (r < 0) continue;
          reg_[k] = spill[root_[k]] ? -1 : r - below[r];
        }
        spill_slot_.assign(S_, -1);
        int n = 0;
        for (int k = 0; k < S_; ++k)
          if (spill[k]) spill_slot_[k] = n++;
        for (int k = 0; k < S_; ++k)
          if (root_[k] != k) spill_slot_[k] = spill_slot_[root_[k]];
        nspill_ = n;
        hi_reg_ -= nspill;
        ways_ = w;
        break;
      }
    }
  }

  // The W-vector loop, ahead of the one-vector loop (which takes the last few vectors, then
  // the masked tail). With periods, i starts on a 16 W-lane boundary (run() checks it).
  void ways_loop() {
    const int W = ways_;
    if (unchecked_ok()) unchecked_ways_loop();
    Xbyak::Label iter, out;
    L(iter);
    lea(rax, ptr[rcx + 16 * W]);
    cmp(rax, rsi);
    ja(out, T_NEAR);
    body(false, false, ways_);
    advance(16 * W);
    jmp(iter, T_NEAR);
    L(out);
  }

  // The W-vector loop with unchecked roundings, ahead of the checked one. round_bf16_pair
  // checks every rounding's inputs for the two kinds of value vcvtne2ps2bf16 gets wrong
  // (subnormals, flushed; NaNs, payload kept): four instructions and a branch per two
  // vectors, ~17% of a bf16 tanh-GELU VJP. Here the results of arithmetic are rounded
  // without them, and a block of kCheckIters iterations is checked at its end:
  //  * a subnormal result: the loop runs under MXCSR.FTZ, so an operation whose exact
  //    result is below the normal range flushes it and sets the underflow flag (UE);
  //  * a subnormal operand (a load, a table value): every operation rounded here takes its
  //    operands through an arithmetic instruction (raises_flags), which sets the
  //    denormal flag (DE; DAZ is cleared);
  //  * a NaN's payload: it can only reach the outputs as a NaN, and every vector stored
  //    is classified (k5).
  // A flagged block sends the call back to the block's start (i and the period counters
  // saved there), and the checked loop computes the rest of the call under the caller's
  // MXCSR: the outputs are fresh buffers, so its stores replace the first ones. Reading
  // MXCSR waits for the arithmetic in flight, hence blocks, not single iterations (one
  // read per iteration made a one-rounding program 3% slower). Same bits.
  static constexpr int kCheckIters = 8;
  static constexpr uint32_t kFtz = 0x8000, kDaz = 0x40, kFlags = 0x3f, kUeDe = 0x10 | 0x02;
  // Every rounded result comes from an arithmetic instruction of its operands (see above):
  // negation and absolute value (bit operations) keep the checked rounding.
  static bool raises_flags(int64_t op) {
    switch (op) {
      case kAdd: case kSub: case kMul: case kDiv: case kMax: case kMin: case kClamp: case kSqrt: case kRsqrt:
      case kIntPow: case kExp: case kTanh: case kErf: case kLogistic:
        return true;
      default:
        return false;
    }
  }
  // Worth it from two unchecked roundings per vector (the bias + GELU forward has one, and
  // its outputs' NaN checks cost about what they save).
  // (pair_round_: an even W >= 2, so no leaf sums, plan_ways; stores only.)
  bool unchecked_ok() const {
    if (!unchecked_allowed_ || !pair_round_) return false;
    int n = 0;
    for (int k = 0; k < S_; ++k)
      n += root_[k] == k && arith_round(s_.code[k]) && raises_flags(s_.code[k].op) && live(k);
    return n >= 2;
  }
  void unchecked_ways_loop() {
    const int W = ways_, np = int(periods_.size());
    Xbyak::Label block, iter, check, fail, out;
    // [rsp]: the caller's MXCSR, [rsp + 4]: the loop's, [rsp + 8]: iterations left in the
    // block, [rsp + 12]: the flags read; from [rsp + 16]: i and the period counters and
    // rows at the block's start.
    const int frame = 16 + 8 * (1 + 2 * np);
    sub(rsp, frame);
    stmxcsr(ptr[rsp]);
    mov(eax, ptr[rsp]);
    or_(eax, int(kFtz));
    and_(eax, ~int(kDaz | kFlags));
    mov(ptr[rsp + 4], eax);
    ldmxcsr(ptr[rsp + 4]);
    L(block);
    mov(ptr[rsp + 16], rcx);
    for (int q = 0; q < np; ++q) {
      mov(ptr[rsp + 24 + 16 * q], counter(q));
      mov(ptr[rsp + 32 + 16 * q], row(q));
    }
    mov(dword[rsp + 8], kCheckIters);
    kxorw(k5, k5, k5);
    L(iter);
    lea(rax, ptr[rcx + 16 * W]);
    cmp(rax, rsi);
    ja(check, T_NEAR);
    unchecked_ = true;
    body(false, false, W);
    unchecked_ = false;
    advance(16 * W);
    sub(dword[rsp + 8], 1);
    jnz(iter, T_NEAR);
    L(check);  // the block's end (or the loop's: then i + 16 W > end, and `block` exits at once)
    stmxcsr(ptr[rsp + 12]);
    test(dword[rsp + 12], int(kUeDe));
    jnz(fail, T_NEAR);
    kortestw(k5, k5);
    jnz(fail, T_NEAR);
    lea(rax, ptr[rcx + 16 * W]);
    cmp(rax, rsi);
    jbe(block, T_NEAR);
    jmp(out, T_NEAR);
    L(fail);  // back to the block's start, for the checked loop
    mov(rax, reinterpret_cast<uint64_t>(&g_fallbacks));
    lock();
    add(qword[rax], 1);
    mov(rcx, ptr[rsp + 16]);
    for (int q = 0; q < np; ++q) {
      mov(counter(q), ptr[rsp + 24 + 16 * q]);
      mov(row(q), ptr[rsp + 32 + 16 * q]);
    }
    L(out);
    ldmxcsr(ptr[rsp]);
    add(rsp, frame);
  }

  bool has_unchecked() const { return ways_ > 1 && unchecked_ok(); }  // ways_loop emitted it

  // Periods that are multiples of 16: a call must start a vector on a period boundary.
  std::vector<int64_t> aligned_periods() const {
    std::vector<int64_t> v;
    for (size_t q = 0; q < periods_.size(); ++q)
      if (split_[q] < 0) v.push_back(periods_[q]);
    return v;
  }

 private:
  const Spec& s_;
  int S_ = 0;
  std::vector<int> root_, last_use_, reg_;
  // body(): the vectors per iteration, the register span between two vectors' sets,
  // and which vector is being emitted (lane_ w: i + 16 w; reg() and the addresses follow it).
  const int max_ways_;
  int ways_ = 1, shift_ = 0;
  std::vector<bool> scalar_;  // the value is a broadcast scalar (one register for all vectors)
  // Scalars kept in memory (plan_ways): their f32 values in the args array after the
  // outputs (slot s at args[kArgFirst + loads + outputs + s]), loaded by operand().
  std::vector<int> spill_slot_;
  int nspill_ = 0;
  int lane_ = 0;
  // round_bf16 on vcvtneps2bf16 (AVX512_BF16 hosts), and its out-of-line exact paths;
  // the W-vector body's two-vector roundings (round_bf16_pair: pair_round_, and instr() leaving
  // its result unrounded while defer_round_) with theirs and their permutes' indices.
  const bool cvt_bf16_;
  struct SlowRound { Xbyak::Label slow, back; int src = 0; };
  std::list<SlowRound> slow_rounds_;
  bool pair_round_ = false, defer_round_ = false;
  const bool unchecked_allowed_;  // unchecked_rounding() when compiled
  bool unchecked_ = false;  // emitting unchecked_ways_loop's body
  struct SlowPair { Xbyak::Label slow, back; int x = 0, y = 0; };
  std::list<SlowPair> slow_pairs_;
  Xbyak::Label perm_lo_, perm_hi_;
  static constexpr int kPermLo = kNumRegs - 2, kPermHi = kNumRegs - 1;
  bool perm_regs_ = false;  // round_bf16_pair's indices held in kPermLo / kPermHi
  int reg(int k) const { return lane_ == 0 || scalar_[k] ? reg_[k] : reg_[k] + lane_ * shift_; }
  bool live(int k) const { return last_use_[k] >= 0 || !outs_of_[k].empty(); }  // read or stored
  // Whether kTable k's gather also gives k + 1 (the same entries' second word, the next
  // instruction: tabulate() puts a pair table's two reads side by side). k + 1's register
  // is free here or a's (read above), unless k's value is only stored and k + 1 took its
  // register (plan()): then each gathers.
  bool pair_gather(int k) const {
    if (k + 1 >= S_) return false;
    const Instr &i = s_.code[k], &j = s_.code[k + 1];
    return i.op == kTable && j.op == kTable && i.imm == 1 && j.imm == 2 && i.a == j.a && i.b == j.b &&
           root_[k] == k && root_[k + 1] == k + 1 && reg_[k + 1] != reg_[k] && live(k) && live(k + 1);
  }
  // The operations whose operands may be spilled scalars: they read every operand before
  // writing a scratch register other than zmm0-2 (operand() stages operand q in zmm5 + q).
  static bool spillable(int64_t op) {
    return (op >= kAdd && op <= kMin) || (op >= kAnd && op <= kClamp);
  }
  bool spilled(int64_t k) const { return !spill_slot_.empty() && spill_slot_[k] >= 0; }
  Xbyak::Address spill_addr(int64_t k) { return ptr[rdi + 8 * (out_arg_ + int(s_.outs.size()) + spill_slot_[k])]; }
  Zmm operand(int64_t k, int q) {
    const int r = root_[k];
    if (!spilled(r)) return Zmm(reg(r));
    const Zmm z(5 + q);
    vbroadcastss(z, spill_addr(r));
    return z;
  }
  std::vector<std::vector<int>> outs_of_;
  std::vector<int64_t> periods_;
  std::vector<int> period_of_load_;  // index into periods_
  bool any_stream_ = false, any_leaves_ = false;
  // Register leaves (leaf_loop): per output its kLeaves ordinal (-1: not kLeaves), the
  // accumulator count (ordinals x leaf_k / 16, zmm31 down) and the row vector being
  // emitted; the highest register the plan gives a value.
  bool reg_leaves_ = false;
  std::vector<int> leaf_ord_;
  int n_acc_ = 0, cur_j_ = 0, hi_reg_ = kFirstReg - 1;
  int out_arg_ = 0;
  Xbyak::Label consts_;
  std::vector<uint32_t> pool_;

  Reg64 counter(int q) const { return q == 0 ? r8 : q == 1 ? r9 : r10; }
  Reg64 row(int q) const { return q == 0 ? r12 : q == 1 ? r13 : r14; }
  // A period that is not a multiple of 16 (split period s = split_[q]): a vector's lanes
  // below lo_lanes(s) are in this period / row, the others (hi_lanes(s)) in the next.
  Reg64 next_row(int s) const { return s == 0 ? rbx : rbp; }
  Xbyak::Opmask lo_lanes(int s) const { return s == 0 ? k3 : k5; }
  Xbyak::Opmask hi_lanes(int s) const { return s == 0 ? k4 : k6; }
  std::vector<int> split_;  // per period: its split index, or -1

  // Per vector, for each split period: the lane masks and the upper lanes' row (this
  // row when no lane crosses, so the address stays inside the input).
  void split_lanes(bool masked) {
    for (size_t q = 0; q < periods_.size(); ++q) {
      const int sp = split_[q];
      if (sp < 0) continue;
      mov(rdx, periods_[q]);
      sub(rdx, counter(int(q)));  // lanes left in this period
      mov(eax, 16);
      cmp(rdx, rax);
      cmova(rdx, rax);
      mov(next_row(sp), row(int(q)));
      lea(rax, ptr[row(int(q)) + 1]);
      cmp(edx, 16);
      cmovb(next_row(sp), rax);
      mov(eax, -1);
      bzhi(eax, eax, edx);
      kmovw(lo_lanes(sp), eax);
      knotw(hi_lanes(sp), lo_lanes(sp));
      if (masked) {
        kandw(lo_lanes(sp), lo_lanes(sp), k7);
        kandw(hi_lanes(sp), hi_lanes(sp), k7);
      }
    }
  }
  int row_of(uint32_t v) {
    for (size_t i = 0; i < pool_.size(); ++i)
      if (pool_[i] == v) return int(i);
    pool_.push_back(v);
    return int(pool_.size()) - 1;
  }
  // The constant pool: one 64-byte row of 16 copies per distinct value, read whole or as
  // a {1to16} broadcast.
  Xbyak::Address cvec(uint32_t v) { return ptr[rip + consts_ + 64 * row_of(v)]; }
  Xbyak::Address cb(uint32_t v) { return ptr_b[rip + consts_ + 64 * row_of(v)]; }

  // Checks what the generator supports, resolves aliases, and assigns registers (the
  // same assignment serves both bodies).
  void plan() {
    S_ = int(s_.code.size());
    root_.assign(S_, 0);
    last_use_.assign(S_, -1);
    outs_of_.assign(S_, {});
    period_of_load_.assign(s_.load_kind.size(), -1);
    for (size_t o = 0; o < s_.outs.size(); ++o) {
      const auto& out = s_.outs[o];
      if (out.slot < 0 || out.slot >= S_) throw Refuse{"output slot out of range"};
      const DType d = s_.code[out.slot].rd;
      const bool sums = out.mode == OutMode::kRows || out.mode == OutMode::kLeaves;
      if (sums ? !is_float_reg(d) : !(is_float_reg(d) || d == DType::boolean)) throw Refuse{"output dtype"};
      if (out.mode == OutMode::kLeaves) {
        const int64_t k = s_.leaf_k;
        if (k < 16 || k > (int64_t(1) << 24) || (k & (k - 1))) throw Refuse{"leaf row length not a power of two in [16, 2^24]"};
      }
      outs_of_[out.slot].push_back(int(o));
      any_stream_ |= out.mode == OutMode::kStream;
      any_leaves_ |= out.mode == OutMode::kLeaves;
    }
    for (int k = 0; k < S_; ++k) {
      const Instr& ins = s_.code[k];
      check(ins);
      if (ins.op != kLoad) {
        const int64_t ops[3] = {ins.a, ins.b, ins.c};
        for (int q = 0; q < nops_of(ins); ++q)
          if (ops[q] < 0 || ops[q] >= k) throw Refuse{"operand out of order"};
      }
      const bool identity = identity_convert(ins);
      root_[k] = identity ? root_[ins.a] : k;
      if (ins.op == kLoad) {
        if (s_.load_kind[ins.a] == LoadKind::kPeriodic || s_.load_kind[ins.a] == LoadKind::kRowConst) {
          const int64_t p = s_.period[ins.a];
          if (p < 16) throw Refuse{"period below 16"};
          if (p > (int64_t(1) << 28)) throw Refuse{"period above 2^28 (32-bit displacements)"};
          int q = 0;
          while (q < int(periods_.size()) && periods_[q] != p) ++q;
          if (q == int(periods_.size())) {
            if (q == kMaxPeriods) throw Refuse{"more than 3 periods"};
            periods_.push_back(p);
          }
          period_of_load_[ins.a] = q;
          if (int(split_.size()) <= q) split_.resize(q + 1, -1);
          if (p % 16 && split_[q] < 0) {
            int used = 0;
            for (int v : split_) used += v >= 0;
            if (used == 2) throw Refuse{"more than 2 periods that are not multiples of 16"};
            split_[q] = used;
          }
        }
        continue;
      }
      const int64_t ops[3] = {ins.a, ins.b, ins.c};
      for (int q = 0; q < nops_of(ins); ++q) last_use_[root_[ops[q]]] = k;
    }
    for (int k = 0; k < S_; ++k)
      if (!outs_of_[k].empty()) last_use_[root_[k]] = std::max(last_use_[root_[k]], k);
    // Registers: scalars for the whole loop, every other value from its instruction to
    // its last use. An instruction may write a register one of its operands frees.
    reg_.assign(S_, -1);
    std::vector<int> free_regs;
    for (int r = kNumRegs - 1; r >= kFirstReg; --r) free_regs.push_back(r);
    auto take = [&]() {
      if (free_regs.empty()) throw Refuse{"more live values than registers"};
      const int r = free_regs.back();
      free_regs.pop_back();
      hi_reg_ = std::max(hi_reg_, r);
      return r;
    };
    for (int k = 0; k < S_; ++k) {
      const Instr& ins = s_.code[k];
      if (ins.op == kLoad && s_.load_kind[ins.a] == LoadKind::kScalar && last_use_[k] >= 0) reg_[k] = take();
    }
    for (int k = 0; k < S_; ++k) {
      const Instr& ins = s_.code[k];
      if (root_[k] != k) {  // an alias: its root's register (freed here if read no later)
        reg_[k] = reg_[root_[k]];
        const int r = root_[k];
        const bool scalar = s_.code[r].op == kLoad && s_.load_kind[s_.code[r].a] == LoadKind::kScalar;
        if (last_use_[r] == k && !scalar) free_regs.push_back(reg_[r]);
        continue;
      }
      if (reg_[k] >= 0) continue;  // a scalar
      if (ins.op != kLoad) {
        const int64_t ops[3] = {ins.a, ins.b, ins.c};
        for (int q = 0; q < nops_of(ins); ++q) {
          const int s = root_[ops[q]];
          bool dup = false;
          for (int r = 0; r < q; ++r) dup |= root_[ops[r]] == s;
          const bool scalar = s_.code[s].op == kLoad && s_.load_kind[s_.code[s].a] == LoadKind::kScalar;
          if (!dup && !scalar && last_use_[s] == k) free_regs.push_back(reg_[s]);
        }
      }
      reg_[k] = take();
      if (!live(k)) free_regs.push_back(reg_[k]);
      else if (last_use_[k] == k) free_regs.push_back(reg_[k]);  // only stored here
    }
  }

  // Refuses what body() cannot emit with the interpreter's bits.
  void check(const Instr& ins) { check_instr(s_, ins); }

  // dst = round_bf16(src) (fastmath.h): round to nearest even, NaN -> quiet NaN with the
  // sign kept. With AVX512_BF16, vcvtneps2bf16 rounds a vector in one instruction (the
  // integer form below takes eight): its rounding of normal numbers, zeros and infinities
  // is fastmath's, but it flushes subnormals to zero and keeps a NaN's payload, so a
  // vector with either (vfpclassps) jumps to the integer form, emitted out of line. src
  // must not be zmm0 or zmm1.
  void round_bf16(const Zmm& dst, const Zmm& src) {
    if (!cvt_bf16_) {
      round_bf16_exact(src);
      vmovaps(dst, zmm0);
      return;
    }
    SlowRound& sl = slow_rounds_.emplace_back();
    sl.src = src.getIdx();
    vfpclassps(k1, src, 0xa1);  // QNaN | SNaN | denormal
    vcvtneps2bf16(ymm0, src);
    vpmovzxwd(zmm0, ymm0);
    vpslld(zmm0, zmm0, 16);
    kortestw(k1, k1);
    jnz(sl.slow, T_NEAR);
    L(sl.back);
    vmovaps(dst, zmm0);
  }
  // zmm0 = round_bf16(src) in integer operations (any AVX-512 host). Scratch: zmm1, k1.
  void round_bf16_exact(const Zmm& src) {
    vpsrld(zmm0, src, 16);
    vpandd(zmm0, zmm0, cb(kOneU32));
    vpaddd(zmm0, zmm0, src);
    vpaddd(zmm0, zmm0, cb(kRound));
    vpandd(zmm0, zmm0, cb(kHighHalf));
    vfpclassps(k1, src, 0x81);  // QNaN | SNaN
    vpandd(zmm1, src, cb(kSignBit));
    vpord(zmm0 | k1, zmm1, cb(kQuietNaN));
  }
  // dst = k ? 1 : 0 (u32 lanes).
  void bool_of(const Zmm& dst, const Xbyak::Opmask& k) { vmovdqa32(dst | k | T_z, cvec(kOneU32)); }
  // dst = do_max / do_min (fused_ops.h): x86's max/min returns the second operand when
  // either is NaN, so only x's NaN needs putting back.
  void max_min(bool is_max, const Zmm& dst, const Zmm& x, const Zmm& y) {
    if (is_max) vmaxps(zmm2, x, y); else vminps(zmm2, x, y);
    vcmpps(k2, x, x, 3);  // unordered: x is NaN
    vmovaps(zmm2 | k2, x);
    vmovaps(dst, zmm2);
  }

  // The address of element idx (rcx, a period counter or a row) of a load or output.
  Xbyak::Address at(const Reg64& base, const Reg64& idx, int scale, int disp = 0) {
    return ptr[base + idx * scale + disp];
  }
  // dst = the element of dtype d at src in every lane (its register form). Uses edx.
  void broadcast(const Zmm& dst, DType d, const Xbyak::RegExp& src) {
    if (d == DType::f32) {
      vbroadcastss(dst, ptr[src]);
      return;
    }
    if (d == DType::bf16) { movzx(edx, word[src]); shl(edx, 16); }
    else movzx(edx, byte[src]);
    vpbroadcastd(dst, edx);
  }

  void load(int k, bool masked) {
    const Instr& ins = s_.code[k];
    const LoadKind lk = s_.load_kind[ins.a];
    if (lk == LoadKind::kScalar) return;
    const Zmm z(reg(k));
    const int sc = storage_scale(ins.d);
    const int disp = lane_ * 16 * sc;
    mov(rax, ptr[rdi + 8 * (kArgFirst + ins.a)]);
    const int q = period_of_load_[ins.a];
    const int sp = q >= 0 ? split_[q] : -1;
    if (lk == LoadKind::kRowConst) {  // one value per row: a broadcast (two when split)
      broadcast(z, ins.d, rax + row(q) * sc);
      if (sp >= 0) broadcast(z | hi_lanes(sp), ins.d, rax + next_row(sp) * sc);
      return;
    }
    if (lk == LoadKind::kPeriodic && sp >= 0) {  // the lanes past the period wrap to its start
      const Reg64 c = counter(q);
      const int back = -int(periods_[q]) * sc;
      if (ins.d == DType::f32) {
        vmovups(z | lo_lanes(sp) | T_z, at(rax, c, sc));
        vmovups(z | hi_lanes(sp), at(rax, c, sc, back));
      } else if (ins.d == DType::bf16) {
        vpmovzxwd(z | lo_lanes(sp) | T_z, at(rax, c, sc));
        vpmovzxwd(z | hi_lanes(sp), at(rax, c, sc, back));
        vpslld(z, z, 16);
      } else {
        vpmovzxbd(z | lo_lanes(sp) | T_z, at(rax, c, sc));
        vpmovzxbd(z | hi_lanes(sp), at(rax, c, sc, back));
      }
      return;
    }
    const Reg64 idx = lk == LoadKind::kPeriodic ? counter(q) : rcx;
    if (lk == LoadKind::kFull) prefetcht1(at(rax, idx, sc, disp + kPrefetchBytes));
    const Zmm zt = masked ? (z | k7 | T_z) : z;
    if (ins.d == DType::f32) vmovups(zt, at(rax, idx, sc, disp));
    else if (ins.d == DType::bf16) { vpmovzxwd(zt, at(rax, idx, sc, disp)); vpslld(z, z, 16); }
    else vpmovzxbd(zt, at(rax, idx, sc, disp));
  }

  void store(int k, int o, bool masked, bool reg_leaf = false) {
    const auto& out = s_.outs[o];
    const DType d = s_.code[out.slot].rd;
    const Zmm v(reg(k));
    if (reg_leaf && out.mode == OutMode::kLeaves) {  // the accumulator first (its NaN wins)
      const Zmm acc(acc_reg(leaf_ord_[o] * int(s_.leaf_k / 16) + cur_j_));
      vaddps(acc, acc, v);
      return;
    }
    mov(rax, ptr[rdi + 8 * (out_arg_ + o)]);
    if (out.mode == OutMode::kRows) {  // f32 rows, whatever the slot's dtype
      const Xbyak::Address dst = at(rax, rcx, 4, lane_ * 64);
      vmovups(masked ? dst | k7 : dst, v);
      return;
    }
    if (out.mode == OutMode::kLeaves) {  // slot r15 += v, the slot first (its NaN wins)
      lea(rax, ptr[rax + r15 * 4]);
      if (masked) {
        vmovups(zmm0 | k7 | T_z, ptr[rax]);
        vaddps(zmm0, zmm0, v);
        vmovups(ptr[rax] | k7, zmm0);
      } else {
        vmovups(zmm0, ptr[rax]);
        vaddps(zmm0, zmm0, v);
        vmovups(ptr[rax], zmm0);
      }
      return;
    }
    const bool nt = out.mode == OutMode::kStream && !masked;
    const Xbyak::Address dst = at(rax, rcx, storage_scale(d), lane_ * 16 * storage_scale(d));
    const Xbyak::Address mdst = masked ? dst | k7 : dst;
    if (d == DType::f32) {
      if (nt) vmovntps(dst, v); else vmovups(mdst, v);
    } else if (d == DType::bf16) {
      vpsrld(zmm0, v, 16);  // the register holds an exact bf16: its top half
      if (nt) { vpmovdw(ymm0, zmm0); vmovntdq(dst, ymm0); } else vpmovdw(mdst, zmm0);
    } else {
      if (nt) { vpmovdb(xmm0, v); vmovntdq(dst, xmm0); } else vpmovdb(mdst, v);
    }
  }

  void instr(int k) {
    const Instr& ins = s_.code[k];
    const Zmm d(reg(k));
    const Zmm a = operand(ins.a, 0);
    if (ins.op == kTable) {  // d = table[a's bf16 bits]: 32 bits gathered at 2 x index, the low word kept
      mov(rax, ptr[rdi + 8 * (kArgFirst + ins.b)]);  // (a pair table: at 4 x index, either word)
      vpsrld(zmm1, a, 16);  // < 65536 in every lane, masked-off tail lanes included
      kxnorw(k1, k1, k1);
      vpxord(zmm0, zmm0, zmm0);
      vpgatherdd(zmm0 | k1, ins.imm ? ptr[rax + zmm1 * 4] : ptr[rax + zmm1 * 2]);
      if (ins.imm == 2) vpandd(d, zmm0, cb(0xffff0000u));
      else vpslld(d, zmm0, 16);
      if (pair_gather(k)) vpandd(Zmm(reg(k + 1)), zmm0, cb(0xffff0000u));  // the pair's second word too
      return;
    }
    const Zmm b = ins.op >= kAdd ? operand(ins.b, 1) : Zmm(0);
    const Zmm c = ins.op == kSelect || ins.op == kClamp ? operand(ins.c, 2) : Zmm(0);
    const bool rb = ins.rd == DType::bf16;
    switch (ins.op) {
      case kConvert:
        if (ins.d == DType::boolean) {            // bool -> f32 / bf16: 0 or 1, exact in both
          vcvtdq2ps(d, a);
        } else if (ins.rd == DType::boolean) {    // float -> bool: x != 0 (NaN: true)
          vpxord(zmm1, zmm1, zmm1);
          vcmpps(k1, a, zmm1, 4);  // NEQ_UQ
          bool_of(d, k1);
        } else {                                  // f32 -> bf16
          round_bf16(d, a);
        }
        return;
      case kSelect:
        vptestmd(k1, a, a);
        vpblendmd(zmm2 | k1, c, b);
        if (ins.d == DType::f32 && ins.rd == DType::bf16) round_bf16(d, zmm2); else vmovaps(d, zmm2);
        return;
      case kNot: vpxord(d, a, cb(kOneU32)); return;
      case kAnd: vpandd(d, a, b); return;
      case kOr: vpord(d, a, b); return;
      case kXor: vpxord(d, a, b); return;
      case kIsFinite:
        vsubps(zmm2, a, a);
        vcmpps(k1, zmm2, zmm2, 0);  // EQ_OQ
        bool_of(d, k1);
        return;
      default: break;
    }
    if (ins.op >= kEq && ins.op <= kGe) {
      if (ins.d == DType::boolean) {  // u32 0/1
        static const uint8_t upred[] = {0, 4, 1, 2, 6, 5};  // eq ne lt le gt(nle) ge(nlt)
        vpcmpud(k1, a, b, upred[ins.op - kEq]);
      } else {
        static const uint8_t fpred[] = {0x00, 0x04, 0x11, 0x12, 0x1e, 0x1d};  // EQ_OQ NEQ_UQ LT LE GT GE (quiet)
        vcmpps(k1, a, b, fpred[ins.op - kEq]);
      }
      bool_of(d, k1);
      return;
    }
    // Float arithmetic. x86's add / sub / mul / div return the first operand's NaN
    // (quieted) when it is one and otherwise the second's: the interpreter's rule
    // (`x != x ? x + 0 : x + y`), so the plain instruction with x first.
    const Zmm r = rb && !defer_round_ ? zmm2 : d;
    switch (ins.op) {
      case kNeg: vpxord(r, a, cb(kSignBit)); break;
      case kAbs: vpandd(r, a, cb(kAbsMask)); break;
      case kSqrt: vsqrtps(r, a); break;
      case kRsqrt:
        vsqrtps(zmm1, a);
        vmovaps(zmm2, cvec(f32(1.0f)));
        vdivps(r, zmm2, zmm1);
        break;
      case kIntPow: int_pow(r, a, ins.imm); break;
      case kExp: exp_(r, a); break;
      case kTanh: tanh_(r, a); break;
      case kErf: erf_(r, a); break;
      case kLogistic: logistic_(r, a); break;
      case kAdd: vaddps(r, a, b); break;
      case kSub: vsubps(r, a, b); break;
      case kMul: vmulps(r, a, b); break;
      case kDiv: vdivps(r, a, b); break;
      case kMax: max_min(true, r, a, b); break;
      case kMin: max_min(false, r, a, b); break;
      case kClamp:  // min(max(x, lo), hi)
        max_min(true, zmm1, b, a);
        max_min(false, r, zmm1, c);
        break;
      default: throw Refuse{"this op"};
    }
    if (rb && !defer_round_) round_bf16(d, r);
  }
  // Whether instr(k)'s result is rounded by the arithmetic path's round_bf16 (the one
  // body() may defer and do for two vectors at once).
  bool arith_round(const Instr& ins) const {
    if (ins.rd != DType::bf16 || ins.op == kLoad || ins.op == kConvert || ins.op == kSelect || ins.op == kIsFinite ||
        ins.op == kTable)
      return false;
    if (ins.op == kNot || ins.op == kAnd || ins.op == kOr || ins.op == kXor) return false;
    return !(ins.op >= kEq && ins.op <= kGe);
  }
  // x = round_bf16(x), y = round_bf16(y) for two vectors' f32 values at once:
  // vcvtne2ps2bf16 packs both (x's words low), and a word permute per vector puts its
  // words back in the high halves (k6: the odd words; the even ones zeroed). A NaN or a
  // subnormal in either sends both to the integer form, out of line.
  // Unchecked (unchecked_ways_loop, whose flags stand for the check): the conversion and
  // permutes alone.
  void round_bf16_pair(const Zmm& x, const Zmm& y, bool checked = true) {
    SlowPair* sl = nullptr;
    if (checked) {
      sl = &slow_pairs_.emplace_back();
      sl->x = x.getIdx();
      sl->y = y.getIdx();
      vfpclassps(k1, x, 0xa1);  // QNaN | SNaN | denormal
      vfpclassps(k2, y, 0xa1);
      korw(k1, k1, k2);
      kortestw(k1, k1);
      jnz(sl->slow, T_NEAR);
    }
    vcvtne2ps2bf16(zmm0, y, x);
    if (perm_regs_) {
      vpermw(x | k6 | T_z, Zmm(kPermLo), zmm0);
      vpermw(y | k6 | T_z, Zmm(kPermHi), zmm0);
    } else {
      vmovdqu16(zmm1, ptr[rip + perm_lo_]);
      vpermw(x | k6 | T_z, zmm1, zmm0);
      vmovdqu16(zmm1, ptr[rip + perm_hi_]);
      vpermw(y | k6 | T_z, zmm1, zmm0);
    }
    if (sl) L(sl->back);
  }

  // dst = fm::exp(x) (kernels/fastmath.h): its operations in its order, the FMAs as
  // vfmadd, and 2^n by vscalefps (one rounding of p 2^n, as fm::exp's two halves). Scratch:
  // zmm1, zmm3-5 and k2; x is read up to the last instruction, so it may be dst or any
  // other register.
  void exp_(const Zmm& dst, const Zmm& x) {
    vmaxps(zmm3, x, cb(f32(kExpLo)));  // xc (a NaN lane becomes -104 here and x again below)
    vminps(zmm3, zmm3, cb(f32(kExpHi)));
    vmovaps(zmm4, cvec(f32(kExpShift)));  // fn = fma(xc, 1/ln2, 1.5 2^23) - 1.5 2^23
    vfmadd231ps(zmm4, zmm3, cb(f32(kLog2e)));
    vsubps(zmm4, zmm4, cb(f32(kExpShift)));
    vfmadd231ps(zmm3, zmm4, cb(f32(kLn2Hi)));  // r = fma(fn, -ln2_hi, xc)
    vfmadd231ps(zmm3, zmm4, cb(f32(kLn2Lo)));  // r = fma(fn, -ln2_lo, r)
    vmulps(zmm1, zmm3, zmm3);  // z
    vmovaps(zmm5, cvec(f32(kExpP0)));  // p
    vfmadd231ps(zmm5, zmm3, cb(f32(kExpP1)));
    for (float c : kExpPoly)
      vfmadd213ps(zmm5, zmm3, cb(f32(c)));  // p = fma(p, r, c)
    vfmadd213ps(zmm5, zmm1, zmm3);  // fma(p, z, r) + 1
    vaddps(zmm5, zmm5, cb(f32(1.0f)));
    vscalefps(zmm5, zmm5, zmm4);
    vcmpps(k2, x, x, 3);  // x is NaN: x
    vblendmps(dst | k2, zmm5, x);
  }
  // p = (..(k[0] x2 + k[1]) x2 + ..) + k[n-1] with FMAs (fm::fma_, exact): x2 in zmm2, p
  // in `p`, the first FMA's multiplicand from the pool.
  void fma_horner(const Zmm& p, const float* k, int n) {
    vbroadcastss(p, cvec(f32(k[0])));
    for (int i = 1; i < n; ++i) vfmadd213ps(p, zmm2, cb(f32(k[i])));  // p = x2 p + k[i]
  }
  // zmm3 = t P(t^2) / Q(t^2) for t = x clamped to [-c, c] (tanh's and erf's form; a NaN
  // lane becomes -c here, the callers put x back). Scratch: zmm1-4.
  void odd_rational(const Zmm& x, float c, const float* kP, int nP, const float* kQ, int nQ) {
    vmaxps(zmm1, x, cb(f32(-c)));
    vminps(zmm1, zmm1, cb(f32(c)));
    vmulps(zmm2, zmm1, zmm1);
    fma_horner(zmm3, kP, nP);
    vmulps(zmm3, zmm1, zmm3);
    fma_horner(zmm4, kQ, nQ);
    vdivps(zmm3, zmm3, zmm4);
  }
  // dst = fm::tanh(x) (kernels/fastmath.h): x P(x^2) / Q(x^2) on x clamped to +-7.9988,
  // x itself below |x| = 0.0004 or when NaN. Scratch: zmm0-4 and k1; dst written last.
  void tanh_(const Zmm& dst, const Zmm& x) {
    const OddRational t = tanh_rational();
    odd_rational(x, t.clamp, t.p, t.np, t.q, t.nq);
    vpandd(zmm0, x, cb(kAbsMask));
    vcmpps(k1, zmm0, cb(f32(kTanhSmall)), 0x19);  // not |x| >= 0.0004 (true for NaN)
    vblendmps(dst | k1, zmm3, x);
  }
  // dst = fm::erf(x): x P(x^2) / Q(x^2) on x clamped to +-3.8325; a NaN as it came.
  // Scratch: zmm1-4 and k1; dst written last.
  void erf_(const Zmm& dst, const Zmm& x) {
    const OddRational e = erf_rational();
    odd_rational(x, e.clamp, e.p, e.np, e.q, e.nq);
    vcmpps(k1, x, x, 3);  // unordered: x is NaN
    vblendmps(dst | k1, zmm3, x);
  }
  // dst = fm::logistic(x): e = e^-|x|, r = 1 / (1 + e), x < 0 ? e * r : r. Scratch:
  // zmm0-7; dst written last.
  void logistic_(const Zmm& dst, const Zmm& x) {
    vpandd(zmm7, x, cb(kAbsMask));
    vpxord(zmm7, zmm7, cb(kSignBit));  // -|x|
    exp_(zmm6, zmm7);  // e
    vbroadcastss(zmm2, cvec(f32(1.0f)));
    vaddps(zmm2, zmm2, zmm6);
    vbroadcastss(zmm1, cvec(f32(1.0f)));
    vdivps(zmm1, zmm1, zmm2);  // r
    vmulps(zmm2, zmm6, zmm1);  // e * r
    vpxord(zmm0, zmm0, zmm0);
    vcmpps(k1, x, zmm0, 0x11);  // x < 0
    vblendmps(zmm1 | k1, zmm1, zmm2);
    vmovaps(dst, zmm1);
  }

  // The interpreter's integer_pow: x^2 and x^3 as single products, otherwise repeated
  // squaring from acc = 1 (same products in the same order).
  void int_pow(const Zmm& r, const Zmm& x, int64_t imm) {
    if (imm == 2) { vmulps(r, x, x); return; }
    if (imm == 3) { vmulps(zmm1, x, x); vmulps(r, x, zmm1); return; }
    const uint64_t e = uint64_t(imm < 0 ? -imm : imm);
    vmovaps(zmm1, cvec(f32(1.0f)));  // acc
    vmovaps(zmm0, x);              // b
    for (uint64_t k = e; k > 0;) {
      if (k & 1) vmulps(zmm1, zmm1, zmm0);
      k >>= 1;
      if (k) vmulps(zmm0, zmm0, zmm0);
    }
    if (imm < 0) { vmovaps(zmm0, cvec(f32(1.0f))); vdivps(r, zmm0, zmm1); }
    else vmovaps(r, zmm1);
  }

  // The program for `lanes` vectors i, i + 16, ... (1, or ways_ in the W-vector loop:
  // never masked, no split periods or leaves there), each instruction for one vector after
  // the other: W independent dependency chains in flight (the scratch registers zmm0-7 and
  // k1/k2 are renamed by the core, so one vector's reuse of them does not wait for
  // another's). With several vectors, arithmetic results are rounded two at a time.
  void body(bool masked, bool reg_leaf = false, int lanes = 1) {
    split_lanes(masked);
    if (any_leaves_ && !reg_leaf) {  // r15 = the leaf slot of element i, for every kLeaves output
      const int lk = __builtin_ctzll(uint64_t(s_.leaf_k));
      mov(r15, rcx);
      shr(r15, lk + 4);
      shl(r15, lk);
      mov(rdx, rcx);
      and_(rdx, int(s_.leaf_k - 1));
      add(r15, rdx);
    }
    for (int k = 0; k < S_; ++k) {
      const Instr& ins = s_.code[k];
      if (root_[k] == k && live(k) && !(k > 0 && pair_gather(k - 1))) {
        const bool pair = lanes > 1 && pair_round_ && arith_round(ins);
        defer_round_ = pair;
        for (lane_ = 0; lane_ < lanes; ++lane_) {
          if (ins.op == kLoad) load(k, masked);
          else instr(k);
        }
        defer_round_ = false;
        if (pair)
          for (int w = 0; w < lanes; w += 2) {
            lane_ = w;
            const Zmm x(reg(k));
            lane_ = w + 1;
            round_bf16_pair(x, Zmm(reg(k)), !(unchecked_ && raises_flags(ins.op)));
          }
      }
      for (int o : outs_of_[k])
        for (lane_ = 0; lane_ < lanes; ++lane_) {
          store(k, o, masked, reg_leaf);
          if (unchecked_) {  // a NaN stored: its payload may be one the checked rounding drops
            vfpclassps(k1, Zmm(reg(k)), 0x81);  // QNaN | SNaN
            korw(k5, k5, k1);
          }
        }
    }
    lane_ = 0;
  }
};

// flavour: 0 zmm, 1 zmm with vcvtneps2bf16, 2 ymm (fused_jit_ymm.cc), 3 as 1 with the
// unchecked loop (Gen::unchecked_ways_loop).
std::string key_of(const Spec& s, int max_ways, int flavour) {
  std::string key;
  auto put = [&](int64_t v) { key.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put(int64_t(s.code.size()));
  for (const Instr& i : s.code) for (int64_t v : {i.op, int64_t(i.d), int64_t(i.rd), i.a, i.b, i.c, i.imm}) put(v);
  put(int64_t(s.load_kind.size()));
  for (size_t l = 0; l < s.load_kind.size(); ++l) { put(int64_t(s.load_kind[l])); put(s.period[l]); }
  put(int64_t(s.outs.size()));
  for (const auto& o : s.outs) { put(o.slot); put(int64_t(o.mode)); }
  put(s.leaf_k);
  put(int64_t(max_ways));
  put(int64_t(flavour));
  return key;
}
}  // namespace


int max_ways() {
  int e = g_max_ways.load();
  if (e < 0) {
    const char* v = std::getenv("PODLET_FUSED_JIT_WAYS");
    e = v && *v ? std::atoi(v) : kMaxWays;
    e = e < 1 ? 1 : e > kMaxWays ? kMaxWays : e;
    g_max_ways = e;
  }
  return e;
}

std::shared_ptr<const Kernel> compile(const Spec& spec) {
  static std::mutex mu;
  static std::unordered_map<std::string, std::shared_ptr<const Kernel>> cache;
  const int ways = max_ways();
  // PODLET_ISA / set_isa may lower the active ISA at run time: part of the key.
  const bool cvt_bf16 = int(cpu::active_isa()) >= int(cpu::Isa::avx512bf16);
  const bool ymm = int(cpu::active_isa()) < int(cpu::Isa::avx512);
  const bool unchecked = cvt_bf16 && unchecked_rounding();
  // ymm: unchecked_rounding() lets its roundings of canonical values skip the NaN check.
  const bool canonical = ymm && unchecked_rounding();
  const std::string key = key_of(spec, ways, ymm ? (canonical ? 4 : 2) : unchecked ? 3 : int(cvt_bf16));
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  std::shared_ptr<Kernel> k;
  try {
    auto kern = std::make_shared<Kernel>();
    kern->nloads = spec.load_kind.size();
    kern->nouts = spec.outs.size();
    if (ymm) {
      generate_ymm(spec, ways, canonical, *kern);
    } else {
      // The bodies: one-vector loop and masked tail, plus the W-vector loops' W each (the
      // unchecked one and the checked one; and room for the out-of-line roundings);
      // leaf_loop's are small programs.
      const size_t bytes = (16384 + spec.code.size() * (3 + 2 * ways) * 512 + 4095) / 4096 * 4096;
      auto gen = std::make_unique<Gen>(spec, bytes, ways, cvt_bf16, unchecked);
      gen->generate();
      gen->setProtectModeRE();
      kern->fn = gen->getCode<void (*)(const uint64_t*)>();
      kern->periods = gen->aligned_periods();
      kern->reg_leaves = gen->reg_leaves();
      kern->ways = gen->ways();
      kern->unchecked = gen->has_unchecked();
      kern->nspill = size_t(gen->nspill());
      kern->gen = std::move(gen);
      for (const auto& o : spec.outs) kern->leaves |= o.mode == OutMode::kLeaves;
    }
    k = kern;
    ++g_compiled;
  } catch (const Refuse& r) {
    ++g_refused;
    if (std::getenv("PODLET_FUSED_JIT_DEBUG"))
      std::fprintf(stderr, "podlet: fused program of %zu instructions interpreted: %s\n", spec.code.size(), r.why);
  } catch (const Xbyak::Error&) {
    ++g_refused;
  }
  cache.emplace(key, k);
  return k;
}

namespace {
// The ymm code runs whole vectors: [begin, whole) directly, then a partial last vector
// through 64-byte bounce blocks (its streamed inputs copied in, zero-padded, the outputs
// copied back). Periodic, per-row and scalar inputs are read in place: a vector starting
// on a multiple of 8 of a period (a multiple of 8) stays inside its row.
void run_ymm(const Kernel& k, int64_t begin, int64_t end, uint64_t* args, void* const* out) {
  const int64_t whole = begin + (end - begin) / 8 * 8;
  if (whole > begin) {
    args[kArgEnd] = uint64_t(whole);
    k.fn(args);
  }
  if (whole == end) return;
  const int64_t rem = end - whole;
  std::vector<uint8_t> mem(64 * (k.nloads + k.nouts + 1), 0);
  uint8_t* blk = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(mem.data()) + 63) & ~uintptr_t(63));
  for (size_t l = 0; l < k.nloads; ++l) {
    if (k.load_kind[l] != LoadKind::kFull) continue;
    uint8_t* b = blk + 64 * l;
    const int sc = k.load_scale[l];
    std::memcpy(b, reinterpret_cast<const uint8_t*>(args[kArgFirst + l]) + whole * sc, size_t(rem * sc));
    args[kArgFirst + l] = reinterpret_cast<uint64_t>(b) - uint64_t(whole * sc);
  }
  for (size_t o = 0; o < k.nouts; ++o)
    args[kArgFirst + k.nloads + o] = reinterpret_cast<uint64_t>(blk + 64 * (k.nloads + o)) - uint64_t(whole * k.out_scale[o]);
  args[kArgBegin] = uint64_t(whole);
  args[kArgEnd] = uint64_t(whole + 8);
  k.fn(args);
  for (size_t o = 0; o < k.nouts; ++o) {
    const int sc = k.out_scale[o];
    std::memcpy(static_cast<uint8_t*>(out[o]) + whole * sc, blk + 64 * (k.nloads + o), size_t(rem * sc));
  }
}
}  // namespace

bool run(const Kernel& k, int64_t begin, int64_t end, const void* const* load_src, void* const* out) {
  for (int64_t p : k.periods)
    if ((begin % p) % (k.lanes * k.ways)) return false;
  uint64_t stack_args[64];
  std::vector<uint64_t> heap_args;
  const size_t na = kArgFirst + k.nloads + k.nouts + k.nspill;  // the spilled scalars' slots last
  uint64_t* args = stack_args;
  if (na > 64) { heap_args.resize(na); args = heap_args.data(); }
  args[kArgBegin] = uint64_t(begin);
  args[kArgEnd] = uint64_t(end);
  for (size_t l = 0; l < k.nloads; ++l) args[kArgFirst + l] = reinterpret_cast<uint64_t>(load_src[l]);
  for (size_t o = 0; o < k.nouts; ++o) args[kArgFirst + k.nloads + o] = reinterpret_cast<uint64_t>(out[o]);
  if (k.lanes == 8) run_ymm(k, begin, end, args, out);
  else k.fn(args);
  g_runs.fetch_add(1, std::memory_order_relaxed);
  if (k.leaves) g_leaf_runs.fetch_add(1, std::memory_order_relaxed);
  if (k.reg_leaves) g_reg_leaf_runs.fetch_add(1, std::memory_order_relaxed);
  g_way_runs[k.ways].fetch_add(1, std::memory_order_relaxed);
  if (k.nspill || k.stack_slots) g_spill_runs.fetch_add(1, std::memory_order_relaxed);
  if (k.unchecked) g_unchecked_runs.fetch_add(1, std::memory_order_relaxed);
  if (k.canonical_roundings) g_canonical_runs.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool enabled() {
  int e = g_enabled.load();
  if (e < 0) {
    const char* v = std::getenv("PODLET_FUSED_JIT");
    e = !(v && std::strcmp(v, "0") == 0);
    g_enabled = e;
  }
  return e && int(cpu::active_isa()) >= int(cpu::Isa::avx2);
}
void set_enabled(bool on) { g_enabled = on ? 1 : 0; }
void set_max_ways(int w) { g_max_ways = w < 1 ? 1 : w > kMaxWays ? kMaxWays : w; }
bool unchecked_rounding() {
  int e = g_unchecked.load();
  if (e < 0) g_unchecked = e = env_flag("PODLET_FUSED_JIT_UNCHECKED", true);
  return e;
}
void set_unchecked_rounding(bool on) { g_unchecked = on ? 1 : 0; }
Stats stats() {
  Stats s{g_compiled.load(), g_refused.load(), g_runs.load(), g_leaf_runs.load(), g_reg_leaf_runs.load(), {}};
  for (int w = 1; w <= kMaxWays; ++w) s.way_runs[w] = g_way_runs[w].load();
  s.spill_runs = g_spill_runs.load();
  s.unchecked_runs = g_unchecked_runs.load();
  s.fallbacks = g_fallbacks.load();
  s.canonical_runs = g_canonical_runs.load();
  return s;
}

}  // namespace podlet::fused_jit
