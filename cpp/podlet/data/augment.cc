#include "podlet/data/augment.h"

#include <cmath>
#include <cstring>
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

// floor() for |v| < 2^31 without a libm call (baseline x86-64 has no SSE4.1 roundss).
static inline float floor_small(float v) {
  float t = float(int(v));
  return t > v ? t - 1.0f : t;
}

void apply_augment(const AugmentSpec& s, const AugmentDraw& d, const float* src, float* dst,
                   int H, int W, int C) {
  const size_t row = size_t(W) * C;
  // Flip and roll only permute pixels. Materialise the permuted image with a one-pixel
  // zero border: the rotation then reads its four corners without bounds checks, and a
  // corner in the border reads 0 exactly as TF's per-corner constant fill does.
  thread_local std::vector<float> padded;
  const int PW = W + 2;
  const bool rotate = d.angle_deg != 0;
  float* geo;                 // where the flipped + rolled image goes
  size_t geo_stride;          // floats per row there
  if (rotate) {
    padded.assign(size_t(H + 2) * PW * C, 0.0f);
    geo = padded.data() + (size_t(PW) + 1) * C;
    geo_stride = size_t(PW) * C;
  } else {
    geo = dst;
    geo_stride = row;
  }
  const int sx = wrap(d.dx, W);
  for (int y = 0; y < H; ++y) {
    const float* in = src + size_t(wrap(y - d.dy, H)) * row;
    float* out = geo + size_t(y) * geo_stride;
    if (!d.flip) {  // out[x] = in[(x - dx) mod W]: two contiguous pieces
      std::memcpy(out + size_t(sx) * C, in, size_t(W - sx) * C * sizeof(float));
      std::memcpy(out, in + size_t(W - sx) * C, size_t(sx) * C * sizeof(float));
    } else {        // out[x] = in[W - 1 - ((x - dx) mod W)]
      for (int x = 0; x < W; ++x) {
        const float* p = in + size_t(W - 1 - wrap(x - d.dx, W)) * C;
        for (int c = 0; c < C; ++c) out[size_t(x) * C + c] = p[c];
      }
    }
  }

  if (rotate) {
    // tfa.image.angles_to_projective_transforms, in float32 as TensorFlow computes it.
    const float rad = float(d.angle_deg * 3.14159265358979323846 / 180.0);
    const float cs = std::cos(rad), sn = std::sin(rad);
    const float wm1 = float(W - 1), hm1 = float(H - 1);
    const float xo = (wm1 - (cs * wm1 - sn * hm1)) / 2.0f;
    const float yo = (hm1 - (sn * wm1 + cs * hm1)) / 2.0f;
    const float t0 = cs, t1 = -sn, t2 = xo, t3 = sn, t4 = cs, t5 = yo;
    const float* base = padded.data();
    // Per row: coordinates and floors first (a loop the compiler vectorises), then the
    // gathers. Same float operations per pixel as the one-loop form.
    thread_local std::vector<float> ixs, iys, fxs, fys;
    ixs.resize(W); iys.resize(W); fxs.resize(W); fys.resize(W);
    for (int y = 0; y < H; ++y) {
      const float oy = float(y);
      for (int x = 0; x < W; ++x) {
        const float ox = float(x);
        // ImageProjectiveTransformV3: input = (t0 x + t1 y + t2, t3 x + t4 y + t5) / 1
        const float ix = t0 * ox + t1 * oy + t2;
        const float iy = t3 * ox + t4 * oy + t5;
        ixs[x] = ix; iys[x] = iy;
        fxs[x] = floor_small(ix); fys[x] = floor_small(iy);
      }
      float* q = dst + size_t(y) * row;
      for (int x = 0; x < W; ++x, q += C) {
        const float ix = ixs[x], iy = iys[x];
        // all four corners outside the image (beyond the zero border): the fill value
        if (!(ix >= -1.0f && ix < float(W) && iy >= -1.0f && iy < float(H))) {
          for (int c = 0; c < C; ++c) q[c] = 0.0f;
          continue;
        }
        const float fx = fxs[x], fy = fys[x];
        const float cx = fx + 1, cy = fy + 1;
        const float wx0 = cx - ix, wx1 = ix - fx, wy0 = cy - iy, wy1 = iy - fy;
        const float* a = base + (size_t(int(fy) + 1) * PW + size_t(int(fx) + 1)) * C;
        const float* e = a + size_t(PW) * C;
        for (int c = 0; c < C; ++c) {
          const float top = wx0 * a[c] + wx1 * a[C + c];
          const float bot = wx0 * e[c] + wx1 * e[C + c];
          q[c] = wy0 * top + wy1 * bot;
        }
      }
    }
  }

  const int64_t P = int64_t(H) * W;
  const float delta = float(d.brightness);
  if (!s.contrast) {
    if (delta != 0)
      for (int64_t i = 0; i < P * C; ++i) dst[i] += delta;
    return;
  }
  // Brightness and contrast in one sweep per channel: x += delta, mean of that, then
  // (x - mean) * f + mean. Eight partial sums in a fixed order keep the mean fast and
  // deterministic.
  const float f = float(d.contrast);
  for (int c = 0; c < C; ++c) {
    double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t p = 0;
    for (; p + 8 <= P; p += 8)
      for (int k = 0; k < 8; ++k) {
        float& v = dst[(p + k) * C + c];
        v += delta;
        part[k] += v;
      }
    for (; p < P; ++p) {
      float& v = dst[p * C + c];
      v += delta;
      part[0] += v;
    }
    const double sum = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
    const float mean = float(sum / double(P));
    for (int64_t q = 0; q < P; ++q) {
      float& v = dst[q * C + c];
      v = (v - mean) * f + mean;
    }
  }
}

}  // namespace podlet::data
