//===- moss-opt.cpp - The moss optimizer driver ---------------------------===//
//
// mlir-opt for the moss dialect: parses, verifies, runs moss passes and
// prints. Only the dialects a moss program uses (and EmitC, which the
// lowering produces) are registered, which keeps the statically linked
// binary small.
//
//===----------------------------------------------------------------------===//

#include "moss/InitAll.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

#include "ToolVersion.h"

int main(int argc, char **argv) {
  moss::tools::setVersionPrinter("moss-opt");
  mlir::DialectRegistry registry;
  mlir::moss::registerAllDialects(registry);
  mlir::moss::registerAllPasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "MOSS-JIT optimizer driver\n", registry));
}
