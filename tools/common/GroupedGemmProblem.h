//===- GroupedGemmProblem.h - An m-grouped GEMM's operands on the GPU ----===//
//
// An m-grouped GEMM (GemmSpec::groups) made of one GemmProblem per expert:
// each expert's operands are quantized with the host reference quantizers,
// then stacked into the grouped buffers (A's rows and D's by expert, B's
// experts one after another) with the row offsets or, for the masked
// layout, the row counts over `capacity` rows per expert, whose unused
// rows hold codes and scales of plausible values. A's schemes quantize row
// by row, so quantizing each expert apart gives the bits of quantizing the
// whole A. check() holds each expert's rows of the output to its own
// reference (checkGemmOutput) and every other row to its poison.
//
//===----------------------------------------------------------------------===//

#ifndef MOSS_TOOLS_COMMON_GROUPEDGEMMPROBLEM_H
#define MOSS_TOOLS_COMMON_GROUPEDGEMMPROBLEM_H

#include "DeviceAllocations.h"
#include "ExpertRouting.h"
#include "GemmCheck.h"
#include "GemmProblem.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

namespace moss::jit {

/// What check() found over all experts.
struct GroupedGemmCheckResult {
  int64_t compared = 0;
  int64_t bad = 0;
  int64_t unwritten = 0;
  double worst = 0;
  /// Bytes of the output written outside the experts' rows.
  int64_t writtenOutside = 0;
  /// The first expert with an entry beyond its allowance or unwritten, or
  /// -1.
  int64_t firstBadExpert = -1;

  bool ok() const { return bad == 0 && unwritten == 0 && writtenOutside == 0; }
  /// Adds expert `expert`'s check.
  void add(const GemmCheckResult &one, int64_t expert);
  /// Checks expert `index`'s `rows` rows of the downloaded output at
  /// `output` against its own problem (`options` with the rows capped at
  /// `rows` and a seed per expert; the rows go to the problem's output
  /// buffer first) and adds the result.
  llvm::Error checkExpert(const GemmProblem &expert, const uint8_t *output,
                          int64_t rows, const GemmCheckOptions &options,
                          int64_t index);
  /// Counts the device's max |output| at `amax` as a bad entry unless it is
  /// `largest`, the largest magnitude of the downloaded output.
  llvm::Error checkAmax(CUdeviceptr amax, float largest);
};

class GroupedGemmProblem {
public:
  /// The operands of `spec` (groups > 0) with `rows[g]` rows for expert g,
  /// from `seed`. Masked: each expert holds `capacity` rows (at least the
  /// largest of `rows`). With `nonFinite`, some experts' values hold NaN
  /// and Inf before they are quantized: every third expert with rows (1, 4,
  /// ...) a NaN in one row of A and an Inf in another, every fourth (2, 6,
  /// ...) a -Inf in one row of B.
  static llvm::Expected<std::unique_ptr<GroupedGemmProblem>>
  create(const compiler::GemmSpec &spec, llvm::ArrayRef<int64_t> rows,
         uint64_t seed, int64_t capacity = 0, bool nonFinite = false);

  /// The same buffers for timing only, made fast: A is quantized whole (m
  /// rows, its masked experts' unused rows included) and every expert gets
  /// one quantized B, bias and global, copied on the device. No experts to
  /// check against: check() fails.
  static llvm::Expected<std::unique_ptr<GroupedGemmProblem>>
  createForTiming(const compiler::GemmSpec &spec, llvm::ArrayRef<int64_t> rows,
                  uint64_t seed);
  ~GroupedGemmProblem();

  /// Fills the output (and the rows past it) with 0xFF bytes (synchronous).
  llvm::Error poison() const;

  /// Checks the output after the caller's launch has finished: each
  /// expert's rows against its reference (`options`, with scanRows and
  /// compareRows capped at the expert's rows, and a seed per expert), the
  /// others against the poison.
  llvm::Expected<GroupedGemmCheckResult>
  check(const GemmCheckOptions &options) const;

  compiler::GemmSpec spec;
  /// Rows of A and D in all: the experts' (contiguous) or groups *
  /// capacity (masked).
  int64_t m = 0;
  int64_t capacity = 0;
  std::vector<int64_t> rows;
  /// Expert g's first row.
  std::vector<int64_t> starts;
  /// What the launch reads on the device: the offsets or the counts.
  std::vector<int32_t> groupRows;
  /// One problem per expert (an empty expert's holds one unused row: its B
  /// is stacked all the same).
  std::vector<std::unique_ptr<GemmProblem>> experts;
  GemmBuffers buffers;

private:
  GroupedGemmProblem() = default;
  /// A problem with `spec`, `rows` and where they lie (starts, m, the
  /// values the launch reads), nothing uploaded yet.
  static llvm::Expected<std::unique_ptr<GroupedGemmProblem>>
  layOut(const compiler::GemmSpec &spec, llvm::ArrayRef<int64_t> rows,
         int64_t capacity);
  DeviceAllocations memory;
  size_t outputBytes = 0;
  /// createForTiming's one problem of all the rows.
  std::unique_ptr<GemmProblem> timing;
};

} // namespace moss::jit

#endif // MOSS_TOOLS_COMMON_GROUPEDGEMMPROBLEM_H
