// Shape-changing primitives: reshape, transpose, broadcast_in_dim.
#include "podlet/prims/common.h"

namespace podlet {
namespace {
using namespace ops;

static Register reg_reshape("reshape", PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) -> std::vector<AVal> {
      check_arity(in, 1);
      Shape s = a.ints("new_sizes");
      for (auto d : s) if (d < 0) throw ShapeError(fmt("new_sizes ", shape_str(s), " has a negative dimension"));
      if (numel(s) != in[0].size())
        throw ShapeError(fmt("cannot reshape ", shape_str(in[0].shape), " (", in[0].size(), " elements) to ",
                             shape_str(s), " (", numel(s), " elements)"));
      return {AVal{in[0].dtype, s}};
    },
    // Row-major reshape is free: the output shares the input's buffer.
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
      out[0] = in[0].reshaped(a.ints("new_sizes")); },
    .vjp = [](Graph& g, const Node& n, const std::vector<int>& ct) -> std::vector<int> {
      return {reshape(g, ct[0], g.aval(n.in[0]).shape)}; },
    .flops = nullptr,
    .kernel_allocates = true});

static Register reg_transpose("transpose", PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) -> std::vector<AVal> {
      check_arity(in, 1);
      auto p = a.ints("permutation");
      const int r = in[0].shape.size();
      if (int(p.size()) != r) throw ShapeError(fmt("permutation has ", p.size(), " entries for rank ", r));
      std::vector<char> seen(r, 0);
      Shape s(r);
      for (int i = 0; i < r; ++i) {
        if (p[i] < 0 || p[i] >= r || seen[p[i]]) throw ShapeError("permutation is not a permutation of the axes");
        seen[p[i]] = 1; s[i] = in[0].shape[p[i]];
      }
      return {AVal{in[0].dtype, s}};
    },
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
      auto p = a.ints("permutation");
      const Shape& os = out[0].shape();
      const int r = os.size();
      Shape ist = strides_of(in[0].shape()), st(r);
      for (int i = 0; i < r; ++i) st[i] = ist[p[i]];
      const size_t isz = itemsize(in[0].dtype());
      const int64_t inner = r ? os[r - 1] : 1, sin = r ? st[r - 1] : 0;
      const int64_t rows = out[0].size() / std::max<int64_t>(inner, 1);
      const char* x = static_cast<const char*>(in[0].raw()); char* y = static_cast<char*>(out[0].raw());
      auto body = [&](auto tag) {
        using E = decltype(tag);
        const E* xs = reinterpret_cast<const E*>(x); E* ys = reinterpret_cast<E*>(y);
        parallel_for(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(inner, 1)), [&](int64_t b, int64_t e) {
          for (int64_t row = b; row < e; ++row) {
            int64_t rem = row, off = 0;
            for (int d = r - 2; d >= 0; --d) { off += (rem % os[d]) * st[d]; rem /= os[d]; }
            for (int64_t j = 0; j < inner; ++j) ys[row * inner + j] = xs[off + j * sin];
          }
        });
      };
      if (out[0].size() == 0) return;
      switch (isz) { case 1: body(uint8_t()); break; case 2: body(uint16_t()); break;
                     case 4: body(uint32_t()); break; default: body(uint64_t()); }
    },
    .vjp = [](Graph& g, const Node& n, const std::vector<int>& ct) -> std::vector<int> {
      auto p = n.attrs.ints("permutation");
      std::vector<int64_t> inv(p.size());
      for (size_t i = 0; i < p.size(); ++i) inv[p[i]] = i;
      return {transpose(g, ct[0], inv)};
    },
    .flops = nullptr});

static Register reg_bcast("broadcast_in_dim", PrimDef{
    // Operand dim i maps to output dim broadcast_dimensions[i]; its size must be 1 or equal.
    .shape = [](const std::vector<AVal>& in, const Attrs& a) -> std::vector<AVal> {
      check_arity(in, 1);
      Shape s = a.ints("shape");
      auto dims = a.ints("broadcast_dimensions");
      if (dims.size() != in[0].shape.size())
        throw ShapeError(fmt("broadcast_dimensions has ", dims.size(), " entries for an operand of rank ", in[0].shape.size()));
      for (size_t i = 0; i < dims.size(); ++i) {
        if (dims[i] < 0 || dims[i] >= int64_t(s.size()) || (i && dims[i] <= dims[i - 1]))
          throw ShapeError("broadcast_dimensions must be strictly increasing and within the output rank");
        if (in[0].shape[i] != 1 && in[0].shape[i] != s[dims[i]])
          throw ShapeError(fmt("cannot broadcast ", shape_str(in[0].shape), " to ", shape_str(s)));
      }
      return {AVal{in[0].dtype, s}};
    },
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
      auto dims = a.ints("broadcast_dimensions");
      const Shape& os = out[0].shape();
      const int r = os.size();
      Shape ist = strides_of(in[0].shape()), st(r, 0);
      for (size_t i = 0; i < dims.size(); ++i) st[dims[i]] = in[0].shape()[i] == 1 ? 0 : ist[i];
      const size_t isz = itemsize(in[0].dtype());
      const int64_t inner = r ? os[r - 1] : 1, sin = r ? st[r - 1] : 0;
      const int64_t rows = out[0].size() / std::max<int64_t>(inner, 1);
      if (out[0].size() == 0) return;
      auto body = [&](auto tag) {
        using E = decltype(tag);
        const E* xs = in[0].data<E>(); E* ys = out[0].data<E>();
        parallel_for(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(inner, 1)), [&](int64_t b, int64_t e) {
          for (int64_t row = b; row < e; ++row) {
            int64_t rem = row, off = 0;
            for (int d = r - 2; d >= 0; --d) { off += (rem % os[d]) * st[d]; rem /= os[d]; }
            for (int64_t j = 0; j < inner; ++j) ys[row * inner + j] = xs[off + j * sin];
          }
        });
      };
      switch (isz) { case 1: body(uint8_t()); break; case 2: body(uint16_t()); break;
                     case 4: body(uint32_t()); break; default: body(uint64_t()); }
    },
    .vjp = [](Graph& g, const Node& n, const std::vector<int>& ct) -> std::vector<int> {
      // Sum over the new dims and over dims that were size 1 in the operand.
      auto dims = n.attrs.ints("broadcast_dimensions");
      const Shape& is = g.aval(n.in[0]).shape;
      const Shape& os = g.aval(n.out[0]).shape;
      std::vector<int64_t> axes;
      std::vector<char> kept(os.size(), 0);
      for (size_t i = 0; i < dims.size(); ++i) if (is[i] == os[dims[i]]) kept[dims[i]] = 1;
      for (size_t d = 0; d < os.size(); ++d) if (!kept[d]) axes.push_back(d);
      return {reshape(g, reduce_sum(g, ct[0], axes), is)};
    },
    .flops = nullptr});

}  // namespace
}  // namespace podlet
