//===- Module.cpp - Loaded kernel images and launches ---------------------===//

#include "moss/Runtime/Cuda/Module.h"

#include "moss/Runtime/Cuda/Driver.h"

#include "llvm/ADT/Twine.h"

#include <algorithm>
#include <string>

using namespace llvm;

namespace moss::runtime {

Expected<Module> Module::load(StringRef image) {
  Expected<const DriverApi &> api = getDriverApi();
  if (!api)
    return api.takeError();
  CUcontext current = nullptr;
  if (Error err = checkCuda(api->ctxGetCurrent(&current), "cuCtxGetCurrent"))
    return std::move(err);
  if (!current)
    return createStringError(inconvertibleErrorCode(),
                             "cannot load a kernel image: no CUDA context is "
                             "current on this thread (call "
                             "Device::makeCurrent() first)");
  // PTX must be NUL-terminated and a cubin's ELF header says how long it
  // is; a NUL-terminated copy serves both.
  std::string copy = image.str();
  CUmodule module = nullptr;
  if (Error err = checkCuda(api->moduleLoadData(&module, copy.c_str()),
                            "cuModuleLoadData"))
    return std::move(err);
  return Module(module);
}

Module &Module::operator=(Module &&other) {
  if (this != &other) {
    unload();
    module = other.module;
    other.module = nullptr;
  }
  return *this;
}

Module::~Module() { unload(); }

void Module::unload() {
  if (!module)
    return;
  if (Expected<const DriverApi &> api = getDriverApi())
    (void)api->moduleUnload(module);
  else
    consumeError(api.takeError());
  module = nullptr;
}

Expected<CUfunction> Module::getFunction(StringRef name) const {
  Expected<const DriverApi &> api = getDriverApi();
  if (!api)
    return api.takeError();
  CUfunction function = nullptr;
  std::string nameCopy = name.str();
  if (Error err =
          checkCuda(api->moduleGetFunction(&function, module, nameCopy.c_str()),
                    "cuModuleGetFunction('" + name + "')"))
    return std::move(err);
  return function;
}

Error setSharedMemoryLimit(CUfunction function, unsigned bytes) {
  Expected<const DriverApi &> api = getDriverApi();
  if (!api)
    return api.takeError();
  return checkCuda(
      api->funcSetAttribute(function,
                            CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                            static_cast<int>(bytes)),
      "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES=" + Twine(bytes) + ")");
}

/// The driver's launch configuration for `config` (cluster attribute in
/// `attribute`, which must outlive the result).
static CUlaunchConfig makeLaunchConfig(const LaunchConfig &config,
                                       CUlaunchAttribute &attribute) {
  CUlaunchConfig launch = {};
  launch.gridDimX = config.grid[0];
  launch.gridDimY = config.grid[1];
  launch.gridDimZ = config.grid[2];
  launch.blockDimX = config.block[0];
  launch.blockDimY = config.block[1];
  launch.blockDimZ = config.block[2];
  launch.sharedMemBytes = config.sharedMemoryBytes;
  launch.hStream = config.stream;
  attribute = {};
  if (config.cluster[0] * config.cluster[1] * config.cluster[2] != 1) {
    attribute.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attribute.value.clusterDim.x = config.cluster[0];
    attribute.value.clusterDim.y = config.cluster[1];
    attribute.value.clusterDim.z = config.cluster[2];
    launch.attrs = &attribute;
    launch.numAttrs = 1;
  }
  return launch;
}

Expected<int> getPersistentSlots(CUfunction function,
                                 const LaunchConfig &config, int smCount) {
  const unsigned clusterSize =
      config.cluster[0] * config.cluster[1] * config.cluster[2];
  if (clusterSize == 1)
    return smCount;
  Expected<const DriverApi &> api = getDriverApi();
  if (!api)
    return api.takeError();
  if (config.sharedMemoryBytes > 48 * 1024)
    if (Error err = setSharedMemoryLimit(function, config.sharedMemoryBytes))
      return std::move(err);
  // The query wants a grid of whole clusters; its size does not matter.
  LaunchConfig one = config;
  for (int i = 0; i < 3; ++i)
    one.grid[i] = config.cluster[i];
  CUlaunchAttribute attribute;
  CUlaunchConfig launch = makeLaunchConfig(one, attribute);
  int clusters = 0;
  if (Error err = checkCuda(
          api->occupancyMaxActiveClusters(&clusters, function, &launch),
          "cuOccupancyMaxActiveClusters"))
    return std::move(err);
  if (clusters < 1)
    return createStringError(inconvertibleErrorCode(),
                             "no cluster of " + Twine(clusterSize) +
                                 " blocks with " +
                                 Twine(config.sharedMemoryBytes) +
                                 " bytes of shared memory fits on the device");
  return std::min(smCount, clusters * int(clusterSize));
}

Error launchKernel(CUfunction function, const LaunchConfig &config,
                   void **args) {
  Expected<const DriverApi &> api = getDriverApi();
  if (!api)
    return api.takeError();
  // Blocks get 48 KiB of dynamic shared memory unless the kernel opts in.
  constexpr unsigned kDefaultSharedLimit = 48 * 1024;
  if (config.sharedMemoryBytes > kDefaultSharedLimit &&
      !config.sharedMemoryLimitSet)
    if (Error err = setSharedMemoryLimit(function, config.sharedMemoryBytes))
      return err;

  // Without clusters the plain launch is the cheaper call.
  if (config.cluster[0] * config.cluster[1] * config.cluster[2] == 1)
    return checkCuda(api->launchKernel(function, config.grid[0], config.grid[1],
                                       config.grid[2], config.block[0],
                                       config.block[1], config.block[2],
                                       config.sharedMemoryBytes, config.stream,
                                       args, nullptr),
                     "cuLaunchKernel");

  CUlaunchAttribute attribute;
  CUlaunchConfig launch = makeLaunchConfig(config, attribute);
  return checkCuda(api->launchKernelEx(&launch, function, args, nullptr),
                   "cuLaunchKernelEx");
}

} // namespace moss::runtime
