//===- moss-opt.cpp - The moss optimizer driver ---------------------------===//
//
// mlir-opt for the moss dialect: parses, verifies, runs moss passes and
// prints. Only the dialects a moss program uses (and EmitC, which the
// lowering produces) are registered, which keeps the statically linked
// binary small.
//
//===----------------------------------------------------------------------===//

#include "moss/Compiler/Pipelines.h"
#include "moss/Conversion/Passes.h"
#include "moss/Dialect/MOSS/IR/MOSSDialect.h"
#include "moss/Dialect/MOSS/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

#include "ToolVersion.h"

int main(int argc, char **argv) {
  moss::tools::setVersionPrinter("moss-opt");
  mlir::DialectRegistry registry;
  registry.insert<mlir::moss::MOSSDialect, mlir::func::FuncDialect,
                  mlir::arith::ArithDialect, mlir::emitc::EmitCDialect>();
  mlir::moss::registerMOSSPasses();
  mlir::moss::registerMOSSConversionPasses();
  mlir::moss::registerGemmPipeline();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "MOSS-JIT optimizer driver\n", registry));
}
