//===- SelectTiling.cpp - moss-select-tiling ------------------------------===//
//
// Attaches a #moss.tiling to every moss.gemm and moss.grouped_gemm (the
// plan's, compiler::planGemm): the tuning database's entry
// (moss/Compiler/TuningDatabase.h) when `tuning-db` names one that has it,
// else the heuristic of moss/Compiler/Tiling.h, run on the op's plain
// GemmSpec.
//
//===----------------------------------------------------------------------===//

#include "moss/Compiler/GemmPlan.h"
#include "moss/Compiler/Tiling.h"
#include "moss/Compiler/TuningDatabase.h"
#include "moss/Dialect/MOSS/IR/MOSSOps.h"
#include "moss/Dialect/MOSS/Transforms/Passes.h"
#include "moss/Dialect/MOSS/Utils/GemmSpecUtils.h"

namespace mlir::moss {
#define GEN_PASS_DEF_SELECTTILING
#include "moss/Dialect/MOSS/Transforms/Passes.h.inc"
} // namespace mlir::moss

using namespace mlir;
using namespace mlir::moss;

namespace compiler = ::moss::compiler;

namespace {

class SelectTilingPass
    : public mlir::moss::impl::SelectTilingBase<SelectTilingPass> {
public:
  using SelectTilingBase::SelectTilingBase;

  void runOnOperation() override {
    compiler::TargetInfo target;
    target.smCount = smCount;
    target.sharedMemoryPerBlock = sharedMemoryBytes;
    target.arch = arch;
    compiler::TilingOptions options;
    options.assumedM = assumedM;
    options.allowSplitK = allowSplitK;
    loadDatabase();

    WalkResult walk = getOperation()->walk([&](Operation *op) {
      LogicalResult selected = success();
      if (auto gemm = dyn_cast<GemmOp>(op))
        selected = select(gemm, target, options);
      else if (auto grouped = dyn_cast<GroupedGemmOp>(op))
        selected = select(grouped, target, options);
      else if (auto alongK = dyn_cast<KGroupedGemmOp>(op))
        selected = select(alongK, target, options);
      return failed(selected) ? WalkResult::interrupt() : WalkResult::advance();
    });
    if (walk.wasInterrupted())
      signalPassFailure();
  }

private:
  /// Reads `tuning-db`; a file that cannot be read or fails its checks is
  /// reported as a warning and not used.
  void loadDatabase() {
    database.reset();
    if (tuningDatabase.empty())
      return;
    llvm::Expected<compiler::TuningDatabase> loaded =
        compiler::TuningDatabase::load(tuningDatabase);
    if (!loaded) {
      getOperation()->emitWarning()
          << "ignoring the tuning database: "
          << llvm::toString(loaded.takeError());
      return;
    }
    database = std::move(*loaded);
  }

  template <class OpT>
  LogicalResult select(OpT op, const compiler::TargetInfo &target,
                       const compiler::TilingOptions &options) {
    GemmShape shape = getGemmShape(op);
    if (failed(checkStaticNK(op, shape, "moss-select-tiling")))
      return failure();
    // The kernel is the one of the folded operands (with fold-a-in-kernel,
    // the kernel that folds A itself where it can; getPlannedKernelSpec)
    // when the op folds; the blocks the fold reads must still be ones the
    // kernels take.
    const compiler::GemmSpec asked = getGemmSpec(op, shape);
    // A grouped op's expert count is the IR's (B's first dimension).
    if (asked.groups)
      if (llvm::Error error = compiler::checkShapes(asked))
        return op.emitOpError() << llvm::toString(std::move(error));
    if (llvm::Error error = compiler::checkKernelSupport(asked))
      return op.emitOpError() << "cannot be tiled for " << asked.str() << ": "
                              << llvm::toString(std::move(error));
    // A configuration given beforehand (tuning database, by hand) stays if
    // it fits this target.
    if (TilingAttr existing = op.getTilingAttr()) {
      const compiler::GemmSpec spec = compiler::getPlannedKernelSpec(
          asked, compiler::GemmSpec::kDynamic, foldAInKernel);
      if (llvm::Error error =
              compiler::checkTiling(spec, getTileConfig(existing), target))
        return op.emitOpError()
               << "has a tiling that does not fit the target ("
               << target.smCount << " SMs, " << target.sharedMemoryPerBlock
               << " bytes of shared memory): "
               << llvm::toString(std::move(error));
      return success();
    }

    compiler::GemmPlanOptions planOptions;
    planOptions.database = database ? &*database : nullptr;
    planOptions.foldAInKernel = foldAInKernel;
    planOptions.heuristic = options;
    auto note = [&](const llvm::Twine &text) {
      if (verboseTuning)
        op.emitRemark() << text;
    };
    planOptions.onNote = note;
    llvm::Expected<compiler::GemmPlan> plan =
        compiler::planGemm(asked, target, planOptions);
    if (!plan)
      return op.emitOpError()
             << "cannot be tiled for "
             << compiler::getPlannedKernelSpec(
                    asked, compiler::GemmSpec::kDynamic, foldAInKernel)
                    .str()
             << ": " << llvm::toString(plan.takeError());
    op.setTilingAttr(getTilingAttr(op.getContext(), plan->tiling));
    return success();
  }

  std::optional<compiler::TuningDatabase> database;
};

} // namespace
