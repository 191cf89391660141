// AVX2 machine code for fused elementwise programs (fused_jit.h): the AVX-512 generator's
// program (fused_jit.cc), 8 lanes per ymm vector, for hosts without AVX-512. On AMD Zen 3
// the interpreter spent ~10 cycles per 8-lane instruction of a bf16 GELU VJP (an
// operation, its bf16 rounding, the tile's loads and stores); here the values stay in
// registers for the whole program.
//
// What differs from the zmm code, and why:
// - 16 registers, not 32. ymm0-4 are scratch inside one instruction, ymm5-7 stage
//   operands kept in memory (operand q in ymm5 + q; ymm7 also holds a result bound for
//   memory, or one only stored), ymm8-15 hold values. Values that do not fit live in
//   32-byte stack slots: the registers are assigned by a linear scan over the program's
//   instructions (times the vectors per iteration), and when none is free the value read
//   last moves to memory, a broadcast scalar first. The AVX-512 generator refuses such
//   programs; here a GELU VJP in bf16 would not fit otherwise.
// - No mask registers: blends take a vector mask (vblendvps), and the code runs whole
//   vectors only. fused_jit::run puts a partial last vector through a bounce buffer (its
//   inputs copied into a zeroed block, the outputs copied back): no masked loads of 16-bit
//   or 8-bit elements exist in AVX2.
// - Periods must be multiples of 8 (one period row per vector); the others are refused.
// - No leaf sums (kLeaves, BatchNorm statistics): refused, the interpreter's rows path
//   takes them.
// - exp's 2^n as fm::exp computes it: two integer-built halves, two products (no vscalefps).
// - bf16 rounding in integer operations (no vcvtneps2bf16 on AVX2 hosts), its NaN check
//   skipped where the value's NaNs are already the one the check makes (plan_canonical).
// - Programs with bf16 roundings run 8 vectors per iteration whatever they spill
//   (choose_ways): their loops wait on the roundings' chains, not on the stack slots.
//
// Bits: every instruction is the interpreter's operation (fused_ops.h) lane by lane, as in
// the zmm code; the tests compare the compiled, interpreted and unfused graphs.
//
// Compiled with the baseline flags: it only writes bytes, run when the active ISA is AVX2.
#include <xbyak/xbyak.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "podlet/prims/fused_jit_detail.h"

namespace podlet::fused_jit::detail {
namespace {
using Xbyak::Reg64;
using Xbyak::Xmm;
using Xbyak::Ymm;

constexpr int kStage = 5;     // ymm5-7: staged operands, ymm7 a result bound for memory
constexpr int kFirstVal = 8;  // ymm8-15: values
constexpr int kNumRegs = 16;
constexpr int kLanes = 8;
constexpr int kPrefetchBytes = 4096;
// Where a value lives: a register index (>= 0), a stack slot (kSlot0 - slot), or in ymm7 for
// a value that is only stored right after it is made.
constexpr int kTemp = -1, kSlot0 = -2;

class GenY : public Xbyak::CodeGenerator {
 public:
  GenY(const Spec& s, size_t bytes, int max_ways, bool canonical)
      : Xbyak::CodeGenerator(bytes, Xbyak::DontSetProtectRWE), s_(s), max_ways_(max_ways), canonical_(canonical) {}

  void generate() {
    plan();
    choose_ways();
    if (std::getenv("PODLET_FUSED_JIT_DEBUG"))
      std::fprintf(stderr, "podlet: fused program of %d instructions, %zu loads (ymm): %d ways, %d stack slots, "
                   "%d of %d roundings unchecked, %d values made canonical\n", S_, s_.load_kind.size(), W_, nslots_,
                   fast_rounds(), rounding_count(), int(std::count(canonize_.begin(), canonize_.end(), true)));
    if (const char* e = std::getenv("PODLET_FUSED_JIT_DEBUG"); e && e[0] == '2')  // and the instructions
      for (int k = 0; k < S_; ++k) {
        const Instr& ins = s_.code[k];
        std::fprintf(stderr, "  %2d %-8s d=%d rd=%d a=%lld b=%lld c=%lld imm=%lld home %d%s%s%s\n", k, op_name(ins.op),
                     int(ins.d), int(ins.rd), (long long)ins.a, (long long)ins.b, (long long)ins.c, (long long)ins.imm,
                     home_[size_t(root_[k]) * W_], canon_[k] ? ", canonical" : "", canonize_[k] ? " (made so)" : "",
                     fast_round_[k] ? ", rounded unchecked" : "");
      }
    const int nl = int(s_.load_kind.size());
    out_arg_ = kArgFirst + nl;
    push(rbp);
    mov(rbp, rsp);
    for (size_t q = 0; q < periods_.size(); ++q) push(row(int(q)));
    and_(rsp, -32);
    if (nslots_) sub(rsp, 32 * nslots_);
    // i (rcx) and the end (rsi; the caller passes whole vectors only).
    mov(rcx, ptr[rdi + 8 * kArgBegin]);
    mov(rsi, ptr[rdi + 8 * kArgEnd]);
    for (size_t q = 0; q < periods_.size(); ++q) {
      mov(rax, rcx);
      xor_(edx, edx);
      mov(r11, periods_[q]);
      div(r11);
      mov(counter(int(q)), rdx);  // i % p
      mov(row(int(q)), rax);      // i / p
    }
    for (int k = 0; k < S_; ++k) {  // scalars: broadcast once, into a register or a slot
      const Instr& ins = s_.code[k];
      if (!scalar_[k] || root_[k] != k || !live(k)) continue;
      mov(rax, ptr[rdi + 8 * (kArgFirst + ins.a)]);
      const int h = home_[k * W_];
      broadcast(h >= 0 ? Ymm(h) : ymm0, ins.d, rax);
      if (canonize_[k]) canonicalize(h >= 0 ? Ymm(h) : ymm0);
      if (h < 0) vmovaps(slot_addr(h), ymm0);
    }
    Xbyak::Label iter, loop, done;
    if (W_ > 1) {
      L(iter);
      lea(rax, ptr[rcx + kLanes * W_]);
      cmp(rax, rsi);
      ja(loop, T_NEAR);
      body(W_);
      advance(kLanes * W_);
      jmp(iter, T_NEAR);
    }
    L(loop);
    cmp(rcx, rsi);
    jae(done, T_NEAR);
    body(1);
    advance(kLanes);
    jmp(loop, T_NEAR);
    L(done);
    if (any_stream_) sfence();
    lea(rsp, ptr[rbp - 8 * int(periods_.size())]);
    for (size_t q = periods_.size(); q-- > 0;) pop(row(int(q)));
    pop(rbp);
    vzeroupper();
    ret();
    align(32);
    L(consts_);
    for (uint32_t v : pool_)
      for (int l = 0; l < kLanes; ++l) dd(v);
  }
  int ways() const { return W_; }
  int nslots() const { return nslots_; }
  int fast_rounds() const {
    int n = 0;
    for (int k = 0; k < S_; ++k) n += root_[k] == k && live(k) && fast_round_[k];
    return n;
  }
  std::vector<int64_t> periods() const { return periods_; }

 private:
  const Spec& s_;
  const int max_ways_;
  const bool canonical_;  // plan_canonical may skip NaN checks
  int S_ = 0, W_ = 1, lane_ = 0, nslots_ = 0, out_arg_ = 0;
  std::vector<int> root_, last_use_;
  std::vector<std::vector<int>> outs_of_;
  std::vector<bool> scalar_;
  std::vector<int64_t> periods_;
  std::vector<int> period_of_load_;
  // home_[k * W + w]: where value k of vector w lives (a scalar's for every w), for roots.
  std::vector<int> home_;
  bool any_stream_ = false;
  // Per instruction (plan_canonical): its value's NaNs are canonical; made so where it is
  // loaded, gathered or broadcast; its rounding skips the NaN check.
  std::vector<bool> canon_, canonize_, fast_round_;
  Xbyak::Label consts_;
  std::vector<uint32_t> pool_;

  bool live(int k) const { return last_use_[k] >= 0 || !outs_of_[k].empty(); }
  Reg64 counter(int q) const { return q == 0 ? r8 : q == 1 ? r9 : r10; }
  Reg64 row(int q) const { return q == 0 ? r12 : q == 1 ? r13 : r14; }
  Xbyak::Address slot_addr(int h) { return ptr[rsp + 32 * (kSlot0 - h)]; }
  Xbyak::Address cvec(uint32_t v) {
    size_t i = 0;
    while (i < pool_.size() && pool_[i] != v) ++i;
    if (i == pool_.size()) pool_.push_back(v);
    return ptr[rip + consts_ + int(32 * i)];
  }

  // Checks what the generator supports, resolves aliases and last uses.
  void plan() {
    S_ = int(s_.code.size());
    root_.assign(S_, 0);
    last_use_.assign(S_, -1);
    outs_of_.assign(S_, {});
    scalar_.assign(S_, false);
    period_of_load_.assign(s_.load_kind.size(), -1);
    for (size_t o = 0; o < s_.outs.size(); ++o) {
      const auto& out = s_.outs[o];
      if (out.slot < 0 || out.slot >= S_) throw Refuse{"output slot out of range"};
      const DType d = s_.code[out.slot].rd;
      if (out.mode == OutMode::kLeaves) throw Refuse{"leaf sums (ymm)"};
      if (out.mode == OutMode::kRows ? !is_float_reg(d) : !(is_float_reg(d) || d == DType::boolean))
        throw Refuse{"output dtype"};
      outs_of_[out.slot].push_back(int(o));
      any_stream_ |= out.mode == OutMode::kStream;
    }
    for (int k = 0; k < S_; ++k) {
      const Instr& ins = s_.code[k];
      check_instr(s_, ins);
      if (ins.op != kLoad) {
        const int64_t ops[3] = {ins.a, ins.b, ins.c};
        for (int q = 0; q < nops_of(ins); ++q)
          if (ops[q] < 0 || ops[q] >= k) throw Refuse{"operand out of order"};
      }
      root_[k] = identity_convert(ins) ? root_[ins.a] : k;
      if (ins.op == kLoad) {
        scalar_[k] = s_.load_kind[ins.a] == LoadKind::kScalar;
        if (s_.load_kind[ins.a] == LoadKind::kPeriodic || s_.load_kind[ins.a] == LoadKind::kRowConst) {
          const int64_t p = s_.period[ins.a];
          if (p % kLanes) throw Refuse{"period not a multiple of 8 (ymm)"};
          if (p > (int64_t(1) << 28)) throw Refuse{"period above 2^28 (32-bit displacements)"};
          int q = 0;
          while (q < int(periods_.size()) && periods_[q] != p) ++q;
          if (q == int(periods_.size())) {
            if (q == kMaxPeriods) throw Refuse{"more than 3 periods"};
            periods_.push_back(p);
          }
          period_of_load_[ins.a] = q;
        }
        continue;
      }
      scalar_[k] = scalar_[root_[k]];
      const int64_t ops[3] = {ins.a, ins.b, ins.c};
      for (int q = 0; q < nops_of(ins); ++q) last_use_[root_[ops[q]]] = k;
    }
    for (int k = 0; k < S_; ++k)
      if (!outs_of_[k].empty()) last_use_[root_[k]] = std::max(last_use_[root_[k]], k);
    for (int k = 0; k < S_; ++k)  // an alias's outputs keep its root live and emitted
      if (root_[k] != k && !outs_of_[k].empty() && last_use_[root_[k]] < 0) last_use_[root_[k]] = k;
    plan_canonical();
  }

  // ---- canonical NaNs: roundings without the NaN check ----
  // round_bf16 puts every NaN lane back as sign | 0x7fc00000 (fastmath.h) because the
  // integer rounding alone would keep a NaN's payload, carry a signalling NaN into
  // infinity, or wrap 0x7fff8000.. around to zero. A lane that is a number, or already that
  // canonical NaN, comes out of the integer rounding alone with the same bits: the check
  // is 4 of the rounding's 9 operations, and a bf16 GELU VJP is mostly roundings.
  // Which values are canonical (every NaN lane sign | 0x7fc00000) follows from x86's NaN
  // rule: arithmetic returns its default NaN 0xffc00000 or its first NaN operand quieted
  // (payload kept), and max / min / neg / abs / select pass an operand's bits on. So:
  // rounded results are canonical; an unrounded result is when its float operands are;
  // loads, scalars and table values may hold any NaN. Those are made canonical where
  // they are made (canonize) when every use of them gives the same bits either way:
  // roundings and compares, which keep a NaN's sign and NaN-ness and drop its payload (a
  // rounding drops it too); not outputs, table indices, unrounded arithmetic or selects,
  // which pass the payload on.
  static bool canon_safe_use(const Instr& u, int q) {
    if (u.op == kTable || u.op == kNot || u.op == kAnd || u.op == kOr || u.op == kXor) return false;
    if (u.op >= kEq && u.op <= kGe) return is_float_reg(u.d);
    if (u.op == kIsFinite) return true;
    if (u.op == kConvert) return rounds(u) || u.rd == DType::boolean;
    return rounds(u) && (u.op != kSelect || q > 0);  // a select's predicate is a bool
  }
  // Logic, compares and is_finite: a bool result, nothing to round or keep canonical.
  static bool bool_result(const Instr& ins) {
    return ins.op == kNot || ins.op == kAnd || ins.op == kOr || ins.op == kXor || ins.op == kIsFinite ||
           (ins.op >= kEq && ins.op <= kGe);
  }
  // Whether an instruction rounds to bf16 (emit's rb, or a convert / select that rounds).
  static bool rounds(const Instr& ins) {
    if (ins.op == kConvert || ins.op == kSelect) return ins.d == DType::f32 && ins.rd == DType::bf16;
    if (ins.op == kTable || ins.op == kLoad || bool_result(ins)) return false;
    return ins.rd == DType::bf16;
  }
  // The roundings the code makes (live roots).
  int rounding_count() const {
    int n = 0;
    for (int k = 0; k < S_; ++k) n += root_[k] == k && live(k) && rounds(s_.code[k]);
    return n;
  }
  void plan_canonical() {
    canon_.assign(S_, false);
    canonize_.assign(S_, false);
    fast_round_.assign(S_, false);
    if (!canonical_) return;
    std::vector<int> safe_uses(S_, 0);
    std::vector<bool> unsafe(S_, false);
    for (int k = 0; k < S_; ++k) {
      if (!outs_of_[k].empty()) unsafe[root_[k]] = true;
      const Instr& ins = s_.code[k];
      if (ins.op == kLoad || root_[k] != k) continue;
      const int64_t ops[3] = {ins.a, ins.b, ins.c};
      bool counted[3] = {false, false, false};
      for (int q = 0; q < nops_of(ins); ++q) {
        const int r = root_[ops[q]];
        if (!canon_safe_use(ins, q)) { unsafe[r] = true; continue; }
        bool seen = false;  // one use per instruction (x * x reads x once)
        for (int p = 0; p < q; ++p) seen |= counted[p] && root_[ops[p]] == r;
        if (!seen) ++safe_uses[r];
        counted[q] = true;
      }
    }
    for (int k = 0; k < S_; ++k) {
      const Instr& ins = s_.code[k];
      if (root_[k] != k) { canon_[k] = canon_[root_[k]]; continue; }
      const bool source = ins.op == kLoad || ins.op == kTable;
      if (source) {
        const DType d = ins.op == kLoad ? ins.d : ins.rd;
        // A scalar is made canonical once per call; a vector per iteration, worth it when
        // two roundings or more read it.
        canonize_[k] = is_float_reg(d) && live(k) && !unsafe[k] && safe_uses[k] >= (scalar_[k] ? 1 : 2);
        canon_[k] = canonize_[k];
        continue;
      }
      const int64_t ops[3] = {ins.a, ins.b, ins.c};
      bool all = true;
      for (int q = ins.op == kSelect ? 1 : 0; q < nops_of(ins); ++q) all = all && canon_[root_[ops[q]]];
      if (rounds(ins)) {
        fast_round_[k] = all;
        canon_[k] = true;
      } else if (ins.op == kConvert) {
        canon_[k] = ins.d == DType::boolean;  // bool -> float: 0 or 1
      } else if (!bool_result(ins)) {
        canon_[k] = all && is_float_reg(ins.rd);  // unrounded arithmetic or select: its operands' NaNs
      }
    }
  }
  // v's NaN lanes -> sign | 0x7fc00000 (the quiet bit set, the payload cleared). Scratch
  // ymm1, ymm3; v is none of them.
  void canonicalize(const Ymm& v) {
    vcmpps(ymm3, v, v, 3);  // unordered: NaN
    vpor(ymm1, v, cvec(0x00400000u));
    vpand(ymm1, ymm1, cvec(0xffc00000u));
    vblendvps(v, v, ymm1, ymm3);
  }

  // Registers for W vectors per iteration: a linear scan over positions k W + w (value k
  // of vector w is made at its position and read last at last_use_[k] W + w; a scalar
  // lives throughout). An operand read for the last time at a position frees its register
  // for that position's result (every instruction below reads its operands before it
  // writes its result). With no register free, the interval that ends last goes to a
  // stack slot for its whole life. Returns the number of vectors' values sent to memory.
  int allocate(int W) {
    W_ = W;
    home_.assign(size_t(S_) * W, kTemp);
    struct Iv { int start, end, key; };
    std::vector<Iv> ivs;
    const int kForever = S_ * W + 1;
    for (int k = 0; k < S_; ++k) {
      if (root_[k] != k || !live(k)) continue;
      if (scalar_[k]) { ivs.push_back({-1, kForever, k * W}); continue; }
      for (int w = 0; w < W; ++w) {
        const int start = k * W + w, end = std::max(last_use_[k], k) * W + w;
        if (end > start) ivs.push_back({start, end, k * W + w});
        else home_[k * W + w] = kTemp;
      }
    }
    std::stable_sort(ivs.begin(), ivs.end(), [](const Iv& x, const Iv& y) { return x.start < y.start; });
    std::vector<std::pair<int, int>> active;  // (end, key) holding a register
    std::vector<int> free_regs;
    for (int r = kNumRegs - 1; r >= kFirstVal; --r) free_regs.push_back(r);
    std::vector<int> slot_end;  // per stack slot: the end of its current interval
    int spilled = 0;
    auto to_slot = [&](const Iv& iv) {
      size_t s = 0;
      while (s < slot_end.size() && slot_end[s] > iv.start) ++s;
      if (s == slot_end.size()) slot_end.push_back(0);
      slot_end[s] = iv.end;
      home_[iv.key] = kSlot0 - int(s);
      ++spilled;
    };
    std::vector<Iv> by_key(home_.size(), Iv{0, 0, 0});
    for (const Iv& iv : ivs) by_key[iv.key] = iv;
    for (const Iv& iv : ivs) {
      for (size_t a = 0; a < active.size();) {  // expire: read last at or before this position
        if (active[a].first <= iv.start) {
          free_regs.push_back(home_[active[a].second]);
          active.erase(active.begin() + long(a));
        } else {
          ++a;
        }
      }
      if (!free_regs.empty()) {
        home_[iv.key] = free_regs.back();
        free_regs.pop_back();
        active.push_back({iv.end, iv.key});
        continue;
      }
      size_t far = 0;
      for (size_t a = 1; a < active.size(); ++a)
        if (active[a].first > active[far].first) far = a;
      if (active[far].first > iv.end) {  // the active one ends later: it goes to memory
        const int key = active[far].second;
        home_[iv.key] = home_[key];
        active[far] = {iv.end, iv.key};
        to_slot(by_key[key]);
      } else {
        to_slot(iv);
      }
    }
    nslots_ = int(slot_end.size());
    return spilled;
  }

  // W vectors per iteration (8, 4, 2 or 1 up to max_ways_, every period a multiple of 8 W):
  // W dependency chains in flight. The largest W whose values mostly stay in registers (a
  // W that sends more than a quarter of its W S values to memory is not worth the loads
  // and stores), except in programs with two bf16 roundings or more: each rounding adds 4
  // to 6 integer operations to a chain, the loop waits on the chains, and the largest W
  // wins whatever it spills (AMD Zen 3, 1 thread, [6304, 768] bf16: the tanh-GELU VJP's 30
  // instructions 19.7 ms at 2 ways, 17.6 at 4, 16.5 at 8 with 53 stack slots; the exact
  // one's 12.1, 11.2, 10.4).
  void choose_ways() {
    const int rounds = rounding_count();
    int best = 1;
    for (int w = 2; w <= max_ways_ && w <= 8; w *= 2) {
      bool ok = true;
      for (int64_t p : periods_) ok &= p % (kLanes * w) == 0;
      if (!ok) break;
      const int spilled = allocate(w);
      int values = 0;
      for (int k = 0; k < S_; ++k) values += root_[k] == k && live(k) && !scalar_[k];
      if (rounds >= 2 || spilled * 4 <= values * w) best = w;
    }
    allocate(best);
  }

  // i += step, and i % p and i / p of the next vector (every period a multiple of step).
  void advance(int step) {
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

  // Value k of the vector being emitted: its register, or operand q's staging register
  // loaded from its slot.
  Ymm operand(int64_t k, int q) {
    const int r = root_[k];
    const int h = home_[size_t(r) * W_ + (scalar_[r] ? 0 : lane_)];
    if (h >= 0) return Ymm(h);
    const Ymm y(kStage + q);
    vmovaps(y, slot_addr(h));
    return y;
  }
  // Where instruction k writes its result (ymm7 when it lives in memory or is only stored).
  Ymm result(int k) {
    const int h = home_[size_t(k) * W_ + lane_];
    return h >= 0 ? Ymm(h) : ymm7;
  }
  void spill_result(int k) {
    const int h = home_[size_t(k) * W_ + lane_];
    if (h <= kSlot0) vmovaps(slot_addr(h), ymm7);
  }
  // The register holding value k right after it is made (for its stores).
  Ymm held(int k) {
    const int r = root_[k];
    const int h = home_[size_t(r) * W_ + (scalar_[r] ? 0 : lane_)];
    if (h >= 0) return Ymm(h);
    if (h != kTemp) vmovaps(ymm7, slot_addr(h));
    return ymm7;
  }

  // dst = the element of dtype d at src in every lane.
  void broadcast(const Ymm& dst, DType d, const Xbyak::RegExp& src) {
    if (d == DType::f32) {
      vbroadcastss(dst, ptr[src]);
    } else if (d == DType::bf16) {  // word w in both halves of every dword, then the low one shifted out
      vpbroadcastw(dst, word[src]);
      vpslld(dst, dst, 16);
    } else {  // a 0/1 byte in all four bytes: keep the low one
      vpbroadcastb(dst, byte[src]);
      vpand(dst, dst, cvec(kOneU32));
    }
  }

  void load(int k) {
    const Instr& ins = s_.code[k];
    const LoadKind lk = s_.load_kind[ins.a];
    const Ymm z = result(k);
    const int sc = storage_scale(ins.d);
    const int disp = lane_ * kLanes * sc;
    mov(rax, ptr[rdi + 8 * (kArgFirst + ins.a)]);
    const int q = period_of_load_[ins.a];
    if (lk == LoadKind::kRowConst) {
      broadcast(z, ins.d, rax + row(q) * sc);
    } else {
      const Reg64 idx = lk == LoadKind::kPeriodic ? counter(q) : rcx;
      if (lk == LoadKind::kFull && disp % 64 == 0) prefetcht1(ptr[rax + idx * sc + disp + kPrefetchBytes]);
      const Xbyak::Address at = ptr[rax + idx * sc + disp];
      if (ins.d == DType::f32) vmovups(z, at);
      else if (ins.d == DType::bf16) { vpmovzxwd(z, at); vpslld(z, z, 16); }
      else vpmovzxbd(z, at);
      if (canonize_[k]) canonicalize(z);
    }
    spill_result(k);
  }

  void store(int k, int o) {
    const auto& out = s_.outs[o];
    const DType d = s_.code[out.slot].rd;
    const Ymm v = held(k);
    mov(rax, ptr[rdi + 8 * (out_arg_ + o)]);
    if (out.mode == OutMode::kRows) {  // f32 rows, whatever the slot's dtype
      vmovups(ptr[rax + rcx * 4 + lane_ * 32], v);
      return;
    }
    const bool nt = out.mode == OutMode::kStream;
    const int sc = storage_scale(d);
    const Xbyak::Address dst = ptr[rax + rcx * sc + lane_ * kLanes * sc];
    if (d == DType::f32) {
      if (nt) vmovntps(dst, v); else vmovups(dst, v);
    } else if (d == DType::bf16) {  // the register holds an exact bf16: its top half
      vpsrld(ymm0, v, 16);
      vextracti128(xmm1, ymm0, 1);
      vpackusdw(xmm0, xmm0, xmm1);
      if (nt) vmovntdq(dst, xmm0); else vmovdqu(dst, xmm0);
    } else {  // 0/1 words, then bytes (a bool stream is stored plainly: same bytes)
      vextracti128(xmm1, v, 1);
      vpackusdw(xmm0, Xmm(v.getIdx()), xmm1);
      vpackuswb(xmm0, xmm0, xmm0);
      vmovq(dst, xmm0);
    }
  }

  // dst = round_bf16(src) (fastmath.h): round to nearest even, NaN -> quiet NaN with the
  // sign kept. Scratch ymm0, ymm1, ymm3; src must be none of them.
  // fast (fast_round_): src's NaNs are canonical, the integer rounding alone.
  void round_bf16(const Ymm& dst, const Ymm& src, bool fast = false) {
    vpsrld(ymm0, src, 16);
    vpaddd(ymm1, src, cvec(kRound));  // beside the shift: a shorter chain
    vpand(ymm0, ymm0, cvec(kOneU32));
    vpaddd(ymm0, ymm0, ymm1);
    if (fast) {
      vpand(dst, ymm0, cvec(kHighHalf));
      return;
    }
    vpand(ymm0, ymm0, cvec(kHighHalf));
    vcmpps(ymm3, src, src, 3);  // unordered: NaN
    vpand(ymm1, src, cvec(kSignBit));
    vpor(ymm1, ymm1, cvec(kQuietNaN));
    vblendvps(dst, ymm0, ymm1, ymm3);
  }
  // dst = mask & 1 (u32 0/1 lanes from an all-ones / zero mask).
  void bool_of(const Ymm& dst, const Ymm& mask) { vpand(dst, mask, cvec(kOneU32)); }
  // dst = do_max / do_min (fused_ops.h): x86's max/min returns the second operand when
  // either is NaN, so only x's NaN needs putting back. Scratch ymm2, ymm3.
  void max_min(bool is_max, const Ymm& dst, const Ymm& x, const Ymm& y) {
    if (is_max) vmaxps(ymm2, x, y); else vminps(ymm2, x, y);
    vcmpps(ymm3, x, x, 3);
    vblendvps(dst, ymm2, x, ymm3);
  }

  void instr(int k) {
    const Instr& ins = s_.code[k];
    const Ymm d = result(k);
    const Ymm a = operand(ins.a, 0);
    if (ins.op == kTable) {  // d = table[a's bf16 bits]: 32 bits gathered at 2 x index, the low word kept
      mov(rax, ptr[rdi + 8 * (kArgFirst + ins.b)]);  // (a pair table: at 4 x index, either word)
      vpsrld(ymm1, a, 16);
      vpcmpeqd(ymm3, ymm3, ymm3);
      vpxor(ymm0, ymm0, ymm0);
      vpgatherdd(ymm0, ins.imm ? ptr[rax + ymm1 * 4] : ptr[rax + ymm1 * 2], ymm3);
      if (ins.imm == 2) vpand(d, ymm0, cvec(0xffff0000u));
      else vpslld(d, ymm0, 16);
      if (canonize_[k]) canonicalize(d);
      spill_result(k);
      return;
    }
    const Ymm b = ins.op >= kAdd ? operand(ins.b, 1) : ymm0;
    const Ymm c = ins.op == kSelect || ins.op == kClamp ? operand(ins.c, 2) : ymm0;
    emit(ins, d, a, b, c, fast_round_[k]);
    spill_result(k);
  }

  void emit(const Instr& ins, const Ymm& d, const Ymm& a, const Ymm& b, const Ymm& c, bool fast) {
    const bool rb = ins.rd == DType::bf16;
    switch (ins.op) {
      case kConvert:
        if (ins.d == DType::boolean) {            // bool -> f32 / bf16: 0 or 1, exact in both
          vcvtdq2ps(d, a);
        } else if (ins.rd == DType::boolean) {    // float -> bool: x != 0 (NaN: true)
          vxorps(ymm1, ymm1, ymm1);
          vcmpps(ymm1, a, ymm1, 4);  // NEQ_UQ
          bool_of(d, ymm1);
        } else {                                  // f32 -> bf16
          round_bf16(d, a, fast);
        }
        return;
      case kSelect:  // a is 0/1: its low bit to the sign picks b
        vpslld(ymm1, a, 31);
        vblendvps(ymm2, c, b, ymm1);
        if (ins.d == DType::f32 && ins.rd == DType::bf16) round_bf16(d, ymm2, fast); else vmovaps(d, ymm2);
        return;
      case kNot: vpxor(d, a, cvec(kOneU32)); return;
      case kAnd: vpand(d, a, b); return;
      case kOr: vpor(d, a, b); return;
      case kXor: vpxor(d, a, b); return;
      case kIsFinite:
        vsubps(ymm2, a, a);
        vcmpps(ymm1, ymm2, ymm2, 0);  // EQ_OQ
        bool_of(d, ymm1);
        return;
      default: break;
    }
    if (ins.op >= kEq && ins.op <= kGe) {
      if (ins.d == DType::boolean) {  // u32 0/1: signed compares serve; ne, le, ge negated
        const bool swap = ins.op == kLt || ins.op == kGe, neg = ins.op == kNe || ins.op == kLe || ins.op == kGe;
        if (ins.op == kEq || ins.op == kNe) vpcmpeqd(ymm1, a, b);
        else if (swap) vpcmpgtd(ymm1, b, a);
        else vpcmpgtd(ymm1, a, b);
        if (neg) vpandn(d, ymm1, cvec(kOneU32)); else bool_of(d, ymm1);
      } else {
        static const uint8_t fpred[] = {0x00, 0x04, 0x11, 0x12, 0x1e, 0x1d};  // EQ_OQ NEQ_UQ LT LE GT GE (quiet)
        vcmpps(ymm1, a, b, fpred[ins.op - kEq]);
        bool_of(d, ymm1);
      }
      return;
    }
    // Float arithmetic, the first operand first (x86's NaN rule is the interpreter's).
    const Ymm r = rb ? ymm2 : d;
    switch (ins.op) {
      case kNeg: vxorps(r, a, cvec(kSignBit)); break;
      case kAbs: vandps(r, a, cvec(kAbsMask)); break;
      case kSqrt: vsqrtps(r, a); break;
      case kRsqrt:
        vsqrtps(ymm1, a);
        vmovaps(ymm2, cvec(f32(1.0f)));
        vdivps(r, ymm2, ymm1);
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
        max_min(true, ymm1, b, a);
        max_min(false, r, ymm1, c);
        break;
      default: throw Refuse{"this op"};
    }
    if (rb) round_bf16(d, r, fast);
  }

  // dst = fm::exp(x): its operations in its order, the FMAs as vfmadd, y = p 2^n1 2^n2 with
  // n1 = n >> 1, n2 = n - n1 as two products. Scratch ymm0, 1, 3, 4; x (not one of them) is
  // read last, so it may be dst.
  void exp_(const Ymm& dst, const Ymm& x) {
    vmaxps(ymm3, x, cvec(f32(kExpLo)));  // xc (a NaN lane becomes -104 here and x again below)
    vminps(ymm3, ymm3, cvec(f32(kExpHi)));
    vmovaps(ymm4, cvec(f32(kExpShift)));  // fn = fma(xc, 1/ln2, 1.5 2^23) - 1.5 2^23
    vfmadd231ps(ymm4, ymm3, cvec(f32(kLog2e)));
    vsubps(ymm4, ymm4, cvec(f32(kExpShift)));
    vfmadd231ps(ymm3, ymm4, cvec(f32(kLn2Hi)));  // r = fma(fn, -ln2_hi, xc)
    vfmadd231ps(ymm3, ymm4, cvec(f32(kLn2Lo)));  // r = fma(fn, -ln2_lo, r)
    vmulps(ymm1, ymm3, ymm3);                    // z
    vmovaps(ymm0, cvec(f32(kExpP0)));            // p
    vfmadd231ps(ymm0, ymm3, cvec(f32(kExpP1)));
    for (float cf : kExpPoly) vfmadd213ps(ymm0, ymm3, cvec(f32(cf)));  // p = fma(p, r, c)
    vfmadd213ps(ymm0, ymm1, ymm3);  // fma(p, z, r) + 1
    vaddps(ymm0, ymm0, cvec(f32(1.0f)));
    vcvttps2dq(ymm4, ymm4);  // n (fn is an integer in [-150, 128])
    vpsrad(ymm1, ymm4, 1);   // n1
    vpsubd(ymm4, ymm4, ymm1);  // n2
    vpslld(ymm1, ymm1, 23);  // 2^n1, 2^n2: (n + 127) << 23
    vpaddd(ymm1, ymm1, cvec(127u << 23));
    vpslld(ymm4, ymm4, 23);
    vpaddd(ymm4, ymm4, cvec(127u << 23));
    vmulps(ymm0, ymm0, ymm1);
    vmulps(ymm0, ymm0, ymm4);
    vcmpps(ymm3, x, x, 3);  // x is NaN: x
    vblendvps(dst, ymm0, x, ymm3);
  }
  // p = (..(k[0] x2 + k[1]) x2 + ..) + k[n-1] with FMAs, x2 in ymm2.
  void fma_horner(const Ymm& p, const float* k, int n) {
    vmovaps(p, cvec(f32(k[0])));
    for (int i = 1; i < n; ++i) vfmadd213ps(p, ymm2, cvec(f32(k[i])));
  }
  // ymm3 = t P(t^2) / Q(t^2) for t = x clamped to +-clamp (a NaN lane becomes -clamp here;
  // the callers put x back). Scratch ymm1-4.
  void odd_rational(const Ymm& x, const OddRational& f) {
    vmaxps(ymm1, x, cvec(f32(-f.clamp)));
    vminps(ymm1, ymm1, cvec(f32(f.clamp)));
    vmulps(ymm2, ymm1, ymm1);
    fma_horner(ymm3, f.p, f.np);
    vmulps(ymm3, ymm1, ymm3);
    fma_horner(ymm4, f.q, f.nq);
    vdivps(ymm3, ymm3, ymm4);
  }
  // dst = fm::tanh(x): x itself below |x| = 0.0004 or when NaN. Scratch ymm0-4.
  void tanh_(const Ymm& dst, const Ymm& x) {
    odd_rational(x, tanh_rational());
    vandps(ymm0, x, cvec(kAbsMask));
    vcmpps(ymm0, ymm0, cvec(f32(kTanhSmall)), 0x19);  // not |x| >= 0.0004 (true for NaN)
    vblendvps(dst, ymm3, x, ymm0);
  }
  // dst = fm::erf(x); a NaN as it came. Scratch ymm0-4.
  void erf_(const Ymm& dst, const Ymm& x) {
    odd_rational(x, erf_rational());
    vcmpps(ymm0, x, x, 3);
    vblendvps(dst, ymm3, x, ymm0);
  }
  // dst = fm::logistic(x): e = e^-|x|, r = 1 / (1 + e), x < 0 ? e * r : r. Scratch ymm0-4.
  void logistic_(const Ymm& dst, const Ymm& x) {
    vandps(ymm2, x, cvec(kAbsMask));
    vxorps(ymm2, ymm2, cvec(kSignBit));  // -|x|
    exp_(ymm2, ymm2);                    // e
    vmovaps(ymm0, cvec(f32(1.0f)));
    vaddps(ymm0, ymm0, ymm2);            // 1 + e
    vmovaps(ymm1, cvec(f32(1.0f)));
    vdivps(ymm1, ymm1, ymm0);            // r
    vmulps(ymm0, ymm2, ymm1);            // e * r
    vxorps(ymm4, ymm4, ymm4);
    vcmpps(ymm3, x, ymm4, 0x11);         // x < 0
    vblendvps(dst, ymm1, ymm0, ymm3);
  }
  // The interpreter's integer_pow: x^2 and x^3 as single products, otherwise repeated
  // squaring from acc = 1 (same products in the same order). Scratch ymm0, ymm1.
  void int_pow(const Ymm& r, const Ymm& x, int64_t imm) {
    if (imm == 2) { vmulps(r, x, x); return; }
    if (imm == 3) { vmulps(ymm1, x, x); vmulps(r, x, ymm1); return; }
    const uint64_t e = uint64_t(imm < 0 ? -imm : imm);
    vmovaps(ymm1, cvec(f32(1.0f)));  // acc
    vmovaps(ymm0, x);                // b
    for (uint64_t k = e; k > 0;) {
      if (k & 1) vmulps(ymm1, ymm1, ymm0);
      k >>= 1;
      if (k) vmulps(ymm0, ymm0, ymm0);
    }
    if (imm < 0) { vmovaps(ymm0, cvec(f32(1.0f))); vdivps(r, ymm0, ymm1); }
    else vmovaps(r, ymm1);
  }

  // The program for vectors i, i + 8, ... (`lanes` of them): each instruction for one
  // vector after the other, each result's stores right after it.
  void body(int lanes) {
    for (int k = 0; k < S_; ++k) {
      const Instr& ins = s_.code[k];
      const bool emit_k = root_[k] == k && live(k) && !(ins.op == kLoad && scalar_[k]);
      for (lane_ = 0; lane_ < lanes; ++lane_) {
        if (emit_k) {
          if (ins.op == kLoad) load(k);
          else instr(k);
        }
        for (int o : outs_of_[k]) store(k, o);
      }
    }
    lane_ = 0;
  }
};
}  // namespace

void generate_ymm(const Spec& spec, int max_ways, bool canonical, Kernel& kern) {
  const size_t bytes = (16384 + spec.code.size() * (2 + max_ways) * 640 + 4095) / 4096 * 4096;
  auto gen = std::make_unique<GenY>(spec, bytes, max_ways, canonical);
  gen->generate();
  gen->setProtectModeRE();
  kern.fn = gen->getCode<void (*)(const uint64_t*)>();
  kern.periods = gen->periods();
  kern.ways = gen->ways();
  kern.lanes = kLanes;
  kern.stack_slots = gen->nslots();
  kern.canonical_roundings = gen->fast_rounds() > 0;
  // The bounce blocks of a partial last vector (fused_jit::run): bytes per element.
  kern.load_kind = spec.load_kind;
  kern.load_scale.assign(spec.load_kind.size(), 0);
  for (const Instr& ins : spec.code)
    if (ins.op == kLoad) kern.load_scale[size_t(ins.a)] = storage_scale(ins.d);  // plan() checked ins.a
  for (const auto& o : spec.outs)
    kern.out_scale.push_back(o.mode == OutMode::kRows ? 4 : storage_scale(spec.code[size_t(o.slot)].rd));
  kern.gen = std::move(gen);
}

}  // namespace podlet::fused_jit::detail
