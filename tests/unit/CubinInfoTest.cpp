//===- CubinInfoTest.cpp - Register counts read from a cubin -------------===//
//
// Compiles kernels of different register pressure with NVRTC and checks the
// count read from the cubin against ptxas's own report in the NVRTC log.
// Needs the NVRTC library (CUDA toolkit), not a GPU; skipped, with the
// reason, where NVRTC cannot be loaded.
//
//===----------------------------------------------------------------------===//

#include "CubinInfo.h"

#include "moss/Runtime/Nvrtc/Nvrtc.h"
#include "moss/Runtime/Nvrtc/Resources.h"

#include "gtest/gtest.h"

#include <random>
#include <set>

using namespace moss;
using namespace llvm;

namespace {

// Two kernels: one with a handful of registers, one that keeps a long
// unrolled sum of products live.
constexpr const char *kKernels = R"cuda(
extern "C" __global__ void moss_small(float *out) { out[threadIdx.x] = 1.0f; }

extern "C" __global__ void moss_large(float *out, const float *in, int n) {
  float acc[48];
#pragma unroll
  for (int i = 0; i < 48; ++i)
    acc[i] = in[i * n + threadIdx.x];
  for (int j = 0; j < n; ++j) {
#pragma unroll
    for (int i = 0; i < 48; ++i)
      acc[i] = acc[i] * in[j] + acc[(i + 1) % 48];
  }
  float s = 0;
#pragma unroll
  for (int i = 0; i < 48; ++i)
    s += acc[i] * float(i);
  out[threadIdx.x] = s;
}
)cuda";

Expected<runtime::CompileResult> compileKernels() {
  runtime::CompileOptions options;
  options.arch = "sm_90a";
  options.flags.push_back(runtime::kPtxasVerboseFlag);
  return runtime::compileCuda(kKernels, options);
}

TEST(CubinInfoTest, RegisterCountsMatchPtxasReport) {
  Expected<runtime::NvrtcVersion> version = runtime::getNvrtcVersion();
  if (!version)
    GTEST_SKIP() << toString(version.takeError());
  Expected<runtime::CompileResult> result = compileKernels();
  ASSERT_TRUE(bool(result)) << toString(result.takeError());
  std::vector<runtime::KernelResources> reported =
      runtime::parsePtxasResources(result->log);
  ASSERT_EQ(reported.size(), 2u) << result->log;
  std::set<int> counts;
  for (const runtime::KernelResources &kernel : reported) {
    Expected<int> registers =
        jit::getCubinRegisterCount(result->cubin, kernel.name);
    ASSERT_TRUE(bool(registers))
        << kernel.name << ": " << toString(registers.takeError());
    EXPECT_EQ(*registers, kernel.registers) << kernel.name;
    counts.insert(*registers);
  }
  // The two kernels differ, so a constant answer cannot pass.
  EXPECT_EQ(counts.size(), 2u);
}

TEST(CubinInfoTest, BadInputIsAnErrorNotACrash) {
  Expected<runtime::NvrtcVersion> version = runtime::getNvrtcVersion();
  if (!version)
    GTEST_SKIP() << toString(version.takeError());
  Expected<runtime::CompileResult> result = compileKernels();
  ASSERT_TRUE(bool(result)) << toString(result.takeError());
  const std::string &cubin = result->cubin;

  auto fails = [](Expected<int> registers) {
    if (registers)
      return false;
    consumeError(registers.takeError());
    return true;
  };
  EXPECT_TRUE(fails(jit::getCubinRegisterCount(cubin, "moss_missing")));
  EXPECT_TRUE(fails(jit::getCubinRegisterCount("", "moss_small")));
  EXPECT_TRUE(fails(jit::getCubinRegisterCount(result->ptx, "moss_small")));
  // Every truncation, and random corruption of the bytes, gives a count or
  // an error; none reads out of bounds (the sanitizer builds check).
  for (size_t size = 0; size < cubin.size(); size += 61)
    consumeError(jit::getCubinRegisterCount(StringRef(cubin).take_front(size),
                                            "moss_large")
                     .takeError());
  std::mt19937_64 rng(std::random_device{}());
  for (int trial = 0; trial < 200; ++trial) {
    std::string corrupt = cubin;
    for (int flip = 0; flip < 8; ++flip)
      corrupt[rng() % corrupt.size()] = char(rng());
    consumeError(jit::getCubinRegisterCount(corrupt, "moss_large").takeError());
  }
}

} // namespace
