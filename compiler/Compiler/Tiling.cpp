//===- Tiling.cpp - GEMM tile configurations and their heuristic ----------===//
//
// The resource model and the tile heuristic of Tiling.h. Plain C++: the
// moss-select-tiling pass, the runtime and the tuner all call these.
//
//===----------------------------------------------------------------------===//

#include "moss/Compiler/Tiling.h"
#include "moss/Compiler/TemplateParams.h"

#include "llvm/ADT/bit.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

#include <algorithm>
#include <limits>
#include <numeric>

using namespace moss;
using namespace moss::compiler;

using numerics::ScalingScheme;

const char *compiler::getName(TilingSource source) {
  return source == TilingSource::Heuristic ? "heuristic" : "db";
}

std::string TileConfig::str() const {
  std::string text = llvm::formatv(
      "{0}x{1}, stages {2}, cluster {3}x{4}, {5}, swizzle {6}, split_k {7}",
      tileM, tileN, stages, clusterM, clusterN,
      raster == RasterOrder::AlongM ? "along_m" : "along_n", swizzle, splitK);
  if (source)
    text += std::string(" (") + getName(*source) + ")";
  return text;
}

bool compiler::operator==(const TileConfig &lhs, const TileConfig &rhs) {
  return lhs.tileM == rhs.tileM && lhs.tileN == rhs.tileN &&
         lhs.stages == rhs.stages && lhs.clusterM == rhs.clusterM &&
         lhs.clusterN == rhs.clusterN && lhs.raster == rhs.raster &&
         lhs.swizzle == rhs.swizzle && lhs.splitK == rhs.splitK &&
         lhs.source == rhs.source;
}

//===----------------------------------------------------------------------===//
// Resource model (the templates' plan, templates/moss/gemm/config.cuh)
//===----------------------------------------------------------------------===//

static constexpr unsigned kWarpgroupThreads = 128;
/// Consumer warpgroups of the kernel (`Config::kConsumerWarpgroups`).
static constexpr unsigned kConsumerWarpgroups = 2;
/// Registers of a producer thread after setmaxnreg (kernel.cuh).
static constexpr unsigned kProducerRegisters = 40;
/// What setmaxnreg gives a consumer thread at most (a multiple of 8).
static constexpr unsigned kMaxConsumerRegisters = 232;

/// The block length along K of a scheme's local scales (0 without).
static int64_t localBlock(const ScalingScheme &scheme) {
  if (!scheme.hasLocalScales())
    return 0;
  return scheme.kind == numerics::ScalingKind::MXFP8 ? 32 : scheme.blockCols;
}

/// The templates' plan of `spec` on tiles `tileN` wide (the other fields
/// of the tiling do not change what the callers below read).
static gemm_kernel::Plan planWithTileN(const GemmSpec &spec, int64_t tileN) {
  TileConfig tiling;
  tiling.tileN = tileN;
  return gemm_kernel::plan(getTemplateParams(spec, tiling));
}

int64_t compiler::getPromoteK(const GemmSpec &spec) {
  return planWithTileN(spec, TileConfig().tileN).promoteK;
}

/// Whether B's factor varies along the tile's columns: 1xB scales of B, or
/// per-group NxN ones whose blocks do not each cover whole tiles.
static bool hasColumnFactor(const GemmSpec &spec, int64_t tileN) {
  return planWithTileN(spec, tileN).colFactor;
}

std::vector<numerics::MmaChain>
compiler::getTensorCoreChains(const GemmSpec &spec, const TileConfig &tiling) {
  const gemm_kernel::Plan plan =
      gemm_kernel::plan(getTemplateParams(spec, tiling));
  const int64_t k = spec.k, stageK = plan.stageK;
  // A work unit's slice: all of K, or (split-K) its share of whole stages;
  // the last stage of all of K may be a tail of 32-element steps.
  const int64_t sliceK =
      tiling.splitK > 1 ? int64_t(plan.unitKStages) * stageK : k;
  std::vector<numerics::MmaChain> chains;
  for (int64_t begin = 0; begin < k; begin += sliceK) {
    const int64_t end = std::min(k, begin + sliceK);
    if (!plan.splitWarpgroups) {
      chains.push_back({{begin, end}});
      continue;
    }
    numerics::MmaChain even, odd;
    for (int64_t s = begin; s < end; s += stageK)
      (((s - begin) / stageK) % 2 == 0 ? even : odd)
          .push_back({s, std::min(end, s + stageK)});
    chains.push_back(std::move(even));
    if (!odd.empty())
      chains.push_back(std::move(odd));
  }
  return chains;
}

numerics::MmaSchedule compiler::getMmaSchedule(const GemmSpec &spec,
                                               const TileConfig &tiling) {
  numerics::MmaSchedule schedule;
  schedule.promoteK = getPromoteK(spec);
  if (schedule.promoteK == 0)
    schedule.chains = getTensorCoreChains(spec, tiling);
  return schedule;
}

ResourceUsage compiler::estimateResources(const GemmSpec &spec,
                                          const TileConfig &tiling,
                                          const TargetInfo &target) {
  // The kernel's own plan of the configuration (config.cuh); the register
  // budget is the target's.
  const gemm_kernel::Params params = getTemplateParams(spec, tiling);
  const gemm_kernel::Plan plan = gemm_kernel::plan(params);
  ResourceUsage usage;
  usage.consumerWarpgroups = unsigned(plan.consumerWarpgroups);
  usage.threads = unsigned(plan.threads);

  unsigned share =
      (target.registersPerSm - kProducerRegisters * kWarpgroupThreads) /
      (kWarpgroupThreads * kConsumerWarpgroups) / 8 * 8;
  unsigned consumerRegisters = std::min(kMaxConsumerRegisters, share);
  usage.accumulatorRegisterLimit = consumerRegisters > kRegisterReserve
                                       ? consumerRegisters - kRegisterReserve
                                       : 0;
  if (spec.multipliesInF16())
    usage.accumulatorRegisterLimit =
        std::min<unsigned>(usage.accumulatorRegisterLimit,
                           gemm_kernel::kMaxF16MmaRegisters - tiling.tileN / 8);
  if (plan.promoteK > 0) {
    usage.partialSets = unsigned(plan.partialSets);
    // One set because three do not fit (rather than factors on both sides
    // or the f16 MMA).
    usage.partialSetsNarrowed = plan.partialSets == 1 &&
                                plan.factorMode != gemm_kernel::kFactorRowCol &&
                                !params.f16Mma;
  }
  usage.accumulatorRegisters = unsigned(plan.accumulatorRegisters);
  usage.storable = plan.storable;
  usage.storeBuffers = unsigned(plan.storeBuffers);
  usage.sharedBytes = unsigned(plan.sharedBytes);
  return usage;
}

int64_t compiler::getStagesThatFit(const GemmSpec &spec, TileConfig tiling,
                                   const TargetInfo &target) {
  // A plan's shared memory grows with its stages (staging buffers are
  // planned only into the room they leave), so the first that does not fit
  // ends the search. 64 stages of the smallest tile exceed any target.
  constexpr int64_t kMaxSearchedStages = 64;
  int64_t fit = 0;
  for (int64_t stages = 1; stages <= kMaxSearchedStages; ++stages) {
    tiling.stages = stages;
    if (gemm_kernel::plan(getTemplateParams(spec, tiling)).sharedBytes >
        int64_t(target.sharedMemoryPerBlock))
      break;
    fit = stages;
  }
  return fit;
}

llvm::Error compiler::checkKernelSupport(const GemmSpec &spec) {
  // The templates' parameters are ints (getTemplateParams).
  constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();
  if (spec.n > kIntMax || spec.k > kIntMax || spec.m > kIntMax)
    return llvm::createStringError(
        "the GEMM is %lldx%lldx%lld; the kernel takes M, N and K below 2^31",
        static_cast<long long>(spec.m), static_cast<long long>(spec.n),
        static_cast<long long>(spec.k));
  for (auto [name, scheme] :
       {std::pair{"A", &spec.aScaling}, std::pair{"B", &spec.bScaling}}) {
    int64_t block = localBlock(*scheme);
    if (block != 0 && block != 32 && block != 64 && block != 128)
      return llvm::createStringError(
          "operand %s is scaled %s; the Hopper GEMM kernel takes scaling "
          "blocks of 32, 64 or 128 along K",
          name, scheme->str().c_str());
    if (scheme->hasLocalScales() &&
        (scheme->blockRows < 1 || scheme->blockRows > kIntMax))
      return llvm::createStringError(
          "operand %s is scaled %s; the Hopper GEMM kernel takes blocks of 1 "
          "to 2^31 - 1 rows",
          name, scheme->str().c_str());
  }
  return llvm::Error::success();
}

/// `stages` as the kernel takes them: even for the f16 MMA.
static int64_t getValidStages(const GemmSpec &spec, int64_t stages) {
  return spec.multipliesInF16() ? stages / 2 * 2 : stages;
}

/// The block length along K that a split-K slice must be a multiple of.
static int64_t kSliceGranularity(const GemmSpec &spec) {
  int64_t granularity = kBlockK;
  for (const ScalingScheme *scheme : {&spec.aScaling, &spec.bScaling})
    if (scheme->hasLocalScales())
      granularity = std::lcm(granularity, scheme->blockCols);
  return granularity;
}

TileConfig compiler::getQuickCompileTiling(const GemmSpec &spec,
                                           const TileConfig &tiling,
                                           const TargetInfo &target) {
  const bool promoted = getPromoteK(spec) > 0;
  TileConfig quick = tiling;
  quick.tileM = std::min(tiling.tileM, kQuickCompileTileM);
  quick.tileN = std::min(tiling.tileN, promoted ? kQuickCompileTileN
                                       : spec.multipliesInF16()
                                           ? kQuickCompileF16DirectTileN
                                           : kQuickCompileDirectTileN);
  if (quick.tileN == tiling.tileN && quick.tileM == tiling.tileM)
    return tiling;
  const int64_t kSteps =
      std::max<int64_t>(2, llvm::divideCeil(spec.k, kBlockK));
  quick.stages = getValidStages(
      spec,
      std::min<int64_t>(
          {getStagesThatFit(spec, quick, target),
           TilingOptions().maxStages, kSteps}));
  if (llvm::Error error = checkTiling(spec, quick, target)) {
    llvm::consumeError(std::move(error));
    return tiling;
  }
  return quick;
}

llvm::Error compiler::checkTiling(const GemmSpec &spec,
                                  const TileConfig &tiling,
                                  const TargetInfo &target) {
  auto error = [&](const llvm::Twine &message) {
    return llvm::createStringError("tiling " + tiling.str() + ": " + message);
  };
  // The spec first: the resource model below reads it as the kernel's
  // parameters.
  if (llvm::Error unsupported = checkKernelSupport(spec))
    return unsupported;
  // Every field in range before any arithmetic on them (a tuning database
  // or an attribute may hold anything).
  auto outside = [](int64_t value, int64_t low, int64_t high) {
    return value < low || value > high;
  };
  if (outside(tiling.stages, 2, kMaxTilingStages))
    return error("stages must be from 2 to " + llvm::Twine(kMaxTilingStages) +
                 ", got " + llvm::Twine(tiling.stages));
  if (outside(tiling.clusterM, 1, 8) || outside(tiling.clusterN, 1, 8))
    return error("cluster_m and cluster_n must be from 1 to 8, got " +
                 llvm::Twine(tiling.clusterM) + "x" +
                 llvm::Twine(tiling.clusterN));
  if (outside(tiling.splitK, 1, kMaxSplitK))
    return error("split_k must be from 1 to " + llvm::Twine(kMaxSplitK) +
                 ", got " + llvm::Twine(tiling.splitK));
  if (outside(tiling.swizzle, 1, 8) || !llvm::isPowerOf2_64(tiling.swizzle))
    return error("swizzle must be 1, 2, 4 or 8, got " +
                 llvm::Twine(tiling.swizzle));
  if (tiling.tileM != 64 && tiling.tileM != 128 && tiling.tileM != 256)
    return error("tile_m must be 64, 128 or 256 (two consumer warpgroups of "
                 "64-row wgmma tiles; at 64 they share the rows and split "
                 "K), got " +
                 llvm::Twine(tiling.tileM));
  if (tiling.tileN < 32 || tiling.tileN > 256 || tiling.tileN % 32 != 0)
    return error("tile_n must be a multiple of 32 from 32 to 256, got " +
                 llvm::Twine(tiling.tileN));
  if (tiling.stages < 2)
    return error("the pipeline needs at least 2 stages, got " +
                 llvm::Twine(tiling.stages));
  if (spec.multipliesInF16() && tiling.tileM != 128)
    return error("the f16 MMA needs tile_m = 128 (two 64-row warpgroups "
                 "widening each stage together), got " +
                 llvm::Twine(tiling.tileM));
  if (spec.multipliesInF16() && tiling.stages % 2 != 0)
    return error("the f16 MMA needs an even number of stages (its two f16 "
                 "slots alternate with them), got " +
                 llvm::Twine(tiling.stages));
  if (tiling.splitK < 1 || tiling.clusterM < 1 || tiling.clusterN < 1 ||
      tiling.swizzle < 1)
    return error("cluster sizes, swizzle and split_k must be at least 1");
  if (tiling.clusterM * tiling.clusterN > 8 ||
      !llvm::isPowerOf2_64(tiling.clusterM) ||
      !llvm::isPowerOf2_64(tiling.clusterN))
    return error("cluster sizes must be powers of two with at most 8 blocks "
                 "per cluster");
  if (static_cast<unsigned>(tiling.clusterM * tiling.clusterN) > target.smCount)
    return error(
        "a cluster of " + llvm::Twine(tiling.clusterM * tiling.clusterN) +
        " blocks does not fit on " + llvm::Twine(target.smCount) + " SMs");
  if (spec.kernelFoldsA && (tiling.tileM == 64 || tiling.splitK != 1))
    return error("a kernel that folds A takes tile_m 128 or 256 and no "
                 "split-K (its warpgroups fold whole rows of all of K)");
  if (tiling.tileM == 64) {
    if (tiling.clusterM * tiling.clusterN != 1)
      return error("tile_m = 64 needs 1x1 clusters");
    if (spec.k % kBlockK != 0)
      return error("tile_m = 64 needs K to be a multiple of 128, got " +
                   llvm::Twine(spec.k));
    if (spec.k / (kBlockK * tiling.splitK) < 2)
      return error("tile_m = 64 needs at least two 128-wide K stages per "
                   "work unit (one per consumer warpgroup)");
  }
  if (tiling.splitK > 1) {
    if (tiling.clusterM * tiling.clusterN != 1)
      return error("split_k > 1 needs 1x1 clusters");
    int64_t granularity = kSliceGranularity(spec);
    if (spec.k % (tiling.splitK * granularity) != 0)
      return error("K=" + llvm::Twine(spec.k) + " does not split into " +
                   llvm::Twine(tiling.splitK) + " slices of a multiple of " +
                   llvm::Twine(granularity));
  }

  ResourceUsage usage = estimateResources(spec, tiling, target);
  if (usage.accumulatorRegisters > usage.accumulatorRegisterLimit)
    return error("needs " + llvm::Twine(usage.accumulatorRegisters) +
                 " accumulator registers per consumer thread; at most " +
                 llvm::Twine(usage.accumulatorRegisterLimit) + " fit");
  if (usage.sharedBytes > target.sharedMemoryPerBlock)
    return error("needs " + llvm::Twine(usage.sharedBytes) +
                 " bytes of shared memory; the limit is " +
                 llvm::Twine(target.sharedMemoryPerBlock));
  // The templates' own rules (the checks above say more where they apply).
  if (const char *problem =
          gemm_kernel::validate(getTemplateParams(spec, tiling)))
    return error(problem);
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Heuristic
//===----------------------------------------------------------------------===//

static int64_t plannedM(const GemmSpec &spec, const TilingOptions &options) {
  return spec.isDynamicM() ? std::max<int64_t>(1, options.assumedM) : spec.m;
}

TilingScore compiler::scoreTiling(const GemmSpec &spec,
                                  const TileConfig &tiling,
                                  const TargetInfo &target,
                                  const TilingOptions &options) {
  TilingScore score;
  int64_t m = plannedM(spec, options);
  int64_t tilesM = llvm::divideCeil(m, tiling.tileM);
  int64_t tilesN = llvm::divideCeil(spec.n, tiling.tileN);
  score.tiles = tilesM * tilesN * tiling.splitK;
  int64_t clusterSize = tiling.clusterM * tiling.clusterN;
  score.slots =
      std::max<int64_t>(1, target.smCount / clusterSize * clusterSize);
  score.waves = llvm::divideCeil(score.tiles, score.slots);
  int64_t lastWaveTiles = score.tiles - (score.waves - 1) * score.slots;
  score.lastWaveUtilization =
      static_cast<double>(lastWaveTiles) / static_cast<double>(score.slots);
  score.paddedElements =
      tilesM * tiling.tileM * tilesN * tiling.tileN - m * spec.n;
  return score;
}

/// Whether split-K candidates are worth scoring: splitting K pays with one
/// tile row (M up to 128) and N tiles that fill the SMs once at 128x32, for
/// promoted schemes at any K and for per-tensor only at a long K (8192 or
/// more); see docs/PERFORMANCE.md, "Design measurements behind the code".
static bool considerSplitK(const GemmSpec &spec, const TilingOptions &options) {
  return options.allowSplitK && !spec.kernelFoldsA &&
         plannedM(spec, options) <= kSplitKMaxRows &&
         (getPromoteK(spec) > 0 || spec.k >= 64 * kBlockK);
}

/// A work unit's chain of K stages in arbitrary units: its stages times a
/// cost per stage that grows with the tile's width, plus a round trip of
/// partial sums per extra slice. Fitted to the split-K measurements
/// (docs/PERFORMANCE.md, "Design measurements behind the code"): 128x64 in
/// 2 slices beats 128x32 whole, and 128x128 in 4 slices does not beat
/// 128x64 in 2.
static int64_t chainCost(const GemmSpec &spec, const TileConfig &tiling) {
  int64_t stages = llvm::divideCeil(spec.k / tiling.splitK, kBlockK);
  // With tile_m 64 each consumer warpgroup walks every other stage.
  if (tiling.tileM == 64)
    stages = llvm::divideCeil(stages, 2);
  return stages * (tiling.tileN + 64) + 512 * (tiling.splitK - 1);
}

/// Whether 64-row tiles are worth scoring: both consumer warpgroups then
/// work on the same rows over alternate K stages, which halves the chain
/// of a promoted scheme at M up to 64 (where a 128-row tile's second
/// warpgroup only computes rows past M).
static bool considerTileM64(const GemmSpec &spec,
                            const TilingOptions &options) {
  return plannedM(spec, options) <= 64 && getPromoteK(spec) > 0 &&
         spec.k % kBlockK == 0;
}

namespace {
/// One candidate of the search with its score.
struct Candidate {
  TileConfig tiling;
  TilingScore score;
  int64_t chainCost;
  bool storesThroughTma; ///< ResourceUsage::storeBuffers > 0
};
} // namespace

/// Whether `lhs` is a better choice than `rhs`: over several waves, TMA
/// stores and then less work per SM between large tiles; fewer waves, then
/// a fuller last wave, then less padding; between different K slicings the
/// cheaper chain of K stages; then a larger tile, a deeper pipeline, and
/// finally the smaller tile_m (a deterministic order).
static bool isBetter(const Candidate &lhs, const Candidate &rhs) {
  const TilingScore &l = lhs.score, &r = rhs.score;
  const TileConfig &a = lhs.tiling, &b = rhs.tiling;
  if (l.waves > 1 && r.waves > 1) {
    // Large problems. The epilogue's TMA stores first: storing from
    // registers takes more cycles (docs/PERFORMANCE.md, "Design
    // measurements behind the code").
    if (lhs.storesThroughTma != rhs.storesThroughTma)
      return lhs.storesThroughTma;
    // Between tiles of at least 128x128 (about as efficient per FLOP):
    // what one SM computes in all (waves x tile x K per unit), so that a
    // larger tile does not win on fewer waves of more work (per-tensor
    // 256x192 in 11 waves at 8192^3 is slower than 128x256 in 16; see
    // docs/PERFORMANCE.md, "Design measurements behind the code").
    constexpr int64_t kEfficientTile = 128 * 128;
    if (a.tileM * a.tileN >= kEfficientTile &&
        b.tileM * b.tileN >= kEfficientTile) {
      int64_t workL = l.waves * a.tileM * a.tileN * b.splitK;
      int64_t workR = r.waves * b.tileM * b.tileN * a.splitK;
      if (workL != workR)
        return workL < workR;
    }
  }
  if (l.waves != r.waves)
    return l.waves < r.waves;
  // Compare last-wave utilizations exactly: lastL / slotsL vs lastR / slotsR.
  int64_t lastL = l.tiles - (l.waves - 1) * l.slots;
  int64_t lastR = r.tiles - (r.waves - 1) * r.slots;
  if (lastL * r.slots != lastR * l.slots)
    return lastL * r.slots > lastR * l.slots;
  if (l.paddedElements != r.paddedElements)
    return l.paddedElements < r.paddedElements;
  if (a.splitK != b.splitK && lhs.chainCost != rhs.chainCost)
    return lhs.chainCost < rhs.chainCost;
  if (a.tileM * a.tileN != b.tileM * b.tileN)
    return a.tileM * a.tileN > b.tileM * b.tileN;
  if (a.stages != b.stages)
    return a.stages > b.stages;
  return a.tileM < b.tileM;
}

llvm::Expected<TileConfig>
compiler::selectTiling(const GemmSpec &spec, const TargetInfo &target,
                       const TilingOptions &options) {
  if (llvm::Error error = checkShapes(spec))
    return std::move(error);
  if (llvm::Error error = checkKernelSupport(spec))
    return std::move(error);
  if (target.smCount == 0)
    return llvm::createStringError("the target has 0 SMs; expected at least 1");

  std::vector<int64_t> tileMs = {128, 256};
  if (spec.multipliesInF16())
    tileMs = {128};
  else if (considerTileM64(spec, options))
    tileMs.insert(tileMs.begin(), 64);
  static constexpr int64_t kTileNs[] = {32, 64, 96, 128, 160, 192, 224, 256};
  std::vector<int64_t> splits = {1};
  if (considerSplitK(spec, options))
    for (int64_t split : {2, 4, 8})
      if (spec.k % (split * kSliceGranularity(spec)) == 0)
        splits.push_back(split);

  // The f16 MMA's slots take room from the stages: two FP8 stages may be
  // all that fits beside them, and wide tiles with two stages run faster
  // than 128x128 with four (docs/PERFORMANCE.md, "Design measurements
  // behind the code").
  const int64_t minStages = spec.multipliesInF16() ? 2 : options.minStages;
  std::optional<Candidate> best;
  // The candidate that came closest to fitting, for the error message.
  std::optional<std::pair<TileConfig, ResourceUsage>> smallest;
  for (int64_t splitK : splits) {
    int64_t kSteps = llvm::divideCeil(spec.k / splitK, kBlockK);
    int64_t requiredStages = std::max<int64_t>(2, std::min(minStages, kSteps));
    for (int64_t tileM : tileMs) {
      for (int64_t tileN : kTileNs) {
        if (tileM == 64 && kSteps < 2)
          continue;
        TileConfig tiling;
        tiling.tileM = tileM;
        tiling.tileN = tileN;
        tiling.splitK = splitK;
        tiling.stages = requiredStages;
        ResourceUsage usage = estimateResources(spec, tiling, target);
        if (usage.accumulatorRegisters > usage.accumulatorRegisterLimit)
          continue;
        // Left to tuning, being slower than 128x128 tiles at large shapes
        // (docs/PERFORMANCE.md, "Design measurements behind the code"):
        // one-sided factors narrowed to one partial set by a wide tile, and
        // per-group NxN scales of B over tiles they do not cover whole,
        // which take a column table and a second FP32 op per accumulator.
        if (usage.partialSetsNarrowed)
          continue;
        if (spec.bScaling.blockRows > 1 && hasColumnFactor(spec, tileN))
          continue;
        // 64-row tiles wider than 64 for a per-128 promotion (per-group):
        // at M up to 64 and a large N, 128x128 is faster than 64x128, while
        // 64x64 in two K slices wins where N is small (docs/PERFORMANCE.md,
        // "Design measurements behind the code"). A per-32 promotion
        // (MOSS) keeps them at every width: its longer promotion chain is
        // what the alternating warpgroups halve.
        if (tileM == 64 && getPromoteK(spec) >= 128 && tileN > 64)
          continue;
        if (!smallest || usage.sharedBytes < smallest->second.sharedBytes)
          smallest = {tiling, usage};
        if (usage.sharedBytes > target.sharedMemoryPerBlock)
          continue;
        // As many stages as fit, up to maxStages and the number of K steps.
        tiling.stages = std::max(
            requiredStages,
            getValidStages(spec, std::min({getStagesThatFit(spec, tiling, target),
                                           options.maxStages, kSteps})));
        // One stage less where that leaves room for the epilogue's TMA
        // stores, which take fewer cycles than storing from registers
        // (docs/PERFORMANCE.md, "Design measurements behind the code").
        bool storesThroughTma =
            estimateResources(spec, tiling, target).storeBuffers > 0;
        if (usage.storable && !storesThroughTma &&
            getValidStages(spec, tiling.stages - 1) >= requiredStages) {
          TileConfig fewer = tiling;
          fewer.stages = getValidStages(spec, tiling.stages - 1);
          if (estimateResources(spec, fewer, target).storeBuffers > 0) {
            tiling = fewer;
            storesThroughTma = true;
          }
        }
        Candidate candidate{tiling, scoreTiling(spec, tiling, target, options),
                            chainCost(spec, tiling), storesThroughTma};
        if (!best || isBetter(candidate, *best))
          best = candidate;
      }
    }
  }
  if (!best) {
    if (!smallest)
      return llvm::createStringError(
          "no tile configuration fits the registers of a consumer thread");
    return llvm::createStringError(
        "no tile configuration fits in %u bytes of shared memory per block; "
        "the smallest, %lldx%lld with %lld stages, needs %u bytes",
        target.sharedMemoryPerBlock,
        static_cast<long long>(smallest->first.tileM),
        static_cast<long long>(smallest->first.tileN),
        static_cast<long long>(smallest->first.stages),
        smallest->second.sharedBytes);
  }

  TileConfig tiling = best->tiling;
  int64_t m = plannedM(spec, options);
  int64_t tilesM = llvm::divideCeil(m, tiling.tileM);
  int64_t tilesN = llvm::divideCeil(spec.n, tiling.tileN);
  // Pair blocks along M to multicast their shared B tile, when the planned
  // M's pairs come out even and there is at least a full wave to keep the
  // SMs busy (not with split K or warpgroups, which take no clusters). A
  // dynamic M is planned for a power of two (TilingOptions::assumedM, or
  // the launch's bucket); an odd number of tiles at launch leaves one block
  // of the last pair idle. Each kernel alone at the power cap, 2x1
  // clusters run as fast as 1x1 or faster for every scheme at the large
  // shapes (docs/PERFORMANCE.md, "Design measurements behind the code").
  if (options.allowClusters && tiling.splitK == 1 && tiling.tileM != 64 &&
      tilesM % 2 == 0 && target.smCount % 2 == 0 &&
      best->score.tiles >= static_cast<int64_t>(target.smCount))
    tiling.clusterM = 2;
  setTileOrder(tiling, m, spec.n);
  tiling.source = TilingSource::Heuristic;
  return tiling;
}

void compiler::setTileOrder(TileConfig &tiling, int64_t rows, int64_t n) {
  const int64_t tilesM =
      llvm::divideCeil(std::max<int64_t>(rows, 1), tiling.tileM);
  const int64_t tilesN = llvm::divideCeil(n, tiling.tileN);
  tiling.raster = tilesM <= tilesN ? RasterOrder::AlongM : RasterOrder::AlongN;
  tiling.swizzle = static_cast<int64_t>(std::min<uint64_t>(
      8, llvm::bit_floor(static_cast<uint64_t>(std::min(tilesM, tilesN)))));
}

llvm::Expected<TileConfig>
compiler::selectTilingForLaunch(const GemmSpec &spec, int64_t m,
                                const TargetInfo &target,
                                TilingOptions options) {
  if (spec.isDynamicM()) {
    int64_t bucket = getRowsBucket(m);
    if (bucket < options.assumedM)
      options.assumedM = bucket;
  }
  options.allowSplitK = true; // the runtime provides the workspace
  return selectTiling(spec, target, options);
}
