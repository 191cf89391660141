// A data source: random access to decoded examples, the one interface every dataset
// (synthetic patches, TFRecord shards, HDF5, IDX, in-memory NumPy) offers to the
// input pipeline. get() must be thread-safe: the pipeline calls it from TBB workers.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace podlet::data {

struct Record {
  std::vector<uint8_t> image;  // height x width x channels, row-major (HWC)
  int height = 0, width = 0, channels = 0;
  int32_t label = -1;
  std::string id;              // TFDS "id" feature; synthetic: "<split>/<index>"
};

class Source {
 public:
  virtual ~Source() = default;
  virtual int64_t size() const = 0;
  virtual Record get(int64_t index) const = 0;  // thread-safe; throws podlet::Error naming the record
  virtual std::string describe() const = 0;     // e.g. "tfrecord:/path/train (3 shards)"
  virtual std::vector<std::string> class_names() const { return {}; }
};
using SourcePtr = std::shared_ptr<const Source>;

}  // namespace podlet::data
