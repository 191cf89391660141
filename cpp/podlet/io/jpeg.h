// JPEG decode and encode with libjpeg(-turbo). libjpeg reports errors by calling
// exit(); podlet installs an error manager that longjmps back instead, so a corrupt
// image is a ValueError naming `where` (file and record), never a dead process.
// Warnings (e.g. "Premature end of JPEG file", corrupt entropy data) are errors too:
// libjpeg would otherwise return a silently grey-filled image.
//
// Decoding uses libjpeg's defaults (islow IDCT, fancy upsampling), which are also what
// tf.io.decode_jpeg uses, so pixels match TensorFlow's for the same libjpeg-turbo.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace podlet::io {

struct DecodedImage {
  std::vector<uint8_t> pixels;  // height x width x channels, row-major
  int height = 0, width = 0, channels = 0;
};

bool is_jpeg(const uint8_t* data, size_t n);  // starts with the SOI marker FF D8 FF

// channels: 0 keeps the stored colour (1 for grayscale, 3 otherwise), 1 converts to
// grayscale, 3 to RGB. Images with more than `max_pixels` pixels (default 8192x8192)
// are rejected before any pixel memory is allocated, so a corrupt header cannot make a
// reader thread allocate gigabytes.
DecodedImage decode_jpeg(const uint8_t* data, size_t n, const std::string& where, int channels = 0,
                         uint64_t max_pixels = uint64_t(1) << 26);

// Baseline JPEG of an HxWxC (C = 1 or 3) uint8 image; deterministic for given input.
std::string encode_jpeg(const uint8_t* pixels, int height, int width, int channels, int quality,
                        const std::string& where);

}  // namespace podlet::io
