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
// TSan sees pthreads but not libgomp's or oneTBB's own hand-offs (futexes and atomics in
// uninstrumented code): without help it reports every write before a parallel region
// racing with the threads' reads inside it. PODLET_TSAN_RELEASE/ACQUIRE state the
// happens-before edges the runtime provides: the calling thread releases before a region,
// each task acquires at its start and releases at its end, the caller acquires after the
// join. Races between the tasks of one region stay visible.
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

#if defined(PODLET_SANITIZE_THREAD)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#define PODLET_TSAN_ACQUIRE(p) __tsan_acquire((void*)(p))
#define PODLET_TSAN_RELEASE(p) __tsan_release((void*)(p))
#else
#define PODLET_TSAN_ACQUIRE(p) ((void)(p))
#define PODLET_TSAN_RELEASE(p) ((void)(p))
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

// The fork/join edges of one parallel region (see above). Construct before the region
// (the caller's writes happen before every task), call enter()/leave() around each task's
// work, and the destructor acquires the tasks' writes for the caller.
struct ForkJoinEdges {
  char fork = 0, join = 0;
  ForkJoinEdges() { PODLET_TSAN_RELEASE(&fork); }
  ~ForkJoinEdges() { PODLET_TSAN_ACQUIRE(&join); }
  void enter() { PODLET_TSAN_ACQUIRE(&fork); }
  void leave() { PODLET_TSAN_RELEASE(&join); }
  // enter() now, leave() when the task's scope ends (also by an exception).
  struct Task {
    ForkJoinEdges& e;
    explicit Task(ForkJoinEdges& edges) : e(edges) { e.enter(); }
    ~Task() { e.leave(); }
  };
  ForkJoinEdges(const ForkJoinEdges&) = delete;
  ForkJoinEdges& operator=(const ForkJoinEdges&) = delete;
};
}  // namespace podlet
