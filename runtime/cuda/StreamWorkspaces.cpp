//===- StreamWorkspaces.cpp - Device scratch memory per stream ------------===//

#include "moss/Runtime/Cuda/StreamWorkspaces.h"

#include "llvm/ADT/Twine.h"

using namespace llvm;

namespace moss::runtime {

StreamWorkspaces::~StreamWorkspaces() {
  Expected<const DriverApi &> api = getDriverApi();
  if (!api) {
    consumeError(api.takeError());
    return;
  }
  for (auto &entry : byStream)
    if (entry.second.pointer)
      (void)api->memFree(entry.second.pointer);
  for (auto &entry : byCapture)
    if (entry.second.pointer)
      (void)api->memFree(entry.second.pointer);
  for (CUdeviceptr pointer : retired)
    (void)api->memFree(pointer);
}

/// Runs `body` with the calling thread's stream-capture mode relaxed: while
/// a capture in global mode runs, on this thread or another, the driver
/// refuses cuMemAlloc and cuMemFree otherwise.
template <typename Body>
static Error withRelaxedCaptureMode(const DriverApi &api, Body body) {
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  if (Error error = checkCuda(api.threadExchangeStreamCaptureMode(&mode),
                              "cuThreadExchangeStreamCaptureMode"))
    return error;
  Error result = body();
  return joinErrors(std::move(result),
                    checkCuda(api.threadExchangeStreamCaptureMode(&mode),
                              "cuThreadExchangeStreamCaptureMode"));
}

static Error allocate(const DriverApi &api, StreamWorkspaces::Workspace &w,
                      size_t bytes) {
  CUdeviceptr pointer = 0;
  if (Error error =
          checkCuda(api.memAlloc(&pointer, bytes),
                    "cuMemAlloc (" + Twine(bytes) + " bytes of workspace)"))
    return error;
  w = StreamWorkspaces::Workspace{pointer, bytes, 0};
  return Error::success();
}

Expected<StreamWorkspaces::Workspace &>
StreamWorkspaces::get(const DriverApi &api, CUstream stream, size_t bytes) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t captureId = 0;
  if (Error error = checkCuda(
          api.streamGetCaptureInfo(stream, &status, &captureId, nullptr,
                                   nullptr, nullptr, nullptr),
          "cuStreamGetCaptureInfo"))
    return std::move(error);
  if (status == CU_STREAM_CAPTURE_STATUS_INVALIDATED)
    return makeCudaError(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
                         "a workspace for a launch on a capturing stream");
  const bool capturing = status == CU_STREAM_CAPTURE_STATUS_ACTIVE;
  Workspace &w = capturing ? byCapture[captureId] : byStream[stream];
  if (w.bytes >= bytes)
    return w;
  Error failed = withRelaxedCaptureMode(api, [&]() -> Error {
    if (w.pointer && capturing) {
      // Kernels captured earlier hold the old buffer: it stays allocated.
      retired.push_back(w.pointer);
    } else if (w.pointer) {
      // Launches queued on the stream may still use the old one.
      if (Error error = checkCuda(api.streamSynchronize(stream),
                                  "cuStreamSynchronize (workspace)"))
        return error;
      if (Error error = checkCuda(api.memFree(w.pointer), "cuMemFree"))
        return error;
    }
    w = Workspace();
    return allocate(api, w, bytes);
  });
  if (failed)
    return std::move(failed);
  return w;
}

} // namespace moss::runtime
