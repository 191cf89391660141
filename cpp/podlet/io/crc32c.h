// CRC32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord framing uses it,
// computed in software (slicing-by-8) so podlet needs neither SSE4.2 nor a library.
// crc32c("123456789") == 0xE3069283.
#pragma once
#include <cstddef>
#include <cstdint>

namespace podlet::io {

// CRC of n bytes, continuing from `crc` (0 for a fresh checksum).
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

// TFRecord stores CRCs "masked": a CRC of data that itself contains CRCs is weak, so
// TensorFlow rotates and offsets the value before storing it.
inline uint32_t mask_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
inline uint32_t unmask_crc(uint32_t masked) {
  uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

}  // namespace podlet::io
