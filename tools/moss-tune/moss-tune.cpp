//===- moss-tune.cpp - Autotuning sweeps for the GEMM kernels -------------===//
//
// Sweeps tile configurations over the GEMM shapes of a model once per GPU
// type and writes the fastest of each into the tuning database
// (docs/TUNING.md), which the compiler and moss::GemmRunner then read: no
// tuning at run time.
//
//   moss-tune --preset llama7b --out-dir results/       # db, CSV and SVG
//   moss-tune --shape 128x4096x4096 --a-scheme moss:row:32 --b-scheme
//   per-tensor moss-tune --shapes my-model.txt --dry-run           # no GPU
//   needed
//
// The steps: read the shapes; skip those already in the database for this
// GPU (--force re-tunes); enumerate and prune each shape's candidates
// (Candidates.h); compile the distinct kernels in parallel; then per shape
// verify and time every candidate (Sweep.h) and rewrite the database, the
// CSV and the plot, so an interrupted sweep keeps what it measured.
//
//===----------------------------------------------------------------------===//

#include "Candidates.h"
#include "ExpertRouting.h"
#include "Progress.h"
#include "Records.h"
#include "SchemeOptions.h"
#include "Shapes.h"
#include "Sweep.h"
#include "ToolVersion.h"

#include "moss/Compiler/TuningDatabase.h"
#include "moss/Gemm/Gemm.h"
#include "moss/Runtime/Cache/KernelCache.h"
#include "moss/Runtime/Cuda/Device.h"
#include "moss/Runtime/Cuda/Driver.h"
#include "moss/Support/UntrustedInput.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Threading.h"
#include "llvm/Support/raw_ostream.h"

#include <ctime>
#include <map>
#include <set>
#include <thread>

using namespace llvm;
using namespace moss;
using namespace moss::tune;

namespace {

cl::OptionCategory shapeCategory("Shapes");
cl::list<std::string>
    shapeFlags("shape",
               cl::desc("A GEMM MxNxK (repeatable), with the --a-scheme and "
                        "--b-scheme schemes"),
               cl::cat(shapeCategory));
cl::opt<std::string> shapesFile(
    "shapes",
    cl::desc("A file of shapes: lines 'M N K [a-scheme] [b-scheme] "
             "[groups=G] [routing=R]' (# comments) or a JSON list of [M, N, "
             "K, ...] or {\"m\", \"n\", \"k\", \"a\", \"b\", "
             "\"groups\", \"routing\"}"),
    cl::value_desc("file"), cl::cat(shapeCategory));
cl::opt<std::string> preset(
    "preset",
    cl::desc("Built-in shapes: llama7b (QKV 12288x4096, attention out "
             "4096x4096, FFN up 11008x4096, FFN down 4096x11008 at M = 1, "
             "16, 128, 2048, 16384)"),
    cl::cat(shapeCategory));
cl::opt<std::string> aScheme(
    "a-scheme",
    cl::desc("A's scheme: NAME[:OPTION]..., NAME per-tensor, per-row, "
             "per-group, mxfp8 or moss; options tensor|row, a block N or "
             "RxN, e4m3|e5m2 (default: moss:row:32, MOSS forward "
             "activations)"),
    cl::init("moss:row:32"), cl::cat(shapeCategory));
cl::opt<std::string>
    bScheme("b-scheme",
            cl::desc("B's scheme, as --a-scheme (default: per-tensor)"),
            cl::init("per-tensor"), cl::cat(shapeCategory));
cl::opt<int64_t> groups(
    "groups",
    cl::desc("Tune --shape and --preset shapes as contiguous m-grouped GEMMs "
             "of this many experts (a mixture-of-experts layer): M is all "
             "experts' rows, N and K each expert's"),
    cl::init(0), cl::cat(shapeCategory));
cl::opt<std::string> routing(
    "routing",
    cl::desc("With --groups: how the M rows fall to the experts: uniform "
             "(the default), random, skewed (one expert half of all) or "
             "sparse (most experts empty)"),
    cl::init("uniform"), cl::cat(shapeCategory));
cl::opt<compiler::FloatType>
    out("out", cl::desc("Output type"), cl::init(compiler::FloatType::BF16),
        cl::values(clEnumValN(compiler::FloatType::BF16, "bf16", ""),
                   clEnumValN(compiler::FloatType::F16, "f16", ""),
                   clEnumValN(compiler::FloatType::F32, "f32", "")),
        cl::cat(shapeCategory));
cl::opt<compiler::MmaType> mma(
    "mma",
    cl::desc("What the tensor cores multiply, as the runtime's GEMMs ask for "
             "it (default: auto, f16 for f32 outputs); the database keeps "
             "FP8 and f16 kernels apart"),
    cl::init(compiler::MmaType::Auto),
    cl::values(clEnumValN(compiler::MmaType::Auto, "auto", ""),
               clEnumValN(compiler::MmaType::FP8, "fp8", ""),
               clEnumValN(compiler::MmaType::F16, "f16", "")),
    cl::cat(shapeCategory));

cl::opt<std::string> fold(
    "fold",
    cl::desc("Where two-level and MXFP8 operands' block factors go, as the "
             "runtime's GEMMs ask for it: auto (row for bf16/f16 outputs of "
             "at least 1024 rows, else none), none, 128 or row; a fold tunes "
             "the kernel of the folded operands"),
    cl::init("auto"), cl::cat(shapeCategory));

cl::OptionCategory searchCategory(
    "Search (tile_m x tile_n x stages x cluster x raster x swizzle, and "
    "split-K at M up to 128; the kernel has a fixed two consumer "
    "warpgroups)");
cl::opt<unsigned> maxCandidates(
    "max-candidates",
    cl::desc("Candidates per shape after pruning, best-ranked first (the "
             "heuristic's choices always included)"),
    cl::init(32), cl::cat(searchCategory));
cl::opt<unsigned> jobs("jobs",
                       cl::desc("Compile threads (default: hardware threads)"),
                       cl::init(0), cl::cat(searchCategory));
cl::opt<int> repeat("repeat", cl::desc("Timed launches per candidate (median)"),
                    cl::init(20), cl::cat(searchCategory));
cl::opt<int> warmup("warmup", cl::desc("Untimed launches first"), cl::init(3),
                    cl::cat(searchCategory));
cl::opt<bool> force("force",
                    cl::desc("Re-tune shapes the database already has"),
                    cl::cat(searchCategory));
cl::opt<bool> cublaslt("cublaslt",
                       cl::desc("Also time cuBLASLt FP8 per-tensor per shape "
                                "(the line in the plot)"),
                       cl::cat(searchCategory));
cl::opt<bool> dryRun("dry-run",
                     cl::desc("Only enumerate and prune the candidates (no "
                              "GPU); the target comes from --arch, "
                              "--sm-count and --shared-memory-bytes"),
                     cl::cat(searchCategory));
cl::opt<bool> list("list", cl::desc("With --dry-run: print every candidate"),
                   cl::cat(searchCategory));
cl::opt<std::string> arch("arch", cl::desc("--dry-run: the target's arch"),
                          cl::init("sm_90a"), cl::cat(searchCategory));
cl::opt<unsigned> smCount("sm-count", cl::desc("--dry-run: the target's SMs"),
                          cl::init(132), cl::cat(searchCategory));
cl::opt<unsigned>
    sharedMemory("shared-memory-bytes",
                 cl::desc("--dry-run: shared memory per block of the target"),
                 cl::init(232448), cl::cat(searchCategory));

cl::OptionCategory outputCategory("Outputs");
cl::opt<std::string> outDir(
    "out-dir",
    cl::desc("Write tuning.json, candidates.csv and sweep.svg here (unless "
             "--db, --csv, --plot say otherwise)"),
    cl::value_desc("dir"), cl::cat(outputCategory));
cl::opt<std::string>
    dbPath("db",
           cl::desc("The tuning database to update (default: --out-dir's, "
                    "else the runtime's: $MOSS_TUNING_DB, else "
                    "<kernel cache dir>/tuning.json)"),
           cl::value_desc("path"), cl::cat(outputCategory));
cl::opt<std::string> csvPath("csv", cl::desc("CSV of every candidate"),
                             cl::value_desc("path"), cl::cat(outputCategory));
cl::opt<std::string> plotPath("plot",
                              cl::desc("SVG plot: TFLOPS per candidate per "
                                       "shape"),
                              cl::value_desc("path.svg"),
                              cl::cat(outputCategory));
cl::opt<bool> verbose("verbose", cl::desc("Print more"),
                      cl::cat(outputCategory));

int fail(const Twine &message) {
  errs() << "moss-tune: error: " << message << "\n";
  return 1;
}

int fail(Error error) { return fail(toString(std::move(error))); }

std::string utcNow() {
  std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return text;
}

Expected<std::vector<TuneShape>> readShapes() {
  ShapeDefaults defaults;
  Expected<OperandScheme> a = parseScheme(aScheme, "--a-scheme");
  if (!a)
    return a.takeError();
  Expected<OperandScheme> b = parseScheme(bScheme, "--b-scheme");
  if (!b)
    return b.takeError();
  defaults.a = *a;
  defaults.b = *b;
  defaults.out = out;
  defaults.mma = mma;
  Expected<std::optional<numerics::BlockScaleFold>> parsedFold =
      jit::parseGemmFold(fold);
  if (!parsedFold)
    return parsedFold.takeError();
  defaults.fold = *parsedFold;
  if (groups < 0 || groups > 1024)
    return createStringError(inconvertibleErrorCode(),
                             "--groups=" + Twine(int64_t(groups)) +
                                 " is not an expert count from 1 to 1024");
  if (routing.getNumOccurrences() && !groups)
    return createStringError(inconvertibleErrorCode(),
                             "--routing applies only with --groups");
  if (!jit::isTotalRouting(routing))
    return createStringError(inconvertibleErrorCode(),
                             "--routing=" + routing +
                                 " is not uniform, random, skewed or sparse");
  defaults.groups = groups;
  defaults.routing = routing;

  std::vector<TuneShape> shapes;
  if (!preset.empty()) {
    Expected<std::vector<TuneShape>> presetShapes = getPreset(preset, defaults);
    if (!presetShapes)
      return presetShapes.takeError();
    append_range(shapes, *presetShapes);
  }
  if (!shapesFile.empty()) {
    Expected<std::unique_ptr<MemoryBuffer>> buffer = readRegularFile(
        shapesFile, compiler::kMaxDatabaseBytes, "the shapes file");
    if (!buffer)
      return buffer.takeError();
    Expected<std::vector<TuneShape>> fileShapes =
        parseShapesFile((*buffer)->getBuffer(), shapesFile, defaults);
    if (!fileShapes)
      return fileShapes.takeError();
    append_range(shapes, *fileShapes);
  }
  for (const std::string &flag : shapeFlags) {
    Expected<TuneShape> shape = parseShapeFlag(flag, defaults);
    if (!shape)
      return shape.takeError();
    shapes.push_back(std::move(*shape));
  }
  if (shapes.empty())
    return createStringError(inconvertibleErrorCode(),
                             "no shapes: give --preset, --shapes or --shape");
  if (Error e = checkShapes(shapes))
    return std::move(e);
  return shapes;
}

/// The database at `path`: empty when there is none. A file that cannot be
/// read or fails its checks is never moved or changed: the error says so
/// (a dry run only warns and goes on without it).
Expected<compiler::TuningDatabase> loadDatabase(StringRef path) {
  if (!sys::fs::exists(path))
    return compiler::TuningDatabase();
  Expected<compiler::TuningDatabase> loaded =
      compiler::TuningDatabase::load(path);
  if (loaded)
    return std::move(*loaded);
  std::string why = toString(loaded.takeError());
  if (dryRun) {
    errs() << "moss-tune: warning: ignoring the tuning database: " << why
           << " (left as it is)\n";
    return compiler::TuningDatabase();
  }
  return createStringError(
      inconvertibleErrorCode(),
      why + "; the file is left as it is: repair or remove it, or give --db "
            "a new file for the results");
}

void printCounts(raw_ostream &os, const CandidateCounts &c) {
  os << c.space << " in the space, " << c.resources << " over resources, "
     << c.idleSms << " idle SMs, " << c.padding << " padding, " << c.redundant
     << " redundant, " << c.overCap << " over the cap, " << c.kept << " kept";
}

void printPlan(const std::vector<ShapePlan> &plans, size_t skipped,
               const compiler::TargetInfo &target) {
  outs() << "target " << target.arch << ", " << target.smCount << " SMs, "
         << target.sharedMemoryPerBlock
         << " bytes of shared memory per block\n";
  CandidateCounts total;
  std::set<std::string> kernels;
  for (const ShapePlan &plan : plans) {
    const TuneShape &shape = plan.shape;
    outs() << "shape " << shape.getShapeText() << " (" << shape.origin << "): ";
    printCounts(outs(), plan.candidates.counts);
    outs() << "\n";
    if (list) {
      for (const compiler::TileConfig &t : plan.candidates.tilings) {
        outs() << "  " << getShortName(t);
        if (sameKernel(t, plan.candidates.heuristic))
          outs() << "  [heuristic]";
        if (sameKernel(t, plan.candidates.heuristicAtM))
          outs() << "  [heuristic at this M]";
        outs() << "\n";
      }
    }
    total += plan.candidates.counts;
    for (const compiler::TileConfig &t : plan.candidates.tilings)
      kernels.insert(getKernelKey(shape.spec, t));
  }
  outs() << "total: " << plans.size() << " shapes to tune";
  if (skipped)
    outs() << " (" << skipped << " already in the database)";
  outs() << "; ";
  printCounts(outs(), total);
  outs() << "; " << total.pruned() << " pruned, " << kernels.size()
         << " distinct kernels to compile\n";
}

/// The shapes to tune: those the database lacks for `target` (all with
/// --force), each with its candidates. `skipped` counts the others.
Expected<std::vector<ShapePlan>>
planShapes(const std::vector<TuneShape> &shapes,
           const compiler::TuningDatabase &database,
           const compiler::TargetInfo &target, size_t &skipped) {
  std::vector<ShapePlan> plans;
  for (const TuneShape &shape : shapes) {
    compiler::TuningKey key =
        compiler::TuningKey::get(shape.spec, target, shape.m);
    if (!force && database.find(key)) {
      ++skipped;
      if (verbose || dryRun)
        outs() << "skip  " << shape.getShapeText() << ": in the database ("
               << key.str() << "); --force re-tunes it\n";
      continue;
    }
    Expected<ShapeCandidates> candidates =
        enumerateCandidates(shape.spec, shape.m, target, maxCandidates);
    if (!candidates)
      return createStringError(shape.origin + ": " + shape.getShapeText() +
                               ": " + toString(candidates.takeError()));
    plans.push_back({shape, std::move(*candidates)});
  }
  return plans;
}

/// The rows of an earlier `csv` for the shapes not tuned now: a resumed
/// sweep keeps them.
std::vector<CandidateRecord>
keepOtherCsvRows(const std::string &csv, const std::vector<ShapePlan> &plans,
                 const compiler::TargetInfo &target) {
  std::vector<CandidateRecord> records;
  if (csv.empty() || !sys::fs::exists(csv))
    return records;
  std::set<std::string> tunedNow;
  for (const ShapePlan &plan : plans)
    tunedNow.insert(
        compiler::TuningKey::get(plan.shape.spec, target, plan.shape.m).str() +
        " M=" + std::to_string(plan.shape.m));
  Expected<std::vector<CandidateRecord>> old = readCsv(csv);
  if (!old) {
    errs() << "moss-tune: warning: not keeping the old CSV rows: "
           << toString(old.takeError()) << "\n";
    return records;
  }
  for (CandidateRecord &r : *old)
    if (!tunedNow.count(r.shape))
      records.push_back(std::move(r));
  return records;
}

/// Where the sweep writes: the database, the candidates' CSV and the plot
/// ("" for none).
struct SweepOutputs {
  std::string database, csv, plot;
};

/// One tuned shape.
struct SweepRow {
  const ShapePlan *plan;
  ShapeResult result;
};

struct SweepTotals {
  int64_t timed = 0, wrong = 0, failedRuns = 0;
  /// Why the sweep stopped early ("" when it ran to the end).
  std::string stopped;
};

/// Times every plan's candidates, grouped by spec (shared operands), and
/// writes the outputs after each shape. An error is one writing them.
Expected<std::vector<SweepRow>>
timeShapes(const std::vector<ShapePlan> &plans, const CompileSummary &compiled,
           GemmRunner &runner, const TimingOptions &timing,
           const compiler::TargetInfo &target, const SweepOutputs &outputs,
           compiler::TuningDatabase &database,
           std::vector<CandidateRecord> &records, SweepTotals &totals) {
  std::map<std::string, std::vector<const ShapePlan *>> groups;
  std::vector<std::string> order;
  int64_t totalCandidates = 0;
  for (const ShapePlan &plan : plans) {
    std::string spec = plan.shape.spec.str();
    if (!groups.count(spec))
      order.push_back(spec);
    groups[spec].push_back(&plan);
    totalCandidates += int64_t(plan.candidates.tilings.size());
  }
  const std::string title =
      "moss-tune: " + timing.deviceName + " (" + target.arch + ", " +
      std::to_string(target.smCount) + " SMs), " + timing.date;
  std::vector<SweepRow> rows;
  Progress progress("time", totalCandidates);
  for (const std::string &spec : order) {
    std::vector<const ShapePlan *> &group = groups[spec];
    progress.advance(0, "preparing operands for " + spec);
    Expected<std::unique_ptr<SpecTimer>> timer =
        SpecTimer::create(group, runner, timing);
    if (!timer) {
      totals.stopped = toString(timer.takeError());
      return rows;
    }
    for (const ShapePlan *plan : group) {
      progress.advance(0, plan->shape.getShapeText());
      Expected<ShapeResult> result = (*timer)->run(*plan, compiled, progress);
      if (!result) {
        totals.stopped = toString(result.takeError());
        return rows;
      }
      totals.timed += result->timed;
      totals.wrong += result->wrong;
      totals.failedRuns += result->failed;
      append_range(records, result->records);
      if (result->entry)
        database.insert(*result->entry);
      // Merged with what other runs saved meanwhile, under a lock.
      if (Error e = database.saveMerged(outputs.database))
        return std::move(e);
      if (!outputs.csv.empty())
        if (Error e = writeCsv(outputs.csv, records))
          return std::move(e);
      if (!outputs.plot.empty())
        if (Error e = writeSvg(outputs.plot, records, title))
          return std::move(e);
      rows.push_back({plan, std::move(*result)});
    }
  }
  return rows;
}

/// Per shape: the heuristic's TFLOPS (planned for the assumed M, and for
/// this M), the tuned one, the speedup and cuBLASLt's.
void printTable(const std::vector<SweepRow> &rows) {
  outs() << "\n"
         << format("%-22s %10s %10s %10s %8s %10s  %s\n", "shape", "heuristic",
                   "heur.@M", "tuned", "speedup", "cuBLASLt",
                   "tuned tiling (TFLOPS)");
  auto tflops = [](std::optional<double> v) {
    return v ? formatv("{0:f1}", *v).str() : std::string("-");
  };
  for (const SweepRow &row : rows) {
    const ShapeResult &r = row.result;
    std::string label =
        (row.plan->shape.name.empty() ? "" : row.plan->shape.name + " ") +
        row.plan->shape.getShapeText();
    if (!r.entry) {
      outs() << format("%-22s no candidate ran correctly\n", label.c_str());
      continue;
    }
    std::optional<double> heuristic, atM;
    if (r.entry->heuristic)
      heuristic = r.entry->heuristic->tflops;
    if (r.heuristicAtM)
      atM = r.heuristicAtM->tflops;
    std::string speedup =
        heuristic ? formatv("{0:f2}x", r.entry->best.tflops / *heuristic).str()
                  : "-";
    outs() << format("%-22s %10s %10s %10.1f %8s %10s  %s\n", label.c_str(),
                     tflops(heuristic).c_str(), tflops(atM).c_str(),
                     r.entry->best.tflops, speedup.c_str(),
                     tflops(r.cublasltTflops).c_str(),
                     getShortName(r.entry->best.tiling).c_str());
  }
}

/// The timing options of a sweep on `device`.
TimingOptions getTimingOptions(const runtime::Device &device) {
  TimingOptions timing;
  timing.warmup = warmup;
  timing.repeat = repeat;
  timing.cublaslt = cublaslt;
  timing.deviceName = device.getName().str();
  timing.date = utcNow();
  // Operands rotate through twice the L2, so no run reads a warm cache.
  int l2 = 0;
  if (Error e = runtime::checkCuda(
          runtime::getDriverApi()->deviceGetAttribute(
              &l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, device.getHandle()),
          "cuDeviceGetAttribute (L2 size)"))
    consumeError(std::move(e));
  timing.rotateBytes = uint64_t(std::max(l2, 50 << 20)) * 2;
  return timing;
}

} // namespace

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  moss::tools::setVersionPrinter("moss-tune");
  cl::HideUnrelatedOptions({&shapeCategory, &searchCategory, &outputCategory});
  cl::ParseCommandLineOptions(
      argc, argv,
      "moss-tune: autotuning sweeps for the MOSS-JIT GEMM kernels\n\n"
      "Sweeps tile_m x tile_n x stages x cluster (1x1, 2x1, 1x2) x raster x "
      "swizzle per shape, prunes what cannot fit or leaves most SMs idle, "
      "compiles the rest in parallel, verifies and times them on the GPU, "
      "and writes the fastest into the tuning database that the compiler "
      "and the runtime read (docs/TUNING.md). Split-K is searched at M up to "
      "128. The kernel has a fixed two consumer warpgroups.\n");

  Expected<std::vector<TuneShape>> shapes = readShapes();
  if (!shapes)
    return fail(shapes.takeError());
  if (repeat < 1 || warmup < 0)
    return fail("--repeat must be >= 1 and --warmup >= 0");

  // The target: the GPU's, or the flags' for a dry run.
  compiler::TargetInfo target;
  std::optional<runtime::Device> device;
  runtime::KernelCacheOptions cacheOptions;
  cacheOptions.memoryCapacity = 4096;
  runtime::KernelCache cache(cacheOptions);

  // Outputs.
  auto inOutDir = [&](StringRef name) -> std::string {
    if (outDir.empty())
      return "";
    SmallString<256> path(outDir);
    sys::path::append(path, name);
    return std::string(path);
  };
  std::string db = !dbPath.empty()   ? dbPath.getValue()
                   : !outDir.empty() ? inOutDir("tuning.json")
                                     : getDefaultTuningDatabasePath(cache);
  std::string csv =
      !csvPath.empty() ? csvPath.getValue() : inOutDir("candidates.csv");
  std::string plot =
      !plotPath.empty() ? plotPath.getValue() : inOutDir("sweep.svg");
  if (db.empty() && !dryRun)
    return fail("no database path: give --db or --out-dir (there is no "
                "$MOSS_TUNING_DB and no kernel cache directory)");

  // Skip what the database has for this GPU.
  Expected<compiler::TuningDatabase> loaded =
      db.empty() ? compiler::TuningDatabase() : loadDatabase(db);
  if (!loaded)
    return fail(loaded.takeError());
  compiler::TuningDatabase database = std::move(*loaded);

  // The GPU, once every argument and file has been checked.
  std::unique_ptr<GemmRunner> runner;
  if (dryRun) {
    target.arch = arch;
    target.smCount = smCount;
    target.sharedMemoryPerBlock = sharedMemory;
  } else {
    Expected<runtime::Device> opened = runtime::Device::open(0);
    if (!opened)
      return fail("cannot use the GPU: " + toString(opened.takeError()) +
                  "; --dry-run enumerates and prunes the candidates without "
                  "one");
    device = std::move(*opened);
    if (Error e = device->makeCurrent())
      return fail("cannot use the GPU: " + toString(std::move(e)));
    Expected<std::unique_ptr<GemmRunner>> created = GemmRunner::create(cache);
    if (!created)
      return fail("cannot use the GPU: " + toString(created.takeError()));
    runner = std::move(*created);
    target = runner->getTarget();
  }

  size_t skipped = 0;
  Expected<std::vector<ShapePlan>> planned =
      planShapes(*shapes, database, target, skipped);
  if (!planned)
    return fail(planned.takeError());
  const std::vector<ShapePlan> &plans = *planned;
  if (dryRun || verbose)
    printPlan(plans, skipped, target);
  if (dryRun)
    return 0;
  if (plans.empty()) {
    outs() << "nothing to tune: every shape is in '" << db
           << "' for this GPU (--force re-tunes)\n";
    return 0;
  }

  std::vector<CandidateRecord> records = keepOtherCsvRows(csv, plans, target);

  auto start = std::chrono::steady_clock::now();
  // --jobs 0: every core the process may run on (its CPU affinity).
  unsigned threads =
      llvm::hardware_concurrency(unsigned(jobs)).compute_thread_count();
  CompileSummary compiled = compileAll(plans, target, cache, threads);
  outs() << format("compiled %lld distinct kernels in %.1f s with %u threads "
                   "(%.2f kernels/s), %lld failed\n",
                   (long long)compiled.kernels, compiled.seconds, threads,
                   compiled.seconds > 0 ? compiled.kernels / compiled.seconds
                                        : 0.0,
                   (long long)compiled.failed);

  const TimingOptions timing = getTimingOptions(*device);
  SweepTotals totals;
  Expected<std::vector<SweepRow>> rows =
      timeShapes(plans, compiled, *runner, timing, target, {db, csv, plot},
                 database, records, totals);
  if (!rows)
    return fail(rows.takeError());
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();

  printTable(*rows);
  CandidateCounts total;
  for (const ShapePlan &plan : plans)
    total += plan.candidates.counts;
  outs() << format("\nsweep: %zu shapes in %.1f s; %lld candidates pruned, "
                   "%lld compiled (%lld failed), %lld timed, %lld wrong "
                   "(dropped), %lld failed to run\n",
                   rows->size(), seconds, (long long)total.pruned(),
                   (long long)compiled.kernels, (long long)compiled.failed,
                   (long long)totals.timed, (long long)totals.wrong,
                   (long long)totals.failedRuns)
         << "database " << db << "\n";
  if (!csv.empty())
    outs() << "csv      " << csv << "\n";
  if (!plot.empty())
    outs() << "plot     " << plot << "\n";
  if (!totals.stopped.empty())
    return fail("the sweep stopped (what was measured is saved; a re-run "
                "resumes): " +
                totals.stopped);
  return 0;
}
