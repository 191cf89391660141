// fused_elementwise: a chain of elementwise primitives evaluated in one pass over the
// output (the program format is in ir/fusion.h; the pass that builds it in ir/fusion.cc).
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
#pragma GCC optimize("no-trapping-math")  // as elementwise.cc: lets GCC vectorise float selects
#include "podlet/prims/common.h"
#include "podlet/ir/fusion.h"
#include "podlet/kernels/fastmath.h"
#include <cmath>
#include <limits>
#include <memory>

namespace podlet {
namespace {

using namespace fused;
namespace fm = kernels::fm;
using kernels::round_bf16;

constexpr int64_t kTile = 512;            // elements per register
constexpr int64_t kChunk = 16 * kTile;    // elements per parallel chunk (fixed: bits do not depend on threads)

// Register (physical) type of each dtype.
template <DType D> struct phys { using type = float; };
template <> struct phys<DType::f64> { using type = double; };
template <> struct phys<DType::i32> { using type = int32_t; };
template <> struct phys<DType::u32> { using type = uint32_t; };
template <> struct phys<DType::u8> { using type = uint8_t; };
// bool as a 32-bit 0/1: compares and selects on f32 registers then vectorise (a byte
// mask next to 4-byte data does not, on SSE2).
template <> struct phys<DType::boolean> { using type = uint32_t; };
template <DType D> using P = typename phys<D>::type;

size_t phys_size(DType d) { return d == DType::bf16 || d == DType::boolean ? 4 : itemsize(d); }
// Whether the register layout equals the storage layout (the value can be read or
// written in place).
bool same_layout(DType d) { return d != DType::bf16 && d != DType::boolean; }

template <class F>
void dtype_switch(DType d, F&& f) {
  switch (d) {
    case DType::f32: f(std::integral_constant<DType, DType::f32>{}); return;
    case DType::bf16: f(std::integral_constant<DType, DType::bf16>{}); return;
    case DType::f64: f(std::integral_constant<DType, DType::f64>{}); return;
    case DType::i32: f(std::integral_constant<DType, DType::i32>{}); return;
    case DType::u32: f(std::integral_constant<DType, DType::u32>{}); return;
    case DType::u8: f(std::integral_constant<DType, DType::u8>{}); return;
    case DType::boolean: f(std::integral_constant<DType, DType::boolean>{}); return;
    default: throw DTypeError(fmt("fused_elementwise: unsupported dtype ", dtype_name(d)));
  }
}

// ---- program ------------------------------------------------------------------------
struct Instr { int64_t op; DType d, rd; int64_t a, b, c, imm; };
enum LoadKind { kFull, kScalar, kPeriodic, kRowConst, kGeneral };
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

Program parse(const Attrs& a) {
  Program p;
  p.n = a.i("n");
  const auto code = a.ints("code");
  for (size_t k = 0; k + kInstrWidth <= code.size(); k += kInstrWidth)
    p.code.push_back(Instr{code[k], DType(code[k + 1]), DType(code[k + 2]), code[k + 3], code[k + 4], code[k + 5],
                           code[k + 6]});
  const auto loads = a.ints("loads");
  for (size_t k = 0; k < loads.size();) {
    const int input = int(loads[k]);
    const int64_t r = loads[k + 1];
    Shape dims(loads.begin() + k + 2, loads.begin() + k + 2 + r);
    Shape st(loads.begin() + k + 2 + r, loads.begin() + k + 2 + 2 * r);
    p.loads.push_back(classify(input, dims, st));
    k += 2 + 2 * r;
  }
  const auto outs = a.ints("outs");
  for (size_t k = 0; k < outs.size();) {
    const int64_t r = outs[k + 1];
    p.outs.push_back(Out{int(outs[k]), Shape(outs.begin() + k + 2, outs.begin() + k + 2 + r)});
    k += 2 + r;
  }
  return p;
}

// ---- element ops (the scalar code of elementwise.cc) -----------------------------------
template <class A> inline A do_max(A x, A y) { const A r = x > y ? x : y; return x != x ? x : r; }
template <class A> inline A do_min(A x, A y) { const A r = x < y ? x : y; return x != x ? x : r; }

template <class A>
void unary_float(int64_t op, const A* a, A* d, int64_t m, int64_t imm) {
  constexpr bool F = std::is_same_v<A, float>;
#define LOOP(EXPR) for (int64_t j = 0; j < m; ++j) { const A x = a[j]; d[j] = (EXPR); } break;
  switch (op) {
    case kNeg: LOOP(-x)
    case kAbs: if constexpr (F) { LOOP(fm::fabs_(x)) } else { LOOP(__builtin_fabs(x)) }
    case kSign: LOOP(x < 0 ? A(-1) : (x > 0 ? A(1) : x))
    case kExp: if constexpr (F) { LOOP(fm::exp(x)) } else { LOOP(std::exp(x)) }
    case kLog: if constexpr (F) { LOOP(fm::log(x)) } else { LOOP(std::log(x)) }
    case kLog1p: LOOP(std::log1p(x))
    case kExpm1: LOOP(std::expm1(x))
    case kTanh: if constexpr (F) { LOOP(fm::tanh(x)) } else { LOOP(std::tanh(x)) }
    case kLogistic: if constexpr (F) { LOOP(fm::logistic(x)) } else { LOOP(kernels::logistic_f64(x)) }
    case kSqrt: if constexpr (F) { LOOP(__builtin_sqrtf(x)) } else { LOOP(__builtin_sqrt(x)) }
    case kRsqrt: if constexpr (F) { LOOP(1.0f / __builtin_sqrtf(x)) } else { LOOP(1.0 / __builtin_sqrt(x)) }
    case kErf: if constexpr (F) { LOOP(fm::erf(x)) } else { LOOP(std::erf(x)) }
    case kFloor: if constexpr (F) { LOOP(fm::floor(x)) } else { LOOP(std::floor(x)) }
    case kCeil: if constexpr (F) { LOOP(fm::ceil(x)) } else { LOOP(std::ceil(x)) }
    case kIntPow: {
      // Repeated squaring in jax's multiplication order; y < 0 gives 1 / x^|y|.
      const uint64_t e = uint64_t(imm < 0 ? -imm : imm);
      for (int64_t j = 0; j < m; ++j) {
        A acc = A(1), b = a[j];
        for (uint64_t k = e; k > 0;) {
          if (k & 1) acc = acc * b;
          k >>= 1;
          if (k) b = b * b;
        }
        d[j] = imm < 0 ? A(1) / acc : acc;
      }
      break;
    }
    default: throw ValueError(fmt("fused_elementwise: bad unary opcode ", op));
  }
#undef LOOP
}

template <class A>
void binary_float(int64_t op, const A* a, const A* b, A* d, int64_t m) {
#define LOOP(EXPR) for (int64_t j = 0; j < m; ++j) { const A x = a[j], y = b[j]; d[j] = (EXPR); } break;
  switch (op) {
    case kAdd: LOOP(x + y)
    case kSub: LOOP(x - y)
    case kMul: LOOP(x * y)
    case kDiv: LOOP(x / y)
    case kMax: LOOP(do_max(x, y))
    case kMin: LOOP(do_min(x, y))
    case kPow: LOOP(std::pow(x, y))
    default: throw ValueError(fmt("fused_elementwise: bad binary opcode ", op));
  }
#undef LOOP
}

template <class A>
void compare(int64_t op, const A* a, const A* b, uint32_t* d, int64_t m) {
#define LOOP(OP) for (int64_t j = 0; j < m; ++j) d[j] = uint32_t(a[j] OP b[j]); break;
  switch (op) {
    case kEq: LOOP(==)
    case kNe: LOOP(!=)
    case kLt: LOOP(<)
    case kLe: LOOP(<=)
    case kGt: LOOP(>)
    case kGe: LOOP(>=)
    default: throw ValueError(fmt("fused_elementwise: bad compare opcode ", op));
  }
#undef LOOP
}

template <DType SD, DType DD> inline P<DD> convert1(P<SD> x) {
  using D = P<DD>;
  if constexpr (SD == DD) return x;
  else if constexpr (DD == DType::boolean) return uint32_t(x != P<SD>(0));  // NaN -> true
  else if constexpr (DD == DType::bf16) return round_bf16(float(x));        // through f32, like ml_dtypes
  else if constexpr (DD == DType::f32 || DD == DType::f64) return D(x);
  else if constexpr (SD == DType::f32 || SD == DType::bf16 || SD == DType::f64) {
    // float -> int saturates, NaN -> 0 (XLA); the clamp is exact in double.
    double v = double(x);
    constexpr double lo = double(std::numeric_limits<D>::min()), hi = double(std::numeric_limits<D>::max());
    v = v < lo ? lo : v;
    v = v > hi ? hi : v;
    v = v == v ? v : 0.0;
    if constexpr (DD == DType::u32) return uint32_t(int32_t(v >= 2147483648.0 ? v - 4294967296.0 : v));
    else return D(int32_t(v));
  } else {
    return D(x);  // int/bool -> int wraps
  }
}

void convert(DType sd, const void* a, DType dd, void* d, int64_t m) {
  dtype_switch(sd, [&](auto s) {
    dtype_switch(dd, [&](auto t) {
      constexpr DType S = decltype(s)::value, T = decltype(t)::value;
      const P<S>* x = static_cast<const P<S>*>(a);
      P<T>* y = static_cast<P<T>*>(d);
      for (int64_t j = 0; j < m; ++j) y[j] = convert1<S, T>(x[j]);
    });
  });
}

void round_to_bf16(float* d, int64_t m) {
  for (int64_t j = 0; j < m; ++j) d[j] = round_bf16(d[j]);
}

// Storage -> register for `m` elements at element offsets `off` (or contiguous from
// `base` when off is null).
void load_elems(DType dt, const void* src, int64_t base, const int64_t* off, void* dst, int64_t m) {
  if (dt == DType::bf16) {
    const uint16_t* s = static_cast<const uint16_t*>(src);
    float* d = static_cast<float*>(dst);
    if (off) for (int64_t j = 0; j < m; ++j) d[j] = kernels::bf16_bits_to_f32(s[off[j]]);
    else for (int64_t j = 0; j < m; ++j) d[j] = kernels::bf16_bits_to_f32(s[base + j]);
    return;
  }
  if (dt == DType::boolean) {
    const uint8_t* s = static_cast<const uint8_t*>(src);
    uint32_t* d = static_cast<uint32_t*>(dst);
    if (off) for (int64_t j = 0; j < m; ++j) d[j] = s[off[j]];
    else for (int64_t j = 0; j < m; ++j) d[j] = s[base + j];
    return;
  }
  const size_t isz = itemsize(dt);
  auto gather = [&](auto tag) {
    using T = decltype(tag);
    const T* s = static_cast<const T*>(src);
    T* d = static_cast<T*>(dst);
    if (off) for (int64_t j = 0; j < m; ++j) d[j] = s[off[j]];
    else std::memcpy(d, s + base, size_t(m) * sizeof(T));
  };
  switch (isz) {
    case 1: gather(uint8_t()); break;
    case 4: gather(uint32_t()); break;
    default: gather(uint64_t()); break;
  }
}

void store_elems(DType dt, const void* reg, void* dst, int64_t base, int64_t m) {
  if (dt == DType::bf16) {
    const float* s = static_cast<const float*>(reg);
    uint16_t* d = static_cast<uint16_t*>(dst) + base;
    // The register holds an exact bf16 value: its top half is the bf16 (NaN payloads too).
    for (int64_t j = 0; j < m; ++j) d[j] = uint16_t(__builtin_bit_cast(uint32_t, s[j]) >> 16);
    return;
  }
  if (dt == DType::boolean) {
    const uint32_t* s = static_cast<const uint32_t*>(reg);
    uint8_t* d = static_cast<uint8_t*>(dst) + base;
    for (int64_t j = 0; j < m; ++j) d[j] = uint8_t(s[j]);
    return;
  }
  const size_t isz = itemsize(dt);
  std::memcpy(static_cast<char*>(dst) + base * isz, reg, size_t(m) * isz);
}

// ---- the kernel ---------------------------------------------------------------------------
void run_program(const Program& p, const std::vector<Array>& in, std::vector<Array>& out) {
  const int S = int(p.code.size());
  // Where each slot lives: a pooled tile buffer, a dedicated (scalar) buffer, its input
  // in place, or its output in place.
  enum Home { kPooled, kDedicated, kInput, kOutput };
  std::vector<Home> home(S, kPooled);
  std::vector<int> buf(S, -1);
  std::vector<int> direct_out(S, -1);
  std::vector<std::vector<int>> stores(S);  // outputs to store from this slot
  std::vector<int> last_use(S, -1);
  for (int k = 0; k < S; ++k) {
    const Instr& ins = p.code[k];
    if (ins.op == kLoad) continue;
    const int nops = ins.op == kSelect || ins.op == kClamp ? 3 : (ins.op < kAdd ? 1 : 2);
    const int64_t ops[3] = {ins.a, ins.b, ins.c};
    for (int q = 0; q < nops; ++q) last_use[ops[q]] = k;
  }
  for (size_t o = 0; o < p.outs.size(); ++o) {
    const int s = p.outs[o].slot;
    const Instr& ins = p.code[s];
    if (ins.op != kLoad && same_layout(ins.rd) && direct_out[s] < 0) { direct_out[s] = int(o); home[s] = kOutput; }
    else stores[s].push_back(int(o));
  }
  int nbuf = 0;
  std::vector<int> free_list;
  for (int k = 0; k < S; ++k) {
    const Instr& ins = p.code[k];
    if (ins.op == kLoad) {
      const Load& l = p.loads[ins.a];
      // Tiles start at multiples of kTile, so a pattern whose period divides kTile is
      // the same in every tile: filled once per chunk, like a scalar.
      if (l.kind == kScalar || (l.kind == kPeriodic && kTile % l.period == 0)) {
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
      const int nops = ins.op == kSelect || ins.op == kClamp ? 3 : (ins.op < kAdd ? 1 : 2);
      const int64_t ops[3] = {ins.a, ins.b, ins.c};
      for (int q = 0; q < nops; ++q) {
        const int s = int(ops[q]);
        bool dup = false;
        for (int r = 0; r < q; ++r) dup |= ops[r] == s;
        if (!dup && last_use[s] == k && home[s] == kPooled) free_list.push_back(buf[s]);
      }
    }
    if (last_use[k] < 0 && home[k] == kPooled) free_list.push_back(buf[k]);  // dead or only stored
  }

  const int64_t n = p.n;
  parallel_for(n, kChunk, [&](int64_t cb, int64_t ce) {
    // 8 bytes per element: any register type. Not zeroed: every element is written first.
    std::unique_ptr<double[]> pool(new double[size_t(std::max(nbuf, 1)) * kTile]);
    auto bufp = [&](int b) -> void* { return pool.get() + size_t(b) * kTile; };
    std::vector<void*> ptr(S, nullptr);
    std::vector<int64_t> off(kTile);
    // Scalars and tile-invariant patterns: filled once per chunk.
    for (int k = 0; k < S; ++k) {
      if (home[k] != kDedicated) continue;
      const Instr& ins = p.code[k];
      const Load& l = p.loads[ins.a];
      void* d = bufp(buf[k]);
      const size_t ps = phys_size(ins.d);
      const int64_t period = l.kind == kScalar ? 1 : l.period;
      load_elems(ins.d, in[l.input].raw(), 0, nullptr, d, period);
      for (int64_t j = period; j < kTile; j += period) std::memcpy(static_cast<char*>(d) + j * ps, d, period * ps);
      ptr[k] = d;
    }
    for (int64_t t0 = cb; t0 < ce; t0 += kTile) {
      const int64_t m = std::min(kTile, ce - t0);
      for (int k = 0; k < S; ++k) {
        const Instr& ins = p.code[k];
        if (ins.op == kLoad) {
          const Load& l = p.loads[ins.a];
          const void* src = in[l.input].raw();
          switch (l.kind) {
            case kScalar: break;
            case kFull:
              if (home[k] == kInput) ptr[k] = const_cast<char*>(static_cast<const char*>(src) + t0 * itemsize(ins.d));
              else { ptr[k] = bufp(buf[k]); load_elems(ins.d, src, t0, nullptr, ptr[k], m); }
              break;
            case kPeriodic: {  // contiguous runs of the period
              ptr[k] = bufp(buf[k]);
              const size_t ps = phys_size(ins.d);
              int64_t o = t0 % l.period;
              for (int64_t j = 0; j < m;) {
                const int64_t run = std::min(m - j, l.period - o);
                load_elems(ins.d, src, o, nullptr, static_cast<char*>(ptr[k]) + j * ps, run);
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
                load_elems(ins.d, src, r, nullptr, d, 1);
                for (int64_t q = 1; q < run; ++q) std::memcpy(d + q * ps, d, ps);
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
              ptr[k] = bufp(buf[k]); load_elems(ins.d, src, 0, off.data(), ptr[k], m);
              break;
            }
          }
        } else {
          void* d = home[k] == kOutput
                        ? static_cast<char*>(out[direct_out[k]].raw()) + t0 * itemsize(ins.rd)
                        : bufp(buf[k]);
          const void* a = ptr[ins.a];
          const void* b = ins.op >= kAdd ? ptr[ins.b] : nullptr;
          const void* c = ins.op == kSelect || ins.op == kClamp ? ptr[ins.c] : nullptr;
          const int64_t op = ins.op;
          if (op == kConvert) {
            convert(ins.d, a, ins.rd, d, m);
          } else if (op == kSelect) {
            const uint32_t* pr = static_cast<const uint32_t*>(a);
            // Branch-free (both operands read, a mask picks): a branch on random
            // predicates mispredicts half the time, and this form vectorises.
            auto sel = [&](auto tag) {
              using W = decltype(tag);
              auto x = static_cast<const W*>(b), y = static_cast<const W*>(c);
              auto z = static_cast<W*>(d);
              for (int64_t j = 0; j < m; ++j) {
                const W mk = W(0) - W(pr[j]);
                z[j] = (x[j] & mk) | (y[j] & ~mk);
              }
            };
            switch (phys_size(ins.rd)) {
              case 1: sel(uint8_t()); break;
              case 4: sel(uint32_t()); break;
              default: sel(uint64_t()); break;
            }
          } else if (op >= kEq && op <= kGe) {
            dtype_switch(ins.d, [&](auto t) {
              using A = P<decltype(t)::value>;
              compare<A>(op, static_cast<const A*>(a), static_cast<const A*>(b), static_cast<uint32_t*>(d), m);
            });
          } else if (op == kAnd || op == kOr || op == kXor || op == kNot) {
            auto x = static_cast<const uint32_t*>(a), y = static_cast<const uint32_t*>(b);
            auto z = static_cast<uint32_t*>(d);
            if (op == kAnd) for (int64_t j = 0; j < m; ++j) z[j] = x[j] & y[j];
            else if (op == kOr) for (int64_t j = 0; j < m; ++j) z[j] = x[j] | y[j];
            else if (op == kXor) for (int64_t j = 0; j < m; ++j) z[j] = x[j] ^ y[j];
            else for (int64_t j = 0; j < m; ++j) z[j] = !x[j];
          } else if (op == kIsFinite) {
            auto z = static_cast<uint32_t*>(d);
            if (ins.d == DType::f64) { auto x = static_cast<const double*>(a); for (int64_t j = 0; j < m; ++j) z[j] = (x[j] - x[j]) == (x[j] - x[j]); }
            else { auto x = static_cast<const float*>(a); for (int64_t j = 0; j < m; ++j) z[j] = (x[j] - x[j]) == (x[j] - x[j]); }
          } else if (op == kClamp) {
            // clamp(lo, x, hi) = min(max(x, lo), hi)
            auto run = [&](auto tag) {
              using A = decltype(tag);
              auto lo = static_cast<const A*>(a), x = static_cast<const A*>(b), hi = static_cast<const A*>(c);
              auto z = static_cast<A*>(d);
              for (int64_t j = 0; j < m; ++j) z[j] = do_min(do_max(x[j], lo[j]), hi[j]);
            };
            if (ins.d == DType::f64) run(double()); else run(float());
            if (ins.rd == DType::bf16) round_to_bf16(static_cast<float*>(d), m);
          } else if (op < kAdd) {
            if (ins.d == DType::f64) unary_float<double>(op, static_cast<const double*>(a), static_cast<double*>(d), m, ins.imm);
            else unary_float<float>(op, static_cast<const float*>(a), static_cast<float*>(d), m, ins.imm);
            if (ins.rd == DType::bf16) round_to_bf16(static_cast<float*>(d), m);
          } else {
            if (ins.d == DType::f64) binary_float<double>(op, static_cast<const double*>(a), static_cast<const double*>(b), static_cast<double*>(d), m);
            else binary_float<float>(op, static_cast<const float*>(a), static_cast<const float*>(b), static_cast<float*>(d), m);
            if (ins.rd == DType::bf16) round_to_bf16(static_cast<float*>(d), m);
          }
          ptr[k] = d;
        }
        for (int o : stores[k]) store_elems(p.outs[o].slot == k ? ins.rd : ins.rd, ptr[k], out[o].raw(), t0, m);
      }
    }
  });
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
  std::vector<AVal> out;
  for (auto& o : p.outs) {
    if (numel(o.shape) != p.n) throw ShapeError("fused_elementwise: output size differs from the iteration space");
    out.push_back(AVal{p.code.at(o.slot).rd, o.shape});
  }
  return out;
}

static Register reg_fused("fused_elementwise", PrimDef{
    .shape = fused_shape,
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
      run_program(parse(a), in, out);
    },
    .vjp = nullptr,  // fusion runs on graphs about to execute, after autodiff
    .flops = [](const std::vector<AVal>&, const std::vector<AVal>&, const Attrs& a) { return a.f("flops", 0.0); }});

}  // namespace
}  // namespace podlet
