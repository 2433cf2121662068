//===- WeightScalerState.h - A weight scaler's device words -----*- C++ -*-===//
//
// The device words one weight's scaler keeps, shared by WeightScaler and
// ExpertWeightScalers (an array of them, one per expert).
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_RUNTIME_API_WEIGHTSCALERSTATE_H
#define MOSS_RUNTIME_API_WEIGHTSCALERSTATE_H

#include <cstddef>
#include <cstdint>

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

} // namespace moss::runtime

#endif // MOSS_RUNTIME_API_WEIGHTSCALERSTATE_H
