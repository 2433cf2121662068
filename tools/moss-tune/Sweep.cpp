//===- Sweep.cpp - Compiling and timing candidates on the GPU -------------===//

#include "Sweep.h"

#include "ExpertRouting.h"
#include "GemmCheck.h"
#include "GemmProblem.h"
#include "GroupedGemmProblem.h"

#include "moss/Compiler/Compile.h"
#include "moss/Numerics/Samples.h"
#include "moss/Runtime/Cuda/Driver.h"
#include "moss/Runtime/Cuda/EventTimer.h"

#include "CublasLtBaseline.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/ThreadPool.h"
#include "llvm/Support/Threading.h"

#include <algorithm>
#include <cmath>
#include <mutex>

using namespace llvm;
using namespace moss;
using namespace moss::tune;
using compiler::TileConfig;

std::string tune::getKernelKey(const compiler::GemmSpec &spec,
                               const TileConfig &tiling) {
  return spec.str() + " | " + getShortName(tiling) + " k" +
         std::to_string(tiling.splitK);
}

//===----------------------------------------------------------------------===//
// Compiling
//===----------------------------------------------------------------------===//

CompileSummary tune::compileAll(const std::vector<ShapePlan> &plans,
                                const compiler::TargetInfo &target,
                                runtime::KernelCache &cache, unsigned jobs) {
  struct Job {
    std::string key;
    compiler::GemmSpec spec;
    TileConfig tiling;
  };
  std::vector<Job> work;
  std::map<std::string, bool> seen;
  for (const ShapePlan &plan : plans)
    for (const TileConfig &tiling : plan.candidates.tilings) {
      std::string key = getKernelKey(plan.shape.spec, tiling);
      if (seen.emplace(key, true).second)
        work.push_back({key, plan.shape.spec, tiling});
    }

  CompileSummary summary;
  summary.kernels = int64_t(work.size());
  std::mutex mutex;
  Progress progress("compile", int64_t(work.size()));
  auto compileOne = [&](const Job &job) {
    compiler::CompileOptions options;
    options.tiling = job.tiling;
    std::string failure;
    Expected<compiler::KernelSource> source =
        compiler::compileGemm(job.spec, target, options);
    if (!source) {
      failure = toString(source.takeError());
    } else {
      runtime::CompileOptions nvrtc;
      nvrtc.arch = target.arch;
      Expected<std::shared_ptr<const runtime::KernelEntry>> entry =
          cache.getOrCompile(source->source, nvrtc);
      if (!entry)
        failure = toString(entry.takeError());
    }
    if (!failure.empty()) {
      std::lock_guard<std::mutex> lock(mutex);
      summary.errors[job.key] = failure;
      ++summary.failed;
    }
    progress.advance(1, failure.empty() ? "" : "(a kernel failed)");
  };
  // (hardware_concurrency(0) is every core the process may run on.)
  llvm::DefaultThreadPool pool(llvm::hardware_concurrency(jobs));
  for (const Job &job : work)
    pool.async([&compileOne, &job] { compileOne(job); });
  pool.wait();
  summary.seconds = progress.getElapsedSeconds();
  progress.finish();
  return summary;
}

//===----------------------------------------------------------------------===//
// Operands
//===----------------------------------------------------------------------===//

/// LLM-like activations: `rows` rows, repeating a sample of at most 2048
/// (the values do not change the timing, and drawing them is slow).
static std::vector<float> makeActivations(int64_t rows, int64_t k,
                                          uint64_t seed) {
  int64_t drawn = std::min<int64_t>(rows, 2048);
  std::vector<float> sample = numerics::llmActivationSample(drawn, k, seed);
  if (drawn == rows)
    return sample;
  std::vector<float> out(size_t(rows * k));
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(&sample[size_t((r % drawn) * k)], k, &out[size_t(r * k)]);
  return out;
}

/// Bytes one launch of `m` rows touches: A, B and the output.
static uint64_t workingSet(const compiler::GemmSpec &spec, int64_t m) {
  return uint64_t(m * spec.k + spec.n * spec.k) +
         uint64_t(m * spec.n) * compiler::getByteWidth(spec.out);
}

static int setsFor(const compiler::GemmSpec &spec, int64_t m,
                   uint64_t rotateBytes) {
  uint64_t bytes = std::max<uint64_t>(1, workingSet(spec, m));
  return int(std::clamp<uint64_t>((rotateBytes + bytes - 1) / bytes, 1, 4));
}

SpecTimer::~SpecTimer() = default;

Expected<std::unique_ptr<SpecTimer>>
SpecTimer::create(const std::vector<const ShapePlan *> &plans,
                  GemmRunner &runner, const TimingOptions &options) {
  std::unique_ptr<SpecTimer> timer(new SpecTimer(runner, options));
  const compiler::GemmSpec &spec = plans.front()->shape.spec;
  // Set i holds the largest M of the shapes that rotate over more than i
  // sets (set 0: the largest M of all).
  std::vector<int64_t> rows;
  for (const ShapePlan *plan : plans) {
    if (plan->shape.spec.groups)
      continue; // its operands come with its run
    int sets = setsFor(spec, plan->shape.m, options.rotateBytes);
    if (rows.size() < size_t(sets))
      rows.resize(size_t(sets), 0);
    for (int i = 0; i < sets; ++i)
      rows[size_t(i)] = std::max(rows[size_t(i)], plan->shape.m);
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    std::vector<float> a = makeActivations(rows[i], spec.k, 1 + i);
    std::vector<float> b = numerics::gaussianSample(spec.n, spec.k, 101 + i);
    float scale = 1.0f / std::sqrt(float(spec.k));
    for (float &v : b)
      v *= scale;
    Expected<std::unique_ptr<jit::GemmProblem>> problem =
        jit::GemmProblem::create(spec, rows[i], a, b, 201 + i);
    if (!problem)
      return createStringError(inconvertibleErrorCode(),
                               "preparing the operands of " + spec.str() +
                                   ": " + toString(problem.takeError()));
    timer->sets.push_back(std::move(*problem));
  }
  return std::move(timer);
}

/// The buffers of `problem` for its first `m` rows.
static GemmBuffers getView(const jit::GemmProblem &problem, int64_t m) {
  GemmBuffers buffers = problem.buffers;
  GemmScaleCounts counts = getGemmScaleCounts(problem.spec, m);
  buffers.a.localScaleCount = counts.aLocal;
  buffers.a.globalScaleCount = counts.aGlobal;
  return buffers;
}

static std::string firstLine(StringRef text) {
  return text.split('\n').first.str();
}

//===----------------------------------------------------------------------===//
// Timing
//===----------------------------------------------------------------------===//

Expected<ShapeResult> SpecTimer::run(const ShapePlan &plan,
                                     const CompileSummary &compiled,
                                     Progress &progress) {
  const TuneShape &shape = plan.shape;
  const compiler::GemmSpec &spec = shape.spec;
  const int64_t m = shape.m;
  const compiler::TargetInfo &target = runner.getTarget();
  const runtime::DriverApi &api = *runtime::getDriverApi();
  compiler::TuningKey key = compiler::TuningKey::get(spec, target, m);
  const double flops = 2.0 * double(m) * double(spec.n) * double(spec.k);

  // A plain GEMM's views of the shared sets; an m-grouped one's own
  // operands, its m rows routed to the experts.
  std::vector<GemmBuffers> views;
  std::unique_ptr<jit::GroupedGemmProblem> grouped;
  if (spec.groups) {
    // Each expert's operands are quantized on the host, which takes a while
    // for many large experts: the bar says so.
    progress.advance(0, "preparing the experts' operands for " +
                            shape.getShapeText());
    std::mt19937_64 rng(uint64_t(m) * 131 + uint64_t(spec.groups));
    Expected<std::vector<int64_t>> rows =
        jit::routeTotalRows(spec.groups, m, shape.routing, rng);
    if (!rows)
      return rows.takeError();
    Expected<std::unique_ptr<jit::GroupedGemmProblem>> made =
        jit::GroupedGemmProblem::create(spec, *rows, 301);
    if (!made)
      return createStringError(inconvertibleErrorCode(),
                               "preparing the operands of " +
                                   shape.getShapeText() + " " + spec.str() +
                                   ": " + toString(made.takeError()));
    grouped = std::move(*made);
    views.push_back(grouped->buffers);
    progress.advance(0, shape.getShapeText());
  } else {
    for (const std::unique_ptr<jit::GemmProblem> &set : sets)
      if (set->m >= m &&
          int(views.size()) < setsFor(spec, m, options.rotateBytes))
        views.push_back(getView(*set, m));
  }

  ShapeResult result;
  CandidateRecord base;
  base.shape = key.str() + " M=" + std::to_string(m);
  base.label =
      (shape.name.empty() ? "" : shape.name + " ") + shape.getShapeText();
  base.arch = key.arch;
  base.smCount = key.smCount;
  base.a = key.a;
  base.b = key.b;
  base.out = key.out;
  base.m = m;
  base.n = spec.n;
  base.k = spec.k;

  std::optional<size_t> best;
  for (const TileConfig &tiling : plan.candidates.tilings) {
    CandidateRecord record = base;
    record.tiling = tiling;
    std::vector<std::string> roles;
    if (sameKernel(tiling, plan.candidates.heuristic))
      roles.push_back("heuristic");
    if (sameKernel(tiling, plan.candidates.heuristicAtM))
      roles.push_back("heuristic-m");
    record.roles = join(roles, " ");
    auto finish = [&](StringRef status, const Twine &note) {
      record.status = status.str();
      record.note = firstLine(note.str());
      result.records.push_back(record);
      progress.advance();
    };

    auto failed = compiled.errors.find(getKernelKey(spec, tiling));
    if (failed != compiled.errors.end()) {
      ++result.failed;
      finish("compile-error", failed->second);
      continue;
    }
    GemmOptions given;
    given.tiling = tiling;
    given.tuningDatabase = "";
    given.compileMode = GemmCompileMode::Full;
    Expected<const GemmKernelInfo *> info = runner.prepare(spec, m, given);
    if (!info) {
      ++result.failed;
      finish("compile-error", toString(info.takeError()));
      continue;
    }

    // Verify once, on set 0.
    Error launched =
        grouped ? grouped->poison() : sets.front()->poison(nullptr);
    if (!launched)
      launched = runner.run(spec, m, views.front(), nullptr, given);
    if (!launched)
      launched =
          runtime::checkCuda(api.streamSynchronize(nullptr), "the GEMM kernel");
    if (launched) {
      std::string message = toString(std::move(launched));
      // A sticky error leaves the context unusable: stop here (what was
      // measured is kept).
      if (Error sticky = runtime::checkCuda(api.streamSynchronize(nullptr),
                                            "cuStreamSynchronize"))
        return createStringError(inconvertibleErrorCode(),
                                 "the GPU is unusable after " +
                                     getShortName(tiling) + " on " +
                                     shape.getShapeText() + ": " + message +
                                     "; " + toString(std::move(sticky)));
      ++result.failed;
      finish("launch-error", message);
      continue;
    }
    jit::GemmCheckOptions checkOptions;
    checkOptions.seed = uint64_t(m) * 31 + 7;
    checkOptions.tiling = tiling;
    // What is wrong with the output, if anything.
    std::string wrong;
    if (grouped) {
      Expected<jit::GroupedGemmCheckResult> check =
          grouped->check(checkOptions);
      if (!check)
        return check.takeError();
      if (!check->ok())
        wrong = formatv("{0} of {1} compared entries beyond the accuracy "
                        "contract (worst {2:f2}x its allowance; first expert "
                        "{3}), {4} unwritten, {5} bytes written outside the "
                        "experts' rows",
                        check->bad, check->compared, check->worst,
                        check->firstBadExpert, check->unwritten,
                        check->writtenOutside);
    } else {
      Expected<jit::GemmCheckResult> check =
          jit::checkGemmOutput(*sets.front(), m, checkOptions);
      if (!check)
        return check.takeError();
      if (!check->ok())
        wrong = formatv("{0} of {1} compared entries beyond the accuracy "
                        "contract (worst {2:f2}x its allowance), {3} "
                        "unwritten",
                        check->bad, check->compared, check->worst,
                        check->unwritten);
    }
    if (!wrong.empty()) {
      ++result.wrong;
      finish("wrong", wrong);
      continue;
    }

    // Time, rotating over the input sets.
    size_t turn = 0;
    auto launch = [&]() -> Error {
      return runner.run(spec, m, views[turn++ % views.size()], nullptr, given);
    };
    Expected<std::vector<float>> times = runtime::timeWithEvents(
        launch, options.warmup, options.repeat, nullptr);
    if (!times) {
      std::string message = toString(times.takeError());
      if (Error sticky = runtime::checkCuda(api.streamSynchronize(nullptr),
                                            "cuStreamSynchronize"))
        return createStringError(inconvertibleErrorCode(),
                                 "the GPU is unusable: " + message + "; " +
                                     toString(std::move(sticky)));
      ++result.failed;
      finish("launch-error", message);
      continue;
    }
    record.milliseconds = (*times)[times->size() / 2];
    record.tflops = flops / (record.milliseconds * 1e-3) / 1e12;
    ++result.timed;
    if (!best || record.milliseconds < result.records[*best].milliseconds)
      best = result.records.size();
    finish("ok", "");
  }

  if (options.cublaslt && !spec.groups) {
    CandidateRecord record = base;
    record.kind = "cublaslt";
    bench::CublasLtProblem problem;
    problem.m = int(m);
    problem.n = int(spec.n);
    problem.k = int(spec.k);
    problem.warmup = options.warmup;
    problem.repeat = options.repeat;
    Expected<double> ms = bench::timeCublasLt(
        problem, bench::prepareCublasLtFp8PerTensor(problem));
    if (ms) {
      record.milliseconds = *ms;
      record.tflops = flops / (*ms * 1e-3) / 1e12;
      result.cublasltTflops = record.tflops;
    } else {
      record.status = "unsupported";
      record.note = firstLine(toString(ms.takeError()));
    }
    result.records.push_back(record);
  }

  if (!best)
    return result;
  CandidateRecord &winner = result.records[*best];
  winner.roles = winner.roles.empty() ? "best" : "best " + winner.roles;
  compiler::TuningEntry entry;
  entry.key = key;
  entry.m = m;
  entry.best = {winner.tiling, winner.milliseconds, winner.tflops};
  entry.best.tiling.source = compiler::TilingSource::Database;
  for (const CandidateRecord &record : result.records) {
    if (record.kind != "moss" || record.status != "ok")
      continue;
    compiler::TuningTiming timing{record.tiling, record.milliseconds,
                                  record.tflops};
    if (sameKernel(record.tiling, plan.candidates.heuristic)) {
      entry.heuristic = timing;
      entry.heuristic->tiling.source = compiler::TilingSource::Heuristic;
    }
    if (sameKernel(record.tiling, plan.candidates.heuristicAtM))
      result.heuristicAtM = timing;
  }
  entry.device = options.deviceName;
  entry.date = options.date;
  entry.candidatesTimed = result.timed;
  result.entry = std::move(entry);
  return result;
}
