//===- DriverTest.cpp - The CUDA driver, devices and launches -------------===//
//
// Without a driver or a GPU, the runtime must say so cleanly; the tests that
// need a GPU skip with the reason. On a GPU machine they compile, load and
// launch a real kernel and check its output.
//
//===----------------------------------------------------------------------===//

#include "moss/Runtime/Cuda/Driver.h"
#include "moss/Runtime/Cache/KernelCache.h"
#include "moss/Runtime/Cuda/Device.h"
#include "moss/Runtime/Cuda/Module.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"

#include "llvm/Testing/Support/SupportHelpers.h"

#include "gtest/gtest.h"

#include <iostream>
#include <optional>
#include <vector>

using namespace moss::runtime;
using namespace llvm;

namespace {

bool isCleanNoGpuMessage(StringRef message) {
  return message.starts_with("no CUDA driver (libcuda.so.1) found: ") ||
         message.starts_with("no CUDA device") ||
         message.starts_with("cuInit failed: ") ||
         message.starts_with("the CUDA driver (version");
}

TEST(DriverTest, ArchForComputeCapability) {
  EXPECT_EQ(getArchForComputeCapability(9, 0), "sm_90a");
  EXPECT_EQ(getArchForComputeCapability(10, 0), "sm_100a");
  EXPECT_EQ(getArchForComputeCapability(10, 3), "sm_103a");
  EXPECT_EQ(getArchForComputeCapability(12, 0), "sm_120a");
  EXPECT_EQ(getArchForComputeCapability(8, 9), "sm_89");
  EXPECT_EQ(getArchForComputeCapability(8, 0), "sm_80");
}

TEST(DriverTest, WithoutAGpuEveryEntryPointFailsCleanly) {
  if (isDriverAvailable())
    GTEST_SKIP() << "a driver and a GPU are present";
  Expected<const DriverApi &> api = getDriverApi();
  ASSERT_FALSE(bool(api));
  std::string message = toString(api.takeError());
  EXPECT_TRUE(isCleanNoGpuMessage(message)) << message;
  // The first outcome is kept.
  Expected<const DriverApi &> again = getDriverApi();
  ASSERT_FALSE(bool(again));
  EXPECT_EQ(toString(again.takeError()), message);

  Expected<int> count = Device::getCount();
  ASSERT_FALSE(bool(count));
  EXPECT_EQ(toString(count.takeError()), message);
  Expected<Device> device = Device::open(0);
  ASSERT_FALSE(bool(device));
  EXPECT_EQ(toString(device.takeError()), message);
  Expected<std::string> arch = queryDeviceArch(0);
  ASSERT_FALSE(bool(arch));
  EXPECT_EQ(toString(arch.takeError()), message);
  Expected<Module> module = Module::load("not an image");
  ASSERT_FALSE(bool(module));
  EXPECT_EQ(toString(module.takeError()), message);
  KernelEntry entry(CacheKey{1, 2}, ".version 9.0", "");
  Expected<CUfunction> function = entry.getFunction("k");
  ASSERT_FALSE(bool(function));
  EXPECT_EQ(toString(function.takeError()), message);
  Error launch = launchKernel(nullptr, LaunchConfig(), nullptr);
  ASSERT_TRUE(bool(launch));
  EXPECT_EQ(toString(std::move(launch)), message);

  // With no GPU to ask, kernels target Hopper.
  EXPECT_EQ(getDefaultArch(), "sm_90a");
}

/// Tests that need a GPU: skipped, with the reason, without one.
class GpuTest : public testing::Test {
protected:
  void SetUp() override {
    Expected<Device> opened = Device::open(0);
    if (!opened) {
      std::string why = toString(opened.takeError());
      GTEST_SKIP() << "needs a CUDA device: " << why;
    }
    device.emplace(std::move(*opened));
    ASSERT_FALSE(bool(device->makeCurrent()));
    Expected<const DriverApi &> driver = getDriverApi();
    ASSERT_TRUE(bool(driver));
    api = &*driver;
  }

  std::optional<Device> device;
  const DriverApi *api = nullptr;
};

TEST_F(GpuTest, ReportsTheDevice) {
  EXPECT_FALSE(device->getName().empty());
  EXPECT_EQ(device->getArch(),
            getArchForComputeCapability(device->getComputeCapabilityMajor(),
                                        device->getComputeCapabilityMinor()));
  EXPECT_EQ(getDefaultArch(), device->getArch());
  EXPECT_GT(device->getSmCount(), 0);
  EXPECT_GE(device->getMaxSharedMemoryPerBlockOptin(), 48 * 1024);
  EXPECT_GE(api->driverVersion, 12000);
  CUcontext current = nullptr;
  ASSERT_EQ(api->ctxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, device->getContext());
  std::cout << "[ device ] " << device->getName().str() << ", "
            << device->getArch().str() << ", " << device->getSmCount()
            << " SMs, " << device->getMaxSharedMemoryPerBlockOptin()
            << " B shared opt-in, driver " << api->driverVersion << "\n";

  Expected<int> count = Device::getCount();
  ASSERT_TRUE(bool(count));
  Expected<Device> missing = Device::open(*count);
  ASSERT_FALSE(bool(missing));
  std::string message = toString(missing.takeError());
  EXPECT_NE(message.find("no CUDA device " + std::to_string(*count)),
            std::string::npos)
      << message;
}

/// out[i] = 2 * in[i] + (the block's rank in its cluster), staged through
/// 64 KiB of dynamic shared memory (more than the default 48 KiB limit).
constexpr const char *kClusterKernel = R"cuda(
extern "C" __global__ void scale_and_rank(float *out, const float *in, int n) {
  extern __shared__ float stage[];
  unsigned rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  stage[threadIdx.x] = i < n ? in[i] : 0.0f;
  stage[16383 - threadIdx.x] = 1.0f;
  __syncthreads();
  if (i < n)
    out[i] = 2.0f * stage[threadIdx.x] + static_cast<float>(rank);
}
)cuda";

TEST_F(GpuTest, CompilesLoadsAndLaunchesWithClusters) {
  if (!isNvrtcAvailable())
    GTEST_SKIP() << toString(getNvrtcVersion().takeError());
  llvm::unittest::TempDir dir("moss-driver-test", /*Unique=*/true);
  KernelCacheOptions cacheOptions;
  cacheOptions.directory = dir.path().str();
  KernelCache cache(cacheOptions);
  CompileOptions options; // The device's arch.
  Expected<std::shared_ptr<const KernelEntry>> entry =
      cache.getOrCompile(kClusterKernel, options);
  ASSERT_TRUE(bool(entry)) << toString(entry.takeError());
  Expected<CUfunction> function = (*entry)->getFunction("scale_and_rank");
  ASSERT_TRUE(bool(function)) << toString(function.takeError());
  Expected<CUfunction> again = (*entry)->getFunction("scale_and_rank");
  ASSERT_TRUE(bool(again));
  EXPECT_EQ(*function, *again);
  Expected<CUfunction> missing = (*entry)->getFunction("nope");
  ASSERT_FALSE(bool(missing));
  EXPECT_NE(toString(missing.takeError()).find("cuModuleGetFunction('nope')"),
            std::string::npos);

  constexpr int n = 1000;
  std::vector<float> in(n), out(n, -1.0f);
  for (int i = 0; i < n; ++i)
    in[i] = static_cast<float>(i) * 0.5f - 7.0f;
  CUdeviceptr dIn = 0, dOut = 0;
  ASSERT_EQ(api->memAlloc(&dIn, n * sizeof(float)), CUDA_SUCCESS);
  ASSERT_EQ(api->memAlloc(&dOut, n * sizeof(float)), CUDA_SUCCESS);
  ASSERT_EQ(api->memcpyHtoD(dIn, in.data(), n * sizeof(float)), CUDA_SUCCESS);
  // Poison the output: NaN bytes everywhere.
  ASSERT_EQ(api->memsetD8(dOut, 0xFF, n * sizeof(float)), CUDA_SUCCESS);

  CUstream stream = nullptr;
  ASSERT_EQ(api->streamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUevent start = nullptr, stop = nullptr;
  ASSERT_EQ(api->eventCreate(&start, CU_EVENT_DEFAULT), CUDA_SUCCESS);
  ASSERT_EQ(api->eventCreate(&stop, CU_EVENT_DEFAULT), CUDA_SUCCESS);

  LaunchConfig config;
  config.block[0] = 128;
  config.grid[0] = (n + 127) / 128; // 8 blocks, 4 clusters of 2
  config.cluster[0] = 2;
  config.sharedMemoryBytes = 64 * 1024;
  config.stream = stream;
  int count = n;
  void *args[] = {&dOut, &dIn, &count};
  ASSERT_EQ(api->eventRecord(start, stream), CUDA_SUCCESS);
  Error launched = launchKernel(*function, config, args);
  ASSERT_FALSE(bool(launched)) << toString(std::move(launched));
  ASSERT_EQ(api->eventRecord(stop, stream), CUDA_SUCCESS);
  ASSERT_EQ(api->streamSynchronize(stream), CUDA_SUCCESS);
  float ms = -1;
  ASSERT_EQ(api->eventElapsedTime(&ms, start, stop), CUDA_SUCCESS);
  EXPECT_GE(ms, 0.0f);
  ASSERT_EQ(api->memcpyDtoH(out.data(), dOut, n * sizeof(float)), CUDA_SUCCESS);
  for (int i = 0; i < n; ++i) {
    float expected = 2.0f * in[i] + static_cast<float>((i / 128) % 2);
    ASSERT_EQ(out[i], expected) << "element " << i;
  }

  // A tensor map for a 256x256 FP8 tensor, 64x64 boxes, 64 B swizzle.
  CUtensorMap map;
  cuuint64_t dims[2] = {256, 256};
  cuuint64_t strides[1] = {256};
  cuuint32_t box[2] = {64, 64};
  cuuint32_t elementStrides[2] = {1, 1};
  CUdeviceptr tensor = 0;
  ASSERT_EQ(api->memAlloc(&tensor, 256 * 256), CUDA_SUCCESS);
  EXPECT_EQ(api->tensorMapEncodeTiled(
                &map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2,
                reinterpret_cast<void *>(tensor), dims, strides, box,
                elementStrides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                CU_TENSOR_MAP_SWIZZLE_64B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
            CUDA_SUCCESS);

  EXPECT_EQ(api->eventDestroy(start), CUDA_SUCCESS);
  EXPECT_EQ(api->eventDestroy(stop), CUDA_SUCCESS);
  EXPECT_EQ(api->streamDestroy(stream), CUDA_SUCCESS);
  EXPECT_EQ(api->memFree(tensor), CUDA_SUCCESS);
  EXPECT_EQ(api->memFree(dIn), CUDA_SUCCESS);
  EXPECT_EQ(api->memFree(dOut), CUDA_SUCCESS);
}

TEST_F(GpuTest, LoadsPtxOnlyEntries) {
  if (!isNvrtcAvailable())
    GTEST_SKIP() << toString(getNvrtcVersion().takeError());
  KernelCacheOptions cacheOptions;
  cacheOptions.useDisk = false;
  KernelCache cache(cacheOptions);
  CompileOptions options;
  options.arch = "compute_" + device->getArch().substr(3).str();
  Expected<std::shared_ptr<const KernelEntry>> entry =
      cache.getOrCompile(kClusterKernel, options);
  ASSERT_TRUE(bool(entry)) << toString(entry.takeError());
  EXPECT_TRUE((*entry)->getCubin().empty());
  // The driver compiles the PTX when the module loads.
  Expected<CUfunction> function = (*entry)->getFunction("scale_and_rank");
  ASSERT_TRUE(bool(function)) << toString(function.takeError());
  int registers = 0;
  EXPECT_EQ(
      api->funcGetAttribute(&registers, CU_FUNC_ATTRIBUTE_NUM_REGS, *function),
      CUDA_SUCCESS);
  EXPECT_GT(registers, 0);
}

TEST_F(GpuTest, DriverErrorsNameTheCall) {
  CUdeviceptr pointer = 0;
  // More memory than any GPU has.
  Error err = checkCuda(api->memAlloc(&pointer, size_t(1) << 50), "cuMemAlloc");
  ASSERT_TRUE(bool(err));
  std::string message = toString(std::move(err));
  EXPECT_NE(message.find("cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY"),
            std::string::npos)
      << message;
}

} // namespace
