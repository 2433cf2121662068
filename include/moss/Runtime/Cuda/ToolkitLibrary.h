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

/// Opens the first of: the path in $`pathVariable`; each of `names` as the
/// dynamic loader finds it, then in $CUDA_HOME/lib64 and
/// /usr/local/cuda/lib64 (the toolkit locations, skipped where
/// isToolkitSearchSkipped()); then in each directory of
/// $MOSS_CUDA_LIBRARY_DIRS (colon-separated: the Python package lists pip's
/// CUDA wheels there). Never closed, so the symbols stay valid for the life
/// of the process. Null when none opens; `tried` then lists the paths. The
/// file opened goes to `openedPath` where given.
void *openToolkitLibrary(llvm::StringRef pathVariable,
                         llvm::ArrayRef<llvm::StringRef> names,
                         std::string &tried,
                         std::string *openedPath = nullptr);

/// True where $MOSS_CUDA_SKIP_TOOLKIT is set (and not "0"):
/// openToolkitLibrary then looks only at its path variable and
/// $MOSS_CUDA_LIBRARY_DIRS, as on a machine with pip's CUDA wheels and no
/// toolkit.
bool isToolkitSearchSkipped();

} // namespace moss::runtime

#endif // MOSS_RUNTIME_CUDA_TOOLKITLIBRARY_H
