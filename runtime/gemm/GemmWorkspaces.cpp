//===- GemmWorkspaces.cpp - Per-stream device workspaces ------------------===//

#include "GemmWorkspaces.h"

#include "llvm/Support/MathExtras.h"

using namespace llvm;
using namespace moss;

Expected<CUdeviceptr>
GemmRunner::Workspaces::get(const runtime::DriverApi &api, CUstream stream,
                            size_t bytes, size_t counterBytes) {
  Expected<runtime::StreamWorkspaces::Workspace &> w =
      buffers.get(api, stream, alignTo(bytes, size_t(1) << 20));
  if (!w)
    return w.takeError();
  if (counterBytes > w->zeroBytes)
    if (Error e = runtime::checkCuda(
            api.memsetD8Async(w->pointer + w->zeroBytes, 0,
                              counterBytes - w->zeroBytes, stream),
            "cuMemsetD8Async"))
      return std::move(e);
  // A launch with fewer counters dirties what lies past them.
  w->zeroBytes = counterBytes;
  return w->pointer;
}
