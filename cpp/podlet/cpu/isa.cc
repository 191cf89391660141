// CPU feature detection and ISA selection (see isa.h). Compiled for baseline x86-64:
// nothing here executes an instruction the host may lack.
#include "podlet/cpu/isa.h"
#include "podlet/env.h"
#include "podlet/error.h"
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace podlet::cpu {
namespace {

#if defined(__x86_64__)
// XCR0 (which register states the OS saves); only called when CPUID says OSXSAVE.
uint64_t xcr0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

// AMX needs the CPU (cpuid), the OS (XCR0) and, on Linux >= 5.16, this process's
// request for the 8 KiB tile-data state; without it the first tile instruction faults.
void detect_amx(CpuFeatures& f) {
  unsigned a, b, c, d;
  if (__get_cpuid_max(0, nullptr) < 7) return;
  __cpuid_count(7, 0, a, b, c, d);
  f.amx_bf16 = d & (1u << 22);
  f.amx_tile = d & (1u << 24);
  if (!(f.amx_tile && f.amx_bf16)) return;
  __cpuid(1, a, b, c, d);
  const bool osxsave = c & (1u << 27);
  f.amx_os = osxsave && (xcr0() & (3ull << 17)) == (3ull << 17);
  if (!f.amx_os) {
    f.amx_note = "the OS does not enable the AMX tile state (XCR0 bits 17-18)";
    return;
  }
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0) {
    f.amx_permitted = true;
  } else {
    const int err = errno;
    f.amx_note = std::string("Linux refused the AMX tile-data permission (arch_prctl ARCH_REQ_XCOMP_PERM: ") +
                 std::strerror(err) +
                 (err == ENOSPC ? "; a thread's signal stack (sigaltstack) is too small for the tile state)" : ")");
  }
}
#endif

#if defined(__x86_64__)
// vendor, brand, family, model, stepping (isa.h).
void detect_identity(CpuFeatures& f) {
  unsigned a, b, c, d;
  if (__get_cpuid(0, &a, &b, &c, &d)) {
    char v[13] = {};
    std::memcpy(v, &b, 4), std::memcpy(v + 4, &d, 4), std::memcpy(v + 8, &c, 4);
    f.vendor = v;
  }
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    const int base_family = int((a >> 8) & 0xf), base_model = int((a >> 4) & 0xf);
    f.family = base_family == 0xf ? base_family + int((a >> 20) & 0xff) : base_family;
    f.model = f.family >= 6 ? base_model + (int((a >> 16) & 0xf) << 4) : base_model;
    f.stepping = int(a & 0xf);
  }
  if (__get_cpuid_max(0x80000000u, nullptr) >= 0x80000004u) {
    char s[49] = {};
    for (unsigned i = 0; i < 3; ++i) {
      __get_cpuid(0x80000002u + i, &a, &b, &c, &d);
      std::memcpy(s + 16 * i, &a, 4), std::memcpy(s + 16 * i + 4, &b, 4);
      std::memcpy(s + 16 * i + 8, &c, 4), std::memcpy(s + 16 * i + 12, &d, 4);
    }
    std::string t = s;  // padded with spaces on some CPUs
    const size_t lo = t.find_first_not_of(' '), hi = t.find_last_not_of(' ');
    f.brand = lo == std::string::npos ? "" : t.substr(lo, hi - lo + 1);
  }
}
#endif

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__)
  detect_identity(f);
#endif
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
#if defined(__x86_64__)
  detect_amx(f);
#endif
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  const bool avx512 = avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
  const bool bf16 = avx512 && f.avx512_bf16;
  f.best = bf16 && f.amx_permitted ? Isa::amx
           : bf16                  ? Isa::avx512bf16
           : avx512                ? Isa::avx512
           : avx2                  ? Isa::avx2
                                   : Isa::ref;
  if (f.amx_tile && f.amx_bf16 && f.best != Isa::amx) {
    if (f.amx_note.empty()) f.amx_note = "AMX present without AVX512_BF16";
    std::fprintf(stderr, "podlet: not using the AMX tiles: %s; kernels use '%s'\n", f.amx_note.c_str(),
                 isa_name(f.best));
  }
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
    std::fprintf(stderr, "podlet: ignoring PODLET_ISA='%s' (expected ref, avx2, avx512, avx512bf16 or amx)\n", e);
    return cpu_features().best;
  }
}

std::atomic<int>& active() {
  static std::atomic<int> a{int(initial_isa())};
  return a;
}

// PODLET_BF16_DOT, else the vendor rule (isa.h).
std::atomic<bool>& bf16_dot_flag() {
  static std::atomic<bool> on{env_flag("PODLET_BF16_DOT", cpu_features().vendor != "GenuineIntel")};
  return on;
}

}  // namespace

bool bf16_dot_enabled() { return bf16_dot_flag().load(std::memory_order_relaxed); }
void set_bf16_dot(bool on) { bf16_dot_flag().store(on, std::memory_order_relaxed); }
bool use_bf16_dot() { return int(active_isa()) >= int(Isa::avx512bf16) && bf16_dot_enabled(); }

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
    case Isa::amx: return "amx";
  }
  return "?";
}

Isa isa_from_name(const std::string& name) {
  for (Isa i : {Isa::ref, Isa::avx2, Isa::avx512, Isa::avx512bf16, Isa::amx})
    if (name == isa_name(i)) return i;
  throw ValueError(fmt("unknown ISA '", name, "' (expected ref, avx2, avx512, avx512bf16 or amx)"));
}

}  // namespace podlet::cpu
