// The seed's conservative augmentation, on one float32 HWC image, in this order:
//   1. hflip      (only when enabled; p = 0.5)             image[:, ::-1]
//   2. translate  tf.roll by (dy, dx), each uniform in [-translate, translate]
//                 (wrap-around: out[y, x] = in[(y - dy) mod H, (x - dx) mod W])
//   3. rotate     bilinear rotation about the image centre by a uniform angle in
//                 [-rotate, rotate] degrees, exactly as ImageProjectiveTransformV3 with
//                 the tfa/keras rotation matrix, interpolation BILINEAR, fill_mode
//                 CONSTANT, fill_value 0 (a corner outside the image reads as 0)
//   4. brightness image + delta, delta uniform in [-brightness, brightness]
//   5. contrast   (image - mean) * f + mean per channel (tf.image.adjust_contrast),
//                 f uniform in [lo, hi]
// No clipping: the seed augments normalised images, which have no [0, 1] range to keep.
// Every draw is draw(key, slot) with key = fold(fold(fold(seed, "aug"), op), epoch)
// folded with the element's position in the epoch stream, one fixed slot per parameter,
// so a parameter's value does not depend on which other augmentations are enabled.
#pragma once
#include <cstdint>
#include "podlet/data/counter_rng.h"

namespace podlet::data {

struct AugmentSpec {
  int translate = 0;        // pixels
  double rotate = 0;        // degrees
  double brightness = 0;
  bool contrast = false;
  double contrast_lo = 1, contrast_hi = 1;
  bool hflip = false;
  uint64_t seed = 0;
};

struct AugmentDraw {
  bool flip = false;
  int dy = 0, dx = 0;
  double angle_deg = 0;
  double brightness = 0;
  double contrast = 1;
};

uint64_t augment_key(const AugmentSpec& s, int op_index, uint64_t epoch, uint64_t position);
AugmentDraw draw_augment(const AugmentSpec& s, uint64_t key);

// src and dst are distinct H*W*C buffers; the result ends in dst.
void apply_augment(const AugmentSpec& s, const AugmentDraw& d, const float* src, float* dst,
                   int H, int W, int C);

}  // namespace podlet::data
