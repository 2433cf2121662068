//===- CacheKey.cpp - Kernel cache keys and the NVRTC compiler hook -------===//

#include "CacheFile.h"

#include "moss/Runtime/Cache/KernelCache.h"

#include <cuda.h>

using namespace llvm;

namespace moss::runtime {

CacheKey computeCacheKey(const CacheKeyInputs &inputs) {
  ContentHasher hasher;
  // Every field is length-prefixed and tagged by position; the format
  // version keeps incompatible releases in different files.
  hasher.updateField("moss-kernel-cache");
  hasher.updateU64(kCacheFormatVersion);
  hasher.updateField(inputs.source);
  hasher.updateU64(inputs.templateHash);
  hasher.updateField(inputs.compilerVersion);
  hasher.updateField(inputs.arch);
  hasher.updateU64(inputs.flags.size());
  for (const std::string &flag : inputs.flags)
    hasher.updateField(flag);
  hasher.updateU64(inputs.headers.size());
  for (const HeaderFile &header : inputs.headers) {
    hasher.updateField(header.name);
    hasher.updateField(header.contents);
  }
  hasher.updateField(inputs.programName);
  return hasher.digest();
}

KernelCompiler getNvrtcCompiler() {
  KernelCompiler compiler;
  if (Expected<NvrtcVersion> version = getNvrtcVersion()) {
    compiler.version = "nvrtc-" + version->toString();
  } else {
    consumeError(version.takeError());
    // No NVRTC here: name the one we were built with, which is the one a
    // prebuilt cache for this library was most likely filled by.
    compiler.version = "nvrtc-" + std::to_string(CUDA_VERSION / 1000) + "." +
                       std::to_string(CUDA_VERSION % 1000 / 10);
  }
  compiler.compile = compileCuda;
  return compiler;
}

} // namespace moss::runtime
