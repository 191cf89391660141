// Elementwise primitives with NumPy broadcasting: shape rule, kernel, VJP, FLOPs.
#include "podlet/prims/common.h"
#include <cmath>

namespace podlet {
namespace {

// ---- shape rules ----
std::vector<AVal> unary_shape(const std::vector<AVal>& in, const Attrs&) {
  check_arity(in, 1);
  return {in[0]};
}
std::vector<AVal> unary_float_shape(const std::vector<AVal>& in, const Attrs& a) {
  check_arity(in, 1);
  if (!is_float(in[0].dtype)) throw DTypeError(fmt("requires a floating-point operand, got ", dtype_name(in[0].dtype)));
  return {in[0]};
}
std::vector<AVal> binary_shape(const std::vector<AVal>& in, const Attrs&) {
  check_arity(in, 2); check_same_dtype(in);
  return {AVal{in[0].dtype, broadcast_shapes(in[0].shape, in[1].shape)}};
}

// ---- kernels ----
template <class Op>
void unary_kernel(const std::vector<Array>& in, std::vector<Array>& out, Op op) {
  const int64_t n = in[0].size();
  PODLET_DTYPE_SWITCH(in[0].dtype(), T, {
    const T* x = in[0].data<T>(); T* y = out[0].data<T>();
    parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) y[i] = from_acc<T>(op(acc_t<T>(x[i])));
    });
  });
}
template <class Op>
void unary_float_kernel(const std::vector<Array>& in, std::vector<Array>& out, Op op) {
  const int64_t n = in[0].size();
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const T* x = in[0].data<T>(); T* y = out[0].data<T>();
    parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) y[i] = from_acc<T>(op(acc_t<T>(x[i])));
    });
  };
  switch (in[0].dtype()) {
    case DType::f32: run(float()); break;
    case DType::bf16: run(bf16()); break;
    case DType::f64: run(double()); break;
    default: throw DTypeError("requires a floating-point operand");
  }
}
// out[i] = op(a[ia], b[ib]) with broadcasting; OutT may differ from T (comparisons).
template <class T, class OutT, class Op>
void binary_loop(const Array& a, const Array& b, Array& o, Op op) {
  const T* x = a.data<T>(); const T* y = b.data<T>(); OutT* z = o.data<OutT>();
  if (a.shape() == b.shape()) {
    parallel_for(o.size(), kGrain, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) z[i] = from_acc<OutT>(op(acc_t<T>(x[i]), acc_t<T>(y[i])));
    });
    return;
  }
  for_each_broadcast2(o.shape(), a.shape(), b.shape(), [&](int64_t i, int64_t ia, int64_t ib) {
    z[i] = from_acc<OutT>(op(acc_t<T>(x[ia]), acc_t<T>(y[ib])));
  });
}
template <class Op>
void binary_kernel(const std::vector<Array>& in, std::vector<Array>& out, Op op) {
  PODLET_DTYPE_SWITCH(in[0].dtype(), T, { binary_loop<T, T>(in[0], in[1], out[0], op); });
}

// One element of convert_element_type (a template, so untaken branches compile away).
template <class S, class D> inline D convert_one(S x) {
  if constexpr (std::is_same_v<D, bool>) return acc_t<S>(x) != acc_t<S>(0);
  else if constexpr (std::is_same_v<S, bf16> || std::is_same_v<D, bf16>) return from_acc<D>(acc_t<D>(float(x)));
  else return D(x);
}

#define UNARY_FLOAT(NAME, EXPR, VJP)                                                     \
  static Register reg_##NAME(#NAME, PrimDef{.shape = unary_float_shape,                  \
      .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs&) { \
        unary_float_kernel(in, out, [](auto x) { using std::exp, std::log; return EXPR; }); }, \
      .vjp = VJP, .flops = elementwise_flops_of});

// ---- registrations ----
using namespace ops;

static Register reg_add("add", PrimDef{
    .shape = binary_shape,
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs&) {
      binary_kernel(in, out, [](auto x, auto y) { return x + y; }); },
    .vjp = [](Graph& g, const Node& n, const std::vector<int>& ct) -> std::vector<int> {
      return {sum_to_shape(g, ct[0], g.aval(n.in[0]).shape), sum_to_shape(g, ct[0], g.aval(n.in[1]).shape)}; },
    .flops = elementwise_flops_of});

static Register reg_sub("sub", PrimDef{
    .shape = binary_shape,
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs&) {
      binary_kernel(in, out, [](auto x, auto y) { return x - y; }); },
    .vjp = [](Graph& g, const Node& n, const std::vector<int>& ct) -> std::vector<int> {
      return {sum_to_shape(g, ct[0], g.aval(n.in[0]).shape), sum_to_shape(g, neg(g, ct[0]), g.aval(n.in[1]).shape)}; },
    .flops = elementwise_flops_of});

static Register reg_mul("mul", PrimDef{
    .shape = binary_shape,
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs&) {
      binary_kernel(in, out, [](auto x, auto y) { return x * y; }); },
    .vjp = [](Graph& g, const Node& n, const std::vector<int>& ct) -> std::vector<int> {
      return {sum_to_shape(g, mul(g, ct[0], n.in[1]), g.aval(n.in[0]).shape),
              sum_to_shape(g, mul(g, n.in[0], ct[0]), g.aval(n.in[1]).shape)}; },
    .flops = elementwise_flops_of});

static Register reg_neg("neg", PrimDef{
    .shape = unary_shape,
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs&) {
      unary_kernel(in, out, [](auto x) { return -x; }); },
    .vjp = [](Graph& g, const Node& n, const std::vector<int>& ct) -> std::vector<int> { return {neg(g, ct[0])}; },
    .flops = elementwise_flops_of});

// d exp(x) = exp(x) dx: reuse the forward output.
UNARY_FLOAT(exp, exp(x), ([](Graph& g, const Node& n, const std::vector<int>& ct) -> std::vector<int> {
  return {mul(g, ct[0], n.out[0])}; }))

static Register reg_select("select", PrimDef{
    // select(pred, on_true, on_false), all three broadcast together; pred is bool.
    .shape = [](const std::vector<AVal>& in, const Attrs&) -> std::vector<AVal> {
      check_arity(in, 3);
      if (in[0].dtype != DType::boolean) throw DTypeError(fmt("predicate must be bool, got ", dtype_name(in[0].dtype)));
      check_same_dtype({in[1], in[2]});
      return {AVal{in[1].dtype, broadcast_shapes(in[0].shape, broadcast_shapes(in[1].shape, in[2].shape))}};
    },
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs&) {
      const Shape& os = out[0].shape();
      const int r = int(os.size());
      Shape sp = broadcast_strides(in[0].shape(), os), st = broadcast_strides(in[1].shape(), os),
            sf = broadcast_strides(in[2].shape(), os);
      const bool* p = in[0].data<bool>();
      const size_t isz = itemsize(out[0].dtype());
      const char* a = static_cast<const char*>(in[1].raw()); const char* b = static_cast<const char*>(in[2].raw());
      char* o = static_cast<char*>(out[0].raw());
      parallel_for(out[0].size(), kGrain, [&](int64_t s, int64_t e) {
        for (int64_t i = s; i < e; ++i) {
          int64_t rem = i, op = 0, ot = 0, of = 0;
          for (int d = r - 1; d >= 0; --d) { int64_t k = rem % os[d]; rem /= os[d]; op += k * sp[d]; ot += k * st[d]; of += k * sf[d]; }
          std::memcpy(o + i * isz, p[op] ? a + ot * isz : b + of * isz, isz);
        }
      });
    },
    .vjp = [](Graph& g, const Node& n, const std::vector<int>& ct) -> std::vector<int> {
      int z = zeros_like(g, ct[0]);
      return {-1, sum_to_shape(g, select(g, n.in[0], ct[0], z), g.aval(n.in[1]).shape),
              sum_to_shape(g, select(g, n.in[0], z, ct[0]), g.aval(n.in[2]).shape)};
    },
    .flops = nullptr});

static Register reg_convert("convert_element_type", PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) -> std::vector<AVal> {
      check_arity(in, 1);
      return {AVal{dtype_from_name(a.s("new_dtype")), in[0].shape}};
    },
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs&) {
      const int64_t n = in[0].size();
      PODLET_DTYPE_SWITCH(in[0].dtype(), S, {
        PODLET_DTYPE_SWITCH(out[0].dtype(), D, {
          const S* x = in[0].data<S>(); D* y = out[0].data<D>();
          parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) y[i] = convert_one<S, D>(x[i]);
          });
        });
      });
    },
    .vjp = [](Graph& g, const Node& n, const std::vector<int>& ct) -> std::vector<int> {
      return {convert(g, ct[0], g.aval(n.in[0]).dtype)}; },
    .flops = nullptr});

}  // namespace
}  // namespace podlet
