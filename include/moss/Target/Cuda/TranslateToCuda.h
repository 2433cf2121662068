//===- TranslateToCuda.h - EmitC kernels to CUDA C++ ------------*- C++ -*-===//
//
// The last step of the GEMM pipeline: the `emitc.file` translation units
// that moss-convert-gemm-to-emitc made become CUDA C++ text through MLIR's
// C++ emitter (mlir::emitc::translateToCpp).
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_TARGET_CUDA_TRANSLATETOCUDA_H
#define MOSS_TARGET_CUDA_TRANSLATETOCUDA_H

#include "moss/Dialect/MOSS/IR/MOSSAttrs.h"

#include "mlir/IR/BuiltinOps.h"

#include <string>

namespace mlir::moss {

/// One kernel's CUDA C++ translation unit.
struct CudaTranslationUnit {
  /// The `extern "C"` kernel name (the emitc.file id).
  std::string kernelName;
  /// The C++ text.
  std::string source;
  /// The `moss.tiling` the file carries (null if none).
  TilingAttr tiling;
};

/// Translates every `emitc.file` directly in `module`, in order. Fails
/// (with a diagnostic) when the module holds none, or still holds moss ops.
FailureOr<SmallVector<CudaTranslationUnit>>
translateToCudaUnits(ModuleOp module);

/// Prints every translation unit of `op` (a module), separated by a
/// `// ----- <kernel name>` line when there are several.
LogicalResult translateToCuda(Operation *op, raw_ostream &os);

/// Registers `--moss-to-cuda` with the mlir-translate registry.
void registerToCudaTranslation();

} // namespace mlir::moss

#endif // MOSS_TARGET_CUDA_TRANSLATETOCUDA_H
