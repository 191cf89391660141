// Source -> TFRecord shards: see tfrecord_export.h.
#include "podlet/io/tfrecord_export.h"

#include <exception>

#include "podlet/error.h"
#include "podlet/io/example_proto.h"
#include "podlet/io/jpeg.h"
#include "podlet/io/tfrecord.h"
#include "podlet/parallel.h"

namespace podlet::io {

std::string encode_example(const data::Record& r, int quality, const std::string& where) {
  if (r.image.size() != size_t(r.height) * r.width * r.channels)
    throw ValueError(fmt(where, ": image buffer has ", r.image.size(), " bytes, expected ", r.height, "x",
                         r.width, "x", r.channels));
  if (r.label < 0)
    throw ValueError(fmt(where, ": label ", r.label, " is negative; TFDS class labels are 0..num_classes-1"));
  Example ex;
  Feature image, label, id;
  image.kind = Feature::Kind::kBytes;
  image.bytes.push_back(encode_jpeg(r.image.data(), r.height, r.width, r.channels, quality, where));
  label.kind = Feature::Kind::kInt64;
  label.int64s.push_back(r.label);
  id.kind = Feature::Kind::kBytes;
  id.bytes.push_back(r.id);
  ex.emplace("image", std::move(image));
  ex.emplace("label", std::move(label));
  ex.emplace("id", std::move(id));
  return serialize_example(ex);
}

ExportStats export_tfrecord_shards(const data::Source& src, const std::vector<std::string>& paths, int quality) {
  if (paths.empty()) throw ValueError("export: need at least one shard");
  const int64_t n = src.size(), shards = int64_t(paths.size());
  ExportStats st;
  bool first = true;
  constexpr int64_t kBlock = 64;  // examples encoded in parallel before being written in order
  std::vector<std::string> encoded(kBlock);
  std::vector<data::Record> meta(kBlock);
  std::vector<std::exception_ptr> errors(kBlock);
  for (int64_t s = 0; s < shards; ++s) {
    int64_t begin = s * n / shards, end = (s + 1) * n / shards;
    TFRecordWriter w(paths[s]);
    for (int64_t b = begin; b < end; b += kBlock) {
      int64_t m = std::min(kBlock, end - b);
      parallel_for(m, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t j = lo; j < hi; ++j) {
          errors[j] = nullptr;
          try {
            data::Record r = src.get(b + j);
            std::string where = fmt("export of example ", b + j, " of ", src.describe());
            encoded[j] = encode_example(r, quality, where);
            r.image.clear();
            meta[j] = std::move(r);
          } catch (...) {
            errors[j] = std::current_exception();
          }
        }
      });
      for (int64_t j = 0; j < m; ++j) {  // the first failing example wins, whatever the threads
        if (errors[j]) std::rethrow_exception(errors[j]);
        const data::Record& r = meta[j];
        if (first) { st.height = r.height; st.width = r.width; st.channels = r.channels; first = false; }
        if (r.height != st.height) st.height = -1;
        if (r.width != st.width) st.width = -1;
        if (r.channels != st.channels) st.channels = -1;
        st.max_label = std::max<int64_t>(st.max_label, r.label);
        w.write(encoded[j].data(), encoded[j].size());
      }
    }
    w.close();
    st.shard_lengths.push_back(end - begin);
    st.num_bytes += w.bytes_written();
  }
  return st;
}

}  // namespace podlet::io
