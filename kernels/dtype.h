// dtype.h — the storage dtypes a kernel may use, and round-to-nearest-even
// conversion from float32 into each, shared by the host and CUDA backends.
//
// Values of every dtype are carried in float32 registers; a dtype only
// decides how a value is rounded when it is stored. bfloat16 and float16
// are therefore "float32 rounded to 8 / 11 significant bits", which is
// exactly what a store to __nv_bfloat16 / __half does. Must not depend on
// anything outside kernels/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#if defined(__CUDACC__)
#define GRADEQ_HD __host__ __device__
#else
#define GRADEQ_HD
#endif

namespace gradeq {

enum class DType : std::uint8_t { f32, bf16, f16 };

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "float32";
    case DType::bf16: return "bfloat16";
    case DType::f16: return "float16";
  }
  return "?";
}

// Bytes one stored element of the dtype takes.
constexpr std::size_t dtype_bytes(DType t) { return t == DType::f32 ? 4 : 2; }

// Facts of each format that the error model needs (docs/NUMERICS.md §1).
struct DTypeFacts {
  double unit_roundoff;     // u = 2^-p for p significand bits (incl. hidden)
  double underflow_floor;   // half the spacing of subnormals: absolute error floor
  double max_finite;        // largest finite value
  int significand_bits;
};

constexpr DTypeFacts dtype_facts(DType t) {
  switch (t) {
    case DType::f32: return {0x1p-24, 0x1p-150, 3.4028234663852886e38, 24};
    case DType::bf16: return {0x1p-8, 0x1p-134, 3.3895313892515355e38, 8};
    case DType::f16: return {0x1p-11, 0x1p-25, 65504.0, 11};
  }
  return {0, 0, 0, 0};
}

GRADEQ_HD inline std::uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  std::uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
#endif
}

GRADEQ_HD inline float bits_float(std::uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
#endif
}

// float32 -> bfloat16 -> float32, round to nearest, ties to even. NaN stays NaN.
GRADEQ_HD inline float round_to_bf16(float x) {
  std::uint32_t b = float_bits(x);
  if ((b & 0x7f800000u) == 0x7f800000u) {          // Inf or NaN
    return x;                                      // NaN stays NaN
  }
  const std::uint32_t lsb = (b >> 16) & 1u;
  b += 0x7fffu + lsb;
  return bits_float(b & 0xffff0000u);
}

// float32 -> float16 -> float32, round to nearest, ties to even, with
// float16's subnormals and overflow to Inf at 65520 (the rounding midpoint
// above the largest finite half).
GRADEQ_HD inline float round_to_f16(float x) {
  const std::uint32_t b = float_bits(x);
  const std::uint32_t sign = b & 0x80000000u;
  const std::uint32_t mag = b & 0x7fffffffu;
  if (mag >= 0x7f800000u) return x;                 // Inf or NaN
  const float a = bits_float(mag);
  if (a >= 65520.0f) return bits_float(sign | 0x7f800000u);
  // Spacing of float16 at |x|: 2^(e-10) for normals (e >= -14), 2^-24 below.
  int e = static_cast<int>(mag >> 23) - 127;
  if (e < -14) e = -14;
  // Round a to a multiple of 2^(e-10): adding and subtracting 1.5*2^(e+13)
  // forces float32 to drop exactly the bits below that spacing, with its own
  // round-to-nearest-even.
  const float shifter = bits_float(static_cast<std::uint32_t>(e + 13 + 127) << 23) * 1.5f;
  // Two separate IEEE operations; the build forbids reassociating them.
  const float t = a + shifter;
  const float r = t - shifter;
  return bits_float(sign | float_bits(r));
}

GRADEQ_HD inline float round_to(float x, DType t) {
  switch (t) {
    case DType::bf16: return round_to_bf16(x);
    case DType::f16: return round_to_f16(x);
    case DType::f32: break;
  }
  return x;
}

}  // namespace gradeq
