//===- GemmChecks.h - A GEMM's arguments, checked without the GPU -*- C++ -*-===//
//
// The runtime's checks beyond the public checkGemmSpec and checkGemmLaunch
// (moss/Gemm/Gemm.h), for the runner's paths that have no buffers.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_RUNTIME_GEMM_GEMMCHECKS_H
#define MOSS_RUNTIME_GEMM_GEMMCHECKS_H

#include "moss/Gemm/Gemm.h"

namespace moss::detail {

/// checkGemmSpec for a launch of `m` rows (which decide the default fold and
/// so the blocks the kernel promotes by), and that `m` rows can be launched
/// with the spec.
llvm::Error checkGemmRows(const compiler::GemmSpec &spec, int64_t m);

} // namespace moss::detail

#endif // MOSS_RUNTIME_GEMM_GEMMCHECKS_H
