//===- GemmWorkspaces.h - Per-stream device workspaces ----------*- C++ -*-===//
//
// The device memory a GemmRunner keeps per stream (and per CUDA graph
// capture): the workspaces of kernels with sliced accumulators (split-K,
// 64-row tiles; docs/GEMM-KERNEL-ABI.md) and the outputs of the fold passes.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_RUNTIME_GEMM_GEMMWORKSPACES_H
#define MOSS_RUNTIME_GEMM_GEMMWORKSPACES_H

#include "moss/Gemm/Gemm.h"
#include "moss/Runtime/Cuda/StreamWorkspaces.h"

#include "llvm/Support/Error.h"

#include <cstddef>

namespace moss {

/// A sliced-accumulator workspace starts with the kernel's tile counters,
/// which each launch leaves zero; the partial sums after them dirty the
/// rest. The layout depends on the launch (its tile count), so the runner
/// tracks how many leading bytes are zero and clears more, on the stream,
/// only when a launch needs more counters.
struct GemmRunner::Workspaces {
  runtime::StreamWorkspaces buffers;

  /// A workspace of at least `bytes` for a launch on `stream` whose first
  /// `counterBytes` must be zero (runtime::StreamWorkspaces::get).
  llvm::Expected<CUdeviceptr> get(const runtime::DriverApi &api,
                                  CUstream stream, size_t bytes,
                                  size_t counterBytes);
};

} // namespace moss

#endif // MOSS_RUNTIME_GEMM_GEMMWORKSPACES_H
