// Data-parallel partitioning of a traced graph: jit(f, in_shardings=...) on a mesh whose
// batch axis is split over n podlet devices runs, per device, the graph this pass
// builds, on the pmap executor (exec/pmap.cc). It is GSPMD restricted to one mesh axis:
// every value is either replicated (the whole array on every replica) or split evenly
// along one dimension (replica r holds the r-th of n equal blocks). Each node's rule
// looks at its inputs' layouts and either runs the node on the local blocks (adjusting
// the attrs that carry shapes), adds the collective that makes the local results the
// global one (a psum after a reduction or a contraction over the split dimension), or,
// for anything it does not understand, gathers the split inputs and runs the node on the
// whole arrays: slower, never wrong. Which nodes fell back is reported, so a user can
// see where the work stopped being split.
//
// The values equal the global computation's up to the order of floating-point sums
// (partial sums per replica, then a psum in replica order): deterministic for a given
// n, whatever the thread count, like pmap.
#include <algorithm>
#include <map>
#include <set>
#include "podlet/ir/graph.h"
#include "podlet/ir/ops.h"
#include "podlet/prims/common.h"

namespace podlet {
namespace {

const std::set<std::string>& elementwise_prims() {
  static const std::set<std::string> s = {
      "abs", "add", "and", "atan2", "ceil", "clamp", "convert_element_type", "copy", "cos", "div", "eq",
      "erf", "erf_inv", "exp", "expm1", "floor", "ge", "gt", "integer_pow", "is_finite", "le", "log",
      "log1p", "logistic", "lt", "max", "min", "mul", "ne", "neg", "not", "or", "pow", "rem", "round",
      "rsqrt", "select", "shift_left", "shift_right_arithmetic", "shift_right_logical", "sign", "sin",
      "sqrt", "stop_gradient", "sub", "tanh", "xor", "checkpoint_name"};
  return s;
}

// Primitives over whole windows of NHWC-like operands: local when the split dim has a
// trivial window (size 1, stride 1, no padding).
const std::set<std::string>& window_prims() {
  static const std::set<std::string> s = {"reduce_window", "reduce_window_sum_transpose", "select_and_scatter_add",
                                          "reduce_window_argmax", "scatter_add_at_argmax", "select_and_gather_add"};
  return s;
}

struct Partitioner {
  const Graph& g;
  Graph G;
  int64_t n;
  std::string axis;
  std::vector<int> m, sd;  // value id in g -> id in G; split dim (-1: replicated)
  std::map<std::string, int> fallbacks;

  Attrs coll_attrs() const { return Attrs{{"axis_name", axis}, {"axis_size", n}}; }

  int psum(int v, const char* prim = "psum") { return G.add1(prim, {v}, coll_attrs()); }

  int gather(int v, int64_t d) {
    Attrs a = coll_attrs();
    a.set("axis", d);
    a.set("tiled", int64_t(1));
    return G.add1("all_gather", {v}, a);
  }

  std::map<std::pair<int, int64_t>, int> local_of;  // (replicated id in G, dim) -> its local block

  // The local block (along d) of a replicated value. A replicated value made by
  // broadcasting or by elementwise ops on such values (the VJP's zeros, a broadcast mean,
  // a mask) is rebuilt at the local shape from its sources, so no device materialises
  // the global array just to slice it; anything else is sliced.
  int localize(int v, int64_t d) {
    auto key = std::make_pair(v, d);
    auto it = local_of.find(key);
    if (it != local_of.end()) return it->second;
    const int r = localize_uncached(v, d);
    local_of[key] = r;
    return r;
  }

  int localize_uncached(int v, int64_t d) {
    const int pi = v < int(G.producer.size()) ? G.producer[v] : -1;
    if (pi >= 0) {
      const Node nd = G.nodes[pi];  // a copy: adding nodes may move the list
      const std::string& p = nd.prim->name;
      const Shape os = G.aval(v).shape;
      if (p == "broadcast_in_dim" && nd.out.size() == 1) {
        auto dims = nd.attrs.ints("broadcast_dimensions");
        const Shape is = G.aval(nd.in[0]).shape;
        int x = nd.in[0];
        for (size_t k = 0; k < dims.size(); ++k)
          if (dims[k] == d && is[k] != 1) x = localize(x, int64_t(k));
        Attrs a = nd.attrs;
        Shape s = os;
        s[d] /= n;
        a.set("shape", s);
        return G.add(*nd.prim, {x}, a, nd.where)[0];
      }
      if (elementwise_prims().count(p) && nd.out.size() == 1) {
        std::vector<int> in;
        for (int x : nd.in) {
          const Shape& xs = G.aval(x).shape;
          const int64_t j = d - int64_t(os.size() - xs.size());
          in.push_back(j >= 0 && xs[j] != 1 ? localize(x, j) : x);
        }
        return G.add(*nd.prim, in, nd.attrs, nd.where)[0];
      }
    }
    const Shape s = G.aval(v).shape;
    Shape sz = s;
    sz[d] = s[d] / n;
    Array z = full(DType::i32, {}, 0.0), c = full(DType::i32, {}, double(sz[d]));
    const int zero = G.add_const(z);
    const int idx = G.add1("mul", {G.add1("axis_index", {}, coll_attrs()), G.add_const(c)});
    std::vector<int> in = {v};
    for (size_t k = 0; k < s.size(); ++k) in.push_back(int64_t(k) == d ? idx : zero);
    return G.add1("dynamic_slice", in, {{"slice_sizes", sz}});
  }

  const Shape& gshape(int v) const { return g.aval(v).shape; }

  std::vector<int> run(const Node& nd, const std::vector<int>& in, const Attrs& a) {
    return G.add(*nd.prim, in, a, nd.where);
  }

  // Gathers every split input and runs the node on whole arrays.
  std::vector<int> fallback(const Node& nd, std::vector<int> in, std::vector<int>& out_sd) {
    for (size_t k = 0; k < nd.in.size(); ++k)
      if (sd[nd.in[k]] >= 0) in[k] = gather(in[k], sd[nd.in[k]]);
    fallbacks[nd.prim->name]++;
    out_sd.assign(nd.out.size(), -1);
    return run(nd, in, nd.attrs);
  }

  // NumPy-broadcasting elementwise: every split input's dim must land on one output dim
  // e; the node's outputs, or {} when they cannot stay split.
  std::vector<int> elementwise(const Node& nd, std::vector<int> in, std::vector<int>& out_sd) {
    const Shape& os = gshape(nd.out[0]);
    const int64_t R = int64_t(os.size());
    for (size_t k = 1; k < nd.out.size(); ++k)
      if (gshape(nd.out[k]).size() != os.size()) return {};
    int64_t e = -1;
    for (size_t k = 0; k < nd.in.size(); ++k) {
      const int d = sd[nd.in[k]];
      if (d < 0) continue;
      const int64_t ek = d + R - int64_t(gshape(nd.in[k]).size());
      if (e >= 0 && ek != e) return {};
      e = ek;
    }
    if (e < 0 || os[e] % n != 0) return {};
    for (size_t k = 0; k < nd.in.size(); ++k) {
      if (sd[nd.in[k]] >= 0) continue;
      const Shape& s = gshape(nd.in[k]);
      const int64_t j = e - (R - int64_t(s.size()));
      if (j >= 0 && s[j] != 1) in[k] = localize(in[k], j);
    }
    out_sd.assign(nd.out.size(), int(e));
    return run(nd, in, nd.attrs);
  }

  std::vector<int> node(const Node& nd) {
    std::vector<int> in, out, osd;
    bool any = false;
    for (int v : nd.in) { in.push_back(m[v]); any = any || sd[v] >= 0; }
    const std::string& p = nd.prim->name;
    if (!any) {
      out = run(nd, in, nd.attrs);
      osd.assign(out.size(), -1);
      return finish(nd, out, osd);
    }
    auto split = [&](int k) { return sd[nd.in[k]]; };
    Attrs a = nd.attrs;
    if (elementwise_prims().count(p)) {
      auto r = elementwise(nd, in, osd);
      if (!r.empty()) return finish(nd, r, osd);
      return finish(nd, fallback(nd, in, osd), osd);
    }
    if (p == "broadcast_in_dim") {
      const int d = split(0);
      auto dims = a.ints("broadcast_dimensions");
      Shape s = a.ints("shape");
      const int64_t e = dims.at(d);
      if (gshape(nd.in[0])[d] == s[e]) {
        s[e] /= n;
        a.set("shape", s);
        osd = {int(e)};
        return finish(nd, run(nd, in, a), osd);
      }
    } else if (p == "reshape") {
      const int d = split(0);
      const Shape& is = gshape(nd.in[0]);
      Shape os = a.ints("new_sizes");
      int64_t pre = 1;
      for (int k = 0; k < d; ++k) pre *= is[k];
      int64_t acc = 1;
      for (size_t e = 0; e < os.size(); ++e) {
        if (acc == pre && os[e] % n == 0) {
          os[e] /= n;
          a.set("new_sizes", os);
          osd = {int(e)};
          return finish(nd, run(nd, in, a), osd);
        }
        acc *= os[e];
        if (acc > pre) break;
      }
    } else if (p == "transpose") {
      auto perm = a.ints("permutation");
      const int d = split(0);
      for (size_t e = 0; e < perm.size(); ++e)
        if (perm[e] == d) { osd = {int(e)}; return finish(nd, run(nd, in, a), osd); }
    } else if (p == "reduce_sum" || p == "reduce_max" || p == "reduce_min" || p == "reduce_prod" ||
               p == "argmax" || p == "argmin") {
      const int d = split(0);
      const bool arg = p == "argmax" || p == "argmin";
      auto axes = normalize_axes(arg ? std::vector<int64_t>{a.i("axis")} : a.ints("axes"),
                                 int(gshape(nd.in[0]).size()), "axis");
      if (std::find(axes.begin(), axes.end(), d) == axes.end()) {
        int e = d;
        for (auto x : axes) if (x < d) --e;
        osd = {e};
        return finish(nd, run(nd, in, a), osd);
      }
      if (p == "reduce_sum" || p == "reduce_max" || p == "reduce_min") {
        const char* coll = p == "reduce_sum" ? "psum" : p == "reduce_max" ? "pmax" : "pmin";
        out = {psum(run(nd, in, a)[0], coll)};
        osd = {-1};
        return finish(nd, out, osd);
      }
    } else if (p == "cumsum" || p == "cumprod" || p == "cummax" || p == "cummin" || p == "rev") {
      const int d = split(0);
      auto axes = normalize_axes(p == "rev" ? a.ints("dimensions") : std::vector<int64_t>{a.i("axis")},
                                 int(gshape(nd.in[0]).size()), "axis");
      if (std::find(axes.begin(), axes.end(), d) == axes.end()) {
        osd = {d};
        return finish(nd, run(nd, in, a), osd);
      }
    } else if (p == "dot_general" && a.ints("out_perm", {}).empty()) {
      auto r = dot(nd, in, osd);
      if (!r.empty()) return finish(nd, r, osd);
    } else if (p == "conv_general_dilated" || p == "conv_bwd_data") {
      // NHWC lhs (or output gradient) split on N, filter replicated: every image is its own.
      if (split(0) == 0 && split(1) < 0) {
        if (p == "conv_bwd_data") {
          Shape ls = a.ints("lhs_shape");
          ls[0] /= n;
          a.set("lhs_shape", ls);
        }
        osd = {0};
        return finish(nd, run(nd, in, a), osd);
      }
    } else if (p == "conv_bwd_filter") {
      // The filter gradient sums over images: local sums, then one psum.
      if ((split(0) == 0 || split(0) < 0) && (split(1) == 0 || split(1) < 0)) {
        for (int k = 0; k < 2; ++k) if (split(k) < 0) in[k] = localize(in[k], 0);
        out = {psum(run(nd, in, a)[0])};
        osd = {-1};
        return finish(nd, out, osd);
      }
    } else if (window_prims().count(p)) {
      auto r = window(nd, in, osd);
      if (!r.empty()) return finish(nd, r, osd);
    } else if (p == "take") {
      // Rows of a replicated table at split indices (an embedding lookup).
      const int64_t axis = normalize_axes({a.i("axis", 0)}, int(gshape(nd.in[0]).size()), "axis")[0];
      if (split(0) < 0 && split(1) >= 0) {
        osd = {int(axis + split(1))};
        return finish(nd, run(nd, in, a), osd);
      }
    } else if (p == "scatter_add") {
      // Its transpose: local scatters into zeros, one psum, then the operand.
      const int64_t axis = normalize_axes({a.i("axis", 0)}, int(gshape(nd.in[0]).size()), "axis")[0];
      if (split(0) < 0 && split(1) >= 0 && split(2) == axis + split(1)) {
        const int z = ops::zeros_like(G, in[0]);
        const int part = psum(run(nd, {z, in[1], in[2]}, a)[0]);
        out = {ops::add(G, in[0], part)};
        osd = {-1};
        return finish(nd, out, osd);
      }
    } else if (p == "pad" && split(1) < 0) {
      // Padding, cropping or dilating other dims than the split one.
      const int d = split(0);
      auto lo = a.ints("low"), hi = a.ints("high"), it = a.ints("interior", {});
      if (lo.at(d) == 0 && hi.at(d) == 0 && (it.empty() || it.at(d) == 0)) {
        osd = {d};
        return finish(nd, run(nd, in, a), osd);
      }
    } else if (p == "slice") {
      const int d = split(0);
      auto st = a.ints("start_indices"), lim = a.ints("limit_indices"), str = a.ints("strides", {});
      if (st.at(d) == 0 && lim.at(d) == gshape(nd.in[0])[d] && (str.empty() || str.at(d) == 1)) {
        lim[d] /= n;
        a.set("limit_indices", lim);
        osd = {d};
        return finish(nd, run(nd, in, a), osd);
      }
    } else if (p == "concatenate") {
      auto r = concatenate(nd, in, osd);
      if (!r.empty()) return finish(nd, r, osd);
    } else if (p == "dynamic_slice" || p == "dynamic_update_slice") {
      // Whole along the split dim: its start index clamps to 0 globally and locally.
      const int d = split(0);
      bool starts_rep = true;
      for (size_t k = p == "dynamic_slice" ? 1 : 2; k < nd.in.size(); ++k) starts_rep = starts_rep && split(k) < 0;
      if (d >= 0 && starts_rep) {
        if (p == "dynamic_slice") {
          Shape sz = a.ints("slice_sizes");
          if (sz.at(d) == gshape(nd.in[0])[d]) {
            sz[d] /= n;
            a.set("slice_sizes", sz);
            osd = {d};
            return finish(nd, run(nd, in, a), osd);
          }
        } else {
          const Shape& us = gshape(nd.in[1]);
          if (us.at(d) == gshape(nd.in[0])[d] && (split(1) == d || split(1) < 0)) {
            if (split(1) < 0) in[1] = localize(in[1], d);
            osd = {d};
            return finish(nd, run(nd, in, a), osd);
          }
        }
      }
    } else if (p == "dot_product_attention" || p == "dot_product_attention_bwd") {
      // Every operand and result leads with the batch: each image attends within itself.
      auto r = leading_batch(nd, in, osd);
      if (!r.empty()) return finish(nd, r, osd);
    } else if (p == "layer_norm" || p == "layer_norm_bwd" || p == "softmax" || p == "log_softmax" ||
               p == "softmax_bwd" || p == "log_softmax_bwd") {
      const bool ln = p == "layer_norm" || p == "layer_norm_bwd";
      const size_t nrow = p == "layer_norm_bwd" ? 4 : p == "softmax_bwd" || p == "log_softmax_bwd" ? 2 : 1;
      auto r = rows(nd, in, osd, nrow, ln ? a.i("feature_ndim", 1) : 1, p == "layer_norm_bwd" ? 1 : nd.out.size());
      if (!r.empty()) return finish(nd, r, osd);
    } else if (p == "take_along_axis" || p == "scatter_add_along_axis") {
      auto r = along_axis(nd, in, osd);
      if (!r.empty()) return finish(nd, r, osd);
    }
    return finish(nd, fallback(nd, in, osd), osd);
  }

  std::vector<int> dot(const Node& nd, std::vector<int>& in, std::vector<int>& osd) {
    const Attrs& a = nd.attrs;
    const int lr = int(gshape(nd.in[0]).size()), rr = int(gshape(nd.in[1]).size());
    auto lc = normalize_axes(a.ints("lhs_contracting", {}), lr, "lhs_contracting dim");
    auto rc = normalize_axes(a.ints("rhs_contracting", {}), rr, "rhs_contracting dim");
    auto lb = normalize_axes(a.ints("lhs_batch", {}), lr, "lhs_batch dim");
    auto rb = normalize_axes(a.ints("rhs_batch", {}), rr, "rhs_batch dim");
    auto pos = [](const std::vector<int64_t>& v, int64_t x) -> int {
      auto it = std::find(v.begin(), v.end(), x);
      return it == v.end() ? -1 : int(it - v.begin());
    };
    // Output dim of free dim x of an operand of rank r with batch dims b, contracting c.
    auto free_pos = [&](int r, const std::vector<int64_t>& b, const std::vector<int64_t>& c, int64_t x) {
      int k = 0;
      for (int i = 0; i < x; ++i) if (pos(b, i) < 0 && pos(c, i) < 0) ++k;
      return k;
    };
    const int nlfree = lr - int(lb.size()) - int(lc.size());
    const int dl = sd[nd.in[0]], dr = sd[nd.in[1]];
    // Which role each split dim plays, and the matching dim of the other operand.
    auto role = [&](int d, const std::vector<int64_t>& b, const std::vector<int64_t>& c, char& kind, int& k) {
      if ((k = pos(b, d)) >= 0) kind = 'b';
      else if ((k = pos(c, d)) >= 0) kind = 'c';
      else kind = 'f';
    };
    char kl = 0, kr = 0;
    int il = -1, ir = -1;
    if (dl >= 0) role(dl, lb, lc, kl, il);
    if (dr >= 0) role(dr, rb, rc, kr, ir);
    if (dl >= 0 && dr >= 0) {
      if (kl != kr || kl == 'f' || il != ir) return {};
    } else if (dl >= 0 && kl != 'f') {
      in[1] = localize(in[1], kl == 'b' ? rb[il] : rc[il]);
      kr = kl;
      ir = il;
    } else if (dr >= 0 && kr != 'f') {
      in[0] = localize(in[0], kr == 'b' ? lb[ir] : lc[ir]);
      kl = kr;
      il = ir;
    }
    std::vector<int> out = run(nd, in, a);
    const char kind = dl >= 0 ? kl : kr;
    if (kind == 'c') { osd = {-1}; return {psum(out[0])}; }
    if (kind == 'b') { osd = {dl >= 0 ? il : ir}; return out; }
    if (dl >= 0) osd = {int(lb.size()) + free_pos(lr, lb, lc, dl)};
    else osd = {int(lb.size()) + nlfree + free_pos(rr, rb, rc, dr)};
    return out;
  }

  std::vector<int> window(const Node& nd, std::vector<int>& in, std::vector<int>& osd) {
    Attrs a = nd.attrs;
    int d = -1;
    for (int v : nd.in) {
      if (sd[v] < 0) continue;
      if (d >= 0 && sd[v] != d) return {};
      d = sd[v];
    }
    const size_t r = a.ints("window_dimensions").size();
    Shape win = a.ints("window_dimensions"), str = a.ints("window_strides", Shape(r, 1)),
          pad = a.ints("padding", Shape(2 * r, 0));
    if (size_t(d) >= r || win[d] != 1 || str[d] != 1 || pad[2 * d] != 0 || pad[2 * d + 1] != 0) return {};
    for (size_t k = 0; k < nd.in.size(); ++k) {
      const Shape& s = gshape(nd.in[k]);
      if (sd[nd.in[k]] >= 0 || s.size() != r) continue;
      if (s[d] % n != 0) return {};
      in[k] = localize(in[k], d);
    }
    if (a.has("operand_shape")) {
      Shape os = a.ints("operand_shape");
      os[d] /= n;
      a.set("operand_shape", os);
    }
    for (int v : nd.out)
      if (gshape(v).size() != r) return {};
    osd.assign(nd.out.size(), d);
    return run(nd, in, a);
  }

  // A node whose operands and results all lead with one batch dim (size 1 where an
  // operand broadcasts): split on dim 0 everywhere, replicated operands sliced.
  std::vector<int> leading_batch(const Node& nd, std::vector<int>& in, std::vector<int>& osd) {
    for (int v : nd.in)
      if (sd[v] > 0) return {};
    const int64_t B = gshape(nd.in[0])[0];
    for (size_t k = 0; k < nd.in.size(); ++k) {
      if (sd[nd.in[k]] == 0) continue;
      const Shape& s = gshape(nd.in[k]);
      if (s.empty()) return {};
      if (s[0] == 1) continue;
      if (s[0] != B || B % n != 0) return {};
      in[k] = localize(in[k], 0);
    }
    for (int v : nd.out)
      if (gshape(v).empty() || gshape(v)[0] != B) return {};
    osd.assign(nd.out.size(), 0);
    return run(nd, in, nd.attrs);
  }

  // Row primitives (prims/norm.cc): the first `nrow` operands lead with the same row dims
  // (all but the `trail` last), and rows are independent, so a split row dim stays split.
  // Later operands (scale) must be replicated; results past the first `nrow_out`
  // (layer_norm_bwd's dscale, dbias) are sums over rows: local sums, then one psum.
  std::vector<int> rows(const Node& nd, std::vector<int>& in, std::vector<int>& osd, size_t nrow, int64_t trail,
                        size_t nrow_out) {
    if (nd.attrs.has("vmap_size")) return {};
    int d = -1;
    for (size_t k = 0; k < nd.in.size(); ++k) {
      const int s = sd[nd.in[k]];
      if (s < 0) continue;
      if (k >= nrow || (d >= 0 && s != d)) return {};
      d = s;
    }
    const Shape& xs = gshape(nd.in[0]);
    if (d < 0 || d >= int64_t(xs.size()) - trail || xs[d] % n != 0) return {};
    for (size_t k = 0; k < nrow; ++k)
      if (sd[nd.in[k]] < 0) in[k] = localize(in[k], d);
    auto out = run(nd, in, nd.attrs);
    osd.assign(out.size(), d);
    for (size_t k = nrow_out; k < out.size(); ++k) {
      out[k] = psum(out[k]);
      osd[k] = -1;
    }
    return out;
  }

  // Concatenation along another dim than the split one: blocks side by side.
  std::vector<int> concatenate(const Node& nd, std::vector<int>& in, std::vector<int>& osd) {
    const int64_t dim = normalize_axes({nd.attrs.i("dimension")}, int(gshape(nd.in[0]).size()), "dimension")[0];
    int d = -1;
    for (int v : nd.in) {
      if (sd[v] < 0) continue;
      if (d >= 0 && sd[v] != d) return {};
      d = sd[v];
    }
    if (d == dim) return {};
    for (size_t k = 0; k < nd.in.size(); ++k)
      if (sd[nd.in[k]] < 0) in[k] = localize(in[k], d);
    osd = {d};
    return run(nd, in, nd.attrs);
  }

  // take_along_axis(x, idx) and scatter_add_along_axis(x, idx, upd): lines along `axis`
  // are independent, so a split on any other dim stays local.
  std::vector<int> along_axis(const Node& nd, std::vector<int>& in, std::vector<int>& osd) {
    const int64_t axis = normalize_axes({nd.attrs.i("axis", 0)}, int(gshape(nd.in[0]).size()), "axis")[0];
    int d = -1;
    for (int v : nd.in) {
      if (sd[v] < 0) continue;
      if (d >= 0 && sd[v] != d) return {};
      d = sd[v];
    }
    if (d == axis) return {};
    for (size_t k = 0; k < nd.in.size(); ++k) {
      const Shape& s = gshape(nd.in[k]);
      if (sd[nd.in[k]] >= 0) continue;
      if (s.size() != gshape(nd.out[0]).size()) return {};
      if (s[d] != 1) {
        if (s[d] % n != 0) return {};
        in[k] = localize(in[k], d);
      }
    }
    osd = {d};
    return run(nd, in, nd.attrs);
  }

  std::vector<int> finish(const Node& nd, const std::vector<int>& out, const std::vector<int>& osd) {
    for (size_t k = 0; k < out.size(); ++k) {
      m[nd.out[k]] = out[k];
      sd[nd.out[k]] = osd[k];
    }
    return out;
  }
};

}  // namespace

Graph partition_graph(const Graph& g, const std::vector<int>& in_dim, int64_t n, const std::string& axis_name,
                      bool gather_outputs, std::vector<int>& out_dim, std::map<std::string, int>& fallbacks) {
  if (in_dim.size() != g.inputs.size())
    throw ValueError(fmt("partition: ", in_dim.size(), " split dims for a graph of ", g.inputs.size(), " inputs"));
  if (n < 1) throw ValueError(fmt("partition: the number of devices must be >= 1, got ", n));
  Partitioner P{g, Graph(), n, axis_name};
  const int nv = g.num_values();
  P.m.assign(nv, -1);
  P.sd.assign(nv, -1);
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const int v = g.inputs[i];
    AVal a = g.avals[v];
    const int d = in_dim[i];
    if (d >= 0) {
      if (size_t(d) >= a.shape.size() || a.shape[d] % n != 0)
        throw ShapeError(fmt("partition: input ", i, " of shape ", shape_str(a.shape), " cannot be split into ", n,
                             " equal blocks along dimension ", d));
      a.shape[d] /= n;
    }
    P.m[v] = P.G.add_input(a);
    P.sd[v] = d >= 0 && n > 1 ? d : -1;
  }
  for (auto& [id, arr] : g.consts) P.m[id] = P.G.add_const(arr);
  for (const Node& nd : g.nodes) {
    if (n == 1) {
      std::vector<int> in;
      for (int v : nd.in) in.push_back(P.m[v]);
      auto out = P.run(nd, in, nd.attrs);
      P.finish(nd, out, std::vector<int>(out.size(), -1));
      continue;
    }
    P.node(nd);
  }
  out_dim.clear();
  for (int v : g.outputs) {
    int x = P.m[v], d = P.sd[v];
    if (d >= 0 && gather_outputs) { x = P.gather(x, d); d = -1; }
    P.G.outputs.push_back(x);
    out_dim.push_back(d);
  }
  fallbacks = P.fallbacks;
  return std::move(P.G);
}

}  // namespace podlet
