//===- Module.h - Loaded kernel images and launches ------------*- C++ -*-===//

#ifndef MOSS_RUNTIME_CUDA_MODULE_H
#define MOSS_RUNTIME_CUDA_MODULE_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cuda.h>

namespace moss::runtime {

/// A cubin or PTX image loaded into the current context (cuModuleLoadData).
/// Move-only; the destructor unloads it.
class Module {
public:
  /// Loads `image` (a cubin ELF, or PTX text) into the calling thread's
  /// current context; fails when there is none.
  static llvm::Expected<Module> load(llvm::StringRef image);

  Module(Module &&other) : module(other.module) { other.module = nullptr; }
  Module &operator=(Module &&other);
  Module(const Module &) = delete;
  Module &operator=(const Module &) = delete;
  ~Module();

  /// The kernel named `name` (its extern "C" or mangled name).
  llvm::Expected<CUfunction> getFunction(llvm::StringRef name) const;

  /// The driver's module handle.
  CUmodule getHandle() const { return module; }

private:
  explicit Module(CUmodule module) : module(module) {}
  void unload();

  CUmodule module = nullptr;
};

/// Launch geometry for launchKernel().
struct LaunchConfig {
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  /// Thread block cluster shape (sm_90+); {1, 1, 1} launches no clusters.
  unsigned cluster[3] = {1, 1, 1};
  /// Dynamic shared memory in bytes. Above 48 KiB the function's opt-in
  /// limit is raised to it first.
  unsigned sharedMemoryBytes = 0;
  /// Whether the caller already raised the function's limit to
  /// `sharedMemoryBytes` (setSharedMemoryLimit), saving a driver call.
  bool sharedMemoryLimitSet = false;
  CUstream stream = nullptr;
};

/// Lets `function` take `bytes` of dynamic shared memory (above 48 KiB a
/// kernel must opt in).
llvm::Error setSharedMemoryLimit(CUfunction function, unsigned bytes);

/// Blocks of `config`'s shape and shared memory that run at once on a
/// device of `smCount` SMs: the bound of a persistent grid. Without
/// clusters that is `smCount`; with them, the clusters that fit at once
/// (cuOccupancyMaxActiveClusters: a cluster must fit in one GPC, so this can
/// be below SMs / cluster size) times their size, and an error when none
/// fits. `config.grid` is ignored. Sets the shared memory limit first.
llvm::Expected<int> getPersistentSlots(CUfunction function,
                                       const LaunchConfig &config, int smCount);

/// Launches `function` with `args` (one pointer per kernel parameter), with
/// cuLaunchKernelEx when a cluster shape is given.
llvm::Error launchKernel(CUfunction function, const LaunchConfig &config,
                         void **args);

} // namespace moss::runtime

#endif // MOSS_RUNTIME_CUDA_MODULE_H
