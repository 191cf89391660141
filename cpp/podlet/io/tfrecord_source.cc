// TFRecord shards as a data::Source: see tfrecord_source.h.
#include "podlet/io/tfrecord_source.h"

#include <algorithm>

#include "podlet/error.h"
#include "podlet/io/jpeg.h"

namespace podlet::io {
namespace {

std::string keys_of(const Example& ex) {
  std::string s;
  for (const auto& kv : ex) s += (s.empty() ? "'" : ", '") + kv.first + "'";
  return s.empty() ? "none" : s;
}

const Feature& need(const Example& ex, const std::string& key, Feature::Kind kind, const std::string& where) {
  auto it = ex.find(key);
  if (it == ex.end())
    throw ValueError(fmt(where, ": feature '", key, "' missing (the example has: ", keys_of(ex), ")"));
  const Feature& f = it->second;
  size_t count = f.kind == Feature::Kind::kBytes ? f.bytes.size()
               : f.kind == Feature::Kind::kFloat ? f.floats.size()
               : f.kind == Feature::Kind::kInt64 ? f.int64s.size() : 0;
  if (f.kind != kind)
    throw ValueError(fmt(where, ": feature '", key, "' is a ", kind_name(f.kind), ", expected a ", kind_name(kind)));
  if (count != 1)
    throw ValueError(fmt(where, ": feature '", key, "' holds ", count, " values, expected exactly 1"));
  return f;
}

}  // namespace

data::Record example_to_record(const Example& ex, const TfrecordSpec& spec, const std::string& where) {
  data::Record r;
  const std::string& bytes = need(ex, spec.image_key, Feature::Kind::kBytes, where).bytes[0];
  DecodedImage img = decode_jpeg(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                                 fmt(where, ", feature '", spec.image_key, "'"), spec.channels);
  if ((spec.height >= 0 && img.height != spec.height) || (spec.width >= 0 && img.width != spec.width))
    throw ValueError(fmt(where, ": image is ", img.height, "x", img.width, "x", img.channels,
                         ", but features.json declares ", spec.height < 0 ? std::string("?") : fmt(spec.height), "x",
                         spec.width < 0 ? std::string("?") : fmt(spec.width), "x", spec.channels));
  int64_t label = need(ex, spec.label_key, Feature::Kind::kInt64, where).int64s[0];
  if (label < 0 || (spec.num_classes > 0 && label >= spec.num_classes) || label > INT32_MAX)
    throw ValueError(fmt(where, ": label ", label, " out of range; expected 0..", spec.num_classes - 1,
                         spec.class_names.empty() ? std::string() : fmt(" (", spec.num_classes, " classes)")));
  r.label = int32_t(label);
  if (!spec.id_key.empty()) r.id = need(ex, spec.id_key, Feature::Kind::kBytes, where).bytes[0];
  r.image = std::move(img.pixels);
  r.height = img.height;
  r.width = img.width;
  r.channels = img.channels;
  return r;
}

TfrecordSource::TfrecordSource(TfrecordSpec spec) : spec_(std::move(spec)) {
  if (spec_.num_classes == 0) spec_.num_classes = int(spec_.class_names.size());
  offsets_.push_back(0);
  for (const auto& path : spec_.shards) {
    files_.push_back(std::make_unique<TFRecordFile>(path));
    offsets_.push_back(offsets_.back() + int64_t(files_.back()->size()));
  }
}

std::vector<int64_t> TfrecordSource::shard_lengths() const {
  std::vector<int64_t> n;
  for (auto& f : files_) n.push_back(int64_t(f->size()));
  return n;
}

data::Record TfrecordSource::get(int64_t index) const {
  if (index < 0 || index >= size())
    throw ValueError(fmt(describe(), ": example ", index, " out of range (", size(), " examples)"));
  size_t s = size_t(std::upper_bound(offsets_.begin(), offsets_.end(), index) - offsets_.begin()) - 1;
  size_t k = size_t(index - offsets_[s]);
  const TFRecordFile& f = *files_[s];
  std::string data = f.read(k);
  std::string where = fmt("TFRecord file '", f.path(), "' record ", k, " (example ", index, " of ", describe(), ")");
  Example ex = parse_example(reinterpret_cast<const uint8_t*>(data.data()), data.size(), where);
  data::Record r = example_to_record(ex, spec_, where);
  if (spec_.id_key.empty()) {  // builds without an id feature: a stable id from the file position
    size_t slash = f.path().find_last_of('/');
    r.id = fmt(slash == std::string::npos ? f.path() : f.path().substr(slash + 1), ":", k);
  }
  return r;
}

}  // namespace podlet::io
