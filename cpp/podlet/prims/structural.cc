// Shape-changing primitives: reshape, transpose, broadcast_in_dim, slice, dynamic_slice,
// dynamic_update_slice, concatenate, pad, rev, iota, stop_gradient, copy.
//
// Every kernel here moves elements without arithmetic, so it works on raw bytes of the
// element size (all 7 dtypes alike) through copy_strided (prims/common.h): a box of the
// output is read from the input through per-dimension strides.
#include "podlet/prims/common.h"
#include "podlet/ir/batch_ops.h"
#include <cstring>

namespace podlet {
namespace {
using namespace ops;

// Row-major strides of `s`, multiplied per dimension by `mul` (strided slices).
Shape scaled_strides(const Shape& s, const std::vector<int64_t>& mul) {
  Shape st = strides_of(s);
  for (size_t d = 0; d < st.size(); ++d) st[d] *= mul[d];
  return st;
}

// Plain contiguous copy of a whole array into an allocated output of the same size.
void copy_all(const Array& src, Array& dst) {
  const char* s = static_cast<const char*>(src.raw());
  char* d = static_cast<char*>(dst.raw());
  parallel_for(int64_t(src.nbytes()), kGrain * 4, [&](int64_t b, int64_t e) { std::memcpy(d + b, s + b, size_t(e - b)); });
}

void check_rank_list(const std::vector<int64_t>& v, size_t rank, const char* what) {
  if (v.size() != rank) throw ShapeError(fmt(what, " has ", v.size(), " entries, expected one per dimension (", rank, ")"));
}

std::string list_str(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}


// ---- batching rules (vmap): the mapped axis is axis 0 of every batched operand -------
namespace bt = batching;
using Ids = std::vector<int>;

Ids batch_reshape(Graph& g, const BatchCtx& c, const Ids& in, const Ids& bd, Ids& ob) {
  Attrs a = c.n.attrs;
  a.set("new_sizes", bt::with_batch(a.ints("new_sizes"), c.size));
  return bt::reapply(g, c, in, a, ob);
}
Ids batch_transpose(Graph& g, const BatchCtx& c, const Ids& in, const Ids& bd, Ids& ob) {
  Attrs a = c.n.attrs;
  auto p = a.ints("permutation");
  std::vector<int64_t> q = {0};
  for (auto v : p) q.push_back(v + 1);
  a.set("permutation", q);
  return bt::reapply(g, c, in, a, ob);
}
Ids batch_broadcast_in_dim(Graph& g, const BatchCtx& c, const Ids& in, const Ids& bd, Ids& ob) {
  Attrs a = c.n.attrs;
  auto dims = a.ints("broadcast_dimensions");
  std::vector<int64_t> d2 = {0};
  for (auto v : dims) d2.push_back(v + 1);
  a.set("shape", bt::with_batch(a.ints("shape"), c.size));
  a.set("broadcast_dimensions", d2);
  return bt::reapply(g, c, in, a, ob);
}
Ids batch_slice(Graph& g, const BatchCtx& c, const Ids& in, const Ids& bd, Ids& ob) {
  Attrs a = c.n.attrs;
  auto st = a.ints("start_indices"), lim = a.ints("limit_indices"), str = a.ints("strides", {});
  st.insert(st.begin(), 0);
  lim.insert(lim.begin(), c.size);
  if (!str.empty()) str.insert(str.begin(), 1);
  a.set("start_indices", st);
  a.set("limit_indices", lim);
  if (!str.empty()) a.set("strides", str);
  return bt::reapply(g, c, in, a, ob);
}
// Unbatched start indices: the mapped axis gets start 0 and its full size. Batched ones
// (a start per element): the per-element window along each such dim is a gather,
// take_along_axis with indices clamp(start) + iota(size) (XLA's clamp, so the window
// fits), of the window the unbatched dims give.
int i32_start(Graph& g, int s) {
  const DType d = g.aval(s).dtype;
  return d == DType::i32 ? s : convert(g, s, DType::i32);
}
// The element's start along a dim of size `dim` for a window of `size`, clamped to
// [0, dim - size] in int32, shaped [B, 1, ...] (rank r + 1) with the mapped size at
// position 0 (or [1, ...] when unbatched).
int clamped_start(Graph& g, int s, int sbd, int64_t dim, int64_t size, size_t r) {
  const DType d = g.aval(s).dtype;
  if (d == DType::u32 || d == DType::u8)  // clamp above before the cast (no wrap to negative)
    s = g.add1("min", {s, g.add_const(full(d, {}, double(std::min<int64_t>(dim - size, d == DType::u8 ? 255 : 0xFFFFFFFFll))))});
  s = i32_start(g, s);
  s = g.add1("clamp", {g.add_const(full(DType::i32, {}, 0.0)), s, g.add_const(full(DType::i32, {}, double(dim - size)))});
  Shape sh(r + 1, 1);
  if (sbd >= 0) sh[0] = g.aval(s).shape[0];
  return reshape(g, s, sh);
}
// iota(n) along dim d + 1 of a rank r + 1 array of ones elsewhere.
int iota_along(Graph& g, int64_t n, size_t d, size_t r) {
  Shape sh(r + 1, 1);
  sh[d + 1] = n;
  return g.add1("iota", {}, {{"shape", sh}, {"dimension", int64_t(d + 1)}, {"dtype", std::string("int32")}});
}

Ids batch_dynamic_slice(Graph& g, const BatchCtx& c, const Ids& in, const Ids& bd, Ids& ob) {
  const Shape xs = c.in_avals[0].shape;
  const size_t r = xs.size();
  Shape sizes = c.n.attrs.ints("slice_sizes");
  // First the unbatched starts (batched dims keep their full extent), as one dynamic_slice.
  Shape sz1 = sizes;
  Ids starts = {g.add_const(full(DType::i32, {}, 0.0))};
  bool any_b = false;
  for (size_t d = 0; d < r; ++d) {
    if (bd[d + 1] >= 0) { any_b = true; sz1[d] = xs[d]; starts.push_back(g.add_const(full(DType::i32, {}, 0.0))); }
    else starts.push_back(in[d + 1]);
  }
  if (!any_b) {
    Attrs a = c.n.attrs;
    a.set("slice_sizes", bt::with_batch(sizes, c.size));
    Ids x = {in[0]};
    x.insert(x.end(), starts.begin(), starts.end());
    return bt::reapply(g, c, x, a, ob);
  }
  int x = in[0];
  int xb = bd[0];
  if (sz1 != xs) {
    Shape full_sz = sz1;
    full_sz.insert(full_sz.begin(), xb >= 0 ? c.size : 1);
    if (xb < 0) x = reshape(g, x, bt::with_batch(xs, 1));
    Ids args = {x};
    args.insert(args.end(), starts.begin(), starts.end());
    x = g.add1("dynamic_slice", args, {{"slice_sizes", full_sz}});
  } else if (xb < 0) {
    x = reshape(g, x, bt::with_batch(xs, 1));
  }
  for (size_t d = 0; d < r; ++d) {
    if (bd[d + 1] < 0) continue;
    int st = clamped_start(g, in[d + 1], bd[d + 1], xs[d], sizes[d], r);
    int idx = add(g, st, iota_along(g, sizes[d], d, r));  // [B, 1.., size_d, 1..]
    x = g.add1("take_along_axis", {x, idx}, {{"axis", int64_t(d + 1)}});
  }
  ob = {0};
  return {x};  // every batched start made it [B, sizes...]
}
// A per-element start along some dim: the element's update is gathered to the operand's
// shape (position p reads update[clamp(p - start)]) and selected where p lies in the
// element's window.
Ids batch_dynamic_update_slice(Graph& g, const BatchCtx& c, const Ids& in, const Ids& bd, Ids& ob) {
  bool any_b = false;
  for (size_t k = 2; k < in.size(); ++k) any_b |= bd[k] >= 0;
  Ids x = {bt::materialize(g, in[0], bd[0], c.size), bt::materialize(g, in[1], bd[1], c.size)};
  if (!any_b) {
    x.push_back(g.add_const(full(in.size() > 2 ? g.aval(in[2]).dtype : DType::i32, {}, 0.0)));
    x.insert(x.end(), in.begin() + 2, in.end());
    return bt::reapply(g, c, x, c.n.attrs, ob);
  }
  const Shape xs = c.in_avals[0].shape, us = c.in_avals[1].shape;
  const size_t r = xs.size();
  ob = {0};
  if (numel(us) == 0) return {x[0]};
  int u = x[1], mask = -1;
  for (size_t d = 0; d < r; ++d) {
    int st = clamped_start(g, in[d + 2], bd[d + 2], xs[d], us[d], r);
    int p = iota_along(g, xs[d], d, r);
    int rel = sub(g, p, st);  // [B|1, 1.., xs[d], 1..]
    int lo = g.add1("ge", {rel, g.add_const(full(DType::i32, {}, 0.0))});
    int hi = g.add1("lt", {rel, g.add_const(full(DType::i32, {}, double(us[d])))});
    int in_win = g.add1("and", {lo, hi});
    mask = mask < 0 ? in_win : g.add1("and", {mask, in_win});
    if (us[d] != xs[d] || bd[d + 2] >= 0) {
      int idx = g.add1("clamp", {g.add_const(full(DType::i32, {}, 0.0)), rel,
                                 g.add_const(full(DType::i32, {}, double(us[d] - 1)))});
      u = g.add1("take_along_axis", {u, idx}, {{"axis", int64_t(d + 1)}});
    }
  }
  return {g.add1("select", {mask, u, x[0]})};
}
Ids batch_concatenate(Graph& g, const BatchCtx& c, const Ids& in, const Ids& bd, Ids& ob) {
  Attrs a = c.n.attrs;
  a.set("dimension", bt::shift_axes({a.i("dimension")}, int64_t(c.in_avals[0].shape.size()))[0]);
  return bt::reapply(g, c, bt::materialize_all(g, in, bd, c.size), a, ob);
}
// A per-element padding value becomes a select between the padded operand and the
// padding value broadcast over the batch.
Ids batch_pad(Graph& g, const BatchCtx& c, const Ids& in, const Ids& bd, Ids& ob) {
  Attrs a = c.n.attrs;
  auto lo = a.ints("low"), hi = a.ints("high"), it = a.ints("interior", {});
  lo.insert(lo.begin(), 0);
  hi.insert(hi.begin(), 0);
  if (!it.empty()) it.insert(it.begin(), 0);
  a.set("low", lo);
  a.set("high", hi);
  if (!it.empty()) a.set("interior", it);
  const int x = bt::materialize(g, in[0], bd[0], c.size);
  if (bd[1] < 0) return bt::reapply(g, c, {x, in[1]}, a, ob);
  // pad with 0, pad a mask of ones with 0, select(mask, padded, value)
  const int zero = g.add_const(full(g.aval(in[1]).dtype, {}, 0.0));
  const int padded = g.add1("pad", {x, zero}, a);
  const int ones = g.add_const(full(DType::boolean, {}, 1.0));
  const int mask1 = ops::broadcast_in_dim(g, ones, g.aval(x).shape, {});
  const int fls = g.add_const(full(DType::boolean, {}, 0.0));
  const int mask = g.add1("pad", {mask1, fls}, a);
  const Shape os = g.aval(padded).shape;
  const int val = ops::broadcast_in_dim(g, in[1], os, {0});
  ob = {0};
  return {ops::select(g, mask, padded, val)};
}

// ---- reshape / transpose / broadcast_in_dim -------------------------------------------

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
    .flops = nullptr, .batch = batch_reshape,
    .kernel_allocates = true});

std::vector<int64_t> checked_permutation(const Attrs& a, int r) {
  auto p = a.ints("permutation");
  if (int(p.size()) != r) throw ShapeError(fmt("permutation ", list_str(p), " has ", p.size(), " entries for rank ", r));
  std::vector<char> seen(r, 0);
  for (int i = 0; i < r; ++i) {
    if (p[i] < 0 || p[i] >= r || seen[p[i]])
      throw ShapeError(fmt("permutation ", list_str(p), " is not a permutation of the axes 0..", r - 1));
    seen[p[i]] = 1;
  }
  return p;
}

static Register reg_transpose("transpose", PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) -> std::vector<AVal> {
      check_arity(in, 1);
      const int r = in[0].shape.size();
      auto p = checked_permutation(a, r);
      Shape s(r);
      for (int i = 0; i < r; ++i) s[i] = in[0].shape[p[i]];
      return {AVal{in[0].dtype, s}};
    },
    // Output dim i walks input dim p[i].
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
      auto p = a.ints("permutation");
      const Shape& os = out[0].shape();
      Shape ist = strides_of(in[0].shape()), st(os.size());
      for (size_t i = 0; i < os.size(); ++i) st[i] = ist[p[i]];
      copy_strided(in[0].raw(), 0, st, out[0].raw(), 0, strides_of(os), os, itemsize(in[0].dtype()));
    },
    .vjp = [](Graph& g, const Node& n, const std::vector<int>& ct) -> std::vector<int> {
      auto p = n.attrs.ints("permutation");
      std::vector<int64_t> inv(p.size());
      for (size_t i = 0; i < p.size(); ++i) inv[p[i]] = i;
      return {transpose(g, ct[0], inv)};
    },
    .flops = nullptr, .batch = batch_transpose});

static Register reg_bcast("broadcast_in_dim", PrimDef{
    // Operand dim i maps to output dim broadcast_dimensions[i]; its size must be 1 or equal.
    .shape = [](const std::vector<AVal>& in, const Attrs& a) -> std::vector<AVal> {
      check_arity(in, 1);
      Shape s = a.ints("shape");
      for (auto d : s) if (d < 0) throw ShapeError(fmt("shape ", shape_str(s), " has a negative dimension"));
      auto dims = a.ints("broadcast_dimensions");
      if (dims.size() != in[0].shape.size())
        throw ShapeError(fmt("broadcast_dimensions ", list_str(dims), " has ", dims.size(),
                             " entries for an operand of rank ", in[0].shape.size()));
      for (size_t i = 0; i < dims.size(); ++i) {
        if (dims[i] < 0 || dims[i] >= int64_t(s.size()) || (i && dims[i] <= dims[i - 1]))
          throw ShapeError(fmt("broadcast_dimensions ", list_str(dims),
                               " must be strictly increasing and within the output rank ", s.size()));
        if (in[0].shape[i] != 1 && in[0].shape[i] != s[dims[i]])
          throw ShapeError(fmt("cannot broadcast ", shape_str(in[0].shape), " to ", shape_str(s),
                               ": operand dimension ", i, " (size ", in[0].shape[i], ") must be 1 or ", s[dims[i]]));
      }
      return {AVal{in[0].dtype, s}};
    },
    // Broadcast output dims read the input with stride 0.
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
      auto dims = a.ints("broadcast_dimensions");
      const Shape& os = out[0].shape();
      Shape ist = strides_of(in[0].shape()), st(os.size(), 0);
      for (size_t i = 0; i < dims.size(); ++i) st[dims[i]] = in[0].shape()[i] == 1 ? 0 : ist[i];
      copy_strided(in[0].raw(), 0, st, out[0].raw(), 0, strides_of(os), os, itemsize(in[0].dtype()));
    },
    .vjp = [](Graph& g, const Node& n, const std::vector<int>& ct) -> std::vector<int> {
      // Sum over the new dims and over dims that were size 1 in the operand.
      auto dims = n.attrs.ints("broadcast_dimensions");
      const Shape is = g.aval(n.in[0]).shape;
      const Shape os = g.aval(n.out[0]).shape;
      std::vector<int64_t> axes;
      std::vector<char> kept(os.size(), 0);
      for (size_t i = 0; i < dims.size(); ++i) if (is[i] == os[dims[i]]) kept[dims[i]] = 1;
      for (size_t d = 0; d < os.size(); ++d) if (!kept[d]) axes.push_back(d);
      return {reshape(g, reduce_sum(g, ct[0], axes), is)};
    },
    .flops = nullptr, .batch = batch_broadcast_in_dim});

// ---- slice ----------------------------------------------------------------------------

struct SliceSpec { std::vector<int64_t> start, limit, strides; };

SliceSpec slice_spec(const Shape& is, const Attrs& a) {
  SliceSpec s{a.ints("start_indices"), a.ints("limit_indices"), a.ints("strides", {})};
  const size_t r = is.size();
  if (s.strides.empty()) s.strides.assign(r, 1);
  check_rank_list(s.start, r, "start_indices");
  check_rank_list(s.limit, r, "limit_indices");
  check_rank_list(s.strides, r, "strides");
  for (size_t d = 0; d < r; ++d) {
    if (s.strides[d] < 1) throw ShapeError(fmt("strides ", list_str(s.strides), " must be >= 1"));
    if (s.start[d] < 0 || s.start[d] > s.limit[d] || s.limit[d] > is[d])
      throw ShapeError(fmt("slice [", s.start[d], ":", s.limit[d], "] of dimension ", d, " (size ", is[d],
                           ") needs 0 <= start <= limit <= size"));
  }
  return s;
}

static Register reg_slice("slice", PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) -> std::vector<AVal> {
      check_arity(in, 1);
      auto s = slice_spec(in[0].shape, a);
      Shape o(in[0].shape.size());
      for (size_t d = 0; d < o.size(); ++d) o[d] = (s.limit[d] - s.start[d] + s.strides[d] - 1) / s.strides[d];
      return {AVal{in[0].dtype, o}};
    },
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
      auto s = slice_spec(in[0].shape(), a);
      Shape ist = strides_of(in[0].shape());
      int64_t base = 0;
      for (size_t d = 0; d < ist.size(); ++d) base += s.start[d] * ist[d];
      copy_strided(in[0].raw(), base, scaled_strides(in[0].shape(), s.strides), out[0].raw(), 0,
                   strides_of(out[0].shape()), out[0].shape(), itemsize(in[0].dtype()));
    },
    // Transpose of a strided slice: pad with zeros, interior padding stride-1 between
    // the kept elements (jax's _slice_transpose_rule).
    .vjp = [](Graph& g, const Node& n, const std::vector<int>& ct) -> std::vector<int> {
      const Shape is = g.aval(n.in[0]).shape, os = g.aval(n.out[0]).shape;
      auto s = slice_spec(is, n.attrs);
      std::vector<int64_t> lo, hi, interior;
      for (size_t d = 0; d < is.size(); ++d) {
        int64_t real_limit = os[d] == 0 ? s.start[d] : s.start[d] + (os[d] - 1) * s.strides[d] + 1;
        lo.push_back(s.start[d]); hi.push_back(is[d] - real_limit); interior.push_back(s.strides[d] - 1);
      }
      int zero = scalar_like(g, ct[0], 0.0);
      return {g.add1("pad", {ct[0], zero}, {{"low", lo}, {"high", hi}, {"interior", interior}})};
    },
    .flops = nullptr, .batch = batch_slice,
    // Same shape from start 0: every element, in order, whatever the strides.
    .identity = [](const std::vector<AVal>& in, const std::vector<AVal>&, const Attrs& a) {
      for (auto s : slice_spec(in[0].shape, a).start) if (s != 0) return false;
      return true;
    }});

// ---- dynamic_slice / dynamic_update_slice ---------------------------------------------

void check_start_operands(const std::vector<AVal>& in, size_t first, size_t rank) {
  if (in.size() != first + rank)
    throw ShapeError(fmt("expected ", rank, " start indices (one 0-d integer array per dimension), got ", in.size() - first));
  for (size_t k = first; k < in.size(); ++k) {
    if (!in[k].shape.empty())
      throw ShapeError(fmt("start index ", k - first, " must be a 0-d array, got shape ", shape_str(in[k].shape)));
    if (!is_int(in[k].dtype))
      throw DTypeError(fmt("start index ", k - first, " must be an integer, got ", dtype_name(in[k].dtype)));
  }
}

// Start indices clamped like XLA so the window [start, start + size) fits in [0, dim).
std::vector<int64_t> clamped_starts(const std::vector<Array>& in, size_t first, const Shape& dims, const Shape& sizes) {
  std::vector<int64_t> st(dims.size());
  for (size_t d = 0; d < dims.size(); ++d)
    st[d] = std::clamp<int64_t>(read_index_scalar(in[first + d]), 0, dims[d] - sizes[d]);
  return st;
}

int64_t dot_offset(const std::vector<int64_t>& idx, const Shape& strides) {
  int64_t o = 0;
  for (size_t d = 0; d < idx.size(); ++d) o += idx[d] * strides[d];
  return o;
}

std::vector<int> start_ids(const Node& n, size_t first) { return std::vector<int>(n.in.begin() + first, n.in.end()); }

static Register reg_dynamic_slice("dynamic_slice", PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) -> std::vector<AVal> {
      if (in.empty()) throw ValueError("expected an operand and start indices");
      const Shape& is = in[0].shape;
      check_start_operands(in, 1, is.size());
      Shape sz = a.ints("slice_sizes");
      check_rank_list(sz, is.size(), "slice_sizes");
      for (size_t d = 0; d < is.size(); ++d)
        if (sz[d] < 0 || sz[d] > is[d])
          throw ShapeError(fmt("slice_sizes ", shape_str(sz), ": size ", sz[d], " of dimension ", d,
                               " must be in [0, ", is[d], "]"));
      return {AVal{in[0].dtype, sz}};
    },
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs&) {
      const Shape& os = out[0].shape();
      auto st = clamped_starts(in, 1, in[0].shape(), os);
      Shape ist = strides_of(in[0].shape());
      copy_strided(in[0].raw(), dot_offset(st, ist), ist, out[0].raw(), 0, strides_of(os), os, itemsize(in[0].dtype()));
    },
    .vjp = [](Graph& g, const Node& n, const std::vector<int>& ct) -> std::vector<int> {
      std::vector<int> args = {zeros_like(g, n.in[0]), ct[0]};
      for (int s : start_ids(n, 1)) args.push_back(s);
      std::vector<int> r = {g.add1("dynamic_update_slice", args)};
      r.resize(n.in.size(), -1);
      return r;
    },
    .flops = nullptr, .batch = batch_dynamic_slice});

static Register reg_dynamic_update_slice("dynamic_update_slice", PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs&) -> std::vector<AVal> {
      if (in.size() < 2) throw ValueError("expected an operand, an update and start indices");
      check_same_dtype({in[0], in[1]});
      const Shape &is = in[0].shape, &us = in[1].shape;
      if (us.size() != is.size())
        throw ShapeError(fmt("update of rank ", us.size(), " ", shape_str(us), " must have the operand's rank ", is.size()));
      for (size_t d = 0; d < is.size(); ++d)
        if (us[d] > is[d])
          throw ShapeError(fmt("update ", shape_str(us), " does not fit in operand ", shape_str(is), " along dimension ", d));
      check_start_operands(in, 2, is.size());
      return {in[0]};
    },
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs&) {
      copy_all(in[0], out[0]);
      const Shape& us = in[1].shape();
      auto st = clamped_starts(in, 2, in[0].shape(), us);
      Shape ost = strides_of(out[0].shape());
      copy_strided(in[1].raw(), 0, strides_of(us), out[0].raw(), dot_offset(st, ost), ost, us, itemsize(in[0].dtype()));
    },
    .vjp = [](Graph& g, const Node& n, const std::vector<int>& ct) -> std::vector<int> {
      auto starts = start_ids(n, 2);
      std::vector<int> a = {ct[0], zeros_like(g, n.in[1])};
      a.insert(a.end(), starts.begin(), starts.end());
      std::vector<int> b = {ct[0]};
      b.insert(b.end(), starts.begin(), starts.end());
      std::vector<int> r = {g.add1("dynamic_update_slice", a),
                            g.add1("dynamic_slice", b, {{"slice_sizes", g.aval(n.in[1]).shape}})};
      r.resize(n.in.size(), -1);
      return r;
    },
    .flops = nullptr, .batch = batch_dynamic_update_slice});

// ---- concatenate ----------------------------------------------------------------------

int64_t concat_dim(const std::vector<AVal>& in, const Attrs& a) {
  if (in.empty()) throw ValueError("concatenate needs at least one operand");
  return normalize_axes({a.i("dimension")}, in[0].shape.size(), "dimension")[0];
}

static Register reg_concatenate("concatenate", PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) -> std::vector<AVal> {
      if (in.empty()) throw ValueError("concatenate needs at least one operand");
      if (in[0].shape.empty()) throw ShapeError("cannot concatenate 0-d arrays");
      const int64_t dim = concat_dim(in, a);
      check_same_dtype(in);
      Shape s = in[0].shape;
      for (size_t k = 1; k < in.size(); ++k) {
        const Shape& t = in[k].shape;
        bool ok = t.size() == s.size();
        for (size_t d = 0; ok && d < s.size(); ++d) ok = d == size_t(dim) || t[d] == s[d];
        if (!ok)
          throw ShapeError(fmt("operand ", k, " has shape ", shape_str(t), ", which does not match ",
                               shape_str(in[0].shape), " outside dimension ", dim));
        s[dim] += t[dim];
      }
      return {AVal{in[0].dtype, s}};
    },
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
      const int64_t dim = normalize_axes({a.i("dimension")}, out[0].ndim(), "dimension")[0];
      Shape ost = strides_of(out[0].shape());
      int64_t off = 0;
      for (auto& x : in) {
        copy_strided(x.raw(), 0, strides_of(x.shape()), out[0].raw(), off * ost[dim], ost, x.shape(), itemsize(x.dtype()));
        off += x.shape()[dim];
      }
    },
    .vjp = [](Graph& g, const Node& n, const std::vector<int>& ct) -> std::vector<int> {
      const Shape os = g.aval(n.out[0]).shape;
      const int64_t dim = normalize_axes({n.attrs.i("dimension")}, os.size(), "dimension")[0];
      std::vector<int> r;
      int64_t off = 0;
      for (int v : n.in) {
        std::vector<int64_t> start(os.size(), 0), limit(os.begin(), os.end());
        const int64_t len = g.aval(v).shape[dim];
        start[dim] = off; limit[dim] = off + len; off += len;
        r.push_back(g.add1("slice", {ct[0]}, {{"start_indices", start}, {"limit_indices", limit}}));
      }
      return r;
    },
    .flops = nullptr, .batch = batch_concatenate});

// ---- pad ------------------------------------------------------------------------------

struct PadSpec { std::vector<int64_t> lo, hi, interior; };

PadSpec pad_spec(const Shape& is, const Attrs& a) {
  PadSpec p{a.ints("low"), a.ints("high"), a.ints("interior", {})};
  if (p.interior.empty()) p.interior.assign(is.size(), 0);
  check_rank_list(p.lo, is.size(), "low");
  check_rank_list(p.hi, is.size(), "high");
  check_rank_list(p.interior, is.size(), "interior");
  for (auto v : p.interior) if (v < 0) throw ShapeError(fmt("interior padding ", list_str(p.interior), " must be >= 0"));
  return p;
}

int64_t padded_size(int64_t n, int64_t lo, int64_t hi, int64_t interior) {
  return lo + hi + n + std::max<int64_t>(n - 1, 0) * interior;
}

static Register reg_pad("pad", PrimDef{
    // Output size lo + hi + n + (n-1)*interior per dim; negative lo/hi crop.
    .shape = [](const std::vector<AVal>& in, const Attrs& a) -> std::vector<AVal> {
      check_arity(in, 2);
      if (!in[1].shape.empty())
        throw ShapeError(fmt("padding_value must be a 0-d array, got shape ", shape_str(in[1].shape)));
      check_same_dtype(in);
      const Shape& is = in[0].shape;
      auto p = pad_spec(is, a);
      Shape o(is.size());
      for (size_t d = 0; d < is.size(); ++d) {
        o[d] = padded_size(is[d], p.lo[d], p.hi[d], p.interior[d]);
        if (o[d] < 0)
          throw ShapeError(fmt("padding (low ", p.lo[d], ", high ", p.hi[d], ", interior ", p.interior[d],
                               ") of dimension ", d, " (size ", is[d], ") gives a negative size ", o[d]));
      }
      return {AVal{in[0].dtype, o}};
    },
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
      const Shape &is = in[0].shape(), &os = out[0].shape();
      const size_t isz = itemsize(in[0].dtype());
      auto p = pad_spec(is, a);
      fill_elements(out[0].raw(), out[0].size(), in[1].raw(), isz);
      // Input element i of dim d lands at lo + i*(interior+1); copy those inside [0, out).
      const size_t r = is.size();
      Shape ist = strides_of(is), ost = strides_of(os), box(r), dst_st(r);
      int64_t sbase = 0, dbase = 0;
      for (size_t d = 0; d < r; ++d) {
        const int64_t s = p.interior[d] + 1;
        const int64_t first = p.lo[d] >= 0 ? 0 : (-p.lo[d] + s - 1) / s;
        const int64_t last_pos = os[d] - 1 - p.lo[d];  // largest i*s that still fits
        const int64_t end = last_pos < 0 ? 0 : std::min(is[d], last_pos / s + 1);
        box[d] = std::max<int64_t>(0, end - first);
        sbase += first * ist[d];
        dbase += (p.lo[d] + first * s) * ost[d];
        dst_st[d] = s * ost[d];
      }
      if (numel(box) == 0) return;
      copy_strided(in[0].raw(), sbase, ist, out[0].raw(), dbase, dst_st, box, isz);
    },
    // Operand: undo low/high (a pad with the negated amounts) then take every
    // (interior+1)-th element. Padding value: everything the operand did not receive.
    .vjp = [](Graph& g, const Node& n, const std::vector<int>& ct) -> std::vector<int> {
      const Shape is = g.aval(n.in[0]).shape;
      auto p = pad_spec(is, n.attrs);
      const size_t r = is.size();
      std::vector<int64_t> nlo(r), nhi(r), zero(r, 0), step(r);
      for (size_t d = 0; d < r; ++d) { nlo[d] = -p.lo[d]; nhi[d] = -p.hi[d]; step[d] = p.interior[d] + 1; }
      int z = scalar_like(g, ct[0], 0.0);
      int unpadded = g.add1("pad", {ct[0], z}, {{"low", nlo}, {"high", nhi}, {"interior", zero}});
      const Shape us = g.aval(unpadded).shape;
      int t_op = g.add1("slice", {unpadded}, {{"start_indices", zero}, {"limit_indices", us}, {"strides", step}});
      std::vector<int64_t> all_ct(g.aval(ct[0]).shape.size()), all_in(r);
      for (size_t d = 0; d < all_ct.size(); ++d) all_ct[d] = d;
      for (size_t d = 0; d < r; ++d) all_in[d] = d;
      int t_pv = sub(g, reduce_sum(g, ct[0], all_ct), reduce_sum(g, t_op, all_in));
      return {t_op, t_pv};
    },
    .flops = nullptr, .batch = batch_pad,
    // Nothing added below, between or (same shape) above: the operand itself.
    .identity = [](const std::vector<AVal>& in, const std::vector<AVal>&, const Attrs& a) {
      auto p = pad_spec(in[0].shape, a);
      for (size_t d = 0; d < p.lo.size(); ++d) if (p.lo[d] != 0 || p.interior[d] != 0) return false;
      return true;
    }});

// ---- rev ------------------------------------------------------------------------------

std::vector<int64_t> rev_dims(const Attrs& a, int rank) {
  auto dims = normalize_axes(a.ints("dimensions"), rank, "dimension");
  std::vector<char> seen(rank, 0);
  for (auto d : dims) { if (seen[d]) throw ShapeError(fmt("dimension ", d, " repeated in dimensions")); seen[d] = 1; }
  return dims;
}

static Register reg_rev("rev", PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) -> std::vector<AVal> {
      check_arity(in, 1);
      rev_dims(a, in[0].shape.size());
      return {in[0]};
    },
    // Reversed dims start at the last element and walk with a negative stride.
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
      const Shape& s = in[0].shape();
      Shape st = strides_of(s);
      int64_t base = 0;
      for (auto d : rev_dims(a, s.size())) { base += (s[d] - 1) * st[d]; st[d] = -st[d]; }
      if (in[0].size() == 0) return;
      copy_strided(in[0].raw(), base, st, out[0].raw(), 0, strides_of(s), s, itemsize(in[0].dtype()));
    },
    .vjp = [](Graph& g, const Node& n, const std::vector<int>& ct) -> std::vector<int> {
      return {g.add1("rev", {ct[0]}, n.attrs)}; },
    .flops = nullptr, .batch = bt::axes_attr({"dimensions"})});

// ---- iota -----------------------------------------------------------------------------

static Register reg_iota("iota", PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) -> std::vector<AVal> {
      check_arity(in, 0);
      Shape s = a.ints("shape");
      for (auto d : s) if (d < 0) throw ShapeError(fmt("shape ", shape_str(s), " has a negative dimension"));
      if (s.empty()) throw ShapeError("iota needs a shape of rank >= 1");
      normalize_axes({a.i("dimension", 0)}, s.size(), "dimension");
      DType d = dtype_from_name(a.s("dtype"));
      if (d == DType::boolean) throw DTypeError("iota of dtype bool is not supported; use int32");
      return {AVal{d, s}};
    },
    // out[..., i, ...] = i along `dimension`.
    .kernel = [](const std::vector<Array>&, std::vector<Array>& out, const Attrs& a) {
      const Shape& s = out[0].shape();
      const int64_t dim = normalize_axes({a.i("dimension", 0)}, s.size(), "dimension")[0];
      const int64_t inner = strides_of(s)[dim], len = s[dim];
      PODLET_DTYPE_SWITCH(out[0].dtype(), T, {
        T* y = out[0].data<T>();
        parallel_for(out[0].size(), kGrain, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) {
            const int64_t v = (i / inner) % len;
            if constexpr (std::is_same_v<T, bf16>) y[i] = bf16(float(v)); else y[i] = T(v);
          }
        });
      });
    },
    .vjp = nullptr,
    .flops = nullptr,
    // No inputs, so never batched: the rule only restates that (the same iota for every element).
    .batch = [](Graph& g, const BatchCtx& c, const Ids& in, const Ids&, Ids& ob) {
      return bt::reapply(g, c, in, c.n.attrs, ob, -1);
    },
    .zero_grad = true});

// ---- gather_rows (ir/copy_fusion.h) ---------------------------------------------------
// gather_rows(x, rows; shape) -> out of `shape`: out viewed as [R, C] (C = the last dim of
// shape and of x) takes its row r from row rows[r] of x viewed as [numel(x) / C, C]
// (rows: int32 [R]). The copy-fusion pass writes it for a chain of slices,
// concatenations, transposes, reversals and reshapes that all keep the last dim whole
// (Swin's cyclic shift and window partition): one pass over the data instead of one per
// op. Only executable graphs hold it (no VJP, no batching rule).

std::vector<AVal> gather_rows_shape(const std::vector<AVal>& in, const Attrs& a) {
  check_arity(in, 2);
  const Shape s = a.ints("shape");
  for (auto d : s) if (d < 0) throw ShapeError(fmt("shape ", shape_str(s), " has a negative dimension"));
  if (s.empty() || in[0].shape.empty()) throw ShapeError("gather_rows needs arrays of rank >= 1");
  const int64_t C = s.back();
  if (in[0].shape.back() != C)
    throw ShapeError(fmt("gather_rows: operand shape ", shape_str(in[0].shape), " and output shape ", shape_str(s),
                         " must have the same last dimension"));
  if (in[1].dtype != DType::i32 || in[1].shape.size() != 1)
    throw DTypeError(fmt("gather_rows: rows must be a 1-d int32 array, got ", dtype_name(in[1].dtype),
                         shape_str(in[1].shape)));
  const int64_t R = C ? numel(s) / C : 0;
  if (in[1].shape[0] != R)
    throw ShapeError(fmt("gather_rows: rows has ", in[1].shape[0], " entries, expected ", R, " (one per row of ",
                         shape_str(s), ")"));
  return {AVal{in[0].dtype, s}};
}

void gather_rows_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs&) {
  const int64_t C = out[0].shape().back(), R = C ? out[0].size() / C : 0;
  const int64_t src_rows = C ? in[0].size() / C : 0;
  const int32_t* rows = in[1].data<int32_t>();
  for (int64_t r = 0; r < R; ++r)
    if (rows[r] < 0 || rows[r] >= src_rows)
      throw ValueError(fmt("gather_rows: rows[", r, "] = ", rows[r], " is outside the operand's ", src_rows, " rows"));
  const size_t row_bytes = size_t(C) * itemsize(in[0].dtype());
  const char* src = static_cast<const char*>(in[0].raw());
  char* dst = static_cast<char*>(out[0].raw());
  // Runs of consecutive source rows (a window's row of tokens) go as one memcpy.
  parallel_for(R, std::max<int64_t>(1, kGrain / std::max<int64_t>(C, 1)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e;) {
      int64_t n = 1;
      while (r + n < e && rows[r + n] == rows[r] + n) ++n;
      std::memcpy(dst + size_t(r) * row_bytes, src + size_t(rows[r]) * row_bytes, size_t(n) * row_bytes);
      r += n;
    }
  });
}

static Register reg_gather_rows("gather_rows", PrimDef{
    .shape = gather_rows_shape,
    .kernel = gather_rows_kernel,
    .vjp = nullptr,  // written by ir/copy_fusion.cc into graphs about to run, after autodiff
    .flops = nullptr,
    .no_batch_reason = "gather_rows exists only in executable graphs (ir/copy_fusion.cc), which vmap never sees"});

// ---- stop_gradient / copy -------------------------------------------------------------

static Register reg_stop_gradient("stop_gradient", PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs&) -> std::vector<AVal> { check_arity(in, 1); return {in[0]}; },
    // Free: the output is the input buffer (arrays are immutable).
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs&) { out[0] = in[0]; },
    .vjp = nullptr,
    .flops = nullptr, .batch = bt::elementwise,
    .zero_grad = true,
    .kernel_allocates = true});

static Register reg_copy("copy", PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs&) -> std::vector<AVal> { check_arity(in, 1); return {in[0]}; },
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs&) { copy_all(in[0], out[0]); },
    .vjp = [](Graph&, const Node&, const std::vector<int>& ct) -> std::vector<int> { return {ct[0]}; },
    .flops = nullptr, .batch = bt::elementwise});

}  // namespace
}  // namespace podlet
