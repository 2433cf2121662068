//===- GemmLaunchArgumentsGpuTest.cpp - A launch's own arguments ----------===//
//
// Specs that differ only in a launch argument (beta) share one plan and one
// kernel in a GemmRunner; each launch must still use its own value. Each
// beta's output is held to its problem's reference (jit::checkGemmOutput,
// which reads the problem's spec and C). Through moss::gemm (the thread's
// runner) and through the C API's prepared plans, alternately, in one
// context. Skips without a Hopper GPU.
//
//===----------------------------------------------------------------------===//

#include "GemmCheck.h"
#include "GemmProblem.h"
#include "HopperSkip.h"
#include "QuantizerTestSupport.h"

#include "moss/Gemm/Gemm.h"
#include "moss/Numerics/Samples.h"
#include "moss/Runtime/Cuda/Device.h"
#include "moss/Runtime/Cuda/Driver.h"
#include "moss/moss.h"

#include "gtest/gtest.h"

#include <memory>
#include <random>
#include <vector>

using namespace moss;
using numerics::GlobalScope;
using numerics::ScalingScheme;

namespace {

compiler::GemmSpec getSpec(float beta) {
  compiler::GemmSpec spec;
  spec.n = 384;
  spec.k = 512;
  spec.aScaling = ScalingScheme::perRow();
  spec.bScaling = ScalingScheme::perTensor();
  spec.out = compiler::FloatType::F32;
  spec.mma = compiler::MmaType::FP8;
  spec.accumulate = compiler::FloatType::F32;
  spec.beta = beta;
  return spec;
}

void expectRight(const jit::GemmProblem &problem, int64_t m, float beta) {
  ASSERT_EQ(runtime::getDriverApi()->streamSynchronize(nullptr), CUDA_SUCCESS);
  jit::GemmCheckOptions options;
  options.compareRows = 16;
  llvm::Expected<jit::GemmCheckResult> result =
      jit::checkGemmOutput(problem, m, options);
  ASSERT_TRUE(bool(result)) << llvm::toString(result.takeError());
  EXPECT_TRUE(result->ok())
      << "beta " << beta << ": " << result->bad << " of " << result->compared
      << " entries beyond their allowance";
}

TEST(GemmLaunchArgumentsGpuTest, EachLaunchUsesItsOwnBeta) {
  // The device's context current (the problems allocate before any GEMM).
  REQUIRE_GPU();
  if (std::string reason = gemmtest::getHopperSkipReason(); !reason.empty())
    GTEST_SKIP() << reason;
  const int64_t m = 200;
  std::mt19937_64 rng(std::random_device{}());
  const std::vector<float> betas = {0.5f, -1.0f, 0.0f, 2.0f, 0.5f};
  std::vector<std::unique_ptr<jit::GemmProblem>> problems;
  for (float beta : betas) {
    std::vector<float> a = numerics::llmActivationSample(m, 512, rng());
    std::vector<float> b = numerics::gaussianSample(384, 512, rng());
    llvm::Expected<std::unique_ptr<jit::GemmProblem>> problem =
        jit::GemmProblem::create(getSpec(beta), m, a, b, rng());
    ASSERT_TRUE(bool(problem)) << llvm::toString(problem.takeError());
    problems.push_back(std::move(*problem));
  }

  // moss::gemm: one runner, one plan for all betas.
  for (size_t i = 0; i < betas.size(); ++i) {
    SCOPED_TRACE("moss::gemm, beta " + std::to_string(betas[i]));
    ASSERT_FALSE(bool(problems[i]->poison(nullptr)));
    llvm::Error launched =
        moss::gemm(getSpec(betas[i]), m, problems[i]->buffers, nullptr);
    ASSERT_FALSE(bool(launched)) << llvm::toString(std::move(launched));
    expectRight(*problems[i], m, betas[i]);
  }

  // The C API: a plan per beta, created up front, launched in turn.
  moss_context_options_t options;
  moss_context_options_init(&options);
  moss_context_t context = nullptr;
  ASSERT_EQ(moss_context_create(&options, &context), nullptr);
  std::vector<moss_gemm_plan_t> plans;
  for (float beta : betas) {
    moss_gemm_spec_t spec;
    moss_gemm_spec_init(&spec);
    spec.n = 384;
    spec.k = 512;
    spec.a = {
        MOSS_FORMAT_E4M3, MOSS_SCHEME_PER_ROW, 1, 0, MOSS_GLOBAL_TENSOR, 0};
    spec.out = MOSS_TYPE_F32;
    spec.mma = MOSS_MMA_FP8;
    spec.accumulate = MOSS_TYPE_F32;
    spec.beta = beta;
    moss_gemm_plan_t plan = nullptr;
    moss_error_t error = moss_gemm_plan_create(context, &spec, &plan);
    ASSERT_EQ(error, nullptr) << moss_error_message(error);
    plans.push_back(plan);
  }
  for (size_t i = 0; i < betas.size(); ++i) {
    SCOPED_TRACE("C plan, beta " + std::to_string(betas[i]));
    const GemmBuffers &b = problems[i]->buffers;
    ASSERT_FALSE(bool(problems[i]->poison(nullptr)));
    auto operand = [](const GemmOperand &o) {
      return moss_gemm_operand_t{o.codes, o.localScales, o.localScaleCount,
                                 o.globalScales, o.globalScaleCount};
    };
    moss_gemm_buffers_t buffers{operand(b.a), operand(b.b), b.d,
                                b.bias,       b.c,          b.amax};
    moss_error_t error = moss_gemm_plan_launch(plans[i], m, &buffers, nullptr);
    EXPECT_EQ(error, nullptr) << moss_error_message(error);
    moss_error_destroy(error);
    expectRight(*problems[i], m, betas[i]);
  }
  for (moss_gemm_plan_t plan : plans)
    moss_gemm_plan_destroy(plan);
  moss_context_destroy(context);
}

} // namespace
