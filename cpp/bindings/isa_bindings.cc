// podlet._core CPU / ISA queries: cpu_info() and set_isa(name). module.cc calls
// bind_isa(m) after the error translator is registered (a bad name -> PodletError).
#include <pybind11/pybind11.h>

#include "podlet/cpu/isa.h"
#include "podlet/prims/fused_jit.h"
#include "podlet/kernels/conv_winograd.h"
#include "podlet/kernels/attention.h"

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
        py::list isas;
        for (Isa i : {Isa::ref, Isa::avx2, Isa::avx512, Isa::avx512bf16})
          if (host_supports(i)) isas.append(isa_name(i));
        py::dict d;
        d["features"] = features;
        d["best_isa"] = isa_name(f.best);
        d["available_isas"] = isas;
        d["active_isa"] = isa_name(active_isa());
        d["fused_jit"] = podlet::fused_jit::enabled();
        d["conv_winograd"] = podlet::kernels::conv_winograd_enabled();
        return d;
      },
      "CPU features detected at start-up (cpuid), the ISAs the kernels can use on this host "
      "(best last), the active one, and whether fused elementwise programs are compiled to "
      "machine code (AVX-512 and PODLET_FUSED_JIT not 0).");
  m.def(
      "set_isa", [](const std::string& name) { set_isa(isa_from_name(name)); return std::string(isa_name(active_isa())); },
      py::arg("name"),
      "Selects the kernel ISA: 'ref', 'avx2', 'avx512' or 'avx512bf16'. A name above what the "
      "host supports clamps down (one warning on stderr); returns the ISA now active.");
  m.def("active_isa", []() { return std::string(isa_name(active_isa())); }, "The ISA kernels use now.");
  m.def("attention_last_isa", []() { return std::string(podlet::kernels::attention_last_isa()); },
        "The build of the fused attention kernels that ran last ('ref', 'avx2', 'avx512'; tests).");
}
