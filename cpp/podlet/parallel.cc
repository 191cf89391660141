#include "podlet/parallel.h"
#include <cstdlib>
#include <thread>

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
}  // namespace podlet
