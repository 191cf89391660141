// Window reductions (pooling) and their transposes:
//   reduce_window(x; computation "max"|"sum", window_dimensions, window_strides, padding)
//   reduce_window_sum_transpose(ct; window attrs, operand_shape)   VJP of the sum
//   select_and_scatter_add(source, operand; window attrs)          VJP of the max
//   select_and_gather_add(tangents, operand; window attrs)         VJP of the above
// Window attrs cover every dim (NHWC pooling: window (1, kh, kw, 1)); padding is the
// flattened [lo0, hi0, lo1, hi1, ...] and may be negative (crops). Padded positions hold
// the reduction's identity (-inf for max, 0 for sum), so they are simply skipped.
// max propagates NaN. The max gradient goes to the first maximum of each window in
// row-major window order (XLA's select_and_scatter with `ge`); a NaN counts as the
// maximum, so the gradient follows the NaN the forward pass returned.
// Every output (and every transposed input) element is reduced in a fixed order, so
// results do not depend on the thread count.
#include "podlet/prims/common.h"
#include "podlet/kernels/pool.h"
#include "podlet/ir/batch_ops.h"
#include <cmath>
#include <limits>

namespace podlet {
namespace {
using namespace ops;

// Dims [0, ro) are windowed; the trailing dims form a contiguous block of `inner`
// elements with window 1, stride 1 and no padding (channels), handled as a vector.
struct WinGeom {
  Shape in, out, win, str, lo, hi;
  int ro = 0;
  int64_t inner = 1;
  Shape in_st;  // element strides of the input
  int64_t out_outer() const { int64_t n = 1; for (int d = 0; d < ro; ++d) n *= out[d]; return n; }
  int64_t in_outer() const { int64_t n = 1; for (int d = 0; d < ro; ++d) n *= in[d]; return n; }
  int64_t win_size() const { int64_t n = 1; for (int d = 0; d < ro; ++d) n *= win[d]; return n; }
};

WinGeom win_geom(const Shape& in, const Attrs& a) {
  const size_t r = in.size();
  WinGeom q;
  q.in = in;
  q.win = a.ints("window_dimensions");
  q.str = a.ints("window_strides", Shape(r, 1));
  auto pad = a.ints("padding", Shape(2 * r, 0));
  if (q.win.size() != r)
    throw ShapeError(fmt("window_dimensions ", shape_str(q.win), " must have one entry per operand dim (rank ", r, ")"));
  if (q.str.size() != r)
    throw ShapeError(fmt("window_strides ", shape_str(q.str), " must have one entry per operand dim (rank ", r, ")"));
  if (pad.size() != 2 * r)
    throw ShapeError(fmt("padding ", shape_str(pad), " must have a (lo, hi) pair per operand dim (", 2 * r, " entries)"));
  for (size_t d = 0; d < r; ++d) {
    if (q.win[d] < 1) throw ShapeError(fmt("window_dimensions ", shape_str(q.win), " must be >= 1"));
    if (q.str[d] < 1) throw ShapeError(fmt("window_strides ", shape_str(q.str), " must be >= 1"));
    q.lo.push_back(pad[2 * d]); q.hi.push_back(pad[2 * d + 1]);
    const int64_t padded = in[d] + q.lo[d] + q.hi[d];
    q.out.push_back(padded < q.win[d] ? 0 : (padded - q.win[d]) / q.str[d] + 1);
  }
  q.ro = int(r);
  while (q.ro > 0 && q.win[q.ro - 1] == 1 && q.str[q.ro - 1] == 1 && q.lo[q.ro - 1] == 0 && q.hi[q.ro - 1] == 0) {
    q.inner *= in[q.ro - 1];
    --q.ro;
  }
  q.in_st = strides_of(in);
  return q;
}

Attrs win_attrs(const WinGeom& q) {
  Shape pad;
  for (size_t d = 0; d < q.in.size(); ++d) { pad.push_back(q.lo[d]); pad.push_back(q.hi[d]); }
  return {{"window_dimensions", q.win}, {"window_strides", q.str}, {"padding", pad}};
}

inline int64_t floor_div(int64_t a, int64_t b) { int64_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }

// Calls f(input_outer_offset_in_elements, input_outer_flat_index, w) for each in-bounds
// position w of the window of output outer index `o`, in row-major window order.
template <class F>
void for_window(const WinGeom& q, int64_t o, std::vector<int64_t>& oidx, F&& f) {
  for (int d = q.ro - 1; d >= 0; --d) { oidx[d] = o % q.out[d]; o /= q.out[d]; }
  const int64_t wn = q.win_size();
  for (int64_t w = 0; w < wn; ++w) {
    int64_t rem = w, off = 0, flat = 0, mul = 1;
    bool ok = true;
    for (int d = q.ro - 1; d >= 0; --d) {
      const int64_t i = oidx[d] * q.str[d] + rem % q.win[d] - q.lo[d];
      rem /= q.win[d];
      if (i < 0 || i >= q.in[d]) { ok = false; break; }
      off += i * q.in_st[d]; flat += i * mul; mul *= q.in[d];
    }
    if (ok) f(off, flat, w);
  }
}

// Calls f(output_outer_flat_index, w) for every output whose window covers input outer
// index j, in row-major output order; w is j's row-major position in that window.
template <class F>
void for_covering(const WinGeom& q, int64_t j, std::vector<int64_t>& lo, std::vector<int64_t>& hi,
                  std::vector<int64_t>& cur, std::vector<int64_t>& pos, F&& f) {
  for (int d = q.ro - 1; d >= 0; --d) {
    const int64_t i = j % q.in[d]; j /= q.in[d];
    pos[d] = i + q.lo[d];
    // o * s - lo_pad <= i <= o * s - lo_pad + win - 1
    lo[d] = std::max<int64_t>(0, floor_div(i + q.lo[d] - q.win[d], q.str[d]) + 1);
    hi[d] = std::min<int64_t>(q.out[d] - 1, floor_div(i + q.lo[d], q.str[d]));
    if (lo[d] > hi[d]) return;
  }
  for (int d = 0; d < q.ro; ++d) cur[d] = lo[d];
  while (true) {
    int64_t flat = 0, w = 0;
    for (int d = 0; d < q.ro; ++d) {
      flat = flat * q.out[d] + cur[d];
      w = w * q.win[d] + (pos[d] - cur[d] * q.str[d]);
    }
    f(flat, w);
    int d = q.ro - 1;
    for (; d >= 0; --d) { if (++cur[d] <= hi[d]) break; cur[d] = lo[d]; }
    if (d < 0) break;
  }
}

int64_t grain_for(const WinGeom& q, int64_t work_per_item) {
  return std::max<int64_t>(1, kGrain / std::max<int64_t>(1, q.inner * work_per_item));
}

// Image pooling (NHWC, window (1, KH, KW, 1) with the batch dim untouched): the loops
// below walk output rows and input rows directly. The generic walkers (for_window,
// for_covering) spend more on their per-position index arithmetic (divisions over
// every windowed dim, a call per position) than on the 64-channel vectors they feed:
// the 3x3/2 max-pool gradient of the 224x224 stem took ~36 ms at batch 32. Same
// positions in the same order, so the same bits.
bool is_pool2d(const WinGeom& q) {
  return q.ro == 3 && q.win[0] == 1 && q.str[0] == 1 && q.lo[0] == 0 && q.hi[0] == 0;
}
// The image pool's geometry for the AVX-512 kernels (kernels/pool.h).
kernels::Pool2d pool2d_of(const WinGeom& q) {
  return {q.in[0], q.in[1], q.in[2], q.inner, q.out[1], q.out[2], q.win[1], q.win[2], q.str[1], q.str[2],
          q.lo[1], q.lo[2]};
}
// Calls f(input offset in elements, w) for each in-bounds position w = kh * KW + kw of
// the window of image-pool output (row r = n * Ho + oh, column ow), in window order.
template <class F> inline void for_pool_window(const WinGeom& q, int64_t r, int64_t ow, F&& f) {
  const int64_t H = q.in[1], W = q.in[2], Ho = q.out[1], KH = q.win[1], KW = q.win[2], n = r / Ho, oh = r % Ho;
  for (int64_t kh = 0; kh < KH; ++kh) {
    const int64_t ih = oh * q.str[1] + kh - q.lo[1];
    if (ih < 0 || ih >= H) continue;
    for (int64_t kw = 0; kw < KW; ++kw) {
      const int64_t iw = ow * q.str[2] + kw - q.lo[2];
      if (iw >= 0 && iw < W) f(((n * H + ih) * W + iw) * q.inner, kh * KW + kw);
    }
  }
}
// Runs f(r0, r1) over the image-pool output rows (n, oh) in parallel chunks.
template <class F> inline void for_pool_rows(const WinGeom& q, F&& f) {
  parallel_for(q.out[0] * q.out[1], std::max<int64_t>(1, grain_for(q, q.win_size()) / std::max<int64_t>(1, q.out[2])), f);
}

// The output positions o (ascending) along one dim whose window covers input index i,
// with i's offset k = i + lo - o * s in that window: pairs (o, k).
inline int covering(int64_t i, int64_t lo, int64_t win, int64_t str, int64_t nout, int64_t* o, int64_t* k) {
  const int64_t first = std::max<int64_t>(0, floor_div(i + lo - win, str) + 1);
  const int64_t last = std::min<int64_t>(nout - 1, floor_div(i + lo, str));
  int c = 0;
  for (int64_t v = first; v <= last; ++v, ++c) { o[c] = v; k[c] = i + lo - v * str; }
  return c;
}

// Calls f(tag) with tag of the storage type of d; bool is rejected.
template <class F> void float_or_int_switch(DType d, F&& f) {
  switch (d) {
    case DType::f32: f(float()); break;
    case DType::bf16: f(bf16()); break;
    case DType::f64: f(double()); break;
    case DType::i32: f(int32_t()); break;
    case DType::u32: f(uint32_t()); break;
    case DType::u8: f(uint8_t()); break;
    default: throw DTypeError(fmt("dtype ", dtype_name(d), " is not supported (cast bool to int32 first)"));
  }
}

// ---- reduce_window ----

template <class T, class Acc, class Comb>
void reduce_window_loop(const WinGeom& q, const T* x, T* y, Acc init, Comb comb) {
  const int64_t I = q.inner;
  if (is_pool2d(q)) {
    const int64_t Wo = q.out[2];
    for_pool_rows(q, [&](int64_t r0, int64_t r1) {
      std::vector<Acc> acc(I);
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          std::fill(acc.begin(), acc.end(), init);
          Acc* __restrict ac = acc.data();
          for_pool_window(q, r, ow, [&](int64_t off, int64_t) {
            const T* __restrict p = x + off;
            for (int64_t i = 0; i < I; ++i) ac[i] = comb(ac[i], Acc(p[i]));
          });
          T* out = y + (r * Wo + ow) * I;
          for (int64_t i = 0; i < I; ++i) out[i] = from_acc<T>(ac[i]);
        }
    });
    return;
  }
  parallel_for(q.out_outer(), grain_for(q, q.win_size()), [&](int64_t o0, int64_t o1) {
    std::vector<Acc> acc(I);
    std::vector<int64_t> oidx(q.ro);
    for (int64_t o = o0; o < o1; ++o) {
      std::fill(acc.begin(), acc.end(), init);
      for_window(q, o, oidx, [&](int64_t off, int64_t, int64_t) {
        const T* p = x + off;
        for (int64_t i = 0; i < I; ++i) acc[i] = comb(acc[i], Acc(p[i]));
      });
      T* out = y + o * I;
      for (int64_t i = 0; i < I; ++i) out[i] = from_acc<T>(acc[i]);
    }
  });
}

template <class A> inline A max_nan(A a, A v) {
  if constexpr (std::is_floating_point_v<A>) return (v > a || v != v) ? v : a;
  else return v > a ? v : a;
}

void reduce_window_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
  WinGeom q = win_geom(in[0].shape(), a);
  if (out[0].size() == 0) return;
  const bool is_max = a.s("computation") == "max";
  if (is_max && is_pool2d(q) && in[0].dtype() == DType::f32 &&
      kernels::maxpool_fwd(pool2d_of(q), in[0].data<float>(), out[0].data<float>()))
    return;
  float_or_int_switch(in[0].dtype(), [&](auto tag) {
    using T = decltype(tag);
    {
      using A = acc_t<T>;
      const T* x = in[0].data<T>(); T* y = out[0].data<T>();
      if (is_max) {
        A init = std::is_floating_point_v<A> ? -std::numeric_limits<A>::infinity() : std::numeric_limits<A>::lowest();
        reduce_window_loop<T, A>(q, x, y, init, [](A s, A v) { return max_nan(s, v); });
      } else {
        reduce_window_loop<T, A>(q, x, y, A(0), [](A s, A v) { return A(s + v); });
      }
    }
  });
}

std::vector<AVal> reduce_window_shape(const std::vector<AVal>& in, const Attrs& a) {
  check_arity(in, 1);
  const std::string c = a.s("computation");
  if (c != "max" && c != "sum") throw ValueError(fmt("computation must be 'max' or 'sum', got '", c, "'"));
  if (in[0].dtype == DType::boolean) throw DTypeError("reduce_window of bool: cast to int32 first");
  return {AVal{in[0].dtype, win_geom(in[0].shape, a).out}};
}

// ---- reduce_window_sum_transpose: x_bar[j] = sum of ct over the windows covering j ----

void sum_transpose_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
  WinGeom q = win_geom(out[0].shape(), a);
  if (out[0].size() == 0) return;
  const int64_t I = q.inner;
  float_or_int_switch(in[0].dtype(), [&](auto tag) {
    using T = decltype(tag);
    {
      using A = acc_t<T>;
      const T* ct = in[0].data<T>(); T* y = out[0].data<T>();
      parallel_for(q.in_outer(), grain_for(q, q.win_size()), [&](int64_t j0, int64_t j1) {
        std::vector<A> acc(I);
        std::vector<int64_t> lo(q.ro), hi(q.ro), cur(q.ro), pos(q.ro);
        for (int64_t j = j0; j < j1; ++j) {
          std::fill(acc.begin(), acc.end(), A(0));
          for_covering(q, j, lo, hi, cur, pos, [&](int64_t o, int64_t) {
            const T* p = ct + o * I;
            for (int64_t i = 0; i < I; ++i) acc[i] += A(p[i]);
          });
          for (int64_t i = 0; i < I; ++i) y[j * I + i] = from_acc<T>(acc[i]);
        }
      });
    }
  });
}

std::vector<AVal> sum_transpose_shape(const std::vector<AVal>& in, const Attrs& a) {
  check_arity(in, 1);
  if (in[0].dtype == DType::boolean) throw DTypeError("bool is not supported");
  Shape os = a.ints("operand_shape");
  WinGeom q = win_geom(os, a);
  if (in[0].shape != q.out)
    throw ShapeError(fmt("cotangent has shape ", shape_str(in[0].shape), ", expected ", shape_str(q.out),
                         " (the reduce_window output for operand_shape ", shape_str(os), ")"));
  return {AVal{in[0].dtype, os}};
}

// ---- select_and_scatter_add / select_and_gather_add ----

// sel[o * I + i] = the row-major position in window o of its first maximum (channel i),
// or -1 when the window holds no input element. Positions rather than input indices:
// 4 bytes an element, and the scatter compares them with one integer per window.
template <class T>
void select_first_max(const WinGeom& q, const T* x, std::vector<int32_t>& sel) {
  using A = acc_t<T>;
  const int64_t I = q.inner;
  sel.assign(q.out_outer() * I, -1);
  auto pick = [I](int32_t* __restrict s, A* __restrict bst, const T* __restrict p, int32_t w32) {
    // Branch-free (vectorises; random data would mispredict a branch half the time).
    for (int64_t i = 0; i < I; ++i) {
      const A v = A(p[i]), b = bst[i];
      bool take = (s[i] < 0) | (v > b);
      if constexpr (std::is_floating_point_v<A>) take = take | ((v != v) & (b == b));
      bst[i] = take ? v : b;
      s[i] = take ? w32 : s[i];
    }
  };
  if (is_pool2d(q)) {
    const int64_t Wo = q.out[2];
    for_pool_rows(q, [&](int64_t r0, int64_t r1) {
      std::vector<A> best(I);
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          int32_t* s = sel.data() + (r * Wo + ow) * I;
          for_pool_window(q, r, ow, [&](int64_t off, int64_t w) { pick(s, best.data(), x + off, int32_t(w)); });
        }
    });
    return;
  }
  parallel_for(q.out_outer(), grain_for(q, q.win_size()), [&](int64_t o0, int64_t o1) {
    std::vector<A> best(I);
    std::vector<int64_t> oidx(q.ro);
    for (int64_t o = o0; o < o1; ++o) {
      int32_t* __restrict s = sel.data() + o * I;
      A* __restrict bst = best.data();
      for_window(q, o, oidx, [&](int64_t off, int64_t, int64_t w) { pick(s, bst, x + off, int32_t(w)); });
    }
  });
}

void check_window_operand(const AVal& operand) {
  if (operand.dtype == DType::boolean) throw DTypeError("operand of dtype bool is not supported");
}

// dx = the source values scattered to the selected elements (sel as select_first_max
// makes it), summed per element over its covering windows in row-major output order.
void scatter_selected(const WinGeom& q, const std::vector<int32_t>& sel, const Array& source, Array& dx) {
  const int64_t I = q.inner;
  float_or_int_switch(source.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T* src = source.data<T>(); T* y = dx.data<T>();
    if (is_pool2d(q)) {  // per input row (n, ih): covering windows in row-major output order
      const int64_t H = q.in[1], W = q.in[2], Ho = q.out[1], Wo = q.out[2], KW = q.win[2];
      parallel_for(q.out[0] * H, std::max<int64_t>(1, grain_for(q, q.win_size()) / std::max<int64_t>(1, W)),
                   [&](int64_t r0, int64_t r1) {
        std::vector<A> acc(I);
        std::vector<int64_t> oh(q.win[1]), kh(q.win[1]), ow(KW), kw(KW);
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t n = r / H, ih = r % H;
          const int nh = covering(ih, q.lo[1], q.win[1], q.str[1], Ho, oh.data(), kh.data());
          for (int64_t iw = 0; iw < W; ++iw) {
            const int nw = nh ? covering(iw, q.lo[2], KW, q.str[2], Wo, ow.data(), kw.data()) : 0;
            A* __restrict ac = acc.data();
            std::fill(acc.begin(), acc.end(), A(0));
            for (int a = 0; a < nh; ++a)
              for (int b = 0; b < nw; ++b) {
                const int64_t o = (n * Ho + oh[a]) * Wo + ow[b];
                const int32_t* __restrict s = sel.data() + o * I;
                const T* __restrict p = src + o * I;
                const int32_t w32 = int32_t(kh[a] * KW + kw[b]);
                for (int64_t i = 0; i < I; ++i) {
                  const A v = A(p[i]);  // read unconditionally, so the loop vectorises
                  ac[i] += s[i] == w32 ? v : A(0);
                }
              }
            T* yo = y + (r * W + iw) * I;
            for (int64_t i = 0; i < I; ++i) yo[i] = from_acc<T>(ac[i]);
          }
        }
      });
      return;
    }
    parallel_for(q.in_outer(), grain_for(q, q.win_size()), [&](int64_t j0, int64_t j1) {
      std::vector<A> acc(I);
      std::vector<int64_t> lo(q.ro), hi(q.ro), cur(q.ro), pos(q.ro);
      for (int64_t j = j0; j < j1; ++j) {
        std::fill(acc.begin(), acc.end(), A(0));
        A* __restrict ac = acc.data();
        for_covering(q, j, lo, hi, cur, pos, [&](int64_t o, int64_t w) {
          const int32_t* __restrict s = sel.data() + o * I;
          const T* __restrict p = src + o * I;
          const int32_t w32 = int32_t(w);
          for (int64_t i = 0; i < I; ++i) {
            const A v = A(p[i]);
            ac[i] += s[i] == w32 ? v : A(0);
          }
        });
        for (int64_t i = 0; i < I; ++i) y[j * I + i] = from_acc<T>(acc[i]);
      }
    });
  });
}

void scatter_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
  WinGeom q = win_geom(in[1].shape(), a);
  if (out[0].size() == 0) return;
  if (is_pool2d(q) && in[0].dtype() == DType::f32 && in[1].dtype() == DType::f32 &&
      kernels::maxpool_grad(pool2d_of(q), in[1].data<float>(), in[0].data<float>(), out[0].data<float>()))
    return;
  std::vector<int32_t> sel;
  float_or_int_switch(in[1].dtype(), [&](auto tag) { select_first_max(q, in[1].data<decltype(tag)>(), sel); });
  scatter_selected(q, sel, in[0], out[0]);
}

// ---- reduce_window_argmax / scatter_add_at_argmax (ir/pool_fusion.h) ----
// A max-pool and its gradient with the selection made once, in the forward pass:
//   reduce_window_argmax(x; window attrs) -> (y, sel): y = reduce_window max (same bits),
//     sel (uint8, y's shape) = select_first_max's window position as an int8 (0xff: a
//     window with no input element); window size <= 127.
//   scatter_add_at_argmax(source, sel; window attrs, operand_shape) -> dx: the
//     select_and_scatter_add of source onto the x that sel was taken from (same bits).
// The gradient then reads 1 byte an output element instead of x (102 MB at the
// ResNet stem), and x dies after the forward pass.
using kernels::kMaxSelectWindow;

WinGeom argmax_geom(const Shape& operand, const Attrs& a) {
  WinGeom q = win_geom(operand, a);
  if (q.win_size() > kMaxSelectWindow)
    throw ValueError(fmt("window of ", q.win_size(), " elements; the selection holds window positions up to ",
                         kMaxSelectWindow));
  return q;
}

std::vector<AVal> argmax_shape(const std::vector<AVal>& in, const Attrs& a) {
  check_arity(in, 1);
  check_window_operand(in[0]);
  const WinGeom q = argmax_geom(in[0].shape, a);
  return {AVal{in[0].dtype, q.out}, AVal{DType::u8, q.out}};
}

void argmax_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
  const WinGeom q = argmax_geom(in[0].shape(), a);
  if (out[0].size() == 0) return;
  if (is_pool2d(q) && in[0].dtype() == DType::f32 &&
      kernels::maxpool_fwd_select(pool2d_of(q), in[0].data<float>(), out[0].data<float>(), out[1].data<int8_t>()))
    return;
  Attrs ma = a;
  ma.set("computation", std::string("max"));
  std::vector<Array> y{out[0]};
  reduce_window_kernel(in, y, ma);
  std::vector<int32_t> sel;
  float_or_int_switch(in[0].dtype(), [&](auto tag) { select_first_max(q, in[0].data<decltype(tag)>(), sel); });
  int8_t* s = out[1].data<int8_t>();
  for (size_t i = 0; i < sel.size(); ++i) s[i] = int8_t(sel[i]);
}

std::vector<AVal> scatter_at_shape(const std::vector<AVal>& in, const Attrs& a) {
  check_arity(in, 2);
  if (in[0].dtype == DType::boolean) throw DTypeError("source of dtype bool is not supported");
  if (in[1].dtype != DType::u8) throw DTypeError(fmt("sel must be uint8 (reduce_window_argmax's), got ", dtype_name(in[1].dtype)));
  const Shape os = a.ints("operand_shape");
  const WinGeom q = argmax_geom(os, a);
  if (in[0].shape != q.out || in[1].shape != q.out)
    throw ShapeError(fmt("source and sel have shapes ", shape_str(in[0].shape), " and ", shape_str(in[1].shape),
                         ", expected ", shape_str(q.out), " (the reduce_window output for operand_shape ",
                         shape_str(os), ")"));
  return {AVal{in[0].dtype, os}};
}

void scatter_at_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
  const WinGeom q = argmax_geom(a.ints("operand_shape"), a);
  if (out[0].size() == 0) return;
  if (is_pool2d(q) && in[0].dtype() == DType::f32 &&
      kernels::maxpool_scatter(pool2d_of(q), in[1].data<int8_t>(), in[0].data<float>(), out[0].data<float>()))
    return;
  const int8_t* s = in[1].data<int8_t>();
  std::vector<int32_t> sel(s, s + in[1].size());
  scatter_selected(q, sel, in[0], out[0]);
}

void gather_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
  WinGeom q = win_geom(in[1].shape(), a);
  if (out[0].size() == 0) return;
  const int64_t I = q.inner;
  if (is_pool2d(q) && in[0].dtype() == DType::f32 && in[1].dtype() == DType::f32 &&
      kernels::maxpool_grad(pool2d_of(q), in[1].data<float>(), in[0].data<float>(), out[0].data<float>()))
    return;
  std::vector<int32_t> sel;
  float_or_int_switch(in[1].dtype(), [&](auto tag) { select_first_max(q, in[1].data<decltype(tag)>(), sel); });
  float_or_int_switch(in[0].dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* t = in[0].data<T>(); T* y = out[0].data<T>();
    parallel_for(q.out_outer(), grain_for(q, q.win_size()), [&](int64_t o0, int64_t o1) {
      std::vector<int64_t> oidx(q.ro), flat_of(q.win_size(), -1);  // window position -> input index
      for (int64_t o = o0; o < o1; ++o) {
        std::fill(flat_of.begin(), flat_of.end(), -1);
        for_window(q, o, oidx, [&](int64_t, int64_t flat, int64_t w) { flat_of[w] = flat; });
        for (int64_t i = 0; i < I; ++i) {
          const int32_t s = sel[o * I + i];
          y[o * I + i] = s < 0 ? from_acc<T>(acc_t<T>(0)) : t[flat_of[s] * I + i];
        }
      }
    });
  });
}

std::vector<AVal> scatter_shape(const std::vector<AVal>& in, const Attrs& a) {
  check_arity(in, 2);
  check_window_operand(in[1]);
  if (in[0].dtype == DType::boolean) throw DTypeError("source of dtype bool is not supported");
  WinGeom q = win_geom(in[1].shape, a);
  if (in[0].shape != q.out)
    throw ShapeError(fmt("source has shape ", shape_str(in[0].shape), ", expected ", shape_str(q.out),
                         " (the reduce_window output for the operand)"));
  return {AVal{in[0].dtype, in[1].shape}};
}

std::vector<AVal> gather_shape(const std::vector<AVal>& in, const Attrs& a) {
  check_arity(in, 2);
  check_window_operand(in[1]);
  if (in[0].dtype == DType::boolean) throw DTypeError("tangents of dtype bool are not supported");
  if (in[0].shape != in[1].shape)
    throw ShapeError(fmt("tangents have shape ", shape_str(in[0].shape), ", expected the operand's ", shape_str(in[1].shape)));
  return {AVal{in[0].dtype, win_geom(in[1].shape, a).out}};
}

// One op per window element of every output.
double window_flops_for(const Shape& operand, const Attrs& a) {
  WinGeom q = win_geom(operand, a);
  return double(q.out_outer()) * double(q.inner) * double(q.win_size());
}

// ---- batching rule (vmap) ---------------------------------------------------------------
// Every window attr covers every dim of the operand (`operand` = the input whose shape the
// window walks, or attr operand_shape). When dim 0 has a trivial window (NHWC's N: window
// 1, stride 1, no padding), the mapped axis folds into it: [B, N, ...] -> [B*N, ...], the
// attrs stay and the image-pool kernels still apply. Otherwise the mapped axis becomes a
// new leading dim with a trivial window. Either way each element's windows are reduced
// exactly as unbatched.
BatchRule window_batch(int operand) {
  return [operand](Graph& g, const BatchCtx& c, const std::vector<int>& in, const std::vector<int>& bd,
                   std::vector<int>& ob) -> std::vector<int> {
    Attrs a = c.n.attrs;
    const bool has_os = a.has("operand_shape");
    const Shape os = has_os ? a.ints("operand_shape") : c.in_avals.at(operand).shape;
    const size_t r = os.size();
    Shape win = a.ints("window_dimensions"), str = a.ints("window_strides", Shape(r, 1)),
          pad = a.ints("padding", Shape(2 * r, 0));
    std::vector<int> x = batching::materialize_all(g, in, bd, c.size);
    const bool fold = r >= 1 && win.size() == r && str.size() == r && pad.size() == 2 * r && win[0] == 1 &&
                      str[0] == 1 && pad[0] == 0 && pad[1] == 0;
    ob.assign(c.out_avals.size(), 0);
    if (!fold) {
      win.insert(win.begin(), 1);
      str.insert(str.begin(), 1);
      pad.insert(pad.begin(), {0, 0});
      a.set("window_dimensions", win);
      a.set("window_strides", str);
      a.set("padding", pad);
      if (has_os) a.set("operand_shape", batching::with_batch(os, c.size));
      return g.add(*c.n.prim, x, a, c.n.where);
    }
    for (auto& v : x) {
      Shape s = g.aval(v).shape;  // [B, d0, ...]
      Shape t(s.begin() + 1, s.end());
      t[0] *= c.size;
      v = ops::reshape(g, v, t);
    }
    if (has_os) {
      Shape t = os;
      t[0] *= c.size;
      a.set("operand_shape", t);
    }
    auto out = g.add(*c.n.prim, x, a, c.n.where);
    for (size_t k = 0; k < out.size(); ++k) out[k] = ops::reshape(g, out[k], batching::with_batch(c.out_avals[k].shape, c.size));
    return out;
  };
}

static Register reg_reduce_window("reduce_window", PrimDef{
    .shape = reduce_window_shape,
    .kernel = reduce_window_kernel,
    .vjp = [](Graph& g, const Node& n, const std::vector<int>& ct) -> std::vector<int> {
      const AVal xa = g.aval(n.in[0]);
      WinGeom q = win_geom(xa.shape, n.attrs);
      Attrs wa = win_attrs(q);
      if (n.attrs.s("computation") == "max") return {g.add1("select_and_scatter_add", {ct[0], n.in[0]}, wa)};
      wa.set("operand_shape", xa.shape);
      return {g.add1("reduce_window_sum_transpose", {ct[0]}, wa)};
    },
    .flops = [](const std::vector<AVal>& in, const std::vector<AVal>&, const Attrs& a) {
      return window_flops_for(in[0].shape, a); },
    .batch = window_batch(0)});

static Register reg_sum_transpose("reduce_window_sum_transpose", PrimDef{
    .shape = sum_transpose_shape,
    .kernel = sum_transpose_kernel,
    .vjp = [](Graph& g, const Node& n, const std::vector<int>& ct) -> std::vector<int> {
      Attrs wa = win_attrs(win_geom(n.attrs.ints("operand_shape"), n.attrs));
      wa.set("computation", std::string("sum"));
      return {g.add1("reduce_window", {ct[0]}, wa)};
    },
    .flops = [](const std::vector<AVal>&, const std::vector<AVal>& out, const Attrs& a) {
      return window_flops_for(out[0].shape, a); },
    .batch = window_batch(0)});

static Register reg_scatter("select_and_scatter_add", PrimDef{
    .shape = scatter_shape,
    .kernel = scatter_kernel,
    // Linear in source; piecewise constant in operand (no gradient).
    .vjp = [](Graph& g, const Node& n, const std::vector<int>& ct) -> std::vector<int> {
      Attrs wa = win_attrs(win_geom(g.aval(n.in[1]).shape, n.attrs));
      return {g.add1("select_and_gather_add", {ct[0], n.in[1]}, wa), -1};
    },
    .flops = [](const std::vector<AVal>& in, const std::vector<AVal>&, const Attrs& a) {
      return window_flops_for(in[1].shape, a); },
    .batch = window_batch(1)});

static Register reg_argmax("reduce_window_argmax", PrimDef{
    .shape = argmax_shape,
    .kernel = argmax_kernel,
    .vjp = nullptr,  // made by ir/pool_fusion.cc in graphs about to run, after autodiff
    .flops = [](const std::vector<AVal>& in, const std::vector<AVal>&, const Attrs& a) {
      return window_flops_for(in[0].shape, a); },
    .batch = window_batch(0)});

static Register reg_scatter_at("scatter_add_at_argmax", PrimDef{
    .shape = scatter_at_shape,
    .kernel = scatter_at_kernel,
    .vjp = nullptr,
    .flops = [](const std::vector<AVal>&, const std::vector<AVal>& out, const Attrs& a) {
      return window_flops_for(out[0].shape, a); },
    .batch = window_batch(0)});

static Register reg_gather("select_and_gather_add", PrimDef{
    .shape = gather_shape,
    .kernel = gather_kernel,
    .vjp = [](Graph& g, const Node& n, const std::vector<int>& ct) -> std::vector<int> {
      Attrs wa = win_attrs(win_geom(g.aval(n.in[1]).shape, n.attrs));
      return {g.add1("select_and_scatter_add", {ct[0], n.in[1]}, wa), -1};
    },
    .flops = [](const std::vector<AVal>& in, const std::vector<AVal>&, const Attrs& a) {
      return window_flops_for(in[1].shape, a); },
    .batch = window_batch(1)});

}  // namespace
}  // namespace podlet
