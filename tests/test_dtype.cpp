// Round-to-nearest-even into bfloat16 / float16 (kernels/dtype.h) agrees
// bit for bit with Eigen's conversions, including ties, subnormals, overflow.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include <Eigen/Core>
#include <gtest/gtest.h>

#include "kernels/dtype.h"

namespace gradeq {
namespace {

float via_eigen(float x, DType t) {
  if (t == DType::bf16) return static_cast<float>(Eigen::bfloat16(x));
  return static_cast<float>(Eigen::half(x));
}

void expect_same(float a, float b, float x) {
  if (std::isnan(b)) {
    EXPECT_TRUE(std::isnan(a)) << x;
    return;
  }
  EXPECT_EQ(float_bits(a), float_bits(b)) << "x = " << x << " ours " << a << " eigen " << b;
}

TEST(DType, EdgeValuesMatchEigen) {
  const float values[] = {0.0f, -0.0f, 1.0f, -1.0f, 1.0f + 0x1p-8f, 1.0f + 0x1p-9f, 1.0f + 3 * 0x1p-9f,
                          1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65504.0f, 65519.0f, 65520.0f, 1e30f, 0x1p-14f,
                          0x1p-24f, 0x1p-25f, 0x1.8p-25f, 3e-8f, 1e-40f, std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::max()};
  for (float x : values)
    for (DType t : {DType::bf16, DType::f16}) expect_same(round_to(x, t), via_eigen(x, t), x);
}

TEST(DType, RandomBitPatternsMatchEigen) {
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    const float x = bits_float(rng());
    for (DType t : {DType::bf16, DType::f16}) expect_same(round_to(x, t), via_eigen(x, t), x);
  }
}

TEST(DType, Float32IsIdentity) {
  EXPECT_EQ(round_to(0.1f, DType::f32), 0.1f);
}

TEST(DType, FactsAreConsistent) {
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    const DTypeFacts f = dtype_facts(t);
    EXPECT_EQ(f.unit_roundoff, std::ldexp(1.0, -f.significand_bits));
    // 1 + u is a tie; 1 + 2u is the next value.
    if (t != DType::f32) {
      EXPECT_EQ(round_to(static_cast<float>(1.0 + 2 * f.unit_roundoff), t), static_cast<float>(1.0 + 2 * f.unit_roundoff));
      EXPECT_EQ(round_to(static_cast<float>(1.0 + f.unit_roundoff), t), 1.0f);
    }
  }
}

}  // namespace
}  // namespace gradeq
