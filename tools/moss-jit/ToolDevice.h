//===- ToolDevice.h - The GPU of a moss-jit command -------------*- C++ -*-===//

#ifndef MOSS_TOOLS_MOSSJIT_TOOLDEVICE_H
#define MOSS_TOOLS_MOSSJIT_TOOLDEVICE_H

#include "moss/Runtime/Cuda/Device.h"

#include "llvm/Support/Error.h"

namespace moss::jit {

/// GPU 0 with its primary context current on this thread, kept until the
/// process exits. Opened before the default kernel cache is first used, it
/// is destroyed after the cache (statics die in reverse order), so the
/// cache unloads its modules while their context still exists.
llvm::Expected<const runtime::Device &> openToolDevice();

} // namespace moss::jit

#endif // MOSS_TOOLS_MOSSJIT_TOOLDEVICE_H
