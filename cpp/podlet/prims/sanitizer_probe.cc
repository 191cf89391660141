// sanitizer_probe: a primitive that misbehaves on purpose, registered only in ASan
// builds (scripts/sanitize.sh). tests/test_sanitizer_build.py runs it in a child process
// to prove that the poisoning in sanitize.h makes podlet's own allocators report what
// they would otherwise hide: a write past a planned value in the memory-plan arena, a
// read of an arena slot after its value's lifetime, a read of a buffer waiting in the pool.
#include "podlet/prims/common.h"
#include "podlet/sanitize.h"
#include <cstring>

#if defined(PODLET_SANITIZE_ADDRESS)
namespace podlet {
namespace {

const char* g_kept = nullptr;  // the buffer "keep_input" remembered for "read_kept"

static Register reg_probe("sanitizer_probe", PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) -> std::vector<AVal> {
      check_arity(in, 1);
      if (a.s("mode") == "overrun_output") return {in[0]};
      return {AVal{DType::f32, {}}};
    },
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
      const std::string& mode = a.s("mode");
      if (mode == "overrun_output") {
        std::memcpy(out[0].raw(), in[0].raw(), in[0].nbytes());
        static_cast<volatile char*>(out[0].raw())[out[0].nbytes()] = 1;  // one byte past the end
        return;
      }
      float r = 0;
      if (mode == "keep_input") g_kept = static_cast<const char*>(in[0].raw());
      else if (mode == "read_kept") r = float(*static_cast<const volatile char*>(g_kept));
      else throw ValueError(fmt("sanitizer_probe: mode '", mode, "'; expected overrun_output, keep_input or read_kept"));
      *out[0].data<float>() = r;
    },
    .vjp = nullptr,
    .flops = nullptr,
    .batch = nullptr,
    .zero_grad = true,
    .no_batch_reason = "a test probe for the sanitizer build"});

}  // namespace
}  // namespace podlet
#endif
