// fused_elementwise: a chain of elementwise primitives evaluated in one pass over the
// output (the program format is in ir/fusion.h; the pass that builds it in ir/fusion.cc).
// On AVX-512 hosts most programs run as machine code generated for them (fused_jit.h);
// the interpreter below runs the rest, and is the definition of their bits.
//
// The iteration space is cut into tiles of kTile elements. For each tile the program
// runs instruction by instruction, each a plain loop over the tile (vectorisable), on
// registers that hold one tile of a value: bf16 values sit in f32 registers, already
// rounded; bool in bytes. Scalar operands are splatted once per chunk, contiguous
// operands of the register type are read in place, and a value that leaves the group
// in its register type is written straight into its output array.
//
// Bits: every op is the scalar code of the one-op kernel (kernels/fastmath.h is a copy
// of elementwise.cc's math) with the same rounding after each op, so a fused graph
// gives exactly the unfused graph's bits; elementwise, so any thread count gives the
// same bits too.
#include "podlet/prims/common.h"
#include "podlet/ir/batch_ops.h"
#include "podlet/prims/fused_jit.h"
#include "podlet/prims/fused_ops.h"
#include "podlet/prims/fused_tables.h"
#include "podlet/prims/reduce_ops.h"
#include "podlet/cpu/isa.h"
#include "podlet/kernels/stream_out.h"
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <immintrin.h>

namespace podlet {
namespace fused_ops {
void fused_error(const char* what, int64_t code) {
  if (std::string(what) == "unsupported dtype")
    throw DTypeError(fmt("fused_elementwise: unsupported dtype ", dtype_name(DType(code))));
  throw ValueError(fmt("fused_elementwise: ", what, " ", code));
}
}  // namespace fused_ops
namespace {

using namespace fused;
using namespace fused_ops;

constexpr int64_t kTile = 1024;           // elements per register
constexpr int64_t kChunk = 16 * kTile;    // elements per parallel chunk (fixed: bits do not depend on threads)

// ---- program ------------------------------------------------------------------------
enum LoadKind { kFull, kScalar, kPeriodic, kRowConst, kGeneral, kTableBase };  // kTableBase: a kTable's table
struct Load {
  int input = 0;
  LoadKind kind = kGeneral;
  int64_t period = 1;   // kPeriodic: offset = i % period; kRowConst: offset = i / period
  Shape dims, st;       // merged nest (outermost first), for kGeneral
};
struct Out { int slot; Shape shape; };
struct Program {
  int64_t n = 0;
  std::vector<Instr> code;
  std::vector<Load> loads;
  std::vector<Out> outs;
  // Reductions: outputs flagged in `reduced` are the column sums of their slot over the
  // iteration space seen as [n / rinner rows, rinner columns] (reduce_sum over leading
  // axes), summed exactly as reduce_sum sums a materialised array.
  int64_t rinner = 0;
  std::vector<char> reduced;
};

// Drops size-1 dims and merges adjacent dims the strides allow (like elementwise.cc's
// make_nest), then names the access pattern.
Load classify(int input, const Shape& dims, const Shape& st) {
  Shape md, ms;
  for (int d = int(dims.size()) - 1; d >= 0; --d) {
    if (dims[d] == 1) continue;
    if (!md.empty() && st[d] == ms.back() * md.back()) { md.back() *= dims[d]; continue; }
    md.push_back(dims[d]); ms.push_back(st[d]);
  }
  std::reverse(md.begin(), md.end());
  std::reverse(ms.begin(), ms.end());
  Load l;
  l.input = input;
  l.dims = md; l.st = ms;
  bool all0 = true;
  for (auto s : ms) all0 &= s == 0;
  if (all0) l.kind = kScalar;
  else if (md.size() == 1 && ms[0] == 1) l.kind = kFull;
  else if (md.size() == 2 && ms[0] == 0 && ms[1] == 1) { l.kind = kPeriodic; l.period = md[1]; }
  else if (md.size() == 2 && ms[0] == 1 && ms[1] == 0) { l.kind = kRowConst; l.period = md[1]; }
  else l.kind = kGeneral;
  return l;
}

// The float arithmetic whose bf16 result the instruction rounds itself (rd bf16).
bool rounds_result(int64_t op) {
  return (op >= kNeg && op <= kIntPow) || (op >= kAdd && op <= kPow) || op == kSelect || op == kClamp;
}

// XLA's allow_excess_precision (a TPU's fusions): a bf16 arithmetic result read only
// inside the program keeps its f32 value, so a chain rounds once, where its value leaves
// the program. The register types already allow it (a bf16 register holds an f32); the
// instruction just stops rounding (rd f32). Outputs round as before, and so do explicit
// converts to bf16: a user's x.astype(bf16) keeps its meaning.
void keep_f32_inside(Program& p) {
  std::vector<char> is_out(p.code.size(), 0);
  for (const Out& o : p.outs) is_out[o.slot] = 1;
  for (size_t k = 0; k < p.code.size(); ++k) {
    Instr& ins = p.code[k];
    if (rounds_result(ins.op) && !is_out[k] && ins.d == DType::bf16 && ins.rd == DType::bf16) ins.rd = DType::f32;
  }
}

Program parse(const Attrs& a) {
  Program p;
  p.n = a.i("n");
  p.code = decode_code(a.ints("code"));
  for (const Instr& ins : p.code)
    if (ins.op < 0 || ins.op >= kTable) throw ValueError(fmt("fused_elementwise: unknown op ", ins.op, " in code"));
  for (const LoadSpec& l : decode_loads(a.ints("loads"))) p.loads.push_back(classify(int(l.input), l.dims, l.st));
  for (const OutSpec& o : decode_outs(a.ints("outs"))) p.outs.push_back(Out{int(o.slot), o.shape});
  p.reduced.assign(p.outs.size(), 0);
  p.rinner = a.i("reduce_inner", 0);
  for (int64_t o : a.ints("reduced", {})) {
    if (o < 0 || o >= int64_t(p.outs.size())) throw ValueError(fmt("fused_elementwise: reduced output ", o, " out of range"));
    p.reduced[o] = 1;
  }
  if (a.i("excess_precision", 0)) keep_f32_inside(p);
  return p;
}

// Repeats the first `unit` bytes of d until `total` bytes are filled, doubling the copied
// block each time: a scalar splat over a tile is 9 memcpy calls, not 511 (one call per
// element cost more than the arithmetic of a whole BatchNorm pass).
void repeat_fill(void* d, size_t unit, size_t total) {
  char* p = static_cast<char*>(d);
  for (size_t have = unit; have < total;) {
    const size_t n = std::min(have, total - have);
    std::memcpy(p + have, p, n);
    have += n;
  }
}

// An f32 result read only by a convert to bf16 is rounded by its own instruction (every
// op rounds a bf16 result the way the convert would: the f32 value, then round_bf16) and
// the convert becomes an identity that aliases it: one pass fewer over the tile. BatchNorm
// passes end in such a convert (relu's select, then the cast to the compute dtype).
void fold_bf16_converts(Program& p) {
  const int S = int(p.code.size());
  std::vector<int> uses(S, 0);
  for (const Instr& ins : p.code) {
    if (ins.op == kLoad) continue;
    const int64_t ops[3] = {ins.a, ins.b, ins.c};
    for (int q = 0; q < nops_of(ins); ++q) ++uses[ops[q]];
  }
  for (const Out& o : p.outs) uses[o.slot] += 2;  // an output keeps its own dtype
  for (Instr& cv : p.code) {
    if (cv.op != kConvert || cv.d != DType::f32 || cv.rd != DType::bf16 || uses[cv.a] != 1) continue;
    Instr& src = p.code[cv.a];
    if (!rounds_result(src.op) || src.d != DType::f32 || src.rd != DType::f32) continue;
    src.rd = DType::bf16;
    cv.d = DType::bf16;  // bf16 -> bf16: an identity, aliased below
  }
}

// The program compiled to AVX-512 code (fused_jit.h), or null: the JIT is off or the
// program has something it does not compile.
// leaf_k > 0: the reduced outputs as kLeaves sums of rows of leaf_k columns.
std::shared_ptr<const fused_jit::Kernel> jit_kernel(const Program& p, const std::vector<char>& stream,
                                                    const std::vector<Array>& out, int64_t chunk, int64_t leaf_k = 0) {
  if (!fused_jit::enabled()) return nullptr;
  fused_jit::Spec spec;
  spec.code = p.code;
  spec.leaf_k = leaf_k;
  for (const Load& l : p.loads) {
    spec.load_kind.push_back(l.kind == kFull       ? fused_jit::LoadKind::kFull
                             : l.kind == kScalar   ? fused_jit::LoadKind::kScalar
                             : l.kind == kPeriodic ? fused_jit::LoadKind::kPeriodic
                             : l.kind == kRowConst ? fused_jit::LoadKind::kRowConst
                             : l.kind == kTableBase ? fused_jit::LoadKind::kTable
                                                   : fused_jit::LoadKind::kOther);
    spec.period.push_back(l.period);
  }
  for (size_t o = 0; o < p.outs.size(); ++o) {
    // Non-temporal stores need every vector's destination aligned: a 64-byte base and
    // chunks that start on a line.
    const bool aligned = reinterpret_cast<uintptr_t>(out[o].raw()) % 64 == 0 &&
                         (chunk * int64_t(itemsize(out[o].dtype()))) % 64 == 0;
    spec.outs.push_back({p.outs[o].slot, p.reduced[o]           ? (leaf_k ? fused_jit::OutMode::kLeaves : fused_jit::OutMode::kRows)
                                         : stream[o] && aligned ? fused_jit::OutMode::kStream
                                                                : fused_jit::OutMode::kStore});
  }
  return fused_jit::compile(spec);
}

// ---- tables -------------------------------------------------------------------------
// A bf16 value is one of 65536 words, so anything computed from one bf16 value and
// scalars alone is a function of 16 bits: the bf16 tanh-GELU is y = T[x] for a table T of
// 65536 words, and its VJP reads tanh(...) of x as one. Rounding after every operation
// (JAX's CPU bits) made such chains instruction-bound: ~6 instructions per operation
// per vector for the rounding alone, the tanh on top, against one gather. Below, each
// value worth it (a transcendental, or several operations, between it and its root) is
// replaced by a kTable instruction reading a table built by running the same
// instructions on all 65536 words: the interpreter's (or the compiled code's) own
// arithmetic, so the same bits for every input, NaNs and subnormals included. Tables are
// cached by their instructions and the scalars' values. Two tables of one root are read
// as one pair table (two words per entry, one gather for both): a gather of 16 lanes
// costs as much as ~10 rounded operations (Zen 4), so the exact GELU's VJP, erf's chain
// and exp's, went from two gathers to one.
constexpr int64_t kWords = 65536;
constexpr int64_t kTableMinElements = kWords;  // smaller programs: not worth a build
std::atomic<int> g_tables_on{-1};
std::atomic<int64_t> g_tables_built{0}, g_table_runs{0}, g_tables_used{0}, g_tables_paired{0};

int tabulate(Program& p, std::vector<Array>& in);
void run_program(Program p, const std::vector<Array>& given, std::vector<Array>& out, bool tables);

void run_program(Program p, const std::vector<Array>& given, std::vector<Array>& out, bool tables = true) {
  fold_bf16_converts(p);
  // The inputs, with the tables of values tabulated below appended (a copy only then).
  std::vector<Array> with_tables;
  if (tables && p.n >= kTableMinElements && fused_tables::enabled()) {
    with_tables = given;
    if (tabulate(p, with_tables)) g_table_runs.fetch_add(1, std::memory_order_relaxed);
  }
  const std::vector<Array>& in = with_tables.empty() ? given : with_tables;
  const int S = int(p.code.size());
  // Where each slot lives: a pooled tile buffer, a dedicated (scalar) buffer, its input
  // in place, its output in place, or its operand's register (an alias, below).
  enum Home { kPooled, kDedicated, kInput, kOutput, kAlias };
  std::vector<Home> home(S, kPooled);
  std::vector<int> buf(S, -1);
  std::vector<int> direct_out(S, -1);
  std::vector<std::vector<int>> stores(S);  // outputs to store from this slot
  std::vector<std::vector<int>> sums(S);  // reduced outputs summing this slot
  std::vector<int> reduced_outs;
  // Outputs of at least kStreamOutBytes (kernels/stream_out.h) are written with
  // non-temporal stores, through a tile in storage layout (not straight from the
  // instruction).
  std::vector<char> stream(p.outs.size(), 0);
  bool any_stream = false;
  for (size_t o = 0; o < p.outs.size(); ++o) {
    stream[o] = !p.reduced[o] && int64_t(out[o].nbytes()) >= kernels::kStreamOutBytes;
    any_stream |= bool(stream[o]);
  }
  for (size_t o = 0; o < p.outs.size(); ++o) {
    const int s = p.outs[o].slot;
    const Instr& ins = p.code[s];
    if (p.reduced[o]) { sums[s].push_back(int(o)); reduced_outs.push_back(int(o)); }
    else if (!stream[o] && ins.op != kLoad && same_layout(ins.rd) && direct_out[s] < 0) { direct_out[s] = int(o); home[s] = kOutput; }
    else stores[s].push_back(int(o));
  }
  // A convert that leaves the register as it is (bf16 -> f32: a bf16 register already
  // holds the f32 value; a dtype to itself) aliases its operand's register: no pass.
  // Uses of an alias are uses of its root, which stays alive for them.
  std::vector<int> root(S);
  for (int k = 0; k < S; ++k) {
    const Instr& ins = p.code[k];
    const bool identity = identity_convert(ins);
    root[k] = identity && home[k] != kOutput ? root[ins.a] : k;
    if (root[k] != k) home[k] = kAlias;
  }
  std::vector<int> last_use(S, -1);
  for (int k = 0; k < S; ++k) {
    const Instr& ins = p.code[k];
    if (home[k] == kAlias) {  // its stores and sums read the root's register at k
      if (!stores[k].empty() || !sums[k].empty()) last_use[root[k]] = k;
      continue;
    }
    if (ins.op == kLoad) continue;
    const int64_t ops[3] = {ins.a, ins.b, ins.c};
    for (int q = 0; q < nops_of(ins); ++q) last_use[root[ops[q]]] = k;
  }
  // Chunks: fixed element ranges (the unit of parallel work). With reductions, a chunk
  // is the row chunk reduce_sum uses for this many columns, so that the sums are formed
  // in reduce_sum's order.
  const int64_t K = p.rinner;
  // Without reductions any multiple of kTile gives the same bits (tiles stay at
  // multiples of kTile, so each element takes the same code path): a program with
  // enough work per element but few elements (an LSTM cell's gates, 8K elements, 5
  // transcendentals each) is cut into 4 chunks for the threads instead of one.
  int64_t chunk = reduced_outs.empty() ? kChunk : col_rows_per_chunk(K) * K;
  if (reduced_outs.empty() && p.n < 4 * kChunk && p.n * int64_t(S) >= 32 * kChunk)
    chunk = std::max(kTile, (p.n / 4 + kTile - 1) / kTile * kTile);
  int nbuf = 0;
  std::vector<int> free_list;
  for (int k = 0; k < S; ++k) {
    const Instr& ins = p.code[k];
    if (home[k] == kAlias) continue;
    if (ins.op == kLoad) {
      const Load& l = p.loads[ins.a];
      // Tiles start at multiples of kTile from a chunk start, so a pattern whose period
      // divides kTile and the chunk size is the same in every tile: filled once per
      // chunk, like a scalar.
      if (l.kind == kScalar || (l.kind == kPeriodic && kTile % l.period == 0 && chunk % l.period == 0)) {
        home[k] = kDedicated; buf[k] = nbuf++; continue;
      }
      if (l.kind == kFull && same_layout(ins.d)) { home[k] = kInput; continue; }
    }
    if (home[k] == kPooled) {
      if (!free_list.empty()) { buf[k] = free_list.back(); free_list.pop_back(); }
      else buf[k] = nbuf++;
    }
    // Free this instruction's operands that die here (in-place reuse is safe: every op
    // reads element j of its operands before writing element j).
    if (ins.op != kLoad) {
      const int64_t ops[3] = {root[ins.a], nops_of(ins) > 1 ? root[ins.b] : -1, nops_of(ins) > 2 ? root[ins.c] : -1};
      for (int q = 0; q < nops_of(ins); ++q) {
        const int s = int(ops[q]);
        bool dup = false;
        for (int r = 0; r < q; ++r) dup |= ops[r] == s;
        if (!dup && last_use[s] == k && home[s] == kPooled) free_list.push_back(buf[s]);
      }
    }
    if (last_use[k] < 0 && home[k] == kPooled) free_list.push_back(buf[k]);  // dead or only stored
  }

  static const TileKernels baseline{exec_instr, load_elems, store_elems, sum_rows_f32, sum_leaves_f32, store_elems_stream};
  const int isa = int(cpu::active_isa());
  const TileKernels& tk = isa >= int(cpu::Isa::avx512) ? kernels::fused_tile_kernels_avx512()
                          : isa >= int(cpu::Isa::avx2) ? kernels::fused_tile_kernels_avx2()
                                                       : baseline;
  const ExecFn exec = tk.exec;
  const int64_t n = p.n;
  // Runs the program over elements [cb, ce) (one chunk). sum_rows(o, t0) is where tile t0
  // of reduced output o goes (f32 registers), null without reductions: a computed slot
  // with a reduced output is written there directly (its register), others are copied.
  auto run_range = [&](int64_t cb, int64_t ce, auto&& sum_rows) {
    // 8 bytes per element: any register type. Not zeroed: every element is written first.
    // Per-thread scratch kept across chunks and calls: a chunk is only a few microseconds
    // of work, too little to pay for its own allocations.
    static thread_local std::vector<double> pool;
    static thread_local std::vector<void*> ptr;
    static thread_local std::vector<int64_t> off;
    static thread_local std::vector<double> stage(kTile);
    pool.resize(std::max<size_t>(pool.size(), size_t(std::max(nbuf, 1)) * kTile));
    ptr.assign(S, nullptr);
    off.resize(kTile);
    auto bufp = [&](int b) -> void* { return pool.data() + size_t(b) * kTile; };
    // Scalars and tile-invariant patterns: filled once per chunk.
    for (int k = 0; k < S; ++k) {
      if (home[k] != kDedicated) continue;
      const Instr& ins = p.code[k];
      const Load& l = p.loads[ins.a];
      void* d = bufp(buf[k]);
      const size_t ps = phys_size(ins.d);
      const int64_t period = l.kind == kScalar ? 1 : l.period;
      tk.load(ins.d, in[l.input].raw(), 0, nullptr, d, period);
      repeat_fill(d, period * ps, kTile * ps);
      ptr[k] = d;
    }
    for (int64_t t0 = cb; t0 < ce; t0 += kTile) {
      const int64_t m = std::min(kTile, ce - t0);
      for (int k = 0; k < S; ++k) {
        const Instr& ins = p.code[k];
        if (home[k] == kAlias) {
          ptr[k] = ptr[ins.a];
        } else if (ins.op == kLoad) {
          const Load& l = p.loads[ins.a];
          const void* src = in[l.input].raw();
          switch (l.kind) {
            case kScalar: break;
            case kFull:
              if (home[k] == kInput) ptr[k] = const_cast<char*>(static_cast<const char*>(src) + t0 * itemsize(ins.d));
              else { ptr[k] = bufp(buf[k]); tk.load(ins.d, src, t0, nullptr, ptr[k], m); }
              break;
            case kPeriodic: {  // contiguous runs of the period
              if (home[k] == kDedicated) break;  // filled once per chunk, above
              ptr[k] = bufp(buf[k]);
              const size_t ps = phys_size(ins.d);
              int64_t o = t0 % l.period;
              for (int64_t j = 0; j < m;) {
                const int64_t run = std::min(m - j, l.period - o);
                tk.load(ins.d, src, o, nullptr, static_cast<char*>(ptr[k]) + j * ps, run);
                j += run;
                o = 0;
              }
              break;
            }
            case kRowConst: {  // runs of one value
              ptr[k] = bufp(buf[k]);
              const size_t ps = phys_size(ins.d);
              int64_t r = t0 / l.period, c = t0 % l.period;
              for (int64_t j = 0; j < m; ++r) {
                const int64_t run = std::min(m - j, l.period - c);
                char* d = static_cast<char*>(ptr[k]) + j * ps;
                tk.load(ins.d, src, r, nullptr, d, 1);
                repeat_fill(d, ps, run * ps);
                j += run;
                c = 0;
              }
              break;
            }
            case kGeneral: {
              const int r = int(l.dims.size());
              Shape idx(r);
              int64_t rem = t0, o = 0;
              for (int d = r - 1; d >= 0; --d) { idx[d] = rem % l.dims[d]; rem /= l.dims[d]; o += idx[d] * l.st[d]; }
              for (int64_t j = 0; j < m; ++j) {
                off[j] = o;
                for (int d = r - 1; d >= 0; --d) {
                  o += l.st[d];
                  if (++idx[d] < l.dims[d]) break;
                  o -= l.st[d] * l.dims[d];
                  idx[d] = 0;
                }
              }
              ptr[k] = bufp(buf[k]); tk.load(ins.d, src, 0, off.data(), ptr[k], m);
              break;
            }
          }
        } else {
          void* d = home[k] == kOutput ? static_cast<char*>(out[direct_out[k]].raw()) + t0 * itemsize(ins.rd)
                    : !sums[k].empty()   ? static_cast<void*>(sum_rows(sums[k][0], t0))
                                         : bufp(buf[k]);
          exec(ins, ptr[ins.a], ins.op == kTable ? in[p.loads[ins.b].input].raw() : ins.op >= kAdd ? ptr[ins.b] : nullptr,
               ins.op == kSelect || ins.op == kClamp ? ptr[ins.c] : nullptr, d, m);
          ptr[k] = d;
        }
        for (int o : stores[k]) {
          if (stream[o]) tk.store_stream(ins.rd, ptr[k], out[o].raw(), t0, m, stage.data());
          else tk.store(ins.rd, ptr[k], out[o].raw(), t0, m);
        }
        for (int o : sums[k]) {
          float* rows = sum_rows(o, t0);
          if (rows != ptr[k]) std::memcpy(rows, ptr[k], size_t(m) * 4);
        }
      }
    }
    // Non-temporal stores are weakly ordered: fence them before another thread may read.
    if (any_stream) _mm_sfence();
  };

  // Compiled code when the program allows it, else the interpreter above: same chunks,
  // same bits.
  const auto kern = jit_kernel(p, stream, out, chunk);
  std::vector<const void*> load_src;
  for (const Load& l : p.loads) load_src.push_back(in[l.input].raw());
  // The compiled code's output bases: reduced(o) for a reduced output, else out[o]'s.
  // (Per thread, valid until its next call.)
  auto out_ptrs = [&](auto&& reduced) {
    static thread_local std::vector<void*> v;
    v.resize(p.outs.size());
    for (size_t o = 0; o < p.outs.size(); ++o) v[o] = p.reduced[o] ? reduced(int(o)) : out[o].raw();
    return v.data();
  };
  // A float pointer moved back by k floats (the compiled code indexes from element 0).
  auto back = [](float* f, int64_t k) { return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(f) - uintptr_t(k) * 4); };
  auto range = [&](int64_t cb, int64_t ce, auto&& sum_rows) {
    if (!kern) return run_range(cb, ce, sum_rows);
    void* const* op = out_ptrs([&](int o) { return back(sum_rows(o, cb), cb); });
    if (!fused_jit::run(*kern, cb, ce, load_src.data(), op)) run_range(cb, ce, sum_rows);
  };
  if (reduced_outs.empty()) {
    // The compiled code takes runs of consecutive chunks per task (without reductions the
    // bits do not depend on where a range starts or ends, so neither on the thread count):
    // its prefetches and the hardware's run on across chunk boundaries instead of starting
    // cold every 16K elements. The tanh-GELU VJP over [32, 197, 768] with its inputs
    // evicted from the caches: 10.2 -> 8.9 ms (4 KB pages; array.cc's huge pages did the
    // rest).
    const auto none = [](int, int64_t) -> float* { return nullptr; };
    const int64_t nch = (n + chunk - 1) / chunk;
    const int64_t grain = kern ? std::max<int64_t>(1, nch / (4 * num_threads())) : 1;
    parallel_for(nch, grain, [&](int64_t c0, int64_t c1) {
      if (kern && fused_jit::run(*kern, c0 * chunk, std::min(n, c1 * chunk), load_src.data(),
                                 out_ptrs([](int) -> void* { return nullptr; })))
        return;
      for (int64_t c = c0; c < c1; ++c) run_range(c * chunk, std::min(n, (c + 1) * chunk), none);
    });
    return;
  }
  // Each chunk's rows go to a scratch block per reduced output, summed by pairwise_rows
  // into the chunk's partial; the partials are then summed pairwise per column: the
  // two phases of reduce_sum's column reduction (reduce.cc), on the same values.
  const int64_t R = n / K, rpc = col_rows_per_chunk(K), nch = (R + rpc - 1) / rpc;
  const int nred = int(reduced_outs.size());
  std::vector<int> red_index(p.outs.size(), -1);
  for (int r = 0; r < nred; ++r) red_index[reduced_outs[r]] = r;
  std::vector<float> part(size_t(nred) * size_t(nch) * size_t(K));
  // A whole chunk of a power of two of 16-row leaves, rows a power of two of at least 16
  // columns: the compiled pass adds each leaf's column sums itself (fused_jit.h kLeaves)
  // instead of writing every row for sum_rows to read back, and the leaves are added in
  // the tree's order. Same sums; a BatchNorm statistics pass (sum, sum of squares) of
  // 32x28x28x128 bf16 went from 0.43 to 0.26 ms, 32x112x112x64 from 3.6 to 2.3 ms.
  // Other chunks (the last, partial one) take the rows path.
  auto pow2 = [](int64_t v) { return v > 0 && (v & (v - 1)) == 0; };
  const int64_t nleaf = rpc / 16;
  // Each reduced output's leaves a multiple of 4 KB plus 1088 bytes past the last one's:
  // the compiled loop adds a vector into the same slot of every output in turn, and at a
  // distance of a multiple of 4 KB (16 leaves of 64 columns) each output's load of its
  // slot waited on the store to the one before it (4K aliasing): the 32x56x56x64
  // statistics pass 0.81 -> 0.63 ms (warm), 32x28x28x128 0.35 -> 0.32 ms.
  const int64_t lstride = (nleaf * K + 1023) / 1024 * 1024 + 272;
  const auto leaf_kern = kern && K >= 16 && pow2(K) && rpc % 16 == 0 && pow2(nleaf)
                             ? jit_kernel(p, stream, out, chunk, K) : nullptr;
  // Runs of up to 4 consecutive chunks per task: the compiled code's prefetches run on
  // into the next chunk, so a task does not start on a cold line (BatchNorm statistics
  // from DRAM 5-7% faster; the partials, and so the bits, are per chunk either way).
  const int64_t grain = std::max<int64_t>(1, std::min<int64_t>(4, nch / (16 * num_threads())));
  parallel_for(nch, grain, [&](int64_t c0, int64_t c1) {
    static thread_local std::vector<float> rows, scratch, leaves;
    scratch.resize(size_t(scratch_levels(rpc)) * size_t(K));
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t cb = c * chunk, ce = std::min(n, cb + chunk);
      if (leaf_kern && ce - cb == chunk) {
        leaves.assign(size_t(nred) * size_t(lstride), -0.0f);
        const int64_t slot0 = cb / (16 * K) * K;  // the leaf slot of element cb
        void* const* op = out_ptrs([&](int o) { return back(leaves.data() + size_t(red_index[o]) * lstride, slot0); });
        if (fused_jit::run(*leaf_kern, cb, ce, load_src.data(), op)) {
          for (int r = 0; r < nred; ++r)
            tk.sum_leaves(leaves.data() + size_t(r) * lstride, nleaf, K, part.data() + (size_t(r) * nch + c) * K,
                          scratch.data());
          continue;
        }
      }
      rows.resize(size_t(nred) * size_t(chunk));
      range(cb, ce, [&](int o, int64_t t0) { return rows.data() + size_t(red_index[o]) * chunk + (t0 - cb); });
      for (int r = 0; r < nred; ++r)
        tk.sum_rows(rows.data() + size_t(r) * chunk, (ce - cb) / K, K, part.data() + (size_t(r) * nch + c) * K,
                    scratch.data());
    }
  });
  for (int r = 0; r < nred; ++r) {
    std::vector<float> acc(K), scratch(size_t(scratch_levels(nch)) * size_t(K));
    pairwise_rows<SumOp<float>>(part.data() + size_t(r) * nch * K, nch, K, K, acc.data(), scratch.data());
    Array& y = out[reduced_outs[r]];
    if (y.dtype() == DType::bf16) for (int64_t j = 0; j < K; ++j) y.data<bf16>()[j] = store<SumOp<bf16>, bf16>(acc[j]);
    else std::memcpy(y.raw(), acc.data(), size_t(K) * 4);
  }
}

// The cost of an instruction, in rounded-operation units (a table lookup is a gather of
// 16 words: ~12 cycles on AMD Zen 4, against ~3-4 for an operation and its rounding).
double op_cost(const Instr& ins) {
  switch (ins.op) {
    case kLoad: return 0;
    case kExp: case kLog: case kLog1p: case kExpm1: case kTanh: case kLogistic: case kErf: case kPow: return 6;
    case kDiv: case kSqrt: case kRsqrt: return 2;
    default: break;
  }
  if (ins.op == kConvert || ins.op == kNot || ins.op == kAnd || ins.op == kOr || ins.op == kXor ||
      (ins.op >= kEq && ins.op <= kGe))
    return 0.5;
  return ins.rd == DType::bf16 ? 1 : 0.5;
}
constexpr double kTableMinCost = 5;

// The domain of every table: the 65536 bf16 words in order.
const Array& all_words() {
  static const Array a = [] {
    Array w(DType::bf16, {kWords});
    uint16_t* d = w.data<uint16_t>();
    for (int64_t i = 0; i < kWords; ++i) d[i] = uint16_t(i);
    return w;
  }();
  return a;
}

// The table of value f of p, a function of the bf16 value `root` and scalars through the
// instructions `cone` (slot order, f last; operands already through `al`): built by
// running those instructions as a program over all_words(), or taken from the cache.
// Entries past the last word are zero (a lookup's gather reads a word beyond its own).
Array table_of(const Program& p, const std::vector<Array>& in, const std::vector<int>& al, int root,
               const std::vector<int>& cone, std::string& key) {
  Program sp;
  sp.n = kWords;
  std::vector<Array> sin{all_words()};
  std::vector<int> map(p.code.size(), -1);
  key.clear();
  auto put = [&](int64_t v) { key.append(reinterpret_cast<const char*>(&v), sizeof v); };
  sp.loads.push_back(Load{0, kFull, 1, {kWords}, {1}});
  sp.code.push_back(Instr{kLoad, DType::bf16, DType::bf16, 0, -1, -1, 0});
  map[root] = 0;
  auto slot = [&](int64_t o) -> int64_t {  // an operand's slot in sp (scalars loaded on first use)
    const int s = al[o];
    if (map[s] >= 0) return map[s];
    const Instr& li = p.code[s];  // a scalar load (the cone stops only at the root and at scalars)
    const Load& l = p.loads[li.a];
    Load nl = l;
    nl.input = int(sin.size());
    sin.push_back(in[l.input]);
    sp.loads.push_back(nl);
    Instr ni = li;
    ni.a = int64_t(sp.loads.size()) - 1;
    sp.code.push_back(ni);
    map[s] = int(sp.code.size()) - 1;
    const size_t sz = itemsize(li.d);
    std::string bits(sz, '\0');
    std::memcpy(bits.data(), in[l.input].raw(), sz);  // the scalar's value is part of the key
    put(int64_t(li.d));
    key += bits;
    return map[s];
  };
  for (int k : cone) {
    Instr ni = p.code[k];
    const int no = nops_of(ni);
    if (no > 0) ni.a = slot(ni.a);
    if (no > 1) ni.b = slot(ni.b);
    if (no > 2) ni.c = slot(ni.c);
    sp.code.push_back(ni);
    map[k] = int(sp.code.size()) - 1;
  }
  sp.outs.push_back(Out{map[cone.back()], {kWords}});
  sp.reduced.assign(1, 0);
  for (const Instr& i : sp.code) for (int64_t v : {i.op, int64_t(i.d), int64_t(i.rd), i.a, i.b, i.c, i.imm}) put(v);

  static std::mutex mu;
  static std::unordered_map<std::string, Array> cache;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  Array t(DType::bf16, {kWords + 32});
  std::vector<Array> sout{Array(DType::bf16, {kWords}, t.raw(), t.storage())};
  run_program(sp, sin, sout, false);
  std::memset(t.data<uint16_t>() + kWords, 0, 32 * 2);
  if (cache.size() >= 1024) cache.clear();  // bounded: 1024 tables are 128 MB
  cache.emplace(key, t);
  g_tables_built.fetch_add(1, std::memory_order_relaxed);
  return t;
}

// Two tables of one root as one: entry i is the words a[i], b[i] side by side, so one
// 32-bit gather at 4 x index reads both (kTable imm 1 and 2). Cached by both keys.
Array pair_table(const std::string& ka, const Array& a, const std::string& kb, const Array& b) {
  static std::mutex mu;
  static std::unordered_map<std::string, Array> cache;
  const int64_t na = int64_t(ka.size());
  std::string key(reinterpret_cast<const char*>(&na), sizeof na);  // where the first key ends
  key += ka;
  key += kb;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  Array t(DType::bf16, {2 * kWords});
  uint16_t* d = t.data<uint16_t>();
  const uint16_t *x = a.data<uint16_t>(), *y = b.data<uint16_t>();
  for (int64_t i = 0; i < kWords; ++i) {
    d[2 * i] = x[i];
    d[2 * i + 1] = y[i];
  }
  if (cache.size() >= 512) cache.clear();  // bounded: 512 pair tables are 128 MB
  cache.emplace(std::move(key), t);
  return t;
}

// Replaces the values of p worth a table by kTable instructions (their tables appended
// to `in` and to p.loads as kTableBase loads), drops the instructions nothing reads any
// more, and returns how many tables it used.
int tabulate(Program& p, std::vector<Array>& in) {
  const int S = int(p.code.size());
  constexpr int kConst = -2, kMany = -1;
  // al: an identity convert is its operand (the same register). word: the value is a
  // bf16 word (a bf16 load, or a result rounded to bf16). src: the one word the value is
  // a function of, with scalars (kConst: of scalars only; kMany: of more), the furthest
  // up the chain.
  std::vector<int> al(S), src(S, kMany);
  std::vector<char> word(S, 0);
  for (int k = 0; k < S; ++k) {
    const Instr& ins = p.code[k];
    const bool identity = identity_convert(ins);
    al[k] = identity ? al[ins.a] : k;
    if (al[k] != k) { word[k] = word[al[k]]; src[k] = src[al[k]]; continue; }
    if (ins.op == kLoad) {
      if (p.loads[ins.a].kind == kScalar) { src[k] = kConst; continue; }
      word[k] = ins.d == DType::bf16;
      src[k] = word[k] ? k : kMany;
      continue;
    }
    word[k] = ins.rd == DType::bf16 && (rounds_result(ins.op) || ins.op == kConvert);
    int s = kConst;
    const int64_t ops[3] = {ins.a, ins.b, ins.c};
    for (int q = 0; q < nops_of(ins) && s != kMany; ++q) {
      const int o = al[ops[q]];
      const int r = src[o] != kMany ? src[o] : word[o] ? o : kMany;
      if (r == kConst) continue;
      s = r == kMany || (s >= 0 && s != r) ? kMany : r;
    }
    src[k] = s;
  }
  // The values read by the outputs, and their readers.
  std::vector<char> live(S, 0), is_out(S, 0);
  for (const Out& o : p.outs) live[al[o.slot]] = is_out[al[o.slot]] = 1;
  std::vector<std::vector<int>> readers(S);
  for (int k = S - 1; k >= 0; --k) {
    const Instr& ins = p.code[k];
    if (!live[k] || ins.op == kLoad || al[k] != k) continue;
    const int64_t ops[3] = {ins.a, ins.b, ins.c};
    for (int q = 0; q < nops_of(ins); ++q) {
      live[al[ops[q]]] = 1;
      readers[al[ops[q]]].push_back(k);
    }
  }
  // Candidates, in slot order: words of one root read where the root is not the only
  // input (or stored). Each takes a table when what computing it would add to the
  // values already there (earlier candidates, their cones) costs more than a lookup.
  // Depth first over the operands (through aliases) from `from`: visit(k) for every
  // instruction reached, loads and those stop(k) ends at excepted.
  auto walk = [&](int from, auto&& stop, auto&& visit) {
    std::vector<char> seen(S, 0);
    std::vector<int> stack{from};
    while (!stack.empty()) {
      const int k = stack.back();
      stack.pop_back();
      const Instr& ins = p.code[k];
      if (seen[k] || ins.op == kLoad || stop(k)) continue;
      seen[k] = 1;
      visit(k);
      const int64_t ops[3] = {ins.a, ins.b, ins.c};
      for (int q = 0; q < nops_of(ins); ++q) stack.push_back(al[ops[q]]);
    }
  };
  std::vector<char> have(S, 0);
  std::vector<std::pair<int, std::vector<int>>> plan;  // (value, its whole cone)
  // An output of one root that no table can give (f32, bool) is computed, its cone with it.
  for (const Out& o : p.outs)
    if (const int k0 = al[o.slot]; !word[k0] && src[k0] >= 0)
      walk(k0, [&](int k) { return bool(have[k]); }, [&](int k) { have[k] = 1; });
  // A value a table could give: a word of one root that something other than the root's
  // values reads (or an output).
  auto frontier = [&](int f) {
    const int r = src[f];
    if (!live[f] || al[f] != f || !word[f] || r < 0 || r == f || p.code[f].op == kLoad) return false;
    bool any = is_out[f];
    for (int j : readers[f]) any |= src[j] != r;
    return any;
  };
  // f's whole cone down to its root and scalars, in slot order: its table's program.
  auto cone_of = [&](int f) {
    std::vector<int> cone;
    walk(f, [&](int k) { return k == src[f]; }, [&](int k) { cone.push_back(k); });
    std::sort(cone.begin(), cone.end());
    return cone;
  };
  for (int f = 0; f < S; ++f) {
    const int r = src[f];
    if (have[f] || !frontier(f)) continue;
    // The part of the cone not computed yet, stopping at values computed or tabulated
    // already: what it costs here.
    std::vector<int> fresh;
    double cost = 0;
    walk(f, [&](int k) { return k == r || (have[k] && k != f); }, [&](int k) {
      fresh.push_back(k);
      cost += op_cost(p.code[k]);
    });
    if (cost >= kTableMinCost) {
      plan.emplace_back(f, cone_of(f));
      have[f] = 1;
    } else {
      for (int k : fresh) have[k] = 1;
    }
  }
  if (plan.empty()) return 0;
  // Tables of one root pair up: one gather reads both (a lookup costs about as much as
  // the ~10 operations a table is worth, and most of it is the gather's loads). A root
  // left with an odd number takes one more of its values as the last one's partner, for
  // free: the frontier value whose computing costs the most (down to the root and the
  // tables).
  {
    std::vector<char> planned(S, 0);
    std::vector<int> count(S, 0);
    for (auto& e : plan) planned[e.first] = 1, ++count[src[e.first]];
    for (int r = 0; r < S; ++r) {
      if (count[r] % 2 == 0) continue;
      int best = -1;
      double best_cost = 0;
      for (int f = 0; f < S; ++f) {
        if (src[f] != r || planned[f] || !frontier(f)) continue;
        double cost = 0;
        walk(f, [&](int k) { return k == r || (planned[k] && k != f); }, [&](int k) { cost += op_cost(p.code[k]); });
        if (cost > best_cost) best = f, best_cost = cost;
      }
      if (best < 0) continue;
      plan.emplace_back(best, cone_of(best));
      planned[best] = 1;
    }
  }
  std::sort(plan.begin(), plan.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  // Every table from the instructions as they are, then the rewrite (a later table's cone
  // may hold an earlier table's value).
  std::vector<Array> tables;
  std::vector<std::string> keys(plan.size());
  for (size_t t = 0; t < plan.size(); ++t) tables.push_back(table_of(p, in, al, src[plan[t].first], plan[t].second, keys[t]));
  std::vector<int> after(S, -1);  // after[f]: its pair's second value, placed right after f
  std::vector<char> moved(S, 0);
  std::vector<char> paired(plan.size(), 0);
  for (size_t t = 0; t < plan.size(); ++t) {
    if (paired[t]) continue;
    const int f = plan[t].first;
    size_t u = t + 1;
    while (u < plan.size() && (paired[u] || src[plan[u].first] != src[f])) ++u;
    Load tl;
    tl.input = int(in.size());
    tl.kind = kTableBase;
    p.loads.push_back(tl);
    const int64_t li = int64_t(p.loads.size()) - 1;
    if (u < plan.size()) {
      const int g = plan[u].first;
      paired[u] = 1;
      in.push_back(pair_table(keys[t], tables[t], keys[u], tables[u]));
      p.code[f] = Instr{kTable, DType::bf16, DType::bf16, src[f], li, -1, 1};
      p.code[g] = Instr{kTable, DType::bf16, DType::bf16, src[g], li, -1, 2};
      after[f] = g;
      moved[g] = 1;
      g_tables_paired.fetch_add(2, std::memory_order_relaxed);
    } else {
      in.push_back(tables[t]);
      p.code[f] = Instr{kTable, DType::bf16, DType::bf16, src[f], li, -1, 0};
    }
  }
  g_tables_used.fetch_add(int64_t(plan.size()), std::memory_order_relaxed);
  // Drop what no output reads any more (the tables' cones), renumbering the slots.
  std::vector<char> keep(S, 0);
  for (const Out& o : p.outs) keep[o.slot] = 1;
  for (int k = S - 1; k >= 0; --k) {
    if (!keep[k]) continue;
    const Instr& ins = p.code[k];
    if (ins.op == kLoad) continue;
    const int64_t ops[3] = {ins.a, ins.b, ins.c};
    for (int q = 0; q < nops_of(ins); ++q) keep[ops[q]] = 1;
  }
  std::vector<int> order;  // slot order, a pair's second value moved up beside its first
  for (int k = 0; k < S; ++k) {
    if (keep[k] && !moved[k]) order.push_back(k);
    if (after[k] >= 0 && keep[after[k]]) order.push_back(after[k]);
  }
  std::vector<int64_t> renum(S, -1);
  std::vector<Instr> code;
  for (int k : order) {
    Instr ins = p.code[k];
    if (ins.op != kLoad) {
      const int no = nops_of(ins);
      if (no > 0) ins.a = renum[ins.a];
      if (no > 1) ins.b = renum[ins.b];
      if (no > 2) ins.c = renum[ins.c];
    }
    renum[k] = int64_t(code.size());
    code.push_back(ins);
  }
  p.code = std::move(code);
  for (Out& o : p.outs) o.slot = int(renum[o.slot]);
  return int(plan.size());
}


std::vector<AVal> fused_shape(const std::vector<AVal>& in, const Attrs& a) {
  const Program p = parse(a);
  for (auto& ins : p.code) {
    if (ins.op != kLoad) continue;
    if (ins.a < 0 || ins.a >= int64_t(p.loads.size()) || p.loads[ins.a].input >= int(in.size()))
      throw ValueError("fused_elementwise: load of a missing input");
    if (in[p.loads[ins.a].input].dtype != ins.d)
      throw DTypeError(fmt("fused_elementwise: input ", p.loads[ins.a].input, " is ",
                           dtype_name(in[p.loads[ins.a].input].dtype), ", the program expects ", dtype_name(ins.d)));
  }
  if (p.rinner && (p.rinner < 1 || p.n % p.rinner))
    throw ShapeError(fmt("fused_elementwise: reduce_inner ", p.rinner, " does not divide the iteration space ", p.n));
  std::vector<AVal> out;
  for (size_t o = 0; o < p.outs.size(); ++o) {
    const Out& ou = p.outs[o];
    const DType d = p.code.at(ou.slot).rd;
    if (p.reduced[o]) {
      if (numel(ou.shape) != p.rinner) throw ShapeError("fused_elementwise: reduced output size differs from reduce_inner");
      if (d != DType::f32 && d != DType::bf16) throw DTypeError("fused_elementwise: reductions of float32/bfloat16 only");
    } else if (numel(ou.shape) != p.n) {
      throw ShapeError("fused_elementwise: output size differs from the iteration space");
    }
    out.push_back(AVal{d, ou.shape});
  }
  return out;
}

// vmap: the iteration space gets the mapped axis in front. A batched input (contiguous
// [B, ...]) is loaded with stride = its element size along it, an unbatched one with
// stride 0; outputs get it in front. Same instructions per element, same bits. A program
// with reduced outputs (column sums over the whole space) runs as the batched loop
// (batching::looped) instead, each element reduced on its own.
std::vector<int> fused_batch(Graph& g, const BatchCtx& c, const std::vector<int>& in, const std::vector<int>& bd,
                             std::vector<int>& ob) {
  const Attrs& a = c.n.attrs;
  if (a.has("vmap_size") || !a.ints("reduced", {}).empty()) return batching::loop_rule(g, c, in, bd, ob);
  const int64_t B = c.size;
  std::vector<int64_t> loads, outs;
  for (const LoadSpec& l : decode_loads(a.ints("loads"))) {
    Shape dims = batching::with_batch(l.dims, B), st = l.st;
    st.insert(st.begin(), bd.at(l.input) >= 0 ? c.in_avals.at(l.input).size() : 0);
    append_load(loads, l.input, dims, st);
  }
  for (const OutSpec& o : decode_outs(a.ints("outs"))) append_out(outs, o.slot, batching::with_batch(o.shape, B));
  Attrs b = a;
  b.set("n", a.i("n") * B);
  b.set("loads", loads);
  b.set("outs", outs);
  b.set("flops", a.f("flops", 0.0) * double(B));
  return batching::reapply(g, c, in, b, ob);
}

static Register reg_fused("fused_elementwise", batching::looped(PrimDef{
    .shape = fused_shape,
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
      run_program(parse(a), in, out);
    },
    .vjp = nullptr,  // fusion runs on graphs about to execute, after autodiff
    .flops = [](const std::vector<AVal>&, const std::vector<AVal>&, const Attrs& a) { return a.f("flops", 0.0); },
    .batch = fused_batch}));

}  // namespace

namespace fused_tables {
bool enabled() {
  int e = g_tables_on.load();
  if (e < 0) {
    const char* v = std::getenv("PODLET_FUSED_TABLES");
    e = !(v && std::strcmp(v, "0") == 0);
    g_tables_on = e;
  }
  return e;
}
void set_enabled(bool on) { g_tables_on = on ? 1 : 0; }
Stats stats() { return Stats{g_tables_built.load(), g_tables_used.load(), g_table_runs.load(), g_tables_paired.load()}; }
}  // namespace fused_tables
}  // namespace podlet
