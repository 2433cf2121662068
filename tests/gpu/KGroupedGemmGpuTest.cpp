//===- KGroupedGemmGpuTest.cpp - k-grouped GEMMs against each expert's ----===//
//
// A k-grouped GEMM (GemmSpec::groupedK, a mixture-of-experts weight
// gradient: expert g sums its own tokens, the columns [offsets[g],
// offsets[g + 1]) of the shared A and B) on the GPU through moss::gemm,
// with the operands of jit::KGroupedGemmProblem (each expert's slices
// quantized by the host reference quantizers, laid side by side). Every
// expert's output is held to its own FP64 reference under the accuracy
// contract; an expert without tokens to the epilogue of zero sums; the
// rows past the output to their poison. Tokens per expert are random
// multiples of 128, with empty experts and one expert taking half.
//
//===----------------------------------------------------------------------===//

#include "GroupedGemmTestSupport.h"
#include "KGroupedGemmProblem.h"
#include "QuantizerTestSupport.h"

#include "HopperSkip.h"

#include "moss/Gemm/Gemm.h"
#include "moss/moss.h"

#include "gtest/gtest.h"

#include <random>
#include <string>
#include <vector>

using namespace moss;
using moss::quantizetest::DeviceBuffer;
using numerics::GlobalScope;
using numerics::ScalingScheme;

namespace {

struct KGroupedCase {
  std::string name;
  ScalingScheme a, b;
  int64_t groups, m, n;
  compiler::FloatType out = compiler::FloatType::BF16;
  bool accumulate = false;
  /// Mean 128-column blocks per expert (0 to twice as many each).
  int64_t meanBlocks = 4;
  /// One expert takes half of all blocks.
  bool skewed = false;
  bool amax = false;
};

std::ostream &operator<<(std::ostream &os, const KGroupedCase &c) {
  return os << c.name;
}

/// Columns per expert: random multiples of 128 around the mean; with three
/// experts or more (and any columns) the first has none and the second one
/// block.
std::vector<int64_t> routeColumns(const KGroupedCase &c, std::mt19937_64 &rng) {
  std::vector<int64_t> cols(size_t(c.groups));
  for (int64_t &k : cols)
    k = 128 * int64_t(rng() % uint64_t(2 * c.meanBlocks + 1));
  if (c.skewed)
    cols[rng() % cols.size()] = 128 * c.meanBlocks * c.groups / 2;
  if (c.groups >= 3 && c.meanBlocks > 0) {
    cols[0] = 0;
    cols[1] = 128;
  }
  return cols;
}

/// The C API's launch of `spec` (MOSS x MOSS, bf16 out): a plan, then
/// moss_gemm_plan_launch_grouped with K and the column offsets.
void launchThroughC(const compiler::GemmSpec &spec, int64_t k,
                    const GemmBuffers &b) {
  moss_gemm_spec_t cSpec;
  moss_gemm_spec_init(&cSpec);
  cSpec.m = spec.m;
  cSpec.n = spec.n;
  cSpec.k = MOSS_DYNAMIC;
  cSpec.a = {MOSS_FORMAT_E4M3, MOSS_SCHEME_MOSS, 1, 32, MOSS_GLOBAL_ROW, 0};
  cSpec.b = cSpec.a;
  cSpec.groups = int32_t(spec.groups);
  cSpec.group_layout = MOSS_GROUPS_ALONG_K;
  gemmtest::launchGroupedThroughC(cSpec, k, b);
}

/// Runs case `c` twice through moss::gemm (the second launch reuses the
/// kernel and its tensor maps), or once through the C API's plan.
void checkKGrouped(const KGroupedCase &c, bool throughC) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);

  compiler::GemmSpec spec;
  spec.m = c.m;
  spec.n = c.n;
  spec.k = compiler::GemmSpec::kDynamic;
  spec.aScaling = c.a;
  spec.bScaling = c.b;
  spec.out = c.out;
  spec.amax = c.amax;
  if (c.accumulate) {
    spec.accumulate = c.out;
    spec.beta = 0.75f;
  }
  spec.groups = c.groups;
  spec.groupedK = true;

  llvm::Expected<std::unique_ptr<jit::KGroupedGemmProblem>> problem =
      jit::KGroupedGemmProblem::create(spec, routeColumns(c, rng), rng());
  ASSERT_TRUE(bool(problem)) << llvm::toString(problem.takeError());
  const jit::KGroupedGemmProblem &p = **problem;
  for (int launch = 0; launch < (throughC ? 1 : 2); ++launch) {
    SCOPED_TRACE("launch " + std::to_string(launch));
    ASSERT_FALSE(bool(p.poison()));
    if (throughC) {
      launchThroughC(spec, p.k, p.buffers);
    } else {
      llvm::Error launched = moss::gemm(spec, p.k, p.buffers, nullptr);
      ASSERT_FALSE(bool(launched)) << llvm::toString(std::move(launched));
    }
    ASSERT_EQ(DeviceBuffer::api().streamSynchronize(nullptr), CUDA_SUCCESS);

    jit::GemmCheckOptions options;
    options.scanRows = 64;
    options.compareRows = 8;
    options.seed = rng();
    gemmtest::expectExpertsMatch(p.check(options));
  }
}

class KGroupedGemmGpuTest : public ::testing::TestWithParam<KGroupedCase> {};

TEST_P(KGroupedGemmGpuTest, EachExpertMatchesItsReference) {
  REQUIRE_GPU();
  if (std::string reason = gemmtest::getHopperSkipReason(); !reason.empty())
    GTEST_SKIP() << reason;
  checkKGrouped(GetParam(), /*throughC=*/false);
}

const ScalingScheme kMoss = ScalingScheme::twoLevel(GlobalScope::Row, 32);

TEST(KGroupedGemmCApiGpuTest, APlanLaunchesWithItsColumnOffsets) {
  REQUIRE_GPU();
  if (std::string reason = gemmtest::getHopperSkipReason(); !reason.empty())
    GTEST_SKIP() << reason;
  checkKGrouped(KGroupedCase{"moss_c_api_6", kMoss, kMoss, 6, 256, 384},
                /*throughC=*/true);
}

INSTANTIATE_TEST_SUITE_P(
    Routing, KGroupedGemmGpuTest,
    ::testing::Values(
        KGroupedCase{"moss_x_moss_8", kMoss, kMoss, 8, 512, 384},
        KGroupedCase{"moss_x_moss_skewed_16_amax", kMoss, kMoss, 16, 256, 512,
                     compiler::FloatType::BF16, false, 3, true, true},
        KGroupedCase{"tensor_x_tensor_6", ScalingScheme::perTensor(),
                     ScalingScheme::perTensor(), 6, 384, 640},
        KGroupedCase{"row_x_row_f32_c_5", ScalingScheme::perRow(),
                     ScalingScheme::perRow(), 5, 320, 256,
                     compiler::FloatType::F32, true},
        KGroupedCase{"group1x128_x_group128x128_4",
                     ScalingScheme::perGroup(1, 128),
                     ScalingScheme::perGroup(128, 128), 4, 256, 384},
        KGroupedCase{"mxfp8_x_mxfp8_f16_c_3", ScalingScheme::mxfp8(),
                     ScalingScheme::mxfp8(), 3, 200, 160,
                     compiler::FloatType::F16, true},
        KGroupedCase{"moss_x_moss_no_tokens", kMoss, kMoss, 4, 256, 256,
                     compiler::FloatType::BF16, true, 0},
        KGroupedCase{"moss_x_moss_64_experts", kMoss, kMoss, 64, 128, 256,
                     compiler::FloatType::BF16, false, 1}),
    [](const ::testing::TestParamInfo<KGroupedCase> &info) {
      return info.param.name;
    });

} // namespace
