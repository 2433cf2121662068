//===- AdamWTest.cpp - The fused optimizer step's host reference ----------===//
//
// numerics::adamwUpdate against AdamW computed in FP64 from torch's formula,
// over many steps of random gradients, and the checks of a step's
// hyperparameters.
//
//===----------------------------------------------------------------------===//

#include "moss/Numerics/AdamW.h"

#include "gtest/gtest.h"

#include <cmath>
#include <random>

using namespace moss::numerics;

namespace {

/// One AdamW step in FP64, as torch.optim.AdamW writes it.
double referenceStep(double p, double g, double &m, double &v,
                     const AdamWStep &s) {
  p *= 1.0 - s.lr * s.weightDecay;
  m = s.beta1 * m + (1.0 - s.beta1) * g;
  v = s.beta2 * v + (1.0 - s.beta2) * g * g;
  const double bias1 = 1.0 - std::pow(s.beta1, double(s.step));
  const double bias2 = 1.0 - std::pow(s.beta2, double(s.step));
  return p - s.lr / bias1 * m / (std::sqrt(v) / std::sqrt(bias2) + s.eps);
}

std::string errorOf(const AdamWStep &step) {
  llvm::Expected<AdamWCoefficients> c = getAdamWCoefficients(step);
  return c ? "" : llvm::toString(c.takeError());
}

TEST(AdamWTest, StepsFollowTorchsAdamWInFP64) {
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal;
  constexpr int kElements = 256, kSteps = 200;
  std::vector<float> p(kElements), m(kElements, 0.0f), v(kElements, 0.0f);
  std::vector<double> p64(kElements), m64(kElements, 0.0), v64(kElements, 0.0);
  for (int i = 0; i < kElements; ++i)
    p64[i] = p[i] = 0.02f * normal(rng);
  AdamWStep step;
  step.lr = 1e-3;
  step.weightDecay = 0.1;
  double worstWeight = 0.0, worstMoment = 0.0;
  for (step.step = 1; step.step <= kSteps; ++step.step) {
    llvm::Expected<AdamWCoefficients> c = getAdamWCoefficients(step);
    ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
    for (int i = 0; i < kElements; ++i) {
      // Gradients of a few scales, some near zero.
      const float g = normal(rng) * std::ldexp(1.0f, int(rng() % 20) - 14);
      p[i] = adamwUpdate(p[i], g, m[i], v[i], *c);
      p64[i] = referenceStep(p64[i], double(g), m64[i], v64[i], step);
      // Errors relative to each value's scale: a weight that crosses zero
      // moves by about lr a step, and the first moment (which cancels
      // between gradients of either sign) by about sqrt(v).
      worstWeight = std::max(worstWeight, std::abs(double(p[i]) - p64[i]) /
                                              (std::abs(p64[i]) + step.lr));
      worstMoment = std::max(worstMoment, std::abs(double(m[i]) - m64[i]) /
                                              std::sqrt(v64[i]));
      if (v64[i] > 0.0)
        worstMoment =
            std::max(worstMoment, std::abs(double(v[i]) - v64[i]) / v64[i]);
    }
  }
  // FP32 carries 2^-24 relative; 200 steps accumulate at most a few hundred
  // roundings of each value.
  EXPECT_LT(worstWeight, 1e-4);
  EXPECT_LT(worstMoment, 1e-4);
  EXPECT_GT(worstWeight, 0.0) << "an FP32 step equal to FP64 throughout";
}

TEST(AdamWTest, AZeroGradientOnlyDecaysTheWeight) {
  AdamWStep step;
  step.lr = 0.5;
  step.weightDecay = 0.25;
  llvm::Expected<AdamWCoefficients> c = getAdamWCoefficients(step);
  ASSERT_TRUE(bool(c));
  float m = 0.0f, v = 0.0f;
  EXPECT_EQ(adamwUpdate(3.0f, 0.0f, m, v, *c), 3.0f * 0.875f);
  EXPECT_EQ(m, 0.0f);
  EXPECT_EQ(v, 0.0f);
}

TEST(AdamWTest, BadHyperparametersAreNamed) {
  AdamWStep good;
  EXPECT_EQ(errorOf(good), "");
  AdamWStep s = good;
  s.lr = -1e-3;
  EXPECT_NE(errorOf(s).find("lr must be finite and >= 0"), std::string::npos);
  s = good;
  s.lr = NAN;
  EXPECT_NE(errorOf(s).find("lr must be"), std::string::npos);
  s = good;
  s.beta1 = 1.0;
  EXPECT_NE(errorOf(s).find("betas must lie in [0, 1)"), std::string::npos);
  s = good;
  s.beta2 = -0.1;
  EXPECT_NE(errorOf(s).find("betas"), std::string::npos);
  s = good;
  s.eps = INFINITY;
  EXPECT_NE(errorOf(s).find("eps must be finite"), std::string::npos);
  s = good;
  s.weightDecay = -1.0;
  EXPECT_NE(errorOf(s).find("weight_decay"), std::string::npos);
  s = good;
  s.step = 0;
  EXPECT_NE(errorOf(s).find("the step count starts at 1"), std::string::npos);
  s = good;
  s.lr = 1e300;
  s.weightDecay = 0.0;
  EXPECT_NE(errorOf(s).find("beyond FP32"), std::string::npos);
}

} // namespace
