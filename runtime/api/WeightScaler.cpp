//===- WeightScaler.cpp - Automatic weight scaling on the GPU -------------===//
//
// The planner is plain host logic over numerics::AutoScaler; the GPU class
// only moves its inputs and outputs: one launch per step, a 24-byte
// device-to-host copy into a page-locked slot and an event, and at the next
// steps a cuEventQuery per slot. Nothing on the per-step path waits.
//
//===----------------------------------------------------------------------===//

#include "moss/Runtime/Api/WeightScaler.h"

#include "SnapshotRing.h"
#include "WeightScalerState.h"

#include "moss/Runtime/Api/RuntimeError.h"
#include "moss/Runtime/Cuda/Driver.h"

#include "llvm/ADT/Twine.h"

#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>

using namespace llvm;
using namespace moss::numerics;
using namespace moss::compiler;

namespace moss::runtime {

namespace {

std::string str(double v) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%g", v);
  return buffer;
}

Error checkLearningRate(double lr) {
  if (!(std::isfinite(lr) && lr >= 0.0))
    return invalidArgument("the learning rate lr=" + str(lr) +
                           " must be finite and non-negative");
  return Error::success();
}

} // namespace

//===----------------------------------------------------------------------===//
// WeightScalePlanner
//===----------------------------------------------------------------------===//

Expected<WeightScalePlanner>
WeightScalePlanner::create(const WeightScalerOptions &options) {
  double c = 1.0;
  if (options.explicitBound != 0.0) {
    if (!(std::isfinite(options.explicitBound) && options.explicitBound > 0.0))
      return invalidArgument(
          "the explicit Adam update bound c=" + str(options.explicitBound) +
          " must be finite and positive (or 0 for the option's "
          "bound)");
    c = options.explicitBound;
  } else if (options.scaling.bound == AdamBound::Provable) {
    Expected<double> provable =
        provableAdamBound(options.scaling.beta1, options.scaling.beta2);
    if (!provable)
      return provable.takeError();
    c = *provable;
  }
  // The AutoScaler is created when the first amax arrives; check its
  // arguments now.
  Expected<AutoScaler> probe =
      AutoScaler::createWithBound(c, options.scaling.interval, 0.0f);
  if (!probe)
    return probe.takeError();
  return WeightScalePlanner(c, options.scaling.interval);
}

Expected<WeightScaleDecision> WeightScalePlanner::plan(double lr,
                                                       Fp8Format format) const {
  if (Error error = checkLearningRate(lr))
    return std::move(error);
  WeightScaleDecision decision;
  decision.step = nextStep;
  if (!predictor) {
    decision.reason = RescaleReason::NoAnchor;
    return decision;
  }
  AutoScaler next = *predictor;
  cantFail(next.step(lr));
  if (next.saturationReported()) {
    // The anchor undershot (or the weight went non-finite): it is no bound.
    decision.reason = RescaleReason::Saturation;
  } else if (next.stepsSinceRescale() >= rescaleInterval &&
             pendingRescales.empty()) {
    decision.reason = RescaleReason::Interval;
  } else {
    // Also while an interval rescale is in flight: its predecessor's anchor
    // plus c * sum lr is still a bound, only a looser one.
    decision.scale = next.predictedScale(format);
  }
  return decision;
}

void WeightScalePlanner::commit(const WeightScaleDecision &decision,
                                double lr) {
  assert(decision.step == nextStep && "commit the decision plan() returned");
  if (!pendingRescales.empty())
    history.emplace_back(decision.step, lr);
  if (predictor)
    cantFail(predictor->step(lr));
  if (decision.isRescale())
    pendingRescales.push_back(decision.step);
  ++nextStep;

  WeightScalerStats &s = statistics;
  ++s.steps;
  switch (decision.reason) {
  case RescaleReason::None:
    break;
  case RescaleReason::NoAnchor:
    ++s.rescales;
    ++s.noAnchorRescales;
    break;
  case RescaleReason::Interval:
    ++s.rescales;
    ++s.intervalRescales;
    break;
  case RescaleReason::Saturation:
    ++s.rescales;
    ++s.saturationRescales;
    break;
  }
  s.lastDecision = decision;
}

void WeightScalePlanner::pruneHistory() {
  if (pendingRescales.empty()) {
    history.clear();
    return;
  }
  while (!history.empty() && history.front().first <= pendingRescales.front())
    history.pop_front();
}

Error WeightScalePlanner::observe(const WeightScaleObservation &observation) {
  WeightScalerStats &s = statistics;
  int64_t step = observation.step;
  if (step < 0 || step >= nextStep)
    return invalidArgument("observed step " + Twine(step) +
                           " was not launched (steps 0.." +
                           Twine(nextStep - 1) + " were)");
  if (step <= s.observedStep)
    return invalidArgument("observed step " + Twine(step) +
                           " is out of order: step " + Twine(s.observedStep) +
                           " was observed already");
  if (observation.saturatedTotal < seenSaturated ||
      observation.nonFiniteTotal < seenNonFinite)
    return invalidArgument("the device counters of step " + Twine(step) +
                           " went backwards (saturated " +
                           Twine(observation.saturatedTotal) + " after " +
                           Twine(seenSaturated) + ", non-finite " +
                           Twine(observation.nonFiniteTotal) + " after " +
                           Twine(seenNonFinite) + ")");
  // Rescales before `step` whose snapshot was dropped: their anchors are
  // lost, and later rescales replace them.
  while (!pendingRescales.empty() && pendingRescales.front() < step)
    pendingRescales.pop_front();
  bool rescaled = !pendingRescales.empty() && pendingRescales.front() == step;
  if (observation.amax && !rescaled)
    return invalidArgument("observed step " + Twine(step) +
                           " carries an amax but did not rescale");

  uint64_t saturated = observation.saturatedTotal - seenSaturated;
  uint64_t nonFinite = observation.nonFiniteTotal - seenNonFinite;
  seenSaturated = observation.saturatedTotal;
  seenNonFinite = observation.nonFiniteTotal;
  s.observedStep = step;
  s.nonFiniteBlocks += nonFinite;
  // Saturation first: the counts come from casts up to `step`, which this
  // step's anchor (if any) supersedes.
  if (saturated != 0) {
    ++s.saturationEvents;
    s.saturatedValues += saturated;
    s.lastSaturationStep = step;
    if (predictor)
      predictor->reportSaturation(1);
  }

  if (rescaled) {
    pendingRescales.pop_front();
    if (observation.amax) {
      float amax = *observation.amax;
      if (!(std::isfinite(amax) && amax >= 0.0f)) {
        // The weight holds NaN or Inf: no bound; keep rescaling (the JIT
        // quantize writes the NaN scale, as the reference does).
        ++s.nonFiniteAnchors;
        if (predictor)
          predictor->reportSaturation(1);
      } else {
        if (predictor)
          cantFail(predictor->rescale(amax));
        else
          predictor.emplace(
              cantFail(AutoScaler::createWithBound(c, rescaleInterval, amax)));
        // The anchor is amax(W_step); advance it through the steps launched
        // since, in order, so that the sum of learning rates is the one a
        // synchronous scaler would hold.
        for (const auto &[later, lr] : history)
          if (later > step)
            cantFail(predictor->step(lr));
        ++s.anchorsApplied;
        s.anchorStep = step;
        s.anchorAmax = amax;
      }
    }
  }
  pruneHistory();
  return Error::success();
}

//===----------------------------------------------------------------------===//
// WeightScaler
//===----------------------------------------------------------------------===//

static_assert(WeightScaler::kSlots == SnapshotRing::kSlots,
              "WeightScaler::kSlots is its ring's");

QuantizeSpec getRescaleSpec(const QuantizeSpec &spec) {
  QuantizeSpec rescale = spec;
  rescale.adamw = false;
  return rescale;
}

Error checkWeightScalerStep(double lr, const QuantizeSpec &spec,
                            const QuantizeBuffers &buffers,
                            const QuantizeBuffers *transposed,
                            const AdamWBuffers *adamw) {
  if (Error error = checkLearningRate(lr))
    return error;
  if (Error error = checkGpuQuantizeSpec(spec))
    return error;
  if (spec.adamw != (adamw != nullptr))
    return invalidArgument(spec.adamw ? "a fused AdamW step needs the "
                                        "weight's AdamW state"
                                      : "an AdamW state is given for a step "
                                        "without the fused AdamW update");
  if (adamw)
    if (Error error = checkAdamWBuffers(*adamw))
      return error;
  const ScalingScheme &scheme = spec.options.scheme;
  if (scheme.kind != ScalingKind::PerTensor)
    return invalidArgument("the weight scaler casts per-tensor, not " +
                           scheme.str());
  auto checkPointer = [](CUdeviceptr ptr, unsigned alignment,
                         StringRef name) -> Error {
    if (!ptr)
      return invalidArgument(name + " is null");
    if (ptr % alignment != 0)
      return invalidArgument(name + " must be " + Twine(alignment) +
                             "-byte aligned, got 0x" + Twine::utohexstr(ptr));
    return Error::success();
  };
  if (Error e = checkPointer(buffers.x, 16, "the weight buffers.x"))
    return e;
  if (Error e = checkPointer(buffers.q, 16, "the codes buffers.q"))
    return e;
  if (Error e =
          checkPointer(buffers.global, 4, "the scale output buffers.global"))
    return e;
  if (buffers.local)
    return invalidArgument(
        "buffers.local is given, but per-tensor scaling has no "
        "block scales");
  if (buffers.counters)
    return invalidArgument(
        "buffers.counters must be 0: the weight scaler counts "
        "into its own");
  if (buffers.amax)
    return invalidArgument(
        "buffers.amax must be 0: the weight scaler keeps the "
        "amax itself");
  if (spec.bothLayouts != (transposed != nullptr))
    return invalidArgument(
        spec.bothLayouts
            ? "a dual-layout spec needs the transposed layout's buffers"
            : "the transposed layout's buffers need a dual-layout spec "
              "(QuantizeSpec::bothLayouts)");
  if (!transposed)
    return Error::success();
  if (transposed->x && transposed->x != buffers.x)
    return invalidArgument("transposed.x differs from buffers.x: both "
                           "layouts come from one read of the weight");
  if (Error e = checkPointer(transposed->q, 16, "the codes transposed.q"))
    return e;
  if (Error e = checkPointer(transposed->global, 4,
                             "the scale output transposed.global"))
    return e;
  if (transposed->local || transposed->counters || transposed->amax)
    return invalidArgument("transposed.local, .counters and .amax must be 0 "
                           "(per-tensor scaling; the scaler counts and keeps "
                           "the amax itself)");
  return Error::success();
}

WeightScaler::WeightScaler(GpuQuantizer &quantizer, WeightScalePlanner planner)
    : quantizer(quantizer), planner(std::move(planner)),
      ring(std::make_unique<SnapshotRing>()) {}

Expected<std::unique_ptr<WeightScaler>>
WeightScaler::create(GpuQuantizer &quantizer,
                     const WeightScalerOptions &options) {
  Expected<WeightScalePlanner> planner = WeightScalePlanner::create(options);
  if (!planner)
    return planner.takeError();
  std::unique_ptr<WeightScaler> scaler(
      new WeightScaler(quantizer, std::move(*planner)));
  if (Error error = scaler->ring->allocate(sizeof(WeightScalerState),
                                           sizeof(WeightScalerState)))
    return std::move(error);
  return std::move(scaler);
}

WeightScaler::~WeightScaler() = default;

Error WeightScaler::poll() {
  return ring->takeLanded([&](int index) {
    return planner.observe(readSnapshot(
        ring->slot(index), slotSteps[index].step, slotSteps[index].rescale));
  });
}

Expected<WeightScaleDecision>
WeightScaler::castStep(double lr, const QuantizeSpec &spec,
                       const QuantizeBuffers &buffers, CUstream stream,
                       const QuantizeBuffers *transposed,
                       const AdamWUpdate *adamw) {
  if (adamw && adamw->state.size() != 1)
    return invalidArgument("a weight's fused AdamW step takes one state, got " +
                           Twine(adamw->state.size()));
  if (Error error = checkWeightScalerStep(lr, spec, buffers, transposed,
                                          adamw ? &adamw->state[0] : nullptr))
    return std::move(error);
  return castStepChecked(lr, spec, buffers, stream, transposed, adamw);
}

Expected<WeightScaleDecision>
WeightScaler::castStepChecked(double lr, const QuantizeSpec &spec,
                              const QuantizeBuffers &buffers, CUstream stream,
                              const QuantizeBuffers *transposed,
                              const AdamWUpdate *adamw) {
  Expected<const DriverApi &> api = getDriverApi();
  if (!api)
    return api.takeError();
  if (Error error = poll())
    return std::move(error);
  Expected<WeightScaleDecision> decision =
      planner.plan(lr, spec.options.format);
  const CUdeviceptr deviceState = ring->device();
  if (!decision)
    return decision.takeError();

  // The counters are cumulative (zeroed once, on the first step's stream):
  // a snapshot the host never reads loses no count, only time.
  if (!zeroed) {
    if (Error error =
            checkCuda(api->memsetD8Async(deviceState, 0,
                                         sizeof(WeightScalerState), stream),
                      "cuMemsetD8Async(weight scaler state)"))
      return std::move(error);
    zeroed = true;
  }
  QuantizeBuffers launch = buffers;
  launch.counters = deviceState;
  // The transposed layout's counts, the same values as the row-major's, go
  // to the quantizer's own words (counters 0).
  QuantizeBuffers transposedLaunch =
      transposed ? *transposed : QuantizeBuffers();
  const CUdeviceptr scale = deviceState + kWeightScalerScaleOffset;
  // The scale's bits travel in the call: unlike a copy from a page-locked
  // word, nothing on the host must stay unchanged until the GPU runs it.
  auto setScale = [&](float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, 4);
    return checkCuda(api->memsetD32Async(scale, bits, 1, stream),
                     "cuMemsetD32Async(weight scaler scale)");
  };
  // The fused AdamW step's cast, counting into `counters`.
  auto castFused = [&](CUdeviceptr counters) {
    QuantizeBuffers b = launch;
    b.counters = counters;
    ArrayRef<QuantizeBuffers> t;
    if (transposed)
      t = ArrayRef(transposedLaunch);
    return quantizer.castWithScales(spec, scale, ArrayRef(b), t, stream, adamw);
  };
  const QuantizeSpec cast = getRescaleSpec(spec);
  if (adamw && decision->isRescale()) {
    // The update first (its codes, at scale 1, are overwritten and its
    // counts go to the quantizer's own words), then the rescale reads W_t.
    if (Error error = setScale(1.0f))
      return std::move(error);
    if (Error error = castFused(0))
      return std::move(error);
  }
  if (decision->isRescale()) {
    // The JIT per-tensor quantize: the exact scale, and the exact amax for
    // the next anchor. (A_0 = scale * max would not be exact: the scale is
    // amax / max rounded to FP32, and the product rounds again, possibly
    // below the amax, which would make the first prediction undershoot.)
    launch.amax = deviceState + kWeightScalerAmaxOffset;
    if (Error error = transposed ? quantizer.quantizeBothLayouts(
                                       cast, launch, transposedLaunch, stream)
                                 : quantizer.quantize(cast, launch, stream))
      return std::move(error);
  } else {
    if (Error error = setScale(decision->scale))
      return std::move(error);
    if (Error error =
            adamw        ? castFused(deviceState)
            : transposed ? quantizer.quantizeBothLayouts(
                               spec, launch, transposedLaunch, stream, scale)
                         : quantizer.castWithScale(spec, scale, launch, stream))
      return std::move(error);
  }
  planner.commit(*decision, lr);

  // The snapshot of this step. A full ring means the GPU lags kSlots steps:
  // reuse the oldest slot (its copy and this one are ordered on the stream,
  // and the newer counts include the older).
  if (ring->full()) {
    ring->popOldest();
    planner.noteDroppedSnapshot();
  }
  const int index = ring->nextIndex();
  if (Error error =
          checkCuda(api->memcpyDtoHAsync(ring->slot(index), deviceState,
                                         sizeof(WeightScalerState), stream),
                    "cuMemcpyDtoHAsync(weight scaler snapshot)"))
    return std::move(error);
  if (Error error = ring->push(stream))
    return std::move(error);
  slotSteps[index] = {decision->step, decision->isRescale()};
  return *decision;
}

} // namespace moss::runtime
