//===- QuantizerTestSupport.h - GPU set-up of the quantizer suites -*- C++
//-*-===//
//
// Shared by QuantizeGpuTest and WeightScalerGpuTest: the device with its
// context current, an in-memory kernel cache and a GpuQuantizer (opened
// once per process; the reason is kept when there is no GPU), the
// REQUIRE_GPU() skip, and a device buffer freed on scope exit.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_TESTS_QUANTIZERTESTSUPPORT_H
#define MOSS_TESTS_QUANTIZERTESTSUPPORT_H

#include "moss/Runtime/Api/Quantizer.h"
#include "moss/Runtime/Cache/KernelCache.h"
#include "moss/Runtime/Cuda/Device.h"
#include "moss/Runtime/Cuda/Driver.h"

#include "gtest/gtest.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace moss::quantizetest {

/// The device, context and quantizer shared by all tests.
struct GpuEnvironment {
  std::optional<runtime::Device> device;
  std::unique_ptr<runtime::KernelCache> cache;
  std::unique_ptr<runtime::GpuQuantizer> quantizer;
  std::string skipReason;
};

inline GpuEnvironment &gpu() {
  static GpuEnvironment env = [] {
    GpuEnvironment e;
    llvm::Expected<runtime::Device> device = runtime::Device::open(0);
    if (!device) {
      e.skipReason = "no GPU: " + llvm::toString(device.takeError());
      return e;
    }
    e.device.emplace(std::move(*device));
    if (llvm::Error error = e.device->makeCurrent()) {
      e.skipReason = llvm::toString(std::move(error));
      e.device.reset();
      return e;
    }
    runtime::KernelCacheOptions options;
    options.useDisk = false;
    e.cache = std::make_unique<runtime::KernelCache>(options);
    e.quantizer = std::make_unique<runtime::GpuQuantizer>(
        *e.cache, e.device->getSmCount());
    return e;
  }();
  return env;
}

#define REQUIRE_GPU()                                                          \
  do {                                                                         \
    if (!::moss::quantizetest::gpu().device)                                   \
      GTEST_SKIP() << ::moss::quantizetest::gpu().skipReason;                  \
  } while (0)

/// A device allocation, freed on scope exit.
class DeviceBuffer {
public:
  explicit DeviceBuffer(size_t bytes) : bytes(bytes) {
    if (bytes) {
      EXPECT_EQ(api().memAlloc(&ptr, bytes), CUDA_SUCCESS);
    }
  }
  DeviceBuffer(DeviceBuffer &&other) : ptr(other.ptr), bytes(other.bytes) {
    other.ptr = 0;
  }
  ~DeviceBuffer() {
    if (ptr)
      api().memFree(ptr);
  }
  CUdeviceptr get() const { return ptr; }
  void upload(const void *data) {
    ASSERT_EQ(api().memcpyHtoD(ptr, data, bytes), CUDA_SUCCESS);
  }
  void poison() { ASSERT_EQ(api().memsetD8(ptr, 0xA5, bytes), CUDA_SUCCESS); }
  template <typename T> std::vector<T> download() const {
    std::vector<T> out(bytes / sizeof(T));
    EXPECT_EQ(api().memcpyDtoH(out.data(), ptr, bytes), CUDA_SUCCESS);
    return out;
  }
  static const runtime::DriverApi &api() { return *runtime::getDriverApi(); }

private:
  CUdeviceptr ptr = 0;
  size_t bytes;
};

} // namespace moss::quantizetest

#endif // MOSS_TESTS_QUANTIZERTESTSUPPORT_H
