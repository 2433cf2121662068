//===- Passes.h - moss conversions ------------------------------*- C++ -*-===//

#ifndef MOSS_CONVERSION_PASSES_H
#define MOSS_CONVERSION_PASSES_H

#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::moss {

#define GEN_PASS_DECL
#include "moss/Conversion/Passes.h.inc"

/// Registers every moss conversion pass with the global pass registry.
#define GEN_PASS_REGISTRATION
#include "moss/Conversion/Passes.h.inc"

} // namespace mlir::moss

#endif // MOSS_CONVERSION_PASSES_H
