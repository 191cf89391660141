// Datasets as HDF5 shards, one file per shard, each holding
//   image  (N, H, W, C) uint8      (N, H, W) is read as C = 1
//   label  (N,) any integer type   read as int32, checked against the class count
//   id     (N,) strings            variable- or fixed-length; optional on read
//   attribute class_names on "/"  (strings; optional on read)
// which is what h5py writes from NumPy arrays, so shards can be made and inspected
// with plain h5py. Images must have the same H, W, C in every shard.
//
// The HDF5 library here is not built thread-safe, so every HDF5 call in podlet runs
// under hdf5_mutex(); labels and ids are read once at open, images one hyperslab per
// get().
#pragma once
#include <mutex>
#include <string>
#include <vector>

#include "podlet/data/source.h"

namespace podlet::io {

// Serialises every HDF5 call in the process (checkpoints included).
std::mutex& hdf5_mutex();

// Opens the shards in order; throws ValueError naming the file and dataset on any
// missing dataset, wrong dtype or rank, or disagreeing sizes.
std::shared_ptr<data::Source> open_hdf5_source(const std::vector<std::string>& paths);

// Writes every example of `src` to `path` (created or truncated; callers wanting
// atomic replacement pass a temporary name). gzip_level 0 stores images uncompressed.
void write_hdf5(const data::Source& src, const std::string& path, int gzip_level = 0);

}  // namespace podlet::io
