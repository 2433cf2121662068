//===- ToolVersion.h - --version for every MOSS-JIT tool -------*- C++ -*-===//
//
// Replaces LLVM's version printer (which names the LLVM build) with the
// project's version and what the tool was built with. Header-only, so that
// the MLIR drivers, which link no MOSS tool library, use it too.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_TOOLS_COMMON_TOOLVERSION_H
#define MOSS_TOOLS_COMMON_TOOLVERSION_H

#include "moss/Version.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

namespace moss::tools {

/// Makes --version print "<tool> (MOSS-JIT X.Y.Z)" and the LLVM and CUDA
/// versions of the build. Call before the command line is parsed.
inline void setVersionPrinter(const char *tool) {
  static const char *name = tool;
  llvm::cl::SetVersionPrinter([](llvm::raw_ostream &os) {
    os << name << " (MOSS-JIT " << MOSS_VERSION_STRING << ")\n"
       << "  built with LLVM/MLIR " << MOSS_BUILD_LLVM_VERSION
       << " (linked statically)\n"
       << "  built with the CUDA " << MOSS_BUILD_CUDA_VERSION
       << " toolkit's headers; the CUDA driver and NVRTC are loaded at run "
          "time\n";
  });
}

} // namespace moss::tools

#endif // MOSS_TOOLS_COMMON_TOOLVERSION_H
