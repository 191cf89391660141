// Reductions: reduce_sum/max/min/prod over axes, argmax/argmin, argsort, and the
// cumulative ops cumsum/cumprod/cummax/cummin.
//
// Determinism: the summation order of every output is a function of the shape alone.
// The reduced elements of one output are cut into fixed chunks (kRedChunk elements for a
// contiguous row, a fixed number of rows for a column reduction); each chunk is summed
// pairwise, and chunk partials are combined in chunk order. Threads only decide who
// computes which chunk, so results are bit-identical for any thread count, and the
// pairwise tree keeps the float error at O(log n) ulps instead of O(n).
// bf16 and f32 accumulate in f32, f64 in f64; integers wrap (unsigned arithmetic).
#include "podlet/prims/common.h"
#include "podlet/ir/batch_ops.h"
#include "podlet/prims/reduce_ops.h"
#include "podlet/cpu/isa.h"
#include "podlet/kernels/reduce_cols.h"
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>

namespace podlet {
namespace {
using namespace ops;

// out[o] = reduce(x[o*n .. o*n+n)) for o < outer.
template <class Op, class T>
void reduce_rows(const T* x, T* y, int64_t outer, int64_t n) {
  using Acc = typename Op::Acc;
  const int64_t nch = (n + kRedChunk - 1) / kRedChunk;
  if (nch <= 1) {  // one chunk per output: parallel over outputs
    parallel_for(outer, std::max<int64_t>(1, kGrain / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) y[o] = store<Op, T>(pairwise<Op>(x + o * n, n));
    });
    return;
  }
  // Parallel over (output, chunk) partials, then combine each output's partials in order.
  Buf<Acc> part(outer * nch);
  parallel_for(outer * nch, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / nch, c = t % nch, s = c * kRedChunk;
      part[t] = pairwise<Op>(x + o * n + s, std::min(kRedChunk, n - s));
    }
  });
  parallel_for(outer, std::max<int64_t>(1, kGrain / nch), [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) y[o] = store<Op, T>(pairwise<Op>(part.data() + o * nch, nch));
  });
}

// pairwise_rows, on 16 lanes (kernels/reduce_avx512.cc) for f32 and bf16 sums on AVX-512
// hosts: the same tree and additions.
template <class Op, class T>
void col_pairwise(const T* p, int64_t nrows, int64_t rs, int64_t w, typename Op::Acc* acc, typename Op::Acc* scratch) {
  constexpr bool kVec = (std::is_same_v<Op, SumOp<float>> || std::is_same_v<Op, SumOp<bf16>>) &&
                        (std::is_same_v<T, float> || std::is_same_v<T, bf16>);
  if constexpr (kVec) {
    if (int(cpu::active_isa()) >= int(cpu::Isa::avx512)) return kernels::col_sums_avx512(p, nrows, rs, w, acc, scratch);
  }
  pairwise_rows<Op>(p, nrows, rs, w, acc, scratch);
}

// out[o, j] = reduce over i < n of x[o, i, j] (shape [outer, n, inner], inner > 1).
// Tasks are (o, column tile, row chunk); row chunks hold a fixed number of rows.
template <class Op, class T>
void reduce_cols(const T* x, T* y, int64_t outer, int64_t n, int64_t inner) {
  using Acc = typename Op::Acc;
  // The chunks of rows fix the tree (col_rows_per_chunk, on kColTile); the columns a task
  // reduces are only a split of the work, up to kColTask of them: a bias gradient's
  // rows (384, 768 columns) are read in one pass over memory instead of two or three
  // strided ones, 1.1-1.3x faster at Swin-T's [100352, 384] and [25088, 768] bf16.
  const int64_t ntile = (inner + kColTask - 1) / kColTask;
  const int64_t tile_w = std::min(inner, kColTask);
  const int64_t rows_per_chunk = col_rows_per_chunk(inner);
  const int64_t nch = (n + rows_per_chunk - 1) / rows_per_chunk;
  // part[(o*nch + c)*inner + j]: partial of chunk c for output (o, j).
  Buf<Acc> part(outer * nch * inner);
  const int64_t ntask = outer * ntile * nch;
  parallel_for(ntask, 1, [&](int64_t b, int64_t e) {
    Buf<Acc> scratch(scratch_levels(rows_per_chunk) * tile_w);
    for (int64_t t = b; t < e; ++t) {
      const int64_t c = t % nch, tile = (t / nch) % ntile, o = t / (nch * ntile);
      const int64_t j0 = tile * kColTask, w = std::min(kColTask, inner - j0);
      const int64_t r0 = c * rows_per_chunk, nr = std::min(rows_per_chunk, n - r0);
      col_pairwise<Op>(x + (o * n + r0) * inner + j0, nr, inner, w, part.data() + (o * nch + c) * inner + j0, scratch.data());
    }
  });
  // Combine the chunk partials of each output pairwise (a fixed tree over chunks).
  parallel_for(outer * ntile, 1, [&](int64_t b, int64_t e) {
    Buf<Acc> acc(tile_w), scratch(scratch_levels(nch) * tile_w);
    for (int64_t t = b; t < e; ++t) {
      const int64_t tile = t % ntile, o = t / ntile;
      const int64_t j0 = tile * kColTask, w = std::min(kColTask, inner - j0);
      col_pairwise<Op>(part.data() + o * nch * inner + j0, nch, inner, w, acc.data(), scratch.data());
      for (int64_t j = 0; j < w; ++j) y[o * inner + j0 + j] = store<Op, T>(acc[j]);
    }
  });
}

// Reduces x over `axes` into y. Size-1 dims are dropped and neighbouring dims of the
// same kind (kept / reduced) merged; [K,R] and [R] are row reductions, [R,K] and
// [K,R,K] column reductions; anything else is first transposed to [K..., R...].
template <class Op, class T>
void reduce_kernel(const Array& x, Array& y, const std::vector<int64_t>& axes) {
  const Shape& is = x.shape();
  const int r = is.size();
  std::vector<char> red(r, 0);
  for (auto a : axes) red[a] = 1;
  int64_t nred = 1;
  for (int d = 0; d < r; ++d) if (red[d]) nred *= is[d];
  const int64_t nout = y.size();
  T* ys = y.data<T>();
  if (nout == 0) return;
  if (nred == 0) { std::fill(ys, ys + nout, store<Op, T>(Op::init())); return; }
  const T* xs = x.data<T>();
  if (nred == 1) {
    parallel_for(nout, kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) ys[i] = store<Op, T>(Op::comb(Op::init(), load<Op>(xs[i])));
    });
    return;
  }
  Shape blocks; std::vector<char> kind;  // merged dims and whether each is reduced
  for (int d = 0; d < r; ++d) {
    if (is[d] == 1) continue;
    if (!kind.empty() && kind.back() == red[d]) blocks.back() *= is[d];
    else { blocks.push_back(is[d]); kind.push_back(red[d]); }
  }
  const size_t nb = blocks.size();
  if (nb == 1) return reduce_rows<Op>(xs, ys, 1, blocks[0]);
  if (nb == 2 && !kind[0]) return reduce_rows<Op>(xs, ys, blocks[0], blocks[1]);
  if (nb == 2) return reduce_cols<Op>(xs, ys, 1, blocks[0], blocks[1]);
  if (nb == 3 && !kind[0]) return reduce_cols<Op>(xs, ys, blocks[0], blocks[1], blocks[2]);
  // General layout: gather into [kept..., reduced...] order, then reduce rows.
  std::vector<int64_t> perm;
  for (int d = 0; d < r; ++d) if (!red[d]) perm.push_back(d);
  for (int d = 0; d < r; ++d) if (red[d]) perm.push_back(d);
  Shape ts(r), ist = strides_of(is), st(r);
  for (int i = 0; i < r; ++i) { ts[i] = is[perm[i]]; st[i] = ist[perm[i]]; }
  Array t(x.dtype(), ts);
  copy_strided(x.raw(), 0, st, t.raw(), 0, strides_of(ts), ts, sizeof(T));
  reduce_rows<Op>(t.data<T>(), ys, nout, nred);
}

std::vector<AVal> reduce_shape(const std::vector<AVal>& in, const Attrs& a) {
  check_arity(in, 1);
  auto axes = normalize_axes(a.ints("axes"), in[0].shape.size(), "axis");
  std::vector<char> drop(in[0].shape.size(), 0);
  for (auto x : axes) { if (drop[x]) throw ShapeError(fmt("axis ", x, " repeated in axes")); drop[x] = 1; }
  Shape s;
  for (size_t i = 0; i < in[0].shape.size(); ++i) if (!drop[i]) s.push_back(in[0].shape[i]);
  return {AVal{in[0].dtype, s}};
}
std::vector<AVal> reduce_shape_nobool(const std::vector<AVal>& in, const Attrs& a, const char* what) {
  auto r = reduce_shape(in, a);
  if (in[0].dtype == DType::boolean)
    throw DTypeError(fmt(what, " of bool is not supported: cast to int32 first (or use reduce_max/reduce_min for any/all)"));
  return r;
}

// Kept dims of the input, in order (the output's dims in the input).
std::vector<int64_t> kept_dims(const Shape& is, const std::vector<int64_t>& axes) {
  std::vector<char> red(is.size(), 0);
  for (auto x : axes) red[x] = 1;
  std::vector<int64_t> dims;
  for (size_t d = 0; d < is.size(); ++d) if (!red[d]) dims.push_back(d);
  return dims;
}

template <template <class> class Op>
Kernel reduce_kernel_for(bool allow_bool) {
  return [allow_bool](const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
    auto axes = normalize_axes(a.ints("axes"), in[0].ndim(), "axis");
    PODLET_DTYPE_SWITCH(in[0].dtype(), T, {
      if constexpr (std::is_same_v<T, bool>) {
        if (!allow_bool) throw DTypeError("bool is not supported: cast to int32 first");
        reduce_kernel<Op<T>, T>(in[0], out[0], axes);
      } else {
        reduce_kernel<Op<T>, T>(in[0], out[0], axes);
      }
    });
  };
}

double reduce_flops(const std::vector<AVal>& in, const std::vector<AVal>&, const Attrs&) { return double(in[0].size()); }

static Register reg_reduce_sum("reduce_sum", PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) { return reduce_shape_nobool(in, a, "reduce_sum"); },
    .kernel = reduce_kernel_for<SumOp>(false),
    .vjp = [](Graph& g, const Node& n, const std::vector<int>& ct) -> std::vector<int> {
      const Shape is = g.aval(n.in[0]).shape;
      auto axes = normalize_axes(n.attrs.ints("axes"), is.size(), "axis");
      return {broadcast_in_dim(g, ct[0], is, kept_dims(is, axes))};
    },
    .flops = reduce_flops, .batch = batching::axes_attr({"axes"})});

// d max = ct split equally between the positions equal to the max (jax convention).
VjpRule chooser_vjp() {
  return [](Graph& g, const Node& n, const std::vector<int>& ct) -> std::vector<int> {
    const Shape is = g.aval(n.in[0]).shape;
    const DType dt = g.aval(n.in[0]).dtype;
    auto axes = normalize_axes(n.attrs.ints("axes"), is.size(), "axis");
    auto dims = kept_dims(is, axes);
    int ans = broadcast_in_dim(g, n.out[0], is, dims);
    int mask = convert(g, g.add1("eq", {n.in[0], ans}), dt);
    int count = reduce_sum(g, mask, axes);
    int share = div(g, ct[0], count);
    return {mul(g, broadcast_in_dim(g, share, is, dims), mask)};
  };
}

static Register reg_reduce_max("reduce_max", PrimDef{
    .shape = reduce_shape,
    .kernel = reduce_kernel_for<MaxOp>(true),
    .vjp = chooser_vjp(),
    .flops = reduce_flops, .batch = batching::axes_attr({"axes"})});

static Register reg_reduce_min("reduce_min", PrimDef{
    .shape = reduce_shape,
    .kernel = reduce_kernel_for<MinOp>(true),
    .vjp = chooser_vjp(),
    .flops = reduce_flops, .batch = batching::axes_attr({"axes"})});

// d prod / dx_i = product of the other elements = (exclusive cumprod from the left) *
// (exclusive cumprod from the right): exact with zeros, unlike prod / x_i.
static Register reg_reduce_prod("reduce_prod", PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) { return reduce_shape_nobool(in, a, "reduce_prod"); },
    .kernel = reduce_kernel_for<ProdOp>(false),
    .vjp = [](Graph& g, const Node& n, const std::vector<int>& ct) -> std::vector<int> {
      const Shape is = g.aval(n.in[0]).shape;
      auto axes = normalize_axes(n.attrs.ints("axes"), is.size(), "axis");
      auto perm = kept_dims(is, axes);
      const int64_t nkept = perm.size();
      int64_t K = 1, R = 1;
      for (auto d : perm) K *= is[d];
      std::vector<char> red(is.size(), 0);
      for (auto x : axes) red[x] = 1;
      for (size_t d = 0; d < is.size(); ++d) if (red[d]) { perm.push_back(d); R *= is[d]; }
      bool identity = true;
      for (size_t i = 0; i < perm.size(); ++i) identity &= perm[i] == int64_t(i);
      int xt = identity ? n.in[0] : transpose(g, n.in[0], perm);
      const Shape ts = g.aval(xt).shape;
      int x2 = reshape(g, xt, {K, R});
      int one = scalar_like(g, x2, 1.0);
      auto shifted = [&](int64_t lo, int64_t hi) {
        return g.add1("pad", {x2, one}, {{"low", std::vector<int64_t>{0, lo}}, {"high", std::vector<int64_t>{0, hi}},
                                         {"interior", std::vector<int64_t>{0, 0}}});
      };
      int left = g.add1("cumprod", {shifted(1, -1)}, {{"axis", int64_t(1)}, {"reverse", int64_t(0)}});
      int right = g.add1("cumprod", {shifted(-1, 1)}, {{"axis", int64_t(1)}, {"reverse", int64_t(1)}});
      int c2 = broadcast_in_dim(g, reshape(g, ct[0], {K, 1}), {K, R}, {0, 1});
      int d2 = mul(g, mul(g, left, right), c2);
      int dt = reshape(g, d2, ts);
      if (identity) return {dt};
      std::vector<int64_t> inv(perm.size());
      for (size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = i;
      (void)nkept;
      return {transpose(g, dt, inv)};
    },
    .flops = reduce_flops, .batch = batching::axes_attr({"axes"})});

// ---- argmax / argmin ------------------------------------------------------------------
// Views x as [outer, n, inner] around `axis`.
struct AxisView { int64_t outer = 1, n = 1, inner = 1; };
AxisView axis_view(const Shape& s, int64_t axis) {
  AxisView v;
  for (int64_t d = 0; d < int64_t(s.size()); ++d) (d < axis ? v.outer : d == axis ? v.n : v.inner) *= s[d];
  return v;
}

std::vector<AVal> arg_shape(const std::vector<AVal>& in, const Attrs& a) {
  check_arity(in, 1);
  const Shape& is = in[0].shape;
  if (is.empty()) throw ShapeError("argmax/argmin need an operand of rank >= 1");
  const int64_t axis = normalize_axes({a.i("axis")}, is.size(), "axis")[0];
  if (is[axis] == 0) throw ShapeError(fmt("cannot take argmax/argmin along axis ", axis, " of size 0"));
  DType id = dtype_from_name(a.s("index_dtype", "int32"));
  if (id != DType::i32 && id != DType::u32) throw DTypeError(fmt("index_dtype must be int32 or uint32, got ", dtype_name(id)));
  Shape s;
  for (int64_t d = 0; d < int64_t(is.size()); ++d) if (d != axis) s.push_back(is[d]);
  return {AVal{id, s}};
}

// First occurrence wins on ties; the first NaN wins over everything (NumPy).
template <bool kMax, class T, class I>
void arg_kernel(const Array& x, Array& y, int64_t axis) {
  using A = acc_t<T>;
  const AxisView v = axis_view(x.shape(), axis);
  const T* xs = x.data<T>(); I* ys = y.data<I>();
  auto better = [](A cand, A best) {
    if constexpr (std::is_floating_point_v<A>) { if (best != best) return false; if (cand != cand) return true; }
    return kMax ? cand > best : cand < best;
  };
  const int64_t ntile = (v.inner + kColTile - 1) / kColTile;
  parallel_for(v.outer * ntile, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, v.n * std::min(v.inner, kColTile))),
               [&](int64_t b, int64_t e) {
    Buf<A> best(std::min(v.inner, kColTile));
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / ntile, j0 = (t % ntile) * kColTile, w = std::min(kColTile, v.inner - j0);
      const T* p = xs + o * v.n * v.inner + j0;
      I* q = ys + o * v.inner + j0;
      for (int64_t j = 0; j < w; ++j) { best[j] = A(p[j]); q[j] = 0; }
      for (int64_t i = 1; i < v.n; ++i)
        for (int64_t j = 0; j < w; ++j) {
          A c = A(p[i * v.inner + j]);
          if (better(c, best[j])) { best[j] = c; q[j] = I(i); }
        }
    }
  });
}

template <bool kMax>
void arg_dispatch(const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
  const int64_t axis = normalize_axes({a.i("axis")}, in[0].ndim(), "axis")[0];
  PODLET_DTYPE_SWITCH(in[0].dtype(), T, {
    if (out[0].dtype() == DType::i32) arg_kernel<kMax, T, int32_t>(in[0], out[0], axis);
    else arg_kernel<kMax, T, uint32_t>(in[0], out[0], axis);
  });
}

double arg_flops(const std::vector<AVal>& in, const std::vector<AVal>&, const Attrs&) { return double(in[0].size()); }

static Register reg_argmax("argmax", PrimDef{
    .shape = arg_shape, .kernel = arg_dispatch<true>, .vjp = nullptr, .flops = arg_flops, .batch = batching::axes_attr({"axis"}), .zero_grad = true});
static Register reg_argmin("argmin", PrimDef{
    .shape = arg_shape, .kernel = arg_dispatch<false>, .vjp = nullptr, .flops = arg_flops, .batch = batching::axes_attr({"axis"}), .zero_grad = true});

// ---- argsort --------------------------------------------------------------------------
// Stable; NaN sorts after everything ascending and before everything descending
// (jnp.argsort); -0.0 and 0.0 compare equal.
static Register reg_argsort("argsort", PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) -> std::vector<AVal> {
      check_arity(in, 1);
      if (in[0].shape.empty()) throw ShapeError("argsort needs an operand of rank >= 1");
      normalize_axes({a.i("axis", -1)}, in[0].shape.size(), "axis");
      return {AVal{DType::i32, in[0].shape}};
    },
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
      const int64_t axis = normalize_axes({a.i("axis", -1)}, in[0].ndim(), "axis")[0];
      const bool desc = a.i("descending", 0) != 0;
      const AxisView v = axis_view(in[0].shape(), axis);
      PODLET_DTYPE_SWITCH(in[0].dtype(), T, {
        using A = acc_t<T>;
        const T* xs = in[0].data<T>(); int32_t* ys = out[0].data<int32_t>();
        // less(a, b) with NaN as the largest value.
        auto less = [](A p, A q) {
          if constexpr (std::is_floating_point_v<A>) { if (p != p) return false; if (q != q) return true; }
          return p < q;
        };
        parallel_for(v.outer * v.inner, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, v.n * 8)), [&](int64_t b, int64_t e) {
          Buf<A> vals(v.n);
          std::vector<int32_t> idx(size_t(v.n));
          for (int64_t line = b; line < e; ++line) {
            const int64_t o = line / v.inner, j = line % v.inner;
            const T* p = xs + o * v.n * v.inner + j;
            for (int64_t i = 0; i < v.n; ++i) vals[i] = A(p[i * v.inner]);
            std::iota(idx.begin(), idx.end(), 0);
            if (desc) std::stable_sort(idx.begin(), idx.end(), [&](int32_t l, int32_t r) { return less(vals[r], vals[l]); });
            else std::stable_sort(idx.begin(), idx.end(), [&](int32_t l, int32_t r) { return less(vals[l], vals[r]); });
            int32_t* q = ys + o * v.n * v.inner + j;
            for (int64_t i = 0; i < v.n; ++i) q[i * v.inner] = idx[i];
          }
        });
      });
    },
    .vjp = nullptr,
    .flops = [](const std::vector<AVal>& in, const std::vector<AVal>&, const Attrs& a) {
      const Shape& s = in[0].shape;
      const int64_t n = s[normalize_axes({a.i("axis", -1)}, s.size(), "axis")[0]];
      return double(in[0].size()) * std::max(1.0, std::log2(double(std::max<int64_t>(n, 1))));
    },
    .batch = batching::axes_attr({"axis"}),
    .zero_grad = true});

// ---- cumulative ops -------------------------------------------------------------------
// Running reduction along `axis` (reverse=1: from the end). Sequential along the axis,
// vectorised across the inner dims, parallel over the outer dims: deterministic.
std::vector<AVal> cum_shape(const std::vector<AVal>& in, const Attrs& a) {
  check_arity(in, 1);
  if (in[0].shape.empty()) throw ShapeError("cumulative ops need an operand of rank >= 1");
  normalize_axes({a.i("axis")}, in[0].shape.size(), "axis");
  return {in[0]};
}

template <class Op, class T>
void cum_kernel(const Array& x, Array& y, int64_t axis, bool reverse) {
  using Acc = typename Op::Acc;
  const AxisView v = axis_view(x.shape(), axis);
  const T* xs = x.data<T>(); T* ys = y.data<T>();
  const int64_t ntile = (v.inner + kColTile - 1) / kColTile;
  parallel_for(v.outer * ntile, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, v.n * std::min(v.inner, kColTile))),
               [&](int64_t b, int64_t e) {
    Buf<Acc> acc(std::min(v.inner, kColTile));
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / ntile, j0 = (t % ntile) * kColTile, w = std::min(kColTile, v.inner - j0);
      std::fill(acc.data(), acc.data() + w, Op::init());
      for (int64_t k = 0; k < v.n; ++k) {
        const int64_t i = reverse ? v.n - 1 - k : k;
        const int64_t off = (o * v.n + i) * v.inner + j0;
        for (int64_t j = 0; j < w; ++j) { acc[j] = Op::comb(acc[j], load<Op>(xs[off + j])); ys[off + j] = store<Op, T>(acc[j]); }
      }
    }
  });
}

template <template <class> class Op>
Kernel cum_kernel_for(bool allow_bool) {
  return [allow_bool](const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
    const int64_t axis = normalize_axes({a.i("axis")}, in[0].ndim(), "axis")[0];
    const bool rev = a.i("reverse", 0) != 0;
    PODLET_DTYPE_SWITCH(in[0].dtype(), T, {
      if constexpr (std::is_same_v<T, bool>) {
        if (!allow_bool) throw DTypeError("bool is not supported: cast to int32 first");
        cum_kernel<Op<T>, T>(in[0], out[0], axis, rev);
      } else {
        cum_kernel<Op<T>, T>(in[0], out[0], axis, rev);
      }
    });
  };
}

std::vector<AVal> cum_shape_nobool(const std::vector<AVal>& in, const Attrs& a) {
  auto r = cum_shape(in, a);
  if (in[0].dtype == DType::boolean) throw DTypeError("cumsum/cumprod of bool is not supported: cast to int32 first");
  return r;
}

double cum_flops(const std::vector<AVal>& in, const std::vector<AVal>&, const Attrs&) { return double(in[0].size()); }

static Register reg_cumsum("cumsum", PrimDef{
    .shape = cum_shape_nobool,
    .kernel = cum_kernel_for<SumOp>(false),
    // The transpose of a running sum is the running sum in the other direction.
    .vjp = [](Graph& g, const Node& n, const std::vector<int>& ct) -> std::vector<int> {
      return {g.add1("cumsum", {ct[0]}, {{"axis", n.attrs.i("axis")}, {"reverse", int64_t(n.attrs.i("reverse", 0) ? 0 : 1)}})};
    },
    .flops = cum_flops, .batch = batching::axes_attr({"axis"})});

// cummax/cummin: forward only. cumprod's VJP (needed by grad-of-grad and forward mode
// of reduce_prod, whose VJP uses cumprod): dx_j = sum over the outputs i that include
// x_j of ct_i * y_i / x_j, a running sum in the other direction divided by x. Not
// exact where x_j == 0 (JAX's associative-scan rule is); reduce_prod's own VJP is.
std::vector<int> cumprod_vjp(Graph& g, const Node& n, const std::vector<int>& ct) {
  int s = g.add1("cumsum", {mul(g, ct[0], n.out[0])},
                 {{"axis", n.attrs.i("axis")}, {"reverse", int64_t(n.attrs.i("reverse", 0) ? 0 : 1)}});
  return {div(g, s, n.in[0])};
}
static Register reg_cumprod("cumprod", PrimDef{
    .shape = cum_shape_nobool, .kernel = cum_kernel_for<ProdOp>(false), .vjp = cumprod_vjp, .flops = cum_flops, .batch = batching::axes_attr({"axis"})});
static Register reg_cummax("cummax", PrimDef{
    .shape = cum_shape, .kernel = cum_kernel_for<MaxOp>(true), .vjp = nullptr, .flops = cum_flops, .batch = batching::axes_attr({"axis"})});
static Register reg_cummin("cummin", PrimDef{
    .shape = cum_shape, .kernel = cum_kernel_for<MinOp>(true), .vjp = nullptr, .flops = cum_flops, .batch = batching::axes_attr({"axis"})});

}  // namespace
}  // namespace podlet
