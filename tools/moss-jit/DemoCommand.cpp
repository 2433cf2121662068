//===- DemoCommand.cpp - moss-jit demo: the main job ----------------------===//
//
// Shows the product in three steps: the schemes' fidelity on a built-in
// LLM-like activation sample (heavy tails, outlier channels, token spikes);
// a MOSS GEMM for a LLaMA-7B shape JIT-compiled through the pipeline and the
// kernel cache; and, on a GPU, that GEMM run, checked against FP64 and timed
// next to cuBLASLt.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"
#include "CubinInfo.h"
#include "CublasLtBaseline.h"
#include "GemmCheck.h"
#include "GemmProblem.h"
#include "SchemeOptions.h"
#include "ToolDevice.h"

#include "moss/Compiler/KernelSource.h"
#include "moss/Gemm/Gemm.h"
#include "moss/Numerics/Fidelity.h"
#include "moss/Numerics/Quantize.h"
#include "moss/Numerics/Samples.h"
#include "moss/Runtime/Cache/KernelCache.h"
#include "moss/Runtime/Cuda/Device.h"
#include "moss/Runtime/Cuda/EventTimer.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cmath>
#include <map>

using namespace llvm;
using namespace moss::numerics;

namespace moss::jit {

cl::SubCommand
    demoCommand("demo",
                "Show the product: the schemes' fidelity, a JIT-compiled MOSS "
                "GEMM, and on a GPU that GEMM checked and timed next to "
                "cuBLASLt");

namespace {
cl::opt<int64_t> tokens("tokens", cl::desc("Rows of the sample"),
                        cl::init(2048), cl::sub(demoCommand));
cl::opt<int64_t> channels("channels",
                          cl::desc("Columns (K) of the sample, a multiple "
                                   "of 128, at most 65536"),
                          cl::init(4096), cl::sub(demoCommand));
cl::opt<uint64_t> seed("seed", cl::desc("Sample seed"), cl::init(2026),
                       cl::sub(demoCommand));

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                       start)
      .count();
}

/// Step 1: every scheme on the sample. Returns false on an error.
bool showFidelity() {
  outs() << "1. Quantization of LLM-like activations [" << tokens << ", "
         << channels << "], seed " << seed
         << " (outlier channels x100-x1000, token spikes), with the host "
            "reference (the GPU quantizers write the same bits)\n\n";
  std::vector<float> x = llmActivationSample(tokens, channels, seed);
  const ScalingScheme schemes[] = {
      ScalingScheme::perTensor(),
      ScalingScheme::perRow(),
      ScalingScheme::perGroup(1, 128),
      ScalingScheme::mxfp8(),
      ScalingScheme::twoLevel(GlobalScope::Tensor, 32),
      ScalingScheme::twoLevel(GlobalScope::Row, 32),
  };
  outs() << format("%-24s %-6s %9s %13s %10s %10s\n", "scheme", "format",
                   "SNR (dB)", "row SNR (dB)", "saturated", "underflow");
  std::map<std::string, FidelityReport> e4m3;
  for (Fp8Format fp8 : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    for (const ScalingScheme &s : schemes) {
      QuantizeOptions options{s, fp8, /*transpose=*/false};
      Expected<QuantizedTensor> q = quantize(x, tokens, channels, options);
      if (!q) {
        errs() << "moss-jit demo: error: " << toString(q.takeError()) << "\n";
        return false;
      }
      FidelityReport r = measureFidelity(x, tokens, channels, *q);
      if (fp8 == Fp8Format::E4M3)
        e4m3[s.str()] = r;
      outs() << format("%-24s %-6s %9.2f %13.2f %10lld %10lld\n",
                       s.str().c_str(), formatName(fp8).data(), r.snrDb,
                       r.meanRowSnrDb, static_cast<long long>(r.saturated),
                       static_cast<long long>(r.underflowToZero));
    }
  }
  const FidelityReport &tensor = e4m3[ScalingScheme::perTensor().str()];
  const FidelityReport &moss =
      e4m3[ScalingScheme::twoLevel(GlobalScope::Tensor, 32).str()];
  outs() << "\nSNR = 10 log10(sum x^2 / sum (x - dequant(quant(x)))^2), over "
            "the tensor; row SNR, the mean over tokens; underflow, the "
            "non-zero inputs that became zero.\n"
         << format("MOSS two-level has per-tensor's SNR (%.2f against %.2f dB "
                   "in E4M3): its global scale puts each block's largest "
                   "values on the same grid. ",
                   moss.snrDb, tensor.snrDb)
         << "Its per-32 power-of-two factors cut the values that underflow "
            "to zero from "
         << tensor.underflowToZero << " to " << moss.underflowToZero << ".\n\n";
  return true;
}

/// The demo's GEMM: LLaMA-7B's FFN up projection for 4096 tokens, MOSS
/// activations (two-level, per-row global) times per-tensor weights.
compiler::GemmSpec getDemoSpec() {
  compiler::GemmSpec spec;
  spec.n = 11008;
  spec.k = 4096;
  spec.a = Fp8Format::E4M3;
  spec.aScaling = ScalingScheme::twoLevel(GlobalScope::Row, 32);
  spec.b = Fp8Format::E4M3;
  spec.bScaling = ScalingScheme::perTensor();
  spec.out = compiler::FloatType::BF16;
  return spec;
}
constexpr int64_t kDemoRows = 4096;

/// Step 2: a MOSS GEMM through the compiler and the kernel cache.
void showCompile(const compiler::GemmSpec &spec, int64_t m) {
  outs() << "2. A MOSS GEMM for LLaMA-7B's FFN up projection, JIT-compiled "
            "for an H200 (no GPU needed)\n\n"
         << "spec     " << spec.str() << " (any M), at M = " << m << "\n"
         << "kernel   " << spec.getKernelSpec(m).str() << " (the "
         << numerics::getName(spec.getFold(m))
         << " fold of A's block factors, docs/NUMERICS-CONTRACT.md section "
            "8)\n";

  // Two caches on the one directory: the second finds the kernel on disk.
  for (int attempt = 0; attempt < 2; ++attempt) {
    runtime::KernelCache cache;
    std::unique_ptr<GemmRunner> runner =
        GemmRunner::createForTarget(cache, compiler::TargetInfo::h200());
    auto start = std::chrono::steady_clock::now();
    Expected<GemmRunner::BuiltKernel> built = runner->build(spec, m);
    double seconds = secondsSince(start);
    if (!built) {
      outs() << "compile  not available here: "
             << toString(built.takeError()) << "\n\n";
      return;
    }
    const compiler::KernelSource &source = built->source;
    if (attempt == 0) {
      Expected<int> registers =
          getCubinRegisterCount(built->entry->getCubin(), source.kernelName);
      outs() << "tiling   " << source.tiling.str() << "\n"
             << "source   " << source.source.size()
             << " bytes of CUDA C++ from the device templates\n"
             << "kernel   " << source.kernelName << ": "
             << source.launch.threads << " threads, "
             << (registers ? std::to_string(*registers)
                           : "? (" + toString(registers.takeError()) + ")")
             << " registers per thread, " << source.launch.sharedBytes
             << " bytes of shared memory\n"
             << "NVRTC    PTX " << built->entry->getPtx().size()
             << " bytes, cubin " << built->entry->getCubin().size()
             << " bytes\n";
    }
    runtime::CacheStats stats = cache.stats();
    outs() << format("%-8s %.3f s: ", attempt == 0 ? "build" : "again",
                     seconds)
           << (stats.compiles ? "compiled (pipeline and NVRTC)"
               : stats.diskHits
                   ? "the pipeline, then the kernel from the disk cache"
                   : "the pipeline, then the kernel from memory")
           << (stats.directory.empty() ? std::string()
                                       : " (cache " + stats.directory + ")")
           << "\n";
  }
  outs() << "\n";
}

/// Step 3: the GEMM of step 2 on the GPU, checked against FP64 and timed
/// next to cuBLASLt FP8 per-tensor (its default mode). Returns false when
/// the GEMM is wrong or fails.
bool showGpu(const compiler::GemmSpec &spec, int64_t m) {
  outs() << "3. On a GPU\n\n";
  Expected<const runtime::Device &> device = openToolDevice();
  if (!device) {
    outs() << "no GPU here (" << toString(device.takeError())
           << "): the GEMM is compiled above but not run.\n";
    return true;
  }
  auto fail = [](Error error) {
    errs() << "moss-jit demo: error: " << toString(std::move(error)) << "\n";
    return false;
  };
  Expected<std::unique_ptr<GemmRunner>> runner =
      GemmRunner::create(runtime::getDefaultKernelCache());
  if (!runner) {
    outs() << device->getName() << ": " << toString(runner.takeError()) << "\n";
    return true;
  }
  // Activations like step 1's, Gaussian weights of unit row norm.
  std::vector<float> a = llmActivationSample(m, spec.k, seed);
  std::vector<float> b = gaussianSample(spec.n, spec.k, seed + 1);
  for (float &v : b)
    v /= std::sqrt(float(spec.k));
  Expected<std::unique_ptr<GemmProblem>> problem =
      GemmProblem::create(spec, m, a, b, seed + 2);
  if (!problem)
    return fail(problem.takeError());
  GemmOptions options;
  options.compileMode = GemmCompileMode::Full;
  Expected<const GemmKernelInfo *> info = (*runner)->prepare(spec, m, options);
  if (!info)
    return fail(info.takeError());
  GemmCheckOptions checkOptions;
  checkOptions.compareRows = 64;
  checkOptions.compareCols = 64;
  checkOptions.seed = seed + 3;
  checkOptions.tiling = (*info)->tiling;
  Expected<GemmCheckResult> check =
      runAndCheckGemm(**runner, spec, m, **problem, options, checkOptions);
  if (!check)
    return fail(check.takeError());
  outs() << device->getName() << "\n"
         << format("check    %lld sampled entries against FP64: relative "
                   "Frobenius error %.2e, worst entry at %.2f of its "
                   "allowance (docs/NUMERICS-CONTRACT.md section 7)\n",
                   (long long)check->compared, check->relFrobenius,
                   check->worst);
  if (check->bad)
    return fail(createStringError(inconvertibleErrorCode(),
                                  Twine(check->bad) +
                                      " entries break the accuracy contract"));

  constexpr int kWarmup = 5, kRepeat = 30;
  Expected<std::vector<float>> times = runtime::timeWithEvents(
      [&] {
        return (*runner)->run(spec, m, (*problem)->buffers, nullptr, options);
      },
      kWarmup, kRepeat, nullptr);
  if (!times)
    return fail(times.takeError());
  bench::CublasLtProblem baseline;
  baseline.m = int(m);
  baseline.n = int(spec.n);
  baseline.k = int(spec.k);
  baseline.warmup = kWarmup;
  baseline.repeat = kRepeat;
  Expected<double> cublasMs = bench::timeCublasLt(
      baseline, bench::prepareCublasLtFp8PerTensor(baseline));
  const double flops = 2.0 * double(m) * double(spec.n) * double(spec.k);
  const double ms = (*times)[times->size() / 2];
  outs() << format("time     %.3f ms, %.0f TFLOPS (median of %d, the fold "
                   "pass included)\n",
                   ms, flops / ms / 1e9, kRepeat);
  if (cublasMs)
    outs() << format("cuBLASLt %.3f ms, %.0f TFLOPS, FP8 per-tensor in its "
                     "default mode: MOSS runs at %.2fx its speed\n",
                     *cublasMs, flops / *cublasMs / 1e9, *cublasMs / ms);
  else
    outs() << "cuBLASLt not timed: " << toString(cublasMs.takeError()) << "\n";
  outs() << "More: `moss-bench-gemm` (every scheme, both cuBLASLt modes), "
            "`moss-jit run` (your .npy files), and from PyTorch "
            "`moss_jit.convert(model)` (README, \"Use from PyTorch\").\n";
  return true;
}
} // namespace

int runDemo() {
  if (tokens <= 0 || tokens > (int64_t(1) << 20) || channels <= 0 ||
      channels > 65536 || channels % 128 != 0) {
    errs() << "moss-jit demo: error: --tokens must be in [1, 2^20] and "
              "--channels a multiple of 128 in [128, 65536], got "
           << tokens << " and " << channels << "\n";
    return 1;
  }
  outs() << "MOSS-JIT demo\n\n";
  if (!showFidelity())
    return 1;
  const compiler::GemmSpec spec = getDemoSpec();
  showCompile(spec, kDemoRows);
  return showGpu(spec, kDemoRows) ? 0 : 1;
}

} // namespace moss::jit
