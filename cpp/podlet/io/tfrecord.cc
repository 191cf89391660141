// TFRecord framing: see tfrecord.h.
#include "podlet/io/tfrecord.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "podlet/error.h"
#include "podlet/io/crc32c.h"

namespace podlet::io {
namespace {

constexpr size_t kHeader = 12, kFooter = 4;

uint32_t le32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
uint64_t le64(const uint8_t* p) { return uint64_t(le32(p)) | uint64_t(le32(p + 4)) << 32; }
void put_le32(uint8_t* p, uint32_t v) { for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i)); }
void put_le64(uint8_t* p, uint64_t v) { for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i)); }

std::string hex32(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08X", v);
  return b;
}

[[noreturn]] void fail(const std::string& name, size_t record, uint64_t offset, const std::string& what) {
  throw ValueError(fmt("TFRecord file '", name, "' record ", record, " (at byte ", offset, "): ", what));
}

// Checks a 12-byte header at `offset`; returns the data length. `remaining` counts
// the bytes after the header.
uint64_t check_header(const uint8_t* h, const std::string& name, size_t record, uint64_t offset,
                      uint64_t remaining) {
  uint64_t len = le64(h);
  uint32_t stored = unmask_crc(le32(h + 8)), actual = crc32c(h, 8);
  if (stored != actual)
    fail(name, record, offset, fmt("length CRC mismatch (stored ", hex32(stored), ", computed ",
                                   hex32(actual), " over the length bytes): the file is corrupt"));
  if (len > remaining || remaining - len < kFooter)
    fail(name, record, offset,
         fmt("truncated: the header promises ", len, " data bytes plus a 4-byte CRC, but only ",
             remaining, " bytes follow the header"));
  return len;
}

void check_data(const uint8_t* data, uint64_t len, const uint8_t* footer, const std::string& name,
                size_t record, uint64_t offset) {
  uint32_t stored = unmask_crc(le32(footer)), actual = crc32c(data, len);
  if (stored != actual)
    fail(name, record, offset, fmt("data CRC mismatch (stored ", hex32(stored), ", computed ",
                                   hex32(actual), " over ", len, " data bytes): the file is corrupt"));
}

std::string errno_str() { return std::strerror(errno); }

// pread until n bytes or EOF; returns bytes read.
size_t pread_full(int fd, void* buf, size_t n, uint64_t off) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::pread(fd, static_cast<char*>(buf) + got, n - got, off_t(off + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      return got;
    }
    if (r == 0) break;
    got += size_t(r);
  }
  return got;
}

}  // namespace

void append_tfrecord(std::string& out, const void* data, size_t n) {
  uint8_t h[kHeader], f[kFooter];
  put_le64(h, n);
  put_le32(h + 8, mask_crc(crc32c(h, 8)));
  put_le32(f, mask_crc(crc32c(data, n)));
  out.append(reinterpret_cast<const char*>(h), kHeader);
  out.append(static_cast<const char*>(data), n);
  out.append(reinterpret_cast<const char*>(f), kFooter);
}

std::vector<RecordSpan> scan_tfrecords(const uint8_t* data, size_t n, const std::string& name) {
  std::vector<RecordSpan> spans;
  uint64_t off = 0;
  while (off < n) {
    size_t rec = spans.size();
    if (n - off < kHeader)
      fail(name, rec, off, fmt("truncated: a record header is 12 bytes, only ", n - off, " remain"));
    uint64_t len = check_header(data + off, name, rec, off, n - off - kHeader);
    const uint8_t* d = data + off + kHeader;
    check_data(d, len, d + len, name, rec, off);
    spans.push_back({off + kHeader, len});
    off += kHeader + len + kFooter;
  }
  return spans;
}

TFRecordFile::TFRecordFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw ValueError(fmt("TFRecord file '", path, "': cannot open: ", errno_str()));
  struct stat st;
  if (::fstat(fd_, &st) != 0) {
    std::string e = errno_str();
    ::close(fd_);
    throw ValueError(fmt("TFRecord file '", path, "': cannot stat: ", e));
  }
  uint64_t size = uint64_t(st.st_size), off = 0;
  try {
    while (off < size) {
      size_t rec = index_.size();
      uint8_t h[kHeader];
      size_t got = pread_full(fd_, h, kHeader, off);
      if (got < kHeader)
        fail(path_, rec, off, fmt("truncated: a record header is 12 bytes, only ", size - off, " remain"));
      uint64_t len = check_header(h, path_, rec, off, size - off - kHeader);
      index_.push_back({off + kHeader, len});
      off += kHeader + len + kFooter;
    }
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

TFRecordFile::~TFRecordFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::string TFRecordFile::read(size_t i) const {
  const RecordSpan& s = index_.at(i);
  std::string buf(s.length + kFooter, '\0');
  size_t got = pread_full(fd_, buf.data(), buf.size(), s.offset);
  if (got < buf.size())
    fail(path_, i, s.offset - kHeader,
         fmt("read ", got, " of ", buf.size(), " bytes (was the file truncated after it was opened?)"));
  auto* p = reinterpret_cast<const uint8_t*>(buf.data());
  check_data(p, s.length, p + s.length, path_, i, s.offset - kHeader);
  buf.resize(s.length);
  return buf;
}

TFRecordWriter::TFRecordWriter(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw ValueError(fmt("TFRecord file '", path, "': cannot create: ", errno_str()));
}

TFRecordWriter::~TFRecordWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void TFRecordWriter::write(const void* data, size_t n) {
  if (fd_ < 0) throw ValueError(fmt("TFRecord file '", path_, "': write after close"));
  append_tfrecord(buf_, data, n);
  bytes_ += kHeader + n + kFooter;
  if (buf_.size() >= (size_t(1) << 20)) flush();
}

void TFRecordWriter::flush() {
  size_t done = 0;
  while (done < buf_.size()) {
    ssize_t w = ::write(fd_, buf_.data() + done, buf_.size() - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw ValueError(fmt("TFRecord file '", path_, "': write failed: ", errno_str()));
    }
    done += size_t(w);
  }
  buf_.clear();
}

void TFRecordWriter::close() {
  if (fd_ < 0) return;
  flush();
  // fsync before the caller renames the file into place, so a crash cannot leave a
  // renamed but empty shard.
  if (::fsync(fd_) != 0 || ::close(fd_) != 0) {
    std::string e = errno_str();
    fd_ = -1;
    throw ValueError(fmt("TFRecord file '", path_, "': close failed: ", e));
  }
  fd_ = -1;
}

}  // namespace podlet::io
