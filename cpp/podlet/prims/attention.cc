// Fused scaled dot-product attention (jax.nn.dot_product_attention), forward and backward
// as two primitives over flash-style tiles (kernels/attention.h has the arithmetic):
//
//   dot_product_attention(q, k, v [, bias] [, mask] [, qlen] [, kvlen]) -> out, lse
//   dot_product_attention_bwd(q, k, v [, bias] [, mask] [, qlen] [, kvlen], out, lse, dout)
//       -> dq, dk, dv [, dlogits]
//
// q [B, T, N, H], k and v [B, S, K, H] (N a multiple of K: grouped-query attention), one
// float dtype. bias: 4-D, each dim 1 or (B, N, T, S)'s, any float dtype. mask: bool, the
// same broadcast. qlen / kvlen: int32 [B] (query_seq_lengths / key_value_seq_lengths).
// Attrs: scale (float), causal (int), window_left / window_right (int, -1: none),
// has_bias / has_mask / has_qlen / has_kvlen (int): which optional inputs are present,
// in that order. out: q's shape and dtype; lse [B, N, T] in the accumulation type (f32,
// f64 for f64): max + log(sum) of each row's softmax, the residual the backward pass
// recomputes the probabilities from (it carries no gradient, as jax's return_residual
// is stop_gradient'ed). dlogits [B, N, T, S] (accumulation type) only with a bias: the
// VJP sums it down to the bias's shape.
#include "podlet/prims/common.h"
#include "podlet/ir/batch_ops.h"
#include "podlet/kernels/attention.h"

namespace podlet {
namespace {

DType acc_dtype(DType d) { return d == DType::f64 ? DType::f64 : DType::f32; }

struct Layout {
  int64_t B, T, S, N, K, H;
  int bias = -1, mask = -1, qlen = -1, kvlen = -1;  // input positions (-1: absent)
  size_t n_opt = 0;
};

Layout layout(const std::vector<AVal>& in, const Attrs& a, size_t trailing) {
  const char* what = "dot_product_attention";
  Layout L{};
  int pos = 3;
  if (a.i("has_bias", 0)) L.bias = pos++;
  if (a.i("has_mask", 0)) L.mask = pos++;
  if (a.i("has_qlen", 0)) L.qlen = pos++;
  if (a.i("has_kvlen", 0)) L.kvlen = pos++;
  L.n_opt = size_t(pos - 3);
  check_arity(in, size_t(pos) + trailing);
  const AVal &q = in[0], &k = in[1], &v = in[2];
  if (q.shape.size() != 4 || k.shape.size() != 4)
    throw ShapeError(fmt(what, ": query and key must be 4-D [B, T, N, H] / [B, S, K, H], got ", shape_str(q.shape),
                         " and ", shape_str(k.shape)));
  if (v.shape != k.shape)
    throw ShapeError(fmt(what, ": value must have the key's shape ", shape_str(k.shape), ", got ", shape_str(v.shape)));
  if (!is_float(q.dtype) || k.dtype != q.dtype || v.dtype != q.dtype)
    throw DTypeError(fmt(what, ": query, key and value must share one float dtype, got ", dtype_name(q.dtype), ", ",
                         dtype_name(k.dtype), ", ", dtype_name(v.dtype)));
  L.B = q.shape[0], L.T = q.shape[1], L.N = q.shape[2], L.H = q.shape[3];
  L.S = k.shape[1], L.K = k.shape[2];
  if (k.shape[0] != L.B || k.shape[3] != L.H)
    throw ShapeError(fmt(what, ": key ", shape_str(k.shape), " must be [", L.B, ", S, K, ", L.H, "] for query ",
                         shape_str(q.shape)));
  if (L.K < 1 || L.N % L.K != 0)
    throw ShapeError(fmt(what, ": the number of query heads (", L.N, ") must be a multiple of the key/value heads (",
                         L.K, ")"));
  const Shape full = {L.B, L.N, L.T, L.S};
  auto check_bcast = [&](int i, const char* name) {
    if (i < 0) return;
    const Shape& s = in[i].shape;
    bool ok = s.size() == 4;
    for (size_t d = 0; ok && d < 4; ++d) ok = s[d] == 1 || s[d] == full[d];
    if (!ok)
      throw ShapeError(fmt(what, ": ", name, " of shape ", shape_str(s), " must broadcast to [B, N, T, S] = ",
                           shape_str(full), " (4-D, each dim 1 or full)"));
  };
  check_bcast(L.bias, "bias");
  check_bcast(L.mask, "mask");
  if (L.bias >= 0 && !is_float(in[L.bias].dtype))
    throw DTypeError(fmt(what, ": bias must be a float array, got ", dtype_name(in[L.bias].dtype)));
  if (L.mask >= 0 && in[L.mask].dtype != DType::boolean)
    throw DTypeError(fmt(what, ": mask must be bool, got ", dtype_name(in[L.mask].dtype)));
  for (auto [i, name] : {std::pair{L.qlen, "query_seq_lengths"}, std::pair{L.kvlen, "key_value_seq_lengths"}}) {
    if (i < 0) continue;
    if (in[i].dtype != DType::i32 || in[i].shape != Shape{L.B})
      throw ShapeError(fmt(what, ": ", name, " must be int32 [", L.B, "], got ", dtype_name(in[i].dtype),
                           shape_str(in[i].shape)));
  }
  return L;
}

kernels::Attn params(const Layout& L, const std::vector<Array>& in, const Attrs& a, Array& bias_acc) {
  kernels::Attn p;
  p.B = L.B, p.T = L.T, p.S = L.S, p.N = L.N, p.K = L.K, p.H = L.H;
  p.scale = a.f("scale");
  p.causal = a.i("causal", 0) != 0;
  p.win_left = a.i("window_left", -1);
  p.win_right = a.i("window_right", -1);
  auto strides = [&](const Shape& s, int64_t* st) {
    const Shape full = {L.B, L.N, L.T, L.S};
    int64_t acc = 1;
    for (int d = 3; d >= 0; --d) {
      st[d] = s[d] == 1 && full[d] != 1 ? 0 : acc;
      acc *= s[d];
    }
  };
  if (L.bias >= 0) {
    const Array& b = in[L.bias];
    const DType ad = acc_dtype(in[0].dtype());
    if (b.dtype() == ad) {
      bias_acc = b;
    } else {  // read once in the accumulation type (jax adds the bias to f32 logits)
      bias_acc = Array(ad, b.shape());
      for (int64_t i = 0; i < b.size(); ++i) set_from_double(bias_acc, i, get_as_double(b, i));
    }
    p.bias = bias_acc.raw();
    strides(b.shape(), p.bias_st);
  }
  if (L.mask >= 0) {
    p.mask = in[L.mask].data<bool>();
    strides(in[L.mask].shape(), p.mask_st);
  }
  if (L.qlen >= 0) p.qlen = in[L.qlen].data<int32_t>();
  if (L.kvlen >= 0) p.kvlen = in[L.kvlen].data<int32_t>();
  return p;
}

std::vector<AVal> fwd_shape(const std::vector<AVal>& in, const Attrs& a) {
  Layout L = layout(in, a, 0);
  if (!(a.f("scale") == a.f("scale"))) throw ValueError("dot_product_attention: scale is NaN");
  return {in[0], AVal{acc_dtype(in[0].dtype), {L.B, L.N, L.T}}};
}

void fwd_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
  std::vector<AVal> av;
  for (auto& x : in) av.push_back(x.aval());
  Layout L = layout(av, a, 0);
  Array bias_acc;
  kernels::Attn p = params(L, in, a, bias_acc);
  switch (in[0].dtype()) {
    case DType::f32:
      kernels::attention_fwd<float, float>(p, in[0].data<float>(), in[1].data<float>(), in[2].data<float>(),
                                           out[0].data<float>(), out[1].data<float>());
      break;
    case DType::bf16:
      kernels::attention_fwd<bf16, float>(p, in[0].data<bf16>(), in[1].data<bf16>(), in[2].data<bf16>(),
                                          out[0].data<bf16>(), out[1].data<float>());
      break;
    case DType::f64:
      kernels::attention_fwd<double, double>(p, in[0].data<double>(), in[1].data<double>(), in[2].data<double>(),
                                             out[0].data<double>(), out[1].data<double>());
      break;
    default: throw DTypeError(fmt("dot_product_attention: unsupported dtype ", dtype_name(in[0].dtype())));
  }
}

std::vector<AVal> bwd_shape(const std::vector<AVal>& in, const Attrs& a) {
  Layout L = layout(std::vector<AVal>(in.begin(), in.end() - 3), a, 0);
  const AVal &o = in[in.size() - 3], &lse = in[in.size() - 2], &g = in[in.size() - 1];
  if (!(o == in[0]) || !(g == in[0]))
    throw ShapeError(fmt("dot_product_attention_bwd: out and dout must match the query ", dtype_name(in[0].dtype),
                         shape_str(in[0].shape)));
  if (!(lse == AVal{acc_dtype(in[0].dtype), {L.B, L.N, L.T}}))
    throw ShapeError(fmt("dot_product_attention_bwd: lse must be ", dtype_name(acc_dtype(in[0].dtype)), "[", L.B,
                         ", ", L.N, ", ", L.T, "], got ", dtype_name(lse.dtype), shape_str(lse.shape)));
  std::vector<AVal> r = {in[0], in[1], in[2]};
  if (L.bias >= 0) r.push_back(AVal{acc_dtype(in[0].dtype), {L.B, L.N, L.T, L.S}});
  return r;
}

void bwd_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
  std::vector<AVal> av;
  for (size_t i = 0; i + 3 < in.size(); ++i) av.push_back(in[i].aval());
  Layout L = layout(av, a, 0);
  Array bias_acc;
  kernels::Attn p = params(L, in, a, bias_acc);
  const Array &o = in[in.size() - 3], &lse = in[in.size() - 2], &g = in[in.size() - 1];
  const bool db = L.bias >= 0;
  switch (in[0].dtype()) {
    case DType::f32:
      kernels::attention_bwd<float, float>(p, in[0].data<float>(), in[1].data<float>(), in[2].data<float>(),
                                           o.data<float>(), lse.data<float>(), g.data<float>(), out[0].data<float>(),
                                           out[1].data<float>(), out[2].data<float>(),
                                           db ? out[3].data<float>() : nullptr);
      break;
    case DType::bf16:
      kernels::attention_bwd<bf16, float>(p, in[0].data<bf16>(), in[1].data<bf16>(), in[2].data<bf16>(),
                                          o.data<bf16>(), lse.data<float>(), g.data<bf16>(), out[0].data<bf16>(),
                                          out[1].data<bf16>(), out[2].data<bf16>(),
                                          db ? out[3].data<float>() : nullptr);
      break;
    case DType::f64:
      kernels::attention_bwd<double, double>(p, in[0].data<double>(), in[1].data<double>(), in[2].data<double>(),
                                             o.data<double>(), lse.data<double>(), g.data<double>(),
                                             out[0].data<double>(), out[1].data<double>(), out[2].data<double>(),
                                             db ? out[3].data<double>() : nullptr);
      break;
    default: throw DTypeError(fmt("dot_product_attention_bwd: unsupported dtype ", dtype_name(in[0].dtype())));
  }
}

// The backward pass is its own primitive (recomputing the probabilities tile by tile);
// a bias gets the logits' gradient summed over its broadcast dims.
std::vector<int> fwd_vjp(Graph& g, const Node& n, const std::vector<int>& ct) {
  std::vector<int> r(n.in.size(), -1);
  if (ct[0] < 0) return r;  // lse carries no gradient (jax stop_gradient's the residual)
  std::vector<int> in(n.in.begin(), n.in.end());
  in.push_back(n.out[0]);
  in.push_back(n.out[1]);
  in.push_back(ct[0]);
  auto d = g.add("dot_product_attention_bwd", in, n.attrs, n.where);
  r[0] = d[0], r[1] = d[1], r[2] = d[2];
  if (n.attrs.i("has_bias", 0)) {
    const int bias = n.in[3];
    const Shape bs = g.aval(bias).shape;
    const DType bd = g.aval(bias).dtype;
    std::vector<int64_t> axes;
    for (int k = 0; k < 4; ++k)
      if (bs[k] == 1 && g.aval(d[3]).shape[k] != 1) axes.push_back(k);
    int x = axes.empty() ? d[3] : ops::reshape(g, ops::reduce_sum(g, d[3], axes), bs);
    r[3] = ops::cast_if_needed(g, x, bd);
  }
  return r;
}

double fwd_flops(const std::vector<AVal>& in, const std::vector<AVal>&, const Attrs&) {
  const Shape &q = in[0].shape, &k = in[1].shape;
  return 4.0 * double(q[0]) * double(q[2]) * double(q[1]) * double(k[1]) * double(q[3]);
}

// Recomputing the scores twice (once per backward pass), dP twice, dV, dK, dQ.
double bwd_flops(const std::vector<AVal>& in, const std::vector<AVal>& out, const Attrs& a) {
  return 3.5 * fwd_flops(in, out, a);
}

}  // namespace

static Register reg_attention("dot_product_attention", batching::looped(PrimDef{
    .shape = fwd_shape, .kernel = fwd_kernel, .vjp = fwd_vjp, .flops = fwd_flops}));
static Register reg_attention_bwd("dot_product_attention_bwd", batching::looped(PrimDef{
    .shape = bwd_shape, .kernel = bwd_kernel, .vjp = nullptr, .flops = bwd_flops, .zero_grad = true}));

}  // namespace podlet
