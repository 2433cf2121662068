//===- Candidates.cpp - The tile configurations moss-tune tries -----------===//

#include "Candidates.h"

#include "moss/Compiler/GemmPlan.h"

#include "llvm/ADT/bit.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

#include <algorithm>
#include <tuple>

using namespace llvm;
using namespace moss;
using namespace moss::tune;
using compiler::RasterOrder;
using compiler::TileConfig;

CandidateCounts &CandidateCounts::operator+=(const CandidateCounts &other) {
  space += other.space;
  resources += other.resources;
  idleSms += other.idleSms;
  redundant += other.redundant;
  padding += other.padding;
  overCap += other.overCap;
  kept += other.kept;
  return *this;
}

bool tune::sameKernel(const TileConfig &lhs, const TileConfig &rhs) {
  return std::tie(lhs.tileM, lhs.tileN, lhs.stages, lhs.clusterM, lhs.clusterN,
                  lhs.raster, lhs.swizzle, lhs.splitK) ==
         std::tie(rhs.tileM, rhs.tileN, rhs.stages, rhs.clusterM, rhs.clusterN,
                  rhs.raster, rhs.swizzle, rhs.splitK);
}

std::string tune::getShortName(const TileConfig &t) {
  std::string name = formatv(
      "{0}x{1} s{2} c{3}x{4} {5}/{6}", t.tileM, t.tileN, t.stages, t.clusterM,
      t.clusterN, t.raster == RasterOrder::AlongM ? "m" : "n", t.swizzle);
  if (t.splitK > 1)
    name += formatv(" k/{0}", t.splitK).str();
  return name;
}

namespace {

constexpr int64_t kTileMs[] = {64, 128, 256};
constexpr int64_t kTileNs[] = {32, 64, 96, 128, 160, 192, 224, 256};
constexpr int64_t kMaxStages = 8;
constexpr std::pair<int64_t, int64_t> kClusters[] = {{1, 1}, {2, 1}, {1, 2}};
constexpr RasterOrder kRasters[] = {RasterOrder::AlongM, RasterOrder::AlongN};
constexpr int64_t kSwizzles[] = {1, 2, 4, 8};
constexpr int64_t kSplits[] = {1, 2, 4, 8};

/// A tile shape and K slicing that fit, with its score at this M.
struct TileShape {
  int64_t tileM, tileN, splitK;
  int64_t tilesM, tilesN;
  /// The deepest pipeline that fits (at most kMaxStages and the K steps).
  int64_t maxStages;
  compiler::TilingScore score;
  /// Average busy fraction of the SMs over the waves.
  double utilization;
  int rank = 0;
};

/// The heuristic's order of tile shapes: fewer waves, a fuller last wave,
/// less padding, a larger tile.
bool isBetter(const TileShape &l, const TileShape &r) {
  if (l.score.waves != r.score.waves)
    return l.score.waves < r.score.waves;
  if (l.score.lastWaveUtilization != r.score.lastWaveUtilization)
    return l.score.lastWaveUtilization > r.score.lastWaveUtilization;
  if (l.score.paddedElements != r.score.paddedElements)
    return l.score.paddedElements < r.score.paddedElements;
  if (l.tileM * l.tileN != r.tileM * r.tileN)
    return l.tileM * l.tileN > r.tileM * r.tileN;
  return l.tileM < r.tileM;
}

/// The heuristic's settings for a tile shape: rasterize along the dimension
/// with fewer tiles, a band of up to 8.
RasterOrder defaultRaster(const TileShape &s) {
  return s.tilesM <= s.tilesN ? RasterOrder::AlongM : RasterOrder::AlongN;
}
int64_t defaultSwizzle(const TileShape &s) {
  return std::min<int64_t>(
      8, int64_t(bit_floor(uint64_t(std::min(s.tilesM, s.tilesN)))));
}

/// The position of `value` in a preference list starting at the default.
template <typename T>
int preference(const T &value, const T &preferred,
               std::initializer_list<T> order) {
  if (value == preferred)
    return 0;
  int index = 1;
  for (const T &v : order) {
    if (v == value)
      return index;
    if (v != preferred)
      ++index;
  }
  return index;
}

} // namespace

Expected<ShapeCandidates>
tune::enumerateCandidates(const compiler::GemmSpec &spec, int64_t m,
                          const compiler::TargetInfo &target,
                          unsigned maxCandidates) {
  ShapeCandidates result;
  CandidateCounts &counts = result.counts;
  // The planner's choices without a database: the runtime's at a launch of
  // m rows, and the pipeline's for a kernel of any M planned for m.
  compiler::GemmPlanOptions launch;
  launch.rows = m;
  Expected<compiler::GemmPlan> heuristic =
      compiler::planGemm(spec, target, launch);
  if (!heuristic)
    return heuristic.takeError();
  compiler::GemmPlanOptions anyM;
  anyM.heuristic.assumedM = m;
  Expected<compiler::GemmPlan> heuristicAtM =
      compiler::planGemm(spec, target, anyM);
  if (!heuristicAtM)
    return heuristicAtM.takeError();
  result.heuristic = heuristic->tiling;
  result.heuristicAtM = heuristicAtM->tiling;

  // K slicings searched at this M.
  std::vector<int64_t> splits = {1};
  // Where the heuristic would consider it (docs/COMPILER.md).
  if (m <= compiler::kSplitKMaxRows)
    splits.assign(std::begin(kSplits), std::end(kSplits));

  // Tile shapes that fit at all, scored at this M.
  std::vector<TileShape> shapes;
  for (int64_t splitK : splits)
    for (int64_t tileM : kTileMs)
      for (int64_t tileN : kTileNs) {
        TileConfig probe;
        probe.tileM = tileM;
        probe.tileN = tileN;
        probe.splitK = splitK;
        probe.stages = 2;
        if (Error e = compiler::checkTiling(spec, probe, target)) {
          consumeError(std::move(e));
          continue;
        }
        const int64_t kSteps = divideCeil(spec.k / splitK, compiler::kBlockK);
        int64_t fit = compiler::getStagesThatFit(spec, probe, target);
        TileShape shape;
        shape.tileM = tileM;
        shape.tileN = tileN;
        shape.splitK = splitK;
        shape.tilesM = divideCeil(m, tileM);
        shape.tilesN = divideCeil(spec.n, tileN);
        shape.maxStages =
            std::max<int64_t>(2, std::min({fit, kMaxStages, kSteps}));
        shape.score =
            compiler::scoreTiling(spec, probe, target, anyM.heuristic);
        shape.utilization = double(shape.score.tiles) /
                            double(shape.score.waves * shape.score.slots);
        shapes.push_back(shape);
      }
  std::stable_sort(shapes.begin(), shapes.end(), isBetter);
  for (size_t i = 0; i < shapes.size(); ++i)
    shapes[i].rank = int(i);
  auto findShape = [&](int64_t tileM, int64_t tileN,
                       int64_t splitK) -> const TileShape * {
    for (const TileShape &shape : shapes)
      if (shape.tileM == tileM && shape.tileN == tileN &&
          shape.splitK == splitK)
        return &shape;
    return nullptr;
  };
  bool someBusy = llvm::any_of(
      shapes, [](const TileShape &s) { return s.utilization >= 0.5; });

  // The heuristic's choices are kept whatever the pruning says.
  auto add = [&](const TileConfig &t) {
    for (const TileConfig &existing : result.tilings)
      if (sameKernel(existing, t))
        return false;
    TileConfig copy = t;
    copy.source.reset();
    result.tilings.push_back(copy);
    return true;
  };
  add(result.heuristic);
  add(result.heuristicAtM);
  auto isForced = [&](const TileConfig &t) {
    return sameKernel(t, result.heuristic) ||
           sameKernel(t, result.heuristicAtM);
  };

  struct Ranked {
    TileConfig tiling;
    int priority;
  };
  std::vector<Ranked> ranked;
  int64_t forcedInSpace = 0;
  for (int64_t splitK : splits)
    for (int64_t tileM : kTileMs)
      for (int64_t tileN : kTileNs)
        for (int64_t stages = 2; stages <= kMaxStages; ++stages)
          for (auto [clusterM, clusterN] : kClusters)
            for (RasterOrder order : kRasters)
              for (int64_t band : kSwizzles) {
                ++counts.space;
                TileConfig t;
                t.tileM = tileM;
                t.tileN = tileN;
                t.stages = stages;
                t.clusterM = clusterM;
                t.clusterN = clusterN;
                t.raster = order;
                t.swizzle = band;
                t.splitK = splitK;
                if (isForced(t)) {
                  ++forcedInSpace;
                  continue;
                }
                const TileShape *shape = findShape(tileM, tileN, splitK);
                // Clusters too: split-K and 64-row tiles take none; the
                // f16 MMA takes even stage counts only.
                if (!shape || stages > shape->maxStages ||
                    clusterM * clusterN > 1 || spec.multipliesInF16()) {
                  if (Error e = compiler::checkTiling(spec, t, target)) {
                    consumeError(std::move(e));
                    ++counts.resources;
                    continue;
                  }
                }
                if (!shape) { // unreachable: a fitting tiling has a shape
                  ++counts.resources;
                  continue;
                }
                if (someBusy && shape->utilization < 0.5) {
                  ++counts.idleSms;
                  continue;
                }
                if (tileM == 256 &&
                    int64_t(divideCeil(m, int64_t(128))) == shape->tilesM) {
                  ++counts.padding;
                  continue;
                }
                // Variants that run exactly like another one.
                int64_t bandLimit = int64_t(bit_floor(
                    uint64_t(std::min(divideCeil(shape->tilesM, clusterM),
                                      divideCeil(shape->tilesN, clusterN)))));
                // With one row or column of (cluster) tiles, both rasters
                // walk the same order.
                const RasterOrder raster = defaultRaster(*shape);
                if (band > std::max<int64_t>(1, bandLimit) ||
                    (bandLimit <= 1 && order != raster) ||
                    (clusterM == 2 && shape->tilesM < 2) ||
                    (clusterN == 2 && shape->tilesN < 2) ||
                    stages >
                        std::max<int64_t>(2, divideCeil(spec.k / splitK,
                                                        compiler::kBlockK))) {
                  ++counts.redundant;
                  continue;
                }
                // Closeness to the heuristic's settings: fewer deviations
                // first, then how far each one goes, then the tile shape.
                const int64_t swizzle = defaultSwizzle(*shape);
                int stagePreference = preference<int64_t>(
                    stages, shape->maxStages,
                    {4, shape->maxStages - 1, 3, 6, 5, 7, 2, 8});
                int clusterPreference = clusterM == 1 && clusterN == 1 ? 0
                                        : clusterM == 2                ? 1
                                                                       : 2;
                int rasterPreference = order == raster ? 0 : 1;
                int swizzlePreference =
                    preference<int64_t>(band, swizzle, {1, 8, 4, 2});
                int deviations =
                    (stagePreference > 0) + (clusterPreference > 0) +
                    (rasterPreference > 0) + (swizzlePreference > 0);
                int priority = 10 * deviations + stagePreference +
                               clusterPreference + rasterPreference +
                               swizzlePreference + 3 * shape->rank;
                ranked.push_back({t, priority});
              }
  std::stable_sort(
      ranked.begin(), ranked.end(),
      [](const Ranked &l, const Ranked &r) { return l.priority < r.priority; });
  for (const Ranked &candidate : ranked) {
    if (result.tilings.size() >= std::max<size_t>(maxCandidates, 2)) {
      ++counts.overCap;
      continue;
    }
    add(candidate.tiling);
  }
  counts.kept = int64_t(result.tilings.size());
  // A heuristic choice outside the space (split-K at an M the search does
  // not slice K for) still counts as kept: keep the books balanced.
  counts.space +=
      counts.kept - (int64_t(ranked.size()) - counts.overCap) - forcedInSpace;
  return result;
}
