//===- InitAll.h - Register the moss dialect and passes ---------*- C++ -*-===//
//
// For C++ embedders (another MLIR compiler, a custom *-opt driver): one call
// registers what a moss program and its lowering need, one call the passes
// and the pipeline, as moss-opt does.
//
//   mlir::DialectRegistry registry;
//   mlir::moss::registerAllDialects(registry);
//   mlir::moss::registerAllPasses();
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_INITALL_H
#define MOSS_INITALL_H

namespace mlir {
class DialectRegistry;

namespace moss {

/// Adds the moss dialect and the dialects its programs and lowering use
/// (func, arith, emitc) to `registry`.
void registerAllDialects(DialectRegistry &registry);

/// Registers the moss passes (-moss-specialize-shapes, -moss-select-tiling,
/// ...), the conversion to EmitC and the GEMM pipeline
/// (-moss-gemm-pipeline) with the global pass registry. Safe to call more
/// than once.
void registerAllPasses();

} // namespace moss
} // namespace mlir

#endif // MOSS_INITALL_H
