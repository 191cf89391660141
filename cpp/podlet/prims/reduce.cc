// Reductions over axes. Sums accumulate in f32 (bf16/f32) or f64 and are combined in a
// fixed order, so the result does not depend on the thread count.
#include "podlet/prims/common.h"
#include <limits>

namespace podlet {
namespace {
using namespace ops;

std::vector<AVal> reduce_shape(const std::vector<AVal>& in, const Attrs& a) {
  check_arity(in, 1);
  auto axes = normalize_axes(a.ints("axes"), in[0].shape.size(), "axis");
  std::vector<char> drop(in[0].shape.size(), 0);
  for (auto x : axes) { if (drop[x]) throw ShapeError(fmt("axis ", x, " repeated")); drop[x] = 1; }
  Shape s;
  for (size_t i = 0; i < in[0].shape.size(); ++i) if (!drop[i]) s.push_back(in[0].shape[i]);
  return {AVal{in[0].dtype, s}};
}

// Views the input as [outer, red, inner] after moving the reduced axes together is not
// possible in general, so reduce via index arithmetic: for each output element, walk
// the reduced sub-box in row-major order (a fixed order => deterministic).
template <class T, class Acc, class Combine>
void reduce_generic(const Array& x, Array& y, const std::vector<int64_t>& axes, Acc init, Combine comb) {
  const Shape& is = x.shape();
  const int r = is.size();
  std::vector<char> red(r, 0);
  for (auto a : axes) red[a] = 1;
  Shape ist = strides_of(is);
  Shape kdims, kstr, rdims, rstr;
  for (int d = 0; d < r; ++d) {
    if (red[d]) { rdims.push_back(is[d]); rstr.push_back(ist[d]); }
    else { kdims.push_back(is[d]); kstr.push_back(ist[d]); }
  }
  const int64_t nout = numel(kdims), nred = numel(rdims);
  const T* xs = x.data<T>(); T* ys = y.data<T>();
  const int kr = kdims.size(), rr = rdims.size();
  // Common fast case: reducing the trailing contiguous block.
  bool trailing = true;
  for (int d = 0; d < r; ++d) if (red[d] && d < r - rr) trailing = false;
  parallel_for(nout, std::max<int64_t>(1, kGrain / std::max<int64_t>(nred, 1)), [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      int64_t rem = o, base = 0;
      for (int d = kr - 1; d >= 0; --d) { base += (rem % kdims[d]) * kstr[d]; rem /= kdims[d]; }
      Acc acc = init;
      if (trailing) {
        const T* p = xs + base;
        for (int64_t k = 0; k < nred; ++k) acc = comb(acc, Acc(acc_t<T>(p[k])));
      } else {
        for (int64_t k = 0; k < nred; ++k) {
          int64_t rm = k, off = base;
          for (int d = rr - 1; d >= 0; --d) { off += (rm % rdims[d]) * rstr[d]; rm /= rdims[d]; }
          acc = comb(acc, Acc(acc_t<T>(xs[off])));
        }
      }
      ys[o] = from_acc<T>(acc_t<T>(acc));
    }
  });
}

static Register reg_reduce_sum("reduce_sum", PrimDef{
    .shape = reduce_shape,
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
      auto axes = normalize_axes(a.ints("axes"), in[0].ndim(), "axis");
      PODLET_DTYPE_SWITCH(in[0].dtype(), T, {
        if constexpr (std::is_same_v<T, bool>) throw DTypeError("reduce_sum of bool: cast to int32 first");
        else if constexpr (std::is_same_v<T, double>) reduce_generic<T, double>(in[0], out[0], axes, 0.0, [](double s, double v) { return s + v; });
        else if constexpr (std::is_floating_point_v<acc_t<T>>) reduce_generic<T, float>(in[0], out[0], axes, 0.0f, [](float s, float v) { return s + v; });
        else reduce_generic<T, acc_t<T>>(in[0], out[0], axes, acc_t<T>(0), [](auto s, auto v) { return s + v; });
      });
    },
    .vjp = [](Graph& g, const Node& n, const std::vector<int>& ct) -> std::vector<int> {
      const Shape& is = g.aval(n.in[0]).shape;
      auto axes = normalize_axes(n.attrs.ints("axes"), is.size(), "axis");
      std::vector<char> red(is.size(), 0);
      for (auto x : axes) red[x] = 1;
      std::vector<int64_t> dims;
      for (size_t d = 0; d < is.size(); ++d) if (!red[d]) dims.push_back(d);
      return {broadcast_in_dim(g, ct[0], is, dims)};
    },
    .flops = [](const std::vector<AVal>& in, const std::vector<AVal>&, const Attrs&) { return double(in[0].size()); }});

}  // namespace
}  // namespace podlet
