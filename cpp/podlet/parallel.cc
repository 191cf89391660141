#include "podlet/parallel.h"
#include <cstdlib>
#include <exception>
#include <thread>
#include <vector>

namespace podlet {
static int initial_threads() {
  if (const char* e = std::getenv("PODLET_NUM_THREADS")) { int n = std::atoi(e); if (n > 0) return n; }
  unsigned h = std::thread::hardware_concurrency();
  return h ? int(h) : 1;
}
static int g_threads = initial_threads();
static thread_local bool t_serial = false;
void set_num_threads(int n) { g_threads = std::max(1, n); }
int num_threads() { return t_serial ? 1 : g_threads; }
SerialScope::SerialScope() : prev_(t_serial) { t_serial = true; }
SerialScope::~SerialScope() { t_serial = prev_; }

#if defined(PODLET_SANITIZE_THREAD)
// on_threads in the TSan build: nt std::threads (worker 0 the caller), each in a
// SerialScope; the first exception is rethrown after the join.
void on_std_threads(int nt, void (*call)(const void* body, int worker), const void* body) {
  std::vector<std::exception_ptr> err(std::max(nt, 1));
  auto run = [&](int w) {
    SerialScope serial;
    try { call(body, w); } catch (...) { err[w] = std::current_exception(); }
  };
  std::vector<std::thread> ts;
  for (int w = 1; w < nt; ++w) ts.emplace_back(run, w);
  run(0);
  for (auto& t : ts) t.join();
  for (auto& e : err) if (e) std::rethrow_exception(e);
}
#endif
}  // namespace podlet
