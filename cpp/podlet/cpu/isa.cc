// CPU feature detection and ISA selection (see isa.h). Compiled for baseline x86-64:
// nothing here executes an instruction the host may lack.
#include "podlet/cpu/isa.h"
#include "podlet/error.h"
#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace podlet::cpu {
namespace {

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.f16c = __builtin_cpu_supports("f16c");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  f.avx512_bf16 = __builtin_cpu_supports("avx512bf16");
#endif
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  const bool avx512 = avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
  f.best = avx512 && f.avx512_bf16 ? Isa::avx512bf16 : avx512 ? Isa::avx512 : avx2 ? Isa::avx2 : Isa::ref;
  return f;
}

// The highest ISA <= want that the host has (the ISAs are ordered and nested).
Isa clamp(Isa want) {
  const Isa best = cpu_features().best;
  if (int(want) <= int(best)) return want;
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true))
    std::fprintf(stderr, "podlet: ISA '%s' requested but this CPU supports up to '%s'; using '%s'\n", isa_name(want),
                 isa_name(best), isa_name(best));
  return best;
}

Isa initial_isa() {
  const char* e = std::getenv("PODLET_ISA");
  if (!e || !*e) return cpu_features().best;
  try {
    return clamp(isa_from_name(e));
  } catch (const Error&) {
    std::fprintf(stderr, "podlet: ignoring PODLET_ISA='%s' (expected ref, avx2, avx512 or avx512bf16)\n", e);
    return cpu_features().best;
  }
}

std::atomic<int>& active() {
  static std::atomic<int> a{int(initial_isa())};
  return a;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

bool host_supports(Isa isa) { return int(isa) <= int(cpu_features().best); }

Isa active_isa() { return Isa(active().load(std::memory_order_relaxed)); }

void set_isa(Isa isa) { active().store(int(clamp(isa)), std::memory_order_relaxed); }

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::ref: return "ref";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
    case Isa::avx512bf16: return "avx512bf16";
  }
  return "?";
}

Isa isa_from_name(const std::string& name) {
  for (Isa i : {Isa::ref, Isa::avx2, Isa::avx512, Isa::avx512bf16})
    if (name == isa_name(i)) return i;
  throw ValueError(fmt("unknown ISA '", name, "' (expected ref, avx2, avx512 or avx512bf16)"));
}

}  // namespace podlet::cpu
