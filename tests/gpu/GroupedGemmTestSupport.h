//===- GroupedGemmTestSupport.h - The grouped GEMM tests' helpers -*- C++
//-*-===//
//
// What the m- and k-grouped GPU tests share: the launch of a grouped GEMM
// through the C API's prepared plan (a context, moss_gemm_plan_create,
// moss_gemm_plan_launch_grouped with the buffers of a tool problem, a
// wait, both freed), and the expectations on a grouped check.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_TESTS_GPU_GROUPEDGEMMTESTSUPPORT_H
#define MOSS_TESTS_GPU_GROUPEDGEMMTESTSUPPORT_H

#include "GroupedGemmProblem.h"
#include "QuantizerTestSupport.h"

#include "moss/Gemm/Gemm.h"
#include "moss/moss.h"

#include "gtest/gtest.h"

namespace moss::gemmtest {

/// Launches `spec` once with `extent` (M, or a k-grouped GEMM's K) and the
/// device values at `b.groupOffsets`, through a plan in a new context.
inline void launchGroupedThroughC(const moss_gemm_spec_t &spec, int64_t extent,
                                  const GemmBuffers &b) {
  moss_context_options_t options;
  moss_context_options_init(&options);
  moss_context_t context = nullptr;
  ASSERT_EQ(moss_context_create(&options, &context), nullptr);
  moss_gemm_plan_t plan = nullptr;
  moss_error_t error = moss_gemm_plan_create(context, &spec, &plan);
  EXPECT_EQ(error, nullptr) << moss_error_message(error);
  moss_error_destroy(error);
  auto operand = [](const GemmOperand &o) {
    return moss_gemm_operand_t{o.codes, o.localScales, o.localScaleCount,
                               o.globalScales, o.globalScaleCount};
  };
  moss_gemm_buffers_t buffers{operand(b.a), operand(b.b), b.d,
                              b.bias,       b.c,          b.amax};
  error = moss_gemm_plan_launch_grouped(plan, extent, &buffers, b.groupOffsets,
                                        nullptr);
  EXPECT_EQ(error, nullptr) << moss_error_message(error);
  moss_error_destroy(error);
  EXPECT_EQ(quantizetest::DeviceBuffer::api().streamSynchronize(nullptr),
            CUDA_SUCCESS);
  moss_gemm_plan_destroy(plan);
  moss_context_destroy(context);
}

/// Expects a grouped check to pass: something compared, every compared
/// entry within its allowance, none unwritten, and no byte of the output
/// written outside the experts' parts.
inline void
expectExpertsMatch(llvm::Expected<jit::GroupedGemmCheckResult> result) {
  ASSERT_TRUE(bool(result)) << llvm::toString(result.takeError());
  EXPECT_EQ(result->writtenOutside, 0)
      << "bytes of the output written outside the experts' parts";
  EXPECT_TRUE(result->bad == 0 && result->unwritten == 0)
      << result->bad << " of " << result->compared
      << " entries beyond their allowance (worst " << result->worst << "), "
      << result->unwritten << " unwritten; first at expert "
      << result->firstBadExpert;
  EXPECT_GT(result->compared, 0);
}

} // namespace moss::gemmtest

#endif // MOSS_TESTS_GPU_GROUPEDGEMMTESTSUPPORT_H
