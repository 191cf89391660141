// libFuzzer harness for podlet's libjpeg glue: arbitrary bytes into
// podlet::io::decode_jpeg (first byte picks 0 / 1 / 3 output channels), and small
// decoded images back through encode_jpeg + decode_jpeg. A ValueError is the expected
// answer to bad input; a crash, a sanitizer report, libjpeg calling exit(), or a
// decoded size that disagrees with the header is a bug. Build and run: fuzz/README.md.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "podlet/error.h"
#include "podlet/io/jpeg.h"

using namespace podlet;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const int kChannels[3] = {0, 1, 3};
  int channels = kChannels[data[0] % 3];
  try {
    // 4 Mpixel cap keeps libFuzzer inside its RSS limit on hostile headers.
    io::DecodedImage img = io::decode_jpeg(data + 1, size - 1, "<fuzz input>", channels, uint64_t(1) << 22);
    if (img.height <= 0 || img.width <= 0) std::abort();
    if (channels && img.channels != channels) std::abort();
    if (img.pixels.size() != size_t(img.height) * img.width * img.channels) std::abort();
    if (size_t(img.height) * img.width <= 4096) {
      std::string again = io::encode_jpeg(img.pixels.data(), img.height, img.width, img.channels, 90, "<re-encode>");
      io::DecodedImage back = io::decode_jpeg(reinterpret_cast<const uint8_t*>(again.data()), again.size(),
                                              "<re-decode>", img.channels);
      if (back.height != img.height || back.width != img.width || back.channels != img.channels) std::abort();
    }
  } catch (const ValueError&) {
  }
  return 0;
}
