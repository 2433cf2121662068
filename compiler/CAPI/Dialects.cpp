//===- Dialects.cpp - The moss dialect in the MLIR C API ------------------===//

#include "moss-c/Dialects.h"

#include "moss/Dialect/MOSS/IR/MOSSDialect.h"
#include "moss/InitAll.h"

#include "mlir/CAPI/Registration.h"

MLIR_DEFINE_CAPI_DIALECT_REGISTRATION(MOSS, moss, mlir::moss::MOSSDialect)

void mossRegisterAllPasses(void) { mlir::moss::registerAllPasses(); }
