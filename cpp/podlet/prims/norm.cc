// Fused row primitives over the trailing axes (kernels/norm.h has the arithmetic):
//
//   layer_norm(x [, scale] [, bias]) -> y, mean, rstd
//   layer_norm_bwd(dy, x, mean, rstd [, scale]) -> dx, dscale, dbias
//   softmax(x) -> y;  log_softmax(x) -> y            (over the last axis)
//   softmax_bwd(y, dy) -> dx;  log_softmax_bwd(y, dy) -> dx
//
// layer_norm normalises each row of the trailing `feature_ndim` axes of x (f32, bf16 or
// f64) with Flax's LayerNorm arithmetic (use_mean = 1) or RMSNorm's (use_mean = 0), in the
// accumulation type A (f32; f64 for f64 x). scale and bias are A arrays of x's trailing
// shape; has_scale / has_bias say which are present, in that order. Attrs: epsilon
// (float), use_mean, feature_ndim (>= 1), has_scale, has_bias (int), dtype (string: y's
// dtype, Flax's `dtype`: f32 or bf16, f64 with f64 x). mean and rstd (A, x's leading
// shape) are the residuals of the backward pass; they carry no gradient (their
// dependence on x is in layer_norm_bwd's dx). layer_norm_bwd's dscale and dbias (A) are
// always computed (the sums over rows of dy * xhat and dy).
#include "podlet/prims/common.h"
#include "podlet/ir/batch_ops.h"
#include "podlet/kernels/norm.h"

namespace podlet {
namespace {

DType acc_of(DType d) { return d == DType::f64 ? DType::f64 : DType::f32; }

struct LnLayout {
  int64_t rows = 1, C = 1;
  int scale = -1, bias = -1;  // input positions (-1: absent)
  Shape lead, feat;
  DType T, O, A;
};

// The layout of layer_norm's x [, scale] [, bias] starting at input `x_pos`.
LnLayout ln_layout(const std::vector<AVal>& in, const Attrs& a, size_t x_pos, const char* what) {
  LnLayout L;
  const AVal& x = in.at(x_pos);
  const int64_t k = a.i("feature_ndim", 1);
  if (k < 1 || k > int64_t(x.shape.size()))
    throw ShapeError(fmt(what, ": feature_ndim must be in [1, rank of x = ", x.shape.size(), "], got ", k));
  if (x.dtype != DType::f32 && x.dtype != DType::bf16 && x.dtype != DType::f64)
    throw DTypeError(fmt(what, ": x must be float32, bfloat16 or float64, got ", dtype_name(x.dtype)));
  L.T = x.dtype;
  L.A = acc_of(x.dtype);
  L.O = dtype_from_name(a.s("dtype", dtype_name(x.dtype)));
  const bool ok_o = L.A == DType::f64 ? L.O == DType::f64 : (L.O == DType::f32 || L.O == DType::bf16);
  if (!ok_o)
    throw DTypeError(fmt(what, ": dtype ", dtype_name(L.O), " is not supported for ", dtype_name(x.dtype),
                         " x (expected float32 or bfloat16; float64 with float64 x)"));
  const size_t split = x.shape.size() - size_t(k);
  L.lead.assign(x.shape.begin(), x.shape.begin() + split);
  L.feat.assign(x.shape.begin() + split, x.shape.end());
  for (auto d : L.lead) L.rows *= d;
  for (auto d : L.feat) L.C *= d;
  if (!(a.f("epsilon") >= 0.0))
    throw ValueError(fmt(what, ": epsilon must be >= 0, got ", a.f("epsilon")));
  return L;
}

// scale / bias after x at x_pos + 1.
void ln_params(LnLayout& L, const std::vector<AVal>& in, const Attrs& a, size_t pos, const char* what) {
  if (a.i("has_scale", 0)) L.scale = int(pos++);
  if (a.i("has_bias", 0)) L.bias = int(pos++);
  check_arity(in, pos);
  for (auto [i, name] : {std::pair{L.scale, "scale"}, std::pair{L.bias, "bias"}}) {
    if (i < 0) continue;
    if (in[i].dtype != L.A || in[i].shape != L.feat)
      throw ShapeError(fmt(what, ": ", name, " must be ", dtype_name(L.A), shape_str(L.feat),
                           " (x's trailing axes, in the statistics dtype), got ", dtype_name(in[i].dtype),
                           shape_str(in[i].shape)));
  }
}

kernels::NormRows rows_of(const LnLayout& L, const Attrs& a) {
  kernels::NormRows p;
  p.rows = L.rows, p.C = L.C;
  p.eps = a.f("epsilon");
  p.use_mean = a.i("use_mean", 1) != 0;
  return p;
}

std::vector<AVal> ln_shape(const std::vector<AVal>& in, const Attrs& a) {
  LnLayout L = ln_layout(in, a, 0, "layer_norm");
  ln_params(L, in, a, 1, "layer_norm");
  return {AVal{L.O, in[0].shape}, AVal{L.A, L.lead}, AVal{L.A, L.lead}};
}

template <class T> const T* opt(const std::vector<Array>& in, int i) { return i < 0 ? nullptr : in[i].data<T>(); }

void ln_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
  std::vector<AVal> av;
  for (auto& x : in) av.push_back(x.aval());
  LnLayout L = ln_layout(av, a, 0, "layer_norm");
  ln_params(L, av, a, 1, "layer_norm");
  const kernels::NormRows p = rows_of(L, a);
  auto run = [&](auto t, auto o, auto acc) {
    using T = decltype(t);
    using O = decltype(o);
    using A = decltype(acc);
    kernels::layer_norm_fwd<T, O, A>(p, in[0].data<T>(), opt<A>(in, L.scale), opt<A>(in, L.bias),
                                     out[0].data<O>(), out[1].data<A>(), out[2].data<A>());
  };
  if (L.A == DType::f64) return run(double(), double(), double());
  if (L.T == DType::f32 && L.O == DType::f32) return run(float(), float(), float());
  if (L.T == DType::f32) return run(float(), bf16(), float());
  if (L.O == DType::f32) return run(bf16(), float(), float());
  return run(bf16(), bf16(), float());
}

// layer_norm_bwd(dy, x, mean, rstd [, scale])
std::vector<AVal> ln_bwd_shape(const std::vector<AVal>& in, const Attrs& a) {
  const char* what = "layer_norm_bwd";
  if (in.size() < 4) check_arity(in, 4);
  LnLayout L = ln_layout(in, a, 1, what);
  if (a.i("has_scale", 0)) L.scale = 4;
  check_arity(in, L.scale >= 0 ? 5 : 4);
  if (in[0].dtype != L.O || in[0].shape != in[1].shape)
    throw ShapeError(fmt(what, ": dy must be ", dtype_name(L.O), shape_str(in[1].shape), ", got ",
                         dtype_name(in[0].dtype), shape_str(in[0].shape)));
  for (int i : {2, 3})
    if (in[i].dtype != L.A || in[i].shape != L.lead)
      throw ShapeError(fmt(what, ": ", i == 2 ? "mean" : "rstd", " must be ", dtype_name(L.A), shape_str(L.lead),
                           ", got ", dtype_name(in[i].dtype), shape_str(in[i].shape)));
  if (L.scale >= 0 && (in[4].dtype != L.A || in[4].shape != L.feat))
    throw ShapeError(fmt(what, ": scale must be ", dtype_name(L.A), shape_str(L.feat), ", got ",
                         dtype_name(in[4].dtype), shape_str(in[4].shape)));
  return {in[1], AVal{L.A, L.feat}, AVal{L.A, L.feat}};
}

void ln_bwd_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
  std::vector<AVal> av;
  for (auto& x : in) av.push_back(x.aval());
  LnLayout L = ln_layout(av, a, 1, "layer_norm_bwd");
  const int sc = a.i("has_scale", 0) ? 4 : -1;
  const kernels::NormRows p = rows_of(L, a);
  auto run = [&](auto t, auto o, auto acc) {
    using T = decltype(t);
    using O = decltype(o);
    using A = decltype(acc);
    kernels::layer_norm_bwd<T, O, A>(p, in[0].data<O>(), in[1].data<T>(), in[2].data<A>(), in[3].data<A>(),
                                     opt<A>(in, sc), out[0].data<T>(), out[1].data<A>(), out[2].data<A>());
  };
  if (L.A == DType::f64) return run(double(), double(), double());
  if (L.T == DType::f32 && L.O == DType::f32) return run(float(), float(), float());
  if (L.T == DType::f32) return run(float(), bf16(), float());
  if (L.O == DType::f32) return run(bf16(), float(), float());
  return run(bf16(), bf16(), float());
}

// ---- the unfused formulation (Flax's ops), for the second-order derivatives ----------

// y of layer_norm from plain primitives: in = x, then scale and bias (both present here;
// the caller passes ones / zeros for absent ones). `looped`: the node of a vmap loop
// (batching::looped), whose x, scale and bias carry the mapped elements in front.
int unfused_layer_norm(Graph& g, const LnLayout& L, const Attrs& a, int x, int scale, int bias, bool looped) {
  const Shape xs = g.aval(x).shape;
  const int64_t R = int64_t(xs.size()), k = int64_t(L.feat.size());
  std::vector<int64_t> axes, lead_dims, feat_dims;
  for (int64_t d = 0; d < R; ++d) (d < R - k ? lead_dims : axes).push_back(d);
  if (looped) feat_dims.push_back(0);
  feat_dims.insert(feat_dims.end(), axes.begin(), axes.end());
  int xa = ops::convert(g, x, L.A);
  auto per_row = [&](int v) { return ops::broadcast_in_dim(g, v, xs, lead_dims); };
  auto per_feat = [&](int v) { return ops::broadcast_in_dim(g, v, xs, feat_dims); };
  const int n = g.add_const(full(L.A, {}, double(L.C)));
  int rstd_in;
  int centred = xa;
  if (a.i("use_mean", 1)) {
    int mu = ops::div(g, ops::reduce_sum(g, xa, axes), n);
    int m2 = ops::div(g, ops::reduce_sum(g, ops::mul(g, xa, xa), axes), n);
    int var = g.add1("max", {g.add_const(full(L.A, {}, 0.0)), ops::sub(g, m2, ops::mul(g, mu, mu))});
    rstd_in = var;
    centred = ops::sub(g, xa, per_row(mu));
  } else {
    rstd_in = ops::div(g, ops::reduce_sum(g, ops::mul(g, xa, xa), axes), n);
  }
  int rs = g.add1("rsqrt", {ops::add(g, rstd_in, g.add_const(full(L.A, {}, a.f("epsilon"))))});
  int y = ops::mul(g, centred, ops::mul(g, per_row(rs), per_feat(scale)));
  y = ops::add(g, y, per_feat(bias));
  return ops::cast_if_needed(g, y, L.O);
}

// layer_norm's VJP: one layer_norm_bwd node; mean / rstd carry no gradient of their own.
std::vector<int> ln_vjp(Graph& g, const Node& n, const std::vector<int>& ct) {
  std::vector<int> r(n.in.size(), -1);
  if (ct[0] < 0) return r;
  std::vector<int> in = {ct[0], n.in[0], n.out[1], n.out[2]};
  const bool has_scale = n.attrs.i("has_scale", 0), has_bias = n.attrs.i("has_bias", 0);
  if (has_scale) in.push_back(n.in[1]);
  auto d = g.add("layer_norm_bwd", in, n.attrs, n.where);
  r[0] = d[0];
  if (has_scale) r[1] = d[1];
  if (has_bias) r[has_scale ? 2 : 1] = d[2];
  return r;
}

// layer_norm_bwd's derivative: the same layer norm written as plain primitives,
// differentiated twice (vjp_graph), as dot_product_attention_bwd does. dx is the total
// derivative through mean and rstd, so those inputs get none.
std::vector<int> ln_bwd_vjp(Graph& g, const Node& n, const std::vector<int>& ct) {
  std::vector<AVal> av;
  for (int v : n.in) av.push_back(g.aval(v));
  // A vmap loop's node (jacrev's vmap, then jacfwd: hessian): every operand carries the
  // B mapped elements in front, scale and the sums too ([B, features]).
  const int64_t B = n.attrs.i("vmap_size", -1);
  std::vector<AVal> el = av;
  if (B >= 0)
    for (auto& a : el) a.shape.erase(a.shape.begin());
  LnLayout L = ln_layout(el, n.attrs, 1, "layer_norm_bwd");
  Shape ps = L.feat;  // scale / bias / dscale / dbias shape
  if (B >= 0) ps.insert(ps.begin(), B);
  const bool has_scale = n.attrs.i("has_scale", 0);
  Graph F;
  const int fx = F.add_input(av[1]);
  const int fs = has_scale ? F.add_input(AVal{L.A, ps}) : F.add_const(full(L.A, ps, 1.0));
  const int fb = F.add_input(AVal{L.A, ps});
  F.outputs = {unfused_layer_norm(F, L, n.attrs, fx, fs, fb, B >= 0)};
  const int nf = has_scale ? 3 : 2;  // x, [scale], bias
  std::vector<int> wrt;
  for (int i = 0; i < nf; ++i) wrt.push_back(i);
  Graph Bk = vjp_graph(F, wrt, {0});  // inputs: x, [scale], bias, dy; outputs: y, dx, [dscale], dbias
  // The node's outputs dx, dscale, dbias as Bk's outputs (dscale only with a scale).
  std::vector<int> node_out = {0}, bk_out = {1};
  if (has_scale) node_out.push_back(1), bk_out.push_back(2);
  node_out.push_back(2), bk_out.push_back(nf);
  std::vector<int> wrt2 = {0};
  if (has_scale) wrt2.push_back(1);
  wrt2.push_back(nf);  // dy
  Graph W = vjp_graph(Bk, wrt2, bk_out);
  std::vector<int> args = {n.in[1]};
  if (has_scale) args.push_back(n.in[4]);
  args.push_back(ops::zeros_like(g, n.out[2]));  // the bias does not enter any derivative
  args.push_back(n.in[0]);
  for (size_t k = 0; k < node_out.size(); ++k) {
    const int i = node_out[k];
    args.push_back(i < int(ct.size()) && ct[i] >= 0 ? ct[i] : ops::zeros_like(g, n.out[i]));
  }
  auto outs = g.inline_graph(W, args, n.where);
  const size_t base = Bk.outputs.size();
  std::vector<int> r(n.in.size(), -1);
  r[1] = ops::cast_if_needed(g, outs[base + 0], av[1].dtype);
  if (has_scale) r[4] = outs[base + 1];
  r[0] = ops::cast_if_needed(g, outs[base + wrt2.size() - 1], av[0].dtype);
  return r;
}

// vmap: rows are independent, so a batched x with shared scale / bias is one node over
// more rows; a batched scale or bias (per-element params) runs as a loop.
std::vector<int> ln_batch(Graph& g, const BatchCtx& c, const std::vector<int>& in, const std::vector<int>& bd,
                          std::vector<int>& out_bdim) {
  bool params_batched = false;
  for (size_t k = 1; k < in.size(); ++k) params_batched = params_batched || bd[k] >= 0;
  if (params_batched || c.n.attrs.i("vmap_size", -1) >= 0) return batching::loop_rule(g, c, in, bd, out_bdim);
  std::vector<int> x(in);
  x[0] = batching::materialize(g, in[0], bd[0], c.size);
  return batching::reapply(g, c, x, c.n.attrs, out_bdim);
}

double ln_flops(const std::vector<AVal>& in, const std::vector<AVal>&, const Attrs&) {
  return 7.0 * double(numel(in[0].shape));  // sum, square-sum, centre, scale, shift (+ the per-row work)
}
double ln_bwd_flops(const std::vector<AVal>& in, const std::vector<AVal>&, const Attrs&) {
  return 11.0 * double(numel(in[1].shape));
}

// ---- softmax / log_softmax ------------------------------------------------------------

void check_rows(const AVal& x, const char* what) {
  if (x.dtype != DType::f32 && x.dtype != DType::bf16 && x.dtype != DType::f64)
    throw DTypeError(fmt(what, ": x must be float32, bfloat16 or float64, got ", dtype_name(x.dtype)));
  if (x.shape.empty()) throw ShapeError(fmt(what, ": x must have at least one axis (the last is reduced), got a scalar"));
}

std::vector<AVal> sm_shape(const std::vector<AVal>& in, const Attrs&) {
  check_arity(in, 1);
  check_rows(in[0], "softmax");
  return {in[0]};
}

std::vector<AVal> sm_bwd_shape(const std::vector<AVal>& in, const Attrs&) {
  check_arity(in, 2);
  check_rows(in[0], "softmax_bwd");
  if (!(in[1] == in[0]))
    throw ShapeError(fmt("softmax_bwd: dy must be ", dtype_name(in[0].dtype), shape_str(in[0].shape), " like y, got ",
                         dtype_name(in[1].dtype), shape_str(in[1].shape)));
  return {in[0]};
}

void rows_cols(const Shape& s, int64_t& rows, int64_t& C) {
  C = s.back();
  rows = 1;
  for (size_t d = 0; d + 1 < s.size(); ++d) rows *= s[d];
}

template <bool Log>
void sm_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs&) {
  int64_t rows, C;
  rows_cols(in[0].shape(), rows, C);
  switch (in[0].dtype()) {
    case DType::f32: kernels::softmax_fwd<float>(rows, C, Log, in[0].data<float>(), out[0].data<float>()); break;
    case DType::bf16: kernels::softmax_fwd<bf16>(rows, C, Log, in[0].data<bf16>(), out[0].data<bf16>()); break;
    default: kernels::softmax_fwd<double>(rows, C, Log, in[0].data<double>(), out[0].data<double>()); break;
  }
}

template <bool Log>
void sm_bwd_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs&) {
  int64_t rows, C;
  rows_cols(in[0].shape(), rows, C);
  switch (in[0].dtype()) {
    case DType::f32:
      kernels::softmax_bwd<float>(rows, C, Log, in[0].data<float>(), in[1].data<float>(), out[0].data<float>());
      break;
    case DType::bf16:
      kernels::softmax_bwd<bf16>(rows, C, Log, in[0].data<bf16>(), in[1].data<bf16>(), out[0].data<bf16>());
      break;
    default:
      kernels::softmax_bwd<double>(rows, C, Log, in[0].data<double>(), in[1].data<double>(), out[0].data<double>());
      break;
  }
}

template <bool Log>
std::vector<int> sm_vjp(Graph& g, const Node& n, const std::vector<int>& ct) {
  if (ct[0] < 0) return {-1};
  return {g.add(Log ? "log_softmax_bwd" : "softmax_bwd", {n.out[0], ct[0]}, {}, n.where)[0]};
}

// dx of the backward node from plain primitives (in the accumulation type), for its own
// derivative: softmax dx = y * (dy - sum(dy * y)); log_softmax dx = dy - exp(y) * sum(dy).
template <bool Log>
std::vector<int> sm_bwd_vjp(Graph& g, const Node& n, const std::vector<int>& ct) {
  if (ct[0] < 0) return {-1, -1};
  const AVal y = g.aval(n.in[0]);
  const DType A = acc_of(y.dtype);
  const int64_t R = int64_t(y.shape.size());
  std::vector<int64_t> lead;
  for (int64_t d = 0; d + 1 < R; ++d) lead.push_back(d);
  Graph F;
  const int fy = F.add_input(y), fd = F.add_input(y);
  const int ya = ops::convert(F, fy, A), da = ops::convert(F, fd, A);
  auto row = [&](int v) { return ops::broadcast_in_dim(F, ops::reduce_sum(F, v, {R - 1}), y.shape, lead); };
  int dx = Log ? ops::sub(F, da, ops::mul(F, F.add1("exp", {ya}), row(da)))
               : ops::mul(F, ya, ops::sub(F, da, row(ops::mul(F, da, ya))));
  F.outputs = {ops::cast_if_needed(F, dx, y.dtype)};
  Graph W = vjp_graph(F, {0, 1}, {0});  // inputs y, dy, ct; outputs dx, ct_y, ct_dy
  auto outs = g.inline_graph(W, {n.in[0], n.in[1], ct[0]}, n.where);
  return {outs[1], outs[2]};
}

std::vector<int> rows_batch(Graph& g, const BatchCtx& c, const std::vector<int>& in, const std::vector<int>& bd,
                            std::vector<int>& out_bdim) {
  return batching::reapply(g, c, batching::materialize_all(g, in, bd, c.size), c.n.attrs, out_bdim);
}

double sm_flops(const std::vector<AVal>& in, const std::vector<AVal>&, const Attrs&) {
  return 5.0 * double(numel(in[0].shape));  // max, subtract, exp, sum, divide
}
double sm_bwd_flops(const std::vector<AVal>& in, const std::vector<AVal>&, const Attrs&) {
  return 4.0 * double(numel(in[0].shape));
}

}  // namespace

static Register reg_layer_norm("layer_norm", batching::looped(PrimDef{
    .shape = ln_shape, .kernel = ln_kernel, .vjp = ln_vjp, .flops = ln_flops, .batch = ln_batch}));
static Register reg_layer_norm_bwd("layer_norm_bwd", batching::looped(PrimDef{
    .shape = ln_bwd_shape, .kernel = ln_bwd_kernel, .vjp = ln_bwd_vjp, .flops = ln_bwd_flops}));
static Register reg_softmax("softmax", PrimDef{
    .shape = sm_shape, .kernel = sm_kernel<false>, .vjp = sm_vjp<false>, .flops = sm_flops, .batch = rows_batch});
static Register reg_log_softmax("log_softmax", PrimDef{
    .shape = sm_shape, .kernel = sm_kernel<true>, .vjp = sm_vjp<true>, .flops = sm_flops, .batch = rows_batch});
static Register reg_softmax_bwd("softmax_bwd", PrimDef{
    .shape = sm_bwd_shape, .kernel = sm_bwd_kernel<false>, .vjp = sm_bwd_vjp<false>, .flops = sm_bwd_flops,
    .batch = rows_batch});
static Register reg_log_softmax_bwd("log_softmax_bwd", PrimDef{
    .shape = sm_bwd_shape, .kernel = sm_bwd_kernel<true>, .vjp = sm_bwd_vjp<true>, .flops = sm_bwd_flops,
    .batch = rows_batch});

}  // namespace podlet
