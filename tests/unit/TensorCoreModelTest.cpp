//===- TensorCoreModelTest.cpp - The FP8 MMA model against the H200 -------===//

#include "moss/Numerics/TensorCoreModel.h"
#include "moss/Numerics/Fidelity.h"

#include "gtest/gtest.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

using namespace moss::numerics;

namespace {

std::vector<uint8_t> fromHex(const std::string &hex) {
  std::vector<uint8_t> bytes;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    bytes.push_back(uint8_t(std::stoul(hex.substr(i, 2), nullptr, 16)));
  return bytes;
}

/// E4M3 code of 2^e, e in [-9, 8] (subnormal below -6).
uint8_t e4m3PowerOfTwo(int e) {
  return e >= -6 ? uint8_t((e + 7) << 3) : uint8_t(1 << (e + 9));
}

} // namespace

// Dots measured on an H200 on 2026-11-29 with `python3
// tools/studies/fp8_mma_rounding_probe.py collect DIR`: E4M3 codes of A's
// row and B's row, and what the tensor cores returned (one Triton FP8 dot,
// no promotion). Each was picked where the H200 differs from the exact sum
// and from the model's nearest rivals.
TEST(TensorCoreModel, ReproducesH200Dots) {
  struct Dot {
    const char *a, *b;
    double h200;
  };
  const Dot dots[] = {
      // student_e4m3_e4m3_k32 (49, 47): exact 3675.771484375
      {"cf4adfd055cecac54bd2394ab540d54b49bbd84a52c04c49cab56f16d7b54dc8",
       "39b4d6c361d3d1eb33dfcd5d4a4e40d9ccd8d148c565d4d969da5945dd5ac5ca",
       3675.75},
      // student_e4m3_e4m3_k32 (42, 58): exact 621.5543212890625
      {"c9c45ad83562cb625b5eb95ccbc849424f61d14e484e4cc9d757d051e1c01f40",
       "bd3e5ed3c63db4444eca365cd0d2d650ddcd52d058cc3f3ca95159d14f45a5d3",
       621.5625},
      // outlier_e4m3_e4m3_k32 (50, 45): exact 892.2186279296875
      {"8142c03cbd2bb9c6473fbd472634b640bf4534ba6f7c33c4be21383a35c9bd09",
       "c449a57cbd6933c238c19c4030bec149be33b43dc63e46afba2f38b8af3e2233",
       892.125},
      // outlier_e4m3_e4m3_k32 (26, 55): exact -656.490234375
      {"c3bfc3af2e3a443cba473c0f3f3ebeb5c045bb243810449d72c5643a3b39ab42",
       "424ab0ba33c4bd2d443e22c3343244a0b19e3c362b9a3e3d093bbe2d483128f6",
       -656.5},
      // outlier_e4m3_e4m3_k64 (43, 63): exact -172865.19677734375
      {"3eb837c2b23f37ca41a9be4142a12f4ab33549b9bda4ca1e34b23e16c7ba3d35412b3ab"
       "b2f473e3b99c539c139bc40fd45bd46b5bdc3c6c833bbc93bbd843539",
       "ada241446bbdc024b241e968393eb6c2b3a43043c0c03b413fab39c236b442c137c6b8b"
       "832443ac19ebcbcbcbf293c7d9d3a39bfb7bc3a39bab44a33b2a5411f",
       -172880.0},
      // student_e4m3_e4m3_k128 (22, 17): exact -4079.796875
      {"bbd5d1bfd9d9cb44bcd749d4b554c151505a5d4d48b95bc94bc231c0d2c8cdb56ac4504"
       "ad3a2339263bfcd2b5064453d484a5850d2d9d945c2d4e2603ac6d2a950ce5052592b50"
       "b95146d5b6502fee6435df56bd5751c840cb595a5a42524eca4b4464cdced2bf4f5534c"
       "6a9d23158593f4c4e5ae464c8e1dec9d049d03736c5",
       "cc4e5d504b3926dfc4d35cdcddbf533ed2d95948c43fafd6bad555ac41d0ab5a52dc5ad"
       "557e3ccdc4fd64a62c6bdcadf4758e16734c04770c34ac73e51c95061bccae665dc495f"
       "cf4dc1323d5151d2434a51d7c1ac39d146c858e7d562b44aca4f6badb647c6cc433a324"
       "bd3524b66e65b50453b42ed4b5bd254345659d54dcb",
       -4081.0},
  };
  for (const Dot &dot : dots) {
    std::vector<uint8_t> a = fromHex(dot.a), b = fromHex(dot.b);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(fp8MmaSum(a, Fp8Format::E4M3, b, Fp8Format::E4M3), dot.h200)
        << "K = " << a.size() << ", A " << dot.a;
  }
}

// The H200's hand-made dots (same study): 1 plus 31 products of +-2^-s keeps
// them down to 2^-13 and drops them from 2^-14 on, whatever their sign; a
// subnormal code aligns by its format's smallest normal exponent, and a zero
// product does not count.
TEST(TensorCoreModel, AlignsToThirteenBitsBelowTheNominalExponent) {
  const Fp8Format e4m3 = Fp8Format::E4M3;
  for (int sign : {1, -1}) {
    for (int s : {13, 14}) {
      std::vector<uint8_t> a(32, e4m3PowerOfTwo(-(s / 2)));
      std::vector<uint8_t> b(32, e4m3PowerOfTwo(-(s - s / 2)));
      a[0] = b[0] = e4m3PowerOfTwo(0);
      if (sign < 0)
        for (int k = 1; k < 32; ++k)
          a[k] |= 0x80;
      const double kept = s == 13 ? sign * 31 * std::ldexp(1.0, -13) : 0.0;
      EXPECT_EQ(fp8MmaSum(a, e4m3, b, e4m3), 1.0 + kept)
          << "sign " << sign << ", s " << s;
    }
  }
  // 2^-9 (subnormal) times 448, then 31 x 2^-12: E = -6 + 8, so 2^-12 is
  // lost. With 0 instead of 2^-9 they are all kept.
  std::vector<uint8_t> a(32, e4m3PowerOfTwo(-6)), b(32, e4m3PowerOfTwo(-6));
  b[0] = 0x7E; // 448
  a[0] = 0x01; // 2^-9
  EXPECT_EQ(fp8MmaSum(a, e4m3, b, e4m3), 0.875);
  a[0] = 0x00;
  EXPECT_EQ(fp8MmaSum(a, e4m3, b, e4m3), 31 * std::ldexp(1.0, -12));
}

TEST(TensorCoreModel, TruncatesTheSumToFourteenBits) {
  // 1 + 1 + 2^-12 + 2^-12 + 2^-13: exact 2 + 2^-11 + 2^-13 needs 15 bits;
  // the sum keeps 2 + 2^-11 (13 fraction bits above 2^1).
  const Fp8Format e4m3 = Fp8Format::E4M3;
  std::vector<uint8_t> a = {e4m3PowerOfTwo(0), e4m3PowerOfTwo(0),
                            e4m3PowerOfTwo(-6), e4m3PowerOfTwo(-6),
                            e4m3PowerOfTwo(-6)};
  std::vector<uint8_t> b = {e4m3PowerOfTwo(0), e4m3PowerOfTwo(0),
                            e4m3PowerOfTwo(-6), e4m3PowerOfTwo(-6),
                            e4m3PowerOfTwo(-7)};
  EXPECT_EQ(fp8MmaStep(a, e4m3, b, e4m3, 0.0), 2.0 + std::ldexp(1.0, -11));
  // The accumulator's exponent counts like the products': beside c = 1, a
  // product of 2^-14 is lost.
  std::vector<uint8_t> one = {e4m3PowerOfTwo(-7)}, tiny = {e4m3PowerOfTwo(-7)};
  EXPECT_EQ(fp8MmaStep(one, e4m3, tiny, e4m3, 1.0), 1.0);
}

TEST(TensorCoreModel, NaNCodesGiveNaN) {
  std::vector<uint8_t> a = {0x38, 0x7F}, b = {0x38, 0x38};
  EXPECT_TRUE(std::isnan(fp8MmaSum(a, Fp8Format::E4M3, b, Fp8Format::E4M3)));
}

// With codes whose products the tensor cores add exactly (a few significant
// bits, a narrow range), a promoted entry is the FP64 GEMM of the
// dequantized operands: the block factors, globals and epilogue are applied
// as the schemes define them.
TEST(TensorCoreModel, PromotedEntryAppliesTheScales) {
  std::mt19937_64 rng(std::random_device{}());
  const uint8_t narrowCodes[] = {0x38, 0xB8, 0x3C, 0xBC, 0x40, 0x30, 0xB0};
  const int64_t m = 5, n = 7, k = 384;
  auto codes = [&](int64_t rows) {
    QuantizedTensor q;
    q.rows = rows;
    q.cols = k;
    for (int64_t i = 0; i < rows * k; ++i)
      q.codes.push_back(narrowCodes[rng() % std::size(narrowCodes)]);
    return q;
  };
  std::uniform_real_distribution<float> factor(0.25f, 4.0f);
  // A: per-group 1x128 (FP32 factors); B: per-group 128x128.
  QuantizedTensor groupA = codes(m), groupB = codes(n);
  groupA.scheme = ScalingScheme::perGroup(1, 128);
  groupA.localRows = m;
  groupB.scheme = ScalingScheme::perGroup(128, 128);
  groupB.localRows = 1;
  groupA.localCols = groupB.localCols = k / 128;
  for (int64_t i = 0; i < m * k / 128; ++i)
    groupA.localF32.push_back(factor(rng));
  for (int64_t i = 0; i < k / 128; ++i)
    groupB.localF32.push_back(factor(rng));
  // A: two-level with a global per row; B: per tensor.
  QuantizedTensor mossA = codes(m), tensorB = codes(n);
  mossA.scheme = ScalingScheme::twoLevel(GlobalScope::Row);
  mossA.localRows = m;
  mossA.localCols = k / 32;
  for (int64_t i = 0; i < m * k / 32; ++i)
    mossA.localE8M0.push_back(encodeE8M0(int(rng() % 9) - 4));
  for (int64_t i = 0; i < m; ++i)
    mossA.global.push_back(factor(rng));
  tensorB.scheme = ScalingScheme::perTensor();
  tensorB.global.push_back(factor(rng));

  struct Pair {
    const QuantizedTensor &a, &b;
    int64_t promoteK;
  };
  for (const Pair &pair : {Pair{groupA, groupB, 128}, Pair{mossA, tensorB, 32},
                           Pair{mossA, groupB, 32}}) {
    std::vector<double> ref =
        referenceGemm(dequantize(pair.a), dequantize(pair.b), m, n, k);
    // The sums of |products|: FP64's rounding scales with them, not with a
    // result that cancels.
    auto absolute = [](std::vector<double> v) {
      for (double &x : v)
        x = std::fabs(x);
      return v;
    };
    std::vector<double> magnitudes =
        referenceGemm(absolute(dequantize(pair.a)),
                      absolute(dequantize(pair.b)), m, n, k);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const double bias = 0.25 * double(j), betaC = -0.5 * double(i);
        ModelledGemmEntry e = modelPromotedGemmEntry(
            pair.a, i, pair.b, j, pair.promoteK, bias, betaC);
        const double expected = ref[i * n + j] + bias + betaC;
        EXPECT_NEAR(e.value, expected,
                    1e-12 * (magnitudes[i * n + j] + std::fabs(expected) + 1))
            << pair.a.scheme.str() << " x " << pair.b.scheme.str() << " (" << i
            << ", " << j << ")";
        // At least the output's FP32 rounding, and far below the tensor
        // cores' 2^-13 of the magnitudes involved.
        EXPECT_GE(e.fp32Error, std::ldexp(std::fabs(e.value), -24));
        EXPECT_LE(e.fp32Error, std::ldexp(std::fabs(e.value) + 1e3, -14));
      }
  }
}

// An unpromoted entry is the sum of its chains' tensor-core sums: where the
// chains cut K changes the result only through the tensor cores' rounding.
TEST(TensorCoreModel, DirectEntrySumsItsChains) {
  std::mt19937_64 rng(std::random_device{}());
  const int64_t k = 512;
  auto perTensor = [&](float global) {
    QuantizedTensor q;
    q.scheme = ScalingScheme::perTensor();
    q.rows = 1;
    q.cols = k;
    for (int64_t i = 0; i < k; ++i) {
      uint8_t code;
      do
        code = uint8_t(rng());
      while ((code & 0x7F) == 0x7F);
      q.codes.push_back(code);
    }
    q.global.push_back(global);
    return q;
  };
  const QuantizedTensor a = perTensor(0.75f), b = perTensor(1.5f);
  const Fp8Format e4m3 = Fp8Format::E4M3;
  const llvm::ArrayRef<uint8_t> rowA(a.codes), rowB(b.codes);
  const double whole = fp8MmaSum(rowA, e4m3, rowB, e4m3);
  const double halves =
      fp8MmaSum(rowA.take_front(256), e4m3, rowB.take_front(256), e4m3) +
      fp8MmaSum(rowA.drop_front(256), e4m3, rowB.drop_front(256), e4m3);
  ModelledGemmEntry one = modelDirectGemmEntry(a, 0, b, 0, {{{0, k}}}, 2.0);
  EXPECT_EQ(one.value, whole * 0.75 * 1.5 + 2.0);
  ModelledGemmEntry two =
      modelDirectGemmEntry(a, 0, b, 0, {{{0, 256}}, {{256, k}}}, 2.0);
  EXPECT_EQ(two.value, halves * 0.75 * 1.5 + 2.0);
  // Two ranges of one chain are one running sum.
  ModelledGemmEntry joined =
      modelDirectGemmEntry(a, 0, b, 0, {{{0, 256}, {256, k}}}, 2.0);
  EXPECT_EQ(joined.value, one.value);
  EXPECT_GE(two.fp32Error, std::ldexp(std::fabs(two.value), -24));
}
