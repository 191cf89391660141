// IDX reader (the MNIST / Fashion-MNIST file format), plain or gzip-compressed.
//
// Layout: a 4-byte big-endian magic 0x0000TTNN (two zero bytes, a type code TT, the
// number of dimensions NN), NN big-endian 32-bit sizes, then the elements in C order,
// big-endian. Type codes and the podlet dtype each becomes:
//   0x08 uint8   -> uint8       0x0C int32   -> int32
//   0x09 int8    -> int32       0x0D float32 -> float32
//   0x0B int16   -> int32       0x0E float64 -> float64
// (podlet has no int8/int16 dtype, so those widen to int32 exactly.)
// MNIST labels are 0x00000801 (uint8, 1-D), images 0x00000803 (uint8, 3-D).
//
// Every problem is a podlet::ValueError whose message starts with "IDX file '<name>':"
// and says what was wrong (bad magic, unknown type code, truncated header or data,
// trailing bytes, corrupt gzip stream).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>
#include "podlet/array.h"

namespace podlet::io {

// Parses an uncompressed IDX image held in memory. `name` is used in error messages.
Array parse_idx(const uint8_t* data, size_t n, const std::string& name);

// True when the bytes start with the gzip magic (1f 8b).
bool is_gzip(const uint8_t* data, size_t n);

// Decompresses a gzip stream (concatenated members allowed). Throws ValueError naming
// `name` when the stream is corrupt or truncated, or would exceed `max_bytes`.
std::vector<uint8_t> gunzip(const uint8_t* data, size_t n, const std::string& name,
                            size_t max_bytes = size_t(1) << 40);

// parse_idx after gunzip when the bytes are gzip-compressed.
Array decode_idx(const uint8_t* data, size_t n, const std::string& name,
                 size_t max_bytes = size_t(1) << 40);

// Reads an IDX file from disk (gzip detected from the content, not the file name).
Array read_idx(const std::string& path);

}  // namespace podlet::io
