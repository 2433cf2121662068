//===- Device.h - A GPU and its primary context ----------------*- C++ -*-===//
//
// Opening a Device retains the GPU's primary context (the one the CUDA
// runtime and frameworks such as PyTorch share), so kernels we load can run
// on their streams and read their allocations.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_RUNTIME_CUDA_DEVICE_H
#define MOSS_RUNTIME_CUDA_DEVICE_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cuda.h>
#include <string>

namespace moss::runtime {

/// The NVRTC target for a compute capability. From 9.0 on it is the
/// arch-specific target ("sm_90a" for 9.0, "sm_100a" for 10.0), which
/// wgmma, setmaxnreg and tcgen05 need; older GPUs get "sm_80", "sm_86", ...
std::string getArchForComputeCapability(int major, int minor);

/// What the runtime needs to know about a GPU, read from the driver once.
struct DeviceProperties {
  /// The marketing name, e.g. "NVIDIA H200".
  std::string name;
  /// The NVRTC target, e.g. "sm_90a".
  std::string arch;
  int ccMajor = 0;
  int ccMinor = 0;
  int smCount = 0;
  /// CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, in bytes.
  int maxSharedOptin = 0;
};

/// The properties of `device`.
llvm::Expected<DeviceProperties> queryDeviceProperties(CUdevice device);

/// The properties of the device of the calling thread's current context.
llvm::Expected<DeviceProperties> queryCurrentDeviceProperties();

/// The NVRTC target of device `ordinal`, without retaining its context.
llvm::Expected<std::string> queryDeviceArch(int ordinal = 0);

/// A GPU with its primary context retained. Move-only; the destructor
/// releases the context.
class Device {
public:
  /// The number of GPUs the driver sees (an error when there is no driver).
  static llvm::Expected<int> getCount();

  /// Opens GPU `ordinal`, retains its primary context and queries its
  /// properties. Does not make the context current (see makeCurrent()).
  static llvm::Expected<Device> open(int ordinal = 0);

  Device(Device &&other);
  Device &operator=(Device &&other);
  Device(const Device &) = delete;
  Device &operator=(const Device &) = delete;
  ~Device();

  /// Makes the primary context current on the calling thread.
  llvm::Error makeCurrent() const;

  /// The driver's device handle.
  CUdevice getHandle() const { return device; }
  /// The retained primary context.
  CUcontext getContext() const { return context; }
  const DeviceProperties &getProperties() const { return properties; }
  /// The marketing name, e.g. "NVIDIA H200".
  llvm::StringRef getName() const { return properties.name; }
  /// The compute capability, e.g. 9 and 0.
  int getComputeCapabilityMajor() const { return properties.ccMajor; }
  int getComputeCapabilityMinor() const { return properties.ccMinor; }
  /// The NVRTC target, e.g. "sm_90a".
  llvm::StringRef getArch() const { return properties.arch; }
  /// The number of streaming multiprocessors.
  int getSmCount() const { return properties.smCount; }
  /// The largest dynamic shared memory a block may opt in to, in bytes.
  int getMaxSharedMemoryPerBlockOptin() const {
    return properties.maxSharedOptin;
  }

private:
  Device() = default;
  void release();

  int ordinal = -1;
  CUdevice device = 0;
  CUcontext context = nullptr;
  DeviceProperties properties;
};

} // namespace moss::runtime

#endif // MOSS_RUNTIME_CUDA_DEVICE_H
