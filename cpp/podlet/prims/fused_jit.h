// Machine code for fused elementwise programs (prims/fused.cc), generated at run time
// with Xbyak: AVX-512 (fused_jit.cc, described here) or, on hosts whose best ISA is AVX2,
// ymm code from the same programs (fused_jit_ymm.cc: 8 lanes, 16 registers with stack
// slots for the rest, periods in 8s, no leaf sums; same bits). The interpreter runs a program one instruction at a time over tiles
// of 1024 elements held in L1: every instruction of every element loads its operands and
// stores its result, and at two or three memory operations per vector the L1 ports, not
// the arithmetic, set the pace (~1.2 ns per instruction per 16 elements measured, even
// with the tiles cache-resident). Here the whole program runs per 16-element vector with
// its values in zmm registers: a vector's memory traffic is its inputs and outputs.
//
// Bits: each instruction is emitted as the IEEE operation, NaN rule and bf16 rounding the
// interpreter performs (fused_ops.h), lane by lane, so a program gives the interpreter's
// (and the unfused graph's) bits. A program with anything fused_jit.cc does not emit
// (log, pow and the other transcendentals but exp / tanh / logistic / erf; f64 or integer
// arithmetic; strided gathers; periods under 16; more than 24 live values) is not
// compiled and the interpreter runs it; PODLET_FUSED_JIT_DEBUG=1 says why on stderr.
// kTable (a value read from a table of its 65536 results, prims/fused.cc) is a gather.
// It buys memory traffic and, with up to four vectors per iteration (fused_jit.cc), the
// latency of long chains: one vector at a time, a bf16 program (a rounding after every
// operation) ran at its dependency chain's latency and no faster than the interpreter; W
// chains in flight, and bf16 rounding by vcvtneps2bf16 on AVX512_BF16 hosts, make the
// bf16 tanh-GELU VJP on [32, 197, 768] 1.5x faster (29.1 -> 19.2 ms, 1 thread, AMD Zen 4;
// the interpreter 25.1 ms). erf is evaluated in double (fastmath.h).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>
#include "podlet/ir/fusion.h"

namespace podlet::fused_jit {

// A program as the code generator sees it: instructions after the interpreter's
// bf16-convert folding, how each load reads its input, and where each output goes.
// kTable: not loaded; the base of a kTable instruction's table (a word per bf16 value,
// and zeros past the last: the lookup gathers 32 bits at twice the index).
enum class LoadKind { kFull, kScalar, kPeriodic, kRowConst, kOther, kTable };
// kRows: an f32 copy of every element, for the caller's row sums. kLeaves: the column
// sums of each 16-row leaf of rows of `leaf_k` columns (a power of two, >= 16), added
// in the JIT: leaf slot j of element i is ((i / (16 leaf_k)) leaf_k + i % leaf_k), and
// the code adds the element into it (the slot first: x86's add returns its first
// operand's NaN, reduce_sum's rule). The caller fills the slots with -0.0 first (-0.0 +
// x is x, signed zeros included; a NaN comes out quieted, as it does after a leaf's
// second row anyway) and adds the leaves up in the tree's order (fused_ops.h
// sum_leaves_f32): the sums of the rows path, without writing and re-reading the rows.
// When the accumulators fit in registers beside the program's values (leaf_k / 16 per
// kLeaves output), whole leaves are added in registers and written at the leaf's end
// (the same additions; BatchNorm statistics 32x56x56x64 bf16 0.67 -> 0.34 ms).
enum class OutMode { kStore, kStream, kRows, kLeaves };
struct Spec {
  std::vector<fused::Instr> code;
  std::vector<LoadKind> load_kind;  // per load index
  std::vector<int64_t> period;      // per load index: element i reads i % period (kPeriodic), i / period (kRowConst)
  struct Out { int slot; OutMode mode; };
  std::vector<Out> outs;
  int64_t leaf_k = 0;  // the row length of kLeaves outputs
};

class Kernel;
// The compiled program, or null when it has something the generator does not emit.
// Cached by content: the generator runs once per distinct program.
std::shared_ptr<const Kernel> compile(const Spec& spec);

// Runs elements [begin, end): `load_src[l]` is load l's input base, `out[o]` output o's
// base, and for a kRows output `out[o]` is where element `begin` goes (the chunk's row
// block; element i at out[o] + (i - begin)); for a kLeaves output, the float at which
// leaf slot 0 would be (slot j at out[o] + j). False (nothing run) when `begin` is not on
// a 16-lane boundary of a period that is a multiple of 16 (the code keeps such a
// period's vectors whole), or of 16 W lanes for a program run W vectors per iteration
// (fused.cc's chunks, multiples of 1024 elements or of whole rows, almost always are; the
// tests count that every chunk ran compiled).
bool run(const Kernel& k, int64_t begin, int64_t end, const void* const* load_src, void* const* out);

// Whether fused programs may be compiled (the active ISA is AVX2 or better and
// PODLET_FUSED_JIT is not 0), and the number of programs compiled / refused since start (tests).
bool enabled();
void set_enabled(bool on);
// The most vectors per iteration of programs compiled from now on (1-8, of which 1, 2, 4
// and 8 are used; default 8, PODLET_FUSED_JIT_WAYS sets it at start). Same bits whatever it is.
void set_max_ways(int w);
constexpr int kMaxWays = 8;  // set_max_ways' bound and default
// Whether programs compiled from now on round results of arithmetic without checking
// each rounding's inputs, checking MXCSR flags and stored NaNs per block of iterations
// (fused_jit.cc Gen::unchecked_ways_loop: AVX512_BF16 hosts, bf16 programs run several
// vectors per iteration); on AVX2 hosts, whether roundings of values whose NaNs are
// canonical skip the NaN check (fused_jit_ymm.cc plan_canonical). Default on;
// PODLET_FUSED_JIT_UNCHECKED=0 (or off) turns it off at start. Same bits either way.
bool unchecked_rounding();
void set_unchecked_rounding(bool on);
// leaf_runs: with kLeaves outputs; reg_leaf_runs: of those, with the leaves in registers
// (leaf_k / 16 accumulators per kLeaves output, when they fit beside the program's values)
// way_runs[W]: runs of programs compiled W vectors per iteration (fused_jit.cc Gen::body:
// W = 1, 2, 4 or 8; no leaf sums, every period a multiple of 16 W, W times the live values
// fit in registers, with the broadcast scalars moved to memory if that makes W larger).
struct Stats {
  int64_t compiled = 0, refused = 0, runs = 0, leaf_runs = 0, reg_leaf_runs = 0;
  int64_t way_runs[kMaxWays + 1] = {};
  int64_t spill_runs = 0;  // runs of programs with broadcast scalars (ymm: any values) kept in memory
  // runs of programs with the unchecked loop, and its flagged blocks (each sent the rest of
  // its run to the checked loop)
  int64_t unchecked_runs = 0, fallbacks = 0;
  // runs of ymm programs with roundings that skip the NaN check (canonical operands)
  int64_t canonical_runs = 0;
};
Stats stats();

}  // namespace podlet::fused_jit
