//===- GroupedGemmGpuTest.cpp - m-grouped GEMMs against each expert's -----===//
//
// An m-grouped GEMM (GemmSpec::groups, mixture-of-experts layers) on the
// GPU: each expert's operands are quantized with the host reference
// quantizers (jit::GemmProblem, one per expert), stacked into the grouped
// buffers with the row offsets, and multiplied in one launch. Every
// expert's rows of the output are then held to its own FP64 reference under
// the accuracy contract (jit::checkGemmOutput), and rows past the experts'
// stay as poisoned. Rows per expert are random, with empty experts, single
// rows, odd counts and one expert taking half the tokens. The masked layout
// (GemmSpec::maskedGroups) stacks each expert's rows into the same number
// of rows, the rest filled with codes and scales of plausible values: the
// output's rows past each count must stay as poisoned.
//
// A's schemes here quantize row by row (per-row, two-level with row
// globals, per-group 1x128, MXFP8), so quantizing each expert apart gives
// the bits of quantizing the whole A.
//
//===----------------------------------------------------------------------===//

#include "GemmCheck.h"
#include "GemmProblem.h"
#include "QuantizerTestSupport.h"

#include "HopperSkip.h"

#include "moss/Gemm/Gemm.h"
#include "moss/Numerics/Samples.h"
#include "moss/moss.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cstring>
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

/// Rows per expert for `c`, with an empty expert, a single-row one and odd
/// counts among them whenever there are experts enough.
std::vector<int64_t> routeRows(const GroupedCase &c, std::mt19937_64 &rng) {
  std::vector<int64_t> rows(c.groups);
  std::uniform_int_distribution<int64_t> around(0, 2 * c.meanRows);
  for (int64_t &r : rows)
    r = c.routing == "sparse" ? (rng() % 8 == 0 ? around(rng) : 0)
                              : around(rng);
  if (c.routing == "skewed")
    rows[rng() % c.groups] = c.meanRows * c.groups / 2;
  if (c.groups >= 3) {
    rows[0] = 0;
    rows[1] = 1;
    rows[2] |= 1;
  }
  return rows;
}

/// The bytes at `pointer` (synchronous).
std::vector<uint8_t> download(CUdeviceptr pointer, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  if (bytes) {
    EXPECT_EQ(DeviceBuffer::api().memcpyDtoH(out.data(), pointer, bytes),
              CUDA_SUCCESS);
  }
  return out;
}

/// Stacks byte ranges and uploads them.
struct Stack {
  std::vector<uint8_t> bytes;
  void add(CUdeviceptr pointer, size_t count) {
    std::vector<uint8_t> part = download(pointer, count);
    bytes.insert(bytes.end(), part.begin(), part.end());
  }
  /// `count` copies of the `size` bytes at `value` (a masked expert's
  /// unused rows).
  void pad(size_t count, const void *value, size_t size) {
    for (size_t i = 0; i < count; ++i) {
      const uint8_t *b = static_cast<const uint8_t *>(value);
      bytes.insert(bytes.end(), b, b + size);
    }
  }
  DeviceBuffer upload() const {
    DeviceBuffer buffer(std::max<size_t>(bytes.size(), 16));
    if (!bytes.empty()) {
      EXPECT_EQ(DeviceBuffer::api().memcpyHtoD(buffer.get(), bytes.data(),
                                               bytes.size()),
                CUDA_SUCCESS);
    }
    return buffer;
  }
};

size_t localBytes(const ScalingScheme &s) {
  return s.localScalesAreE8M0() ? 1 : 4;
}

/// The C API's launch of `spec` (a plan, then moss_gemm_plan_launch_grouped).
void launchThroughC(const compiler::GemmSpec &spec, int64_t m,
                    const GemmBuffers &b) {
  moss_context_options_t options;
  moss_context_options_init(&options);
  moss_context_t context = nullptr;
  ASSERT_EQ(moss_context_create(&options, &context), nullptr);
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
  moss_gemm_plan_t plan = nullptr;
  moss_error_t error = moss_gemm_plan_create(context, &cSpec, &plan);
  EXPECT_EQ(error, nullptr) << moss_error_message(error);
  moss_error_destroy(error);
  auto operand = [](const GemmOperand &o) {
    return moss_gemm_operand_t{o.codes, o.localScales, o.localScaleCount,
                               o.globalScales, o.globalScaleCount};
  };
  moss_gemm_buffers_t cBuffers{operand(b.a), operand(b.b), b.d,
                               b.bias,       b.c,          b.amax};
  error = moss_gemm_plan_launch_grouped(plan, m, &cBuffers, b.groupOffsets,
                                        nullptr);
  EXPECT_EQ(error, nullptr) << moss_error_message(error);
  moss_error_destroy(error);
  EXPECT_EQ(DeviceBuffer::api().streamSynchronize(nullptr), CUDA_SUCCESS);
  moss_gemm_plan_destroy(plan);
  moss_context_destroy(context);
}

/// Runs case `c` through moss::gemm, or through the C API's plan.
void checkGrouped(const GroupedCase &c, bool throughC) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);

  compiler::GemmSpec dense;
  dense.n = c.n;
  dense.k = c.k;
  dense.aScaling = c.a;
  dense.bScaling = c.b;
  dense.out = c.out;
  dense.fold = c.fold;
  if (c.bias)
    dense.bias = compiler::FloatType::BF16;
  if (c.accumulate) {
    dense.accumulate = c.out;
    dense.beta = 0.75f;
  }
  compiler::GemmSpec spec = dense;
  spec.groups = c.groups;
  spec.maskedGroups = c.masked;

  const std::vector<int64_t> rows = routeRows(c, rng);
  // Contiguous: G + 1 offsets; masked: G counts of `capacity` rows each.
  const int64_t capacity =
      *std::max_element(rows.begin(), rows.end()) + 1 + int64_t(rng() % 3);
  std::vector<int32_t> offsets(c.groups + 1, 0), starts(c.groups);
  for (int64_t g = 0; g < c.groups; ++g) {
    offsets[g + 1] = offsets[g] + int32_t(rows[g]);
    starts[g] = c.masked ? int32_t(g * capacity) : offsets[g];
  }
  const int64_t m = c.masked ? c.groups * capacity : offsets.back();
  std::vector<int32_t> groupRows =
      c.masked ? std::vector<int32_t>(rows.begin(), rows.end()) : offsets;

  // One problem per expert (an empty expert's holds one row, unused: its B
  // is stacked all the same).
  std::vector<std::unique_ptr<jit::GemmProblem>> problems;
  for (int64_t g = 0; g < c.groups; ++g) {
    const int64_t problemRows = std::max<int64_t>(rows[g], 1);
    std::vector<float> a =
        numerics::llmActivationSample(problemRows, c.k, rng());
    std::vector<float> b = numerics::gaussianSample(c.n, c.k, rng());
    llvm::Expected<std::unique_ptr<jit::GemmProblem>> problem =
        jit::GemmProblem::create(dense, problemRows, a, b, rng());
    ASSERT_TRUE(bool(problem)) << llvm::toString(problem.takeError());
    problems.push_back(std::move(*problem));
  }

  // The grouped operands: A's rows and B's experts stacked.
  Stack aCodes, aLocal, aGlobal, bCodes, bLocal, bGlobal, bias, cIn;
  const size_t outWidth = compiler::getByteWidth(c.out);
  const uint8_t code = 0x38, e8m0 = 127; // 1.0 in E4M3 and E8M0
  const float one = 1.0f;
  for (int64_t g = 0; g < c.groups; ++g) {
    const GemmBuffers &p = problems[g]->buffers;
    const size_t r = size_t(rows[g]);
    const size_t unused = c.masked ? size_t(capacity) - r : 0;
    const size_t blocksPerRow = c.a.hasLocalScales() ? c.k / c.a.blockCols : 0;
    aCodes.add(p.a.codes, r * c.k);
    aCodes.pad(unused * c.k, &code, 1);
    if (c.a.hasLocalScales()) {
      aLocal.add(p.a.localScales, r * blocksPerRow * localBytes(c.a));
      if (localBytes(c.a) == 1)
        aLocal.pad(unused * blocksPerRow, &e8m0, 1);
      else
        aLocal.pad(unused * blocksPerRow, &one, 4);
    }
    if (c.a.hasGlobalScales()) {
      aGlobal.add(p.a.globalScales, r * 4);
      aGlobal.pad(unused, &one, 4);
    }
    bCodes.add(p.b.codes, size_t(c.n * c.k));
    if (c.b.hasLocalScales())
      bLocal.add(p.b.localScales, size_t(p.b.localScaleCount) * localBytes(c.b));
    if (c.b.hasGlobalScales())
      bGlobal.add(p.b.globalScales, size_t(p.b.globalScaleCount) * 4);
    if (c.bias)
      bias.add(p.bias, size_t(c.n) * 2);
    if (c.accumulate) {
      cIn.add(p.c, r * c.n * outWidth);
      cIn.pad(unused * c.n * outWidth, &code, 1);
    }
  }
  DeviceBuffer aCodesD = aCodes.upload(), aLocalD = aLocal.upload(),
               aGlobalD = aGlobal.upload(), bCodesD = bCodes.upload(),
               bLocalD = bLocal.upload(), bGlobalD = bGlobal.upload(),
               biasD = bias.upload(), cD = cIn.upload();
  DeviceBuffer offsetsD(groupRows.size() * 4);
  offsetsD.upload(groupRows.data());
  // Rows past M are never written: poison and check them too.
  constexpr int64_t kPadRows = 3;
  const size_t dBytes = size_t((m + kPadRows) * c.n) * outWidth;
  DeviceBuffer d(dBytes);
  ASSERT_EQ(DeviceBuffer::api().memsetD8(d.get(), 0xFF, dBytes), CUDA_SUCCESS);

  GemmBuffers buffers;
  GemmScaleCounts counts = getGemmScaleCounts(spec, m);
  buffers.a = {aCodesD.get(), c.a.hasLocalScales() ? aLocalD.get() : 0,
               counts.aLocal, c.a.hasGlobalScales() ? aGlobalD.get() : 0,
               counts.aGlobal};
  buffers.b = {bCodesD.get(), c.b.hasLocalScales() ? bLocalD.get() : 0,
               counts.bLocal, c.b.hasGlobalScales() ? bGlobalD.get() : 0,
               counts.bGlobal};
  buffers.d = d.get();
  buffers.bias = c.bias ? biasD.get() : 0;
  buffers.c = c.accumulate ? cD.get() : 0;
  buffers.groupOffsets = offsetsD.get();
  if (throughC) {
    launchThroughC(spec, m, buffers);
  } else {
    llvm::Error launched = moss::gemm(spec, m, buffers, nullptr);
    ASSERT_FALSE(bool(launched)) << llvm::toString(std::move(launched));
  }
  ASSERT_EQ(DeviceBuffer::api().streamSynchronize(nullptr), CUDA_SUCCESS);
  std::vector<uint8_t> out = download(d.get(), dBytes);

  const size_t rowBytes = size_t(c.n) * outWidth;
  for (size_t i = size_t(m) * rowBytes; i < dBytes; ++i)
    ASSERT_EQ(out[i], 0xFF) << "written past the last expert's rows";
  if (c.masked) {
    for (int64_t g = 0; g < c.groups; ++g) {
      for (size_t i = size_t(starts[g] + rows[g]) * rowBytes;
           i < size_t(starts[g] + capacity) * rowBytes; ++i) {
        ASSERT_EQ(out[i], 0xFF)
            << "expert " << g << " wrote row " << i / rowBytes << " past its "
            << rows[g] << " rows";
      }
    }
  }
  int64_t checked = 0;
  for (int64_t g = 0; g < c.groups; ++g) {
    if (!rows[g])
      continue;
    SCOPED_TRACE("expert " + std::to_string(g) + " of " +
                 std::to_string(c.groups) + ", " + std::to_string(rows[g]) +
                 " rows");
    ASSERT_EQ(DeviceBuffer::api().memcpyHtoD(problems[g]->buffers.d,
                                             out.data() + starts[g] * rowBytes,
                                             rows[g] * rowBytes),
              CUDA_SUCCESS);
    jit::GemmCheckOptions options;
    options.scanRows = unsigned(rows[g]);
    options.compareRows = unsigned(std::min<int64_t>(rows[g], 8));
    options.seed = rng();
    llvm::Expected<jit::GemmCheckResult> result =
        jit::checkGemmOutput(*problems[g], rows[g], options);
    ASSERT_TRUE(bool(result)) << llvm::toString(result.takeError());
    EXPECT_TRUE(result->ok())
        << result->bad << " of " << result->compared
        << " entries beyond their allowance (worst " << result->worst
        << "), " << result->unwritten << " unwritten";
    checked += result->compared;
  }
  EXPECT_GT(checked, 0);
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

const ScalingScheme kMoss = ScalingScheme::twoLevel(GlobalScope::Row, 32);

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
