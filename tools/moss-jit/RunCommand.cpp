//===- RunCommand.cpp - moss-jit run --------------------------------------===//
//
// Runs one GEMM on the GPU through moss::GemmRunner and checks it against
// the FP64 reference over the dequantized operands, under the accuracy
// contract (docs/NUMERICS-CONTRACT.md section 7; tools/common/GemmCheck). A and
// B come from .npy files (float32, [M, K] and [N, K]) or are drawn at random
// (LLM-like activations, Gaussian weights); the output can be written as .npy.
// The exit code is 1 when an entry breaks the contract.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"
#include "GemmCheck.h"
#include "GemmProblem.h"
#include "GemmSpecOptions.h"
#include "ToolDevice.h"

#include "moss/Numerics/Fidelity.h"
#include "moss/Numerics/Samples.h"
#include "moss/Runtime/Cuda/Device.h"
#include "moss/Runtime/Cuda/Driver.h"
#include "moss/Support/AtomicFile.h"
#include "moss/Support/Npy.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

using namespace llvm;
using namespace moss::numerics;

namespace moss::jit {

namespace {
cl::OptionCategory category("run options");
cl::opt<std::string> aFile("a",
                           cl::desc("A as a float32 .npy [M, K] "
                                    "(default: random LLM-like)"),
                           cl::sub(getRunCommand()), cl::cat(category));
cl::opt<std::string> bFile("b",
                           cl::desc("B as a float32 .npy [N, K] "
                                    "(default: random Gaussian)"),
                           cl::sub(getRunCommand()), cl::cat(category));
cl::opt<std::string> output("o", cl::desc("Write D as a float32 .npy"),
                            cl::sub(getRunCommand()), cl::cat(category));
cl::opt<float> beta("beta", cl::desc("Multiplier of C (with --accumulate)"),
                    cl::init(1.0f), cl::sub(getRunCommand()),
                    cl::cat(category));
cl::opt<uint64_t> seed("seed", cl::desc("Seed of the random data"), cl::init(1),
                       cl::sub(getRunCommand()), cl::cat(category));
cl::opt<unsigned>
    sampleSize("check",
               cl::desc("Rows and columns of D compared with the reference "
                        "(a random sample with the first and last; 0: all of "
                        "D)"),
               cl::init(64), cl::sub(getRunCommand()), cl::cat(category));

int fail(Error error) {
  errs() << "moss-jit run: error: " << toString(std::move(error)) << "\n";
  return 1;
}

Expected<std::vector<float>> loadOrDraw(const std::string &file, int64_t rows,
                                        int64_t cols, const char *name,
                                        bool activations) {
  if (file.empty()) {
    if (activations)
      return llmActivationSample(rows, cols, seed);
    std::vector<float> x = gaussianSample(rows, cols, seed + 1);
    float scale = 1.0f / std::sqrt(float(cols));
    for (float &v : x)
      v *= scale;
    return x;
  }
  Expected<NpyMatrix> matrix = readNpyMatrix(file);
  if (!matrix)
    return matrix.takeError();
  if (matrix->rows != rows || matrix->cols != cols)
    return createStringError(inconvertibleErrorCode(),
                             Twine(name) + " in '" + file + "' is [" +
                                 Twine(matrix->rows) + ", " +
                                 Twine(matrix->cols) + "]; the GEMM needs [" +
                                 Twine(rows) + ", " + Twine(cols) + "]");
  return std::move(matrix->data);
}

} // namespace

int runRun() {
  Expected<compiler::GemmSpec> parsed = getGemmSpec(/*mIsLaunchRows=*/true);
  if (!parsed)
    return fail(parsed.takeError());
  compiler::GemmSpec spec = *parsed;
  if (spec.accumulate)
    spec.beta = beta;
  const int64_t m = getLaunchRows();
  Expected<std::optional<compiler::TileConfig>> tiling = getTilingOverride();
  if (!tiling)
    return fail(tiling.takeError());
  // What can be checked without the GPU, first.
  if (Error e = checkGemmSpec(spec))
    return fail(std::move(e));
  if (Error e = checkTilingOverride(spec, *tiling))
    return fail(std::move(e));

  Expected<const runtime::Device &> device = openToolDevice();
  if (!device)
    return fail(device.takeError());
  Expected<std::vector<float>> a = loadOrDraw(aFile, m, spec.k, "A", true);
  if (!a)
    return fail(a.takeError());
  Expected<std::vector<float>> b =
      loadOrDraw(bFile, spec.n, spec.k, "B", false);
  if (!b)
    return fail(b.takeError());
  Expected<std::unique_ptr<GemmProblem>> problem =
      GemmProblem::create(spec, m, *a, *b, seed + 2);
  if (!problem)
    return fail(problem.takeError());
  Expected<std::unique_ptr<GemmRunner>> runner =
      GemmRunner::create(runtime::getDefaultKernelCache());
  if (!runner)
    return fail(runner.takeError());
  // The full kernel, or with --quick-compile its quick variant: what a
  // tiered first call launches until the full one is ready.
  GemmOptions options{*tiling};
  options.compileMode =
      getQuickCompile() ? GemmCompileMode::Quick : GemmCompileMode::Full;
  Expected<const GemmKernelInfo *> info = (*runner)->prepare(spec, m, options);
  if (!info)
    return fail(info.takeError());
  outs() << "gemm    " << spec.str() << ", M = " << m << "\n"
         << "kernel  " << (*info)->kernelName << ": " << (*info)->tiling.str()
         << ((*info)->quickCompile ? " (quick-compile variant)" : "") << "\n"
         << format("compile %.3f s pipeline + %.3f s NVRTC or cache\n",
                   (*info)->pipelineSeconds, (*info)->cacheSeconds);

  GemmCheckOptions checkOptions;
  checkOptions.scanRows = sampleSize == 0 ? unsigned(m) : 128u;
  checkOptions.compareRows = sampleSize == 0 ? unsigned(m) : sampleSize;
  checkOptions.compareCols = sampleSize == 0 ? unsigned(spec.n) : sampleSize;
  checkOptions.seed = seed + 3;
  checkOptions.tiling = (*info)->tiling;
  Expected<GemmCheckResult> check =
      runAndCheckGemm(**runner, spec, m, **problem, options, checkOptions);
  if (!check)
    return fail(check.takeError());
  const int64_t interval = getPromotionInterval(spec);
  const std::string basis =
      check->againstModel ? std::string("against the tensor-core model")
      : spec.multipliesInF16()
          ? std::string("against FP64, f16 MMA: exact products, FP32 sums")
          : formatv("against FP64, tensor-core sums of {0} products, "
                    "u = {1:e2}",
                    interval, tensorCoreUnit(interval))
                .str();
  outs() << format("check   %lld entries: relative Frobenius error %.3e; "
                   "worst entry at %.3f of its allowance (%s)\n",
                   (long long)check->compared, check->relFrobenius,
                   check->worst, basis.c_str());

  // The whole output, for amax and -o.
  Expected<std::vector<float>> d = (*problem)->downloadOutput();
  if (!d)
    return fail(d.takeError());
  float largest = 0;
  int64_t unwritten = 0;
  for (float v : *d) {
    if (std::isnan(v))
      ++unwritten;
    else
      largest = std::max(largest, std::fabs(v));
  }
  Expected<float> amax = (*problem)->downloadAmax();
  if (!amax)
    return fail(amax.takeError());
  if (spec.amax)
    outs() << format("amax    %g (largest stored |D|: %g)\n", *amax, largest);

  if (!output.empty()) {
    std::vector<char> bytes = serializeNpy({m, spec.n}, *d);
    if (Error e = writeFileAtomically(output, bytes))
      return fail(std::move(e));
    outs() << "wrote   " << output << "\n";
  }
  bool amaxOk = !spec.amax || *amax == largest;
  if (check->bad || unwritten || !amaxOk) {
    errs() << "moss-jit run: FAILED: " << check->bad
           << " compared entries beyond the accuracy contract, " << unwritten
           << " entries not written (NaN)";
    if (!amaxOk)
      errs() << ", amax differs from the largest stored value";
    errs() << "\n";
    return 1;
  }
  outs() << "ok\n";
  return 0;
}

} // namespace moss::jit
