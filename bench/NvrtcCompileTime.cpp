//===- NvrtcCompileTime.cpp - How long NVRTC takes on a small kernel ------===//
//
// Prints the time to load NVRTC and to compile a small kernel that includes
// a header, first (cold) and again (warm), in this process. Run it once per
// configuration so each cold figure is a fresh process:
//
//   moss-bench-nvrtc [--arch sm_90a] [--no-minimal] [--repeat N] [FLAG...]
//
// Extra arguments are passed to NVRTC (e.g. -pch -pch-dir=/tmp/pch).
//
//===----------------------------------------------------------------------===//

#include "moss/Runtime/Nvrtc/Nvrtc.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cstdlib>
#include <string>

using namespace moss::runtime;
using namespace llvm;

namespace {

/// A small kernel in the shape of generated sources: a header of device
/// helpers (inline PTX, a template) and one extern "C" kernel. `salt` makes
/// every compile's source distinct.
std::string makeSource(int salt) {
  return R"cuda(
#include "moss/common/version.cuh"
#include "helpers.cuh"
extern "C" __global__ void bench_kernel(float *out, const float *in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    out[i] = moss_bench::scale<)cuda" +
         std::to_string(salt % 7 + 1) + R"cuda(>(in[i]) + )cuda" +
         std::to_string(salt) + R"cuda(.0f;
}
)cuda";
}

constexpr const char *kHelpers = R"cuda(
#pragma once
namespace moss_bench {
__device__ __forceinline__ unsigned laneId() {
  unsigned lane;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
  return lane;
}
template <int Factor>
__device__ __forceinline__ float scale(float x) {
  return static_cast<float>(Factor) * x + 0.0f * laneId();
}
} // namespace moss_bench
)cuda";

} // namespace

namespace {
cl::opt<bool> noMinimal("no-minimal", cl::desc("Compile without -minimal"));
cl::opt<std::string> archOpt("arch", cl::desc("NVRTC target"),
                             cl::init("sm_90a"));
cl::opt<int> repeatOpt("repeat", cl::desc("Compiles of each unit"),
                       cl::init(5));
cl::list<std::string> flagOpt("nvrtc-flag",
                              cl::desc("An extra NVRTC flag (repeatable)"),
                              cl::value_desc("FLAG"));
} // namespace

int main(int argc, char **argv) {
  cl::ParseCommandLineOptions(
      argc, argv, "moss-bench-nvrtc: NVRTC start-up and compile times\n");
  CompileOptions options;
  options.arch = archOpt;
  options.headers.push_back({"helpers.cuh", kHelpers});
  options.minimal = !noMinimal;
  options.flags.assign(flagOpt.begin(), flagOpt.end());
  int repeat = repeatOpt;
  if (repeat < 1) {
    errs() << "moss-bench-nvrtc: --repeat must be at least 1\n";
    return 2;
  }

  auto start = std::chrono::steady_clock::now();
  Expected<NvrtcVersion> version = getNvrtcVersion();
  double loadSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  if (!version) {
    errs() << "error: " << toString(version.takeError()) << "\n";
    return 1;
  }
  outs() << "NVRTC " << version->toString() << ", " << options.arch
         << (options.minimal ? ", -minimal" : ", no -minimal");
  for (const std::string &flag : options.flags)
    outs() << ", " << flag;
  outs() << "\n";
  outs() << format("  load:        %7.1f ms\n", loadSeconds * 1e3);
  double warmTotal = 0;
  for (int i = 0; i < repeat; ++i) {
    Expected<CompileResult> result = compileCuda(makeSource(i), options);
    if (!result) {
      errs() << "error: " << toString(result.takeError()) << "\n";
      return 1;
    }
    if (i == 0)
      outs() << format("  cold compile:%7.1f ms (PTX %zu B, cubin %zu B)\n",
                       result->seconds * 1e3, result->ptx.size(),
                       result->cubin.size());
    else
      warmTotal += result->seconds;
    if (!result->log.empty() && i < 2)
      outs() << "  log: " << result->log << "\n";
  }
  if (repeat > 1)
    outs() << format("  warm compile:%7.1f ms (mean of %d)\n",
                     warmTotal / (repeat - 1) * 1e3, repeat - 1);
  return 0;
}
