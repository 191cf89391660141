// A data::Source over TFRecord shards of tf.train.Example records with an encoded
// image, an integer label and a string id: the layout of a TFDS image-classification
// build such as curated_breast_imaging_ddsm/patches. Shards are indexed once when the
// source is opened; get(i) reads one record (CRC checked), parses the Example, decodes
// the JPEG and checks the label range. Every error names the shard file and the record
// index within it, and the example index within the split.
//
// The TFDS metadata (dataset_info.json, features.json, label.labels.txt) is read by
// python/podlet/data/tfds.py, which passes what it found in TfrecordSpec.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "podlet/data/source.h"
#include "podlet/io/example_proto.h"
#include "podlet/io/tfrecord.h"

namespace podlet::io {

struct TfrecordSpec {
  std::vector<std::string> shards;   // in split order
  std::vector<std::string> class_names;
  int num_classes = 0;               // labels must be in [0, num_classes); 0: unchecked
  std::string image_key = "image", label_key = "label", id_key = "id";  // id_key "": "<shard>:<k>"
  int height = -1, width = -1, channels = 0;  // expected image shape; -1 / 0: any
  std::string description;           // e.g. "tfds:curated_breast_imaging_ddsm/patches:3.0.0[train]"
};

class TfrecordSource : public data::Source {
 public:
  explicit TfrecordSource(TfrecordSpec spec);  // opens and indexes every shard
  int64_t size() const override { return offsets_.back(); }
  data::Record get(int64_t index) const override;
  std::string describe() const override { return spec_.description; }
  std::vector<std::string> class_names() const override { return spec_.class_names; }
  std::vector<int64_t> shard_lengths() const;
  const std::vector<std::string>& shards() const { return spec_.shards; }

 private:
  TfrecordSpec spec_;
  std::vector<std::unique_ptr<TFRecordFile>> files_;
  std::vector<int64_t> offsets_;  // offsets_[s] = first example index of shard s; back() = total
};

// Turns one parsed Example into a Record (decode, shape and label checks). `where`
// names the record in errors. Shared with the fuzz harness.
data::Record example_to_record(const Example& ex, const TfrecordSpec& spec, const std::string& where);

}  // namespace podlet::io
