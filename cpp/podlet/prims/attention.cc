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
//
// Executable graphs may read q, k and v as views and write dq, dk and dv into one array
// (ir/attention_views.h: Swin's qkv projection split into three and its gradient
// concatenated back). Attrs then: qkv_views = [q_off, q_ld, k_off, k_ld, v_off, v_ld]
// with q_shape and kv_shape: the first three inputs are the arrays the views read (row
// (b, t) of q at q_off + (b * T + t) * q_ld, N * H elements); and, on the backward node,
// dqkv = [dq_off, dk_off, dv_off, ld] with dqkv_shape: its first output is that one array
// (rows of ld elements holding dq, dk and dv side by side) instead of dq, dk, dv. With
// dbias_batch_sum (ir/attention_views.h, where the VJP's reduce_sum over the batch is the
// only reader), dlogits comes out summed over the batch, [1, N, T, S]: Swin's windows are
// the batch of a relative-position bias shared by all of them, and the per-window
// gradient it replaces was 59 MB per call at stage 1, written and read back.
#include "podlet/prims/common.h"
#include "podlet/ir/batch_ops.h"
#include "podlet/kernels/attention.h"
#include "podlet/kernels/engine_common.h"
#include <algorithm>
#include <array>
#include <cfloat>

namespace podlet {
namespace {

DType acc_dtype(DType d) { return d == DType::f64 ? DType::f64 : DType::f32; }

struct Layout {
  int64_t B, T, S, N, K, H;
  int bias = -1, mask = -1, qlen = -1, kvlen = -1;  // input positions (-1: absent)
  size_t n_opt = 0;
};

// One view of qkv_views: the array it reads must hold rows x len elements at off + r * ld.
void check_view(const AVal& src, int64_t off, int64_t ld, int64_t rows, int64_t len, const char* name) {
  if (off < 0 || ld < len || (rows > 0 && off + (rows - 1) * ld + len > src.size()))
    throw ShapeError(fmt("dot_product_attention: the ", name, " view (offset ", off, ", ", rows, " rows of ", len,
                         " elements ", ld, " apart) does not fit its array ", shape_str(src.shape)));
}

// q, k, v as the kernel sees them: the inputs, or the shapes the views give.
std::vector<AVal> logical_qkv(const std::vector<AVal>& in, const Attrs& a) {
  if (in.size() < 3) throw ValueError(fmt("dot_product_attention: expected query, key and value, got ", in.size(),
                                          " inputs"));
  if (!a.has("qkv_views")) return {in[0], in[1], in[2]};
  const auto vw = a.ints("qkv_views");
  const Shape qs = a.ints("q_shape"), ks = a.ints("kv_shape");
  bool ok = vw.size() == 6 && qs.size() == 4 && ks.size() == 4;
  for (size_t d = 0; ok && d < 4; ++d) ok = qs[d] >= 0 && ks[d] >= 0;
  if (!ok)
    throw ShapeError(fmt("dot_product_attention: qkv_views needs 6 entries, q_shape and kv_shape 4 sizes >= 0, got ",
                         shape_str(vw), ", ", shape_str(qs), ", ", shape_str(ks)));
  check_view(in[0], vw[0], vw[1], qs[0] * qs[1], qs[2] * qs[3], "query");
  check_view(in[1], vw[2], vw[3], ks[0] * ks[1], ks[2] * ks[3], "key");
  check_view(in[2], vw[4], vw[5], ks[0] * ks[1], ks[2] * ks[3], "value");
  return {AVal{in[0].dtype, qs}, AVal{in[1].dtype, ks}, AVal{in[2].dtype, ks}};
}

Layout layout(const std::vector<AVal>& in_, const Attrs& a, size_t trailing) {
  const char* what = "dot_product_attention";
  Layout L{};
  int pos = 3;
  if (a.i("has_bias", 0)) L.bias = pos++;
  if (a.i("has_mask", 0)) L.mask = pos++;
  if (a.i("has_qlen", 0)) L.qlen = pos++;
  if (a.i("has_kvlen", 0)) L.kvlen = pos++;
  L.n_opt = size_t(pos - 3);
  check_arity(in_, size_t(pos) + trailing);
  std::vector<AVal> in = in_;
  const auto qkv = logical_qkv(in_, a);
  std::copy(qkv.begin(), qkv.end(), in.begin());
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
  if (a.has("qkv_views")) {
    const auto vw = a.ints("qkv_views");
    p.q_ld = vw[1], p.k_ld = vw[3], p.v_ld = vw[5];
  }
  return p;
}

// The first elements of q, k and v (views start at their offsets).
template <class T>
std::array<const T*, 3> qkv_ptrs(const std::vector<Array>& in, const Attrs& a) {
  std::array<const T*, 3> r{in[0].data<T>(), in[1].data<T>(), in[2].data<T>()};
  if (a.has("qkv_views")) {
    const auto vw = a.ints("qkv_views");
    for (int i = 0; i < 3; ++i) r[i] += vw[2 * i];
  }
  return r;
}

// dq, dk, dv: the backward node's first three outputs, or parts of its packed first one.
void check_dqkv(const Attrs& a, const Layout& L) {
  const auto d = a.ints("dqkv");
  const Shape ds = a.ints("dqkv_shape");
  const int64_t nq = L.N * L.H, nk = L.K * L.H;
  bool ok = d.size() == 4 && L.T == L.S && d[3] > 0 && numel(ds) == L.B * L.T * d[3];
  if (ok) {  // the three row parts tile each row of ld elements exactly
    std::vector<std::pair<int64_t, int64_t>> parts = {{d[0], nq}, {d[1], nk}, {d[2], nk}};
    std::sort(parts.begin(), parts.end());
    int64_t at = 0;
    for (auto [off, len] : parts) { ok &= off == at; at += len; }
    ok &= at == d[3];
  }
  if (!ok)
    throw ShapeError(fmt("dot_product_attention_bwd: dqkv must place dq (", nq, " elements a row), dk and dv (", nk,
                         ") side by side in rows of ld elements filling dqkv_shape ", shape_str(ds)));
}

std::vector<AVal> fwd_shape(const std::vector<AVal>& in, const Attrs& a) {
  Layout L = layout(in, a, 0);
  if (!(a.f("scale") == a.f("scale"))) throw ValueError("dot_product_attention: scale is NaN");
  return {logical_qkv(in, a)[0], AVal{acc_dtype(in[0].dtype), {L.B, L.N, L.T}}};
}

template <class T, class A>
void fwd_typed(const kernels::Attn& p, const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
  const auto [q, k, v] = qkv_ptrs<T>(in, a);
  kernels::attention_fwd<T, A>(p, q, k, v, out[0].data<T>(), out[1].data<A>());
}

void fwd_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
  std::vector<AVal> av;
  for (auto& x : in) av.push_back(x.aval());
  Layout L = layout(av, a, 0);
  Array bias_acc;
  kernels::Attn p = params(L, in, a, bias_acc);
  switch (in[0].dtype()) {
    case DType::f32: fwd_typed<float, float>(p, in, out, a); break;
    case DType::bf16: fwd_typed<bf16, float>(p, in, out, a); break;
    case DType::f64: fwd_typed<double, double>(p, in, out, a); break;
    default: throw DTypeError(fmt("dot_product_attention: unsupported dtype ", dtype_name(in[0].dtype())));
  }
}

std::vector<AVal> bwd_shape(const std::vector<AVal>& in, const Attrs& a) {
  Layout L = layout(std::vector<AVal>(in.begin(), in.end() - 3), a, 0);
  const auto qkv = logical_qkv(in, a);
  const AVal &o = in[in.size() - 3], &lse = in[in.size() - 2], &g = in[in.size() - 1];
  if (!(o == qkv[0]) || !(g == qkv[0]))
    throw ShapeError(fmt("dot_product_attention_bwd: out and dout must match the query ", dtype_name(qkv[0].dtype),
                         shape_str(qkv[0].shape)));
  if (!(lse == AVal{acc_dtype(in[0].dtype), {L.B, L.N, L.T}}))
    throw ShapeError(fmt("dot_product_attention_bwd: lse must be ", dtype_name(acc_dtype(in[0].dtype)), "[", L.B,
                         ", ", L.N, ", ", L.T, "], got ", dtype_name(lse.dtype), shape_str(lse.shape)));
  std::vector<AVal> r = {qkv[0], qkv[1], qkv[2]};
  if (a.has("dqkv")) {
    check_dqkv(a, L);
    r = {AVal{in[0].dtype, a.ints("dqkv_shape")}};
  }
  if (L.bias >= 0) r.push_back(AVal{acc_dtype(in[0].dtype), {a.i("dbias_batch_sum", 0) ? 1 : L.B, L.N, L.T, L.S}});
  return r;
}

// The batch chunk of an in-kernel dbias sum: at most 64 slabs and 16 MB of them (a function
// of the shape only, so the sums are).
int64_t dbias_batch_chunk(const Layout& L, size_t acc_size) {
  const int64_t slab = std::max<int64_t>(1, L.N * L.T * L.S * int64_t(acc_size));
  const int64_t slabs = std::clamp<int64_t>((int64_t(16) << 20) / slab, 1, std::min<int64_t>(L.B, 64));
  return (L.B + slabs - 1) / slabs;
}

template <class T, class A>
void bwd_typed(const kernels::Attn& p0, const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a,
               bool db, int64_t chunk) {
  kernels::Attn p = p0;
  const auto [q, k, v] = qkv_ptrs<T>(in, a);
  const Array &o = in[in.size() - 3], &lse = in[in.size() - 2], &g = in[in.size() - 1];
  T *dq, *dk, *dv;
  A* dbias;
  if (a.has("dqkv")) {
    const auto d = a.ints("dqkv");
    T* x = out[0].data<T>();
    dq = x + d[0], dk = x + d[1], dv = x + d[2];
    p.dq_ld = p.dk_ld = p.dv_ld = d[3];
    dbias = db ? out[1].data<A>() : nullptr;
  } else {
    dq = out[0].data<T>(), dk = out[1].data<T>(), dv = out[2].data<T>();
    dbias = db ? out[3].data<A>() : nullptr;
  }
  if (!db || !chunk) return kernels::attention_bwd<T, A>(p, q, k, v, o.data<T>(), lse.data<A>(), g.data<T>(), dq, dk,
                                                         dv, dbias);
  // Summed over the batch: each chunk's entries added into its slab in order, then the
  // slabs added in order.
  // The slabs from the buffer pool (mapped once, counted in the peak memory).
  const int64_t slab = p.N * p.T * p.S, nslabs = (p.B + chunk - 1) / chunk;
  kernels::engine::PoolBuf buf(nslabs * slab * int64_t(sizeof(A) / 4));
  A* slabs = reinterpret_cast<A*>(buf.p);
  std::fill(slabs, slabs + nslabs * slab, A(0));
  p.dbias_chunk = chunk;
  kernels::attention_bwd<T, A>(p, q, k, v, o.data<T>(), lse.data<A>(), g.data<T>(), dq, dk, dv, slabs);
  parallel_for(slab, 1 << 14, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      A acc = slabs[i];
      for (int64_t c = 1; c < nslabs; ++c) acc += slabs[c * slab + i];
      dbias[i] = acc;
    }
  });
}

void bwd_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
  std::vector<AVal> av;
  for (size_t i = 0; i + 3 < in.size(); ++i) av.push_back(in[i].aval());
  Layout L = layout(av, a, 0);
  Array bias_acc;
  kernels::Attn p = params(L, in, a, bias_acc);
  const bool db = L.bias >= 0;
  const int64_t chunk = db && a.i("dbias_batch_sum", 0) ? dbias_batch_chunk(L, itemsize(acc_dtype(in[0].dtype()))) : 0;
  switch (in[0].dtype()) {
    case DType::f32: bwd_typed<float, float>(p, in, out, a, db, chunk); break;
    case DType::bf16: bwd_typed<bf16, float>(p, in, out, a, db, chunk); break;
    case DType::f64: bwd_typed<double, double>(p, in, out, a, db, chunk); break;
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
    const Shape ds = g.aval(d[3]).shape;
    const size_t off = bs.size() - 4;  // 1 under vmap (the looped node's leading axis)
    std::vector<int64_t> axes;
    for (size_t k = off; k < bs.size(); ++k)
      if (bs[k] == 1 && ds[k] != 1) axes.push_back(int64_t(k));
    int x = axes.empty() ? d[3] : ops::reshape(g, ops::reduce_sum(g, d[3], axes), bs);
    r[3] = ops::cast_if_needed(g, x, bd);
  }
  return r;
}

// ---- derivatives of the backward node (forward mode, second order) -------------------
// The backward node is the derivative of an attention; its own derivative is taken by
// differentiating the same attention written as plain primitives (the formula jax.nn's
// XLA path uses), twice, with the graph transformation vjp_graph: slower than the fused
// kernels, but only jvp / jacfwd / hessian and grad-of-grad reach it.

Shape with_heads(const Shape& s, int64_t K, int64_t G) {  // [b, n, t, s] -> [b, k, t, g, s]
  return {s[0], s[1] == 1 ? 1 : K, s[2], s[1] == 1 ? 1 : G, s[3]};
}

// [b, n, t, s]-broadcast operand x (bias or mask) as a [B, K, T, G, S] value.
int to_grouped(Graph& g, int x, int64_t K, int64_t G, const Shape& full5) {
  const Shape s = g.aval(x).shape;
  const Shape r = {s[0], s[1] == 1 ? 1 : K, s[1] == 1 ? 1 : G, s[2], s[3]};
  int y = ops::transpose(g, ops::reshape(g, x, r), {0, 1, 3, 2, 4});
  return ops::broadcast_in_dim(g, y, full5, {0, 1, 2, 3, 4});
}

// The attention output from plain primitives: in = q, k, v, then the node's optional
// inputs with the bias (if any) already broadcast to [B, N, T, S] in the accumulation type.
int unfused_attention(Graph& g, const Layout& L, const Attrs& a, const std::vector<int>& in) {
  const DType T = g.aval(in[0]).dtype, A = acc_dtype(T);
  const int64_t B = L.B, Tq = L.T, S = L.S, N = L.N, K = L.K, H = L.H, G = N / K;
  const Shape full5 = {B, K, Tq, G, S};
  int q = ops::reshape(g, ops::convert(g, in[0], A), {B, Tq, K, G, H});
  int k = ops::convert(g, in[1], A), v = ops::convert(g, in[2], A);
  using V = std::vector<int64_t>;
  int lg = g.add1("dot_general", {q, k}, {{"lhs_contracting", V{4}}, {"rhs_contracting", V{3}},
                                          {"lhs_batch", V{0, 2}}, {"rhs_batch", V{0, 2}}});  // [B, K, T, G, S]
  lg = ops::mul(g, lg, ops::scalar_like(g, lg, a.f("scale")));
  if (L.bias >= 0) lg = ops::add(g, lg, to_grouped(g, in[L.bias], K, G, full5));
  int keep = -1;
  auto both = [&](int m) { keep = keep < 0 ? m : g.add1("and", {keep, m}); };
  auto iota = [&](int64_t dim) {
    return g.add1("iota", {}, {{"shape", full5}, {"dimension", dim}, {"dtype", std::string("int32")}});
  };
  auto i32 = [&](int64_t x) { return g.add_const(full(DType::i32, {}, double(x))); };
  const int ti = iota(2), si = iota(4);
  if (L.mask >= 0) both(to_grouped(g, in[L.mask], K, G, full5));
  if (a.i("causal", 0)) both(g.add1("le", {si, ti}));
  if (a.i("window_left", -1) >= 0) both(g.add1("ge", {ops::add(g, si, i32(a.i("window_left"))), ti}));
  if (a.i("window_right", -1) >= 0) both(g.add1("le", {si, ops::add(g, ti, i32(a.i("window_right")))}));
  if (L.qlen >= 0) both(g.add1("lt", {ti, ops::broadcast_in_dim(g, in[L.qlen], full5, {0})}));
  if (L.kvlen >= 0) both(g.add1("lt", {si, ops::broadcast_in_dim(g, in[L.kvlen], full5, {0})}));
  if (keep >= 0) lg = ops::select(g, keep, lg, ops::full_like(g, lg, -0.7 * double(FLT_MAX)));
  int mx = ops::broadcast_in_dim(g, g.add1("reduce_max", {lg}, {{"axes", V{4}}}), full5, {0, 1, 2, 3});
  int e = g.add1("exp", {ops::sub(g, lg, g.add1("stop_gradient", {mx}))});
  int p = ops::div(g, e, ops::broadcast_in_dim(g, ops::reduce_sum(g, e, {4}), full5, {0, 1, 2, 3}));
  int o = g.add1("dot_general", {p, v}, {{"lhs_contracting", V{4}}, {"rhs_contracting", V{1}},
                                         {"lhs_batch", V{0, 1}}, {"rhs_batch", V{0, 2}}});  // [B, K, T, G, H]
  o = ops::reshape(g, ops::transpose(g, o, {0, 2, 1, 3, 4}), {B, Tq, N, H});
  if (L.qlen >= 0) {
    const Shape os = {B, Tq, N, H};
    int t4 = g.add1("iota", {}, {{"shape", os}, {"dimension", int64_t(1)}, {"dtype", std::string("int32")}});
    int live = g.add1("lt", {t4, ops::broadcast_in_dim(g, in[L.qlen], os, {0})});
    o = ops::select(g, live, o, ops::zeros_like(g, o));
  }
  return ops::cast_if_needed(g, o, T);
}

std::vector<int> bwd_vjp(Graph& g, const Node& n, const std::vector<int>& ct) {
  if (n.attrs.i("vmap_size", -1) >= 0)
    throw ValueError("the derivative of a vmapped dot_product_attention's backward pass (grad of grad or jvp "
                     "after vmap) is not supported: differentiate before vmapping, or use the op-by-op "
                     "attention (podlet.config.update('fused_attention', False), Flax's form)");
  std::vector<AVal> av;
  for (size_t i = 0; i + 3 < n.in.size(); ++i) av.push_back(g.aval(n.in[i]));
  const Layout L = layout(av, n.attrs, 0);
  const size_t nf = 3 + L.n_opt;  // q, k, v and the optional inputs
  const DType A = acc_dtype(av[0].dtype);
  const Shape full = {L.B, L.N, L.T, L.S};
  // The forward pass as a graph of its own, the bias widened to [B, N, T, S] so that its
  // gradient is the backward node's 4th output (the logits' gradient).
  Graph F;
  std::vector<int> fin;
  for (size_t i = 0; i < nf; ++i) {
    AVal x = av[i];
    if (int(i) == L.bias) x = AVal{A, full};
    fin.push_back(F.add_input(x));
  }
  F.outputs = {unfused_attention(F, L, n.attrs, fin)};
  std::vector<int> wrt = {0, 1, 2};
  if (L.bias >= 0) wrt.push_back(L.bias);
  Graph Bk = vjp_graph(F, wrt, {0});  // inputs: fin + dout; outputs: out, then the grads of wrt
  std::vector<int> wrt2 = wrt, cto;
  wrt2.push_back(int(nf));  // dout
  for (size_t k = 0; k < wrt.size(); ++k) cto.push_back(int(1 + k));
  Graph W = vjp_graph(Bk, wrt2, cto);  // inputs: fin + dout + cts of the grads; outputs: Bk's + cts of wrt2
  std::vector<int> args;
  for (size_t i = 0; i < nf; ++i) {
    int x = n.in[i];
    if (int(i) == L.bias) x = ops::broadcast_in_dim(g, ops::cast_if_needed(g, x, A), full, {0, 1, 2, 3});
    args.push_back(x);
  }
  args.push_back(n.in.back());  // dout
  for (size_t k = 0; k < wrt.size(); ++k) {
    const int want = n.out[k];
    args.push_back(k < ct.size() && ct[k] >= 0 ? ct[k] : ops::zeros_like(g, want));
  }
  auto outs = g.inline_graph(W, args, n.where);
  const size_t base = Bk.outputs.size();
  std::vector<int> r(n.in.size(), -1);
  for (size_t k = 0; k < wrt2.size(); ++k) {
    int x = outs[base + k];
    const int i = k + 1 == wrt2.size() ? int(n.in.size()) - 1 : wrt2[k];  // dout is the node's last input
    if (i == L.bias) {  // back from [B, N, T, S] to the bias's broadcast shape and dtype
      const Shape bs = g.aval(n.in[i]).shape;
      std::vector<int64_t> axes;
      for (int d = 0; d < 4; ++d)
        if (bs[d] == 1 && full[d] != 1) axes.push_back(d);
      if (!axes.empty()) x = ops::reshape(g, ops::reduce_sum(g, x, axes), bs);
    }
    r[i] = ops::cast_if_needed(g, x, g.aval(n.in[i]).dtype);
  }
  return r;
}

double fwd_flops(const std::vector<AVal>& in, const std::vector<AVal>&, const Attrs& a) {
  const Shape q = a.has("qkv_views") ? a.ints("q_shape") : in[0].shape;
  const Shape k = a.has("qkv_views") ? a.ints("kv_shape") : in[1].shape;
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
    .shape = bwd_shape, .kernel = bwd_kernel, .vjp = bwd_vjp, .flops = bwd_flops}));

}  // namespace podlet
