//===- DemoCommand.cpp - moss-jit demo: the main job ----------------------===//
//
// Shows the product in three steps: the schemes' fidelity on a built-in
// LLM-like activation sample (heavy tails, outlier channels, token spikes);
// a MOSS GEMM for a LLaMA-7B shape JIT-compiled through the pipeline and the
// kernel cache; and what to run on a GPU.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"
#include "SchemeOptions.h"

#include "moss/Compiler/KernelSource.h"
#include "moss/Numerics/Fidelity.h"
#include "moss/Numerics/Quantize.h"
#include "moss/Numerics/Samples.h"
#include "moss/Runtime/Device.h"
#include "moss/Runtime/Gemm.h"
#include "moss/Runtime/KernelCache.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <map>

using namespace llvm;
using namespace moss::numerics;

namespace moss::jit {

cl::SubCommand demoCommand(
    "demo", "Show the product: the schemes' fidelity, a JIT-compiled MOSS "
            "GEMM, what to run on a GPU");

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

/// Step 2: a MOSS GEMM through the compiler and the kernel cache.
void showCompile() {
  compiler::GemmSpec spec;
  spec.n = 11008;
  spec.k = 4096;
  spec.a = Fp8Format::E4M3;
  spec.aScaling = ScalingScheme::twoLevel(GlobalScope::Row, 32);
  spec.b = Fp8Format::E4M3;
  spec.bScaling = ScalingScheme::perTensor();
  spec.out = compiler::FloatType::BF16;
  const int64_t m = 4096;
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
    if (attempt == 0)
      outs() << "tiling   " << source.tiling.str() << "\n"
             << "source   " << source.source.size()
             << " bytes of CUDA C++ from the device templates\n"
             << "kernel   " << source.kernelName << ": "
             << source.launch.threads << " threads, "
             << source.launch.sharedBytes << " bytes of shared memory\n"
             << "NVRTC    PTX " << built->entry->getPtx().size()
             << " bytes, cubin " << built->entry->getCubin().size()
             << " bytes\n";
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

/// Step 3: the GPU.
void showGpu() {
  outs() << "3. On a GPU\n\n";
  Expected<runtime::Device> device = runtime::Device::open(0);
  if (!device) {
    outs() << "no GPU here (" << toString(device.takeError())
           << "): the GEMM is compiled above but not run.\n";
    return;
  }
  outs() << device->getName()
         << ": `moss-jit run --m 4096 --n 11008 --k 4096` runs this GEMM and "
            "checks it against FP64; `moss-bench-gemm --m 4096 --n 11008 "
            "--k 4096` times it next to cuBLASLt; from PyTorch, "
            "`moss_jit.convert(model)` (README, \"Use from PyTorch\").\n";
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
  showCompile();
  showGpu();
  return 0;
}

} // namespace moss::jit
