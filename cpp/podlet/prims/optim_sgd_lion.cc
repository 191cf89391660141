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
// The element loops are kernels/optim_sgd_lion_loops.h, compiled here (the `ref` path) and
// for AVX2 (kernels/optim_sgd_lion_avx2.cc), with the same bits.
#include "podlet/prims/optim_common.h"
#include "podlet/cpu/isa.h"
#include "podlet/kernels/optim_sgd_lion_loops.h"

namespace podlet {
namespace {

using optim::scalar_value;

// The lr / norm constants rounded to T and the clip decision, into `s` (SgdStep or
// LionStep); `prim` names the caller in errors.
template <class Step>
void step_consts(const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a, const char* prim, Step& s) {
  const DType t = in[0].dtype();
  const double max_norm = a.f("max_norm", 0.0);
  const double gnorm_raw = scalar_value(in[4]);
  // The trigger compares the norm in its own dtype with max_norm rounded to it (weak typing).
  s.clip = max_norm > 0.0 && !(gnorm_raw < optim::round_to(in[4].dtype(), max_norm, prim));
  s.neg_lr = -optim::round_to(t, scalar_value(in[3]), prim);  // RNE is sign-symmetric: T(-lr) == -T(lr)
  s.gnorm = optim::round_to(t, gnorm_raw, prim);
  s.max_norm = optim::round_to(t, max_norm, prim);
  s.apply = a.i("apply", 1) != 0;
  s.buf = kernels::UpdateBuffers{t, in[0].raw(), in[1].raw(), in[2].raw(), out[0].raw(), out[1].raw()};
}

bool use_avx2() { return int(cpu::active_isa()) >= int(cpu::Isa::avx2); }

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

// Fixed-size chunks (parallel_for) of an elementwise loop: the bits do not depend on the
// thread count. Outputs never alias inputs (the executor gives each output its own buffer).
void sgd_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
  const DType t = in[0].dtype();
  kernels::SgdStep s{};
  step_consts(in, out, a, "sgd_momentum_update", s);
  s.momentum = optim::round_to(t, a.f("momentum"), "sgd_momentum_update");
  s.nesterov = a.i("nesterov", 0) != 0;
  const bool avx2 = use_avx2();
  parallel_for(in[0].size(), kGrain, [&](int64_t b, int64_t e) {
    if (avx2) kernels::sgd_momentum_avx2(s, b, e);
    else kernels::sgd_momentum_loop(s, b, e);
  });
}

void lion_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
  const DType t = in[0].dtype();
  kernels::LionStep s{};
  step_consts(in, out, a, "lion_update", s);
  const double b1 = a.f("b1"), b2 = a.f("b2"), wd = a.f("weight_decay", 0.0);
  auto r = [&](double x) { return optim::round_to(t, x, "lion_update"); };
  s.one_m_b1 = r(1.0 - b1);
  s.b1 = r(b1);
  s.one_m_b2 = r(1.0 - b2);
  s.b2 = r(b2);
  s.wd = r(wd);
  s.decay = wd != 0.0;
  const bool avx2 = use_avx2();
  parallel_for(in[0].size(), kGrain, [&](int64_t b, int64_t e) {
    if (avx2) kernels::lion_avx2(s, b, e);
    else kernels::lion_loop(s, b, e);
  });
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
