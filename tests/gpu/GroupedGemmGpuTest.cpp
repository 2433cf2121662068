//===- GroupedGemmGpuTest.cpp - m-grouped GEMMs against each expert's -----===//
//
// An m-grouped GEMM (GemmSpec::groups, mixture-of-experts layers) on the
// GPU, in both layouts: the operands of jit::GroupedGemmProblem (one
// problem per expert, quantized by the host reference quantizers and
// stacked), multiplied in one launch through moss::gemm or the C API's
// plan. Every expert's rows of the output are held to its own FP64
// reference under the accuracy contract, and every other row (past M, and
// a masked expert's unused ones) to its poison. Rows per expert are random
// (jit::routeRows), with empty experts, single rows, odd counts and one
// expert taking half the tokens.
//
//===----------------------------------------------------------------------===//

#include "GroupedGemmProblem.h"
#include "GroupedGemmTestSupport.h"
#include "QuantizerTestSupport.h"

#include "HopperSkip.h"

#include "moss/Gemm/Gemm.h"
#include "moss/moss.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

using namespace moss;
using moss::quantizetest::DeviceBuffer;
using numerics::BlockScaleFold;
using numerics::GlobalScope;
using numerics::ScalingScheme;

namespace {

struct GroupedCase {
  std::string name;
  ScalingScheme a, b;
  int64_t groups, n, k;
  compiler::FloatType out = compiler::FloatType::BF16;
  BlockScaleFold fold = BlockScaleFold::None;
  bool bias = false, accumulate = false;
  /// How rows fall to experts: "random" (0 to 2 * mean each), "skewed" (one
  /// expert half of them), "sparse" (most experts empty).
  std::string routing = "random";
  int64_t meanRows = 100;
  /// The masked layout: each expert's rows in the same number of rows.
  bool masked = false;
};

std::ostream &operator<<(std::ostream &os, const GroupedCase &c) {
  return os << c.name;
}

/// The C API's launch of `spec` (MOSS x per-tensor; a plan, then
/// moss_gemm_plan_launch_grouped).
void launchThroughC(const compiler::GemmSpec &spec, int64_t m,
                    const GemmBuffers &b) {
  moss_gemm_spec_t cSpec;
  moss_gemm_spec_init(&cSpec);
  cSpec.n = spec.n;
  cSpec.k = spec.k;
  cSpec.a = {MOSS_FORMAT_E4M3, MOSS_SCHEME_MOSS, 1, 32, MOSS_GLOBAL_ROW, 0};
  cSpec.b = {MOSS_FORMAT_E4M3, MOSS_SCHEME_PER_TENSOR, 1, 0,
             MOSS_GLOBAL_TENSOR, 0};
  cSpec.fold = spec.getFold() == BlockScaleFold::Row ? MOSS_FOLD_ROW
                                                      : MOSS_FOLD_NONE;
  cSpec.groups = int32_t(spec.groups);
  cSpec.group_layout =
      spec.maskedGroups ? MOSS_GROUPS_MASKED : MOSS_GROUPS_CONTIGUOUS;
  gemmtest::launchGroupedThroughC(cSpec, m, b);
}

/// The GEMM of case `c`.
compiler::GemmSpec makeSpec(const GroupedCase &c) {
  compiler::GemmSpec spec;
  spec.n = c.n;
  spec.k = c.k;
  spec.aScaling = c.a;
  spec.bScaling = c.b;
  spec.out = c.out;
  spec.fold = c.fold;
  if (c.bias)
    spec.bias = compiler::FloatType::BF16;
  if (c.accumulate) {
    spec.accumulate = c.out;
    spec.beta = 0.75f;
  }
  spec.groups = c.groups;
  spec.maskedGroups = c.masked;
  return spec;
}

/// The operands of case `c` (`spec`) with its routing drawn from `rng`
/// (GroupedGemmProblem::create's `nonFinite`).
llvm::Expected<std::unique_ptr<jit::GroupedGemmProblem>>
makeProblem(const GroupedCase &c, const compiler::GemmSpec &spec,
            std::mt19937_64 &rng, bool nonFinite) {
  llvm::Expected<std::vector<int64_t>> rows =
      jit::routeRows(c.groups, c.meanRows, c.routing, rng);
  if (!rows)
    return rows.takeError();
  // Masked: a few unused rows even for the fullest expert.
  const int64_t capacity =
      *std::max_element(rows->begin(), rows->end()) + 1 + int64_t(rng() % 3);
  return jit::GroupedGemmProblem::create(spec, *rows, rng(), capacity,
                                         nonFinite);
}

/// Runs case `c` through moss::gemm, or through the C API's plan.
void checkGrouped(const GroupedCase &c, bool throughC) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const compiler::GemmSpec spec = makeSpec(c);
  llvm::Expected<std::unique_ptr<jit::GroupedGemmProblem>> problem =
      makeProblem(c, spec, rng, /*nonFinite=*/false);
  ASSERT_TRUE(bool(problem)) << llvm::toString(problem.takeError());
  const jit::GroupedGemmProblem &p = **problem;

  if (throughC) {
    launchThroughC(spec, p.m, p.buffers);
  } else {
    llvm::Error launched = moss::gemm(spec, p.m, p.buffers, nullptr);
    ASSERT_FALSE(bool(launched)) << llvm::toString(std::move(launched));
  }
  ASSERT_EQ(DeviceBuffer::api().streamSynchronize(nullptr), CUDA_SUCCESS);

  jit::GemmCheckOptions options;
  options.scanRows = ~0u; // each expert's rows, all of them
  options.compareRows = 8;
  options.seed = rng();
  gemmtest::expectExpertsMatch(p.check(options));
}

class GroupedGemmGpuTest : public ::testing::TestWithParam<GroupedCase> {};

TEST_P(GroupedGemmGpuTest, EachExpertMatchesItsReference) {
  REQUIRE_GPU();
  if (std::string reason = gemmtest::getHopperSkipReason(); !reason.empty())
    GTEST_SKIP() << reason;
  checkGrouped(GetParam(), /*throughC=*/false);
}

TEST(GroupedGemmCApiGpuTest, APlanLaunchesWithItsOffsets) {
  REQUIRE_GPU();
  if (std::string reason = gemmtest::getHopperSkipReason(); !reason.empty())
    GTEST_SKIP() << reason;
  checkGrouped(GroupedCase{"moss_c_api_12",
                           ScalingScheme::twoLevel(GlobalScope::Row, 32),
                           ScalingScheme::perTensor(), 12, 512, 1024,
                           compiler::FloatType::BF16, BlockScaleFold::Row},
               /*throughC=*/true);
}

TEST(GroupedGemmCApiGpuTest, AMaskedPlanLaunchesWithItsCounts) {
  REQUIRE_GPU();
  if (std::string reason = gemmtest::getHopperSkipReason(); !reason.empty())
    GTEST_SKIP() << reason;
  checkGrouped(GroupedCase{"moss_c_api_masked_16",
                           ScalingScheme::twoLevel(GlobalScope::Row, 32),
                           ScalingScheme::perTensor(), 16, 512, 1024,
                           compiler::FloatType::BF16, BlockScaleFold::Row,
                           false, false, "random", 9, true},
               /*throughC=*/true);
}

/// Whether row `row` of `q` dequantizes to a NaN anywhere.
bool hasNan(const numerics::QuantizedTensor &q, int64_t row) {
  std::vector<double> values(size_t(q.cols));
  numerics::dequantizeRow(q, row, values);
  return std::any_of(values.begin(), values.end(),
                     [](double v) { return std::isnan(v); });
}

/// NaN and Inf blocks under the dense rules (docs/NUMERICS-CONTRACT.md,
/// 7.5): an expert's output entry is NaN exactly where its row of A or its
/// row of B (the entry's column) dequantizes to a NaN; every other entry,
/// that expert's and every other expert's, is finite, and the rows no
/// expert owns keep their poison.
void checkNonFinite(const GroupedCase &c) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(c.name + ", seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const compiler::GemmSpec spec = makeSpec(c);
  llvm::Expected<std::unique_ptr<jit::GroupedGemmProblem>> problem =
      makeProblem(c, spec, rng, /*nonFinite=*/true);
  ASSERT_TRUE(bool(problem)) << llvm::toString(problem.takeError());
  const jit::GroupedGemmProblem &p = **problem;
  ASSERT_FALSE(bool(p.poison()));
  llvm::Error launched = moss::gemm(spec, p.m, p.buffers, nullptr);
  ASSERT_FALSE(bool(launched)) << llvm::toString(std::move(launched));
  ASSERT_EQ(DeviceBuffer::api().streamSynchronize(nullptr), CUDA_SUCCESS);

  const size_t width = compiler::getByteWidth(spec.out);
  const size_t rowBytes = size_t(spec.n) * width;
  std::vector<uint8_t> d(size_t(p.m) * rowBytes);
  ASSERT_EQ(DeviceBuffer::api().memcpyDtoH(d.data(), p.buffers.d, d.size()),
            CUDA_SUCCESS);
  std::vector<bool> owned(size_t(p.m), false);
  int64_t nanRows = 0, nanColumns = 0, missingNan = 0, wrongNan = 0;
  for (size_t g = 0; g < p.rows.size(); ++g) {
    const numerics::QuantizedTensor &a = p.experts[g]->kernelA;
    const numerics::QuantizedTensor &b = p.experts[g]->kernelB;
    std::vector<bool> nanColumn(size_t(spec.n));
    for (int64_t col = 0; col < spec.n; ++col)
      nanColumns += nanColumn[size_t(col)] = hasNan(b, col);
    for (int64_t i = 0; i < p.rows[g]; ++i) {
      const bool nanRow = hasNan(a, i);
      nanRows += nanRow;
      const int64_t row = p.starts[g] + i;
      owned[size_t(row)] = true;
      for (int64_t col = 0; col < spec.n; ++col) {
        const float v = jit::decodeOutputElement(
            &d[size_t(row) * rowBytes + size_t(col) * width], spec.out);
        if (nanRow || nanColumn[size_t(col)])
          missingNan += !std::isnan(v);
        else
          wrongNan += !std::isfinite(v);
      }
    }
  }
  int64_t writtenOutside = 0;
  for (size_t row = 0; row < owned.size(); ++row)
    if (!owned[row])
      writtenOutside += std::count_if(
          d.begin() + row * rowBytes, d.begin() + (row + 1) * rowBytes,
          [](uint8_t byte) { return byte != 0xFF; });
  // The injection reached both operands.
  EXPECT_GT(nanRows, 0);
  EXPECT_GT(nanColumns, 0);
  EXPECT_EQ(missingNan, 0) << "entries of NaN rows or columns not NaN";
  EXPECT_EQ(wrongNan, 0) << "entries NaN or Inf outside NaN rows and columns";
  EXPECT_EQ(writtenOutside, 0) << "bytes written outside the experts' rows";
}

const ScalingScheme kMoss = ScalingScheme::twoLevel(GlobalScope::Row, 32);

TEST(GroupedGemmNonFiniteGpuTest,
     NonFiniteBlocksMakeOnlyTheirExpertsRowsAndColumnsNan) {
  REQUIRE_GPU();
  if (std::string reason = gemmtest::getHopperSkipReason(); !reason.empty())
    GTEST_SKIP() << reason;
  const GroupedCase cases[] = {
      {"moss_row_fold_x_tensor_8", kMoss, ScalingScheme::perTensor(), 8, 512,
       1024, compiler::FloatType::BF16, BlockScaleFold::Row},
      {"moss_unfolded_x_tensor_masked_8", kMoss, ScalingScheme::perTensor(), 8,
       384, 512, compiler::FloatType::BF16, BlockScaleFold::None, false, false,
       "random", 20, true},
      {"group1x128_x_group128x128_5", ScalingScheme::perGroup(1, 128),
       ScalingScheme::perGroup(128, 128), 5, 384, 512,
       compiler::FloatType::F32},
      {"mxfp8_x_mxfp8_6", ScalingScheme::mxfp8(), ScalingScheme::mxfp8(), 6,
       256, 256, compiler::FloatType::BF16, BlockScaleFold::None},
      {"row_x_row_skewed_12", ScalingScheme::perRow(), ScalingScheme::perRow(),
       12, 256, 256, compiler::FloatType::BF16, BlockScaleFold::None, false,
       false, "skewed", 30}};
  for (const GroupedCase &c : cases)
    checkNonFinite(c);
}

INSTANTIATE_TEST_SUITE_P(
    Routing, GroupedGemmGpuTest,
    ::testing::Values(
        GroupedCase{"moss_row_fold_x_tensor_8", kMoss,
                    ScalingScheme::perTensor(), 8, 512, 1024,
                    compiler::FloatType::BF16, BlockScaleFold::Row},
        GroupedCase{"moss_unfolded_x_tensor_bias_8", kMoss,
                    ScalingScheme::perTensor(), 8, 384, 512,
                    compiler::FloatType::BF16, BlockScaleFold::None, true},
        GroupedCase{"group1x128_x_group128x128_5",
                    ScalingScheme::perGroup(1, 128),
                    ScalingScheme::perGroup(128, 128), 5, 384, 512,
                    compiler::FloatType::BF16, BlockScaleFold::None, true},
        GroupedCase{"mxfp8_x_mxfp8_f32_c_3", ScalingScheme::mxfp8(),
                    ScalingScheme::mxfp8(), 3, 256, 256,
                    compiler::FloatType::F32, BlockScaleFold::None, false,
                    true},
        GroupedCase{"row_x_row_decode_64", ScalingScheme::perRow(),
                    ScalingScheme::perRow(), 64, 256, 256,
                    compiler::FloatType::BF16, BlockScaleFold::None, false,
                    false, "random", 4},
        GroupedCase{"moss_skewed_16", kMoss, ScalingScheme::perTensor(), 16,
                    1024, 2048, compiler::FloatType::BF16, BlockScaleFold::Row,
                    false, false, "skewed", 64},
        GroupedCase{"moss_x_mxfp8_folded_sparse_256", kMoss,
                    ScalingScheme::mxfp8(), 256, 128, 256,
                    compiler::FloatType::F16, BlockScaleFold::Row, false, false,
                    "sparse", 40},
        GroupedCase{"moss_one_expert", kMoss, ScalingScheme::perTensor(), 1,
                    256, 512, compiler::FloatType::BF16, BlockScaleFold::Row},
        GroupedCase{"moss_masked_decode_64", kMoss, ScalingScheme::perTensor(),
                    64, 512, 1024, compiler::FloatType::BF16,
                    BlockScaleFold::Row, false, false, "random", 6, true},
        GroupedCase{"group1x128_masked_skewed_8_bias_c",
                    ScalingScheme::perGroup(1, 128),
                    ScalingScheme::perGroup(128, 128), 8, 384, 512,
                    compiler::FloatType::F32, BlockScaleFold::None, true, true,
                    "skewed", 20, true}),
    [](const ::testing::TestParamInfo<GroupedCase> &info) {
      return info.param.name;
    });

} // namespace
