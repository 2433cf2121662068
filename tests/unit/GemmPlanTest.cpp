//===- GemmPlanTest.cpp - planGemm, the one planner of a GEMM -------------===//
//
// The plan's decisions against the rules the docs state (the default fold:
// docs/NUMERICS-CONTRACT.md section 8 and GemmSpec::getFold; fold A in the
// kernel: GemmSpec::canFoldAInKernel; the tiling: given, else the
// database's entry at the launch's bucket, else the heuristic's), and that
// the runtime, compileGemm and the emitted kernel read the plan instead of
// deciding again. No GPU.
//
//===----------------------------------------------------------------------===//

#include "moss/Compiler/Compile.h"
#include "moss/Compiler/GemmPlan.h"
#include "moss/Compiler/GemmSource.h"
#include "moss/Compiler/TuningDatabase.h"
#include "moss/Gemm/Gemm.h"
#include "moss/Runtime/Cache/KernelCache.h"

#include "GemmSpecs.h"

#include "gtest/gtest.h"

using namespace moss;
using namespace moss::compiler;
using namespace moss::compiler::test;
using numerics::BlockScaleFold;
using numerics::GlobalScope;
using numerics::ScalingScheme;
using numerics::ScalingKind;

namespace {

/// The MOSS forward GEMM with the default fold (mossForward() pins None).
GemmSpec mossDefaultFold(int64_t m = GemmSpec::kDynamic) {
  GemmSpec spec = mossForward(m);
  spec.fold.reset();
  return spec;
}

GemmPlan planOrDie(const GemmSpec &spec, const GemmPlanOptions &options = {}) {
  llvm::Expected<GemmPlan> plan = planGemm(spec, TargetInfo::h200(), options);
  if (!plan) {
    ADD_FAILURE() << llvm::toString(plan.takeError());
    return GemmPlan();
  }
  return *plan;
}

/// A database with one entry: `tiling` for `kernel` at M = `m` on an H200.
TuningDatabase databaseOf(const GemmSpec &kernel, int64_t m,
                          const TileConfig &tiling) {
  TuningEntry entry;
  entry.key = TuningKey::get(kernel, TargetInfo::h200(), m);
  entry.m = m;
  entry.best.tiling = tiling;
  entry.best.milliseconds = 1;
  entry.best.tflops = 1;
  entry.device = "test";
  entry.date = "2026-12-07T00:00:00Z";
  TuningDatabase database;
  database.insert(entry);
  return database;
}

GemmPlanOptions atRows(int64_t rows) {
  GemmPlanOptions options;
  options.rows = rows;
  return options;
}

TEST(GemmPlanTest, LargeLaunchesFoldTwoLevelAByRowsInAPass) {
  GemmPlan plan = planOrDie(mossDefaultFold(), atRows(4096));
  EXPECT_EQ(plan.fold, BlockScaleFold::Row);
  EXPECT_TRUE(plan.passFoldsA);
  EXPECT_FALSE(plan.passFoldsB); // per-tensor B has no E8M0 factors
  // The row fold leaves A one FP32 factor per row and no block scales.
  EXPECT_EQ(plan.kernel.aScaling.kind, ScalingKind::PerRow);
  EXPECT_FALSE(plan.kernel.aScaling.hasLocalScales());
  EXPECT_EQ(plan.kernel.bScaling.kind, ScalingKind::PerTensor);
  EXPECT_FALSE(plan.kernel.kernelFoldsA);
  EXPECT_EQ(plan.kernel.fold, BlockScaleFold::None);
  EXPECT_EQ(plan.asked.str(), mossDefaultFold().str());
}

TEST(GemmPlanTest, SmallLaunchesAndF32OutputsDoNotFoldByDefault) {
  // Below 1024 rows the pass costs more than it saves.
  GemmPlan small = planOrDie(mossDefaultFold(), atRows(1023));
  EXPECT_EQ(small.fold, BlockScaleFold::None);
  EXPECT_FALSE(small.passFoldsA);
  EXPECT_EQ(small.kernel.aScaling.kind, ScalingKind::TwoLevel);
  EXPECT_EQ(planOrDie(mossDefaultFold(), atRows(1024)).fold,
            BlockScaleFold::Row);
  // f32 outputs keep the exact promotion.
  GemmSpec f32 = mossDefaultFold();
  f32.out = FloatType::F32;
  EXPECT_EQ(planOrDie(f32, atRows(8192)).fold, BlockScaleFold::None);
  // A fold asked for is kept whatever the rows.
  GemmSpec asked = mossDefaultFold();
  asked.fold = BlockScaleFold::K128;
  GemmPlan k128 = planOrDie(asked, atRows(16));
  EXPECT_EQ(k128.fold, BlockScaleFold::K128);
  EXPECT_TRUE(k128.passFoldsA);
  EXPECT_EQ(k128.kernel.aScaling.kind, ScalingKind::PerGroup);
  EXPECT_EQ(k128.kernel.aScaling.blockCols, 128);
}

TEST(GemmPlanTest, AKernelCanFoldAItselfWhenAsked) {
  GemmPlanOptions options = atRows(4096);
  options.foldAInKernel = true;
  GemmPlan plan = planOrDie(mossDefaultFold(), options);
  EXPECT_EQ(plan.fold, BlockScaleFold::Row);
  EXPECT_TRUE(plan.kernel.kernelFoldsA);
  EXPECT_FALSE(plan.passFoldsA);
  // A reaches the kernel with its E8M0 block factors.
  EXPECT_EQ(plan.kernel.aScaling.kind, ScalingKind::TwoLevel);
  // Those kernels take 128- or 256-row tiles and no split-K.
  EXPECT_TRUE(plan.tiling.tileM == 128 || plan.tiling.tileM == 256)
      << plan.tiling.tileM;
  EXPECT_EQ(plan.tiling.splitK, 1);

  // A given tiling that kernel cannot take leaves the fold to the pass.
  TileConfig narrow;
  narrow.tileM = 64;
  narrow.tileN = 128;
  narrow.stages = 4;
  options.tiling = narrow;
  GemmPlan passes = planOrDie(mossDefaultFold(), options);
  EXPECT_FALSE(passes.kernel.kernelFoldsA);
  EXPECT_TRUE(passes.passFoldsA);
  EXPECT_EQ(passes.tiling, narrow);
}

TEST(GemmPlanTest, TheDatabaseEntryOfTheLaunchBucketWins) {
  const GemmSpec spec = mossDefaultFold();
  // The entry is keyed by the kernel's spec (the row-folded GEMM) at the
  // bucket of 3000 rows (2049..4096).
  const GemmSpec kernel = planOrDie(spec, atRows(3000)).kernel;
  TileConfig tuned;
  tuned.tileM = 128;
  tuned.tileN = 96;
  tuned.stages = 5;
  tuned.swizzle = 2;
  TuningDatabase database = databaseOf(kernel, 4096, tuned);

  GemmPlanOptions options = atRows(3000);
  options.database = &database;
  GemmPlan plan = planOrDie(spec, options);
  EXPECT_EQ(plan.tiling.tileN, 96);
  EXPECT_EQ(plan.tiling.stages, 5);
  ASSERT_TRUE(plan.tiling.source.has_value());
  EXPECT_EQ(*plan.tiling.source, TilingSource::Database);

  // Another bucket falls back to the heuristic.
  options.rows = 8192;
  GemmPlan other = planOrDie(spec, options);
  ASSERT_TRUE(other.tiling.source.has_value());
  EXPECT_EQ(*other.tiling.source, TilingSource::Heuristic);
}

TEST(GemmPlanTest, QuickCompileNarrowsThePlannedTiling) {
  GemmPlan full = planOrDie(mossForward(), atRows(4096));
  GemmPlanOptions options = atRows(4096);
  options.quickCompile = true;
  GemmPlan quick = planOrDie(mossForward(), options);
  EXPECT_TRUE(quick.quickCompile);
  EXPECT_FALSE(full.quickCompile);
  EXPECT_LE(quick.tiling.tileN, full.tiling.tileN);
  EXPECT_EQ(quick.kernel.str(), full.kernel.str());
  llvm::Expected<GemmPlan> again =
      getQuickCompilePlan(full, TargetInfo::h200());
  ASSERT_TRUE(bool(again)) << llvm::toString(again.takeError());
  EXPECT_EQ(again->tiling, quick.tiling);
}

TEST(GemmPlanTest, ATilingThatDoesNotFitIsAnError) {
  TileConfig huge;
  huge.tileM = 128;
  huge.tileN = 128;
  huge.stages = 16; // 32 KiB a stage: far past 227 KiB of shared memory
  GemmPlanOptions options;
  options.tiling = huge;
  llvm::Expected<GemmPlan> plan =
      planGemm(mossForward(), TargetInfo::h200(), options);
  ASSERT_FALSE(bool(plan));
  std::string error = llvm::toString(plan.takeError());
  EXPECT_NE(error.find("shared memory"), std::string::npos) << error;
}

// The runtime's plan is planGemm's at the launch rows, and the kernel it
// compiles is the plan's: its source is compileGemm(plan)'s, and its tiling
// and spec are the plan's.
TEST(GemmPlanTest, TheRuntimeCompilesWhatItPlanned) {
  runtime::KernelCacheOptions cacheOptions;
  cacheOptions.useDisk = false;
  runtime::KernelCache cache(cacheOptions);
  std::unique_ptr<GemmRunner> runner =
      GemmRunner::createForTarget(cache, TargetInfo::h200());
  GemmOptions options;
  options.tuningDatabase = ""; // the heuristic
  for (int64_t rows : {1, 512, 4096}) {
    llvm::Expected<GemmPlan> runtimePlan =
        runner->getPlan(mossDefaultFold(), rows, options);
    ASSERT_TRUE(bool(runtimePlan)) << llvm::toString(runtimePlan.takeError());
    GemmPlan plan = planOrDie(mossDefaultFold(), atRows(rows));
    EXPECT_EQ(runtimePlan->kernel.str(), plan.kernel.str()) << rows;
    EXPECT_EQ(runtimePlan->tiling, plan.tiling) << rows;
    EXPECT_EQ(runtimePlan->passFoldsA, plan.passFoldsA) << rows;

    llvm::Expected<KernelSource> source =
        runner->getSource(mossDefaultFold(), rows, options);
    ASSERT_TRUE(bool(source)) << llvm::toString(source.takeError());
    llvm::Expected<KernelSource> fromPlan =
        compileGemm(plan, TargetInfo::h200());
    ASSERT_TRUE(bool(fromPlan)) << llvm::toString(fromPlan.takeError());
    EXPECT_EQ(source->source, fromPlan->source) << rows;
    EXPECT_EQ(source->tiling, plan.tiling) << rows;
    EXPECT_EQ(source->spec.str(), plan.kernel.str()) << rows;
  }
  // The runtime checks what it plans.
  llvm::Expected<GemmPlan> bad = runner->getPlan(mossForward(16), 17, options);
  ASSERT_FALSE(bool(bad));
  EXPECT_NE(llvm::toString(bad.takeError()).find("m=17"), std::string::npos);
}

} // namespace

namespace {

/// The row-folded MOSS forward GEMM of 8 experts.
GemmSpec grouped(int64_t groups = 8) {
  GemmSpec spec = mossDefaultFold();
  spec.groups = groups;
  return spec;
}

TEST(GemmPlanTest, GroupedTilesNeverStraddleTwoExperts) {
  for (int64_t rows : {16, 1000, 4096, 65536}) {
    GemmPlan plan = planOrDie(grouped(), atRows(rows));
    EXPECT_EQ(plan.kernel.groups, 8);
    EXPECT_GE(plan.tiling.tileM, 128) << rows;
    EXPECT_EQ(plan.tiling.splitK, 1) << rows;
    EXPECT_EQ(plan.tiling.clusterM * plan.tiling.clusterN, 1) << rows;
    // The fold decides by the rows of all experts together.
    EXPECT_EQ(plan.fold, rows >= 1024 ? BlockScaleFold::Row
                                      : BlockScaleFold::None)
        << rows;
    EXPECT_EQ(plan.passFoldsA, rows >= 1024) << rows;
  }
  // A kernel that folds A itself is a plain GEMM's only.
  GemmPlanOptions options = atRows(4096);
  options.foldAInKernel = true;
  GemmPlan plan = planOrDie(grouped(), options);
  EXPECT_FALSE(plan.kernel.kernelFoldsA);
  EXPECT_TRUE(plan.passFoldsA);
}

TEST(GemmPlanTest, GroupedGemmsIgnoreTheDenseTuningEntry) {
  // An entry for the dense kernel of the same shape and schemes does not
  // tile the grouped one (its key has no experts).
  const GemmSpec kernel = planOrDie(mossDefaultFold(), atRows(4096)).kernel;
  TuningDatabase database = databaseOf(kernel, 4096, makeTiling(64, 64, 4));
  GemmPlanOptions options = atRows(4096);
  options.database = &database;
  GemmPlan plan = planOrDie(grouped(), options);
  EXPECT_NE(plan.tiling.tileM, 64);
}

TEST(GemmPlanTest, AContiguousGroupedGemmTakesItsOwnTuningEntry) {
  const GemmSpec kernel = planOrDie(grouped(), atRows(4096)).kernel;
  TileConfig tuned = makeTiling(256, 128, 4);
  TuningDatabase database = databaseOf(kernel, 4096, tuned);
  GemmPlanOptions options = atRows(3000);
  options.database = &database;
  GemmPlan plan = planOrDie(grouped(), options);
  EXPECT_EQ(plan.tiling.tileM, 256);
  EXPECT_EQ(plan.tiling.tileN, 128);
  ASSERT_TRUE(plan.tiling.source.has_value());
  EXPECT_EQ(*plan.tiling.source, TilingSource::Database);

  // The entry is this expert count's, and the contiguous layout's: the
  // masked layout and the plain GEMM keep the heuristic.
  GemmSpec masked = grouped();
  masked.maskedGroups = true;
  EXPECT_EQ(*planOrDie(masked, options).tiling.source, TilingSource::Heuristic);
  EXPECT_EQ(*planOrDie(grouped(64), options).tiling.source,
            TilingSource::Heuristic);
  GemmSpec plain = grouped();
  plain.groups = 0;
  EXPECT_EQ(*planOrDie(plain, options).tiling.source, TilingSource::Heuristic);

  // A tiling the grouped kernel does not take (clusters) is noted and
  // passed over.
  tuned.tileM = 128;
  tuned.clusterM = 2;
  database = databaseOf(kernel, 4096, tuned);
  std::vector<std::string> notes;
  auto note = [&](const llvm::Twine &text) { notes.push_back(text.str()); };
  options.onNote = note;
  plan = planOrDie(grouped(), options);
  EXPECT_EQ(plan.tiling.clusterM, 1);
  EXPECT_EQ(*plan.tiling.source, TilingSource::Heuristic);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("m-grouped"), std::string::npos) << notes[0];
  EXPECT_NE(notes[0].find("8 experts"), std::string::npos) << notes[0];
}

TEST(GemmPlanTest, AGroupedBWithOneGlobalPerExpertDoesNotFold) {
  GemmSpec spec = grouped();
  spec.bScaling = ScalingScheme::twoLevel(GlobalScope::Tensor, 32);
  llvm::Expected<GemmPlan> plan =
      planGemm(spec, TargetInfo::h200(), atRows(4096));
  ASSERT_FALSE(bool(plan));
  std::string error = llvm::toString(plan.takeError());
  EXPECT_NE(error.find("one global scale per expert"), std::string::npos)
      << error;
  // Unfolded, the kernel takes it (each expert's global in the epilogue).
  spec.fold = BlockScaleFold::None;
  EXPECT_TRUE(bool(planGemm(spec, TargetInfo::h200(), atRows(4096))));
}

TEST(GemmPlanTest, GroupedKernelsCarryTheirLayout) {
  GemmPlan plan = planOrDie(grouped(64), atRows(8192));
  KernelSource source = generateGemmSource(plan, TargetInfo::h200());
  EXPECT_NE(source.source.find("/*Groups=*/64>;"), std::string::npos)
      << source.source;
  GemmSpec masked = grouped(64);
  masked.maskedGroups = true;
  EXPECT_NE(
      generateGemmSource(planOrDie(masked, atRows(8192)), TargetInfo::h200())
          .source.find("/*Groups=*/64, /*MaskedGroups=*/true>;"),
      std::string::npos);
}

/// A MOSS weight gradient of 64 experts: dW_g [M=2048, N=7168] over each
/// expert's tokens.
GemmSpec kGrouped() {
  GemmSpec spec;
  spec.m = 2048;
  spec.n = 7168;
  spec.k = GemmSpec::kDynamic;
  spec.aScaling = ScalingScheme::twoLevel(GlobalScope::Row, 32);
  spec.bScaling = ScalingScheme::twoLevel(GlobalScope::Row, 32);
  spec.groups = 64;
  spec.groupedK = true;
  return spec;
}

TEST(GemmPlanTest, KGroupedPlansServeEveryK) {
  // No fold (its pass needs a static K), one plan at any launch extent.
  const GemmPlan first = planOrDie(kGrouped(), atRows(128));
  EXPECT_EQ(first.fold, BlockScaleFold::None);
  EXPECT_FALSE(first.passFoldsA || first.passFoldsB);
  EXPECT_TRUE(first.kernel.groupedK);
  EXPECT_EQ(first.kernel.k, GemmSpec::kDynamic);
  EXPECT_GE(first.tiling.tileM, 128);
  EXPECT_EQ(first.tiling.splitK, 1);
  EXPECT_EQ(first.tiling.clusterM * first.tiling.clusterN, 1);
  for (int64_t k : {0, 4096, 1 << 20}) {
    const GemmPlan plan = planOrDie(kGrouped(), atRows(k));
    EXPECT_EQ(plan.tiling.tileM, first.tiling.tileM) << k;
    EXPECT_EQ(plan.tiling.tileN, first.tiling.tileN) << k;
    EXPECT_EQ(plan.tiling.stages, first.tiling.stages) << k;
  }
  KernelSource source = generateGemmSource(first, TargetInfo::h200());
  EXPECT_NE(source.source.find("/*M=*/2048, /*N=*/7168, /*K=*/-1,"),
            std::string::npos)
      << source.source;
  EXPECT_NE(source.source.find("/*Groups=*/64, /*MaskedGroups=*/false, "
                               "/*GroupedK=*/true>;"),
            std::string::npos)
      << source.source;
  EXPECT_NE(kGrouped().str().find("2048x7168x? "), std::string::npos)
      << kGrouped().str();
  EXPECT_NE(kGrouped().str().find("64 experts (k-grouped)"), std::string::npos);
}

} // namespace
