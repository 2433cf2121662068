//===- AdamW.h - The AdamW step of the fused optimizer cast ----*- C++ -*-===//
//
// One AdamW step (torch.optim.AdamW's: decoupled weight decay, bias
// correction, no amsgrad) on FP32 weights and states, defined to the bit so
// that the GPU's fused step (an AdamW update and the per-tensor FP8 cast of
// the updated weight in one read of it, QuantizeSpec::adamw) and this host
// reference agree exactly. Per element, every operation rounded once to
// nearest even in FP32:
//
//   m' = fma(1 - beta1, g - m, m)                  torch's lerp(m, g, 1 - b1)
//   v' = fma(1 - beta2, g * g, beta2 * v)
//   d  = sqrt(v') / sqrt(1 - beta2^t) + eps
//   p' = fma(-lr / (1 - beta1^t), m' / d, p * (1 - lr * weight_decay))
//
// The step's constants (getAdamWCoefficients) are computed in FP64 and
// rounded to FP32 once. torch's own kernels round some products apart where
// this fuses them, so the two differ by an ulp or so per step.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_NUMERICS_ADAMW_H
#define MOSS_NUMERICS_ADAMW_H

#include "llvm/Support/Error.h"

#include <cstdint>

namespace moss::numerics {

/// One AdamW step's hyperparameters; `step` counts from 1 (the bias
/// corrections of the first step use 1).
struct AdamWStep {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weightDecay = 1e-2;
  int64_t step = 1;
};

/// The FP32 constants of one step, shared by every element.
struct AdamWCoefficients {
  /// 1 - lr * weight_decay.
  float decay = 1.0f;
  float oneMinusBeta1 = 0.1f;
  float oneMinusBeta2 = 0.001f;
  float beta2 = 0.999f;
  /// -lr / (1 - beta1^t).
  float negStepSize = 0.0f;
  /// sqrt(1 - beta2^t).
  float bias2Sqrt = 1.0f;
  float eps = 1e-8f;
};

/// The constants of `step`; errors name a value outside torch's ranges (lr
/// and weight decay finite and >= 0, betas in [0, 1), eps finite and >= 0,
/// step >= 1) or constants that do not fit FP32.
llvm::Expected<AdamWCoefficients> getAdamWCoefficients(const AdamWStep &step);

/// One element's step: returns the updated weight and updates `m` and `v`
/// (the first and second moments) in place.
float adamwUpdate(float p, float g, float &m, float &v,
                  const AdamWCoefficients &c);

} // namespace moss::numerics

#endif // MOSS_NUMERICS_ADAMW_H
