//===- TensorCoreModel.cpp - The tensor cores' FP8 sums, bit for bit ------===//

#include "moss/Numerics/TensorCoreModel.h"

#include <algorithm>
#include <cassert>
#include <climits>
#include <cmath>
#include <limits>

using namespace moss::numerics;

namespace {
/// An FP8 code as the tensor cores see it: value = significand *
/// 2^exponent with an integer significand, and the exponent they align by
/// (`nominal`: a subnormal code has the format's smallest normal exponent,
/// as its exponent field is 0).
struct CodeParts {
  int16_t significand = 0;
  int16_t exponent = 0;
  int16_t nominal = 0;
  bool special = false; ///< NaN or infinity
};

struct CodeTable {
  CodeParts parts[256];
  explicit CodeTable(Fp8Format format) {
    const int minNormal = format == Fp8Format::E4M3 ? -6 : -14;
    const int mantissaBits = format == Fp8Format::E4M3 ? 3 : 2;
    for (int code = 0; code < 256; ++code) {
      const float value = decodeFp8(uint8_t(code), format);
      CodeParts &p = parts[code];
      p.special = !std::isfinite(value);
      p.nominal = int16_t(std::fabs(value) < std::ldexp(1.0f, minNormal)
                              ? minNormal
                              : std::ilogb(value));
      p.exponent = int16_t(p.nominal - mantissaBits);
      if (!p.special)
        p.significand = int16_t(std::ldexp(value, -p.exponent));
    }
  }
};

const CodeParts *codeParts(Fp8Format format) {
  static const CodeTable e4m3(Fp8Format::E4M3), e5m2(Fp8Format::E5M2);
  return (format == Fp8Format::E4M3 ? e4m3 : e5m2).parts;
}
} // namespace

// In integers: with `base` = E - 13, every addend truncated to a multiple of
// 2^base is a whole number below 2^16 of those units (a product is below
// 2^(nominal + 2)), and 33 of them sum within 22 bits.
double moss::numerics::fp8MmaStep(llvm::ArrayRef<uint8_t> a, Fp8Format formatA,
                                  llvm::ArrayRef<uint8_t> b, Fp8Format formatB,
                                  double c) {
  assert(a.size() == b.size() && a.size() <= 32 &&
         "an FP8 MMA step takes at most 32 products");
  const CodeParts *partsA = codeParts(formatA), *partsB = codeParts(formatB);
  int top = c != 0 ? std::ilogb(c) : INT_MIN;
  bool special = !std::isfinite(c);
  for (size_t k = 0; k < a.size(); ++k) {
    const CodeParts &pa = partsA[a[k]], &pb = partsB[b[k]];
    special |= pa.special || pb.special;
    if (pa.significand != 0 && pb.significand != 0)
      top = std::max(top, pa.nominal + pb.nominal);
  }
  if (special) { // IEEE arithmetic gives the NaN or infinity
    double sum = c;
    for (size_t k = 0; k < a.size(); ++k)
      sum += double(decodeFp8(a[k], formatA)) * decodeFp8(b[k], formatB);
    return sum;
  }
  if (top == INT_MIN)
    return 0;
  const int base = top - kFp8MmaAlignBits;
  int64_t sum = int64_t(std::trunc(std::ldexp(c, -base)));
  for (size_t k = 0; k < a.size(); ++k) {
    const CodeParts &pa = partsA[a[k]], &pb = partsB[b[k]];
    const int product = pa.significand * pb.significand;
    const int shift = pa.exponent + pb.exponent - base;
    if (shift >= 0)
      sum += int64_t(product) << shift;
    else if (shift > -32)
      sum += product < 0 ? -int64_t(-product >> -shift) : product >> -shift;
  }
  if (sum == 0)
    return 0;
  // Truncate to 14 significant bits.
  uint64_t magnitude = sum < 0 ? uint64_t(-sum) : uint64_t(sum);
  const int bits = 64 - __builtin_clzll(magnitude);
  if (bits > kFp8MmaAlignBits + 1) {
    const int drop = bits - (kFp8MmaAlignBits + 1);
    magnitude = magnitude >> drop << drop;
  }
  return std::ldexp(sum < 0 ? -double(magnitude) : double(magnitude), base);
}

double moss::numerics::fp8MmaSum(llvm::ArrayRef<uint8_t> a, Fp8Format formatA,
                                 llvm::ArrayRef<uint8_t> b, Fp8Format formatB) {
  assert(a.size() == b.size() && "fp8MmaSum needs rows of one length");
  double c = 0;
  for (size_t k0 = 0; k0 < a.size(); k0 += 32) {
    const size_t len = std::min<size_t>(32, a.size() - k0);
    c = fp8MmaStep(a.slice(k0, len), formatA, b.slice(k0, len), formatB, c);
  }
  return c;
}

/// Row r's block factor for the elements from k0 on (1 without block
/// scales).
static double localFactor(const QuantizedTensor &q, int64_t r, int64_t k0) {
  if (!q.scheme.hasLocalScales())
    return 1;
  const int64_t i =
      (r / q.scheme.blockRows) * q.localCols + k0 / q.scheme.blockCols;
  if (!q.scheme.localScalesAreE8M0())
    return q.localF32[i];
  const uint8_t code = q.localE8M0[i];
  return code == kE8M0NaNCode ? std::numeric_limits<double>::quiet_NaN()
                              : std::ldexp(1.0, e8m0Exponent(code));
}

static double globalFactor(const QuantizedTensor &q, int64_t r) {
  if (!q.scheme.hasGlobalScales())
    return 1;
  return q.global[q.scheme.globalPerRow() ? r : 0];
}

/// The entry from the sum of its tensor-core terms and their FP32 error
/// terms (`fp32Terms`, before the global scales): the epilogue adds the
/// global scales, bias and beta * C, about four roundings.
static ModelledGemmEntry finishEntry(double sum, double fp32Terms,
                                     double global, double bias, double betaC) {
  ModelledGemmEntry entry;
  entry.value = sum * global + bias + betaC;
  const double epilogue =
      4 * (std::fabs(sum * global) + std::fabs(bias) + std::fabs(betaC));
  // u = 2^-24; (1 + 2^-20) covers the bound's own second-order terms.
  entry.fp32Error = std::ldexp(1.0 + std::ldexp(1.0, -20), -24) *
                    (std::fabs(global) * fp32Terms + epilogue);
  return entry;
}

ModelledGemmEntry moss::numerics::modelPromotedGemmEntry(
    const QuantizedTensor &a, int64_t row, const QuantizedTensor &b,
    int64_t col, int64_t promoteK, double bias, double betaC) {
  assert(a.cols == b.cols && !a.transposed && !b.transposed &&
         "modelPromotedGemmEntry needs K-major operands of one K");
  assert((promoteK == 32 || promoteK == 64 || promoteK == 128) &&
         "the kernels promote every 32, 64 or 128");
  assert((!a.scheme.hasLocalScales() || a.scheme.blockCols % promoteK == 0) &&
         (!b.scheme.hasLocalScales() || b.scheme.blockCols % promoteK == 0) &&
         "block factors must be constant over a promotion interval");
  const int64_t k = a.cols;
  const llvm::ArrayRef<uint8_t> rowA(&a.codes[row * k], k);
  const llvm::ArrayRef<uint8_t> rowB(&b.codes[col * k], k);
  // The kernel's FP32 work, bounded term by term with u = 2^-24: the block
  // factors' product (and a global folded into it) rounds twice, each FMA
  // once relative to the running sum, and with split K or split warpgroups
  // a slice's running sum (at most twice the largest one) and the merges
  // add at most two more of the largest running sum.
  double running = 0, largestRunning = 0, fp32Terms = 0;
  for (int64_t k0 = 0; k0 < k; k0 += promoteK) {
    const int64_t len = std::min(promoteK, k - k0);
    const double term =
        localFactor(a, row, k0) * localFactor(b, col, k0) *
        fp8MmaSum(rowA.slice(k0, len), a.format, rowB.slice(k0, len), b.format);
    running += term;
    largestRunning = std::max(largestRunning, std::fabs(running));
    fp32Terms += 2 * std::fabs(term) + 4 * largestRunning;
  }
  return finishEntry(running, fp32Terms,
                     globalFactor(a, row) * globalFactor(b, col), bias, betaC);
}

ModelledGemmEntry moss::numerics::modelDirectGemmEntry(
    const QuantizedTensor &a, int64_t row, const QuantizedTensor &b,
    int64_t col, llvm::ArrayRef<MmaChain> chains, double bias, double betaC) {
  assert(a.cols == b.cols && !a.transposed && !b.transposed &&
         !a.scheme.hasLocalScales() && !b.scheme.hasLocalScales() &&
         "modelDirectGemmEntry needs K-major operands without block scales");
  const int64_t k = a.cols;
  const llvm::ArrayRef<uint8_t> rowA(&a.codes[row * k], k);
  const llvm::ArrayRef<uint8_t> rowB(&b.codes[col * k], k);
  double sum = 0, magnitudes = 0;
  for (const MmaChain &chain : chains) {
    double c = 0;
    for (auto [begin, end] : chain) {
      assert(begin >= 0 && begin <= end && end <= k && "a chain leaves K");
      for (int64_t k0 = begin; k0 < end; k0 += 32) {
        const int64_t len = std::min<int64_t>(32, end - k0);
        c = fp8MmaStep(rowA.slice(k0, len), a.format, rowB.slice(k0, len),
                       b.format, c);
      }
    }
    sum += c;
    magnitudes += std::fabs(c);
  }
  // Each FP32 addition of the chains (in any order) rounds relative to a
  // partial sum of at most `magnitudes`.
  return finishEntry(sum, double(chains.size()) * magnitudes,
                     globalFactor(a, row) * globalFactor(b, col), bias, betaC);
}

ModelledGemmEntry moss::numerics::modelGemmEntry(
    const QuantizedTensor &a, int64_t row, const QuantizedTensor &b,
    int64_t col, const MmaSchedule &schedule, double bias, double betaC) {
  if (schedule.promoteK > 0)
    return modelPromotedGemmEntry(a, row, b, col, schedule.promoteK, bias,
                                  betaC);
  return modelDirectGemmEntry(a, row, b, col, schedule.chains, bias, betaC);
}

double
moss::numerics::modelledEntryAllowedError(const ModelledGemmEntry &entry,
                                          const OutputRounding &rounding) {
  return rounding.of(entry.value) + entry.fp32Error * (1 + rounding.relative);
}
