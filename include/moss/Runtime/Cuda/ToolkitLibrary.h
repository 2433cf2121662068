//===- ToolkitLibrary.h - Opening a CUDA toolkit library --------*- C++ -*-===//
//
// NVRTC (and, for the baselines, cuBLASLt) are opened with dlopen at run
// time, so the programs start, and run everything else, where the toolkit
// is missing. One search order for all of them.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_RUNTIME_CUDA_TOOLKITLIBRARY_H
#define MOSS_RUNTIME_CUDA_TOOLKITLIBRARY_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <string>

namespace moss::runtime {

/// Opens the first of: the path in $`pathVariable`, each of `names` as the
/// dynamic loader finds it, then each in $CUDA_HOME/lib64 and
/// /usr/local/cuda/lib64. Never closed, so the symbols stay valid for the
/// life of the process. Null when none opens; `tried` then lists the paths.
void *openToolkitLibrary(llvm::StringRef pathVariable,
                         llvm::ArrayRef<llvm::StringRef> names,
                         std::string &tried);

} // namespace moss::runtime

#endif // MOSS_RUNTIME_CUDA_TOOLKITLIBRARY_H
