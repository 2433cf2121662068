//===- BenchCommand.cpp - moss-jit bench ----------------------------------===//
//
// Times one GEMM on the GPU through moss::GemmRunner: the first call's
// compile (compiler pipeline, then NVRTC or a cache hit), the kernel (CUDA
// events around each launch, median of --repeat after warm-up) and the host
// time of a cached launch. Inputs are random (LLM-like activations, Gaussian
// weights) quantized by the spec's schemes. The cuBLASLt comparison lives in
// moss-bench-gemm (bench/).
//
//===----------------------------------------------------------------------===//

#include "Commands.h"
#include "GemmProblem.h"
#include "GemmSpecOptions.h"
#include "ToolDevice.h"

#include "moss/Numerics/Samples.h"
#include "moss/Runtime/Device.h"
#include "moss/Runtime/Driver.h"
#include "moss/Runtime/EventTimer.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

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

} // namespace

int runBench() {
  Expected<compiler::GemmSpec> spec = getGemmSpec(/*mIsLaunchRows=*/true);
  if (!spec)
    return fail(spec.takeError());
  const int64_t m = getLaunchRows();
  Expected<std::optional<compiler::TileConfig>> tiling = getTilingOverride();
  if (!tiling)
    return fail(tiling.takeError());
  if (repeat < 1 || warmup < 0)
    return fail(createStringError(inconvertibleErrorCode(),
                                  "--repeat must be >= 1 and --warmup >= 0"));
  if (Error e = checkGemmSpec(*spec))
    return fail(std::move(e));

  Expected<const runtime::Device &> device = openToolDevice();
  if (!device)
    return fail(device.takeError());
  errs() << "preparing random operands...\n";
  std::vector<float> a = llmActivationSample(m, spec->k, 1);
  std::vector<float> b = gaussianSample(spec->n, spec->k, 2);
  Expected<std::unique_ptr<GemmProblem>> problem =
      GemmProblem::create(*spec, m, a, b, 3);
  if (!problem)
    return fail(problem.takeError());
  a.clear();
  b.clear();
  Expected<std::unique_ptr<GemmRunner>> runner =
      GemmRunner::create(runtime::getDefaultKernelCache());
  if (!runner)
    return fail(runner.takeError());
  GemmOptions options{*tiling};
  Expected<const GemmKernelInfo *> info = (*runner)->prepare(*spec, m, options);
  if (!info)
    return fail(info.takeError());

  auto launch = [&]() -> Error {
    return (*runner)->run(*spec, m, (*problem)->buffers, nullptr, options);
  };
  Expected<std::vector<float>> times =
      runtime::timeWithEvents(launch, warmup, repeat, nullptr);
  if (!times)
    return fail(times.takeError());
  const float median = (*times)[times->size() / 2];

  // Host time of a cached launch: back-to-back calls, the GPU catching up
  // behind them.
  const runtime::DriverApi &api = *runtime::getDriverApi();
  constexpr int kCalls = 200;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kCalls; ++i)
    if (Error e = launch())
      return fail(std::move(e));
  double hostMicros = std::chrono::duration<double, std::micro>(
                          std::chrono::steady_clock::now() - start)
                          .count() /
                      kCalls;
  if (Error e =
          runtime::checkCuda(api.streamSynchronize(nullptr), "the GEMM kernel"))
    return fail(std::move(e));

  const GemmKernelInfo &k = **info;
  double flops = 2.0 * double(m) * double(spec->n) * double(spec->k);
  outs() << "gemm     " << spec->str() << ", M = " << m << "\n"
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
                   "call in this process)\n",
                   k.pipelineSeconds, k.cacheSeconds)
         << format("time     %.4f ms median of %d (min %.4f, max %.4f): "
                   "%.1f TFLOPS\n",
                   median, int(repeat), times->front(), times->back(),
                   flops / (median * 1e-3) / 1e12)
         << format("host     %.2f us per cached launch (cuLaunchKernel "
                   "included)\n",
                   hostMicros);
  return 0;
}

} // namespace moss::jit
