//===- GpuQuantize.cpp - moss-jit's path to the GPU quantizers ------------===//

#include "GpuQuantize.h"

#include "ToolDevice.h"

#include "moss/Numerics/Fold.h"
#include "moss/Runtime/Api/Quantizer.h"
#include "moss/Runtime/Cuda/Device.h"
#include "moss/Runtime/Cuda/Driver.h"

using namespace llvm;
using namespace moss::numerics;
using namespace moss::runtime;
using namespace moss::compiler;

namespace moss::jit {

namespace {
/// Device memory freed on scope exit.
struct Allocation {
  const DriverApi &api;
  CUdeviceptr ptr = 0;
  Allocation(const DriverApi &api) : api(api) {}
  Allocation(const Allocation &) = delete;
  ~Allocation() {
    if (ptr)
      api.memFree(ptr);
  }
  Error allocate(size_t bytes) {
    if (bytes == 0)
      return Error::success();
    return checkCuda(api.memAlloc(&ptr, bytes), "cuMemAlloc");
  }
  /// Synchronous: waits for the kernels.
  Error download(void *dst, size_t bytes) const {
    if (bytes == 0)
      return Error::success();
    return checkCuda(api.memcpyDtoH(dst, ptr, bytes), "cuMemcpyDtoH");
  }
};

/// The device outputs of one quantization.
struct Outputs {
  QuantizeSpec spec;
  QuantizeLayout layout;
  Allocation q, local, global, counters;
  Outputs(const DriverApi &api, const QuantizeSpec &spec)
      : spec(spec), layout(getQuantizeLayout(spec)), q(api), local(api),
        global(api), counters(api) {}

  size_t localBytes() const {
    return size_t(layout.localRows * layout.localCols *
                  layout.localElementBytes);
  }
  Error allocate() {
    if (Error e = q.allocate(size_t(layout.codeRows * layout.codeCols)))
      return e;
    if (Error e = local.allocate(localBytes()))
      return e;
    if (Error e = global.allocate(size_t(layout.globalCount) * 4))
      return e;
    if (Error e = counters.allocate(16))
      return e;
    return checkCuda(q.api.memsetD8(counters.ptr, 0, 16), "cuMemsetD8");
  }
  QuantizeBuffers buffers(CUdeviceptr x) const {
    return {x, q.ptr, local.ptr, global.ptr, counters.ptr};
  }
  Expected<QuantizedTensor> download() const {
    const QuantizeOptions &options = spec.options;
    QuantizedTensor t;
    // A quantization that folds writes the folded scheme's scales.
    t.scheme = getFoldedScheme(options.scheme, options.fold);
    t.format = options.format;
    t.transposed = options.transpose;
    t.rows = layout.codeRows;
    t.cols = layout.codeCols;
    t.localRows = layout.localRows;
    t.localCols = layout.localCols;
    t.codes.resize(size_t(t.rows * t.cols));
    if (t.scheme.localScalesAreE8M0())
      t.localE8M0.resize(localBytes());
    else if (t.scheme.hasLocalScales())
      t.localF32.resize(localBytes() / 4);
    t.global.resize(size_t(layout.globalCount));
    uint64_t count[2] = {0, 0};
    if (Error e = q.download(t.codes.data(), t.codes.size()))
      return std::move(e);
    void *localData = t.localE8M0.empty()
                          ? static_cast<void *>(t.localF32.data())
                          : t.localE8M0.data();
    if (Error e = local.download(localData, localBytes()))
      return std::move(e);
    if (Error e = global.download(t.global.data(), t.global.size() * 4))
      return std::move(e);
    if (Error e = counters.download(count, 16))
      return std::move(e);
    t.stats.saturated = int64_t(count[0]);
    t.stats.nonFiniteBlocks = int64_t(count[1]);
    return t;
  }
};
} // namespace

Expected<std::vector<QuantizedTensor>>
quantizeOnGpu(ArrayRef<float> x, ArrayRef<uint16_t> bf16, int64_t rows,
              int64_t cols, const QuantizeOptions &options, bool bothLayouts) {
  const bool isBf16 = !bf16.empty();
  QuantizeSpec spec{rows, cols, isBf16 ? InputType::BF16 : InputType::F32,
                    options, bothLayouts};
  const void *input = isBf16 ? static_cast<const void *>(bf16.data())
                             : static_cast<const void *>(x.data());
  const size_t inputBytes = x.size() * (isBf16 ? 2 : 4);
  // The caller checked the host reference's rules, so a refusal here is a
  // limit of the GPU kernels alone.
  if (Error error = checkGpuQuantizeSpec(spec))
    return createStringError(inconvertibleErrorCode(),
                             toString(std::move(error)) +
                                 "; --device cpu (the host reference) "
                                 "takes this shape");
  Expected<const Device &> device = moss::jit::openToolDevice();
  if (!device)
    return device.takeError();
  const DriverApi &api = *getDriverApi();

  Allocation dx(api);
  if (Error e = dx.allocate(inputBytes))
    return std::move(e);
  if (Error e = checkCuda(api.memcpyHtoD(dx.ptr, input, inputBytes),
                          "cuMemcpyHtoD"))
    return std::move(e);
  Outputs first(api, spec);
  if (Error e = first.allocate())
    return std::move(e);

  KernelCache cache;
  GpuQuantizer quantizer(cache, device->getSmCount());
  std::vector<QuantizedTensor> results;
  if (bothLayouts) {
    Outputs second(api, getTransposedSpec(spec));
    if (Error e = second.allocate())
      return std::move(e);
    if (Error e = quantizer.quantizeBothLayouts(
            spec, first.buffers(dx.ptr), second.buffers(dx.ptr), nullptr))
      return std::move(e);
    for (const Outputs *o : {&first, &second}) {
      Expected<QuantizedTensor> t = o->download();
      if (!t)
        return t.takeError();
      results.push_back(std::move(*t));
    }
    return results;
  }
  if (Error e = quantizer.quantize(spec, first.buffers(dx.ptr), nullptr))
    return std::move(e);
  Expected<QuantizedTensor> t = first.download();
  if (!t)
    return t.takeError();
  results.push_back(std::move(*t));
  return results;
}

} // namespace moss::jit
