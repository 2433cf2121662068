//===- AutoScale.cpp - Predicted per-tensor weight scales -----------------===//
//
// The MOSS automatic scaling rule (docs/METHOD.md section 3). Why the provable
// bound holds, bias correction included: with rho = beta1^2 / beta2,
// Cauchy-Schwarz on m_t = (1-b1) sum b1^(t-i) g_i against
// v_t = (1-b2) sum b2^(t-i) g_i^2 gives
//   |m_t| / sqrt(v_t) <= (1-b1) / sqrt(1-b2) * sqrt((1 - rho^t) / (1 - rho)),
// and the bias-corrected ratio |m_hat| / sqrt(v_hat) multiplies that by
// sqrt(1 - b2^t) / (1 - b1^t). With x = b1^t, y = b2^t,
// (1 - x^2/y)(1 - y) <= (1 - x)^2 is (y - x)^2 / y >= 0, so every step stays
// within c = (1-b1) / sqrt((1-b2)(1-rho)). Equality needs |g_i| proportional
// to (b2/b1)^i, all of one sign: AutoScaleTest builds exactly that sequence.
// AdamW's decoupled weight decay multiplies W by (1 - lr * wd) <= 1 and so
// only shrinks |W|.
//
//===----------------------------------------------------------------------===//

#include "moss/Numerics/AutoScale.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

using namespace moss::numerics;

static llvm::Error makeError(const std::string &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), "%s",
                                 message.c_str());
}

static std::string str(double v) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%g", v);
  return buffer;
}

llvm::Expected<double> moss::numerics::provableAdamBound(double beta1,
                                                         double beta2) {
  if (!(beta1 >= 0.0 && beta1 < 1.0))
    return makeError("Adam beta1=" + str(beta1) + " must be in [0, 1)");
  if (!(beta2 > 0.0 && beta2 < 1.0))
    return makeError("Adam beta2=" + str(beta2) + " must be in (0, 1)");
  if (!(beta1 * beta1 < beta2))
    return makeError("Adam's update has no provable bound unless beta1^2 < "
                     "beta2, got beta1=" +
                     str(beta1) + ", beta2=" + str(beta2));
  return (1.0 - beta1) / std::sqrt((1.0 - beta2) * (1.0 - beta1 * beta1 / beta2));
}

static llvm::Error checkAmax(float amax) {
  if (!(std::isfinite(amax) && amax >= 0.0f))
    return makeError("the weight amax " + str(amax) +
                     " must be finite and non-negative (does the weight hold "
                     "NaN or Inf?)");
  return llvm::Error::success();
}

llvm::Expected<AutoScaler>
AutoScaler::createWithBound(double c, int64_t interval, float initialAmax) {
  if (!(std::isfinite(c) && c > 0.0))
    return makeError("the Adam update bound c=" + str(c) +
                     " must be finite and positive");
  if (interval < 1)
    return makeError("the rescale interval " + std::to_string(interval) +
                     " must be at least 1 step");
  if (llvm::Error error = checkAmax(initialAmax))
    return std::move(error);
  return AutoScaler(c, interval, initialAmax);
}

llvm::Expected<AutoScaler> AutoScaler::create(const AutoScalerOptions &options,
                                              float initialAmax) {
  double c = 1.0;
  if (options.bound == AdamBound::Provable) {
    llvm::Expected<double> provable =
        provableAdamBound(options.beta1, options.beta2);
    if (!provable)
      return provable.takeError();
    c = *provable;
  }
  return createWithBound(c, options.interval, initialAmax);
}

llvm::Error AutoScaler::step(double lr) {
  if (!(std::isfinite(lr) && lr >= 0.0))
    return makeError("the learning rate " + str(lr) +
                     " must be finite and non-negative");
  lrSum += lr;
  ++steps;
  return llvm::Error::success();
}

bool AutoScaler::needsRescale() const {
  return saturationPending || steps >= rescaleInterval;
}

llvm::Error AutoScaler::rescale(float trueAmax) {
  if (llvm::Error error = checkAmax(trueAmax))
    return error;
  anchor = trueAmax;
  lrSum = 0;
  steps = 0;
  saturationPending = false;
  return llvm::Error::success();
}

void AutoScaler::reportSaturation(int64_t saturatedCount) {
  if (saturatedCount != 0)
    saturationPending = true;
}

float AutoScaler::predictedAmax() const {
  double bound = double(anchor) + c * lrSum;
  float rounded = float(bound);
  // Directed rounding: the FP32 value must not fall below the real bound.
  if (double(rounded) < bound)
    rounded = std::nextafter(rounded, std::numeric_limits<float>::infinity());
  return rounded;
}

float AutoScaler::predictedScale(Fp8Format format) const {
  float s = predictedAmax() / fp8MaxFinite(format);
  return s == 0.0f ? 1.0f : s;
}

llvm::Expected<QuantizedTensor>
moss::numerics::quantizeWithScale(llvm::ArrayRef<float> x, int64_t rows,
                                  int64_t cols, float scale,
                                  Fp8Format format) {
  if (rows <= 0 || cols <= 0)
    return makeError("the input shape [" + std::to_string(rows) + ", " +
                     std::to_string(cols) + "] must have positive extents");
  if (int64_t(x.size()) != rows * cols)
    return makeError("the input holds " + std::to_string(x.size()) +
                     " elements, expected rows*cols = " +
                     std::to_string(rows * cols));
  if (!(std::isfinite(scale) && scale > 0.0f))
    return makeError("the scale " + str(scale) +
                     " must be finite and positive");
  QuantizedTensor q;
  q.scheme = ScalingScheme::perTensor();
  q.format = format;
  q.rows = rows;
  q.cols = cols;
  q.codes.resize(rows * cols);
  q.global = {scale};
  int64_t saturated = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    // One FP32 division, as in every scheme (not a reciprocal multiply).
    Fp8Encoded e = encodeFp8(x[i] / scale, format);
    q.codes[i] = e.code;
    saturated += e.saturated;
  }
  q.stats.saturated = saturated;
  return q;
}
