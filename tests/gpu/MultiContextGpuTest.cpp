//===- MultiContextGpuTest.cpp - One process, several CUDA contexts -------===//
//
// Two contexts on one GPU stand in for two devices: a kernel is loaded once
// per context (KernelEntry), moss::gemm keeps a runner per thread and
// context, and a launch goes to the calling thread's current context. The
// same GEMM, launched alternately in both contexts and from two threads at
// once, must be right in each and bit-identical across them. A kernel
// loaded in one context and launched in the other fails with a driver
// error, which these tests report. A GpuQuantizer serves the context of its
// first call and refuses the other. Skips without a Hopper GPU.
//
//===----------------------------------------------------------------------===//

#include "GemmCheck.h"
#include "GemmProblem.h"
#include "HopperSkip.h"
#include "QuantizerTestSupport.h"

#include "moss/Gemm/Gemm.h"
#include "moss/Numerics/Quantize.h"
#include "moss/Numerics/Samples.h"
#include "moss/Runtime/Api/Quantizer.h"
#include "moss/Runtime/Cuda/Device.h"
#include "moss/Runtime/Cuda/Driver.h"

#include "gtest/gtest.h"

#include <cstring>
#include <random>
#include <thread>

using namespace moss;
using namespace moss::numerics;

namespace {

/// A context of its own on device 0, destroyed with the object.
class OwnedContext {
public:
  explicit OwnedContext(CUdevice device) {
    const runtime::DriverApi &api = *runtime::getDriverApi();
    result = api.ctxCreate(&context, nullptr, 0, device);
  }
  ~OwnedContext() {
    if (context)
      runtime::getDriverApi()->ctxDestroy(context);
  }
  CUresult result = CUDA_ERROR_UNKNOWN;
  CUcontext context = nullptr;
};

compiler::GemmSpec getSpec() {
  compiler::GemmSpec spec;
  spec.n = 520;
  spec.k = 1024;
  spec.aScaling = ScalingScheme::twoLevel(GlobalScope::Row, 32);
  spec.bScaling = ScalingScheme::perTensor();
  spec.out = compiler::FloatType::BF16;
  return spec;
}

/// One context's operands and output.
struct ContextRun {
  CUcontext context = nullptr;
  std::unique_ptr<jit::GemmProblem> problem;
};

/// Makes `context` current, and records a failure when it cannot.
void makeCurrent(CUcontext context) {
  ASSERT_EQ(runtime::getDriverApi()->ctxSetCurrent(context), CUDA_SUCCESS);
}

/// Runs the GEMM once in the current context, checks it and returns D.
std::vector<float> runAndCheck(const compiler::GemmSpec &spec, int64_t m,
                               const jit::GemmProblem &problem,
                               const char *where) {
  SCOPED_TRACE(where);
  std::vector<float> none;
  llvm::Error poisoned = problem.poison(nullptr);
  EXPECT_FALSE(bool(poisoned)) << llvm::toString(std::move(poisoned));
  llvm::Error e = moss::gemm(spec, m, problem.buffers, nullptr);
  if (e) {
    ADD_FAILURE() << llvm::toString(std::move(e));
    return none;
  }
  EXPECT_EQ(runtime::getDriverApi()->streamSynchronize(nullptr), CUDA_SUCCESS);
  jit::GemmCheckOptions options;
  options.compareRows = 24;
  llvm::Expected<jit::GemmCheckResult> result =
      jit::checkGemmOutput(problem, m, options);
  if (!result) {
    ADD_FAILURE() << llvm::toString(result.takeError());
    return none;
  }
  EXPECT_TRUE(result->ok()) << result->bad << " of " << result->compared
                            << " entries beyond their allowance, "
                            << result->unwritten << " unwritten";
  llvm::Expected<std::vector<float>> d = problem.downloadOutput();
  if (!d) {
    ADD_FAILURE() << llvm::toString(d.takeError());
    return none;
  }
  return std::move(*d);
}

bool bitIdentical(const std::vector<float> &x, const std::vector<float> &y) {
  return x.size() == y.size() &&
         std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

class MultiContextGpuTest : public ::testing::Test {
protected:
  void SetUp() override {
    if (std::string reason = gemmtest::getHopperSkipReason(); !reason.empty())
      GTEST_SKIP() << reason;
    llvm::Expected<runtime::Device> opened = runtime::Device::open(0);
    ASSERT_TRUE(bool(opened)) << llvm::toString(opened.takeError());
    device.emplace(std::move(*opened));
    second = std::make_unique<OwnedContext>(device->getHandle());
    ASSERT_EQ(second->result, CUDA_SUCCESS) << "cuCtxCreate";
    ASSERT_NE(second->context, device->getContext());
  }
  void TearDown() override {
    if (device) // (a skipped test never opened the driver)
      runtime::getDriverApi()->ctxSetCurrent(nullptr);
  }

  /// The same fresh operands, uploaded in the primary context (runs[0])
  /// and in the second one (runs[1]).
  void uploadToBoth(ContextRun (&runs)[2]) {
    const compiler::GemmSpec spec = getSpec();
    const uint64_t seed = std::random_device{}();
    std::vector<float> a = llmActivationSample(kRows, spec.k, seed);
    std::vector<float> b = gaussianSample(spec.n, spec.k, seed + 1);
    const CUcontext contexts[2] = {device->getContext(), second->context};
    for (int which = 0; which < 2; ++which) {
      runs[which].context = contexts[which];
      makeCurrent(contexts[which]);
      llvm::Expected<std::unique_ptr<jit::GemmProblem>> problem =
          jit::GemmProblem::create(spec, kRows, a, b, seed + 2);
      ASSERT_TRUE(bool(problem)) << llvm::toString(problem.takeError());
      runs[which].problem = std::move(*problem);
    }
  }

  static constexpr int64_t kRows = 333;
  std::optional<runtime::Device> device;
  std::unique_ptr<OwnedContext> second;
};

TEST_F(MultiContextGpuTest, AlternatingLaunchesAreRightInEachContext) {
  const compiler::GemmSpec spec = getSpec();
  ContextRun runs[2];
  uploadToBoth(runs);
  ASSERT_FALSE(HasFatalFailure());
  std::vector<float> first[2];
  for (int round = 0; round < 3; ++round)
    for (int which = 0; which < 2; ++which) {
      makeCurrent(runs[which].context);
      std::vector<float> d =
          runAndCheck(spec, kRows, *runs[which].problem,
                      which == 0 ? "primary context" : "second context");
      ASSERT_FALSE(d.empty());
      if (round == 0)
        first[which] = d;
      else
        EXPECT_TRUE(bitIdentical(d, first[which])) << "round " << round;
    }
  EXPECT_TRUE(bitIdentical(first[0], first[1]))
      << "the two contexts' outputs differ";
}

TEST_F(MultiContextGpuTest, TwoThreadsInTwoContextsAtOnce) {
  const compiler::GemmSpec spec = getSpec();
  ContextRun runs[2];
  uploadToBoth(runs);
  ASSERT_FALSE(HasFatalFailure());
  std::vector<float> last[2];
  auto work = [&](int which) {
    makeCurrent(runs[which].context);
    for (int launch = 0; launch < 4; ++launch)
      last[which] = runAndCheck(spec, kRows, *runs[which].problem,
                                which == 0 ? "thread in the primary context"
                                           : "thread in the second context");
    runtime::getDriverApi()->ctxSetCurrent(nullptr);
  };
  std::thread t0(work, 0), t1(work, 1);
  t0.join();
  t1.join();
  ASSERT_FALSE(last[0].empty());
  EXPECT_TRUE(bitIdentical(last[0], last[1]))
      << "the two contexts' outputs differ";
}

/// Quantizes `x` with `quantizer` in the current context; returns the error,
/// or checks the codes, block and global scales against `expected`.
llvm::Error quantizeAndCompare(runtime::GpuQuantizer &quantizer,
                               const compiler::QuantizeSpec &spec,
                               const std::vector<float> &x,
                               const QuantizedTensor &expected) {
  using quantizetest::DeviceBuffer;
  DeviceBuffer input(x.size() * 4), codes(expected.codes.size()),
      local(expected.localE8M0.size()), global(expected.global.size() * 4);
  input.upload(x.data());
  codes.poison();
  local.poison();
  global.poison();
  runtime::QuantizeBuffers buffers{input.get(), codes.get(), local.get(),
                                   global.get(), 0};
  if (llvm::Error e = quantizer.quantize(spec, buffers, nullptr))
    return e;
  EXPECT_EQ(DeviceBuffer::api().streamSynchronize(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(codes.download<uint8_t>(), expected.codes);
  EXPECT_EQ(local.download<uint8_t>(), expected.localE8M0);
  std::vector<uint32_t> want(expected.global.size());
  std::memcpy(want.data(), expected.global.data(), want.size() * 4);
  EXPECT_EQ(global.download<uint32_t>(), want);
  return llvm::Error::success();
}

TEST_F(MultiContextGpuTest, AQuantizerServesOnlyTheContextOfItsFirstCall) {
  compiler::QuantizeSpec spec;
  spec.rows = 96;
  spec.cols = 512;
  spec.options = {ScalingScheme::twoLevel(GlobalScope::Row, 32),
                  Fp8Format::E4M3, false};
  std::vector<float> x =
      llmActivationSample(spec.rows, spec.cols, std::random_device{}());
  llvm::Expected<QuantizedTensor> expected =
      quantize(x, spec.rows, spec.cols, spec.options);
  ASSERT_TRUE(bool(expected)) << llvm::toString(expected.takeError());

  runtime::KernelCacheOptions cacheOptions;
  cacheOptions.useDisk = false;
  runtime::KernelCache cache(cacheOptions);
  runtime::GpuQuantizer primary(cache, device->getSmCount());
  makeCurrent(device->getContext());
  {
    SCOPED_TRACE("primary context");
    llvm::Error e = quantizeAndCompare(primary, spec, x, *expected);
    ASSERT_FALSE(bool(e)) << llvm::toString(std::move(e));
  }
  makeCurrent(second->context);
  {
    SCOPED_TRACE("the primary context's quantizer in the second context");
    llvm::Error e = quantizeAndCompare(primary, spec, x, *expected);
    ASSERT_TRUE(bool(e)) << "a launch in the wrong context was accepted";
    std::string message = llvm::toString(std::move(e));
    EXPECT_NE(message.find("use one per context"), std::string::npos)
        << message;
  }
  {
    SCOPED_TRACE("second context, its own quantizer");
    runtime::GpuQuantizer secondQuantizer(cache, device->getSmCount());
    llvm::Error e = quantizeAndCompare(secondQuantizer, spec, x, *expected);
    ASSERT_FALSE(bool(e)) << llvm::toString(std::move(e));
  }
  // Each quantizer frees its workspace in its own context.
  makeCurrent(device->getContext());
}

} // namespace
