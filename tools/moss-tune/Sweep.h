//===- Sweep.h - Compiling and timing candidates on the GPU -----*- C++ -*-===//
//
// The GPU half of moss-tune. compileAll() compiles every distinct kernel of
// the sweep in worker threads (compiler::compileGemm, then NVRTC through the
// thread-safe kernel cache); GemmRunner::prepare() later finds them in the
// cache. ShapeTimer times one shape: each candidate's output is verified
// once against the FP64 reference (a wrong candidate is dropped), then its
// launches are timed with CUDA events (median), rotating over several input
// sets when the shape is small enough for L2 to hold it. An m-grouped
// shape's operands are its own (each expert's rows from the shape's
// routing, checked expert by expert), one set.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_TOOLS_MOSSTUNE_SWEEP_H
#define MOSS_TOOLS_MOSSTUNE_SWEEP_H

#include "Candidates.h"
#include "GemmProblem.h"
#include "Progress.h"
#include "Records.h"
#include "Shapes.h"

#include "moss/Compiler/TuningDatabase.h"
#include "moss/Gemm/Gemm.h"

#include "llvm/Support/Error.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace moss::tune {

/// One shape and what will be tried on it.
struct ShapePlan {
  TuneShape shape;
  ShapeCandidates candidates;
};

/// The kernel a (spec, tiling) pair compiles to, as a map key.
std::string getKernelKey(const compiler::GemmSpec &spec,
                         const compiler::TileConfig &tiling);

/// What compileAll() did.
struct CompileSummary {
  int64_t kernels = 0;
  int64_t failed = 0;
  double seconds = 0;
  /// getKernelKey -> the error, for the kernels that failed.
  std::map<std::string, std::string> errors;
};

/// Compiles every distinct kernel of `plans` for `target` into `cache` with
/// `jobs` threads, showing progress.
CompileSummary compileAll(const std::vector<ShapePlan> &plans,
                          const compiler::TargetInfo &target,
                          runtime::KernelCache &cache, unsigned jobs);

/// Options of the timing.
struct TimingOptions {
  int warmup = 3;
  int repeat = 20;
  /// Time cuBLASLt FP8 per-tensor on each shape too.
  bool cublaslt = false;
  /// Input sets are rotated until they hold this many bytes (at most 4).
  uint64_t rotateBytes = 0;
  /// For the database entries: the GPU's name and the sweep's date.
  std::string deviceName;
  std::string date;
};

/// The outcome of one shape.
struct ShapeResult {
  std::vector<CandidateRecord> records;
  /// The database entry (best and heuristic timings); unset when no
  /// candidate ran correctly.
  std::optional<compiler::TuningEntry> entry;
  /// Heuristic planned for this M (for the final table).
  std::optional<compiler::TuningTiming> heuristicAtM;
  std::optional<double> cublasltTflops;
  int64_t timed = 0, wrong = 0, failed = 0;
};

/// Times the shapes of one spec (one N, K and scheme pair): a plain GEMM's
/// operands are made once, for the largest M, and rotated over several sets
/// for the small ones; an m-grouped shape's are made when it runs.
class SpecTimer {
public:
  static llvm::Expected<std::unique_ptr<SpecTimer>>
  create(const std::vector<const ShapePlan *> &plans, GemmRunner &runner,
         const TimingOptions &options);
  ~SpecTimer();

  /// Verifies and times every candidate of `plan` (one of the plans given
  /// to create()); advances `progress` once per candidate. An error means
  /// the GPU is unusable (a sticky CUDA error).
  llvm::Expected<ShapeResult> run(const ShapePlan &plan,
                                  const CompileSummary &compiled,
                                  Progress &progress);

private:
  SpecTimer(GemmRunner &runner, const TimingOptions &options)
      : runner(runner), options(options) {}
  GemmRunner &runner;
  TimingOptions options;
  std::vector<std::unique_ptr<jit::GemmProblem>> sets;
};

} // namespace moss::tune

#endif // MOSS_TOOLS_MOSSTUNE_SWEEP_H
