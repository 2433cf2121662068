//===- GemmPlan.h - Every decision about one GEMM, made once ----*- C++ -*-===//
//
// planGemm() is the one planner of a GEMM: from the spec a caller asks for,
// the rows it is launched with, the target and the tuning database it
// decides the fold, which operands a pass folds before the kernel, whether
// the kernel folds A itself, the spec the kernel computes and its tiling
// (and who chose it). The runtime (GemmRunner), compileGemm() and the
// moss-select-tiling pass read the plan instead of deciding again.
// No MLIR types in this header.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_COMPILER_GEMMPLAN_H
#define MOSS_COMPILER_GEMMPLAN_H

#include "moss/Compiler/GemmSpec.h"
#include "moss/Compiler/Tiling.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

#include <optional>

namespace moss::compiler {

class TuningDatabase;

/// The tokens per expert a k-grouped GEMM's tiling is chosen for (one
/// kernel serves every K; planGemm).
constexpr int64_t kAssumedExpertK = 4096;

/// What planGemm needs besides the spec and the target.
struct GemmPlanOptions {
  /// The rows of the launch planned for (the runtime: the launch's M, which
  /// decides the default fold and the heuristic's tiling), or kDynamic for
  /// a kernel of any M: the spec's static M, else `heuristic.assumedM`.
  /// A k-grouped GEMM's plan does not depend on it.
  int64_t rows = GemmSpec::kDynamic;
  /// A tiling to use instead of the database's or the heuristic's. It must
  /// fit the kernel (checkTiling).
  std::optional<TileConfig> tiling;
  /// Consulted first for a tiling when `tiling` is unset.
  const TuningDatabase *database = nullptr;
  /// Whether the kernel folds A's E8M0 block factors itself where the spec
  /// folds by rows and it can (GemmSpec::canFoldAInKernel, and a given
  /// `tiling` that fits that kernel), instead of a pass before it.
  bool foldAInKernel = false;
  /// The quick-compile variant's tiling (getQuickCompileTiling).
  bool quickCompile = false;
  /// The heuristic's options (assumed M, split-K).
  TilingOptions heuristic;
  /// Called with each reason the database gave no tiling.
  llvm::function_ref<void(const llvm::Twine &)> onNote = nullptr;
};

/// One GEMM, planned: what every later stage reads.
struct GemmPlan {
  /// The GEMM as asked for.
  GemmSpec asked;
  /// The fold at the planned rows (GemmSpec::getFold).
  numerics::BlockScaleFold fold = numerics::BlockScaleFold::None;
  /// Whether a pass folds operand A (B) before the kernel
  /// (runtime::GpuFolder): the fold is not None, the operand has E8M0
  /// factors and, for A, the kernel does not fold it itself.
  bool passFoldsA = false;
  bool passFoldsB = false;
  /// The GEMM the kernel computes: `asked` with the passes' folded schemes,
  /// and kernelFoldsA set where the kernel folds A itself.
  GemmSpec kernel;
  /// The kernel's tiling; `tiling.source` says who chose it (unset: given).
  TileConfig tiling;
  /// Whether `tiling` is the quick-compile variant's.
  bool quickCompile = false;
};

/// The GEMM the kernel computes for `asked` at `rows` rows
/// (GemmSpec::getFold): with `foldAInKernel`, the kernel that folds A itself
/// where it can (GemmSpec::getFoldingKernelSpec), else the kernel of the
/// folded operands (GemmSpec::getKernelSpec). The one rule; the passes that
/// read a `moss.gemm` with fold-a-in-kernel call it too.
GemmSpec getPlannedKernelSpec(const GemmSpec &asked, int64_t rows,
                              bool foldAInKernel);

/// Plans `asked` on `target`: the fold, the kernel's spec, and its tiling
/// (options.tiling, else the database's entry at the rows' bucket, else the
/// heuristic's; chooseTiling), narrowed for the quick-compile variant when
/// asked and checked against the target. The spec itself is not checked
/// here beyond what tiling needs (moss::checkGemmSpec does that).
llvm::Expected<GemmPlan> planGemm(const GemmSpec &asked,
                                  const TargetInfo &target,
                                  const GemmPlanOptions &options = {});

/// `plan` with the quick-compile variant's tiling (getQuickCompileTiling):
/// the first kernel of the runtime's tiered compile.
llvm::Expected<GemmPlan> getQuickCompilePlan(const GemmPlan &plan,
                                             const TargetInfo &target);

} // namespace moss::compiler

#endif // MOSS_COMPILER_GEMMPLAN_H
