//===- ExpertWeightScalers.cpp - One weight scaler per expert -------------===//
//
// WeightScaler's protocol over an array of planners: the same decisions,
// with the device words of all experts in one buffer so that each step's
// copies and event serve every expert at once.
//
//===----------------------------------------------------------------------===//

#include "moss/Runtime/Api/ExpertWeightScalers.h"

#include "SnapshotRing.h"
#include "WeightScalerState.h"

#include "moss/Runtime/Api/RuntimeError.h"
#include "moss/Runtime/Cuda/Driver.h"

#include "llvm/ADT/Twine.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>

using namespace llvm;
using namespace moss::compiler;

namespace moss::runtime {

namespace {
/// `error` with the expert it concerns before its message, of its kind.
Error forExpert(size_t g, Error error) {
  std::string prefix = ("expert " + Twine(uint64_t(g)) + ": ").str();
  return handleErrors(
      std::move(error),
      [&](const RuntimeError &e) -> Error {
        std::string message;
        raw_string_ostream os(message);
        e.log(os);
        return makeRuntimeError(e.getKind(), prefix + message);
      },
      [&](const ErrorInfoBase &e) -> Error {
        return invalidArgument(prefix + e.message());
      });
}
} // namespace

static_assert(ExpertWeightScalers::kSlots == SnapshotRing::kSlots,
              "ExpertWeightScalers::kSlots is its ring's");

ExpertWeightScalers::ExpertWeightScalers(
    GpuQuantizer &quantizer, std::vector<WeightScalePlanner> planners)
    : quantizer(quantizer), planners(std::move(planners)),
      ring(std::make_unique<SnapshotRing>()) {
  for (SlotSteps &slot : slotSteps)
    slot.rescale.assign(this->planners.size(), 0);
}

Expected<std::unique_ptr<ExpertWeightScalers>>
ExpertWeightScalers::create(GpuQuantizer &quantizer,
                            const WeightScalerOptions &options,
                            size_t experts) {
  if (experts == 0)
    return invalidArgument("no experts: the scalers need at least one");
  std::vector<WeightScalePlanner> planners;
  planners.reserve(experts);
  for (size_t g = 0; g < experts; ++g) {
    Expected<WeightScalePlanner> planner = WeightScalePlanner::create(options);
    if (!planner)
      return planner.takeError();
    planners.push_back(std::move(*planner));
  }
  std::unique_ptr<ExpertWeightScalers> scalers(
      new ExpertWeightScalers(quantizer, std::move(planners)));
  // Device: the states, then the predicted scales; each slot the same.
  const size_t words = experts * (sizeof(WeightScalerState) + sizeof(float));
  if (Error error = scalers->ring->allocate(words, words))
    return std::move(error);
  return std::move(scalers);
}

ExpertWeightScalers::~ExpertWeightScalers() = default;

float *ExpertWeightScalers::slotScales(int index) const {
  return reinterpret_cast<float *>(ring->slot(index) +
                                   size() * sizeof(WeightScalerState));
}

Error ExpertWeightScalers::observe(int index) {
  const SlotSteps &slot = slotSteps[index];
  const char *snapshots = ring->slot(index);
  for (size_t g = 0; g < size(); ++g) {
    if (Error error = planners[g].observe(
            readSnapshot(snapshots + g * sizeof(WeightScalerState), slot.step,
                         slot.rescale[g])))
      return forExpert(g, std::move(error));
  }
  return Error::success();
}

Error ExpertWeightScalers::poll() {
  return ring->takeLanded([&](int index) { return observe(index); });
}

Expected<SmallVector<WeightScaleDecision>>
ExpertWeightScalers::castStepsChecked(double lr, const QuantizeSpec &spec,
                                      ArrayRef<QuantizeBuffers> buffers,
                                      ArrayRef<QuantizeBuffers> transposed,
                                      CUstream stream,
                                      const AdamWUpdate *adamw) {
  Expected<const DriverApi &> api = getDriverApi();
  if (!api)
    return api.takeError();
  if (Error error = poll())
    return std::move(error);
  // This step's slot holds the scales its copy reads until its event
  // completes: with every slot outstanding, wait for the oldest (and take
  // its snapshot before planning).
  if (ring->full()) {
    if (Error error = ring->waitOldest())
      return std::move(error);
    if (Error error = poll())
      return std::move(error);
  }
  const size_t experts = size();
  SmallVector<WeightScaleDecision> decisions;
  decisions.reserve(experts);
  for (WeightScalePlanner &planner : planners) {
    Expected<WeightScaleDecision> decision =
        planner.plan(lr, spec.options.format);
    if (!decision)
      return decision.takeError();
    decisions.push_back(*decision);
  }
  const int index = ring->nextIndex();
  const CUdeviceptr states = ring->device();
  const CUdeviceptr scales = states + experts * sizeof(WeightScalerState);
  if (!zeroed) {
    if (Error error = checkCuda(
            api->memsetD8Async(states, 0, experts * sizeof(WeightScalerState),
                               stream),
            "cuMemsetD8Async(expert weight scalers)"))
      return std::move(error);
    zeroed = true;
  }
  float *hostScales = slotScales(index);
  bool anyPredicted = false, anyRescale = false;
  for (size_t g = 0; g < experts; ++g) {
    // (A rescaling expert's fused AdamW update casts at scale 1, and the
    // rescale overwrites its codes.)
    hostScales[g] = decisions[g].isRescale() ? 1.0f : decisions[g].scale;
    anyPredicted |= !decisions[g].isRescale();
    anyRescale |= decisions[g].isRescale();
  }
  if (anyPredicted || adamw)
    if (Error error =
            checkCuda(api->memcpyHtoDAsync(scales, hostScales,
                                           experts * sizeof(float), stream),
                      "cuMemcpyHtoDAsync(expert weight scales)"))
      return std::move(error);

  // Expert g counts into its state's words. As WeightScaler's, the
  // transposed layout counts into the quantizer's own (the same values as
  // the row-major layout's).
  SmallVector<QuantizeBuffers> counted(buffers);
  for (size_t g = 0; g < experts; ++g)
    counted[g].counters = states + g * sizeof(WeightScalerState);
  // Expert g's cast: with its predicted scale, or the exact quantize of a
  // rescale (which also leaves its amax for the next anchor).
  // (After a fused AdamW update, the casts of an updated weight.)
  const QuantizeSpec cast = getRescaleSpec(spec);
  auto launch = [&](size_t g) -> Error {
    QuantizeBuffers b = counted[g];
    QuantizeBuffers t = transposed.empty() ? QuantizeBuffers() : transposed[g];
    if (decisions[g].isRescale()) {
      b.amax = b.counters + kWeightScalerAmaxOffset;
      return transposed.empty()
                 ? quantizer.quantize(cast, b, stream)
                 : quantizer.quantizeBothLayouts(cast, b, t, stream);
    }
    const CUdeviceptr scale = scales + g * sizeof(float);
    return transposed.empty()
               ? quantizer.castWithScale(cast, scale, b, stream)
               : quantizer.quantizeBothLayouts(cast, b, t, stream, scale);
  };
  // The steady state: every expert casts with its prediction, in one launch
  // where the experts' buffers are one array's (castWithScales).
  auto failed = [&](Error error, std::optional<size_t> g) -> Error {
    // The slot stays free, and the next step rewrites its scales: let the
    // copy that reads them finish first (an error path, not a step's).
    (void)api->streamSynchronize(stream);
    return g ? forExpert(*g, std::move(error)) : std::move(error);
  };
  if (!anyRescale) {
    if (Error error = quantizer.castWithScales(spec, scales, counted,
                                               transposed, stream, adamw))
      return failed(std::move(error), std::nullopt);
  } else {
    if (adamw) {
      // Every expert's update first, counted nowhere (the caller's buffers
      // have no counters: the quantizer's own words); then each expert's
      // cast or rescale of its updated weight.
      if (Error error = quantizer.castWithScales(spec, scales, buffers,
                                                 transposed, stream, adamw))
        return failed(std::move(error), std::nullopt);
    }
    for (size_t g = 0; g < experts; ++g)
      if (Error error = launch(g))
        return failed(std::move(error), g);
  }
  for (size_t g = 0; g < experts; ++g)
    planners[g].commit(decisions[g], lr);

  if (Error error = checkCuda(
          api->memcpyDtoHAsync(ring->slot(index), states,
                               experts * sizeof(WeightScalerState), stream),
          "cuMemcpyDtoHAsync(expert weight scaler snapshots)"))
    return std::move(error);
  if (Error error = ring->push(stream))
    return std::move(error);
  slotSteps[index].step = decisions.front().step;
  for (size_t g = 0; g < experts; ++g)
    slotSteps[index].rescale[g] = decisions[g].isRescale();
  return std::move(decisions);
}

} // namespace moss::runtime
