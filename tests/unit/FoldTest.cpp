//===- FoldTest.cpp - The fold of E8M0 block factors, on the host ---------===//
//
// foldCode against a brute-force nearest-value search over every code, the
// fold's per-element bound (docs/NUMERICS-CONTRACT.md section 8) on
// adversarial operands, and what it does to a GEMM against the exact
// two-level product and the FP64 product of the unquantized inputs.
//
//===----------------------------------------------------------------------===//

#include "moss/Numerics/Fold.h"
#include "MustQuantize.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

using namespace moss::numerics;
using moss::numerics::test::mustQuantize;

namespace {

/// The FP8 value nearest to `value` by a search over all codes; of two
/// equally near values, the one whose code ends in an even mantissa bit.
/// Independent of foldCode.
double nearestValue(double value, Fp8Format format) {
  double best = INFINITY, bestDistance = INFINITY;
  bool bestEven = false;
  for (int c = 0; c < 256; ++c) {
    double v = decodeFp8(uint8_t(c), format);
    if (!std::isfinite(v))
      continue;
    double distance = std::fabs(v - value);
    bool even = (c & 1) == 0;
    if (distance < bestDistance ||
        (distance == bestDistance && v != best && even && !bestEven)) {
      best = v;
      bestDistance = distance;
      bestEven = even;
    }
  }
  return best;
}

class FoldFormatTest : public ::testing::TestWithParam<Fp8Format> {};

TEST_P(FoldFormatTest, FoldCodeIsTheNearestValueForEveryCodeAndShift) {
  Fp8Format format = GetParam();
  for (int shift = 0; shift <= 40; ++shift)
    for (int c = 0; c < 256; ++c) {
      double value = decodeFp8(uint8_t(c), format);
      uint8_t folded = foldCode(uint8_t(c), shift, format);
      if (!std::isfinite(value)) {
        EXPECT_EQ(folded, c) << "non-finite codes stay as they are";
        continue;
      }
      double exact = std::ldexp(value, -shift);
      double got = decodeFp8(folded, format);
      ASSERT_EQ(got, nearestValue(exact, format))
          << "code 0x" << std::hex << c << std::dec << " shift " << shift;
      EXPECT_EQ(std::signbit(got), std::signbit(value)) << "sign of zero";
    }
}

TEST_P(FoldFormatTest, ShiftLimitIsWhereEveryFiniteCodeBecomesZero) {
  Fp8Format format = GetParam();
  int limit = getFoldShiftLimit(format);
  bool anyNonZeroBelow = false;
  for (int c = 0; c < 256; ++c) {
    if (!std::isfinite(decodeFp8(uint8_t(c), format)))
      continue;
    EXPECT_EQ(decodeFp8(foldCode(uint8_t(c), limit, format), format), 0.0);
    if (decodeFp8(foldCode(uint8_t(c), limit - 1, format), format) != 0.0)
      anyNonZeroBelow = true;
  }
  EXPECT_TRUE(anyNonZeroBelow) << "the limit is the smallest such shift";
}

INSTANTIATE_TEST_SUITE_P(
    Formats, FoldFormatTest,
    ::testing::Values(Fp8Format::E4M3, Fp8Format::E5M2),
    [](const ::testing::TestParamInfo<Fp8Format> &info) {
      return std::string(info.param == Fp8Format::E4M3 ? "E4M3" : "E5M2");
    });

/// A [rows, cols] operand whose blocks span `decades` powers of two within a
/// row (block b of a row is scaled 2^-(b * span / blocks)), with rows that
/// are all zero, a NaN, subnormal-heavy blocks and one row 1e-6 smaller.
std::vector<float> adversarialOperand(int64_t rows, int64_t cols, int span,
                                      std::mt19937 &rng) {
  std::normal_distribution<float> normal;
  std::vector<float> x(rows * cols);
  int64_t blocks = cols / 32;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      int64_t b = c / 32;
      float scale =
          std::ldexp(1.0f, -int(b * span / std::max<int64_t>(1, blocks - 1)));
      // Subnormal-heavy blocks: one large value among tiny ones.
      if (b % 5 == 3)
        scale *= (c % 32 == 0) ? 1.0f : 1e-4f;
      x[r * cols + c] = normal(rng) * scale;
    }
  for (int64_t c = 0; c < cols; ++c) {
    x[1 * cols + c] = 0.0f;   // a row of zeros
    x[2 * cols + c] *= 1e-6f; // a row 1e-6 smaller
  }
  x[3 * cols + 40] = NAN; // a NaN block in row 3
  return x;
}

struct FoldCase {
  BlockScaleFold fold;
  GlobalScope global;
  Fp8Format format;
  int span;
};

void PrintTo(const FoldCase &c, std::ostream *os) {
  *os << getName(c.fold) << " fold, "
      << (c.global == GlobalScope::Row ? "row" : "tensor") << " global, "
      << (c.format == Fp8Format::E4M3 ? "e4m3" : "e5m2") << ", 2^" << c.span;
}

class FoldOperandTest : public ::testing::TestWithParam<FoldCase> {};

/// The reference exponent E of (row, k) as the contract defines it.
int referenceExponent(const QuantizedTensor &q, int64_t row, int64_t col,
                      BlockScaleFold fold) {
  int64_t group = fold == BlockScaleFold::Row ? q.cols : kFoldGroupCols;
  int64_t begin = col / group * group / q.scheme.blockCols;
  int64_t end = begin + group / q.scheme.blockCols;
  int e = kE8M0MinExponent;
  for (int64_t b = begin; b < end; ++b) {
    uint8_t code = q.localE8M0[row * q.localCols + b];
    if (code != kE8M0NaNCode)
      e = std::max(e, e8m0Exponent(code));
  }
  return e;
}

TEST_P(FoldOperandTest, EveryElementWithinHalfASubnormalOfItsReference) {
  const FoldCase &p = GetParam();
  std::mt19937 rng(std::random_device{}());
  const int64_t rows = 9, cols = 1024;
  std::vector<float> x = adversarialOperand(rows, cols, p.span, rng);
  QuantizeOptions options;
  options.scheme = ScalingScheme::twoLevel(p.global);
  options.format = p.format;
  QuantizedTensor exact = mustQuantize(x, rows, cols, options);
  llvm::Expected<QuantizedTensor> folded = foldBlockScales(exact, p.fold);
  ASSERT_TRUE(bool(folded)) << llvm::toString(folded.takeError());
  EXPECT_EQ(folded->scheme.kind, p.fold == BlockScaleFold::Row
                                     ? ScalingKind::PerRow
                                     : ScalingKind::PerGroup);
  EXPECT_EQ(folded->stats.nonFiniteBlocks, exact.stats.nonFiniteBlocks);

  std::vector<double> e = dequantize(exact), f = dequantize(*folded);
  // Half the smallest subnormal step, relative to a factor of 1.
  const double halfStep = p.format == Fp8Format::E4M3 ? 0x1p-10 : 0x1p-17;
  int64_t changed = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double global = exact.global[p.global == GlobalScope::Row ? r : 0];
    for (int64_t c = 0; c < cols; ++c) {
      double ev = e[r * cols + c], fv = f[r * cols + c];
      if (std::isnan(ev)) {
        EXPECT_TRUE(std::isnan(fv)) << "a NaN block stays NaN at " << r;
        continue;
      }
      double bound =
          halfStep * std::ldexp(global, referenceExponent(exact, r, c, p.fold));
      ASSERT_LE(std::fabs(fv - ev), bound) << "row " << r << " col " << c;
      changed += fv != ev;
      // Values that stay in the format's normal range do not move.
      double normalMin = p.format == Fp8Format::E4M3 ? 0x1p-6 : 0x1p-14;
      if (std::fabs(ev) >=
          normalMin *
              std::ldexp(global, referenceExponent(exact, r, c, p.fold))) {
        ASSERT_EQ(fv, ev) << "row " << r << " col " << c;
      }
    }
  }
  // E4M3's normal range spans 2^15: wider rows reach its subnormals.
  if (p.format == Fp8Format::E4M3 && p.span >= 20) {
    EXPECT_GT(changed, 0) << "the test data never reaches the subnormals";
  }
  for (int64_t c = 0; c < cols; ++c)
    EXPECT_EQ(f[1 * cols + c], 0.0) << "the zero row";
}

/// Relative Frobenius error of `got` against `ref` over finite entries.
double relativeError(const std::vector<double> &got,
                     const std::vector<double> &ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(ref[i]))
      continue;
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den == 0 ? 0 : std::sqrt(num / den);
}

TEST_P(FoldOperandTest, GemmStaysWithinTheBoundAndKeepsTheSmallRow) {
  const FoldCase &p = GetParam();
  std::mt19937 rng(std::random_device{}());
  const int64_t m = 9, n = 16, k = 1024;
  std::vector<float> x = adversarialOperand(m, k, p.span, rng);
  std::vector<float> w(n * k);
  std::normal_distribution<float> normal;
  for (float &v : w)
    v = normal(rng);
  QuantizeOptions aOptions;
  aOptions.scheme = ScalingScheme::twoLevel(p.global);
  aOptions.format = p.format;
  QuantizeOptions bOptions;
  bOptions.scheme = ScalingScheme::perTensor();
  QuantizedTensor a = mustQuantize(x, m, k, aOptions);
  QuantizedTensor b = mustQuantize(w, n, k, bOptions);
  llvm::Expected<QuantizedTensor> folded = foldBlockScales(a, p.fold);
  ASSERT_TRUE(bool(folded)) << llvm::toString(folded.takeError());

  std::vector<double> ea = dequantize(a), fa = dequantize(*folded),
                      db = dequantize(b);
  const double halfStep = p.format == Fp8Format::E4M3 ? 0x1p-10 : 0x1p-17;
  std::vector<double> exactC(m * n), foldC(m * n), inputC(m * n);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c) {
      double se = 0, sf = 0, sx = 0, bound = 0;
      double global = a.global[p.global == GlobalScope::Row ? r : 0];
      for (int64_t i = 0; i < k; ++i) {
        se += ea[r * k + i] * db[c * k + i];
        sf += fa[r * k + i] * db[c * k + i];
        sx += double(x[r * k + i]) * double(w[c * k + i]);
        bound += std::fabs(db[c * k + i]) * halfStep *
                 std::ldexp(global, referenceExponent(a, r, i, p.fold));
      }
      exactC[r * n + c] = se;
      foldC[r * n + c] = sf;
      inputC[r * n + c] = sx;
      if (std::isnan(se)) {
        EXPECT_TRUE(std::isnan(sf)) << "row " << r << " (a NaN block)";
        continue;
      }
      // The bound, with room for FP64's own sums (K products).
      EXPECT_LE(std::fabs(sf - se), bound * (1 + 1e-12) + 1e-300)
          << "entry " << r << "," << c;
    }
  // The row 1e-6 smaller keeps its values (a tensor-scale fold would zero
  // it): its error against the exact product stays at the fold's scale.
  std::vector<double> smallExact(exactC.begin() + 2 * n,
                                 exactC.begin() + 3 * n),
      smallFold(foldC.begin() + 2 * n, foldC.begin() + 3 * n);
  EXPECT_LT(relativeError(smallFold, smallExact), 1e-3);
  // Next to the quantization itself the fold is small.
  double foldError = relativeError(foldC, exactC);
  double quantError = relativeError(exactC, inputC);
  EXPECT_LT(foldError, 0.1 * quantError + 1e-12)
      << "fold " << foldError << " quantization " << quantError;
  std::printf("[ fold ] %s fold, %s global, %s, 2^%d: relative error %.2e "
              "against the exact two-level product (quantization %.2e)\n",
              getName(p.fold), p.global == GlobalScope::Row ? "row" : "tensor",
              p.format == Fp8Format::E4M3 ? "e4m3" : "e5m2", p.span, foldError,
              quantError);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, FoldOperandTest,
    ::testing::Values(
        FoldCase{BlockScaleFold::Row, GlobalScope::Tensor, Fp8Format::E4M3, 10},
        FoldCase{BlockScaleFold::Row, GlobalScope::Tensor, Fp8Format::E4M3, 20},
        FoldCase{BlockScaleFold::Row, GlobalScope::Tensor, Fp8Format::E4M3, 40},
        FoldCase{BlockScaleFold::Row, GlobalScope::Row, Fp8Format::E4M3, 20},
        FoldCase{BlockScaleFold::K128, GlobalScope::Tensor, Fp8Format::E4M3,
                 40},
        FoldCase{BlockScaleFold::K128, GlobalScope::Row, Fp8Format::E4M3, 20},
        FoldCase{BlockScaleFold::Row, GlobalScope::Tensor, Fp8Format::E5M2, 40},
        FoldCase{BlockScaleFold::K128, GlobalScope::Row, Fp8Format::E5M2, 20}),
    [](const ::testing::TestParamInfo<FoldCase> &info) {
      const FoldCase &c = info.param;
      return std::string(c.fold == BlockScaleFold::Row ? "Row" : "K128") +
             (c.global == GlobalScope::Row ? "RowGlobal" : "TensorGlobal") +
             (c.format == Fp8Format::E4M3 ? "E4M3" : "E5M2") + "Span" +
             std::to_string(c.span);
    });

TEST(FoldTest, RejectsWhatCannotFold) {
  QuantizedTensor perTensor;
  perTensor.scheme = ScalingScheme::perTensor();
  llvm::Expected<QuantizedTensor> r =
      foldBlockScales(perTensor, BlockScaleFold::Row);
  ASSERT_FALSE(bool(r));
  EXPECT_NE(llvm::toString(r.takeError()).find("has none"), std::string::npos);
  llvm::Error e = checkFold(ScalingScheme::twoLevel(GlobalScope::Tensor), 96,
                            BlockScaleFold::K128);
  ASSERT_TRUE(bool(e));
  EXPECT_NE(llvm::toString(std::move(e)).find("K=96"), std::string::npos);
  EXPECT_FALSE(bool(checkFold(ScalingScheme::twoLevel(GlobalScope::Tensor), 96,
                              BlockScaleFold::Row)));
}

TEST(FoldTest, MxfpFoldsWithoutAGlobal) {
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal;
  const int64_t rows = 4, cols = 256;
  std::vector<float> x(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i)
    x[i] = normal(rng) * std::ldexp(1.0f, int(i % cols / 32) * 3 - 10);
  QuantizeOptions options;
  options.scheme = ScalingScheme::mxfp8();
  QuantizedTensor q = mustQuantize(x, rows, cols, options);
  llvm::Expected<QuantizedTensor> f = foldBlockScales(q, BlockScaleFold::Row);
  ASSERT_TRUE(bool(f)) << llvm::toString(f.takeError());
  ASSERT_EQ(f->global.size(), size_t(rows));
  for (int64_t r = 0; r < rows; ++r) {
    int e = referenceExponent(q, r, 0, BlockScaleFold::Row);
    EXPECT_EQ(f->global[r], std::ldexp(1.0f, e)) << "row " << r;
  }
}

} // namespace
