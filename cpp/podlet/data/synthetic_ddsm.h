// Synthetic mammography patches: the embedded default dataset, shaped like TFDS
// curated_breast_imaging_ddsm/patches:3.0.0 (grayscale, 5 classes, the real split sizes
// and class imbalance) but generated procedurally, on the fly, from (seed, split, index).
//
// Every example is a pure function of (seed, split, index, image_size): nothing is stored
// and any example can be produced on any thread. Geometry is drawn in units of the image
// side, so one (seed, split, index) shows the same tissue and lesion at every resolution
// (only the per-pixel grain differs).
//
// Labels come from a keyed bijection of [0, n) onto class-sorted slots, so label(i) costs
// a few hashes, class counts are exact, and the classes are spread evenly over indices.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>
#include "podlet/data/source.h"

namespace podlet::data {

enum DdsmClass : int32_t {
  kBackground = 0,
  kBenignCalcification = 1,
  kBenignMass = 2,
  kMalignantCalcification = 3,
  kMalignantMass = 4,
};

// The lesion an example shows, in pixels of the generated image. Pixel (row r, col c)
// covers [c, c+1) x [r, r+1); cx/cy are column/row positions in that frame.
struct Lesion {
  int32_t label = kBackground;
  bool present = false;                 // false for BACKGROUND
  double cx = 0, cy = 0;                // centre
  double radius = 0;                    // mass: mean radius; calcifications: cluster radius
  int x0 = 0, y0 = 0, x1 = 0, y1 = 0;   // bounding box of the mask, half-open
  std::vector<uint8_t> mask;            // size*size, 1 inside the lesion
};

class SyntheticDDSM final : public Source {
 public:
  // split: "train" | "validation" | "test"; scale > 0 multiplies the split size (at
  // least one example per class); image_size in [16, 4096].
  SyntheticDDSM(const std::string& split, int image_size, double scale, uint64_t seed);

  int64_t size() const override { return n_; }
  Record get(int64_t index) const override;
  std::string describe() const override;
  std::vector<std::string> class_names() const override;

  int32_t label(int64_t index) const;
  const std::array<int64_t, 5>& class_counts() const { return counts_; }
  Lesion lesion(int64_t index) const;
  int image_size() const { return size_; }
  const std::string& split() const { return split_; }

  static const std::array<double, 5>& class_fractions();
  static int64_t full_split_size(const std::string& split);  // TFDS sizes, scale 1

 private:
  void check_index(int64_t index) const;
  uint64_t example_key(int64_t index) const;
  uint64_t permute(uint64_t x) const;

  std::string split_;
  int split_id_;
  int size_;
  uint64_t seed_;
  int64_t n_;
  std::array<int64_t, 5> counts_{};
  std::array<int64_t, 6> cum_{};  // class c owns permuted slots [cum_[c], cum_[c+1])
  int half_bits_;
  uint64_t label_key_;
};

}  // namespace podlet::data
