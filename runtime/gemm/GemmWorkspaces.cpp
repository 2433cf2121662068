//===- GemmWorkspaces.cpp - Per-stream device workspaces ------------------===//

#include "GemmWorkspaces.h"

#include "moss/Runtime/Api/RuntimeError.h"

#include "llvm/ADT/Twine.h"
#include "llvm/Support/MathExtras.h"

using namespace llvm;
using namespace moss;

GemmRunner::Workspaces::~Workspaces() {
  Expected<const runtime::DriverApi &> api = runtime::getDriverApi();
  if (!api) {
    consumeError(api.takeError());
    return;
  }
  for (auto &entry : byStream)
    (void)api->memFree(entry.second.pointer);
}

Expected<CUdeviceptr>
GemmRunner::Workspaces::get(const runtime::DriverApi &api, CUstream stream,
                            size_t bytes, size_t counterBytes) {
  Workspace &w = byStream[stream];
  if (w.bytes < bytes) {
    if (w.pointer) {
      // Launches queued on the stream may still use the old one.
      if (Error e = runtime::checkCuda(api.streamSynchronize(stream),
                                       "cuStreamSynchronize"))
        return std::move(e);
      if (Error e = runtime::checkCuda(api.memFree(w.pointer), "cuMemFree"))
        return std::move(e);
      w = Workspace();
    }
    size_t size = alignTo(bytes, size_t(1) << 20);
    if (Error e = runtime::checkCuda(api.memAlloc(&w.pointer, size),
                                     "cuMemAlloc (" + Twine(size) +
                                         " bytes of GEMM workspace)"))
      return std::move(e);
    w.bytes = size;
  }
  if (counterBytes > w.zeroBytes)
    if (Error e = runtime::checkCuda(
            api.memsetD8Async(w.pointer + w.zeroBytes, 0,
                              counterBytes - w.zeroBytes, stream),
            "cuMemsetD8Async"))
      return std::move(e);
  // A launch with fewer counters dirties what lies past them.
  w.zeroBytes = counterBytes;
  return w.pointer;
}
