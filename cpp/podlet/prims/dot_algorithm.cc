// The bf16 dot algorithms (dot_algorithm.h): operand splits, passes, combination.
#include "podlet/prims/dot_algorithm.h"
#include <cmath>
#include <memory>
#include <vector>
#include "podlet/error.h"
#include "podlet/kernels/convert.h"
#include "podlet/parallel.h"

namespace podlet {
namespace {

constexpr int64_t kSplitGrain = 1 << 14;  // elements per parallel chunk (elementwise: any chunking gives the same bits)

int components(DotAlgorithm alg) { return alg == DotAlgorithm::bf16_6x ? 3 : alg == DotAlgorithm::bf16_3x ? 2 : 1; }

// The bf16 components of one operand, largest first: an f32 operand x splits into
// c[0] = bf16(x), c[1] = bf16(x - c[0]), c[2] = bf16(x - c[0] - c[1]) (each remainder is
// exact in f32); a bf16 operand is its own c[0], its other components are zeros.
struct Split {
  std::vector<std::unique_ptr<bf16[]>> parts;  // owned components (none when c[0] is the operand)
  std::vector<bf16> zeros;
  std::vector<const void*> c;
};

Split split_operand(const DotOperand& op, int n) {
  Split s;
  if (op.dtype == DType::bf16) {
    s.c.push_back(op.data);
    if (n > 1) s.zeros.assign(size_t(op.size), bf16(0.0f));
    for (int k = 1; k < n; ++k) s.c.push_back(s.zeros.data());
    return s;
  }
  // Uninitialised (every element is written below): zero-filled vectors, copied n times
  // by assign, were 40% of a bf16-pass product of ViT's size on an AMX host.
  for (int k = 0; k < n; ++k) s.parts.emplace_back(new bf16[static_cast<size_t>(op.size)]);
  const float* x = static_cast<const float*>(op.data);
  parallel_for(op.size, kSplitGrain, [&](int64_t b, int64_t e) {
    // One component is convert_element_type's rounding (the same bits), 16 lanes at a time.
    if (n == 1 && kernels::convert_f32_bf16(x, reinterpret_cast<uint16_t*>(s.parts[0].get()), b, e)) return;
    for (int64_t i = b; i < e; ++i) {
      float r = x[i];
      for (int k = 0; k < n; ++k) {
        const bf16 h(r);
        s.parts[k][i] = h;
        r -= float(h);
      }
    }
  });
  for (auto& p : s.parts) s.c.push_back(p.get());
  return s;
}

}  // namespace

DotAlgorithm dot_algorithm_from_name(const std::string& s) {
  if (s.empty()) return DotAlgorithm::none;
  if (s == "bf16") return DotAlgorithm::bf16;
  if (s == "bf16_3x") return DotAlgorithm::bf16_3x;
  if (s == "bf16_6x") return DotAlgorithm::bf16_6x;
  throw ValueError(fmt("algorithm must be '', 'bf16', 'bf16_3x' or 'bf16_6x', got '", s, "'"));
}

bool dot_algorithm_applies(DotAlgorithm alg, DType a, DType b, DType out) {
  auto narrow = [](DType d) { return d == DType::f32 || d == DType::bf16; };
  return alg != DotAlgorithm::none && narrow(a) && narrow(b) && out != DType::f64 &&
         !(a == DType::bf16 && b == DType::bf16);
}

void run_dot_algorithm(DotAlgorithm alg, const DotOperand& a, const DotOperand& b, DType out_dtype, void* out,
                       int64_t out_size, const DotPass& pass) {
  const int n = components(alg);
  const Split sa = split_operand(a, n), sb = split_operand(b, n);
  if (n == 1) return pass(DType::bf16, sa.c[0], DType::bf16, sb.c[0], out_dtype, out);
  // The small products, in XLA's order (RewriteF32ToBF16X3 / RewriteF32ToBF16X6), as
  // (component of a, component of b); hi*hi comes last.
  static const std::vector<std::pair<int, int>> x3 = {{1, 0}, {0, 1}};
  static const std::vector<std::pair<int, int>> x6 = {{1, 1}, {0, 2}, {2, 0}, {0, 1}, {1, 0}};
  const auto& small = n == 2 ? x3 : x6;
  std::vector<float> acc(static_cast<size_t>(out_size)), t(static_cast<size_t>(out_size));
  pass(DType::bf16, sa.c[small[0].first], DType::bf16, sb.c[small[0].second], DType::f32, acc.data());
  for (size_t k = 1; k < small.size(); ++k) {
    pass(DType::bf16, sa.c[small[k].first], DType::bf16, sb.c[small[k].second], DType::f32, t.data());
    parallel_for(out_size, kSplitGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) acc[i] = acc[i] + t[i];
    });
  }
  // A NaN among the small terms only (hi = 1, lo = 0 times an infinite hi) is dropped.
  float* hh = out_dtype == DType::f32 ? static_cast<float*>(out) : t.data();
  pass(DType::bf16, sa.c[0], DType::bf16, sb.c[0], DType::f32, hh);
  parallel_for(out_size, kSplitGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float small_sum = std::isnan(acc[i]) ? 0.0f : acc[i];
      const float r = small_sum + hh[i];
      if (out_dtype == DType::f32) static_cast<float*>(out)[i] = r;
      else static_cast<bf16*>(out)[i] = bf16(r);
    }
  });
}

}  // namespace podlet
