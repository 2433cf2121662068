//===- BenchCommand.cpp - moss-jit bench ----------------------------------===//
//
// Times one GEMM on the GPU through moss::GemmRunner: the first call's
// compile (compiler pipeline, then NVRTC or a cache hit; with a tiered
// compile the quick variant's, then the full kernel's in the background),
// the full kernel (or with --quick-compile the quick variant; CUDA
// events around each launch, median of --repeat after warm-up) and the host
// time of a cached launch, next to the same launch made straight through the
// driver (a kernel with the GEMM's parameters, block, cluster and shared
// memory that only waits out the GEMM's time): the difference is what
// MOSS-JIT adds. Inputs are random
// (LLM-like activations, Gaussian weights) quantized by the spec's schemes.
// The cuBLASLt comparison lives in moss-bench-gemm (bench/).
//
//===----------------------------------------------------------------------===//

#include "Commands.h"
#include "GemmProblem.h"
#include "GemmSpecOptions.h"
#include "GroupedGemmProblem.h"
#include "KGroupedGemmProblem.h"
#include "ToolDevice.h"

#include "moss/Numerics/Samples.h"
#include "moss/Runtime/Cache/KernelCache.h"
#include "moss/Runtime/Cuda/Device.h"
#include "moss/Runtime/Cuda/Driver.h"
#include "moss/Runtime/Cuda/EventTimer.h"
#include "moss/Runtime/Cuda/Module.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>

using namespace llvm;
using namespace moss::numerics;

namespace moss::jit {

namespace {
cl::OptionCategory category("bench options");
cl::opt<int> repeat("repeat", cl::desc("Timed launches (median reported)"),
                    cl::init(50), cl::sub(getBenchCommand()),
                    cl::cat(category));
cl::opt<int> warmup("warmup", cl::desc("Untimed launches first"), cl::init(5),
                    cl::sub(getBenchCommand()), cl::cat(category));

int fail(Error error) {
  errs() << "moss-jit bench: error: " << toString(std::move(error)) << "\n";
  return 1;
}

/// A kernel with the GEMM kernels' parameters (docs/GEMM-KERNEL-ABI.md)
/// that does nothing for args.m nanoseconds: what a launch costs the driver
/// alone, with the launch queue as full as the GEMM's.
constexpr const char *kProbeSource = R"cuda(
#include "moss/gemm/kernel.cuh"
extern "C" __global__ void moss_launch_probe(
    const __grid_constant__ CUtensorMap a,
    const __grid_constant__ CUtensorMap b,
    const __grid_constant__ CUtensorMap d, const moss::gemm_kernel::Args args) {
  if (blockIdx.x != 0 || threadIdx.x != 0)
    return;
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  while (now - start < static_cast<unsigned long long>(args.m));
}
)cuda";

/// Median host microseconds per call of `launch` over `rounds` rounds of
/// `calls` back-to-back calls, the stream drained between rounds (so the
/// launch queue never fills and blocks the host).
Expected<double> hostMicrosPerCall(function_ref<Error()> launch, int rounds,
                                   int calls) {
  const runtime::DriverApi &api = *runtime::getDriverApi();
  std::vector<double> perCall;
  for (int r = 0; r < rounds; ++r) {
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i)
      if (Error e = launch())
        return std::move(e);
    perCall.push_back(std::chrono::duration<double, std::micro>(
                          std::chrono::steady_clock::now() - start)
                          .count() /
                      calls);
    if (Error e = runtime::checkCuda(api.streamSynchronize(nullptr),
                                     "a timed launch"))
      return std::move(e);
  }
  std::sort(perCall.begin(), perCall.end());
  return perCall[perCall.size() / 2];
}

} // namespace

int runBench() {
  Expected<compiler::GemmSpec> spec = getGemmSpec(/*mIsLaunchRows=*/true);
  if (!spec)
    return fail(spec.takeError());
  const int64_t m = getLaunchRows();
  Expected<std::optional<compiler::TileConfig>> tiling =
      getTilingOverride(*spec, m);
  if (!tiling)
    return fail(tiling.takeError());
  if (repeat < 1 || warmup < 0)
    return fail(createStringError(inconvertibleErrorCode(),
                                  "--repeat must be >= 1 and --warmup >= 0"));
  if (Error e = checkGemmSpec(*spec))
    return fail(std::move(e));
  if (Error e = checkTilingOverride(*spec, *tiling))
    return fail(std::move(e));

  Expected<const runtime::Device &> device = openToolDevice();
  if (!device)
    return fail(device.takeError());
  errs() << "preparing random operands...\n";
  // A plain GEMM's operands, or an m-grouped one's (-m rows per expert on
  // average); the launch takes `rows` rows, of which `used` are multiplied.
  std::unique_ptr<GemmProblem> plain;
  std::unique_ptr<GroupedGemmProblem> grouped;
  std::unique_ptr<KGroupedGemmProblem> alongK;
  int64_t rows = m, used = m;
  // A k-grouped GEMM launches with its K (the tokens of all experts).
  if (spec->groupedK) {
    Expected<std::vector<int64_t>> cols = getExpertColumns(*spec, 1);
    if (!cols)
      return fail(cols.takeError());
    Expected<std::unique_ptr<KGroupedGemmProblem>> problem =
        KGroupedGemmProblem::create(*spec, *cols, 3);
    if (!problem)
      return fail(problem.takeError());
    alongK = std::move(*problem);
    rows = used = alongK->k;
  } else if (spec->groups) {
    Expected<std::vector<int64_t>> expertRows = getExpertRows(*spec, 1);
    if (!expertRows)
      return fail(expertRows.takeError());
    Expected<std::unique_ptr<GroupedGemmProblem>> problem =
        GroupedGemmProblem::createForTiming(*spec, *expertRows, 3);
    if (!problem)
      return fail(problem.takeError());
    grouped = std::move(*problem);
    rows = grouped->m;
    used = 0;
    for (int64_t r : grouped->rows)
      used += r;
  } else {
    std::vector<float> a = llmActivationSample(m, spec->k, 1);
    std::vector<float> b = gaussianSample(spec->n, spec->k, 2);
    Expected<std::unique_ptr<GemmProblem>> problem =
        GemmProblem::create(*spec, m, a, b, 3);
    if (!problem)
      return fail(problem.takeError());
    plain = std::move(*problem);
  }
  const GemmBuffers &buffers = alongK    ? alongK->buffers
                               : grouped ? grouped->buffers
                                         : plain->buffers;
  Expected<std::unique_ptr<GemmRunner>> runner =
      GemmRunner::create(runtime::getDefaultKernelCache());
  if (!runner)
    return fail(runner.takeError());
  // The first call as a user's (tiered), then the kernel to time.
  GemmOptions options{*tiling};
  options.compileMode =
      getQuickCompile() ? GemmCompileMode::Quick : GemmCompileMode::Tiered;
  Expected<const GemmKernelInfo *> info =
      (*runner)->prepare(*spec, rows, options);
  if (!info)
    return fail(info.takeError());
  const bool tiered = (*info)->fullCompilePending;
  const double firstSeconds = (*info)->pipelineSeconds + (*info)->cacheSeconds;
  if (!getQuickCompile()) {
    options.compileMode = GemmCompileMode::Full;
    info = (*runner)->prepare(*spec, rows, options);
    if (!info)
      return fail(info.takeError());
  }

  auto launch = [&]() -> Error {
    return (*runner)->run(*spec, rows, buffers, nullptr, options);
  };
  Expected<std::vector<float>> times =
      runtime::timeWithEvents(launch, warmup, repeat, nullptr);
  if (!times)
    return fail(times.takeError());
  const float median = (*times)[times->size() / 2];

  // Host time of a cached launch against the driver's own: 25 rounds of 20
  // back-to-back calls of each, twice, alternated.
  const GemmKernelInfo &k = **info;
  runtime::CompileOptions probeOptions;
  probeOptions.arch = device->getArch().str();
  Expected<std::shared_ptr<const runtime::KernelEntry>> probe =
      runtime::getDefaultKernelCache().getOrCompile(kProbeSource, probeOptions);
  if (!probe)
    return fail(probe.takeError());
  Expected<CUfunction> probeFunction =
      (*probe)->getFunction("moss_launch_probe");
  if (!probeFunction)
    return fail(probeFunction.takeError());
  runtime::LaunchConfig probeLaunch;
  probeLaunch.cluster[0] = k.clusterSize;
  probeLaunch.grid[0] =
      unsigned(device->getSmCount()) / k.clusterSize * k.clusterSize;
  probeLaunch.block[0] = k.threads;
  probeLaunch.sharedMemoryBytes = k.sharedBytes;
  probeLaunch.sharedMemoryLimitSet = true;
  if (Error e = runtime::setSharedMemoryLimit(*probeFunction, k.sharedBytes))
    return fail(std::move(e));
  // The driver copies each parameter's size from these: 256 bytes cover a
  // tensor map and moss::gemm_kernel::Args, whose first field (m) is the time
  // the probe takes, the GEMM's median.
  std::array<unsigned char, 256> unused{};
  std::array<int, 64> probeArgs{};
  probeArgs[0] = int(std::lround(double(median) * 1e6));
  void *probeParams[] = {unused.data(), unused.data(), unused.data(),
                         probeArgs.data()};
  auto rawLaunch = [&]() -> Error {
    return runtime::launchKernel(*probeFunction, probeLaunch, probeParams);
  };
  constexpr int kRounds = 25, kCalls = 20;
  double hostMicros = 0, rawMicros = 0;
  for (int half = 0; half < 2; ++half) {
    Expected<double> ours = hostMicrosPerCall(launch, kRounds, kCalls);
    Expected<double> raw = hostMicrosPerCall(rawLaunch, kRounds, kCalls);
    if (!ours)
      return fail(ours.takeError());
    if (!raw)
      return fail(raw.takeError());
    hostMicros += *ours / 2;
    rawMicros += *raw / 2;
  }
  // k-grouped: `used` is K, the experts' tokens, over an M x N output each.
  double flops = spec->groupedK
                     ? 2.0 * double(used) * double(spec->m) * double(spec->n)
                     : 2.0 * double(used) * double(spec->n) * double(spec->k);
  outs() << "gemm     " << spec->str() << (spec->groupedK ? ", K = " : ", M = ")
         << rows
         << (spec->groups && !spec->groupedK
                 ? formatv(" ({0} rows used by the experts)", used).str()
                 : std::string())
         << "\n"
         << "device   " << device->getName() << " (" << device->getArch()
         << ", " << device->getSmCount() << " SMs)\n"
         << "kernel   " << k.kernelName << ": " << k.tiling.str()
         << (k.tiling.source ? "" : " (given)") << ", " << k.threads
         << " threads, " << k.sharedBytes << " B shared\n"
         << "tuning   "
         << (k.tuningDatabase.empty() ? std::string("no database")
                                      : k.tuningDatabase)
         << "\n"
         << format("compile  %.3f s pipeline + %.3f s NVRTC or cache (first "
                   "call in this process%s)\n",
                   k.pipelineSeconds, k.cacheSeconds,
                   tiered || k.quickCompile ? ", the quick-compile variant"
                                            : "")
         << (tiered ? formatv("         the full kernel {0:F3} s in the "
                              "background, ready {1:F3} s after the first "
                              "call began\n",
                              k.fullCompileSeconds,
                              firstSeconds + k.fullCompileSeconds)
                          .str()
                    : std::string())
         << format("time     %.4f ms median of %d (min %.4f, max %.4f): "
                   "%.1f TFLOPS\n",
                   median, int(repeat), times->front(), times->back(),
                   flops / (median * 1e-3) / 1e12)
         << format("host     %.2f us per cached launch; the driver alone "
                   "%.2f us (same launch shape and kernel time): %.2f us "
                   "added\n",
                   hostMicros, rawMicros, hostMicros - rawMicros);
  return 0;
}

} // namespace moss::jit
