// sanitizer_probe: a primitive that misbehaves on purpose, registered only in the
// sanitizer builds (scripts/sanitize.sh). tests/test_sanitizer_build.py runs it in a child
// process. Under ASan it proves that the poisoning in sanitize.h makes podlet's own
// allocators report what they would otherwise hide: a write past a planned value in the
// memory-plan arena, a read of an arena slot after its value's lifetime, a read of a
// buffer waiting in the pool. Under TSan it proves that the run was watched: two of
// podlet's worker threads (on_threads) add to one counter without a lock ("race"), or
// atomically ("atomic", the control), so a whole-suite run with no report means something.
#include "podlet/prims/common.h"
#include "podlet/sanitize.h"
#include <atomic>
#include <cstring>
#include "podlet/parallel.h"

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
#elif defined(PODLET_SANITIZE_THREAD)
namespace podlet {
namespace {

int g_counter = 0;
std::atomic<int> g_atomic{0};

static Register reg_probe("sanitizer_probe", PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs&) -> std::vector<AVal> {
      check_arity(in, 1);
      return {AVal{DType::f32, {}}};
    },
    .kernel = [](const std::vector<Array>&, std::vector<Array>& out, const Attrs& a) {
      const std::string& mode = a.s("mode");
      if (mode != "race" && mode != "atomic")
        throw ValueError(fmt("sanitizer_probe: mode '", mode, "'; expected race or atomic"));
      if (num_threads() < 2) throw ValueError("sanitizer_probe: needs 2 or more threads (PODLET_NUM_THREADS)");
      const bool race = mode == "race";
      // on_threads, not parallel_for: its chunks go to whichever thread asks first, and
      // the caller could take both before the other thread starts.
      on_threads(2, [&](int) {
        for (int k = 0; k < 1000; ++k) {
          if (race) g_counter = g_counter + 1;
          else g_atomic.fetch_add(1, std::memory_order_relaxed);
        }
      });
      *out[0].data<float>() = float(race ? g_counter : g_atomic.load());
    },
    .vjp = nullptr,
    .flops = nullptr,
    .batch = nullptr,
    .zero_grad = true,
    .no_batch_reason = "a test probe for the sanitizer build"});

}  // namespace
}  // namespace podlet
#endif
