//===- MOSSPlugin.cpp - The moss dialect and passes as an MLIR plugin -----===//
//
// For Debian's mlir-opt-22 (and any MLIR 22 tool built on libMLIR.so):
//
//   mlir-opt-22 --load-dialect-plugin=libMOSSPlugin.so \
//               --load-pass-plugin=libMOSSPlugin.so in.mlir --moss-gemm-pipeline
//
// The library links the shared libMLIR and libLLVM of the tool that loads
// it, never a second, static copy (two copies would not share the
// registries).
//
//===----------------------------------------------------------------------===//

#include "moss/InitAll.h"
#include "moss/Version.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/Plugins/DialectPlugin.h"
#include "mlir/Tools/Plugins/PassPlugin.h"

extern "C" LLVM_ATTRIBUTE_WEAK mlir::DialectPluginLibraryInfo
mlirGetDialectPluginInfo() {
  return {MLIR_PLUGIN_API_VERSION, "MOSS", MOSS_VERSION_STRING,
          [](mlir::DialectRegistry *registry) {
            mlir::moss::registerAllDialects(*registry);
          }};
}

extern "C" LLVM_ATTRIBUTE_WEAK mlir::PassPluginLibraryInfo
mlirGetPassPluginInfo() {
  return {MLIR_PLUGIN_API_VERSION, "MOSS", MOSS_VERSION_STRING,
          [] { mlir::moss::registerAllPasses(); }};
}
