//===- Gemm.h - Block-scaled FP8 GEMMs on the GPU ---------------*- C++ -*-===//
//
// The user's entry point for GEMMs: describe one with a compiler::GemmSpec,
// hand over the device buffers, and GemmRunner compiles the kernel for the
// spec (the moss.gemm pipeline, then NVRTC, through the kernel cache) on the
// first call and only launches on later ones.
//
//   moss::GemmBuffers buffers;      // codes, scales, output, ... (device)
//   if (llvm::Error e = moss::gemm(spec, m, buffers, stream)) ...
//
// This header names no MLIR type; its implementation (the MOSSGemm library)
// is where the compiler and the runtime meet (ARCHITECTURE.md). Everything
// about a launch is checked before the GPU is touched (checkGemmLaunch), and
// the launch path of a compiled kernel is a hash-map lookup on a small key
// (no strings, no disk, no compiler).
//
// Tile configurations come from the tuning database (docs/TUNING.md) when it
// has an entry for the GEMM on this GPU at the launch M's bucket, else from
// the heuristic; GemmOptions::tiling overrides both.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_GEMM_GEMM_H
#define MOSS_GEMM_GEMM_H

#include "moss/Compiler/GemmSpec.h"
#include "moss/Compiler/KernelSource.h"
#include "moss/Compiler/Tiling.h"
#include "moss/Runtime/Cache/KernelCache.h"

#include "llvm/Support/Error.h"

#include <array>
#include <cstdint>
#include <cuda.h>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

namespace moss::compiler {
struct GemmPlan;
class TuningDatabase;
} // namespace moss::compiler

namespace moss {

namespace runtime {
class GpuFolder;
} // namespace runtime

namespace detail {
class TuningDatabaseFiles;
} // namespace detail

/// One FP8 operand on the device, as the quantizers write it
/// (docs/NUMERICS-CONTRACT.md): codes [rows, K] row-major (K-major), block
/// scales row-major [rows / blockRows, K / blockCols] (E8M0 bytes for MXFP8
/// and two-level, FP32 for per-group), FP32 global scales [1] or [rows].
struct GemmOperand {
  /// FP8 codes, 16-byte aligned (TMA).
  CUdeviceptr codes = 0;
  /// Block scales, exactly when the scheme has them; 4-byte aligned.
  CUdeviceptr localScales = 0;
  /// Elements in `localScales` (checked against the scheme and shape).
  int64_t localScaleCount = 0;
  /// FP32 global scales, exactly when the scheme has them; 4-byte aligned.
  CUdeviceptr globalScales = 0;
  /// Elements in `globalScales`.
  int64_t globalScaleCount = 0;
};

/// The device buffers of one GEMM `D = epilogue(A * B^T)`.
struct GemmBuffers {
  /// A [M, K] and B [N, K].
  GemmOperand a, b;
  /// The output [M, N] row-major of the spec's output type, 16-byte aligned.
  CUdeviceptr d = 0;
  /// Bias [N] of the spec's bias type, exactly when the spec has a bias.
  CUdeviceptr bias = 0;
  /// C [M, N] of the accumulate type, exactly when the spec has one. It may
  /// be `d` itself (each entry is read before it is overwritten).
  CUdeviceptr c = 0;
  /// One FP32 that receives max |D| (an atomic max: zero it before the
  /// launch), exactly when the spec asks for amax.
  CUdeviceptr amax = 0;
  /// An m-grouped GEMM's (spec.groups > 0) int32 [groups + 1] row offsets
  /// on the device, 4-byte aligned: expert g's rows of A and D are
  /// [offsets[g], offsets[g + 1]), offsets[0] = 0, non-decreasing,
  /// offsets[groups] = M. The kernel reads them itself (no host
  /// synchronization); it takes offsets[0] as 0 and offsets[groups] as M,
  /// and keeps the others in [0, M], so bad offsets give wrong rows but
  /// never reach memory outside the buffers. A masked one's
  /// (spec.maskedGroups) are instead [groups] row counts: expert g's rows
  /// are the first counts[g] of [g * M / groups, (g + 1) * M / groups),
  /// each count kept in [0, M / groups]. A k-grouped one's
  /// (spec.groupedK) are [groups + 1] column offsets, multiples of 128:
  /// expert g's columns of A and B are [offsets[g], offsets[g + 1]),
  /// offsets[0] taken as 0, the others kept in [0, K] (columns past
  /// offsets[groups] are padding). Null for a plain GEMM.
  CUdeviceptr groupOffsets = 0;
};

/// Rows of B: N, or groups * N for an m-grouped GEMM.
inline int64_t getGemmRowsB(const compiler::GemmSpec &spec) {
  return spec.groups && !spec.groupedK ? spec.groups * spec.n : spec.n;
}

/// Rows of the output (and of C) at M = `m`: m, or groups * m for a
/// k-grouped GEMM (each expert's [M, N]).
inline int64_t getGemmRowsD(const compiler::GemmSpec &spec, int64_t m) {
  return spec.groupedK ? spec.groups * m : m;
}

/// The element counts a GEMM's scale tensors must have.
struct GemmScaleCounts {
  int64_t aLocal = 0, aGlobal = 0, bLocal = 0, bGlobal = 0;
};

/// The scale element counts of `spec` at a launch of `extent`
/// (M, or a k-grouped GEMM's K; no validation).
GemmScaleCounts getGemmScaleCounts(const compiler::GemmSpec &spec,
                                   int64_t extent);

/// Checks a spec without the GPU: the shapes (N and K below 2^31, K a
/// multiple of 32 and of each scaling block along K), the schemes the kernel
/// takes. Unsupported pairings the compiler finds later, also before any
/// launch.
llvm::Error checkGemmSpec(const compiler::GemmSpec &spec);

/// Checks a launch without the GPU: checkGemmSpec, `m` (>= 0, below 2^31, equal
/// to a static spec.m), every pointer (present exactly when needed, aligned)
/// and every scale count. The error names the bad argument and what was
/// expected.
llvm::Error checkGemmLaunch(const compiler::GemmSpec &spec, int64_t m,
                            const GemmBuffers &buffers);

/// The tuning database a runner reads when GemmOptions::tuningDatabase is
/// unset: $MOSS_TUNING_DB when the variable is set (set but empty: none),
/// else `tuning.json` in `cache`'s directory (empty when it has none). Read
/// at every call.
std::string getDefaultTuningDatabasePath(const runtime::KernelCache &cache);

/// How GemmRunner compiles a kernel that neither the memory nor the disk
/// cache holds.
enum class GemmCompileMode : uint8_t {
  /// The quick-compile variant first (compiler::CompileOptions::quickCompile:
  /// the same output, bit for bit; less than half the NVRTC time, about a
  /// quarter slower), and the full kernel on a background thread;
  /// launches switch to it once it is ready (NVRTC and the disk cache run
  /// on that thread, the module loads on the caller's). A kernel that is
  /// its own variant (small tiles, no promotion) compiles in full.
  /// $MOSS_TIERED_COMPILE=0 makes Tiered compile as Full.
  Tiered,
  /// The full kernel, waited for (benchmarks, the tuner); also waits for
  /// a tiered compile of the same kernel that is still running.
  Full,
  /// The quick-compile variant only (tests, comparisons).
  Quick,
};

/// Options of one GEMM.
struct GemmOptions {
  /// A tile configuration to use instead of the database's or the
  /// heuristic's (the tuner).
  std::optional<compiler::TileConfig> tiling;
  /// The tuning database to look the tiling up in when `tiling` is unset;
  /// unset: getDefaultTuningDatabasePath(); empty: none (the heuristic).
  /// It is consulted when a spec is first prepared for an M bucket (a
  /// dynamic M: the launch M's bucket); a file that is missing means the
  /// heuristic, one that cannot be read or fails its checks is reported on
  /// stderr once and ignored. A path here costs a string hash per call;
  /// leave it unset on a hot path.
  std::optional<std::string> tuningDatabase;
  /// Notes on stderr about the database: why an entry was not used (another
  /// arch or SM count, a tiling that does not fit) or that none matched.
  /// $MOSS_VERBOSE=1 turns them on too.
  bool verbose = false;
  /// How a kernel that is not cached yet is compiled.
  GemmCompileMode compileMode = GemmCompileMode::Tiered;
  /// Whether the kernel folds A's E8M0 block factors itself where the spec
  /// folds by rows and it can (GemmSpec::canFoldAInKernel), instead of a
  /// pass before the kernel. Both give the same bits. Off by default: it is
  /// slower than the pass (docs/PERFORMANCE.md, "Folded block factors").
  bool foldAInKernel = false;
};

/// What GemmRunner compiled for a spec.
struct GemmKernelInfo {
  std::string kernelName;
  /// Its tiling; `tiling.source` says who chose it (unset: GemmOptions).
  compiler::TileConfig tiling;
  /// The tuning database consulted for it; empty when none was.
  std::string tuningDatabase;
  unsigned threads = 0;
  unsigned sharedBytes = 0;
  unsigned clusterSize = 1;
  /// Seconds spent writing the kernel's source (and its quick variant's)
  /// and in the kernel cache (NVRTC or a disk hit) when the kernel was
  /// first prepared.
  double pipelineSeconds = 0;
  double cacheSeconds = 0;
  /// Whether launches use the quick-compile variant: in Quick mode, and in
  /// Tiered mode until the full kernel is ready (`kernelName` is then the
  /// variant's).
  bool quickCompile = false;
  /// Whether a tiered compile's full kernel is still being compiled.
  bool fullCompilePending = false;
  /// Seconds the background compile of a tiered compile's full kernel took
  /// (NVRTC or a disk hit), once the runner switched to it; else 0.
  double fullCompileSeconds = 0;
};

/// Runs GEMMs on one device through one kernel cache. Not thread-safe: use
/// one per thread (moss::gemm() keeps one per thread and context).
class GemmRunner {
public:
  /// A runner for the device of the calling thread's current context.
  static llvm::Expected<std::unique_ptr<GemmRunner>>
  create(runtime::KernelCache &cache);
  /// A runner that only warms the cache (warm()) for `target`, with no GPU:
  /// run() and prepare() need one from create().
  static std::unique_ptr<GemmRunner>
  createForTarget(runtime::KernelCache &cache, compiler::TargetInfo target);
  ~GemmRunner();
  GemmRunner(const GemmRunner &) = delete;
  GemmRunner &operator=(const GemmRunner &) = delete;

  /// Computes the GEMM for `m` rows on `stream`, asynchronously. The first
  /// call for a spec (M included only when static, tiling included)
  /// compiles or loads its kernel; later calls encode the operands' tensor
  /// maps (reused while the pointers and M stay the same) and launch.
  /// spec.beta (1 when unset) multiplies C. m = 0 launches nothing.
  /// Kernels that split K or use 64-row tiles (small M) take a workspace
  /// the runner keeps per stream; growing it synchronizes that stream once,
  /// so under CUDA graph capture run each shape once before capturing.
  /// A spec that folds (GemmSpec::getFold) first folds its two-level or
  /// MXFP8 operands on the stream (runtime::GpuFolder) into a second such
  /// workspace, then launches the kernel of GemmSpec::getKernelSpec().
  llvm::Error run(const compiler::GemmSpec &spec, int64_t m,
                  const GemmBuffers &buffers, CUstream stream,
                  const GemmOptions &options = {});

  /// run() for a call that checkGemmLaunch has accepted (the C API checks
  /// before it converts its errors), without checking it again.
  llvm::Error launchChecked(const compiler::GemmSpec &spec, int64_t m,
                            const GemmBuffers &buffers, CUstream stream,
                            const GemmOptions &options = {});

  /// Compiles (or loads) the kernel run() launches for `m` rows of `spec`,
  /// without launching it. With GemmCompileMode::Full it also waits for a
  /// tiered compile of that kernel still in flight.
  llvm::Expected<const GemmKernelInfo *>
  prepare(const compiler::GemmSpec &spec, int64_t m,
          const GemmOptions &options = {});
  /// prepare() for a static spec's M, or M = 4096 (the heuristic's assumed
  /// M) for a dynamic one.
  llvm::Expected<const GemmKernelInfo *>
  prepare(const compiler::GemmSpec &spec, const GemmOptions &options = {});

  /// The plan run() makes for `m` rows of `spec` (compiler::planGemm): the
  /// fold, the kernel's spec and its tiling (options.tiling, else the
  /// tuning database, else the heuristic; Quick mode: the quick-compile
  /// variant's). Checks the spec and `m` as run() does, buffers aside.
  /// Needs no GPU.
  llvm::Expected<compiler::GemmPlan> getPlan(const compiler::GemmSpec &spec,
                                             int64_t m,
                                             const GemmOptions &options = {});

  /// The CUDA C++ of the full kernel run() launches for `m` rows of `spec`
  /// (Quick mode: its quick-compile variant), tiled as run() resolves it:
  /// options.tiling, else the tuning database, else the heuristic. Needs no
  /// GPU and no NVRTC.
  llvm::Expected<compiler::KernelSource>
  getSource(const compiler::GemmSpec &spec, int64_t m,
            const GemmOptions &options = {});

  /// That kernel built into the kernel cache (or found there), with no GPU:
  /// its source and the cache entry (PTX, cubin).
  struct BuiltKernel {
    compiler::KernelSource source;
    std::shared_ptr<const runtime::KernelEntry> entry;
  };
  llvm::Expected<BuiltKernel> build(const compiler::GemmSpec &spec, int64_t m,
                                    const GemmOptions &options = {});

  /// Builds into the kernel cache, with no GPU, the kernels run() needs for
  /// `m` rows of `spec`: the GEMM's full kernel (tiled as run() resolves
  /// it: options.tiling, else the tuning database, else the heuristic) and
  /// the folds' kernels. Returns how many were compiled (the others were in
  /// the cache already).
  llvm::Expected<unsigned> warm(const compiler::GemmSpec &spec, int64_t m,
                                const GemmOptions &options = {});

  /// The machine kernels are compiled for (from the device).
  const compiler::TargetInfo &getTarget() const { return target; }

  struct Key;
  struct KeyHash {
    size_t operator()(const Key &key) const;
  };
  struct Kernel;
  struct Planned;
  struct Workspaces;

private:
  GemmRunner(runtime::KernelCache &cache, compiler::TargetInfo target);
  /// The plan of an m-row launch of `spec` (compiler::planGemm with the
  /// database `options` name, read through `tuningFiles`) and the path of
  /// the database consulted ("" for none).
  llvm::Expected<std::pair<compiler::GemmPlan, std::string>>
  makePlan(const compiler::GemmSpec &spec, int64_t m,
           const GemmOptions &options);
  /// The plan and kernel of an m-row launch of `spec`: made, compiled or
  /// loaded on the first call for its key, then a lookup.
  llvm::Expected<Planned *> getPlanned(const compiler::GemmSpec &spec,
                                       int64_t m, const GemmOptions &options);
  llvm::Expected<Kernel *> compileKernel(const compiler::GemmPlan &plan,
                                         const std::string &database,
                                         GemmCompileMode mode);
  llvm::Error loadKernel(Kernel &kernel, const compiler::KernelSource &source,
                         std::shared_ptr<const runtime::KernelEntry> entry);
  llvm::Error switchToFullKernel(Kernel &kernel, bool wait);
  /// The operands of an m-row launch of `plan` with its fold passes run.
  llvm::Expected<GemmBuffers> foldOperands(const compiler::GemmPlan &plan,
                                           int64_t m,
                                           const GemmBuffers &buffers,
                                           CUstream stream);

  runtime::KernelCache &cache;
  compiler::TargetInfo target;
  /// Kernels by their plan's kernel spec, tiling and variant.
  std::unordered_map<Key, std::unique_ptr<Kernel>, KeyHash> kernels;
  /// Plans by spec, fold, M bucket, database and options (makePlanKey),
  /// each with its kernel.
  std::unordered_map<Key, std::unique_ptr<Planned>, KeyHash> plans;
  std::unique_ptr<detail::TuningDatabaseFiles> tuningFiles;
  /// Workspaces of split-K and 64-row-tile kernels, one per stream.
  std::unique_ptr<Workspaces> workspaces;
  /// The folds of two-level and MXFP8 operands, and their outputs.
  std::unique_ptr<runtime::GpuFolder> folder;
  std::unique_ptr<Workspaces> foldWorkspaces;
};

/// The key of a plan or a kernel: the spec's fields that change the kernel
/// (M only when static; not beta, which is a launch argument), then the
/// tiling or what the plan depends on (Gemm.cpp: makePlanKey,
/// makeKernelKey).
struct GemmRunner::Key {
  std::array<int64_t, 6> words{};
  bool operator==(const Key &other) const { return words == other.words; }
};

/// GemmRunner::run on the calling thread's current context, with a runner
/// kept per thread and context and the default kernel cache.
llvm::Error gemm(const compiler::GemmSpec &spec, int64_t m,
                 const GemmBuffers &buffers, CUstream stream,
                 const GemmOptions &options = {});

} // namespace moss

#endif // MOSS_GEMM_GEMM_H
