//===- StreamWorkspaces.h - Device scratch memory per stream ----*- C++ -*-===//
//
// The device buffers a runner keeps for its kernels (reduce words, split-K
// partial sums, folded operands): one per stream, so that launches on two
// streams never share one, and one per CUDA graph capture, so that a
// captured graph's kernels keep theirs for as long as it may be replayed.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_RUNTIME_CUDA_STREAMWORKSPACES_H
#define MOSS_RUNTIME_CUDA_STREAMWORKSPACES_H

#include "moss/Runtime/Cuda/Driver.h"

#include "llvm/Support/Error.h"

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace moss::runtime {

class StreamWorkspaces {
public:
  struct Workspace {
    CUdeviceptr pointer = 0;
    size_t bytes = 0;
    /// Leading bytes the caller knows to be zero (0 for a new buffer).
    size_t zeroBytes = 0;
  };

  StreamWorkspaces() = default;
  StreamWorkspaces(const StreamWorkspaces &) = delete;
  StreamWorkspaces &operator=(const StreamWorkspaces &) = delete;
  /// Frees every buffer (a failing driver is ignored).
  ~StreamWorkspaces();

  /// The workspace of a launch on `stream`, at least `bytes` long.
  /// Outside a capture, growing one synchronizes the stream (work queued on
  /// it may still use the old buffer) and frees the old buffer. While
  /// `stream` is captured into a CUDA graph, the workspace is the capture's
  /// own, and neither it nor a buffer it outgrew is freed before this
  /// object is: the graph's kernels hold their addresses and may be
  /// replayed at any time. Buffers are allocated and freed with the
  /// thread's capture mode relaxed for the call (a capture in global mode
  /// refuses cuMemAlloc otherwise).
  llvm::Expected<Workspace &> get(const DriverApi &api, CUstream stream,
                                  size_t bytes);

private:
  std::unordered_map<CUstream, Workspace> byStream;
  /// Keyed by cuStreamGetCaptureInfo's capture ID, unique per process.
  std::unordered_map<uint64_t, Workspace> byCapture;
  /// Buffers captures outgrew.
  std::vector<CUdeviceptr> retired;
};

} // namespace moss::runtime

#endif // MOSS_RUNTIME_CUDA_STREAMWORKSPACES_H
