//===- GemmPlan.cpp - Every decision about one GEMM, made once ------------===//

#include "moss/Compiler/GemmPlan.h"

#include "moss/Compiler/TuningDatabase.h"
#include "moss/Numerics/Fold.h"

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

  if (options.tiling) {
    plan.tiling = *options.tiling;
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
