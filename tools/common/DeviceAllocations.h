//===- DeviceAllocations.h - Device buffers freed together -------*- C++
//-*-===//
//
// The device memory of a tool's GEMM problem: copies of host bytes,
// allocated through the driver and freed with the owner; and the poisoning
// of an output before a launch.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_TOOLS_COMMON_DEVICEALLOCATIONS_H
#define MOSS_TOOLS_COMMON_DEVICEALLOCATIONS_H

#include "moss/Gemm/Gemm.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <vector>

namespace moss::jit {

class DeviceAllocations {
public:
  DeviceAllocations() = default;
  DeviceAllocations(const DeviceAllocations &) = delete;
  DeviceAllocations &operator=(const DeviceAllocations &) = delete;
  ~DeviceAllocations();

  /// A device copy of `bytes` (at least 16 bytes are allocated, so that an
  /// empty operand still has an aligned address).
  llvm::Expected<CUdeviceptr> upload(llvm::ArrayRef<uint8_t> bytes);
  llvm::Expected<CUdeviceptr> upload(llvm::ArrayRef<int32_t> values);
  /// A GEMM's output of `outputBytes` into `buffers.d`, poisoned (0xFF
  /// bytes), and with `amax` a zeroed FP32 into `buffers.amax`.
  llvm::Error allocateOutput(GemmBuffers &buffers, size_t outputBytes,
                             bool amax);

private:
  std::vector<CUdeviceptr> pointers;
};

/// Fills `outputBytes` of `buffers.d` with 0xFF bytes (NaN in every output
/// type) and zeroes `buffers.amax` if there is one (synchronous).
llvm::Error poisonOutput(const GemmBuffers &buffers, size_t outputBytes);

} // namespace moss::jit

#endif // MOSS_TOOLS_COMMON_DEVICEALLOCATIONS_H
