//===- GemmCApiGpuTest.cpp - Quantize and GEMM through the C API ----------===//
//
// The C API end to end on the GPU: moss_quantize() writes A (MOSS two-level,
// per-row global) and B (per-tensor) from FP32 inputs, moss_gemm() multiplies
// them into a poisoned bf16 output with a bias, and each entry is compared
// with the tensor-core model over the host quantizers' operands under the
// accuracy contract (docs/NUMERICS-CONTRACT.md section 7). The same GEMM
// into f32, with the spec's default MMA (f16 for f32 outputs), is held to
// the FP64 reference within 1e-5 and section 7.4's per-entry bound. Skips
// with the reason without a Hopper GPU.
//
//===----------------------------------------------------------------------===//

#include "HopperSkip.h"

#include "moss/Compiler/GemmSpec.h"
#include "moss/Numerics/Fidelity.h"
#include "moss/Numerics/Fold.h"
#include "moss/Numerics/Quantize.h"
#include "moss/Numerics/Samples.h"
#include "moss/Numerics/TensorCoreModel.h"
#include "moss/Runtime/Cuda/Device.h"
#include "moss/Runtime/Cuda/Driver.h"
#include "moss/moss.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

using namespace moss;
using namespace moss::numerics;

namespace {

struct Buffer {
  CUdeviceptr ptr = 0;
  explicit Buffer(size_t bytes) {
    EXPECT_EQ(
        runtime::getDriverApi()->memAlloc(&ptr, std::max<size_t>(bytes, 16)),
        CUDA_SUCCESS);
  }
  ~Buffer() { runtime::getDriverApi()->memFree(ptr); }
};

void expectOk(moss_error_t error) {
  EXPECT_EQ(error, nullptr) << moss_error_message(error);
  moss_error_destroy(error);
}

float bf16ToFloat(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

TEST(GemmCApiGpu, QuantizeThenGemmMatchesReference) {
  if (std::string reason = gemmtest::getHopperSkipReason(); !reason.empty())
    GTEST_SKIP() << reason;
  moss_context_options_t options;
  moss_context_options_init(&options);
  moss_context_t context = nullptr;
  expectOk(moss_context_create(&options, &context));
  ASSERT_NE(context, nullptr);
  std::unique_ptr<moss_context, void (*)(moss_context_t)> owned(
      context, moss_context_destroy);
  const runtime::DriverApi &api = *runtime::getDriverApi();

  const int64_t m = 129, n = 257, k = 512;
  const uint64_t seed = std::random_device()();
  std::vector<float> a = llmActivationSample(m, k, seed);
  std::vector<float> b = gaussianSample(n, k, seed + 1);
  for (float &v : b)
    v /= std::sqrt(float(k));
  std::vector<float> bias(n);
  for (int64_t j = 0; j < n; ++j)
    bias[j] = float(int(j % 17) - 8) / 4.0f; // exact in f32
  SCOPED_TRACE("seed " + std::to_string(seed));

  // --- quantize on the GPU
  // ----------------------------------------------------
  auto quantizeOnGpu = [&](const std::vector<float> &x, int64_t rows,
                           int32_t scheme, int64_t block, Buffer &codes,
                           Buffer &local, Buffer &global,
                           moss_quantize_layout_t &layout) {
    moss_quantize_spec_t spec;
    moss_quantize_spec_init(&spec);
    spec.rows = rows;
    spec.cols = k;
    spec.input = MOSS_INPUT_F32;
    spec.scheme = scheme;
    spec.block_rows = 1;
    spec.block_cols = block;
    spec.global_scope = MOSS_GLOBAL_ROW;
    spec.format = MOSS_FORMAT_E4M3;
    expectOk(moss_quantize_layout(&spec, &layout));
    Buffer input(x.size() * 4);
    ASSERT_EQ(api.memcpyHtoD(input.ptr, x.data(), x.size() * 4), CUDA_SUCCESS);
    moss_quantize_buffers_t buffers{
        input.ptr, codes.ptr, layout.local_rows ? local.ptr : 0, global.ptr, 0};
    expectOk(moss_quantize(context, &spec, &buffers, nullptr));
    ASSERT_EQ(api.streamSynchronize(nullptr), CUDA_SUCCESS);
  };
  Buffer codesA(m * k), localA(m * k / 32), globalA(m * 4);
  Buffer codesB(n * k), localB(16), globalB(4);
  moss_quantize_layout_t layoutA, layoutB;
  quantizeOnGpu(a, m, MOSS_SCHEME_TWO_LEVEL, 32, codesA, localA, globalA,
                layoutA);
  quantizeOnGpu(b, n, MOSS_SCHEME_PER_TENSOR, 0, codesB, localB, globalB,
                layoutB);
  ASSERT_FALSE(HasFatalFailure());

  // --- the GEMM
  // ---------------------------------------------------------------
  moss_gemm_spec_t spec;
  moss_gemm_spec_init(&spec);
  spec.n = n;
  spec.k = k;
  spec.bias = MOSS_TYPE_F32;
  // The exact path first (the row fold is checked below).
  spec.fold = MOSS_FOLD_NONE;
  Buffer biasBuffer(n * 4), d(m * n * 2);
  ASSERT_EQ(api.memcpyHtoD(biasBuffer.ptr, bias.data(), n * 4), CUDA_SUCCESS);
  ASSERT_EQ(api.memsetD8(d.ptr, 0xFF, m * n * 2), CUDA_SUCCESS);
  moss_gemm_buffers_t buffers{};
  buffers.a = {codesA.ptr, localA.ptr, layoutA.local_rows * layoutA.local_cols,
               globalA.ptr, layoutA.global_count};
  buffers.b = {codesB.ptr, 0, 0, globalB.ptr, layoutB.global_count};
  buffers.d = d.ptr;
  buffers.bias = biasBuffer.ptr;
  expectOk(moss_gemm(context, &spec, m, &buffers, nullptr));
  ASSERT_EQ(api.streamSynchronize(nullptr), CUDA_SUCCESS);
  std::vector<uint16_t> out(m * n);
  ASSERT_EQ(api.memcpyDtoH(out.data(), d.ptr, m * n * 2), CUDA_SUCCESS);

  // A second call with another M reuses the kernel (dynamic M); the first
  // 64 rows of A's codes and scales are a 64-row operand.
  ASSERT_EQ(api.memsetD8(d.ptr, 0xFF, m * n * 2), CUDA_SUCCESS);
  moss_gemm_buffers_t rows64 = buffers;
  rows64.a.local_scale_count = 64 * layoutA.local_cols;
  rows64.a.global_scale_count = 64;
  expectOk(moss_gemm(context, &spec, 64, &rows64, nullptr));
  ASSERT_EQ(api.streamSynchronize(nullptr), CUDA_SUCCESS);
  std::vector<uint16_t> first64(64 * n);
  ASSERT_EQ(api.memcpyDtoH(first64.data(), d.ptr, 64 * n * 2), CUDA_SUCCESS);
  EXPECT_EQ(std::memcmp(first64.data(), out.data(), 64 * n * 2), 0)
      << "the first 64 rows differ between M = 129 and M = 64";

  // A prepared plan of the same spec writes the same bits at both M.
  {
    moss_gemm_plan_t plan = nullptr;
    expectOk(moss_gemm_plan_create(context, &spec, &plan));
    ASSERT_NE(plan, nullptr);
    std::unique_ptr<moss_gemm_plan, void (*)(moss_gemm_plan_t)> ownedPlan(
        plan, moss_gemm_plan_destroy);
    for (auto [rows, launch, want] :
         {std::tuple{m, &buffers, &out}, std::tuple{int64_t(64), &rows64,
                                                    &first64}}) {
      ASSERT_EQ(api.memsetD8(d.ptr, 0xFF, m * n * 2), CUDA_SUCCESS);
      expectOk(moss_gemm_plan_launch(plan, rows, launch, nullptr));
      ASSERT_EQ(api.streamSynchronize(nullptr), CUDA_SUCCESS);
      std::vector<uint16_t> planned(rows * n);
      ASSERT_EQ(api.memcpyDtoH(planned.data(), d.ptr, rows * n * 2),
                CUDA_SUCCESS);
      EXPECT_EQ(std::memcmp(planned.data(), want->data(), rows * n * 2), 0)
          << "the plan's GEMM differs from moss_gemm's at M = " << rows;
    }
    // A launch checks its buffers as moss_gemm does.
    moss_gemm_buffers_t wrong = buffers;
    wrong.a.global_scale_count = 1;
    moss_error_t error = moss_gemm_plan_launch(plan, m, &wrong, nullptr);
    EXPECT_EQ(moss_error_code(error), MOSS_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(moss_error_message(error)).find("globalScaleCount"),
              std::string::npos)
        << moss_error_message(error);
    moss_error_destroy(error);
  }

  // --- the reference (host quantizers: the GPU's are bit-identical) ----------
  QuantizedTensor qa = llvm::cantFail(
      quantize(a, m, k,
               QuantizeOptions{ScalingScheme::twoLevel(GlobalScope::Row, 32),
                               Fp8Format::E4M3, false}));
  QuantizedTensor qb = llvm::cantFail(quantize(
      b, n, k,
      QuantizeOptions{ScalingScheme::perTensor(), Fp8Format::E4M3, false}));
  // The tensor-core model of each entry (docs/NUMERICS-CONTRACT.md
  // section 7), promoted every 32.
  const OutputRounding rounding =
      compiler::getOutputRounding(compiler::FloatType::BF16);
  int64_t bad = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      ModelledGemmEntry expected =
          modelPromotedGemmEntry(qa, i, qb, j, /*promoteK=*/32, bias[j]);
      double got = bf16ToFloat(out[i * n + j]);
      if (!(std::fabs(got - expected.value) <=
            modelledEntryAllowedError(expected, rounding)) &&
          bad++ < 5)
        ADD_FAILURE() << "(" << i << ", " << j << "): got " << got
                      << ", expected " << expected.value;
    }
  EXPECT_EQ(bad, 0);

  // --- the row fold (the default from 1024 rows): A's block factors folded
  // into its codes (docs/NUMERICS-CONTRACT.md section 8), against the FP64
  // product of the host's folded operands, summed unpromoted.
  {
    moss_gemm_spec_t folding = spec;
    folding.fold = MOSS_FOLD_ROW;
    ASSERT_EQ(api.memsetD8(d.ptr, 0xFF, m * n * 2), CUDA_SUCCESS);
    expectOk(moss_gemm(context, &folding, m, &buffers, nullptr));
    ASSERT_EQ(api.streamSynchronize(nullptr), CUDA_SUCCESS);
    std::vector<uint16_t> folded(m * n);
    ASSERT_EQ(api.memcpyDtoH(folded.data(), d.ptr, m * n * 2), CUDA_SUCCESS);
    QuantizedTensor fa =
        llvm::cantFail(foldBlockScales(qa, BlockScaleFold::Row));
    const std::vector<double> dqFa = dequantize(fa), dqB = dequantize(qb);
    int64_t badFolded = 0;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        llvm::ArrayRef<double> rowA(&dqFa[i * k], k), rowB(&dqB[j * k], k);
        double expected = bias[j];
        for (int64_t t = 0; t < k; ++t)
          expected += rowA[t] * rowB[t];
        double got = bf16ToFloat(folded[i * n + j]);
        if (!(std::fabs(got - expected) <=
              gemmEntryAllowedError(expected, rounding, rowA, rowB, k)) &&
            badFolded++ < 5)
          ADD_FAILURE() << "folded (" << i << ", " << j << "): got " << got
                        << ", expected " << expected;
      }
    EXPECT_EQ(badFolded, 0);
  }

  // --- f32 output: moss_gemm_spec_init's MOSS_MMA_AUTO multiplies in f16;
  // MOSS_MMA_FP8, for comparison, is about ten times less exact
  // (docs/NUMERICS-CONTRACT.md section 7) ------------------------------------
  ASSERT_EQ(spec.mma, MOSS_MMA_AUTO);
  spec.out = MOSS_TYPE_F32;
  Buffer d32(m * n * 4);
  moss_gemm_buffers_t buffers32 = buffers;
  buffers32.d = d32.ptr;
  auto runF32 = [&](int32_t mma) {
    moss_gemm_spec_t chosen = spec;
    chosen.mma = mma;
    std::vector<float> result(m * n);
    EXPECT_EQ(api.memsetD8(d32.ptr, 0xFF, m * n * 4), CUDA_SUCCESS);
    expectOk(moss_gemm(context, &chosen, m, &buffers32, nullptr));
    EXPECT_EQ(api.streamSynchronize(nullptr), CUDA_SUCCESS);
    EXPECT_EQ(api.memcpyDtoH(result.data(), d32.ptr, m * n * 4), CUDA_SUCCESS);
    return result;
  };
  const std::vector<float> out32 = runF32(MOSS_MMA_AUTO);
  const std::vector<float> fp8Out32 = runF32(MOSS_MMA_FP8);
  ASSERT_FALSE(HasFailure());
  const std::vector<double> dqA = dequantize(qa), dqB = dequantize(qb);
  const OutputRounding f32Rounding =
      compiler::getOutputRounding(compiler::FloatType::F32);
  double errorSquares = 0, fp8ErrorSquares = 0, referenceSquares = 0;
  bad = 0;
  for (int64_t i = 0; i < m; ++i) {
    llvm::ArrayRef<double> rowA(&dqA[i * k], k);
    for (int64_t j = 0; j < n; ++j) {
      llvm::ArrayRef<double> rowB(&dqB[j * k], k);
      double sum = 0;
      for (int64_t x = 0; x < k; ++x)
        sum += rowA[x] * rowB[x];
      const double expected = sum + bias[j];
      const double got = out32[i * n + j];
      errorSquares += (got - expected) * (got - expected);
      fp8ErrorSquares +=
          (fp8Out32[i * n + j] - expected) * (fp8Out32[i * n + j] - expected);
      referenceSquares += expected * expected;
      if (!(std::fabs(got - expected) <=
            f16MmaEntryAllowedError(expected, f32Rounding, rowA, rowB, sum,
                                    bias[j], 0)) &&
          bad++ < 5)
        ADD_FAILURE() << "f32 (" << i << ", " << j << "): got " << got
                      << ", expected " << expected;
    }
  }
  EXPECT_EQ(bad, 0);
  const double relFrobenius = std::sqrt(errorSquares / referenceSquares);
  const double fp8RelFrobenius = std::sqrt(fp8ErrorSquares / referenceSquares);
  std::printf("f32 output: rel_frobenius %.3e with the default MMA, %.3e "
              "with MOSS_MMA_FP8\n",
              relFrobenius, fp8RelFrobenius);
  EXPECT_LE(relFrobenius, 1e-5);
  EXPECT_LT(relFrobenius, fp8RelFrobenius);
}

} // namespace
