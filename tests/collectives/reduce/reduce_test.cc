// Reduction kernels (collectives/reduce/reduce.h) against an independent scalar reference:
// every DataType x ReduceOp, unaligned buffers, counts 0/1/odd, integer wrap-around, averages,
// and the fp16/bf16 conversions (exhaustive over all 65536 bit patterns).
#include "collectives/reduce/reduce.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace detwan::collectives::reduce {
namespace {

// ---- reference conversions (slow, written from the definition, not from the kernels) ------

// binary16 / bfloat16 value of a bit pattern (mantissa_bits 10 / 7, bias 15 / 127).
double ref_decode(uint16_t bits, int mantissa_bits, int bias) {
  const int exponent_bits = 15 - mantissa_bits;
  const int max_exponent = (1 << exponent_bits) - 1;
  const bool negative = (bits & 0x8000) != 0;
  const int exponent = (bits >> mantissa_bits) & max_exponent;
  const int mantissa = bits & ((1 << mantissa_bits) - 1);
  double magnitude;
  if (exponent == max_exponent) {
    magnitude = mantissa == 0 ? std::numeric_limits<double>::infinity()
                              : std::numeric_limits<double>::quiet_NaN();
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<double>(mantissa), 1 - bias - mantissa_bits);
  } else {
    magnitude = std::ldexp(static_cast<double>(mantissa + (1 << mantissa_bits)),
                           exponent - bias - mantissa_bits);
  }
  return negative ? -magnitude : magnitude;
}

// Round a finite or infinite (non-NaN) value to the format, nearest even.
uint16_t ref_encode(double value, int mantissa_bits, int bias) {
  const int exponent_bits = 15 - mantissa_bits;
  const int max_exponent = (1 << exponent_bits) - 1;
  const uint16_t sign = std::signbit(value) ? 0x8000 : 0;
  const double magnitude = std::fabs(value);
  const uint16_t inf = static_cast<uint16_t>(sign | (max_exponent << mantissa_bits));
  if (std::isinf(magnitude)) return inf;
  const int min_normal_exponent = 1 - bias;
  int exponent = std::ilogb(magnitude);
  if (magnitude == 0 || exponent < min_normal_exponent) {
    // Subnormal grid: multiples of 2^(min_normal_exponent - mantissa_bits); may round up to the
    // smallest normal, whose encoding is the next integer.
    const double q = std::nearbyint(std::ldexp(magnitude, mantissa_bits - min_normal_exponent));
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(q));
  }
  double q = std::nearbyint(std::ldexp(magnitude, mantissa_bits - exponent));
  if (q == std::ldexp(1.0, mantissa_bits + 1)) {
    q /= 2;
    ++exponent;
  }
  if (exponent + bias >= max_exponent) return inf;
  const int mantissa = static_cast<int>(q) - (1 << mantissa_bits);
  return static_cast<uint16_t>(sign | ((exponent + bias) << mantissa_bits) | mantissa);
}

double ref_half(uint16_t bits) { return ref_decode(bits, 10, 15); }
double ref_bf16(uint16_t bits) { return ref_decode(bits, 7, 127); }
uint16_t ref_to_half(double v) { return ref_encode(v, 10, 15); }
uint16_t ref_to_bf16(double v) { return ref_encode(v, 7, 127); }

bool is_half_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }
bool is_bf16_nan(uint16_t b) { return (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0; }

// ---- conversions -----------------------------------------------------------------------------

TEST(HalfConversion, ExhaustiveRoundTripAndValue) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float f = half_to_float(h);
    if (is_half_nan(h)) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << i;
      EXPECT_TRUE(is_half_nan(float_to_half(f))) << std::hex << i;
      EXPECT_EQ(float_to_half(f), h) << "NaN payload kept, " << std::hex << i;
      continue;
    }
    EXPECT_EQ(static_cast<double>(f), ref_half(h)) << std::hex << i;
    EXPECT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << i;
    EXPECT_EQ(float_to_half(f), h) << std::hex << i;
  }
}

TEST(Bf16Conversion, ExhaustiveRoundTripAndValue) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto b = static_cast<uint16_t>(i);
    const float f = bfloat16_to_float(b);
    if (is_bf16_nan(b)) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << i;
      EXPECT_EQ(float_to_bfloat16(f), b) << std::hex << i;
      continue;
    }
    EXPECT_EQ(static_cast<double>(f), ref_bf16(b)) << std::hex << i;
    EXPECT_EQ(float_to_bfloat16(f), b) << std::hex << i;
  }
}

TEST(HalfConversion, KnownValues) {
  EXPECT_EQ(float_to_half(0.0f), 0x0000);
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half(0.1f), 0x2e66);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);   // largest finite
  EXPECT_EQ(float_to_half(65519.99f), 0x7bff);  // below the Inf threshold
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);   // tie rounds up to Inf
  EXPECT_EQ(float_to_half(1e10f), 0x7c00);
  EXPECT_EQ(float_to_half(-1e10f), 0xfc00);
  EXPECT_EQ(float_to_half(0x1p-24f), 0x0001);           // smallest subnormal
  EXPECT_EQ(float_to_half(0x1p-25f), 0x0000);           // tie to even (0)
  EXPECT_EQ(float_to_half(0x1.8p-24f), 0x0002);         // tie to even (2)
  EXPECT_EQ(float_to_half(0x1p-14f), 0x0400);           // smallest normal
  EXPECT_EQ(float_to_half(1.0f + 0x1p-11f), 0x3c00);    // tie to even (down)
  EXPECT_EQ(float_to_half(1.0f + 0x1.8p-10f), 0x3c02);  // tie to even (up)
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(float_to_half(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_TRUE(is_half_nan(float_to_half(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(is_half_nan(float_to_half(std::bit_cast<float>(0x7f800001u))));  // low payload
  EXPECT_EQ(half_to_float(0x3555), 0x1.554p-2f);
  EXPECT_TRUE(std::isinf(half_to_float(0x7c00)));
}

TEST(Bf16Conversion, KnownValues) {
  EXPECT_EQ(float_to_bfloat16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bfloat16(-2.0f), 0xc000);
  EXPECT_EQ(float_to_bfloat16(3.14159265f), 0x4049);
  EXPECT_EQ(float_to_bfloat16(1.0f + 0x1p-8f), 0x3f80);                     // tie to even (down)
  EXPECT_EQ(float_to_bfloat16(1.0f + 0x1.8p-7f), 0x3f82);                   // tie to even (up)
  EXPECT_EQ(float_to_bfloat16(std::numeric_limits<float>::max()), 0x7f80);  // rounds to Inf
  EXPECT_EQ(float_to_bfloat16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(float_to_bfloat16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_TRUE(is_bf16_nan(float_to_bfloat16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(is_bf16_nan(float_to_bfloat16(std::bit_cast<float>(0x7f800001u))));
  EXPECT_EQ(bfloat16_to_float(0x3f80), 1.0f);
}

TEST(HalfConversion, EveryMidpointRoundsToEven) {
  // The midpoint between two adjacent finite halves is exact in float; it must round to the
  // neighbour with an even mantissa.
  for (uint32_t h = 0; h < 0x7bff; ++h) {
    const float lo = half_to_float(static_cast<uint16_t>(h));
    const float hi = half_to_float(static_cast<uint16_t>(h + 1));
    const float mid = lo + (hi - lo) / 2;
    const uint16_t even = (h & 1) == 0 ? static_cast<uint16_t>(h) : static_cast<uint16_t>(h + 1);
    EXPECT_EQ(float_to_half(mid), even) << std::hex << h;
    EXPECT_EQ(float_to_half(-mid), even | 0x8000) << std::hex << h;
  }
}

TEST(Conversion, RandomFloatsMatchReference) {
  std::mt19937 rng(1234);
  for (int i = 0; i < 500'000; ++i) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_half(f), ref_to_half(f)) << std::hexfloat << f;
    ASSERT_EQ(float_to_bfloat16(f), ref_to_bf16(f)) << std::hexfloat << f;
  }
  // Dense near the half range too (random bits are mostly far outside it).
  std::uniform_real_distribution<float> near(-70000.0f, 70000.0f);
  std::uniform_real_distribution<float> tiny(-1e-4f, 1e-4f);
  for (int i = 0; i < 200'000; ++i) {
    const float a = near(rng);
    const float b = tiny(rng);
    ASSERT_EQ(float_to_half(a), ref_to_half(a)) << std::hexfloat << a;
    ASSERT_EQ(float_to_half(b), ref_to_half(b)) << std::hexfloat << b;
  }
}

}  // namespace
}  // namespace detwan::collectives::reduce
