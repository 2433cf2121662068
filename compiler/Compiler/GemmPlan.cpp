//===- GemmPlan.cpp - Every decision about one GEMM, made once ------------===//

#include "moss/Compiler/GemmPlan.h"

#include "moss/Compiler/TuningDatabase.h"
#include "moss/Numerics/Fold.h"

#include <algorithm>

using namespace moss;
using namespace moss::compiler;

GemmSpec compiler::getPlannedKernelSpec(const GemmSpec &asked, int64_t rows,
                                        bool foldAInKernel) {
  return foldAInKernel ? asked.getFoldingKernelSpec(rows)
                       : asked.getKernelSpec(rows);
}

/// Whether the kernel of `asked` at `rows` rows folds A itself: asked for,
/// allowed and, with a given tiling, on one that kernel takes (else a pass
/// folds A and the given tiling is checked against that kernel).
static bool kernelFoldsA(const GemmSpec &asked, int64_t rows,
                         const GemmPlanOptions &options,
                         const TargetInfo &target) {
  if (!options.foldAInKernel || !asked.canFoldAInKernel(rows))
    return false;
  if (!options.tiling)
    return true;
  llvm::Error unfit = checkTiling(asked.getFoldingKernelSpec(rows),
                                  *options.tiling, target);
  const bool fits = !unfit;
  llvm::consumeError(std::move(unfit));
  return fits;
}

/// The heuristic's tiling of a grouped GEMM: the dense heuristic's for
/// `dense` at `rows` rows, made one the grouped kernel takes (tiles never
/// straddle two experts, so no split-K, 64-row tiles or clusters), with as
/// many of its stages as then fit.
static llvm::Expected<TileConfig>
getGroupedTiling(const GemmSpec &kernel, const GemmSpec &dense, int64_t rows,
                 const TargetInfo &target, const TilingOptions &heuristic) {
  llvm::Expected<TileConfig> denseTiling =
      selectTilingForLaunch(dense, rows, target, heuristic);
  if (!denseTiling)
    return denseTiling.takeError();
  TileConfig tiling = *denseTiling;
  tiling.tileM = std::max<int64_t>(tiling.tileM, 128);
  tiling.splitK = 1;
  tiling.clusterM = tiling.clusterN = 1;
  while (tiling.stages > 2) {
    llvm::Error unfit = checkTiling(kernel, tiling, target);
    if (!unfit)
      break;
    llvm::consumeError(std::move(unfit));
    --tiling.stages;
  }
  return tiling;
}

llvm::Expected<GemmPlan> compiler::planGemm(const GemmSpec &asked,
                                            const TargetInfo &target,
                                            const GemmPlanOptions &options) {
  const int64_t rows = options.rows;
  GemmPlan plan;
  plan.asked = asked;
  plan.fold = asked.getFold(rows);
  const bool foldsA = kernelFoldsA(asked, rows, options, target);
  plan.kernel = getPlannedKernelSpec(asked, rows, foldsA);
  if (plan.fold != numerics::BlockScaleFold::None) {
    plan.passFoldsA = numerics::isFoldable(asked.aScaling) && !foldsA;
    plan.passFoldsB = numerics::isFoldable(asked.bScaling);
  }

  if (asked.groups && plan.passFoldsB && asked.bScaling.hasGlobalScales() &&
      !asked.bScaling.globalPerRow())
    return llvm::createStringError(
        "B of the m-grouped GEMM " + asked.str() +
        " has one global scale per expert, which its fold cannot take; "
        "expected fold none, or B with per-row globals");

  std::optional<TileConfig> tuned;
  if (!options.tiling && asked.groups && options.database &&
      hasTuningEntries(asked))
    tuned = options.database->lookup(
        plan.kernel, target, rows > 0 ? rows : options.heuristic.assumedM,
        options.onNote);
  if (options.tiling) {
    plan.tiling = *options.tiling;
  } else if (tuned) {
    // A contiguous m-grouped GEMM's entry (plain GEMMs look theirs up in
    // chooseTiling).
    plan.tiling = *tuned;
  } else if (asked.groups) {
    // An m-grouped GEMM's heuristic sees all rows at once; a k-grouped
    // one's sees the experts' outputs stacked, groups * M rows of N (as
    // many tiles), at kAssumedExpertK.
    GemmSpec dense = plan.kernel;
    int64_t denseRows = rows > 0 ? rows : options.heuristic.assumedM;
    if (asked.groupedK) {
      dense.groups = 0;
      dense.groupedK = false;
      dense.k = kAssumedExpertK;
      denseRows = std::min<int64_t>(asked.m * asked.groups, INT32_MAX);
    }
    llvm::Expected<TileConfig> chosen = getGroupedTiling(
        plan.kernel, dense, denseRows, target, options.heuristic);
    if (!chosen)
      return chosen.takeError();
    plan.tiling = *chosen;
  } else {
    TilingChoice choice;
    choice.database = options.database;
    // A launch's own rows, else a kernel of any M planned for the static M
    // or the assumed one.
    choice.launchRows = rows > 0 ? rows : 0;
    choice.heuristic = options.heuristic;
    choice.onNote = options.onNote;
    llvm::Expected<TileConfig> chosen =
        chooseTiling(plan.kernel, target, choice);
    if (!chosen)
      return chosen.takeError();
    plan.tiling = *chosen;
  }
  if (options.quickCompile)
    return getQuickCompilePlan(plan, target);
  if (llvm::Error error = checkTiling(plan.kernel, plan.tiling, target))
    return std::move(error);
  return plan;
}

llvm::Expected<GemmPlan>
compiler::getQuickCompilePlan(const GemmPlan &plan, const TargetInfo &target) {
  GemmPlan quick = plan;
  quick.tiling = getQuickCompileTiling(plan.kernel, plan.tiling, target);
  quick.quickCompile = true;
  if (llvm::Error error = checkTiling(quick.kernel, quick.tiling, target))
    return std::move(error);
  return quick;
}
