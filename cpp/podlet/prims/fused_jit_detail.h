// What the two code generators of fused_jit.h share: the AVX-512 one (fused_jit.cc) and
// the AVX2 one (fused_jit_ymm.cc). Which instructions either may emit (check_instr: the
// interpreter's bits must be reachable), the constant bit patterns they read, and the
// compiled program both hand to fused_jit::run.
#pragma once
#include <xbyak/xbyak.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "podlet/prims/fused_jit.h"

namespace podlet::fused_jit::detail {
using namespace fused;

// Why a program is not compiled (a generator throws it; compile() returns null and, with
// PODLET_FUSED_JIT_DEBUG set, says why on stderr).
struct Refuse { const char* why; };

// Bit patterns the code reads from its constant pool.
constexpr uint32_t kOneU32 = 1u, kRound = 0x7fffu, kHighHalf = 0xffff0000u, kSignBit = 0x80000000u,
                   kAbsMask = 0x7fffffffu, kQuietNaN = 0x7fc00000u;
inline uint32_t f32(float x) { return __builtin_bit_cast(uint32_t, x); }

// args[] of a generated function (rdi): begin, end, then the base of every load, then
// every output (moved back so that element i is at base + i * its size).
constexpr int kArgBegin = 0, kArgEnd = 1, kArgFirst = 2;
constexpr int kMaxPeriods = 3;

inline bool is_float_reg(DType d) { return d == DType::f32 || d == DType::bf16; }
inline int storage_scale(DType d) { return d == DType::f32 ? 4 : d == DType::bf16 ? 2 : 1; }

inline const char* op_name(int64_t op) {
  static const char* const names[] = {"load", "neg", "abs", "sign", "exp", "log", "log1p", "expm1", "tanh",
                                      "logistic", "sqrt", "rsqrt", "erf", "floor", "ceil", "integer_pow",
                                      "is_finite", "not", "convert", "add", "sub", "mul", "div", "max", "min",
                                      "pow", "and", "or", "xor", "eq", "ne", "lt", "le", "gt", "ge", "select",
                                      "clamp", "table"};
  return op >= 0 && op < int64_t(sizeof names / sizeof *names) ? names[op] : "an unknown op";
}

// Refuses an instruction neither generator can emit with the interpreter's bits.
inline void check_instr(const Spec& s, const Instr& ins) {
  const int64_t op = ins.op;
  if (op == kLoad) {
    if (ins.a < 0 || ins.a >= int64_t(s.load_kind.size())) throw Refuse{"load index out of range"};
    const LoadKind lk = s.load_kind[ins.a];
    if (lk == LoadKind::kOther || lk == LoadKind::kTable || !(is_float_reg(ins.d) || ins.d == DType::boolean))
      throw Refuse{"load layout or dtype"};
    return;
  }
  if (op == kTable) {
    if (ins.b < 0 || ins.b >= int64_t(s.load_kind.size()) || s.load_kind[ins.b] != LoadKind::kTable ||
        ins.d != DType::bf16 || ins.rd != DType::bf16 || ins.imm < 0 || ins.imm > 2)
      throw Refuse{"table"};
    return;
  }
  if (op == kConvert) {
    const bool identity = identity_convert(ins);
    if (identity && (is_float_reg(ins.d) || ins.d == DType::boolean)) return;
    if (ins.d == DType::f32 && ins.rd == DType::bf16) return;
    if (is_float_reg(ins.d) && ins.rd == DType::boolean) return;
    if (ins.d == DType::boolean && is_float_reg(ins.rd)) return;
    throw Refuse{"convert between these dtypes"};
  }
  if (op == kSelect) {
    if (!(is_float_reg(ins.rd) || ins.rd == DType::boolean)) throw Refuse{"select of this dtype"};
    return;
  }
  if (op == kNot || op == kAnd || op == kOr || op == kXor) {
    if (ins.d != DType::boolean) throw Refuse{"logical op on a non-bool"};
    return;
  }
  if (op >= kEq && op <= kGe) {
    if (!(is_float_reg(ins.d) || ins.d == DType::boolean)) throw Refuse{"compare of this dtype"};
    return;
  }
  if (!is_float_reg(ins.d)) throw Refuse{"arithmetic on this dtype"};
  switch (op) {
    case kNeg: case kAbs: case kSqrt: case kRsqrt: case kIntPow: case kIsFinite: case kExp: case kTanh: case kLogistic:
    case kErf:
    case kAdd: case kSub: case kMul: case kDiv: case kMax: case kMin: case kClamp:
      return;
    default:
      throw Refuse{op_name(op)};
  }
}

// The rational forms of fm::tanh and fm::erf (kernels/fastmath.h): t P(t^2) / Q(t^2) on t
// clamped to +-clamp, P and Q highest power first.
struct OddRational { float clamp; const float* p; int np; const float* q; int nq; };
inline OddRational tanh_rational() {
  static const float kP[] = {-2.76076847742355e-16f, 2.00018790482477e-13f, -8.60467152213735e-11f,
                             5.12229709037114e-08f, 1.48572235717979e-05f, 6.37261928875436e-04f,
                             4.89352455891786e-03f};
  static const float kQ[] = {1.19825839466702e-06f, 1.18534705686654e-04f, 2.26843463243900e-03f,
                             4.89352518554385e-03f};
  return {7.99881172180175781f, kP, 7, kQ, 4};
}
inline OddRational erf_rational() {
  static const float kP[] = {0.00022905065861350646f, 0.0034082910107109506f, 0.050955695062380861f,
                             0.18520832239976145f, 1.128379143519084f};
  static const float kQ[] = {-1.1791602954361697e-7f, 0.000023547966471313185f, 0.0010179625278914885f,
                             0.014070470171167667f, 0.11098505178285362f, 0.49746925110067538f, 1.0f};
  return {3.832506856900711f, kP, 5, kQ, 7};
}
// fm::exp's constants in its order: the clamps, the rounding shifter, ln2 split, and the
// polynomial (its first two coefficients form p, then p = fma(p, r, c) for the rest).
constexpr float kExpLo = -104.0f, kExpHi = 89.0f, kExpShift = 12582912.0f, kLog2e = 1.44269504088896341f,
                kLn2Hi = -0.693359375f, kLn2Lo = 2.12194440e-4f, kExpP0 = 1.3981999507E-3f, kExpP1 = 1.9875691500E-4f;
constexpr float kExpPoly[] = {8.3334519073E-3f, 4.1665795894E-2f, 1.6666665459E-1f, 5.0000001201E-1f};
// tanh returns x itself below this |x|.
constexpr float kTanhSmall = 0.0004f;

}  // namespace podlet::fused_jit::detail

namespace podlet::fused_jit {
// The compiled program (compile()'s result).
class Kernel {
 public:
  std::unique_ptr<Xbyak::CodeGenerator> gen;  // owns the code
  void (*fn)(const uint64_t*) = nullptr;
  std::vector<int64_t> periods;
  size_t nloads = 0, nouts = 0, nspill = 0;
  bool leaves = false;  // has kLeaves outputs
  bool reg_leaves = false;  // ... added in registers (Gen::leaf_loop)
  int ways = 1;  // vectors per iteration (Gen::body)
  bool unchecked = false;  // with Gen::unchecked_ways_loop
  bool canonical_roundings = false;  // ymm: some roundings skip the NaN check (GenY::plan_canonical)
  // Lanes per vector: 16 (zmm, fused_jit.cc) or 8 (ymm, fused_jit_ymm.cc, whose code runs
  // whole vectors only: run() puts a partial last one through a bounce buffer).
  int lanes = 16;
  std::vector<LoadKind> load_kind;  // (the ymm code's bounce buffers)
  std::vector<int> load_scale, out_scale;  // bytes per element
  int stack_slots = 0;  // the ymm code's values kept in 32-byte stack slots
};
}  // namespace podlet::fused_jit

namespace podlet::fused_jit::detail {
// The AVX2 generator (fused_jit_ymm.cc): fills kern (fn, periods, ways, gen) or throws
// Refuse. canonical: roundings of values whose NaNs are canonical skip the NaN check.
void generate_ymm(const Spec& spec, int max_ways, bool canonical, Kernel& kern);
}  // namespace podlet::fused_jit::detail
