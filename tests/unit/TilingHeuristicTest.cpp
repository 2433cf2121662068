//===- TilingHeuristicTest.cpp - The GEMM tiling heuristic ----------------===//
//
// The plain-C++ heuristic of moss/Compiler/Tiling.h: sane tiles for large,
// skinny and odd shapes, optimality over its own candidate set, the limits
// it respects, and its resource model against the templates' config.cuh.
//
//===----------------------------------------------------------------------===//

#include "GemmSpecs.h"
#include "moss/Compiler/Tiling.h"

// The templates' configuration header compiles as host C++; the resource
// model must match its kThreads and kSharedBytes.
#include "../../templates/moss/gemm/config.cuh"

#include "gtest/gtest.h"

using namespace moss;
using namespace moss::compiler;
using namespace moss::compiler::test;
using numerics::GlobalScope;
using numerics::ScalingScheme;

namespace {

TileConfig select(const GemmSpec &spec, const TargetInfo &target = {},
                  const TilingOptions &options = {}) {
  llvm::Expected<TileConfig> tiling = selectTiling(spec, target, options);
  if (!tiling) {
    ADD_FAILURE() << llvm::toString(tiling.takeError());
    return TileConfig();
  }
  return *tiling;
}

/// Every configuration the heuristic could have chosen (cluster 1x1,
/// split_k 1) with the most stages that fit.
std::vector<TileConfig> allFitting(const GemmSpec &spec,
                                   const TargetInfo &target) {
  std::vector<TileConfig> result;
  for (int64_t tileM : {128, 256})
    for (int64_t tileN = 32; tileN <= 256; tileN += 32) {
      TileConfig tiling;
      tiling.tileM = tileM;
      tiling.tileN = tileN;
      tiling.stages = 2;
      if (llvm::Error error = checkTiling(spec, tiling, target)) {
        llvm::consumeError(std::move(error));
        continue;
      }
      result.push_back(tiling);
    }
  return result;
}

} // namespace

TEST(TilingHeuristicTest, MossForwardGemm) {
  GemmSpec spec = mossForward(16384);
  TileConfig tiling = select(spec);
  // Two-level promotion needs three accumulator sets: 128x128 is the
  // largest 128-row tile; 11008 = 86 * 128 leaves no padding.
  EXPECT_EQ(tiling.tileM, 128);
  EXPECT_EQ(tiling.tileN, 128);
  EXPECT_EQ(tiling.stages, 6);
  EXPECT_EQ(tiling.clusterM, 2); // a static M whose 128 tiles pair up
  EXPECT_EQ(tiling.clusterN, 1);
  EXPECT_EQ(tiling.raster, RasterOrder::AlongN); // 128 M tiles > 86 N tiles
  EXPECT_EQ(tiling.swizzle, 8);
  EXPECT_EQ(tiling.splitK, 1);
  EXPECT_EQ(tiling.source, TilingSource::Heuristic);
  EXPECT_FALSE(llvm::errorToBool(checkTiling(spec, tiling, TargetInfo())));
}

/// The quick-compile variant's tiles: at most 128 rows, and at most 64
/// columns for kernels that promote, 192 for the others, as many stages as
/// fit; the rest of the tiling stays.
TEST(TilingHeuristicTest, QuickCompileShrinksTiles) {
  const TargetInfo target;
  const GemmSpec moss = mossForward(16384);
  const TileConfig full = select(moss);
  ASSERT_GT(full.tileN, kQuickCompileTileN);
  const TileConfig quick = getQuickCompileTiling(moss, full, target);
  EXPECT_EQ(quick.tileN, kQuickCompileTileN);
  EXPECT_EQ(quick.tileM, full.tileM);
  EXPECT_EQ(quick.clusterM, full.clusterM);
  EXPECT_EQ(quick.clusterN, full.clusterN);
  EXPECT_EQ(quick.splitK, full.splitK);
  EXPECT_EQ(quick.raster, full.raster);
  EXPECT_EQ(quick.source, full.source);
  EXPECT_FALSE(llvm::errorToBool(checkTiling(moss, quick, target)));
  // As many stages as fit (up to 8): one more does not.
  TileConfig deeper = quick;
  ++deeper.stages;
  EXPECT_TRUE(quick.stages == 8 ||
              llvm::errorToBool(checkTiling(moss, deeper, target)));

  GemmSpec group = makeSpec(8192, 8192, 8192, ScalingScheme::perGroup(1, 128),
                            ScalingScheme::perGroup(128, 128));
  EXPECT_EQ(getQuickCompileTiling(group, select(group), target).tileN,
            kQuickCompileTileN);

  GemmSpec tensor = makeSpec(8192, 8192, 8192, ScalingScheme::perTensor(),
                             ScalingScheme::perTensor());
  for (auto [tileM, tileN] :
       {std::pair<int64_t, int64_t>{128, 256}, {256, 128}, {256, 192}}) {
    TileConfig large = select(tensor);
    large.tileM = tileM;
    large.tileN = tileN;
    large.stages = 3;
    const TileConfig smaller = getQuickCompileTiling(tensor, large, target);
    EXPECT_EQ(smaller.tileM, kQuickCompileTileM);
    EXPECT_EQ(smaller.tileN, std::min(tileN, kQuickCompileDirectTileN));
    EXPECT_EQ(smaller.clusterM, large.clusterM);
    EXPECT_FALSE(llvm::errorToBool(checkTiling(tensor, smaller, target)));
  }

  // The f16 MMA's direct kernel (an f32 output by default) narrows to
  // 128 columns, with an even number of stages.
  GemmSpec wide = tensor;
  wide.out = FloatType::F32;
  TileConfig wideFull = select(wide);
  wideFull.tileN = 224;
  wideFull.stages = 2;
  ASSERT_FALSE(llvm::errorToBool(checkTiling(wide, wideFull, target)));
  const TileConfig wideQuick = getQuickCompileTiling(wide, wideFull, target);
  EXPECT_EQ(wideQuick.tileM, 128);
  EXPECT_EQ(wideQuick.tileN, kQuickCompileF16DirectTileN);
  EXPECT_EQ(wideQuick.stages % 2, 0);
  EXPECT_FALSE(llvm::errorToBool(checkTiling(wide, wideQuick, target)));

  // Nothing to shrink: small enough already, or 64 rows.
  TileConfig small = select(tensor);
  small.tileM = 128;
  small.tileN = kQuickCompileDirectTileN;
  small.stages = 3;
  EXPECT_EQ(getQuickCompileTiling(tensor, small, target), small);
  TileConfig narrow = full;
  narrow.tileN = 32;
  EXPECT_EQ(getQuickCompileTiling(moss, narrow, target), narrow);
  narrow.tileM = 64;
  narrow.clusterM = 1;
  EXPECT_EQ(getQuickCompileTiling(moss, narrow, target), narrow);
}

TEST(TilingHeuristicTest, Large8192CubeIsSane) {
  TargetInfo target;
  for (bool twoLevel : {false, true}) {
    ScalingScheme scheme = twoLevel
                               ? ScalingScheme::twoLevel(GlobalScope::Tensor)
                               : ScalingScheme::perTensor();
    GemmSpec spec = makeSpec(8192, 8192, 8192, scheme, scheme);
    TileConfig tiling = select(spec);
    SCOPED_TRACE(tiling.str());
    EXPECT_FALSE(llvm::errorToBool(checkTiling(spec, tiling, target)));
    // Big problems get big tiles and a real pipeline.
    EXPECT_GE(tiling.tileM * tiling.tileN, 128 * 128);
    EXPECT_GE(tiling.stages, 3);
    TilingScore score = scoreTiling(spec, tiling, target);
    // Of the configurations the kernel takes with a tile of at least
    // 128x128 and TMA stores (as the choice has), none asks less of one SM
    // (waves x tile), and none with as much needs fewer waves.
    EXPECT_GT(estimateResources(spec, tiling, target).storeBuffers, 0u);
    const int64_t work = score.waves * tiling.tileM * tiling.tileN;
    for (const TileConfig &other : allFitting(spec, target)) {
      if (other.tileM * other.tileN < 128 * 128 ||
          estimateResources(spec, other, target).storeBuffers == 0)
        continue;
      TilingScore otherScore = scoreTiling(spec, other, target);
      const int64_t otherWork = otherScore.waves * other.tileM * other.tileN;
      EXPECT_GE(otherWork, work) << other.str();
      if (otherWork == work) {
        EXPECT_GE(otherScore.waves, score.waves) << other.str();
      }
    }
  }
  // Without promotion, one accumulator set: 128x192 tiles, 21 waves (256x192
  // would take 11 waves of more work each).
  TileConfig perTensor =
      select(makeSpec(8192, 8192, 8192, ScalingScheme::perTensor(),
                      ScalingScheme::perTensor()));
  EXPECT_EQ(perTensor.tileM, 128);
  EXPECT_EQ(perTensor.tileN, 192);
}

TEST(TilingHeuristicTest, SingleRowFillsOneWave) {
  GemmSpec spec =
      makeSpec(1, 8192, 8192, ScalingScheme::twoLevel(GlobalScope::Row),
               ScalingScheme::perTensor());
  TileConfig tiling = select(spec);
  TilingScore score = scoreTiling(spec, tiling, TargetInfo());
  // The smallest M tile (64 rows: a promoted scheme, so both consumer
  // warpgroups take the row over alternate K stages), and N tiles narrow
  // enough to cover the SMs once.
  EXPECT_EQ(tiling.tileM, 64);
  EXPECT_EQ(tiling.tileN, 64);
  EXPECT_EQ(score.waves, 1);
  EXPECT_GT(score.lastWaveUtilization, 0.9);
  EXPECT_EQ(tiling.swizzle, 1); // a single row of tiles
  EXPECT_EQ(tiling.raster, RasterOrder::AlongM);
  // K = 8192 has 64 steps: the pipeline is as deep as allowed.
  EXPECT_EQ(tiling.stages, TilingOptions().maxStages);
}

TEST(TilingHeuristicTest, DynamicMPlansForAssumedM) {
  TileConfig dynamic = select(mossForward(GemmSpec::kDynamic));
  TileConfig fixed = select(mossForward(kAssumedM));
  EXPECT_EQ(dynamic, fixed);
  EXPECT_EQ(dynamic.clusterM, 2); // 32 tiles of 128 rows pair up
  TilingOptions small;
  small.assumedM = 1;
  TileConfig decode = select(mossForward(GemmSpec::kDynamic), {}, small);
  EXPECT_EQ(decode, select(mossForward(1))); // one M tile: no pair
}

TEST(TilingHeuristicTest, FewStepsOfKKeepTwoStages) {
  GemmSpec spec = makeSpec(4096, 4096, 64, ScalingScheme::perTensor(),
                           ScalingScheme::perTensor());
  EXPECT_EQ(select(spec).stages, 2);
}

TEST(TilingHeuristicTest, RespectsTargetLimits) {
  GemmSpec spec = makeSpec(8192, 8192, 8192, ScalingScheme::perTensor(),
                           ScalingScheme::perTensor());
  TargetInfo target;
  target.sharedMemoryPerBlock = 100000;
  TileConfig tiling = select(spec, target);
  EXPECT_LE(estimateResources(spec, tiling, target).sharedBytes, 100000u);
  EXPECT_GE(tiling.stages, 3);

  target.sharedMemoryPerBlock = 60000;
  llvm::Expected<TileConfig> none = selectTiling(spec, target);
  ASSERT_FALSE(static_cast<bool>(none));
  std::string message = llvm::toString(none.takeError());
  EXPECT_NE(message.find("60000 bytes of shared memory"), std::string::npos)
      << message;

  // Fewer SMs: the wave count follows them.
  TargetInfo half;
  half.smCount = 66;
  TileConfig halfTiling = select(spec, half);
  EXPECT_EQ(scoreTiling(spec, halfTiling, half).slots, 66);
}

TEST(TilingHeuristicTest, PerGroupWeightsPreferTileNDividing128) {
  GemmSpec spec =
      makeSpec(GemmSpec::kDynamic, 4096, 4096, ScalingScheme::perGroup(1, 128),
               ScalingScheme::perGroup(128, 128));
  TileConfig tiling = select(spec);
  EXPECT_EQ(128 % tiling.tileN, 0);
  // Other widths work (a column table), at a cost: the tuner may pick them.
  TileConfig wide = tiling;
  wide.tileN = 96;
  EXPECT_FALSE(llvm::errorToBool(checkTiling(spec, wide, TargetInfo())));
  ResourceUsage usage = estimateResources(spec, wide, TargetInfo());
  EXPECT_EQ(usage.partialSets, 1u); // factors on both sides
  EXPECT_FALSE(usage.partialSetsNarrowed);
}

TEST(TilingHeuristicTest, OneSidedFactorsKeepTwoPartialSets) {
  // MOSS forward: 128x192 fits with one partial set only, which measured
  // no faster than 128x128 with two; the heuristic keeps two.
  GemmSpec spec = mossForward(8192);
  TileConfig wide;
  wide.tileN = 192;
  wide.stages = 5;
  EXPECT_FALSE(llvm::errorToBool(checkTiling(spec, wide, TargetInfo())));
  ResourceUsage usage = estimateResources(spec, wide, TargetInfo());
  EXPECT_EQ(usage.partialSets, 1u);
  EXPECT_TRUE(usage.partialSetsNarrowed);
  EXPECT_EQ(usage.accumulatorRegisters, 192u);
  TileConfig chosen = select(spec);
  EXPECT_EQ(estimateResources(spec, chosen, TargetInfo()).partialSets, 2u);
  // Factors on both sides take one set anyway: wider tiles are allowed.
  GemmSpec both =
      makeSpec(8192, 8192, 8192, ScalingScheme::twoLevel(GlobalScope::Tensor),
               ScalingScheme::twoLevel(GlobalScope::Tensor));
  EXPECT_GT(select(both).tileM * select(both).tileN, 128 * 128);
}

TEST(TilingHeuristicTest, SplitKOnlyWhenAllowedAndUseful) {
  // M=1, N=1024: 8 N tiles of 128 leave most SMs idle; splitting K helps.
  GemmSpec spec = makeSpec(1, 1024, 16384, ScalingScheme::perTensor(),
                           ScalingScheme::perTensor(), FloatType::F32);
  spec.mma = MmaType::FP8;
  EXPECT_EQ(select(spec).splitK, 1);
  TilingOptions options;
  options.allowSplitK = true;
  TileConfig split = select(spec, {}, options);
  EXPECT_GT(split.splitK, 1);
  EXPECT_FALSE(llvm::errorToBool(checkTiling(spec, split, TargetInfo())));
  // The slices are summed in a workspace: any output and epilogue.
  spec.out = FloatType::BF16;
  spec.amax = true;
  EXPECT_GT(select(spec, {}, options).splitK, 1);
  // ... but not across a cluster, nor into slices off the 128-wide stages.
  TileConfig clustered = split;
  clustered.clusterM = 2;
  EXPECT_TRUE(llvm::errorToBool(checkTiling(spec, clustered, TargetInfo())));
  TileConfig ragged = split;
  spec.k = 16384 + 64;
  ragged.splitK = 2;
  EXPECT_TRUE(llvm::errorToBool(checkTiling(spec, ragged, TargetInfo())));
}

TEST(TilingHeuristicTest, ClustersWhereThePlannedTilesPairUp) {
  GemmSpec spec = mossForward(16384);
  EXPECT_EQ(select(spec).clusterM, 2);
  TilingOptions options;
  options.allowClusters = false;
  EXPECT_EQ(select(spec, {}, options).clusterM, 1);
  // Dynamic M: planned for the assumed M's tiles.
  EXPECT_EQ(select(mossForward(GemmSpec::kDynamic)).clusterM, 2);
  // An odd number of M tiles: no pairs.
  EXPECT_EQ(select(mossForward(3 * 128)).clusterM, 1);
  // Less than a wave of tiles (2 x 32): no pairs.
  EXPECT_EQ(select(makeSpec(256, 4096, 4096,
                            ScalingScheme::twoLevel(GlobalScope::Row, 32),
                            ScalingScheme::perTensor()))
                .clusterM,
            1);
}

TEST(TilingHeuristicTest, RejectsWhatTheKernelCannotRun) {
  GemmSpec spec =
      makeSpec(128, 128, 512, ScalingScheme::twoLevel(GlobalScope::Tensor, 256),
               ScalingScheme::perTensor());
  llvm::Expected<TileConfig> tiling = selectTiling(spec, TargetInfo());
  ASSERT_FALSE(static_cast<bool>(tiling));
  EXPECT_EQ(llvm::toString(tiling.takeError()),
            "operand A is scaled two-level(tensor, 256); the Hopper GEMM "
            "kernel takes scaling blocks of 32, 64 or 128 along K");

  GemmSpec ok = mossForward(128);
  TileConfig bad;
  bad.tileM = 96;
  EXPECT_TRUE(llvm::errorToBool(checkTiling(ok, bad, TargetInfo())));
  // 64-row tiles: no clusters, and a stage per consumer warpgroup at least.
  bad.tileM = 64;
  EXPECT_FALSE(llvm::errorToBool(checkTiling(ok, bad, TargetInfo())));
  bad.clusterM = 2;
  EXPECT_TRUE(llvm::errorToBool(checkTiling(ok, bad, TargetInfo())));
  bad.clusterM = 1;
  GemmSpec shortK = ok;
  shortK.k = 128;
  EXPECT_TRUE(llvm::errorToBool(checkTiling(shortK, bad, TargetInfo())));
  bad.tileM = 256;
  bad.tileN = 256; // three sets of 2 x 128 registers
  EXPECT_TRUE(llvm::errorToBool(checkTiling(ok, bad, TargetInfo())));

  GemmSpec noN = ok;
  noN.n = 0;
  EXPECT_TRUE(llvm::errorToBool(selectTiling(noN, TargetInfo()).takeError()));
}

//===----------------------------------------------------------------------===//
// The resource model against templates/moss/gemm/config.cuh
//===----------------------------------------------------------------------===//

namespace {

/// Compares estimateResources() with what Config says for one configuration.
template <class Cfg>
void expectModelMatches(const GemmSpec &spec, const TileConfig &tiling) {
  SCOPED_TRACE(spec.str() + ", " + tiling.str());
  ResourceUsage usage = estimateResources(spec, tiling, TargetInfo());
  EXPECT_EQ(usage.threads, static_cast<unsigned>(Cfg::kThreads));
  EXPECT_EQ(usage.sharedBytes, static_cast<unsigned>(Cfg::kSharedBytes));
  EXPECT_EQ(usage.accumulatorRegisters,
            static_cast<unsigned>(Cfg::kPlan.accumulatorRegisters));
  EXPECT_EQ(usage.partialSets,
            Cfg::kPromoteK > 0 ? static_cast<unsigned>(Cfg::kPartialSets) : 0u);
}

TileConfig tile(int64_t m, int64_t n, int64_t stages) {
  return makeTiling(m, n, stages);
}

} // namespace

TEST(TilingHeuristicTest, ResourceModelMatchesTemplates) {
  using namespace moss::gemm_kernel;
  expectModelMatches<Config<16384, 11008, 4096, kE4M3, kE4M3, kTwoLevel, 1, 32,
                            true, kPerTensor, 1, 0, false, kBF16, kNone, kNone,
                            false, 128, 128, 6, 1, 1, true, 8, 1>>(
      mossForward(16384), tile(128, 128, 6));
  expectModelMatches<Config<-1, 8192, 8192, kE4M3, kE4M3, kTwoLevel, 1, 32,
                            false, kTwoLevel, 1, 32, false, kBF16, kNone, kNone,
                            false, 128, 128, 6, 1, 1, false, 8, 1>>(
      makeSpec(-1, 8192, 8192, ScalingScheme::twoLevel(GlobalScope::Tensor),
               ScalingScheme::twoLevel(GlobalScope::Tensor)),
      tile(128, 128, 6));
  expectModelMatches<Config<-1, 8192, 8192, kE4M3, kE4M3, kPerTensor, 1, 0,
                            false, kPerTensor, 1, 0, false, kBF16, kNone, kNone,
                            false, 256, 192, 4, 1, 1, false, 8, 1>>(
      makeSpec(-1, 8192, 8192, ScalingScheme::perTensor(),
               ScalingScheme::perTensor()),
      tile(256, 192, 4));
  expectModelMatches<Config<-1, 4096, 4096, kE4M3, kE4M3, kPerGroup, 1, 128,
                            false, kPerGroup, 128, 128, false, kF16, kNone,
                            kNone, false, 128, 128, 6, 1, 1, false, 8, 1>>(
      makeSpec(-1, 4096, 4096, ScalingScheme::perGroup(1, 128),
               ScalingScheme::perGroup(128, 128), FloatType::F16),
      tile(128, 128, 6));
  GemmSpec mx = makeSpec(-1, 4096, 4096, ScalingScheme::mxfp8(),
                         ScalingScheme::twoLevel(GlobalScope::Tensor, 64),
                         FloatType::F32);
  mx.mma = MmaType::FP8;
  expectModelMatches<Config<-1, 4096, 4096, kE5M2, kE4M3, kMXFP8, 1, 32, false,
                            kTwoLevel, 1, 64, false, kF32, kNone, kNone, false,
                            256, 64, 4, 1, 1, false, 8, 1>>(mx,
                                                            tile(256, 64, 4));
  // One partial set: too wide for two, and per-group B over a tile its
  // 128-row blocks do not cover (a column table).
  expectModelMatches<Config<-1, 8192, 8192, kE4M3, kE4M3, kTwoLevel, 1, 32,
                            true, kPerTensor, 1, 0, false, kBF16, kNone, kNone,
                            false, 128, 192, 5, 1, 1, false, 8, 1>>(
      makeSpec(-1, 8192, 8192, ScalingScheme::twoLevel(GlobalScope::Row),
               ScalingScheme::perTensor()),
      tile(128, 192, 5));
  expectModelMatches<Config<-1, 4096, 4096, kE4M3, kE4M3, kPerGroup, 1, 128,
                            false, kPerGroup, 128, 128, false, kBF16, kNone,
                            kNone, false, 128, 192, 5, 1, 1, false, 8, 1>>(
      makeSpec(-1, 4096, 4096, ScalingScheme::perGroup(1, 128),
               ScalingScheme::perGroup(128, 128)),
      tile(128, 192, 5));
  // The f16 MMA (an f32 output's default): two f16 slots beside the
  // stages, one partial set.
  GemmSpec wide = mossForward(16384);
  wide.out = FloatType::F32;
  expectModelMatches<
      Config<16384, 11008, 4096, kE4M3, kE4M3, kTwoLevel, 1, 32, true,
             kPerTensor, 1, 0, false, kF32, kNone, kNone, false, 128, 128, 4, 1,
             1, true, 8, 1, 0, false, true>>(wide, tile(128, 128, 4));
  GemmSpec wideGroup =
      makeSpec(-1, 4096, 4096, ScalingScheme::perGroup(1, 128),
               ScalingScheme::perGroup(128, 128), FloatType::F32);
  expectModelMatches<
      Config<-1, 4096, 4096, kE4M3, kE4M3, kPerGroup, 1, 128, false, kPerGroup,
             128, 128, false, kF32, kNone, kNone, false, 128, 96, 6, 1, 1,
             false, 8, 1, 0, false, true>>(wideGroup, tile(128, 96, 6));
}

TEST(TilingHeuristicTest, F16MmaTakes128RowTilesAndEvenStages) {
  const TargetInfo target;
  for (GemmSpec spec :
       {makeSpec(-1, 8192, 8192, ScalingScheme::perTensor(),
                 ScalingScheme::perTensor(), FloatType::F32),
        mossForward(16384),
        makeSpec(16, 4096, 4096, ScalingScheme::perGroup(1, 128),
                 ScalingScheme::perGroup(128, 128), FloatType::F32)}) {
    spec.mma = MmaType::F16;
    SCOPED_TRACE(spec.str());
    const TileConfig tiling = select(spec);
    EXPECT_EQ(tiling.tileM, 128);
    EXPECT_FALSE(llvm::errorToBool(checkTiling(spec, tiling, target)));
    EXPECT_EQ(tiling.stages % 2, 0);
    // Its slots (2 x 32 KiB at 128x128) leave room for four FP8 stages of
    // 128x128 (32 KiB and the factor tables each), not six; and the stages
    // pair up with the two slots.
    EXPECT_FALSE(
        llvm::errorToBool(checkTiling(spec, tile(128, 128, 4), target)));
    EXPECT_TRUE(
        llvm::errorToBool(checkTiling(spec, tile(128, 128, 6), target)));
    llvm::Error odd = checkTiling(spec, tile(128, 64, 3), target);
    ASSERT_TRUE(bool(odd));
    EXPECT_NE(llvm::toString(std::move(odd)).find("even number of stages"),
              std::string::npos);
    llvm::Error wider = checkTiling(spec, tile(256, 64, 2), target);
    ASSERT_TRUE(bool(wider));
    EXPECT_NE(llvm::toString(std::move(wider)).find("needs tile_m = 128"),
              std::string::npos);
  }
}

TEST(TilingHeuristicTest, F16MmaKeepsItsRegistersFree) {
  // Beside the accumulators a thread holds B's codes while it widens them:
  // the widest tiles spilled (ptxas -v), so the model stops short of them.
  const TargetInfo target;
  GemmSpec tensor = makeSpec(8192, 8192, 8192, ScalingScheme::perTensor(),
                             ScalingScheme::perTensor(), FloatType::F32);
  EXPECT_FALSE(
      llvm::errorToBool(checkTiling(tensor, tile(128, 224, 2), target)));
  EXPECT_TRUE(
      llvm::errorToBool(checkTiling(tensor, tile(128, 256, 2), target)));
  GemmSpec moss = mossForward(8192);
  moss.out = FloatType::F32;
  EXPECT_FALSE(llvm::errorToBool(checkTiling(moss, tile(128, 128, 4), target)));
  EXPECT_TRUE(llvm::errorToBool(checkTiling(moss, tile(128, 160, 2), target)));
  EXPECT_LE(select(moss).tileN, 128);
  // The FP8 MMA takes the wider tiles.
  moss.mma = MmaType::FP8;
  EXPECT_FALSE(llvm::errorToBool(checkTiling(moss, tile(128, 192, 4), target)));
}

TEST(TilingHeuristicTest, F32OutputsMultiplyInF16UnlessAskedOtherwise) {
  GemmSpec spec = mossForward(4096);
  EXPECT_FALSE(spec.multipliesInF16());
  spec.mma = MmaType::F16;
  EXPECT_TRUE(spec.multipliesInF16());
  spec.out = FloatType::F32;
  EXPECT_TRUE(spec.multipliesInF16());
  spec.mma = MmaType::Auto;
  EXPECT_TRUE(spec.multipliesInF16());
  EXPECT_NE(spec.str().find("f16 MMA"), std::string::npos);
  EXPECT_EQ(select(spec).tileM, 128);
  EXPECT_EQ(select(spec).stages % 2, 0);
  spec.mma = MmaType::FP8;
  EXPECT_FALSE(spec.multipliesInF16());
  EXPECT_EQ(spec.str().find("f16 MMA"), std::string::npos);
  // The FP8 kernel's 128x128 tiles hold six stages; the f16 MMA's slots
  // leave room for four.
  EXPECT_FALSE(llvm::errorToBool(checkTiling(spec, tile(128, 128, 6), {})));
  spec.mma = MmaType::Auto;
  EXPECT_TRUE(llvm::errorToBool(checkTiling(spec, tile(128, 128, 6), {})));
}

TEST(TilingHeuristicTest, LaunchPlansSmallBatchesForTheirBucket) {
  GemmSpec dynamic = mossForward(GemmSpec::kDynamic);
  auto forLaunch = [&](int64_t m) {
    llvm::Expected<TileConfig> tiling =
        selectTilingForLaunch(dynamic, m, TargetInfo());
    EXPECT_TRUE(static_cast<bool>(tiling));
    return tiling ? *tiling : TileConfig();
  };
  // Below the assumed M: planned for the bucket (100 -> 128), no cluster;
  // launches may split K.
  TilingOptions bucket;
  bucket.assumedM = 128;
  bucket.allowSplitK = true;
  EXPECT_EQ(forLaunch(100), select(dynamic, {}, bucket));
  TilingOptions split;
  split.allowSplitK = true;
  EXPECT_EQ(forLaunch(1), select(mossForward(1), {}, split));
  EXPECT_EQ(forLaunch(100).clusterM, 1);
  // At or above it: the assumed-M plan.
  EXPECT_EQ(forLaunch(4096), select(dynamic));
  EXPECT_EQ(forLaunch(16384), select(dynamic));
  // A static M is planned as is.
  EXPECT_EQ(
      selectTilingForLaunch(mossForward(16384), 16384, TargetInfo())->clusterM,
      2);
}

TEST(TilingHeuristicTest, PerGroupSmallMTileRows) {
  // Per-group at M <= 64: 128-row tiles where 128-wide tiles fill the SMs
  // best (N = 11008), 64-row ones in two K slices over narrow tiles (N =
  // 4096); both measured fastest on the H200.
  auto forLaunch = [](int64_t n, int64_t m) {
    GemmSpec spec =
        makeSpec(GemmSpec::kDynamic, n, 4096, ScalingScheme::perGroup(1, 128),
                 ScalingScheme::perGroup(128, 128));
    llvm::Expected<TileConfig> tiling =
        selectTilingForLaunch(spec, m, TargetInfo());
    EXPECT_TRUE(static_cast<bool>(tiling));
    return tiling ? *tiling : TileConfig();
  };
  for (int64_t m : {1, 16, 64}) {
    TileConfig wide = forLaunch(11008, m);
    EXPECT_EQ(wide.tileM, 128) << "m = " << m;
    EXPECT_EQ(wide.tileN, 128) << "m = " << m;
    TileConfig narrow = forLaunch(4096, m);
    EXPECT_EQ(narrow.tileM, 64) << "m = " << m;
    EXPECT_EQ(narrow.tileN, 64) << "m = " << m;
    EXPECT_EQ(narrow.splitK, 2) << "m = " << m;
  }
}

TEST(TilingHeuristicTest, SplitKForShortBatchesOfLongChains) {
  // One tile row over N = 4096: 128 tiles of 128x32 fill the SMs once, and
  // 128 units of 128x64 in two K slices do too with half the chain each.
  auto forLaunch = [](const GemmSpec &spec, int64_t m) {
    llvm::Expected<TileConfig> tiling =
        selectTilingForLaunch(spec, m, TargetInfo());
    EXPECT_TRUE(static_cast<bool>(tiling));
    return tiling ? *tiling : TileConfig();
  };
  GemmSpec moss = makeSpec(GemmSpec::kDynamic, 4096, 11008,
                           ScalingScheme::twoLevel(GlobalScope::Row, 32),
                           ScalingScheme::perTensor());
  TileConfig small = forLaunch(moss, 16);
  EXPECT_EQ(small.splitK, 2);
  EXPECT_EQ(small.tileN, 64);
  EXPECT_EQ(small.tileM, 64); // and the two warpgroups split K again
  EXPECT_EQ(forLaunch(moss, 100).tileM, 128);
  EXPECT_FALSE(llvm::errorToBool(checkTiling(moss, small, TargetInfo())));
  // Not with many rows, nor where the N tiles already fill the SMs.
  EXPECT_EQ(forLaunch(moss, 4096).splitK, 1);
  EXPECT_EQ(forLaunch(mossForward(), 16).splitK, 1);
  // Per-tensor only over a long K.
  GemmSpec tensor =
      makeSpec(GemmSpec::kDynamic, 4096, 4096, ScalingScheme::perTensor(),
               ScalingScheme::perTensor());
  EXPECT_EQ(forLaunch(tensor, 16).splitK, 1);
  tensor.k = 11008;
  EXPECT_EQ(forLaunch(tensor, 16).splitK, 2);
}

TEST(TilingHeuristicTest, PromoteKCostsAccumulatorSets) {
  // Per-tensor without promotion: one accumulator set, up to 256x256 fits.
  GemmSpec spec = makeSpec(8192, 8192, 8192, ScalingScheme::perTensor(),
                           ScalingScheme::perTensor());
  EXPECT_EQ(select(spec).tileN, 192);
  // Promoting every 128 takes three sets: at most 128x128.
  spec.promoteK = 128;
  TileConfig promoted = select(spec);
  EXPECT_LE(promoted.tileM * promoted.tileN, 128 * 128);
  EXPECT_FALSE(llvm::errorToBool(checkTiling(spec, promoted, TargetInfo())));
  TileConfig wide;
  wide.tileM = 256;
  wide.tileN = 192;
  wide.stages = 4;
  EXPECT_TRUE(llvm::errorToBool(checkTiling(spec, wide, TargetInfo())));
}

TEST(TilingHeuristicTest, TensorCoreChainsFollowTheKernelsWalk) {
  using Chains = std::vector<numerics::MmaChain>;
  auto tiling = [](int64_t tileM, int64_t splitK) {
    TileConfig t;
    t.tileM = tileM;
    t.splitK = splitK;
    return t;
  };
  auto spec = [](int64_t k) {
    GemmSpec s;
    s.n = 4096;
    s.k = k;
    s.aScaling = numerics::ScalingScheme::perTensor();
    s.bScaling = numerics::ScalingScheme::perTensor();
    s.out = FloatType::F32;
    return s;
  };
  // One running sum over K, the tail's 32-element steps included.
  EXPECT_EQ(getTensorCoreChains(spec(96), tiling(128, 1)), Chains({{{0, 96}}}));
  EXPECT_EQ(getTensorCoreChains(spec(4096 + 96), tiling(256, 1)),
            Chains({{{0, 4096 + 96}}}));
  // One per split-K slice.
  EXPECT_EQ(getTensorCoreChains(spec(1024), tiling(128, 2)),
            Chains({{{0, 512}}, {{512, 1024}}}));
  // 64-row tiles: the two warpgroups take alternate stages of each slice.
  EXPECT_EQ(
      getTensorCoreChains(spec(640), tiling(64, 1)),
      Chains({{{0, 128}, {256, 384}, {512, 640}}, {{128, 256}, {384, 512}}}));
  EXPECT_EQ(getTensorCoreChains(spec(1024), tiling(64, 2)),
            Chains({{{0, 128}, {256, 384}},
                    {{128, 256}, {384, 512}},
                    {{512, 640}, {768, 896}},
                    {{640, 768}, {896, 1024}}}));
}

// Fields out of range are rejected before any arithmetic on them: a split
// of 2^57 once made a product overflow to zero and divide by it.
TEST(CheckTilingTest, HugeFieldsAreRejectedNotOverflowed) {
  GemmSpec spec = mossForward();
  TileConfig base;
  base.tileM = 128;
  base.tileN = 128;
  base.stages = 4;
  struct Case {
    const char *what;
    void (*apply)(TileConfig &);
    const char *expected;
  } cases[] = {
      {"split_k 2^57", [](TileConfig &t) { t.splitK = int64_t(1) << 57; },
       "split_k must be from 1 to 64"},
      {"split_k 2^63-1", [](TileConfig &t) { t.splitK = INT64_MAX; },
       "split_k must be from 1 to 64"},
      {"stages 2^31", [](TileConfig &t) { t.stages = int64_t(1) << 31; },
       "stages must be from 2 to 64"},
      {"clusters 2^32 x 2^32",
       [](TileConfig &t) { t.clusterM = t.clusterN = int64_t(1) << 32; },
       "cluster_m and cluster_n must be from 1 to 8"},
      {"swizzle 3", [](TileConfig &t) { t.swizzle = 3; },
       "swizzle must be 1, 2, 4 or 8"},
      {"swizzle 16", [](TileConfig &t) { t.swizzle = 16; },
       "swizzle must be 1, 2, 4 or 8"},
  };
  for (const Case &c : cases) {
    TileConfig tiling = base;
    c.apply(tiling);
    llvm::Error error = checkTiling(spec, tiling, TargetInfo());
    ASSERT_TRUE(bool(error)) << c.what;
    EXPECT_NE(llvm::toString(std::move(error)).find(c.expected),
              std::string::npos)
        << c.what;
  }
}

TEST(TilingHeuristicTest, TileOrderRunsAlongTheShorterSideInBandsOfUpToEight) {
  // 128 x 16 tiles: along N, bands of 8.
  TileConfig tiling = tile(128, 256, 4);
  setTileOrder(tiling, 16384, 4096);
  EXPECT_EQ(tiling.raster, RasterOrder::AlongN);
  EXPECT_EQ(tiling.swizzle, 8);
  // 2 x 32 tiles: along M, bands of 2.
  tiling = tile(128, 128, 6);
  setTileOrder(tiling, 256, 4096);
  EXPECT_EQ(tiling.raster, RasterOrder::AlongM);
  EXPECT_EQ(tiling.swizzle, 2);
  // One row of tiles (and no rows at all): no band.
  setTileOrder(tiling, 0, 4096);
  EXPECT_EQ(tiling.raster, RasterOrder::AlongM);
  EXPECT_EQ(tiling.swizzle, 1);
  // The heuristic orders its own choice the same way.
  llvm::Expected<TileConfig> chosen =
      selectTiling(mossForward(16384), TargetInfo::h200());
  ASSERT_TRUE(bool(chosen)) << llvm::toString(chosen.takeError());
  TileConfig reordered = *chosen;
  setTileOrder(reordered, 16384, mossForward().n);
  EXPECT_EQ(reordered.raster, chosen->raster);
  EXPECT_EQ(reordered.swizzle, chosen->swizzle);
}
