//===- SnrStudyTest.cpp - Known answers behind the SNR study --------------===//
//
// The measures `moss-jit snr` prints, on data whose answer is known, and the
// property the study's conclusion rests on: a power-of-two local scale
// changes nothing but the values per-tensor scaling puts below FP8's normal
// range.
//
//===----------------------------------------------------------------------===//

#include "MustQuantize.h"
#include "moss/Numerics/Fidelity.h"
#include "moss/Numerics/Samples.h"

#include "gtest/gtest.h"

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace moss::numerics;
using moss::numerics::test::mustQuantize;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

/// Every scheme the SNR study runs.
std::vector<ScalingScheme> studySchemes() {
  std::vector<ScalingScheme> schemes = {ScalingScheme::perTensor(),
                                        ScalingScheme::perRow(),
                                        ScalingScheme::mxfp8()};
  for (int64_t b : {32, 64, 128}) {
    schemes.push_back(ScalingScheme::perGroup(1, b));
    schemes.push_back(ScalingScheme::twoLevel(GlobalScope::Tensor, b));
    schemes.push_back(ScalingScheme::twoLevel(GlobalScope::Row, b));
  }
  return schemes;
}

} // namespace

// Values m * 2^e with a 2-bit mantissa, e in [-6, 8], and +-448 in every
// block of 32: on the grid of both formats under every scheme's scales.
TEST(SnrStudyTest, RepresentableTensorIsExactUnderEveryScheme) {
  uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int64_t rows = 8, cols = 256;
  std::vector<float> x(rows * cols);
  for (float &v : x)
    v = float((rng() % 2 ? -1 : 1) * (1.0 + 0.25 * double(rng() % 4)) *
              std::ldexp(1.0, int(rng() % 15) - 6));
  for (int64_t b = 0; b < rows * cols / 32; ++b)
    x[b * 32 + rng() % 32] = rng() % 2 ? 448.0f : -448.0f;
  for (Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2})
    for (const ScalingScheme &scheme : studySchemes())
      for (bool transpose : {false, true}) {
        if (transpose && scheme.kind != ScalingKind::PerTensor)
          continue; // blocks along rows do not all hold a 448
        SCOPED_TRACE(scheme.str());
        QuantizeOptions options{scheme, format, transpose};
        FidelityReport r =
            measureFidelity(x, rows, cols, mustQuantize(x, rows, cols, options));
        EXPECT_EQ(r.snrDb, kInf);
        EXPECT_EQ(r.meanRowSnrDb, kInf);
        EXPECT_EQ(r.maxRelError, 0.0);
        EXPECT_EQ(r.underflowToZero, 0);
        EXPECT_EQ(r.saturated, 0);
      }
}

TEST(SnrStudyTest, FlushedValuesHaveAKnownSnr) {
  // Row 0: 128 x +-448. Row 1: 64 x +-448, then 64 x +-2^-12, below half the
  // smallest E4M3 subnormal at scale 1. Per-tensor flushes the 64 small
  // values: SNR = 10 log10(1 + 3 * 448^2 * 2^24). Row 0 is exact, row 1 has
  // SNR 10 log10(1 + 448^2 * 2^24).
  std::vector<float> x(2 * 128);
  for (int64_t i = 0; i < 256; ++i)
    x[i] = (i % 2 ? -1.0f : 1.0f) * (i >= 192 ? 0x1p-12f : 448.0f);
  QuantizedTensor q = mustQuantize(x, 2, 128, QuantizeOptions());
  FidelityReport r = measureFidelity(x, 2, 128, q);
  EXPECT_NEAR(r.snrDb, 10 * std::log10(1 + 3 * 448.0 * 448.0 * 0x1p24),
              1e-9);
  EXPECT_EQ(r.meanRowSnrDb, kInf);
  EXPECT_EQ(r.underflowToZero, 64);
  EXPECT_EQ(r.maxRelError, 1.0);
  // Two-level with blocks of 32: the small blocks get 2^-20 and are exact.
  QuantizeOptions options;
  options.scheme = ScalingScheme::twoLevel(GlobalScope::Tensor, 32);
  r = measureFidelity(x, 2, 128, mustQuantize(x, 2, 128, options));
  EXPECT_EQ(r.snrDb, kInf);
  EXPECT_EQ(r.underflowToZero, 0);

  // The mean row SNR, with two inexact rows: per-tensor scale 1; row 0
  // holds 448 and 300, which rounds to 288 (E4M3 steps by 32 above 256);
  // row 1 holds 2^-12, which flushes to zero (SNR 0 dB).
  std::vector<float> y(2 * 32, 0.0f);
  y[0] = 448.0f;
  y[1] = 300.0f;
  y[32] = 0x1p-12f;
  r = measureFidelity(y, 2, 32, mustQuantize(y, 2, 32, QuantizeOptions()));
  double rowSnr0 = 10 * std::log10((448.0 * 448 + 300.0 * 300) / 144.0);
  EXPECT_NEAR(r.meanRowSnrDb, (rowSnr0 + 0.0) / 2, 1e-9);
}

TEST(SnrStudyTest, StreamingMeasureMatchesTheWholeTensor) {
  // measureFidelity works row by row; the SNR must be the same number as
  // snrDb over the whole dequantized tensor.
  uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  const int64_t rows = 96, cols = 256;
  std::vector<float> x = llmActivationSample(rows, cols, seed);
  for (const ScalingScheme &scheme : studySchemes()) {
    SCOPED_TRACE(scheme.str());
    QuantizeOptions options{scheme, Fp8Format::E4M3, false};
    QuantizedTensor q = mustQuantize(x, rows, cols, options);
    EXPECT_EQ(measureFidelity(x, rows, cols, q).snrDb,
              snrDb(x, dequantize(q)));
  }
}

// The fact behind docs/NUMERICS.md: FP8 is floating point, so scaling by a
// power of two commutes with rounding inside the normal range. Two-level
// (tensor scope) dequantizes every value that per-tensor maps to the normal
// range (|x| / s >= 2^-6 for E4M3, 2^-14 for E5M2) to exactly the same
// number; it differs only below, where it is at least as accurate.
TEST(SnrStudyTest, TwoLevelEqualsPerTensorAboveTheSubnormalRange) {
  uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  const int64_t rows = 128, cols = 512;
  std::vector<float> x = llmActivationSample(rows, cols, seed);
  for (Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2})
    for (int64_t block : {32, 64, 128}) {
      SCOPED_TRACE("block " + std::to_string(block));
      QuantizeOptions options;
      options.format = format;
      QuantizedTensor pt = mustQuantize(x, rows, cols, options);
      options.scheme = ScalingScheme::twoLevel(GlobalScope::Tensor, block);
      QuantizedTensor tl = mustQuantize(x, rows, cols, options);
      ASSERT_EQ(pt.global, tl.global);
      std::vector<double> a = dequantize(pt), b = dequantize(tl);
      double minNormal = format == Fp8Format::E4M3 ? 0x1p-6 : 0x1p-14;
      int64_t subnormal = 0;
      for (int64_t i = 0; i < rows * cols; ++i) {
        double v = std::fabs(double(x[i]) / pt.global[0]);
        if (v >= minNormal) {
          ASSERT_EQ(a[i], b[i]) << "element " << i;
        } else {
          ++subnormal;
          EXPECT_LE(std::fabs(b[i] - x[i]), std::fabs(a[i] - x[i]))
              << "element " << i;
        }
      }
      if (format == Fp8Format::E4M3) {
        EXPECT_GT(subnormal, 0); // the sample does reach below the range
      }
    }
}
