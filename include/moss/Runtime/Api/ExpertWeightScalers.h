//===- ExpertWeightScalers.h - One weight scaler per expert -----*- C++ -*-===//
//
// The automatic weight scaling of WeightScaler for the G experts of a
// mixture-of-experts layer, stepped together: each expert keeps its own
// planner (its own anchor, prediction and rescales, decided exactly as a
// WeightScaler of its own would), but their device words are one array and
// their per-step traffic is shared. A step makes one cuEventQuery per
// snapshot that arrived, one host-to-device copy of the predicted scales,
// the casts, one device-to-host copy of every expert's counters and one
// event record: a fixed number of driver calls where G scalers make about
// five each. The casts are one launch when every expert casts with its
// prediction and the experts' buffers are one array's
// (GpuQuantizer::castWithScales); a step that rescales an expert launches
// each expert's own.
//
// The predicted scales travel through page-locked memory, which a copy may
// still read until its step's event completes; the host therefore waits for
// the oldest step when the GPU lags kSlots steps behind (WeightScaler drops
// that snapshot instead).
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_RUNTIME_API_EXPERTWEIGHTSCALERS_H
#define MOSS_RUNTIME_API_EXPERTWEIGHTSCALERS_H

#include "moss/Runtime/Api/WeightScaler.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

#include <memory>
#include <vector>

namespace moss::runtime {

class SnapshotRing;

class ExpertWeightScalers {
public:
  /// `experts` (>= 1) scalers with `options`, launching through `quantizer`
  /// (which must outlive them). Allocates in the current context.
  static llvm::Expected<std::unique_ptr<ExpertWeightScalers>>
  create(GpuQuantizer &quantizer, const WeightScalerOptions &options,
         size_t experts);
  /// Waits for the outstanding copies, then frees everything.
  ~ExpertWeightScalers();
  ExpertWeightScalers(const ExpertWeightScalers &) = delete;
  ExpertWeightScalers &operator=(const ExpertWeightScalers &) = delete;

  /// One optimizer step of every expert: expert g's weight buffers[g].x
  /// was just updated with learning rate `lr`; its codes go to
  /// buffers[g].q (and, with `transposed`, one entry per expert, W_g^T's to
  /// transposed[g].q from the same read) and its scale to buffers[g].global,
  /// as WeightScaler::castStep writes them. `spec` is one expert's. The
  /// caller has checked every expert's arguments with
  /// checkWeightScalerStep (the C API does, before it converts its errors,
  /// so that they name the expert). Returns each expert's decision. With
  /// `adamw` (spec.adamw; one state per expert), the AdamW step updates
  /// every expert's weight in the read that casts it, as
  /// WeightScaler::castStep's.
  llvm::Expected<llvm::SmallVector<WeightScaleDecision>>
  castStepsChecked(double lr, const compiler::QuantizeSpec &spec,
                   llvm::ArrayRef<QuantizeBuffers> buffers,
                   llvm::ArrayRef<QuantizeBuffers> transposed, CUstream stream,
                   const AdamWUpdate *adamw = nullptr);

  /// Takes whatever snapshots have arrived, without launching or waiting.
  llvm::Error poll();

  size_t size() const { return planners.size(); }
  /// Expert `expert`'s counters (expert < size()).
  const WeightScalerStats &stats(size_t expert) const {
    return planners[expert].stats();
  }

  static constexpr int kSlots = WeightScaler::kSlots;

private:
  ExpertWeightScalers(GpuQuantizer &quantizer,
                      std::vector<WeightScalePlanner> planners);
  /// Observes slot `index`, whose copy has landed.
  llvm::Error observe(int index);
  /// Slot `index`'s page-locked scales, after its size() snapshots.
  float *slotScales(int index) const;

  GpuQuantizer &quantizer;
  std::vector<WeightScalePlanner> planners;
  /// The device words (size() WeightScalerStates, then size() predicted
  /// scales), and slots of as many bytes (the states' snapshots, then the
  /// scales the step copied up); and each slot's step.
  std::unique_ptr<SnapshotRing> ring;
  struct SlotSteps {
    int64_t step = 0;
    /// Per expert: whether the step rescaled (its snapshot holds an amax).
    std::vector<char> rescale;
  } slotSteps[kSlots];
  bool zeroed = false;
};

} // namespace moss::runtime

#endif // MOSS_RUNTIME_API_EXPERTWEIGHTSCALERS_H
