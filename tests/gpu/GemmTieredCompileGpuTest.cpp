//===- GemmTieredCompileGpuTest.cpp - GemmRunner's tiered compile ---------===//
//
// GemmCompileMode on an H200: a tiered first call launches the quick-compile
// variant while the full kernel compiles in the background, then switches;
// a cached full kernel, or one that is its own variant, is used at once.
// Each test has its own memory-only kernel cache, so nothing is cached
// before it. That the variant computes the full kernel's output bit for bit
// is GemmGpuTest's (its `quick_first` cases).
//
//===----------------------------------------------------------------------===//

#include "HopperSkip.h"

#include "moss/Gemm/Gemm.h"
#include "moss/Runtime/Cuda/Device.h"

#include "gtest/gtest.h"

#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>

using namespace moss;
using numerics::GlobalScope;
using numerics::ScalingScheme;

namespace {

class GemmTieredCompile : public ::testing::Test {
protected:
  void SetUp() override {
    if (std::string reason = gemmtest::getHopperSkipReason(); !reason.empty())
      GTEST_SKIP() << reason;
    llvm::Expected<runtime::Device> opened = runtime::Device::open(0);
    ASSERT_TRUE(bool(opened)) << llvm::toString(opened.takeError());
    device = std::make_unique<runtime::Device>(std::move(*opened));
    llvm::Error current = device->makeCurrent();
    ASSERT_FALSE(bool(current)) << llvm::toString(std::move(current));
    runtime::KernelCacheOptions options;
    options.useDisk = false;
    cache = std::make_unique<runtime::KernelCache>(options);
  }

  std::unique_ptr<GemmRunner> makeRunner() {
    llvm::Expected<std::unique_ptr<GemmRunner>> runner =
        GemmRunner::create(*cache);
    EXPECT_TRUE(bool(runner)) << llvm::toString(runner.takeError());
    return runner ? std::move(*runner) : nullptr;
  }

  /// prepare() in `mode` (with `tiling`, else the heuristic's), or a failed
  /// expectation and null.
  const GemmKernelInfo *
  prepare(GemmRunner &runner, const compiler::GemmSpec &spec,
          GemmCompileMode mode,
          std::optional<compiler::TileConfig> tiling = std::nullopt) {
    GemmOptions options;
    options.tiling = tiling;
    options.tuningDatabase = "";
    options.compileMode = mode;
    llvm::Expected<const GemmKernelInfo *> info =
        runner.prepare(spec, kRows, options);
    EXPECT_TRUE(bool(info)) << llvm::toString(info.takeError());
    return info ? *info : nullptr;
  }

  static constexpr int64_t kRows = 4096;
  std::unique_ptr<runtime::Device> device;
  std::unique_ptr<runtime::KernelCache> cache;
};

/// MOSS forward, M dynamic: promoted every 32, so it has a quick variant.
compiler::GemmSpec mossSpec() {
  compiler::GemmSpec spec;
  spec.n = 4096;
  spec.k = 4096;
  spec.aScaling = ScalingScheme::twoLevel(GlobalScope::Row);
  spec.bScaling = ScalingScheme::perTensor();
  spec.fold = numerics::BlockScaleFold::None; // the promoted kernel
  return spec;
}

TEST_F(GemmTieredCompile, QuickVariantFirstThenTheFullKernel) {
  std::unique_ptr<GemmRunner> runner = makeRunner();
  ASSERT_TRUE(runner);
  const compiler::GemmSpec spec = mossSpec();
  const GemmKernelInfo *info = prepare(*runner, spec, GemmCompileMode::Tiered);
  ASSERT_TRUE(info);
  EXPECT_TRUE(info->quickCompile);
  EXPECT_TRUE(info->fullCompilePending);
  EXPECT_LE(info->tiling.tileN, compiler::kQuickCompileTileN);
  const std::string quickName = info->kernelName;
  std::printf("quick variant %s: %.3f s\n", quickName.c_str(),
              info->pipelineSeconds + info->cacheSeconds);

  // Later calls switch without waiting once the background compile is done.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  while (info->fullCompilePending &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    info = prepare(*runner, spec, GemmCompileMode::Tiered);
    ASSERT_TRUE(info);
  }
  EXPECT_FALSE(info->fullCompilePending);
  EXPECT_FALSE(info->quickCompile);
  EXPECT_NE(info->kernelName, quickName);
  EXPECT_GT(info->tiling.tileN, compiler::kQuickCompileTileN);
  EXPECT_GT(info->fullCompileSeconds, 0.0);
  std::printf("full kernel %s: %.3f s in the background\n",
              info->kernelName.c_str(), info->fullCompileSeconds);

  // Another runner on the same cache finds the full kernel at once.
  std::unique_ptr<GemmRunner> second = makeRunner();
  ASSERT_TRUE(second);
  const GemmKernelInfo *cached =
      prepare(*second, spec, GemmCompileMode::Tiered);
  ASSERT_TRUE(cached);
  EXPECT_FALSE(cached->quickCompile);
  EXPECT_FALSE(cached->fullCompilePending);
  EXPECT_EQ(cached->kernelName, info->kernelName);
}

TEST_F(GemmTieredCompile, FullModeWaitsForTheTieredCompile) {
  std::unique_ptr<GemmRunner> runner = makeRunner();
  ASSERT_TRUE(runner);
  const compiler::GemmSpec spec = mossSpec();
  const GemmKernelInfo *info = prepare(*runner, spec, GemmCompileMode::Tiered);
  ASSERT_TRUE(info);
  ASSERT_TRUE(info->fullCompilePending);
  info = prepare(*runner, spec, GemmCompileMode::Full);
  ASSERT_TRUE(info);
  EXPECT_FALSE(info->fullCompilePending);
  EXPECT_FALSE(info->quickCompile);

  // Quick mode is a kernel of its own, beside the full one.
  const GemmKernelInfo *quick = prepare(*runner, spec, GemmCompileMode::Quick);
  ASSERT_TRUE(quick);
  EXPECT_TRUE(quick->quickCompile);
  EXPECT_FALSE(quick->fullCompilePending);
  EXPECT_NE(quick->kernelName, info->kernelName);
}

TEST_F(GemmTieredCompile, EnvironmentTurnsTieringOff) {
  std::unique_ptr<GemmRunner> runner = makeRunner();
  ASSERT_TRUE(runner);
  ::setenv("MOSS_TIERED_COMPILE", "0", 1);
  const GemmKernelInfo *info =
      prepare(*runner, mossSpec(), GemmCompileMode::Tiered);
  ::unsetenv("MOSS_TIERED_COMPILE");
  ASSERT_TRUE(info);
  EXPECT_FALSE(info->quickCompile);
  EXPECT_FALSE(info->fullCompilePending);
  EXPECT_GT(info->tiling.tileN, compiler::kQuickCompileTileN);
}

/// Without promotion the variant has smaller tiles only, so a kernel whose
/// tiles are small already (at most 128 x 192) has none and compiles whole.
TEST_F(GemmTieredCompile, UnpromotedKernelsTierOnlyWithLargeTiles) {
  std::unique_ptr<GemmRunner> runner = makeRunner();
  ASSERT_TRUE(runner);
  compiler::GemmSpec spec = mossSpec();
  spec.aScaling = ScalingScheme::perTensor();
  compiler::TileConfig tiling;
  tiling.tileM = 128;
  tiling.tileN = 128;
  tiling.stages = 6;
  const GemmKernelInfo *whole =
      prepare(*runner, spec, GemmCompileMode::Tiered, tiling);
  ASSERT_TRUE(whole);
  EXPECT_FALSE(whole->quickCompile);
  EXPECT_FALSE(whole->fullCompilePending);

  tiling.tileN = 256;
  tiling.stages = 4;
  const GemmKernelInfo *tiered =
      prepare(*runner, spec, GemmCompileMode::Tiered, tiling);
  ASSERT_TRUE(tiered);
  EXPECT_TRUE(tiered->quickCompile);
  EXPECT_EQ(tiered->tiling.tileN, compiler::kQuickCompileDirectTileN);
  tiered = prepare(*runner, spec, GemmCompileMode::Full, tiling);
  ASSERT_TRUE(tiered);
  EXPECT_FALSE(tiered->quickCompile);
  EXPECT_EQ(tiered->tiling.tileN, 256);
}

} // namespace
