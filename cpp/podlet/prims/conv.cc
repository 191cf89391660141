// Convolution primitives (NHWC lhs, HWIO rhs, 2 spatial dims): shape rules, kernels,
// VJPs and FLOP counts for
//   conv_general_dilated(lhs, rhs)          -> y   [N, Ho, Wo, O]
//   conv_bwd_data(g, rhs; lhs_shape)        -> dx  (the transpose of conv in lhs)
//   conv_bwd_filter(lhs, g; rhs_shape)      -> dw  (the transpose of conv in rhs)
// Shared attrs: window_strides[2], padding[4] = [lo_h, hi_h, lo_w, hi_w] (explicit; the
// Python layer turns 'SAME'/'VALID' into pairs like jax.lax.padtype_to_pads),
// lhs_dilation[2], rhs_dilation[2], feature_group_count, preferred_element_type,
// precision ('' / 'default': the kernels may choose Winograd for bf16 3x3 stride-1
// layers; 'high' / 'highest': exact products, the direct kernels - lax.Precision),
// algorithm ('' | 'bf16' | 'bf16_3x' | 'bf16_6x', prims/dot_algorithm.h: f32 operands
// rounded to / split into bf16, one, three or six passes of the direct kernels with bf16
// operands and an f32 result; never Winograd; bf16 operands are unaffected). The
// backward prims built by the VJPs inherit both.
// The three are bilinear and transposes of each other, so each one's VJP is made of the
// other two (conv is differentiable any number of times):
//   y = conv(x, w):            dx = bwd_data(ct, w),    dw = bwd_filter(x, ct)
//   dx = bwd_data(g, w):       dg = conv(ct, w),        dw = bwd_filter(ct, g)
//   dw = bwd_filter(x, g):     dx = bwd_data(g, ct),    dg = conv(x, ct)
#include "podlet/prims/common.h"
#include "podlet/prims/dot_algorithm.h"
#include "podlet/kernels/conv.h"
#include "podlet/ir/batch_ops.h"

namespace podlet {
namespace {
using kernels::ConvGeom;

struct ConvParams {
  int64_t sh, sw, lo_h, hi_h, lo_w, hi_w, ldh, ldw, rdh, rdw, G;
  std::string precision;  // '' (DEFAULT), 'high' or 'highest'
  std::string algorithm;  // '', 'bf16', 'bf16_3x' or 'bf16_6x'
};

bool exact_products(const std::string& p) { return p == "high" || p == "highest"; }

std::vector<int64_t> ints_of_len(const Attrs& a, const char* k, size_t n, std::vector<int64_t> dflt) {
  auto v = a.ints(k, dflt);
  if (v.size() != n) throw ShapeError(fmt(k, " must have ", n, " entries, got ", shape_str(v)));
  return v;
}

ConvParams conv_params(const Attrs& a) {
  auto s = ints_of_len(a, "window_strides", 2, {1, 1});
  auto p = ints_of_len(a, "padding", 4, {0, 0, 0, 0});
  auto ld = ints_of_len(a, "lhs_dilation", 2, {1, 1});
  auto rd = ints_of_len(a, "rhs_dilation", 2, {1, 1});
  ConvParams c{s[0], s[1], p[0], p[1], p[2], p[3], ld[0], ld[1], rd[0], rd[1], a.i("feature_group_count", 1),
               a.s("precision", ""), a.s("algorithm", "")};
  if (c.precision == "default") c.precision.clear();
  dot_algorithm_from_name(c.algorithm);  // checks the name
  if (!c.precision.empty() && !exact_products(c.precision))
    throw ValueError(fmt("precision must be 'default', 'high' or 'highest', got '", c.precision, "'"));
  for (auto [v, what] : {std::pair{s, "window_strides"}, {ld, "lhs_dilation"}, {rd, "rhs_dilation"}})
    for (auto x : v) if (x < 1) throw ShapeError(fmt(what, " must be >= 1, got ", shape_str(v)));
  if (c.G < 1) throw ShapeError(fmt("feature_group_count must be >= 1, got ", c.G));
  return c;
}

// Output size of one spatial dim (0 when the window does not fit, like XLA).
int64_t conv_out_size(int64_t in, int64_t k, int64_t s, int64_t lo, int64_t hi, int64_t ld, int64_t rd) {
  const int64_t dilated = in == 0 ? 0 : (in - 1) * ld + 1;
  const int64_t padded = dilated + lo + hi, window = (k - 1) * rd + 1;
  return padded < window ? 0 : (padded - window) / s + 1;
}

// Validates lhs [N, H, W, C] and rhs [KH, KW, C/G, O] against the attrs.
ConvGeom conv_geom(const Shape& lhs, const Shape& rhs, const ConvParams& c) {
  if (lhs.size() != 4) throw ShapeError(fmt("lhs must be NHWC (rank 4), got shape ", shape_str(lhs)));
  if (rhs.size() != 4) throw ShapeError(fmt("rhs must be HWIO (rank 4), got shape ", shape_str(rhs)));
  ConvGeom q;
  q.N = lhs[0]; q.H = lhs[1]; q.W = lhs[2]; q.C = lhs[3];
  q.KH = rhs[0]; q.KW = rhs[1]; q.O = rhs[3]; q.G = c.G;
  if (q.KH < 1 || q.KW < 1) throw ShapeError(fmt("rhs spatial dims must be >= 1, got rhs shape ", shape_str(rhs)));
  if (q.C % c.G)
    throw ShapeError(fmt("feature_group_count ", c.G, " must divide the lhs feature dim (", q.C, ")"));
  if (rhs[2] * c.G != q.C)
    throw ShapeError(fmt("rhs input-feature dim (HWIO dim 2) is ", rhs[2], ", expected lhs features ", q.C,
                         " / feature_group_count ", c.G, " = ", q.C / c.G));
  if (q.O % c.G)
    throw ShapeError(fmt("feature_group_count ", c.G, " must divide the rhs output-feature dim (", q.O, ")"));
  q.Ho = conv_out_size(q.H, q.KH, c.sh, c.lo_h, c.hi_h, c.ldh, c.rdh);
  q.Wo = conv_out_size(q.W, q.KW, c.sw, c.lo_w, c.hi_w, c.ldw, c.rdw);
  q.sh = c.sh; q.sw = c.sw; q.ph = c.lo_h; q.pw = c.lo_w;
  q.ldh = c.ldh; q.ldw = c.ldw; q.rdh = c.rdh; q.rdw = c.rdw;
  q.exact = exact_products(c.precision);
  return q;
}

Shape out_shape(const ConvGeom& q) { return {q.N, q.Ho, q.Wo, q.O}; }

// Result dtype: preferred_element_type, else the wider float operand.
DType conv_dtype(const AVal& a, const AVal& b, const Attrs& at) {
  for (auto* v : {&a, &b})
    if (!is_float(v->dtype))
      throw DTypeError(fmt("operands must be floating point (bfloat16/float32/float64), got ", dtype_name(v->dtype)));
  if (at.has("preferred_element_type") && !at.s("preferred_element_type").empty()) {
    DType p = dtype_from_name(at.s("preferred_element_type"));
    if (!is_float(p)) throw DTypeError(fmt("preferred_element_type must be a float dtype, got ", dtype_name(p)));
    return p;
  }
  auto rank = [](DType d) { return d == DType::bf16 ? 0 : d == DType::f32 ? 1 : 2; };
  return rank(a.dtype) >= rank(b.dtype) ? a.dtype : b.dtype;
}

Shape shape_attr(const Attrs& a, const char* k) {
  Shape s = a.ints(k);
  if (s.size() != 4) throw ShapeError(fmt(k, " must have 4 entries, got ", shape_str(s)));
  for (auto d : s) if (d < 0) throw ShapeError(fmt(k, " ", shape_str(s), " has a negative dim"));
  return s;
}

// For the backward prims: g must be the conv output of (lhs_shape, rhs_shape).
void check_g(const Shape& g, const ConvGeom& q, const Shape& lhs, const Shape& rhs) {
  if (g != out_shape(q))
    throw ShapeError(fmt("g has shape ", shape_str(g), ", expected ", shape_str(out_shape(q)),
                         " (the conv output for lhs ", shape_str(lhs), " and rhs ", shape_str(rhs), ")"));
}

// Attrs of a conv-family node built from another's: geometry, an explicit output dtype
// and (for the backward prims) the primal shape they produce.
Attrs derived_attrs(const Attrs& a, DType out, const char* shape_key = nullptr, const Shape& shape = {}) {
  ConvParams c = conv_params(a);
  Attrs r{{"window_strides", std::vector<int64_t>{c.sh, c.sw}},
          {"padding", std::vector<int64_t>{c.lo_h, c.hi_h, c.lo_w, c.hi_w}},
          {"lhs_dilation", std::vector<int64_t>{c.ldh, c.ldw}},
          {"rhs_dilation", std::vector<int64_t>{c.rdh, c.rdw}},
          {"feature_group_count", c.G},
          {"preferred_element_type", std::string(dtype_name(out))}};
  if (!c.precision.empty()) r.set("precision", c.precision);
  if (!c.algorithm.empty()) r.set("algorithm", c.algorithm);
  if (shape_key) r.set(shape_key, shape);
  return r;
}

int conv(Graph& g, int x, int w, const Attrs& a, DType out) {
  return g.add1("conv_general_dilated", {x, w}, derived_attrs(a, out));
}
int bwd_data(Graph& g, int gy, int w, const Attrs& a, const Shape& x_shape, DType out) {
  return g.add1("conv_bwd_data", {gy, w}, derived_attrs(a, out, "lhs_shape", x_shape));
}
int bwd_filter(Graph& g, int x, int gy, const Attrs& a, const Shape& w_shape, DType out) {
  return g.add1("conv_bwd_filter", {x, gy}, derived_attrs(a, out, "rhs_shape", w_shape));
}

// One of the three kernels (the dispatchers of kernels/conv.h) on the node's operands, in
// the node's algorithm: once on the operands as they are, or in bf16 passes.
using ConvKernel = void (*)(const ConvGeom&, DType, const void*, DType, const void*, DType, void*);
void run_conv(ConvKernel kernel, const ConvGeom& q, const Attrs& a, const std::vector<Array>& in,
              std::vector<Array>& out) {
  const DotAlgorithm alg = dot_algorithm_from_name(a.s("algorithm", ""));
  const DType ad = in[0].dtype(), bd = in[1].dtype(), od = out[0].dtype();
  if (!dot_algorithm_applies(alg, ad, bd, od)) return kernel(q, ad, in[0].raw(), bd, in[1].raw(), od, out[0].raw());
  ConvGeom direct = q;
  direct.exact = true;  // the passes' products are exact: never Winograd
  run_dot_algorithm(alg, {ad, in[0].raw(), in[0].size()}, {bd, in[1].raw(), in[1].size()}, od, out[0].raw(),
                    out[0].size(), [&](DType pad, const void* pa, DType pbd, const void* pb, DType pod, void* po) {
                      kernel(direct, pad, pa, pbd, pb, pod, po);
                    });
}

// 2 * N * Ho * Wo * O * KH * KW * C / G for all three.
double flops_of(const ConvGeom& q) {
  return 2.0 * double(q.N) * double(q.Ho) * double(q.Wo) * double(q.O) * double(q.KH) * double(q.KW) * double(q.Cg());
}


// ---- batching (vmap), as XLA does it: a batched lhs alone folds into N; otherwise the
// mapped axis becomes feature groups (B * G groups: each element's channels convolve
// with its own filter), which is also what per-example weight gradients need.
using Ids = std::vector<int>;
namespace bt = batching;

int fold_front(Graph& g, int x) {  // [B, N, ...] -> [B*N, ...]
  Shape s = g.aval(x).shape;
  Shape t(s.begin() + 1, s.end());
  t[0] *= s[0];
  return ops::reshape(g, x, t);
}
int unfold_front(Graph& g, int x, int64_t B) {  // [B*N, ...] -> [B, N, ...]
  Shape s = g.aval(x).shape;
  Shape t = s;
  t[0] = s[0] / B;
  t.insert(t.begin(), B);
  return ops::reshape(g, x, t);
}
// Activation [B, N, H, W, C] with C = G * Cg -> [N, H, W, G' = B*G groups of Cg], group
// order (b, g).
int act_to_groups(Graph& g, int x) {
  const Shape s = g.aval(x).shape;
  const int t = ops::transpose(g, x, {1, 2, 3, 0, 4});
  return ops::reshape(g, t, {s[1], s[2], s[3], s[0] * s[4]});
}
int act_from_groups(Graph& g, int y, int64_t B) {  // [N, H, W, B*C] -> [B, N, H, W, C]
  const Shape s = g.aval(y).shape;
  const int r = ops::reshape(g, y, {s[0], s[1], s[2], B, s[3] / B});
  return ops::transpose(g, r, {3, 0, 1, 2, 4});
}
// Filter [B, KH, KW, Cg, O] with O = G * Og -> [KH, KW, Cg, G*B*Og] when `outer_groups`
// (the conv keeps G groups, each holding B*Og outputs), else [KH, KW, Cg, B*O] (B*G groups).
int filt_fold(Graph& g, int w, int64_t G, bool outer_groups) {
  const Shape s = g.aval(w).shape;
  const int64_t B = s[0], O = s[4], Og = O / G;
  if (!outer_groups) {
    const int t = ops::transpose(g, w, {1, 2, 3, 0, 4});
    return ops::reshape(g, t, {s[1], s[2], s[3], B * O});
  }
  const int r = ops::reshape(g, w, {B, s[1], s[2], s[3], G, Og});
  const int t = ops::transpose(g, r, {1, 2, 3, 4, 0, 5});
  return ops::reshape(g, t, {s[1], s[2], s[3], B * O});
}

Attrs with_groups(const Attrs& a, int64_t G) { Attrs r = a; r.set("feature_group_count", G); return r; }

Ids batch_conv(Graph& g, const BatchCtx& c, const Ids& in, const Ids& bd, Ids& ob) {
  const int64_t B = c.size, G = c.n.attrs.i("feature_group_count", 1);
  ob = {0};
  if (bd[1] < 0) {  // lhs only: fold into N
    const int y = g.add1("conv_general_dilated", {fold_front(g, in[0]), in[1]}, c.n.attrs);
    return {unfold_front(g, y, B)};
  }
  if (bd[0] < 0) {  // rhs only: the batch joins each group's output features
    const int y = g.add1("conv_general_dilated", {in[0], filt_fold(g, in[1], G, true)}, c.n.attrs);
    const Shape s = g.aval(y).shape;  // [N, Ho, Wo, G*B*Og]
    const int64_t Og = s[3] / (G * B);
    const int r = ops::reshape(g, y, {s[0], s[1], s[2], G, B, Og});
    const int t = ops::transpose(g, r, {4, 0, 1, 2, 3, 5});
    return {ops::reshape(g, t, {B, s[0], s[1], s[2], G * Og})};
  }
  const int y = g.add1("conv_general_dilated", {act_to_groups(g, in[0]), filt_fold(g, in[1], G, false)},
                       with_groups(c.n.attrs, B * G));
  return {act_from_groups(g, y, B)};
}

Ids batch_conv_bwd_data(Graph& g, const BatchCtx& c, const Ids& in, const Ids& bd, Ids& ob) {
  const int64_t B = c.size, G = c.n.attrs.i("feature_group_count", 1);
  ob = {0};
  Shape ls = c.n.attrs.ints("lhs_shape");
  if (bd[1] < 0) {  // cotangent only: fold into N
    Attrs a = c.n.attrs;
    ls[0] *= B;
    a.set("lhs_shape", ls);
    return {unfold_front(g, g.add1("conv_bwd_data", {fold_front(g, in[0]), in[1]}, a), B)};
  }
  const int gy = bt::materialize(g, in[0], bd[0], B);
  Attrs a = with_groups(c.n.attrs, B * G);
  a.set("lhs_shape", Shape{ls[1 - 1], ls[1], ls[2], B * ls[3]});
  const int dx = g.add1("conv_bwd_data", {act_to_groups(g, gy), filt_fold(g, in[1], G, false)}, a);
  return {act_from_groups(g, dx, B)};
}

Ids batch_conv_bwd_filter(Graph& g, const BatchCtx& c, const Ids& in, const Ids& bd, Ids& ob) {
  const int64_t B = c.size, G = c.n.attrs.i("feature_group_count", 1);
  ob = {0};
  const Ids m = bt::materialize_all(g, in, bd, B);
  const Shape rs = c.n.attrs.ints("rhs_shape");  // [KH, KW, Cg, O]
  Attrs a = with_groups(c.n.attrs, B * G);
  a.set("rhs_shape", Shape{rs[0], rs[1], rs[2], B * rs[3]});
  const int dw = g.add1("conv_bwd_filter", {act_to_groups(g, m[0]), act_to_groups(g, m[1])}, a);
  const int r = ops::reshape(g, dw, {rs[0], rs[1], rs[2], B, rs[3]});
  return {ops::transpose(g, r, {3, 0, 1, 2, 4})};
}

static Register reg_conv("conv_general_dilated", PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) -> std::vector<AVal> {
      check_arity(in, 2);
      DType d = conv_dtype(in[0], in[1], a);
      return {AVal{d, out_shape(conv_geom(in[0].shape, in[1].shape, conv_params(a)))}};
    },
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
      ConvGeom q = conv_geom(in[0].shape(), in[1].shape(), conv_params(a));
      run_conv(kernels::conv_fwd, q, a, in, out);
    },
    .vjp = [](Graph& g, const Node& n, const std::vector<int>& ct) -> std::vector<int> {
      const int x = n.in[0], w = n.in[1];
      const AVal xa = g.aval(x), wa = g.aval(w);
      return {bwd_data(g, ct[0], w, n.attrs, xa.shape, xa.dtype), bwd_filter(g, x, ct[0], n.attrs, wa.shape, wa.dtype)};
    },
    .flops = [](const std::vector<AVal>& in, const std::vector<AVal>&, const Attrs& a) {
      return flops_of(conv_geom(in[0].shape, in[1].shape, conv_params(a))); },
    .batch = batch_conv});

static Register reg_conv_bwd_data("conv_bwd_data", PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) -> std::vector<AVal> {
      check_arity(in, 2);
      DType d = conv_dtype(in[0], in[1], a);
      Shape ls = shape_attr(a, "lhs_shape");
      check_g(in[0].shape, conv_geom(ls, in[1].shape, conv_params(a)), ls, in[1].shape);
      return {AVal{d, ls}};
    },
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
      ConvGeom q = conv_geom(out[0].shape(), in[1].shape(), conv_params(a));
      run_conv(kernels::conv_bwd_data, q, a, in, out);
    },
    .vjp = [](Graph& g, const Node& n, const std::vector<int>& ct) -> std::vector<int> {
      const int gy = n.in[0], w = n.in[1];
      const AVal ga = g.aval(gy), wa = g.aval(w);
      return {conv(g, ct[0], w, n.attrs, ga.dtype), bwd_filter(g, ct[0], gy, n.attrs, wa.shape, wa.dtype)};
    },
    .flops = [](const std::vector<AVal>& in, const std::vector<AVal>& out, const Attrs& a) {
      return flops_of(conv_geom(out[0].shape, in[1].shape, conv_params(a))); },
    .batch = batch_conv_bwd_data});

static Register reg_conv_bwd_filter("conv_bwd_filter", PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) -> std::vector<AVal> {
      check_arity(in, 2);
      DType d = conv_dtype(in[0], in[1], a);
      Shape rs = shape_attr(a, "rhs_shape");
      check_g(in[1].shape, conv_geom(in[0].shape, rs, conv_params(a)), in[0].shape, rs);
      return {AVal{d, rs}};
    },
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
      ConvGeom q = conv_geom(in[0].shape(), out[0].shape(), conv_params(a));
      run_conv(kernels::conv_bwd_filter, q, a, in, out);
    },
    .vjp = [](Graph& g, const Node& n, const std::vector<int>& ct) -> std::vector<int> {
      const int x = n.in[0], gy = n.in[1];
      const AVal xa = g.aval(x), ga = g.aval(gy);
      return {bwd_data(g, gy, ct[0], n.attrs, xa.shape, xa.dtype), conv(g, x, ct[0], n.attrs, ga.dtype)};
    },
    .flops = [](const std::vector<AVal>& in, const std::vector<AVal>& out, const Attrs& a) {
      return flops_of(conv_geom(in[0].shape, out[0].shape, conv_params(a))); },
    .batch = batch_conv_bwd_filter});

}  // namespace
}  // namespace podlet
