//===- GpuQuantize.cpp - moss-jit's path to the GPU quantizers ------------===//

#include "GpuQuantize.h"


#include "ToolDevice.h"

#include "moss/Numerics/Fold.h"
#include "moss/Runtime/Device.h"
#include "moss/Runtime/Driver.h"
#include "moss/Runtime/Quantizer.h"

using namespace llvm;
using namespace moss::numerics;
using namespace moss::runtime;

namespace moss::jit {

namespace {
/// Device memory freed on scope exit.
struct Allocation {
  const DriverApi &api;
  CUdeviceptr ptr = 0;
  ~Allocation() {
    if (ptr)
      api.memFree(ptr);
  }
};
} // namespace

Expected<QuantizedTensor> quantizeOnGpu(ArrayRef<float> x,
                                        ArrayRef<uint16_t> bf16, int64_t rows,
                                        int64_t cols,
                                        const QuantizeOptions &options) {
  const bool isBf16 = !bf16.empty();
  QuantizeSpec spec{rows, cols, isBf16 ? InputType::BF16 : InputType::F32,
                    options};
  const void *input = isBf16 ? static_cast<const void *>(bf16.data())
                             : static_cast<const void *>(x.data());
  const size_t inputBytes = x.size() * (isBf16 ? 2 : 4);
  if (Error error = checkGpuQuantizeSpec(spec))
    return std::move(error);
  Expected<const Device &> device = moss::jit::openToolDevice();
  if (!device)
    return device.takeError();
  const DriverApi &api = *getDriverApi();

  QuantizeLayout layout = getQuantizeLayout(spec);
  size_t localBytes =
      size_t(layout.localRows * layout.localCols * layout.localElementBytes);
  Allocation dx{api}, dq{api}, dlocal{api}, dglobal{api}, dcounters{api};
  auto allocate = [&](Allocation &a, size_t bytes) -> Error {
    if (bytes == 0)
      return Error::success();
    return checkCuda(api.memAlloc(&a.ptr, bytes), "cuMemAlloc");
  };
  if (Error e = allocate(dx, inputBytes))
    return std::move(e);
  if (Error e = allocate(dq, x.size()))
    return std::move(e);
  if (Error e = allocate(dlocal, localBytes))
    return std::move(e);
  if (Error e = allocate(dglobal, size_t(layout.globalCount) * 4))
    return std::move(e);
  if (Error e = allocate(dcounters, 16))
    return std::move(e);
  if (Error e = checkCuda(api.memcpyHtoD(dx.ptr, input, inputBytes),
                          "cuMemcpyHtoD"))
    return std::move(e);
  if (Error e = checkCuda(api.memsetD8(dcounters.ptr, 0, 16), "cuMemsetD8"))
    return std::move(e);

  KernelCache cache;
  GpuQuantizer quantizer(cache, device->getSmCount());
  QuantizeBuffers buffers{dx.ptr, dq.ptr, dlocal.ptr, dglobal.ptr,
                          dcounters.ptr};
  if (Error e = quantizer.quantize(spec, buffers, nullptr))
    return std::move(e);

  QuantizedTensor q;
  // A quantization that folds writes the folded scheme's scales.
  q.scheme = getFoldedScheme(options.scheme, options.fold);
  q.format = options.format;
  q.transposed = options.transpose;
  q.rows = layout.codeRows;
  q.cols = layout.codeCols;
  q.localRows = layout.localRows;
  q.localCols = layout.localCols;
  q.codes.resize(x.size());
  if (q.scheme.localScalesAreE8M0())
    q.localE8M0.resize(localBytes);
  else if (q.scheme.hasLocalScales())
    q.localF32.resize(localBytes / 4);
  q.global.resize(size_t(layout.globalCount));
  uint64_t counters[2] = {0, 0};
  // The copies are synchronous: they wait for the kernels.
  auto download = [&](void *dst, CUdeviceptr src, size_t bytes) -> Error {
    if (bytes == 0)
      return Error::success();
    return checkCuda(api.memcpyDtoH(dst, src, bytes), "cuMemcpyDtoH");
  };
  if (Error e = download(q.codes.data(), dq.ptr, q.codes.size()))
    return std::move(e);
  void *local = q.localE8M0.empty() ? static_cast<void *>(q.localF32.data())
                                    : q.localE8M0.data();
  if (Error e = download(local, dlocal.ptr, localBytes))
    return std::move(e);
  if (Error e = download(q.global.data(), dglobal.ptr, q.global.size() * 4))
    return std::move(e);
  if (Error e = download(counters, dcounters.ptr, 16))
    return std::move(e);
  q.stats.saturated = int64_t(counters[0]);
  q.stats.nonFiniteBlocks = int64_t(counters[1]);
  return q;
}

} // namespace moss::jit
