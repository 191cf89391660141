// libFuzzer harness for the IDX reader: arbitrary bytes (plain or gzip) into
// podlet::io::decode_idx. A ValueError is the expected answer to bad input; anything
// else (crash, sanitizer report, other exception, inconsistent result) is a bug.
// Build and run: see fuzz/README.md.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "podlet/io/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace podlet;
  try {
    // 64 MiB decompression cap keeps gzip bombs inside libFuzzer's RSS limit.
    Array a = io::decode_idx(data, size, "<fuzz input>", size_t(64) << 20);
    // A successful parse of plain input accounts for every byte: header + elements.
    if (!io::is_gzip(data, size)) {
      static const size_t file_itemsize[16] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 2, 4, 4, 8, 0};
      size_t expect = 4 + 4 * size_t(data[3]) + size_t(a.size()) * file_itemsize[data[2] & 15];
      if (a.ndim() != data[3] || expect != size) std::abort();
    }
    // Touch every byte so ASan sees any out-of-bounds buffer.
    uint8_t acc = 0;
    for (size_t i = 0; i < a.nbytes(); ++i) acc ^= static_cast<const uint8_t*>(a.raw())[i];
    volatile uint8_t sink = acc;
    (void)sink;
  } catch (const ValueError&) {
  }
  return 0;
}
