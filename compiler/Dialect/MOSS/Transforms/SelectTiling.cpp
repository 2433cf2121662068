//===- SelectTiling.cpp - moss-select-tiling ------------------------------===//
//
// Attaches a #moss.tiling to every moss.gemm: the heuristic of
// moss/Compiler/Tiling.h, run on the op's plain GemmSpec.
//
//===----------------------------------------------------------------------===//

#include "moss/Compiler/Tiling.h"
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
    compiler::TilingOptions options;
    options.assumedM = assumedM;
    options.allowSplitK = allowSplitK;

    WalkResult walk = getOperation()->walk([&](GemmOp op) {
      return failed(select(op, target, options)) ? WalkResult::interrupt()
                                                 : WalkResult::advance();
    });
    if (walk.wasInterrupted())
      signalPassFailure();
  }

private:
  LogicalResult select(GemmOp op, const compiler::TargetInfo &target,
                       const compiler::TilingOptions &options) {
    GemmShape shape = getGemmShape(op);
    if (failed(checkStaticNK(op, shape, "moss-select-tiling")))
      return failure();
    compiler::GemmSpec spec = getGemmSpec(op, shape);

    // A configuration given beforehand (tuning database, by hand) stays if
    // it fits this target.
    if (TilingAttr existing = op.getTilingAttr()) {
      if (llvm::Error error =
              compiler::checkTiling(spec, getTileConfig(existing), target))
        return op.emitOpError()
               << "has a tiling that does not fit the target ("
               << target.smCount << " SMs, " << target.sharedMemoryPerBlock
               << " bytes of shared memory): "
               << llvm::toString(std::move(error));
      return success();
    }

    llvm::Expected<compiler::TileConfig> tiling =
        compiler::selectTiling(spec, target, options);
    if (!tiling)
      return op.emitOpError() << "cannot be tiled for " << spec.str() << ": "
                              << llvm::toString(tiling.takeError());
    op.setTilingAttr(getTilingAttr(op.getContext(), *tiling));
    return success();
  }
};

} // namespace
