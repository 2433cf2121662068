//===- KernelEntry.cpp - A compiled kernel image --------------------------===//

#include "moss/Runtime/Cache/KernelCache.h"
#include "moss/Runtime/Cuda/Driver.h"

using namespace llvm;

namespace moss::runtime {

KernelEntry::KernelEntry(CacheKey key, std::string ptx, std::string cubin)
    : key(key), ptx(std::move(ptx)), cubin(std::move(cubin)) {}

KernelEntry::~KernelEntry() = default;

Expected<CUfunction> KernelEntry::getFunction(StringRef name) const {
  Expected<CurrentContext> context = getCurrentContext();
  if (!context)
    return context.takeError();

  // Modules belong to a context: one per context this entry is used in.
  std::lock_guard<std::mutex> lock(moduleMutex);
  for (const auto &[owner, module] : modules)
    if (owner == context->id)
      return module.getFunction(name);
  Expected<Module> module = Module::load(cubin.empty() ? ptx : cubin);
  if (!module)
    return module.takeError();
  modules.emplace_back(context->id, std::move(*module));
  return modules.back().second.getFunction(name);
}

} // namespace moss::runtime
