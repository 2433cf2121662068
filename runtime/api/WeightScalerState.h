//===- WeightScalerState.h - A weight scaler's device words -----*- C++ -*-===//
//
// The device words one weight's scaler keeps, shared by WeightScaler and
// ExpertWeightScalers (an array of them, one per expert).
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_RUNTIME_API_WEIGHTSCALERSTATE_H
#define MOSS_RUNTIME_API_WEIGHTSCALERSTATE_H

#include "moss/Runtime/Api/WeightScaler.h"

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace moss::runtime {

/// What the kernels add to and read, and what each step copies to its
/// page-locked slot.
struct WeightScalerState {
  /// Cumulative counters (GpuQuantizer's two-word layout).
  uint64_t saturated;
  uint64_t nonFinite;
  /// The predicted scale castWithScale reads (WeightScaler only).
  float scale;
  /// The exact amax of the latest rescale.
  float amax;
};
static_assert(sizeof(WeightScalerState) == 24, "the copy is 24 bytes");
constexpr unsigned kWeightScalerScaleOffset =
    offsetof(WeightScalerState, scale);
constexpr unsigned kWeightScalerAmaxOffset = offsetof(WeightScalerState, amax);

/// What a step's snapshot of one scaler's words (at `snapshot`, in a
/// page-locked slot) tells its planner: the counters and, after a rescale,
/// the amax it found.
inline WeightScaleObservation readSnapshot(const char *snapshot, int64_t step,
                                           bool rescale) {
  WeightScalerState state;
  std::memcpy(&state, snapshot, sizeof(state));
  WeightScaleObservation observation;
  observation.step = step;
  observation.saturatedTotal = state.saturated;
  observation.nonFiniteTotal = state.nonFinite;
  if (rescale)
    observation.amax = state.amax;
  return observation;
}

} // namespace moss::runtime

#endif // MOSS_RUNTIME_API_WEIGHTSCALERSTATE_H
