//===- AutoScale.h - Predicted per-tensor weight scales --------*- C++ -*-===//
//
// MOSS automatic scaling (docs/METHOD.md section 3). Adam and AdamW move every
// weight by at most c * lr per step, so between two rescales
//
//   amax(W_t) <= A_0 + c * sum(lr since the last rescale)
//
// and the per-tensor FP8 scale can be predicted instead of read from the FP32
// master weight before every cast. A_0 is a real amax, taken at
// initialization, every `interval` steps, and whenever the cast reports
// saturated values.
//
// The GPU runtime reuses this class as is: it depends on nothing but the
// numerics library. The protocol, once per optimizer step t:
//
//   scaler.step(lr_t);                      // after the update W_{t-1} -> W_t
//   if (scaler.needsRescale())
//     scaler.rescale(amax(W_t));            // a JIT amax: the exact scale
//   s = scaler.predictedScale(format);      // cast W_t with s
//   scaler.reportSaturation(saturatedCount); // from the cast kernel
//
// A non-zero saturated count forces a rescale at the next step.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_NUMERICS_AUTOSCALE_H
#define MOSS_NUMERICS_AUTOSCALE_H

#include "moss/Numerics/FP8.h"
#include "moss/Numerics/Quantize.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>

namespace moss::numerics {

/// Which bound `c` on Adam's per-step update |dW| <= c * lr to use.
enum class AdamBound : uint8_t {
  /// The paper's c = 1: tight in practice, but not a bound (an adversarial
  /// gradient sequence moves a weight further; see AutoScaleTest).
  Paper,
  /// c = (1 - beta1) / sqrt((1 - beta2) * (1 - beta1^2 / beta2)), which holds
  /// for every gradient sequence, bias correction included (about 7.27 for
  /// 0.9 / 0.999).
  Provable,
};

/// The provable bound on |m_hat / sqrt(v_hat)| for Adam with these betas.
/// Requires 0 <= beta1 < 1, 0 < beta2 < 1 and beta1^2 < beta2 (otherwise no
/// finite bound exists); the error names the violated condition.
llvm::Expected<double> provableAdamBound(double beta1, double beta2);

struct AutoScalerOptions {
  AdamBound bound = AdamBound::Paper;
  /// Adam's betas; used by AdamBound::Provable only.
  double beta1 = 0.9;
  double beta2 = 0.999;
  /// Steps between two JIT amax reads (MOSS default 500).
  int64_t interval = 500;
};

/// Predicts a per-tensor weight scale from the last real amax and the sum of
/// learning rates since then.
class AutoScaler {
public:
  /// A scaler anchored at `initialAmax` (the amax of the initial weight).
  /// Errors: a bad interval (< 1), betas without a provable bound, a negative
  /// or non-finite amax.
  static llvm::Expected<AutoScaler> create(const AutoScalerOptions &options,
                                           float initialAmax);
  /// The same with an explicit bound `c` (finite, > 0).
  static llvm::Expected<AutoScaler> createWithBound(double c, int64_t interval,
                                                    float initialAmax);

  /// Accounts for one optimizer step taken with learning rate `lr` (finite,
  /// >= 0, else an error and nothing changes).
  llvm::Error step(double lr);

  /// True once `interval` steps have passed since the last rescale, or after
  /// a cast reported saturation.
  bool needsRescale() const;

  /// Re-anchors the prediction at a real amax: A_0 = trueAmax, the sum of
  /// learning rates and the step count restart at 0, and a pending
  /// saturation report is cleared. Right after it the predicted scale is
  /// exactly the JIT per-tensor scale. Errors on a negative or non-finite
  /// amax (a weight holding NaN or Inf), and nothing changes.
  llvm::Error rescale(float trueAmax);

  /// Feeds back the cast kernel's saturated count: non-zero means the
  /// prediction undershot, so the next needsRescale() is true.
  void reportSaturation(int64_t saturatedCount);

  /// A_0 + c * sum lr, rounded up to FP32 (never below the real-valued bound,
  /// so rounding cannot turn a valid bound into an undershoot).
  float predictedAmax() const;

  /// predictedAmax() / fp8MaxFinite(format), one FP32 division, and 1 when
  /// that is 0: the per-tensor quantizer's scale rule
  /// (NUMERICS-CONTRACT.md section 4) applied to the predicted amax.
  float predictedScale(Fp8Format format) const;

  double bound() const { return c; }
  int64_t interval() const { return rescaleInterval; }
  float anchorAmax() const { return anchor; }
  double learningRateSum() const { return lrSum; }
  int64_t stepsSinceRescale() const { return steps; }
  bool saturationReported() const { return saturationPending; }

private:
  AutoScaler(double c, int64_t interval, float anchor)
      : c(c), rescaleInterval(interval), anchor(anchor) {}

  double c;
  int64_t rescaleInterval;
  float anchor;
  double lrSum = 0;
  int64_t steps = 0;
  bool saturationPending = false;
};

/// Per-tensor quantization with a given FP32 scale instead of amax / max: the
/// cast a predicted scale drives. codes = encodeFp8(x / scale) (one FP32
/// division per element), `global` = {scale}, saturated values counted as in
/// every other scheme. One pass cannot know whether the tensor is finite, so
/// each element is encoded on its own (NaN -> the NaN code, +-Inf -> +-max,
/// neither counted); the JIT quantize of the next rescale reports them.
/// `scale` must be finite and > 0. For a finite tensor with scale = amax /
/// max this is bit-identical to ScalingScheme::perTensor().
llvm::Expected<QuantizedTensor>
quantizeWithScale(llvm::ArrayRef<float> x, int64_t rows, int64_t cols,
                  float scale, Fp8Format format);

} // namespace moss::numerics

#endif // MOSS_NUMERICS_AUTOSCALE_H
