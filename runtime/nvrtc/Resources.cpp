//===- Resources.cpp - Kernel resource usage from ptxas -------------------===//

#include "moss/Runtime/Nvrtc/Resources.h"

#include "llvm/ADT/SmallVector.h"

using namespace llvm;

namespace moss::runtime {

/// The integer before `label` in `line` ("0 bytes spill stores" -> 0).
static int numberBefore(StringRef line, StringRef label) {
  size_t at = line.find(label);
  if (at == StringRef::npos)
    return 0;
  StringRef before = line.substr(0, at).rtrim();
  size_t start = before.find_last_not_of("0123456789");
  int value = 0;
  before.substr(start == StringRef::npos ? 0 : start + 1).getAsInteger(10, value);
  return value;
}

std::vector<KernelResources> parsePtxasResources(StringRef log) {
  std::vector<KernelResources> kernels;
  SmallVector<StringRef> lines;
  log.split(lines, '\n');
  for (StringRef line : lines) {
    constexpr StringRef kProperties = "Function properties for ";
    size_t at = line.find(kProperties);
    if (at != StringRef::npos) {
      kernels.push_back({line.substr(at + kProperties.size()).trim().str()});
      continue;
    }
    if (kernels.empty())
      continue;
    KernelResources &k = kernels.back();
    if (line.contains("bytes stack frame")) {
      k.stackFrameBytes = numberBefore(line, "bytes stack frame");
      k.spillStoreBytes = numberBefore(line, "bytes spill stores");
      k.spillLoadBytes = numberBefore(line, "bytes spill loads");
    } else if (line.contains("Used ") && line.contains(" registers")) {
      k.registers = numberBefore(line, " registers");
    }
  }
  return kernels;
}

} // namespace moss::runtime
