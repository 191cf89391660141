// dot_general with jax.lax.dot_general semantics: shape rule, kernel, VJP, FLOPs.
//
//   dot_general(lhs, rhs; lhs_contracting, rhs_contracting, lhs_batch, rhs_batch,
//               preferred_element_type, algorithm)
// Output dims: batch dims (in lhs_batch order), lhs free dims, rhs free dims (each in
// increasing axis order). Float operands may differ in dtype (the result is the wider
// one, like JAX); they accumulate in f32 (f64 if an operand or the output is f64).
// preferred_element_type sets the output dtype; unlike JAX it may also be narrower than
// the operands (the VJP uses that to round the cotangent once, straight to the operand
// dtype). Integer operands must share a dtype and wrap like it.
// out_perm (set only by the graph pass ir/dot_layout.h, never by a user): the node's
// output is transpose(result, out_perm), written in place by the GEMM (its rows and
// batch entries stored where the transpose puts them; the sums are the same, so the bits
// are). The rhs free dims must stay last and in order, and the lhs free dims must keep
// one stride between rows (out_layout below).
// algorithm ('' | 'bf16' | 'bf16_3x' | 'bf16_6x', prims/dot_algorithm.h): f32 operands
// rounded to / split into bf16 and multiplied in one, three or six bf16 passes (a TPU's
// precisions); the VJP's dots carry it, as jax's transpose rules carry precision.
#include "podlet/prims/common.h"
#include "podlet/prims/dot_algorithm.h"
#include "podlet/kernels/gemm.h"
#include "podlet/ir/batch_ops.h"
#include <numeric>

namespace podlet {
namespace {
using namespace ops;

struct DotDims {
  std::vector<int64_t> lc, rc, lb, rb;  // contracting / batch dims, normalised
  std::vector<int64_t> lfree, rfree;    // the remaining dims, increasing
};

// The dims of `rank` not in a or b, in increasing order.
std::vector<int64_t> remaining(int rank, const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  std::vector<char> used(rank, 0);
  for (auto d : a) used[d] = 1;
  for (auto d : b) used[d] = 1;
  std::vector<int64_t> r;
  for (int d = 0; d < rank; ++d) if (!used[d]) r.push_back(d);
  return r;
}

DotDims dot_dims(const Attrs& a, int lrank, int rrank) {
  DotDims d;
  d.lc = normalize_axes(a.ints("lhs_contracting", {}), lrank, "lhs_contracting dim");
  d.rc = normalize_axes(a.ints("rhs_contracting", {}), rrank, "rhs_contracting dim");
  d.lb = normalize_axes(a.ints("lhs_batch", {}), lrank, "lhs_batch dim");
  d.rb = normalize_axes(a.ints("rhs_batch", {}), rrank, "rhs_batch dim");
  if (d.lc.size() != d.rc.size())
    throw ShapeError(fmt("lhs_contracting ", shape_str(d.lc), " and rhs_contracting ", shape_str(d.rc),
                         " must have the same length"));
  if (d.lb.size() != d.rb.size())
    throw ShapeError(fmt("lhs_batch ", shape_str(d.lb), " and rhs_batch ", shape_str(d.rb), " must have the same length"));
  auto check_unique = [](const std::vector<int64_t>& c, const std::vector<int64_t>& b, int rank, const char* side) {
    std::vector<char> seen(rank, 0);
    for (auto x : b) { if (seen[x]) throw ShapeError(fmt(side, "_batch dim ", x, " is repeated")); seen[x] = 1; }
    for (auto x : c) {
      if (seen[x]) throw ShapeError(fmt(side, " dim ", x, " is listed twice in ", side, "_contracting / ", side, "_batch"));
      seen[x] = 1;
    }
  };
  check_unique(d.lc, d.lb, lrank, "lhs");
  check_unique(d.rc, d.rb, rrank, "rhs");
  d.lfree = remaining(lrank, d.lc, d.lb);
  d.rfree = remaining(rrank, d.rc, d.rb);
  return d;
}

int float_rank(DType d) { return d == DType::bf16 ? 0 : d == DType::f32 ? 1 : 2; }

bool has_preferred(const Attrs& a) { return a.has("preferred_element_type") && !a.s("preferred_element_type").empty(); }
DotAlgorithm algorithm_of(const Attrs& a) { return dot_algorithm_from_name(a.s("algorithm", "")); }

std::vector<int64_t> pick(const std::vector<int64_t>& v, const std::vector<int64_t>& idx) {
  std::vector<int64_t> r;
  for (auto i : idx) r.push_back(v[i]);
  return r;
}
int64_t prod(const std::vector<int64_t>& v) { int64_t p = 1; for (auto x : v) p *= x; return p; }

std::vector<int64_t> out_perm_of(const Attrs& a) { return a.ints("out_perm", {}); }

// The product's output shape before out_perm: batch dims, lhs free, rhs free.
Shape natural_shape(const DotDims& d, const Shape& ls, const Shape& rs) {
  Shape s = pick(ls, d.lb);
  for (auto x : d.lfree) s.push_back(ls[x]);
  for (auto x : d.rfree) s.push_back(rs[x]);
  return s;
}

// Where the GEMM writes a transposed result: natural output shape s (batch dims, lhs
// free, rhs free), stored as transpose(., perm). Batch entries anywhere (an offset each),
// the lhs free dims one stride apart as a whole (rows m * c_ld), the rhs free dims the
// last dims in order (each row's N elements contiguous). Empty: not expressible, and why.
std::string out_layout(const DotDims& d, const Shape& s, const std::vector<int64_t>& perm,
                       std::vector<int64_t>* c_batch, int64_t* c_ld) {
  const int64_t R = int64_t(s.size()), nb = int64_t(d.lb.size()), nl = int64_t(d.lfree.size());
  std::vector<int64_t> inv(R, -1);
  if (int64_t(perm.size()) != R) return fmt("out_perm ", shape_str(perm), " must have ", R, " entries");
  for (int64_t i = 0; i < R; ++i) {
    if (perm[i] < 0 || perm[i] >= R || inv[perm[i]] >= 0) return fmt("out_perm ", shape_str(perm), " is not a permutation");
    inv[perm[i]] = i;
  }
  for (int64_t i = nb + nl; i < R; ++i)
    if (inv[i] != i) return fmt("out_perm ", shape_str(perm), " must keep the rhs free dims last, in order");
  Shape ps(R);
  for (int64_t i = 0; i < R; ++i) ps[i] = s[perm[i]];
  const Shape pst = strides_of(ps);
  auto stride = [&](int64_t j) { return pst[inv[j]]; };
  int64_t ld = 0, span = -1;  // the last lhs free dim of size > 1 and its extent so far
  for (int64_t j = nb + nl - 1; j >= nb; --j) {
    if (s[j] == 1) continue;
    if (span < 0) ld = stride(j), span = ld * s[j];
    else if (stride(j) != span) return fmt("out_perm ", shape_str(perm), " splits the lhs free dims");
    else span *= s[j];
  }
  if (c_ld) *c_ld = ld;
  if (c_batch) {
    Shape bs, bst;
    for (int64_t j = 0; j < nb; ++j) bs.push_back(s[j]), bst.push_back(stride(j));
    *c_batch = kernels::group_offsets(bs, bst);
  }
  return "";
}

std::vector<AVal> dot_shape(const std::vector<AVal>& in, const Attrs& a) {
  check_arity(in, 2);
  const AVal &l = in[0], &r = in[1];
  DotDims d = dot_dims(a, l.shape.size(), r.shape.size());
  algorithm_of(a);  // checks the name
  for (size_t i = 0; i < d.lc.size(); ++i)
    if (l.shape[d.lc[i]] != r.shape[d.rc[i]])
      throw ShapeError(fmt("contracting dimension sizes must match: lhs dim ", d.lc[i], " has size ", l.shape[d.lc[i]],
                           ", rhs dim ", d.rc[i], " has size ", r.shape[d.rc[i]]));
  for (size_t i = 0; i < d.lb.size(); ++i)
    if (l.shape[d.lb[i]] != r.shape[d.rb[i]])
      throw ShapeError(fmt("batch dimension sizes must match: lhs dim ", d.lb[i], " has size ", l.shape[d.lb[i]],
                           ", rhs dim ", d.rb[i], " has size ", r.shape[d.rb[i]]));
  DType out;
  if (is_float(l.dtype) && is_float(r.dtype)) {
    out = float_rank(l.dtype) >= float_rank(r.dtype) ? l.dtype : r.dtype;
  } else if (is_int(l.dtype) && l.dtype == r.dtype) {
    out = l.dtype;
  } else {
    throw DTypeError(fmt("operands must both be floating point (bfloat16/float32/float64) or share an integer dtype, got ",
                         dtype_name(l.dtype), " and ", dtype_name(r.dtype)));
  }
  if (has_preferred(a)) {
    DType p = dtype_from_name(a.s("preferred_element_type"));
    if (p == DType::boolean || (is_float(out) && !is_float(p)))
      throw DTypeError(fmt("preferred_element_type ", dtype_name(p), " is not allowed for ", dtype_name(out),
                           " operands (use a floating-point type)"));
    out = p;
  }
  const Shape s = natural_shape(d, l.shape, r.shape);
  const auto perm = out_perm_of(a);
  if (perm.empty()) return {AVal{out, s}};
  const std::string why = out_layout(d, s, perm, nullptr, nullptr);
  if (!why.empty()) throw ShapeError(fmt("dot_general: ", why, " (output ", shape_str(s), ")"));
  Shape ps;
  for (auto p : perm) ps.push_back(s[p]);
  return {AVal{out, ps}};
}

void dot_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
  const Shape &ls = in[0].shape(), &rs = in[1].shape();
  DotDims d = dot_dims(a, ls.size(), rs.size());
  const Shape lst = strides_of(ls), rst = strides_of(rs);
  kernels::GemmArgs g;
  g.B = prod(pick(ls, d.lb));
  g.M = prod(pick(ls, d.lfree));
  g.N = prod(pick(rs, d.rfree));
  g.K = prod(pick(ls, d.lc));
  g.a_dtype = in[0].dtype(); g.b_dtype = in[1].dtype(); g.c_dtype = out[0].dtype();
  g.a = in[0].raw(); g.b = in[1].raw(); g.c = out[0].raw();
  if (g.B * g.M * g.N == 0) return;
  g.a_batch = kernels::group_offsets(pick(ls, d.lb), pick(lst, d.lb));
  g.a_row = kernels::group_offsets(pick(ls, d.lfree), pick(lst, d.lfree));
  g.a_k = kernels::group_offsets(pick(ls, d.lc), pick(lst, d.lc));
  g.b_batch = kernels::group_offsets(pick(rs, d.rb), pick(rst, d.rb));
  g.b_k = kernels::group_offsets(pick(rs, d.rc), pick(rst, d.rc));
  g.b_col = kernels::group_offsets(pick(rs, d.rfree), pick(rst, d.rfree));
  if (const auto perm = out_perm_of(a); !perm.empty())
    out_layout(d, natural_shape(d, ls, rs), perm, &g.c_batch, &g.c_ld);  // checked by the shape rule
  const DotAlgorithm alg = algorithm_of(a);
  if (!dot_algorithm_applies(alg, g.a_dtype, g.b_dtype, g.c_dtype)) return kernels::gemm(g);
  // The passes read bf16 copies of the operands through the same offset tables.
  run_dot_algorithm(alg, {g.a_dtype, g.a, in[0].size()}, {g.b_dtype, g.b, in[1].size()}, g.c_dtype, g.c,
                    out[0].size(), [&g](DType ad, const void* pa, DType bd, const void* pb, DType cd, void* pc) {
                      kernels::GemmArgs p = g;
                      p.a_dtype = ad; p.a = pa; p.b_dtype = bd; p.b = pb; p.c_dtype = cd; p.c = pc;
                      kernels::gemm(p);
                    });
}

std::vector<int64_t> iota_from(int64_t start, size_t n) {
  std::vector<int64_t> r(n);
  std::iota(r.begin(), r.end(), start);
  return r;
}
std::vector<int64_t> argsort(const std::vector<int64_t>& v) {
  std::vector<int64_t> idx = iota_from(0, v.size());
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return v[a] < v[b]; });
  return idx;
}

// Cotangent of x in dot_general(x, y) (or of y when swap_ans: then x is the rhs), as in
// JAX's _dot_general_transpose_lhs: contract ct with y over y's kept dims, then put the
// axes back in x's order. The result is rounded straight to x's dtype; the transposed
// dot uses the forward's algorithm.
int dot_transpose_lhs(Graph& g, int ct, int x, int y, const std::vector<int64_t>& xc, const std::vector<int64_t>& yc,
                      const std::vector<int64_t>& xb, const std::vector<int64_t>& yb, bool swap_ans,
                      const std::string& algorithm) {
  const int xr = g.aval(x).shape.size(), yr = g.aval(y).shape.size();
  auto x_kept = remaining(xr, xc, xb), y_kept = remaining(yr, yc, yb);
  const int64_t nb = xb.size();
  auto ans_batch = iota_from(0, nb);
  auto ans_y = iota_from(swap_ans ? nb : nb + int64_t(x_kept.size()), y_kept.size());
  std::vector<int64_t> xc_sorted_by_y = pick(xc, argsort(yc));
  std::vector<int64_t> unsorted = xb;
  unsorted.insert(unsorted.end(), x_kept.begin(), x_kept.end());
  unsorted.insert(unsorted.end(), xc_sorted_by_y.begin(), xc_sorted_by_y.end());
  std::vector<int64_t> out_axes = argsort(unsorted);
  auto is_identity = [](const std::vector<int64_t>& p) {
    for (size_t i = 0; i < p.size(); ++i) if (p[i] != int64_t(i)) return false;
    return true;
  };
  Attrs common{{"preferred_element_type", std::string(dtype_name(g.aval(x).dtype))}};
  if (!algorithm.empty()) common.set("algorithm", algorithm);
  if (!is_identity(out_axes)) {
    // dot_general(y, ct) lays its output out as batch, y's free dims, ct's free dims: when
    // that is x's order (a Dense layer's weight gradient x^T ct), it needs no transpose.
    // Each output element sums the same products in the same order either way.
    std::vector<int64_t> swapped = xb;
    swapped.insert(swapped.end(), xc_sorted_by_y.begin(), xc_sorted_by_y.end());
    swapped.insert(swapped.end(), x_kept.begin(), x_kept.end());
    // Neither order is x's: prefer the one whose transpose ir/dot_layout can fold into the
    // product (its second operand's free dims last in x, in order), e.g. the value
    // gradient of Flax's attention, [b, h, k, d] products stored as v's [b, k, h, d].
    auto trailing = [&](const std::vector<int64_t>& dims) {
      for (size_t i = 0; i < dims.size(); ++i)
        if (dims[i] != xr - int64_t(dims.size()) + int64_t(i)) return false;
      return true;
    };
    const std::vector<int64_t> back = argsort(swapped);
    if (is_identity(back) || (!trailing(xc_sorted_by_y) && !x_kept.empty() && trailing(x_kept))) {
      Attrs a = common;
      a.set("lhs_contracting", y_kept);
      a.set("rhs_contracting", ans_y);
      a.set("lhs_batch", yb);
      a.set("rhs_batch", ans_batch);
      const int d = g.add1("dot_general", {y, ct}, a);
      return is_identity(back) ? d : transpose(g, d, back);
    }
  }
  Attrs a = common;
  a.set("lhs_contracting", ans_y);
  a.set("rhs_contracting", y_kept);
  a.set("lhs_batch", ans_batch);
  a.set("rhs_batch", yb);
  int d = g.add1("dot_general", {ct, y}, a);
  return is_identity(out_axes) ? d : transpose(g, d, out_axes);
}

std::vector<int> dot_vjp(Graph& g, const Node& n, const std::vector<int>& ct) {
  const int x = n.in[0], y = n.in[1];
  DotDims d = dot_dims(n.attrs, g.aval(x).shape.size(), g.aval(y).shape.size());
  const std::string alg = n.attrs.s("algorithm", "");
  int c = ct[0];
  if (const auto perm = out_perm_of(n.attrs); !perm.empty()) c = transpose(g, c, argsort(perm));  // back to the natural order
  return {dot_transpose_lhs(g, c, x, y, d.lc, d.rc, d.lb, d.rb, false, alg),
          dot_transpose_lhs(g, c, y, x, d.rc, d.lc, d.rb, d.lb, true, alg)};
}

double dot_flops(const std::vector<AVal>& in, const std::vector<AVal>&, const Attrs& a) {
  DotDims d = dot_dims(a, in[0].shape.size(), in[1].shape.size());
  return 2.0 * double(prod(pick(in[0].shape, d.lb))) * double(prod(pick(in[0].shape, d.lfree))) *
         double(prod(pick(in[1].shape, d.rfree))) * double(prod(pick(in[0].shape, d.lc)));
}

// Batching: both operands batched -> one more batch dim (in front of the output, where
// vmap wants it); one operand batched -> one more free dim of that operand, moved to the
// front of the output.
std::vector<int> dot_batch(Graph& g, const BatchCtx& c, const std::vector<int>& in, const std::vector<int>& bd,
                           std::vector<int>& ob) {
  const int lr = int(c.in_avals[0].shape.size()), rr = int(c.in_avals[1].shape.size());
  DotDims d = dot_dims(c.n.attrs, lr, rr);
  auto shift = [](std::vector<int64_t> v, bool on) { if (on) for (auto& x : v) x += 1; return v; };
  const bool bl = bd[0] >= 0, br = bd[1] >= 0;
  Attrs a = c.n.attrs;
  std::vector<int64_t> lb = shift(d.lb, bl), rb = shift(d.rb, br);
  if (bl && br) { lb.insert(lb.begin(), 0); rb.insert(rb.begin(), 0); }
  a.set("lhs_contracting", shift(d.lc, bl));
  a.set("rhs_contracting", shift(d.rc, br));
  a.set("lhs_batch", lb);
  a.set("rhs_batch", rb);
  const auto out_perm = out_perm_of(a);  // the batched product in the natural order, then out_perm after the new dim
  if (!out_perm.empty()) a.set("out_perm", std::vector<int64_t>{});
  int y = g.add1("dot_general", in, a);
  ob = {0};
  const int64_t nb = int64_t(d.lb.size());
  const int64_t pos = bl && br ? 0 : bl ? nb : nb + int64_t(d.lfree.size());
  if (pos != 0) {
    const int64_t r = int64_t(g.aval(y).shape.size());
    std::vector<int64_t> perm = {pos};
    for (int64_t i = 0; i < r; ++i) if (i != pos) perm.push_back(i);
    y = transpose(g, y, perm);
  }
  if (out_perm.empty()) return {y};
  std::vector<int64_t> perm = {0};
  for (auto p : out_perm) perm.push_back(p + 1);
  return {transpose(g, y, perm)};
}

static Register reg_dot("dot_general", PrimDef{.shape = dot_shape, .kernel = dot_kernel, .vjp = dot_vjp, .flops = dot_flops,
                                              .batch = dot_batch});

}  // namespace
}  // namespace podlet
