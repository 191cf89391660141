// A Source over images already in memory (N x H x W x C uint8, C-contiguous), e.g. NumPy
// arrays or a decoded dataset. The pixel buffer is borrowed: `owner` keeps it alive.
#pragma once
#include <memory>
#include <string>
#include <vector>
#include "podlet/data/source.h"

namespace podlet::data {

class ArraySource final : public Source {
 public:
  ArraySource(std::shared_ptr<const uint8_t> pixels, int64_t n, int height, int width, int channels,
              std::vector<int32_t> labels, std::vector<std::string> ids,
              std::vector<std::string> class_names, std::string name);
  int64_t size() const override { return n_; }
  Record get(int64_t index) const override;
  std::string describe() const override;
  std::vector<std::string> class_names() const override { return class_names_; }

 private:
  std::shared_ptr<const uint8_t> pixels_;
  int64_t n_;
  int h_, w_, c_;
  std::vector<int32_t> labels_;
  std::vector<std::string> ids_;  // empty: ids are the decimal index
  std::vector<std::string> class_names_;
  std::string name_;
};

}  // namespace podlet::data
