// dtypes and the bf16 storage type. f32 -> bf16 is round-to-nearest-even; a NaN stays a
// NaN (canonical quiet NaN with its sign), bit-identical to ml_dtypes and XLA.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <cmath>

namespace podlet {

enum class DType : uint8_t { f32 = 0, bf16, f64, i32, u32, u8, boolean, count };

inline size_t itemsize(DType d) {
  switch (d) {
    case DType::f32: return 4; case DType::bf16: return 2; case DType::f64: return 8;
    case DType::i32: return 4; case DType::u32: return 4; case DType::u8: return 1;
    case DType::boolean: return 1; default: return 0;
  }
}
inline const char* dtype_name(DType d) {
  switch (d) {
    case DType::f32: return "float32"; case DType::bf16: return "bfloat16";
    case DType::f64: return "float64"; case DType::i32: return "int32";
    case DType::u32: return "uint32"; case DType::u8: return "uint8";
    case DType::boolean: return "bool"; default: return "?";
  }
}
inline bool is_float(DType d) { return d == DType::f32 || d == DType::bf16 || d == DType::f64; }
inline bool is_int(DType d) { return d == DType::i32 || d == DType::u32 || d == DType::u8; }
DType dtype_from_name(const std::string& s);  // throws DTypeError

struct bf16 {
  uint16_t bits;
  bf16() = default;
  explicit bf16(float f) : bits(from_f32(f)) {}
  operator float() const { return to_f32(bits); }
  static inline uint16_t from_f32(float f) {
    uint32_t u; std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t(((u >> 16) & 0x8000u) | 0x7fc0u);  // NaN: canonical quiet NaN, sign kept (as ml_dtypes/XLA)
    u += 0x7fffu + ((u >> 16) & 1u);
    return uint16_t(u >> 16);
  }
  static inline float to_f32(uint16_t b) {
    uint32_t u = uint32_t(b) << 16; float f; std::memcpy(&f, &u, 4); return f;
  }
};
static_assert(sizeof(bf16) == 2);

// Maps a DType to its C++ storage type in kernels: dispatch with PODLET_DTYPE_SWITCH.
template <DType D> struct ctype;
template <> struct ctype<DType::f32> { using type = float; };
template <> struct ctype<DType::bf16> { using type = bf16; };
template <> struct ctype<DType::f64> { using type = double; };
template <> struct ctype<DType::i32> { using type = int32_t; };
template <> struct ctype<DType::u32> { using type = uint32_t; };
template <> struct ctype<DType::u8> { using type = uint8_t; };
template <> struct ctype<DType::boolean> { using type = bool; };

}  // namespace podlet

// Calls BODY with `T` bound to the storage type of dtype D (all 7 dtypes).
#define PODLET_DTYPE_SWITCH(D, T, ...)                                             \
  switch (D) {                                                                     \
    case ::podlet::DType::f32: { using T = float; __VA_ARGS__; break; }           \
    case ::podlet::DType::bf16: { using T = ::podlet::bf16; __VA_ARGS__; break; } \
    case ::podlet::DType::f64: { using T = double; __VA_ARGS__; break; }          \
    case ::podlet::DType::i32: { using T = int32_t; __VA_ARGS__; break; }         \
    case ::podlet::DType::u32: { using T = uint32_t; __VA_ARGS__; break; }        \
    case ::podlet::DType::u8: { using T = uint8_t; __VA_ARGS__; break; }          \
    case ::podlet::DType::boolean: { using T = bool; __VA_ARGS__; break; }        \
    default: throw ::podlet::DTypeError("unknown dtype");                         \
  }
