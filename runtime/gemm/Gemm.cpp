//===- Gemm.cpp - Block-scaled FP8 GEMMs on the GPU -----------------------===//
//
// The one place (with moss-jit) where the compiler and the runtime meet: a
// GemmSpec is planned once per spec and M bucket (compiler::planGemm), its
// plan's kernel is written by compiler::generateGemmSource (the text the
// moss.gemm pipeline emits, without building IR: docs/ARCHITECTURE.md),
// compiled through the kernel cache to a cubin, and launched with the tensor
// maps and arguments of docs/GEMM-KERNEL-ABI.md. The launch geometry comes
// from the templates' own host-side plan (moss/gemm/config.cuh), the same
// formulas the kernel is compiled with. The checks live in GemmChecks.cpp,
// the workspaces in GemmWorkspaces.cpp, the tuning database files in
// TuningDatabaseFiles.cpp.
//
//===----------------------------------------------------------------------===//

#include "moss/Gemm/Gemm.h"

#include "GemmChecks.h"
#include "GemmWorkspaces.h"
#include "TemplatePlan.h"
#include "TuningDatabaseFiles.h"

#include "moss/Compiler/Compile.h"
#include "moss/Compiler/GemmPlan.h"
#include "moss/Compiler/GemmSource.h"
#include "moss/Compiler/TuningDatabase.h"
#include "moss/Runtime/Api/Folder.h"
#include "moss/Runtime/Api/RuntimeError.h"
#include "moss/Runtime/Cuda/Device.h"
#include "moss/Runtime/Cuda/Driver.h"
#include "moss/Runtime/Cuda/Module.h"
#include "moss/Runtime/Cuda/TensorMaps.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>

using namespace llvm;
using namespace moss;
using compiler::FloatType;
using compiler::GemmPlan;
using compiler::GemmSpec;
using numerics::ScalingScheme;

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

size_t GemmRunner::KeyHash::operator()(const Key &key) const {
  uint64_t h = 0x9E3779B97F4A7C15ull;
  for (int64_t word : key.words)
    h = (h ^ uint64_t(word)) * 0xBF58476D1CE4E5B9ull;
  return size_t(h ^ (h >> 31));
}

/// Packs an operand's format and scheme into 24 bits.
static uint64_t packOperand(numerics::Fp8Format format,
                            const ScalingScheme &s) {
  return uint64_t(format) | uint64_t(s.kind) << 1 |
         uint64_t(s.globalPerRow()) << 4 | uint64_t(s.blockRows & 0xFF) << 8 |
         uint64_t(s.blockCols & 0xFF) << 16;
}

static uint64_t packType(std::optional<FloatType> type) {
  return type ? uint64_t(*type) + 1 : 0;
}

/// The words of a checked spec that change its kernel (block sizes < 256,
/// N and K < 2^31; M only when static, K only when static; not beta, a
/// launch argument, nor the fold, which planGemm resolves per launch).
static void packSpec(const GemmSpec &spec, GemmRunner::Key &key) {
  key.words[0] = spec.m;
  key.words[1] = spec.n << 32 | uint32_t(spec.k);
  key.words[2] =
      int64_t(packOperand(spec.a, spec.aScaling) |
              packOperand(spec.b, spec.bScaling) << 24 |
              uint64_t(spec.out) << 48 | packType(spec.bias) << 50 |
              packType(spec.accumulate) << 52 | uint64_t(spec.amax) << 54 |
              uint64_t(spec.promoteK >> 5) << 55 | // 0, 1, 2 or 4
              uint64_t(spec.multipliesInF16()) << 59 |
              uint64_t(spec.kernelFoldsA) << 60);
}

static int64_t packTiling(const compiler::TileConfig &t) {
  return int64_t(1 | uint64_t(t.tileM) << 1 | uint64_t(t.tileN) << 10 |
                 uint64_t(t.stages) << 19 | uint64_t(t.clusterM) << 24 |
                 uint64_t(t.clusterN) << 27 | uint64_t(t.raster) << 30 |
                 uint64_t(t.swizzle) << 31 | uint64_t(t.splitK) << 40 |
                 uint64_t(t.source ? int(*t.source) + 1 : 0) << 48);
}

/// The key of a compiled kernel: the plan's kernel spec, tiling and
/// variant.
static GemmRunner::Key makeKernelKey(const GemmPlan &plan) {
  GemmRunner::Key key;
  packSpec(plan.kernel, key);
  key.words[3] = packTiling(plan.tiling);
  key.words[4] = plan.quickCompile;
  key.words[5] = plan.kernel.groups | int64_t(plan.kernel.maskedGroups) << 32 |
                 int64_t(plan.kernel.groupedK) << 33;
  return key;
}

/// The key of the plan of an m-row launch of `spec`: everything planGemm
/// reads that can differ between calls. The fold at m (a dynamic M folds by
/// default from kMinRowsToFold rows) and the M bucket (the database may
/// hold a tiling per bucket; the heuristic plans for the first launch's M
/// in it), which database, and the options that change the plan.
static GemmRunner::Key makePlanKey(const GemmSpec &spec, int64_t m,
                                   const GemmOptions &options) {
  GemmRunner::Key key;
  packSpec(spec, key);
  uint64_t bucket = Log2_64(
      uint64_t(compiler::getTuningBucket(compiler::getTuningM(spec, m))));
  // The database: the default (0), none (1) or a path given (2, hashed).
  uint64_t database = 0;
  if (const std::optional<std::string> &path = options.tuningDatabase)
    database =
        path->empty() ? 1 : 2 | uint64_t(std::hash<std::string>()(*path)) << 2;
  key.words[3] =
      int64_t(uint64_t(spec.getFold(m)) | bucket << 2 |
              uint64_t(options.foldAInKernel) << 8 |
              uint64_t(options.compileMode == GemmCompileMode::Quick) << 9 |
              database << 10);
  key.words[4] = options.tiling ? packTiling(*options.tiling) : 0;
  key.words[5] = spec.groups | int64_t(spec.maskedGroups) << 32 |
                 int64_t(spec.groupedK) << 33;
  return key;
}

namespace {
/// A background compile of a tiered compile's full kernel.
struct FullCompile {
  std::shared_ptr<const runtime::KernelEntry> entry;
  std::string error;
  double seconds = 0;
};
} // namespace

/// A loaded kernel and the tensor maps of its last launch.
struct GemmRunner::Kernel {
  GemmKernelInfo info;
  std::shared_ptr<const runtime::KernelEntry> entry;
  CUfunction function = nullptr;
  detail::TemplatePlan plan;
  /// While `function` is the quick-compile variant of a tiered compile: the
  /// full kernel's source and its compile (whose future's destructor waits
  /// for it, so the thread never outlives the runner and its cache).
  std::optional<compiler::KernelSource> fullSource;
  std::future<FullCompile> fullCompile;
  /// The maps are reused while their pointer and row count are the same
  /// (mapD is all zeros, unused, unless plan.usesTmaD).
  CUtensorMap mapA, mapB, mapD;
  CUdeviceptr mapACodes = 0, mapBCodes = 0, mapDPointer = 0;
  int64_t mapARows = -1, mapDRows = -1;
  /// K of A's and B's maps (a k-grouped GEMM's changes per launch).
  int64_t mapK = -1;
  /// Thread blocks that run at once: the SMs, or for clusters the clusters
  /// that fit at once times their size (the persistent grid's limit).
  int slots = 0;
};

GemmRunner::GemmRunner(runtime::KernelCache &cache, compiler::TargetInfo target)
    : cache(cache), target(std::move(target)),
      tuningFiles(std::make_unique<detail::TuningDatabaseFiles>()),
      workspaces(std::make_unique<Workspaces>()),
      folder(std::make_unique<runtime::GpuFolder>(cache,
                                                  int(this->target.smCount))),
      foldWorkspaces(std::make_unique<Workspaces>()) {}

GemmRunner::~GemmRunner() = default;

std::unique_ptr<GemmRunner>
GemmRunner::createForTarget(runtime::KernelCache &cache,
                            compiler::TargetInfo target) {
  return std::unique_ptr<GemmRunner>(new GemmRunner(cache, std::move(target)));
}

Expected<std::unique_ptr<GemmRunner>>
GemmRunner::create(runtime::KernelCache &cache) {
  Expected<runtime::DeviceProperties> device =
      runtime::queryCurrentDeviceProperties();
  if (!device)
    return device.takeError();
  if (device->ccMajor != 9)
    return runtime::invalidArgument(
        "the GEMM kernels need a Hopper GPU (sm_90a); this one "
        "is compute capability " +
        Twine(device->ccMajor) + "." + Twine(device->ccMinor));
  compiler::TargetInfo target;
  target.smCount = unsigned(device->smCount);
  target.sharedMemoryPerBlock = unsigned(device->maxSharedOptin);
  target.arch = device->arch;
  return std::unique_ptr<GemmRunner>(new GemmRunner(cache, std::move(target)));
}

/// A plan and the kernel that runs it.
struct GemmRunner::Planned {
  GemmPlan plan;
  Kernel *kernel = nullptr;
};

static bool isVerbose(const GemmOptions &options) {
  if (options.verbose)
    return true;
  const char *env = std::getenv("MOSS_VERBOSE");
  return env && *env && StringRef(env) != "0";
}

Expected<std::pair<GemmPlan, std::string>>
GemmRunner::makePlan(const GemmSpec &spec, int64_t m,
                     const GemmOptions &options) {
  compiler::GemmPlanOptions planOptions;
  planOptions.rows = m;
  planOptions.tiling = options.tiling;
  planOptions.foldAInKernel = options.foldAInKernel;
  planOptions.quickCompile = options.compileMode == GemmCompileMode::Quick;
  std::string path;
  std::shared_ptr<const compiler::TuningDatabase> database;
  const bool verbose = isVerbose(options);
  if (!options.tiling) {
    path = options.tuningDatabase ? *options.tuningDatabase
                                  : getDefaultTuningDatabasePath(cache);
    if (!path.empty())
      database = tuningFiles->get(path, spec, verbose);
  }
  planOptions.database = database.get();
  auto note = [&](const Twine &text) {
    if (verbose)
      errs() << "moss: note: " << path << ": " << text << "\n";
  };
  planOptions.onNote = note;
  Expected<GemmPlan> plan = compiler::planGemm(spec, target, planOptions);
  if (!plan)
    return plan.takeError();
  return std::pair{std::move(*plan), std::move(path)};
}

Expected<GemmRunner::Planned *>
GemmRunner::getPlanned(const GemmSpec &spec, int64_t m,
                       const GemmOptions &options) {
  Key key = makePlanKey(spec, m, options);
  if (auto it = plans.find(key); it != plans.end())
    return it->second.get();
  // First time for this spec, fold and M bucket.
  Expected<std::pair<GemmPlan, std::string>> plan = makePlan(spec, m, options);
  if (!plan)
    return plan.takeError();
  Expected<Kernel *> kernel =
      compileKernel(plan->first, plan->second, options.compileMode);
  if (!kernel)
    return kernel.takeError();
  auto planned = std::make_unique<Planned>();
  planned->plan = std::move(plan->first);
  planned->kernel = *kernel;
  return (plans[key] = std::move(planned)).get();
}

/// The fold pass of one operand of an m-row launch of `plan`, or none.
static std::optional<runtime::FoldSpec>
getFoldSpec(const GemmPlan &plan, bool operandB, int64_t m) {
  if (!(operandB ? plan.passFoldsB : plan.passFoldsA))
    return std::nullopt;
  const GemmSpec &spec = plan.asked;
  runtime::FoldSpec fold;
  fold.rows = operandB ? getGemmRowsB(spec) : m;
  fold.cols = spec.k;
  fold.format = operandB ? spec.b : spec.a;
  fold.scheme = operandB ? spec.bScaling : spec.aScaling;
  fold.fold = plan.fold;
  return fold;
}

Expected<GemmPlan> GemmRunner::getPlan(const GemmSpec &spec, int64_t m,
                                       const GemmOptions &options) {
  // The checks of a launch of m rows, buffers aside.
  if (Error e = detail::checkGemmRows(spec, m))
    return std::move(e);
  Expected<std::pair<GemmPlan, std::string>> plan = makePlan(spec, m, options);
  if (!plan)
    return plan.takeError();
  return std::move(plan->first);
}

Expected<compiler::KernelSource>
GemmRunner::getSource(const GemmSpec &spec, int64_t m,
                      const GemmOptions &options) {
  Expected<GemmPlan> plan = getPlan(spec, m, options);
  if (!plan)
    return plan.takeError();
  return compiler::generateGemmSource(*plan, target);
}

/// The kernel of `plan` built into `cache` (or found there).
static Expected<GemmRunner::BuiltKernel>
buildPlanned(runtime::KernelCache &cache, const GemmPlan &plan,
             const compiler::TargetInfo &target) {
  compiler::KernelSource source = compiler::generateGemmSource(plan, target);
  runtime::CompileOptions nvrtc;
  nvrtc.arch = target.arch;
  Expected<std::shared_ptr<const runtime::KernelEntry>> entry =
      cache.getOrCompile(source.source, nvrtc);
  if (!entry)
    return entry.takeError();
  return GemmRunner::BuiltKernel{std::move(source), std::move(*entry)};
}

Expected<GemmRunner::BuiltKernel>
GemmRunner::build(const GemmSpec &spec, int64_t m,
                  const GemmOptions &options) {
  Expected<GemmPlan> plan = getPlan(spec, m, options);
  if (!plan)
    return plan.takeError();
  return buildPlanned(cache, *plan, target);
}

Expected<unsigned> GemmRunner::warm(const GemmSpec &spec, int64_t m,
                                    const GemmOptions &options) {
  uint64_t compilesBefore = cache.stats().compiles;
  Expected<GemmPlan> plan = getPlan(spec, m, options);
  if (!plan)
    return plan.takeError();
  if (Error e = buildPlanned(cache, *plan, target).takeError())
    return std::move(e);
  for (bool operandB : {false, true})
    if (std::optional<runtime::FoldSpec> fold = getFoldSpec(*plan, operandB, m))
      if (Error e = runtime::compileFoldKernel(cache, *fold).takeError())
        return std::move(e);
  return unsigned(cache.stats().compiles - compilesBefore);
}

/// `mode`, except that $MOSS_TIERED_COMPILE=0 turns Tiered into Full (no
/// background thread). Tiered and Full kernels share their keys.
static GemmCompileMode resolveCompileMode(GemmCompileMode mode) {
  const char *env = std::getenv("MOSS_TIERED_COMPILE");
  return mode == GemmCompileMode::Tiered && env && StringRef(env) == "0"
             ? GemmCompileMode::Full
             : mode;
}

Expected<GemmRunner::Kernel *>
GemmRunner::compileKernel(const GemmPlan &plan, const std::string &database,
                          GemmCompileMode mode) {
  Key key = makeKernelKey(plan);
  if (auto it = kernels.find(key); it != kernels.end())
    return it->second.get();
  mode = resolveCompileMode(mode);

  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  std::optional<compiler::KernelSource> source =
      compiler::generateGemmSource(plan, target);
  runtime::CompileOptions nvrtc;
  nvrtc.arch = target.arch;

  // A tiered compile starts with the quick variant when the full kernel is
  // not cached and the variant differs from it (kernels that promote;
  // docs/COMPILER.md).
  std::optional<compiler::KernelSource> quick;
  if (mode == GemmCompileMode::Tiered) {
    Expected<std::shared_ptr<const runtime::KernelEntry>> cached =
        cache.find(source->source, nvrtc);
    if (!cached)
      return cached.takeError();
    if (!*cached) {
      Expected<GemmPlan> quickPlan =
          compiler::getQuickCompilePlan(plan, target);
      if (!quickPlan)
        return quickPlan.takeError();
      std::optional<compiler::KernelSource> variant =
          compiler::generateGemmSource(*quickPlan, target);
      Expected<detail::TemplatePlan> fullGeometry =
          detail::planFromTemplates(*source);
      Expected<detail::TemplatePlan> quickGeometry =
          detail::planFromTemplates(*variant);
      if (!fullGeometry)
        return fullGeometry.takeError();
      if (!quickGeometry)
        return quickGeometry.takeError();
      if (quickGeometry->groupBlocks != fullGeometry->groupBlocks ||
          variant->tiling != source->tiling)
        quick = std::move(*variant);
    }
  }
  const compiler::KernelSource &first = quick ? *quick : *source;
  auto t1 = Clock::now();
  Expected<std::shared_ptr<const runtime::KernelEntry>> entry =
      cache.getOrCompile(first.source, nvrtc);
  if (!entry)
    return entry.takeError();

  auto kernel = std::make_unique<Kernel>();
  std::memset(&kernel->mapD, 0, sizeof(kernel->mapD));
  if (Error e = loadKernel(*kernel, first, std::move(*entry)))
    return std::move(e);
  GemmKernelInfo &info = kernel->info;
  info.tuningDatabase = database;
  info.quickCompile = first.quickCompile;
  info.pipelineSeconds = std::chrono::duration<double>(t1 - t0).count();
  info.cacheSeconds = std::chrono::duration<double>(Clock::now() - t1).count();
  if (quick) {
    // NVRTC and the disk cache only: the module is loaded on the caller's
    // thread, in its context, when the runner switches (switchToFullKernel).
    info.fullCompilePending = true;
    kernel->fullSource = std::move(*source);
    kernel->fullCompile = std::async(
        std::launch::async,
        [&cache = cache, text = kernel->fullSource->source, nvrtc] {
          auto start = Clock::now();
          Expected<std::shared_ptr<const runtime::KernelEntry>> compiled =
              cache.getOrCompile(text, nvrtc);
          FullCompile result;
          if (compiled)
            result.entry = std::move(*compiled);
          else
            result.error = toString(compiled.takeError());
          result.seconds =
              std::chrono::duration<double>(Clock::now() - start).count();
          return result;
        });
  }
  return (kernels[key] = std::move(kernel)).get();
}

/// Loads `entry`, the cubin of `source`, as `kernel`'s function and fills in
/// its plan, persistent grid limit and info (all but the timings).
Error GemmRunner::loadKernel(
    Kernel &kernel, const compiler::KernelSource &source,
    std::shared_ptr<const runtime::KernelEntry> entry) {
  Expected<CUfunction> function = entry->getFunction(source.kernelName);
  if (!function)
    return function.takeError();
  Expected<detail::TemplatePlan> plan = detail::planFromTemplates(source);
  if (!plan)
    return plan.takeError();
  if (Error e = runtime::setSharedMemoryLimit(*function, plan->sharedBytes))
    return e;
  runtime::LaunchConfig config;
  config.block[0] = plan->threads;
  config.cluster[0] = plan->clusterSize;
  config.sharedMemoryBytes = plan->sharedBytes;
  Expected<int> slots =
      runtime::getPersistentSlots(*function, config, int(target.smCount));
  if (!slots)
    return slots.takeError();
  kernel.entry = std::move(entry);
  kernel.function = *function;
  kernel.plan = *plan;
  kernel.slots = *slots;
  GemmKernelInfo &info = kernel.info;
  info.kernelName = source.kernelName;
  info.tiling = source.tiling;
  info.threads = plan->threads;
  info.sharedBytes = plan->sharedBytes;
  info.clusterSize = plan->clusterSize;
  return Error::success();
}

/// Switches a tiered compile's kernel to the full one once its background
/// compile is done, or waits for it (`wait`). If that compile failed, the
/// quick variant (the same arithmetic) stays, with a warning.
Error GemmRunner::switchToFullKernel(Kernel &kernel, bool wait) {
  if (!kernel.fullCompile.valid() ||
      (!wait && kernel.fullCompile.wait_for(std::chrono::seconds(0)) !=
                    std::future_status::ready))
    return Error::success();
  FullCompile done = kernel.fullCompile.get();
  compiler::KernelSource source = std::move(*kernel.fullSource);
  kernel.fullSource.reset();
  kernel.info.fullCompilePending = false;
  if (!done.entry) {
    errs() << "moss: warning: keeping the quick-compile kernel "
           << kernel.info.kernelName
           << ": its full kernel failed to compile: " << done.error << "\n";
    return Error::success();
  }
  // The variant's tiles may be narrower: the next launch encodes the
  // tensor maps for the full kernel's boxes.
  if (Error e = loadKernel(kernel, source, std::move(done.entry)))
    return e;
  kernel.mapACodes = kernel.mapBCodes = kernel.mapDPointer = 0;
  kernel.info.quickCompile = false;
  kernel.info.fullCompileSeconds = done.seconds;
  return Error::success();
}

Expected<GemmBuffers> GemmRunner::foldOperands(const GemmPlan &plan, int64_t m,
                                               const GemmBuffers &buffers,
                                               CUstream stream) {
  std::optional<runtime::FoldSpec> folds[2] = {getFoldSpec(plan, false, m),
                                               getFoldSpec(plan, true, m)};
  if (!folds[0] && !folds[1])
    return buffers;
  // Codes, then factors, of each folded operand, 256-byte aligned.
  size_t offsets[2][2] = {}, bytes = 0;
  for (int i = 0; i < 2; ++i)
    if (folds[i]) {
      offsets[i][0] = bytes;
      bytes += alignTo(size_t(folds[i]->rows * folds[i]->cols), 256);
      offsets[i][1] = bytes;
      bytes += alignTo(size_t(runtime::getFoldFactorCount(*folds[i])) * 4, 256);
    }
  Expected<const runtime::DriverApi &> api = runtime::getDriverApi();
  if (!api)
    return api.takeError();
  Expected<CUdeviceptr> workspace =
      foldWorkspaces->get(*api, stream, bytes, /*counterBytes=*/0);
  if (!workspace)
    return workspace.takeError();
  GemmBuffers folded = buffers;
  for (int i = 0; i < 2; ++i) {
    if (!folds[i])
      continue;
    const GemmOperand &given = i ? buffers.b : buffers.a;
    runtime::FoldBuffers fb;
    fb.codes = given.codes;
    fb.e8m0 = given.localScales;
    fb.global = given.globalScales;
    fb.outCodes = *workspace + offsets[i][0];
    fb.outFactors = *workspace + offsets[i][1];
    if (Error e = folder->fold(*folds[i], fb, stream))
      return std::move(e);
    GemmOperand &operand = i ? folded.b : folded.a;
    operand = GemmOperand();
    operand.codes = fb.outCodes;
    int64_t count = runtime::getFoldFactorCount(*folds[i]);
    if (folds[i]->fold == numerics::BlockScaleFold::Row) {
      operand.globalScales = fb.outFactors;
      operand.globalScaleCount = count;
    } else {
      operand.localScales = fb.outFactors;
      operand.localScaleCount = count;
    }
  }
  return folded;
}

Expected<const GemmKernelInfo *>
GemmRunner::prepare(const GemmSpec &spec, int64_t m,
                    const GemmOptions &options) {
  if (Error e = checkGemmSpec(spec))
    return std::move(e);
  Expected<Planned *> planned = getPlanned(spec, m, options);
  if (!planned)
    return planned.takeError();
  for (bool operandB : {false, true})
    if (std::optional<runtime::FoldSpec> fold = getFoldSpec(
            (*planned)->plan, operandB, std::max<int64_t>(m, 1)))
      if (Error e = folder->prepare(*fold))
        return std::move(e);
  Kernel &kernel = *(*planned)->kernel;
  if (Error e = switchToFullKernel(kernel, options.compileMode ==
                                               GemmCompileMode::Full))
    return std::move(e);
  return &kernel.info;
}

Expected<const GemmKernelInfo *>
GemmRunner::prepare(const GemmSpec &spec, const GemmOptions &options) {
  // A k-grouped GEMM's plan is the same at every K (its launch extent).
  return prepare(spec,
                 spec.groupedK ? 0
                               : compiler::getTuningM(
                                     spec, compiler::TilingOptions().assumedM),
                 options);
}

Error GemmRunner::run(const GemmSpec &asked, int64_t m,
                      const GemmBuffers &given, CUstream stream,
                      const GemmOptions &options) {
  if (Error e = checkGemmLaunch(asked, m, given))
    return e;
  return launchChecked(asked, m, given, stream, options);
}

Error GemmRunner::launchChecked(const GemmSpec &asked, int64_t m,
                                const GemmBuffers &given, CUstream stream,
                                const GemmOptions &options) {
  Expected<Planned *> planned = getPlanned(asked, m, options);
  if (!planned)
    return planned.takeError();
  const GemmPlan &plan = (*planned)->plan;
  Kernel &kernel = *(*planned)->kernel;
  if (Error e = switchToFullKernel(kernel, options.compileMode ==
                                               GemmCompileMode::Full))
    return e;
  // From here on, the GEMM the kernel computes (folded operands, if any).
  // A k-grouped launch gives K (`m`), and its M is the spec's.
  const GemmSpec &spec = plan.kernel;
  const int64_t k = spec.groupedK ? m : spec.k;
  // With K = 0 every expert has no stages and no map is read, but a map
  // needs a size of at least 1.
  const int64_t mapK = std::max<int64_t>(k, 128);
  if (spec.groupedK)
    m = spec.m;
  if (m == 0)
    return Error::success();
  GemmBuffers buffers = given;
  if (plan.passFoldsA || plan.passFoldsB) {
    Expected<GemmBuffers> folded = foldOperands(plan, m, given, stream);
    if (!folded)
      return folded.takeError();
    buffers = *folded;
  }

  Expected<const runtime::DriverApi &> api = runtime::getDriverApi();
  if (!api)
    return api.takeError();
  const bool newK = kernel.mapK != mapK;
  kernel.mapK = mapK;
  if (kernel.mapACodes != buffers.a.codes || kernel.mapARows != m || newK) {
    kernel.mapACodes = 0;
    if (Error e = runtime::encodeOperandMap(
            *api, kernel.mapA, buffers.a.codes, m, mapK,
            detail::getBoxRowsA(kernel.plan, int(m)), "A"))
      return e;
    kernel.mapACodes = buffers.a.codes;
    kernel.mapARows = m;
  }
  if (kernel.mapBCodes != buffers.b.codes || newK) {
    kernel.mapBCodes = 0;
    if (Error e = runtime::encodeOperandMap(*api, kernel.mapB, buffers.b.codes,
                                            getGemmRowsB(spec), mapK,
                                            kernel.plan.boxRowsB, "B"))
      return e;
    kernel.mapBCodes = buffers.b.codes;
  }
  // A k-grouped output holds every expert's M rows.
  const int64_t rowsD = getGemmRowsD(spec, m);
  if (kernel.plan.usesTmaD &&
      (kernel.mapDPointer != buffers.d || kernel.mapDRows != rowsD)) {
    kernel.mapDPointer = 0;
    if (Error e =
            runtime::encodeOutputMap(*api, kernel.mapD, buffers.d, rowsD,
                                     spec.n, compiler::getByteWidth(spec.out),
                                     kernel.plan.boxD[0], kernel.plan.boxD[1]))
      return e;
    kernel.mapDPointer = buffers.d;
    kernel.mapDRows = rowsD;
  }

  auto pointer = [](CUdeviceptr p) { return reinterpret_cast<void *>(p); };
  detail::KernelArgs args{};
  args.m = int(m);
  args.d = pointer(buffers.d);
  args.aLocal = pointer(buffers.a.localScales);
  args.aGlobal = static_cast<const float *>(pointer(buffers.a.globalScales));
  args.bLocal = pointer(buffers.b.localScales);
  args.bGlobal = static_cast<const float *>(pointer(buffers.b.globalScales));
  args.bias = pointer(buffers.bias);
  args.c = pointer(buffers.c);
  // The call's own: plans are shared by specs that differ only in beta.
  args.beta = asked.beta.value_or(1.0f);
  args.amax = static_cast<float *>(pointer(buffers.amax));
  args.groupOffsets = static_cast<const int *>(pointer(buffers.groupOffsets));
  args.k = int(k);
  if (kernel.plan.slicedAccumulators) {
    detail::WorkspaceSize size = detail::getWorkspaceSize(kernel.plan, int(m));
    Expected<CUdeviceptr> workspace =
        workspaces->get(*api, stream, size.bytes, size.zeroBytes);
    if (!workspace)
      return workspace.takeError();
    args.workspace = pointer(*workspace);
  }

  runtime::LaunchConfig launch;
  launch.grid[0] = detail::getGridSize(kernel.plan, int(m), kernel.slots);
  launch.block[0] = kernel.info.threads;
  launch.sharedMemoryBytes = kernel.info.sharedBytes;
  launch.cluster[0] = kernel.info.clusterSize;
  launch.sharedMemoryLimitSet = true;
  launch.stream = stream;
  void *params[] = {&kernel.mapA, &kernel.mapB, &kernel.mapD, &args};
  return runtime::launchKernel(kernel.function, launch, params);
}

Error moss::gemm(const GemmSpec &spec, int64_t m, const GemmBuffers &buffers,
                 CUstream stream, const GemmOptions &options) {
  Expected<runtime::CurrentContext> context = runtime::getCurrentContext();
  if (!context)
    return context.takeError();
  // By context ID: a destroyed context's handle can come back for a new one.
  thread_local std::unordered_map<unsigned long long,
                                  std::unique_ptr<GemmRunner>>
      runners;
  std::unique_ptr<GemmRunner> &runner = runners[context->id];
  if (!runner) {
    Expected<std::unique_ptr<GemmRunner>> created =
        GemmRunner::create(runtime::getDefaultKernelCache());
    if (!created) {
      runners.erase(context->id);
      return created.takeError();
    }
    runner = std::move(*created);
  }
  return runner->run(spec, m, buffers, stream, options);
}
