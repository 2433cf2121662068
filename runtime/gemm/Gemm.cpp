//===- Gemm.cpp - Block-scaled FP8 GEMMs on the GPU -----------------------===//
//
// The one place (with moss-jit) where the compiler and the runtime meet: a
// GemmSpec goes through compileGemm() to CUDA C++, through the kernel cache
// to a cubin, and is launched with the tensor maps and arguments of
// docs/GEMM-KERNEL-ABI.md. The launch geometry comes from the templates'
// own host-side plan (moss/gemm/config.cuh), the same formulas the kernel
// is compiled with; the compiler's resource model is checked against it.
//
//===----------------------------------------------------------------------===//

#include "moss/Gemm/Gemm.h"

#include "TemplatePlan.h"

#include "moss/Compiler/Compile.h"
#include "moss/Compiler/TuningDatabase.h"
#include "moss/Runtime/Api/Folder.h"
#include "moss/Runtime/Api/RuntimeError.h"
#include "moss/Runtime/Cuda/Device.h"
#include "moss/Runtime/Cuda/Driver.h"
#include "moss/Runtime/Cuda/Module.h"
#include "moss/Runtime/Cuda/TensorMaps.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Chrono.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <limits>

using namespace llvm;
using namespace moss;
using compiler::FloatType;
using compiler::GemmSpec;
using numerics::ScalingScheme;

//===----------------------------------------------------------------------===//
// Checks
//===----------------------------------------------------------------------===//

GemmScaleCounts moss::getGemmScaleCounts(const GemmSpec &spec, int64_t m) {
  auto local = [&](const ScalingScheme &s, int64_t rows) -> int64_t {
    if (!s.hasLocalScales() || s.blockCols <= 0)
      return 0;
    return divideCeil(rows, std::max<int64_t>(1, s.blockRows)) *
           divideCeil(spec.k, s.blockCols);
  };
  auto global = [](const ScalingScheme &s, int64_t rows) -> int64_t {
    return s.hasGlobalScales() ? (s.globalPerRow() ? rows : 1) : 0;
  };
  return {local(spec.aScaling, m), global(spec.aScaling, m),
          local(spec.bScaling, spec.n), global(spec.bScaling, spec.n)};
}

/// A device pointer: present exactly when `needed`, aligned to `alignment`.
static Error checkPointer(CUdeviceptr pointer, bool needed, unsigned alignment,
                          const Twine &name, const Twine &why) {
  if (needed && !pointer)
    return runtime::invalidArgument(name + " is null; " + why + " needs it");
  if (!needed && pointer)
    return runtime::invalidArgument(name + " is given, but " + why +
                                    " has none");
  if (pointer % alignment != 0)
    return runtime::invalidArgument(name + " must be " + Twine(alignment) +
                                    "-byte aligned, got 0x" +
                                    Twine::utohexstr(pointer));
  return Error::success();
}

static Error checkOperand(const GemmOperand &operand, const char *name,
                          const ScalingScheme &scheme, int64_t rows,
                          int64_t localCount, int64_t globalCount) {
  std::string prefix = std::string("buffers.") + name;
  std::string why =
      std::string("operand ") + name + "'s scheme " + scheme.str();
  if (Error e = checkPointer(operand.codes, true, 16, prefix + ".codes",
                             "every GEMM"))
    return e;
  if (Error e = checkPointer(operand.localScales, scheme.hasLocalScales(), 4,
                             prefix + ".localScales", why))
    return e;
  if (Error e = checkPointer(operand.globalScales, scheme.hasGlobalScales(), 4,
                             prefix + ".globalScales", why))
    return e;
  if (operand.localScaleCount != localCount)
    return runtime::invalidArgument(
        prefix + ".localScaleCount=" + Twine(operand.localScaleCount) +
        " does not match " + why + " for " + Twine(rows) + " rows: expected " +
        Twine(localCount) +
        (localCount ? " block scales (row-major [rows / block rows, "
                      "K / block])"
                    : ""));
  if (operand.globalScaleCount != globalCount)
    return runtime::invalidArgument(
        prefix + ".globalScaleCount=" + Twine(operand.globalScaleCount) +
        " does not match " + why + ": expected " + Twine(globalCount));
  return Error::success();
}

static unsigned byteWidth(std::optional<FloatType> type) {
  return type ? compiler::getByteWidth(*type) : 1;
}

/// checkGemmSpec for a launch of `rows` rows (kDynamic: any), which decide
/// the default fold and so the blocks the kernel promotes by.
static Error checkGemmSpecAt(const GemmSpec &spec, int64_t rows) {
  if (Error e = compiler::checkShapes(spec))
    return e;
  if (Error e = compiler::checkFold(spec))
    return e;
  if (spec.beta && !std::isfinite(*spec.beta))
    return runtime::invalidArgument(
        "beta=" + Twine(std::to_string(*spec.beta)) + " is not finite");
  constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();
  if (spec.k % 32 != 0)
    return runtime::invalidArgument(
        "K=" + Twine(spec.k) + " is not a multiple of 32 (the FP8 wgmma's K)");
  if (spec.n > kIntMax || spec.k > kIntMax || spec.m > kIntMax)
    return runtime::invalidArgument("the GEMM is " + Twine(spec.m) + "x" +
                                    Twine(spec.n) + "x" + Twine(spec.k) +
                                    "; the kernel takes M, N and K below 2^31");
  if (Error e = compiler::checkKernelSupport(spec))
    return e;
  if (spec.promoteK != 0) {
    if (spec.promoteK != 32 && spec.promoteK != 64 && spec.promoteK != 128)
      return runtime::invalidArgument(
          "promoteK=" + Twine(spec.promoteK) +
          " is not a promotion interval; expected 0 (the "
          "schemes'), 32, 64 or 128");
    if (spec.k % spec.promoteK != 0)
      return runtime::invalidArgument(
          "K=" + Twine(spec.k) +
          " is not a multiple of promoteK=" + Twine(spec.promoteK));
  }
  // A fold changes the blocks the kernel promotes by.
  const GemmSpec kernel = spec.getKernelSpec(rows);
  for (auto [name, scheme] :
       {std::pair{"A", &kernel.aScaling}, std::pair{"B", &kernel.bScaling}})
    if (spec.promoteK && scheme->hasLocalScales() &&
        scheme->blockCols < spec.promoteK)
      return runtime::invalidArgument(
          "promoteK=" + Twine(spec.promoteK) + " is coarser than operand " +
          name + "'s scaling block " + Twine(scheme->blockCols) + " (" +
          scheme->str() + ")");
  for (auto [name, scheme] :
       {std::pair{"A", &spec.aScaling}, std::pair{"B", &spec.bScaling}}) {
    if (scheme->hasLocalScales() && spec.k % scheme->blockCols != 0)
      return runtime::invalidArgument(
          "K=" + Twine(spec.k) + " is not a multiple of operand " + name +
          "'s scaling block " + Twine(scheme->blockCols) + " (" +
          scheme->str() + ")");
  }
  return Error::success();
}

Error moss::checkGemmSpec(const GemmSpec &spec) {
  return checkGemmSpecAt(spec, GemmSpec::kDynamic);
}

/// The output does not wrap around the address space and does not overlap
/// the operands' codes; C is either D itself (of the output's type: each
/// entry is read before it is written) or apart from it.
static Error checkBufferRanges(const GemmSpec &spec, int64_t m,
                               const GemmBuffers &buffers) {
  struct Range {
    uint64_t begin, bytes;
    bool overlaps(const Range &o) const {
      return bytes && o.bytes && begin < o.begin + o.bytes &&
             o.begin < begin + bytes;
    }
  };
  auto range = [](CUdeviceptr p, int64_t rows, int64_t cols,
                  unsigned width) -> Expected<Range> {
    uint64_t bytes = uint64_t(rows) * uint64_t(cols) * width;
    if (p + bytes < p)
      return runtime::invalidArgument("a buffer at 0x" + Twine::utohexstr(p) +
                                      " of " + Twine(bytes) +
                                      " bytes wraps around the address space");
    return Range{p, bytes};
  };
  const unsigned outWidth = compiler::getByteWidth(spec.out);
  Expected<Range> d = range(buffers.d, m, spec.n, outWidth);
  if (!d)
    return runtime::invalidArgument("buffers.d: " + toString(d.takeError()));
  Expected<Range> a = range(buffers.a.codes, m, spec.k, 1);
  Expected<Range> b = range(buffers.b.codes, spec.n, spec.k, 1);
  if (!a || !b)
    return runtime::invalidArgument(
        "operand codes: " + toString(a ? b.takeError() : a.takeError()));
  if (d->overlaps(*a) || d->overlaps(*b))
    return runtime::invalidArgument(
        "buffers.d (the output) overlaps the codes of operand " +
        Twine(d->overlaps(*a) ? "A" : "B"));
  if (buffers.c && spec.accumulate) {
    if (buffers.c == buffers.d) {
      if (*spec.accumulate != spec.out)
        return runtime::invalidArgument(
            std::string("buffers.c is buffers.d, but C is ") +
            compiler::getName(*spec.accumulate) + " and D " +
            compiler::getName(spec.out) +
            "; C may be D only with the output's type");
    } else {
      Expected<Range> c = range(buffers.c, m, spec.n,
                                compiler::getByteWidth(*spec.accumulate));
      if (!c)
        return runtime::invalidArgument("buffers.c: " +
                                        toString(c.takeError()));
      if (c->overlaps(*d))
        return runtime::invalidArgument(
            "buffers.c overlaps buffers.d without being it");
    }
  }
  return Error::success();
}

/// checkGemmSpecAt, and that `m` rows can be launched with the spec.
static Error checkGemmRows(const GemmSpec &spec, int64_t m) {
  if (Error e = checkGemmSpecAt(spec, m))
    return e;
  if (m < 0 || m > std::numeric_limits<int32_t>::max())
    return runtime::invalidArgument("m=" + Twine(m) +
                                    " is out of range; expected 0 <= m < 2^31");
  if (!spec.isDynamicM() && m != spec.m)
    return runtime::invalidArgument(
        "m=" + Twine(m) + " but the spec is specialized to M=" + Twine(spec.m) +
        "; use a spec with a dynamic M (-1) to "
        "launch other row counts");
  return Error::success();
}

Error moss::checkGemmLaunch(const GemmSpec &spec, int64_t m,
                            const GemmBuffers &buffers) {
  if (Error e = checkGemmRows(spec, m))
    return e;

  GemmScaleCounts counts = getGemmScaleCounts(spec, m);
  if (Error e = checkOperand(buffers.a, "a", spec.aScaling, m, counts.aLocal,
                             counts.aGlobal))
    return e;
  if (Error e = checkOperand(buffers.b, "b", spec.bScaling, spec.n,
                             counts.bLocal, counts.bGlobal))
    return e;
  if (Error e = checkPointer(buffers.d, true, 16, "buffers.d (the output)",
                             "every GEMM"))
    return e;
  if (Error e =
          checkPointer(buffers.bias, spec.bias.has_value(),
                       byteWidth(spec.bias), "buffers.bias", "the spec's bias"))
    return e;
  if (Error e = checkPointer(
          buffers.c, spec.accumulate.has_value(), byteWidth(spec.accumulate),
          "buffers.c (the accumulate operand)", "the spec's accumulate"))
    return e;
  if (Error e = checkPointer(buffers.amax, spec.amax, 4, "buffers.amax",
                             "the spec's amax output"))
    return e;
  return checkBufferRanges(spec, m, buffers);
}

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

/// The key of a checked spec (block sizes < 256, N and K < 2^31).
static GemmRunner::Key makeKey(const GemmSpec &spec,
                               const GemmOptions &options) {
  GemmRunner::Key key;
  key.words[0] = spec.m;
  key.words[1] = spec.n << 32 | spec.k;
  key.words[2] =
      int64_t(packOperand(spec.a, spec.aScaling) |
              packOperand(spec.b, spec.bScaling) << 24 |
              uint64_t(spec.out) << 48 | packType(spec.bias) << 50 |
              packType(spec.accumulate) << 52 | uint64_t(spec.amax) << 54 |
              uint64_t(spec.promoteK >> 5) << 55 | // 0, 1, 2 or 4
              uint64_t(options.compileMode == GemmCompileMode::Quick) << 58 |
              uint64_t(spec.multipliesInF16()) << 59 |
              uint64_t(spec.kernelFoldsA) << 60);
  if (const std::optional<compiler::TileConfig> &t = options.tiling)
    key.words[3] =
        int64_t(1 | uint64_t(t->tileM) << 1 | uint64_t(t->tileN) << 10 |
                uint64_t(t->stages) << 19 | uint64_t(t->clusterM) << 24 |
                uint64_t(t->clusterN) << 27 | uint64_t(t->raster) << 30 |
                uint64_t(t->swizzle) << 31 | uint64_t(t->splitK) << 40 |
                uint64_t(t->source ? int(*t->source) + 1 : 0) << 48);
  return key;
}

/// The key of a GEMM without a given tiling at `m` rows: the spec, the M
/// bucket (the database may hold a tiling per bucket) and which database.
static GemmRunner::Key makeResolvedKey(const GemmSpec &spec, int64_t m,
                                       const GemmOptions &options) {
  GemmOptions keyOptions;
  keyOptions.compileMode = options.compileMode;
  GemmRunner::Key key = makeKey(spec, keyOptions);
  uint64_t bucket = Log2_64(
      uint64_t(compiler::getTuningBucket(compiler::getTuningM(spec, m))));
  // The database: the default (0), none (1) or a path given (2, hashed).
  uint64_t database = 0;
  if (const std::optional<std::string> &path = options.tuningDatabase)
    database =
        path->empty() ? 1 : 2 | uint64_t(std::hash<std::string>()(*path)) << 2;
  key.words[3] = int64_t(2 | bucket << 2 | database << 8);
  return key;
}

//===----------------------------------------------------------------------===//
// Tuning database
//===----------------------------------------------------------------------===//

std::string
moss::getDefaultTuningDatabasePath(const runtime::KernelCache &cache) {
  if (const char *path = std::getenv("MOSS_TUNING_DB"))
    return path;
  std::string directory = cache.getDirectory();
  if (directory.empty())
    return "";
  SmallString<256> path(directory);
  sys::path::append(path, "tuning.json");
  return std::string(path);
}

/// The databases a runner has read, by path, reread when the file changes.
struct GemmRunner::TuningState {
  struct File {
    sys::TimePoint<> modified;
    uint64_t size = 0;
    /// Null when the file failed its checks (reported once per version).
    std::shared_ptr<const compiler::TuningDatabase> database;
  };
  std::unordered_map<std::string, File> files;
};

static bool isVerbose(const GemmOptions &options) {
  if (options.verbose)
    return true;
  const char *env = std::getenv("MOSS_VERBOSE");
  return env && *env && StringRef(env) != "0";
}

std::shared_ptr<const compiler::TuningDatabase>
GemmRunner::getTuningDatabase(const GemmSpec &spec, const std::string &path,
                              bool verbose) {
  sys::fs::file_status status;
  if (sys::fs::status(path, status) || !sys::fs::exists(status)) {
    if (verbose)
      errs() << "moss: note: no tuning database at '" << path
             << "'; the heuristic tiles " << spec.str() << "\n";
    return nullptr;
  }
  auto [it, inserted] = tuning->files.try_emplace(path);
  TuningState::File &file = it->second;
  if (inserted || file.modified != status.getLastModificationTime() ||
      file.size != status.getSize()) {
    file.modified = status.getLastModificationTime();
    file.size = status.getSize();
    Expected<compiler::TuningDatabase> loaded =
        compiler::TuningDatabase::load(path);
    if (loaded) {
      file.database =
          std::make_shared<compiler::TuningDatabase>(std::move(*loaded));
    } else {
      file.database.reset();
      errs() << "moss: warning: ignoring the tuning database: "
             << toString(loaded.takeError()) << "\n";
    }
  }
  return file.database;
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
  /// Thread blocks that run at once: the SMs, or for clusters the clusters
  /// that fit at once times their size (the persistent grid's limit).
  int slots = 0;
};

/// The workspaces of kernels with sliced accumulators (split-K, 64-row
/// tiles; docs/GEMM-KERNEL-ABI.md), one per stream so that launches on
/// different streams never share one. A workspace starts with
/// the kernel's tile counters, which each launch leaves zero; the partial
/// sums after them dirty the rest. The layout depends on the launch (its
/// tile count), so the runner tracks how many leading bytes are zero and
/// clears more, on the stream, only when a launch needs more counters.
struct GemmRunner::Workspaces {
  struct Workspace {
    CUdeviceptr pointer = 0;
    size_t bytes = 0;
    size_t zeroBytes = 0;
  };
  std::unordered_map<CUstream, Workspace> byStream;

  ~Workspaces() {
    Expected<const runtime::DriverApi &> api = runtime::getDriverApi();
    if (!api) {
      consumeError(api.takeError());
      return;
    }
    for (auto &entry : byStream)
      (void)api->memFree(entry.second.pointer);
  }

  /// A workspace of at least `bytes` for a launch on `stream` whose first
  /// `counterBytes` must be zero.
  Expected<CUdeviceptr> get(const runtime::DriverApi &api, CUstream stream,
                            size_t bytes, size_t counterBytes) {
    Workspace &w = byStream[stream];
    if (w.bytes < bytes) {
      if (w.pointer) {
        // Launches queued on the stream may still use the old one.
        if (Error e = runtime::checkCuda(api.streamSynchronize(stream),
                                         "cuStreamSynchronize"))
          return std::move(e);
        if (Error e = runtime::checkCuda(api.memFree(w.pointer), "cuMemFree"))
          return std::move(e);
        w = Workspace();
      }
      size_t size = alignTo(bytes, size_t(1) << 20);
      if (Error e = runtime::checkCuda(api.memAlloc(&w.pointer, size),
                                       "cuMemAlloc (" + Twine(size) +
                                           " bytes of GEMM workspace)"))
        return std::move(e);
      w.bytes = size;
    }
    if (counterBytes > w.zeroBytes)
      if (Error e = runtime::checkCuda(
              api.memsetD8Async(w.pointer + w.zeroBytes, 0,
                                counterBytes - w.zeroBytes, stream),
              "cuMemsetD8Async"))
        return std::move(e);
    w.zeroBytes = counterBytes;
    return w.pointer;
  }
};

GemmRunner::GemmRunner(runtime::KernelCache &cache, compiler::TargetInfo target)
    : cache(cache), target(std::move(target)),
      tuning(std::make_unique<TuningState>()),
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

/// Whether the kernel of an m-row launch of `asked` on `target` folds A
/// itself: asked for (GemmOptions::foldAInKernel), allowed
/// (GemmSpec::canFoldAInKernel) and, with a given tiling, on one that
/// kernel takes.
static bool kernelFoldsA(const GemmSpec &asked, int64_t m,
                         const GemmOptions &options,
                         const compiler::TargetInfo &target) {
  if (!options.foldAInKernel || !asked.canFoldAInKernel(m))
    return false;
  if (!options.tiling)
    return true;
  Error unfit = compiler::checkTiling(asked.getFoldingKernelSpec(m),
                                      *options.tiling, target);
  const bool fits = !unfit;
  consumeError(std::move(unfit));
  return fits;
}

/// The spec the kernel of an m-row launch of `asked` is compiled for.
static GemmSpec getCompiledSpec(const GemmSpec &asked, int64_t m,
                                const GemmOptions &options,
                                const compiler::TargetInfo &target) {
  return kernelFoldsA(asked, m, options, target) ? asked.getFoldingKernelSpec(m)
                                                 : asked.getKernelSpec(m);
}

/// The fold pass of one operand of an m-row launch of `asked`, or none.
static std::optional<runtime::FoldSpec>
getFoldSpec(const GemmSpec &asked, bool operandB, int64_t m,
            const GemmOptions &options, const compiler::TargetInfo &target);

Expected<GemmRunner::Kernel *>
GemmRunner::getKernel(const GemmSpec &spec, int64_t m,
                      const GemmOptions &options) {
  if (options.tiling)
    return compileKernel(spec, options.tiling, "", options.compileMode);
  Key key = makeResolvedKey(spec, m, options);
  if (auto it = resolved.find(key); it != resolved.end())
    return it->second;

  // First time for this spec and M bucket.
  Expected<std::pair<compiler::TileConfig, std::string>> tiling =
      resolveTiling(spec, m, options);
  if (!tiling)
    return tiling.takeError();
  Expected<Kernel *> kernel = compileKernel(spec, tiling->first,
                                            tiling->second, options.compileMode);
  if (!kernel)
    return kernel.takeError();
  resolved[key] = *kernel;
  return *kernel;
}

Expected<std::pair<compiler::TileConfig, std::string>>
GemmRunner::resolveTiling(const GemmSpec &spec, int64_t m,
                          const GemmOptions &options) {
  std::string path = options.tuningDatabase
                         ? *options.tuningDatabase
                         : getDefaultTuningDatabasePath(cache);
  const bool verbose = isVerbose(options);
  std::shared_ptr<const compiler::TuningDatabase> database =
      path.empty() ? nullptr : getTuningDatabase(spec, path, verbose);
  // Planned for this launch's M bucket (a dynamic M) and given explicitly,
  // so that each bucket's plan gets its own kernel key.
  compiler::TilingChoice choice;
  choice.database = database.get();
  choice.launchRows = m;
  auto note = [&](const Twine &text) {
    if (verbose)
      errs() << "moss: note: " << path << ": " << text << "\n";
  };
  choice.onNote = note;
  Expected<compiler::TileConfig> chosen =
      compiler::chooseTiling(spec, target, choice);
  if (!chosen)
    return chosen.takeError();
  return std::pair{*chosen, path};
}

Expected<compiler::KernelSource>
GemmRunner::getSource(const GemmSpec &asked, int64_t m,
                      const GemmOptions &options) {
  // The checks of a launch of m rows, buffers aside: run() builds this kernel.
  if (Error e = checkGemmRows(asked, m))
    return std::move(e);
  const GemmSpec spec = getCompiledSpec(asked, m, options, target);
  std::optional<compiler::TileConfig> tiling = options.tiling;
  if (!tiling) {
    Expected<std::pair<compiler::TileConfig, std::string>> resolvedTiling =
        resolveTiling(spec, m, options);
    if (!resolvedTiling)
      return resolvedTiling.takeError();
    tiling = resolvedTiling->first;
  }
  compiler::CompileOptions compileOptions;
  compileOptions.tiling = tiling;
  compileOptions.quickCompile = options.compileMode == GemmCompileMode::Quick;
  return compiler::compileGemm(spec, target, compileOptions);
}

Expected<GemmRunner::BuiltKernel>
GemmRunner::build(const GemmSpec &spec, int64_t m,
                  const GemmOptions &options) {
  Expected<compiler::KernelSource> source = getSource(spec, m, options);
  if (!source)
    return source.takeError();
  runtime::CompileOptions nvrtc;
  nvrtc.arch = target.arch;
  Expected<std::shared_ptr<const runtime::KernelEntry>> entry =
      cache.getOrCompile(source->source, nvrtc);
  if (!entry)
    return entry.takeError();
  return BuiltKernel{std::move(*source), std::move(*entry)};
}

Expected<unsigned> GemmRunner::warm(const GemmSpec &spec, int64_t m,
                                    const GemmOptions &options) {
  uint64_t compilesBefore = cache.stats().compiles;
  if (Error e = build(spec, m, options).takeError())
    return std::move(e);
  for (bool operandB : {false, true})
    if (std::optional<runtime::FoldSpec> fold =
            getFoldSpec(spec, operandB, m, options, target))
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
GemmRunner::compileKernel(const GemmSpec &spec,
                          const std::optional<compiler::TileConfig> &tiling,
                          const std::string &database, GemmCompileMode mode) {
  GemmOptions keyOptions;
  keyOptions.tiling = tiling;
  keyOptions.compileMode = mode;
  Key key = makeKey(spec, keyOptions);
  if (auto it = kernels.find(key); it != kernels.end())
    return it->second.get();
  mode = resolveCompileMode(mode);

  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  compiler::CompileOptions compileOptions;
  compileOptions.tiling = tiling;
  compileOptions.quickCompile = mode == GemmCompileMode::Quick;
  Expected<compiler::KernelSource> source =
      compiler::compileGemm(spec, target, compileOptions);
  if (!source)
    return source.takeError();
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
      compileOptions.quickCompile = true;
      Expected<compiler::KernelSource> variant =
          compiler::compileGemm(spec, target, compileOptions);
      if (!variant)
        return variant.takeError();
      Expected<detail::TemplatePlan> fullPlan =
          detail::planFromTemplates(*source);
      Expected<detail::TemplatePlan> quickPlan =
          detail::planFromTemplates(*variant);
      if (!fullPlan)
        return fullPlan.takeError();
      if (!quickPlan)
        return quickPlan.takeError();
      if (quickPlan->groupBlocks != fullPlan->groupBlocks ||
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

static std::optional<runtime::FoldSpec>
getFoldSpec(const GemmSpec &spec, bool operandB, int64_t m,
            const GemmOptions &options, const compiler::TargetInfo &target) {
  const ScalingScheme &scheme = operandB ? spec.bScaling : spec.aScaling;
  if (spec.getFold(m) == numerics::BlockScaleFold::None ||
      !numerics::isFoldable(scheme) ||
      (!operandB && kernelFoldsA(spec, m, options, target)))
    return std::nullopt;
  runtime::FoldSpec fold;
  fold.rows = operandB ? spec.n : m;
  fold.cols = spec.k;
  fold.format = operandB ? spec.b : spec.a;
  fold.scheme = scheme;
  fold.fold = spec.getFold(m);
  return fold;
}

Expected<GemmBuffers> GemmRunner::foldOperands(const GemmSpec &spec, int64_t m,
                                               const GemmBuffers &buffers,
                                               CUstream stream,
                                               const GemmOptions &options) {
  std::optional<runtime::FoldSpec> folds[2] = {
      getFoldSpec(spec, false, m, options, target),
      getFoldSpec(spec, true, m, options, target)};
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
  for (bool operandB : {false, true})
    if (std::optional<runtime::FoldSpec> fold = getFoldSpec(
            spec, operandB, std::max<int64_t>(m, 1), options, target))
      if (Error e = folder->prepare(*fold))
        return std::move(e);
  Expected<Kernel *> kernel =
      getKernel(getCompiledSpec(spec, m, options, target), m, options);
  if (!kernel)
    return kernel.takeError();
  if (Error e = switchToFullKernel(**kernel, options.compileMode ==
                                                 GemmCompileMode::Full))
    return std::move(e);
  return &(*kernel)->info;
}

Expected<const GemmKernelInfo *>
GemmRunner::prepare(const GemmSpec &spec, const GemmOptions &options) {
  return prepare(spec,
                 compiler::getTuningM(spec, compiler::TilingOptions().assumedM),
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
  // From here on, the GEMM the kernel computes (folded operands, if any).
  const GemmSpec spec = getCompiledSpec(asked, m, options, target);
  Expected<Kernel *> found = getKernel(spec, m, options);
  if (!found)
    return found.takeError();
  Kernel &kernel = **found;
  if (Error e = switchToFullKernel(kernel, options.compileMode ==
                                               GemmCompileMode::Full))
    return e;
  if (m == 0)
    return Error::success();
  GemmBuffers buffers = given;
  if (asked.getFold(m) != numerics::BlockScaleFold::None) {
    Expected<GemmBuffers> folded =
        foldOperands(asked, m, given, stream, options);
    if (!folded)
      return folded.takeError();
    buffers = *folded;
  }

  Expected<const runtime::DriverApi &> api = runtime::getDriverApi();
  if (!api)
    return api.takeError();
  if (kernel.mapACodes != buffers.a.codes || kernel.mapARows != m) {
    kernel.mapACodes = 0;
    if (Error e = runtime::encodeOperandMap(
            *api, kernel.mapA, buffers.a.codes, m, spec.k,
            detail::getBoxRowsA(kernel.plan, int(m)), "A"))
      return e;
    kernel.mapACodes = buffers.a.codes;
    kernel.mapARows = m;
  }
  if (kernel.mapBCodes != buffers.b.codes) {
    kernel.mapBCodes = 0;
    if (Error e = runtime::encodeOperandMap(*api, kernel.mapB, buffers.b.codes,
                                            spec.n, spec.k,
                                            kernel.plan.boxRowsB, "B"))
      return e;
    kernel.mapBCodes = buffers.b.codes;
  }
  if (kernel.plan.usesTmaD &&
      (kernel.mapDPointer != buffers.d || kernel.mapDRows != m)) {
    kernel.mapDPointer = 0;
    if (Error e =
            runtime::encodeOutputMap(*api, kernel.mapD, buffers.d, m, spec.n,
                                     compiler::getByteWidth(spec.out),
                                     kernel.plan.boxD[0], kernel.plan.boxD[1]))
      return e;
    kernel.mapDPointer = buffers.d;
    kernel.mapDRows = m;
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
  args.beta = spec.beta.value_or(1.0f);
  args.amax = static_cast<float *>(pointer(buffers.amax));
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
