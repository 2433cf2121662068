//===- TensorCoreModel.h - The tensor cores' FP8 sums ---------*- C++ -*-===//
//
// How sm_90's FP8 wgmma adds its products, as fitted on the H200
// (tools/studies/fp8_mma_rounding_probe.py; docs/NUMERICS-CONTRACT.md
// section 7), and what a GEMM entry is under that model. The GPU tests hold
// the kernel to it.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_NUMERICS_TENSORCOREMODEL_H
#define MOSS_NUMERICS_TENSORCOREMODEL_H

#include "moss/Numerics/FP8.h"
#include "moss/Numerics/Fidelity.h"
#include "moss/Numerics/Quantize.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

#include <cstdint>
#include <utility>
#include <vector>

namespace moss::numerics {

/// Bits an FP8 MMA step keeps below its largest exponent.
constexpr int kFp8MmaAlignBits = 13;

/// One FP8 wgmma step (at most 32 products) added to the accumulator `c`:
///  - E is the largest of c's exponent and the non-zero products' nominal
///    exponents (the sum of the two codes' exponents; a subnormal code
///    counts as the format's smallest normal exponent);
///  - every product and c are truncated toward zero to a multiple of
///    2^(E - 13);
///  - their exact sum is truncated toward zero to 14 significant bits.
/// `a` and `b` are FP8 codes of one length; NaN codes give NaN.
double fp8MmaStep(llvm::ArrayRef<uint8_t> a, Fp8Format formatA,
                  llvm::ArrayRef<uint8_t> b, Fp8Format formatB, double c);

/// sum_k a_k b_k as the tensor cores add it without promotion: steps of 32
/// chained from a zero accumulator.
double fp8MmaSum(llvm::ArrayRef<uint8_t> a, Fp8Format formatA,
                 llvm::ArrayRef<uint8_t> b, Fp8Format formatB);

/// A GEMM entry under the model.
struct ModelledGemmEntry {
  /// In exact arithmetic after the tensor cores' sums.
  double value = 0;
  /// A bound on what the kernel's FP32 arithmetic (the promotions, factor
  /// products, split-K and epilogue) may add to |D - value| before the
  /// output's own rounding.
  double fp32Error = 0;
};

/// Entry (row, col) of a promoted GEMM (A [m, K], B [n, K], both K-major)
/// under the model: every `promoteK` of K (32, 64 or 128, within which both
/// operands' block scales are constant) the tensor cores' sum times the
/// block factors, added up, times the global scales, plus `bias` and
/// `betaC`.
ModelledGemmEntry modelPromotedGemmEntry(const QuantizedTensor &a, int64_t row,
                                         const QuantizedTensor &b, int64_t col,
                                         int64_t promoteK, double bias = 0,
                                         double betaC = 0);

/// K ranges [begin, end) (multiples of 32 long) that the tensor cores sum,
/// in this order, into one accumulator.
using MmaChain = llvm::SmallVector<std::pair<int64_t, int64_t>, 4>;

/// Entry (row, col) of an unpromoted GEMM (operands without block scales)
/// under the model: the tensor cores' sum of each chain (which between them
/// cover K once), added up, times the global scales, plus `bias` and
/// `betaC`.
ModelledGemmEntry modelDirectGemmEntry(const QuantizedTensor &a, int64_t row,
                                       const QuantizedTensor &b, int64_t col,
                                       llvm::ArrayRef<MmaChain> chains,
                                       double bias = 0, double betaC = 0);

/// How a kernel's tensor cores cut K: a promotion into FP32 every
/// `promoteK` of K (32, 64 or 128) or, with 0, the running sums `chains`.
struct MmaSchedule {
  int64_t promoteK = 0;
  std::vector<MmaChain> chains;
};

/// Entry (row, col) of a GEMM whose kernel follows `schedule`:
/// modelPromotedGemmEntry or modelDirectGemmEntry.
ModelledGemmEntry modelGemmEntry(const QuantizedTensor &a, int64_t row,
                                 const QuantizedTensor &b, int64_t col,
                                 const MmaSchedule &schedule, double bias = 0,
                                 double betaC = 0);

/// What a modelled entry may differ from `entry.value` by: the output's
/// rounding and the FP32 bound.
double modelledEntryAllowedError(const ModelledGemmEntry &entry,
                                 const OutputRounding &rounding);

} // namespace moss::numerics

#endif // MOSS_NUMERICS_TENSORCOREMODEL_H
