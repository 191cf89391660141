// Counter-based random numbers: the Threefry-2x32 hash and jax.random's samplers,
// bit for bit.
//
// jax's default PRNG (jax 0.10.2: impl "threefry2x32", jax_threefry_partitionable=True)
// is a pure function of (key, counter), so every sampler here is an elementwise loop
// over output positions: element i hashes counter i under the key. That makes the
// kernels trivially parallel and deterministic for any thread count.
//
// The samplers reproduce the exact float operations XLA:CPU runs for jax.random, read
// off its optimised LLVM IR and machine code: which multiply-adds LLVM contracts into
// FMAs (every std::fma below is one; everything else is rounded per op), the Cephes
// log it substitutes for llvm.log, the order of every add, bf16 rounding after each op.
// std::fma is correctly rounded with or without FMA hardware, so the baseline build and
// the FMA build of the sampler loops (run_chunk_fma) give the same bits; `rounded()`
// stops the compiler from contracting a product XLA keeps separate.
//
// Primitives (all zero_grad):
//   threefry2x32(k1, k2, x1, x2)              -> (y1, y2)       the raw hash, broadcasting
//   random_seed(seed)                         -> key u32[2]     [0, uint32(seed)]
//   random_split(key; shape)                  -> u32[*shape, 2]
//   random_fold_in(key, data)                 -> key
//   random_bits(key; shape, bit_width 8|32)   -> u8 / u32
//   random_uniform(key, minval, maxval; shape)      -> float (dtype of minval)
//   random_bernoulli(key, p; shape, mode)     -> bool
//   random_normal(key; shape, dtype)          -> float
//   random_truncated_normal(key, lower, upper; shape) -> float
//   random_randint(key, minval, maxval; shape, dtype) -> int32 / uint32 / uint8
//   random_permutation_indices(key; shape, axis)      -> int32 (jax's sort-based shuffle)
// vmap: threefry2x32 broadcasts like any elementwise primitive; every other primitive
// here runs batched keys (and batched parameters) as one node whose kernel draws element
// b from key b exactly as the unbatched kernel would (batching::looped, attr vmap_size):
// vmap over keys gives the bits of a loop over keys, as in jax.
// Every sampler takes attr `partitionable` (default 1 = jax's default); 0 reproduces
// jax_threefry_partitionable=False.
#include "podlet/prims/common.h"
#include "podlet/ir/batch_ops.h"
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <limits>

// Small float helpers are force-inlined so that the FMA build of the sampler loops
// (run_chunk_fma below) compiles them with FMA instructions.
#define PODLET_RANDOM_INLINE [[gnu::always_inline]] inline

namespace podlet {
namespace {

// =====================================================================================
// Threefry-2x32, 20 rounds (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
// SC'11), exactly as jax's reference lowering in jax/_src/random/threefry2x32.py.
// =====================================================================================
inline uint32_t rotl32(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }

struct Pair { uint32_t a, b; };

inline Pair threefry2x32(uint32_t k0, uint32_t k1, uint32_t x0, uint32_t x1) {
  const uint32_t ks[3] = {k0, k1, k0 ^ k1 ^ 0x1BD11BDAu};
  constexpr int kRot[2][4] = {{13, 15, 26, 6}, {17, 29, 16, 24}};
  x0 += ks[0];
  x1 += ks[1];
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 4; ++j) {
      x0 += x1;
      x1 = rotl32(x1, kRot[i & 1][j]);
      x1 ^= x0;
    }
    x0 += ks[(i + 1) % 3];
    x1 += ks[(i + 2) % 3] + uint32_t(i + 1);
  }
  return {x0, x1};
}

// Hashes counters [start, start + n) as 64-bit numbers split (hi, lo), like jax's
// iota_2x32_shape: y0[i], y1[i] = threefry(key, hi(start+i), lo(start+i)). The plain
// loop over arrays lets the compiler vectorise the 20 rounds.
void hash_counters(uint32_t k0, uint32_t k1, uint64_t start, int64_t n, uint32_t* y0, uint32_t* y1) {
  for (int64_t i = 0; i < n; ++i) {
    uint64_t c = start + uint64_t(i);
    Pair p = threefry2x32(k0, k1, uint32_t(c >> 32), uint32_t(c));
    y0[i] = p.a;
    y1[i] = p.b;
  }
}

// jax's non-partitionable `threefry_2x32(key, iota(W))`: the W counters are split into
// halves x0 = [0, h), x1 = [h, 2h) (zero-padded when W is odd), hashed pairwise, and the
// outputs concatenated [y0..., y1...]. Returns word m of that stream.
inline uint32_t original_word(uint32_t k0, uint32_t k1, uint64_t W, uint64_t m) {
  const uint64_t h = (W + 1) / 2;
  if (m < h) {
    uint64_t x1 = h + m < W ? h + m : 0;
    return threefry2x32(k0, k1, uint32_t(m), uint32_t(x1)).a;
  }
  uint64_t j = m - h;
  return threefry2x32(k0, k1, uint32_t(j), uint32_t(h + j)).b;
}

struct Key { uint32_t k0, k1; };

void check_key(const AVal& k, const char* what = "key") {
  if (k.dtype != DType::u32 || k.shape != Shape{2})
    throw DTypeError(fmt(what, " must be a uint32 array of shape (2,) (a raw threefry key from PRNGKey/split), got ",
                         dtype_name(k.dtype), shape_str(k.shape)));
}
Key read_key(const Array& a) { const uint32_t* p = a.data<uint32_t>(); return {p[0], p[1]}; }

constexpr uint64_t kMaxOriginalWords = 0xFFFFFFFFull;  // jax switches to a blocked scheme beyond this

// The random bits jax draws for an array of n elements of `width` bits (8, 32 or 64),
// in either of jax's two schemes. fill() produces the bits of elements [s, s+len).
class BitSource {
 public:
  BitSource(Key k, int64_t n, int width, bool partitionable) : k_(k), n_(uint64_t(n)), part_(partitionable) {
    if (!part_) {
      words_ = (uint64_t(width) * n_ + 31) / 32;
      if (words_ >= kMaxOriginalWords)
        throw ValueError(fmt("random arrays of more than 2**32 - 1 32-bit words are not supported with "
                             "jax_threefry_partitionable=False (got ", n, " elements)"));
    }
  }
  void fill(int64_t s, int64_t len, uint32_t* out) const {
    if (part_) {
      uint32_t y1[kBlock];
      for (int64_t o = 0; o < len; o += kBlock) {
        int64_t m = std::min<int64_t>(kBlock, len - o);
        hash_counters(k_.k0, k_.k1, uint64_t(s + o), m, out + o, y1);
        for (int64_t i = 0; i < m; ++i) out[o + i] ^= y1[i];
      }
    } else {
      for (int64_t i = 0; i < len; ++i) out[i] = original_word(k_.k0, k_.k1, words_, uint64_t(s + i));
    }
  }
  void fill(int64_t s, int64_t len, uint8_t* out) const {
    if (part_) {
      uint32_t y0[kBlock], y1[kBlock];
      for (int64_t o = 0; o < len; o += kBlock) {
        int64_t m = std::min<int64_t>(kBlock, len - o);
        hash_counters(k_.k0, k_.k1, uint64_t(s + o), m, y0, y1);
        for (int64_t i = 0; i < m; ++i) out[o + i] = uint8_t(y0[i] ^ y1[i]);
      }
    } else {  // bytes of the word stream, little end first
      for (int64_t i = 0; i < len; ++i) {
        uint64_t e = uint64_t(s + i);
        out[i] = uint8_t(original_word(k_.k0, k_.k1, words_, e / 4) >> (8 * (e % 4)));
      }
    }
  }
  void fill(int64_t s, int64_t len, uint64_t* out) const {
    if (part_) {
      uint32_t y0[kBlock], y1[kBlock];
      for (int64_t o = 0; o < len; o += kBlock) {
        int64_t m = std::min<int64_t>(kBlock, len - o);
        hash_counters(k_.k0, k_.k1, uint64_t(s + o), m, y0, y1);
        for (int64_t i = 0; i < m; ++i) out[o + i] = (uint64_t(y0[i]) << 32) | y1[i];
      }
    } else {  // high words are the first half of the stream, low words the second
      for (int64_t i = 0; i < len; ++i) {
        uint64_t e = uint64_t(s + i);
        out[i] = (uint64_t(original_word(k_.k0, k_.k1, words_, e)) << 32) |
                 original_word(k_.k0, k_.k1, words_, n_ + e);
      }
    }
  }
  static constexpr int64_t kBlock = 256;

 private:
  Key k_;
  uint64_t n_, words_ = 0;
  bool part_;
};

// jax.random.split / _split(key, shape): N new keys.
void split_keys(Key k, int64_t N, bool partitionable, uint32_t* out) {
  if (partitionable) {
    parallel_for(N, kGrain / 2, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        Pair p = threefry2x32(k.k0, k.k1, uint32_t(uint64_t(i) >> 32), uint32_t(i));
        out[2 * i] = p.a;
        out[2 * i + 1] = p.b;
      }
    });
  } else {  // threefry_2x32(key, iota(2N)) reshaped to (N, 2)
    if (uint64_t(2 * N) >= kMaxOriginalWords) throw ValueError("too many keys for jax_threefry_partitionable=False");
    parallel_for(2 * N, kGrain, [&](int64_t b, int64_t e) {
      for (int64_t m = b; m < e; ++m) out[m] = original_word(k.k0, k.k1, uint64_t(2 * N), uint64_t(m));
    });
  }
}

// =====================================================================================
// Float helpers
// =====================================================================================
PODLET_RANDOM_INLINE float f32_from_bits(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
PODLET_RANDOM_INLINE uint32_t bits_of(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
PODLET_RANDOM_INLINE double f64_from_bits(uint64_t u) { double f; std::memcpy(&f, &u, 8); return f; }
PODLET_RANDOM_INLINE float round_bf16(float x) { return float(bf16(x)); }

// XLA's maximum / minimum (llvm.maximum / llvm.minimum): NaN-propagating, -0 < +0.
template <class T> PODLET_RANDOM_INLINE T xla_max(T a, T b) {
  if (a != a) return a;
  if (b != b) return b;
  if (a == b) return std::signbit(a) ? b : a;
  return a > b ? a : b;
}
template <class T> PODLET_RANDOM_INLINE T xla_min(T a, T b) {
  if (a != a) return a;
  if (b != b) return b;
  if (a == b) return std::signbit(a) ? a : b;
  return a < b ? a : b;
}

// [0, 1) floats from random bits, jax's _uniform: random mantissa, exponent of 1.0, minus 1.
PODLET_RANDOM_INLINE float unit_f32(uint32_t bits) { return f32_from_bits((bits >> 9) | 0x3F800000u) - 1.0f; }
PODLET_RANDOM_INLINE double unit_f64(uint64_t bits) { return f64_from_bits((bits >> 12) | 0x3FF0000000000000ull) - 1.0; }
// bf16 uses 8 random bits (nmant = 7 < 8): u16(bits8) >> 1 | bits(1.0bf16), minus 1 (exact).
PODLET_RANDOM_INLINE float unit_bf16(uint8_t bits) { return bf16::to_f32(uint16_t((uint16_t(bits) >> 1) | 0x3F80u)) - 1.0f; }

// Rounds x to float right here: keeps the compiler from contracting the multiply that
// produced x into a later add (an FMA that XLA does not form).
PODLET_RANDOM_INLINE float rounded(float x) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  __asm__("" : "+x"(x));
#elif defined(__GNUC__) && defined(__aarch64__)
  __asm__("" : "+w"(x));
#else
  volatile float v = x;
  x = v;
#endif
  return x;
}

// XLA:CPU's f32 log (backends/cpu/codegen/polynomial_approximations.cc, GenerateVF32Log:
// Cephes, range-reduced to [sqrt(1/2), sqrt(2)), degree-8 polynomial) with the FMAs
// LLVM forms from it.
PODLET_RANDOM_INLINE float xla_log_f32(float v) {
  if (!(v > 0.0f)) return v == 0.0f ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
  if (v == std::numeric_limits<float>::infinity()) return v;
  const float x0 = v > f32_from_bits(0x00800000u) ? v : f32_from_bits(0x00800000u);
  const uint32_t b = bits_of(x0);
  const float m = f32_from_bits((b & 0x807FFFFFu) | 0x3F000000u);  // mantissa in [0.5, 1)
  float e = float(int32_t(b >> 23) - 127) + 1.0f;
  const bool small = m < f32_from_bits(0x3F3504F3u);             // sqrt(1/2)
  const float t = (m - 1.0f) + (small ? m : 0.0f);
  e = e - (small ? 1.0f : 0.0f);
  const float x2 = t * t, x3 = x2 * t;
  float y = std::fma(f32_from_bits(0x3D9021BBu), t, f32_from_bits(0xBDEBD1B8u));
  float y1 = std::fma(f32_from_bits(0xBDFE5D4Fu), t, f32_from_bits(0x3E11E9BFu));
  float y2 = std::fma(f32_from_bits(0x3E4CCEACu), t, f32_from_bits(0xBE7FFFFCu));
  y = std::fma(y, t, f32_from_bits(0x3DEF251Au));
  y1 = std::fma(y1, t, f32_from_bits(0xBE2AAE50u));
  y2 = std::fma(y2, t, f32_from_bits(0x3EAAAAAAu));
  y = std::fma(y, x3, y1);
  y = std::fma(y, x3, y2);
  const float r = std::fma(y, x3, e * f32_from_bits(0xB95E8083u));  // q1 = -2.12194440e-4
  float s = std::fma(-0.5f, x2, t) + r;
  return std::fma(f32_from_bits(0x3F318000u), e, s);                // q2 = 0.693359375
}

// XLA's log1p (codegen/intrinsic/log1p.cc): Cephes rational approximation for
// |a| < sqrt(2) - 1, log(1 + a) otherwise.
PODLET_RANDOM_INLINE float xla_log1p_f32(float a) {
  const float large = xla_log_f32(a + 1.0f);
  const float a2 = a * a;
  const float z = a * 0.0f;  // the polynomials start from 0 * a (keeps NaN/inf like XLA)
  float den = z + 1.0f;
  for (uint32_t c : {0x417101ADu, 0x42A6185Bu, 0x435DC32Du, 0x439A8CA3u, 0x43586D8Au, 0x42707982u})
    den = std::fma(den, a, f32_from_bits(c));
  float num = z + f32_from_bits(0x383DE070u);  // 4.5270000862445199635215E-5
  for (uint32_t c : {0x3EFF40C5u, 0x40D284FAu, 0x41EF4B9Cu, 0x4273CC76u, 0x426473ADu, 0x41A05101u})
    num = std::fma(num, a, f32_from_bits(c));
  const float r = num / den;
  float s = (a * a2) * r;
  s = std::fma(-0.5f, a2, s);
  s = a + s;
  return std::fabs(a) < f32_from_bits(0x3ED413CDu) ? s : large;
}

// XLA's f32 erf_inv (Giles, "Approximating the erfinv function", GPU Gems, single
// precision), as CHLO decomposes it and XLA:CPU compiles it.
PODLET_RANDOM_INLINE float xla_erf_inv_f32(float x) {
  static constexpr float lt5[9] = {2.81022636e-08f, 3.43273939e-07f, -3.5233877e-06f, -4.39150654e-06f,
                                   0.00021858087f, -0.00125372503f, -0.00417768164f, 0.246640727f, 1.50140941f};
  static constexpr float ge5[9] = {-0.000200214257f, 0.000100950558f, 0.00134934322f, -0.00367342844f,
                                   0.00573950773f, -0.0076224613f, 0.00943887047f, 1.00167406f, 2.83297682f};
  const float L = xla_log1p_f32(rounded(x * -x));  // -w (XLA does not fuse this product into log1p's + 1)
  const bool lt = L > -5.0f;              // w < 5
  const float w = lt ? (-2.5f - L) : (std::sqrt(-L) + -3.0f);
  const float* c = lt ? lt5 : ge5;
  float p = std::fma(c[0], w, c[1]);
  for (int i = 2; i < 9; ++i) p = std::fma(w, p, c[i]);
  return std::fabs(x) == 1.0f ? x * std::numeric_limits<float>::infinity() : x * p;
}

// XLA's f32 erf (rational approximation on [-3.744, 3.744], +-1 outside).
PODLET_RANDOM_INLINE float xla_erf_f32(float x) {
  const float lim = f32_from_bits(0x406F9C68u);
  if (std::fabs(x) >= lim) return std::copysign(1.0f, x);
  const float c = xla_min(xla_max(x, -lim), lim);
  const float c2 = c * c;
  float p = std::fma(c2, f32_from_bits(0x39702D51u), f32_from_bits(0x3B5F5DA2u));
  for (uint32_t k : {0x3D50B6EBu, 0x3E3DA740u, 0x3F906EBAu}) p = std::fma(p, c2, f32_from_bits(k));
  const float num = c * p;
  float q = std::fma(c2, f32_from_bits(0xB3FD3906u), f32_from_bits(0x37C588DFu));
  for (uint32_t k : {0x3A856D28u, 0x3C6687D4u, 0x3DE34C21u, 0x3EFEB44Au, 0x3F800000u}) q = std::fma(q, c2, f32_from_bits(k));
  return num / q;
}

// float64 erf_inv: accurate to a few ulp, not XLA-bitwise (used only with x64 enabled).
// Giles' single-precision polynomial evaluated in double as the first guess, then Halley
// steps on erfc(x) = 1 - |u| (erfc keeps the tail accurate).
double erf_inv_f64(double u) {
  if (u != u) return u;
  const double au = std::fabs(u);
  if (au >= 1.0) return au == 1.0 ? std::copysign(HUGE_VAL, u) : std::nan("");
  static constexpr double lt5[9] = {2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06,
                                    0.00021858087, -0.00125372503, -0.00417768164, 0.246640727, 1.50140941};
  static constexpr double ge5[9] = {-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844,
                                    0.00573950773, -0.0076224613, 0.00943887047, 1.00167406, 2.83297682};
  const double q = 1.0 - au;  // exact for au >= 0.5
  double w = -std::log(q * (1.0 + au));
  const bool lt = w < 5.0;
  const double* c = lt ? lt5 : ge5;
  w = lt ? w - 2.5 : std::sqrt(w) - 3.0;
  double p = c[0];
  for (int i = 1; i < 9; ++i) p = std::fma(p, w, c[i]);
  double x = p * au;
  const double k = 2.0 / std::sqrt(M_PI);
  for (int it = 0; it < 3; ++it) {
    const double f = au < 0.5 ? std::erf(x) - au : q - std::erfc(x);
    const double d = k * std::exp(-x * x);
    if (!(d > 0.0)) break;
    x -= f / std::fma(x, f, d);  // Halley: f'' = -2 x f'
  }
  return std::copysign(x, u);
}

// =====================================================================================
// Broadcast parameters (minval, maxval, p, lower, upper) against the output shape.
// =====================================================================================
struct ParamIndex {
  Shape out, st;
  bool scalar = false, same = false;
  ParamIndex(const Shape& in, const Shape& o) : out(o) {
    scalar = numel(in) == 1;
    same = in == o;
    if (!scalar && !same) st = broadcast_strides(in, o);
  }
  PODLET_RANDOM_INLINE int64_t operator()(int64_t i) const {
    if (scalar) return 0;
    if (same) return i;
    int64_t off = 0;
    for (int d = int(out.size()) - 1; d >= 0; --d) { off += (i % out[d]) * st[d]; i /= out[d]; }
    return off;
  }
};

Shape shape_attr(const Attrs& a) {
  Shape s = a.ints("shape", {});
  for (auto d : s) if (d < 0) throw ShapeError(fmt("shape ", shape_str(s), " has a negative dimension"));
  return s;
}
bool partitionable_attr(const Attrs& a) { return a.i("partitionable", 1) != 0; }

void check_param(const AVal& p, const Shape& shape, const char* what) {
  Shape b = broadcast_shapes(p.shape, shape);
  if (b != shape)
    throw ShapeError(fmt(what, " of shape ", shape_str(p.shape), " must broadcast to the sample shape ",
                         shape_str(shape), " (it broadcasts to ", shape_str(b), ")"));
}

void check_float(DType d, const char* what) {
  if (!is_float(d)) throw DTypeError(fmt(what, " must be a float (float32, bfloat16 or float64), got ", dtype_name(d)));
}

// Runs body(begin, end) over [0, n) in parallel chunks sized for the hash cost.
template <class F> void sample_loop(int64_t n, F&& body) { parallel_for(n, 1 << 12, body); }

// =====================================================================================
// Float samplers
//
// Each sampler is an "Op": the bit width it draws and, per element, bits -> value. A
// chunk of elements is run by run_chunk, instantiated twice: for baseline x86-64 (where
// std::fma is a libm call) and with the FMA instruction set (std::fma inlines to one
// vfmadd). Both give identical bits (std::fma is exact either way); the second is ~3x
// faster for normal / truncated_normal. PODLET_ISA=ref forces the baseline.
// =====================================================================================
template <int W> struct BitsOf;
template <> struct BitsOf<8> { using type = uint8_t; };
template <> struct BitsOf<32> { using type = uint32_t; };
template <> struct BitsOf<64> { using type = uint64_t; };

template <class Op> PODLET_RANDOM_INLINE void run_chunk(const Op& op, const BitSource& src, int64_t b, int64_t e) {
  typename BitsOf<Op::kWidth>::type bits[BitSource::kBlock];
  for (int64_t o = b; o < e; o += BitSource::kBlock) {
    const int64_t m = std::min<int64_t>(BitSource::kBlock, e - o);
    src.fill(o, m, bits);
    for (int64_t i = 0; i < m; ++i) op(bits[i], o + i);
  }
}
template <class Op> void run_chunk_base(const Op& op, const BitSource& src, int64_t b, int64_t e) {
  run_chunk(op, src, b, e);
}
#if defined(__x86_64__) && defined(__GNUC__)
template <class Op> __attribute__((target("fma"))) void run_chunk_fma(const Op& op, const BitSource& src, int64_t b,
                                                                        int64_t e) {
  run_chunk(op, src, b, e);
}
bool use_fma_path() {
  static const bool yes = [] {
    const char* isa = std::getenv("PODLET_ISA");
    if (isa && std::string(isa) == "ref") return false;
    __builtin_cpu_init();
    return bool(__builtin_cpu_supports("fma"));
  }();
  return yes;
}
#endif

// Draws n elements of op (element i from counter i) into op's output, in parallel.
template <class Op> void run_sampler(const Op& op, Key k, int64_t n, bool partitionable) {
  const BitSource src(k, n, Op::kWidth, partitionable);
#if defined(__x86_64__) && defined(__GNUC__)
  if (use_fma_path()) {
    sample_loop(n, [&](int64_t b, int64_t e) { run_chunk_fma(op, src, b, e); });
    return;
  }
#endif
  sample_loop(n, [&](int64_t b, int64_t e) { run_chunk_base(op, src, b, e); });
}

// ---- uniform: jax's _uniform, max(minval, floats * (maxval - minval) + minval) --------
struct UniformF32 {
  static constexpr int kWidth = 32;
  const float *lo, *hi; ParamIndex pl, ph; float* y;
  PODLET_RANDOM_INLINE void operator()(uint32_t bits, int64_t i) const {
    const float l = lo[pl(i)], h = hi[ph(i)];
    y[i] = xla_max(l, std::fma(unit_f32(bits), h - l, l));  // XLA contracts this into an FMA
  }
};
struct UniformBF16 {  // every bf16 op is rounded back to bf16 (XLA converts around each op)
  static constexpr int kWidth = 8;
  const bf16 *lo, *hi; ParamIndex pl, ph; bf16* y;
  PODLET_RANDOM_INLINE void operator()(uint8_t bits, int64_t i) const {
    const float l = float(lo[pl(i)]), h = float(hi[ph(i)]);
    const float span = round_bf16(h - l);
    y[i] = bf16(xla_max(l, round_bf16(round_bf16(unit_bf16(bits) * span) + l)));
  }
};
struct UniformF64 {
  static constexpr int kWidth = 64;
  const double *lo, *hi; ParamIndex pl, ph; double* y;
  PODLET_RANDOM_INLINE void operator()(uint64_t bits, int64_t i) const {
    const double l = lo[pl(i)], h = hi[ph(i)];
    y[i] = xla_max(l, std::fma(unit_f64(bits), h - l, l));
  }
};

void uniform_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
  const Key k = read_key(in[0]);
  const int64_t n = out[0].size();
  const Shape& os = out[0].shape();
  const ParamIndex pl(in[1].shape(), os), ph(in[2].shape(), os);
  const bool part = partitionable_attr(a);
  switch (out[0].dtype()) {
    case DType::f32:
      run_sampler(UniformF32{in[1].data<float>(), in[2].data<float>(), pl, ph, out[0].data<float>()}, k, n, part);
      break;
    case DType::bf16:
      run_sampler(UniformBF16{in[1].data<bf16>(), in[2].data<bf16>(), pl, ph, out[0].data<bf16>()}, k, n, part);
      break;
    case DType::f64:
      run_sampler(UniformF64{in[1].data<double>(), in[2].data<double>(), pl, ph, out[0].data<double>()}, k, n, part);
      break;
    default: throw DTypeError("uniform needs a float dtype");
  }
}

// ---- bernoulli: uniform(key, shape, p.dtype) < p (mode 'low'); mode 'high' draws
// uniforms u1, u2 of shape (2, *shape) and tests u2 * 2**-nmant < p - u1. -------------
void bernoulli_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
  const Key k = read_key(in[0]);
  const int64_t n = out[0].size();
  const ParamIndex pp(in[1].shape(), out[0].shape());
  const bool part = partitionable_attr(a);
  const bool high = a.s("mode", "low") == "high";
  bool* y = out[0].data<bool>();
  auto run = [&](auto unit, auto round, auto eps, const auto* p, int width) {
    using B = std::remove_cvref_t<decltype(*p)>;
    const BitSource src(k, high ? 2 * n : n, width, part);
    sample_loop(n, [&](int64_t b, int64_t e) {
      using Bits = std::conditional_t<std::is_same_v<B, bf16>, uint8_t,
                                      std::conditional_t<std::is_same_v<B, double>, uint64_t, uint32_t>>;
      Bits u1[BitSource::kBlock], u2[BitSource::kBlock];
      for (int64_t o = b; o < e; o += BitSource::kBlock) {
        const int64_t m = std::min<int64_t>(BitSource::kBlock, e - o);
        src.fill(o, m, u1);
        if (high) src.fill(n + o, m, u2);
        for (int64_t i = 0; i < m; ++i) {
          const auto pv = acc_t<B>(p[pp(o + i)]);
          y[o + i] = high ? unit(u2[i]) * eps < round(pv - unit(u1[i])) : unit(u1[i]) < pv;
        }
      }
    });
  };
  auto same = [](auto v) { return v; };
  switch (in[1].dtype()) {
    case DType::f32: run([](uint32_t v) { return unit_f32(v); }, same, 0x1p-23f, in[1].data<float>(), 32); break;
    case DType::bf16: run([](uint8_t v) { return unit_bf16(v); }, [](float v) { return round_bf16(v); }, 0x1p-7f,
                          in[1].data<bf16>(), 8); break;
    case DType::f64: run([](uint64_t v) { return unit_f64(v); }, same, 0x1p-52, in[1].data<double>(), 64); break;
    default: throw DTypeError("bernoulli needs a float p");
  }
}

// ---- normal: jax's _normal_real, sqrt(2) * erf_inv(uniform(nextafter(-1, 0), 1)) -------
struct NormalF32 {
  static constexpr int kWidth = 32;
  float* y;
  PODLET_RANDOM_INLINE void operator()(uint32_t bits, int64_t i) const {
    const float lo = -0x1.fffffep-1f;  // nextafter(-1, 0); 1 - lo rounds to 2
    const float u = xla_max(lo, std::fma(unit_f32(bits), 2.0f, lo));
    y[i] = xla_erf_inv_f32(u) * 1.41421354f;
  }
};
struct NormalBF16 {  // per-op bf16 rounding; erf_inv itself runs in f32
  static constexpr int kWidth = 8;
  bf16* y;
  PODLET_RANDOM_INLINE void operator()(uint8_t bits, int64_t i) const {
    const float lo = -0x1.fep-1f;  // nextafter(-1, 0) in bf16; 1 - lo rounds to 2
    const float u = xla_max(lo, round_bf16(round_bf16(unit_bf16(bits) * 2.0f) + lo));
    y[i] = bf16(round_bf16(xla_erf_inv_f32(u)) * 1.4140625f);  // sqrt(2) in bf16
  }
};
struct NormalF64 {
  static constexpr int kWidth = 64;
  double* y;
  PODLET_RANDOM_INLINE void operator()(uint64_t bits, int64_t i) const {
    const double lo = std::nextafter(-1.0, 0.0);
    const double u = xla_max(lo, std::fma(unit_f64(bits), 1.0 - lo, lo));
    y[i] = erf_inv_f64(u) * std::sqrt(2.0);
  }
};

void normal_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
  const Key k = read_key(in[0]);
  const int64_t n = out[0].size();
  const bool part = partitionable_attr(a);
  switch (out[0].dtype()) {
    case DType::f32: run_sampler(NormalF32{out[0].data<float>()}, k, n, part); break;
    case DType::bf16: run_sampler(NormalBF16{out[0].data<bf16>()}, k, n, part); break;
    case DType::f64: run_sampler(NormalF64{out[0].data<double>()}, k, n, part); break;
    default: throw DTypeError("normal needs a float dtype");
  }
}

// ---- truncated_normal: jax's _truncated_normal, u = uniform(erf(lower / sqrt2),
// erf(upper / sqrt2)), sqrt2 * erf_inv(u) clipped to (nextafter(lower, +inf),
// nextafter(upper, -inf)). XLA rewrites lower / sqrt2 as lower * (1 / sqrt2) in f32. ----
struct TruncF32 {
  static constexpr int kWidth = 32;
  const float *lo, *hi; ParamIndex pl, pu; float* y;
  PODLET_RANDOM_INLINE void operator()(uint32_t bits, int64_t i) const {
    const float inf = std::numeric_limits<float>::infinity();
    const float l = lo[pl(i)], h = hi[pu(i)];
    const float ea = xla_erf_f32(l * 0.707106769f), eb = xla_erf_f32(h * 0.707106769f);
    const float u = xla_max(ea, std::fma(unit_f32(bits), eb - ea, ea));
    const float v = xla_erf_inv_f32(u) * 1.41421354f;
    y[i] = xla_min(std::nextafter(h, -inf), xla_max(std::nextafter(l, inf), v));
  }
};
PODLET_RANDOM_INLINE float next_bf16(float x, bool up) {  // nextafter in bf16
  if (x != x) return x;
  uint16_t u = bf16(x).bits;
  if ((u & 0x7FFF) == 0) return bf16::to_f32(up ? 0x0001 : 0x8001);
  const bool neg = u & 0x8000;
  return bf16::to_f32(uint16_t(neg != up ? u + 1 : u - 1));
}
struct TruncBF16 {
  static constexpr int kWidth = 8;
  const bf16 *lo, *hi; ParamIndex pl, pu; bf16* y;
  PODLET_RANDOM_INLINE void operator()(uint8_t bits, int64_t i) const {
    const float sqrt2 = 1.4140625f;  // bf16
    const float l = float(lo[pl(i)]), h = float(hi[pu(i)]);
    const float ea = round_bf16(xla_erf_f32(round_bf16(l / sqrt2)));
    const float eb = round_bf16(xla_erf_f32(round_bf16(h / sqrt2)));
    const float span = round_bf16(eb - ea);
    const float u = xla_max(ea, round_bf16(round_bf16(unit_bf16(bits) * span) + ea));
    const float v = round_bf16(round_bf16(xla_erf_inv_f32(u)) * sqrt2);
    y[i] = bf16(xla_min(next_bf16(h, false), xla_max(next_bf16(l, true), v)));
  }
};
struct TruncF64 {
  static constexpr int kWidth = 64;
  const double *lo, *hi; ParamIndex pl, pu; double* y;
  PODLET_RANDOM_INLINE void operator()(uint64_t bits, int64_t i) const {
    const double sqrt2 = std::sqrt(2.0);
    const double l = lo[pl(i)], h = hi[pu(i)];
    const double ea = std::erf(l / sqrt2), eb = std::erf(h / sqrt2);
    const double u = xla_max(ea, std::fma(unit_f64(bits), eb - ea, ea));
    const double v = erf_inv_f64(u) * sqrt2;
    y[i] = xla_min(std::nextafter(h, -HUGE_VAL), xla_max(std::nextafter(l, HUGE_VAL), v));
  }
};

void truncated_normal_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
  const Key k = read_key(in[0]);
  const int64_t n = out[0].size();
  const Shape& os = out[0].shape();
  const ParamIndex pl(in[1].shape(), os), pu(in[2].shape(), os);
  const bool part = partitionable_attr(a);
  switch (out[0].dtype()) {
    case DType::f32:
      run_sampler(TruncF32{in[1].data<float>(), in[2].data<float>(), pl, pu, out[0].data<float>()}, k, n, part);
      break;
    case DType::bf16:
      run_sampler(TruncBF16{in[1].data<bf16>(), in[2].data<bf16>(), pl, pu, out[0].data<bf16>()}, k, n, part);
      break;
    case DType::f64:
      run_sampler(TruncF64{in[1].data<double>(), in[2].data<double>(), pl, pu, out[0].data<double>()}, k, n, part);
      break;
    default: throw DTypeError("truncated_normal needs a float dtype");
  }
}

// jax's _randint with 32-bit sampling dtype S: two independent 32-bit draws (keys
// split(key)) combined modulo span, so the bias is ~span**2 / 2**64. Bounds are clipped
// to S's range; a maxval above S's max widens the span by one. XLA's x % 0 = x.
template <class S>
inline S randint_one(int64_t lo_in, int64_t hi_in, uint32_t higher, uint32_t lower) {
  const int64_t smin = int64_t(std::numeric_limits<S>::min()), smax = int64_t(std::numeric_limits<S>::max());
  const bool out_of_range = hi_in > smax;
  const S lo = S(std::clamp(lo_in, smin, smax)), hi = S(std::clamp(hi_in, smin, smax));
  uint32_t span = uint32_t(hi) - uint32_t(lo);  // uint32(S(hi - lo)), wrapping
  if (hi <= lo) span = 1;
  if (out_of_range && hi > lo) span += 1;
  auto rem = [](uint32_t x, uint32_t d) { return d == 0 ? x : x % d; };
  uint32_t mult = rem(65536u, span);
  mult = rem(mult * mult, span);
  uint32_t off = rem(higher, span) * mult + rem(lower, span);
  off = rem(off, span);
  return S(uint32_t(lo) + off);
}

int64_t int_param(const Array& a, int64_t i) {
  switch (a.dtype()) {
    case DType::i32: return a.data<int32_t>()[i];
    case DType::u32: return a.data<uint32_t>()[i];
    case DType::u8: return a.data<uint8_t>()[i];
    default: throw DTypeError("randint bounds must be integers");
  }
}

void randint_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
  const Key k = read_key(in[0]);
  const int64_t n = out[0].size();
  const Shape& os = out[0].shape();
  ParamIndex pl(in[1].shape(), os), ph(in[2].shape(), os);
  const bool part = partitionable_attr(a);
  uint32_t keys[4];
  split_keys(k, 2, part, keys);  // k1, k2 = _split(key)
  BitSource hi_src({keys[0], keys[1]}, n, 32, part), lo_src({keys[2], keys[3]}, n, 32, part);
  const DType od = out[0].dtype();
  sample_loop(n, [&](int64_t b, int64_t e) {
    uint32_t hb[BitSource::kBlock], lb[BitSource::kBlock];
    for (int64_t o = b; o < e; o += BitSource::kBlock) {
      int64_t m = std::min<int64_t>(BitSource::kBlock, e - o);
      hi_src.fill(o, m, hb);
      lo_src.fill(o, m, lb);
      for (int64_t i = 0; i < m; ++i) {
        const int64_t lo = int_param(in[1], pl(o + i)), hi = int_param(in[2], ph(o + i));
        if (od == DType::i32) {
          out[0].data<int32_t>()[o + i] = randint_one<int32_t>(lo, hi, hb[i], lb[i]);
        } else if (od == DType::u32) {
          out[0].data<uint32_t>()[o + i] = randint_one<uint32_t>(lo, hi, hb[i], lb[i]);
        } else {  // uint8: jax samples int32 in [clip(lo, 0, 255), clip(hi, 0, 256)), then casts
          auto to_i32 = [](int64_t v) { return int64_t(int32_t(uint32_t(v))); };
          const int64_t l8 = std::clamp<int64_t>(to_i32(lo), 0, 255), h8 = std::clamp<int64_t>(to_i32(hi), 0, 256);
          out[0].data<uint8_t>()[o + i] = uint8_t(randint_one<int32_t>(l8, h8, hb[i], lb[i]));
        }
      }
    }
  });
}

// jax's _shuffle as indices: `rounds` times, split the key, draw 32-bit sort keys of the
// array's shape and stably sort along `axis`. Returns idx with x_shuffled =
// take_along_axis(x, idx, axis).
void permutation_kernel(const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
  Key k = read_key(in[0]);
  const Shape& s = out[0].shape();
  const int64_t n = out[0].size();
  int32_t* idx = out[0].data<int32_t>();
  if (n == 0) return;
  const int axis = int(normalize_axes({a.i("axis", 0)}, int(s.size()), "axis")[0]);
  const bool part = partitionable_attr(a);
  const int64_t len = s[axis];
  int64_t inner = 1;
  for (size_t d = axis + 1; d < s.size(); ++d) inner *= s[d];
  const int64_t outer = n / (len * inner);
  // jax: num_rounds = ceil(exponent * log(max(1, x.size)) / log(uint32max)), exponent = 3.
  const int rounds = int(std::ceil(3.0 * std::log(double(std::max<int64_t>(1, n))) / std::log(4294967295.0)));
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) idx[i] = int32_t((i / inner) % len);
  });
  std::vector<uint32_t> sort_keys(n);
  for (int r = 0; r < rounds; ++r) {
    uint32_t ks[4];
    split_keys(k, 2, part, ks);  // key, subkey = _split(key)
    k = {ks[0], ks[1]};
    BitSource src({ks[2], ks[3]}, n, 32, part);
    sample_loop(n, [&](int64_t b, int64_t e) { src.fill(b, e - b, sort_keys.data() + b); });
    parallel_for(outer * inner, 1, [&](int64_t b, int64_t e) {
      std::vector<uint64_t> kv(len);
      std::vector<int32_t> tmp(len);
      for (int64_t sl = b; sl < e; ++sl) {
        const int64_t base = (sl / inner) * len * inner + sl % inner;
        // (sort key, position) pairs: sorting them is a stable sort by key.
        for (int64_t j = 0; j < len; ++j) kv[j] = (uint64_t(sort_keys[base + j * inner]) << 32) | uint64_t(j);
        std::sort(kv.begin(), kv.end());
        for (int64_t j = 0; j < len; ++j) tmp[j] = idx[base + int64_t(uint32_t(kv[j])) * inner];
        for (int64_t j = 0; j < len; ++j) idx[base + j * inner] = tmp[j];
      }
    });
  }
}

// =====================================================================================
// Registrations
// =====================================================================================
std::vector<AVal> sampler_shape(const std::vector<AVal>& in, const Attrs& a, size_t arity, DType dt) {
  check_arity(in, arity);
  check_key(in[0]);
  return {AVal{dt, shape_attr(a)}};
}

static Register reg_threefry("threefry2x32", PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs&) -> std::vector<AVal> {
      check_arity(in, 4);
      for (auto& x : in)
        if (x.dtype != DType::u32) throw DTypeError(fmt("threefry2x32 operands must be uint32, got ", dtype_name(x.dtype)));
      Shape s = broadcast_shapes(broadcast_shapes(in[0].shape, in[1].shape), broadcast_shapes(in[2].shape, in[3].shape));
      return {AVal{DType::u32, s}, AVal{DType::u32, s}};
    },
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs&) {
      const Shape& s = out[0].shape();
      ParamIndex i0(in[0].shape(), s), i1(in[1].shape(), s), i2(in[2].shape(), s), i3(in[3].shape(), s);
      const uint32_t *k0 = in[0].data<uint32_t>(), *k1 = in[1].data<uint32_t>(), *x0 = in[2].data<uint32_t>(),
                     *x1 = in[3].data<uint32_t>();
      uint32_t *y0 = out[0].data<uint32_t>(), *y1 = out[1].data<uint32_t>();
      parallel_for(out[0].size(), 1 << 12, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          Pair p = threefry2x32(k0[i0(i)], k1[i1(i)], x0[i2(i)], x1[i3(i)]);
          y0[i] = p.a;
          y1[i] = p.b;
        }
      });
    },
    .vjp = nullptr, .flops = nullptr, .batch = batching::elementwise, .zero_grad = true});

static Register reg_seed("random_seed", batching::looped(PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs&) -> std::vector<AVal> {
      check_arity(in, 1);
      if (!in[0].shape.empty()) throw ShapeError(fmt("PRNG key seed must be a scalar, got shape ", shape_str(in[0].shape)));
      if (!is_int(in[0].dtype) && in[0].dtype != DType::boolean)
        throw DTypeError(fmt("PRNG key seed must be an integer, got ", dtype_name(in[0].dtype)));
      return {AVal{DType::u32, {2}}};
    },
    // x32 seeds: [seed >> 32, seed & 0xFFFFFFFF] with a 32-bit seed, i.e. [0, uint32(seed)].
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs&) {
      uint32_t* k = out[0].data<uint32_t>();
      k[0] = 0;
      k[1] = uint32_t(int64_t(get_as_double(in[0], 0)));
    },
    .vjp = nullptr, .flops = nullptr, .zero_grad = true}));

static Register reg_split("random_split", batching::looped(PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) -> std::vector<AVal> {
      check_arity(in, 1);
      check_key(in[0]);
      Shape s = shape_attr(a);
      s.push_back(2);
      return {AVal{DType::u32, s}};
    },
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
      split_keys(read_key(in[0]), out[0].size() / 2, partitionable_attr(a), out[0].data<uint32_t>());
    },
    .vjp = nullptr, .flops = nullptr, .zero_grad = true}));

static Register reg_fold_in("random_fold_in", batching::looped(PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs&) -> std::vector<AVal> {
      check_arity(in, 2);
      check_key(in[0]);
      if (!in[1].shape.empty()) throw ShapeError(fmt("fold_in data must be a scalar, got shape ", shape_str(in[1].shape)));
      if (!is_int(in[1].dtype) && in[1].dtype != DType::boolean)
        throw DTypeError(fmt("fold_in data must be an integer, got ", dtype_name(in[1].dtype)));
      return {AVal{DType::u32, {2}}};
    },
    // threefry_2x32(key, threefry_seed(uint32(data))) = threefry(key, 0, data).
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs&) {
      Key k = read_key(in[0]);
      Pair p = threefry2x32(k.k0, k.k1, 0u, uint32_t(int64_t(get_as_double(in[1], 0))));
      out[0].data<uint32_t>()[0] = p.a;
      out[0].data<uint32_t>()[1] = p.b;
    },
    .vjp = nullptr, .flops = nullptr, .zero_grad = true}));

static Register reg_bits("random_bits", batching::looped(PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) -> std::vector<AVal> {
      int64_t w = a.i("bit_width", 32);
      if (w != 8 && w != 32)
        throw DTypeError(fmt("random_bits supports bit_width 8 (uint8) or 32 (uint32), got ", w));
      return sampler_shape(in, a, 1, w == 8 ? DType::u8 : DType::u32);
    },
    .kernel = [](const std::vector<Array>& in, std::vector<Array>& out, const Attrs& a) {
      const int64_t n = out[0].size();
      const int w = int(a.i("bit_width", 32));
      BitSource src(read_key(in[0]), n, w, partitionable_attr(a));
      sample_loop(n, [&](int64_t b, int64_t e) {
        if (w == 32) src.fill(b, e - b, out[0].data<uint32_t>() + b);
        else src.fill(b, e - b, out[0].data<uint8_t>() + b);
      });
    },
    .vjp = nullptr, .flops = nullptr, .zero_grad = true}));

static Register reg_uniform("random_uniform", batching::looped(PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) -> std::vector<AVal> {
      check_arity(in, 3);
      check_float(in[1].dtype, "minval");
      check_same_dtype({in[1], in[2]});
      auto out = sampler_shape(in, a, 3, in[1].dtype);
      check_param(in[1], out[0].shape, "minval");
      check_param(in[2], out[0].shape, "maxval");
      return out;
    },
    .kernel = uniform_kernel, .vjp = nullptr, .flops = nullptr, .zero_grad = true}));

static Register reg_bernoulli("random_bernoulli", batching::looped(PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) -> std::vector<AVal> {
      check_arity(in, 2);
      check_float(in[1].dtype, "bernoulli probability p");
      std::string mode = a.s("mode", "low");
      if (mode != "low" && mode != "high") throw ValueError(fmt("got mode='", mode, "', expected 'high' or 'low'"));
      auto out = sampler_shape(in, a, 2, DType::boolean);
      check_param(in[1], out[0].shape, "p");
      return out;
    },
    .kernel = bernoulli_kernel, .vjp = nullptr, .flops = nullptr, .zero_grad = true}));

static Register reg_normal("random_normal", batching::looped(PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) -> std::vector<AVal> {
      DType d = dtype_from_name(a.s("dtype", "float32"));
      check_float(d, "normal dtype");
      return sampler_shape(in, a, 1, d);
    },
    .kernel = normal_kernel, .vjp = nullptr, .flops = nullptr, .zero_grad = true}));

static Register reg_truncated_normal("random_truncated_normal", batching::looped(PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) -> std::vector<AVal> {
      check_arity(in, 3);
      check_float(in[1].dtype, "lower");
      check_same_dtype({in[1], in[2]});
      auto out = sampler_shape(in, a, 3, in[1].dtype);
      check_param(in[1], out[0].shape, "lower");
      check_param(in[2], out[0].shape, "upper");
      return out;
    },
    .kernel = truncated_normal_kernel, .vjp = nullptr, .flops = nullptr, .zero_grad = true}));

static Register reg_randint("random_randint", batching::looped(PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) -> std::vector<AVal> {
      check_arity(in, 3);
      for (int i : {1, 2})
        if (!is_int(in[i].dtype))
          throw DTypeError(fmt(i == 1 ? "minval" : "maxval", " must be an integer array, got ", dtype_name(in[i].dtype)));
      DType d = dtype_from_name(a.s("dtype", "int32"));
      if (!is_int(d)) throw DTypeError(fmt("randint only accepts integer dtypes, got ", dtype_name(d)));
      auto out = sampler_shape(in, a, 3, d);
      check_param(in[1], out[0].shape, "minval");
      check_param(in[2], out[0].shape, "maxval");
      return out;
    },
    .kernel = randint_kernel, .vjp = nullptr, .flops = nullptr, .zero_grad = true}));

static Register reg_permutation("random_permutation_indices", batching::looped(PrimDef{
    .shape = [](const std::vector<AVal>& in, const Attrs& a) -> std::vector<AVal> {
      auto out = sampler_shape(in, a, 1, DType::i32);
      if (out[0].shape.empty()) throw ShapeError("permutation needs a shape of rank >= 1");
      normalize_axes({a.i("axis", 0)}, int(out[0].shape.size()), "axis");
      if (out[0].size() > INT32_MAX) throw ValueError("permutation of more than 2**31 - 1 elements");
      return out;
    },
    .kernel = permutation_kernel, .vjp = nullptr, .flops = nullptr, .zero_grad = true}));

}  // namespace
}  // namespace podlet
