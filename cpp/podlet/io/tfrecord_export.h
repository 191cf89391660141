// Writes a data::Source as TFRecord shards of tf.train.Example records in the TFDS
// image-classification layout: features image (JPEG bytes), label (int64), id (bytes).
// Examples are JPEG-encoded in parallel and written in index order, so the bytes on
// disk do not depend on the thread count. Shard s holds examples
// [s*N/S, (s+1)*N/S). The TFDS metadata files are written by podlet.data.export.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "podlet/data/source.h"

namespace podlet::io {

struct ExportStats {
  std::vector<int64_t> shard_lengths;
  uint64_t num_bytes = 0;            // sum of the shard file sizes
  int height = -1, width = -1, channels = -1;  // common image shape; -1 where images differ
  int64_t max_label = -1;
};

// `paths` are the shard files to create (callers pass temporary names and rename them
// once every shard is complete). Throws ValueError naming the example on bad input.
ExportStats export_tfrecord_shards(const data::Source& src, const std::vector<std::string>& paths, int quality);

// The serialised tf.train.Example for one record (JPEG at `quality`).
std::string encode_example(const data::Record& r, int quality, const std::string& where);

}  // namespace podlet::io
