// TFRecord files: a sequence of records, each framed as
//   uint64 length | uint32 masked CRC32C(length bytes) | data | uint32 masked CRC32C(data)
// (all little-endian). Both CRCs are verified: the length CRC when a file is indexed,
// the data CRC every time a record is read, so a flipped bit anywhere is an error that
// names the file, the record and its byte offset. Only uncompressed TFRecords (what
// TFDS writes) are supported.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace podlet::io {

struct RecordSpan {
  uint64_t offset;  // of the first data byte
  uint64_t length;  // of the data
};

// Frames one record (header, data, footer) and appends it to `out`.
void append_tfrecord(std::string& out, const void* data, size_t n);

// Every record of a TFRecord stream held in memory, both CRCs verified. Throws
// ValueError naming `name`, the record and the offset on any framing problem.
std::vector<RecordSpan> scan_tfrecords(const uint8_t* data, size_t n, const std::string& name);

// Read-only random access to a TFRecord file. The constructor indexes the file once
// (one 12-byte header read per record; length CRCs and truncation checked); read() is
// a single pread, so it is thread-safe and needs no lock.
class TFRecordFile {
 public:
  explicit TFRecordFile(const std::string& path);
  ~TFRecordFile();
  TFRecordFile(const TFRecordFile&) = delete;
  TFRecordFile& operator=(const TFRecordFile&) = delete;

  const std::string& path() const { return path_; }
  size_t size() const { return index_.size(); }
  const RecordSpan& span(size_t i) const { return index_[i]; }
  // The data of record i, its CRC verified; throws ValueError naming file and record.
  std::string read(size_t i) const;

 private:
  std::string path_;
  int fd_ = -1;
  std::vector<RecordSpan> index_;
};

// Writes a TFRecord file. Errors (disk full, ...) throw ValueError naming the file;
// close() must be called to learn whether the last bytes reached the disk. The writer
// never renames: callers that need atomic replacement write to a temporary name.
class TFRecordWriter {
 public:
  explicit TFRecordWriter(const std::string& path);
  ~TFRecordWriter();
  TFRecordWriter(const TFRecordWriter&) = delete;
  TFRecordWriter& operator=(const TFRecordWriter&) = delete;

  void write(const void* data, size_t n);
  void close();
  uint64_t bytes_written() const { return bytes_; }

 private:
  void flush();
  std::string path_;
  int fd_ = -1;
  std::string buf_;
  uint64_t bytes_ = 0;
};

}  // namespace podlet::io
