//===- HopperSkip.h - Why a Hopper GPU test cannot run here -----*- C++ -*-===//
//
// The GPU suites run only on an sm_90a device and skip (GTEST_SKIP with
// this reason) everywhere else, CI included.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_TESTS_GPU_HOPPERSKIP_H
#define MOSS_TESTS_GPU_HOPPERSKIP_H

#include "moss/Runtime/Cuda/Device.h"

#include <string>

namespace moss::gemmtest {

/// Why device 0 cannot run a Hopper (sm_90a) test; empty when it can.
inline std::string getHopperSkipReason() {
  llvm::Expected<std::string> arch = runtime::queryDeviceArch(0);
  if (!arch)
    return "needs a CUDA device: " + llvm::toString(arch.takeError());
  if (*arch != "sm_90a")
    return "needs a Hopper GPU (sm_90a); device 0 is " + *arch;
  return "";
}

} // namespace moss::gemmtest

#endif // MOSS_TESTS_GPU_HOPPERSKIP_H
