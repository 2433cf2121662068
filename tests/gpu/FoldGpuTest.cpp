//===- FoldGpuTest.cpp - The fold on the GPU, and GEMMs that fold ---------===//
//
// runtime::GpuFolder against the host rule (numerics::foldBlockScales), bit
// for bit, on adversarial operands; then GEMMs whose spec folds, through
// moss::gemm, against the tensor-core model of the folded operands
// (tools/common GemmCheck), and the kernel that folds A itself against the
// fold pass, bit for bit. Skips without a Hopper GPU.
//
//===----------------------------------------------------------------------===//

#include "GemmCheck.h"
#include "GemmProblem.h"
#include "HopperSkip.h"
#include "QuantizerTestSupport.h"

#include "moss/Gemm/Gemm.h"
#include "moss/Numerics/Fold.h"
#include "moss/Runtime/Api/Folder.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

using namespace moss;
using namespace moss::numerics;
using moss::quantizetest::DeviceBuffer;
using moss::quantizetest::gpu;

namespace {

/// Rows whose 32-blocks span up to 2^span, with zero rows, a NaN, tiny
/// (subnormal-heavy) blocks and a row 1e-6 smaller than the others.
std::vector<float> adversarial(int64_t rows, int64_t cols, int span,
                               std::mt19937 &rng) {
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> exponent(0, span);
  std::vector<float> x(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    float rowScale = r % 7 == 2 ? 1e-6f : 1.0f;
    for (int64_t b = 0; b < cols / 32; ++b) {
      float blockScale = std::ldexp(rowScale, -exponent(rng));
      for (int64_t c = b * 32; c < (b + 1) * 32; ++c)
        x[r * cols + c] = normal(rng) * blockScale *
                          (b % 5 == 3 && c % 32 != 0 ? 1e-4f : 1.0f);
    }
    if (r % 11 == 1)
      std::fill(x.begin() + r * cols, x.begin() + (r + 1) * cols, 0.0f);
  }
  if (rows > 3)
    x[3 * cols + cols / 2] = NAN;
  return x;
}

struct FoldCase {
  ScalingScheme scheme;
  Fp8Format format;
  BlockScaleFold fold;
  int64_t rows, cols;
};

std::string describe(const FoldCase &c) {
  return c.scheme.str() + (c.format == Fp8Format::E4M3 ? " e4m3" : " e5m2") +
         " fold " + getName(c.fold) + " " + std::to_string(c.rows) + "x" +
         std::to_string(c.cols);
}

std::vector<FoldCase> foldCases() {
  std::vector<FoldCase> cases;
  std::vector<ScalingScheme> schemes = {
      ScalingScheme::twoLevel(GlobalScope::Tensor),
      ScalingScheme::twoLevel(GlobalScope::Row),
      ScalingScheme::twoLevel(GlobalScope::Tensor, 64),
      ScalingScheme::twoLevel(GlobalScope::Row, 128), ScalingScheme::mxfp8()};
  for (const ScalingScheme &s : schemes)
    for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2})
      for (BlockScaleFold fold : {BlockScaleFold::Row, BlockScaleFold::K128})
        for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 128},
                                  {7, 4096},
                                  {333, 1152},
                                  {64, 16384}})
          cases.push_back({s, f, fold, rows, cols});
  // Row folds take any K that holds whole blocks.
  cases.push_back({ScalingScheme::twoLevel(GlobalScope::Tensor),
                   Fp8Format::E4M3, BlockScaleFold::Row, 5, 32});
  cases.push_back(
      {ScalingScheme::mxfp8(), Fp8Format::E4M3, BlockScaleFold::Row, 9, 96});
  return cases;
}

/// Folds `q` on the GPU and expects the codes and factors of the host rule
/// (foldBlockScales), bit for bit.
void expectFoldMatchesTheHost(runtime::GpuFolder &folder,
                              const QuantizedTensor &q, BlockScaleFold fold) {
  llvm::Expected<QuantizedTensor> expected = foldBlockScales(q, fold);
  ASSERT_TRUE(bool(expected)) << llvm::toString(expected.takeError());

  runtime::FoldSpec spec{q.rows, q.cols, q.format, q.scheme, fold};
  DeviceBuffer codes(q.codes.size()), e8m0(q.localE8M0.size()),
      global(q.global.size() * 4), outCodes(q.codes.size()),
      outFactors(size_t(runtime::getFoldFactorCount(spec)) * 4);
  codes.upload(q.codes.data());
  e8m0.upload(q.localE8M0.data());
  if (!q.global.empty())
    global.upload(q.global.data());
  outCodes.poison();
  outFactors.poison();
  runtime::FoldBuffers buffers{codes.get(), e8m0.get(), global.get(),
                               outCodes.get(), outFactors.get()};
  llvm::Error error = folder.fold(spec, buffers, nullptr);
  ASSERT_FALSE(bool(error)) << llvm::toString(std::move(error));
  ASSERT_EQ(DeviceBuffer::api().streamSynchronize(nullptr), CUDA_SUCCESS);

  std::vector<uint8_t> gotCodes = outCodes.download<uint8_t>();
  std::vector<uint32_t> gotFactors = outFactors.download<uint32_t>();
  const std::vector<float> &factors =
      fold == BlockScaleFold::Row ? expected->global : expected->localF32;
  ASSERT_EQ(gotFactors.size(), factors.size());
  int64_t codeMismatches = 0;
  for (size_t i = 0; i < gotCodes.size(); ++i)
    if (gotCodes[i] != expected->codes[i] && codeMismatches++ < 5)
      ADD_FAILURE() << "code " << i << " (0x" << std::hex << int(q.codes[i])
                    << "): got 0x" << int(gotCodes[i]) << ", expected 0x"
                    << int(expected->codes[i]) << std::dec;
  EXPECT_EQ(codeMismatches, 0);
  for (size_t i = 0; i < factors.size(); ++i) {
    uint32_t want;
    std::memcpy(&want, &factors[i], 4);
    ASSERT_EQ(gotFactors[i], want) << "factor " << i;
  }
}

TEST(FoldGpuTest, MatchesTheHostRuleBitForBit) {
  REQUIRE_GPU();
  runtime::GpuFolder folder(*gpu().cache, gpu().device->getSmCount());
  std::mt19937 rng(std::random_device{}());
  for (const FoldCase &c : foldCases()) {
    SCOPED_TRACE(describe(c));
    std::vector<float> x = adversarial(c.rows, c.cols, 40, rng);
    QuantizeOptions options{c.scheme, c.format, false};
    llvm::Expected<QuantizedTensor> q = quantize(x, c.rows, c.cols, options);
    ASSERT_TRUE(bool(q)) << llvm::toString(q.takeError());
    expectFoldMatchesTheHost(folder, *q, c.fold);
  }
}

// The kernels round each code in f16 arithmetic; the host rule (foldCode)
// is the definition. One row holds every code (NaN and infinite ones too)
// in blocks at every shift from 0 to 3 past the format's limit, after a
// block at the reference exponent and before a block with the NaN factor.
TEST(FoldGpuTest, FoldsEveryCodeAtEveryShiftAsTheHostRule) {
  REQUIRE_GPU();
  runtime::GpuFolder folder(*gpu().cache, gpu().device->getSmCount());
  for (Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    SCOPED_TRACE(format == Fp8Format::E4M3 ? "e4m3" : "e5m2");
    const int shifts = getFoldShiftLimit(format) + 4;
    const int reference = 40; // exponent of the largest factor
    QuantizedTensor q;
    q.scheme = ScalingScheme::mxfp8();
    q.format = format;
    q.rows = 1;
    q.localRows = 1;
    // Per shift, eight blocks of 32 codes hold the 256 codes.
    auto addBlocks = [&](uint8_t e8m0Code) {
      for (int b = 0; b < 8; ++b) {
        for (int c = 0; c < 32; ++c)
          q.codes.push_back(uint8_t(32 * b + c));
        q.localE8M0.push_back(e8m0Code);
      }
    };
    addBlocks(uint8_t(127 + reference));
    for (int shift = 1; shift < shifts; ++shift)
      addBlocks(uint8_t(127 + reference - shift));
    addBlocks(0xFF);
    q.cols = int64_t(q.codes.size());
    q.localCols = q.cols / 32;
    expectFoldMatchesTheHost(folder, q, BlockScaleFold::Row);
  }
}

TEST(FoldGpuTest, RejectsBadBuffersBeforeTheLaunch) {
  REQUIRE_GPU();
  runtime::GpuFolder folder(*gpu().cache, gpu().device->getSmCount());
  runtime::FoldSpec spec{4, 128, Fp8Format::E4M3,
                         ScalingScheme::twoLevel(GlobalScope::Tensor),
                         BlockScaleFold::Row};
  DeviceBuffer codes(512), e8m0(16), global(4), out(512), factors(16);
  runtime::FoldBuffers buffers{codes.get(), e8m0.get(), 0, out.get(),
                               factors.get()};
  llvm::Error e = folder.fold(spec, buffers, nullptr);
  ASSERT_TRUE(bool(e));
  EXPECT_NE(llvm::toString(std::move(e)).find("global"), std::string::npos);
  buffers.global = global.get();
  buffers.outCodes = buffers.codes;
  e = folder.fold(spec, buffers, nullptr);
  ASSERT_TRUE(bool(e));
  EXPECT_NE(llvm::toString(std::move(e)).find("overwrite"), std::string::npos);
}

//===----------------------------------------------------------------------===//
// GEMMs that fold
//===----------------------------------------------------------------------===//

struct GemmFoldCase {
  const char *name;
  ScalingScheme a, b;
  Fp8Format formatA;
  BlockScaleFold fold;
  compiler::FloatType out;
  int64_t m, n, k;
};

void PrintTo(const GemmFoldCase &c, std::ostream *os) { *os << c.name; }

/// The GEMM of case `c` (a dynamic M).
compiler::GemmSpec specOf(const GemmFoldCase &c) {
  compiler::GemmSpec spec;
  spec.n = c.n;
  spec.k = c.k;
  spec.a = c.formatA;
  spec.aScaling = c.a;
  spec.bScaling = c.b;
  spec.out = c.out;
  spec.fold = c.fold;
  return spec;
}

class GemmFoldGpuTest : public ::testing::TestWithParam<GemmFoldCase> {};

TEST_P(GemmFoldGpuTest, MatchesTheModelOfTheFoldedOperands) {
  REQUIRE_GPU();
  if (std::string reason = gemmtest::getHopperSkipReason(); !reason.empty())
    GTEST_SKIP() << reason;
  const GemmFoldCase &c = GetParam();
  compiler::GemmSpec spec = specOf(c);
  spec.bias = compiler::FloatType::BF16;
  std::mt19937 rng(std::random_device{}());
  std::vector<float> a = adversarial(c.m, c.k, 20, rng);
  a[3 * c.k + c.k / 2] = 0.5f; // no NaN: rows of NaN compare as unwritten
  std::vector<float> b(c.n * c.k);
  std::normal_distribution<float> normal;
  for (int64_t i = 0; i < c.n * c.k; ++i)
    b[i] = normal(rng) * std::ldexp(1.0f, -int(i % c.k / 32 % 9));
  llvm::Expected<std::unique_ptr<jit::GemmProblem>> problem =
      jit::GemmProblem::create(spec, c.m, a, b, rng());
  ASSERT_TRUE(bool(problem)) << llvm::toString(problem.takeError());
  for (int launch = 0; launch < 2; ++launch) {
    llvm::Error poisoned = (*problem)->poison(nullptr);
    ASSERT_FALSE(bool(poisoned)) << llvm::toString(std::move(poisoned));
    llvm::Error e = moss::gemm(spec, c.m, (*problem)->buffers, nullptr);
    ASSERT_FALSE(bool(e)) << llvm::toString(std::move(e));
    ASSERT_EQ(DeviceBuffer::api().streamSynchronize(nullptr), CUDA_SUCCESS);
    jit::GemmCheckOptions options;
    options.compareRows = 24;
    llvm::Expected<jit::GemmCheckResult> result =
        jit::checkGemmOutput(**problem, c.m, options);
    ASSERT_TRUE(bool(result)) << llvm::toString(result.takeError());
    EXPECT_TRUE(result->ok())
        << result->bad << " of " << result->compared << " entries beyond "
        << "their allowance (worst " << result->worst << "), "
        << result->unwritten << " unwritten";
    std::printf("[ fold ] %s launch %d: %lld entries, worst %.3f of the "
                "allowance, relative error %.3g%s\n",
                c.name, launch, static_cast<long long>(result->compared),
                result->worst, result->relFrobenius,
                result->againstModel ? " (model)" : "");
  }
}

using compiler::FloatType;
const ScalingScheme kMossTensor = ScalingScheme::twoLevel(GlobalScope::Tensor);
const ScalingScheme kMossRow = ScalingScheme::twoLevel(GlobalScope::Row);

/// The kernel that folds A itself (consumer_fold.cuh) against the fold pass
/// before the per-row kernel, on one problem: both must give the same bits.
/// A's blocks span 2^10 to 2^40 within a row, hold subnormal codes, a row
/// 1e-6 smaller than the rest, zero rows and NaN factors (E8M0 255,
/// written into the uploaded scales).
class KernelFoldGpuTest : public ::testing::TestWithParam<GemmFoldCase> {};

TEST_P(KernelFoldGpuTest, MatchesTheFoldPassBitForBit) {
  REQUIRE_GPU();
  if (std::string reason = gemmtest::getHopperSkipReason(); !reason.empty())
    GTEST_SKIP() << reason;
  const GemmFoldCase &c = GetParam();
  const compiler::GemmSpec spec = specOf(c);
  ASSERT_TRUE(spec.canFoldAInKernel(c.m)) << spec.str();
  std::mt19937 rng(std::random_device{}());
  for (int span : {10, 20, 40}) {
    SCOPED_TRACE("blocks spanning 2^" + std::to_string(span));
    std::vector<float> a = adversarial(c.m, c.k, span, rng);
    for (int64_t r = 4; r < c.m; r += 11)
      std::fill(a.begin() + r * c.k, a.begin() + (r + 1) * c.k, 0.0f);
    std::vector<float> b(c.n * c.k);
    std::normal_distribution<float> normal;
    for (float &x : b)
      x = normal(rng);
    llvm::Expected<std::unique_ptr<jit::GemmProblem>> problem =
        jit::GemmProblem::create(spec, c.m, a, b, rng());
    ASSERT_TRUE(bool(problem)) << llvm::toString(problem.takeError());
    const GemmBuffers &buffers = (*problem)->buffers;
    const uint8_t nan = 0xFF;
    for (int64_t r = 1; r < c.m; r += 13) {
      int64_t block = (r * 7) % (c.k / 32);
      ASSERT_EQ(DeviceBuffer::api().memcpyHtoD(
                    buffers.a.localScales + r * (c.k / 32) + block, &nan, 1),
                CUDA_SUCCESS);
    }
    std::vector<float> outputs[2];
    for (int inKernel = 0; inKernel < 2; ++inKernel) {
      GemmOptions options;
      options.foldAInKernel = inKernel == 1;
      llvm::Error poisoned = (*problem)->poison(nullptr);
      ASSERT_FALSE(bool(poisoned)) << llvm::toString(std::move(poisoned));
      llvm::Error e = moss::gemm(spec, c.m, buffers, nullptr, options);
      ASSERT_FALSE(bool(e)) << llvm::toString(std::move(e));
      ASSERT_EQ(DeviceBuffer::api().streamSynchronize(nullptr), CUDA_SUCCESS);
      llvm::Expected<std::vector<float>> out = (*problem)->downloadOutput();
      ASSERT_TRUE(bool(out)) << llvm::toString(out.takeError());
      outputs[inKernel] = std::move(*out);
    }
    ASSERT_EQ(outputs[0].size(), outputs[1].size());
    int64_t mismatches = 0, nans = 0;
    for (size_t i = 0; i < outputs[0].size(); ++i) {
      nans += std::isnan(outputs[1][i]);
      if (std::memcmp(&outputs[0][i], &outputs[1][i], 4) != 0 &&
          mismatches++ < 5)
        ADD_FAILURE() << "entry (" << i / c.n << ", " << i % c.n
                      << "): the pass gives " << outputs[0][i]
                      << ", the kernel's fold " << outputs[1][i];
    }
    EXPECT_EQ(mismatches, 0);
    EXPECT_GT(nans, 0) << "the NaN factors reached no output";
    EXPECT_LT(nans, int64_t(outputs[0].size())) << "every output is NaN";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, KernelFoldGpuTest,
    ::testing::Values(
        GemmFoldCase{"moss_tensor_global", kMossTensor,
                     ScalingScheme::perTensor(), Fp8Format::E4M3,
                     BlockScaleFold::Row, FloatType::BF16, 333, 2049, 4096},
        GemmFoldCase{"moss_row_global_many_tiles", kMossRow,
                     ScalingScheme::perTensor(), Fp8Format::E4M3,
                     BlockScaleFold::Row, FloatType::BF16, 4096, 4096, 1024},
        GemmFoldCase{"moss_row_global_m7", kMossRow, ScalingScheme::perTensor(),
                     Fp8Format::E4M3, BlockScaleFold::Row, FloatType::BF16, 7,
                     768, 1024},
        GemmFoldCase{"moss_e5m2_f16", kMossTensor, ScalingScheme::perTensor(),
                     Fp8Format::E5M2, BlockScaleFold::Row, FloatType::F16, 129,
                     512, 1024},
        GemmFoldCase{"mxfp8_x_per_row", ScalingScheme::mxfp8(),
                     ScalingScheme::perRow(), Fp8Format::E4M3,
                     BlockScaleFold::Row, FloatType::BF16, 256, 1024, 2048},
        GemmFoldCase{"two_level_x_two_level", kMossTensor, kMossRow,
                     Fp8Format::E4M3, BlockScaleFold::Row, FloatType::BF16, 300,
                     1024, 2048}),
    [](const ::testing::TestParamInfo<GemmFoldCase> &info) {
      return std::string(info.param.name);
    });

INSTANTIATE_TEST_SUITE_P(
    Cases, GemmFoldGpuTest,
    ::testing::Values(
        GemmFoldCase{"moss_row_fold", kMossTensor, ScalingScheme::perTensor(),
                     Fp8Format::E4M3, BlockScaleFold::Row, FloatType::BF16, 333,
                     2049, 4096},
        GemmFoldCase{"moss_128_fold", kMossTensor, ScalingScheme::perTensor(),
                     Fp8Format::E4M3, BlockScaleFold::K128, FloatType::BF16,
                     333, 2049, 4096},
        GemmFoldCase{"moss_rowglobal_row_fold_m1", kMossRow,
                     ScalingScheme::perTensor(), Fp8Format::E4M3,
                     BlockScaleFold::Row, FloatType::BF16, 1, 4096, 4064},
        GemmFoldCase{"moss_e5m2_row_fold", kMossTensor,
                     ScalingScheme::perTensor(), Fp8Format::E5M2,
                     BlockScaleFold::Row, FloatType::F16, 129, 512, 1024},
        GemmFoldCase{"two_level_x_two_level_row_fold", kMossTensor, kMossRow,
                     Fp8Format::E4M3, BlockScaleFold::Row, FloatType::BF16, 256,
                     1024, 2048},
        GemmFoldCase{"two_level_x_two_level_128_fold", kMossRow, kMossTensor,
                     Fp8Format::E4M3, BlockScaleFold::K128, FloatType::BF16,
                     256, 1024, 2048},
        GemmFoldCase{"mxfp8_x_mxfp8_row_fold", ScalingScheme::mxfp8(),
                     ScalingScheme::mxfp8(), Fp8Format::E4M3,
                     BlockScaleFold::Row, FloatType::BF16, 7, 768, 1024},
        GemmFoldCase{"moss_row_fold_f32_f16_mma", kMossTensor,
                     ScalingScheme::perTensor(), Fp8Format::E4M3,
                     BlockScaleFold::Row, FloatType::F32, 200, 512, 2048}),
    [](const ::testing::TestParamInfo<GemmFoldCase> &info) {
      return std::string(info.param.name);
    });

} // namespace
