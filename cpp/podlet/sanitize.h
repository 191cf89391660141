// Hooks for the sanitizer builds (scripts/sanitize.sh; CMake -DPODLET_SANITIZE=address
// or thread). In a normal build every macro here is empty.
//
// ASan only sees the malloc/free it intercepts. podlet hands memory out itself in two
// places that would hide overruns and uses after free from it: the buffer pool (array.cc:
// a freed buffer waits, still mapped, for the next request) and the memory plan's arena
// (ir/graph.cc: every intermediate of a run at an offset in one buffer). Under ASan both
// poison what nobody owns — a pooled buffer, the slack after a buffer's requested size, an
// arena slot outside its value's lifetime — with ASan's manual poisoning API, so a kernel
// that touches it is reported at the faulting instruction.
//
// TSan sees pthreads but not libgomp's or oneTBB's hand-offs (futexes and atomics in
// uninstrumented code): it reports every read of a region's shared variables, made before
// any annotation could run, as a race with the caller's writes. In the thread build the
// parallel regions therefore run on std::threads (parallel.h: on_threads,
// dynamic_on_threads), whose creation and join TSan understands; each region keeps its
// fixed chunks and dynamic hand-out, so races between the tasks of a region stay visible.
#pragma once
#include <cstddef>

#if defined(PODLET_SANITIZE_ADDRESS)
#include <dlfcn.h>
#include <cstdlib>
#include <string>
#include <sanitizer/asan_interface.h>
#define PODLET_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define PODLET_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define PODLET_POISON(p, n) ((void)(p), (void)(n))
#define PODLET_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace podlet {
// Whether the library was built for a sanitizer ("address", "thread" or "").
inline const char* sanitizer_build() {
#if defined(PODLET_SANITIZE_ADDRESS)
  return "address";
#elif defined(PODLET_SANITIZE_THREAD)
  return "thread";
#else
  return "";
#endif
}

// GCC's UBSan runtime (libubsan) keeps its own report file, and with libasan preloaded
// it ignores UBSAN_OPTIONS=log_path and prints to stderr, where pytest's capture and
// subprocess pipes swallow it. Set libubsan's own report path (its copy of
// __sanitizer_set_report_path, found through its handle: the global symbol is libasan's)
// to $PODLET_SANITIZE_LOGS/ubsan. Called once when the module loads.
inline void route_ubsan_reports() {
#if defined(PODLET_SANITIZE_ADDRESS)
  const char* dir = std::getenv("PODLET_SANITIZE_LOGS");
  if (!dir || !*dir) return;
  void* h = dlopen("libubsan.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!h) return;
  using SetPath = void (*)(const char*);
  if (auto f = reinterpret_cast<SetPath>(dlsym(h, "__sanitizer_set_report_path"))) {
    static const std::string path = std::string(dir) + "/ubsan";
    f(path.c_str());
  }
  dlclose(h);
#endif
}

}  // namespace podlet
