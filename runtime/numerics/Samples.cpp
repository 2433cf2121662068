//===- Samples.cpp - Synthetic test tensors -------------------------------===//
//
// Every distribution is built here from the raw 64-bit output of
// std::mt19937_64 (whose sequence the C++ standard fixes), not from
// std::*_distribution (whose algorithms are implementation-defined), so a
// seed gives the same tensor with any standard library.
//
//===----------------------------------------------------------------------===//

#include "moss/Numerics/Samples.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

using namespace moss::numerics;

namespace {

class Rng {
public:
  explicit Rng(uint64_t seed) : engine(seed) {}

  /// Uniform in [0, 1) with 53 random bits.
  double uniform() { return double(engine() >> 11) * 0x1p-53; }

  /// Uniform in (0, 1]: never 0, so its log is finite.
  double uniformPositive() { return double((engine() >> 11) + 1) * 0x1p-53; }

  /// Uniform integer in [0, n) (multiply-high; the bias is below 2^-40 for
  /// the sizes used here).
  uint64_t below(uint64_t n) {
    return uint64_t((unsigned __int128)engine() * n >> 64);
  }

  /// Standard normal by Box-Muller; the second value of each pair is kept.
  double normal() {
    if (hasSpare) {
      hasSpare = false;
      return spare;
    }
    double radius = std::sqrt(-2.0 * std::log(uniformPositive()));
    double angle = 2.0 * 3.14159265358979323846 * uniform();
    spare = radius * std::sin(angle);
    hasSpare = true;
    return radius * std::cos(angle);
  }

  /// Gamma(shape, 1) by Marsaglia and Tsang; shapes below 1 use
  /// Gamma(a) = Gamma(a + 1) * U^(1/a).
  double gamma(double shape) {
    if (shape < 1.0)
      return gamma(shape + 1.0) * std::pow(uniformPositive(), 1.0 / shape);
    double d = shape - 1.0 / 3.0;
    double c = 1.0 / std::sqrt(9.0 * d);
    while (true) {
      double z = normal();
      double v = 1.0 + c * z;
      if (v <= 0.0)
        continue;
      v = v * v * v;
      double u = uniformPositive();
      if (u < 1.0 - 0.0331 * z * z * z * z ||
          std::log(u) < 0.5 * z * z + d * (1.0 - v + std::log(v)))
        return d * v;
    }
  }

  /// Student-t: normal / sqrt(chi2(dof) / dof), chi2(dof) = 2 Gamma(dof/2).
  double studentT(double dof) {
    double z = normal();
    return z / std::sqrt(2.0 * gamma(0.5 * dof) / dof);
  }

  /// `count` distinct indices of [0, n), by a partial Fisher-Yates shuffle.
  std::vector<int64_t> distinct(int64_t n, int64_t count) {
    std::vector<int64_t> idx(n);
    std::iota(idx.begin(), idx.end(), 0);
    count = std::min(count, n);
    for (int64_t i = 0; i < count; ++i)
      std::swap(idx[i], idx[i + below(uint64_t(n - i))]);
    idx.resize(count);
    return idx;
  }

private:
  std::mt19937_64 engine;
  bool hasSpare = false;
  double spare = 0;
};

} // namespace

std::vector<float> moss::numerics::gaussianSample(int64_t rows, int64_t cols,
                                                  uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x(rows * cols);
  for (float &v : x)
    v = float(rng.normal());
  return x;
}

std::vector<float> moss::numerics::studentTSample(int64_t rows, int64_t cols,
                                                  double dof, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x(rows * cols);
  for (float &v : x)
    v = float(rng.studentT(dof));
  return x;
}

std::vector<float> moss::numerics::llmActivationSample(int64_t tokens,
                                                       int64_t channels,
                                                       uint64_t seed) {
  Rng rng(seed);
  // Per-channel magnitude, log-uniform in [0.5, 2).
  std::vector<double> channelScale(channels);
  for (double &s : channelScale)
    s = 0.5 * std::pow(4.0, rng.uniform());
  // About 1% outlier channels (at least one), 100 to 1000 times larger,
  // log-uniform: the feature that makes per-tensor scaling lose precision.
  for (int64_t c : rng.distinct(channels, std::max<int64_t>(1, channels / 100)))
    channelScale[c] *= 100.0 * std::pow(10.0, rng.uniform());
  // About 0.5% of tokens (at least one) are spikes, ten times larger.
  std::vector<double> tokenScale(tokens, 1.0);
  for (int64_t t : rng.distinct(tokens, std::max<int64_t>(1, tokens / 200)))
    tokenScale[t] = 10.0;

  // Heavy-tailed body: Student-t with 4 degrees of freedom, scaled to unit
  // variance (the variance of t(dof) is dof / (dof - 2)).
  const double dof = 4.0;
  const double unit = std::sqrt((dof - 2.0) / dof);
  std::vector<float> x(tokens * channels);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t c = 0; c < channels; ++c)
      x[t * channels + c] =
          float(rng.studentT(dof) * unit * channelScale[c] * tokenScale[t]);
  return x;
}
