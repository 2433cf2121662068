//===- ToolDevice.cpp - The GPU of a moss-jit command ---------------------===//

#include "ToolDevice.h"

#include <optional>

using namespace llvm;

Expected<const moss::runtime::Device &> moss::jit::openToolDevice() {
  static std::optional<runtime::Device> device;
  if (!device) {
    Expected<runtime::Device> opened = runtime::Device::open(0);
    if (!opened)
      return opened.takeError();
    device.emplace(std::move(*opened));
  }
  if (Error e = device->makeCurrent())
    return std::move(e);
  return *device;
}
