// Collectives over a pmap axis: psum, pmean, pmax, pmin, all_gather, ppermute,
// axis_index. They are graph nodes like any other (shape rule, VJP), but only the pmap
// executor (exec/pmap.cc) can run them: it sees every replica's buffer and reduces in
// replica order. Attrs: axis_name (str, for messages), axis_size (int, replicas on the
// axis, all processes included).
#include "podlet/prims/common.h"
#include "podlet/ir/ops.h"
#include "podlet/ir/batch_ops.h"

namespace podlet {
namespace {

[[noreturn]] void outside_pmap(const std::vector<Array>&, std::vector<Array>&, const Attrs& a) {
  throw ValueError(fmt("collective over axis '", a.s("axis_name", "?"),
                       "' can only run inside pmap (this graph was executed without replicas)"));
}

int64_t axis_size(const Attrs& a) {
  int64_t n = a.i("axis_size");
  if (n < 1) throw ValueError(fmt("axis_size must be >= 1, got ", n));
  return n;
}

std::vector<AVal> same_numeric(const std::vector<AVal>& in, const Attrs& a, bool float_only) {
  check_arity(in, 1);
  axis_size(a);
  DType d = in[0].dtype;
  if (d == DType::boolean) throw DTypeError("collective reductions need a numeric operand, got bool");
  if (float_only && !is_float(d))
    throw DTypeError(fmt("pmean needs a floating-point operand, got ", dtype_name(d),
                         " (psum it and divide explicitly)"));
  return {in[0]};
}

// The transpose of a sum over replicas is a sum over replicas (each replica's input
// feeds every replica's output), likewise for the mean.
VjpRule self_transpose(const char* prim) {
  return [prim](Graph& g, const Node& n, const std::vector<int>& ct) -> std::vector<int> {
    return {g.add1(prim, {ct[0]}, n.attrs)};
  };
}

std::vector<AVal> all_gather_shape(const std::vector<AVal>& in, const Attrs& a) {
  check_arity(in, 1);
  int64_t n = axis_size(a);
  int64_t rank = int64_t(in[0].shape.size());
  bool tiled = a.i("tiled", 0) != 0;
  int64_t ax = a.i("axis", 0);
  int64_t lim = tiled ? rank : rank + 1;
  if (ax < 0) ax += lim;
  if (ax < 0 || ax >= std::max<int64_t>(lim, 1) || (tiled && rank == 0))
    throw ShapeError(fmt("all_gather axis ", a.i("axis", 0), " out of range for an operand of rank ", rank,
                         tiled ? " (tiled)" : ""));
  Shape s = in[0].shape;
  if (tiled) s[ax] *= n; else s.insert(s.begin() + ax, n);
  return {AVal{in[0].dtype, s}};
}

// d all_gather: replica r's input appears in every replica's output at slot r, so its
// cotangent is slot r of the replica-sum of the output cotangents.
std::vector<int> all_gather_vjp(Graph& g, const Node& n, const std::vector<int>& ct) {
  Attrs sum_attrs{{"axis_name", n.attrs.s("axis_name")}, {"axis_size", n.attrs.i("axis_size")}};
  int total = g.add1("psum", {ct[0]}, sum_attrs);
  const Shape xs = g.aval(n.in[0]).shape;
  const Shape os = g.aval(n.out[0]).shape;
  bool tiled = n.attrs.i("tiled", 0) != 0;
  int64_t lim = tiled ? int64_t(xs.size()) : int64_t(xs.size()) + 1;
  int64_t ax = n.attrs.i("axis", 0);
  if (ax < 0) ax += lim;
  int idx = g.add1("axis_index", {}, sum_attrs);
  if (tiled) idx = ops::mul(g, idx, g.add_const(full(DType::i32, {}, double(xs[ax]))));
  std::vector<int> args{total};
  int zero = g.add_const(full(DType::i32, {}, 0.0));
  for (size_t d = 0; d < os.size(); ++d) args.push_back(int64_t(d) == ax ? idx : zero);
  Shape sizes = os;
  sizes[ax] = tiled ? xs[ax] : 1;
  int sl = g.add1("dynamic_slice", args, {{"slice_sizes", sizes}});
  return {ops::reshape(g, sl, xs)};
}

std::vector<AVal> ppermute_shape(const std::vector<AVal>& in, const Attrs& a) {
  check_arity(in, 1);
  int64_t n = axis_size(a);
  auto perm = a.ints("perm");
  if (perm.size() % 2) throw ValueError("ppermute perm must be a list of (source, destination) pairs");
  std::vector<char> src_seen(n, 0), dst_seen(n, 0);
  for (size_t k = 0; k < perm.size(); k += 2) {
    int64_t s = perm[k], d = perm[k + 1];
    if (s < 0 || s >= n || d < 0 || d >= n)
      throw ValueError(fmt("ppermute pair (", s, ", ", d, ") out of range for axis size ", n));
    if (src_seen[s]++) throw ValueError(fmt("ppermute perm must be a permutation: replica ", s, " is a source twice"));
    if (dst_seen[d]++) throw ValueError(fmt("ppermute perm must be a permutation: replica ", d, " is a destination twice"));
  }
  return {in[0]};
}

std::vector<int> ppermute_vjp(Graph& g, const Node& n, const std::vector<int>& ct) {
  auto perm = n.attrs.ints("perm");
  std::vector<int64_t> inv(perm.size());
  for (size_t k = 0; k < perm.size(); k += 2) { inv[k] = perm[k + 1]; inv[k + 1] = perm[k]; }
  Attrs a = n.attrs;
  a.set("perm", inv);
  return {g.add1("ppermute", {ct[0]}, a)};
}

// ---- batching rules (vmap) ------------------------------------------------------------
// A collective naming the vmap's own axis reduces over the mapped axis (axis 0 of a
// batched operand; an unbatched operand is the same value on every element). One naming
// another axis (a pmap axis, or an outer vmap's) is re-applied to the batched operand:
// each element takes part in its own collective. jax.vmap(..., axis_name) semantics.
namespace bt = batching;
using Ids = std::vector<int>;

bool own_axis(const BatchCtx& c) { return !c.axis_name.empty() && c.n.attrs.s("axis_name", "") == c.axis_name; }

// Re-applied per element; the output carries the axis iff the operand does.
Ids reapply_elementwise(Graph& g, const BatchCtx& c, const Ids& in, const Ids& bd, Ids& ob, const Attrs& a) {
  return bt::reapply(g, c, in, a, ob, in.empty() ? -1 : bd[0]);
}

BatchRule reduce_rule(const char* red, bool mean) {
  return [red, mean](Graph& g, const BatchCtx& c, const Ids& in, const Ids& bd, Ids& ob) -> Ids {
    if (!own_axis(c)) return reapply_elementwise(g, c, in, bd, ob, c.n.attrs);
    ob = {-1};
    int x = in[0];
    if (bd[0] >= 0) {
      x = g.add1(red, {x}, {{"axes", std::vector<int64_t>{0}}});
    } else if (std::string(red) == "reduce_sum") {  // the same value summed size times
      x = ops::mul(g, x, ops::scalar_like(g, x, double(c.size)));
    }
    if (mean) x = ops::div(g, x, ops::scalar_like(g, x, double(c.size)));
    return {x};
  };
}

// Stacks the elements along `axis` of the result (tiled: concatenates them).
Ids all_gather_batch(Graph& g, const BatchCtx& c, const Ids& in, const Ids& bd, Ids& ob) {
  const Shape xs = c.in_avals[0].shape;
  const int64_t rank = int64_t(xs.size());
  const bool tiled = c.n.attrs.i("tiled", 0) != 0;
  int64_t ax = c.n.attrs.i("axis", 0);
  if (ax < 0) ax += tiled ? rank : rank + 1;
  if (!own_axis(c)) {
    if (bd[0] < 0) return reapply_elementwise(g, c, in, bd, ob, c.n.attrs);
    Attrs a = c.n.attrs;
    a.set("axis", ax + 1);
    return bt::reapply(g, c, in, a, ob);
  }
  ob = {-1};
  int x = bt::materialize(g, in[0], bd[0], c.size);  // [B, xs...]
  // B moved to position ax: untiled that is the result; tiled, merge it with dim ax.
  std::vector<int64_t> perm;
  for (int64_t d = 1; d <= rank; ++d) {
    if (d - 1 == ax) perm.push_back(0);
    perm.push_back(d);
  }
  if (ax == rank) perm.push_back(0);
  x = ops::transpose(g, x, perm);
  if (tiled) x = ops::reshape(g, x, c.out_avals[0].shape);
  return {x};
}

// Row d of the result is row s of the operand for each pair (s, d); zeros elsewhere.
Ids ppermute_batch(Graph& g, const BatchCtx& c, const Ids& in, const Ids& bd, Ids& ob) {
  if (!own_axis(c)) return reapply_elementwise(g, c, in, bd, ob, c.n.attrs);
  auto perm = c.n.attrs.ints("perm");
  Array src = full(DType::i32, {c.size}, 0.0), has = full(DType::boolean, {c.size}, 0.0);
  for (size_t k = 0; k < perm.size(); k += 2) {
    src.data<int32_t>()[perm[k + 1]] = int32_t(perm[k]);
    has.data<bool>()[perm[k + 1]] = true;
  }
  int x = bt::materialize(g, in[0], bd[0], c.size);
  int y = g.add1("take", {x, g.add_const(src)}, {{"axis", int64_t(0)}});
  ob = {0};
  if (perm.size() / 2 == size_t(c.size)) return {y};
  const Shape ys = g.aval(y).shape;
  Shape ms(ys.size(), 1);
  ms[0] = c.size;
  int mask = ops::reshape(g, g.add_const(has), ms);
  return {ops::select(g, mask, y, ops::zeros_like(g, y))};
}

Ids axis_index_batch(Graph& g, const BatchCtx& c, const Ids& in, const Ids& bd, Ids& ob) {
  if (!own_axis(c)) return reapply_elementwise(g, c, in, bd, ob, c.n.attrs);
  ob = {0};
  return {g.add1("iota", {}, {{"shape", Shape{c.size}}, {"dimension", int64_t(0)}, {"dtype", std::string("int32")}})};
}

}  // namespace

static Register reg_psum("psum", PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) { return same_numeric(in, a, false); },
    .kernel = outside_pmap, .vjp = self_transpose("psum"), .flops = elementwise_flops_of,
    .batch = reduce_rule("reduce_sum", false), .batch_always = true});
static Register reg_pmean("pmean", PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) { return same_numeric(in, a, true); },
    .kernel = outside_pmap, .vjp = self_transpose("pmean"), .flops = elementwise_flops_of,
    .batch = reduce_rule("reduce_sum", true), .batch_always = true});
// pmax/pmin have no VJP, as in JAX.
static Register reg_pmax("pmax", PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) { return same_numeric(in, a, false); },
    .kernel = outside_pmap, .batch = reduce_rule("reduce_max", false), .batch_always = true});
static Register reg_pmin("pmin", PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) { return same_numeric(in, a, false); },
    .kernel = outside_pmap, .batch = reduce_rule("reduce_min", false), .batch_always = true});
static Register reg_all_gather("all_gather", PrimDef{
    .shape = all_gather_shape, .kernel = outside_pmap, .vjp = all_gather_vjp, .batch = all_gather_batch,
    .batch_always = true});
static Register reg_ppermute("ppermute", PrimDef{
    .shape = ppermute_shape, .kernel = outside_pmap, .vjp = ppermute_vjp, .batch = ppermute_batch,
    .batch_always = true});
static Register reg_axis_index("axis_index", PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) -> std::vector<AVal> {
      check_arity(in, 0);
      axis_size(a);
      return {AVal{DType::i32, {}}};
    },
    .kernel = outside_pmap, .batch = axis_index_batch, .zero_grad = true, .batch_always = true});

}  // namespace podlet
