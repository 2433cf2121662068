//===- CompileGemmTest.cpp - GemmSpec to CUDA C++ -------------------------===//
//
// compileGemm(): the source it emits, the kernel names (stable, content
// derived), the launch geometry and tiling it reports, the stage dumps, and
// its errors.
//
//===----------------------------------------------------------------------===//

#include "GemmSpecs.h"
#include "moss/Compiler/Compile.h"
#include "moss/Compiler/TemplateParams.h"

#include "gtest/gtest.h"

#include <string>
#include <vector>

using namespace moss;
using namespace moss::compiler;
using namespace moss::compiler::test;
using numerics::GlobalScope;
using numerics::ScalingScheme;

namespace {

KernelSource compile(const GemmSpec &spec, const CompileOptions &options = {}) {
  llvm::Expected<KernelSource> kernel =
      compileGemm(spec, TargetInfo::h200(), options);
  if (!kernel) {
    ADD_FAILURE() << llvm::toString(kernel.takeError());
    return KernelSource();
  }
  return std::move(*kernel);
}

std::string compileError(const GemmSpec &spec,
                         const CompileOptions &options = {}) {
  llvm::Expected<KernelSource> kernel =
      compileGemm(spec, TargetInfo::h200(), options);
  if (kernel) {
    ADD_FAILURE() << "expected an error, got kernel " << kernel->kernelName;
    return "";
  }
  return llvm::toString(kernel.takeError());
}

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

/// The templates' persistent grid of `kernel` for `m` rows on `sms` SMs.
int gridBlocks(const KernelSource &kernel, int m, int sms) {
  return moss::gemm_kernel::gridSize(
      getTemplateParams(kernel.spec, kernel.tiling), m, sms);
}

} // namespace

TEST(CompileGemmTest, DefaultFoldCompilesTheFoldedOperandsKernel) {
  GemmSpec spec = mossForward();
  spec.fold.reset(); // the default: the row fold for a bf16 output
  KernelSource folded = compile(spec);
  EXPECT_TRUE(contains(folded.source, "/*ScaleA=*/moss::gemm_kernel::kPerRow, "
                                      "/*BlockRowsA=*/1, /*BlockA=*/0, "
                                      "/*GlobalRowA=*/true,"))
      << folded.source;
  KernelSource direct = compile(spec.getKernelSpec());
  EXPECT_EQ(folded.kernelName, direct.kernelName)
      << "the GEMM that folds is the kernel of its folded operands";
  // The kernel that folds A itself keeps A two-level and sets FoldA.
  KernelSource folding = compile(spec.getFoldingKernelSpec());
  EXPECT_TRUE(contains(folding.source,
                       "/*ScaleA=*/moss::gemm_kernel::kTwoLevel, "
                       "/*BlockRowsA=*/1, /*BlockA=*/32, "
                       "/*GlobalRowA=*/true,"))
      << folding.source;
  EXPECT_TRUE(contains(folding.source, "/*FoldA=*/true>;")) << folding.source;
  EXPECT_FALSE(contains(folded.source, "FoldA")) << folded.source;
  spec.fold = numerics::BlockScaleFold::K128;
  EXPECT_TRUE(
      contains(compile(spec).source,
               "/*ScaleA=*/moss::gemm_kernel::kPerGroup, /*BlockRowsA=*/1, "
               "/*BlockA=*/128,"));
  spec.out = FloatType::F32;
  spec.fold.reset(); // f32 outputs stay exact by default
  EXPECT_TRUE(contains(compile(spec).source,
                       "/*ScaleA=*/moss::gemm_kernel::kTwoLevel"));
}

TEST(CompileGemmTest, KernelCanFoldAWhereTheRulesAllow) {
  using numerics::BlockScaleFold;
  GemmSpec spec = mossForward();
  spec.fold.reset();
  EXPECT_TRUE(spec.canFoldAInKernel(4096));
  GemmSpec launch = spec.getFoldingKernelSpec(4096);
  EXPECT_TRUE(launch.kernelFoldsA);
  EXPECT_EQ(launch.aScaling.kind, numerics::ScalingKind::TwoLevel);
  EXPECT_EQ(launch.fold, BlockScaleFold::None);
  EXPECT_EQ(launch.getFoldingKernelSpec(4096).str(), launch.str())
      << "idempotent";
  EXPECT_NE(launch.str().find("A folded in the kernel"), std::string::npos);
  EXPECT_FALSE(spec.canFoldAInKernel(16)) << "no fold below 1024 rows";
  EXPECT_FALSE(spec.getFoldingKernelSpec(16).kernelFoldsA);

  GemmSpec other = spec;
  other.k = 4064;
  EXPECT_FALSE(other.canFoldAInKernel(4096)) << "K not a multiple of 128";
  EXPECT_EQ(other.getFoldingKernelSpec(4096).aScaling.kind,
            numerics::ScalingKind::PerRow);
  other = spec;
  other.fold = BlockScaleFold::K128;
  EXPECT_FALSE(other.canFoldAInKernel(4096)) << "the 128 fold";
  other = spec;
  other.promoteK = 128;
  EXPECT_FALSE(other.canFoldAInKernel(4096)) << "a forced promotion";
  other = spec;
  other.mma = MmaType::F16;
  EXPECT_FALSE(other.canFoldAInKernel(4096)) << "the f16 MMA";
  other = spec;
  other.aScaling = ScalingScheme::twoLevel(numerics::GlobalScope::Row, 64);
  EXPECT_FALSE(other.canFoldAInKernel(4096)) << "blocks of 64";
  other = spec;
  other.bScaling = ScalingScheme::perGroup(128, 128);
  EXPECT_FALSE(other.canFoldAInKernel(4096)) << "B promotes";
  other = spec;
  other.bScaling = ScalingScheme::mxfp8();
  ASSERT_TRUE(other.canFoldAInKernel(4096)) << "B's fold is a pass";
  EXPECT_EQ(other.getFoldingKernelSpec(4096).bScaling.kind,
            numerics::ScalingKind::PerRow);
  other.aScaling = ScalingScheme::mxfp8();
  EXPECT_TRUE(other.canFoldAInKernel(4096));
}

TEST(CompileGemmTest, KernelThatFoldsATakesNeitherSplitKNorTileM64) {
  GemmSpec asked = mossForward();
  asked.fold = numerics::BlockScaleFold::Row; // at any M
  GemmSpec folding = asked.getFoldingKernelSpec();
  ASSERT_TRUE(folding.kernelFoldsA);
  TargetInfo target = TargetInfo::h200();
  TileConfig tiling;
  tiling.tileM = 64;
  tiling.tileN = 128;
  tiling.stages = 4;
  llvm::Error e = checkTiling(folding, tiling, target);
  ASSERT_TRUE(bool(e));
  EXPECT_NE(llvm::toString(std::move(e)).find("folds A"), std::string::npos);
  tiling.tileM = 128;
  tiling.splitK = 2;
  e = checkTiling(folding, tiling, target);
  ASSERT_TRUE(bool(e));
  llvm::consumeError(std::move(e));
  tiling.splitK = 1;
  e = checkTiling(folding, tiling, target);
  EXPECT_FALSE(bool(e)) << llvm::toString(std::move(e));
  // Small M, where the heuristic splits K and takes 64-row tiles for the
  // kernel of the folded operands.
  TilingOptions options;
  options.allowSplitK = true;
  bool splitsElsewhere = false;
  for (int64_t m : {1, 16, 64}) {
    for (int64_t k : {4096, 16384}) {
      asked.m = m;
      asked.k = k;
      llvm::Expected<TileConfig> chosen =
          selectTiling(asked.getFoldingKernelSpec(), target, options);
      ASSERT_TRUE(bool(chosen)) << llvm::toString(chosen.takeError());
      EXPECT_NE(chosen->tileM, 64) << chosen->str();
      EXPECT_EQ(chosen->splitK, 1) << chosen->str();
      llvm::Expected<TileConfig> exact =
          selectTiling(asked.getKernelSpec(), target, options);
      ASSERT_TRUE(bool(exact)) << llvm::toString(exact.takeError());
      splitsElsewhere |= exact->splitK > 1 || exact->tileM == 64;
    }
  }
  EXPECT_TRUE(splitsElsewhere) << "the shapes test nothing";
}

TEST(CompileGemmTest, DefaultFoldFollowsOutputAndRows) {
  using numerics::BlockScaleFold;
  GemmSpec spec = mossForward();
  spec.fold.reset();
  EXPECT_EQ(spec.getFold(), BlockScaleFold::Row) << "a dynamic M counts 4096";
  EXPECT_EQ(spec.getFold(GemmSpec::kMinRowsToFold), BlockScaleFold::Row);
  EXPECT_EQ(spec.getFold(GemmSpec::kMinRowsToFold - 1), BlockScaleFold::None);
  EXPECT_EQ(spec.getKernelSpec(16).aScaling.kind, numerics::ScalingKind::TwoLevel);
  EXPECT_EQ(spec.getKernelSpec(4096).aScaling.kind, numerics::ScalingKind::PerRow);
  spec.m = 16;
  EXPECT_EQ(spec.getFold(), BlockScaleFold::None) << "a static M of 16";
  spec.m = GemmSpec::kDynamic;
  spec.out = FloatType::F32;
  EXPECT_EQ(spec.getFold(8192), BlockScaleFold::None);
  spec.fold = BlockScaleFold::K128;
  EXPECT_EQ(spec.getFold(1), BlockScaleFold::K128) << "asked for";
  spec.aScaling = ScalingScheme::perTensor();
  EXPECT_EQ(spec.getFold(8192), BlockScaleFold::None) << "nothing to fold";
}

TEST(CompileGemmTest, MossForwardSource) {
  KernelSource kernel = compile(mossForward());
  const std::string &src = kernel.source;
  EXPECT_EQ(src.rfind("#include \"moss/gemm/kernel.cuh\"\n", 0), 0u) << src;
  EXPECT_TRUE(contains(src,
                       "using MossGemmConfig = moss::gemm_kernel::Config<\n"
                       "    /*M=*/-1, /*N=*/11008, /*K=*/4096,\n"
                       "    /*ElemA=*/moss::gemm_kernel::kE4M3, "
                       "/*ElemB=*/moss::gemm_kernel::kE4M3,\n"
                       "    /*ScaleA=*/moss::gemm_kernel::kTwoLevel, "
                       "/*BlockRowsA=*/1, /*BlockA=*/32, "
                       "/*GlobalRowA=*/true,\n"))
      << src;
  EXPECT_TRUE(contains(src, "/*TileM=*/128, /*TileN=*/128, /*Stages=*/6, "
                            "/*ClusterM=*/2, /*ClusterN=*/1,"))
      << src;
  EXPECT_TRUE(contains(src, "extern \"C\" __global__ "
                            "__launch_bounds__(MossGemmConfig::kThreads, 1) "
                            "void " +
                                kernel.kernelName +
                                "(const __grid_constant__ CUtensorMap "))
      << src;
  EXPECT_TRUE(contains(src, "moss::gemm_kernel::run<MossGemmConfig>(")) << src;

  // moss_gemm_ and 16 hex digits.
  ASSERT_EQ(kernel.kernelName.size(), 10u + 16u);
  EXPECT_EQ(kernel.kernelName.rfind("moss_gemm_", 0), 0u);
  EXPECT_EQ(kernel.kernelName.find_first_not_of("0123456789abcdef", 10),
            std::string::npos);

  EXPECT_EQ(kernel.launch.threads, 384u);
  // Six 128x128 stages with their tables, and one set of staging buffers.
  EXPECT_EQ(kernel.launch.sharedBytes, 226400u);
  EXPECT_EQ(kernel.launch.cluster[0], 2u); // the planned 32 M tiles pair up
  EXPECT_EQ(kernel.tiling.source, TilingSource::Heuristic);
  EXPECT_EQ(kernel.spec.n, 11008);
  // Persistent grid: one block per SM, fewer when there are fewer tiles.
  // With 2x1 clusters a tile row of 86 tiles is 86 pairs, so even one row
  // fills the 132 SMs (their second blocks lie past M).
  EXPECT_EQ(gridBlocks(kernel, 16384, 132), 132);
  EXPECT_EQ(gridBlocks(kernel, 1, 132), 132);
  EXPECT_EQ(gridBlocks(kernel, 1, 200), 172);
}

TEST(CompileGemmTest, ShapesGetSaneTiles) {
  GemmSpec cube;
  cube.m = 8192;
  cube.n = 8192;
  cube.k = 8192;
  cube.aScaling = ScalingScheme::twoLevel(GlobalScope::Tensor);
  cube.bScaling = ScalingScheme::twoLevel(GlobalScope::Tensor);
  cube.fold = numerics::BlockScaleFold::None; // the exact kernel's tiles
  KernelSource large = compile(cube);
  // Factors on both sides: one partial set, so up to 128x192 (or 256x96).
  EXPECT_GE(large.tiling.tileM * large.tiling.tileN, 128 * 128);
  EXPECT_LE(large.tiling.tileM * large.tiling.tileN, 128 * 192);
  EXPECT_GE(large.tiling.stages, 3);
  EXPECT_TRUE(contains(large.source, "/*M=*/8192, /*N=*/8192, /*K=*/8192,"));

  GemmSpec row = cube;
  row.m = 1;
  KernelSource decode = compile(row);
  EXPECT_EQ(decode.tiling.tileM, 64); // both warpgroups on the row
  EXPECT_TRUE(contains(decode.source, "/*TileM=*/64,"));
  EXPECT_LE(decode.tiling.tileN, 64);
  EXPECT_EQ(gridBlocks(decode, 1, 132), 128); // 8192 / 64 N tiles
}

TEST(CompileGemmTest, KernelNamesFollowContent) {
  KernelSource first = compile(mossForward());
  KernelSource again = compile(mossForward());
  EXPECT_EQ(first.kernelName, again.kernelName);
  EXPECT_EQ(first.source, again.source);

  std::vector<GemmSpec> others;
  others.push_back(mossForward(16384)); // M specialized
  GemmSpec n = mossForward();
  n.n = 4096;
  others.push_back(n);
  GemmSpec e5m2 = mossForward();
  e5m2.b = numerics::Fp8Format::E5M2;
  others.push_back(e5m2);
  GemmSpec perTensor = mossForward();
  perTensor.aScaling = ScalingScheme::twoLevel(GlobalScope::Tensor, 32);
  others.push_back(perTensor);
  GemmSpec bias = mossForward();
  bias.bias = FloatType::F32;
  others.push_back(bias);
  GemmSpec amax = mossForward();
  amax.amax = true;
  others.push_back(amax);

  std::vector<std::string> names = {first.kernelName};
  for (const GemmSpec &spec : others) {
    KernelSource kernel = compile(spec);
    SCOPED_TRACE(spec.str());
    for (const std::string &name : names)
      EXPECT_NE(kernel.kernelName, name);
    names.push_back(kernel.kernelName);
  }
}

TEST(CompileGemmTest, GivenTilingIsUsed) {
  CompileOptions options;
  TileConfig tiling;
  tiling.tileM = 256;
  tiling.tileN = 64;
  tiling.stages = 4;
  tiling.raster = RasterOrder::AlongN;
  tiling.swizzle = 2;
  tiling.source = TilingSource::Database;
  options.tiling = tiling;
  KernelSource kernel = compile(mossForward(), options);
  EXPECT_EQ(kernel.tiling, tiling);
  EXPECT_TRUE(contains(kernel.source,
                       "/*TileM=*/256, /*TileN=*/64, /*Stages=*/4, "
                       "/*ClusterM=*/1, /*ClusterN=*/1,\n"
                       "    /*RasterAlongN=*/true, /*Swizzle=*/2, "
                       "/*SplitK=*/1>;"))
      << kernel.source;
  EXPECT_NE(kernel.kernelName, compile(mossForward()).kernelName);
}

TEST(CompileGemmTest, StagesAreReportedInOrder) {
  std::vector<std::pair<std::string, std::string>> stages;
  CompileOptions options;
  options.onStage = [&](llvm::StringRef stage, llvm::StringRef text) {
    stages.emplace_back(stage.str(), text.str());
  };
  KernelSource kernel = compile(mossForward(4096), options);
  ASSERT_EQ(stages.size(), 5u);
  EXPECT_EQ(stages[0].first, kStageInput.str());
  EXPECT_TRUE(contains(stages[0].second, "moss.gemm"));
  EXPECT_TRUE(contains(stages[0].second, "tensor<?x4096xf8E4M3FN>"));
  EXPECT_EQ(stages[1].first, "moss-specialize-shapes");
  EXPECT_TRUE(contains(stages[1].second, "tensor<4096x4096xf8E4M3FN>"));
  EXPECT_EQ(stages[2].first, "moss-select-tiling");
  EXPECT_TRUE(contains(stages[2].second, "#moss.tiling<"));
  EXPECT_EQ(stages[3].first, "moss-convert-gemm-to-emitc");
  EXPECT_TRUE(contains(stages[3].second, "emitc.file \"" + kernel.kernelName));
  EXPECT_EQ(stages[4].first, kStageCuda.str());
  EXPECT_EQ(stages[4].second, kernel.source);
}

TEST(CompileGemmTest, ErrorsSayWhatWasExpected) {
  GemmSpec k100 = mossForward();
  k100.k = 100;
  std::string error = compileError(k100);
  EXPECT_TRUE(contains(error, "'moss.gemm' op K=100 is not a multiple of 32, "
                              "the K step of the FP8 MMA"))
      << error;
  EXPECT_FALSE(contains(error, "see current operation")) << error;

  GemmSpec k96 = mossForward();
  k96.k = 96;
  k96.aScaling = ScalingScheme::twoLevel(GlobalScope::Row, 64);
  error = compileError(k96);
  EXPECT_TRUE(contains(error, "K=96 of operand A is not a multiple of the "
                              "scaling block 64"))
      << error;

  GemmSpec noN = mossForward();
  noN.n = 0;
  error = compileError(noN);
  EXPECT_TRUE(contains(error, "N=0")) << error;

  GemmSpec badBlock = mossForward();
  badBlock.aScaling = ScalingScheme::twoLevel(GlobalScope::Row, 48);
  error = compileError(badBlock);
  EXPECT_TRUE(contains(error, "block length along K must be a power of two "
                              "of at least 32, got 48"))
      << error;

  GemmSpec longBlock = mossForward();
  longBlock.aScaling = ScalingScheme::twoLevel(GlobalScope::Row, 256);
  error = compileError(longBlock);
  EXPECT_TRUE(contains(error, "scaling blocks of 32, 64 or 128")) << error;

  GemmSpec beta = mossForward();
  beta.beta = 0.5f;
  error = compileError(beta);
  EXPECT_TRUE(contains(error, "beta")) << error;

  CompileOptions options;
  TileConfig tooBig;
  tooBig.tileM = 256;
  tooBig.tileN = 256;
  tooBig.stages = 4;
  options.tiling = tooBig;
  error = compileError(mossForward(), options);
  EXPECT_TRUE(contains(error, "accumulator registers")) << error;
}
