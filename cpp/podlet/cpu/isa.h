// CPU features and the active kernel ISA.
//
// The features are read once (cpuid through __builtin_cpu_supports, which also checks
// that the OS saves the wide registers). The active ISA is the best one the host has,
// lowered by the environment variable PODLET_ISA=ref|avx2|avx512|avx512bf16|amx or by
// set_isa(). Asking for more than the host has is not an error: it clamps down to the
// best available ISA below the request, with a one-time warning on stderr.
//
// Kernels dispatch on active_isa() (best first, down to ref); `ref` is plain C++ and the
// oracle every faster path is tested against.
//
// amx = avx512bf16 + the AMX-TILE / AMX-BF16 matrix tiles (Sapphire Rapids and later).
// Linux hands out the tile register state only on request (arch_prctl
// ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA), made once at detection; a refusal is
// logged once on stderr and the host counts as avx512bf16.
#pragma once
#include <string>

namespace podlet::cpu {

enum class Isa { ref = 0, avx2, avx512, avx512bf16, amx };

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false, avx512_bf16 = false;
  bool amx_tile = false, amx_bf16 = false;  // cpuid leaf 7 EDX bits 24 and 22
  bool amx_os = false;                      // XCR0 enables the tile state (bits 17, 18)
  bool amx_permitted = false;               // Linux granted XTILEDATA to this process
  std::string amx_note;                     // why amx is not usable, when the CPU has it
  Isa best = Isa::ref;  // the best ISA the host supports
  // Which CPU (cpuid leaves 0, 1 and 0x80000002-4; family and model decoded as Linux's
  // /proc/cpuinfo does): benchmark figures name their host with it, since the host kind
  // varies (Zen 4 is family 25, Zen 5 family 26; a VM may report a generic brand string).
  std::string vendor, brand;
  int family = 0, model = 0, stepping = 0;
};

// Detected once, on first use.
const CpuFeatures& cpu_features();
// Whether the host can run kernels of ISA `isa` (ref: always).
bool host_supports(Isa isa);

// The ISA kernels use now.
Isa active_isa();
// Selects the ISA for kernels (tests, benchmarks); clamps to the host like PODLET_ISA.
// Not meant to be called while kernels run on other threads.
void set_isa(Isa isa);

// Whether bf16 x bf16 GEMMs (dot_general) and direct convolutions use the bf16 dot
// instruction (vdpbf16ps) when the active ISA has it, rather than widening the operands to
// f32 as they are packed and running the f32 FMAs (the avx512 kernels, other bits). AMD's
// Zen 4 / Zen 5 run vdpbf16ps at twice the f32 FMA's FLOP rate; an Intel Xeon Emerald
// Rapids (its AMX tiles hidden by the VM) at half of it, where bf16 GEMMs ran 1.5x faster
// on the FMAs (bench/peak.py shows both loops). Default: on unless the vendor is
// GenuineIntel; PODLET_BF16_DOT=0|1 or set_bf16_dot() overrides (a fixed choice per
// process, never measured at start-up: same seed, same bits on a host). Winograd
// convolutions (measured faster on vdpbf16ps than direct ones on the FMAs there too), the
// grayscale stem and the fused attention's pair kernel keep vdpbf16ps either way.
bool bf16_dot_enabled();
void set_bf16_dot(bool on);
// bf16_dot_enabled() and the active ISA has vdpbf16ps (avx512bf16 or amx).
bool use_bf16_dot();

const char* isa_name(Isa isa);
// "ref" | "avx2" | "avx512" | "avx512bf16" | "amx"; throws ValueError on anything else.
Isa isa_from_name(const std::string& name);

}  // namespace podlet::cpu
