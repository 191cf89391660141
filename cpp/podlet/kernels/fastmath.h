// The scalar math of podlet's elementwise kernels: the one-op kernels
// (prims/elementwise.cc) and the fused elementwise interpreter (prims/fused.cc, and its
// ISA builds) include this one source, so a fused graph gives the unfused graph's bits
// (tests/test_fusion.py compares them on every op). Branch-free f32 functions (polynomials
// written with selects, so that loops over them vectorise), logistic_f64 and the f32 ->
// bf16 rounding. exp, tanh and erf use explicit FMAs (fma_, exact on every build; the
// baseline build pays a libm call per FMA, so eager kernels run ISA copies); the rest
// (log, erf_inv) are plain multiply-adds.
//
// Users compiled with FMA available (the *_avx2 / *_avx512 copies) must use
// -ffp-contract=off: GCC would otherwise contract a plain p * r + c and change the last
// bit.
// Everything here has internal linkage (the anonymous namespace), so each ISA's
// translation unit keeps its own copy: the linker cannot pick an AVX-512 copy for
// baseline callers.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace podlet::kernels {
namespace {

namespace fm {
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
inline uint32_t bits(float f) { return __builtin_bit_cast(uint32_t, f); }
inline float from_bits(uint32_t u) { return __builtin_bit_cast(float, u); }
inline float fabs_(float x) { return from_bits(bits(x) & 0x7fffffffu); }
inline float copysign_(float mag, float sgn) { return from_bits((bits(mag) & 0x7fffffffu) | (bits(sgn) & 0x80000000u)); }
inline float exp2i(int32_t n) { return from_bits(uint32_t(n + 127) << 23); }  // 2^n, n in [-126, 127]
// a * b + c rounded once, on every build: the FMA instruction where the file is compiled
// with FMA, glibc's correctly rounded fmaf otherwise (a call per FMA in the baseline
// build: AVX2 and AVX-512 hosts run the eager kernels from their ISA copies,
// kernels/unary_math_*.cc).
inline float fma_(float a, float b, float c) { return __builtin_fmaf(a, b, c); }

// e^x: x = n ln2 + r with |r| <= ln2/2 (Cody-Waite), Cephes' degree-6 polynomial for
// e^r, both with FMAs, and 2^n applied in two halves: p 2^(n>>1) is exact, so the one
// rounding is that of p 2^n, as AVX-512's vscalefps gives it (the JIT uses that), right
// near overflow and in the denormal range. Max error 1.01 ulp. With FMAs (2026-11-30)
// the JIT's exp is 18 instructions per vector instead of 33: exp is most of a softmax
// and a fifth of the bf16 attention at Swin's windows.
inline float exp(float x) {
  float xc = x < -104.0f ? -104.0f : x;  // e^-104 rounds to 0, e^89 overflows: clamping keeps n in range
  xc = xc > 89.0f ? 89.0f : xc;
  xc = x == x ? xc : 0.0f;               // keep NaN away from the float->int conversion
  const float fn = fma_(xc, 1.44269504088896341f, 12582912.0f) - 12582912.0f;  // round(x / ln2)
  const int32_t n = int32_t(fn);
  float r = fma_(fn, -0.693359375f, xc);
  r = fma_(fn, 2.12194440e-4f, r);
  const float z = r * r;
  float p = fma_(1.9875691500E-4f, r, 1.3981999507E-3f);
  p = fma_(p, r, 8.3334519073E-3f);
  p = fma_(p, r, 4.1665795894E-2f);
  p = fma_(p, r, 1.6666665459E-1f);
  p = fma_(p, r, 5.0000001201E-1f);
  p = fma_(p, z, r) + 1.0f;
  const int32_t n1 = n >> 1, n2 = n - n1;
  const float y = p * exp2i(n1) * exp2i(n2);
  return x == x ? y : x;
}

// log(x): x = m 2^e with m in [sqrt(1/2), sqrt(2)), log(x) = e ln2 + log(m), log(m) by
// a degree-9 polynomial in m - 1. Denormals are scaled up first. Max error 1 ulp.
inline float log(float x) {
  const bool den = x < 1.17549435e-38f;
  const float xs = den ? x * 8388608.0f : x;
  const uint32_t u = bits(xs);
  int32_t e = int32_t((u >> 23) & 0xffu) - 126 - (den ? 23 : 0);
  float m = from_bits((u & 0x007fffffu) | 0x3f000000u);  // [0.5, 1)
  const bool small = m < 0.707106781186547524f;
  e -= small ? 1 : 0;
  m = small ? (m + m) - 1.0f : m - 1.0f;
  const float z = m * m;
  float y = 7.0376836292E-2f;
  y = y * m - 1.1514610310E-1f;
  y = y * m + 1.1676998740E-1f;
  y = y * m - 1.2420140846E-1f;
  y = y * m + 1.4249322787E-1f;
  y = y * m - 1.6668057665E-1f;
  y = y * m + 2.0000714765E-1f;
  y = y * m - 2.4999993993E-1f;
  y = y * m + 3.3333331174E-1f;
  y = y * m * z;
  const float fe = float(e);
  y = y + -2.12194440e-4f * fe;
  y = y - 0.5f * z;
  float r = m + y;
  r = r + 0.693359375f * fe;
  r = x == kInf ? x : r;
  r = x == 0.0f ? -kInf : r;
  r = x < 0.0f ? kNaN : r;
  return x == x ? r : x;
}

// tanh and erf are XLA:CPU's f32 formulas (Eigen's fast tanh; XLA's erf), FMAs in their
// order, so they give jax.numpy.tanh's and jax.lax.erf's bits on CPU
// (tests/test_elementwise.py checks them against jax over millions of inputs), at a third
// of the work of the formulas they replaced (an exp and a divide for tanh; erf in
// double): the exact GELU and its VJP, and the tanh GELU, were compute-bound on them.
// Max errors: tanh 4.6 ulp, erf 5.4 ulp (jax's).

// tanh(x) = x P(x^2) / Q(x^2) on x clamped to [-7.9988, 7.9988] (where it rounds to +-1);
// x itself below |x| = 0.0004, and a NaN as it came.
inline float tanh(float xf) {
  constexpr float c = 7.99881172180175781f;
  float x = xf < -c ? -c : xf;
  x = x > c ? c : x;
  const float x2 = x * x;
  float p = fma_(x2, -2.76076847742355e-16f, 2.00018790482477e-13f);
  p = fma_(x2, p, -8.60467152213735e-11f);
  p = fma_(x2, p, 5.12229709037114e-08f);
  p = fma_(x2, p, 1.48572235717979e-05f);
  p = fma_(x2, p, 6.37261928875436e-04f);
  p = fma_(x2, p, 4.89352455891786e-03f);
  p = x * p;
  float q = fma_(x2, 1.19825839466702e-06f, 1.18534705686654e-04f);
  q = fma_(x2, q, 2.26843463243900e-03f);
  q = fma_(x2, q, 4.89352518554385e-03f);
  const float r = p / q;
  return fabs_(xf) >= 0.0004f ? r : xf;  // NaN: not >=
}

// logistic(x) = 1 / (1 + e^-x) (jax's formula) for x >= 0, and e^x / (1 + e^x) for x < 0,
// which stays accurate where e^-x would overflow (x < -88.7 gives denormals, not 0).
inline float logistic(float x) {
  const float e = fm::exp(-fabs_(x));
  const float r = 1.0f / (1.0f + e);
  return x < 0.0f ? e * r : r;
}

// erf(x) = x P(x^2) / Q(x^2) on x clamped to [-3.8325, 3.8325] (beyond, erf rounds to
// +-1); a NaN as it came.
inline float erf(float xf) {
  constexpr float c = 3.832506856900711f;
  float x = xf < -c ? -c : xf;
  x = x > c ? c : x;
  const float x2 = x * x;
  float p = fma_(x2, 0.00022905065861350646f, 0.0034082910107109506f);
  p = fma_(x2, p, 0.050955695062380861f);
  p = fma_(x2, p, 0.18520832239976145f);
  p = fma_(x2, p, 1.128379143519084f);
  p = x * p;
  float q = fma_(x2, -1.1791602954361697e-7f, 0.000023547966471313185f);
  q = fma_(x2, q, 0.0010179625278914885f);
  q = fma_(x2, q, 0.014070470171167667f);
  q = fma_(x2, q, 0.11098505178285362f);
  q = fma_(x2, q, 0.49746925110067538f);
  q = fma_(x2, q, 1.0f);
  const float r = p / q;
  return xf == xf ? r : xf;
}

// erf^-1: Giles, "Approximating the erfinv function" (GPU Computing Gems, 2011), the
// single-precision version (the one XLA uses), with the polynomials evaluated in double:
// max error ~1 ulp. erf_inv(+-1) = +-inf, |x| > 1 -> NaN.
inline float erf_inv(float xf) {
  const double x = xf;
  const float w = -fm::log(float((1.0 - x) * (1.0 + x)));
  // One Horner chain whose coefficients and variable are chosen per lane (central
  // region w < 5, or the tails) instead of evaluating both polynomials.
  const bool c = double(w) < 5.0;
  const double t = c ? double(w) - 2.5 : double(__builtin_sqrtf(w)) - 3.0;
  double p = c ? 2.81022636e-08 : -0.000200214257;
  p = (c ? 3.43273939e-07 : 0.000100950558) + p * t;
  p = (c ? -3.5233877e-06 : 0.00134934322) + p * t;
  p = (c ? -4.39150654e-06 : -0.00367342844) + p * t;
  p = (c ? 0.00021858087 : 0.00573950773) + p * t;
  p = (c ? -0.00125372503 : -0.0076224613) + p * t;
  p = (c ? -0.00417768164 : 0.00943887047) + p * t;
  p = (c ? 0.246640727 : 1.00167406) + p * t;
  p = (c ? 1.50140941 : 2.83297682) + p * t;
  const float r = float(p * x);
  return fabs_(xf) == 1.0f ? xf * kInf : r;  // |x| > 1 and NaN come out NaN from the log
}

// floor / ceil / round through the integer conversion (SSE2 has no roundps). |x| >= 2^23,
// inf and NaN are already integral (or NaN) and pass through. The result always has x's
// sign, which also gives floor(-0.0) = -0.0 and round(-0.3) = -0.0.
constexpr float kTwo23 = 8388608.0f;
inline float trunc_small(float x) { return float(int32_t(fabs_(x) < kTwo23 ? x : 0.0f)); }
inline float floor(float x) {
  float t = trunc_small(x);
  t = t > x ? t - 1.0f : t;
  t = fabs_(x) < kTwo23 ? t : x;
  return copysign_(t, x);
}
inline float ceil(float x) {
  float t = trunc_small(x);
  t = t < x ? t + 1.0f : t;
  t = fabs_(x) < kTwo23 ? t : x;
  return copysign_(t, x);
}
// The same for double: std::floor/ceil would be a libm call or a cvt sequence in baseline
// builds (which keep a signalling NaN) but vroundsd in AVX builds (which quietens it),
// so fused and unfused results differed in a NaN's bits (fuzz/fused_diff.py found it).
constexpr double kTwo52 = 4503599627370496.0;
inline double fabs_(double x) {
  uint64_t u; std::memcpy(&u, &x, 8); u &= 0x7fffffffffffffffull; std::memcpy(&x, &u, 8); return x;
}
inline double copysign_(double mag, double sgn) {
  uint64_t m, g; std::memcpy(&m, &mag, 8); std::memcpy(&g, &sgn, 8);
  m = (m & 0x7fffffffffffffffull) | (g & 0x8000000000000000ull);
  std::memcpy(&mag, &m, 8); return mag;
}
inline double trunc_small(double x) { return double(int64_t(fabs_(x) < kTwo52 ? x : 0.0)); }
inline double floor(double x) {
  double t = trunc_small(x);
  t = t > x ? t - 1.0 : t;
  t = fabs_(x) < kTwo52 ? t : x;
  return copysign_(t, x);
}
inline double ceil(double x) {
  double t = trunc_small(x);
  t = t < x ? t + 1.0 : t;
  t = fabs_(x) < kTwo52 ? t : x;
  return copysign_(t, x);
}
inline float round_afz(float x) {  // half away from zero
  float t = trunc_small(x);
  t = fabs_(x - t) >= 0.5f ? t + copysign_(1.0f, x) : t;
  t = fabs_(x) < kTwo23 ? t : x;
  return copysign_(t, x);
}
inline float round_even(float x) {  // half to even
  float t = trunc_small(x);
  const float f = fabs_(x - t);
  const float odd = float(int32_t(t) & 1);  // t is an exact small integer here
  float up = f > 0.5f ? 1.0f : 0.0f;
  up = f == 0.5f ? odd : up;
  t = t + copysign_(up, x);
  t = fabs_(x) < kTwo23 ? t : x;
  return copysign_(t, x);
}
}  // namespace fm

inline double logistic_f64(double x) {
  const double e = std::exp(-std::fabs(x));
  const double r = 1.0 / (1.0 + e);
  return x < 0.0 ? e * r : r;
}

// f32 -> bf16 like ml_dtypes / XLA: round to nearest even, NaN -> canonical quiet NaN
// with the sign kept.
inline uint16_t f32_to_bf16_bits(float f) {
  const uint32_t u = __builtin_bit_cast(uint32_t, f);
  const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = ((u >> 16) & 0x8000u) | 0x7fc0u;
  return uint16_t((u & 0x7fffffffu) > 0x7f800000u ? nan : r);
}
inline float bf16_bits_to_f32(uint16_t b) { return __builtin_bit_cast(float, uint32_t(b) << 16); }
// f32 rounded to the nearest bf16, kept as f32 (the value a bf16 op's result holds).
inline float round_bf16(float f) { return bf16_bits_to_f32(f32_to_bf16_bits(f)); }

}  // namespace
}  // namespace podlet::kernels
