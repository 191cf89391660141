// The generator behind SyntheticDDSM. Each example is built from independent counter
// streams keyed by (seed, split, index): tissue, lesion, distractors and grain, so the
// lesion geometry can be re-derived without rendering the tissue.
//
// Look (intensities are fractions of white, before the final 8-bit quantisation):
//   tissue       fat (dark) and fibroglandular (bright) regions from a sigmoid of 1/f value
//                noise, a per-image density offset (breast density varies), fine texture
//                stronger in dense tissue, 2-6 curvilinear strands (ligaments, vessels)
//                and per-pixel grain.
//   BENIGN_MASS  oval, gently lobulated, smooth (wide) margin, low contrast.
//   MALIGNANT_MASS  irregular outline (harmonics 2-7), sharper margin, 0-14 spicules
//                radiating past the margin; sizes overlap the benign range.
//   BENIGN_CALCIFICATION  2-8 coarse round flat-topped dots scattered over a wide area.
//   MALIGNANT_CALCIFICATION  6-20 fine, pleomorphic (elongated, varied) specks in a
//                tight cluster; speck sizes overlap the benign range at the top end.
//   BACKGROUND   tissue only; 30% carry one or two isolated coarse dots (vascular or
//                skin calcifications) so "any bright dot" is not a shortcut.
// Masses add density that is partly masked by dense tissue (contrast falls as the tissue
// brightens), which is what makes masses hard to see in dense breasts.
#include "podlet/data/synthetic_ddsm.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include "podlet/data/counter_rng.h"
#include "podlet/error.h"

namespace podlet::data {
namespace {

constexpr double kPi = 3.14159265358979323846;
const char* kClassNames[5] = {"BACKGROUND", "BENIGN_CALCIFICATION", "BENIGN_MASS",
                              "MALIGNANT_CALCIFICATION", "MALIGNANT_MASS"};

// Stream tags folded into the example key.
enum : uint64_t { kTissue = 1, kLesion = 2, kDistractor = 3, kGrain = 4 };

double smoothstep(double e0, double e1, double x) {
  double t = std::clamp((x - e0) / (e1 - e0), 0.0, 1.0);
  return t * t * (3 - 2 * t);
}

// Adds amp * (smooth bilinear value noise on a cells x cells lattice) to out.
void add_value_noise(std::vector<float>& out, int S, int cells, double amp, CounterRng& rng) {
  const int L = cells + 1;
  std::vector<float> lat(size_t(L) * L);
  for (auto& g : lat) g = float(rng.uniform(-1, 1));
  std::vector<int> idx(S);
  std::vector<float> wt(S);
  for (int p = 0; p < S; ++p) {
    double x = (p + 0.5) / S * cells;
    int i = std::min(int(x), cells - 1);
    double t = x - i;
    idx[p] = i;
    wt[p] = float(t * t * (3 - 2 * t));
  }
  const float a = float(amp);
  for (int y = 0; y < S; ++y) {
    const float* r0 = &lat[size_t(idx[y]) * L];
    const float* r1 = r0 + L;
    const float ty = wt[y];
    float* o = &out[size_t(y) * S];
    for (int x = 0; x < S; ++x) {
      int ix = idx[x];
      float tx = wt[x];
      float top = r0[ix] + (r0[ix + 1] - r0[ix]) * tx;
      float bot = r1[ix] + (r1[ix + 1] - r1[ix]) * tx;
      o[x] += a * (top + (bot - top) * ty);
    }
  }
}

struct Pt { double x, y; };

// A line of Gaussian cross-section along a polyline (pixel units), amplitude tapering
// linearly from amp0 at the first point to amp1 at the last. Lines thinner than half a
// pixel are drawn half a pixel wide with the amplitude scaled down, so the line's
// integrated density (what a detector integrates) does not depend on the resolution.
void add_polyline(std::vector<float>& out, int S, const std::vector<Pt>& pts, double width,
                  double amp0, double amp1) {
  double w = std::max(width, 0.5);
  double k = width / w;
  amp0 *= k;
  amp1 *= k;
  double reach = 3 * w;
  double x0 = 1e30, y0 = 1e30, x1 = -1e30, y1 = -1e30;
  for (auto& p : pts) { x0 = std::min(x0, p.x); y0 = std::min(y0, p.y); x1 = std::max(x1, p.x); y1 = std::max(y1, p.y); }
  int bx0 = std::max(0, int(std::floor(x0 - reach))), by0 = std::max(0, int(std::floor(y0 - reach)));
  int bx1 = std::min(S, int(std::ceil(x1 + reach)) + 1), by1 = std::min(S, int(std::ceil(y1 + reach)) + 1);
  if (bx0 >= bx1 || by0 >= by1) return;
  int bw = bx1 - bx0, bh = by1 - by0;
  std::vector<float> best(size_t(bw) * bh, std::numeric_limits<float>::infinity()), along(size_t(bw) * bh, 0.f);
  std::vector<double> cum(pts.size(), 0.0);
  for (size_t i = 1; i < pts.size(); ++i) cum[i] = cum[i - 1] + std::hypot(pts[i].x - pts[i - 1].x, pts[i].y - pts[i - 1].y);
  double total = std::max(cum.back(), 1e-9);
  for (size_t s = 0; s + 1 < pts.size(); ++s) {
    Pt a = pts[s], b = pts[s + 1];
    double dx = b.x - a.x, dy = b.y - a.y, len2 = dx * dx + dy * dy, len = std::sqrt(len2);
    int sx0 = std::max(bx0, int(std::floor(std::min(a.x, b.x) - reach)));
    int sx1 = std::min(bx1, int(std::ceil(std::max(a.x, b.x) + reach)) + 1);
    int sy0 = std::max(by0, int(std::floor(std::min(a.y, b.y) - reach)));
    int sy1 = std::min(by1, int(std::ceil(std::max(a.y, b.y) + reach)) + 1);
    for (int y = sy0; y < sy1; ++y)
      for (int x = sx0; x < sx1; ++x) {
        double px = x + 0.5 - a.x, py = y + 0.5 - a.y;
        double t = len2 > 0 ? std::clamp((px * dx + py * dy) / len2, 0.0, 1.0) : 0.0;
        double ex = px - t * dx, ey = py - t * dy;
        float d2 = float(ex * ex + ey * ey);
        size_t j = size_t(y - by0) * bw + (x - bx0);
        if (d2 < best[j]) { best[j] = d2; along[j] = float((cum[s] + t * len) / total); }
      }
  }
  double inv2w2 = 1.0 / (2 * w * w);
  for (int y = by0; y < by1; ++y)
    for (int x = bx0; x < bx1; ++x) {
      size_t j = size_t(y - by0) * bw + (x - bx0);
      if (best[j] > reach * reach) continue;
      double amp = amp0 + (amp1 - amp0) * along[j];
      out[size_t(y) * S + x] += float(amp * std::exp(-best[j] * inv2w2));
    }
}

// One calcification: an ellipse with semi-axes a >= b (pixels), angle, amplitude. Round
// coarse dots are flat-topped (profile exp(-r^4/2)), fine specks Gaussian (exp(-r^2/2)).
// Below half a pixel the axes are clamped and the amplitude scaled to keep the area.
struct Speck { double x, y, a, b, angle, amp; int power; };

void add_speck(std::vector<float>& out, int S, const Speck& s) {
  double a = std::max(s.a, 0.5), b = std::max(s.b, 0.5);
  double amp = s.amp * (s.a * s.b) / (a * b);
  double reach = 3 * a;
  int x0 = std::max(0, int(std::floor(s.x - reach))), x1 = std::min(S, int(std::ceil(s.x + reach)) + 1);
  int y0 = std::max(0, int(std::floor(s.y - reach))), y1 = std::min(S, int(std::ceil(s.y + reach)) + 1);
  double c = std::cos(s.angle), sn = std::sin(s.angle);
  for (int y = y0; y < y1; ++y)
    for (int x = x0; x < x1; ++x) {
      double dx = x + 0.5 - s.x, dy = y + 0.5 - s.y;
      double u = (dx * c + dy * sn) / a, v = (-dx * sn + dy * c) / b;
      double r2 = u * u + v * v;
      double prof = s.power == 4 ? std::exp(-0.5 * r2 * r2) : std::exp(-0.5 * r2);
      out[size_t(y) * S + x] += float(amp * prof);
    }
}

// Everything random about an example's lesion, in pixels of an S x S image.
struct LesionParams {
  int label = kBackground;
  double cx = 0, cy = 0;
  // masses
  double R0 = 0, aspect = 1, orient = 0, edge = 0.1, contrast = 0;
  std::array<double, 8> harm_amp{}, harm_phase{};
  struct Spicule { std::vector<Pt> pts; double width, amp; };
  std::vector<Spicule> spicules;
  // calcifications
  std::vector<Speck> specks;
  double cluster_radius = 0;
};

double mass_radius_at(const LesionParams& L, double theta) {
  double r = 1.0;
  for (int k = 2; k < 8; ++k) r += L.harm_amp[k] * std::cos(k * theta + L.harm_phase[k]);
  return L.R0 * std::max(r, 0.3);
}

// rho = distance from the centre relative to the outline's radius in that direction.
double mass_rho(const LesionParams& L, double px, double py) {
  double dx = px - L.cx, dy = py - L.cy;
  double c = std::cos(L.orient), s = std::sin(L.orient);
  double u = dx * c + dy * s, v = (-dx * s + dy * c) / L.aspect;
  return std::hypot(u, v) / mass_radius_at(L, std::atan2(v, u));
}

LesionParams draw_lesion(uint64_t key, int label, int S) {
  CounterRng rng(key);
  LesionParams L;
  L.label = label;
  L.cx = rng.uniform(0.3, 0.7) * S;
  L.cy = rng.uniform(0.3, 0.7) * S;
  if (label == kBenignMass || label == kMalignantMass) {
    bool malignant = label == kMalignantMass;
    L.R0 = (malignant ? rng.uniform(0.06, 0.17) : rng.uniform(0.07, 0.19)) * S;
    L.aspect = malignant ? rng.uniform(0.7, 1.0) : rng.uniform(0.6, 1.0);
    L.orient = rng.uniform(0, kPi);
    L.edge = malignant ? rng.uniform(0.04, 0.14) : rng.uniform(0.14, 0.32);
    L.contrast = malignant ? rng.uniform(0.05, 0.13) : rng.uniform(0.05, 0.12);
    double irregular = malignant ? rng.uniform(0.25, 1.0) : rng.uniform(0.0, 0.3);
    for (int k = 2; k < 8; ++k) {
      double cap = malignant ? 0.13 : (k <= 3 ? 0.06 : 0.0);  // benign: lobulated at most
      L.harm_amp[k] = rng.uniform(0, cap) * irregular;
      L.harm_phase[k] = rng.uniform(0, 2 * kPi);
    }
    int n_spic = malignant ? int(rng.integer(0, 14) * irregular + 0.5) : 0;
    for (int i = 0; i < n_spic; ++i) {
      double th = rng.uniform(0, 2 * kPi);
      double len = L.R0 * rng.uniform(0.5, 1.5);
      double width = rng.uniform(0.003, 0.007) * S;
      double amp = L.contrast * rng.uniform(0.5, 1.0);
      double bend = rng.uniform(-0.25, 0.25);
      // Start inside the margin so the spicule grows out of the mass, not beside it.
      double r_in = mass_radius_at(L, th) * 0.8;
      LesionParams::Spicule sp{{}, width, amp};
      for (int j = 0; j <= 6; ++j) {
        double t = j / 6.0, r = r_in + t * (len + 0.2 * r_in), a = th + bend * t * t;
        // the outline is drawn in the rotated, squashed frame; spicules follow it
        double u = r * std::cos(a), v = r * std::sin(a) * L.aspect;
        double c = std::cos(L.orient), s = std::sin(L.orient);
        sp.pts.push_back({L.cx + u * c - v * s, L.cy + u * s + v * c});
      }
      L.spicules.push_back(std::move(sp));
    }
  } else if (label == kBenignCalcification || label == kMalignantCalcification) {
    bool malignant = label == kMalignantCalcification;
    int n = malignant ? int(rng.integer(6, 20)) : int(rng.integer(2, 8));
    double spread = (malignant ? rng.uniform(0.04, 0.10) : rng.uniform(0.14, 0.30)) * S;
    double amp_base = rng.uniform(0.10, 0.24);
    double extent = 0;
    for (int i = 0; i < n; ++i) {
      // uniform in the disk (sqrt) for benign; malignant specks crowd the centre
      double r = spread * (malignant ? rng.unit() : std::sqrt(rng.unit()));
      double th = rng.uniform(0, 2 * kPi);
      Speck s;
      s.x = L.cx + r * std::cos(th);
      s.y = L.cy + r * std::sin(th);
      double size = (malignant ? rng.uniform(0.004, 0.012) : rng.uniform(0.010, 0.026)) * S;
      double elong = malignant ? rng.uniform(1.0, 3.5) : rng.uniform(1.0, 1.3);
      s.a = size * std::sqrt(elong);
      s.b = size / std::sqrt(elong);
      s.angle = rng.uniform(0, kPi);
      s.amp = amp_base * (malignant ? rng.uniform(0.5, 1.3) : rng.uniform(0.8, 1.2));
      s.power = malignant ? 2 : 4;
      L.specks.push_back(s);
      extent = std::max(extent, r + 1.5 * s.a);
    }
    L.cluster_radius = std::max(extent, 1.0);
  }
  return L;
}

}  // namespace

const std::array<double, 5>& SyntheticDDSM::class_fractions() {
  // BACKGROUND 46.6% and malignant 22.3% are CBIS-DDSM's (TFDS patches train split); the
  // split of the rest follows CBIS-DDSM's case mix (more benign calcifications than
  // benign masses, more malignant masses than malignant calcifications).
  static const std::array<double, 5> f = {0.466, 0.168, 0.143, 0.099, 0.124};
  return f;
}

int64_t SyntheticDDSM::full_split_size(const std::string& split) {
  if (split == "train") return 49780;
  if (split == "validation") return 5580;
  if (split == "test") return 9770;
  throw ValueError(fmt("synthetic_ddsm: unknown split '", split, "'; expected 'train', 'validation' or 'test'"));
}

SyntheticDDSM::SyntheticDDSM(const std::string& split, int image_size, double scale, uint64_t seed)
    : split_(split), size_(image_size), seed_(seed) {
  int64_t full = full_split_size(split);
  split_id_ = split == "train" ? 0 : split == "validation" ? 1 : 2;
  if (!(image_size >= 16 && image_size <= 4096))
    throw ValueError(fmt("synthetic_ddsm: image_size must be in [16, 4096], got ", image_size));
  if (!(scale > 0) || !std::isfinite(scale))
    throw ValueError(fmt("synthetic_ddsm: scale must be a positive number, got ", scale));
  n_ = std::max<int64_t>(5, std::llround(double(full) * scale));
  // Largest-remainder rounding, then at least one example per class.
  const auto& f = class_fractions();
  std::array<double, 5> frac{};
  int64_t given = 0;
  for (int c = 0; c < 5; ++c) {
    double want = f[c] * double(n_);
    counts_[c] = int64_t(std::floor(want));
    frac[c] = want - double(counts_[c]);
    given += counts_[c];
  }
  while (given < n_) {
    int best = 0;
    for (int c = 1; c < 5; ++c) if (frac[c] > frac[best]) best = c;
    counts_[best] += 1; frac[best] = -1; ++given;
  }
  for (int c = 0; c < 5; ++c)
    if (counts_[c] == 0) {
      int big = int(std::max_element(counts_.begin(), counts_.end()) - counts_.begin());
      counts_[big] -= 1; counts_[c] = 1;
    }
  for (int c = 0; c < 5; ++c) cum_[c + 1] = cum_[c] + counts_[c];
  int bits = 2;
  while ((int64_t(1) << bits) < n_) ++bits;
  if (bits % 2) ++bits;
  half_bits_ = bits / 2;
  label_key_ = fold(fold(fold(seed_, 0x646473ull /*"dds"*/), uint64_t(split_id_)), 0x6C6162656Cull /*"label"*/);
}

// A 4-round Feistel network on [0, 2^bits) with cycle walking onto [0, n): a keyed
// bijection of [0, n), so slot ranges map to exact class counts.
uint64_t SyntheticDDSM::permute(uint64_t x) const {
  const uint64_t mask = (uint64_t(1) << half_bits_) - 1;
  do {
    uint64_t l = x >> half_bits_, r = x & mask;
    for (uint64_t round = 0; round < 4; ++round) {
      uint64_t t = l ^ (fold(label_key_, (round << 40) | r) & mask);
      l = r; r = t;
    }
    x = (l << half_bits_) | r;
  } while (x >= uint64_t(n_));
  return x;
}

void SyntheticDDSM::check_index(int64_t index) const {
  if (index < 0 || index >= n_)
    throw ValueError(fmt("synthetic_ddsm ", split_, ": index ", index, " out of range [0, ", n_, ")"));
}

uint64_t SyntheticDDSM::example_key(int64_t index) const {
  return fold(fold(fold(seed_, 0x646473ull), uint64_t(split_id_)), uint64_t(index));
}

int32_t SyntheticDDSM::label(int64_t index) const {
  check_index(index);
  uint64_t slot = permute(uint64_t(index));
  int c = 0;
  while (int64_t(slot) >= cum_[c + 1]) ++c;
  return c;
}

std::string SyntheticDDSM::describe() const {
  return fmt("synthetic_ddsm:", split_, " (", n_, " examples, ", size_, "x", size_, "x1, seed ", seed_, ")");
}

std::vector<std::string> SyntheticDDSM::class_names() const {
  return {kClassNames, kClassNames + 5};
}

Record SyntheticDDSM::get(int64_t index) const {
  const int32_t label = this->label(index);
  const int S = size_;
  const uint64_t key = example_key(index);
  std::vector<float> img(size_t(S) * S, 0.f);

  // Tissue: sigmoid of 1/f noise -> fibroglandular fraction T in (0, 1).
  CounterRng trng(fold(key, kTissue));
  std::vector<float> D(size_t(S) * S, 0.f);
  const int cells[5] = {2, 4, 8, 16, 32};
  const double amps[5] = {1.0, 0.6, 0.35, 0.2, 0.1};
  for (int o = 0; o < 5; ++o) add_value_noise(D, S, cells[o], amps[o], trng);
  double offset = trng.uniform(-0.6, 0.6), gain = trng.uniform(2.5, 5.0);
  double fat = trng.uniform(0.12, 0.28), dense = fat + trng.uniform(0.22, 0.42);
  std::vector<float> fine(size_t(S) * S, 0.f);
  add_value_noise(fine, S, 48, 1.0, trng);
  double fine_amp = trng.uniform(0.02, 0.045);
  std::vector<float> T(size_t(S) * S);
  for (size_t p = 0; p < img.size(); ++p) {
    double t = 1.0 / (1.0 + std::exp(-gain * (D[p] + offset)));
    T[p] = float(t);
    img[p] = float(fat + (dense - fat) * t + fine_amp * fine[p] * (0.4 + t));
  }
  int n_strands = int(trng.integer(2, 6));
  for (int s = 0; s < n_strands; ++s) {
    // a quadratic Bezier entering and leaving through the border
    auto border = [&]() {
      double t = trng.uniform(0, 4);
      int side = int(t); double f = t - side;
      Pt p = side == 0 ? Pt{f, 0} : side == 1 ? Pt{1, f} : side == 2 ? Pt{1 - f, 1} : Pt{0, 1 - f};
      return Pt{p.x * S, p.y * S};
    };
    Pt a = border(), b = border(), m{trng.uniform(0.15, 0.85) * S, trng.uniform(0.15, 0.85) * S};
    double width = trng.uniform(0.003, 0.009) * S, amp = trng.uniform(-0.02, 0.06);
    std::vector<Pt> pts;
    for (int j = 0; j <= 24; ++j) {
      double t = j / 24.0, u = 1 - t;
      pts.push_back({u * u * a.x + 2 * u * t * m.x + t * t * b.x, u * u * a.y + 2 * u * t * m.y + t * t * b.y});
    }
    add_polyline(img, S, pts, width, amp, amp);
  }

  // Lesion: density partly masked by dense tissue.
  LesionParams L = draw_lesion(fold(key, kLesion), label, S);
  if (label == kBenignMass || label == kMalignantMass) {
    std::vector<float> dens(size_t(S) * S, 0.f);
    double rmax = L.R0 * 1.6 / std::min(L.aspect, 1.0) + 2;
    int x0 = std::max(0, int(L.cx - rmax)), x1 = std::min(S, int(L.cx + rmax) + 1);
    int y0 = std::max(0, int(L.cy - rmax)), y1 = std::min(S, int(L.cy + rmax) + 1);
    double edge = std::max(L.edge, 0.7 / L.R0);
    for (int y = y0; y < y1; ++y)
      for (int x = x0; x < x1; ++x) {
        double rho = mass_rho(L, x + 0.5, y + 0.5);
        double p = 1 - smoothstep(1 - edge, 1 + edge, rho);
        dens[size_t(y) * S + x] += float(L.contrast * p * (1.0 + 0.25 * (1 - std::min(rho, 1.0))));
      }
    for (auto& sp : L.spicules) add_polyline(dens, S, sp.pts, sp.width, sp.amp, 0.0);
    for (size_t p = 0; p < img.size(); ++p) img[p] += dens[p] * (1.15f - img[p]);
  }
  for (auto& s : L.specks) add_speck(img, S, s);

  if (label == kBackground) {
    CounterRng drng(fold(key, kDistractor));
    if (drng.bernoulli(0.3)) {
      int n = int(drng.integer(1, 2));
      for (int i = 0; i < n; ++i) {
        double size = drng.uniform(0.010, 0.026) * S;
        Speck s{drng.uniform(0.1, 0.9) * S, drng.uniform(0.1, 0.9) * S, size, size, 0.0,
                drng.uniform(0.10, 0.24), 4};
        add_speck(img, S, s);
      }
    }
  }

  CounterRng grng(fold(key, kGrain));
  double grain = grng.uniform(0.006, 0.014);
  Record r;
  r.height = r.width = S;
  r.channels = 1;
  r.label = label;
  r.id = fmt(split_, "/", index);
  r.image.resize(size_t(S) * S);
  for (size_t p = 0; p < img.size(); ++p) {
    // per-pixel grain from the pixel's own counter: independent of generation order
    double g = grain * (draw_unit(grng.key, 2 * p + 16) + draw_unit(grng.key, 2 * p + 17) - 1.0) * 2.449489742783178;
    double v = std::clamp(double(img[p]) + g, 0.0, 1.0);
    r.image[p] = uint8_t(std::lround(v * 255.0));
  }
  return r;
}

Lesion SyntheticDDSM::lesion(int64_t index) const {
  const int32_t label = this->label(index);
  const int S = size_;
  Lesion out;
  out.label = label;
  out.mask.assign(size_t(S) * S, 0);
  if (label == kBackground) return out;
  LesionParams L = draw_lesion(fold(example_key(index), kLesion), label, S);
  out.present = true;
  out.cx = L.cx;
  out.cy = L.cy;
  bool mass = label == kBenignMass || label == kMalignantMass;
  out.radius = mass ? L.R0 : L.cluster_radius;
  int x0 = S, y0 = S, x1 = 0, y1 = 0;
  for (int y = 0; y < S; ++y)
    for (int x = 0; x < S; ++x) {
      double px = x + 0.5, py = y + 0.5;
      bool in = mass ? mass_rho(L, px, py) <= 1.0
                     : std::hypot(px - L.cx, py - L.cy) <= L.cluster_radius;
      if (!in) continue;
      out.mask[size_t(y) * S + x] = 1;
      x0 = std::min(x0, x); y0 = std::min(y0, y); x1 = std::max(x1, x + 1); y1 = std::max(y1, y + 1);
    }
  if (x1 == 0) {  // a sub-pixel lesion: mark the pixel holding the centre
    int x = std::clamp(int(L.cx), 0, S - 1), y = std::clamp(int(L.cy), 0, S - 1);
    out.mask[size_t(y) * S + x] = 1;
    x0 = x; y0 = y; x1 = x + 1; y1 = y + 1;
  }
  out.x0 = x0; out.y0 = y0; out.x1 = x1; out.y1 = y1;
  return out;
}

}  // namespace podlet::data
