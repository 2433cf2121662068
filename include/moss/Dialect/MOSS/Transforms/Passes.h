//===- Passes.h - moss dialect passes ---------------------------*- C++ -*-===//

#ifndef MOSS_DIALECT_MOSS_TRANSFORMS_PASSES_H
#define MOSS_DIALECT_MOSS_TRANSFORMS_PASSES_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "moss/Compiler/PlannedRows.h"

namespace mlir::moss {

#define GEN_PASS_DECL
#include "moss/Dialect/MOSS/Transforms/Passes.h.inc"

/// Registers every moss dialect pass with the global pass registry.
#define GEN_PASS_REGISTRATION
#include "moss/Dialect/MOSS/Transforms/Passes.h.inc"

} // namespace mlir::moss

#endif // MOSS_DIALECT_MOSS_TRANSFORMS_PASSES_H
