//===- KernelFunction.h - The functions the conversions replace -*- C++ -*-===//
//
// Each moss.gemm and moss.quantize is the whole body of a function of the
// module, which its conversion replaces with one emitc.file.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_CONVERSION_MOSSTOEMITC_KERNELFUNCTION_H
#define MOSS_CONVERSION_MOSSTOEMITC_KERNELFUNCTION_H

#include "mlir/Interfaces/FunctionInterfaces.h"

namespace mlir::moss {

/// The function `op` makes up (besides its return); an error on `op`
/// naming what else is there otherwise.
FailureOr<FunctionOpInterface> getKernelFunction(Operation *op);

} // namespace mlir::moss

#endif // MOSS_CONVERSION_MOSSTOEMITC_KERNELFUNCTION_H
