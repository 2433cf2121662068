//===- AdamW.cpp - The AdamW step of the fused optimizer cast -------------===//

#include "moss/Numerics/AdamW.h"

#include "llvm/ADT/Twine.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>

using namespace llvm;

namespace moss::numerics {

static Error invalidStep(const Twine &message) {
  return createStringError(inconvertibleErrorCode(),
                           "invalid AdamW step: " + message);
}

Expected<AdamWCoefficients> getAdamWCoefficients(const AdamWStep &step) {
  auto nonNegative = [](double x) { return std::isfinite(x) && x >= 0.0; };
  if (!nonNegative(step.lr))
    return invalidStep("lr must be finite and >= 0, got " +
                       formatv("{0}", step.lr));
  if (!nonNegative(step.weightDecay))
    return invalidStep("weight_decay must be finite and >= 0, got " +
                       formatv("{0}", step.weightDecay));
  if (!nonNegative(step.eps))
    return invalidStep("eps must be finite and >= 0, got " +
                       formatv("{0}", step.eps));
  for (double beta : {step.beta1, step.beta2})
    if (!(beta >= 0.0 && beta < 1.0))
      return invalidStep("betas must lie in [0, 1), got " +
                         formatv("{0}", beta));
  if (step.step < 1)
    return invalidStep("the step count starts at 1, got " + Twine(step.step));
  const double bias1 = 1.0 - std::pow(step.beta1, double(step.step));
  const double bias2 = 1.0 - std::pow(step.beta2, double(step.step));
  AdamWCoefficients c;
  c.decay = float(1.0 - step.lr * step.weightDecay);
  c.oneMinusBeta1 = float(1.0 - step.beta1);
  c.oneMinusBeta2 = float(1.0 - step.beta2);
  c.beta2 = float(step.beta2);
  c.negStepSize = float(-step.lr / bias1);
  c.bias2Sqrt = float(std::sqrt(bias2));
  c.eps = float(step.eps);
  if (!std::isfinite(c.negStepSize) || !std::isfinite(c.decay))
    return invalidStep("lr " + formatv("{0}", step.lr) +
                       " gives a step size beyond "
                       "FP32");
  return c;
}

// Each operation is a statement of its own, and the fused ones call
// std::fma, so that no compiler contracts or reorders them: the GPU
// kernel (templates/moss/quantize/adamw.cuh) performs the same operations.
float adamwUpdate(float p, float g, float &m, float &v,
                  const AdamWCoefficients &c) {
  const float diff = g - m;
  m = std::fma(c.oneMinusBeta1, diff, m);
  const float square = g * g;
  const float kept = c.beta2 * v;
  v = std::fma(c.oneMinusBeta2, square, kept);
  const float root = std::sqrt(v);
  const float corrected = root / c.bias2Sqrt;
  const float denominator = corrected + c.eps;
  const float ratio = m / denominator;
  const float decayed = p * c.decay;
  return std::fma(c.negStepSize, ratio, decayed);
}

} // namespace moss::numerics
