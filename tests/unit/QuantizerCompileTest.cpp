//===- QuantizerCompileTest.cpp - Every GPU quantizer compiles ------------===//
//
// No GPU needed: every quantizer variant is generated, compiled with NVRTC
// for sm_90a (and sm_100a), and checked for local memory and spills in the
// ptxas report.
//
//===----------------------------------------------------------------------===//

#include "moss/Runtime/Api/Folder.h"
#include "moss/Runtime/Api/Quantizer.h"
#include "moss/Runtime/Cache/KernelCache.h"
#include "moss/Runtime/Nvrtc/Nvrtc.h"
#include "moss/Runtime/Nvrtc/Resources.h"

#include "gtest/gtest.h"

#include <string>
#include <vector>

using namespace moss::numerics;
using namespace moss::runtime;
using namespace moss::compiler;

namespace {

struct Variant {
  ScalingScheme scheme;
  bool withScale = false;
};

std::vector<Variant> allSchemes() {
  std::vector<Variant> v;
  v.push_back({ScalingScheme::perTensor()});
  v.push_back({ScalingScheme::perTensor(), /*withScale=*/true});
  v.push_back({ScalingScheme::perRow()});
  for (int block : {32, 64, 128})
    v.push_back({ScalingScheme::perGroup(1, block)});
  for (int block : {32, 128})
    v.push_back({ScalingScheme::perGroup(block, block)});
  v.push_back({ScalingScheme::mxfp8()});
  for (int block : {32, 64, 128})
    for (GlobalScope scope : {GlobalScope::Tensor, GlobalScope::Row})
      v.push_back({ScalingScheme::twoLevel(scope, block)});
  return v;
}

/// Compiles `spec` for `arch` and, with `checkResources`, checks the ptxas
/// report of each kernel.
void expectCompiles(const QuantizeSpec &spec, bool withScale,
                    const std::string &arch, bool checkResources) {
  std::string what = spec.options.scheme.str() +
                     (spec.options.transpose ? " transposed" : "") +
                     (spec.bothLayouts ? " both layouts" : "") +
                     (withScale ? " with scale" : "") + " on " + arch;
  SCOPED_TRACE(what);
  llvm::Expected<QuantizerSource> source =
      generateQuantizerSource(spec, withScale);
  ASSERT_TRUE(bool(source)) << llvm::toString(source.takeError());
  CompileOptions options;
  options.arch = arch;
  options.flags.push_back(kPtxasVerboseFlag);
  llvm::Expected<CompileResult> result = compileCuda(source->source, options);
  ASSERT_TRUE(bool(result)) << llvm::toString(result.takeError()) << "\n"
                            << source->source;
  EXPECT_FALSE(result->cubin.empty());
  EXPECT_NE(result->ptx.find(".entry " + source->quantizeKernel),
            std::string::npos);
  std::vector<KernelResources> kernels = parsePtxasResources(result->log);
  ASSERT_EQ(kernels.size(),
            1u + !source->reduceKernel.empty() + !source->columnKernel.empty())
      << result->log;
  for (const KernelResources &k : kernels) {
    if (checkResources) {
      EXPECT_FALSE(k.usesLocalMemory())
          << k.name << ": " << k.stackFrameBytes << " bytes stack, "
          << k.spillStoreBytes << " bytes spilled";
    }
    EXPECT_GT(k.registers, 0) << k.name;
  }
}

TEST(QuantizerCompileTest, EveryVariantCompilesWithoutLocalMemory) {
  if (!isNvrtcAvailable())
    GTEST_SKIP() << "NVRTC (libnvrtc.so.13) is not available";
  for (const Variant &variant : allSchemes())
    for (Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2})
      for (InputType input : {InputType::F32, InputType::BF16})
        for (bool transpose : {false, true}) {
          QuantizeSpec spec;
          spec.rows = 256;
          spec.cols = 4096;
          spec.input = input;
          spec.options = {variant.scheme, format, transpose};
          expectCompiles(spec, variant.withScale, "sm_90a",
                         /*checkResources=*/true);
        }
  // Longer rows take more threads per CTA and fewer registers each.
  for (const Variant &variant : allSchemes()) {
    QuantizeSpec spec;
    spec.rows = 256;
    spec.cols = 11008;
    spec.input = InputType::BF16;
    spec.options = {variant.scheme, Fp8Format::E4M3, false};
    expectCompiles(spec, variant.withScale, "sm_90a", /*checkResources=*/true);
  }
}

TEST(QuantizerCompileTest, DualLayoutVariantsCompileWithoutLocalMemory) {
  if (!isNvrtcAvailable())
    GTEST_SKIP() << "NVRTC (libnvrtc.so.13) is not available";
  for (const Variant &variant : allSchemes()) {
    const ScalingScheme &scheme = variant.scheme;
    if (isSquareGroup(scheme) || scheme.blockCols > 32)
      continue;
    for (BlockScaleFold fold : {BlockScaleFold::None, BlockScaleFold::Row}) {
      if (fold != BlockScaleFold::None && !scheme.localScalesAreE8M0())
        continue;
      for (Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2})
        for (InputType input : {InputType::F32, InputType::BF16}) {
          // (E5M2 encodes as E4M3 does; BF16 alone keeps the test short.)
          if (format == Fp8Format::E5M2 && input == InputType::F32)
            continue;
          QuantizeSpec spec;
          spec.rows = 256;
          spec.cols = 4096;
          spec.input = input;
          spec.options = {scheme, format, false};
          spec.options.fold = fold;
          spec.bothLayouts = true;
          expectCompiles(spec, variant.withScale, "sm_90a",
                         /*checkResources=*/true);
        }
    }
  }
}

TEST(QuantizerCompileTest,
     DualLayoutsTakeTwoKernelsWhereOnlyTheTransposedHalfReduces) {
  // The row-wise kernel with column maxima where the row-major half needs
  // no reduce pass of its own and the transposed one does; the dual-layout
  // kernel otherwise.
  struct Case {
    ScalingScheme scheme;
    BlockScaleFold fold;
    int64_t cols;
    bool twoKernels;
  };
  const Case cases[] = {
      {ScalingScheme::twoLevel(GlobalScope::Row, 32), BlockScaleFold::Row, 4096,
       true},
      {ScalingScheme::twoLevel(GlobalScope::Row, 32), BlockScaleFold::None,
       11008, true},
      {ScalingScheme::perRow(), BlockScaleFold::None, 4096, true},
      {ScalingScheme::mxfp8(), BlockScaleFold::Row, 4096, true},
      // No reduce pass in either half.
      {ScalingScheme::mxfp8(), BlockScaleFold::None, 4096, false},
      {ScalingScheme::perGroup(1, 32), BlockScaleFold::None, 4096, false},
      // A per-tensor global: the row-major half reduces too.
      {ScalingScheme::twoLevel(GlobalScope::Tensor, 32), BlockScaleFold::Row,
       4096, false},
      {ScalingScheme::perTensor(), BlockScaleFold::None, 4096, false},
      // Rows in segments: the row-major half reduces too.
      {ScalingScheme::twoLevel(GlobalScope::Row, 32), BlockScaleFold::Row,
       65536, false},
      // Rows that are not whole 16-byte vectors: the row-wise kernel's
      // rule.
      {ScalingScheme::perRow(), BlockScaleFold::None, 100, false},
  };
  for (const Case &c : cases) {
    QuantizeSpec spec;
    spec.rows = 1024;
    spec.cols = c.cols;
    spec.input = InputType::BF16;
    spec.options = {c.scheme, Fp8Format::E4M3, false};
    spec.options.fold = c.fold;
    spec.bothLayouts = true;
    SCOPED_TRACE(c.scheme.str() + " cols " + std::to_string(c.cols));
    const QuantizerVariant v = chooseQuantizerVariant(spec, false);
    EXPECT_EQ(v.columnMax, c.twoKernels);
    EXPECT_EQ(v.family, c.twoKernels ? QuantizerVariant::Family::Rowwise
                                     : QuantizerVariant::Family::Columnwise);
    llvm::Expected<QuantizerSource> source = generateQuantizerSource(spec);
    ASSERT_TRUE(bool(source)) << llvm::toString(source.takeError());
    EXPECT_EQ(source->columnKernel.empty(), !c.twoKernels);
    // A cast with a given scale has nothing to reduce.
    EXPECT_FALSE(chooseQuantizerVariant(spec, true).columnMax);
  }
}

TEST(QuantizerCompileTest, ADualLayoutCompileBuildsItsTransposedPassToo) {
  // compileQuantizer of a dual-layout spec in two kernels leaves the
  // transposed spec's kernels in the cache as well (compiled beside its
  // own: its quantize pass's program and its reduce pass's); a dual-layout
  // spec in one kernel compiles only its own programs.
  if (!isNvrtcAvailable())
    GTEST_SKIP() << "NVRTC (libnvrtc.so.13) is not available";
  KernelCacheOptions options;
  options.useDisk = false;
  KernelCache cache(options);
  QuantizeSpec spec;
  spec.rows = 1024;
  spec.cols = 2048;
  spec.input = InputType::BF16;
  spec.options = {ScalingScheme::twoLevel(GlobalScope::Row, 32),
                  Fp8Format::E4M3, false, BlockScaleFold::Row};
  spec.bothLayouts = true;
  llvm::Expected<CompiledQuantizer> dual = compileQuantizer(cache, spec, false);
  ASSERT_TRUE(bool(dual)) << llvm::toString(dual.takeError());
  EXPECT_FALSE(dual->source.columnKernel.empty());
  EXPECT_EQ(dual->reduceEntry, nullptr);
  EXPECT_EQ(cache.stats().compiles, 3u);
  llvm::Expected<CompiledQuantizer> transposed =
      compileQuantizer(cache, getTransposedSpec(spec), false);
  ASSERT_TRUE(bool(transposed)) << llvm::toString(transposed.takeError());
  EXPECT_NE(transposed->reduceEntry, nullptr);
  EXPECT_EQ(cache.stats().compiles, 3u);
  EXPECT_EQ(cache.stats().memoryHits, 2u);

  spec.options.scheme = ScalingScheme::mxfp8();
  spec.options.fold = BlockScaleFold::None;
  llvm::Expected<CompiledQuantizer> oneKernel =
      compileQuantizer(cache, spec, false);
  ASSERT_TRUE(bool(oneKernel)) << llvm::toString(oneKernel.takeError());
  EXPECT_TRUE(oneKernel->source.columnKernel.empty());
  EXPECT_EQ(cache.stats().compiles, 4u);
}

TEST(QuantizerCompileTest, TheReducePassIsAProgramOfItsOwn) {
  // Two programs the runtime compiles in parallel, and the one translation
  // unit the compiler lowers to, which holds both.
  QuantizeSpec spec;
  spec.rows = 4096;
  spec.cols = 4096;
  spec.input = InputType::BF16;
  spec.options = {ScalingScheme::twoLevel(GlobalScope::Tensor, 32),
                  Fp8Format::E4M3, true, BlockScaleFold::Row};
  llvm::Expected<QuantizerSource> source = generateQuantizerSource(spec);
  ASSERT_TRUE(bool(source)) << llvm::toString(source.takeError());
  ASSERT_FALSE(source->reduceKernel.empty());
  auto defines = [](const std::string &text, const std::string &kernel) {
    return llvm::StringRef(text).contains("\n" + kernel + "(");
  };
  EXPECT_TRUE(defines(source->reduceSource, source->reduceKernel));
  EXPECT_FALSE(defines(source->reduceSource, source->quantizeKernel));
  EXPECT_TRUE(defines(source->quantizeSource, source->quantizeKernel));
  EXPECT_FALSE(defines(source->quantizeSource, source->reduceKernel));
  EXPECT_TRUE(defines(source->source, source->reduceKernel));
  EXPECT_TRUE(defines(source->source, source->quantizeKernel));

  spec.options.scheme = ScalingScheme::perRow();
  spec.options.transpose = false;
  spec.options.fold = BlockScaleFold::None;
  source = generateQuantizerSource(spec);
  ASSERT_TRUE(bool(source)) << llvm::toString(source.takeError());
  EXPECT_TRUE(source->reduceSource.empty()) << "one pass: a row fits a CTA";
  EXPECT_EQ(source->quantizeSource, source->source);
}

TEST(QuantizerCompileTest, DualLayoutRejectsWhatOneReadCannotWrite) {
  struct Case {
    ScalingScheme scheme;
    InputType input;
    BlockScaleFold fold;
    bool transpose;
    const char *message;
  };
  const Case cases[] = {
      {ScalingScheme::perGroup(1, 128), InputType::BF16, BlockScaleFold::None,
       false, "blocks of at most 64 along K, got 128"},
      {ScalingScheme::twoLevel(GlobalScope::Row, 64), InputType::F32,
       BlockScaleFold::None, false, "blocks of at most 32 along K, got 64"},
      {ScalingScheme::twoLevel(GlobalScope::Row, 32), InputType::BF16,
       BlockScaleFold::K128, false, "not per 128"},
      {ScalingScheme::perGroup(128, 128), InputType::BF16, BlockScaleFold::None,
       false, "square per-group blocks"},
      {ScalingScheme::mxfp8(), InputType::BF16, BlockScaleFold::None, true,
       "leave transpose off"},
  };
  for (const Case &c : cases) {
    QuantizeSpec spec;
    spec.rows = 256;
    spec.cols = 512;
    spec.input = c.input;
    spec.options = {c.scheme, Fp8Format::E4M3, c.transpose};
    spec.options.fold = c.fold;
    spec.bothLayouts = true;
    llvm::Error error = checkGpuQuantizeSpec(spec);
    ASSERT_TRUE(bool(error)) << c.message;
    EXPECT_NE(llvm::toString(std::move(error)).find(c.message),
              std::string::npos)
        << c.message;
  }
  // Each half's own rule holds: the transposed blocks run down X's rows.
  QuantizeSpec spec;
  spec.rows = 100;
  spec.cols = 512;
  spec.options = {ScalingScheme::mxfp8(), Fp8Format::E4M3, false};
  spec.bothLayouts = true;
  llvm::Error error = checkGpuQuantizeSpec(spec);
  ASSERT_TRUE(bool(error));
  EXPECT_NE(llvm::toString(std::move(error)).find("K=100 is not a multiple"),
            std::string::npos);
}

// Blackwell must compile. Its resources are reported but not held to zero:
// the kernels are tuned for sm_90a, and sm_100a's ptxas spills a few bytes in
// the per-tensor cast.
TEST(QuantizerCompileTest, CompilesForBlackwell) {
  if (!isNvrtcAvailable())
    GTEST_SKIP() << "NVRTC (libnvrtc.so.13) is not available";
  for (const Variant &variant : allSchemes()) {
    QuantizeSpec spec;
    spec.rows = 128;
    spec.cols = 11008;
    spec.input = InputType::BF16;
    spec.options = {variant.scheme, Fp8Format::E4M3, false};
    expectCompiles(spec, variant.withScale, "sm_100a",
                   /*checkResources=*/false);
  }
}

TEST(QuantizerCompileTest, LongRowsNeedMoreThreads) {
  // K = 16384 FP32 values is 4096 vectors: 1024 threads of 4 vectors.
  QuantizeSpec spec;
  spec.rows = 4;
  spec.cols = 16384;
  spec.options = {ScalingScheme::twoLevel(GlobalScope::Row, 32),
                  Fp8Format::E4M3, false};
  llvm::Expected<QuantizerSource> source = generateQuantizerSource(spec);
  ASSERT_TRUE(bool(source)) << llvm::toString(source.takeError());
  EXPECT_EQ(source->threads, 1024u);
  EXPECT_TRUE(source->reduceKernel.empty()) << "one pass: the row fits a CTA";
}

// Rows longer than 1024 threads hold are cut into the fewest near-equal
// segments, each whole blocks (and 128 fold groups); what spans a row comes
// from a reduce pass.
TEST(QuantizerCompileTest, LongerRowsAreCutIntoSegments) {
  struct Case {
    int64_t cols;
    InputType input;
    ScalingScheme scheme;
    BlockScaleFold fold;
    int64_t segment;
    QuantizerGlobal source;
    bool foldReference;
  };
  const Case cases[] = {
      // 16512 FP32 values: 516 blocks of 32 in two segments of 258 blocks.
      {16384 + 128, InputType::F32, ScalingScheme::twoLevel(GlobalScope::Row),
       BlockScaleFold::None, 8256, QuantizerGlobal::FromRowBits, false},
      // 1031 blocks (a prime) in two segments: 516 blocks, then 515.
      {32 * 1031, InputType::BF16, ScalingScheme::mxfp8(), BlockScaleFold::Row,
       32 * 516, QuantizerGlobal::None, true},
      // Whole 128 groups: 40960 = 320 groups, two segments of 160.
      {40960, InputType::BF16, ScalingScheme::twoLevel(GlobalScope::Tensor),
       BlockScaleFold::K128, 20480, QuantizerGlobal::FromBits, false},
      {40960, InputType::BF16, ScalingScheme::perRow(), BlockScaleFold::None,
       20480, QuantizerGlobal::FromRowBits, false},
      // Per-tensor needs no word per row; three segments of whole vectors.
      {65536 + 8, InputType::BF16, ScalingScheme::perTensor(),
       BlockScaleFold::None, 21848, QuantizerGlobal::FromBits, false},
  };
  for (const Case &c : cases) {
    QuantizeSpec spec;
    spec.rows = 3;
    spec.cols = c.cols;
    spec.input = c.input;
    spec.options = {c.scheme, Fp8Format::E4M3, false, c.fold};
    SCOPED_TRACE(c.scheme.str() + " K=" + std::to_string(c.cols));
    ASSERT_FALSE(bool(checkGpuQuantizeSpec(spec)));
    QuantizerVariant v = chooseQuantizerVariant(spec, false);
    EXPECT_EQ(v.segment, c.segment);
    EXPECT_EQ(v.source, c.source);
    EXPECT_EQ(v.foldReference, c.foldReference);
    EXPECT_EQ(v.globalPerRow, c.source == QuantizerGlobal::FromRowBits);
    EXPECT_TRUE(v.hasReducePass());
    EXPECT_LE(v.segment * (c.input == InputType::F32 ? 4 : 2), 65536);
  }
  // Segments count against the launch's 2^31-1.
  QuantizeSpec spec;
  spec.rows = int64_t(1) << 30;
  spec.cols = 40960;
  spec.input = InputType::BF16;
  spec.options = {ScalingScheme::perRow(), Fp8Format::E4M3, false};
  llvm::Error error = checkGpuQuantizeSpec(spec);
  ASSERT_TRUE(bool(error));
  EXPECT_NE(llvm::toString(std::move(error)).find("into 2 segments"),
            std::string::npos);
}

TEST(QuantizerCompileTest, SegmentedRowsCompileWithoutLocalMemory) {
  if (!isNvrtcAvailable())
    GTEST_SKIP() << "NVRTC (libnvrtc.so.13) is not available";
  for (const Variant &variant : allSchemes()) {
    if (isSquareGroup(variant.scheme))
      continue;
    for (BlockScaleFold fold :
         {BlockScaleFold::None, BlockScaleFold::Row, BlockScaleFold::K128}) {
      if (fold != BlockScaleFold::None && !variant.scheme.localScalesAreE8M0())
        continue;
      QuantizeSpec spec;
      spec.rows = 64;
      spec.cols = 40960 + 128;
      spec.input = InputType::BF16;
      spec.options = {variant.scheme, Fp8Format::E4M3, false, fold};
      expectCompiles(spec, variant.withScale, "sm_90a",
                     /*checkResources=*/true);
    }
  }
}

// A gather (a mixture-of-experts dispatch) is a variant of its own of the
// row-wise kernel, in whole rows and in segments, and of the transposed
// one; square blocks and both layouts take none.
TEST(QuantizerCompileTest, GatheredRowsCompileAsTheirOwnVariants) {
  if (!isNvrtcAvailable())
    GTEST_SKIP() << "NVRTC (libnvrtc.so.13) is not available";
  for (const Variant &variant : allSchemes()) {
    if (isSquareGroup(variant.scheme))
      continue;
    for (int64_t cols : {int64_t(4096), int64_t(40960 + 128)}) {
      QuantizeSpec spec;
      spec.rows = 64;
      spec.cols = cols;
      spec.input = InputType::BF16;
      spec.options = {variant.scheme, Fp8Format::E4M3, false};
      spec.gather = true;
      llvm::Expected<QuantizerSource> source =
          generateQuantizerSource(spec, variant.withScale);
      ASSERT_TRUE(bool(source)) << llvm::toString(source.takeError());
      EXPECT_NE(source->source.find(", true>;"), std::string::npos)
          << source->source;
      expectCompiles(spec, variant.withScale, "sm_90a",
                     /*checkResources=*/true);
    }
    if (variant.withScale)
      continue;
    QuantizeSpec transposed;
    transposed.rows = 384;
    transposed.cols = 1024;
    transposed.input = InputType::BF16;
    transposed.options = {variant.scheme, Fp8Format::E4M3, true,
                          variant.scheme.kind == ScalingKind::TwoLevel
                              ? BlockScaleFold::Row
                              : BlockScaleFold::None};
    transposed.gather = true;
    llvm::Expected<QuantizerSource> source =
        generateQuantizerSource(transposed, false);
    ASSERT_TRUE(bool(source)) << llvm::toString(source.takeError());
    EXPECT_NE(source->source.find(", false, true>;"), std::string::npos)
        << source->source;
    expectCompiles(transposed, false, "sm_90a", /*checkResources=*/true);
  }
  QuantizeSpec spec;
  spec.rows = 256;
  spec.cols = 512;
  spec.options = {ScalingScheme::perGroup(128, 128), Fp8Format::E4M3, false};
  spec.gather = true;
  for (bool bothLayouts : {false, true}) {
    if (bothLayouts) {
      spec.options.scheme = ScalingScheme::perRow();
      spec.bothLayouts = true;
    }
    llvm::Error error = checkGpuQuantizeSpec(spec);
    ASSERT_TRUE(bool(error)) << bothLayouts;
    EXPECT_NE(llvm::toString(std::move(error))
                  .find(bothLayouts ? "not both layouts at once"
                                    : "not square blocks"),
              std::string::npos)
        << bothLayouts;
  }
}

// A kernel for any K (QuantizeSpec::anyK) is one source per thread count:
// every K that needs those threads gets the same text, which compiles for
// every row-wise scheme without local memory, and so does the row-wise
// kernel with column maxima of a dual layout; rows that need segments keep
// their K-specialized kernels.
TEST(QuantizerCompileTest, AnyKKernelsServeEveryKOfTheirThreadCount) {
  if (!isNvrtcAvailable())
    GTEST_SKIP() << "NVRTC (libnvrtc.so.13) is not available";
  auto makeSpec = [](const ScalingScheme &scheme, int64_t cols,
                     InputType input) {
    QuantizeSpec spec;
    spec.rows = 64;
    spec.cols = cols;
    spec.input = input;
    spec.options = {scheme, Fp8Format::E4M3, false,
                    scheme.localScalesAreE8M0() ? BlockScaleFold::Row
                                                : BlockScaleFold::None};
    spec.anyK = true;
    return spec;
  };
  for (const Variant &variant : allSchemes()) {
    if (isSquareGroup(variant.scheme))
      continue;
    // BF16: 128 threads take K of 2049 to 4096, 1024 threads 16385 to 32768.
    for (auto [small, large] : {std::pair<int64_t, int64_t>{2176, 4096},
                                std::pair<int64_t, int64_t>{16512, 32768}}) {
      QuantizeSpec a = makeSpec(variant.scheme, small, InputType::BF16);
      QuantizeSpec b = makeSpec(variant.scheme, large, InputType::BF16);
      QuantizerVariant v = chooseQuantizerVariant(a, variant.withScale);
      EXPECT_TRUE(v.anyK) << variant.scheme.str();
      EXPECT_EQ(v.segment, large);
      llvm::Expected<QuantizerSource> sa =
          generateQuantizerSource(a, variant.withScale);
      llvm::Expected<QuantizerSource> sb =
          generateQuantizerSource(b, variant.withScale);
      ASSERT_TRUE(sa && sb);
      EXPECT_EQ(sa->source, sb->source) << variant.scheme.str();
      expectCompiles(b, variant.withScale, "sm_90a", /*checkResources=*/true);
    }
  }
  QuantizeSpec segmented = makeSpec(ScalingScheme::twoLevel(GlobalScope::Row),
                                    65536, InputType::BF16);
  EXPECT_FALSE(chooseQuantizerVariant(segmented, false).anyK);
  QuantizeSpec dual = makeSpec(ScalingScheme::twoLevel(GlobalScope::Row), 4096,
                               InputType::BF16);
  dual.bothLayouts = true;
  QuantizerVariant dualVariant = chooseQuantizerVariant(dual, false);
  EXPECT_TRUE(dualVariant.columnMax);
  EXPECT_TRUE(dualVariant.anyK);
  QuantizeSpec dualSmaller = dual;
  dualSmaller.cols = 2176;
  llvm::Expected<QuantizerSource> a = generateQuantizerSource(dual, false);
  llvm::Expected<QuantizerSource> b =
      generateQuantizerSource(dualSmaller, false);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->source, b->source);
  expectCompiles(dual, false, "sm_90a", /*checkResources=*/true);
}

TEST(QuantizerCompileTest, RejectsUnsupportedShapesWithTheValue) {
  struct Case {
    QuantizeSpec spec;
    const char *message;
  };
  QuantizeSpec base;
  base.rows = 64;
  base.cols = 256;
  std::vector<Case> cases;
  Case oddK{base, "K=250 must be a multiple of 4"};
  oddK.spec.cols = 250;
  oddK.spec.options.scheme = ScalingScheme::perRow();
  cases.push_back(oddK);
  Case block{base, "power-of-two blocks from 16 to 128, got 256"};
  block.spec.options.scheme = ScalingScheme::twoLevel(GlobalScope::Row, 256);
  cases.push_back(block);
  Case notMultiple{base, "K=256 is not a multiple of the scaling block 96"};
  notMultiple.spec.options.scheme = ScalingScheme::perGroup(1, 96);
  cases.push_back(notMultiple);
  for (Case &c : cases) {
    llvm::Error error = checkGpuQuantizeSpec(c.spec);
    ASSERT_TRUE(bool(error)) << c.message;
    EXPECT_NE(llvm::toString(std::move(error)).find(c.message),
              std::string::npos)
        << c.message;
  }
}

TEST(QuantizerCompileTest, LayoutFollowsTheScheme) {
  QuantizeSpec spec;
  spec.rows = 300;
  spec.cols = 512;
  spec.options = {ScalingScheme::perGroup(128, 128), Fp8Format::E4M3, false};
  QuantizeLayout layout = getQuantizeLayout(spec);
  EXPECT_EQ(layout.localRows, 3);
  EXPECT_EQ(layout.localCols, 4);
  EXPECT_EQ(layout.localElementBytes, 4);
  EXPECT_EQ(layout.globalCount, 0);
  spec.rows = 512;
  spec.cols = 300;
  spec.options = {ScalingScheme::twoLevel(GlobalScope::Row, 32),
                  Fp8Format::E5M2, true};
  layout = getQuantizeLayout(spec);
  EXPECT_EQ(layout.codeRows, 300);
  EXPECT_EQ(layout.codeCols, 512);
  EXPECT_EQ(layout.localRows, 300);
  EXPECT_EQ(layout.localCols, 16);
  EXPECT_EQ(layout.localElementBytes, 1);
  EXPECT_EQ(layout.globalCount, 300);
}

} // namespace

namespace {

// Bad buffers fail before anything reaches the driver: without a GPU the
// error would otherwise be "no CUDA driver".
TEST(QuantizerArgumentsTest, BadBuffersFailBeforeAnyLaunch) {
  KernelCacheOptions cacheOptions;
  cacheOptions.useDisk = false;
  KernelCache cache(cacheOptions);
  GpuQuantizer quantizer(cache, 132);
  QuantizeSpec spec;
  spec.rows = 64;
  spec.cols = 256;
  spec.options = {ScalingScheme::twoLevel(GlobalScope::Row, 32),
                  Fp8Format::E4M3, false};
  const CUdeviceptr good = 0x10000;
  struct Case {
    QuantizeBuffers buffers;
    const char *message;
  };
  Case cases[] = {
      {{0, good, good, good, 0}, "the input x is null"},
      {{good + 4, good, good, good, 0}, "the input x must be 16-byte aligned"},
      {{good, good + 8, good, good, 0}, "the codes q must be 16-byte aligned"},
      {{good, good, 0, good, 0},
       "the block scales (local) is null; two-level(row, 32) needs it"},
      {{good, good, good, 0, 0},
       "the global scales is null; two-level(row, 32) needs it"},
      {{good, good, good, good, good + 4}, "the counters must be 8-byte"},
  };
  for (const Case &c : cases) {
    llvm::Error error = quantizer.quantize(spec, c.buffers, nullptr);
    ASSERT_TRUE(bool(error)) << c.message;
    std::string message = llvm::toString(std::move(error));
    EXPECT_NE(message.find(c.message), std::string::npos) << message;
  }
  spec.options.scheme = ScalingScheme::perTensor();
  llvm::Error error =
      quantizer.quantize(spec, {good, good, good, good, 0}, nullptr);
  ASSERT_TRUE(bool(error));
  EXPECT_NE(llvm::toString(std::move(error))
                .find("the block scales (local) is given, but per-tensor has "
                      "none"),
            std::string::npos);
}

} // namespace

namespace {

TEST(FoldCompileTest, EveryFoldVariantCompilesWithoutLocalMemory) {
  if (!isNvrtcAvailable())
    GTEST_SKIP() << "NVRTC (libnvrtc.so.13) is not available";
  std::vector<ScalingScheme> schemes = {ScalingScheme::mxfp8()};
  for (int block : {32, 64, 128})
    for (GlobalScope scope : {GlobalScope::Tensor, GlobalScope::Row})
      schemes.push_back(ScalingScheme::twoLevel(scope, block));
  for (const ScalingScheme &scheme : schemes)
    for (Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2})
      for (BlockScaleFold fold : {BlockScaleFold::K128, BlockScaleFold::Row}) {
        FoldSpec spec;
        spec.rows = 64;
        spec.cols = 4096;
        spec.format = format;
        spec.scheme = scheme;
        spec.fold = fold;
        SCOPED_TRACE(scheme.str() + " fold " + getName(fold));
        ASSERT_FALSE(bool(checkFoldSpec(spec)));
        CompileOptions options;
        options.flags.push_back(kPtxasVerboseFlag);
        llvm::Expected<CompileResult> result =
            compileCuda(generateFoldSource(spec), options);
        ASSERT_TRUE(bool(result)) << llvm::toString(result.takeError());
        std::vector<KernelResources> kernels = parsePtxasResources(result->log);
        ASSERT_EQ(kernels.size(), 1u) << result->log;
        EXPECT_FALSE(kernels[0].usesLocalMemory()) << result->log;
      }
}

TEST(FoldCompileTest, QuantizersThatFoldCompileWithoutLocalMemory) {
  if (!isNvrtcAvailable())
    GTEST_SKIP() << "NVRTC (libnvrtc.so.13) is not available";
  for (ScalingScheme scheme : {ScalingScheme::mxfp8(),
                               ScalingScheme::twoLevel(GlobalScope::Tensor),
                               ScalingScheme::twoLevel(GlobalScope::Row, 64)})
    for (InputType input : {InputType::F32, InputType::BF16})
      for (BlockScaleFold fold : {BlockScaleFold::K128, BlockScaleFold::Row})
        for (bool transpose : {false, true}) {
          QuantizeSpec spec;
          spec.rows = transpose ? 256 : 64;
          spec.cols = 4096;
          spec.input = input;
          spec.options = {scheme, Fp8Format::E4M3, transpose, fold};
          SCOPED_TRACE(std::string("fold ") + getName(fold));
          expectCompiles(spec, false, "sm_90a", /*checkResources=*/true);
        }
}

TEST(FoldCompileTest, RejectsWhatTheKernelCannotFold) {
  FoldSpec spec;
  spec.rows = 4;
  spec.cols = 96;
  spec.scheme = ScalingScheme::twoLevel(GlobalScope::Tensor);
  spec.fold = BlockScaleFold::K128;
  llvm::Error e = checkFoldSpec(spec);
  ASSERT_TRUE(bool(e));
  EXPECT_NE(llvm::toString(std::move(e)).find("K=96"), std::string::npos);
  spec.scheme = ScalingScheme::perTensor();
  spec.fold = BlockScaleFold::Row;
  e = checkFoldSpec(spec);
  ASSERT_TRUE(bool(e));
  EXPECT_NE(llvm::toString(std::move(e)).find("has none"), std::string::npos);

  // Transposed, K is the input's rows: 64 is not a whole 128 fold group.
  QuantizeSpec transposed;
  transposed.rows = 64;
  transposed.cols = 256;
  transposed.options = {ScalingScheme::twoLevel(GlobalScope::Tensor),
                        Fp8Format::E4M3, true, BlockScaleFold::K128};
  e = checkGpuQuantizeSpec(transposed);
  ASSERT_TRUE(bool(e));
  EXPECT_NE(llvm::toString(std::move(e)).find("K=64"), std::string::npos);
  QuantizeSpec perTensor = transposed;
  perTensor.options = {ScalingScheme::perTensor(), Fp8Format::E4M3, false,
                       BlockScaleFold::K128};
  e = checkGpuQuantizeSpec(perTensor);
  ASSERT_TRUE(bool(e));
  EXPECT_NE(llvm::toString(std::move(e)).find("has none"), std::string::npos);
}

} // namespace
