//===- RunCommand.cpp - moss-jit run --------------------------------------===//
//
// Runs one GEMM on the GPU through moss::GemmRunner and checks it against
// the FP64 reference over the dequantized operands, under the accuracy
// contract (docs/NUMERICS-CONTRACT.md section 7; tools/common/GemmCheck). A and
// B come from .npy files (float32, [M, K] and [N, K]) or are drawn at random
// (LLM-like activations, Gaussian weights); the output can be written as .npy.
// With --groups, an m-grouped GEMM of random operands
// (tools/common/GroupedGemmProblem), each expert held to its own reference
// and the other rows of the output to their poison.
// The exit code is 1 when an entry breaks the contract.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"
#include "GemmCheck.h"
#include "GemmProblem.h"
#include "GemmSpecOptions.h"
#include "GroupedGemmProblem.h"
#include "KGroupedGemmProblem.h"
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

/// Launches a grouped problem (m- or k-grouped) with `extent` (its M, or
/// its K), checks each expert against its reference and prints the verdict;
/// `experts` describes how the rows or tokens fell, `outside` where the
/// output must keep its poison.
template <class Problem>
int launchAndCheck(const compiler::GemmSpec &spec, const GemmOptions &options,
                   const Problem &p, int64_t extent, const Twine &experts,
                   StringRef outside) {
  Expected<std::unique_ptr<GemmRunner>> runner =
      GemmRunner::create(runtime::getDefaultKernelCache());
  if (!runner)
    return fail(runner.takeError());
  Expected<const GemmKernelInfo *> info =
      (*runner)->prepare(spec, extent, options);
  if (!info)
    return fail(info.takeError());
  outs() << "gemm    " << spec.str() << (spec.groupedK ? ", K = " : ", M = ")
         << extent << "\n"
         << "experts " << experts << "\n"
         << "kernel  " << (*info)->kernelName << ": " << (*info)->tiling.str()
         << ((*info)->quickCompile ? " (quick-compile variant)" : "") << "\n"
         << format("compile %.3f s pipeline + %.3f s NVRTC or cache\n",
                   (*info)->pipelineSeconds, (*info)->cacheSeconds);
  if (Error e = p.poison())
    return fail(std::move(e));
  if (Error e = (*runner)->run(spec, extent, p.buffers, nullptr, options))
    return fail(std::move(e));
  if (Error e = runtime::checkCuda(
          runtime::getDriverApi()->streamSynchronize(nullptr),
          "cuStreamSynchronize"))
    return fail(std::move(e));

  GemmCheckOptions checkOptions;
  checkOptions.scanRows = sampleSize == 0 ? ~0u : 128u;
  checkOptions.compareRows = sampleSize == 0 ? ~0u : sampleSize;
  checkOptions.compareCols = sampleSize == 0 ? unsigned(spec.n) : sampleSize;
  checkOptions.seed = seed + 3;
  checkOptions.tiling = (*info)->tiling;
  Expected<GroupedGemmCheckResult> check = p.check(checkOptions);
  if (!check)
    return fail(check.takeError());
  outs() << format("check   %lld entries over the experts: worst at %.3f of "
                   "its allowance; %lld bytes written %s\n",
                   (long long)check->compared, check->worst,
                   (long long)check->writtenOutside, outside.str().c_str());
  if (!check->ok()) {
    errs() << "moss-jit run: FAILED: " << check->bad
           << " compared entries beyond the accuracy contract, "
           << check->unwritten << " entries not written (NaN), "
           << check->writtenOutside << " bytes written " << outside
           << "; first expert " << check->firstBadExpert << "\n";
    return 1;
  }
  outs() << "ok\n";
  return 0;
}

/// moss-jit run --groups.
int runGrouped(const compiler::GemmSpec &spec, const GemmOptions &options) {
  if (!aFile.empty() || !bFile.empty() || !output.empty())
    return fail(createStringError("-a, -b and -o are not options of an "
                                  "m-grouped run: its operands are random"));
  Expected<std::vector<int64_t>> rows = getExpertRows(spec, seed);
  if (!rows)
    return fail(rows.takeError());
  Expected<const runtime::Device &> device = openToolDevice();
  if (!device)
    return fail(device.takeError());
  Expected<std::unique_ptr<GroupedGemmProblem>> problem =
      GroupedGemmProblem::create(spec, *rows, seed + 2);
  if (!problem)
    return fail(problem.takeError());
  const GroupedGemmProblem &p = **problem;
  int64_t used = 0, empty = 0;
  for (int64_t r : p.rows) {
    used += r;
    empty += r == 0;
  }
  return launchAndCheck(
      spec, options, p, p.m,
      Twine(used) + " rows used in all, " +
          Twine(*std::min_element(p.rows.begin(), p.rows.end())) + " to " +
          Twine(*std::max_element(p.rows.begin(), p.rows.end())) +
          " per expert, " + Twine(empty) + " empty",
      "outside the experts' rows");
}

/// moss-jit run --groups --k-grouped.
int runKGrouped(const compiler::GemmSpec &spec, const GemmOptions &options) {
  if (!aFile.empty() || !bFile.empty() || !output.empty())
    return fail(createStringError("-a, -b and -o are not options of a "
                                  "k-grouped run: its operands are random"));
  Expected<std::vector<int64_t>> cols = getExpertColumns(spec, seed);
  if (!cols)
    return fail(cols.takeError());
  Expected<const runtime::Device &> device = openToolDevice();
  if (!device)
    return fail(device.takeError());
  Expected<std::unique_ptr<KGroupedGemmProblem>> problem =
      KGroupedGemmProblem::create(spec, *cols, seed + 2);
  if (!problem)
    return fail(problem.takeError());
  const KGroupedGemmProblem &p = **problem;
  return launchAndCheck(
      spec, options, p, p.k,
      Twine(*std::min_element(p.cols.begin(), p.cols.end())) + " to " +
          Twine(*std::max_element(p.cols.begin(), p.cols.end())) +
          " tokens per expert, " +
          Twine(std::count(p.cols.begin(), p.cols.end(), 0)) + " without any",
      "past the output");
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
  Expected<std::optional<compiler::TileConfig>> tiling =
      getTilingOverride(spec, m);
  if (!tiling)
    return fail(tiling.takeError());
  // What can be checked without the GPU, first.
  if (Error e = checkGemmSpec(spec))
    return fail(std::move(e));
  if (Error e = checkTilingOverride(spec, *tiling))
    return fail(std::move(e));

  if (spec.groups) {
    GemmOptions options{*tiling};
    options.compileMode =
        getQuickCompile() ? GemmCompileMode::Quick : GemmCompileMode::Full;
    return spec.groupedK ? runKGrouped(spec, options)
                         : runGrouped(spec, options);
  }

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
