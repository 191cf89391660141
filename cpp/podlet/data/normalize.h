// The seed's preprocessing: image = uint8 / 255 (float32), then either
//   mean_std:         (image - mean) / std       (per channel, or one value for all)
//   minus_one_to_one: image * 2 - 1
//   unit:             image as is (what the pipeline yields when normalize() is not used)
// Float32 arithmetic in that order, as tf.cast(image, tf.float32) / 255.0 followed by
// the seed's expression, so results match TensorFlow's bit for bit.
#pragma once
#include <cstdint>
#include <vector>
#include "podlet/error.h"

namespace podlet::data {

struct NormalizeSpec {
  enum Mode { kUnit, kMeanStd, kMinusOneToOne } mode = kUnit;
  std::vector<float> mean, std;  // mean_std: 1 or `channels` values each
};

inline void check_normalize(const NormalizeSpec& n, int channels) {
  if (n.mode != NormalizeSpec::kMeanStd) return;
  for (auto* v : {&n.mean, &n.std})
    if (v->size() != 1 && int(v->size()) != channels)
      throw ValueError(fmt("normalize mean_std: mean and std need 1 or ", channels,
                           " values (one per channel), got ", v->size()));
}

// In place on float32 values already divided by 255.
inline void apply_normalize(const NormalizeSpec& n, float* x, int64_t pixels, int channels) {
  if (n.mode == NormalizeSpec::kUnit) return;
  if (n.mode == NormalizeSpec::kMinusOneToOne) {
    for (int64_t i = 0; i < pixels * channels; ++i) x[i] = x[i] * 2.0f - 1.0f;
    return;
  }
  if (n.mean.size() == 1 && n.std.size() == 1) {  // one value for all channels: a flat loop
    const float m = n.mean[0], s = n.std[0];
    for (int64_t i = 0; i < pixels * channels; ++i) x[i] = (x[i] - m) / s;
    return;
  }
  for (int64_t p = 0; p < pixels; ++p)
    for (int c = 0; c < channels; ++c) {
      float m = n.mean.size() == 1 ? n.mean[0] : n.mean[c];
      float s = n.std.size() == 1 ? n.std[0] : n.std[c];
      float& v = x[p * channels + c];
      v = (v - m) / s;
    }
}

}  // namespace podlet::data
