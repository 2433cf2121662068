//===- FidelityTest.cpp - SNR, error measures and the reference GEMM ------===//

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

uint64_t freshSeed() { return std::random_device{}(); }

/// A [rows, cols] tensor of random finite E4M3 values, with amax exactly 448.
std::vector<float> representableTensor(int64_t rows, int64_t cols,
                                       uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> x(rows * cols);
  for (float &v : x) {
    uint8_t code;
    do
      code = uint8_t(rng());
    while ((code & 0x7F) == 0x7F); // Skip the NaN codes.
    v = decodeFp8(code, Fp8Format::E4M3);
  }
  x[rng() % x.size()] = -448.0f;
  return x;
}

} // namespace

TEST(FidelityTest, RepresentableTensorIsExact) {
  uint64_t seed = freshSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  const int64_t rows = 64, cols = 128;
  std::vector<float> x = representableTensor(rows, cols, seed);
  // Per-tensor: s = 448 / 448 = 1. Two-level: s = 1 and every local scale a
  // power of two that keeps the block's values on the E4M3 grid.
  for (ScalingScheme scheme : {ScalingScheme::perTensor(),
                               ScalingScheme::twoLevel(GlobalScope::Tensor)})
    for (bool transpose : {false, true}) {
      SCOPED_TRACE(scheme.str() + (transpose ? " transposed" : ""));
      QuantizeOptions options;
      options.scheme = scheme;
      options.transpose = transpose;
      QuantizedTensor q = mustQuantize(x, rows, cols, options);
      FidelityReport r = measureFidelity(x, rows, cols, q);
      EXPECT_EQ(r.snrDb, kInf);
      EXPECT_EQ(r.maxRelError, 0.0);
      EXPECT_EQ(r.underflowToZero, 0);
      EXPECT_EQ(r.saturated, 0);
      EXPECT_EQ(r.nonFiniteBlocks, 0);
    }
}

TEST(FidelityTest, SnrOfKnownPerturbations) {
  // Signal 3^2 + 4^2 = 25, error 0.3^2 + 0.4^2 = 0.25: a ratio of 100.
  EXPECT_NEAR(snrDb({3.0f, 4.0f}, {3.3, 3.6}), 20.0, 1e-12);
  // Non-finite exact values are skipped, whatever the approximation says.
  EXPECT_NEAR(snrDb({3.0f, NAN, 4.0f, INFINITY}, {3.3, 1.0, 3.6, 5.0}), 20.0,
              1e-12);
  EXPECT_EQ(snrDb({1.0f, -2.0f}, {1.0, -2.0}), kInf);
  EXPECT_EQ(snrDb({0.0f, 0.0f}, {0.0, 0.0}), kInf);
  EXPECT_EQ(snrDb({0.0f}, {1.0}), -kInf);
  // A relative perturbation of 2^-5 on every element: -20 log10(2^-5).
  uint64_t seed = freshSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::vector<float> x = gaussianSample(1, 10000, seed);
  std::vector<double> approx(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    approx[i] = x[i] * (1.0 + 0x1p-5);
  EXPECT_NEAR(snrDb(x, approx), 100.0 * std::log10(2.0), 1e-9);
  // Halving the error adds 10 log10(4) = 6.02 dB.
  for (size_t i = 0; i < x.size(); ++i)
    approx[i] = x[i] * (1.0 + 0x1p-6);
  EXPECT_NEAR(snrDb(x, approx), 120.0 * std::log10(2.0), 1e-9);
}

TEST(FidelityTest, MeasuresAHandMadeQuantization) {
  // Per-tensor scale 0.5 and codes for 2, 3, 0: dequantized 1, 1.5, 0.
  QuantizedTensor q;
  q.scheme = ScalingScheme::perTensor();
  q.rows = 1;
  q.cols = 3;
  q.global = {0.5f};
  q.codes = {encodeFp8(2.0f, Fp8Format::E4M3).code,
             encodeFp8(3.0f, Fp8Format::E4M3).code, 0x00};
  q.stats.saturated = 3;
  q.stats.nonFiniteBlocks = 2;
  std::vector<float> x = {1.0f, 1.6f, 1e-3f};
  FidelityReport r = measureFidelity(x, 1, 3, q);
  double e1 = double(1.6f) - 1.5, e2 = double(1e-3f);
  double signal = 1.0 + double(1.6f) * double(1.6f) + e2 * e2;
  EXPECT_NEAR(r.snrDb, 10.0 * std::log10(signal / (e1 * e1 + e2 * e2)), 1e-9);
  EXPECT_EQ(r.maxRelError, 1.0); // 1e-3 became 0.
  EXPECT_EQ(r.underflowToZero, 1);
  EXPECT_EQ(r.saturated, 3);
  EXPECT_EQ(r.nonFiniteBlocks, 2);
  // Without the underflowing element the worst is 1.6 -> 1.5.
  q.cols = 2;
  q.codes.pop_back();
  x.pop_back();
  r = measureFidelity(x, 1, 2, q);
  EXPECT_DOUBLE_EQ(r.maxRelError, e1 / double(1.6f));
  EXPECT_EQ(r.underflowToZero, 0);
}

TEST(FidelityTest, CountsUnderflowToZero) {
  // s = 1: 1e-4 is below half the smallest E4M3 subnormal (2^-10).
  std::vector<float> x(32, 0.0f);
  x[0] = 448.0f;
  x[1] = 1e-4f;
  x[2] = -1e-4f;
  x[3] = 0.0f; // Zero inputs are not underflow.
  QuantizeOptions options;
  QuantizedTensor q = mustQuantize(x, 1, 32, options);
  FidelityReport r = measureFidelity(x, 1, 32, q);
  EXPECT_EQ(r.underflowToZero, 2);
  EXPECT_EQ(r.maxRelError, 1.0);
}

TEST(FidelityTest, TransposeAndNonFiniteBlocks) {
  uint64_t seed = freshSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  const int64_t rows = 128, cols = 256;
  std::vector<float> x = llmActivationSample(rows, cols, seed);
  // Per-tensor codes do not depend on the layout: the same SNR either way.
  QuantizeOptions options;
  FidelityReport plain =
      measureFidelity(x, rows, cols, mustQuantize(x, rows, cols, options));
  options.transpose = true;
  FidelityReport trans =
      measureFidelity(x, rows, cols, mustQuantize(x, rows, cols, options));
  EXPECT_TRUE(std::isfinite(plain.snrDb));
  // (Only the summation order differs.)
  EXPECT_NEAR(plain.snrDb, trans.snrDb, 1e-9);
  EXPECT_EQ(plain.maxRelError, trans.maxRelError);
  EXPECT_EQ(plain.underflowToZero, trans.underflowToZero);

  // A NaN block is reported through nonFiniteBlocks; the SNR is over the
  // other elements.
  x[5 * cols + 40] = NAN;
  options.scheme = ScalingScheme::twoLevel(GlobalScope::Tensor);
  options.transpose = false;
  QuantizedTensor q = mustQuantize(x, rows, cols, options);
  FidelityReport r = measureFidelity(x, rows, cols, q);
  EXPECT_EQ(r.nonFiniteBlocks, 1);
  std::vector<float> masked = x;
  for (int64_t c = 32; c < 64; ++c)
    masked[5 * cols + c] = NAN;
  EXPECT_EQ(r.snrDb, snrDb(masked, dequantize(q)));
  EXPECT_TRUE(std::isfinite(r.snrDb));
}

TEST(FidelityTest, ReferenceGemmHandChecked) {
  // A [2, 3], B [2, 3] (K-major): C[m, n] = sum_k A[m, k] B[n, k].
  std::vector<double> a = {1, 2, 3, 4, 5, 6};
  std::vector<double> b = {7, 8, 9, 1, 0, -1};
  std::vector<double> c = referenceGemm(a, b, 2, 2, 3);
  EXPECT_EQ(c, (std::vector<double>{50, -2, 122, -2}));
}

TEST(FidelityTest, ReferenceGemmRandom) {
  uint64_t seed = freshSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int64_t m = 7, n = 5, k = 129;
  // Small integers: every sum is exact, so any summation order agrees.
  std::vector<double> a(m * k), b(n * k);
  for (double &v : a)
    v = double(int64_t(rng() % 201) - 100);
  for (double &v : b)
    v = double(int64_t(rng() % 201) - 100);
  std::vector<double> c = referenceGemm(a, b, m, n, k);
  ASSERT_EQ(int64_t(c.size()), m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      int64_t want = 0;
      for (int64_t l = k - 1; l >= 0; --l)
        want += int64_t(a[i * k + l]) * int64_t(b[j * k + l]);
      EXPECT_EQ(c[i * n + j], double(want)) << i << ", " << j;
    }
  // Real values against a long double sum in reverse order.
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (double &v : a)
    v = u(rng);
  for (double &v : b)
    v = u(rng);
  c = referenceGemm(a, b, m, n, k);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      long double want = 0, mag = 0;
      for (int64_t l = k - 1; l >= 0; --l) {
        want += (long double)a[i * k + l] * b[j * k + l];
        mag += std::fabs((long double)a[i * k + l] * b[j * k + l]);
      }
      EXPECT_NEAR(c[i * n + j], double(want), double(mag) * 1e-13);
    }
}

// The contract's per-entry allowance (docs/NUMERICS-CONTRACT.md section 7),
// worked out by hand from its formula 12 u(P) sqrt(sum (a b)^2 + sum S_j^2).
TEST(FidelityTest, GemmEntryAllowanceHandChecked) {
  EXPECT_EQ(tensorCoreUnit(32), std::ldexp(1.0, -13));
  EXPECT_EQ(tensorCoreUnit(128), std::ldexp(1.0, -12));
  const double u32 = std::ldexp(1.0, -13);
  // Products all 1, K = 64 in two intervals of 32: 64 + 32^2 + 32^2.
  std::vector<double> ones(64, 1.0);
  EXPECT_DOUBLE_EQ(gemmEntryAllowance(ones, ones, 32),
                   12 * u32 * std::sqrt(64.0 + 2 * 32 * 32));
  // Alternating signs cancel in every interval: only sum (a b)^2 is left.
  std::vector<double> alternating(64);
  for (size_t i = 0; i < alternating.size(); ++i)
    alternating[i] = i % 2 ? -3.0 : 3.0;
  EXPECT_DOUBLE_EQ(gemmEntryAllowance(alternating, ones, 32),
                   12 * u32 * std::sqrt(64 * 9.0));
  // A last, shorter interval counts on its own: K = 80 at P = 32 is
  // 32 + 32 + 16; at P = K, one sum of 80.
  std::vector<double> twos(80, 2.0), one80(80, 1.0);
  EXPECT_DOUBLE_EQ(gemmEntryAllowance(twos, one80, 32),
                   12 * u32 * std::sqrt(80 * 4.0 + 2 * 64.0 * 64 + 32 * 32));
  EXPECT_DOUBLE_EQ(gemmEntryAllowance(twos, one80, 80),
                   12 * tensorCoreUnit(80) * std::sqrt(80 * 4.0 + 160 * 160));
}

// The f16 MMA's bound: the running sums at the ends of the steps of 16
// (each step counts the sums before and after it) and the products' sizes.
TEST(FidelityTest, F16MmaEntryAllowanceHandChecked) {
  const double u21 = std::ldexp(1.0, -21), u22 = std::ldexp(1.0, -22);
  // K = 32, products all 1: sums 16 and 32, so (0 + 16) + (16 + 32).
  std::vector<double> ones(32, 1.0);
  EXPECT_DOUBLE_EQ(f16MmaEntryAllowance(ones, ones),
                   (16 + 48) * u21 + 32 * u22);
  // The second step cancels the first: sums 16 and 0.
  std::vector<double> cancel(32, 1.0);
  for (size_t i = 16; i < cancel.size(); ++i)
    cancel[i] = -1.0;
  EXPECT_DOUBLE_EQ(f16MmaEntryAllowance(cancel, ones),
                   (16 + 16) * u21 + 32 * u22);
  // A last, shorter step: K = 20 of products 3 ends at 48 and 60.
  std::vector<double> threes(20, 3.0), one20(20, 1.0);
  EXPECT_DOUBLE_EQ(f16MmaEntryAllowance(threes, one20),
                   (48 + 108) * u21 + 60 * u22);
  // The whole allowance: f32 rounding of -4 (2^-23 each), the bound, and
  // the epilogue's 2^-22 (|sum| + |bias| + |beta C|) for 60 - 66 + 2.
  const OutputRounding f32{std::ldexp(1.0, -23), 0};
  EXPECT_DOUBLE_EQ(
      f16MmaEntryAllowedError(-4.0, f32, threes, one20, 60.0, -66.0, 2.0),
      4 * std::ldexp(1.0, -23) + (48 + 108) * u21 + 60 * u22 + 128 * u22);
}

// The whole allowance of an entry and the share of it an error uses.
TEST(FidelityTest, GemmEntryErrorRatio) {
  std::vector<double> ones(32, 1.0);
  const OutputRounding f16{std::ldexp(1.0, -11), std::ldexp(1.0, -25)};
  EXPECT_DOUBLE_EQ(gemmEntryAllowedError(-4.0, f16, ones, ones, 32),
                   4 * std::ldexp(1.0, -11) + std::ldexp(1.0, -25) +
                       gemmEntryAllowance(ones, ones, 32));
  EXPECT_DOUBLE_EQ(gemmEntryErrorRatio(1.5, 1.0, 2.0), 0.25);
  EXPECT_DOUBLE_EQ(gemmEntryErrorRatio(0.5, 1.0, 2.0), 0.25);
  // Exact is 0 even with nothing allowed; any error then is infinite.
  EXPECT_EQ(gemmEntryErrorRatio(0.0, 0.0, 0.0), 0.0);
  EXPECT_EQ(gemmEntryErrorRatio(1e-40, 0.0, 0.0),
            std::numeric_limits<double>::infinity());
  EXPECT_EQ(gemmEntryErrorRatio(std::nan(""), 1.0, 1.0),
            std::numeric_limits<double>::infinity());
  // f16 rounds from 65520 on to infinity: an infinite entry is within its
  // allowance when that lies within the allowed error of the reference.
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_DOUBLE_EQ(gemmEntryErrorRatio(inf, 65500.0, 40.0, 65520.0), 0.5);
  EXPECT_DOUBLE_EQ(gemmEntryErrorRatio(-inf, -65510.0, 40.0, 65520.0), 0.25);
  EXPECT_GT(gemmEntryErrorRatio(inf, 65000.0, 40.0, 65520.0), 1.0);
  EXPECT_EQ(gemmEntryErrorRatio(-inf, 65500.0, 40.0, 65520.0), inf);
  EXPECT_EQ(gemmEntryErrorRatio(inf, 65500.0, 40.0), inf);
}
