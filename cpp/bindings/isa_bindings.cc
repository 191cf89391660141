// podlet._core CPU / ISA queries: cpu_info() and set_isa(name). module.cc calls
// bind_isa(m) after the error translator is registered (a bad name -> PodletError).
#include <pybind11/pybind11.h>

#include "podlet/cpu/isa.h"
#include "podlet/prims/fused_jit.h"
#include "podlet/kernels/conv_winograd.h"
#include "podlet/kernels/attention.h"
#include "podlet/kernels/conv.h"
#include "podlet/kernels/gemm.h"
#include "podlet/kernels/norm.h"

namespace py = pybind11;

void bind_isa(py::module_& m) {
  using namespace podlet::cpu;
  m.def(
      "cpu_info",
      []() {
        const CpuFeatures& f = cpu_features();
        py::dict features;
        features["avx2"] = f.avx2;
        features["fma"] = f.fma;
        features["f16c"] = f.f16c;
        features["avx512f"] = f.avx512f;
        features["avx512bw"] = f.avx512bw;
        features["avx512vl"] = f.avx512vl;
        features["avx512dq"] = f.avx512dq;
        features["avx512_bf16"] = f.avx512_bf16;
        features["amx_tile"] = f.amx_tile;
        features["amx_bf16"] = f.amx_bf16;
        features["amx_os"] = f.amx_os;
        features["amx_permitted"] = f.amx_permitted;
        py::list isas;
        for (Isa i : {Isa::ref, Isa::avx2, Isa::avx512, Isa::avx512bf16, Isa::amx})
          if (host_supports(i)) isas.append(isa_name(i));
        py::dict cpu;
        cpu["vendor"] = f.vendor;
        cpu["brand"] = f.brand;
        cpu["family"] = f.family;
        cpu["model"] = f.model;
        cpu["stepping"] = f.stepping;
        py::dict d;
        d["cpu"] = cpu;
        d["features"] = features;
        d["best_isa"] = isa_name(f.best);
        d["available_isas"] = isas;
        d["active_isa"] = isa_name(active_isa());
        d["bf16_dot"] = bf16_dot_enabled();
        d["fused_jit"] = podlet::fused_jit::enabled();
        d["conv_winograd"] = podlet::kernels::conv_winograd_enabled();
        d["amx_emulation"] = podlet::kernels::amx_emulation();
        if (!f.amx_note.empty()) d["amx_note"] = f.amx_note;
        return d;
      },
      "The CPU (cpu: vendor, brand string, family, model, stepping as /proc/cpuinfo numbers them) and "
      "its features detected at start-up (cpuid; for AMX also XCR0 and the Linux tile permission), "
      "the ISAs the kernels can use on this host (best last), the active one, bf16_dot: whether bf16 "
      "GEMMs and direct convolutions use vdpbf16ps where the active ISA has it (else f32 FMAs), whether fused "
      "elementwise programs are compiled to machine code (AVX-512 and PODLET_FUSED_JIT not 0), "
      "whether AMX kernels run on emulated tiles, and amx_note: why a CPU with AMX does not use it.");
  m.def(
      "set_isa", [](const std::string& name) { set_isa(isa_from_name(name)); return std::string(isa_name(active_isa())); },
      py::arg("name"),
      "Selects the kernel ISA: 'ref', 'avx2', 'avx512', 'avx512bf16' or 'amx'. A name above what the "
      "host supports clamps down (one warning on stderr); returns the ISA now active.");
  m.def("set_bf16_dot", &set_bf16_dot, py::arg("on"),
        "Whether bf16 x bf16 GEMMs and direct convolutions use the bf16 dot instruction (vdpbf16ps) "
        "where the active ISA has it (True) or widen to f32 and use the f32 FMAs (False; other bits). "
        "Default: PODLET_BF16_DOT, else off on Intel CPUs (vdpbf16ps at half the FMAs' FLOP rate), on "
        "elsewhere.");
  m.def("bf16_dot", &bf16_dot_enabled, "The set_bf16_dot setting.");
  m.def("active_isa", []() { return std::string(isa_name(active_isa())); }, "The ISA kernels use now.");
  m.def("set_amx_emulation", &podlet::kernels::set_amx_emulation, py::arg("on"),
        "Runs every kernel with an AMX variant on emulated tiles (TDPBF16PS's arithmetic in plain "
        "C++), whatever the host: the AMX kernels' logic checked without AMX (PODLET_AMX_EMULATE=1 "
        "at start-up).");
  m.def("amx_emulation", &podlet::kernels::amx_emulation, "Whether AMX kernels run on emulated tiles.");
  m.def("gemm_last_path", []() { return std::string(podlet::kernels::gemm_last_path()); },
        "The GEMM variant that ran last: 'ref', 'avx2', 'avx512', 'avx512bf16', 'amx' or 'amx_emu' (tests).");
  m.def("conv_amx_calls", &podlet::kernels::conv_amx_calls,
        "How many convolutions (any direction) ran on AMX tiles, real or emulated, so far (tests).");
  m.def("attention_last_isa", []() { return std::string(podlet::kernels::attention_last_isa()); },
        "The build of the fused attention kernels that ran last ('ref', 'avx2', 'avx512', 'avx512bf16', "
        "'pairs_ref'; tests).");
  m.def("set_attention_pairs_emulation", &podlet::kernels::set_attention_pairs_emulation, py::arg("on"),
        "Runs bf16 fused attention on the plain C++ emulation of its vdpbf16ps kernel, whatever the "
        "host (tests: the pair kernel's logic without AVX512_BF16; the instruction against it with).");
  m.def("attention_pairs_emulation", &podlet::kernels::attention_pairs_emulation,
        "Whether bf16 fused attention runs on the emulated pair kernel.");
  m.def("norm_last_isa", []() { return std::string(podlet::kernels::norm_last_isa()); },
        "The build of the fused layer_norm / softmax kernels that ran last ('ref', 'avx2', 'avx512'; tests).");
}
