// Control flow as nodes that own sub-graphs (jax.lax.scan / while_loop / cond): shape
// rule, kernel, VJP, batching rule and FLOP count of each, side by side.
//
//   scan(consts..., init..., xs...; body, num_consts, num_carry, length, reverse)
//        body: (consts, carry, x_t) -> (carry', y_t); outputs: final carry, stacked ys
//   while_loop(cond_consts..., body_consts..., init...; cond, body, num_cond_consts, num_body_consts)
//        cond: (cond_consts, carry) -> bool[]; body: (body_consts, carry) -> carry'
//   cond(index, operands...; branches)   branch i: (operands) -> outs; index clamped
//
// Bodies are traced once (Python) and run by the kernels through run_graph, with their
// elementwise chains fused once per body (the same pass jit uses) and intermediates
// placed by the memory plan. Reverse mode: scan saves per-iteration residuals (the
// forward scan stacks them, and replaces the primal scan so the forward pass runs once)
// and runs the transposed body in the other direction; cond differentiates the branch
// taken (each VJP branch recomputes its forward part); while_loop has no reverse mode,
// as in JAX. vmap batches the bodies (carries that become batched are found by a
// fixpoint); a batched predicate runs every branch and selects (cond) or loops until
// every element is done (while_loop), as JAX does.
#include "podlet/prims/common.h"
#include "podlet/ir/batch_ops.h"
#include "podlet/ir/subgraph.h"
#include "podlet/ir/scan_hoist.h"
#include "podlet/ir/partial_eval.h"
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace podlet {
namespace {
using Ids = std::vector<int>;
namespace bt = batching;

// ---- running sub-graphs ------------------------------------------------------------
std::vector<AVal> input_avals(const Graph& g) {
  std::vector<AVal> r;
  for (int v : g.inputs) r.push_back(g.aval(v));
  return r;
}
std::vector<AVal> output_avals(const Graph& g) {
  std::vector<AVal> r;
  for (int v : g.outputs) r.push_back(g.aval(v));
  return r;
}
std::string aval_str(const AVal& a) { return std::string(dtype_name(a.dtype)) + shape_str(a.shape); }

void check_avals(const std::vector<AVal>& got, size_t off, const std::vector<AVal>& want, size_t woff, size_t n,
                 const char* what) {
  for (size_t k = 0; k < n; ++k)
    if (!(got.at(off + k) == want.at(woff + k)))
      throw ShapeError(fmt(what, " ", k, " is ", aval_str(got[off + k]), ", the body expects ", aval_str(want[woff + k])));
}

// Row i of a [length, ...] array, as a view.
Array row_view(const Array& a, int64_t i) {
  Shape s(a.shape().begin() + 1, a.shape().end());
  const size_t rb = size_t(numel(s)) * itemsize(a.dtype());
  return Array(a.dtype(), s, static_cast<char*>(a.raw()) + rb * size_t(i), a.storage());
}
void copy_into(Array& dst, const Array& src) {
  if (src.nbytes()) std::memcpy(dst.raw(), src.raw(), src.nbytes());
}

double graph_flops(const GraphRef& g) { return g->flops(); }

// ---- sub-graph surgery for the VJP and batching rules ----------------------------------
// A new graph with inputs `in_avals` whose outputs are built by `build` (given the input ids).
template <class F>
GraphRef make_graph(const std::vector<AVal>& in_avals, F&& build) {
  auto g = std::make_shared<Graph>();
  Ids in;
  for (auto& a : in_avals) in.push_back(g->add_input(a));
  g->outputs = build(*g, in);
  g->dce();
  return g;
}

// Batched body whose outputs carry the mapped axis exactly where `want` says (0 / -1).
// Returns nullptr when an output is batched where `want` says it is not.
GraphRef batch_body(const Graph& body, const std::vector<int>& in_bd, const std::vector<int>& want, int64_t size,
                    const std::string& axis, std::vector<int>* got = nullptr) {
  std::vector<int> ob;
  auto G = std::make_shared<Graph>(batch_graph(body, in_bd, size, axis, ob));
  if (got) *got = ob;
  for (size_t k = 0; k < ob.size(); ++k) {
    if (ob[k] >= 0 && want[k] < 0) return nullptr;
    if (want[k] >= 0) G->outputs[k] = bt::materialize(*G, G->outputs[k], ob[k], size);
  }
  return G;
}

int zeros_of(Graph& g, const AVal& a) {
  const int z = g.add_const(full(a.dtype, {}, 0.0));
  return a.shape.empty() ? z : ops::broadcast_in_dim(g, z, a.shape, {});
}

// ---- scan ------------------------------------------------------------------------------
struct ScanDims { int64_t nc, nh, nx, ny, length; bool reverse; };
ScanDims scan_dims(const Attrs& a, size_t n_in) {
  const Graph& b = *a.graph("body");
  ScanDims d{a.i("num_consts"), a.i("num_carry"), 0, 0, a.i("length"), a.i("reverse", 0) != 0};
  if (d.nc < 0 || d.nh < 0 || size_t(d.nc + d.nh) > n_in)
    throw ValueError(fmt("scan: num_consts ", d.nc, " + num_carry ", d.nh, " exceed the ", n_in, " operands"));
  d.nx = int64_t(n_in) - d.nc - d.nh;
  d.ny = int64_t(b.outputs.size()) - d.nh;
  if (int64_t(b.inputs.size()) != d.nc + d.nh + d.nx || d.ny < 0)
    throw ValueError(fmt("scan: the body takes ", b.inputs.size(), " inputs and gives ", b.outputs.size(),
                         " outputs; expected ", d.nc + d.nh + d.nx, " inputs and at least ", d.nh, " outputs"));
  if (d.length < 0) throw ValueError(fmt("scan: length must be >= 0, got ", d.length));
  return d;
}

std::vector<AVal> scan_shape(const std::vector<AVal>& in, const Attrs& a) {
  const ScanDims d = scan_dims(a, in.size());
  const Graph& b = *a.graph("body");
  const auto bi = input_avals(b), bo = output_avals(b);
  check_avals(in, 0, bi, 0, size_t(d.nc + d.nh), "scan operand");
  for (int64_t k = 0; k < d.nx; ++k) {
    const AVal& x = in[d.nc + d.nh + k];
    if (x.shape.empty() || x.shape[0] != d.length)
      throw ShapeError(fmt("scan: xs leaf ", k, " has shape ", shape_str(x.shape), "; expected a leading axis of length ", d.length));
    AVal s{x.dtype, Shape(x.shape.begin() + 1, x.shape.end())};
    if (!(s == bi[d.nc + d.nh + k]))
      throw ShapeError(fmt("scan: a slice of xs leaf ", k, " is ", aval_str(s), ", the body expects ", aval_str(bi[d.nc + d.nh + k])));
  }
  for (int64_t k = 0; k < d.nh; ++k)
    if (!(bo[k] == bi[d.nc + k]))
      throw DTypeError(fmt("scan body function carry input and carry output must have equal types: carry ", k,
                           " enters as ", aval_str(bi[d.nc + k]), " and leaves as ", aval_str(bo[k])));
  std::vector<AVal> out(bo.begin(), bo.begin() + d.nh);
  for (int64_t k = 0; k < d.ny; ++k) out.push_back(AVal{bo[d.nh + k].dtype, bt::with_batch(bo[d.nh + k].shape, d.length)});
  return out;
}

void scan_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
  const ScanDims d = scan_dims(a, in.size());
  const ScanPlan plan = scan_plan(a.graph("body"), d.nc, d.nh, d.length);
  std::vector<Array> args(in.begin(), in.begin() + d.nc + d.nh);
  std::vector<Array> xs(in.begin() + d.nc + d.nh, in.end());
  if (plan.pre) {  // the body's work that reads only constants and x_t, for every t at once
    std::vector<Array> pa(in.begin(), in.begin() + d.nc);
    pa.insert(pa.end(), xs.begin(), xs.end());
    std::vector<Array> h = run_graph(*plan.pre, pa);
    xs.insert(xs.end(), h.begin(), h.end());
  }
  const size_t nx = xs.size();
  args.resize(size_t(d.nc + d.nh) + nx);
  for (int64_t t = 0; t < d.length; ++t) {
    const int64_t i = d.reverse ? d.length - 1 - t : t;
    for (size_t k = 0; k < nx; ++k) args[d.nc + d.nh + k] = row_view(xs[k], i);
    std::vector<Array> r = run_graph(*plan.body, args);
    for (int64_t k = 0; k < d.nh; ++k) args[d.nc + k] = std::move(r[k]);
    for (int64_t k = 0; k < d.ny; ++k) {
      Array dst = row_view(out[d.nh + k], i);
      copy_into(dst, r[d.nh + k]);
    }
  }
  for (int64_t k = 0; k < d.nh; ++k) copy_into(out[k], args[d.nc + k]);
}

// Reverse mode: the forward scan also stacks each iteration's residuals (and takes the
// primal scan's place); a scan in the other direction runs the body's backward graph,
// carrying the carries' cotangents and the sum of the constants' cotangents.
Ids scan_vjp(Graph& g, const Node& n, const Ids& ct) {
  const ScanDims d = scan_dims(n.attrs, n.in.size());
  const Graph& body = *n.attrs.graph("body");
  const auto bi = input_avals(body), bo = output_avals(body);
  Ids wrt, cto;
  for (size_t k = 0; k < bi.size(); ++k) if (is_float(bi[k].dtype)) wrt.push_back(int(k));
  for (size_t k = 0; k < bo.size(); ++k) if (is_float(bo[k].dtype)) cto.push_back(int(k));
  SplitVjp S = split_vjp(body, wrt, cto, [](const Node&) { return true; });
  const int R = S.num_residuals;
  Attrs fa = n.attrs;
  fa.set("body", GraphRef(std::make_shared<const Graph>(std::move(S.fwd))));
  fa.set("forward_of", int64_t(n.out[0]));
  const Ids F = g.add("scan", n.in, fa, n.where);  // carry, ys, stacked residuals
  Ids res(F.begin() + d.nh + d.ny, F.end());
  // Float positions among consts / carries / xs.
  Ids fc, fh, fx;
  for (int k : wrt) {
    if (k < d.nc) fc.push_back(k);
    else if (k < d.nc + d.nh) fh.push_back(k - int(d.nc));
    else fx.push_back(k - int(d.nc + d.nh));
  }
  Ids fho, fyo;  // float carry outputs / ys among outputs
  for (int k : cto) (k < d.nh ? fho : fyo).push_back(k < d.nh ? k : k - int(d.nh));
  // Backward body: carries (ct of float carries, sum of float consts' cts), xs (residuals, cts of float ys).
  std::vector<AVal> bin;
  for (int k : fh) bin.push_back(bi[d.nc + k]);
  for (int k : fc) bin.push_back(bi[k]);
  for (int k = 0; k < R; ++k) bin.push_back(S.bwd.aval(S.bwd.inputs[k]));
  for (int k : fyo) bin.push_back(bo[d.nh + k]);
  const Graph& B = S.bwd;
  struct Hoist { int kind = 0; Attrs attrs; };  // kind 1: dot_general, 2: reduce_sum
  std::vector<Hoist> hoist(fc.size());
  GraphRef bbody = make_graph(bin, [&](Graph& h, const Ids& in) {
    const size_t nfh = fh.size(), nfc = fc.size();
    Ids args(in.begin() + nfh + nfc, in.begin() + nfh + nfc + R);  // residuals
    // cotangents in cto order: carry outputs, then ys. A carry output's ct is the carry ct.
    for (int k : fho) {
      auto it = std::find(fh.begin(), fh.end(), k);
      args.push_back(it == fh.end() ? zeros_of(h, bo[k]) : in[it - fh.begin()]);
    }
    for (size_t j = 0; j < fyo.size(); ++j) args.push_back(in[nfh + nfc + R + j]);
    Ids cts = h.inline_graph(B, args);  // wrt order: consts, carries, xs
    Ids outs, extra;
    for (size_t j = 0; j < nfh; ++j) outs.push_back(cts[fc.size() + j]);
    for (size_t j = 0; j < nfc; ++j) {
      // A constant's cotangent that is one dot_general (a weight gradient x_t^T dz_t) or
      // reduce_sum (a bias gradient) of per-iteration values is not accumulated in the
      // loop: its operands are stacked and contracted over the iterations too, after it
      // (one large GEMM instead of one small GEMM and one add per iteration).
      const int v = cts[j], p = v < int(h.producer.size()) ? h.producer[v] : -1;
      const Node* nd = p >= 0 ? &h.nodes[p] : nullptr;
      const bool dot = nd && nd->prim->name == "dot_general" && nd->attrs.ints("lhs_batch", {}).empty();
      const bool sum = nd && nd->prim->name == "reduce_sum";
      if (d.length > 1 && (dot || sum) && h.aval(v).dtype == bi[fc[j]].dtype) {
        hoist[j] = {dot ? 1 : 2, nd->attrs};
        for (int u : nd->in) extra.push_back(u);
        outs.push_back(in[nfh + j]);  // the (zero) accumulator passes through unchanged
      } else {
        outs.push_back(ops::add(h, in[nfh + j], cts[j]));
      }
    }
    for (size_t j = 0; j < fx.size(); ++j) outs.push_back(cts[fc.size() + nfh + j]);
    outs.insert(outs.end(), extra.begin(), extra.end());
    return outs;
  });
  Ids bargs;
  for (int k : fh) bargs.push_back(ct[k] >= 0 ? ct[k] : zeros_of(g, bi[d.nc + k]));
  for (int k : fc) bargs.push_back(zeros_of(g, bi[k]));
  for (int r : res) bargs.push_back(r);
  for (int k : fyo) bargs.push_back(ct[d.nh + k] >= 0 ? ct[d.nh + k] : ops::zeros_like(g, n.out[d.nh + k]));
  Attrs ba{{"body", bbody}, {"num_consts", int64_t(0)}, {"num_carry", int64_t(fh.size() + fc.size())},
           {"length", d.length}, {"reverse", int64_t(d.reverse ? 0 : 1)}};
  const Ids bo2 = g.add("scan", bargs, ba, n.where);
  Ids r(n.in.size(), -1);
  for (size_t j = 0; j < fh.size(); ++j) r[d.nc + fh[j]] = bo2[j];
  size_t e = fh.size() + fc.size() + fx.size();  // first stacked operand of a hoisted contraction
  auto shifted = [](std::vector<int64_t> v) { for (auto& x : v) x += 1; v.insert(v.begin(), 0); return v; };
  for (size_t j = 0; j < fc.size(); ++j) {
    if (hoist[j].kind == 1) {
      Attrs a = hoist[j].attrs;
      a.set("lhs_contracting", shifted(a.ints("lhs_contracting", {})));
      a.set("rhs_contracting", shifted(a.ints("rhs_contracting", {})));
      r[fc[j]] = g.add1("dot_general", {bo2[e], bo2[e + 1]}, a);
      e += 2;
    } else if (hoist[j].kind == 2) {
      const int x = bo2[e++];
      const auto axes = normalize_axes(hoist[j].attrs.ints("axes"), int(g.aval(x).shape.size()) - 1, "axis");
      r[fc[j]] = ops::reduce_sum(g, x, shifted(std::vector<int64_t>(axes.begin(), axes.end())));
    } else {
      r[fc[j]] = bo2[fh.size() + j];
    }
  }
  for (size_t j = 0; j < fx.size(); ++j) r[d.nc + d.nh + fx[j]] = bo2[fh.size() + fc.size() + j];
  return r;
}

// Which of g's inputs the outputs listed in `outs` (indices into g.outputs) read.
std::vector<char> inputs_read(const Graph& g, const std::vector<int>& outs) {
  std::vector<char> live(g.num_values(), 0);
  for (int k : outs) live[g.outputs[k]] = 1;
  for (int i = int(g.nodes.size()) - 1; i >= 0; --i) {
    bool any = false;
    for (int v : g.nodes[i].out) any |= bool(live[v]);
    if (any) for (int v : g.nodes[i].in) live[v] = 1;
  }
  std::vector<char> r;
  for (int v : g.inputs) r.push_back(live[v]);
  return r;
}

// Dead outputs of a scan (Graph::dce): an unused ys output goes with the body work only
// it needs (e.g. the cotangent of xs nobody differentiates); a carry goes when its final
// value is unused and no kept output reads it; then constants and xs no kept output
// reads stop being operands.
void scan_prune(Node& n, const std::vector<char>& out_live) {
  const ScanDims d = scan_dims(n.attrs, n.in.size());
  const Graph& b = *n.attrs.graph("body");
  std::vector<char> keep(out_live.begin(), out_live.end());  // per body output
  std::vector<char> reads;
  for (;;) {
    std::vector<int> kept;
    for (size_t k = 0; k < keep.size(); ++k) if (keep[k]) kept.push_back(int(k));
    reads = inputs_read(b, kept);
    bool changed = false;
    for (int64_t k = 0; k < d.nh; ++k)
      if (reads[d.nc + k] && !keep[k]) { keep[k] = 1; changed = true; }
    if (!changed) break;
  }
  std::vector<char> use_in(b.inputs.size(), 0);
  for (int64_t k = 0; k < d.nc; ++k) use_in[k] = reads[k];
  for (int64_t k = 0; k < d.nh; ++k) use_in[d.nc + k] = keep[k];
  for (int64_t k = 0; k < d.nx; ++k) use_in[d.nc + d.nh + k] = reads[d.nc + d.nh + k];
  if (std::find(keep.begin(), keep.end(), 0) == keep.end() && std::find(use_in.begin(), use_in.end(), 0) == use_in.end())
    return;
  auto nb = std::make_shared<Graph>(b);
  nb->inputs.clear();
  nb->outputs.clear();
  Ids in, out;
  for (size_t k = 0; k < b.inputs.size(); ++k)
    if (use_in[k]) { nb->inputs.push_back(b.inputs[k]); in.push_back(n.in[k]); }
  for (size_t k = 0; k < b.outputs.size(); ++k)
    if (keep[k]) { nb->outputs.push_back(b.outputs[k]); out.push_back(n.out[k]); }
  nb->dce();
  int64_t nc = 0, nh = 0;
  for (int64_t k = 0; k < d.nc; ++k) nc += use_in[k];
  for (int64_t k = 0; k < d.nh; ++k) nh += keep[k];
  n.attrs.set("body", GraphRef(std::move(nb)));
  n.attrs.set("num_consts", nc);
  n.attrs.set("num_carry", nh);
  n.in = std::move(in);
  n.out = std::move(out);
}

// Carries that become batched: start from the inits' and iterate until the body maps
// no unbatched carry to a batched one.
std::vector<int> carry_fixpoint(const Graph& body, std::vector<int> in_bd, size_t off, size_t nh, int64_t size,
                                const std::string& axis, size_t out_off = 0) {
  for (int iter = 0; iter <= int(nh) + 1; ++iter) {
    std::vector<int> ob;
    batch_graph(body, in_bd, size, axis, ob);
    bool changed = false;
    for (size_t k = 0; k < nh; ++k)
      if (ob[out_off + k] >= 0 && in_bd[off + k] < 0) { in_bd[off + k] = 0; changed = true; }
    if (!changed) break;
  }
  return in_bd;
}

Ids scan_batch(Graph& g, const BatchCtx& c, const Ids& in, const Ids& bd, Ids& ob) {
  const ScanDims d = scan_dims(c.n.attrs, in.size());
  const Graph& body = *c.n.attrs.graph("body");
  std::vector<int> ibd(bd.begin(), bd.end());
  ibd = carry_fixpoint(body, ibd, size_t(d.nc), size_t(d.nh), c.size, c.axis_name);
  std::vector<int> want(body.outputs.size(), 0);
  for (int64_t k = 0; k < d.nh; ++k) want[k] = ibd[d.nc + k];
  GraphRef nb = batch_body(body, ibd, want, c.size, c.axis_name);
  if (!nb) bt::no_rule(c, "failed: the body's carries did not reach a fixpoint");
  Ids args;
  for (int64_t k = 0; k < d.nc + d.nh; ++k) args.push_back(ibd[k] >= 0 ? bt::materialize(g, in[k], bd[k], c.size) : in[k]);
  for (int64_t k = 0; k < d.nx; ++k) {
    int x = in[d.nc + d.nh + k];
    if (ibd[d.nc + d.nh + k] >= 0) {  // [B, L, ...] -> [L, B, ...]
      const int r = int(g.aval(x).shape.size());
      std::vector<int64_t> perm = {1, 0};
      for (int i = 2; i < r; ++i) perm.push_back(i);
      x = ops::transpose(g, x, perm);
    }
    args.push_back(x);
  }
  Attrs a = c.n.attrs;
  a.set("body", nb);
  Ids out = g.add("scan", args, a, c.n.where);
  ob.assign(out.size(), 0);
  for (int64_t k = 0; k < d.nh; ++k) ob[k] = ibd[d.nc + k];
  for (int64_t k = 0; k < d.ny; ++k) {  // [L, B, ...] -> [B, L, ...]
    int& y = out[d.nh + k];
    const int r = int(g.aval(y).shape.size());
    std::vector<int64_t> perm = {1, 0};
    for (int i = 2; i < r; ++i) perm.push_back(i);
    y = ops::transpose(g, y, perm);
  }
  return out;
}

static Register reg_scan("scan", PrimDef{
    .shape = scan_shape,
    .kernel = scan_kernel,
    .vjp = scan_vjp,
    .flops = [](const std::vector<AVal>&, const std::vector<AVal>&, const Attrs& a) {
      return graph_flops(a.graph("body")) * double(a.i("length")); },
    .batch = scan_batch,
    .prune = scan_prune});

// ---- while_loop ------------------------------------------------------------------------
struct WhileDims { int64_t ncc, nbc, nh; };
WhileDims while_dims(const Attrs& a, size_t n_in) {
  WhileDims d{a.i("num_cond_consts"), a.i("num_body_consts"), 0};
  d.nh = int64_t(n_in) - d.ncc - d.nbc;
  if (d.ncc < 0 || d.nbc < 0 || d.nh < 0) throw ValueError("while_loop: bad operand counts");
  return d;
}

std::vector<AVal> while_shape(const std::vector<AVal>& in, const Attrs& a) {
  const WhileDims d = while_dims(a, in.size());
  const Graph& cg = *a.graph("cond");
  const Graph& bg = *a.graph("body");
  const auto ci = input_avals(cg), co = output_avals(cg), bi = input_avals(bg), bo = output_avals(bg);
  if (int64_t(ci.size()) != d.ncc + d.nh || int64_t(bi.size()) != d.nbc + d.nh || int64_t(bo.size()) != d.nh)
    throw ValueError("while_loop: cond/body arity does not match the operands");
  check_avals(in, 0, ci, 0, size_t(d.ncc), "while_loop cond constant");
  check_avals(in, size_t(d.ncc), bi, 0, size_t(d.nbc), "while_loop body constant");
  check_avals(in, size_t(d.ncc + d.nbc), ci, size_t(d.ncc), size_t(d.nh), "while_loop carry");
  check_avals(in, size_t(d.ncc + d.nbc), bi, size_t(d.nbc), size_t(d.nh), "while_loop carry");
  for (int64_t k = 0; k < d.nh; ++k)
    if (!(bo[k] == bi[d.nbc + k]))
      throw DTypeError(fmt("while_loop body function carry input and carry output must have equal types: carry ", k,
                           " enters as ", aval_str(bi[d.nbc + k]), " and leaves as ", aval_str(bo[k])));
  if (co.size() != 1 || co[0].dtype != DType::boolean || !co[0].shape.empty())
    throw DTypeError(fmt("while_loop cond_fun must return a boolean scalar, got ",
                         co.empty() ? std::string("nothing") : aval_str(co[0])));
  return std::vector<AVal>(in.begin() + d.ncc + d.nbc, in.end());
}

void while_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
  const WhileDims d = while_dims(a, in.size());
  const auto cg = executable_subgraph(a.graph("cond"));
  const auto bg = executable_subgraph(a.graph("body"));
  std::vector<Array> cargs(in.begin(), in.begin() + d.ncc), bargs(in.begin() + d.ncc, in.begin() + d.ncc + d.nbc);
  std::vector<Array> carry(in.begin() + d.ncc + d.nbc, in.end());
  for (;;) {
    std::vector<Array> ca = cargs;
    ca.insert(ca.end(), carry.begin(), carry.end());
    const Array p = run_graph(*cg, ca)[0];
    if (!*static_cast<const uint8_t*>(p.raw())) break;
    std::vector<Array> ba = bargs;
    ba.insert(ba.end(), carry.begin(), carry.end());
    carry = run_graph(*bg, ba);
  }
  for (int64_t k = 0; k < d.nh; ++k) copy_into(out[k], carry[k]);
}

Ids while_batch(Graph& g, const BatchCtx& c, const Ids& in, const Ids& bd, Ids& ob) {
  const WhileDims d = while_dims(c.n.attrs, in.size());
  const Graph& cg = *c.n.attrs.graph("cond");
  const Graph& bg = *c.n.attrs.graph("body");
  // Carry bdims: fixpoint through the body.
  std::vector<int> bbd(bd.begin() + d.ncc, bd.end());
  bbd = carry_fixpoint(bg, bbd, size_t(d.nbc), size_t(d.nh), c.size, c.axis_name);
  std::vector<int> cbd(bd.begin(), bd.begin() + d.ncc);
  for (int64_t k = 0; k < d.nh; ++k) cbd.push_back(bbd[d.nbc + k]);
  std::vector<int> pred_bd;
  batch_graph(cg, cbd, c.size, c.axis_name, pred_bd);
  if (pred_bd[0] < 0) {
    std::vector<int> want(bbd.begin() + d.nbc, bbd.end());
    GraphRef nb = batch_body(bg, bbd, want, c.size, c.axis_name);
    GraphRef nc = batch_body(cg, cbd, {-1}, c.size, c.axis_name);
    Ids args(in.begin(), in.begin() + d.ncc + d.nbc);
    for (int64_t k = 0; k < d.nh; ++k) {
      const size_t j = size_t(d.ncc + d.nbc + k);
      args.push_back(bbd[d.nbc + k] >= 0 ? bt::materialize(g, in[j], bd[j], c.size) : in[j]);
    }
    Attrs a = c.n.attrs;
    a.set("cond", nc);
    a.set("body", nb);
    Ids out = g.add("while_loop", args, a, c.n.where);
    ob.assign(want.begin(), want.end());
    return out;
  }
  // Batched predicate: every carry batched; loop while any element continues, and
  // elements that are done keep their carry (select).
  std::vector<int> all_bd(bd.begin(), bd.begin() + d.ncc);
  std::vector<int> ball(bd.begin() + d.ncc, bd.begin() + d.ncc + d.nbc);
  for (int64_t k = 0; k < d.nh; ++k) { all_bd.push_back(0); ball.push_back(0); }
  GraphRef bc = batch_body(cg, all_bd, {0}, c.size, c.axis_name);
  std::vector<int> bwant(size_t(d.nh), 0);
  GraphRef bb = batch_body(bg, ball, bwant, c.size, c.axis_name);
  std::vector<AVal> cin = input_avals(*bc);  // cond consts, carries
  GraphRef any = make_graph(cin, [&](Graph& h, const Ids& x) {
    const int p = h.inline_graph(*bc, x)[0];
    return Ids{h.add1("reduce_max", {p}, {{"axes", std::vector<int64_t>{0}}})};
  });
  std::vector<AVal> bin;
  for (int64_t k = 0; k < d.ncc; ++k) bin.push_back(cin[k]);
  const auto bbi = input_avals(*bb);
  for (auto& v : bbi) bin.push_back(v);  // body consts, carries
  GraphRef step = make_graph(bin, [&](Graph& h, const Ids& x) {
    Ids cx(x.begin(), x.begin() + d.ncc);
    for (int64_t k = 0; k < d.nh; ++k) cx.push_back(x[d.ncc + d.nbc + k]);
    const int p = h.inline_graph(*bc, cx)[0];
    Ids bx(x.begin() + d.ncc, x.end());
    Ids nw = h.inline_graph(*bb, bx);
    Ids outs;
    for (int64_t k = 0; k < d.nh; ++k) {
      const int old = x[d.ncc + d.nbc + k];
      const Shape s = h.aval(old).shape;
      const int pb = ops::broadcast_in_dim(h, p, s, {0});
      outs.push_back(ops::select(h, pb, nw[k], old));
    }
    return outs;
  });
  Ids args(in.begin(), in.begin() + d.ncc);
  for (int64_t k = 0; k < d.ncc; ++k) args.push_back(in[k]);
  for (int64_t k = 0; k < d.nbc; ++k) args.push_back(in[d.ncc + k]);
  for (int64_t k = 0; k < d.nh; ++k) args.push_back(bt::materialize(g, in[d.ncc + d.nbc + k], bd[d.ncc + d.nbc + k], c.size));
  // cond consts (for `any`) then step's consts (cond consts + body consts)
  Attrs a{{"cond", any}, {"body", step}, {"num_cond_consts", d.ncc}, {"num_body_consts", d.ncc + d.nbc}};
  Ids out = g.add("while_loop", args, a, c.n.where);
  ob.assign(out.size(), 0);
  return out;
}

static Register reg_while("while_loop", PrimDef{
    .shape = while_shape,
    .kernel = while_kernel,
    .vjp = [](Graph&, const Node& n, const Ids&) -> Ids {
      throw ValueError(fmt("Reverse-mode differentiation does not work for lax.while_loop or lax.fori_loop with "
                           "dynamic start/stop values. Try using lax.scan, or using fori_loop with static start/stop.",
                           n.where.empty() ? "" : " (" + n.where + ")"));
    },
    .flops = nullptr,
    .batch = while_batch});

// ---- cond ------------------------------------------------------------------------------
std::vector<AVal> cond_shape(const std::vector<AVal>& in, const Attrs& a) {
  const auto& br = a.graphs("branches");
  if (br.empty()) throw ValueError("cond needs at least one branch");
  if (in.empty() || !in[0].shape.empty() || in[0].dtype != DType::i32)
    throw DTypeError(fmt("cond: the branch index must be an int32 scalar, got ", in.empty() ? "nothing" : aval_str(in[0])));
  std::vector<AVal> ops_in(in.begin() + 1, in.end());
  const auto out0 = output_avals(*br[0]);
  for (size_t b = 0; b < br.size(); ++b) {
    const auto bi = input_avals(*br[b]);
    if (bi.size() != ops_in.size()) throw ValueError(fmt("cond: branch ", b, " takes ", bi.size(), " operands, got ", ops_in.size()));
    check_avals(ops_in, 0, bi, 0, bi.size(), "cond operand");
    const auto bo = output_avals(*br[b]);
    bool same = bo.size() == out0.size();
    for (size_t k = 0; same && k < bo.size(); ++k) same = bo[k] == out0[k];
    if (!same) {
      std::string s0, s1;
      for (auto& v : out0) s0 += aval_str(v) + " ";
      for (auto& v : bo) s1 += aval_str(v) + " ";
      throw DTypeError(fmt("branches of cond must return identical types: branch 0 returns ", s0, "and branch ", b,
                           " returns ", s1));
    }
  }
  return out0;
}

int64_t branch_index(const Array& idx, size_t nb) {
  int64_t i = *static_cast<const int32_t*>(idx.raw());
  return std::clamp<int64_t>(i, 0, int64_t(nb) - 1);
}

void cond_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
  const auto& br = a.graphs("branches");
  const auto b = executable_subgraph(br[size_t(branch_index(in[0], br.size()))]);
  std::vector<Array> args(in.begin() + 1, in.end());
  std::vector<Array> r = run_graph(*b, args);
  for (size_t k = 0; k < out.size(); ++k) copy_into(out[k], r[k]);
}

// The VJP of the branch taken: each branch's reverse-mode graph (which recomputes its
// forward part), selected by the same index.
Ids cond_vjp(Graph& g, const Node& n, const Ids& ct) {
  const auto& br = n.attrs.graphs("branches");
  const auto bi = input_avals(*br[0]), bo = output_avals(*br[0]);
  Ids wrt, cto;
  for (size_t k = 0; k < bi.size(); ++k) if (is_float(bi[k].dtype)) wrt.push_back(int(k));
  for (size_t k = 0; k < bo.size(); ++k) if (is_float(bo[k].dtype)) cto.push_back(int(k));
  if (wrt.empty()) return Ids(n.in.size(), -1);
  std::vector<GraphRef> vb;
  for (auto& b : br) {
    Graph V = vjp_graph(*b, wrt, cto);
    V.outputs.erase(V.outputs.begin(), V.outputs.begin() + bo.size());
    V.dce();
    vb.push_back(std::make_shared<const Graph>(std::move(V)));
  }
  Ids args(n.in.begin(), n.in.end());
  for (int k : cto) args.push_back(ct[k] >= 0 ? ct[k] : ops::zeros_like(g, n.out[k]));
  Ids cts = g.add("cond", args, Attrs{{"branches", vb}}, n.where);
  Ids r(n.in.size(), -1);
  for (size_t j = 0; j < wrt.size(); ++j) r[1 + wrt[j]] = cts[j];
  return r;
}

Ids cond_batch(Graph& g, const BatchCtx& c, const Ids& in, const Ids& bd, Ids& ob) {
  const auto& br = c.n.attrs.graphs("branches");
  std::vector<int> obd(bd.begin() + 1, bd.end());
  // Outputs batched if any branch batches them.
  std::vector<int> want(br[0]->outputs.size(), -1);
  for (auto& b : br) {
    std::vector<int> o;
    batch_graph(*b, obd, c.size, c.axis_name, o);
    for (size_t k = 0; k < o.size(); ++k) if (o[k] >= 0) want[k] = 0;
  }
  if (bd[0] < 0) {
    std::vector<GraphRef> nb;
    for (auto& b : br) nb.push_back(batch_body(*b, obd, want, c.size, c.axis_name));
    Attrs a = c.n.attrs;
    a.set("branches", nb);
    ob = want;
    return g.add("cond", in, a, c.n.where);
  }
  // Batched index: every branch runs; the index selects per element (select_n).
  std::fill(want.begin(), want.end(), 0);
  Ids ops_in(in.begin() + 1, in.end());
  std::vector<Ids> outs;
  for (auto& b : br) outs.push_back(g.inline_graph(*batch_body(*b, obd, want, c.size, c.axis_name), ops_in, c.n.where));
  const int idx = in[0];  // int32 [B]
  const int lo = g.add_const(full(DType::i32, {}, 0.0)), hi = g.add_const(full(DType::i32, {}, double(br.size() - 1)));
  const int ci = g.add1("clamp", {lo, idx, hi});
  Ids res = outs[0];
  for (size_t b = 1; b < br.size(); ++b) {
    const int kb = g.add_const(full(DType::i32, {}, double(b)));
    const int is_b = g.add1("eq", {ci, kb});
    for (size_t k = 0; k < res.size(); ++k) {
      const Shape s = g.aval(res[k]).shape;
      res[k] = ops::select(g, ops::broadcast_in_dim(g, is_b, s, {0}), outs[b][k], res[k]);
    }
  }
  ob.assign(res.size(), 0);
  return res;
}

static Register reg_cond("cond", PrimDef{
    .shape = cond_shape,
    .kernel = cond_kernel,
    .vjp = cond_vjp,
    .flops = [](const std::vector<AVal>&, const std::vector<AVal>&, const Attrs& a) {
      double f = 0;
      for (auto& b : a.graphs("branches")) f = std::max(f, b->flops());
      return f; },
    .batch = cond_batch});

}  // namespace
}  // namespace podlet
