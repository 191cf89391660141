// Gathers and scatters along one axis: take / scatter_add (its transpose) and
// take_along_axis / scatter_add_along_axis (its transpose).
//
// Indices are integer arrays (int32, uint32 or uint8). Out-of-range indices clamp to
// [0, n-1], like jnp.take(mode="clip") / np.take(mode="clip"): -1 reads element 0.
// Scatters that make several updates land on one element add them in row-major order
// of the updates, whatever the thread count (work is split by destination, never by
// update), and bf16 accumulates in f32 with one rounding at the end.
#include "podlet/prims/common.h"
#include "podlet/ir/batch_ops.h"
#include <cstring>

namespace podlet {
namespace {
using namespace ops;

void check_index_dtype(const AVal& idx) {
  if (!is_int(idx.dtype)) throw DTypeError(fmt("indices must be integers (int32), got ", dtype_name(idx.dtype)));
}

// Clamped copy of the indices as int64.
std::vector<int64_t> clamped_indices(const Array& idx, int64_t n) {
  std::vector<int64_t> r(size_t(idx.size()));
  auto run = [&](auto tag) {
    using I = decltype(tag);
    const I* p = idx.data<I>();
    parallel_for(idx.size(), kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) r[i] = std::clamp<int64_t>(int64_t(p[i]), 0, n - 1);
    });
  };
  switch (idx.dtype()) {
    case DType::i32: run(int32_t()); break;
    case DType::u32: run(uint32_t()); break;
    case DType::u8: run(uint8_t()); break;
    default: throw DTypeError(fmt("indices must be integers, got ", dtype_name(idx.dtype())));
  }
  return r;
}

// x viewed as [outer, n, inner] around `axis`.
struct AxisView { int64_t outer = 1, n = 1, inner = 1; };
AxisView axis_view(const Shape& s, int64_t axis) {
  AxisView v;
  for (int64_t d = 0; d < int64_t(s.size()); ++d) (d < axis ? v.outer : d == axis ? v.n : v.inner) *= s[d];
  return v;
}

// x.shape[:axis] + idx.shape + x.shape[axis+1:]
Shape take_shape(const Shape& xs, const Shape& is, int64_t axis) {
  Shape s(xs.begin(), xs.begin() + axis);
  s.insert(s.end(), is.begin(), is.end());
  s.insert(s.end(), xs.begin() + axis + 1, xs.end());
  return s;
}

int64_t take_axis(const AVal& x, const Attrs& a) {
  if (x.shape.empty()) throw ShapeError("cannot index a 0-d array along an axis");
  return normalize_axes({a.i("axis", 0)}, x.shape.size(), "axis")[0];
}

// Adds in the arithmetic type (f32 for bf16, wrapping unsigned for int32/uint8).
template <class T> using sacc_t = std::conditional_t<std::is_same_v<T, bf16>, float,
                                  std::conditional_t<std::is_same_v<T, int32_t> || std::is_same_v<T, uint8_t>, uint32_t, T>>;

// Runs body(Acc* buf) on an accumulation buffer holding `out`'s values, then stores
// it back into `out`: the buffer is `out` itself unless T is bf16 / needs widening.
template <class T, class F>
void with_accumulator(Array& out, F&& body) {
  using Acc = sacc_t<T>;
  T* y = out.data<T>();
  if constexpr (std::is_same_v<Acc, T>) {
    body(y);
  } else {
    const int64_t n = out.size();
    std::vector<Acc> buf(static_cast<size_t>(n));
    parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) { if constexpr (std::is_same_v<T, bf16>) buf[i] = float(y[i]); else buf[i] = Acc(y[i]); }
    });
    body(buf.data());
    parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) { if constexpr (std::is_same_v<T, bf16>) y[i] = bf16(buf[i]); else y[i] = T(buf[i]); }
    });
  }
}

template <class T> inline sacc_t<T> to_sacc(T v) {
  if constexpr (std::is_same_v<T, bf16>) return float(v); else return sacc_t<T>(v);
}

void copy_buffer(const Array& src, Array& dst) {
  const char* s = static_cast<const char*>(src.raw());
  char* d = static_cast<char*>(dst.raw());
  parallel_for(int64_t(src.nbytes()), kGrain * 4, [&](int64_t b, int64_t e) { std::memcpy(d + b, s + b, size_t(e - b)); });
}

// ---- batching rules (vmap) --------------------------------------------------------------
// Unbatched indices: the axis moves past the mapped one. Batched indices: the per-element
// gather / scatter along `axis` is the along-axis form with the mapped axis as a
// broadcast dim: indices flattened to [B, 1.., m, 1..] against operand [B|1, pre, n, post].
// Copies and scatters walk the updates in the same order, so the bits are the loop's.
namespace bt = batching;
using Ids = std::vector<int>;

int64_t elem_axis(const BatchCtx& c) { return take_axis(c.in_avals[0], c.n.attrs); }
Attrs with_axis(const BatchCtx& c, int64_t axis) { Attrs a = c.n.attrs; a.set("axis", axis); return a; }
// x with a leading 1 when unbatched (it then broadcasts against the batched indices).
int lead(Graph& g, int x, int bdim) {
  if (bdim >= 0) return x;
  return reshape(g, x, bt::with_batch(g.aval(x).shape, 1));
}
// Batched indices [B, is...] as [B, 1 x axis, m, 1 x post] for an operand of rank r.
int along_indices(Graph& g, int idx, int64_t size, int64_t axis, size_t r) {
  Shape s(r + 1, 1);
  s[0] = size;
  s[axis + 1] = numel(g.aval(idx).shape) / std::max<int64_t>(size, 1);
  return reshape(g, idx, s);
}

Ids take_batch(Graph& g, const BatchCtx& c, const Ids& in, const Ids& bd, Ids& ob) {
  const int64_t axis = elem_axis(c);
  if (bd[1] < 0) return bt::reapply(g, c, in, with_axis(c, axis + 1), ob);
  const Shape xs = c.in_avals[0].shape;
  int x = lead(g, in[0], bd[0]);
  int idx = along_indices(g, in[1], c.size, axis, xs.size());
  int y = g.add1("take_along_axis", {x, idx}, {{"axis", axis + 1}});
  ob = {0};
  return {reshape(g, y, bt::with_batch(c.out_avals[0].shape, c.size))};
}

Ids scatter_add_batch(Graph& g, const BatchCtx& c, const Ids& in, const Ids& bd, Ids& ob) {
  const int64_t axis = elem_axis(c);
  int x = bt::materialize(g, in[0], bd[0], c.size), u = bt::materialize(g, in[2], bd[2], c.size);
  if (bd[1] < 0) return bt::reapply(g, c, {x, in[1], u}, with_axis(c, axis + 1), ob);
  const Shape xs = c.in_avals[0].shape;
  int idx = along_indices(g, in[1], c.size, axis, xs.size());
  Shape us = bt::with_batch(xs, c.size);
  us[axis + 1] = g.aval(idx).shape[axis + 1];
  u = reshape(g, u, us);
  ob = {0};
  return {g.add1("scatter_add_along_axis", {x, idx, u}, {{"axis", axis + 1}})};
}

Ids take_along_batch(Graph& g, const BatchCtx& c, const Ids& in, const Ids& bd, Ids& ob) {
  const int64_t axis = elem_axis(c);
  return bt::reapply(g, c, {lead(g, in[0], bd[0]), lead(g, in[1], bd[1])}, with_axis(c, axis + 1), ob);
}

Ids scatter_along_batch(Graph& g, const BatchCtx& c, const Ids& in, const Ids& bd, Ids& ob) {
  const int64_t axis = elem_axis(c);
  return bt::reapply(g, c, {bt::materialize(g, in[0], bd[0], c.size), lead(g, in[1], bd[1]),
                            bt::materialize(g, in[2], bd[2], c.size)}, with_axis(c, axis + 1), ob);
}

// ---- take / scatter_add ---------------------------------------------------------------

static Register reg_take("take", PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) -> std::vector<AVal> {
      check_arity(in, 2);
      check_index_dtype(in[1]);
      const int64_t axis = take_axis(in[0], a);
      if (in[0].shape[axis] == 0 && in[1].size() > 0)
        throw ShapeError(fmt("cannot take indices from axis ", axis, " of size 0"));
      return {AVal{in[0].dtype, take_shape(in[0].shape, in[1].shape, axis)}};
    },
    // out[o, j, :] = x[o, clamp(idx[j]), :]: one memcpy of `inner` elements per (o, j).
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
      const int64_t axis = take_axis(in[0].aval(), a);
      const AxisView v = axis_view(in[0].shape(), axis);
      const int64_t m = in[1].size();
      if (out[0].size() == 0) return;
      auto idx = clamped_indices(in[1], v.n);
      const size_t row = size_t(v.inner) * itemsize(in[0].dtype());
      const char* x = static_cast<const char*>(in[0].raw());
      char* y = static_cast<char*>(out[0].raw());
      parallel_for(v.outer * m, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, v.inner)), [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
          const int64_t o = t / m, j = t % m;
          std::memcpy(y + t * row, x + (o * v.n + idx[j]) * row, row);
        }
      });
    },
    .vjp = [](Graph& g, const Node& n, const std::vector<int>& ct) -> std::vector<int> {
      return {g.add1("scatter_add", {zeros_like(g, n.in[0]), n.in[1], ct[0]}, n.attrs), -1};
    },
    .flops = nullptr, .batch = take_batch});

static Register reg_scatter_add("scatter_add", PrimDef{
    // updates must have the shape take(operand, idx, axis) would have.
    .shape = [](const std::vector<AVal>& in, const Attrs& a) -> std::vector<AVal> {
      check_arity(in, 3);
      check_index_dtype(in[1]);
      check_same_dtype({in[0], in[2]});
      if (in[0].dtype == DType::boolean) throw DTypeError("scatter_add of bool is not supported: cast to int32 first");
      const int64_t axis = take_axis(in[0], a);
      if (in[0].shape[axis] == 0 && in[1].size() > 0)
        throw ShapeError(fmt("cannot scatter indices into axis ", axis, " of size 0"));
      Shape want = take_shape(in[0].shape, in[1].shape, axis);
      if (in[2].shape != want)
        throw ShapeError(fmt("updates have shape ", shape_str(in[2].shape), ", expected ", shape_str(want),
                             " (operand.shape[:axis] + indices.shape + operand.shape[axis+1:])"));
      return {in[0]};
    },
    // out = operand; out[o, clamp(idx[j]), i] += upd[o, j, i]. Tasks own (o, column
    // block) pairs and walk j in order, so duplicate indices add deterministically.
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
      const int64_t axis = take_axis(in[0].aval(), a);
      const AxisView v = axis_view(in[0].shape(), axis);
      const int64_t m = in[1].size();
      copy_buffer(in[0], out[0]);
      if (out[0].size() == 0 || m == 0) return;
      auto idx = clamped_indices(in[1], v.n);
      constexpr int64_t kCols = 256;
      const int64_t ncb = (v.inner + kCols - 1) / kCols;
      PODLET_DTYPE_SWITCH(in[0].dtype(), T, {
        using Acc = sacc_t<T>;
        const T* u = in[2].data<T>();
        with_accumulator<T>(out[0], [&](Acc* acc) {
          parallel_for(v.outer * ncb, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, m * std::min(v.inner, kCols))),
                       [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; ++t) {
              const int64_t o = t / ncb, i0 = (t % ncb) * kCols, i1 = std::min(v.inner, i0 + kCols);
              for (int64_t j = 0; j < m; ++j) {
                Acc* dst = acc + (o * v.n + idx[j]) * v.inner;
                const T* src = u + (o * m + j) * v.inner;
                for (int64_t i = i0; i < i1; ++i) dst[i] = Acc(dst[i] + to_sacc(src[i]));
              }
            }
          });
        });
      });
    },
    .vjp = [](Graph& g, const Node& n, const std::vector<int>& ct) -> std::vector<int> {
      return {ct[0], -1, g.add1("take", {ct[0], n.in[1]}, n.attrs)};
    },
    .flops = [](const std::vector<AVal>& in, const std::vector<AVal>&, const Attrs&) { return double(in[2].size()); }, .batch = scatter_add_batch});

// ---- take_along_axis / scatter_add_along_axis -----------------------------------------
// x and idx have the same rank; on every dim but `axis` their sizes broadcast (equal or
// 1). out[p] = x[p with p[axis] := clamp(idx[p])], broadcast dims read index 0.

Shape along_shape(const Shape& xs, const Shape& is, int64_t axis) {
  if (xs.size() != is.size())
    throw ShapeError(fmt("indices of rank ", is.size(), " ", shape_str(is), " must have the operand's rank ", xs.size()));
  Shape s(xs.size());
  for (size_t d = 0; d < xs.size(); ++d) {
    if (int64_t(d) == axis) { s[d] = is[d]; continue; }
    if (xs[d] != is[d] && xs[d] != 1 && is[d] != 1)
      throw ShapeError(fmt("operand ", shape_str(xs), " and indices ", shape_str(is),
                           " do not broadcast along dimension ", d, " (only axis ", axis, " may differ)"));
    s[d] = xs[d] == 1 ? is[d] : xs[d];
  }
  return s;
}

// Strides of `s` seen from `out` with 0 on broadcast (size-1) dims.
Shape bstrides(const Shape& s, const Shape& out) {
  Shape st = strides_of(s);
  for (size_t d = 0; d < s.size(); ++d) if (s[d] == 1 && out[d] != 1) st[d] = 0;
  return st;
}

std::vector<AVal> along_check(const std::vector<AVal>& in, const Attrs& a, int64_t& axis) {
  check_index_dtype(in[1]);
  axis = take_axis(in[0], a);
  Shape s = along_shape(in[0].shape, in[1].shape, axis);
  if (in[0].shape[axis] == 0 && numel(s) > 0)
    throw ShapeError(fmt("cannot index axis ", axis, " of size 0"));
  return {AVal{in[0].dtype, s}};
}

static Register reg_take_along_axis("take_along_axis", PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) -> std::vector<AVal> {
      check_arity(in, 2);
      int64_t axis;
      return along_check(in, a, axis);
    },
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
      const int64_t axis = take_axis(in[0].aval(), a);
      const Shape& os = out[0].shape();
      const int r = os.size();
      if (out[0].size() == 0) return;
      const int64_t n = in[0].shape()[axis];
      auto idx = clamped_indices(in[1], n);
      Shape xst = bstrides(in[0].shape(), os), ist = bstrides(in[1].shape(), os);
      const int64_t ax_stride = strides_of(in[0].shape())[axis];
      xst[axis] = 0;  // the axis coordinate comes from idx
      const int64_t inner = os[r - 1], rows = out[0].size() / inner;
      const size_t isz = itemsize(in[0].dtype());
      const char* x = static_cast<const char*>(in[0].raw());
      char* y = static_cast<char*>(out[0].raw());
      parallel_for(rows, std::max<int64_t>(1, kGrain / inner), [&](int64_t b, int64_t e) {
        for (int64_t row = b; row < e; ++row) {
          int64_t rem = row, xo = 0, io = 0;
          for (int d = r - 2; d >= 0; --d) { int64_t k = rem % os[d]; rem /= os[d]; xo += k * xst[d]; io += k * ist[d]; }
          for (int64_t j = 0; j < inner; ++j) {
            const int64_t src = xo + j * xst[r - 1] + idx[io + j * ist[r - 1]] * ax_stride;
            std::memcpy(y + (row * inner + j) * isz, x + src * isz, isz);
          }
        }
      });
    },
    .vjp = [](Graph& g, const Node& n, const std::vector<int>& ct) -> std::vector<int> {
      return {g.add1("scatter_add_along_axis", {zeros_like(g, n.in[0]), n.in[1], ct[0]}, n.attrs), -1};
    },
    .flops = nullptr, .batch = take_along_batch});

static Register reg_scatter_add_along_axis("scatter_add_along_axis", PrimDef{
    // updates must have the shape take_along_axis(operand, idx, axis) would have.
    .shape = [](const std::vector<AVal>& in, const Attrs& a) -> std::vector<AVal> {
      check_arity(in, 3);
      check_same_dtype({in[0], in[2]});
      if (in[0].dtype == DType::boolean) throw DTypeError("scatter_add_along_axis of bool is not supported: cast to int32 first");
      int64_t axis;
      Shape want = along_check(in, a, axis)[0].shape;
      if (in[2].shape != want)
        throw ShapeError(fmt("updates have shape ", shape_str(in[2].shape), ", expected ", shape_str(want),
                             " (the shape of take_along_axis(operand, indices))"));
      return {in[0]};
    },
    // A "line" is one operand position on every dim but `axis`. Each task owns whole
    // lines and adds the updates that land on them in row-major order of the updates:
    // its sub-box is the operand's broadcast dims (size 1, wider in the updates) and
    // the axis dim of the updates.
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
      const int64_t axis = take_axis(in[0].aval(), a);
      const Shape& xs = in[0].shape();
      const Shape& us = in[2].shape();
      const int r = xs.size();
      copy_buffer(in[0], out[0]);
      if (out[0].size() == 0 || in[2].size() == 0) return;
      auto idx = clamped_indices(in[1], xs[axis]);
      const Shape xst = strides_of(xs), ust = strides_of(us), ist = bstrides(in[1].shape(), us);
      Shape line_dims, line_xst, line_ust, line_ist;   // dims indexing a line (operand dims != axis, size > 1)
      Shape box_dims, box_ust, box_ist;                // dims walked within a line, row-major
      for (int d = 0; d < r; ++d) {
        if (d == axis || (xs[d] == 1 && us[d] != 1)) { box_dims.push_back(us[d]); box_ust.push_back(ust[d]); box_ist.push_back(ist[d]); }
        else { line_dims.push_back(xs[d]); line_xst.push_back(xst[d]); line_ust.push_back(ust[d]); line_ist.push_back(ist[d]); }
      }
      const int64_t nlines = numel(line_dims), nbox = numel(box_dims), ax_stride = xst[axis];
      const int lr = line_dims.size(), br = box_dims.size();
      PODLET_DTYPE_SWITCH(in[0].dtype(), T, {
        using Acc = sacc_t<T>;
        const T* u = in[2].data<T>();
        with_accumulator<T>(out[0], [&](Acc* acc) {
          parallel_for(nlines, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, nbox)), [&](int64_t b, int64_t e) {
            for (int64_t l = b; l < e; ++l) {
              int64_t rem = l, xo = 0, uo = 0, io = 0;
              for (int d = lr - 1; d >= 0; --d) {
                int64_t k = rem % line_dims[d]; rem /= line_dims[d];
                xo += k * line_xst[d]; uo += k * line_ust[d]; io += k * line_ist[d];
              }
              for (int64_t q = 0; q < nbox; ++q) {
                int64_t rq = q, uq = uo, iq = io;
                for (int d = br - 1; d >= 0; --d) { int64_t k = rq % box_dims[d]; rq /= box_dims[d]; uq += k * box_ust[d]; iq += k * box_ist[d]; }
                Acc& dst = acc[xo + idx[iq] * ax_stride];
                dst = Acc(dst + to_sacc(u[uq]));
              }
            }
          });
        });
      });
    },
    .vjp = [](Graph& g, const Node& n, const std::vector<int>& ct) -> std::vector<int> {
      return {ct[0], -1, g.add1("take_along_axis", {ct[0], n.in[1]}, n.attrs)};
    },
    .flops = [](const std::vector<AVal>& in, const std::vector<AVal>&, const Attrs&) { return double(in[2].size()); }, .batch = scatter_along_batch});

}  // namespace
}  // namespace podlet
