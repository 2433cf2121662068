//===- moss-opt.cpp - The moss optimizer driver ---------------------------===//
//
// mlir-opt for the moss dialect: parses, verifies, runs moss passes and
// prints. Only the dialects a moss program uses are registered, which keeps
// the statically linked binary small.
//
//===----------------------------------------------------------------------===//

#include "moss/Dialect/MOSS/IR/MOSSDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<mlir::moss::MOSSDialect, mlir::func::FuncDialect,
                  mlir::arith::ArithDialect>();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "MOSS-JIT optimizer driver\n", registry));
}
