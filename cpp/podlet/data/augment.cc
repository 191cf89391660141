#include "podlet/data/augment.h"

#include <cmath>
#include <vector>

namespace podlet::data {

enum : uint64_t { kSlotFlip = 0, kSlotDy = 1, kSlotDx = 2, kSlotAngle = 3, kSlotBrightness = 4, kSlotContrast = 5 };

uint64_t augment_key(const AugmentSpec& s, int op_index, uint64_t epoch, uint64_t position) {
  return fold(fold(fold(fold(s.seed, 0x617567ull /*"aug"*/), uint64_t(op_index)), epoch), position);
}

AugmentDraw draw_augment(const AugmentSpec& s, uint64_t key) {
  AugmentDraw d;
  if (s.hflip) d.flip = draw_unit(key, kSlotFlip) < 0.5;
  if (s.translate > 0) {
    uint64_t span = uint64_t(2 * s.translate + 1);
    d.dy = int(draw_below(key, kSlotDy, span)) - s.translate;
    d.dx = int(draw_below(key, kSlotDx, span)) - s.translate;
  }
  if (s.rotate > 0) d.angle_deg = (2 * draw_unit(key, kSlotAngle) - 1) * s.rotate;
  if (s.brightness > 0) d.brightness = (2 * draw_unit(key, kSlotBrightness) - 1) * s.brightness;
  if (s.contrast) d.contrast = s.contrast_lo + (s.contrast_hi - s.contrast_lo) * draw_unit(key, kSlotContrast);
  return d;
}

static inline int wrap(int v, int n) { v %= n; return v < 0 ? v + n : v; }

void apply_augment(const AugmentSpec& s, const AugmentDraw& d, const float* src, float* dst,
                   int H, int W, int C) {
  // Flip and roll only permute pixels: fold them into row/column lookup tables and let
  // the rotation (or a plain gather) read through them. Results are the same as doing
  // the steps one after another.
  std::vector<int> rows(H), cols(W);
  for (int y = 0; y < H; ++y) rows[y] = wrap(y - d.dy, H);
  for (int x = 0; x < W; ++x) {
    int c = wrap(x - d.dx, W);
    cols[x] = d.flip ? W - 1 - c : c;
  }
  auto at = [&](int y, int x) { return src + (size_t(rows[y]) * W + cols[x]) * C; };

  if (d.angle_deg == 0) {
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W; ++x) {
        const float* p = at(y, x);
        float* q = dst + (size_t(y) * W + x) * C;
        for (int c = 0; c < C; ++c) q[c] = p[c];
      }
  } else {
    // tfa.image.angles_to_projective_transforms, in float32 as TensorFlow computes it.
    const float rad = float(d.angle_deg * 3.14159265358979323846 / 180.0);
    const float cs = std::cos(rad), sn = std::sin(rad);
    const float wm1 = float(W - 1), hm1 = float(H - 1);
    const float xo = (wm1 - (cs * wm1 - sn * hm1)) / 2.0f;
    const float yo = (hm1 - (sn * wm1 + cs * hm1)) / 2.0f;
    const float t0 = cs, t1 = -sn, t2 = xo, t3 = sn, t4 = cs, t5 = yo;
    std::vector<float> zero(C, 0.0f);
    auto read = [&](int64_t y, int64_t x) -> const float* {
      return (y >= 0 && y < H && x >= 0 && x < W) ? at(int(y), int(x)) : zero.data();
    };
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W; ++x) {
        const float ox = float(x), oy = float(y);
        // ImageProjectiveTransformV3: input = (t0 x + t1 y + t2, t3 x + t4 y + t5) / 1
        const float ix = t0 * ox + t1 * oy + t2;
        const float iy = t3 * ox + t4 * oy + t5;
        float* q = dst + (size_t(y) * W + x) * C;
        const float fx = std::floor(ix), fy = std::floor(iy);
        const float cx = fx + 1, cy = fy + 1;
        const int64_t x0 = int64_t(fx), y0 = int64_t(fy), x1 = x0 + 1, y1 = y0 + 1;
        if (x1 < 0 || y1 < 0 || x0 >= W || y0 >= H) {
          for (int c = 0; c < C; ++c) q[c] = 0.0f;
          continue;
        }
        const float* a = read(y0, x0);
        const float* b = read(y0, x1);
        const float* e = read(y1, x0);
        const float* f = read(y1, x1);
        for (int c = 0; c < C; ++c) {
          const float top = (cx - ix) * a[c] + (ix - fx) * b[c];
          const float bot = (cx - ix) * e[c] + (ix - fx) * f[c];
          q[c] = (cy - iy) * top + (iy - fy) * bot;
        }
      }
  }

  const int64_t P = int64_t(H) * W;
  if (d.brightness != 0) {
    const float delta = float(d.brightness);
    for (int64_t i = 0; i < P * C; ++i) dst[i] += delta;
  }
  if (s.contrast) {
    const float f = float(d.contrast);
    for (int c = 0; c < C; ++c) {
      double sum = 0;
      for (int64_t p = 0; p < P; ++p) sum += dst[p * C + c];
      const float mean = float(sum / double(P));
      for (int64_t p = 0; p < P; ++p) {
        float& v = dst[p * C + c];
        v = (v - mean) * f + mean;
      }
    }
  }
}

}  // namespace podlet::data
