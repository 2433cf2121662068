//===- KernelFunction.cpp - The functions the conversions replace ---------===//

#include "KernelFunction.h"

#include "mlir/IR/BuiltinOps.h"

using namespace mlir;

FailureOr<FunctionOpInterface> mlir::moss::getKernelFunction(Operation *op) {
  auto func = dyn_cast_or_null<FunctionOpInterface>(op->getParentOp());
  if (!func || !isa_and_nonnull<ModuleOp>(func->getParentOp()))
    return op->emitOpError() << "must be directly inside a function of the "
                                "module; each such function becomes one "
                                "kernel";
  Region &body = func.getFunctionBody();
  if (!body.hasOneBlock())
    return op->emitOpError()
           << "is in a function with " << body.getBlocks().size()
           << " blocks; expected one block holding the " << op->getName()
           << " and a return";
  for (Operation &other : body.front()) {
    if (&other == op || &other == body.front().getTerminator())
      continue;
    InFlightDiagnostic diag =
        op->emitOpError() << "shares its function with '" << other.getName()
                          << "'; expected a function holding only the "
                          << op->getName()
                          << " and a return (each becomes one kernel)";
    diag.attachNote(other.getLoc()) << "other op here";
    return diag;
  }
  return func;
}

