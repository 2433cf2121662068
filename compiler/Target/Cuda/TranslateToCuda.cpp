//===- TranslateToCuda.cpp - EmitC kernels to CUDA C++ --------------------===//

#include "moss/Target/Cuda/TranslateToCuda.h"

#include "moss/Dialect/MOSS/IR/MOSSOps.h"

#include "moss/Dialect/MOSS/IR/MOSSDialect.h"

#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Target/Cpp/CppEmitter.h"
#include "mlir/Tools/mlir-translate/Translation.h"

using namespace mlir;
using namespace mlir::moss;

FailureOr<SmallVector<CudaTranslationUnit>>
mlir::moss::translateToCudaUnits(ModuleOp module) {
  WalkResult leftover = module.walk([](Operation *op) {
    if (isa<MOSSDialect>(op->getDialect())) {
      op->emitOpError() << "is still in the module; expected only EmitC "
                           "translation units (run moss-gemm-pipeline, or "
                           "the moss passes up to moss-convert-gemm-to-emitc "
                           "and moss-convert-quantize-to-emitc, first)";
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  if (leftover.wasInterrupted())
    return failure();

  SmallVector<CudaTranslationUnit> units;
  for (auto file : module.getOps<emitc::FileOp>()) {
    CudaTranslationUnit unit;
    unit.kernelName = file.getId().str();
    unit.tiling = file->getAttrOfType<TilingAttr>("moss.tiling");
    llvm::raw_string_ostream os(unit.source);
    if (failed(emitc::translateToCpp(file, os, /*declareVariablesAtTop=*/false,
                                     file.getId())))
      return failure();
    units.push_back(std::move(unit));
  }
  if (units.empty())
    return module.emitError()
           << "holds no kernel to emit; expected emitc.file translation "
              "units from moss-convert-gemm-to-emitc or "
              "moss-convert-quantize-to-emitc";
  return units;
}

LogicalResult mlir::moss::translateToCuda(Operation *op, raw_ostream &os) {
  auto module = dyn_cast<ModuleOp>(op);
  if (!module)
    return op->emitError() << "expected a builtin.module";
  FailureOr<SmallVector<CudaTranslationUnit>> units =
      translateToCudaUnits(module);
  if (failed(units))
    return failure();
  for (const CudaTranslationUnit &unit : *units) {
    if (units->size() > 1)
      os << "// ----- " << unit.kernelName << "\n";
    os << unit.source;
  }
  return success();
}

void mlir::moss::registerToCudaTranslation() {
  TranslateFromMLIRRegistration registration(
      "moss-to-cuda",
      "Translate the EmitC kernels of moss-convert-gemm-to-emitc to CUDA C++",
      [](Operation *op, raw_ostream &os) { return translateToCuda(op, os); },
      [](DialectRegistry &registry) {
        registry.insert<MOSSDialect, emitc::EmitCDialect, func::FuncDialect>();
      });
}
