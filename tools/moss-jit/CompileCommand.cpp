//===- CompileCommand.cpp - moss-jit compile ------------------------------===//
//
// Runs the GEMM pipeline for one spec and emits one stage: the MLIR after
// each pass, the CUDA C++ translation unit, or NVRTC's PTX or cubin.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"
#include "GemmSpecOptions.h"

#include "moss/Compiler/Compile.h"
#include "moss/Runtime/Nvrtc.h"
#include "moss/Support/Npy.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <string>

using namespace llvm;
using namespace moss::numerics;

namespace moss::jit {

namespace {
cl::OptionCategory category("compile options");

enum class Emit { Mlir, Cuda, Ptx, Cubin };

cl::opt<std::string> op("op", cl::desc("Operation (gemm)"), cl::init("gemm"),
                        cl::sub(getCompileCommand()), cl::cat(category));
cl::opt<std::string> arch("arch", cl::desc("Target (sm_90a)"),
                          cl::init("sm_90a"), cl::sub(getCompileCommand()),
                          cl::cat(category));
cl::opt<Emit> emit(
    "emit", cl::desc("What to print"), cl::init(Emit::Cuda),
    cl::sub(getCompileCommand()), cl::cat(category),
    cl::values(clEnumValN(Emit::Mlir, "mlir", "the IR after each stage"),
               clEnumValN(Emit::Cuda, "cuda", "the CUDA C++ unit"),
               clEnumValN(Emit::Ptx, "ptx", "NVRTC's PTX"),
               clEnumValN(Emit::Cubin, "cubin", "NVRTC's cubin")));
cl::opt<std::string> output("o", cl::desc("Output file (default: stdout)"),
                            cl::init("-"), cl::sub(getCompileCommand()),
                            cl::cat(category));
} // namespace

static int fail(Error error) {
  errs() << "moss-jit compile: error: " << toString(std::move(error)) << "\n";
  return 1;
}

int runCompile() {
  if (op != "gemm")
    return fail(createStringError(inconvertibleErrorCode(),
                                  "--op=" + op + ": only gemm compiles"));
  Expected<compiler::GemmSpec> spec = getGemmSpec(/*mIsLaunchRows=*/false);
  if (!spec)
    return fail(spec.takeError());

  if (Error e = compiler::checkGemmArch(arch))
    return fail(std::move(e));
  compiler::TargetInfo target;
  target.arch = arch;
  compiler::CompileOptions options;
  options.quickCompile = getQuickCompile();
  std::string stages;
  if (emit == Emit::Mlir)
    options.onStage = [&](StringRef stage, StringRef text) {
      if (stage != compiler::kStageCuda)
        stages += ("// ----- stage: " + stage + "\n" + text + "\n").str();
    };
  // A spec that folds compiles the GEMM of its folded operands; the fold
  // itself is a separate kernel of the runtime (runtime::GpuFolder).
  if (spec->getFold() != numerics::BlockScaleFold::None) {
    if (Error e = compiler::checkFold(*spec))
      return fail(std::move(e));
    errs() << "note: fold " << numerics::getName(spec->getFold())
           << ": the kernel multiplies the folded operands, "
           << spec->getKernelSpec().str() << " (--fold none: the exact "
           << "per-32 kernel)\n";
  }
  Expected<compiler::KernelSource> kernel =
      compiler::compileGemm(*spec, target, options);
  if (!kernel)
    return fail(kernel.takeError());

  std::string text;
  if (emit == Emit::Mlir) {
    text = std::move(stages);
  } else if (emit == Emit::Cuda) {
    text = kernel->source;
  } else {
    runtime::CompileOptions nvrtc;
    nvrtc.arch = arch;
    Expected<runtime::CompileResult> result =
        runtime::compileCuda(kernel->source, nvrtc);
    if (!result)
      return fail(result.takeError());
    text = emit == Emit::Ptx ? result->ptx : result->cubin;
  }
  if (output == "-") {
    outs() << text;
  } else if (Error e = writeFileAtomically(output, ArrayRef(text.data(),
                                                            text.size()))) {
    // A temporary file and a rename: a failed write leaves an earlier
    // FILE as it was.
    return fail(std::move(e));
  }
  if (emit != Emit::Mlir)
    errs() << "kernel " << kernel->kernelName << ": tile "
           << kernel->tiling.tileM << "x" << kernel->tiling.tileN << ", "
           << kernel->tiling.stages << " stages, "
           << kernel->launch.threads << " threads, "
           << kernel->launch.sharedBytes << " bytes of shared memory\n";
  return 0;
}

} // namespace moss::jit
