//===- WeightScalerTest.cpp - The weight scaler's host logic --------------===//
//
// No GPU: the planner (decisions, feedback, late anchors, dropped
// snapshots) against numerics::AutoScaler driven synchronously, and the
// argument checks that run before any launch.
//
//===----------------------------------------------------------------------===//

#include "moss/Runtime/Api/WeightScaler.h"

#include "gtest/gtest.h"

#include <cmath>
#include <limits>
#include <string>

using namespace moss::numerics;
using namespace moss::runtime;
using moss::compiler::QuantizeSpec;

namespace {

WeightScalePlanner makePlanner(int64_t interval, double c = 1.0) {
  WeightScalerOptions options;
  options.scaling.interval = interval;
  options.explicitBound = c;
  llvm::Expected<WeightScalePlanner> planner =
      WeightScalePlanner::create(options);
  EXPECT_TRUE(bool(planner)) << llvm::toString(planner.takeError());
  return std::move(*planner);
}

/// Plans and commits one step.
WeightScaleDecision launch(WeightScalePlanner &planner, double lr,
                           Fp8Format format = Fp8Format::E4M3) {
  llvm::Expected<WeightScaleDecision> decision = planner.plan(lr, format);
  EXPECT_TRUE(bool(decision)) << llvm::toString(decision.takeError());
  planner.commit(*decision, lr);
  return *decision;
}

void observe(WeightScalePlanner &planner, int64_t step, uint64_t saturated,
             std::optional<float> amax = std::nullopt, uint64_t nonFinite = 0) {
  WeightScaleObservation o;
  o.step = step;
  o.saturatedTotal = saturated;
  o.nonFiniteTotal = nonFinite;
  o.amax = amax;
  llvm::Error error = planner.observe(o);
  EXPECT_FALSE(bool(error)) << llvm::toString(std::move(error));
}

void expectError(llvm::Error error, const std::string &text) {
  ASSERT_TRUE(bool(error)) << "expected an error containing: " << text;
  std::string message = llvm::toString(std::move(error));
  EXPECT_NE(message.find(text), std::string::npos) << message;
}

template <typename T>
void expectError(llvm::Expected<T> value, const std::string &text) {
  ASSERT_FALSE(bool(value)) << "expected an error containing: " << text;
  expectError(value.takeError(), text);
}

TEST(WeightScalePlannerTest, BadOptions) {
  WeightScalerOptions options;
  options.scaling.interval = 0;
  expectError(WeightScalePlanner::create(options),
              "the rescale interval 0 must be at least 1 step");
  options = WeightScalerOptions();
  options.explicitBound = -2.0;
  expectError(WeightScalePlanner::create(options), "c=-2 must be finite");
  options.explicitBound = std::numeric_limits<double>::infinity();
  expectError(WeightScalePlanner::create(options), "must be finite");
  options = WeightScalerOptions();
  options.scaling.bound = AdamBound::Provable;
  options.scaling.beta1 = 0.99;
  options.scaling.beta2 = 0.9;
  expectError(WeightScalePlanner::create(options), "beta1^2 < beta2");
  // The provable bound is taken from the betas.
  options.scaling.beta1 = 0.9;
  options.scaling.beta2 = 0.999;
  llvm::Expected<WeightScalePlanner> planner =
      WeightScalePlanner::create(options);
  ASSERT_TRUE(bool(planner)) << llvm::toString(planner.takeError());
  EXPECT_DOUBLE_EQ(planner->bound(), *provableAdamBound(0.9, 0.999));
}

TEST(WeightScalePlannerTest, BadLearningRatesChangeNothing) {
  WeightScalePlanner planner = makePlanner(4);
  for (double lr :
       {-1e-3, std::nan(""), std::numeric_limits<double>::infinity()})
    expectError(planner.plan(lr, Fp8Format::E4M3),
                "must be finite and non-negative");
  EXPECT_EQ(planner.stats().steps, 0);
  EXPECT_EQ(launch(planner, 0.0).step, 0);
}

// With every snapshot observed before the next step (a GPU that keeps up),
// the planner makes the decisions of numerics::AutoScaler's protocol.
TEST(WeightScalePlannerTest, SynchronousFeedbackFollowsTheAutoScaler) {
  const int64_t interval = 5;
  const double c = 7.25;
  WeightScalePlanner planner = makePlanner(interval, c);
  std::optional<AutoScaler> reference;
  for (int64_t t = 0; t < 40; ++t) {
    double lr = 1e-3 * (1.0 + 0.5 * std::sin(double(t)));
    float amax = 0.5f + 0.01f * float(t);
    Fp8Format format = t % 3 ? Fp8Format::E4M3 : Fp8Format::E5M2;
    WeightScaleDecision d = launch(planner, lr, format);
    ASSERT_EQ(d.step, t);
    bool rescale;
    if (!reference) {
      EXPECT_EQ(d.reason, RescaleReason::NoAnchor);
      reference.emplace(*AutoScaler::createWithBound(c, interval, amax));
      rescale = true;
    } else {
      ASSERT_FALSE(bool(reference->step(lr)));
      rescale = reference->needsRescale();
      if (rescale) {
        EXPECT_EQ(d.reason, RescaleReason::Interval) << "step " << t;
        ASSERT_FALSE(bool(reference->rescale(amax)));
      } else {
        EXPECT_EQ(d.reason, RescaleReason::None) << "step " << t;
        EXPECT_EQ(d.scale, reference->predictedScale(format)) << "step " << t;
      }
    }
    observe(planner, t, 0, rescale ? std::optional<float>(amax) : std::nullopt);
  }
  const WeightScalerStats &s = planner.stats();
  EXPECT_EQ(s.steps, 40);
  EXPECT_EQ(s.noAnchorRescales, 1);
  // Rescales at 0, 5, 10, ..., 35.
  EXPECT_EQ(s.intervalRescales, 7);
  EXPECT_EQ(s.rescales, 8);
  EXPECT_EQ(s.saturationEvents, 0);
  EXPECT_EQ(s.observedStep, 39);
  EXPECT_EQ(s.anchorStep, 35);
  EXPECT_EQ(s.anchorAmax, 0.5f + 0.01f * 35.0f);
}

TEST(WeightScalePlannerTest, SaturationRescalesTheNextStep) {
  WeightScalePlanner planner = makePlanner(100);
  launch(planner, 0.0);
  observe(planner, 0, 0, 1.0f);
  EXPECT_EQ(launch(planner, 1e-3).reason, RescaleReason::None);
  EXPECT_EQ(launch(planner, 1e-3).reason, RescaleReason::None);
  // Step 1 saturated 3 values; the host learns it before step 3.
  observe(planner, 1, 3);
  EXPECT_EQ(planner.stats().saturationEvents, 1);
  EXPECT_EQ(planner.stats().saturatedValues, 3u);
  EXPECT_EQ(planner.stats().lastSaturationStep, 1);
  // Until the new anchor arrives, every step rescales: the old one is no
  // bound.
  EXPECT_EQ(launch(planner, 1e-3).reason, RescaleReason::Saturation);
  EXPECT_EQ(launch(planner, 1e-3).reason, RescaleReason::Saturation);
  observe(planner, 2, 3);
  observe(planner, 3, 3, 2.0f);
  WeightScaleDecision d = launch(planner, 1e-3);
  EXPECT_EQ(d.reason, RescaleReason::None);
  // Anchored at step 3, advanced through steps 4 and 5.
  AutoScaler reference = *AutoScaler::createWithBound(1.0, 100, 2.0f);
  ASSERT_FALSE(bool(reference.step(1e-3)));
  ASSERT_FALSE(bool(reference.step(1e-3)));
  EXPECT_EQ(d.scale, reference.predictedScale(Fp8Format::E4M3));
  EXPECT_EQ(planner.stats().saturationRescales, 2);
  EXPECT_EQ(planner.stats().anchorStep, 3);
}

// A GPU that lags: anchors arrive steps late, and the prediction is the one
// a synchronous scaler anchored at that step would make now.
TEST(WeightScalePlannerTest, LateAnchorsAreAdvancedThroughLaterSteps) {
  WeightScalePlanner planner = makePlanner(1000, 2.0);
  const double lrs[] = {0.0, 1e-3, 2e-3, 3e-3, 4e-3, 5e-3};
  EXPECT_EQ(launch(planner, lrs[0]).reason, RescaleReason::NoAnchor);
  EXPECT_EQ(launch(planner, lrs[1]).reason, RescaleReason::NoAnchor);
  EXPECT_EQ(launch(planner, lrs[2]).reason, RescaleReason::NoAnchor);
  observe(planner, 0, 0, 1.0f);
  WeightScaleDecision d = launch(planner, lrs[3]);
  ASSERT_EQ(d.reason, RescaleReason::None);
  AutoScaler fromStep0 = *AutoScaler::createWithBound(2.0, 1000, 1.0f);
  for (int t = 1; t <= 3; ++t)
    ASSERT_FALSE(bool(fromStep0.step(lrs[t])));
  EXPECT_EQ(d.scale, fromStep0.predictedScale(Fp8Format::E4M3));

  // Step 1's anchor is newer: the prediction restarts from it.
  observe(planner, 1, 0, 1.5f);
  d = launch(planner, lrs[4]);
  ASSERT_EQ(d.reason, RescaleReason::None);
  AutoScaler fromStep1 = *AutoScaler::createWithBound(2.0, 1000, 1.5f);
  for (int t = 2; t <= 4; ++t)
    ASSERT_FALSE(bool(fromStep1.step(lrs[t])));
  EXPECT_EQ(d.scale, fromStep1.predictedScale(Fp8Format::E4M3));
  EXPECT_EQ(planner.scaler()->stepsSinceRescale(), 3);

  // Step 2's snapshot was dropped; step 3's arrives: step 2's anchor is
  // gone, and step 1's stays.
  observe(planner, 3, 0);
  d = launch(planner, lrs[5]);
  ASSERT_FALSE(bool(fromStep1.step(lrs[5])));
  EXPECT_EQ(d.scale, fromStep1.predictedScale(Fp8Format::E4M3));
  EXPECT_EQ(planner.stats().anchorStep, 1);
  EXPECT_EQ(planner.stats().anchorsApplied, 2);
}

// While an interval rescale is in flight the old anchor still bounds the
// weight: the steps predict instead of rescaling again.
TEST(WeightScalePlannerTest, IntervalRescaleInFlightKeepsPredicting) {
  WeightScalePlanner planner = makePlanner(2);
  launch(planner, 0.0);
  observe(planner, 0, 0, 1.0f);
  EXPECT_EQ(launch(planner, 1e-3).reason, RescaleReason::None);
  EXPECT_EQ(launch(planner, 1e-3).reason, RescaleReason::Interval);
  WeightScaleDecision d = launch(planner, 1e-3);
  EXPECT_EQ(d.reason, RescaleReason::None);
  AutoScaler old = *AutoScaler::createWithBound(1.0, 2, 1.0f);
  for (int i = 0; i < 3; ++i)
    ASSERT_FALSE(bool(old.step(1e-3)));
  EXPECT_EQ(d.scale, old.predictedScale(Fp8Format::E4M3));
  // Its snapshot is dropped; once a later one arrives, the interval rescale
  // is tried again.
  observe(planner, 3, 0);
  EXPECT_EQ(launch(planner, 1e-3).reason, RescaleReason::Interval);
  EXPECT_EQ(planner.stats().intervalRescales, 2);
}

TEST(WeightScalePlannerTest, NonFiniteWeightsKeepRescaling) {
  WeightScalePlanner planner = makePlanner(2);
  launch(planner, 0.0);
  observe(planner, 0, 0, std::numeric_limits<float>::quiet_NaN(), 1);
  EXPECT_EQ(planner.stats().nonFiniteAnchors, 1);
  EXPECT_EQ(planner.stats().nonFiniteBlocks, 1u);
  EXPECT_FALSE(planner.scaler().has_value());
  EXPECT_EQ(launch(planner, 0.0).reason, RescaleReason::NoAnchor);
  observe(planner, 1, 0, 3.0f, 1);
  EXPECT_EQ(launch(planner, 0.0).reason, RescaleReason::None);
  EXPECT_EQ(launch(planner, 0.0).reason, RescaleReason::Interval);
  // The interval rescale meets an Inf: the anchor is no bound any more.
  observe(planner, 3, 0, std::numeric_limits<float>::infinity(), 2);
  EXPECT_EQ(planner.stats().nonFiniteAnchors, 2);
  EXPECT_EQ(planner.stats().nonFiniteBlocks, 2u);
  EXPECT_EQ(launch(planner, 0.0).reason, RescaleReason::Saturation);
  EXPECT_EQ(planner.stats().anchorAmax, 3.0f);
}

TEST(WeightScalePlannerTest, BadObservations) {
  WeightScalePlanner planner = makePlanner(100);
  WeightScaleObservation o;
  o.step = 0;
  expectError(planner.observe(o), "observed step 0 was not launched");
  launch(planner, 0.0);
  launch(planner, 0.0);
  o.step = 1;
  o.saturatedTotal = 5;
  ASSERT_FALSE(bool(planner.observe(o)));
  o.step = 0;
  expectError(planner.observe(o), "out of order");
  launch(planner, 0.0);
  o.step = 2;
  o.saturatedTotal = 4;
  expectError(planner.observe(o), "went backwards");

  WeightScalePlanner other = makePlanner(100);
  launch(other, 0.0);
  observe(other, 0, 0, 1.0f);
  launch(other, 0.0);
  o.step = 1;
  o.saturatedTotal = 0;
  o.amax = 1.0f;
  expectError(other.observe(o), "carries an amax but did not rescale");
}

// The arguments castStep checks before anything changes or launches.
TEST(WeightScalerArgumentsTest, BadStepsFailWithoutAGpu) {
  QuantizeSpec spec;
  spec.rows = 64;
  spec.cols = 256;
  spec.options = {ScalingScheme::perTensor(), Fp8Format::E4M3, false};
  const CUdeviceptr good = 0x10000;
  QuantizeBuffers buffers{good, good, 0, good, 0};
  EXPECT_FALSE(bool(checkWeightScalerStep(1e-3, spec, buffers)));
  expectError(checkWeightScalerStep(-1.0, spec, buffers),
              "the learning rate lr=-1 must be finite and non-negative");
  expectError(checkWeightScalerStep(std::nan(""), spec, buffers),
              "the learning rate lr=nan");

  struct Case {
    QuantizeBuffers buffers;
    const char *message;
  };
  QuantizeBuffers withAmax = buffers;
  withAmax.amax = good;
  Case cases[] = {
      {{0, good, 0, good, 0}, "the weight buffers.x is null"},
      {{good + 4, good, 0, good, 0}, "buffers.x must be 16-byte aligned"},
      {{good, good + 8, 0, good, 0}, "buffers.q must be 16-byte aligned"},
      {{good, good, 0, 0, 0}, "the scale output buffers.global is null"},
      {{good, good, 0, good + 2, 0}, "buffers.global must be 4-byte aligned"},
      {{good, good, good, good, 0}, "buffers.local is given"},
      {{good, good, 0, good, good}, "buffers.counters must be 0"},
      {withAmax, "buffers.amax must be 0"},
  };
  for (const Case &c : cases)
    expectError(checkWeightScalerStep(1e-3, spec, c.buffers), c.message);

  QuantizeSpec perRow = spec;
  perRow.options.scheme = ScalingScheme::perRow();
  expectError(checkWeightScalerStep(1e-3, perRow, buffers),
              "the weight scaler casts per-tensor, not per-row");
  QuantizeSpec badK = spec;
  badK.cols = 250;
  expectError(checkWeightScalerStep(1e-3, badK, buffers), "K=250");
}

// A fused AdamW step (QuantizeSpec::adamw) needs the weight's state, and
// only it: checked before anything launches.
TEST(WeightScalerArgumentsTest, FusedAdamWStepsNeedTheirState) {
  QuantizeSpec spec;
  spec.rows = 64;
  spec.cols = 256;
  spec.options = {ScalingScheme::perTensor(), Fp8Format::E4M3, false};
  spec.adamw = true;
  const CUdeviceptr good = 0x10000;
  const QuantizeBuffers buffers{good, good, 0, good, 0};
  const AdamWBuffers state{good, good + 0x1000, good + 0x2000};
  EXPECT_FALSE(
      bool(checkWeightScalerStep(1e-3, spec, buffers, nullptr, &state)));
  expectError(checkWeightScalerStep(1e-3, spec, buffers),
              "needs the weight's AdamW state");
  QuantizeSpec plain = spec;
  plain.adamw = false;
  expectError(checkWeightScalerStep(1e-3, plain, buffers, nullptr, &state),
              "without the fused AdamW update");
  AdamWBuffers bad = state;
  bad.expAvgSq = 0;
  expectError(checkWeightScalerStep(1e-3, spec, buffers, nullptr, &bad),
              "the AdamW step's second moment pointer is null");
  bad = state;
  bad.grad += 8;
  expectError(checkWeightScalerStep(1e-3, spec, buffers, nullptr, &bad),
              "gradient must be 16-byte aligned");
  QuantizeSpec bf16 = spec;
  bf16.input = moss::compiler::InputType::BF16;
  expectError(checkWeightScalerStep(1e-3, bf16, buffers, nullptr, &state),
              "updates FP32 weights");
  EXPECT_FALSE(getRescaleSpec(spec).adamw);
}

// The quantizer's amax output is per-tensor quantize only.
TEST(WeightScalerArgumentsTest, AmaxOutputIsPerTensorOnly) {
  KernelCacheOptions cacheOptions;
  cacheOptions.useDisk = false;
  KernelCache cache(cacheOptions);
  GpuQuantizer quantizer(cache, 132);
  QuantizeSpec spec;
  spec.rows = 64;
  spec.cols = 256;
  spec.options = {ScalingScheme::perRow(), Fp8Format::E4M3, false};
  const CUdeviceptr good = 0x10000;
  QuantizeBuffers buffers{good, good, 0, good, 0};
  buffers.amax = good;
  expectError(quantizer.quantize(spec, buffers, nullptr),
              "only a per-tensor quantize finds an amax, not per-row");
  spec.options.scheme = ScalingScheme::perTensor();
  expectError(quantizer.castWithScale(spec, good, buffers, nullptr),
              "not a cast with a given scale");
  buffers.amax = good + 2;
  expectError(quantizer.quantize(spec, buffers, nullptr),
              "the amax output must be 4-byte aligned");
}

} // namespace
