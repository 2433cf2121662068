/*===- moss-c/Dialects.h - The moss dialect in the MLIR C API -----*- C -*-===*\
|*                                                                            *|
|* For compilers that drive MLIR through its C API (and the Python bindings   *|
|* built on it): the dialect handle, and the passes.                          *|
|*                                                                            *|
|*   MlirDialectHandle moss = mlirGetDialectHandle__moss__();                 *|
|*   mlirDialectHandleRegisterDialect(moss, context);                         *|
|*   mlirDialectHandleLoadDialect(moss, context);                             *|
|*                                                                            *|
\*===----------------------------------------------------------------------===*/

#ifndef MOSS_C_DIALECTS_H
#define MOSS_C_DIALECTS_H

#include "mlir-c/IR.h"

#ifdef __cplusplus
extern "C" {
#endif

MLIR_DECLARE_CAPI_DIALECT_REGISTRATION(MOSS, moss);

/// Registers the moss passes, the conversion to EmitC and the GEMM pipeline
/// (-moss-gemm-pipeline) with MLIR's global pass registry, as
/// mlir::moss::registerAllPasses does. Safe to call more than once.
MLIR_CAPI_EXPORTED void mossRegisterAllPasses(void);

#ifdef __cplusplus
}
#endif

#endif /* MOSS_C_DIALECTS_H */
