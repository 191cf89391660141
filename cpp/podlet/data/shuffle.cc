#include "podlet/data/shuffle.h"

#include <algorithm>
#include "podlet/data/counter_rng.h"
#include "podlet/error.h"

namespace podlet::data {

std::vector<int64_t> buffer_shuffle_order(int64_t n, int64_t buffer_size, uint64_t key) {
  if (buffer_size < 1) throw ValueError(fmt("shuffle buffer_size must be >= 1, got ", buffer_size));
  std::vector<int64_t> out;
  out.reserve(size_t(n));
  std::vector<int64_t> buf;
  buf.reserve(size_t(std::min(n, buffer_size)));
  int64_t next = 0;
  while (next < n && int64_t(buf.size()) < buffer_size) buf.push_back(next++);
  for (uint64_t t = 0; !buf.empty(); ++t) {
    size_t j = size_t(draw_below(key, t, buf.size()));
    out.push_back(buf[j]);
    if (next < n) {
      buf[j] = next++;
    } else {
      buf[j] = buf.back();
      buf.pop_back();
    }
  }
  return out;
}

}  // namespace podlet::data
