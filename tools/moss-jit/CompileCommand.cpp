//===- CompileCommand.cpp - moss-jit compile ------------------------------===//
//
// Runs the GEMM pipeline for one spec and emits one stage: the MLIR after
// each pass, the CUDA C++ translation unit, or NVRTC's PTX or cubin.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"
#include "SchemeOptions.h"

#include "moss/Compiler/Compile.h"
#include "moss/Runtime/Nvrtc.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <string>

using namespace llvm;
using namespace moss::numerics;

namespace moss::jit {

cl::SubCommand compileCommand("compile",
                              "Compile a GEMM kernel and emit one stage");

namespace {
cl::OptionCategory category("compile options");

enum class Emit { Mlir, Cuda, Ptx, Cubin };

cl::opt<std::string> op("op", cl::desc("Operation (gemm)"), cl::init("gemm"),
                        cl::sub(compileCommand), cl::cat(category));
cl::opt<int64_t> m("m", cl::desc("M (omit for a kernel serving any M)"),
                   cl::init(-1), cl::sub(compileCommand), cl::cat(category));
cl::opt<int64_t> n("n", cl::desc("N"), cl::Required, cl::sub(compileCommand),
                   cl::cat(category));
cl::opt<int64_t> k("k", cl::desc("K, a multiple of 32"), cl::Required,
                   cl::sub(compileCommand), cl::cat(category));

/// The values of --a-scheme and --b-scheme.
auto schemeValues() {
  return cl::values(clEnumValN(SchemeName::PerTensor, "per-tensor", ""),
                    clEnumValN(SchemeName::PerRow, "per-row", ""),
                    clEnumValN(SchemeName::PerGroup, "per-group", ""),
                    clEnumValN(SchemeName::MXFP8, "mxfp8", ""),
                    clEnumValN(SchemeName::Moss, "moss", ""));
}
auto formatValues() {
  return cl::values(clEnumValN(Fp8Format::E4M3, "e4m3", ""),
                    clEnumValN(Fp8Format::E5M2, "e5m2", ""));
}

// Operand A: MOSS two-level by default (the forward activations).
cl::opt<SchemeName> aScheme("a-scheme", cl::desc("Scaling scheme of A"),
                            cl::init(SchemeName::Moss), schemeValues(),
                            cl::sub(compileCommand), cl::cat(category));
cl::opt<std::string> aGlobal("a-global",
                             cl::desc("A's moss global scale: tensor or row"),
                             cl::sub(compileCommand), cl::cat(category));
cl::opt<std::string> aBlock("a-block", cl::desc("A's block (N or RxN)"),
                            cl::sub(compileCommand), cl::cat(category));
cl::opt<Fp8Format> aFormat("a-format", cl::desc("A's FP8 format"),
                           cl::init(Fp8Format::E4M3), formatValues(),
                           cl::sub(compileCommand), cl::cat(category));
// Operand B: per-tensor by default (auto-scaled weights).
cl::opt<SchemeName> bScheme("b-scheme", cl::desc("Scaling scheme of B"),
                            cl::init(SchemeName::PerTensor), schemeValues(),
                            cl::sub(compileCommand), cl::cat(category));
cl::opt<std::string> bGlobal("b-global",
                             cl::desc("B's moss global scale: tensor or row"),
                             cl::sub(compileCommand), cl::cat(category));
cl::opt<std::string> bBlock("b-block", cl::desc("B's block (N or RxN)"),
                            cl::sub(compileCommand), cl::cat(category));
cl::opt<Fp8Format> bFormat("b-format", cl::desc("B's FP8 format"),
                           cl::init(Fp8Format::E4M3), formatValues(),
                           cl::sub(compileCommand), cl::cat(category));

cl::opt<compiler::FloatType> out(
    "out", cl::desc("Output type"), cl::init(compiler::FloatType::BF16),
    cl::sub(compileCommand), cl::cat(category),
    cl::values(clEnumValN(compiler::FloatType::BF16, "bf16", ""),
               clEnumValN(compiler::FloatType::F16, "f16", ""),
               clEnumValN(compiler::FloatType::F32, "f32", "")));
cl::opt<std::string> bias("bias", cl::desc("Bias type (bf16, f16, f32)"),
                          cl::sub(compileCommand), cl::cat(category));
cl::opt<std::string> accumulate("accumulate",
                                cl::desc("Type of C for beta * C (f32 or the "
                                         "output type)"),
                                cl::sub(compileCommand), cl::cat(category));
cl::opt<bool> amax("amax", cl::desc("Also return max |output|"),
                   cl::sub(compileCommand), cl::cat(category));
cl::opt<std::string> arch("arch", cl::desc("Target (sm_90a)"),
                          cl::init("sm_90a"), cl::sub(compileCommand),
                          cl::cat(category));
cl::opt<Emit> emit(
    "emit", cl::desc("What to print"), cl::init(Emit::Cuda),
    cl::sub(compileCommand), cl::cat(category),
    cl::values(clEnumValN(Emit::Mlir, "mlir", "the IR after each stage"),
               clEnumValN(Emit::Cuda, "cuda", "the CUDA C++ unit"),
               clEnumValN(Emit::Ptx, "ptx", "NVRTC's PTX"),
               clEnumValN(Emit::Cubin, "cubin", "NVRTC's cubin")));
cl::opt<std::string> output("o", cl::desc("Output file (default: stdout)"),
                            cl::init("-"), cl::sub(compileCommand),
                            cl::cat(category));
} // namespace

static Expected<compiler::FloatType> parseFloatType(StringRef text,
                                                    StringRef flag) {
  if (text == "bf16")
    return compiler::FloatType::BF16;
  if (text == "f16")
    return compiler::FloatType::F16;
  if (text == "f32")
    return compiler::FloatType::F32;
  return createStringError(inconvertibleErrorCode(),
                           "--" + flag + "=" + text +
                               " must be bf16, f16 or f32");
}

static int fail(Error error) {
  errs() << "moss-jit compile: error: " << toString(std::move(error)) << "\n";
  return 1;
}

int runCompile() {
  if (op != "gemm")
    return fail(createStringError(inconvertibleErrorCode(),
                                  "--op=" + op + ": only gemm compiles"));
  compiler::GemmSpec spec;
  spec.m = m < 0 ? compiler::GemmSpec::kDynamic : int64_t(m);
  spec.n = n;
  spec.k = k;
  spec.a = aFormat;
  spec.b = bFormat;
  Expected<ScalingScheme> aScaling = makeScheme(aScheme, aBlock, aGlobal);
  if (!aScaling)
    return fail(aScaling.takeError());
  Expected<ScalingScheme> bScaling = makeScheme(bScheme, bBlock, bGlobal);
  if (!bScaling)
    return fail(bScaling.takeError());
  spec.aScaling = *aScaling;
  spec.bScaling = *bScaling;
  spec.out = out;
  if (!bias.empty()) {
    Expected<compiler::FloatType> type = parseFloatType(bias, "bias");
    if (!type)
      return fail(type.takeError());
    spec.bias = *type;
  }
  if (!accumulate.empty()) {
    Expected<compiler::FloatType> type =
        parseFloatType(accumulate, "accumulate");
    if (!type)
      return fail(type.takeError());
    spec.accumulate = *type;
  }
  spec.amax = amax;

  compiler::TargetInfo target;
  target.arch = arch;
  compiler::CompileOptions options;
  std::string stages;
  if (emit == Emit::Mlir)
    options.onStage = [&](StringRef stage, StringRef text) {
      if (stage != compiler::kStageCuda)
        stages += ("// ----- stage: " + stage + "\n" + text + "\n").str();
    };
  Expected<compiler::KernelSource> kernel =
      compiler::compileGemm(spec, target, options);
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
  std::error_code ec;
  raw_fd_ostream os(output, ec,
                    emit == Emit::Cubin ? sys::fs::OF_None : sys::fs::OF_Text);
  if (ec)
    return fail(createStringError(ec, "cannot write '" + output +
                                          "': " + ec.message()));
  os << text;
  if (emit != Emit::Mlir)
    errs() << "kernel " << kernel->kernelName << ": tile "
           << kernel->tiling.tileM << "x" << kernel->tiling.tileN << ", "
           << kernel->tiling.stages << " stages, "
           << kernel->launch.threads << " threads, "
           << kernel->launch.sharedBytes << " bytes of shared memory\n";
  return 0;
}

} // namespace moss::jit
