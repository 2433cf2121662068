//===- ScaleQuotientTest.cpp - The GPU quantizers' FP32 scale quotient ----===//
//
// The device rule fp32Scale (templates/moss/common/fp8.cuh) computes
// RN(amax / max) for amax in [2^-100, FLT_MAX] without a division:
// q0 = RN(amax * y) with y = RN(1 / max), then RN(q0 + RN(amax - max * q0)
// * y), each step a single IEEE operation (mul.rn, fma.rn). The same steps
// run here on the host, for every float in that range, against IEEE
// division.
//
//===----------------------------------------------------------------------===//

#include "gtest/gtest.h"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace {

/// The floats in [2^-100, FLT_MAX] whose Markstein quotient by `max`
/// differs from RN(amax / max); the first one in `first`.
uint64_t countMismatches(float max, float &first) {
  volatile float divisor = max; // divide at run time, in IEEE FP32
  const float inverse = 1.0f / divisor;
  uint64_t mismatches = 0;
  for (uint32_t bits = 0x0D800000u; bits < 0x7F800000u; ++bits) {
    float amax;
    std::memcpy(&amax, &bits, 4);
    const float q0 = amax * inverse;
    const float q = std::fma(std::fma(-max, q0, amax), inverse, q0);
    const float expected = amax / divisor;
    if (std::memcmp(&q, &expected, 4) != 0 && mismatches++ == 0)
      first = amax;
  }
  return mismatches;
}

TEST(ScaleQuotientTest, MarksteinQuotientIsCorrectlyRoundedForE4M3Max) {
  float first = 0.0f;
  EXPECT_EQ(countMismatches(448.0f, first), 0u) << "first at " << first;
}

TEST(ScaleQuotientTest, MarksteinQuotientIsCorrectlyRoundedForE5M2Max) {
  float first = 0.0f;
  EXPECT_EQ(countMismatches(57344.0f, first), 0u) << "first at " << first;
}

} // namespace
