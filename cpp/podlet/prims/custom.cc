// custom_vjp / custom_jvp: nodes carrying the user's traced rules as sub-graphs
// (python/podlet/_src/custom_derivatives.py builds them).
//
//   custom_vjp_call(args..., f_caps..., fwd_caps..., bwd_caps...;
//                   f, fwd, bwd, n_args, n_fcap, n_fwdcap, n_bwdcap, n_res)
//     f:   [args..., f_caps...] -> outs
//     fwd: [args..., fwd_caps...] -> [outs..., residuals...]     (n_res residuals)
//     bwd: [residuals..., cts of outs..., bwd_caps...] -> one cotangent per arg
//   The kernel runs f. The VJP rule inlines fwd, then bwd, into the graph being built,
//   so grad-of-grad differentiates through the user's fwd and bwd, as in JAX.
//
//   custom_jvp_call(args..., f_caps..., jvp_caps...; f, jvp, n_args, n_fcap, n_jcap,
//                   float_in, float_out)
//     f:   [args..., f_caps...] -> outs
//     jvp: [args..., tangents of args[float_in]..., jvp_caps...]
//            -> [outs..., tangents of outs[float_out]...]       (linear in the tangents)
//   The kernel runs f. The VJP rule is the transpose of jvp w.r.t. the tangents
//   (vjp_graph of jvp, evaluated with zero tangents, inlined); forward mode, which
//   podlet derives by transposing the VJP, therefore gives back the user's rule.
//
// Captures (values the user's functions closed over) are extra inputs that carry no
// gradient. Batching batches the sub-graphs with every input and output mapped.
#include "podlet/prims/common.h"
#include "podlet/ir/batch_ops.h"
#include <cstring>

namespace podlet {
namespace {

std::vector<AVal> sub_shape(const std::vector<AVal>& in, const Attrs& a) {
  const Graph& f = *a.graph("f");
  const size_t n_f = size_t(a.i("n_args") + a.i("n_fcap"));
  if (in.size() < n_f || f.inputs.size() != n_f)
    throw ShapeError(fmt("custom call: ", in.size(), " operands for a function of ", f.inputs.size(), " inputs"));
  for (size_t i = 0; i < n_f; ++i)
    if (!(in[i] == f.aval(f.inputs[i])))
      throw ShapeError(fmt("custom call: operand ", i, " is ", dtype_name(in[i].dtype), shape_str(in[i].shape),
                           ", the traced function expects ", dtype_name(f.aval(f.inputs[i]).dtype),
                           shape_str(f.aval(f.inputs[i]).shape)));
  std::vector<AVal> out;
  for (int v : f.outputs) out.push_back(f.aval(v));
  return out;
}

void sub_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
  const size_t n_f = size_t(a.i("n_args") + a.i("n_fcap"));
  std::vector<Array> args(in.begin(), in.begin() + n_f);
  std::vector<Array> res = run_graph(*a.graph("f"), args);
  for (size_t k = 0; k < out.size(); ++k)
    if (out[k].nbytes()) std::memcpy(out[k].raw(), res[k].raw(), out[k].nbytes());
}

double sub_flops(const std::vector<AVal>&, const std::vector<AVal>&, const Attrs& a) { return a.graph("f")->flops(); }

// The cotangent of each node output, zeros where none flows (-1).
std::vector<int> dense_cts(Graph& g, const Node& n, const std::vector<int>& cts) {
  std::vector<int> r;
  for (size_t k = 0; k < n.out.size(); ++k) r.push_back(cts[k] >= 0 ? cts[k] : ops::zeros_like(g, n.out[k]));
  return r;
}

std::vector<int> slice(const std::vector<int>& v, int64_t b, int64_t e) {
  return std::vector<int>(v.begin() + b, v.begin() + e);
}

std::vector<int> custom_vjp_vjp(Graph& g, const Node& n, const std::vector<int>& cts) {
  const Attrs& a = n.attrs;
  const int64_t na = a.i("n_args"), nf = a.i("n_fcap"), nfw = a.i("n_fwdcap"), nb = a.i("n_bwdcap"), nr = a.i("n_res");
  const int64_t nout = int64_t(n.out.size());
  std::vector<int> fwd_in = slice(n.in, 0, na);
  for (int v : slice(n.in, na + nf, na + nf + nfw)) fwd_in.push_back(v);
  std::vector<int> fo = g.inline_graph(*a.graph("fwd"), fwd_in, n.where);
  std::vector<int> bwd_in = slice(fo, nout, nout + nr);
  for (int c : dense_cts(g, n, cts)) bwd_in.push_back(c);
  for (int v : slice(n.in, na + nf + nfw, na + nf + nfw + nb)) bwd_in.push_back(v);
  std::vector<int> bo = g.inline_graph(*a.graph("bwd"), bwd_in, n.where);
  std::vector<int> r(n.in.size(), -1);
  for (int64_t i = 0; i < na; ++i)
    if (is_float(g.aval(n.in[i]).dtype)) r[i] = bo[i];
  return r;
}

std::vector<int> custom_jvp_vjp(Graph& g, const Node& n, const std::vector<int>& cts) {
  const Attrs& a = n.attrs;
  const int64_t na = a.i("n_args"), nf = a.i("n_fcap"), nj = a.i("n_jcap");
  const std::vector<int64_t> fin = a.ints("float_in"), fout = a.ints("float_out");
  const Graph& J = *a.graph("jvp");
  const int64_t nout = int64_t(n.out.size()), nti = int64_t(fin.size()), nto = int64_t(fout.size());
  std::vector<int> wrt, cto;
  for (int64_t k = 0; k < nti; ++k) wrt.push_back(int(na + k));
  for (int64_t k = 0; k < nto; ++k) cto.push_back(int(nout + k));
  const Graph T = vjp_graph(J, wrt, cto);
  // T: [args..., tangents..., jvp_caps..., cts of the tangent outputs...]
  //    -> [outs..., tangent outs..., cts of the tangents...]
  std::vector<int> in = slice(n.in, 0, na);
  for (int64_t k = 0; k < nti; ++k) in.push_back(ops::zeros_like(g, n.in[fin[k]]));
  for (int v : slice(n.in, na + nf, na + nf + nj)) in.push_back(v);
  for (int64_t k = 0; k < nto; ++k) {
    const int c = cts[fout[k]];
    in.push_back(c >= 0 ? c : ops::zeros_like(g, n.out[fout[k]]));
  }
  std::vector<int> o = g.inline_graph(T, in, n.where);
  std::vector<int> r(n.in.size(), -1);
  for (int64_t k = 0; k < nti; ++k) r[fin[k]] = o[nout + nto + k];
  return r;
}

GraphRef batched(const GraphRef& sub, int64_t size, const std::string& axis_name) {
  std::vector<int> bd(sub->inputs.size(), 0);
  return std::make_shared<const Graph>(batch_graph_materialized(*sub, bd, size, axis_name));
}

// Every input mapped (unmapped ones broadcast), every sub-graph batched with every
// output mapped: cotangents of the batched node then arrive mapped, and the VJP
// rules' sub-graph inputs and outputs line up without bookkeeping.
BatchRule sub_batch(std::vector<std::string> keys) {
  return [keys](Graph& g, const BatchCtx& c, const std::vector<int>& in, const std::vector<int>& bd,
                std::vector<int>& out_bdim) {
    Attrs a = c.n.attrs;
    for (auto& k : keys) a.set(k, batched(a.graph(k), c.size, c.axis_name));
    return batching::reapply(g, c, batching::materialize_all(g, in, bd, c.size), a, out_bdim);
  };
}

static Register reg_custom_vjp("custom_vjp_call", PrimDef{
    .shape = sub_shape, .kernel = sub_kernel, .vjp = custom_vjp_vjp, .flops = sub_flops,
    .batch = sub_batch({"f", "fwd", "bwd"})});

static Register reg_custom_jvp("custom_jvp_call", PrimDef{
    .shape = sub_shape, .kernel = sub_kernel, .vjp = custom_jvp_vjp, .flops = sub_flops,
    .batch = sub_batch({"f", "jvp"})});

}  // namespace
}  // namespace podlet
