//===- Fidelity.h - SNR and error measures, reference GEMM -----*- C++ -*-===//

#ifndef MOSS_NUMERICS_FIDELITY_H
#define MOSS_NUMERICS_FIDELITY_H

#include "moss/Numerics/Quantize.h"

#include "llvm/ADT/ArrayRef.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace moss::numerics {

/// How faithfully a quantized tensor represents its input.
struct FidelityReport {
  /// 10 log10(sum x^2 / sum (x - dq)^2) over finite inputs, in dB. +inf when
  /// the error is zero.
  double snrDb = 0;
  /// The mean over rows (of the quantized layout: tokens for activations) of
  /// each row's SNR in dB, over rows with a non-zero signal. A token-wise
  /// view: small rows count as much as large ones, where snrDb is dominated
  /// by the largest values. +inf when some row is exact.
  double meanRowSnrDb = 0;
  /// Largest |x - dq| / |x| over finite non-zero inputs.
  double maxRelError = 0;
  /// Finite non-zero inputs that quantized to zero.
  int64_t underflowToZero = 0;
  /// Copied from the quantizer's stats.
  int64_t saturated = 0;
  int64_t nonFiniteBlocks = 0;
};

/// SNR in dB of `approx` against `exact` (same length), skipping positions
/// where `exact` is not finite. +inf when they agree exactly.
double snrDb(llvm::ArrayRef<float> exact, llvm::ArrayRef<double> approx);

/// Measures `q` against the row-major [rows, cols] input it was quantized
/// from (the input layout, before any transpose).
FidelityReport measureFidelity(llvm::ArrayRef<float> x, int64_t rows,
                               int64_t cols, const QuantizedTensor &q);

/// FP64 reference GEMM on K-major operands: C[m,n] = sum_k A[m,k] * B[n,k],
/// A row-major [m, k], B row-major [n, k], C row-major [m, n].
std::vector<double> referenceGemm(llvm::ArrayRef<double> a,
                                  llvm::ArrayRef<double> b, int64_t m,
                                  int64_t n, int64_t k);

/// u(P) = 2^-13 sqrt(P / 32): the relative precision of the tensor cores'
/// sums of P FP8 products between promotions into FP32
/// (docs/NUMERICS-CONTRACT.md section 7).
double tensorCoreUnit(int64_t interval);

/// The tensor cores' share of one GEMM entry's allowed error
/// (docs/NUMERICS-CONTRACT.md section 7):
///   12 u(P) sqrt(sum_k (a_k b_k)^2 + sum_j S_j^2)
/// with S_j the sum of the products of promotion interval j (K cut into
/// intervals of P from 0). `a` and `b` are the entry's row of A and row of
/// B (dequantized, the same length K).
///
/// The first term is the typical size of a sum of products with random
/// signs; the second follows the partial sums where the products add up
/// coherently: the tensor cores align each product to the running sum, so
/// their error grows with it.
double gemmEntryAllowance(llvm::ArrayRef<double> a, llvm::ArrayRef<double> b,
                          int64_t interval);

/// The tensor cores' share of one GEMM entry's allowed error when they
/// multiply in f16 (GemmSpec::multipliesInF16; docs/NUMERICS-CONTRACT.md
/// section 7.4): the products are exact and each k16 step adds its 16 to an
/// FP32 sum with at most a few units of its last place lost, so
///   2^-21 sum_j (|R_(j-1)| + |R_j|) + 2^-22 sum_k |a_k b_k|
/// with R_j the sum of the products up to the end of step j (K cut into
/// steps of 16 from 0; R_-1 = 0): a bound, not a typical size, yet some
/// 500 times smaller than what one 32-element block of K left out would
/// typically change (Gaussian data, K = 4096).
double f16MmaEntryAllowance(llvm::ArrayRef<double> a, llvm::ArrayRef<double> b);

/// The output type's share of a GEMM entry's allowed error
/// (docs/NUMERICS-CONTRACT.md section 7): `relative` times |reference| plus
/// `absolute`.
struct OutputRounding {
  double relative = 0;
  double absolute = 0;
  /// The magnitude from which the output type rounds to infinity (f16:
  /// 65520, the largest finite value plus half its spacing).
  double overflow = std::numeric_limits<double>::infinity();

  /// The rounding allowed an output of value `x`.
  double of(double x) const { return relative * std::fabs(x) + absolute; }
};

/// The whole allowed error of one GEMM entry whose FP64 reference is
/// `expected`: the output's rounding plus gemmEntryAllowance(a, b,
/// interval).
double gemmEntryAllowedError(double expected, const OutputRounding &rounding,
                             llvm::ArrayRef<double> a, llvm::ArrayRef<double> b,
                             int64_t interval);

/// The whole allowed error of one entry of an f16-MMA GEMM
/// (docs/NUMERICS-CONTRACT.md section 7.4) whose FP64 reference is
/// `expected` = `sum` (the dot product) + `bias` + `betaC`: the output's
/// rounding, f16MmaEntryAllowance(a, b), and 2^-22 (|sum| + |bias| +
/// |betaC|) for the epilogue's FP32 operations.
double f16MmaEntryAllowedError(double expected, const OutputRounding &rounding,
                               llvm::ArrayRef<double> a,
                               llvm::ArrayRef<double> b, double sum,
                               double bias, double betaC);

/// |got - expected| / allowed, the share of its allowance an entry's error
/// uses: 0 for an exact result (also where nothing is allowed: an entry that
/// must be exactly 0), +inf when `got` is NaN. An infinite `got` of a finite
/// `expected` of its sign is the output type's rounding of a value past
/// `overflow` (OutputRounding::overflow): its share is the distance from
/// `expected` to there.
double
gemmEntryErrorRatio(double got, double expected, double allowed,
                    double overflow = std::numeric_limits<double>::infinity());

} // namespace moss::numerics

#endif // MOSS_NUMERICS_FIDELITY_H
