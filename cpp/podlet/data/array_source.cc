#include "podlet/data/array_source.h"

#include <cstring>
#include "podlet/error.h"

namespace podlet::data {

ArraySource::ArraySource(std::shared_ptr<const uint8_t> pixels, int64_t n, int height, int width,
                         int channels, std::vector<int32_t> labels, std::vector<std::string> ids,
                         std::vector<std::string> class_names, std::string name)
    : pixels_(std::move(pixels)), n_(n), h_(height), w_(width), c_(channels),
      labels_(std::move(labels)), ids_(std::move(ids)), class_names_(std::move(class_names)),
      name_(std::move(name)) {
  if (n_ < 0 || h_ < 1 || w_ < 1 || c_ < 1)
    throw ValueError(fmt(name_, ": bad image array shape (", n_, ", ", h_, ", ", w_, ", ", c_, ")"));
  if (int64_t(labels_.size()) != n_)
    throw ValueError(fmt(name_, ": ", n_, " images but ", labels_.size(), " labels"));
  if (!ids_.empty() && int64_t(ids_.size()) != n_)
    throw ValueError(fmt(name_, ": ", n_, " images but ", ids_.size(), " ids"));
  for (int64_t i = 0; i < n_; ++i) {
    if (labels_[i] < 0)
      throw ValueError(fmt(name_, ": label ", labels_[i], " of example ", i, " is negative"));
    if (!class_names_.empty() && labels_[i] >= int64_t(class_names_.size()))
      throw ValueError(fmt(name_, ": label ", labels_[i], " of example ", i, " out of range for ",
                           class_names_.size(), " class names"));
  }
}

Record ArraySource::get(int64_t index) const {
  if (index < 0 || index >= n_)
    throw ValueError(fmt(name_, ": index ", index, " out of range [0, ", n_, ")"));
  Record r;
  r.height = h_; r.width = w_; r.channels = c_;
  size_t bytes = size_t(h_) * w_ * c_;
  r.image.resize(bytes);
  std::memcpy(r.image.data(), pixels_.get() + size_t(index) * bytes, bytes);
  r.label = labels_[index];
  r.id = ids_.empty() ? std::to_string(index) : ids_[index];
  return r;
}

std::string ArraySource::describe() const {
  return fmt(name_, " (", n_, " examples, ", h_, "x", w_, "x", c_, ")");
}

}  // namespace podlet::data
