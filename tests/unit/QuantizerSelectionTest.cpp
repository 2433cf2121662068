//===- QuantizerSelectionTest.cpp - Which spec's kernels run a quantization
//===//
//
// selectCompiledSpec against a memory cache filled by a stub compiler (no
// NVRTC, no GPU): a spec runs on its own kernels unless only its any-K twin
// is cached, and kernels that take no K-specialization keep their own.
//
//===----------------------------------------------------------------------===//

#include "moss/Compiler/QuantizerSource.h"
#include "moss/Runtime/Api/Quantizer.h"
#include "moss/Runtime/Cache/KernelCache.h"

#include "gtest/gtest.h"

#include <atomic>
#include <memory>

using namespace moss::compiler;
using namespace moss::numerics;
using namespace moss::runtime;

namespace {

/// A memory-only cache whose compiler returns a placeholder image and
/// counts its calls.
std::unique_ptr<KernelCache>
makeStubCache(std::shared_ptr<std::atomic<int>> calls) {
  KernelCacheOptions options;
  options.useDisk = false;
  options.compiler.version = "stub-1";
  options.compiler.compile =
      [calls](llvm::StringRef source,
              const CompileOptions &) -> llvm::Expected<CompileResult> {
    ++*calls;
    CompileResult result;
    result.ptx = "// " + std::to_string(source.size());
    return result;
  };
  return std::make_unique<KernelCache>(std::move(options));
}

QuantizeSpec makeSpec(int64_t cols, bool transpose = false) {
  QuantizeSpec spec;
  spec.rows = 512;
  spec.cols = cols;
  spec.input = InputType::BF16;
  spec.options = {ScalingScheme::twoLevel(GlobalScope::Row), Fp8Format::E4M3,
                  transpose, BlockScaleFold::Row};
  return spec;
}

QuantizeSpec select(KernelCache &cache, const QuantizeSpec &spec,
                    bool withScale = false) {
  llvm::Expected<QuantizeSpec> chosen =
      selectCompiledSpec(cache, spec, withScale);
  EXPECT_TRUE(bool(chosen)) << llvm::toString(chosen.takeError());
  return chosen ? *chosen : spec;
}

TEST(QuantizerSelectionTest, AColdCacheCompilesTheSpecsOwnKernels) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  std::unique_ptr<KernelCache> cache = makeStubCache(calls);
  EXPECT_FALSE(select(*cache, makeSpec(4096)).anyK);
  EXPECT_EQ(*calls, 0) << "selecting compiles nothing";
}

TEST(QuantizerSelectionTest, AnotherKOfTheTwinsThreadsTakesTheCachedTwin) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  std::unique_ptr<KernelCache> cache = makeStubCache(calls);
  // A warm of K = 4096 leaves the any-K twin (128 threads: K 2049-4096).
  QuantizeSpec warmed = makeSpec(4096);
  warmed.anyK = true;
  ASSERT_FALSE(bool(compileQuantizer(*cache, warmed, false).takeError()));
  const int compiles = *calls;
  EXPECT_TRUE(select(*cache, makeSpec(3072)).anyK);
  EXPECT_TRUE(select(*cache, makeSpec(2176)).anyK);
  // K = 8192 needs 256 threads: no twin of its own is cached.
  EXPECT_FALSE(select(*cache, makeSpec(8192)).anyK);
  EXPECT_EQ(*calls, compiles);
}

TEST(QuantizerSelectionTest, ASpecsOwnKernelsComeFirst) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  std::unique_ptr<KernelCache> cache = makeStubCache(calls);
  QuantizeSpec spec = makeSpec(3072);
  QuantizeSpec twin = spec;
  twin.anyK = true;
  ASSERT_FALSE(bool(compileQuantizer(*cache, twin, false).takeError()));
  ASSERT_FALSE(bool(compileQuantizer(*cache, spec, false).takeError()));
  EXPECT_FALSE(select(*cache, spec).anyK);
}

TEST(QuantizerSelectionTest, KernelsWithoutKTakeTheirOwn) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  std::unique_ptr<KernelCache> cache = makeStubCache(calls);
  // Transposed kernels, and rows cut into segments, have no any-K twin.
  for (QuantizeSpec spec :
       {makeSpec(4096, /*transpose=*/true), makeSpec(65536)}) {
    QuantizeSpec twin = spec;
    twin.anyK = true;
    ASSERT_FALSE(bool(compileQuantizer(*cache, twin, false).takeError()));
    EXPECT_FALSE(select(*cache, spec).anyK);
  }
}

} // namespace
