//===- WeightScalerGpuTest.cpp - Automatic weight scaling on the GPU ------===//
//
// Drifting random FP32 weights through WeightScaler::castStep: every step's
// codes and scale must equal the host reference for what the step says it
// did (numerics::quantize per-tensor on a rescale, quantizeWithScale with
// the predicted scale otherwise), bit for bit; the predicted scales must be
// those of numerics::AutoScaler anchored at the host's own amax; and a
// weight that jumps further than c * lr must saturate the cast and make the
// next step rescale. Outputs are poisoned before each launch. Skips with
// the reason when there is no GPU.
//
//===----------------------------------------------------------------------===//

#include "moss/Numerics/AutoScale.h"
#include "moss/Numerics/Quantize.h"
#include "moss/Numerics/Samples.h"
#include "moss/Runtime/Api/WeightScaler.h"
#include "moss/Runtime/Cuda/Device.h"
#include "moss/Runtime/Cuda/Driver.h"

#include "QuantizerTestSupport.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <vector>

using namespace moss::numerics;
using namespace moss::runtime;
using namespace moss::quantizetest;
using moss::compiler::QuantizeSpec;

namespace {

const DriverApi &api() { return *getDriverApi(); }

/// A stream created for a test, destroyed on scope exit.
struct Stream {
  CUstream stream = nullptr;
  Stream() { EXPECT_EQ(api().streamCreate(&stream, 0), CUDA_SUCCESS); }
  ~Stream() {
    if (stream)
      api().streamDestroy(stream);
  }
};

float hostAmax(const std::vector<float> &x) {
  float amax = 0.0f;
  for (float v : x)
    amax = std::max(amax, std::fabs(v));
  return amax;
}

/// One step's weight and device outputs.
struct StepBuffers {
  std::vector<float> weight;
  DeviceBuffer x, q, global;
  WeightScaleDecision decision;
  explicit StepBuffers(std::vector<float> w)
      : weight(std::move(w)), x(weight.size() * 4), q(weight.size()),
        global(4) {
    x.upload(weight.data());
    q.poison();
    global.poison();
  }
};

/// The device codes against the reference's, the first mismatches named.
void expectCodesEqual(const std::vector<uint8_t> &codes,
                      const std::vector<uint8_t> &want, const char *what) {
  int64_t mismatches = 0;
  for (size_t i = 0; i < codes.size(); ++i)
    if (codes[i] != want[i] && mismatches++ < 5)
      ADD_FAILURE() << what << " " << i << ": gpu " << int(codes[i])
                    << " reference " << int(want[i]);
  EXPECT_EQ(mismatches, 0);
}

/// Checks a finished step against the host reference for what it did.
void checkStep(const StepBuffers &s, int64_t rows, int64_t cols,
               Fp8Format format) {
  SCOPED_TRACE("step " + std::to_string(s.decision.step) +
               (s.decision.isRescale() ? " (rescale)" : " (predicted)"));
  llvm::Expected<QuantizedTensor> ref =
      s.decision.isRescale()
          ? quantize(s.weight, rows, cols,
                     {ScalingScheme::perTensor(), format, false})
          : quantizeWithScale(s.weight, rows, cols, s.decision.scale, format);
  ASSERT_TRUE(bool(ref)) << llvm::toString(ref.takeError());
  expectCodesEqual(s.q.download<uint8_t>(), ref->codes, "code");
  float global = s.global.download<float>()[0];
  EXPECT_EQ(std::memcmp(&global, &ref->global[0], 4), 0)
      << "scale: gpu " << global << " reference " << ref->global[0];
}

WeightScalerOptions options(int64_t interval, double c) {
  WeightScalerOptions o;
  o.scaling.interval = interval;
  o.explicitBound = c;
  return o;
}

std::unique_ptr<WeightScaler> makeScaler(const WeightScalerOptions &o) {
  llvm::Expected<std::unique_ptr<WeightScaler>> scaler =
      WeightScaler::create(*gpu().quantizer, o);
  EXPECT_TRUE(bool(scaler)) << llvm::toString(scaler.takeError());
  return scaler ? std::move(*scaler) : nullptr;
}

TEST(WeightScalerGpuTest, DriftingWeightsMatchTheReference) {
  REQUIRE_GPU();
  const int64_t rows = 96, cols = 1024, interval = 7, steps = 50,
                synchronousSteps = 30;
  const double c = 1.0;
  const Fp8Format format = Fp8Format::E4M3;
  QuantizeSpec spec;
  spec.rows = rows;
  spec.cols = cols;
  spec.options = {ScalingScheme::perTensor(), format, false};

  // W_t = W_{t-1} + lr_t * u, |u| < 1: the paper's c = 1 holds, so no cast
  // saturates.
  std::mt19937_64 rng{std::random_device{}()};
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::vector<float> w = gaussianSample(rows, cols, rng());
  std::vector<double> lrs(steps);
  std::vector<std::unique_ptr<StepBuffers>> buffers;
  for (int64_t t = 0; t < steps; ++t) {
    lrs[t] = t == 0 ? 0.0 : 2e-3 * (1.0 + 0.5 * std::cos(0.3 * double(t)));
    for (float &v : w)
      v += float(lrs[t]) * unit(rng) * 0.999f;
    buffers.push_back(std::make_unique<StepBuffers>(w));
  }

  std::unique_ptr<WeightScaler> scaler = makeScaler(options(interval, c));
  ASSERT_TRUE(scaler);
  Stream stream;
  // The first steps wait for the GPU after each launch, so every snapshot
  // arrives before the next step and the decisions are those of a
  // synchronous AutoScaler: check them against one anchored at the host's
  // amax.
  std::optional<AutoScaler> reference;
  for (int64_t t = 0; t < synchronousSteps; ++t) {
    StepBuffers &s = *buffers[t];
    llvm::Expected<WeightScaleDecision> d = scaler->castStep(
        lrs[t], spec, {s.x.get(), s.q.get(), 0, s.global.get(), 0},
        stream.stream);
    ASSERT_TRUE(bool(d)) << llvm::toString(d.takeError());
    s.decision = *d;
    ASSERT_EQ(api().streamSynchronize(stream.stream), CUDA_SUCCESS);
    if (!reference) {
      EXPECT_EQ(d->reason, RescaleReason::NoAnchor);
      reference.emplace(
          *AutoScaler::createWithBound(c, interval, hostAmax(s.weight)));
      continue;
    }
    ASSERT_FALSE(bool(reference->step(lrs[t])));
    if (reference->needsRescale()) {
      EXPECT_EQ(d->reason, RescaleReason::Interval) << "step " << t;
      ASSERT_FALSE(bool(reference->rescale(hostAmax(s.weight))));
    } else {
      EXPECT_EQ(d->reason, RescaleReason::None) << "step " << t;
      EXPECT_EQ(d->scale, reference->predictedScale(format)) << "step " << t;
    }
  }
  ASSERT_FALSE(bool(scaler->poll()));
  // The anchor is the exact amax the device found.
  EXPECT_EQ(scaler->stats().anchorAmax, reference->anchorAmax());
  EXPECT_EQ(scaler->stats().observedStep, synchronousSteps - 1);

  // The rest are launched back to back behind a long memset that holds the
  // stream: the host runs ahead of the GPU, snapshots arrive late or are
  // overwritten unread; whatever each step decided must be exact.
  // (Freed at the end of the test: cuMemFree may wait for the device.)
  DeviceBuffer hold(size_t(4) << 30);
  ASSERT_EQ(api().memsetD8Async(hold.get(), 0, size_t(4) << 30, stream.stream),
            CUDA_SUCCESS);
  for (int64_t t = synchronousSteps; t < steps; ++t) {
    StepBuffers &s = *buffers[t];
    llvm::Expected<WeightScaleDecision> d = scaler->castStep(
        lrs[t], spec, {s.x.get(), s.q.get(), 0, s.global.get(), 0},
        stream.stream);
    ASSERT_TRUE(bool(d)) << llvm::toString(d.takeError());
    s.decision = *d;
  }
  ASSERT_EQ(api().streamSynchronize(stream.stream), CUDA_SUCCESS);
  for (const auto &s : buffers)
    checkStep(*s, rows, cols, format);

  ASSERT_FALSE(bool(scaler->poll()));
  const WeightScalerStats &stats = scaler->stats();
  EXPECT_EQ(stats.steps, steps);
  EXPECT_EQ(stats.observedStep, steps - 1);
  EXPECT_EQ(stats.saturationEvents, 0);
  EXPECT_EQ(stats.saturatedValues, 0u);
  EXPECT_EQ(stats.nonFiniteBlocks, 0u);
  EXPECT_GE(stats.intervalRescales, (synchronousSteps - 1) / interval);
}

// Both layouts from one read (castStep with the transposed buffers), in
// step with a second scaler that casts the row-major layout alone: the same
// decisions and scales, the same row-major codes, and W^T's codes those of
// the host's cast of W^T at the step's scale (the exact per-tensor
// quantization of W^T on a rescale), bit for bit, poisoned first.
TEST(WeightScalerGpuTest, BothLayoutsFromOneReadFollowTheRowMajorSteps) {
  REQUIRE_GPU();
  const int64_t rows = 160, cols = 768, interval = 4, steps = 12;
  const Fp8Format format = Fp8Format::E4M3;
  QuantizeSpec spec;
  spec.rows = rows;
  spec.cols = cols;
  spec.options = {ScalingScheme::perTensor(), format, false};
  QuantizeSpec dual = spec;
  dual.bothLayouts = true;

  std::mt19937_64 rng{std::random_device{}()};
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::vector<float> w = gaussianSample(rows, cols, rng());
  std::unique_ptr<WeightScaler> apart = makeScaler(options(interval, 1.0));
  std::unique_ptr<WeightScaler> both = makeScaler(options(interval, 1.0));
  ASSERT_TRUE(apart && both);
  Stream stream;
  for (int64_t t = 0; t < steps; ++t) {
    SCOPED_TRACE("step " + std::to_string(t));
    const double lr = t == 0 ? 0.0 : 1e-3;
    for (float &v : w)
      v += float(lr) * unit(rng) * 0.999f;
    StepBuffers one(w), two(w);
    DeviceBuffer qt(w.size()), globalT(4);
    qt.poison();
    globalT.poison();
    llvm::Expected<WeightScaleDecision> d1 = apart->castStep(
        lr, spec, {one.x.get(), one.q.get(), 0, one.global.get(), 0},
        stream.stream);
    ASSERT_TRUE(bool(d1)) << llvm::toString(d1.takeError());
    QuantizeBuffers transposed{0, qt.get(), 0, globalT.get(), 0};
    llvm::Expected<WeightScaleDecision> d2 = both->castStep(
        lr, dual, {two.x.get(), two.q.get(), 0, two.global.get(), 0},
        stream.stream, &transposed);
    ASSERT_TRUE(bool(d2)) << llvm::toString(d2.takeError());
    ASSERT_EQ(api().streamSynchronize(stream.stream), CUDA_SUCCESS);
    EXPECT_EQ(d1->reason, d2->reason);
    EXPECT_EQ(d1->scale, d2->scale);
    one.decision = *d1;
    two.decision = *d2;
    checkStep(one, rows, cols, format);
    checkStep(two, rows, cols, format);

    std::vector<float> wt(w.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        wt[size_t(c * rows + r)] = w[size_t(r * cols + c)];
    const float scale = two.global.download<float>()[0];
    llvm::Expected<QuantizedTensor> ref =
        d2->isRescale() ? quantize(wt, cols, rows,
                                   {ScalingScheme::perTensor(), format, false})
                        : quantizeWithScale(wt, cols, rows, scale, format);
    ASSERT_TRUE(bool(ref)) << llvm::toString(ref.takeError());
    expectCodesEqual(qt.download<uint8_t>(), ref->codes, "transposed code");
    EXPECT_EQ(globalT.download<float>()[0], scale);
  }
  EXPECT_GT(both->stats().rescales, 1);
  EXPECT_LT(both->stats().rescales, steps);
}

TEST(WeightScalerGpuTest, UndershootSaturatesAndTheNextStepRescales) {
  REQUIRE_GPU();
  const int64_t rows = 33, cols = 512;
  const double lr = 1e-3;
  const Fp8Format format = Fp8Format::E4M3;
  QuantizeSpec spec;
  spec.rows = rows;
  spec.cols = cols;
  spec.options = {ScalingScheme::perTensor(), format, false};
  std::mt19937_64 rng{std::random_device{}()};
  std::vector<float> w = gaussianSample(rows, cols, rng());

  std::unique_ptr<WeightScaler> scaler = makeScaler(options(1000, 1.0));
  ASSERT_TRUE(scaler);
  Stream stream;
  auto step = [&](const std::vector<float> &weight) {
    auto s = std::make_unique<StepBuffers>(weight);
    llvm::Expected<WeightScaleDecision> d = scaler->castStep(
        lr, spec, {s->x.get(), s->q.get(), 0, s->global.get(), 0},
        stream.stream);
    EXPECT_TRUE(bool(d)) << llvm::toString(d.takeError());
    if (d)
      s->decision = *d;
    EXPECT_EQ(api().streamSynchronize(stream.stream), CUDA_SUCCESS);
    checkStep(*s, rows, cols, format);
    return s;
  };

  EXPECT_EQ(step(w)->decision.reason, RescaleReason::NoAnchor);
  w[5] += float(lr) * 0.5f;
  EXPECT_EQ(step(w)->decision.reason, RescaleReason::None);

  // Jump far beyond amax + c * lr: the predicted cast clamps it, and counts.
  float amax = hostAmax(w);
  w[77] = 3.0f * amax;
  w[78] = -2.0f * amax;
  std::unique_ptr<StepBuffers> saturating = step(w);
  ASSERT_EQ(saturating->decision.reason, RescaleReason::None);
  llvm::Expected<QuantizedTensor> ref =
      quantizeWithScale(w, rows, cols, saturating->decision.scale, format);
  ASSERT_TRUE(bool(ref));
  EXPECT_EQ(ref->stats.saturated, 2);
  // The feedback is asynchronous: stats show it once polled.
  ASSERT_FALSE(bool(scaler->poll()));
  EXPECT_EQ(scaler->stats().saturationEvents, 1);
  EXPECT_EQ(scaler->stats().saturatedValues, 2u);
  EXPECT_EQ(scaler->stats().lastSaturationStep, 2);

  // The next step rescales: the exact scale, and a fresh anchor.
  std::unique_ptr<StepBuffers> rescaled = step(w);
  EXPECT_EQ(rescaled->decision.reason, RescaleReason::Saturation);
  std::unique_ptr<StepBuffers> after = step(w);
  ASSERT_EQ(after->decision.reason, RescaleReason::None);
  AutoScaler reference = *AutoScaler::createWithBound(1.0, 1000, hostAmax(w));
  ASSERT_FALSE(bool(reference.step(lr)));
  EXPECT_EQ(after->decision.scale, reference.predictedScale(format));
  const WeightScalerStats &stats = scaler->stats();
  EXPECT_EQ(stats.saturationRescales, 1);
  EXPECT_EQ(stats.saturationEvents, 1);
  EXPECT_EQ(stats.anchorStep, 3);
  EXPECT_EQ(stats.anchorAmax, 3.0f * amax);
}

TEST(WeightScalerGpuTest, BadArgumentsLaunchNothing) {
  REQUIRE_GPU();
  std::unique_ptr<WeightScaler> scaler = makeScaler(options(10, 1.0));
  ASSERT_TRUE(scaler);
  QuantizeSpec spec;
  spec.rows = 16;
  spec.cols = 256;
  spec.options = {ScalingScheme::perRow(), Fp8Format::E4M3, false};
  DeviceBuffer x(16 * 256 * 4), q(16 * 256), global(16 * 4);
  llvm::Expected<WeightScaleDecision> d = scaler->castStep(
      1e-3, spec, {x.get(), q.get(), 0, global.get(), 0}, nullptr);
  ASSERT_FALSE(bool(d));
  EXPECT_NE(llvm::toString(d.takeError()).find("per-tensor"),
            std::string::npos);
  spec.options.scheme = ScalingScheme::perTensor();
  d = scaler->castStep(-1.0, spec, {x.get(), q.get(), 0, global.get(), 0},
                       nullptr);
  ASSERT_FALSE(bool(d));
  EXPECT_NE(llvm::toString(d.takeError()).find("lr=-1"), std::string::npos);
  EXPECT_EQ(scaler->stats().steps, 0);
}

} // namespace
