// Fused SGD-with-momentum and Lion updates: one pass over the parameters, like
// adamw_update (prims/optim.cc), whose conventions they follow.
//
// Operands: param, grad, state (same shape, same float dtype T), then two 0-d float
// scalars of any float dtype: lr, gnorm (inputs, so a traced schedule and a traced global
// norm work under jit). attrs: max_norm (float, <= 0: no clipping; gnorm is then
// ignored), apply (int, default 1). Outputs (new_param | update, new_state) of dtype T;
// zero_grad. param is read only by apply = 1 and Lion's weight decay: SGD needs no
// params, so podlet.optim passes the grad in its place for an update without them.
//
// Arithmetic: exactly the op sequence of optax 0.2.8's chains as podlet.optim executes
// them op by op, with every intermediate rounded to T (bf16: computed in f32 and rounded
// after each op) and Python-float constants rounded to T first (weak typing); adds of two
// values that may both be NaN keep the first one's (the chain's add, x86's addps):
//   g    = gnorm < max_norm ? grad : (grad / T(gnorm)) * T(max_norm)   (clip_by_global_norm)
//
// sgd_momentum_update, attrs momentum, nesterov (int, default 0):
//   chain([clip,] sgd(lr, momentum, nesterov)) = trace(momentum, nesterov), scale(-lr):
//   t'     = g + T(momentum) * t                                    (trace: g + decay * t)
//   u      = nesterov ? g + T(momentum) * t' : t'
//   u      = T(-lr) * u                                             (scale)
//   outputs (apply ? T(param + u) : u, t')
//
// lion_update, attrs b1, b2, weight_decay:
//   chain([clip,] lion(lr, b1, b2, weight_decay, mask)) = scale_by_lion(b1, b2),
//   add_decayed_weights(wd, mask), scale_by_learning_rate(lr):
//   u      = sign(T(1-b1) * g + T(b1) * mu)          (sign keeps -0 and NaN, as podlet's)
//   mu'    = T(1-b2) * g + T(b2) * mu                (update_moment)
//   u      = u + T(wd) * param       (skipped when wd == 0, as add_decayed_weights; a
//                                     masked-out leaf is a node with wd = 0)
//   u      = T(-lr) * u
//   outputs (apply ? T(param + u) : u, mu')
//
// Both are chunked by parallel_for's fixed-size chunks and purely elementwise, so the
// bits do not depend on the thread count.
#include "podlet/prims/optim_common.h"

namespace podlet {
namespace {

using optim::add_first;
using optim::Lane;
using optim::scalar_value;

// The scalars common to both updates, already rounded to T.
struct StepConsts {
  double neg_lr, gnorm, max_norm;
  bool clip;
};

// The clip decision and the rounded lr / norm constants; `prim` names the caller in errors.
StepConsts step_consts(const std::vector<Array>& in, const Attrs& a, const char* prim) {
  const DType t = in[0].dtype();
  const double max_norm = a.f("max_norm", 0.0);
  const double gnorm_raw = scalar_value(in[4]);
  StepConsts c;
  // The trigger compares the norm in its own dtype with max_norm rounded to it (weak typing).
  c.clip = max_norm > 0.0 && !(gnorm_raw < optim::round_to(in[4].dtype(), max_norm, prim));
  c.neg_lr = -optim::round_to(t, scalar_value(in[3]), prim);  // RNE is sign-symmetric: T(-lr) == -T(lr)
  c.gnorm = optim::round_to(t, gnorm_raw, prim);
  c.max_norm = optim::round_to(t, max_norm, prim);
  return c;
}

// ---- sgd_momentum_update ------------------------------------------------------------

// One chunk [b, e), a function of its own so that every pointer is a restrict argument and
// every constant a local (see adamw_chunk): otherwise the loop does not vectorise.
template <class T, bool kClip, bool kNesterov, bool kApply>
void sgd_chunk(const T* __restrict p, const T* __restrict gr, const T* __restrict tr, T* __restrict o,
               T* __restrict to, double momentum_d, const StepConsts& c, int64_t b, int64_t e) {
  using A = acc_t<T>;
  using L = Lane<T>;
  const A momentum = A(momentum_d), neg_lr = A(c.neg_lr), gnorm = A(c.gnorm), max_norm = A(c.max_norm);
  auto R = [](A x) { return L::round(x); };  // an intermediate rounded to T (no-op for f32/f64)
  for (int64_t i = b; i < e; ++i) {
    A g = L::load(gr, i);
    if constexpr (kClip) g = R(R(g / gnorm) * max_norm);
    const A t = R(add_first(g, R(momentum * L::load(tr, i))));
    A u = t;
    if constexpr (kNesterov) u = R(add_first(g, R(momentum * t)));
    u = R(neg_lr * u);
    if constexpr (kApply) L::store(o, i, add_first(L::load(p, i), u));
    else L::store(o, i, u);
    L::store(to, i, t);
  }
}

template <class T, bool kClip, bool kNesterov, bool kApply>
void sgd_loop(const std::vector<Array>& in, std::vector<Array>& out, double momentum, const StepConsts& c) {
  const T* p = in[0].data<T>();
  const T* g = in[1].data<T>();
  const T* tr = in[2].data<T>();
  T* o = out[0].data<T>();
  T* to = out[1].data<T>();
  parallel_for(in[0].size(), kGrain, [&](int64_t b, int64_t e) {
    sgd_chunk<T, kClip, kNesterov, kApply>(p, g, tr, o, to, momentum, c, b, e);
  });
}

template <class T>
void sgd_dispatch(const std::vector<Array>& in, std::vector<Array>& out, double momentum, const StepConsts& c,
                  bool nesterov, bool apply) {
  // Flags as template parameters: no branch in the element loop.
  const int k = (c.clip ? 4 : 0) | (nesterov ? 2 : 0) | (apply ? 1 : 0);
  switch (k) {
    case 0: return sgd_loop<T, false, false, false>(in, out, momentum, c);
    case 1: return sgd_loop<T, false, false, true>(in, out, momentum, c);
    case 2: return sgd_loop<T, false, true, false>(in, out, momentum, c);
    case 3: return sgd_loop<T, false, true, true>(in, out, momentum, c);
    case 4: return sgd_loop<T, true, false, false>(in, out, momentum, c);
    case 5: return sgd_loop<T, true, false, true>(in, out, momentum, c);
    case 6: return sgd_loop<T, true, true, false>(in, out, momentum, c);
    default: return sgd_loop<T, true, true, true>(in, out, momentum, c);
  }
}

// ---- lion_update ----------------------------------------------------------------------

struct LionConsts {
  double one_m_b1, b1, one_m_b2, b2, wd;
};

template <class T, bool kClip, bool kDecay, bool kApply>
void lion_chunk(const T* __restrict p, const T* __restrict gr, const T* __restrict m, T* __restrict o,
                T* __restrict mo, const LionConsts& l, const StepConsts& c, int64_t b, int64_t e) {
  using A = acc_t<T>;
  using L = Lane<T>;
  const A one_m_b1 = A(l.one_m_b1), b1 = A(l.b1), one_m_b2 = A(l.one_m_b2), b2 = A(l.b2), wd = A(l.wd);
  const A neg_lr = A(c.neg_lr), gnorm = A(c.gnorm), max_norm = A(c.max_norm);
  auto R = [](A x) { return L::round(x); };
  for (int64_t i = b; i < e; ++i) {
    A g = L::load(gr, i);
    if constexpr (kClip) g = R(R(g / gnorm) * max_norm);
    const A mi = L::load(m, i);
    const A x = R(add_first(R(one_m_b1 * g), R(b1 * mi)));
    // podlet's sign: +-1, or x itself for +-0 and NaN (exact in T, no rounding needed).
    A u = x > A(0) ? A(1) : (x < A(0) ? A(-1) : x);
    if constexpr (kDecay) u = R(add_first(u, R(wd * L::load(p, i))));
    u = R(neg_lr * u);
    if constexpr (kApply) L::store(o, i, add_first(L::load(p, i), u));
    else L::store(o, i, u);
    L::store(mo, i, add_first(R(one_m_b2 * g), R(b2 * mi)));
  }
}

template <class T, bool kClip, bool kDecay, bool kApply>
void lion_loop(const std::vector<Array>& in, std::vector<Array>& out, const LionConsts& l, const StepConsts& c) {
  const T* p = in[0].data<T>();
  const T* g = in[1].data<T>();
  const T* m = in[2].data<T>();
  T* o = out[0].data<T>();
  T* mo = out[1].data<T>();
  parallel_for(in[0].size(), kGrain, [&](int64_t b, int64_t e) {
    lion_chunk<T, kClip, kDecay, kApply>(p, g, m, o, mo, l, c, b, e);
  });
}

template <class T>
void lion_dispatch(const std::vector<Array>& in, std::vector<Array>& out, const LionConsts& l, const StepConsts& c,
                   bool decay, bool apply) {
  const int k = (c.clip ? 4 : 0) | (decay ? 2 : 0) | (apply ? 1 : 0);
  switch (k) {
    case 0: return lion_loop<T, false, false, false>(in, out, l, c);
    case 1: return lion_loop<T, false, false, true>(in, out, l, c);
    case 2: return lion_loop<T, false, true, false>(in, out, l, c);
    case 3: return lion_loop<T, false, true, true>(in, out, l, c);
    case 4: return lion_loop<T, true, false, false>(in, out, l, c);
    case 5: return lion_loop<T, true, false, true>(in, out, l, c);
    case 6: return lion_loop<T, true, true, false>(in, out, l, c);
    default: return lion_loop<T, true, true, true>(in, out, l, c);
  }
}

// ---- shared rules -----------------------------------------------------------------------

// param, grad and the state array share the param's float dtype and shape; lr and gnorm
// are 0-d floats. `state` names input 2 in the errors (trace for SGD, mu for Lion).
std::vector<AVal> update_shape(const std::vector<AVal>& in, const char* prim, const char* state) {
  check_arity(in, 5);
  const char* names[] = {"param", "grad", state, "lr", "gnorm"};
  const AVal& p = in[0];
  if (!is_float(p.dtype))
    throw DTypeError(fmt(prim, ": param must be a float array, got ", dtype_name(p.dtype)));
  for (int k : {1, 2}) {
    if (in[k].dtype != p.dtype)
      throw DTypeError(fmt(prim, ": ", names[k], " must have the param dtype ", dtype_name(p.dtype), ", got ",
                           dtype_name(in[k].dtype)));
    if (in[k].shape != p.shape)
      throw ShapeError(fmt(prim, ": ", names[k], " must have the param shape ", shape_str(p.shape), ", got ",
                           shape_str(in[k].shape)));
  }
  for (int k : {3, 4}) {
    if (!in[k].shape.empty())
      throw ShapeError(fmt(prim, ": ", names[k], " must be a 0-d scalar, got shape ", shape_str(in[k].shape)));
    if (!is_float(in[k].dtype))
      throw DTypeError(fmt(prim, ": ", names[k], " must be a float scalar, got ", dtype_name(in[k].dtype)));
  }
  return {p, p};
}

// vmap: lr and gnorm (inputs 3, 4) are the step scalars.
std::vector<int> update_batch(Graph& g, const BatchCtx& c, const std::vector<int>& in, const std::vector<int>& bd,
                              std::vector<int>& ob) {
  return optim::update_batch(g, c, in, bd, ob, 3, 2);
}

template <class F>
void by_dtype(DType t, const char* prim, F&& f) {
  switch (t) {
    case DType::f32: return f(float());
    case DType::bf16: return f(bf16());
    case DType::f64: return f(double());
    default: throw DTypeError(fmt(prim, ": unsupported dtype ", dtype_name(t)));
  }
}

void sgd_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
  const DType t = in[0].dtype();
  const StepConsts c = step_consts(in, a, "sgd_momentum_update");
  const double momentum = optim::round_to(t, a.f("momentum"), "sgd_momentum_update");
  const bool nesterov = a.i("nesterov", 0) != 0, apply = a.i("apply", 1) != 0;
  by_dtype(t, "sgd_momentum_update", [&](auto tag) {
    sgd_dispatch<decltype(tag)>(in, out, momentum, c, nesterov, apply);
  });
}

void lion_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
  const DType t = in[0].dtype();
  const StepConsts c = step_consts(in, a, "lion_update");
  const double b1 = a.f("b1"), b2 = a.f("b2"), wd = a.f("weight_decay", 0.0);
  auto r = [&](double x) { return optim::round_to(t, x, "lion_update"); };
  const LionConsts l{r(1.0 - b1), r(b1), r(1.0 - b2), r(b2), r(wd)};
  const bool apply = a.i("apply", 1) != 0;
  by_dtype(t, "lion_update", [&](auto tag) { lion_dispatch<decltype(tag)>(in, out, l, c, wd != 0.0, apply); });
}

// FLOPs per element whether or not a branch runs (as adamw_flops): clip 2, trace 2,
// Nesterov 2, lr 1, apply 1 / clip 2, interpolation 3, sign 1, moment 3, decay 2, lr 1,
// apply 1: the graph's count for the chain each replaces.
double sgd_flops(const std::vector<AVal>& in, const std::vector<AVal>&, const Attrs& a) {
  const double per = 5.0 + (a.i("nesterov", 0) != 0 ? 2.0 : 0.0) + (a.i("apply", 1) != 0 ? 1.0 : 0.0);
  return per * double(in.at(0).size());
}

double lion_flops(const std::vector<AVal>& in, const std::vector<AVal>&, const Attrs& a) {
  const double per = 12.0 + (a.i("apply", 1) != 0 ? 1.0 : 0.0);
  return per * double(in.at(0).size());
}

}  // namespace

static Register reg_sgd_momentum_update("sgd_momentum_update", batching::looped(PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) {
      if (!a.has("momentum")) throw ValueError("sgd_momentum_update: needs the attr momentum");
      return update_shape(in, "sgd_momentum_update", "trace");
    },
    .kernel = sgd_kernel, .vjp = nullptr, .flops = sgd_flops, .batch = update_batch, .zero_grad = true}));

static Register reg_lion_update("lion_update", batching::looped(PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) {
      if (!a.has("b1") || !a.has("b2")) throw ValueError("lion_update: needs the attrs b1 and b2");
      return update_shape(in, "lion_update", "mu");
    },
    .kernel = lion_kernel, .vjp = nullptr, .flops = lion_flops, .batch = update_batch, .zero_grad = true}));

}  // namespace podlet
