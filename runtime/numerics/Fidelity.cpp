//===- Fidelity.cpp - SNR and error measures, reference GEMM --------------===//

#include "moss/Numerics/Fidelity.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

using namespace moss::numerics;

/// 10 log10(signal / error) as two steps (docs/METHOD.md section 4): the power
/// ratio, then its log. Zero error is +inf, whatever the signal.
static double snrFromPowers(double signal, double error) {
  if (error == 0.0)
    return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(signal / error);
}

double moss::numerics::snrDb(llvm::ArrayRef<float> exact,
                             llvm::ArrayRef<double> approx) {
  assert(exact.size() == approx.size() && "snrDb needs equal lengths");
  double signal = 0, error = 0;
  for (size_t i = 0; i < exact.size(); ++i) {
    if (!std::isfinite(exact[i]))
      continue;
    double x = exact[i];
    double d = x - approx[i];
    signal += x * x;
    error += d * d;
  }
  return snrFromPowers(signal, error);
}

FidelityReport moss::numerics::measureFidelity(llvm::ArrayRef<float> x,
                                               int64_t rows, int64_t cols,
                                               const QuantizedTensor &q) {
  assert(q.rows * q.cols == rows * cols && int64_t(x.size()) == rows * cols &&
         "the quantized tensor does not match the input's shape");
  // Line the input up with the codes.
  std::vector<float> xt;
  llvm::ArrayRef<float> ref = x;
  if (q.transposed) {
    xt = transposed(x, rows, cols);
    ref = xt;
  }

  FidelityReport report;
  report.saturated = q.stats.saturated;
  report.nonFiniteBlocks = q.stats.nonFiniteBlocks;
  double signal = 0, error = 0;
  // Row by row: the FP64 dequantized tensor would be 8 bytes per element.
  // The sums run in the same element order as over a whole tensor.
  std::vector<double> dq(q.cols);
  double rowSnrSum = 0;
  int64_t rowsWithSignal = 0;
  for (int64_t r = 0; r < q.rows; ++r) {
    dequantizeRow(q, r, dq);
    // Row sums of their own: differences of the running totals would
    // cancel catastrophically for small rows.
    double rowSignal = 0, rowError = 0;
    for (int64_t c = 0; c < q.cols; ++c) {
      int64_t i = r * q.cols + c;
      double v = ref[i];
      // Elements of non-finite blocks dequantize to NaN; they are reported
      // through nonFiniteBlocks, not folded into the error measures.
      if (!std::isfinite(v) || std::isnan(dq[c]))
        continue;
      double d = v - dq[c];
      signal += v * v;
      error += d * d;
      rowSignal += v * v;
      rowError += d * d;
      if (v != 0) {
        report.maxRelError = std::max(report.maxRelError, std::fabs(d / v));
        if ((q.codes[i] & 0x7F) == 0)
          ++report.underflowToZero;
      }
    }
    if (rowSignal > 0) {
      rowSnrSum += snrFromPowers(rowSignal, rowError);
      ++rowsWithSignal;
    }
  }
  report.meanRowSnrDb = rowsWithSignal ? rowSnrSum / double(rowsWithSignal)
                                       : std::numeric_limits<double>::infinity();
  report.snrDb = snrFromPowers(signal, error);
  return report;
}

std::vector<double> moss::numerics::referenceGemm(llvm::ArrayRef<double> a,
                                                  llvm::ArrayRef<double> b,
                                                  int64_t m, int64_t n,
                                                  int64_t k) {
  assert(int64_t(a.size()) == m * k && int64_t(b.size()) == n * k &&
         "referenceGemm operand sizes do not match m, n, k");
  std::vector<double> c(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t l = 0; l < k; ++l)
        sum += a[i * k + l] * b[j * k + l];
      c[i * n + j] = sum;
    }
  return c;
}

double moss::numerics::tensorCoreUnit(int64_t interval) {
  return std::ldexp(1.0, -13) * std::sqrt(double(interval) / 32.0);
}

double moss::numerics::gemmEntryAllowance(llvm::ArrayRef<double> a,
                                          llvm::ArrayRef<double> b,
                                          int64_t interval) {
  assert(a.size() == b.size() && interval > 0 &&
         "gemmEntryAllowance needs rows of one length and an interval");
  const int64_t k = int64_t(a.size());
  double productSquares = 0, intervalSquares = 0, intervalSum = 0;
  for (int64_t i = 0; i < k; ++i) {
    const double product = a[i] * b[i];
    productSquares += product * product;
    intervalSum += product;
    if ((i + 1) % interval == 0 || i + 1 == k) {
      intervalSquares += intervalSum * intervalSum;
      intervalSum = 0;
    }
  }
  return 12 * tensorCoreUnit(interval) *
         std::sqrt(productSquares + intervalSquares);
}

double moss::numerics::f16MmaEntryAllowance(llvm::ArrayRef<double> a,
                                            llvm::ArrayRef<double> b) {
  assert(a.size() == b.size() && "f16MmaEntryAllowance needs rows of one "
                                 "length");
  const int64_t k = int64_t(a.size());
  double running = 0, previous = 0, steps = 0, magnitudes = 0;
  for (int64_t i = 0; i < k; ++i) {
    const double product = a[i] * b[i];
    running += product;
    magnitudes += std::fabs(product);
    if ((i + 1) % 16 == 0 || i + 1 == k) {
      steps += std::fabs(previous) + std::fabs(running);
      previous = running;
    }
  }
  return std::ldexp(steps, -21) + std::ldexp(magnitudes, -22);
}

double moss::numerics::gemmEntryAllowedError(double expected,
                                             const OutputRounding &rounding,
                                             llvm::ArrayRef<double> a,
                                             llvm::ArrayRef<double> b,
                                             int64_t interval) {
  return rounding.of(expected) + gemmEntryAllowance(a, b, interval);
}

double moss::numerics::f16MmaEntryAllowedError(
    double expected, const OutputRounding &rounding, llvm::ArrayRef<double> a,
    llvm::ArrayRef<double> b, double sum, double bias, double betaC) {
  return rounding.of(expected) + f16MmaEntryAllowance(a, b) +
         std::ldexp(std::fabs(sum) + std::fabs(bias) + std::fabs(betaC), -22);
}

double moss::numerics::gemmEntryErrorRatio(double got, double expected,
                                           double allowed, double overflow) {
  if (got == expected)
    return 0;
  if (std::isinf(got) && std::isfinite(expected) &&
      std::signbit(got) == std::signbit(expected))
    return std::max(0.0, overflow - std::fabs(expected)) / allowed;
  double ratio = std::fabs(got - expected) / allowed;
  return std::isnan(ratio) ? std::numeric_limits<double>::infinity() : ratio;
}
