// IDX reader: see idx.h for the format and the dtype mapping.
#include "podlet/io/idx.h"

// gzip support needs zlib linked into _core; CMake defines PODLET_HAVE_ZLIB when it does
// (find_package(ZLIB) + ZLIB::ZLIB). Without it this file still builds and links, and
// gzip input is a clear error instead of an unresolved symbol at import time.
#if defined(PODLET_HAVE_ZLIB)
#include <zlib.h>
#endif

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <memory>

#include <sys/stat.h>

namespace podlet::io {
namespace {

[[noreturn]] void fail(const std::string& name, const std::string& what) {
  throw ValueError(fmt("IDX file '", name, "': ", what));
}

std::string hex32(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08X", v);
  return b;
}

uint32_t be32(const uint8_t* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]);
}
uint64_t be64(const uint8_t* p) { return uint64_t(be32(p)) << 32 | be32(p + 4); }

struct IdxType { const char* name; size_t itemsize; DType dtype; };

// nullptr for a code that is not an IDX type (0x0A is unassigned).
const IdxType* idx_type(uint8_t code) {
  static const IdxType u8{"uint8", 1, DType::u8}, i8{"int8", 1, DType::i32},
      i16{"int16", 2, DType::i32}, i32{"int32", 4, DType::i32},
      f32{"float32", 4, DType::f32}, f64{"float64", 8, DType::f64};
  switch (code) {
    case 0x08: return &u8;  case 0x09: return &i8;  case 0x0B: return &i16;
    case 0x0C: return &i32; case 0x0D: return &f32; case 0x0E: return &f64;
    default: return nullptr;
  }
}

constexpr const char* kMagicHelp =
    "expected 0x0000TTNN: two zero bytes, a type code TT (08 uint8, 09 int8, 0B int16, "
    "0C int32, 0D float32, 0E float64) and the number of dimensions NN, e.g. 0x00000801 "
    "for uint8 labels or 0x00000803 for uint8 images";

// Big-endian elements -> host order, in the podlet dtype of the type code.
void convert(uint8_t code, const uint8_t* s, void* out, int64_t count) {
  switch (code) {
    case 0x08: if (count) std::memcpy(out, s, size_t(count)); break;
    case 0x09: { auto* d = static_cast<int32_t*>(out);
      for (int64_t i = 0; i < count; ++i) d[i] = int8_t(s[i]);
      break; }
    case 0x0B: { auto* d = static_cast<int32_t*>(out);
      for (int64_t i = 0; i < count; ++i) d[i] = int16_t(uint16_t(s[2 * i] << 8 | s[2 * i + 1]));
      break; }
    case 0x0C: { auto* d = static_cast<int32_t*>(out);
      for (int64_t i = 0; i < count; ++i) d[i] = int32_t(be32(s + 4 * i));
      break; }
    case 0x0D: { auto* d = static_cast<float*>(out);
      for (int64_t i = 0; i < count; ++i) { uint32_t u = be32(s + 4 * i); std::memcpy(d + i, &u, 4); }
      break; }
    case 0x0E: { auto* d = static_cast<double*>(out);
      for (int64_t i = 0; i < count; ++i) { uint64_t u = be64(s + 8 * i); std::memcpy(d + i, &u, 8); }
      break; }
  }
}

#if defined(PODLET_HAVE_ZLIB)
struct InflateGuard {
  z_stream* zs;
  ~InflateGuard() { inflateEnd(zs); }
};
#endif

}  // namespace

Array parse_idx(const uint8_t* data, size_t n, const std::string& name) {
  if (n < 4)
    fail(name, fmt("truncated header: ", n, " bytes, but the magic number alone is 4 bytes"));
  uint32_t magic = be32(data);
  if (data[0] != 0 || data[1] != 0)
    fail(name, fmt("bad magic number ", hex32(magic), " (not an IDX file); ", kMagicHelp));
  const IdxType* t = idx_type(data[2]);
  if (!t) fail(name, fmt("bad magic number ", hex32(magic), ": unknown type code 0x",
                         "0123456789ABCDEF"[data[2] >> 4], "0123456789ABCDEF"[data[2] & 15],
                         "; ", kMagicHelp));
  int ndim = data[3];
  if (ndim == 0) fail(name, fmt("bad magic number ", hex32(magic), ": zero dimensions; ", kMagicHelp));
  size_t header = 4 + 4 * size_t(ndim);
  if (n < header)
    fail(name, fmt("truncated header: ", ndim, " dimensions need a ", header,
                   "-byte header, the data has ", n, " bytes"));

  Shape shape(ndim);
  bool empty = false;
  for (int i = 0; i < ndim; ++i) {
    int32_t d = int32_t(be32(data + 4 + 4 * i));
    if (d < 0) fail(name, fmt("dimension ", i, " has negative size ", d));
    shape[i] = d;
    empty |= d == 0;
  }
  // Even an empty array must have a shape whose products (numel, strides) fit in int64,
  // in whatever order they are taken: bound the product of the non-zero sizes.
  int64_t nonzero = 1;
  for (auto d : shape)
    if (d && __builtin_mul_overflow(nonzero, d, &nonzero))
      fail(name, fmt("shape ", shape_str(shape), " is too large: more than 2^63 elements"));

  // Bytes the header promises, without overflowing: saturate and report "more than 2^64".
  size_t avail = n - header;
  uint64_t need = t->itemsize;
  bool overflow = false;
  if (empty) need = 0;
  else for (auto d : shape) overflow |= __builtin_mul_overflow(need, uint64_t(d), &need);
  std::string need_s = overflow ? std::string("more than 2^64") : fmt(need);
  if (overflow || need > avail)
    fail(name, fmt("truncated data: shape ", shape_str(shape), " of ", t->name, " needs ", need_s,
                   " bytes after the ", header, "-byte header, but there are only ", avail));
  if (need < avail)
    fail(name, fmt("wrong size: shape ", shape_str(shape), " of ", t->name, " needs ", need,
                   " bytes after the ", header, "-byte header, but there are ", avail,
                   " (", avail - need, " trailing bytes)"));

  Array out(t->dtype, shape);
  convert(data[2], data + header, out.raw(), out.size());
  return out;
}

bool is_gzip(const uint8_t* data, size_t n) { return n >= 2 && data[0] == 0x1f && data[1] == 0x8b; }

#if !defined(PODLET_HAVE_ZLIB)
std::vector<uint8_t> gunzip(const uint8_t*, size_t, const std::string& name, size_t) {
  fail(name, "the data is gzip-compressed, but this podlet was built without zlib "
             "(install zlib1g-dev and rebuild), or gunzip the file first");
}
#else
std::vector<uint8_t> gunzip(const uint8_t* data, size_t n, const std::string& name, size_t max_bytes) {
  z_stream zs{};
  if (inflateInit2(&zs, 15 + 16) != Z_OK)  // 15-bit window, gzip wrapper only
    fail(name, "could not initialise zlib");
  InflateGuard guard{&zs};

  // The gzip trailer holds the (last member's) size mod 2^32: a good first guess. zlib
  // cannot expand more than ~1032:1, which bounds what a hostile trailer can make us
  // allocate. +1 so the final inflate call never sees a full buffer.
  size_t guess = 1 << 16;
  if (n >= 18) {
    const uint8_t* p = data + n - 4;
    size_t isize = size_t(p[0]) | size_t(p[1]) << 8 | size_t(p[2]) << 16 | size_t(p[3]) << 24;
    guess = std::max(guess, isize + 1);
  }
  guess = std::min({guess, n * 1032 + 1024, max_bytes + 1});
  std::vector<uint8_t> out(guess);
  size_t used = 0;

  for (;;) {
    if (used == out.size()) {
      if (out.size() > max_bytes)
        fail(name, fmt("gzip data decompresses to more than ", max_bytes, " bytes"));
      out.resize(std::min(out.size() * 2, max_bytes + 1));
    }
    size_t consumed = size_t(zs.next_in ? zs.next_in - data : 0);
    zs.next_in = const_cast<Bytef*>(data + consumed);
    zs.avail_in = uInt(std::min<size_t>(n - consumed, UINT_MAX));
    zs.next_out = out.data() + used;
    zs.avail_out = uInt(std::min<size_t>(out.size() - used, UINT_MAX));
    int ret = inflate(&zs, Z_NO_FLUSH);
    used = size_t(zs.next_out - out.data());
    consumed = size_t(zs.next_in - data);
    if (ret == Z_STREAM_END) {
      if (consumed == n) break;
      if (!is_gzip(data + consumed, n - consumed))
        fail(name, fmt("corrupt gzip data: ", n - consumed,
                       " unexpected bytes after the end of the compressed stream"));
      inflateReset(&zs);  // a concatenated gzip member follows
      continue;
    }
    if (ret == Z_DATA_ERROR || ret == Z_NEED_DICT || ret == Z_STREAM_ERROR)
      fail(name, fmt("corrupt gzip data: ", zs.msg ? zs.msg : "invalid compressed stream"));
    if (ret == Z_MEM_ERROR) fail(name, "out of memory while decompressing");
    // Z_OK / Z_BUF_ERROR: inflate stopped because it ran out of input or of output room.
    if (zs.avail_out > 0 && consumed == n)
      fail(name, fmt("truncated gzip data: the compressed stream ends early (", n,
                     " bytes read, ", used, " decompressed)"));
  }
  if (used > max_bytes) fail(name, fmt("gzip data decompresses to more than ", max_bytes, " bytes"));
  out.resize(used);
  return out;
}
#endif  // PODLET_HAVE_ZLIB

Array decode_idx(const uint8_t* data, size_t n, const std::string& name, size_t max_bytes) {
  if (!is_gzip(data, n)) return parse_idx(data, n, name);
  std::vector<uint8_t> raw = gunzip(data, n, name, max_bytes);
  return parse_idx(raw.data(), raw.size(), name + " (after gunzip)");
}

Array read_idx(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) throw ValueError(fmt("IDX file '", path, "': cannot open: ", std::strerror(errno)));
  std::vector<uint8_t> bytes;
  struct stat st;
  if (fstat(fileno(f.get()), &st) == 0 && S_ISREG(st.st_mode)) bytes.reserve(size_t(st.st_size));
  uint8_t buf[1 << 16];
  for (;;) {
    size_t k = std::fread(buf, 1, sizeof buf, f.get());
    bytes.insert(bytes.end(), buf, buf + k);
    if (k < sizeof buf) break;
  }
  if (std::ferror(f.get()))
    throw ValueError(fmt("IDX file '", path, "': read error: ", std::strerror(errno)));
  return decode_idx(bytes.data(), bytes.size(), path);
}

}  // namespace podlet::io
