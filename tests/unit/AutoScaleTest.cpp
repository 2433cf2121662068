//===- AutoScaleTest.cpp - AutoScaler and the Adam update bound -----------===//

#include "moss/Numerics/AutoScale.h"
#include "moss/Numerics/Fidelity.h"
#include "moss/Numerics/Samples.h"

#include "gtest/gtest.h"

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace moss::numerics;

namespace {

AutoScaler mustCreate(const AutoScalerOptions &options, float amax) {
  llvm::Expected<AutoScaler> scaler = AutoScaler::create(options, amax);
  if (!scaler) {
    ADD_FAILURE() << llvm::toString(scaler.takeError());
    return std::move(*AutoScaler::createWithBound(1.0, 1, 0.0f));
  }
  return std::move(*scaler);
}

std::string errorText(llvm::Error error) {
  return error ? llvm::toString(std::move(error)) : std::string();
}

template <typename T> std::string errorText(llvm::Expected<T> value) {
  return value ? std::string() : llvm::toString(value.takeError());
}

double provable(double beta1, double beta2) {
  llvm::Expected<double> c = provableAdamBound(beta1, beta2);
  if (!c) {
    ADD_FAILURE() << llvm::toString(c.takeError());
    return 0;
  }
  return *c;
}

/// One parameter under Adam (PyTorch's Adam/AdamW update, eps added to
/// sqrt(v_hat), decoupled weight decay), in FP64.
struct AdamParameter {
  double beta1, beta2, eps = 1e-8, weightDecay = 0;
  double w, m = 0, v = 0;
  int64_t t = 0;

  /// Applies one step and returns the Adam direction |m_hat / (sqrt(v_hat) +
  /// eps)| of this step.
  double step(double g, double lr) {
    ++t;
    m = beta1 * m + (1 - beta1) * g;
    v = beta2 * v + (1 - beta2) * g * g;
    double mHat = m / (1 - std::pow(beta1, double(t)));
    double vHat = v / (1 - std::pow(beta2, double(t)));
    double u = mHat / (std::sqrt(vHat) + eps);
    w = w * (1 - lr * weightDecay) - lr * u;
    return std::fabs(u);
  }
};

/// Cosine schedule with linear warmup, as in the fine-tuning study.
double cosineLr(int64_t step, int64_t total, double peak, int64_t warmup) {
  if (step <= warmup)
    return peak * double(step) / double(warmup);
  double progress = double(step - warmup) / double(total - warmup);
  return 0.5 * peak * (1 + std::cos(3.14159265358979323846 * progress));
}

} // namespace

TEST(AutoScaleTest, ProvableBoundFormula) {
  // (1 - 0.9) / sqrt(0.001 * (1 - 0.81 / 0.999)) = 7.2703...
  EXPECT_NEAR(provable(0.9, 0.999), 7.2703, 1e-4);
  EXPECT_DOUBLE_EQ(provable(0.9, 0.999),
                   (1.0 - 0.9) /
                       std::sqrt((1.0 - 0.999) * (1.0 - 0.9 * 0.9 / 0.999)));
  // beta1 = 0 (RMSProp-like): |g| / sqrt((1-b2) g^2) at most 1/sqrt(1-b2).
  EXPECT_DOUBLE_EQ(provable(0.0, 0.75), 2.0);
  // beta1 = beta2: the bound is exactly 1.
  EXPECT_NEAR(provable(0.5, 0.5), 1.0, 1e-15);
}

TEST(AutoScaleTest, ProvableBoundRejectsBadBetas) {
  EXPECT_NE(errorText(provableAdamBound(0.9, 0.81)).find("beta1^2 < beta2"),
            std::string::npos);
  EXPECT_NE(errorText(provableAdamBound(0.95, 0.9)).find("beta1^2 < beta2"),
            std::string::npos);
  EXPECT_NE(errorText(provableAdamBound(1.0, 0.999)).find("beta1=1"),
            std::string::npos);
  EXPECT_NE(errorText(provableAdamBound(-0.1, 0.999)).find("beta1"),
            std::string::npos);
  EXPECT_NE(errorText(provableAdamBound(0.9, 1.0)).find("beta2=1"),
            std::string::npos);
  EXPECT_NE(errorText(provableAdamBound(NAN, 0.999)).find("beta1"),
            std::string::npos);
  AutoScalerOptions options;
  options.bound = AdamBound::Provable;
  options.beta1 = 0.9;
  options.beta2 = 0.5;
  EXPECT_NE(errorText(AutoScaler::create(options, 1.0f)).find("beta1^2"),
            std::string::npos);
  // The paper bound does not look at the betas.
  options.bound = AdamBound::Paper;
  EXPECT_EQ(errorText(AutoScaler::create(options, 1.0f)), "");
}

TEST(AutoScaleTest, CreateRejectsBadArguments) {
  AutoScalerOptions options;
  options.interval = 0;
  EXPECT_NE(errorText(AutoScaler::create(options, 1.0f)).find("interval 0"),
            std::string::npos);
  options.interval = 500;
  EXPECT_NE(errorText(AutoScaler::create(options, -1.0f)).find("amax"),
            std::string::npos);
  EXPECT_NE(errorText(AutoScaler::create(options, NAN)).find("NaN"),
            std::string::npos);
  EXPECT_NE(errorText(AutoScaler::create(options, INFINITY)).find("finite"),
            std::string::npos);
  EXPECT_NE(errorText(AutoScaler::createWithBound(0.0, 10, 1.0f)).find("c=0"),
            std::string::npos);
  EXPECT_NE(errorText(AutoScaler::createWithBound(NAN, 10, 1.0f)).find("c="),
            std::string::npos);
}

TEST(AutoScaleTest, PredictionAndRescaleProtocol) {
  AutoScalerOptions options;
  options.interval = 3;
  AutoScaler scaler = mustCreate(options, 2.0f);
  EXPECT_EQ(scaler.bound(), 1.0);
  EXPECT_FALSE(scaler.needsRescale());
  EXPECT_EQ(scaler.predictedAmax(), 2.0f);
  EXPECT_EQ(scaler.predictedScale(Fp8Format::E4M3), 2.0f / 448.0f);
  EXPECT_EQ(scaler.predictedScale(Fp8Format::E5M2), 2.0f / 57344.0f);

  ASSERT_EQ(errorText(scaler.step(0.25)), "");
  ASSERT_EQ(errorText(scaler.step(0.5)), "");
  EXPECT_EQ(scaler.stepsSinceRescale(), 2);
  EXPECT_EQ(scaler.learningRateSum(), 0.75);
  EXPECT_EQ(scaler.predictedAmax(), 2.75f);
  EXPECT_FALSE(scaler.needsRescale());
  ASSERT_EQ(errorText(scaler.step(0.125)), "");
  EXPECT_TRUE(scaler.needsRescale()); // interval reached
  EXPECT_EQ(scaler.predictedAmax(), 2.875f);

  ASSERT_EQ(errorText(scaler.rescale(2.5f)), "");
  EXPECT_FALSE(scaler.needsRescale());
  EXPECT_EQ(scaler.stepsSinceRescale(), 0);
  EXPECT_EQ(scaler.learningRateSum(), 0.0);
  EXPECT_EQ(scaler.anchorAmax(), 2.5f);
  EXPECT_EQ(scaler.predictedAmax(), 2.5f);

  // Saturation feedback: zero does nothing, non-zero forces a rescale.
  scaler.reportSaturation(0);
  EXPECT_FALSE(scaler.needsRescale());
  scaler.reportSaturation(7);
  EXPECT_TRUE(scaler.saturationReported());
  EXPECT_TRUE(scaler.needsRescale());
  ASSERT_EQ(errorText(scaler.step(0.1)), "");
  EXPECT_TRUE(scaler.needsRescale());
  ASSERT_EQ(errorText(scaler.rescale(3.0f)), "");
  EXPECT_FALSE(scaler.needsRescale());
  EXPECT_FALSE(scaler.saturationReported());
}

TEST(AutoScaleTest, BadStepsAndRescalesChangeNothing) {
  AutoScaler scaler = mustCreate(AutoScalerOptions(), 1.0f);
  ASSERT_EQ(errorText(scaler.step(0.5)), "");
  for (double lr : {-1e-3, double(NAN), double(INFINITY)})
    EXPECT_NE(errorText(scaler.step(lr)).find("learning rate"),
              std::string::npos);
  EXPECT_NE(errorText(scaler.rescale(NAN)).find("NaN"), std::string::npos);
  EXPECT_NE(errorText(scaler.rescale(-2.0f)).find("amax"), std::string::npos);
  EXPECT_EQ(scaler.stepsSinceRescale(), 1);
  EXPECT_EQ(scaler.learningRateSum(), 0.5);
  EXPECT_EQ(scaler.anchorAmax(), 1.0f);
}

TEST(AutoScaleTest, PredictedAmaxRoundsUp) {
  // 1 + 1e-9 is below half an FP32 ulp of 1 (6e-8): round-to-nearest would
  // give 1, under the real bound.
  llvm::Expected<AutoScaler> scaler = AutoScaler::createWithBound(1.0, 10, 1.0f);
  ASSERT_TRUE(bool(scaler));
  ASSERT_EQ(errorText(scaler->step(1e-9)), "");
  EXPECT_EQ(scaler->predictedAmax(), std::nextafter(1.0f, 2.0f));
  // Exactly representable sums are not bumped.
  ASSERT_EQ(errorText(scaler->rescale(1.0f)), "");
  ASSERT_EQ(errorText(scaler->step(0.5)), "");
  EXPECT_EQ(scaler->predictedAmax(), 1.5f);
}

TEST(AutoScaleTest, ScaleAfterRescaleIsTheJitScale) {
  // Right after a rescale the predicted scale is bit-identical to the
  // per-tensor quantizer's amax / max, zero amax included (scale 1).
  uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::vector<float> w = studentTSample(64, 96, 3.0, seed);
  std::vector<float> zeros(64 * 96, 0.0f);
  for (const std::vector<float> *x : {&w, &zeros})
    for (Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2}) {
      float amax = 0;
      for (float v : *x)
        amax = std::max(amax, std::fabs(v));
      AutoScaler scaler = mustCreate(AutoScalerOptions(), 123.0f);
      ASSERT_EQ(errorText(scaler.rescale(amax)), "");
      QuantizeOptions options;
      options.format = format;
      llvm::Expected<QuantizedTensor> jit = quantize(*x, 64, 96, options);
      ASSERT_TRUE(bool(jit));
      EXPECT_EQ(scaler.predictedScale(format), jit->global[0]);
      llvm::Expected<QuantizedTensor> predicted =
          quantizeWithScale(*x, 64, 96, scaler.predictedScale(format), format);
      ASSERT_TRUE(bool(predicted));
      EXPECT_EQ(predicted->codes, jit->codes);
      EXPECT_EQ(predicted->global, jit->global);
      EXPECT_EQ(predicted->stats.saturated, 0);
    }
}

TEST(AutoScaleTest, QuantizeWithScale) {
  // amax 448 with scale 1: exact; scale 0.5: every |x| > 232 saturates.
  std::vector<float> x = {448.0f, -300.0f, 1.0f, 232.0f, -0.0f, 240.0f};
  llvm::Expected<QuantizedTensor> q =
      quantizeWithScale(x, 2, 3, 0.5f, Fp8Format::E4M3);
  ASSERT_TRUE(bool(q));
  EXPECT_EQ(q->stats.saturated, 3); // 896, 600, 480 -> 448
  EXPECT_EQ(q->global, std::vector<float>{0.5f});
  EXPECT_EQ(decodeFp8(q->codes[0], Fp8Format::E4M3), 448.0f);
  EXPECT_EQ(decodeFp8(q->codes[1], Fp8Format::E4M3), -448.0f);
  EXPECT_EQ(decodeFp8(q->codes[2], Fp8Format::E4M3), 2.0f);
  EXPECT_EQ(q->codes[4], 0x80);
  FidelityReport r = measureFidelity(x, 2, 3, *q);
  EXPECT_EQ(r.saturated, 3);
  EXPECT_NEAR(r.maxRelError, 0.5, 1e-12); // 448 -> 224

  // Non-finite values are encoded one by one, as the one-pass GPU cast
  // does: NaN -> the NaN code, +-Inf -> +-max; the scale stays, and nothing
  // is counted (the next JIT rescale sees them).
  x[2] = NAN;
  x[3] = -INFINITY;
  q = quantizeWithScale(x, 2, 3, 1.0f, Fp8Format::E4M3);
  ASSERT_TRUE(bool(q));
  EXPECT_EQ(q->global, std::vector<float>{1.0f});
  EXPECT_EQ(q->stats.nonFiniteBlocks, 0);
  EXPECT_EQ(q->stats.saturated, 0);
  EXPECT_EQ(q->codes[2], kFp8NaNCode);
  EXPECT_EQ(decodeFp8(q->codes[3], Fp8Format::E4M3), -448.0f);
  EXPECT_EQ(decodeFp8(q->codes[0], Fp8Format::E4M3), 448.0f);

  EXPECT_NE(errorText(quantizeWithScale(x, 2, 3, 0.0f, Fp8Format::E4M3))
                .find("scale 0"),
            std::string::npos);
  EXPECT_NE(errorText(quantizeWithScale(x, 2, 3, NAN, Fp8Format::E4M3))
                .find("finite"),
            std::string::npos);
  EXPECT_NE(errorText(quantizeWithScale(x, 2, 2, 1.0f, Fp8Format::E4M3))
                .find("expected rows*cols = 4"),
            std::string::npos);
}

// The gradient sequence g_t = -K (beta2/beta1)^t makes Cauchy-Schwarz tight
// at every step: each Adam step is the largest one possible given the
// history, in one direction. The weight then grows as fast as Adam can move
// it. The provable c must hold at every step; c = 1 must fail.
TEST(AutoScaleTest, WorstCaseAdamSequenceNeverSaturatesWithProvableC) {
  struct Betas {
    double beta1, beta2;
  };
  for (Betas betas : {Betas{0.9, 0.999}, Betas{0.9, 0.95}, Betas{0.8, 0.99},
                      Betas{0.95, 0.999}}) {
    SCOPED_TRACE("betas " + std::to_string(betas.beta1) + "/" +
                 std::to_string(betas.beta2));
    const double c = provable(betas.beta1, betas.beta2);
    const int64_t total = 1500;
    const float w0 = 0.5f;
    AutoScalerOptions options;
    options.beta1 = betas.beta1;
    options.beta2 = betas.beta2;
    options.interval = total + 1; // no periodic rescale: the whole run
    options.bound = AdamBound::Provable;
    AutoScaler safe = mustCreate(options, w0);
    options.bound = AdamBound::Paper;
    AutoScaler paper = mustCreate(options, w0);

    AdamParameter p{betas.beta1, betas.beta2};
    p.eps = 0; // eps only shrinks the step; take the limit case
    p.w = w0;
    double ratio = betas.beta2 / betas.beta1, g = 1e-30;
    double largestStep = 0;
    int64_t paperUndershoots = 0, paperSaturations = 0, firstUndershoot = 0;
    for (int64_t t = 1; t <= total; ++t) {
      g *= ratio;
      double lr = cosineLr(t, total, 1e-3, 100);
      double u = p.step(-g, lr);
      largestStep = std::max(largestStep, u);
      ASSERT_LE(u, c * (1 + 1e-12)) << "step " << t;
      ASSERT_EQ(errorText(safe.step(lr)), "");
      ASSERT_EQ(errorText(paper.step(lr)), "");
      // The provable prediction is never below the weight, and a cast with
      // it never saturates.
      ASSERT_LE(p.w, double(safe.predictedAmax())) << "step " << t;
      float wf = float(p.w);
      ASSERT_FALSE(encodeFp8(wf / safe.predictedScale(Fp8Format::E4M3),
                             Fp8Format::E4M3)
                       .saturated)
          << "step " << t;
      if (p.w > double(paper.predictedAmax()) && paperUndershoots++ == 0)
        firstUndershoot = t;
      paperSaturations +=
          encodeFp8(wf / paper.predictedScale(Fp8Format::E4M3),
                    Fp8Format::E4M3)
              .saturated;
    }
    // The sequence really is the worst case: late steps come close to c.
    EXPECT_GT(largestStep, 0.8 * c);
    // The paper's c = 1 undershoots early and the cast saturates.
    EXPECT_GT(paperUndershoots, 0);
    EXPECT_LT(firstUndershoot, 50);
    EXPECT_GT(paperSaturations, 0);
  }
}

// Adam's step is scale-invariant, so the worst case does not depend on the
// gradient's magnitude, and random gradient streams of any kind stay within
// c too; the saturation feedback then keeps a c = 1 scaler honest.
TEST(AutoScaleTest, RandomAdamStreamsStayWithinTheBound) {
  uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  std::cauchy_distribution<double> cauchy;
  const double c = provable(0.9, 0.999);
  for (int stream = 0; stream < 6; ++stream) {
    AdamParameter p{0.9, 0.999};
    p.w = 0;
    p.weightDecay = 0.01;
    double largest = 0;
    for (int64_t t = 1; t <= 3000; ++t) {
      double g = 0;
      switch (stream % 3) {
      case 0: // noisy with a drift
        g = normal(rng) + 0.3;
        break;
      case 1: // heavy-tailed
        g = cauchy(rng);
        break;
      case 2: // quiet, then bursts of one sign
        g = (t % 200 < 10) ? -1e3 * std::fabs(normal(rng)) : 1e-3 * normal(rng);
        break;
      }
      largest = std::max(largest, p.step(g, 1e-3));
    }
    EXPECT_LE(largest, c);
  }
}

TEST(AutoScaleTest, SaturationFeedbackRescalesThePaperBound) {
  // The full runtime protocol on the worst-case sequence with c = 1: the
  // cast saturates, the report forces a rescale at the next step, and the
  // step after a rescale casts without saturation.
  AutoScalerOptions options;
  options.interval = 500;
  AutoScaler scaler = mustCreate(options, 0.5f);
  AdamParameter p{0.9, 0.999};
  p.eps = 0;
  p.w = 0.5;
  double g = 1e-30;
  int64_t saturatedSteps = 0, rescales = 0;
  for (int64_t t = 1; t <= 1500; ++t) {
    g *= 0.999 / 0.9;
    double lr = 1e-3;
    p.step(-g, lr);
    ASSERT_EQ(errorText(scaler.step(lr)), "");
    bool forced = scaler.saturationReported();
    if (scaler.needsRescale()) {
      ++rescales;
      ASSERT_EQ(errorText(scaler.rescale(float(p.w))), "");
    }
    float s = scaler.predictedScale(Fp8Format::E4M3);
    bool saturated =
        encodeFp8(float(p.w) / s, Fp8Format::E4M3).saturated;
    if (forced) {
      EXPECT_FALSE(saturated) << "step " << t;
    }
    saturatedSteps += saturated;
    scaler.reportSaturation(saturated ? 1 : 0);
  }
  EXPECT_GT(saturatedSteps, 0);
  EXPECT_GT(rescales, 1500 / 500);
}
