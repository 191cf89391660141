// Elementwise fusion: a graph pass that merges chains of elementwise primitives (BN
// apply + ReLU + residual add + casts, bias adds, dropout masks, optimizer-like chains)
// into single `fused_elementwise` nodes, each evaluated in one pass over memory
// (prims/fused.cc) instead of one pass per primitive.
//
// The result is bit-identical to the unfused graph: the fused node runs the same
// scalar operations in the same order with the same roundings (a bf16 value is rounded
// after every op that produced it, as the one-op kernels do), only without writing the
// intermediates to memory.
//
// What fuses: the primitives listed in fusion.cc (float arithmetic and math functions,
// comparisons, select, clamp, converts, logical ops on bool) whose outputs have the same
// number of elements (reshapes inside a chain are free). Operands from outside a group are
// read with broadcast strides: a broadcast_in_dim of a scalar or a per-channel vector, an
// implicit NumPy broadcast, or a constant whose elements are all equal costs no pass of
// its own. Reductions, contractions and data movement do not fuse.
//
// The pass only runs on graphs about to be executed (jit, after autodiff): a fused node
// has no VJP rule.
#pragma once
#include <cstdint>
#include "podlet/ir/graph.h"

namespace podlet {

struct FusionStats {
  int groups = 0;        // fused_elementwise nodes created
  int nodes_fused = 0;   // primitives they replace (broadcasts absorbed not counted)
  int broadcasts_absorbed = 0;
  int siblings_merged = 0;  // pairs of sum passes merged (sibling_fusion.h)
};

// Whether node n is one primitive the pass can fuse (a fusible primitive and dtype, one
// output). The rematerialisation pass (remat.h) recomputes exactly these.
bool fusible_elementwise(const Node& n, const Graph& g);

// A copy of g with elementwise chains fused - in an order where small per-channel nodes
// come just before their first use (fusion_order.h) - then sibling sum passes merged
// (sibling_fusion.h); g is unchanged. Value ids of g's inputs
// and outputs keep their meaning (same positions in inputs / outputs).
// excess_precision: every fused node gets the attr of that name (below), XLA's
// --xla_allow_excess_precision: bf16 values inside a fusion stay f32.
Graph fuse_elementwise(const Graph& g, FusionStats* stats = nullptr, bool excess_precision = false);

// The program format shared by the pass (fusion.cc) and the kernel (prims/fused.cc).
// A program is SSA: instruction k defines slot k. Attrs of a fused_elementwise node:
//   n          element count of the iteration space (every slot has n elements)
//   code       kInstrWidth ints per instruction: op, operand dtype, result dtype, a, b, c, imm
//   loads      per load: input index, rank r, r dims, r element strides (the dims are the
//              shape the strides refer to; flattened row-major index = slot index)
//   outs       per output: slot, then rank r and r dims (its shape); dtype = the slot's
//   flops      FLOPs of the primitives it replaces (FLOP totals survive fusion)
//   prims      the replaced primitives' names, comma separated (for dumps and profiles)
//   excess_precision  optional, 1: a bf16 arithmetic result that only feeds the program
//              keeps its f32 value instead of rounding (as XLA on a TPU); outputs and
//              explicit converts to bf16 still round. 0 / absent: JAX-on-CPU's bits
namespace fused {
enum Op : int64_t {
  kLoad = 0,  // a = load index
  // unary float (result dtype = operand dtype)
  kNeg, kAbs, kSign, kExp, kLog, kLog1p, kExpm1, kTanh, kLogistic, kSqrt, kRsqrt, kErf, kFloor, kCeil,
  kIntPow,    // imm = exponent
  kIsFinite,  // float -> bool
  kNot,       // bool
  kConvert,   // operand dtype -> result dtype
  // binary float
  kAdd, kSub, kMul, kDiv, kMax, kMin, kPow,
  // binary bool
  kAnd, kOr, kXor,
  // comparisons, any dtype -> bool
  kEq, kNe, kLt, kLe, kGt, kGe,
  kSelect,  // a = bool predicate, b = on true, c = on false
  kClamp,   // a = lo, b = x, c = hi
  // Internal to the kernel (prims/fused.cc's tables; never in a `code` attr): the bf16
  // word at index (a's bf16 bits) of the table that load b points at; imm 1 / 2: the
  // first / second word of a pair table's two-word entry at that index.
  kTable,
  kNumOps
};
constexpr int kInstrWidth = 7;
// One decoded instruction (the kInstrWidth ints of `code`).
struct Instr { int64_t op; DType d, rd; int64_t a, b, c, imm; };
// The instructions of a `code` attr, and the encoding of one.
inline std::vector<Instr> decode_code(const std::vector<int64_t>& code) {
  std::vector<Instr> out;
  for (size_t k = 0; k + kInstrWidth <= code.size(); k += kInstrWidth)
    out.push_back(Instr{code[k], DType(code[k + 1]), DType(code[k + 2]), code[k + 3], code[k + 4], code[k + 5],
                        code[k + 6]});
  return out;
}
inline void append_instr(std::vector<int64_t>& code, const Instr& i) {
  code.insert(code.end(), {i.op, int64_t(i.d), int64_t(i.rd), i.a, i.b, i.c, i.imm});
}
// One entry of `loads` (input index, dims, element strides) and of `outs` (slot, shape),
// and their encodings.
struct LoadSpec { int64_t input; Shape dims, st; };
struct OutSpec { int64_t slot; Shape shape; };
inline std::vector<LoadSpec> decode_loads(const std::vector<int64_t>& v) {
  std::vector<LoadSpec> out;
  for (size_t k = 0; k < v.size(); k += 2 + 2 * size_t(v[k + 1])) {
    const auto d = v.begin() + k + 2, s = d + v[k + 1];
    out.push_back({v[k], Shape(d, s), Shape(s, s + v[k + 1])});
  }
  return out;
}
inline std::vector<OutSpec> decode_outs(const std::vector<int64_t>& v) {
  std::vector<OutSpec> out;
  for (size_t k = 0; k < v.size(); k += 2 + size_t(v[k + 1]))
    out.push_back({v[k], Shape(v.begin() + k + 2, v.begin() + k + 2 + v[k + 1])});
  return out;
}
inline void append_load(std::vector<int64_t>& v, int64_t input, const Shape& dims, const Shape& st) {
  v.push_back(input);
  v.push_back(int64_t(dims.size()));
  v.insert(v.end(), dims.begin(), dims.end());
  v.insert(v.end(), st.begin(), st.end());
}
inline void append_out(std::vector<int64_t>& v, int64_t slot, const Shape& shape) {
  v.push_back(slot);
  v.push_back(int64_t(shape.size()));
  v.insert(v.end(), shape.begin(), shape.end());
}
// Slot operands of a non-load instruction: a, then b, then c.
inline int nops_of(const Instr& ins) {
  return ins.op == kSelect || ins.op == kClamp ? 3 : (ins.op < kAdd || ins.op == kTable ? 1 : 2);
}
// A convert that leaves its register as it is (a dtype to itself; bf16 -> f32: a bf16
// register already holds the f32 value): the interpreter and the JIT alias its operand.
inline bool identity_convert(const Instr& ins) {
  return ins.op == kConvert && (ins.d == ins.rd || (ins.d == DType::bf16 && ins.rd == DType::f32));
}
// The loop of one instruction over one tile of m elements (prims/fused_ops.h): the
// baseline build, or the AVX-512 one where the active ISA allows (same bits).
using ExecFn = void (*)(const Instr&, const void* a, const void* b, const void* c, void* d, int64_t m);
// Everything the kernel does per tile, built once per ISA (prims/fused_ops.h): run an
// instruction, load a tile from storage into a register (contiguous from `base`, or at
// element offsets `off`), store a register, and sum the rows of a chunk of a reduced
// output (reduce_sum's pairwise tree over rows). The tile loop itself is ISA-neutral.
struct TileKernels {
  ExecFn exec;
  void (*load)(DType, const void* src, int64_t base, const int64_t* off, void* dst, int64_t m);
  void (*store)(DType, const void* reg, void* dst, int64_t base, int64_t m);
  void (*sum_rows)(const float* p, int64_t nrows, int64_t w, float* acc, float* scratch);
  // the tree above 16-row leaves over n leaf sums (compiled passes add the leaves)
  void (*sum_leaves)(const float* p, int64_t n, int64_t w, float* acc, float* scratch);
  // store, bypassing the caches where the ISA can (non-temporal stores); `stage` holds
  // a tile in storage layout
  void (*store_stream)(DType, const void* reg, void* dst, int64_t base, int64_t m, void* stage);
};
}  // namespace fused
namespace kernels {
const fused::TileKernels& fused_tile_kernels_avx2();
const fused::TileKernels& fused_tile_kernels_avx512();
}

}  // namespace podlet
