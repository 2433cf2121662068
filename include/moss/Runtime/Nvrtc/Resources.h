//===- Resources.h - Kernel resource usage from ptxas -----------*- C++ -*-===//
//
// Compiling with `--ptxas-options=-v` makes NVRTC's log carry ptxas's
// resource report. CI reads it to fail on local memory and spills.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_RUNTIME_NVRTC_RESOURCES_H
#define MOSS_RUNTIME_NVRTC_RESOURCES_H

#include "llvm/ADT/StringRef.h"

#include <string>
#include <vector>

namespace moss::runtime {

/// The NVRTC flag that asks ptxas for its resource report.
constexpr const char *kPtxasVerboseFlag = "--ptxas-options=-v";

/// One kernel's resources as ptxas reports them.
struct KernelResources {
  std::string name;
  int registers = 0;
  int stackFrameBytes = 0;
  int spillStoreBytes = 0;
  int spillLoadBytes = 0;
  /// Whether the kernel uses local memory (a stack frame or spills).
  bool usesLocalMemory() const {
    return stackFrameBytes != 0 || spillStoreBytes != 0 || spillLoadBytes != 0;
  }
};

/// Parses the ptxas report in an NVRTC log; one entry per kernel.
std::vector<KernelResources> parsePtxasResources(llvm::StringRef log);

} // namespace moss::runtime

#endif // MOSS_RUNTIME_NVRTC_RESOURCES_H
