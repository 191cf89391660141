// Fused optimizer updates: one pass over the parameters instead of ~20 elementwise ops.
//
// adamw_update: param, grad, mu, nu (same shape, same float dtype T), then four 0-d float
//   scalars of any float dtype: lr, gnorm, bc1, bc2 (inputs, so a traced schedule, a
//   traced global norm and the step-dependent bias corrections work under jit).
//   grad may also be bfloat16 for a float32 / float64 param (read widened, exactly).
//   attrs: b1, b2, eps, eps_root, weight_decay (floats); max_norm (float, <= 0: no
//   clipping; gnorm is then ignored); apply (int, default 1).
//   outputs: (new_param | update, new_mu, new_nu), all of dtype T; zero_grad.
//   optional EMA of the new parameter (needs apply = 1): a 9th input `ema` (param's shape
//   and dtype) and attrs ema_c_old, ema_c_new (the two coefficients, exactly representable
//   in T: they are the constants the unfused graph held); a 4th output
//     new_ema = T(T(ema_c_old * ema) + T(ema_c_new * new_param))
//   i.e. the seed's tree_map(lambda o, n: d * o + (1 - d) * n, ema, new_params) rounded
//   op by op like the mul, mul, add it replaces. The graph pass ir/optim_fusion.cc
//   builds this form from the traced graph; nothing else needs to.
//   attr ema_new_first (int, default 0): the add's operand order, c_new * new_param first.
//   It decides which NaN the add returns when both operands are NaN: the first one's, as
//   x86's addps and podlet's one-op add on its inline path do (explicitly here, since a
//   compiler may commute a + b). The apply add is param + u, apply_updates' order.
//
// Arithmetic: exactly the op sequence of optax 0.2.8's
//   chain(clip_by_global_norm(max_norm), adamw(lr, b1, b2, eps, eps_root, weight_decay))
// as podlet.optim executes it op by op, with every intermediate rounded to T (bf16:
// computed in f32 and rounded after each op, like podlet's elementwise kernels and
// XLA's CPU bf16 lowering); Python-float constants are rounded to T first (weak typing):
//   g      = gnorm < max_norm ? grad : (grad / T(gnorm)) * T(max_norm)     (clip_fn)
//   mu'    = T(1-b1) * g + T(b1) * mu                                       (update_moment)
//   nu'    = T(1-b2) * (g*g) + T(b2) * nu
//   u      = (mu' / T(bc1)) / (sqrt(nu' / T(bc2) + T(eps_root)) + T(eps))   (bias_correction)
//   u      = u + T(wd) * param           (skipped when wd == 0, as add_decayed_weights)
//   u      = T(-lr) * u                                                     (scale)
//   out[0] = apply ? T(param + u) : u                                       (apply_updates)
// so the result is bit-identical to the unfused chain. The clip is (grad / gnorm) *
// max_norm, not grad * (max_norm / gnorm): the latter differs by up to an ulp.
// bc1 = 1 - b1**count and bc2 are computed by the caller in f32, as optax does.
#include "podlet/prims/optim_common.h"
#include <cmath>
#include "podlet/cpu/isa.h"
#include "podlet/kernels/optim.h"
#include "podlet/kernels/optim_adamw_loops.h"

namespace podlet {
namespace {

using optim::scalar_value;

double round_to(DType d, double x) { return optim::round_to(d, x, "adamw_update"); }

using Out = kernels::AdamWOut;

bool has_ema(const Attrs& a) { return a.has("ema_c_old"); }

std::vector<AVal> adamw_shape(const std::vector<AVal>& in, const Attrs& a) {
  const bool ema = has_ema(a);
  if (ema != a.has("ema_c_new"))
    throw ValueError("adamw_update: the EMA needs both attrs ema_c_old and ema_c_new");
  if (ema && a.i("apply", 1) == 0)
    throw ValueError("adamw_update: an EMA (ema_c_old, ema_c_new) averages the new parameter and needs apply=1");
  check_arity(in, ema ? 9 : 8);
  static const char* names[] = {"param", "grad", "mu", "nu", "lr", "gnorm", "bc1", "bc2", "ema"};
  const AVal& p = in[0];
  if (!is_float(p.dtype))
    throw DTypeError(fmt("adamw_update: param must be a float array, got ", dtype_name(p.dtype)));
  for (int k : {1, 2, 3, 8}) {
    if (k == 8 && !ema) break;
    // A bfloat16 grad of a wider param is read widened (exactly): the convert_element_type
    // that the graph pass ir/optim_fusion.cc folds in.
    const bool widened = k == 1 && in[k].dtype == DType::bf16 && p.dtype != DType::bf16;
    if (in[k].dtype != p.dtype && !widened)
      throw DTypeError(fmt("adamw_update: ", names[k], " must have the param dtype ", dtype_name(p.dtype),
                           k == 1 && p.dtype != DType::bf16 ? " (or bfloat16)" : "", ", got ", dtype_name(in[k].dtype)));
    if (in[k].shape != p.shape)
      throw ShapeError(fmt("adamw_update: ", names[k], " must have the param shape ", shape_str(p.shape),
                           ", got ", shape_str(in[k].shape)));
  }
  for (int k = 4; k < 8; ++k) {
    if (!in[k].shape.empty())
      throw ShapeError(fmt("adamw_update: ", names[k], " must be a 0-d scalar, got shape ", shape_str(in[k].shape)));
    if (!is_float(in[k].dtype))
      throw DTypeError(fmt("adamw_update: ", names[k], " must be a float scalar, got ", dtype_name(in[k].dtype)));
  }
  if (ema) return {p, p, p, p};
  return {p, p, p};
}

void adamw_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
  const DType t = in[0].dtype();
  const double b1 = a.f("b1"), b2 = a.f("b2"), wd = a.f("weight_decay", 0.0), max_norm = a.f("max_norm", 0.0);
  const bool clip_on = max_norm > 0.0;
  const double gnorm_raw = scalar_value(in[5]);
  // The trigger compares the norm in its own dtype with max_norm rounded to it (weak typing).
  const bool clip = clip_on && !(gnorm_raw < round_to(in[5].dtype(), max_norm));
  kernels::AdamWStep c{};
  c.dtype = t;
  c.g16 = in[1].dtype() == DType::bf16 && t != DType::bf16;
  c.one_m_b1 = round_to(t, 1.0 - b1);
  c.b1 = round_to(t, b1);
  c.one_m_b2 = round_to(t, 1.0 - b2);
  c.b2 = round_to(t, b2);
  c.eps = round_to(t, a.f("eps"));
  c.eps_root = round_to(t, a.f("eps_root", 0.0));
  c.wd = round_to(t, wd);
  c.neg_lr = -round_to(t, scalar_value(in[4]));  // RNE is sign-symmetric: T(-lr) == -T(lr)
  c.bc1 = round_to(t, scalar_value(in[6]));
  c.bc2 = round_to(t, scalar_value(in[7]));
  c.gnorm = round_to(t, gnorm_raw);
  c.max_norm = round_to(t, max_norm);
  // Rounding is a no-op for the graph constants the pass copies in (T values already).
  c.ema_c_old = round_to(t, a.f("ema_c_old", 0.0));
  c.ema_c_new = round_to(t, a.f("ema_c_new", 0.0));
  c.clip = clip;
  c.decay = wd != 0.0;
  c.out = !has_ema(a)                   ? (a.i("apply", 1) != 0 ? Out::kApply : Out::kUpdate)
          : a.i("ema_new_first", 0) != 0 ? Out::kApplyEmaNewFirst
                                         : Out::kApplyEma;
  const bool ema = c.out == Out::kApplyEma || c.out == Out::kApplyEmaNewFirst;
  c.p = in[0].raw();
  c.g = in[1].raw();
  c.m = in[2].raw();
  c.v = in[3].raw();
  c.ema = ema ? in[8].raw() : nullptr;
  c.o = out[0].raw();
  c.mo = out[1].raw();
  c.vo = out[2].raw();
  c.eo = ema ? out[3].raw() : nullptr;
  if (t != DType::f32 && t != DType::bf16 && t != DType::f64)
    throw DTypeError(fmt("adamw_update: unsupported dtype ", dtype_name(t)));
  // Fixed-size chunks: the bits do not depend on the thread count. Outputs never alias
  // inputs (the executor gives each output its own buffer).
  const bool avx2 = int(cpu::active_isa()) >= int(cpu::Isa::avx2);
  auto loop = [&](int64_t b, int64_t e) {
    if (avx2) kernels::adamw_avx2(c, b, e);
    else kernels::adamw_loop(c, b, e);
  };
  if (t != DType::f32) return parallel_for(in[0].size(), kGrain, loop);
  // The AVX-512 loop (kernels/optim.h): same ops, same bits. Outputs of 256 KB or more are
  // streamed: ResNet-34's 21.3M-parameter update 18-19 -> 11-12 ms (4 MB and up only:
  // 12.5-16 ms; alternating processes, 2 threads).
  const kernels::AdamWF32 f{static_cast<const float*>(c.p), c.g16 ? nullptr : static_cast<const float*>(c.g),
                            c.g16 ? static_cast<const uint16_t*>(c.g) : nullptr, static_cast<const float*>(c.m),
                            static_cast<const float*>(c.v), static_cast<const float*>(c.ema),
                            static_cast<float*>(c.o), static_cast<float*>(c.mo), static_cast<float*>(c.vo),
                            static_cast<float*>(c.eo), float(c.one_m_b1), float(c.b1), float(c.one_m_b2),
                            float(c.b2), float(c.eps), float(c.eps_root), float(c.wd), float(c.neg_lr),
                            float(c.bc1), float(c.bc2), float(c.gnorm), float(c.max_norm), float(c.ema_c_old),
                            float(c.ema_c_new), c.clip, c.decay, c.out, in[0].size() * 4 >= (int64_t(256) << 10)};
  parallel_for(in[0].size(), kGrain, [&](int64_t b, int64_t e) {
    if (!kernels::adamw_f32(f, b, e)) loop(b, e);
  });
}

// clip 2 + mu 3 + nu 4 + bias correction 2 + sqrt/add/add/div 4 + decay 2 + lr 1 (whether
// or not they happen: a count per element, not per branch), + apply 1, + EMA 3 (mul, mul,
// add). So the graph pass that folds apply_updates' add and the EMA's three elementwise
// ops into this node keeps the graph's FLOP total.
double adamw_flops(const std::vector<AVal>& in, const std::vector<AVal>&, const Attrs& a) {
  const double per = 18.0 + (a.i("apply", 1) != 0 ? 1.0 : 0.0) + (has_ema(a) ? 3.0 : 0.0);
  return per * double(in.at(0).size());
}

// vmap: lr, gnorm, bc1 and bc2 (inputs 4-7) are the step scalars (optim_common.h).
std::vector<int> adamw_batch(Graph& g, const BatchCtx& c, const std::vector<int>& in, const std::vector<int>& bd,
                             std::vector<int>& ob) {
  return optim::update_batch(g, c, in, bd, ob, 4, 4);
}

}  // namespace

static Register reg_adamw_update("adamw_update", batching::looped(PrimDef{
    .shape = adamw_shape, .kernel = adamw_kernel, .vjp = nullptr, .flops = adamw_flops, .batch = adamw_batch,
    .zero_grad = true}));

}  // namespace podlet
