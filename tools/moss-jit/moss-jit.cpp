//===- moss-jit.cpp - The MOSS-JIT command-line tool ----------------------===//
//
// moss-jit <command> [options]. Commands: quantize, demo, snr,
// autoscale-replay, compile, run, bench, cache.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"
#include "ToolVersion.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/raw_ostream.h"

using namespace moss::jit;

int main(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  moss::tools::setVersionPrinter("moss-jit");
  llvm::cl::ParseCommandLineOptions(
      argc, argv,
      "MOSS-JIT: block-scaled FP8 GEMM kernels and quantizers\n\n"
      "  moss-jit quantize  quantize a .npy matrix with a scaling scheme\n"
      "  moss-jit demo      quantize a built-in LLM-like sample under every "
      "scheme\n"
      "  moss-jit snr       fidelity of every scheme on one tensor\n"
      "  moss-jit compile   compile a GEMM and emit its MLIR, CUDA, PTX or "
      "cubin\n"
      "  moss-jit run       run a GEMM on the GPU and check it\n"
      "  moss-jit bench     time a GEMM on the GPU\n"
      "  moss-jit cache     show or clear the kernel cache\n"
      "  moss-jit autoscale-replay  replay a weight amax trace through the "
      "AutoScaler\n");
  if (quantizeCommand)
    return runQuantize();
  if (demoCommand)
    return runDemo();
  if (snrCommand)
    return runSnr();
  if (autoScaleReplayCommand)
    return runAutoScaleReplay();
  if (getCompileCommand())
    return runCompile();
  if (getRunCommand())
    return runRun();
  if (getBenchCommand())
    return runBench();
  if (cacheCommand)
    return runCache();
  llvm::errs() << "moss-jit: error: no command given; expected one of "
                  "quantize, demo, snr, compile, run, bench, cache or "
                  "autoscale-replay (moss-jit --help)\n";
  return 1;
}
