// Elementwise primitives with NumPy broadcasting: shape rule, kernel, VJP and FLOP count
// of each, registered at the bottom of this file in catalogue order.
//
// Semantics follow jax.lax / XLA:
//  * integer arithmetic wraps (two's complement); x / 0 is -1 (all ones for unsigned)
//    and x % 0 is x; INT_MIN / -1 is INT_MIN and INT_MIN % -1 is 0;
//  * shifts by an amount >= the bit width give 0 (arithmetic right shift: the sign fill);
//    shift_right_arithmetic of an unsigned type treats its bits as signed, like XLA;
//  * max / min / clamp propagate NaN;
//  * float -> int conversion saturates and maps NaN to 0; int -> narrower int wraps;
//    anything -> bfloat16 rounds to nearest even through float32 (like ml_dtypes and XLA),
//    NaN becomes the canonical quiet NaN with its sign kept (0x7fc0 / 0xffc0);
//  * derivatives are jax's: max/min split the cotangent on ties, abs'(0) = 1
//    (jax: select(x >= 0, g, -g)), pow wrt the exponent uses log(x) with x == 0 replaced
//    by 1, floor/ceil/round/sign have zero gradient.
//
// Kernels: bf16 is computed in f32 and rounded once. exp/log/tanh/logistic/erf/erf_inv
// and floor/ceil/round for f32/bf16 use the branch-free code in namespace fm below (exp,
// log <= 1 ulp, tanh/erf/logistic <= 2.5 ulp, erf_inv ~2.6 ulp as Giles' approximation
// is; the loops vectorise, and results do not depend on the machine's libm); f64 uses
// libm (erf_inv: Newton-refined, ~1e-16). Binary and ternary loops merge dimensions
// where the broadcast layout allows and specialise the innermost loop on its stride
// pattern (same shape, scalar operand, row broadcast): the common cases are plain
// vectorisable loops. Every loop is elementwise, so results are bit-identical for any
// thread count.
//
// FP exceptions are never observed in podlet. Without -fno-trapping-math GCC will not
// turn the floating-point selects of these loops into vector blends; results are
// unchanged (every IEEE operation is still evaluated as written). It comes before the
// includes so that the header templates our loops are inlined into (parallel_for) are
// compiled with it too: GCC inlines across differing FP options and then uses the
// caller's.
#pragma GCC optimize("no-trapping-math")
#include "podlet/prims/common.h"
#include "podlet/kernels/convert.h"
#include "podlet/kernels/fastmath.h"
#include "podlet/kernels/unary_math.h"
#include "podlet/cpu/isa.h"
#include "podlet/ir/batch_ops.h"
#include <array>
#include <cmath>
#include <limits>

namespace podlet {
namespace {

// =====================================================================================
// Branch-free f32 math, logistic_f64 and the bf16 rounding: kernels/fastmath.h, the one
// source the fused interpreter shares.
// =====================================================================================
namespace fm = kernels::fm;
using kernels::f32_to_bf16_bits;
using kernels::logistic_f64;

// erf^-1 in double: Giles' single-precision approximation as the starting point, then
// Newton on erf(y) = |x| for |x| <= 0.75 (2 steps), and for the tails Newton on
// log(erfc(y)) = log(1 - |x|), which converges from the rough start and keeps full
// relative accuracy where erf(y) is within an ulp of 1 (4 steps). ~1e-16 relative.
double erf_inv_f64(double x) {
  const double a = std::fabs(x);
  if (!(a < 1.0)) return a == 1.0 ? std::copysign(std::numeric_limits<double>::infinity(), x)
                                  : std::numeric_limits<double>::quiet_NaN();
  const double w = -std::log((1.0 - a) * (1.0 + a));
  double p;
  if (w < 5.0) {
    const double w1 = w - 2.5;
    p = 2.81022636e-08; p = 3.43273939e-07 + p * w1; p = -3.5233877e-06 + p * w1;
    p = -4.39150654e-06 + p * w1; p = 0.00021858087 + p * w1; p = -0.00125372503 + p * w1;
    p = -0.00417768164 + p * w1; p = 0.246640727 + p * w1; p = 1.50140941 + p * w1;
  } else {
    const double w2 = std::sqrt(w) - 3.0;
    p = -0.000200214257; p = 0.000100950558 + p * w2; p = 0.00134934322 + p * w2;
    p = -0.00367342844 + p * w2; p = 0.00573950773 + p * w2; p = -0.0076224613 + p * w2;
    p = 0.00943887047 + p * w2; p = 1.00167406 + p * w2; p = 2.83297682 + p * w2;
  }
  double y = p * a;
  constexpr double k = 1.1283791670955125739;  // 2 / sqrt(pi)
  if (a <= 0.75) {
    for (int i = 0; i < 2; ++i) y -= (std::erf(y) - a) / (k * std::exp(-y * y));
  } else {
    const double lq = std::log(1.0 - a);  // 1 - a is exact here
    for (int i = 0; i < 4; ++i) {
      const double e = std::erfc(y);
      y += (std::log(e) - lq) * e / (k * std::exp(-y * y));
    }
  }
  return std::copysign(y, x);
}

// Kernels see bf16 as its uint16_t bits (podlet has no uint16 dtype, so uint16_t always
// means bf16 here): GCC vectorises loops over plain integers, not over the bf16 struct.
// ar_t is the type the arithmetic happens in; ld / st convert one element (st rounds
// with f32_to_bf16_bits, so NaN results are canonical, as in ml_dtypes).
template <class S> using ar_t = std::conditional_t<std::is_same_v<S, uint16_t>, float, S>;
template <class S> inline ar_t<S> ld(S x) {
  if constexpr (std::is_same_v<S, uint16_t>) return __builtin_bit_cast(float, uint32_t(x) << 16);
  else return x;
}
template <class S> inline S st(ar_t<S> v) {
  if constexpr (std::is_same_v<S, uint16_t>) return f32_to_bf16_bits(v);
  else return S(v);
}

// =====================================================================================
// dtype kinds, checks, dispatch
// =====================================================================================
enum Kind : unsigned { kFloat = 1, kSInt = 2, kUInt = 4, kBool = 8 };
constexpr unsigned kInt = kSInt | kUInt, kNum = kFloat | kInt, kIntBool = kInt | kBool,
                   kAll = kNum | kBool;

unsigned kind_of(DType d) {
  switch (d) {
    case DType::f32: case DType::bf16: case DType::f64: return kFloat;
    case DType::i32: return kSInt;
    case DType::u32: case DType::u8: return kUInt;
    case DType::boolean: return kBool;
    default: return 0;
  }
}
const char* kinds_name(unsigned k) {
  switch (k) {
    case kFloat: return "a floating-point (float32, bfloat16, float64)";
    case kNum: return "a numeric (float or integer, not bool)";
    case kIntBool: return "an integer or bool";
    case kInt: return "an integer (int32, uint32, uint8)";
    default: return "a supported";
  }
}
void check_kind(DType d, unsigned kinds) {
  if (!(kind_of(d) & kinds))
    throw DTypeError(fmt("requires ", kinds_name(kinds), " dtype, got ", dtype_name(d)));
}

template <class T> struct Tag { using type = T; };
// Calls f(Tag<S>{}) for the kernel storage type of d (uint16_t for bf16); only
// instantiates the kinds in K.
template <unsigned K, class F>
void dispatch(DType d, F&& f) {
  switch (d) {
    case DType::f32: if constexpr (bool(K & kFloat)) { f(Tag<float>{}); return; } break;
    case DType::bf16: if constexpr (bool(K & kFloat)) { f(Tag<uint16_t>{}); return; } break;
    case DType::f64: if constexpr (bool(K & kFloat)) { f(Tag<double>{}); return; } break;
    case DType::i32: if constexpr (bool(K & kSInt)) { f(Tag<int32_t>{}); return; } break;
    case DType::u32: if constexpr (bool(K & kUInt)) { f(Tag<uint32_t>{}); return; } break;
    case DType::u8: if constexpr (bool(K & kUInt)) { f(Tag<uint8_t>{}); return; } break;
    case DType::boolean: if constexpr (bool(K & kBool)) { f(Tag<bool>{}); return; } break;
    default: break;
  }
  throw DTypeError(fmt("requires ", kinds_name(K), " dtype, got ", dtype_name(d)));
}

template <class A> constexpr bool is_f64 = std::is_same_v<A, double>;

// =====================================================================================
// shape rules
// =====================================================================================
template <unsigned K>
std::vector<AVal> unary_shape(const std::vector<AVal>& in, const Attrs&) {
  check_arity(in, 1);
  check_kind(in[0].dtype, K);
  return {in[0]};
}
template <unsigned K, bool ToBool = false>
std::vector<AVal> binary_shape(const std::vector<AVal>& in, const Attrs&) {
  check_arity(in, 2);
  check_same_dtype(in);
  check_kind(in[0].dtype, K);
  return {AVal{ToBool ? DType::boolean : in[0].dtype, broadcast_shapes(in[0].shape, in[1].shape)}};
}

// =====================================================================================
// loops
// =====================================================================================
// A broadcast loop nest over the output, with size-1 output dims dropped and adjacent
// dims merged wherever every operand is laid out compatibly, e.g. (64,56,56,128) + (128,)
// becomes [200704, 128] with strides {128,1} and {0,1}. The innermost stride of each
// operand is then 0 (broadcast) or 1 (contiguous).
template <int K>
struct Nest {
  Shape dims;                 // outermost first; never empty
  std::array<Shape, K> st;    // per operand: element stride of each dim
  int64_t inner() const { return dims.back(); }
};
template <int K>
Nest<K> make_nest(const Shape& out, const std::array<const Shape*, K>& ins) {
  std::array<Shape, K> s;
  for (int k = 0; k < K; ++k) s[k] = broadcast_strides(*ins[k], out);
  Nest<K> n;
  for (int d = int(out.size()) - 1; d >= 0; --d) {
    if (out[d] == 1) continue;
    if (!n.dims.empty()) {
      bool merge = true;
      for (int k = 0; k < K; ++k) merge &= s[k][d] == n.st[k].back() * n.dims.back();
      if (merge) { n.dims.back() *= out[d]; continue; }
    }
    n.dims.push_back(out[d]);
    for (int k = 0; k < K; ++k) n.st[k].push_back(s[k][d]);
  }
  if (n.dims.empty()) { n.dims.push_back(1); for (int k = 0; k < K; ++k) n.st[k].push_back(0); }
  std::reverse(n.dims.begin(), n.dims.end());
  for (int k = 0; k < K; ++k) std::reverse(n.st[k].begin(), n.st[k].end());
  return n;
}
// row(out_offset, operand offsets, inner length) for every innermost row, in parallel
// over fixed chunks of rows; the outer index is carried like an odometer.
template <int K, class Row>
void for_each_row(const Nest<K>& n, Row&& row) {
  const int r = int(n.dims.size());
  const int64_t inner = n.inner();
  const int64_t rows = numel(n.dims) / inner;
  parallel_for(rows, std::max<int64_t>(1, kGrain / inner), [&](int64_t b, int64_t e) {
    Shape idx(std::max(r - 1, 0), 0);
    std::array<int64_t, K> off{};
    int64_t rem = b;
    for (int d = r - 2; d >= 0; --d) {
      idx[d] = rem % n.dims[d]; rem /= n.dims[d];
      for (int k = 0; k < K; ++k) off[k] += idx[d] * n.st[k][d];
    }
    for (int64_t i = b; i < e; ++i) {
      row(i * inner, off, inner);
      for (int d = r - 2; d >= 0; --d) {
        for (int k = 0; k < K; ++k) off[k] += n.st[k][d];
        if (++idx[d] < n.dims[d]) break;
        for (int k = 0; k < K; ++k) off[k] -= n.st[k][d] * n.dims[d];
        idx[d] = 0;
      }
    }
  });
}

// y = op(x) elementwise; OutT differs from T for is_finite.
template <class T, class O, class Op>
void unary_loop(const Array& a, Array& o, const Op& op) {
  const T* x = static_cast<const T*>(a.raw()); O* y = static_cast<O*>(o.raw());
  parallel_for(a.size(), kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = st<O>(op(ld(x[i])));
  });
}

// z = op(x, y) with broadcasting; O is bool for comparisons.
template <class T, class O, class Op>
void binary_loop(const Array& a, const Array& b, Array& o, const Op& op) {
  using A = ar_t<T>;
  const T* x = static_cast<const T*>(a.raw()); const T* y = static_cast<const T*>(b.raw());
  O* z = static_cast<O*>(o.raw());
  const int64_t n = o.size();
  if (n == 0) return;
  if (a.size() == n && b.size() == n) {  // same layout (only size-1 dims may differ)
    parallel_for(n, kGrain, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) z[i] = st<O>(op(ld(x[i]), ld(y[i])));
    });
    return;
  }
  if (a.size() == 1 && b.size() == n) {
    const A s0 = ld(x[0]);
    parallel_for(n, kGrain, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) z[i] = st<O>(op(s0, ld(y[i])));
    });
    return;
  }
  if (b.size() == 1 && a.size() == n) {
    const A s1 = ld(y[0]);
    parallel_for(n, kGrain, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) z[i] = st<O>(op(ld(x[i]), s1));
    });
    return;
  }
  const Nest<2> nest = make_nest<2>(o.shape(), {&a.shape(), &b.shape()});
  const int64_t ia = nest.st[0].back(), ib = nest.st[1].back();
  for_each_row(nest, [&](int64_t oz, const std::array<int64_t, 2>& off, int64_t m) {
    const T* xr = x + off[0]; const T* yr = y + off[1]; O* zr = z + oz;
    if (ia && ib) { for (int64_t j = 0; j < m; ++j) zr[j] = st<O>(op(ld(xr[j]), ld(yr[j]))); }
    else if (ib) { const A u = ld(xr[0]); for (int64_t j = 0; j < m; ++j) zr[j] = st<O>(op(u, ld(yr[j]))); }
    else if (ia) { const A v = ld(yr[0]); for (int64_t j = 0; j < m; ++j) zr[j] = st<O>(op(ld(xr[j]), v)); }
    else { const O c = st<O>(op(ld(xr[0]), ld(yr[0]))); for (int64_t j = 0; j < m; ++j) zr[j] = c; }
  });
}

// w = op(x, y, z) with broadcasting (select, clamp).
template <class T0, class T, class Op>
void ternary_loop(const Array& a, const Array& b, const Array& c, Array& o, const Op& op) {
  const T0* p = static_cast<const T0*>(a.raw()); const T* x = static_cast<const T*>(b.raw());
  const T* y = static_cast<const T*>(c.raw()); T* w = static_cast<T*>(o.raw());
  const int64_t n = o.size();
  if (n == 0) return;
  if (a.size() == n && b.size() == n && c.size() == n) {
    parallel_for(n, kGrain, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) { const T0 u = p[i]; const T v = x[i], t = y[i]; w[i] = op(u, v, t); }
    });
    return;
  }
  const Nest<3> nest = make_nest<3>(o.shape(), {&a.shape(), &b.shape(), &c.shape()});
  const int64_t s0 = nest.st[0].back(), s1 = nest.st[1].back(), s2 = nest.st[2].back();
  for_each_row(nest, [&](int64_t ow, const std::array<int64_t, 3>& off, int64_t m) {
    const T0* pr = p + off[0]; const T* xr = x + off[1]; const T* yr = y + off[2]; T* wr = w + ow;
    if (s0 && s1 && s2) {
      for (int64_t j = 0; j < m; ++j) { const T0 u = pr[j]; const T v = xr[j], t = yr[j]; wr[j] = op(u, v, t); }
    }
    else if (s0 && !s1 && !s2) { const T u = xr[0], v = yr[0]; for (int64_t j = 0; j < m; ++j) wr[j] = op(pr[j], u, v); }
    else if (!s0 && s1 && s2) { const T0 q = pr[0]; for (int64_t j = 0; j < m; ++j) wr[j] = op(q, xr[j], yr[j]); }
    else { for (int64_t j = 0; j < m; ++j) wr[j] = op(pr[j * s0], xr[j * s1], yr[j * s2]); }
  });
}

template <unsigned K, class Op>
Kernel unary_kernel(Op op) {
  return [op](const std::vector<Array>& in, std::vector<Array>& out, const Attrs&) {
    dispatch<K>(in[0].dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      unary_loop<T, T>(in[0], out[0], op);
    });
  };
}
template <unsigned K, bool ToBool = false, class Op>
Kernel binary_kernel(Op op) {
  return [op](const std::vector<Array>& in, std::vector<Array>& out, const Attrs&) {
    dispatch<K>(in[0].dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      binary_loop<T, std::conditional_t<ToBool, bool, T>>(in[0], in[1], out[0], op);
    });
  };
}

// =====================================================================================
// scalar ops (A is the arithmetic type: float for bf16)
// =====================================================================================
// Wrapping integer arithmetic without signed-overflow UB.
// Float add and mul return the first operand's NaN (quieted) when it is a NaN, as
// XLA:CPU does (jnp: nan + -nan is +nan): x + y alone leaves the choice to how the
// compiler orders a commutative op's operands, which differs between builds and loop
// copies. prims/fused_ops.h and reduce_ops.h use the same rule (bit-identical fusion).
template <class A> inline A wrap_add(A x, A y) {
  if constexpr (std::is_same_v<A, int32_t>) return int32_t(uint32_t(x) + uint32_t(y));
  else if constexpr (std::is_floating_point_v<A>) return x != x ? A(x + A(0)) : A(x + y);
  else return A(x + y);
}
template <class A> inline A wrap_sub(A x, A y) {
  if constexpr (std::is_same_v<A, int32_t>) return int32_t(uint32_t(x) - uint32_t(y)); else return A(x - y);
}
template <class A> inline A wrap_mul(A x, A y) {
  if constexpr (std::is_same_v<A, int32_t>) return int32_t(uint32_t(x) * uint32_t(y));
  else if constexpr (std::is_integral_v<A>) return A(uint32_t(x) * uint32_t(y));
  else return x != x ? A(x + A(0)) : A(x * y);
}
template <class A> inline A do_div(A x, A y) {
  if constexpr (std::is_floating_point_v<A>) return x / y;
  else if constexpr (std::is_signed_v<A>) {
    if (y == 0) return A(-1);
    if (y == -1) return wrap_sub(A(0), x);  // INT_MIN / -1 = INT_MIN
    return A(x / y);
  } else {
    return y == 0 ? std::numeric_limits<A>::max() : A(x / y);
  }
}
template <class A> inline A do_rem(A x, A y) {
  if constexpr (std::is_floating_point_v<A>) return std::fmod(x, y);
  else if constexpr (std::is_signed_v<A>) return (y == 0) ? x : (y == -1 ? A(0) : A(x % y));
  else return y == 0 ? x : A(x % y);
}
template <class A> inline A do_max(A x, A y) {
  const A r = x > y ? x : y;  // (two plain selects: the form GCC vectorises)
  if constexpr (std::is_floating_point_v<A>) return x != x ? x : r;  // NaN wins
  else return r;
}
template <class A> inline A do_min(A x, A y) {
  const A r = x < y ? x : y;
  if constexpr (std::is_floating_point_v<A>) return x != x ? x : r;
  else return r;
}
// Shifts: the amount is read as unsigned; >= the bit width gives 0 / the sign fill.
template <class A> inline A do_shl(A x, A s) {
  using U = std::make_unsigned_t<A>;
  constexpr unsigned W = sizeof(A) * 8;
  return U(s) >= W ? A(0) : A(U(U(x) << U(s)));
}
template <class A> inline A do_shr_logical(A x, A s) {
  using U = std::make_unsigned_t<A>;
  constexpr unsigned W = sizeof(A) * 8;
  return U(s) >= W ? A(0) : A(U(x) >> U(s));
}
template <class A> inline A do_shr_arith(A x, A s) {
  using U = std::make_unsigned_t<A>;
  using S = std::make_signed_t<A>;
  constexpr unsigned W = sizeof(A) * 8;
  const S v = S(x);
  return A(S(U(s) >= W ? (v < 0 ? S(-1) : S(0)) : S(v >> U(s))));
}

template <class A> inline A do_abs(A x) {
  if constexpr (std::is_same_v<A, float>) return fm::fabs_(x);
  else if constexpr (std::is_floating_point_v<A>) return __builtin_fabs(x);
  else if constexpr (std::is_signed_v<A>) return x < 0 ? wrap_sub(A(0), x) : x;
  else return x;
}
template <class A> inline A do_sign(A x) {
  if constexpr (std::is_floating_point_v<A>) {  // keeps -0 and NaN
    A r = x > 0 ? A(1) : x;
    return x < 0 ? A(-1) : r;
  }
  else if constexpr (std::is_signed_v<A>) return A((x > 0) - (x < 0));
  else return A(x != 0);
}

// Unary float functions: f32 (and bf16, computed in f32) through fm, f64 through libm.
#define FLOAT_FN(NAME, F32, F64)                                              \
  struct NAME##_fn {                                                          \
    float operator()(float x) const { return F32; }                           \
    double operator()(double x) const { return F64; }                         \
  };
FLOAT_FN(exp, fm::exp(x), std::exp(x))
FLOAT_FN(log, fm::log(x), std::log(x))
FLOAT_FN(log1p, std::log1p(x), std::log1p(x))
FLOAT_FN(expm1, std::expm1(x), std::expm1(x))
FLOAT_FN(tanh, fm::tanh(x), std::tanh(x))
FLOAT_FN(logistic, fm::logistic(x), logistic_f64(x))
FLOAT_FN(sqrt, __builtin_sqrtf(x), __builtin_sqrt(x))
FLOAT_FN(rsqrt, 1.0f / __builtin_sqrtf(x), 1.0 / __builtin_sqrt(x))
FLOAT_FN(erf, fm::erf(x), std::erf(x))
FLOAT_FN(erf_inv, fm::erf_inv(x), erf_inv_f64(x))
FLOAT_FN(sin, std::sin(x), std::sin(x))
FLOAT_FN(cos, std::cos(x), std::cos(x))
FLOAT_FN(floor, fm::floor(x), fm::floor(x))
FLOAT_FN(ceil, fm::ceil(x), fm::ceil(x))
#undef FLOAT_FN

// =====================================================================================
// VJP helpers
// =====================================================================================
using namespace ops;
using Cts = std::vector<int>;
using Ids = std::vector<int>;

int cst(Graph& g, int like, double v) { return scalar_like(g, like, v); }  // 0-d, like's dtype
int un1(Graph& g, const char* p, int x) { return g.add1(p, {x}); }
int cmp(Graph& g, const char* p, int a, int b) { return g.add1(p, {a, b}); }
// The cotangent of a broadcast operand: summed back to its shape.
int unb(Graph& g, const Node& n, int k, int c) { return sum_to_shape(g, c, g.aval(n.in[k]).shape); }

// A unary float primitive: shape, kernel, VJP (given as d(out)/d(x) * ct), FLOPs.
template <class Fn>
PrimDef unary_float_def(VjpRule vjp, bool zero_grad = false) {
  return PrimDef{.shape = unary_shape<kFloat>, .kernel = unary_kernel<kFloat>(Fn{}), .vjp = std::move(vjp),
                 .flops = elementwise_flops_of, .batch = batching::elementwise, .zero_grad = zero_grad};
}
// exp, logistic, tanh and erf: f32 and bf16 through the ISA copies of
// kernels/unary_math.h (FMA formulas), f64 through libm.
template <class Fn>
PrimDef unary_math_def(kernels::UnaryMath f, VjpRule vjp) {
  PrimDef d = unary_float_def<Fn>(std::move(vjp));
  Kernel f64 = d.kernel;
  d.kernel = [f, f64](const std::vector<Array>& in, std::vector<Array>& out, const Attrs& at) {
    const DType t = in[0].dtype();
    if (t != DType::f32 && t != DType::bf16) return f64(in, out, at);
    const kernels::UnaryMathArgs a{f, t == DType::bf16, in[0].raw(), out[0].raw()};
    const int isa = int(cpu::active_isa());
    auto loop = isa >= int(cpu::Isa::avx512) ? kernels::unary_math_avx512
                : isa >= int(cpu::Isa::avx2) ? kernels::unary_math_avx2 : kernels::unary_math_ref;
    parallel_for(in[0].size(), kGrain, [&](int64_t b, int64_t e) { loop(a, b, e); });
  };
  return d;
}

// jax's _balanced_eq: the share of the cotangent of max/min that goes to the operand
// equal to the result (all of it, or half on a tie). Returns (ct_x, ct_y).
std::pair<int, int> balanced_cts(Graph& g, const Node& n, int ct) {
  const int ans = n.out[0];
  const int ex = cmp(g, "eq", n.in[0], ans), ey = cmp(g, "eq", n.in[1], ans);
  const int half = mul(g, ct, cst(g, ct, 0.5)), zero = cst(g, ct, 0.0);
  const int cx = select(g, ex, select(g, ey, half, ct), zero);
  const int cy = select(g, ey, select(g, ex, half, ct), zero);
  return {unb(g, n, 0, cx), unb(g, n, 1, cy)};
}

// =====================================================================================
// registrations: unary float
// =====================================================================================
// d exp(x) = exp(x) dx: reuse the forward output.
static Register reg_exp("exp", unary_math_def<exp_fn>(kernels::UnaryMath::exp, [](Graph& g, const Node& n, const Cts& ct) -> Ids {
  return {mul(g, ct[0], n.out[0])}; }));
static Register reg_log("log", unary_float_def<log_fn>([](Graph& g, const Node& n, const Cts& ct) -> Ids {
  return {div(g, ct[0], n.in[0])}; }));
static Register reg_log1p("log1p", unary_float_def<log1p_fn>([](Graph& g, const Node& n, const Cts& ct) -> Ids {
  return {div(g, ct[0], add(g, n.in[0], cst(g, n.in[0], 1.0)))}; }));
static Register reg_expm1("expm1", unary_float_def<expm1_fn>([](Graph& g, const Node& n, const Cts& ct) -> Ids {
  return {mul(g, ct[0], add(g, n.out[0], cst(g, n.out[0], 1.0)))}; }));
// jax: g * (1 + ans) * (1 - ans)
static Register reg_tanh("tanh", unary_math_def<tanh_fn>(kernels::UnaryMath::tanh, [](Graph& g, const Node& n, const Cts& ct) -> Ids {
  const int y = n.out[0];
  return {mul(g, add(g, ct[0], mul(g, ct[0], y)), sub(g, cst(g, y, 1.0), y))}; }));
// jax: g * (ans * (1 - ans))
static Register reg_logistic("logistic", unary_math_def<logistic_fn>(kernels::UnaryMath::logistic, [](Graph& g, const Node& n, const Cts& ct) -> Ids {
  const int y = n.out[0];
  return {mul(g, ct[0], mul(g, y, sub(g, cst(g, y, 1.0), y)))}; }));
// jax: g * (0.5 / ans)
static Register reg_sqrt("sqrt", unary_float_def<sqrt_fn>([](Graph& g, const Node& n, const Cts& ct) -> Ids {
  const int y = n.out[0];
  return {mul(g, ct[0], div(g, cst(g, y, 0.5), y))}; }));
// jax: g * (-0.5 * (ans / x))
static Register reg_rsqrt("rsqrt", unary_float_def<rsqrt_fn>([](Graph& g, const Node& n, const Cts& ct) -> Ids {
  const int y = n.out[0];
  return {mul(g, ct[0], mul(g, cst(g, y, -0.5), div(g, y, n.in[0])))}; }));
// jax: (2/sqrt(pi)) * (g * exp(-x^2))
static Register reg_erf("erf", unary_math_def<erf_fn>(kernels::UnaryMath::erf, [](Graph& g, const Node& n, const Cts& ct) -> Ids {
  const int x = n.in[0];
  const int e = un1(g, "exp", neg(g, mul(g, x, x)));
  return {mul(g, cst(g, x, 1.1283791670955125739), mul(g, ct[0], e))}; }));
// jax: g * ((sqrt(pi)/2) * exp(ans^2))
static Register reg_erf_inv("erf_inv", unary_float_def<erf_inv_fn>([](Graph& g, const Node& n, const Cts& ct) -> Ids {
  const int y = n.out[0];
  return {mul(g, ct[0], mul(g, cst(g, y, 0.88622692545275801365), un1(g, "exp", mul(g, y, y))))}; }));
static Register reg_sin("sin", unary_float_def<sin_fn>([](Graph& g, const Node& n, const Cts& ct) -> Ids {
  return {mul(g, ct[0], un1(g, "cos", n.in[0]))}; }));
static Register reg_cos("cos", unary_float_def<cos_fn>([](Graph& g, const Node& n, const Cts& ct) -> Ids {
  return {neg(g, mul(g, ct[0], un1(g, "sin", n.in[0])))}; }));
static Register reg_floor("floor", unary_float_def<floor_fn>(nullptr, /*zero_grad=*/true));
static Register reg_ceil("ceil", unary_float_def<ceil_fn>(nullptr, /*zero_grad=*/true));

// round: rounding_method 0 = half away from zero (jax.lax.round's default), 1 = half to even.
static Register reg_round("round", PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) -> std::vector<AVal> {
      const int64_t m = a.i("rounding_method", 0);
      if (m != 0 && m != 1)
        throw ValueError(fmt("rounding_method must be 0 (away from zero) or 1 (to nearest even), got ", m));
      return unary_shape<kFloat>(in, a);
    },
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
      if (a.i("rounding_method", 0) == 0)
        unary_kernel<kFloat>([](auto x) {
          if constexpr (is_f64<decltype(x)>) return std::round(x); else return fm::round_afz(x); })(in, out, a);
      else
        unary_kernel<kFloat>([](auto x) {
          if constexpr (is_f64<decltype(x)>) return std::nearbyint(x); else return fm::round_even(x); })(in, out, a);
    },
    .vjp = nullptr, .flops = elementwise_flops_of, .batch = batching::elementwise, .zero_grad = true});

// =====================================================================================
// registrations: unary, any dtype
// =====================================================================================
static Register reg_neg("neg", PrimDef{
    .shape = unary_shape<kNum>,
    // Floats flip the sign bit (-0.0 stays distinct from 0 - x); integers wrap.
    .kernel = unary_kernel<kNum>([](auto x) {
      using A = decltype(x);
      if constexpr (std::is_floating_point_v<A>) return -x; else return wrap_sub(A(0), x); }),
    .vjp = [](Graph& g, const Node& n, const Cts& ct) -> Ids { return {neg(g, ct[0])}; },
    .flops = elementwise_flops_of, .batch = batching::elementwise});

static Register reg_abs("abs", PrimDef{
    .shape = unary_shape<kNum>,
    .kernel = unary_kernel<kNum>([](auto x) { return do_abs(x); }),
    // jax: select(x >= 0, g, -g)
    .vjp = [](Graph& g, const Node& n, const Cts& ct) -> Ids {
      const int x = n.in[0];
      return {select(g, cmp(g, "ge", x, cst(g, x, 0.0)), ct[0], neg(g, ct[0]))}; },
    .flops = elementwise_flops_of, .batch = batching::elementwise});

static Register reg_sign("sign", PrimDef{
    .shape = unary_shape<kNum>,
    .kernel = unary_kernel<kNum>([](auto x) { return do_sign(x); }),
    .vjp = nullptr, .flops = elementwise_flops_of, .batch = batching::elementwise, .zero_grad = true});

// not: logical for bool, bitwise for integers.
static Register reg_not("not", PrimDef{
    .shape = unary_shape<kIntBool>,
    .kernel = unary_kernel<kIntBool>([](auto x) {
      using A = decltype(x);
      if constexpr (std::is_same_v<A, bool>) return !x; else return A(~x); }),
    .vjp = nullptr, .flops = elementwise_flops_of, .batch = batching::elementwise, .zero_grad = true});

static Register reg_is_finite("is_finite", PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) -> std::vector<AVal> {
      unary_shape<kFloat>(in, a);
      return {AVal{DType::boolean, in[0].shape}};
    },
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs&) {
      dispatch<kFloat>(in[0].dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        unary_loop<T, bool>(in[0], out[0], [](auto x) { return (x - x) == (x - x); });  // false for inf, NaN
      });
    },
    .vjp = nullptr, .flops = elementwise_flops_of, .batch = batching::elementwise, .zero_grad = true});

// integer_pow(x; y): x^y by repeated squaring in jax's multiplication order; y < 0 gives
// 1 / x^|y| (floats only). Integers wrap.
static Register reg_integer_pow("integer_pow", PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) -> std::vector<AVal> {
      check_arity(in, 1);
      check_kind(in[0].dtype, kNum);
      const int64_t y = a.i("y");
      if (y < 0 && !is_float(in[0].dtype))
        throw DTypeError(fmt("integers cannot be raised to a negative power, got y=", y, " for ",
                             dtype_name(in[0].dtype)));
      return {in[0]};
    },
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
      const int64_t y = a.i("y");
      const uint64_t m = uint64_t(y < 0 ? -y : y);
      dispatch<kNum>(in[0].dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        // x^2 and x^3 (the squares of norms and variances) as straight products, the
        // loop below's order (1 * (x x) = x x, x (x x)), so the loop vectorises: the
        // bit-serial loop ran at ~7 GB/s.
        if (m == 2 || m == 3) {
          const bool cube = m == 3, inv = y < 0;
          unary_loop<T, T>(in[0], out[0], [cube, inv](auto x) {
            using A = decltype(x);
            const A sq = wrap_mul(x, x), acc = cube ? wrap_mul(x, sq) : sq;
            if constexpr (std::is_floating_point_v<A>) return inv ? A(1) / acc : acc; else return acc;
          });
          return;
        }
        unary_loop<T, T>(in[0], out[0], [m, y](auto x) {
          using A = decltype(x);
          A acc = A(1), b = x;
          for (uint64_t k = m; k > 0;) {
            if (k & 1) acc = wrap_mul(acc, b);
            k >>= 1;
            if (k) b = wrap_mul(b, b);
          }
          if constexpr (std::is_floating_point_v<A>) return y < 0 ? A(1) / acc : acc; else return acc;
        });
      });
    },
    // jax: 0 for y == 0, g for y == 1, g * (y * x^(y-1)) otherwise.
    .vjp = [](Graph& g, const Node& n, const Cts& ct) -> Ids {
      const int64_t y = n.attrs.i("y");
      const int x = n.in[0];
      if (y == 0) return {-1};
      if (y == 1) return {ct[0]};
      const int xm = y == 2 ? x : g.add1("integer_pow", {x}, {{"y", int64_t(y - 1)}});
      return {mul(g, ct[0], mul(g, cst(g, x, double(y)), xm))};
    },
    .flops = elementwise_flops_of, .batch = batching::elementwise});

// =====================================================================================
// registrations: binary arithmetic
// =====================================================================================
static Register reg_add("add", PrimDef{
    .shape = binary_shape<kNum>,
    .kernel = binary_kernel<kNum>([](auto x, auto y) { return wrap_add(x, y); }),
    .vjp = [](Graph& g, const Node& n, const Cts& ct) -> Ids {
      return {unb(g, n, 0, ct[0]), unb(g, n, 1, ct[0])}; },
    .flops = elementwise_flops_of, .batch = batching::elementwise});

static Register reg_sub("sub", PrimDef{
    .shape = binary_shape<kNum>,
    .kernel = binary_kernel<kNum>([](auto x, auto y) { return wrap_sub(x, y); }),
    .vjp = [](Graph& g, const Node& n, const Cts& ct) -> Ids {
      return {unb(g, n, 0, ct[0]), unb(g, n, 1, neg(g, ct[0]))}; },
    .flops = elementwise_flops_of, .batch = batching::elementwise});

static Register reg_mul("mul", PrimDef{
    .shape = binary_shape<kNum>,
    .kernel = binary_kernel<kNum>([](auto x, auto y) { return wrap_mul(x, y); }),
    .vjp = [](Graph& g, const Node& n, const Cts& ct) -> Ids {
      return {unb(g, n, 0, mul(g, ct[0], n.in[1])), unb(g, n, 1, mul(g, n.in[0], ct[0]))}; },
    .flops = elementwise_flops_of, .batch = batching::elementwise});

// jax: d/dx = g / y, d/dy = (-g * x) * y^-2
static Register reg_div("div", PrimDef{
    .shape = binary_shape<kNum>,
    .kernel = binary_kernel<kNum>([](auto x, auto y) { return do_div(x, y); }),
    .vjp = [](Graph& g, const Node& n, const Cts& ct) -> Ids {
      const int x = n.in[0], y = n.in[1];
      const int y2 = g.add1("integer_pow", {y}, {{"y", int64_t(-2)}});
      return {unb(g, n, 0, div(g, ct[0], y)), unb(g, n, 1, mul(g, mul(g, neg(g, ct[0]), x), y2))}; },
    .flops = elementwise_flops_of, .batch = batching::elementwise});

// jax (float exponent): d/dx = g * (y * x^(y-1)); d/dy = g * (log(x == 0 ? 1 : x) * ans)
static Register reg_pow("pow", PrimDef{
    .shape = binary_shape<kFloat>,
    .kernel = binary_kernel<kFloat>([](auto x, auto y) { return std::pow(x, y); }),
    .vjp = [](Graph& g, const Node& n, const Cts& ct) -> Ids {
      const int x = n.in[0], y = n.in[1];
      const int one = cst(g, x, 1.0);
      const int dx = mul(g, ct[0], mul(g, y, bin(g, "pow", x, sub(g, y, one))));
      const int safe_x = select(g, cmp(g, "eq", x, cst(g, x, 0.0)), one, x);
      const int dy = mul(g, ct[0], mul(g, un1(g, "log", safe_x), n.out[0]));
      return {unb(g, n, 0, dx), unb(g, n, 1, dy)}; },
    .flops = elementwise_flops_of, .batch = batching::elementwise});

static Register reg_max("max", PrimDef{
    .shape = binary_shape<kAll>,
    .kernel = binary_kernel<kAll>([](auto x, auto y) { return do_max(x, y); }),
    .vjp = [](Graph& g, const Node& n, const Cts& ct) -> Ids {
      auto [cx, cy] = balanced_cts(g, n, ct[0]);
      return {cx, cy}; },
    .flops = elementwise_flops_of, .batch = batching::elementwise});

static Register reg_min("min", PrimDef{
    .shape = binary_shape<kAll>,
    .kernel = binary_kernel<kAll>([](auto x, auto y) { return do_min(x, y); }),
    .vjp = [](Graph& g, const Node& n, const Cts& ct) -> Ids {
      auto [cx, cy] = balanced_cts(g, n, ct[0]);
      return {cx, cy}; },
    .flops = elementwise_flops_of, .batch = batching::elementwise});

// rem: C fmod (the result has the sign of x). jax: d/dx = g, d/dy = -g * sign(x/y) * floor(|x/y|)
static Register reg_rem("rem", PrimDef{
    .shape = binary_shape<kNum>,
    .kernel = binary_kernel<kNum>([](auto x, auto y) { return do_rem(x, y); }),
    .vjp = [](Graph& g, const Node& n, const Cts& ct) -> Ids {
      const int q = div(g, n.in[0], n.in[1]);
      const int t = mul(g, un1(g, "sign", q), un1(g, "floor", un1(g, "abs", q)));
      return {unb(g, n, 0, ct[0]), unb(g, n, 1, mul(g, neg(g, ct[0]), t))}; },
    .flops = elementwise_flops_of, .batch = batching::elementwise});

// atan2(x, y) = the angle of (y, x). jax: d/dx = g * y / (x^2 + y^2), d/dy = g * -x / (x^2 + y^2)
static Register reg_atan2("atan2", PrimDef{
    .shape = binary_shape<kFloat>,
    .kernel = binary_kernel<kFloat>([](auto x, auto y) { return std::atan2(x, y); }),
    .vjp = [](Graph& g, const Node& n, const Cts& ct) -> Ids {
      const int x = n.in[0], y = n.in[1];
      const int r2 = add(g, mul(g, x, x), mul(g, y, y));
      return {unb(g, n, 0, mul(g, ct[0], div(g, y, r2))), unb(g, n, 1, mul(g, ct[0], div(g, neg(g, x), r2)))}; },
    .flops = elementwise_flops_of, .batch = batching::elementwise});

// =====================================================================================
// registrations: bitwise / logical, shifts (no gradient)
// =====================================================================================
#define NOGRAD_BINARY(VAR, NAME, KINDS, EXPR)                                      \
  static Register VAR(NAME, PrimDef{.shape = binary_shape<KINDS>,                  \
                                    .kernel = binary_kernel<KINDS>([](auto x, auto y) { return EXPR; }), \
                                    .vjp = nullptr, .flops = elementwise_flops_of, .batch = batching::elementwise, .zero_grad = true});
NOGRAD_BINARY(reg_and, "and", kIntBool, decltype(x)(x & y))
NOGRAD_BINARY(reg_or, "or", kIntBool, decltype(x)(x | y))
NOGRAD_BINARY(reg_xor, "xor", kIntBool, decltype(x)(x ^ y))
NOGRAD_BINARY(reg_shl, "shift_left", kInt, do_shl(x, y))
NOGRAD_BINARY(reg_shrl, "shift_right_logical", kInt, do_shr_logical(x, y))
NOGRAD_BINARY(reg_shra, "shift_right_arithmetic", kInt, do_shr_arith(x, y))
#undef NOGRAD_BINARY

// =====================================================================================
// registrations: comparisons -> bool (NaN compares unequal to everything)
// =====================================================================================
#define COMPARE(VAR, NAME, OP)                                                      \
  static Register VAR(NAME, PrimDef{.shape = binary_shape<kAll, true>,             \
                                    .kernel = binary_kernel<kAll, true>([](auto x, auto y) { return bool(x OP y); }), \
                                    .vjp = nullptr, .flops = elementwise_flops_of, .batch = batching::elementwise, .zero_grad = true});
COMPARE(reg_eq, "eq", ==)
COMPARE(reg_ne, "ne", !=)
COMPARE(reg_lt, "lt", <)
COMPARE(reg_le, "le", <=)
COMPARE(reg_gt, "gt", >)
COMPARE(reg_ge, "ge", >=)
#undef COMPARE

// =====================================================================================
// registrations: select, clamp
// =====================================================================================
static Register reg_select("select", PrimDef{
    // select(pred, on_true, on_false), all three broadcast together; pred is bool.
    .shape = [](const std::vector<AVal>& in, const Attrs&) -> std::vector<AVal> {
      check_arity(in, 3);
      if (in[0].dtype != DType::boolean) throw DTypeError(fmt("predicate must be bool, got ", dtype_name(in[0].dtype)));
      check_same_dtype({in[1], in[2]});
      return {AVal{in[1].dtype, broadcast_shapes(in[0].shape, broadcast_shapes(in[1].shape, in[2].shape))}};
    },
    // Moves bits: one loop per element size, whatever the dtype.
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs&) {
      auto run = [&](auto tag) {
        using W = decltype(tag);
        ternary_loop<uint8_t, W>(in[0], in[1], in[2], out[0], [](uint8_t p, W a, W b) { return p ? a : b; });
      };
      switch (itemsize(out[0].dtype())) {
        case 1: run(uint8_t()); break; case 2: run(uint16_t()); break;
        case 4: run(uint32_t()); break; default: run(uint64_t()); break;
      }
    },
    .vjp = [](Graph& g, const Node& n, const Cts& ct) -> Ids {
      const int z = cst(g, ct[0], 0.0);  // 0-d: select broadcasts it
      return {-1, unb(g, n, 1, select(g, n.in[0], ct[0], z)), unb(g, n, 2, select(g, n.in[0], z, ct[0]))};
    },
    .flops = nullptr, .batch = batching::elementwise});

// clamp(lo, x, hi) = min(max(x, lo), hi) (XLA; NaN x stays NaN); all three broadcast.
// jax: d lo = g where lo > x and lo < hi; d x = g where lo < x < hi; d hi = g where hi < x.
static Register reg_clamp("clamp", PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs&) -> std::vector<AVal> {
      check_arity(in, 3);
      check_same_dtype(in);
      check_kind(in[0].dtype, kAll);
      return {AVal{in[1].dtype, broadcast_shapes(in[1].shape, broadcast_shapes(in[0].shape, in[2].shape))}};
    },
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs&) {
      dispatch<kAll>(in[0].dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        // ternary_loop's first operand is the "predicate" slot: here x, then lo, hi.
        ternary_loop<T, T>(in[1], in[0], in[2], out[0], [](T x, T lo, T hi) {
          return st<T>(do_min(do_max(ld(x), ld(lo)), ld(hi)));
        });
      });
    },
    .vjp = [](Graph& g, const Node& n, const Cts& ct) -> Ids {
      const int lo = n.in[0], x = n.in[1], hi = n.in[2];
      const int z = cst(g, ct[0], 0.0);
      const int d_lo = select(g, bin(g, "and", cmp(g, "gt", lo, x), cmp(g, "lt", lo, hi)), ct[0], z);
      const int d_x = select(g, bin(g, "and", cmp(g, "gt", x, lo), cmp(g, "lt", x, hi)), ct[0], z);
      const int d_hi = select(g, cmp(g, "lt", hi, x), ct[0], z);
      return {unb(g, n, 0, d_lo), unb(g, n, 1, d_x), unb(g, n, 2, d_hi)};
    },
    .flops = elementwise_flops_of, .batch = batching::elementwise});

// =====================================================================================
// registrations: conversions
// =====================================================================================
// One element of convert_element_type, on kernel storage types (uint16_t = bf16).
template <class S, class D> inline D convert_one(S x) {
  if constexpr (std::is_same_v<S, D>) return x;
  else if constexpr (std::is_same_v<D, bool>) return ld(x) != ar_t<S>(0);  // NaN -> true
  else if constexpr (std::is_same_v<D, uint16_t>) {
    // Through f32 (like ml_dtypes and XLA, so f64/int32 -> bf16 may round twice).
    return st<uint16_t>(float(ld(x)));
  } else if constexpr (std::is_floating_point_v<D>) return D(ld(x));
  else if constexpr (std::is_floating_point_v<ar_t<S>>) {
    // float -> int saturates and maps NaN to 0 (XLA). The clamp happens in double, where
    // the integer bounds are exact, so the final conversion is always in range.
    double v = double(ld(x));
    constexpr double lo = double(std::numeric_limits<D>::min()), hi = double(std::numeric_limits<D>::max());
    v = v < lo ? lo : v;
    v = v > hi ? hi : v;
    v = v == v ? v : 0.0;
    if constexpr (std::is_same_v<D, uint32_t>)
      return uint32_t(int32_t(v >= 2147483648.0 ? v - 4294967296.0 : v));
    else return D(int32_t(v));
  } else {
    return D(x);  // int/bool -> int: two's complement wrap-around (defined in C++20)
  }
}

static Register reg_convert("convert_element_type", PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) -> std::vector<AVal> {
      check_arity(in, 1);
      return {AVal{dtype_from_name(a.s("new_dtype")), in[0].shape}};
    },
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs&) {
      const int64_t n = in[0].size();
      dispatch<kAll>(in[0].dtype(), [&](auto stag) {
        dispatch<kAll>(out[0].dtype(), [&](auto dtag) {
          using S = typename decltype(stag)::type;
          using D = typename decltype(dtag)::type;
          const S* x = static_cast<const S*>(in[0].raw()); D* y = static_cast<D*>(out[0].raw());
          parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
            if constexpr (std::is_same_v<S, float> && std::is_same_v<D, uint16_t>) {
              if (kernels::convert_f32_bf16(x, y, b, e)) return;
            } else if constexpr (std::is_same_v<S, uint16_t> && std::is_same_v<D, float>) {
              if (kernels::convert_bf16_f32(x, y, b, e)) return;
            }
            for (int64_t i = b; i < e; ++i) y[i] = convert_one<S, D>(x[i]);
          });
        });
      });
    },
    .vjp = [](Graph& g, const Node& n, const Cts& ct) -> Ids {
      return {convert(g, ct[0], g.aval(n.in[0]).dtype)}; },
    .flops = nullptr, .batch = batching::elementwise});

// bitcast_convert_type: the same bits read as another dtype of the same size (float32,
// int32, uint32 among themselves; any dtype to itself). Shares the input's buffer.
static Register reg_bitcast("bitcast_convert_type", PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) -> std::vector<AVal> {
      check_arity(in, 1);
      const DType d = dtype_from_name(a.s("new_dtype"));
      auto ok4 = [](DType t) { return t == DType::f32 || t == DType::i32 || t == DType::u32; };
      if (d != in[0].dtype && !(ok4(d) && ok4(in[0].dtype)))
        throw DTypeError(fmt("bitcast_convert_type from ", dtype_name(in[0].dtype), " to ", dtype_name(d),
                             " is not supported; expected a dtype of the same size (float32, int32, uint32)"));
      return {AVal{d, in[0].shape}};
    },
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
      out[0] = Array(dtype_from_name(a.s("new_dtype")), in[0].shape(), in[0].raw(), in[0].storage());
    },
    .vjp = nullptr, .flops = nullptr, .batch = batching::elementwise, .zero_grad = true, .kernel_allocates = true});

}  // namespace
}  // namespace podlet
