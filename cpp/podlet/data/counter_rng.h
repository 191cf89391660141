// Counter-based random numbers for the input pipeline: every draw is a pure function of
// (key, counter), so any example's randomness can be computed on any thread, in any
// order, and re-computed later (resume, debug hooks, tests) without replaying a stream.
//
// draw(key, c) is the c-th output of SplitMix64 started at state `key`:
//   z = key + (c + 1) * 0x9E3779B97F4A7C15, then the SplitMix64 finaliser.
// It is short enough to re-implement in a few lines of Python (tests do, to check the
// shuffle against a plain model of tf.data's buffer shuffle).
#pragma once
#include <cmath>
#include <cstdint>

namespace podlet::data {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Derives a child key: keys for (seed, split, index) or (seed, epoch, position) are
// built by folding each coordinate in turn.
inline uint64_t fold(uint64_t key, uint64_t v) { return mix64(key ^ mix64(v + kGolden)); }

inline uint64_t draw(uint64_t key, uint64_t counter) { return mix64(key + (counter + 1) * kGolden); }

// Uniform integer in [0, n) by multiply-shift (Lemire, without the rejection step: the
// bias is below n / 2^64, far under anything a data pipeline could notice).
inline uint64_t draw_below(uint64_t key, uint64_t counter, uint64_t n) {
  return uint64_t((unsigned __int128)draw(key, counter) * n >> 64);
}

// Uniform double in [0, 1) from the top 53 bits.
inline double draw_unit(uint64_t key, uint64_t counter) {
  return double(draw(key, counter) >> 11) * 0x1.0p-53;
}

// A sequential view of one key's counter stream, for generators that take many draws.
struct CounterRng {
  uint64_t key;
  uint64_t counter = 0;
  explicit CounterRng(uint64_t k) : key(k) {}
  uint64_t next() { return draw(key, counter++); }
  double unit() { return draw_unit(key, counter++); }
  double uniform(double lo, double hi) { return lo + (hi - lo) * unit(); }
  int64_t integer(int64_t lo, int64_t hi) {  // inclusive
    return lo + int64_t(draw_below(key, counter++, uint64_t(hi - lo + 1)));
  }
  bool bernoulli(double p) { return unit() < p; }
  double normal() {  // Box-Muller; one draw pair per call keeps counters simple
    double u1 = 1.0 - unit(), u2 = unit();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};

}  // namespace podlet::data
