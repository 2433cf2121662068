//===- WeightScaler.h - Automatic weight scaling on the GPU -----*- C++ -*-===//
//
// MOSS automatic scaling (docs/METHOD.md section 3) run on the GPU, with no
// host synchronization on the per-step path. Once per optimizer step, after the
// update W_{t-1} -> W_t, the caller asks for W_t's FP8 codes:
//
//   scaler.castStep(lr_t, spec, {x = W_t, q = codes, global = scale}, stream)
//
// and the step does, all asynchronously on `stream`:
//
//   1. Poll (cuEventQuery, never a synchronize) the snapshots earlier steps
//      left in page-locked memory: the device's cumulative saturated and
//      non-finite counts, and after a rescale the exact amax. A grown
//      saturated count means a predicted scale undershot, so the next step
//      rescales; an amax re-anchors the prediction (A_0).
//   2. Decide (WeightScalePlanner, pure host logic): a rescale, that is the
//      JIT per-tensor quantize (amax reduce pass + cast, the exact scale),
//      when there is no anchor yet, a saturation was reported, or `interval`
//      steps passed; otherwise the predicted scale
//      s_t = (A_0 + c * sum lr) / max, cast in one pass over the weight.
//   3. Launch: the predicted scale is written to the device scale word with
//      cuMemsetD32Async (its bits travel in the call, so no host buffer must
//      outlive the copy), then castWithScale; or the per-tensor quantize.
//      Both add to the scaler's device counters, and either way `global`
//      receives the scale the codes were made with.
//   4. Copy the counters (and the amax) to a page-locked slot and record
//      that slot's event.
//
// The feedback is one or more steps late by design: the step whose cast
// saturated has already happened (its codes hold clamped values, counted in
// stats()); the contract is that the next step the host learns of it
// rescales. Likewise the anchor of a rescale arrives later; until it does,
// the prediction continues from the previous anchor (still a bound after an
// interval rescale), and steps rescale again only when there is no valid
// anchor (none yet, or saturation).
//
// Steps must reach the device in order: use one stream, or streams the
// caller orders. A NaN in a weight is seen only by a rescale (the predicted
// cast does not count it); the JIT quantize then writes the NaN scale, and
// every later step rescales until the weight is finite again.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_RUNTIME_API_WEIGHTSCALER_H
#define MOSS_RUNTIME_API_WEIGHTSCALER_H

#include "moss/Numerics/AutoScale.h"
#include "moss/Runtime/Api/Quantizer.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <cuda.h>
#include <deque>
#include <memory>
#include <optional>
#include <utility>

namespace moss::runtime {

class SnapshotRing;

/// Options of a weight scaler: the AutoScaler's bound and interval.
struct WeightScalerOptions {
  /// The bound c (Paper: 1, Provable: from the betas) and the interval.
  numerics::AutoScalerOptions scaling;
  /// When nonzero, this c (finite, > 0) instead of `scaling.bound`.
  double explicitBound = 0.0;
};

/// Why a step rescaled.
enum class RescaleReason : uint8_t {
  /// Not a rescale: the cast used the predicted scale.
  None,
  /// No anchor has reached the host yet (the first steps).
  NoAnchor,
  /// `interval` steps passed since the anchor.
  Interval,
  /// A cast reported saturated values (or a rescale a non-finite weight).
  Saturation,
};

/// What one step does on the device.
struct WeightScaleDecision {
  /// The step's index, counted from 0.
  int64_t step = 0;
  /// Why the step rescales; None for a predicted cast.
  RescaleReason reason = RescaleReason::None;
  /// The predicted scale of a cast; 0 for a rescale (the device finds that
  /// scale and writes it to `global`).
  float scale = 0.0f;

  bool isRescale() const { return reason != RescaleReason::None; }
};

/// A device snapshot that reached the host: the scaler's counters after
/// step `step`, and the amax when that step rescaled.
struct WeightScaleObservation {
  int64_t step = 0;
  /// Cumulative counts since the scaler was created.
  uint64_t saturatedTotal = 0;
  uint64_t nonFiniteTotal = 0;
  /// The exact amax the rescale found (possibly NaN or Inf).
  std::optional<float> amax;
};

/// What the scaler did and learned; every count is since creation.
struct WeightScalerStats {
  /// Steps launched, and how many of them rescaled, by reason.
  int64_t steps = 0;
  int64_t rescales = 0;
  int64_t noAnchorRescales = 0;
  int64_t intervalRescales = 0;
  int64_t saturationRescales = 0;
  /// Observations whose saturated count grew, and the values counted.
  int64_t saturationEvents = 0;
  uint64_t saturatedValues = 0;
  /// Non-finite blocks the rescales counted, and non-finite amaxes seen.
  uint64_t nonFiniteBlocks = 0;
  int64_t nonFiniteAnchors = 0;
  /// The latest step whose device results reached the host (-1: none), and
  /// the latest whose snapshot revealed saturation (-1: none); the
  /// saturating cast was that step or one after the observation before.
  int64_t observedStep = -1;
  int64_t lastSaturationStep = -1;
  /// Anchors applied; the current anchor A_0 and the step it was taken at
  /// (-1 and 0 while there is none).
  int64_t anchorsApplied = 0;
  int64_t anchorStep = -1;
  float anchorAmax = 0.0f;
  /// The latest step's decision.
  WeightScaleDecision lastDecision;
  /// Snapshots overwritten before the host read them (the GPU lagged more
  /// than the ring holds); their information arrives with later ones.
  int64_t droppedSnapshots = 0;
};

/// The host side of the protocol, with no CUDA: decides each step and takes
/// the device's feedback. WeightScaler drives it; tests drive it directly.
///
/// Per step: plan(lr, format) decides without changing anything, the caller
/// launches, then commit(decision, lr). observe() takes snapshots in step
/// order, at any time.
class WeightScalePlanner {
public:
  /// Errors: a bad interval (< 1), betas without a provable bound, a
  /// non-finite explicit bound.
  static llvm::Expected<WeightScalePlanner>
  create(const WeightScalerOptions &options);

  /// The decision for the next step with learning rate `lr`. Errors (and
  /// nothing changes) on a negative or non-finite lr.
  llvm::Expected<WeightScaleDecision> plan(double lr,
                                           numerics::Fp8Format format) const;

  /// Records that `decision` (from plan(lr, ...), with no commit or observe
  /// in between) was launched.
  void commit(const WeightScaleDecision &decision, double lr);

  /// Takes a snapshot of a launched step. Snapshots come in increasing step
  /// order; one may skip steps (the counts are cumulative). Errors on a
  /// step out of order or not launched, or counts that went backwards.
  llvm::Error observe(const WeightScaleObservation &observation);

  /// Notes a snapshot the host never read (WeightScaler's ring overflowed).
  void noteDroppedSnapshot() { ++statistics.droppedSnapshots; }

  const WeightScalerStats &stats() const { return statistics; }
  /// c in |dW| <= c * lr.
  double bound() const { return c; }
  int64_t interval() const { return rescaleInterval; }
  /// The predictor; empty until the first anchor arrives.
  const std::optional<numerics::AutoScaler> &scaler() const {
    return predictor;
  }

private:
  WeightScalePlanner(double c, int64_t interval)
      : c(c), rescaleInterval(interval) {}
  /// Drops the learning rates no pending anchor will replay.
  void pruneHistory();

  double c;
  int64_t rescaleInterval;
  std::optional<numerics::AutoScaler> predictor;
  /// Rescales launched whose snapshot has not been observed, oldest first.
  std::deque<int64_t> pendingRescales;
  /// (step, lr) of the steps after the oldest pending rescale: an anchor
  /// that arrives late is advanced through them.
  std::deque<std::pair<int64_t, double>> history;
  int64_t nextStep = 0;
  uint64_t seenSaturated = 0;
  uint64_t seenNonFinite = 0;
  WeightScalerStats statistics;
};

/// Runs the automatic weight-scaling protocol for one weight tensor on the
/// GPU (see the file comment). Owns a WeightScalePlanner, a 24-byte device
/// buffer (counters, scale, amax), a ring of page-locked snapshot slots and
/// their events. Uses the context current at creation; make it current for
/// every call. Not thread-safe.
class WeightScaler {
public:
  /// A scaler that launches through `quantizer` (which must outlive it).
  /// Allocates its buffers and events in the current context.
  static llvm::Expected<std::unique_ptr<WeightScaler>>
  create(GpuQuantizer &quantizer, const WeightScalerOptions &options);
  /// Waits for the outstanding snapshot copies (not on the per-step path),
  /// then frees everything.
  ~WeightScaler();
  WeightScaler(const WeightScaler &) = delete;
  WeightScaler &operator=(const WeightScaler &) = delete;

  /// One optimizer step: W_t (buffers.x, FP32 or BF16) was just updated
  /// with learning rate `lr`; writes its codes to buffers.q and the scale to
  /// buffers.global (one FP32), asynchronously on `stream`. `spec` must be
  /// per-tensor; buffers.local, .counters and .amax must be 0 (the scaler
  /// owns its counters). Everything is checked before anything changes or
  /// launches. Returns what the step did.
  ///
  /// With `transposed` (and spec.bothLayouts), W_t^T's codes at the same
  /// scale go to transposed->q and the scale to transposed->global (which
  /// may be buffers.global) from the same read of W_t
  /// (GpuQuantizer::quantizeBothLayouts); transposed->x is 0 or buffers.x,
  /// its .local, .counters and .amax 0.
  ///
  /// With `adamw` (and spec.adamw), the step is the optimizer's own:
  /// buffers.x holds W_{t-1}, which the AdamW step (its constants and
  /// adamw->state[0]) updates in place to W_t in the read that casts it
  /// (GpuQuantizer::castWithScales). A step that rescales updates the
  /// weight first, then quantizes it as without `adamw`. `lr` is the
  /// step's learning rate.
  llvm::Expected<WeightScaleDecision>
  castStep(double lr, const compiler::QuantizeSpec &spec,
           const QuantizeBuffers &buffers, CUstream stream,
           const QuantizeBuffers *transposed = nullptr,
           const AdamWUpdate *adamw = nullptr);

  /// castStep() for arguments checkWeightScalerStep has accepted (the C
  /// API checks before it converts its errors), without checking them
  /// again.
  llvm::Expected<WeightScaleDecision>
  castStepChecked(double lr, const compiler::QuantizeSpec &spec,
                  const QuantizeBuffers &buffers, CUstream stream,
                  const QuantizeBuffers *transposed = nullptr,
                  const AdamWUpdate *adamw = nullptr);

  /// Takes whatever snapshots have arrived, without launching or waiting.
  llvm::Error poll();

  const WeightScalerStats &stats() const { return planner.stats(); }

  /// Snapshot slots: the GPU may lag this many steps behind the host before
  /// a snapshot is overwritten unread.
  static constexpr int kSlots = 8;

private:
  WeightScaler(GpuQuantizer &quantizer, WeightScalePlanner planner);

  GpuQuantizer &quantizer;
  WeightScalePlanner planner;
  /// The device state (uint64 saturated, uint64 non-finite, FP32 scale,
  /// FP32 amax), its snapshots, and each slot's step.
  std::unique_ptr<SnapshotRing> ring;
  struct SlotStep {
    int64_t step = 0;
    bool rescale = false;
  } slotSteps[kSlots];
  /// Whether the device state was zeroed (on the first step's stream).
  bool zeroed = false;
};

/// Checks the arguments of WeightScaler::castStep without a GPU; the error
/// names the bad argument and what was expected. `adamw`: the weight's
/// AdamW state, exactly when spec.adamw.
llvm::Error checkWeightScalerStep(double lr, const compiler::QuantizeSpec &spec,
                                  const QuantizeBuffers &buffers,
                                  const QuantizeBuffers *transposed = nullptr,
                                  const AdamWBuffers *adamw = nullptr);

/// The cast a scaler's rescale runs after a fused AdamW step updated the
/// weight: `spec` without the update.
compiler::QuantizeSpec getRescaleSpec(const compiler::QuantizeSpec &spec);

} // namespace moss::runtime

#endif // MOSS_RUNTIME_API_WEIGHTSCALER_H
