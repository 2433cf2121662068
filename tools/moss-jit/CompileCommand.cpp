//===- CompileCommand.cpp - moss-jit compile ------------------------------===//
//
// Runs the GEMM pipeline for one spec and emits one stage: the MLIR after
// each pass, the CUDA C++ translation unit, or NVRTC's PTX or cubin. The
// kernel is the one the runtime launches: tiled as it tiles (the tuning
// database, else the heuristic), and its PTX and cubin come from the kernel
// cache, which a miss fills.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"
#include "GemmSpecOptions.h"

#include "moss/Compiler/Compile.h"
#include "moss/Compiler/Tiling.h"
#include "moss/Gemm/Gemm.h"
#include "moss/Runtime/Cache/KernelCache.h"
#include "moss/Support/AtomicFile.h"
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
  // A spec that folds compiles the GEMM of its folded operands; the fold
  // itself is a separate kernel of the runtime (runtime::GpuFolder).
  std::string foldNote;
  if (spec->getFold() != numerics::BlockScaleFold::None) {
    if (Error e = compiler::checkFold(*spec))
      return fail(std::move(e));
    foldNote = (Twine("fold ") + numerics::getName(spec->getFold()) +
                ": the kernel multiplies the folded operands, " +
                spec->getKernelSpec().str())
                   .str();
  }
  // An error is one line: the fold's note goes onto it, not before it.
  auto failCompile = [&](Error error) {
    if (foldNote.empty())
      return fail(std::move(error));
    return fail(
        createStringError(inconvertibleErrorCode(),
                          toString(std::move(error)) + " (" + foldNote + ")"));
  };
  // The rows the kernel is resolved for: a static M, else the heuristic's
  // assumed M (what GemmRunner::prepare(spec) resolves); a k-grouped
  // kernel's launch extent is K, any of which it serves.
  int64_t rows = spec->groupedK ? 0
                 : spec->m != compiler::GemmSpec::kDynamic
                     ? spec->m
                     : compiler::kAssumedM;
  std::unique_ptr<GemmRunner> runner =
      GemmRunner::createForTarget(runtime::getDefaultKernelCache(), target);
  GemmOptions runOptions;
  runOptions.compileMode =
      getQuickCompile() ? GemmCompileMode::Quick : GemmCompileMode::Full;
  // CUDA and MLIR need no NVRTC; PTX and cubin come through the cache.
  std::optional<GemmRunner::BuiltKernel> built;
  if (emit == Emit::Ptx || emit == Emit::Cubin) {
    Expected<GemmRunner::BuiltKernel> entry =
        runner->build(*spec, rows, runOptions);
    if (!entry)
      return failCompile(entry.takeError());
    built = std::move(*entry);
  } else {
    Expected<compiler::KernelSource> source =
        runner->getSource(*spec, rows, runOptions);
    if (!source)
      return failCompile(source.takeError());
    built = GemmRunner::BuiltKernel{std::move(*source), nullptr};
  }
  const compiler::KernelSource *kernel = &built->source;

  std::string text;
  if (emit == Emit::Mlir) {
    // The pipeline's stages of the runtime's plan.
    Expected<compiler::GemmPlan> plan = runner->getPlan(*spec, rows, runOptions);
    if (!plan)
      return failCompile(plan.takeError());
    auto onStage = [&](StringRef stage, StringRef stageText) {
      if (stage != compiler::kStageCuda)
        text += ("// ----- stage: " + stage + "\n" + stageText + "\n").str();
    };
    Expected<compiler::KernelSource> staged =
        compiler::compileGemm(*plan, target, onStage);
    if (!staged)
      return failCompile(staged.takeError());
  } else if (emit == Emit::Cuda) {
    text = kernel->source;
  } else {
    text = emit == Emit::Ptx ? std::string(built->entry->getPtx())
                             : std::string(built->entry->getCubin());
  }
  if (output == "-") {
    outs() << text;
  } else if (Error e = writeFileAtomically(output, ArrayRef(text.data(),
                                                            text.size()))) {
    // A temporary file and a rename: a failed write leaves an earlier
    // FILE as it was.
    return fail(std::move(e));
  }
  if (!foldNote.empty())
    errs() << "note: " << foldNote
           << " (--fold none: the exact per-32 kernel)\n";
  if (emit != Emit::Mlir)
    errs() << "kernel " << kernel->kernelName << ": tile "
           << kernel->tiling.tileM << "x" << kernel->tiling.tileN << ", "
           << kernel->tiling.stages << " stages, "
           << kernel->launch.threads << " threads, "
           << kernel->launch.sharedBytes << " bytes of shared memory\n";
  return 0;
}

} // namespace moss::jit
