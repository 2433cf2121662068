//===- moss-translate.cpp - The moss translation driver -------------------===//
//
// mlir-translate for moss: `--moss-to-cuda` prints the CUDA C++ translation
// units that moss-convert-gemm-to-emitc made, through MLIR's C++ emitter.
// MLIR's own `--mlir-to-cpp` is registered too.
//
//===----------------------------------------------------------------------===//

#include "moss/Target/Cuda/TranslateToCuda.h"

#include "mlir/Target/Cpp/CppEmitter.h"
#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"

#include "ToolVersion.h"

namespace mlir {
void registerToCppTranslation();
} // namespace mlir

int main(int argc, char **argv) {
  moss::tools::setVersionPrinter("moss-translate");
  mlir::moss::registerToCudaTranslation();
  mlir::registerToCppTranslation();
  return mlir::failed(
      mlir::mlirTranslateMain(argc, argv, "MOSS-JIT translation driver\n"));
}
