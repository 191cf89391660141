// vmap as a graph transformation, like autodiff: walk the per-element graph once and let
// each primitive's batching rule (prim.h BatchRule, registered beside its shape rule,
// kernel and VJP) append the batched computation. Nodes none of whose inputs carry the
// mapped axis are copied unchanged, so work that does not depend on the batch runs once.
// A primitive without a rule is an error naming it: never a silent per-element loop.
#include "podlet/ir/batch_ops.h"

namespace podlet {

namespace batching {

int materialize(Graph& g, int x, int bdim, int64_t size) {
  if (bdim >= 0) return x;
  const Shape s = g.aval(x).shape;
  std::vector<int64_t> dims(s.size());
  for (size_t i = 0; i < s.size(); ++i) dims[i] = int64_t(i) + 1;
  return g.add1("broadcast_in_dim", {x}, {{"shape", with_batch(s, size)}, {"broadcast_dimensions", dims}});
}

std::vector<int> materialize_all(Graph& g, const std::vector<int>& in, const std::vector<int>& bd, int64_t size) {
  std::vector<int> r(in.size());
  for (size_t k = 0; k < in.size(); ++k) r[k] = materialize(g, in[k], bd[k], size);
  return r;
}

std::vector<int64_t> shift_axes(const std::vector<int64_t>& axes, int64_t rank) {
  std::vector<int64_t> r(axes.size());
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i];
    r[i] = a + 1;
  }
  return r;
}

std::vector<int> reapply(Graph& g, const BatchCtx& c, const std::vector<int>& in, const Attrs& attrs,
                         std::vector<int>& out_bdim, int out_batched) {
  auto out = g.add(*c.n.prim, in, attrs, c.n.where);
  out_bdim.assign(out.size(), out_batched);
  return out;
}

std::vector<int> elementwise(Graph& g, const BatchCtx& c, const std::vector<int>& in, const std::vector<int>& bd,
                             std::vector<int>& out_bdim) {
  size_t rank = 0;
  for (auto& a : c.in_avals) rank = std::max(rank, a.shape.size());
  std::vector<int> x(in);
  for (size_t k = 0; k < in.size(); ++k) {
    if (bd[k] < 0) continue;
    const Shape& s = c.in_avals[k].shape;
    if (s.size() == rank) continue;
    Shape t(rank - s.size(), 1);
    t.insert(t.end(), s.begin(), s.end());
    x[k] = ops::reshape(g, in[k], with_batch(t, c.size));
  }
  return reapply(g, c, x, c.n.attrs, out_bdim);
}

std::vector<int> elementwise_same_shape(Graph& g, const BatchCtx& c, const std::vector<int>& in,
                                        const std::vector<int>& bd, std::vector<int>& out_bdim) {
  return reapply(g, c, materialize_all(g, in, bd, c.size), c.n.attrs, out_bdim);
}

BatchRule axes_attr(std::vector<std::string> keys) {
  return [keys](Graph& g, const BatchCtx& c, const std::vector<int>& in, const std::vector<int>& bd,
                std::vector<int>& out_bdim) {
    Attrs a = c.n.attrs;
    const int64_t rank = int64_t(c.in_avals.at(0).shape.size());
    for (auto& k : keys) {
      if (!a.has(k)) continue;
      const bool scalar = std::holds_alternative<int64_t>(a.items().at(k));
      auto ax = shift_axes(a.ints(k), rank);
      if (scalar) a.set(k, ax.at(0)); else a.set(k, ax);
    }
    std::vector<int> x(in);
    x[0] = materialize(g, in[0], bd[0], c.size);
    return reapply(g, c, x, a, out_bdim);
  };
}

namespace {
int64_t vmap_size(const Attrs& a) { return a.i("vmap_size", -1); }
Attrs without_vmap_size(const Attrs& a) {
  Attrs r;
  for (auto& [k, v] : a.items()) if (k != "vmap_size") r.set(k, v);
  return r;
}
}  // namespace

PrimDef looped(PrimDef d) {
  ShapeRule shape = d.shape;
  Kernel kernel = d.kernel;
  FlopCount flops = d.flops;
  d.shape = [shape](const std::vector<AVal>& in, const Attrs& a) -> std::vector<AVal> {
    const int64_t B = vmap_size(a);
    if (B < 0) return shape(in, a);
    std::vector<AVal> el(in);
    for (size_t k = 0; k < in.size(); ++k) {
      if (in[k].shape.empty() || in[k].shape[0] != B)
        throw ShapeError(fmt("vmap_size ", B, ": input ", k, " of shape ", shape_str(in[k].shape),
                             " does not carry the ", B, " mapped elements in front"));
      el[k].shape.erase(el[k].shape.begin());
    }
    auto out = shape(el, without_vmap_size(a));
    for (auto& o : out) o.shape = with_batch(o.shape, B);
    return out;
  };
  d.kernel = [kernel](const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
    const int64_t B = vmap_size(a);
    if (B < 0) return kernel(in, out, a);
    const Attrs ea = without_vmap_size(a);
    auto slice = [](const Array& x, int64_t b, int64_t B) {
      Shape s(x.shape().begin() + 1, x.shape().end());
      const size_t bytes = x.nbytes() / size_t(B);
      return Array(x.dtype(), s, static_cast<char*>(x.raw()) + size_t(b) * bytes, x.storage());
    };
    std::vector<Array> ei(in.size()), eo(out.size());
    for (int64_t b = 0; b < B; ++b) {
      for (size_t k = 0; k < in.size(); ++k) ei[k] = slice(in[k], b, B);
      for (size_t k = 0; k < out.size(); ++k) eo[k] = slice(out[k], b, B);
      kernel(ei, eo, ea);
    }
  };
  if (flops)
    d.flops = [flops](const std::vector<AVal>& in, const std::vector<AVal>& out, const Attrs& a) -> double {
      const int64_t B = vmap_size(a);
      if (B < 0) return flops(in, out, a);
      std::vector<AVal> ei(in), eo(out);
      for (auto& x : ei) x.shape.erase(x.shape.begin());
      for (auto& x : eo) x.shape.erase(x.shape.begin());
      return double(B) * flops(ei, eo, without_vmap_size(a));
    };
  if (!d.batch) d.batch = loop_rule;
  return d;
}

std::vector<int> loop_rule(Graph& g, const BatchCtx& c, const std::vector<int>& in, const std::vector<int>& bd,
                           std::vector<int>& out_bdim) {
  if (c.n.attrs.i("vmap_size", -1) >= 0) {
    // Already a batched loop (nested vmap): fold the new axis into the old one.
    const int64_t B0 = c.n.attrs.i("vmap_size");
    std::vector<int> x = materialize_all(g, in, bd, c.size);
    for (size_t k = 0; k < x.size(); ++k) {
      Shape s = g.aval(x[k]).shape;
      Shape t(s.begin() + 1, s.end());
      t[0] *= c.size;
      x[k] = ops::reshape(g, x[k], t);
    }
    Attrs a = c.n.attrs;
    a.set("vmap_size", B0 * c.size);
    auto out = g.add(*c.n.prim, x, a, c.n.where);
    for (auto& o : out) {
      Shape s = g.aval(o).shape;
      s[0] = B0;
      o = ops::reshape(g, o, with_batch(s, c.size));
    }
    out_bdim.assign(out.size(), 0);
    return out;
  }
  Attrs a = c.n.attrs;
  a.set("vmap_size", c.size);
  return reapply(g, c, materialize_all(g, in, bd, c.size), a, out_bdim);
}

[[noreturn]] void no_rule(const BatchCtx& c, const std::string& why) {
  throw ValueError(fmt("vmap of '", c.n.prim->name, "' ", why, c.n.where.empty() ? "" : " (" + c.n.where + ")"));
}

}  // namespace batching

Graph batch_graph(const Graph& g, const std::vector<int>& in_bdim, int64_t size, const std::string& axis_name,
                  std::vector<int>& out_bdim) {
  using namespace batching;
  if (in_bdim.size() != g.inputs.size())
    throw ValueError(fmt("vmap: ", in_bdim.size(), " batch dims for a graph of ", g.inputs.size(), " inputs"));
  if (size < 0) throw ValueError(fmt("vmap: axis size must be >= 0, got ", size));
  Graph G;
  const int nv = g.num_values();
  std::vector<int> m(nv, -1), bd(nv, -1);
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const int v = g.inputs[i];
    AVal a = g.avals[v];
    if (in_bdim[i] >= 0) a.shape = with_batch(a.shape, size);
    m[v] = G.add_input(a);
    bd[v] = in_bdim[i] >= 0 ? 0 : -1;
  }
  for (auto& [id, arr] : g.consts) m[id] = G.add_const(arr);
  for (const Node& n : g.nodes) {
    std::vector<int> in, b;
    for (int v : n.in) { in.push_back(m[v]); b.push_back(bd[v]); }
    std::vector<int> out, ob;
    if (!any_batched(b) && !n.prim->batch_always) {
      out = G.add(*n.prim, in, n.attrs, n.where);
      ob.assign(out.size(), -1);
    } else {
      BatchCtx c{n, {}, {}, size, axis_name};
      for (int v : n.in) c.in_avals.push_back(g.avals[v]);
      for (int v : n.out) c.out_avals.push_back(g.avals[v]);
      if (!n.prim->batch)
        no_rule(c, n.prim->no_batch_reason ? std::string("is not supported: ") + n.prim->no_batch_reason
                                           : std::string("has no batching rule"));
      out = n.prim->batch(G, c, in, b, ob);
      if (out.size() != n.out.size() || ob.size() != out.size())
        throw Error(fmt("batching rule of '", n.prim->name, "' returned ", out.size(), " outputs, expected ", n.out.size()));
      for (size_t k = 0; k < out.size(); ++k) {
        AVal want = g.avals[n.out[k]];
        if (ob[k] >= 0) want.shape = with_batch(want.shape, size);
        if (!(G.aval(out[k]) == want))
          throw Error(fmt("batching rule of '", n.prim->name, "' gave output ", k, " as ",
                          dtype_name(G.aval(out[k]).dtype), shape_str(G.aval(out[k]).shape), ", expected ",
                          dtype_name(want.dtype), shape_str(want.shape)));
      }
    }
    for (size_t k = 0; k < out.size(); ++k) { m[n.out[k]] = out[k]; bd[n.out[k]] = ob[k]; }
  }
  out_bdim.clear();
  for (int v : g.outputs) { G.outputs.push_back(m[v]); out_bdim.push_back(bd[v]); }
  return G;
}

Graph batch_graph_materialized(const Graph& g, const std::vector<int>& in_bdim, int64_t size,
                               const std::string& axis_name) {
  std::vector<int> ob;
  Graph G = batch_graph(g, in_bdim, size, axis_name, ob);
  for (size_t k = 0; k < G.outputs.size(); ++k) G.outputs[k] = batching::materialize(G, G.outputs[k], ob[k], size);
  return G;
}

}  // namespace podlet
