//===- InitAll.cpp - Register the moss dialect and passes -----------------===//

#include "moss/InitAll.h"

#include "moss/Compiler/Pipelines.h"
#include "moss/Conversion/Passes.h"
#include "moss/Dialect/MOSS/IR/MOSSDialect.h"
#include "moss/Dialect/MOSS/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"

#include <mutex>

void mlir::moss::registerAllDialects(DialectRegistry &registry) {
  registry.insert<MOSSDialect, func::FuncDialect, arith::ArithDialect,
                  emitc::EmitCDialect>();
}

void mlir::moss::registerAllPasses() {
  // The pass registry rejects a second registration of a pipeline name.
  static std::once_flag once;
  std::call_once(once, [] {
    registerMOSSPasses();
    registerMOSSConversionPasses();
    registerGemmPipeline();
  });
}
