//===- DeviceAllocations.cpp - Device buffers freed together --------------===//

#include "DeviceAllocations.h"

#include "moss/Runtime/Cuda/Driver.h"

#include <algorithm>

using namespace llvm;
using namespace moss;
using namespace moss::jit;
using runtime::checkCuda;

Expected<CUdeviceptr> DeviceAllocations::upload(ArrayRef<uint8_t> bytes) {
  const runtime::DriverApi &api = *runtime::getDriverApi();
  CUdeviceptr pointer = 0;
  if (Error e =
          checkCuda(api.memAlloc(&pointer, std::max<size_t>(bytes.size(), 16)),
                    "cuMemAlloc (" + Twine(bytes.size()) + " bytes)"))
    return std::move(e);
  pointers.push_back(pointer);
  if (!bytes.empty())
    if (Error e = checkCuda(api.memcpyHtoD(pointer, bytes.data(), bytes.size()),
                            "cuMemcpyHtoD"))
      return std::move(e);
  return pointer;
}

Expected<CUdeviceptr> DeviceAllocations::upload(ArrayRef<int32_t> values) {
  return upload(ArrayRef<uint8_t>(
      reinterpret_cast<const uint8_t *>(values.data()), values.size() * 4));
}

Error DeviceAllocations::allocateOutput(GemmBuffers &buffers,
                                        size_t outputBytes, bool amax) {
  Expected<CUdeviceptr> d = upload(std::vector<uint8_t>(outputBytes, 0xFF));
  if (!d)
    return d.takeError();
  buffers.d = *d;
  if (amax) {
    Expected<CUdeviceptr> max = upload(std::vector<uint8_t>(4, 0));
    if (!max)
      return max.takeError();
    buffers.amax = *max;
  }
  return Error::success();
}

DeviceAllocations::~DeviceAllocations() {
  if (Expected<const runtime::DriverApi &> api = runtime::getDriverApi()) {
    for (CUdeviceptr pointer : pointers)
      api->memFree(pointer);
  } else {
    consumeError(api.takeError());
  }
}

Error jit::poisonOutput(const GemmBuffers &buffers, size_t outputBytes) {
  const runtime::DriverApi &api = *runtime::getDriverApi();
  if (Error e =
          checkCuda(api.memsetD8(buffers.d, 0xFF, outputBytes), "cuMemsetD8"))
    return e;
  if (buffers.amax)
    return checkCuda(api.memsetD8(buffers.amax, 0, 4), "cuMemsetD8");
  return Error::success();
}
