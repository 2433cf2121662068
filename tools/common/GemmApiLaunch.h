//===- GemmApiLaunch.h - Parameter sets through moss::GemmRunner -*- C++ -*-===//
//
// GemmGpuTest and moss-bench-gemm build their cases from the templates'
// moss::gemm_kernel::Params; this interface runs each case through the
// product's path (GemmRunner, the fold passes) from those parameters.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_TOOLS_COMMON_GEMMAPILAUNCH_H
#define MOSS_TOOLS_COMMON_GEMMAPILAUNCH_H

#include "moss/Compiler/GemmSpec.h"
#include "moss/Compiler/Tiling.h"

#include "llvm/Support/Error.h"

#include <cuda.h>
#include <optional>
#include <string>

namespace moss::gemmtest {

/// The device buffers of moss::GemmBuffers, flattened.
struct ApiBuffers {
  CUdeviceptr aCodes = 0, aLocal = 0, aGlobal = 0;
  int64_t aLocalCount = 0, aGlobalCount = 0;
  CUdeviceptr bCodes = 0, bLocal = 0, bGlobal = 0;
  int64_t bLocalCount = 0, bGlobalCount = 0;
  CUdeviceptr d = 0, bias = 0, c = 0, amax = 0;
};

/// Compiles (or loads) the kernel that runThroughApi launches for `spec` at
/// `m` rows through the test's GemmRunner: the full kernel, or with `quick`
/// its quick-compile variant (GemmCompileMode::Full, Quick); `description`
/// receives its name and tiling, `planned` the tiling. `foldAInKernel`:
/// GemmOptions::foldAInKernel.
llvm::Error prepareThroughApi(const compiler::GemmSpec &spec, int64_t m,
                              const std::optional<compiler::TileConfig> &tiling,
                              bool quick, std::string &description,
                              compiler::TileConfig &planned,
                              bool foldAInKernel = false);

/// GemmRunner::run with the test's runner (one per process, on the current
/// context, with the default kernel cache).
llvm::Error runThroughApi(const compiler::GemmSpec &spec, int64_t m,
                          const std::optional<compiler::TileConfig> &tiling,
                          bool quick, const ApiBuffers &buffers,
                          CUstream stream, bool foldAInKernel = false);

} // namespace moss::gemmtest

#endif // MOSS_TOOLS_COMMON_GEMMAPILAUNCH_H
